"""The one JSON reader: every JSON file (and JSON line) of the package is parsed here; and the one gate
(`open_regular`) through which every file we did not just write is opened, JSON or not.

Whatever is wrong with a file, the caller gets one `DataError` line naming the file and
the problem, never a traceback: missing, a directory, a device, FIFO or socket (never read: it may never end),
unreadable (no permission: `UnreadableFile`, never called damaged), larger than `MAX_BYTES` (at most
that many bytes are ever read),
empty, not UTF-8 (UTF-8 with a byte-order mark and UTF-16/32 with one are read as text
editors write them), truncated or otherwise invalid (with line and column), nested deeper
than Python's parser goes (about 1,000 levels: its RecursionError becomes one line), or an
object with the same key twice (JSON leaves that undefined;
Python would keep the last value silently).
"""

from __future__ import annotations

import codecs
import errno
import functools
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any, BinaryIO, Callable

from trm_kaggle.errors import DataError, UnreadableFile

MAX_BYTES = 4 << 30  # larger than any file the package writes (identifiers.json of 1,000 x 1,000 puzzles: ~40 MB)

_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
         (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


def _text(data: bytes) -> str:
    """Bytes -> text: UTF-8, or the encoding its byte-order mark names. UnicodeDecodeError otherwise."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data.decode(encoding)
    return data.decode("utf-8")


class RepeatedKeys(dict):
    """An object of a file read with a duplicate collector whose keys repeat (the last value of each kept, as
    Python's own json reader and so every other reader of the same file keeps it);
    `repeated` lists them. Left where it stands below the top level: the part of the file that holds it (one
    task of a challenges file) is refused by its own check, not the whole file."""

    repeated: list[str]


def _no_duplicates(on_duplicate: Callable[[str], None] | None) -> Callable[[list], dict]:
    def hook(pairs: list) -> dict:
        out = dict(pairs)
        if len(out) != len(pairs):
            seen: set = set()
            repeated = []
            for key, _ in pairs:
                if key in seen:
                    if on_duplicate is None:
                        raise DataError(f"the key {key!r} appears twice in one object")
                    repeated.append(key)
                seen.add(key)
            out = RepeatedKeys(pairs)  # with a collector: the last occurrence is kept, as `dict(pairs)` does
            out.repeated = repeated
        return out

    return hook


def repeated_key(value: Any) -> str | None:
    """The first repeated key of an object anywhere inside `value` (read with a duplicate collector), or None."""
    if isinstance(value, RepeatedKeys):
        return value.repeated[0]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return next((k for v in items if isinstance(v, (dict, list)) and (k := repeated_key(v)) is not None), None)


#: The longest integer any reader takes, in digits: Python's own limit on converting text to int (beyond it, its
#: ValueError would be a traceback); no number of this package needs a twentieth of it.
MAX_INT_DIGITS = 4300


def checked_int(text: str) -> int:
    """`int(text)` of an integer written in a file, or DataError for one longer than MAX_INT_DIGITS digits (the
    JSON and YAML readers' one rule)."""
    digits = len(text.lstrip("+-").replace("_", ""))
    if digits > MAX_INT_DIGITS:
        raise DataError(f"an integer of {digits:,} digits (at most {MAX_INT_DIGITS:,} are read)")
    return int(text)


def parse_json(data: bytes | str, where: str, what: str = "JSON",
               on_duplicate: Callable[[str], None] | None = None) -> Any:
    """Parsed JSON text, or DataError `"{where}: ..."` with one line for any problem.

    `on_duplicate(key)` is called for each repeated key of the top-level object (the last value is
    kept, as by Python's json; a nested object whose keys repeat is a `RepeatedKeys`, for its reader to refuse); without it a
    repeated key anywhere is an error.
    """
    try:
        text = _text(data) if isinstance(data, (bytes, bytearray)) else data
    except UnicodeDecodeError as e:
        raise DataError(f"{where}: unreadable {what}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset "
                        f"{e.start}; save it as UTF-8)") from None
    if not text.strip():  # a byte-order mark or blank space alone is no empty file, and holds no JSON either
        said = "the file is empty" if not data else "the file holds no JSON (blank space or a byte-order mark only)"
        raise DataError(f"{where}: unreadable {what}: {said}")
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates(on_duplicate), parse_int=checked_int)
    except json.JSONDecodeError as e:
        end = " (the file ends early: truncated?)" if e.pos >= len(text.rstrip()) else ""
        said = e.msg.removesuffix(" at")  # json's "Unterminated string starting at" names the place itself
        raise DataError(f"{where}: unreadable {what}: {said} at line {e.lineno}, column {e.colno}{end}") from None
    except DataError as e:
        raise DataError(f"{where}: unreadable {what}: {e}") from None
    except RecursionError:  # Python's parser recurses once per level and stops near sys.getrecursionlimit()
        raise DataError(f"{where}: unreadable {what}: nested too deeply (no file of this package nests more "
                        "than 10 levels)") from None
    if isinstance(value, RepeatedKeys) and on_duplicate is not None:
        for key in value.repeated:
            on_duplicate(key)
    return value


_KINDS = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a pipe (FIFO)"),
          (stat.S_ISSOCK, "a socket"))


def not_regular(mode: int) -> str | None:
    """What a file of st_mode `mode` is when it is neither a regular file nor a directory (None otherwise)."""
    return next((kind for test, kind in _KINDS if test(mode)), None if stat.S_ISREG(mode) or stat.S_ISDIR(mode)
                else "not a regular file")


def _not_a_folder(path: Path) -> str:
    """Which part of `path` stands where a folder should, and what it is (`--weights` a link to /dev/zero)."""
    for part in reversed(path.parents):
        try:
            mode = os.stat(part).st_mode
        except OSError:
            break
        if not stat.S_ISDIR(mode):
            return f"{part} is {not_regular(mode) or 'a file'}, not a folder"
    return "a part of the path is a file, not a folder"


def open_regular(path: str | os.PathLike, what: str = "file", hint: str | None = None) -> BinaryIO:
    """`path` opened for reading in binary, checked to be a regular file: the one gate of every reader of a
    file we did not just write (JSON, train states, weights, dataset arrays).

    Whatever stops the read is an `UnreadableFile` line naming the cause: missing, a directory, a device,
    FIFO or socket, no permission, a failing disk. Such a file is not damaged (its bytes were never looked at)
    and nothing may be renamed or replaced on its account. The file is opened without blocking and checked on
    the open descriptor: a FIFO (whose open() waits for a writer forever), a device (/dev/zero, /dev/urandom,
    also behind a symbolic link) or a socket is refused before a byte is read. So is a file of the kernel's
    /proc or /sys: they call themselves regular, yet some never end (/proc/kmsg waits for the next message)."""
    path = Path(path)
    if "\0" in os.fspath(path):  # no file has such a name: the system's "embedded null byte" named nothing
        raise UnreadableFile(f"{os.fspath(path)!r}: {what} path holds a NUL byte, which no file name can")
    if _kernel_file(path) and os.path.exists(path):  # one that is not there is said missing below
        raise UnreadableFile(_special_line(path, what, KERNEL_FILE))
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        if os.path.islink(path):  # there, but pointing nowhere: "not found" would hide the link
            raise UnreadableFile(f"{path}: {what} is a symbolic link to {os.readlink(path)}, which does not exist (a "
                                 "dangling link)") from None
        raise UnreadableFile(f"{path}: {what} not found" + (f" ({hint})" if hint else "")) from None
    except IsADirectoryError:
        raise UnreadableFile(f"{path}: {what} expected, found a directory") from None
    except NotADirectoryError:
        raise UnreadableFile(f"{path}: {what} not found ({_not_a_folder(path)})") from None
    except OSError as e:  # no permission, a failing disk, too many open files; a socket cannot be opened (ENXIO)
        try:
            kind = not_regular(os.stat(path).st_mode)
        except (OSError, ValueError):
            kind = None
        raise UnreadableFile(_special_line(path, what, kind) if kind else cannot_read(path, what, e)) from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise UnreadableFile(f"{path}: {what} expected, found a directory")
        kind = not_regular(st.st_mode) or (KERNEL_FILE if kernel_filesystem(st.st_dev) else None)
        if kind:
            raise UnreadableFile(_special_line(path, what, kind))
        if hasattr(os, "O_NONBLOCK"):  # a regular file reads alike either way; readers expect a blocking file
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


KERNEL_FILE = "a file of the kernel's /proc or /sys"


def _kernel_file(path: str | os.PathLike) -> bool:
    """Whether `path` leads (through links) into Linux's /proc or /sys, whose files are no data of ours."""
    return sys.platform.startswith("linux") and os.path.realpath(path).split(os.sep)[1:2] in (["proc"], ["sys"])


#: Linux file systems whose files the kernel makes up as they are read (a procfs mounted anywhere, not only at
#: /proc: its files too call themselves regular, and some never end).
KERNEL_FILESYSTEMS = frozenset({"proc", "sysfs", "debugfs", "tracefs", "securityfs", "configfs", "cgroup", "cgroup2",
                                "pstore", "bpf", "efivarfs", "fusectl", "binfmt_misc"})


@functools.lru_cache(maxsize=64)
def kernel_filesystem(device: int) -> str | None:
    """The kernel file system (`KERNEL_FILESYSTEMS`) that holds files of st_dev `device`, or None: looked up in
    /proc/self/mountinfo, only for the devices of no disk (major number 0: virtual file systems, also tmpfs,
    overlay, btrfs); None where that table cannot be read (not Linux, no /proc)."""
    if not sys.platform.startswith("linux") or os.major(device) != 0:
        return None
    wanted = f"{os.major(device)}:{os.minor(device)}"
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            table = f.read(1 << 22)
    except OSError:
        return None
    for line in table.splitlines():  # "36 35 0:21 / /mnt/p rw,relatime - proc proc rw": the type after " - "
        fields, _, rest = line.partition(" - ")
        parts, kind = fields.split(), rest.split()[:1]
        if len(parts) > 2 and parts[2] == wanted and kind and kind[0] in KERNEL_FILESYSTEMS:
            return kind[0]
    return None


def _special_line(path: str | os.PathLike, what: str, kind: str) -> str:
    target = os.path.realpath(path)
    links = f" (it links to {target})" if target != os.path.abspath(path) else ""
    return f"{path}: {what} must be a regular file, not {kind}{links}; it is not read (it may never end)"


def unreachable_problem(path: str | os.PathLike, what: str = "file") -> str | None:
    """`"{path}: ..."` when the system will not look `path` up for this user (a folder on its way without
    search permission): whether a file is there cannot be told, and a caller that said "not found" sent the user
    looking for a file that was there. None for anything else."""
    try:
        os.stat(path)
    except PermissionError:
        return (f"{path}: {what} cannot be reached: a folder on its path does not let this user in (Permission "
                "denied); whether it is there cannot be told: make that folder searchable (chmod +x)")
    except (OSError, ValueError):
        pass
    return None


def is_regular(path: str | os.PathLike, what: str = "file") -> bool:
    """Whether `path` is a regular file (through links), for a caller that picks by it: read it or say it is
    missing, treat an argument as a file or as a folder. `Path.is_file()` is False for a FIFO, a device or a
    socket too, which would then be called missing or not a file of the kind; here such a file is refused with
    `open_regular`'s line (`UnreadableFile`), without being opened. False when nothing, or a folder, is there,
    or when this user may not look the path up (`unreachable_problem` tells that apart)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):  # missing, a dangling link, a NUL in the name: as is_file() answers
        return False
    mode = st.st_mode
    kernel = stat.S_ISREG(mode) and (_kernel_file(path) or kernel_filesystem(st.st_dev))
    if kind := not_regular(mode) or (KERNEL_FILE if kernel else None):
        raise UnreadableFile(_special_line(path, what, kind))
    return stat.S_ISREG(mode)


def loop_problem(path: str | os.PathLike, what: str = "path") -> str | None:
    """`"{path}: ..."` when reaching `path` never ends: it, or a folder on its way, is a loop of symbolic links
    (`a -> b -> a`); None for anything else. The system's "Too many levels of symbolic links" read as "not found"
    sent the user looking for a missing folder."""
    try:
        os.stat(path)
        return None
    except ValueError:  # a NUL in the name
        return None
    except OSError as e:
        if e.errno != errno.ELOOP:
            return None
    if os.path.islink(path):  # the name itself is a link (lstat of a name below a loop fails: it is no link)
        return f"{path}: {what} is a loop of symbolic links (a dangling link): remove the link"
    return f"{path}: {what} cannot be reached: a folder on its path is a loop of symbolic links; remove that link"


def directory_problem(path: str | os.PathLike, what: str = "directory") -> str | None:
    """`"{path}: ..."`, what stands where a directory `what` is expected, or None when a directory is there (through
    links): not found, a loop of links, a file, or a special file named as what it is (a FIFO or a link to
    /dev/zero is never called missing)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.islink(path):  # a dangling link is no typo: said as what it is
            return f"{path}: {what} not found (a symbolic link to {os.readlink(path)}, which does not exist)"
        return f"{path}: {what} not found"
    except (OSError, ValueError) as e:  # a part of the path is a file, a loop of links, no permission, a NUL
        return loop_problem(path, what) or f"{path}: {what} not found ({getattr(e, 'strerror', None) or e})"
    if stat.S_ISDIR(mode):
        return None
    target = os.path.realpath(path)
    links = f" (it links to {target})" if target != os.path.abspath(path) else ""
    return f"{path}: {what} expected, found {not_regular(mode) or 'a file'}{links}"


def cannot_read(path: str | os.PathLike, what: str, e: OSError) -> str:
    """One line for an OSError met while opening or reading `path`: it cannot be read, which is not damage."""
    said = e.strerror or str(e) or type(e).__name__
    if isinstance(e, PermissionError):
        return (f"{path}: cannot read {what}: {said} (a permission, not damage: the file was left as it is; "
                "give this user read access to it)")
    return f"{path}: cannot read {what}: {said}"


#: What the system says when a read fails whatever the file holds (a failing or vanished disk, a permission taken
#: away): not damage. Other OSErrors of a parser (EINVAL of a seek past the end of a truncated file) are damage.
READ_FAILURES = frozenset({errno.EIO, errno.EACCES, errno.EPERM, errno.ENXIO, errno.ENODEV, errno.ESTALE,
                           errno.ETIMEDOUT, errno.EMFILE, errno.ENFILE})  # an open-file limit: no damage either


def read_failure(e: BaseException, path: str | os.PathLike, what: str) -> UnreadableFile | None:
    """`e`, an error of a parser reading `path`, as the `UnreadableFile` it is when the system failed the read
    (`READ_FAILURES`); None when it says something about the bytes (damage, for the caller to name)."""
    if isinstance(e, OSError) and e.errno in READ_FAILURES:
        return UnreadableFile(cannot_read(path, what, e))
    return None


def readable_file(path: str | os.PathLike, what: str = "file", hint: str | None = None) -> os.stat_result:
    """The stat of `path` after `open_regular` opened it (and closed it again): for readers that need a path
    (numpy's memory maps, safetensors), so that they never block on a FIFO nor call a missing permission damage."""
    with open_regular(path, what, hint) as f:
        return os.fstat(f.fileno())


def private_problem(st: os.stat_result) -> str | None:
    """Why a file of stat `st` cannot be trusted as this user's secret (another owner, or a mode that lets others
    read or write it); None when it can. Systems without user ids trust any."""
    if not hasattr(os, "getuid"):
        return None
    if st.st_uid != os.getuid():
        return f"it belongs to user id {st.st_uid}, not to this user ({os.getuid()})"
    if st.st_mode & 0o077:
        return f"its mode {stat.S_IMODE(st.st_mode):04o} lets other users read or change it (chmod 600 it)"
    return None


def read_bytes(path: str | os.PathLike, what: str = "file", hint: str | None = None, max_bytes: int | None = None,
               private: bool = False) -> bytes:
    """The bytes of a regular file, read through `open_regular`: at most `max_bytes` (default `MAX_BYTES`), a file
    that grows past the cap while it is read refused. `private`: the file holds a secret of this user (a key),
    and one owned by another user or open to others (`private_problem`) is refused before a byte is read."""
    return _read_bytes(Path(path), what, hint, max_bytes, private)


def _read_bytes(path: Path, what: str, hint: str | None, max_bytes: int | None = None, private: bool = False) -> bytes:
    """The bytes of a regular file (`open_regular`), at most `max_bytes` of them; a file that grows past the
    cap while it is read is refused."""
    max_bytes = MAX_BYTES if max_bytes is None else max_bytes
    too_large = f"{path}: {what} of {{:,}} bytes is larger than the {max_bytes:,} bytes this package reads"
    with open_regular(path, what, hint) as f:
        try:
            size = os.fstat(f.fileno()).st_size
            if private and (problem := private_problem(os.fstat(f.fileno()))):
                raise DataError(f"{path}: {what} not trusted: {problem}")
            if size > max_bytes:
                raise DataError(too_large.format(size))
            data = f.read(size + 1)  # read(n) allocates n bytes first: never the cap itself
            while len(data) > size and len(data) <= max_bytes:  # it grew while being read: the rest, still capped
                more = f.read(min(1 << 20, max_bytes + 1 - len(data)))
                if not more:
                    break
                data += more
            if len(data) > max_bytes:
                raise DataError(too_large.format(len(data)) + " (it grew while being read)")
            return data
        except OSError as e:
            raise UnreadableFile(cannot_read(path, what, e)) from None


def read_text(path: str | os.PathLike, what: str = "text file", hint: str | None = None,
              max_bytes: int | None = None) -> str:
    """A text file (YAML configs, JSON lines) decoded as `read_json` decodes, with the same one-line errors;
    at most `max_bytes` (default `MAX_BYTES`)."""
    path = Path(path)
    try:
        return _text(_read_bytes(path, what, hint, max_bytes))
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: unreadable {what}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset "
                        f"{e.start}; save it as UTF-8)") from None


