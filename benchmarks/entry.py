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
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path


def _validation_error() -> type[BaseException] | tuple[()]:
    """pydantic's ValidationError where pydantic is loaded (only then can one be raised), else no class: a
    script's first instants do not pay for pydantic's import."""
    pydantic = sys.modules.get("pydantic")
    return pydantic.ValidationError if pydantic is not None else ()


def said(work: Callable[[], object]) -> int:
    """Run `work`; its status (an int it returns, else 0), or for a refusal, an invalid setting or a system
    error one `error:` line on stderr and status 2, as the package's commands say them. Its results (and its
    `--help`) reach standard output or it fails, as the package's commands do (`trm_kaggle.stdout`): a closed
    stdout is refused before any work, a full one or a reader gone is said as standard output's failure."""
    from trm_kaggle.errors import TRMError, os_error_line
    from trm_kaggle.names import current_folder_problem
    from trm_kaggle.stdout import checked_stdout
    from trm_kaggle.wording import one_line

    try:
        if problem := current_folder_problem():  # before torch's import, which dies in C there
            raise TRMError(problem)
        with checked_stdout():
            try:
                status = work()
            except SystemExit:  # argparse's --help: what it printed is flushed now, its failure said
                sys.stdout.flush()
                raise
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
        from trm_kaggle.names import current_folder_problem  # (a stop during its import is taken too)

        if problem := current_folder_problem():  # before torch's import, which dies in C there
            print(f"error: {problem}", file=sys.stderr)
            sys.exit(2)
        yield
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM / SIGHUP (`interrupts.Terminated`)
        status = interrupted(e)
        quiet_teardown()
        sys.exit(status)


MAX_COUNT = 10**9  # steps, rounds, examples: far above any run a benchmark makes


def check_options(counts: dict[str, object] | None = None, threads: dict[str, object] | None = None,
                  positive: dict[str, object] | None = None, least: int = 1) -> None:
    """A script's options, checked before any work: one TRMError naming every flag out of bounds (`said` prints it
    as one `error:` line, status 2). `counts` whole numbers from `least` to MAX_COUNT, `threads` from 1 to the
    package's MAX_THREADS (torch's set_num_threads took 99999 and the process crashed), `positive` finite numbers
    above 0 (a rate of 0 divided by zero after a minute's work). None: not given, the script's default."""
    import math

    from trm_kaggle.errors import TRMError
    from trm_kaggle.hardware import MAX_THREADS

    def whole(v) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    bad = [f"{k} {v}" for k, v in (counts or {}).items() if v is not None and not (whole(v) and least <= v <= MAX_COUNT)]
    bad += [f"{k} {v}" for k, v in (threads or {}).items() if v is not None and not (whole(v) and 1 <= v <= MAX_THREADS)]
    bad += [f"{k} {v}" for k, v in (positive or {}).items()
            if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0)]
    if bad:
        raise TRMError(f"{', '.join(bad)}: counts are whole numbers from {least} to {MAX_COUNT:,}, threads from 1 "
                       f"to {MAX_THREADS}, rates and seconds finite numbers above 0")


def scratch_problem(folder: Path, kind: str, reads: Sequence[object] = ()) -> str | None:
    """Why a script may not build `folder`, a folder of its own below its work folder, whole as a `kind` (the owner
    record of `trm_kaggle.atomic.atomic_directory`: what proves the script wrote it), or None. Refused: a symbolic
    link (what was written there landed where it points, outside the work folder), a folder holding anything the
    script did not write there, a folder that is or holds one of the script's inputs `reads` (`outputs.Input`)."""
    from trm_kaggle.atomic import replace_problem
    from trm_kaggle.outputs import Output, kept_problem

    return (_link_problem(folder) or kept_problem(reads, [Output(folder, f"{kind} folder", "replaced")])
            or replace_problem(folder, kind))


def _link_problem(folder: Path) -> str | None:
    """`folder`, one the script writes below its work folder, planted as a symbolic link: what it wrote landed where
    the link points, outside the work folder."""
    if not folder.is_symlink():
        return None
    return (f"{folder} is a symbolic link to {os.path.realpath(folder)}; the benchmark writes its folders inside its "
            "work folder, never through a link: remove the link")


def run_folder_problem(folder: Path, what: str = "run folder") -> str | None:
    """Why a script may not train in `folder`, a run folder of its own below its work folder (written in place, file
    by file, by the package's training, which keeps a user's files there), or None: a symbolic link (the run landed
    where it points, in a user's folder), a file in its place, a folder it cannot write."""
    from trm_kaggle.outputs import Output, writable_problem

    return _link_problem(folder) or writable_problem(Output(folder, what, "folder"))


