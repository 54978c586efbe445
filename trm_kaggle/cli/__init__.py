"""`trm-kaggle`: one entry point, one subcommand per job.

This package only parses arguments and calls the package, one room per family of commands: data.py (datasets),
train.py (training, exports), evaluate.py (scores, submissions checked), kaggle.py (the kernel's job, its
estimate, the bundle, the pipeline), cluster.py (torchrun, job files) and experiments.py (sweeps, comparisons,
regressions); common.py holds what they share. Each `add_*` adds a subcommand's parser, whose options that set
a config field take their help from the field's description (`common.flag`); each `cmd_*` turns its arguments
into a config of `trm_kaggle.config` (or plain arguments) and prints the result; heavy imports wait inside the
`cmd_*`. Flag names follow upstream's scripts (`--input-file-prefix`, `--num-aug`, ...); both dashes
and underscores are accepted. Every subcommand takes the common flags (`--no-progress`, `-v`), except `bundle`,
whose options are exactly `build_bundle.py`'s. User errors print one `error:` line and exit with status 2; so
does an OSError (the path, and what was needed: space, permission, a folder); nothing half-written is left
behind.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

# Nothing but the standard library at import time: the console script imports this module before `main` runs,
# and a Ctrl-C during an import here would end in a traceback. `main` imports the rest under its handler.


__all__ = ["START_HERE", "build_parser", "main"]  # the console script's entry, its parser, the first hint

#: Where a new user starts: what the bare command and `--help` say.
START_HERE = ("new here? Start with `trm-kaggle pipeline`: ARC-AGI-2 data, a short training, evaluation, a "
              "submission and the Kaggle bundle, offline, in minutes on a CPU (`trm-kaggle pipeline --help`)")


def build_parser() -> argparse.ArgumentParser:
    from trm_kaggle.cli.cluster import add_launch, add_torchrun
    from trm_kaggle.cli.common import command_parser, say_defaults
    from trm_kaggle.cli.data import add_build_arc, add_build_code_repair, add_build_maze, add_build_sudoku, add_verify
    from trm_kaggle.cli.evaluate import add_evaluate, add_evaluate_repair, add_score, add_validate_submission
    from trm_kaggle.cli.experiments import add_compare, add_regress, add_sweep
    from trm_kaggle.cli.kaggle import add_bundle, add_estimate, add_pipeline, add_submit
    from trm_kaggle.cli.train import add_doctor, add_export, add_import_upstream, add_train

    parser, sub = command_parser(f"{__doc__.split(chr(10))[0]} {START_HERE[0].upper()}{START_HERE[1:]}.")
    for add in (add_pipeline, add_build_arc, add_build_sudoku, add_build_maze, add_build_code_repair, add_verify,
                add_train, add_torchrun, add_sweep, add_launch, add_compare, add_doctor, add_export,
                add_import_upstream, add_evaluate, add_evaluate_repair, add_submit, add_validate_submission, add_score,
                add_estimate, add_bundle, add_regress):
        add(sub)
    from trm_kaggle import config as C

    owners = {"pipeline": C.PipelineConfig, "build-arc": C.ArcBuildConfig, "build-sudoku": C.SudokuBuildConfig,
              "build-maze": C.MazeBuildConfig, "build-code-repair": C.CodeRepairBuildConfig,
              "evaluate": C.EvaluateConfig, "evaluate-repair": C.RepairEvalConfig, "submit": C.SolveConfig,
              "estimate": C.SolveConfig}
    for name, subparser in sub.choices.items():
        say_defaults(subparser, owners.get(name))
    return parser


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()  # submit's --time-budget counts from here: its imports and checks are spent too
    from trm_kaggle.stdout import tolerant_stderr

    stderr = sys.stderr
    tolerant_stderr()  # progress, warnings and errors only: a closed or full stderr fails no command
    try:
        from trm_kaggle.hardware import quiet_openmp_waits
        from trm_kaggle.names import current_folder_problem, umask_problem

        if problem := current_folder_problem() or umask_problem():  # before torch's import, which dies in C there
            print(f"error: {problem}", file=sys.stderr)
            return 2
        quiet_openmp_waits()  # before any command imports torch; its workers, ranks and sweep children inherit it
        return _main(argv, started)
    except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM (`interrupts.Terminated`); a training run stopped by a signal
        from trm_kaggle.interrupts import interrupted  # says where it saved

        return interrupted(e)
    finally:
        if stderr is not None:  # a caller's own stream again (the library's callers, tests); the process's at exit
            sys.stderr = stderr


def _main(argv: list[str] | None, started: float) -> int:
    import pydantic

    from trm_kaggle.cli.cluster import cmd_torchrun
    from trm_kaggle.cli.common import SWEEP_VALUE_FLAGS, typed_flags
    from trm_kaggle.cli.common import value_flags as value_flags_of
    from trm_kaggle.config import validation_line
    from trm_kaggle.errors import TRMError, os_error_line, resource_line
    from trm_kaggle.stdout import checked_stdout, parse_checked
    from trm_kaggle.wording import escape_what_the_console_cannot_show, log_one_line_each, one_line

    escape_what_the_console_cannot_show()  # a task id the locale cannot encode is escaped, never a traceback
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:  # the bare command: where to start, not argparse's "COMMAND is required"
        print(build_parser().format_usage().rstrip() + f"\ntrm-kaggle: {START_HERE}; `trm-kaggle --help` lists every "
              "command", file=sys.stderr)
        return 2
    overrides = []
    head = 2 if argv[:1] == ["launch"] else 1  # `launch k8s ...`: the launcher is a word, not an override
    value_flags = {"sweep": SWEEP_VALUE_FLAGS, "launch": SWEEP_VALUE_FLAGS,
                   "train": ("--config", "--preset", "--export"), "doctor": ("--preset",)}.get(argv[0])
    if argv[0] == "bundle":  # its key=value settings follow any option, as with build_bundle.py
        from trm_kaggle.kaggle.bundle import make_parser as bundle_parser

        value_flags = value_flags_of(bundle_parser())
    if value_flags:
        # argparse takes positionals in one run, so `sweep GRID --preset P key=value` (`doctor DATA --preset P
        # key=value`, `train a=1 --preset P b=2`) would leave the overrides unmatched: they are split off first and
        # joined again after parsing.
        from trm_kaggle.train import split_cli_args

        flags, overrides = split_cli_args(argv[head:], value_flags=value_flags)
        argv = argv[:head] + flags
    if argv[:1] == ["torchrun"] and argv[1:2] not in (["-h"], ["--help"]):
        # torchrun's own options follow: argparse would take them for this parser's
        args = argparse.Namespace(func=cmd_torchrun, torchrun_args=argv[1:], verbose=False)
    else:
        try:
            args = parse_checked(build_parser().parse_args, argv)  # help that cannot be printed: status 2
        except TRMError as e:  # a flag outside its bounds (`config.common.bounded_number`): one line, as after parsing
            print(f"error: {one_line(e)}", file=sys.stderr)
            return 2
    if overrides:
        args.overrides = list(args.overrides) + overrides
    args.started, args.argv = started, list(argv)  # the line as parsed: `bundle` asks which options were typed
    log_one_line_each(logging.INFO if getattr(args, "verbose", False) else logging.WARNING)
    try:
        with checked_stdout():  # the results reach stdout, or the command fails: never a silent success
            if getattr(args, "overrides", None) and argv[0] != "bundle":  # the settings typed on this line
                # (a bundle says them with its other checks: `build_bundle.py` has no such wrapper)
                from trm_kaggle.train import warn_repeated

                warn_repeated(args.overrides)
            if getattr(args, "command", None):
                from trm_kaggle.command_io import precheck

                precheck(args.command, args)  # outputs against inputs, writability, selections: before any work
            return args.func(args)
    except TRMError as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return getattr(e, "exit_status", 2)  # 2: bad input; a failed worker group says 1
    except pydantic.ValidationError as e:
        print(f"error: invalid option: {one_line(validation_line(e, typed_flags(build_parser(), argv)))}",
              file=sys.stderr)
        return 2
    except OSError as e:  # a full disk, a read-only or missing folder, a file where a folder should be
        print(f"error: {one_line(resource_line(e) or os_error_line(e))}", file=sys.stderr)
        return 2
    except (MemoryError, RuntimeError, ImportError) as e:  # the system's memory ran out (`ulimit -v`): said as such
        line = resource_line(e)
        if line is None:
            raise
        print(f"error: {one_line(line)}", file=sys.stderr)
        return 2
