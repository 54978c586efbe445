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
# # TRM on ARC Prize: offline submission kernel
#
# The competition kernel (internet off). It installs `trm_kaggle` from the attached wheels dataset without
# network, then calls `trm_kaggle.solve.solve.solve`: a valid fallback `submission.json` is written first;
# then every task is solved on its own by one worker process per GPU (the tasks are sharded across them):
# its demonstration pairs become an augmented dataset, the pretrained weights are fine-tuned on it (new puzzle
# embeddings start from the mean trained row) until the worker's time plan says stop, every augmented test
# input is predicted, and the votes become its answer. Each worker prints its plan at the start (tasks,
# augmentations, fine-tuning steps, seconds reserved for inference, from a timed batch on its device) and a
# line per task with the time elapsed and left. The merged submission lists every task and is checked at
# the end.
#
# Attach: the wheels dataset (`trm_kaggle*.whl`), the weights dataset (`weights.safetensors` + `config.json`)
# and the ARC competition (any year: the kernel finds the one `arc-agi_test_challenges.json` one or two folders
# below the input root). Locally, point `KAGGLE_INPUT` / `KAGGLE_WORKING` at a tree shaped like
# `/kaggle/input` and a writable directory.

# %% tags=["parameters"]
KAGGLE_INPUT = "/kaggle/input"  # attached datasets and the competition data (read-only on Kaggle)
KAGGLE_WORKING = "/kaggle/working"  # writable; submission.json and the work directory go here
WHEELS_DIR = None  # None: the first directory under KAGGLE_INPUT holding a trm_kaggle*.whl (trm-kaggle-wheels)
WEIGHTS_DIR = None  # None: the first directory under KAGGLE_INPUT holding weights.safetensors (trm-kaggle-weights)
CHALLENGES = None  # None: the one */arc-agi_test_challenges.json (or */*/...) under KAGGLE_INPUT
TIME_BUDGET = 11.5 * 3600  # seconds for everything (the kernel's hard limit is 12 h); None: no limit
FINETUNE_STEPS = "auto"  # fine-tuning steps per task, or "auto": what the time plan fits
NUM_AUG = "auto"  # augmentations per task (fine-tuning and voting), or "auto": what the time plan fits
MAX_TASKS = None  # the model works on the first N tasks only (a quick run); every task is still submitted
WORKERS = None  # None: one worker process per visible GPU (1 on CPU)
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
# the count only: naming the GPUs here would start CUDA in this process, on a GPU a worker needs whole
print(f"Python {sys.version.split()[0]}, torch {torch.__version__}, {torch.cuda.device_count()} GPU(s) visible")
logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s", force=True)

# %% [markdown]
# ## Inputs

# %%
from trm_kaggle.config import SolveConfig
from trm_kaggle.evaluate.submission import check_submission, expected_counts
from trm_kaggle.kaggle.inputs import find_challenges
from trm_kaggle.solve.solve import solve

weights = WEIGHTS_DIR or first_dir_with("weights.safetensors")
if weights is None:  # solve() still writes a valid fallback submission, and reports the error
    print(f"WARNING: no weights.safetensors under {KAGGLE_INPUT}: attach the weights dataset or set WEIGHTS_DIR")
    weights = str(Path(KAGGLE_INPUT) / "weights-not-found")
challenges = CHALLENGES or str(find_challenges(KAGGLE_INPUT))  # none or several: stops, listing what it found
print(f"weights: {weights}\nchallenges: {challenges}")

# %% [markdown]
# ## Solve
#
# One line per phase, each with the time elapsed and left. Each worker's plan reserves what inference needs
# (measured on its device, plus a margin) and fine-tunes with the rest; a worker that fails costs only its
# unfinished tasks, which keep the fallback answers written first.

# %%
report = solve(SolveConfig(challenges=challenges, weights=weights,
                           output=str(Path(KAGGLE_WORKING) / "submission.json"),
                           work_dir=str(Path(KAGGLE_WORKING) / "ttt_work"), time_budget=TIME_BUDGET,
                           finetune_steps=FINETUNE_STEPS, num_aug=NUM_AUG, max_tasks=MAX_TASKS, workers=WORKERS,
                           device=DEVICE), echo=print)
# per task reports, workers and fallback reasons are in ttt_work/solve_report.json (the reasons also in the lines above)
print(json.dumps({k: v for k, v in report.items() if k not in ("task_reports", "workers", "fallback")}, indent=2,
                 default=str))

# %% [markdown]
# ## Check the submission
#
# Every task of the challenges file, one entry per test input, both attempts present, valid grids.

# %%
check_submission(report["output"], challenges)
counts = expected_counts(challenges)
print(f"{report['output']}: valid ({len(counts)} tasks, {sum(counts.values())} test inputs, two attempts each); "
      f"{report['answered']} tasks answered by the model, {report['predicted']} test inputs with model predictions; "
      f"{report['elapsed_s']} s")
for error in report["errors"]:
    print("warning:", error)
