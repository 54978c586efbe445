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
# # Analyse a sweep
#
# Compares training runs with `trm_kaggle.experiments.compare.write_comparison` (the engine of
# `trm-kaggle compare`) and shows what it writes: the table (per group of seeds and per run: final and best
# exact accuracy, token accuracy, loss, steps, wall time, examples/s, parameters, and the settings that differ)
# and the plots (learning curves against step and wall time, mean and spread over seeds; the final metric per
# group).
#
# `DIRS` takes sweep directories (`trm-kaggle sweep`), run directories (`trm-kaggle train`) or directories of
# runs. A sweep that is still running is fine: runs show their state, and run the notebook again for fresh
# curves. The defaults read the `ablations` sweep of docs/experiments.md:
# `trm-kaggle sweep ablations --preset sudoku4-cpu ema=True ema_rate=0.99 data_paths=[data/sudoku4] --seeds 0,1`.

# %% tags=["parameters"]
DIRS = ["runs/sweeps/ablations"]  # sweep, run, or parent directories
OUT_DIR = "runs/sweeps/ablations/compare"  # table.md, table.csv, curves.png, final.png
METRIC = None  # metric of the plots; None: eval_exact_accuracy when runs evaluated, else exact_accuracy

# %%
import logging

from IPython.display import Image, Markdown, display

from trm_kaggle.experiments import write_comparison
from trm_kaggle.outputs import notebook_output
from trm_kaggle.wording import log_one_line_each

# the package's warnings as one escaped line each: a run folder's name may hold escape sequences
log_one_line_each(logging.WARNING)
OUT_DIR = notebook_output("OUT_DIR", OUT_DIR)  # never the notebooks folder

# %% [markdown]
# ## Table
#
# Exact accuracy is the fraction of examples with every token right: "(test)" on the dataset's test split
# (evaluations every `eval_interval` epochs, with the EMA weights when the run keeps them), "(train)" on the
# halted rows of the training batches. Examples/s counts training examples per second of wall time,
# evaluations included.

# %%
result = write_comparison(DIRS, OUT_DIR, metric=METRIC)
display(Markdown(result["markdown_text"]))

# %% [markdown]
# ## Learning curves
#
# One line per group: the mean over its seeds at each logged step, the band from their minimum to their
# maximum. Against wall time, a group's x is its runs' mean time to reach the step.

# %%
if "curves" in result:
    display(Image(filename=str(result["curves"])))

# %% [markdown]
# ## Final metric per group
#
# Bars are means over seeds; each dot is one run.

# %%
if "bars" in result:
    display(Image(filename=str(result["bars"])))
print(f"written to {OUT_DIR}: table.md, table.csv" + (", curves.png, final.png" if "curves" in result else ""))
