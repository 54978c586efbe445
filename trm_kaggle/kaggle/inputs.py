"""What the kernel finds under its input root (/kaggle/input): the competition's challenges file.

Kaggle mounts a competition at `<root>/<slug>/`, and newer images at `<root>/competitions/<slug>/`, so the
kernel looks for `arc-agi_test_challenges.json` one and two folders below the root, whatever the folders
are called: arc-prize-2024, arc-prize-2025, arc-prize-2026-arc-agi-2 or a renamed copy all work. It wants
exactly one (files are told apart by resolved path, so an alias of the same mount is no second one, and by
their bytes, so the same competition mounted in both layouts is one file: of such copies the first by path is
taken, and said); of several, the one in the folder named for the kernel's own competition (the notebook's
COMPETITION, which the bundle sets to the slug its metadata attaches). None, or several without one of its
competition, stop the kernel with a list of what it did find (the notebook's CHALLENGES parameter names the file
instead).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

from trm_kaggle.errors import TRMError
from trm_kaggle.jsonio import read_bytes

CHALLENGES_NAME = "arc-agi_test_challenges.json"
PATTERNS = (f"*/{CHALLENGES_NAME}", f"*/*/{CHALLENGES_NAME}")


def _listing(root: Path, limit: int = 12) -> str:
    """The folders under `root` and any *challenges*.json one or two folders down, for an error message."""
    folders = sorted(p.name + "/" for p in root.iterdir() if p.is_dir())
    files = sorted({str(p.relative_to(root)) for pattern in ("*/*challenges*.json", "*/*/*challenges*.json")
                    for p in root.glob(pattern)})

    def some(items: list[str]) -> str:
        return ", ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")

    return (f"folders: {some(folders) or 'none'}; challenges files: {some(files) or 'none'}")


def _copies(paths: list[Path]) -> list[list[Path]]:
    """`paths` (sorted) grouped by their bytes, each group in path order: byte-identical copies (one competition
    mounted in both layouts) are one file. A file that cannot be read is a copy of none."""
    groups: dict[object, list[Path]] = {}
    for path in paths:
        try:
            key: object = hashlib.sha256(read_bytes(path, "challenges file")).hexdigest()
        except (TRMError, OSError):  # unreadable: its own group, named as one of the different files
            key = path
        groups.setdefault(key, []).append(path)
    return list(groups.values())


def _first(copies: list[Path], competition: str | None, root: Path, echo: Callable[[str], None] | None) -> Path:
    """Of byte-identical `copies`, the first by path in the folder named `competition` (else the first by path);
    the others are said in one line through `echo`."""
    chosen = next((p for p in copies if competition and p.parent.name == competition), copies[0])
    if len(copies) > 1 and echo is not None:
        others = ", ".join(str(p.relative_to(root)) for p in copies if p != chosen)
        echo(f"{len(copies)} copies of {CHALLENGES_NAME} with the same bytes below {root}: one file, using "
             f"{chosen.relative_to(root)} (not {others})")
    return chosen


def find_challenges(root: str | os.PathLike, competition: str | None = None,
                    echo: Callable[[str], None] | None = None) -> Path:
    """The one `arc-agi_test_challenges.json` one or two folders below `root` (copies with the same bytes are one
    file, the first by path taken and said through `echo`), or of several the one in the folder named
    `competition`; TRMError listing what is there when there is none, or several and not one of `competition`."""
    root = Path(root)
    if not root.is_dir():
        raise TRMError(f"the input root {root} is not a directory: attach the competition's data (or set "
                       f"CHALLENGES to the challenges file)")
    unique: dict[Path, Path] = {}  # the same file reached twice (a linked alias of a mount) counts once
    for path in sorted(p for pattern in PATTERNS for p in root.glob(pattern) if p.is_file()):
        unique.setdefault(path.resolve(), path)
    found = sorted(unique.values())
    if not found:
        raise TRMError(f"no {CHALLENGES_NAME} one or two folders below {root}: attach the ARC competition (or set "
                       f"CHALLENGES). Found {_listing(root)}")
    groups = _copies(found) if len(found) > 1 else [found]
    if len(groups) == 1:
        return _first(groups[0], competition, root, echo)
    own = [g for g in groups if competition and any(p.parent.name == competition for p in g)]
    if len(own) == 1:
        return _first(own[0], competition, root, echo)
    copies = " (copies with the same bytes counted once)" if len(groups) < len(found) else ""
    raise TRMError(f"{len(groups)} files named {CHALLENGES_NAME} below {root}{copies}: "
                   f"{', '.join(str(p.relative_to(root)) for p in found)}; set CHALLENGES to the one to solve")
