"""Solving unseen tasks inside the Kaggle kernel, a one-way stack: `solve.py` (fallback first, shard, merge)
-> `workers.py` (processes, no torch) -> `worker.py` (time a batch, plan, share the time between tasks)
-> `task.py` (one task: dataset, fine-tune, predict, vote), all reading and writing the work directory through
`workdir.py` (no torch). Beside them: the fine-tuning schedule (`schedule.py`), named test-time recipes
(`recipes.py`), and how long the job takes on a device (`step_timer.py`, `plan.py`,
`estimate.py`)."""
