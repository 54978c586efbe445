"""How a benchmark script starts and ends: as the package's commands do (`trm_kaggle.console`).

    if __name__ == "__main__":
        from benchmarks.entry import command   # the repository's root on sys.path (each script puts it there)

        sys.exit(command(main))

SIGTERM and SIGHUP stop the script as Ctrl-C does, and a stop ends in the one line and status of the package's
commands (`interrupted: stopped by SIGTERM`, 128 + the signal's number; Ctrl-C: `interrupted`, 130). A refusal
of the package (`TRMError`: a work folder holding a user's files, a file where a folder should be), a setting
its configs refuse (`lr=nan`) or a system error (a full disk, a read-only folder) is one `error:` line and
status 2, never a traceback. This module imports nothing heavy, and a script takes stops before its own heavy
imports (torch, numpy, the package), so a stop in its first second is said too:

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: benchmarks.entry
    from benchmarks.entry import loading  # noqa: E402

    with loading(__name__):
        import torch
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator


def _validation_error() -> type[BaseException] | tuple[()]:
    """pydantic's ValidationError where pydantic is loaded (only then can one be raised), else no class: a
    script's first instants do not pay for pydantic's import."""
    pydantic = sys.modules.get("pydantic")
    return pydantic.ValidationError if pydantic is not None else ()


def said(work: Callable[[], object]) -> int:
    """Run `work`; its status (an int it returns, else 0), or for a refusal, an invalid setting or a system
    error one `error:` line on stderr and status 2, as the package's commands say them."""
    from trm_kaggle.errors import TRMError, os_error_line
    from trm_kaggle.wording import one_line

    try:
        status = work()
    except TRMError as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    except _validation_error() as e:  # a config built from the script's options refused a value
        from trm_kaggle.config import validation_line

        print(f"error: invalid setting: {one_line(validation_line(e))}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: {one_line(os_error_line(e))}", file=sys.stderr)
        return 2
    return status if isinstance(status, int) else 0


@contextlib.contextmanager
def loading(name: str) -> Iterator[None]:
    """A script's imports beyond the standard library, `name` its `__name__`: run as a script, SIGTERM and SIGHUP
    are taken as Ctrl-C from here on (as `command` takes them), and a stop while they load (torch takes a second
    or two) ends the script in `command`'s line and status, where Python would end it without a word (SIGTERM)
    or in a KeyboardInterrupt traceback. Imported (a test, another script), the block changes nothing."""
    if name != "__main__":
        yield
        return
    from trm_kaggle.interrupts import interrupted, quiet_teardown, take_sigterm

    take_sigterm()
    try:
        yield
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM / SIGHUP (`interrupts.Terminated`)
        status = interrupted(e)
        quiet_teardown()
        sys.exit(status)


def command(main: Callable[[], object]) -> int:
    """The script's exit status: `main` run by `said`, SIGTERM and SIGHUP taken as Ctrl-C from now on (taken
    again where `loading` took them: the same handlers), and a stop said in its one line. Afterwards a signal ends
    the process without a word (its last line is said)."""
    from trm_kaggle.interrupts import interrupted, quiet_teardown, take_sigterm

    take_sigterm()
    try:
        return said(main)
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM / SIGHUP (`interrupts.Terminated`)
        return interrupted(e)
    finally:
        quiet_teardown()
