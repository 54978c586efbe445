"""Reading JSON files with one clear error: which file, and where in it, went wrong."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from trm_kaggle.errors import DataError


def read_json(path: str | os.PathLike, what: str = "JSON file", hint: str | None = None) -> Any:
    """Parsed JSON, or DataError naming the file (and the line/column of a syntax error).

    `what` names the file's role in messages ("dataset.json", "challenges file"); `hint` is added
    when the file does not exist (e.g. what usually produces it).
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            return json.load(f)
    except FileNotFoundError:
        raise DataError(f"{path}: {what} not found" + (f" ({hint})" if hint else "")) from None
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: unreadable {what}: {e.msg} at line {e.lineno}, column {e.colno} "
                        f"(character {e.pos})") from None
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: unreadable {what}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except IsADirectoryError:
        raise DataError(f"{path}: {what} expected, found a directory") from None
    except OSError as e:
        raise DataError(f"{path}: unreadable {what}: {e.strerror or e}") from None
