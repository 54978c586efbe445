"""The experiment functions' arguments, checked where a Python caller gives them: a wrong type is one TypeError
naming the argument, before any work. A str where a list of names goes was read a character at a time (the
presets 's', 'u', ...; the seeds '10' as [1, 0]), and None or a number where a path goes was pathlib's TypeError,
naming no argument."""

from __future__ import annotations

import os
from typing import Iterable

from trm_kaggle.wording import type_name


def path_argument(name: str, value: object, what: str = "a path", optional: bool = False) -> str | os.PathLike | None:
    """`value` when it is a path (a str or os.PathLike), or None where `optional`; else a TypeError naming `name`
    (`what`: the path of what)."""
    if not isinstance(value, (str, os.PathLike)) and not (optional and value is None):
        raise TypeError(f"{name}: expected {what} (a str or os.PathLike){', or None' if optional else ''}, got "
                        f"{type_name(value)}")
    return value


def texts_argument(name: str, value: object, what: str) -> list[str]:
    """`value`, a list (or other iterable) of str, as a list; a TypeError naming `name` for one str (its characters
    are no list of `what`), anything else that is no iterable, or an item that is no str."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        hint = f" ([{value!r}] for one)" if isinstance(value, str) and len(value) < 80 else ""
        raise TypeError(f"{name}: expected a list of {what}{hint}, got {type_name(value)}")
    items = list(value)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise TypeError(f"{name}[{i}]: expected a str, one of the {what}, got {type_name(item)}")
    return items


def sequence_argument(name: str, value: object, what: str) -> list:
    """`value`, a list (or other iterable) that is no str or bytes, as a list (its items are checked by the caller);
    else a TypeError naming `name`."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"{name}: expected a list of {what}, got {type_name(value)}")
    return list(value)
