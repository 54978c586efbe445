"""Training: the loop, its settings (presets and overrides), schedules, runtime and train states."""

from trm_kaggle.faces import lazy_face

# What other layers use, by the module that defines it; the rest of the package is private to it.
_EXPORTS = {
    "DEFAULT_MEMORY_FRACTION": "memory",
    "GB": "memory",
    "HALTED_ROW_METRICS": "metrics",
    "METRICS_FILE": "metrics",
    "NO_DATA": "metrics",
    "PRESETS": "presets",
    "RESUMABLE_CHANGES": "settings",
    "RUN_RECORD": "checkpoint",
    "StepRules": "step",
    "TrainResult": "result",
    "apply_overrides": "settings",
    "default_run_dir": "settings",
    "describe_presets": "presets",
    "describe_settings": "settings",
    "dotted": "overrides",
    "dtype_name": "runtime",
    "dump_config": "settings",
    "estimate_training_memory": "memory",
    "expand_preset_names": "presets",
    "export_run": "checkpoint",
    "fitting_batch": "memory",
    "is_out_of_memory": "memory",
    "largest_fitting_micro_batch": "memory",
    "list_states": "checkpoint",
    "load_newest_state": "checkpoint",
    "load_train_config": "settings",
    "logger_problem": "metric_log",
    "make_optimizers": "optimizers",
    "micro_batch_problem": "memory",
    "optimizer_step": "optimizers",
    "out_of_memory_error": "memory",
    "override_list": "overrides",
    "override_mapping": "overrides",
    "parse_override": "overrides",
    "read_config_file": "settings",
    "read_metrics": "metrics",
    "schedule_at": "schedules",
    "shown": "metrics",
    "split_cli_args": "overrides",
    "warn_repeated": "overrides",
    "total_train_steps": "schedules",
    "train": "loop",
    "training_io": "run_io",
    "training_rss": "memory",
}
_MODULES = ('checkpoint', 'loop', 'nonfinite')  # public modules

__all__, __getattr__, __dir__ = lazy_face(__name__, _EXPORTS, _MODULES)
