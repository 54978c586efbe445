"""Experiments above single runs: grids of training runs (sweep.py), their comparison (compare.py), and the
regression notebooks' runner (regression.py, with recorded.py for the metrics the notebooks record)."""

from trm_kaggle.faces import lazy_face

# What other layers use, by the module that defines it; the rest of the package is private to it.
_EXPORTS = {
    "RUN_CONFIG": "sweep",
    "SWEEP_FILE": "sweep",
    "TIMEOUT_S": "regression",
    "default_out": "compare",
    "default_notebook_dir": "regression",
    "describe_grids": "sweep",
    "load_grid": "sweep",
    "load_runs": "compare",
    "own_in_a_live_sweep": "compare",
    "owned_override": "sweep",
    "plan_sweep": "sweep",
    "plot_curves": "compare",
    "record": "recorded",
    "regress": "regression",
    "regress_io": "regression",
    "regress_outputs": "regression",
    "repeated_variants": "sweep",
    "run_sweep": "sweep",
    "sweep_io": "sweep",
    "with_seeds": "sweep",
    "write_comparison": "compare",
}
_MODULES = ()  # public modules

__all__, __getattr__, __dir__ = lazy_face(__name__, _EXPORTS, _MODULES)
