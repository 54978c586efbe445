"""The one exception type users see.

Anything raised as `TRMError` is a problem with the user's input or environment,
reported by the CLI as a single line (no traceback) with a non-zero exit code.
Everything else is a bug and keeps its traceback.
"""


class TRMError(Exception):
    """A problem the user can fix: bad input file, wrong flag, missing path."""


class DataError(TRMError):
    """Malformed task or dataset content. The message names the file, task and problem."""


class UnreadableFile(DataError):
    """A file that cannot be read: missing, a directory, a device, FIFO or socket, no permission, a failing disk.
    Its bytes were never looked at, so it is never called damaged, renamed or replaced on that account."""


class DamagedFile(DataError):
    """A file that was read and holds the wrong bytes: truncated, corrupt, or not matching its checksum."""


# What an operation needed, by errno: the second half of the one line an OSError becomes.
_NEEDED = {
    "ENOSPC": "free space on its disk", "EDQUOT": "free quota on its disk",
    "EROFS": "a writable file system", "EACCES": "permission to read or write it",
    "EPERM": "permission to read or write it", "ENOENT": "it (or its folder) to exist",
    "ENOTDIR": "every part of the path before it to be a folder, not a file",
    "EISDIR": "a file, not a folder", "EEXIST": "the path to be free (something is already there)",
    "ENAMETOOLONG": "a shorter name", "EMFILE": "a higher open-file limit (ulimit -n)",
    "ENFILE": "fewer files open on this system", "EXDEV": "one file system",
    "ENOTEMPTY": "an empty folder", "EIO": "a working disk",
    "EFBIG": "a file size limit that allows it (ulimit -f)",
}


def with_path(e: OSError, path) -> OSError:
    """`e` naming `path` when it names no file (the OSError of a write names none). numpy's short write (`tofile`:
    "40000 requested and 28640 written", no errno) is said as what it is."""
    import re

    if e.filename is not None:
        return e
    said = e.strerror or str(e) or type(e).__name__
    if e.errno is None and (short := re.fullmatch(r"(\d+) requested and (\d+) written", str(e))):
        said = (f"a write was cut short ({short[1]} items requested, {short[2]} written): the disk is full, or the "
                "file past its size limit (needed: free space on its disk)")
    named = OSError(e.errno, said, str(path))
    named.__cause__ = e
    return named


def os_error_line(e: OSError) -> str:
    """One line for an OSError: the path, what the system said, and what the operation needed."""
    import errno

    name = errno.errorcode.get(e.errno or 0, "")
    path = e.filename
    if e.filename2 is not None:
        path = f"{path} -> {e.filename2}"
    said = e.strerror or str(e) or type(e).__name__
    needed = _NEEDED.get(name)
    return (f"{path}: " if path is not None else "") + said + (f" (needed: {needed})" if needed else "")


# What a process says when the system gave it no more memory (an address-space limit, `ulimit -v`, a container's
# limit or the machine's memory): Python's, torch's allocator's and the dynamic loader's words
_NO_MEMORY = ("can't allocate memory", "cannot allocate memory", "bad_alloc", "failed to map segment",
              "can't start new thread")


def _address_limit() -> str:
    """" under an address-space limit of N MiB (ulimit -v)" where one is set, else ""."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError, AttributeError):  # no such limit on this system
        return ""
    return "" if soft == resource.RLIM_INFINITY else f" under an address-space limit of {soft / 2**20:,.0f} MiB (ulimit -v)"


def resource_line(e: BaseException) -> str | None:
    """One line for a failure that came from the system's memory, not from the input: a MemoryError, an allocation
    torch's allocator could not make, a thread it could not start or a library it could not load (its stack or
    its code had no room); None for anything else. Under a tight `ulimit -v` these were tracebacks from wherever
    memory ran out (a sampler's thread, a lazy import in the loader's thread), or a missing-package message."""
    text = str(e)
    if not (isinstance(e, MemoryError) or (isinstance(e, (RuntimeError, ImportError, OSError))
                                           and any(m in text.lower() for m in _NO_MEMORY))):
        return None
    said = (text.strip().splitlines() or [type(e).__name__])[-1][:200]
    return (f"out of memory{_address_limit()}: {said}; give the process more memory (raise the limit), or lower "
            "what it holds (batch sizes, the model's size, --workers)")


def as_os_error(e: BaseException, path) -> OSError | None:
    """`e` as an OSError naming `path` (its own file when it names one), or None when it is no system error.

    Besides an OSError, an error of a library that gives the system's error only in its message is one
    (safetensors' writer: "Error while serializing: I/O error: File too large (os error 27)")."""
    import os
    import re

    if isinstance(e, OSError):
        return with_path(e, path)
    found = re.search(r"\(os error (\d+)\)", str(e))
    if found is None:
        return None
    code = int(found.group(1))
    return OSError(code, os.strerror(code), str(path))


def describe(e: BaseException) -> str:
    """One line for an exception caught to keep going (a task that failed): a user's problem as the CLI says
    it, an OSError with its file and what was needed, anything else with its type."""
    if isinstance(e, TRMError):
        text = str(e)
    elif isinstance(e, OSError):
        text = os_error_line(e)
    else:
        text = f"{type(e).__name__}: {e}"
    text = " ".join(text.split())  # one line, also for a library's multi-line message (pydantic's)
    return text if len(text) <= 500 else text[:500] + "..."