#: What a script imports from `--upstream-dir`, upstream's checkout: its models/ package (the model, its layers, the
#: ACT loss head, the sparse SignSGD)
UPSTREAM_FILES = ("models/recursive_reasoning/trm.py", "models/layers.py", "models/losses.py",
                  "models/sparse_embedding.py")


def upstream_problem(folder: str | os.PathLike) -> str | None:
    """Why `folder`, a script's `--upstream-dir`, is no checkout of upstream's code to import (`UPSTREAM_FILES`),
    or None: said before any work, where the import's ModuleNotFoundError came after our side's timings."""
    if not os.path.isdir(folder):
        return f"--upstream-dir {os.fspath(folder)} is not a folder: name a checkout of upstream's code"
    if missing := [f for f in UPSTREAM_FILES if not os.path.isfile(os.path.join(folder, f))]:
        return (f"--upstream-dir {os.fspath(folder)} is not a checkout of upstream's code: it lacks "
                f"{', '.join(missing)}")
    return None


@contextlib.contextmanager
def scratch_folder(folder: Path, kind: str, reads: Sequence[object] = ()) -> Iterator[Path]:
    """An empty folder to write `folder`'s files into, put in `folder`'s place whole when the block ends (a stop or a
    full disk leaves the old one, never a cut file), once `scratch_problem` allows it."""
    from trm_kaggle.atomic import atomic_directory
    from trm_kaggle.errors import TRMError

    if problem := scratch_problem(folder, kind, reads):
        raise TRMError(problem)
    with atomic_directory(folder, kind=kind) as tmp:
        yield tmp


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


# ---------------------------------------------------------------------------
# What a script writes: its work folder, its scratch, its child processes
# ---------------------------------------------------------------------------


@contextlib.contextmanager
def work_folder(named: str | Path | None, prefix: str, writes: Sequence[str], what: str,
                check: Callable[[Path], None] | None = None) -> Iterator[Path]:
    """The script's work folder while the block runs. None named: a scratch folder of its own in TMPDIR (`prefix`),
    removed on any exit, a stop included (a stopped build once left a gigabyte there). A folder named: one it can
    write, held by the package's lock for the block (a second script there is refused in one line naming the
    first), and each entry of `writes` (what the script writes there afresh, and may remove) refused before any
    work when anything is there, a link included: the script did not write it, and building on it or removing it
    afterwards once lost a user's folder. `check(work)`, the script's own checks of what it writes there (its
    folders built whole: `scratch_problem`), runs once no live script holds the folder, before it is locked.
    `what` names the script in the lock's holder record."""
    import shutil
    import tempfile

    from trm_kaggle.errors import TRMError
    from trm_kaggle.locks import directory_lock, refuse_if_held
    from trm_kaggle.outputs import Output, writable_problem

    if named is None:
        scratch = Path(tempfile.mkdtemp(prefix=prefix))
        try:
            if check is not None:
                check(scratch)
            yield scratch
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return
    work = Path(named)
    if problem := writable_problem(Output(work, "--work-dir", "folder")):
        raise TRMError(problem)
    # a folder every user writes in (/tmp, named or through a link): the script's lock there held every command out
    # of all of /tmp, and what it writes there anyone could have planted first
    if work.is_dir() and os.stat(work).st_mode & 0o002:
        raise TRMError(f"--work-dir {work}{f' (a link to {os.path.realpath(work)})' if work.is_symlink() else ''} is "
                       "a folder others may write in, shared by every user: name a folder of your own inside it")
    refuse_if_held(work)  # a live script there is named first: its entries are its own
    for name in writes:
        if (work / name).is_symlink() or (work / name).exists():
            raise TRMError(f"{work / name} is already there, and this benchmark writes that entry of its work folder "
                           "afresh and removes it: it did not write what is there; move it, or choose another "
                           "--work-dir")
    if check is not None:
        check(work)
    with directory_lock(work, what):
        yield work


@contextlib.contextmanager
def ended(proc: subprocess.Popen, grace_s: float = 5.0) -> Iterator[subprocess.Popen]:
    """`proc`, a child the script started, ended whenever the block leaves it running (a stop, an error): asked to
    stop (SIGTERM: the package's commands stop their workers and say it), `grace_s` seconds to do so, then killed,
    so no child works on behind the script's `interrupted` line."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                pass
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()


def child_failed(what: str, status: int, stderr: str) -> Exception:
    """The refusal for a child process that failed (`raise child_failed(...)`): one line with its status and its
    last line said (its `error:` line where it printed one), where its whole stderr once followed a command line
    (three lines, status 1)."""
    from trm_kaggle.errors import TRMError

    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    last = next((line for line in reversed(lines) if line.startswith("error: ")), lines[-1] if lines else "")
    return TRMError(f"{what} failed (exit {status})" + (f": {last.removeprefix('error: ')}" if last else ""))