def read_json_lines(path: str | os.PathLike, what: str = "JSON lines file") -> list[tuple[int, str, Any]]:
    """(line number, text, value) of each non-empty line of a JSON-lines file (a log appended to: metrics.jsonl,
    regress's history.jsonl). A line that is not one JSON value (cut off by a kill, bytes that are not UTF-8
    such as 0x00 0xff) has the value None, and text "" when it is not even UTF-8: one bad line never costs
    the others. The file itself is read as `read_json` reads (a FIFO or no permission: one line)."""
    out = []
    for number, raw in enumerate(_read_bytes(Path(path), what, None).split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8-sig").rstrip("\r")  # a byte-order mark (Windows editors) is no content
        except UnicodeDecodeError:
            out.append((number, "", None))
            continue
        try:
            out.append((number, text, parse_json(text, f"{path}:{number}", what)))
        except DataError:
            out.append((number, text, None))
    return out


def read_json(path: str | os.PathLike, what: str = "JSON file", hint: str | None = None,
              on_duplicate: Callable[[str], None] | None = None) -> Any:
    """Parsed JSON of a file, or DataError naming the file and the one problem.

    `what` names the file's role in messages ("dataset.json", "challenges file"); `hint` is added
    when the file does not exist (e.g. what usually produces it).
    """
    path = Path(path)
    return parse_json(_read_bytes(path, what, hint), str(path), what, on_duplicate)
