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
# # Regression: test-time training helps on unseen tasks
#
# A small TRM pretrains on generated tasks with a known rule (`trm_kaggle.data.arc.rule_tasks`, flips of 4x4 grids:
# left-right or up-down, a task's choice), and is exported with its puzzle rows replaced by their mean, as the
# Kaggle kernel receives it. Then `trm_kaggle.solve.job.solve` (what `trm-kaggle submit` runs) answers tasks
# it never saw, twice on the same weights: with `finetune="none"` and with test-time training (`FINETUNE`, the
# submit default). With the mean row the model cannot know which flip a task wants; fine-tuning on the task's
# demonstrations puts that in its rows. Recorded:
#
# * `test_solved_share_none`, `test_solved_share_ttt`: the share of the unseen tasks' test outputs solved
#   (submission scored against the solutions) without and with test-time training;
# * `test_solved_gain`: their difference, which must stay positive;
# * `demo_exact_gain`: demonstration exact accuracy after fine-tuning minus before (the mean over tasks that
#   the solver reports).

# %% tags=["parameters"]
RULES = ["flip"]
PRETRAIN_TASKS = 300
PRETRAIN_STEPS = 500  # optimizer steps of 64 examples
UNSEEN_TASKS = 10
DEMOS = 8  # demonstration pairs per task
SIDE = 4  # grids and canvas are SIDE x SIDE
FINETUNE = "embeddings-then-all"  # the test-time training mode compared with "none"
FINETUNE_STEPS = 60  # per task
NUM_AUG = 3  # augmentations per unseen task (fine-tuning data and votes)
PUZZLE_EMB_LR = 0.1  # fine-tuning rate of the new puzzle rows (weights: the submit default)
SEED = 0
WORK_DIR = None  # scratch folder (None: a temporary one)

# %%
import tempfile
from pathlib import Path

import torch

from trm_kaggle.config import ArcBuildConfig, SolveConfig
from trm_kaggle.data import build_arc, rule_tasks, write_challenges
from trm_kaggle.evaluate import score_submission
from trm_kaggle.experiments import record
from trm_kaggle.outputs import notebook_output
from trm_kaggle.solve import solve
from trm_kaggle.train import export_run, load_train_config, train

torch.set_num_threads(1)  # one thread: the same float32 sums in the same order on every machine
# never the notebooks folder (`regress` passes a folder under its --out)
work = Path(notebook_output("WORK_DIR", WORK_DIR) if WORK_DIR is not None
            else tempfile.mkdtemp(prefix="ttt_gain_"))

# %% [markdown]
# ## Pretraining
#
# The pretraining tasks' demonstrations form the train split (their test pairs are left out); the recipe is
# `learn_arc_small`'s.

# %%
prefix = work / "src" / "rules"
prefix.parent.mkdir(parents=True, exist_ok=True)
write_challenges(rule_tasks(PRETRAIN_TASKS, seed=SEED, rules=RULES, n_train=DEMOS, min_side=SIDE, max_side=SIDE),
                 f"{prefix}_pretrain_challenges.json", f"{prefix}_pretrain_solutions.json")
data = work / "data"
build_arc(ArcBuildConfig(output_dir=str(data), input_file_prefix=str(prefix), subsets=["pretrain"],
                         test_set_name="pretrain", test_set_name2="pretrain", num_aug=0, seed=SEED, canvas=SIDE,
                         workers=1, progress=False))
cfg = load_train_config(presets=["sudoku4-cpu"], overrides=[
    f"data_paths=[{data}]", f"checkpoint_path={work / 'run'}", f"seed={SEED}", f"max_steps={PRETRAIN_STEPS}",
    "arch.L_layers=1", "arch.H_cycles=1", "arch.halt_max_steps=2", "lr=5e-3", "puzzle_emb_lr=0.1",
    "eval_interval=null", "threads=1", "device=cpu", "arch.forward_dtype=float32", "progress=False",
    "log_interval=100"])
print(train(cfg).summary())
weights = export_run(work / "run", work / "weights", mean_embedding=True)

# %% [markdown]
# ## Unseen tasks, with and without test-time training

# %%
unseen = rule_tasks(UNSEEN_TASKS, seed=SEED + 1, rules=RULES, prefix="unseen", n_train=DEMOS, min_side=SIDE,
                    max_side=SIDE)
challenges, solutions = work / "unseen_challenges.json", work / "unseen_solutions.json"
write_challenges(unseen, challenges, solutions)
solved, reports = {}, {}
for mode in ("none", FINETUNE):
    reports[mode] = solve(SolveConfig(
        challenges=str(challenges), weights=str(weights), output=str(work / f"submission-{mode}.json"),
        work_dir=str(work / f"ttt-{mode}"), num_aug=NUM_AUG, finetune=mode, finetune_steps=FINETUNE_STEPS,
        global_batch_size=16, puzzle_emb_lr=PUZZLE_EMB_LR, eval_batch_size=64, device="cpu", threads=1, workers=1,
        seed=SEED, progress=False))
    score = score_submission(work / f"submission-{mode}.json", solutions)
    solved[mode] = score.solved / score.total
    print(f"{mode}: {score.solved} of {score.total} test outputs solved; {reports[mode]['answered']} tasks answered")

before, after = reports[FINETUNE]["before_finetune"], reports[FINETUNE]["after_finetune"]
print(f"demonstration exact accuracy {before['demo_exact_accuracy']:.3f} -> {after['demo_exact_accuracy']:.3f}, "
      f"token accuracy {before['demo_token_accuracy']:.3f} -> {after['demo_token_accuracy']:.3f}")
record("test_solved_share_none", solved["none"])
record("test_solved_share_ttt", solved[FINETUNE])
record("test_solved_gain", solved[FINETUNE] - solved["none"], f"{FINETUNE}, {FINETUNE_STEPS} steps")
record("demo_exact_gain", after["demo_exact_accuracy"] - before["demo_exact_accuracy"])
