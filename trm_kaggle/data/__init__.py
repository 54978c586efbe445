"""Tasks -> datasets: loading ARC tasks, augmenting them, and writing upstream-format datasets."""
