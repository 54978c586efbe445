"""`trm-kaggle evaluate`, `evaluate-repair`, `validate-submission` and `score`: a model's predictions voted
and scored against known answers, and submissions checked against their challenges."""

from __future__ import annotations

import argparse
import json
import sys
from typing import get_args

from trm_kaggle.cli.common import common_flags, config_kwargs, flag
from trm_kaggle.config import (MAX_SEED, EvaluateConfig, InferenceDtype, RepairEvalConfig, TaskIdMode, TrajectorySelect,
                               bounded_number)
from trm_kaggle.errors import TRMError
from trm_kaggle.evaluate import MAX_DRAWN
from trm_kaggle.names import typed_name
from trm_kaggle.wording import count, shown


def add_evaluate(sub) -> None:
    p = sub.add_parser("evaluate", help="score a dataset's test split (ARC: vote and a per-task report; Sudoku, "
                                        "Maze: exact and token accuracy)",
                       description="ARC (a dataset with test_puzzles.json): predict every augmented copy of every "
                                   "test input, undo the augmentations, vote per test input and score: the ARC Prize "
                                   "score and upstream's pass@K with 95 % intervals, token accuracy, a breakdown by "
                                   "kind of output; --report-dir adds a per-task report with pictures. Any other "
                                   "dataset (build-sudoku, build-maze): exact and token accuracy of its test split "
                                   "with 95 % intervals. Test-time levers: --trajectories K --trajectory-noise S "
                                   "(noisy trajectories), --test-depth H (docs/test_time.md). A test split with "
                                   "nothing to score is refused (exit 2).")
    p.add_argument("--weights", required=True, help="export directory (weights.safetensors + config.json)")
    p.add_argument("--data", required=True, help="dataset directory: ARC (with test_puzzles.json), Sudoku or Maze")
    flag(p, "max_tasks", EvaluateConfig, type=int, default=None)
    p.add_argument("--report-dir", default=None,
                   help="write report.json, report.md and grid pictures here (default: no report)")
    default = EvaluateConfig()  # the command's defaults are the config's
    flag(p, "batch_size", EvaluateConfig, type=int, default=default.batch_size)
    flag(p, "device", EvaluateConfig, default=default.device)
    flag(p, "early_exit", EvaluateConfig, action="store_true")
    flag(p, "dtype", EvaluateConfig, choices=get_args(InferenceDtype), default=default.dtype)
    flag(p, "compile", EvaluateConfig, more="; --compile alone = on", nargs="?", const="on", default=default.compile,
         choices=["auto", "on", "off"])
    flag(p, "max_steps", EvaluateConfig, type=int, default=None)
    flag(p, "weighting", EvaluateConfig, choices=["count", "q_halt"], default=None)
    for name in ("trajectories", "trajectory_seed", "test_depth"):
        flag(p, name, EvaluateConfig, type=int, default=None)
    flag(p, "trajectory_noise", EvaluateConfig, type=float, default=None)
    flag(p, "trajectory_select", EvaluateConfig, choices=get_args(TrajectorySelect), default=None)
    p.add_argument("--tasks", default=None, type=typed_name, nargs="+", metavar="ID",
                   help="task ids to draw in the report, separated by spaces or commas, in one argument or "
                        "several (an id of the test split holding either is taken whole; default: the first --first "
                        "tasks)")
    p.add_argument("--first", type=bounded_number("--first", 0, MAX_DRAWN), default=None,
                   help="draw the first N tasks in the report when --tasks is not given (default: 5)")
    p.add_argument("--no-pictures", action="store_true", help="write the report without grid pictures")
    p.add_argument("--save-votes", default=None, metavar="FILE",
                   help="write this evaluation's votes (.npz) so later evaluations can pool with them "
                        "(default: not written)")
    p.add_argument("--pool-with", nargs="+", default=None, metavar="FILE",
                   help="pool with the votes of earlier evaluations (files of --save-votes, oldest first): "
                        "how upstream's aggregated voting reports ARC/pass@K (default: this evaluation's votes "
                        "alone)")
    p.add_argument("--task-ids", nargs="+", default=["own"], choices=get_args(TaskIdMode), metavar="MODE",
                   help="which puzzle-embedding row each puzzle gets: own (as trained, default), blank (identifier "
                        "0), random (another trained identifier's, seeded), mean (the mean row); several modes "
                        "evaluate one after the other and end with a comparison: does the model need its task id?")
    p.add_argument("--task-id-seed", type=bounded_number("--task-id-seed", 0, MAX_SEED), default=None,
                   help="seed of --task-ids random (default 0)")
    common_flags(p)
    p.set_defaults(func=cmd_evaluate)


def cmd_evaluate(args: argparse.Namespace) -> int:
    from trm_kaggle.evaluate import evaluate_export

    modes = list(dict.fromkeys(args.task_ids))
    if len(modes) > 1 and (args.save_votes or args.pool_with or args.report_dir):
        raise TRMError("--save-votes, --pool-with and --report-dir take one --task-ids mode at a time")
    if (args.tasks is not None or args.first is not None or args.no_pictures) and args.report_dir is None:
        raise TRMError("--tasks, --first and --no-pictures shape the report's pictures: give --report-dir too")
    if args.no_pictures and (args.tasks is not None or args.first is not None):
        raise TRMError(f"{'--tasks' if args.tasks is not None else '--first'} chooses the tasks to draw, and "
                       "--no-pictures draws none: drop one of them")
    if args.tasks is not None and args.first is not None:
        raise TRMError("--first counts the tasks to draw when --tasks is not given, and --tasks names them: give one")
    if args.task_id_seed is not None and "random" not in modes:  # read by nothing else
        raise TRMError(f"--task-id-seed {args.task_id_seed} seeds --task-ids random, which is not asked for: add "
                       "it or drop the seed")
    cfg = EvaluateConfig(**config_kwargs(args, EvaluateConfig.model_fields))
    evaluate_export(args.weights, args.data, cfg, task_ids=args.task_ids, task_id_seed=args.task_id_seed or 0,
                    pool_with=args.pool_with, save_votes=args.save_votes, report_dir=args.report_dir,
                    tasks=args.tasks, first=args.first, pictures=not args.no_pictures)
    return 0


