"""Solving unseen tasks inside the Kaggle kernel, a one-way stack: `job.py` (fallback first, shard, merge)
-> `workers.py` (processes, no torch) -> `worker.py` (time a batch, plan, share the time between tasks)
-> `task.py` (one task: dataset, fine-tune, predict, vote), all reading and writing the work directory through
`workdir.py` (no torch). Beside them: the fine-tuning schedule (`schedule.py`), named test-time recipes
(`recipes.py`), and how long the job takes on a device (`step_timer.py`, `plan.py`,
`pricing.py`)."""

from trm_kaggle.faces import lazy_face

# What other layers use, by the module that defines it; the rest of the package is private to it.
_EXPORTS = {
    "Rates": "plan",
    "TEST_INPUTS_PER_TASK": "pricing",
    "below_a_work_dir_problem": "workdir",
    "check_pipeline_work_dir": "workdir",
    "demo_accuracy": "task",
    "describe_recipes": "recipes",
    "estimate": "pricing",
    "estimate_kernel": "pricing",
    "finetune": "task",
    "finetune_phases": "schedule",
    "format_estimate": "pricing",
    "is_work_dir": "workdir",
    "load_finetuned": "task",
    "make_plan": "plan",
    "others_folder_problem": "workdir",
    "solve": "job",
    "solve_config": "recipes",
    "solve_io": "workdir",
    "steps_by_kind": "schedule",
}
_MODULES = ()  # public modules

__all__, __getattr__, __dir__ = lazy_face(__name__, _EXPORTS, _MODULES)
