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
# # Train a Tiny Recursive Model
#
# Trains a TRM on a dataset made by `build_dataset` with `trm_kaggle.train.loop.train` (the same engine as
# `trm-kaggle train`), plots the training curves from the run's `metrics.jsonl` and exports inference weights
# (`weights.safetensors` + `config.json`) with `trm_kaggle.train.checkpoint.export_run` (`trm-kaggle export`).
#
# The defaults are a smoke run: the `cpu-smoke` preset (hidden size 64, float32, on the CPU) for a few steps,
# a couple of minutes on a laptop CPU. It shows the mechanics, not a useful model; upstream's ARC-AGI-2 recipe
# is `PRESET = "arc2"` on GPUs. Running the notebook again resumes the run in `RUN_DIR` from its newest state.

# %% tags=["parameters"]
DATA_DIR = "runs/notebooks/data/arc2-first10-aug-8"  # a dataset directory (build_dataset's default OUTPUT_DIR)
RUN_DIR = None  # run directory: config.json, metrics.jsonl, state_step*.pt; None: runs/notebooks/train/<PRESET>
PRESET = "cpu-smoke"  # a preset name, or several joined with "+" (e.g. "arc2+T3n6"); see describe_presets()
OVERRIDES = {"max_steps": 10, "global_batch_size": 8, "log_interval": 2}  # settings on top of the preset
EXPORT_DIR = None  # inference export to create; None: runs/notebooks/weights/<PRESET>
MEAN_EMBEDDING = False  # keep only the mean puzzle-embedding row in the export (what unseen tasks need)

# %%
import logging

import matplotlib.pyplot as plt

from trm_kaggle.hardware import quiet_openmp_waits
from trm_kaggle.wording import log_one_line_each

# the package's warnings as one escaped line each: a name read from a file may hold escape sequences
log_one_line_each(logging.WARNING)
quiet_openmp_waits()  # shorter OpenMP spinning waits, set before torch loads OpenMP (docs/benchmarks.md)
from trm_kaggle.atomic import replace_problem
from trm_kaggle.config import flag_argument
from trm_kaggle.errors import TRMError
from trm_kaggle.outputs import check_kept, notebook_output
from trm_kaggle.runner_watch import stop_when_the_runner_exits, training
from trm_kaggle.train import (dump_config, export_run, load_train_config, override_list, read_metrics, train,
                              training_io)

MEAN_EMBEDDING = flag_argument("MEAN_EMBEDDING", MEAN_EMBEDDING)  # said by its name here, before any training

# never the notebooks folder
RUN_DIR = notebook_output("RUN_DIR", RUN_DIR, f"runs/notebooks/train/{PRESET}")
EXPORT_DIR = notebook_output("EXPORT_DIR", EXPORT_DIR, f"runs/notebooks/weights/{PRESET}")

# %% [markdown]
# ## Settings
#
# Defaults, then the preset, then the overrides; the dataset and the run directory come from the parameters.

# %%
cfg = load_train_config(presets=[PRESET], overrides=override_list(OVERRIDES))  # a mapping, or key=value strings
cfg.data_paths = [str(DATA_DIR)]
cfg.checkpoint_path = str(RUN_DIR)
# the export, as the export cell would refuse it, before the training: never the run folder it reads, the dataset,
# nor a folder that is no export (each was refused once the training had run)
check_kept(*training_io(cfg, RUN_DIR, export=EXPORT_DIR, export_what="EXPORT_DIR"))
if problem := replace_problem(EXPORT_DIR, "export", "EXPORT_DIR"):
    raise TRMError(problem)
print(dump_config(cfg))

# %% [markdown]
# ## Train
#
# A stop (Jupyter's "interrupt kernel", or SIGTERM to the kernel) is taken as `trm-kaggle train` takes it: the step
# under way ends, its train state is saved, and the cell ends with `TrainingInterrupted` naming the state; running
# the notebook again resumes from it. A second interrupt stops at once, without saving. A stop signal to papermill
# ends papermill alone (the kernel runs in a session of its own); the kernel takes papermill's end as that SIGTERM:
# it saves, says the `TrainingInterrupted` line on its own stderr (papermill's log) and exits. Ctrl-C to papermill
# interrupts the kernel: it saves and says the same line there, before papermill's own "Aborted!".

# %%
stop_when_the_runner_exits()  # the runner's end stops the training as a SIGTERM does (it would end the kernel)
with training():  # the kernel of a runner gone waits for the save
    result = train(cfg, signals=True)  # the stop signals save the run's state first (trm_kaggle.train.stops)
print(result.summary())


# %% [markdown]
# ## Training curves
#
# From `metrics.jsonl` (one JSON record per logged step; evaluation records carry `eval_*` keys instead). Exact accuracy here is per training example (all
# tokens right); token accuracy is per token. Neither is an ARC solve rate: see the `evaluate` notebook.

# %%
def plot_curves(run_dir):
    records, _ = read_metrics(run_dir)
    steps = [r["step"] for r in records]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 3.5))
    ax_loss.plot(steps, [r["loss"] for r in records], label="loss")
    ax_loss.set_xlabel("step")
    ax_loss.set_title("loss")
    for key in ("exact_accuracy", "token_accuracy"):
        ax_acc.plot(steps, [r.get(key, float("nan")) for r in records], label=key)
    ax_acc.set_xlabel("step")
    ax_acc.set_ylim(0, 1)
    ax_acc.set_title("accuracy on training batches")
    ax_acc.legend()
    plt.show()


plot_curves(result.run_dir)

# %% [markdown]
# ## Export
#
# Uses the EMA weights when the run kept them (`ema=True`).

# %%
export_run(result.run_dir, EXPORT_DIR, mean_embedding=MEAN_EMBEDDING)
print(f"exported {result.run_dir} (step {result.step}) to {EXPORT_DIR}")
