# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # TRM training on Kaggle: one session of a run that spans several
#
# A Kaggle session lasts at most 12 hours. This kernel trains one run across as many sessions as it needs: each
# new version of the kernel gets the previous version's output as an input, finds the newest complete train
# state there, copies it to `/kaggle/working/run/` and resumes; it trains until its time budget (minus a margin
# for the final save) and stops at a step boundary with a full train state, `metrics.jsonl`,
# `training_curve.png` and `weights/` (an export the submission bundle takes as `--weights`). A run that has
# reached its last step says so and only exports. Problems are one `error:` line; the notebook never raises,
# and the previous state is never overwritten or deleted (the inputs are read-only; the copy lives in working).
#
# Attach: the wheels dataset (`trm_kaggle*.whl`), the data dataset (a dataset built by `trm-kaggle build-*`)
# and this kernel's own output (`kernel_sources`). `python build_bundle.py OUT --train-kernel --preset P`
# writes this notebook with its metadata; see docs/kaggle-training.md.

# %% tags=["parameters"]
KAGGLE_INPUT = "/kaggle/input"  # attached datasets and the previous Kaggle session's output (read-only on Kaggle)
KAGGLE_WORKING = "/kaggle/working"  # writable; the run, the export and the curve go here (the kernel's output)
WHEELS_DIR = None  # None: the first directory under KAGGLE_INPUT holding a trm_kaggle*.whl (trm-kaggle-wheels)
DATA_DIR = None  # None: the one dataset (identifiers.json + train/) under KAGGLE_INPUT (trm-kaggle-data)
PRESET = "sudoku-mlp"  # the training preset(s), e.g. "sudoku-mlp" or "arc2 no-ema" (trm-kaggle train --preset)
OVERRIDES = {}  # settings on top of the preset, e.g. {"global_batch_size": 256} (docs/notebooks.md: other forms)
TIME_BUDGET = 11.5 * 3600  # seconds this Kaggle session may use in all (Kaggle stops a session at 12 h); None: no limit
SAVE_MARGIN = 600  # seconds of TIME_BUDGET kept for the final save, the export and the curve
SESSION_STEPS = None  # None: train until the budget; N: at most N steps this Kaggle session (a quick, exact stop)
DEVICE = "auto"  # auto (cuda > mps > cpu), cpu, cuda

# %% [markdown]
# ## Install `trm_kaggle` offline
#
# Only when it is not importable yet: `pip install --no-index --find-links WHEELS_DIR trm_kaggle`.

# %%
import importlib
import importlib.util
import subprocess
import sys
import time
from pathlib import Path

STARTED = time.time()  # the install counts against the budget
READY = True


def first_dir_with(pattern):
    """The directory of the first file under KAGGLE_INPUT whose name matches `pattern`, or None."""
    found = sorted(Path(KAGGLE_INPUT).rglob(pattern))
    return str(found[0].parent) if found else None


if importlib.util.find_spec("trm_kaggle") is None:
    wheels = WHEELS_DIR or first_dir_with("trm_kaggle*.whl")
    if wheels is None:
        READY = False
        print(f"error: trm_kaggle is not installed and no trm_kaggle*.whl is under {KAGGLE_INPUT}: attach the "
              "wheels dataset or set WHEELS_DIR")
    else:
        pip = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--find-links", wheels,
                              "--disable-pip-version-check", "trm_kaggle"], capture_output=True, text=True)
        print(pip.stdout)
        if pip.returncode != 0:
            READY = False
            print(f"error: offline install from {wheels} failed (status {pip.returncode}): "
                  f"{(pip.stderr.strip().splitlines() or [''])[-1]}")
        importlib.invalidate_caches()
else:
    print("trm_kaggle is already importable: nothing installed")

# %% [markdown]
# ## Train this Kaggle session
#
# One line per stage: the dataset, the previous state (or a new run), the training range, the result, the export.

# %%
REPORT = None
if READY:
    import logging

    import trm_kaggle
    from trm_kaggle.kaggle_training import run_session
    from trm_kaggle.train.overrides import override_list

    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s", force=True)
    print(f"trm_kaggle {trm_kaggle.__version__}")
    overrides = override_list(OVERRIDES) + ([f"device={DEVICE}"] if DEVICE and DEVICE != "auto" else [])
    REPORT = run_session(input_root=KAGGLE_INPUT, working=KAGGLE_WORKING, preset=str(PRESET).split(),
                         overrides=overrides, data_dir=DATA_DIR, time_budget=TIME_BUDGET, margin=SAVE_MARGIN,
                         session_steps=SESSION_STEPS, started=STARTED)

# %% [markdown]
# ## What this Kaggle session left in `/kaggle/working`

# %%
if REPORT is not None:
    print(f"status: {REPORT.status}; step {REPORT.start_step} -> {REPORT.step} of {REPORT.target_step}; "
          f"{REPORT.seconds:.0f} s" + (f"; {REPORT.message}" if REPORT.message else ""))
for p in sorted(Path(KAGGLE_WORKING).glob("*")):
    print(f"  {p.name}{' (folder)' if p.is_dir() else ''}")
