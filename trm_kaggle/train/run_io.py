"""What a training reads and writes, as `trm_kaggle.outputs` compares them: one declaration for every place
that starts a training.

The library's `train` checks it (`check_kept`) before anything of the run is written, so every caller does (a
notebook, the pipeline, test-time training); `trm-kaggle train` checks it with more before it starts
(`trm_kaggle.command_io`: whether each output can be written); `launch k8s|slurm` and
`sweep --launcher` check it on the paths the nodes will use before a job file is written, and a local
`sweep` for each run before its folder is made: a run folder, an export or job files inside a dataset, or a
run folder holding the checkpoint it loads, are refused there as `train` itself would refuse them, not on
the cluster after the job was queued.
"""

from __future__ import annotations

import os

from trm_kaggle.config import TrainConfig
from trm_kaggle.errors import TRMError
from trm_kaggle.locks import LOCK_FILE
from trm_kaggle.names import blank_path_problem
from trm_kaggle.outputs import Input, Output, command_folder_problem, overlap_problem

#: What a training writes in its run folder (a settings file a sweep or a cluster job put there is read, not
#: written).
RUN_ENTRIES = ("config.json", "metrics.jsonl", "state_step*", ".state_step*", "tensorboard", "wandb", LOCK_FILE)


def training_io(cfg: TrainConfig, run_dir: str | os.PathLike, *, export: str | os.PathLike | None = None,
                config_file: str | os.PathLike | None = None, export_what: str = "--export"
                ) -> tuple[list[Input], list[Output]]:
    """(inputs, outputs) of a training with settings `cfg` writing `run_dir` (and `export`, with `--export`; named
    `export_what`: the train notebook's EXPORT_DIR). A `run_dir` that is a sweep's, a launch's or a pipeline's own
    folder is refused here, for every caller."""
    if problem := command_folder_problem(run_dir, "run folder (checkpoint_path)"):
        raise TRMError(problem)
    inputs = [Input(p, "data path", tree=True) for p in cfg.data_paths]
    inputs += [Input(p, "data_paths_test path", tree=True) for p in cfg.data_paths_test if p not in cfg.data_paths]
    inputs += [Input(p, name) for p, name in ((config_file, "--config"), (cfg.load_checkpoint, "load_checkpoint"))
               if p and "://" not in str(p)]
    outputs = [Output(run_dir, "run folder (checkpoint_path)", "folder", RUN_ENTRIES)]
    if problem := blank_path_problem(export):  # '' holds every folder: named as empty, not as an overlap
        raise TRMError(f"{export_what} {problem}")
    if export is not None:  # the export reads the run folder it trains (export_run): refused before the training, not after it
        if problem := overlap_problem([Input(run_dir, "run folder (checkpoint_path)", tree=True)],
                                      [Output(export, export_what, "replaced")]):
            raise TRMError(problem)
    return inputs, outputs + ([Output(export, export_what, "replaced")] if export is not None else [])
