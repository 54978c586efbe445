"""Experiments above single runs: grids of training runs (sweep.py), their comparison (compare.py), and the
regression notebooks' runner (regress.py, with recorded.py for the metrics the notebooks record)."""