def add_evaluate_repair(sub) -> None:
    p = sub.add_parser("evaluate-repair", help="exact-fix rate of a code-repair model, per bug type, vs copying",
                       description="Predicts the test split of a build-code-repair dataset and reports the exact-fix "
                                   "rate overall and per bug type, the outcomes (fixed / unchanged / changed wrongly) "
                                   "and the copy-the-input baseline. --doctests and --test-command RUN THE CODE "
                                   "(reference fixes and model outputs) in a subprocess with a time limit.")
    for name in ("weights", "data"):
        flag(p, name, RepairEvalConfig, required=True)
    for name in ("max_examples", "batch_size"):
        flag(p, name, RepairEvalConfig, type=int, default=None)
    flag(p, "device", RepairEvalConfig, choices=["auto", "cpu", "cuda", "mps"], default=None)
    flag(p, "doctests", RepairEvalConfig, action="store_true", default=None)
    flag(p, "test_command", RepairEvalConfig, default=None)
    flag(p, "time_limit", RepairEvalConfig, type=float, default=None)
    flag(p, "max_runs", RepairEvalConfig, type=int, default=None)
    flag(p, "report", RepairEvalConfig, default=None)
    common_flags(p)
    p.set_defaults(func=cmd_evaluate_repair)


def cmd_evaluate_repair(args: argparse.Namespace) -> int:
    from trm_kaggle.evaluate import evaluate_repair, format_repair_report
    from trm_kaggle.hardware import pick_device
    from trm_kaggle.model import load_model_for_dataset

    cfg = RepairEvalConfig(**config_kwargs(args, RepairEvalConfig.model_fields))
    device = pick_device(cfg.device)
    model, _, note = load_model_for_dataset(cfg.weights, cfg.data, device)
    if note:
        print(f"note: {note}", file=sys.stderr)
    result = evaluate_repair(model, cfg, device)
    print(format_repair_report(result))
    if cfg.report:
        print(f"report: {cfg.report}")
    return 0


def add_validate_submission(sub) -> None:
    p = sub.add_parser("validate-submission", help="check a submission.json against its challenges file",
                       description="Check a submission against the challenges file it answers: every task id, one "
                                   "entry per test input in order, attempt_1 and attempt_2 present, grids with sides "
                                   "1..30 and values 0..9. Prints the first problem (exit 2) or that it is valid.")
    p.add_argument("submission", help="the submission.json to check")
    p.add_argument("--challenges", required=True, help="the challenges JSON it answers")
    common_flags(p)
    p.set_defaults(func=cmd_validate_submission)


def cmd_validate_submission(args: argparse.Namespace) -> int:
    from trm_kaggle.data import read_challenges
    from trm_kaggle.evaluate import challenge_problems, check_submission, expected_counts

    check_submission(args.submission, args.challenges)
    repeated: set[str] = set()  # a task id written twice is judged by its last copy, as Kaggle's reader keeps it
    raw = read_challenges(args.challenges, repeated)  # once more, then shared: a challenges file may be tens of MB
    counts = expected_counts(raw)
    print(f"{args.submission}: valid ({count(len(counts), 'task')}, {count(sum(counts.values()), 'test input')}, "
          "two attempts each)")
    # the submission is judged as Kaggle's scorer judges it; the challenges' own malformed tasks are said beside
    if repeated:
        first = min(repeated)
        print(f"note: {args.challenges}: {count(len(repeated), 'task id')} written twice (task {shown(first)}): "
              "each judged by its last copy, as Python's json reads the file; submit answers them with the "
              "fallback", file=sys.stderr)
    bad = challenge_problems(raw)
    if bad:
        first, more = next(iter(bad)), f"; and {len(bad) - 1} more" if len(bad) > 1 else ""
        print(f"note: {args.challenges}: {count(len(bad), 'malformed task')}, which submit answers with the fallback "
              f"(task {shown(first)}: {bad[first]}{more})", file=sys.stderr)
    return 0


def add_score(sub) -> None:
    p = sub.add_parser("score", help="ARC Prize score of a submission against known solutions",
                       description="Score a submission against known solutions: the ARC Prize score (either attempt "
                                   "right, over test outputs) with its 95 % interval, and the per-task breakdown.")
    p.add_argument("submission", help="the submission.json to score")
    p.add_argument("--solutions", required=True, help="the solutions JSON (e.g. arc-agi_evaluation_solutions.json)")
    p.add_argument("--json", action="store_true", help="print the per-task breakdown as JSON")
    common_flags(p)
    p.set_defaults(func=cmd_score)


def cmd_score(args: argparse.Namespace) -> int:
    import dataclasses

    from trm_kaggle.evaluate import check_scorable, format_score, score_submission

    check_scorable(args.submission, args.solutions)  # validated first, as validate-submission does
    report = score_submission(args.submission, args.solutions)
    print(json.dumps(dataclasses.asdict(report), indent=2) if args.json else format_score(report))
    return 0
