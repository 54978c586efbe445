"""Solving unseen tasks inside the Kaggle kernel: test-time training and voting in a time budget
(`solve.py`), its fine-tuning schedule (`schedule.py`), named test-time recipes (`recipes.py`), and how long
that takes on a device (`estimate.py`)."""
