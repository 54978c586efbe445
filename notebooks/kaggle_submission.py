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
# # TRM on ARC Prize 2025: offline submission kernel
#
# The competition kernel (internet off). It installs `trm_kaggle` from the attached wheels dataset without
# network, then calls `trm_kaggle.solve.solve.solve`: the hidden test tasks' demonstration pairs become an
# augmented dataset, the pretrained weights are fine-tuned on it (new puzzle embeddings start from the mean
# trained row) until the time budget says stop, every augmented test input is predicted, and the votes become
# `submission.json`. A complete, valid submission is written in every case (tasks without predictions get a
# fallback), and checked at the end.
#
# Attach: the wheels dataset (`trm_kaggle*.whl`), the weights dataset (`weights.safetensors` + `config.json`)
# and the `arc-prize-2025` competition. Locally, point `KAGGLE_INPUT` / `KAGGLE_WORKING` at a tree shaped like
# `/kaggle/input` and a writable directory.

# %% tags=["parameters"]
KAGGLE_INPUT = "/kaggle/input"  # attached datasets and the competition data (read-only on Kaggle)
KAGGLE_WORKING = "/kaggle/working"  # writable; submission.json and the work directory go here
WHEELS_DIR = None  # None: the first directory under KAGGLE_INPUT holding a trm_kaggle*.whl (trm-kaggle-wheels)
WEIGHTS_DIR = None  # None: the first directory under KAGGLE_INPUT holding weights.safetensors (trm-kaggle-weights)
CHALLENGES = None  # None: KAGGLE_INPUT/arc-prize-2025/arc-agi_test_challenges.json
TIME_BUDGET = 11.5 * 3600  # seconds for everything (the kernel's hard limit is 12 h); None: no limit
FINETUNE_STEPS = 500  # test-time fine-tuning steps at most (the budget may stop it earlier)
NUM_AUG = 100  # augmentations per task, for fine-tuning and for voting
DEVICE = "auto"  # auto (cuda > mps > cpu), cpu, cuda, mps

# %% [markdown]
# ## Install `trm_kaggle` offline
#
# Only when it is not importable yet: `pip install --no-index --find-links WHEELS_DIR trm_kaggle` (no network;
# the wheels dataset carries every dependency Kaggle's image lacks).

# %%
import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path


def first_dir_with(pattern):
    """The directory of the first file under KAGGLE_INPUT whose name matches `pattern`, or None."""
    found = sorted(Path(KAGGLE_INPUT).rglob(pattern))
    return str(found[0].parent) if found else None


if importlib.util.find_spec("trm_kaggle") is None:
    wheels = WHEELS_DIR or first_dir_with("trm_kaggle*.whl")
    if wheels is None:
        raise FileNotFoundError(f"trm_kaggle is not installed and no trm_kaggle*.whl is under {KAGGLE_INPUT}: "
                                "attach the wheels dataset or set WHEELS_DIR")
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--find-links", wheels,
                          "--disable-pip-version-check", "trm_kaggle"], capture_output=True, text=True)
    print(pip.stdout)
    if pip.returncode != 0:
        raise RuntimeError(f"offline install from {wheels} failed (status {pip.returncode}):\n{pip.stderr}")
    importlib.invalidate_caches()
else:
    print("trm_kaggle is already importable: nothing installed")

# %%
import json
import logging

import torch

import trm_kaggle

print(f"trm_kaggle {trm_kaggle.__version__} from {trm_kaggle.__file__}")
print(f"Python {sys.version.split()[0]}, torch {torch.__version__}, CUDA "
      + (torch.cuda.get_device_name(0) if torch.cuda.is_available() else "not available"))
logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s", force=True)

# %% [markdown]
# ## Inputs

# %%
from trm_kaggle.config import SolveConfig
from trm_kaggle.evaluate.submission import check_submission, expected_counts
from trm_kaggle.solve.solve import solve

weights = WEIGHTS_DIR or first_dir_with("weights.safetensors")
if weights is None:  # solve() still writes a valid fallback submission, and reports the error
    print(f"WARNING: no weights.safetensors under {KAGGLE_INPUT}: attach the weights dataset or set WEIGHTS_DIR")
    weights = str(Path(KAGGLE_INPUT) / "weights-not-found")
challenges = CHALLENGES or str(Path(KAGGLE_INPUT) / "arc-prize-2025" / "arc-agi_test_challenges.json")
print(f"weights: {weights}\nchallenges: {challenges}")

# %% [markdown]
# ## Solve
#
# Fine-tuning stops early when the time left is what inference needs (measured, plus a safety margin). The work
# directory keeps the dataset and fine-tuning states: a restarted kernel resumes instead of starting over.

# %%
report = solve(SolveConfig(challenges=challenges, weights=weights,
                           output=str(Path(KAGGLE_WORKING) / "submission.json"),
                           work_dir=str(Path(KAGGLE_WORKING) / "ttt_work"), time_budget=TIME_BUDGET,
                           finetune_steps=FINETUNE_STEPS, num_aug=NUM_AUG, device=DEVICE))
print(json.dumps(report, indent=2, default=str))

# %% [markdown]
# ## Check the submission
#
# Every task of the challenges file, one entry per test input, both attempts present, valid grids.

# %%
check_submission(report["output"], challenges)
counts = expected_counts(challenges)
print(f"{report['output']}: valid ({len(counts)} tasks, {sum(counts.values())} test inputs, two attempts each); "
      f"{report['predicted']} test inputs with model predictions; {report['elapsed_s']} s")
for error in report["errors"]:
    print("warning:", error)
