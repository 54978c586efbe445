"""Experiments above single runs: grids of training runs (sweep.py) and their comparison (compare.py)."""
