"""Evaluation: predictions -> votes -> metrics, reports and Kaggle submissions."""

from trm_kaggle.faces import lazy_face

# What other layers use, by the module that defines it; the rest of the package is private to it.
_EXPORTS = {
    "MAX_DRAWN": "report",
    "PASS_KS": "vote",
    "check_model_fits": "predict",
    "checked_report_dir": "report",
    "check_scorable": "submission",
    "chosen_tasks": "report",
    "check_submission": "submission",
    "check_test_split": "pipeline",
    "evaluate": "pipeline",
    "evaluate_export": "run",
    "evaluate_io": "run",
    "evaluate_repair": "repair",
    "example_puzzles": "decode",
    "expected_counts": "submission",
    "format_metrics": "report",
    "format_repair_report": "repair",
    "format_score": "scoring",
    "format_task_id_table": "report",
    "is_arc_dataset": "dataset",
    "key_to_grid": "decode",
    "load_test_set": "pipeline",
    "make_submission": "submission",
    "predict_split": "predict",
    "require_tasks": "submission",
    "count_test_inputs": "submission",
    "score_submission": "scoring",
    "task_picture_png": "report",
    "tasks_problem": "report",
    "validate_submission": "submission",
    "challenge_problems": "submission",
    "wilson_interval": "stats",
    "write_report": "report",
    "write_submission": "submission",
}
_MODULES = ()  # public modules

__all__, __getattr__, __dir__ = lazy_face(__name__, _EXPORTS, _MODULES)
