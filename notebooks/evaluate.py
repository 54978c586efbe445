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
# # Evaluate exported weights on an ARC dataset
#
# Predicts every augmented test input of a dataset's test split with `trm_kaggle.evaluate.pipeline.evaluate`,
# maps the predictions back through their augmentations, votes, and scores against `test_puzzles.json`. Then
# writes the per-task report (`report.json`, `report.md`, pictures) with `write_report` and shows a few tasks.
#
# The metrics have exact names; do not mix them up:
# * **ARC Prize score**: over all test outputs (micro), 1 when the truth is one of the top-2 attempts. This is
#   what the competition computes.
# * **pass@K, task macro**: upstream's `ARC/pass@K`, the mean over tasks of the fraction of the task's test
#   outputs whose truth is among the top K candidates.
# * **token accuracy**: per token, over all augmented copies. A diagnostic, not a solve rate.
#
# The defaults evaluate the shipped CPU export `weights/arc2-cpu-tiny` on the dataset of `build_dataset` (the
# first 10 ARC-AGI-2 evaluation tasks x 9 augmented copies); `WEIGHTS_DIR = "runs/notebooks/weights/cpu-smoke"`
# evaluates the `train` notebook's export instead. Inference at seq_len 900 is slow on a CPU (a few examples/s
# for these small models; benchmarks/bench_evaluate.py measures a machine): use a GPU, or point `DATA_DIR` at a
# smaller dataset (fewer tasks or a smaller `NUM_AUG`) for a quick look.

# %% tags=["parameters"]
WEIGHTS_DIR = "weights/arc2-cpu-tiny"  # an export (weights.safetensors + config.json); the shipped one
DATA_DIR = "runs/notebooks/data/arc2-first10-aug-8"  # an ARC dataset with test_puzzles.json (build_dataset's)
REPORT_DIR = None  # report.json, report.md, pictures/; None: runs/notebooks/eval/<weights' name>/<dataset's name>
BATCH_SIZE = 256  # examples per forward pass
DEVICE = "auto"  # auto (cuda > mps > cpu), cpu, cuda, mps
TASKS = None  # task ids to draw, e.g. ["0934a4d8"]; None: the first N_PICTURES tasks of the test set
N_PICTURES = 3

# %%
import logging
from pathlib import Path

from IPython.display import Image, Markdown, display

from trm_kaggle.hardware import quiet_openmp_waits
from trm_kaggle.wording import log_one_line_each

# the package's warnings as one escaped line each: a name read from a file may hold escape sequences
log_one_line_each(logging.WARNING)

quiet_openmp_waits()  # shorter OpenMP spinning waits, set before torch loads OpenMP (docs/benchmarks.md)
from trm_kaggle.config import texts_argument, whole_argument
from trm_kaggle.data import load_metadata
from trm_kaggle.errors import TRMError
from trm_kaggle.evaluate import (MAX_DRAWN, checked_report_dir, chosen_tasks, evaluate, load_test_set,
                                 task_picture_png, tasks_problem, write_report)
from trm_kaggle.model import load_inference_model
from trm_kaggle.hardware import pick_device
from trm_kaggle.outputs import notebook_output

N_PICTURES = whole_argument("N_PICTURES", N_PICTURES, 0, MAX_DRAWN)  # said by its name here, before any work

# under the weights' own name: another export's evaluation never lands on this one's report (nor the notebooks folder)
REPORT_DIR = notebook_output("REPORT_DIR", REPORT_DIR,
                             Path("runs/notebooks/eval", Path(WEIGHTS_DIR).name, Path(DATA_DIR).name))
# the report's folder and the task ids to draw, as write_report takes them, before any inference (both were refused
# once the whole evaluation had run): a folder holding another's report, an id the test split lacks
WEIGHTS, FOUND = checked_report_dir(REPORT_DIR, WEIGHTS_DIR, "REPORT_DIR")
TASKS = None if TASKS is None else texts_argument("TASKS", TASKS, "a task id")  # one id typed as text is one id
if TASKS and (problem := tasks_problem(TASKS, load_test_set(DATA_DIR).num_tests, DATA_DIR, "TASKS")):
    raise TRMError(problem)

# %% [markdown]
# ## Load the model
#
# The puzzle-embedding table is sized for the dataset's identifiers. When the export's table does not match
# (an export with `mean_embedding`, or weights trained on another dataset), every row starts from the mean of
# the saved rows, which is upstream's rule for unseen puzzles.

# %%
device = pick_device(DEVICE)
num_ids = load_metadata(DATA_DIR, "test").num_puzzle_identifiers
model, config = load_inference_model(WEIGHTS_DIR, num_puzzle_identifiers=num_ids, device=device)
print(f"{WEIGHTS_DIR}: {model.num_parameters():,} parameters on {device}; the export holds "
      f"{config['num_puzzle_identifiers']} puzzle rows ({config['puzzle_embedding']}), the dataset {num_ids} "
      f"identifiers{'' if config['num_puzzle_identifiers'] == num_ids else ': rows set to the mean saved row'}")

# %% [markdown]
# ## Evaluate

# %%
result = evaluate(model, DATA_DIR, batch_size=BATCH_SIZE, device=device)
s = result.summary()
print(f"ARC Prize score (micro over {s['num_test_outputs']} test outputs, truth in the top-2 attempts): "
      f"{result.arc_prize_score:.4f}")
print(f"pass@K, task macro (upstream's ARC/pass@K, mean over {s['num_tasks']} tasks): "
      + ", ".join(f"pass@{k} = {v:.4f}" for k, v in result.pass_at_k_task_macro.items()))
print(f"token accuracy (per token, over all augmented copies; NOT a solve rate): {result.token_accuracy:.4f}")
print(f"{s['num_examples']:,} augmented predictions, {s['timing']['examples_per_second']:.1f} examples/s, "
      f"{s['timing']['seconds_total']:.1f} s")

# %% [markdown]
# ## Per-task report
#
# Every task and test input: solved or not, the rank of the truth among the voted candidates, the top votes.

# %%
paths = write_report(result, REPORT_DIR, tasks=TASKS, first_n=N_PICTURES, weights=WEIGHTS, found=FOUND)  # + digest
print(f"wrote {paths['json']} and {paths['markdown']}")
display(Markdown(paths["markdown"].read_text().split("\n## Pictures")[0]))  # the pictures follow below

# %% [markdown]
# ## Pictures
#
# Per test input: the input, the truth and the top-2 attempts with their votes (✓ marks a correct attempt).

# %%
# TASKS as write_report read it: one id typed as text (`-p TASKS 0934a4d8`), or ids joined by commas
for task in (chosen_tasks(TASKS, result.test_set.task_ids) if TASKS else result.test_set.task_ids[:N_PICTURES]):
    display(Image(data=task_picture_png(result, task)))
