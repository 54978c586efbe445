"""Solving unseen tasks inside the Kaggle kernel: test-time training and voting in a time budget
(`solve.py`), and how long that takes on a device (`estimate.py`)."""
