"""Where `trm-kaggle`, `python -m trm_kaggle` and `build_bundle.py` start: a stop from the first instant is one line.

Python ends a process on SIGTERM at once and without a word, and a Ctrl-C during an import is a traceback;
both can arrive while a command is still importing (a training spends a second or two there before its first
step). `run` takes SIGTERM as Ctrl-C (`interrupts.Terminated`) before it imports anything of the commands, and
says either in the one line every command prints for it. Only the entry points import this module.
"""

from __future__ import annotations

import sys

from trm_kaggle.interrupts import interrupted, quiet_teardown, take_sigterm


def run(command: str = "trm-kaggle") -> int:
    """`trm-kaggle` (the CLI) or `build_bundle.py` (the bundle's command line), SIGTERM taken as an interrupt
    from before their first import."""
    take_sigterm()
    try:
        from trm_kaggle.stdout import tolerant_stderr

        tolerant_stderr()  # a closed or full stderr fails no command (`trm_kaggle.stdout`)
        if command == "build_bundle.py":
            from trm_kaggle.kaggle import main
        else:
            from trm_kaggle.cli import main
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM while the package loads
        status = interrupted(e)
    else:
        status = main()
    quiet_teardown()
    return status


def console() -> None:
    """The console script `trm-kaggle`."""
    sys.exit(run())


if __name__ == "__main__":  # `python -m trm_kaggle.console` ran nothing, exit 0: it is the CLI too
    console()
