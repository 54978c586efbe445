"""Every configuration, as pydantic models: what each command and each Python entry point takes, checked when it
is made (bounds, finite numbers, names), so a bad setting is one line naming it, never a traceback later.

    common.py       the base model, the bounds several configs share, validation_line, field_help
    data.py         the dataset builders (build-arc, build-sudoku, build-maze, build-code-repair)
    model.py        the network (ArchConfig) and an inference export's config.json
    train.py        a training run (TrainConfig, its curricula and data stages)
    experiments.py  grids of training runs (sweep)
    evaluate.py     an ARC evaluation (EvaluateConfig) and a code-repair one
    solve.py        the Kaggle kernel's job (SolveConfig, submit) and the pipeline command
    cluster.py      Kubernetes and SLURM job files (launch, sweep --launcher)

Field names follow upstream (the paper's reference code) so that its configs and command lines translate one to
one; defaults are upstream's recipes unless a comment says otherwise. A field's description is its meaning
everywhere: `--list-settings`, and the `--help` of the option that sets it (`field_help`). Only pydantic and the
standard library are imported: the command line reads these for its help without torch.
"""

from trm_kaggle.config.cluster import IMAGE_PATTERN, JOB_NAME_PATTERN, ClusterConfig, K8sOptions, SlurmOptions
from trm_kaggle.config.common import (MAX_BATCH_SIZE, MAX_FINETUNE_STEPS, MAX_GENERATED, MAX_IDENTIFIERS_START,
                                      MAX_LR, MAX_NUM_AUG, MAX_PUZZLE_IDENTIFIERS, MAX_SAVE_EVERY_S, MAX_SEED, WEEK_S,
                                      CompileSetting, bounded_number, compile_setting, field_help, flag_argument,
                                      number_argument, path_argument, revalidated, seconds_argument, sequence_argument,
                                      take_each_option_once, texts_argument, validation_line, whole_argument)
from trm_kaggle.config.data import (ARC_DEFAULT_SUBSETS, MAX_GRID_CELLS, ArcBuildConfig, CodeRepairBuildConfig,
                                    MazeBuildConfig, SudokuBuildConfig)
from trm_kaggle.config.evaluate import (DEVICE_PATTERN, MAX_TRAJECTORIES, MAX_TRAJECTORY_NOISE, EvaluateConfig,
                                        RepairEvalConfig, TaskIdMode, TrajectorySelect)
from trm_kaggle.config.experiments import MAX_SWEEP_RUNS, SAFE_NAME_PATTERN, SweepGrid, SweepVariant
from trm_kaggle.config.model import (EXECUTION_FIELDS, MAX_HALT_STEPS, RECURSION_FIELDS, ArchConfig, ExportConfig,
                                     InferenceDtype)
from trm_kaggle.config.solve import (MAX_PLANNED_TASKS, MIN_PLAN_S, FinetuneMode, PipelineConfig, SolveConfig,
                                     bounded_count_or_auto, count_or_auto, default_work_dir)
from trm_kaggle.config.train import CurriculumConfig, HaltScheduleConfig, TrainConfig, TrainStage

__all__ = [
    "ARC_DEFAULT_SUBSETS", "DEVICE_PATTERN", "EXECUTION_FIELDS", "IMAGE_PATTERN", "JOB_NAME_PATTERN", "MAX_BATCH_SIZE",
    "MAX_FINETUNE_STEPS", "MAX_GENERATED", "MAX_GRID_CELLS", "MAX_HALT_STEPS", "MAX_IDENTIFIERS_START", "MAX_LR",
    "MAX_NUM_AUG", "MAX_PLANNED_TASKS", "MAX_PUZZLE_IDENTIFIERS", "MAX_SAVE_EVERY_S", "MAX_SEED", "MAX_SWEEP_RUNS",
    "MAX_TRAJECTORIES", "MAX_TRAJECTORY_NOISE", "MIN_PLAN_S",
    "RECURSION_FIELDS",
    "SAFE_NAME_PATTERN", "WEEK_S",
    "ArcBuildConfig", "ArchConfig", "ClusterConfig", "CodeRepairBuildConfig", "CompileSetting", "CurriculumConfig",
    "EvaluateConfig", "ExportConfig", "FinetuneMode", "HaltScheduleConfig", "InferenceDtype", "K8sOptions",
    "MazeBuildConfig", "PipelineConfig", "RepairEvalConfig", "SlurmOptions", "SolveConfig", "SudokuBuildConfig",
    "SweepGrid", "SweepVariant", "TaskIdMode", "TrainConfig", "TrainStage", "TrajectorySelect",
    "bounded_count_or_auto", "bounded_number", "compile_setting", "count_or_auto", "default_work_dir", "field_help",
    "flag_argument",
    "number_argument", "path_argument", "revalidated", "seconds_argument", "sequence_argument", "take_each_option_once",
    "texts_argument", "validation_line", "whole_argument",
]
