"""What the kernel finds under its input root (/kaggle/input): the competition's challenges file.

Kaggle mounts a competition at `<root>/<slug>/`, and newer images at `<root>/competitions/<slug>/`, so the
kernel looks for `arc-agi_test_challenges.json` one and two folders below the root, whatever the folders
are called: arc-prize-2024, arc-prize-2025, arc-prize-2026-arc-agi-2 or a renamed copy all work. It wants
exactly one (files are told apart by resolved path, so an alias of the same mount is no second one); of several,
the one in the folder named for the kernel's own competition (the notebook's COMPETITION, which the bundle sets
to the slug its metadata attaches). None, or several without one of its competition, stop the kernel with a list
of what it did find (the notebook's CHALLENGES parameter names the file instead).
"""

from __future__ import annotations

import os
from pathlib import Path

from trm_kaggle.errors import TRMError

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


def find_challenges(root: str | os.PathLike, competition: str | None = None) -> Path:
    """The one `arc-agi_test_challenges.json` one or two folders below `root`, or of several the one in the
    folder named `competition`; TRMError listing what is there when there is none, or several and not one of
    `competition`."""
    root = Path(root)
    if not root.is_dir():
        raise TRMError(f"the input root {root} is not a directory: attach the competition's data (or set "
                       f"CHALLENGES to the challenges file)")
    unique: dict[Path, Path] = {}  # the same file reached twice (a linked alias of a mount) counts once
    for path in sorted(p for pattern in PATTERNS for p in root.glob(pattern) if p.is_file()):
        unique.setdefault(path.resolve(), path)
    found = sorted(unique.values())
    if len(found) == 1:
        return found[0]
    if not found:
        raise TRMError(f"no {CHALLENGES_NAME} one or two folders below {root}: attach the ARC competition (or set "
                       f"CHALLENGES). Found {_listing(root)}")
    own = [p for p in found if competition and p.parent.name == competition]
    if len(own) == 1:
        return own[0]
    raise TRMError(f"{len(found)} files named {CHALLENGES_NAME} below {root}: "
                   f"{', '.join(str(p.relative_to(root)) for p in found)}; set CHALLENGES to the one to solve")
