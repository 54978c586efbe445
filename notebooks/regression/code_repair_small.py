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
# # Regression: the smallest code-repair run
#
# A fixed corpus (generated below from a seed: short functions of three lines, the same text on every machine
# and Python version, unlike the standard library), `trm-kaggle build-code-repair`'s builder with one bug type
# (`missing_colon`: the ':' ending a block header is deleted) on a 3x24 character grid, a small TRM trained
# for a fixed number of steps (one CPU thread, float32), and `evaluate-repair`'s scoring of the held-out files.
# Recorded:
#
# * `exact_fix_rate`: the share of held-out pairs whose prediction, read back as text, equals the fix (copying
#   the buggy input scores 0 by construction);
# * `token_accuracy`: the share of grid cells right.
#
# The rate climbs from 0 to 1 between steps 150 and 250 of this recipe; `STEPS` leaves a margin past it.

# %% tags=["parameters"]
FILES = 200  # corpus files, four functions each
GRID = "3x24"  # rows x columns of a snippet
BUG_TYPES = ["missing_colon"]
STEPS = 300  # optimizer steps of 32 pairs
SEED = 0
OVERRIDES = []  # more training overrides, upstream style (as `trm-kaggle train` takes them)
WORK_DIR = None  # scratch folder (None: a temporary one)

# %%
import tempfile
from pathlib import Path

import numpy as np
import torch

from trm_kaggle.config import CodeRepairBuildConfig, RepairEvalConfig
from trm_kaggle.data import build_code_repair
from trm_kaggle.evaluate import evaluate_repair, format_repair_report
from trm_kaggle.experiments import record
from trm_kaggle.model import load_inference_model
from trm_kaggle.outputs import notebook_output
from trm_kaggle.train import export_run, load_train_config, train

torch.set_num_threads(1)  # one thread: the same float32 sums in the same order on every machine
# never the notebooks folder (`regress` passes a folder under its --out)
work = Path(notebook_output("WORK_DIR", WORK_DIR) if WORK_DIR is not None
            else tempfile.mkdtemp(prefix="code_repair_small_"))

# %% [markdown]
# ## The corpus
#
# Each function has a header, one block header and one statement inside it, with names, constants and
# operators drawn from the seed.

# %%
rng = np.random.default_rng(SEED)
NAMES, OPS, COMPARISONS = list("abknstvxy"), ["+", "-", "*"], ["<", ">", "==", "<=", ">=", "!="]
corpus = work / "corpus"
corpus.mkdir(parents=True, exist_ok=True)
for f in range(FILES):
    functions = []
    for j in range(4):
        p, q = (str(x) for x in rng.choice(NAMES, 2, replace=False))
        c, op, cmp = int(rng.integers(0, 10)), rng.choice(OPS), rng.choice(COMPARISONS)
        functions.append([f"def f{f}_{j}({p}, {q}):\n    if {p} {cmp} {q}:\n        return {p} {op} {c}\n",
                          f"def f{f}_{j}({p}):\n    for {q} in range({c + 1}):\n        {p} = {p} {op} {q}\n",
                          f"def f{f}_{j}({p}, {q}):\n    while {p} {cmp} {c}:\n        {p} = {q}\n"][j % 3])
    (corpus / f"m{f:03d}.py").write_text("\n\n".join(functions))
print((corpus / "m000.py").read_text())

# %% [markdown]
# ## Pairs, training, scoring

# %%
data = work / "data"
build = build_code_repair(CodeRepairBuildConfig(output_dir=str(data), corpus=str(corpus), grid=GRID,
                                                bug_types=BUG_TYPES, lint="off", seed=SEED, workers=1,
                                                val_fraction=0.0, test_fraction=0.1, progress=False))
print(f"{build['total_pairs']} pairs from {build['files']} files")
cfg = load_train_config(presets=["repair-cpu"], overrides=[
    f"data_paths=[{data}]", f"checkpoint_path={work / 'run'}", f"seed={SEED}", f"max_steps={STEPS}",
    "arch.mlp_t=True", "arch.pos_encodings=none", "arch.L_layers=1", "arch.H_cycles=1", "arch.halt_max_steps=2",
    "lr=3e-3", "lr_warmup_steps=20", "threads=1", "device=cpu", "arch.forward_dtype=float32", "progress=False",
    "log_interval=50", *OVERRIDES])
print(train(cfg).summary())
export_run(work / "run", work / "weights")
model, _ = load_inference_model(work / "weights")
scored = evaluate_repair(model, RepairEvalConfig(weights=str(work / "weights"), data=str(data), device="cpu",
                                                 progress=False))
print(format_repair_report(scored))
overall = scored.table["overall"]
record("exact_fix_rate", overall["exact_fix_rate"], f"{overall['fixed']} of {overall['pairs']} pairs")
record("token_accuracy", overall["token_accuracy"])
