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
# # Code repair: build, train, evaluate
#
# The second TRM task family: (buggy, fixed) Python snippets as token grids.
#
# 1. **Build** a dataset with `trm_kaggle.data.code.repair.build_code_repair` (`trm-kaggle build-code-repair`):
#    snippets of a corpus (by default this interpreter's standard library), synthetic bugs labelled by type,
#    pairs from `ruff --fix` when ruff is installed; split train/val/test by source file.
# 2. **Train** a small TRM with `trm_kaggle.train.loop.train` (`trm-kaggle train`), optionally through the
#    five-stage curriculum (`repair-curriculum`: syntax bugs first, harder logic bugs later).
# 3. **Evaluate** with `trm_kaggle.evaluate.repair.evaluate_repair` (`trm-kaggle evaluate-repair`): the
#    exact-fix rate per bug type beside the copy-the-input baseline.
#
# The defaults take a few minutes on a laptop CPU and give a weak model: the point is the whole chain.
# `DOCTESTS = True` runs the doctests of the pairs that have some, on the fix and on the model's output: that
# runs code (in a subprocess, in a temporary directory, with a time limit; not a sandbox).
# Relative paths are relative to the kernel's working directory.

# %% tags=["parameters"]
CORPUS = None  # a directory of .py files; None: the standard library of the kernel's Python
DATA_DIR = "runs/notebooks/data/code-repair-8x32"  # dataset directory to create (replaced if it is a dataset)
GRID = "8x32"  # rows x columns: short snippets keep a CPU run short
STRIP_DOCSTRINGS = True  # docstrings would fill a small grid
MAX_FILES = 300  # a seeded sample of the corpus (None: all of it)
SEED = 0
RUN_DIR = "runs/notebooks/train/code-repair"  # run directory (a second run resumes from its newest state)
PRESET = "repair-cpu+repair-curriculum"  # presets joined with "+"; see trm-kaggle train --list-presets
OVERRIDES = {"max_steps": 60, "progress": False}  # settings on top of the presets (docs/notebooks.md: other forms)
EXPORT_DIR = "runs/notebooks/weights/code-repair"  # inference export to create
DOCTESTS = False  # run doctests on fixes and predictions (runs code: see above)

# %%
import difflib
import logging

from trm_kaggle.hardware import quiet_openmp_waits
from trm_kaggle.wording import log_one_line_each

# the package's warnings as one escaped line each: a name read from a file may hold escape sequences
log_one_line_each(logging.WARNING)

quiet_openmp_waits()  # shorter OpenMP spinning waits, set before torch loads OpenMP (docs/benchmarks.md)
from pydantic import ValidationError

from trm_kaggle.config import CodeRepairBuildConfig, RepairEvalConfig, flag_argument, validation_line
from trm_kaggle.data import (build_code_repair, format_repair_build, load_repair_tokens, load_split, read_repair_meta,
                             verify_dataset)
from trm_kaggle.evaluate import evaluate_repair, format_repair_report
from trm_kaggle.model import load_model_for_dataset
from trm_kaggle.errors import TRMError
from trm_kaggle.outputs import notebook_output
from trm_kaggle.train import export_run, load_train_config, override_list, train

# the outputs, never in the notebooks folder
DATA_DIR = notebook_output("DATA_DIR", DATA_DIR)
RUN_DIR = notebook_output("RUN_DIR", RUN_DIR)
EXPORT_DIR = notebook_output("EXPORT_DIR", EXPORT_DIR)
DOCTESTS = flag_argument("DOCTESTS", DOCTESTS)  # said by its name here, before any training

# %% [markdown]
# ## Build
#
# Every pair is validated (the fix parses, the bug differs; syntax bugs do not parse, logic bugs do) and
# deduplicated; no source file contributes to more than one split.

# %%
try:  # a setting refused in one line, by its parameter's name
    build_cfg = CodeRepairBuildConfig(output_dir=DATA_DIR, corpus=CORPUS, grid=GRID, strip_docstrings=STRIP_DOCSTRINGS,
                                      max_files=MAX_FILES, seed=SEED, progress=False)
except ValidationError as e:
    raise TRMError(validation_line(e, {"output_dir": "DATA_DIR", "corpus": "CORPUS", "grid": "GRID", "seed": "SEED",
                                       "strip_docstrings": "STRIP_DOCSTRINGS", "max_files": "MAX_FILES"})) from None
summary = build_code_repair(build_cfg)
print(format_repair_build(summary))
verify_dataset(DATA_DIR)  # upstream's part of the layout: identifiers.json, train/, test/

# %% [markdown]
# ## A few training pairs
#
# Read back from the grids, as the model sees them: `-` lines are the fix, `+` lines the bug.

# %%
tokens = load_repair_tokens(DATA_DIR)
rows, cols = build_cfg.rows, build_cfg.cols
train_split, meta = load_split(DATA_DIR, "train"), read_repair_meta(DATA_DIR, "train")
shown = set()
for i in range(train_split.num_examples):
    if meta.bug_type[i] in shown:
        continue
    shown.add(meta.bug_type[i])
    buggy = tokens.text(train_split.inputs[i].reshape(rows, cols))
    fixed = tokens.text(train_split.labels[i].reshape(rows, cols))
    diff = difflib.unified_diff(fixed.split("\n"), buggy.split("\n"), lineterm="", n=0)
    print(f"{meta.bug_type[i]} (difficulty {meta.difficulty[i]:.2f}, {meta.source[i]}:{meta.line[i]})")
    print("\n".join(line for line in diff if line[:3] not in ("---", "+++") and not line.startswith("@@")), "\n")

# %% [markdown]
# ## Train
#
# A stop (Jupyter's "interrupt kernel", or SIGTERM to the kernel) is taken as `trm-kaggle train` takes it: the step
# under way ends, its train state is saved, and the cell ends with `TrainingInterrupted` naming the state; running
# the notebook again resumes from it. A second interrupt stops at once, without saving.

# %%
train_cfg = load_train_config(presets=[PRESET], overrides=override_list(OVERRIDES))
train_cfg.data_paths = [str(DATA_DIR)]
train_cfg.checkpoint_path = str(RUN_DIR)
result = train(train_cfg, signals=True)  # the stop signals save the run's state first (trm_kaggle.train.stops)
print(result.summary())
export_run(result.run_dir, EXPORT_DIR)

# %% [markdown]
# ## Evaluate on the held-out test split
#
# Exact fix: the prediction, read back as text, equals the fix. The copy-input baseline scores 0 by construction.

# %%
model, _, _ = load_model_for_dataset(EXPORT_DIR, DATA_DIR)
evaluation = evaluate_repair(model, RepairEvalConfig(weights=EXPORT_DIR, data=DATA_DIR, doctests=DOCTESTS,
                                                     progress=False))
print(format_repair_report(evaluation))
