"""ARC tasks: reading and checking them (`tasks.py`), building their augmented dataset (`build.py`), and
generated tasks whose rule is known (`rule_tasks.py`)."""
