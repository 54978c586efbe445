"""Tasks -> dataset -> batches, one room per kind of task: ARC (`arc/`: read, checked, built), grid puzzles
(`puzzles/`: Sudoku, Maze, generic grids) and code repair (`code/`), beside what they share: the dataset
format (`format.py`), its check (`verify.py`), augmentations (`augment.py`) and the loader that turns a dataset
into batches (`loader.py`, drawing them with `sampler.py`)."""
