"""What every config shares: the base model that checks every number, the bounds several configs use, the one
line a validation error prints as, and the help text an option takes from its field."""

from __future__ import annotations

import argparse
import math
import numbers
import operator
import os
import re
import typing
import weakref
from typing import Iterable, Literal, Mapping, Optional

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator

from trm_kaggle.errors import TRMError
from trm_kaggle.names import blank_path_problem, typed_name
from trm_kaggle.wording import clipped, one_line, type_name


def validation_line(e: ValidationError, names: Optional[Mapping[str, str]] = None) -> str:
    """A pydantic error as one line: `field.path: message; ...` (the CLI's and every config reader's).

    `names` maps a field to what the user typed for it (the CLI: `train_seconds` -> `--train-seconds`): the
    field of each error is shown by that name, and so are the fields a whole-model error's message names."""
    names = names or {}

    def one(err) -> str:
        loc = [str(part) for part in err["loc"]]
        msg = err["msg"].removeprefix("Value error, ")  # pydantic's words before our own checks' messages
        if loc:
            loc[0] = names.get(loc[0], loc[0])
            return f"{'.'.join(loc)}: {msg}"
        # a check across fields: its message names them (snake_case words, and a one-word field in backticks:
        # `size`; a bare `device` is English), and no field is its place
        if not names:
            return msg
        msg = re.sub(r"`(\w+)`", lambda m: names.get(m[1], m[0]), msg)
        return re.sub(r"\b[A-Za-z]\w*_\w+\b", lambda m: names.get(m[0], m[0]), msg)

    return "; ".join(one(err) for err in e.errors())


def revalidated(cfg: BaseModel, **changes) -> BaseModel:
    """`cfg` with `changes` as its validators take it, or one TRMError line naming the setting: a config built
    around them (`model_construct`, `model_copy(update=...)`, as a notebook does) trained with `seed=2**70` into
    torch's overflow, `log_interval=0` into a division by zero, and `max_steps=-5` to a 0-step run that said it
    ended; an unknown keyword is refused (`model_copy` drops it without a word)."""
    from trm_kaggle.errors import TRMError

    try:
        return type(cfg).model_validate({**cfg.model_dump(warnings=False), **changes})
    except ValidationError as e:
        raise TRMError(f"{type(cfg).__name__}: {validation_line(e)}") from None


def field_help(model: type[BaseModel], name: str, more: str = "") -> str:
    """The help of the command-line option behind `model`'s field `name`: the field's description (one text for
    the setting's meaning, read by `--help` and `--list-settings` alike), then `more` where the option adds to it.
    Written for argparse: a `%` is doubled."""
    description = model.model_fields[name].description
    if not description:
        raise ValueError(f"{model.__name__}.{name} has no description for its option's help")
    return (description + more).replace("%", "%%")


#: Above any learning rate that trains (`lr=1e30` still runs, and stops as diverged); keeps the optimizers'
#: float32 step sizes finite.
MAX_LR = 1e30
#: Seeds go to numpy, torch and Python's random: non-negative 32-bit (numpy's legacy seeding takes no more).
MAX_SEED = 2**32 - 1
#: A week: the longest time budget a command takes (no scheduler or Kaggle session runs longer).
WEEK_S = 7 * 24 * 3600.0
#: A timed save (`save_every_s`) further apart than a week never happens in a run of any scheduler.
MAX_SAVE_EVERY_S = WEEK_S
#: A year: the longest training time limit (a 1e308-second limit was taken and shown as a 309-digit budget).
YEAR_S = 365 * 24 * 3600.0
#: Rows of a puzzle-embedding table (a dataset's, an export's): each costs hidden_size floats in memory, in
#: every train state and optimizer; upstream's largest ARC dataset has ~1.3 M.
MAX_PUZZLE_IDENTIFIERS = 1 << 24
#: The first identifier of a built ARC dataset: every one below it is a blank entry of identifiers.json and a
#: row of the table (upstream raises it to stack datasets: past the ~1.3 M of the largest).
MAX_IDENTIFIERS_START = 1 << 22
#: Augmentations per puzzle (upstream's recipes use 1000): each multiplies the dataset's rows.
MAX_NUM_AUG = 100_000
#: Fine-tuning steps per task at test time: far past what any budget fits, so a typo such as 10**400 is one line.
MAX_FINETUNE_STEPS = 10_000_000
#: Puzzles a generator makes per split (Sudoku, Maze).
MAX_GENERATED = 10_000_000
#: Rows of one model call (evaluation, prediction): far past any memory, and a typo such as 10**12 is one line.
MAX_BATCH_SIZE = 1 << 20
#: Training passes: upstream's longest recipe runs 100,000; past a billion no schedule ends on any machine.
MAX_EPOCHS = 10**9
_INT64 = 2**63


class _StoreOnce(argparse._StoreAction):
    """argparse's `store`, refusing the option a second time on one command line: argparse keeps the last value, so
    `train --config a.yaml --config b.yaml` read b.yaml alone and never said a.yaml was dropped."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._first: list = []  # (a weak reference to a parse's namespace, the value it took first)

    def __call__(self, parser, namespace, values, option_string=None):
        from trm_kaggle.errors import TRMError

        self._first = [(ref, value) for ref, value in self._first if ref() is not None]  # parses that are over
        first = next((value for ref, value in self._first if ref() is namespace), self)
        if first is not self:
            raise TRMError(f"{option_string} is given twice ({clipped(first, 60)}, then {clipped(values, 60)}): "
                           "only the last would be read; give it once")
        self._first.append((weakref.ref(namespace), values))
        super().__call__(parser, namespace, values, option_string)


def take_each_option_once(parser: argparse.ArgumentParser) -> None:
    """`parser`'s options that take a value refuse a second one on one command line (`_StoreOnce`): every parser
    of the package, `trm-kaggle`'s subcommands and `build_bundle.py`'s."""
    parser.register("action", None, _StoreOnce)
    parser.register("action", "store", _StoreOnce)


def bounded_number(option: str, low: float, high: float, kind: type = int):
    """An argparse type for `option` (a flag that is no config field still has its bounds): a number of `kind`
    (int or float) from `low` to `high`, finite; anything else is the command's one error line (TRMError:
    argparse passes it on, and the command prints it as it prints the errors found after parsing)."""
    from trm_kaggle.errors import TRMError

    shown = "d" if kind is int else "g"

    def parse(text: str):
        try:
            if not str(text).isascii():  # Python's int() reads any script's digits: '１２' would be 12
                raise ValueError(text)
            value = kind(text)
        except ValueError:
            raise TRMError(f"{option} {text!r}: expected {'an integer' if kind is int else 'a number'}") from None
        # an int is compared as it is: math.isfinite(10**400) overflows converting it to a float
        if not (low <= value <= high and (kind is int or math.isfinite(value))):
            said = one_line(text.strip())
            raise TRMError(f"{option} {said if len(said) <= 40 else said[:40] + '...'}: must be from {low:{shown}} to {high:{shown}}")
        return value

    return parse


def whole_argument(name: str, value: object, low: int, high: int) -> int:
    """`value`, a library call's count argument, when it is a whole number from `low` to `high` (a bool, a float,
    NaN refused): checked where it is given, before any work, in one ValueError naming the argument (it once
    reached numpy's int() after a whole evaluation)."""
    if not _boolean(value):
        try:
            number = operator.index(value)  # an int or a numpy integer, never a float
        except TypeError:
            number = None
        if number is not None and low <= number <= high:
            return number
    raise ValueError(f"{name}={clipped(value, 40)}: expected a whole number from {low:,} to {high:,}")


def flag_argument(name: str, value: object) -> bool:
    """`value`, a library call's yes/no argument, when it is a bool (numpy's too): a truthy string was taken as yes,
    `quarantine="no"` renaming damaged states. One value only: a numpy array of bools is refused, not ambiguous."""
    if _boolean(value) and getattr(value, "shape", ()) == ():
        return bool(value)
    raise ValueError(f"{name}={clipped(value, 40)}: expected True or False")


def path_argument(name: str, value: object, what: str = "a path", optional: bool = False,
                  blank_said_later: bool = False) -> str | os.PathLike | None:
    """`value`, a library call's path (`what`: the path of what), when it is a str or os.PathLike (or None where
    `optional`); else a TypeError naming the argument: None and 5 were pathlib's "expected str, bytes or
    os.PathLike object", naming none. An empty or blank one is a TRMError (`names.blank_path_problem`, the
    commands' own error: one line where a command reaches it): '' was taken as the current folder
    (`blank_said_later`: the caller's reader says it in the command's words)."""
    if not isinstance(value, (str, os.PathLike)) and not (optional and value is None):
        raise TypeError(f"{name}: expected {what} (a str or os.PathLike){' or None' if optional else ''}, got "
                        f"{type_name(value)}")
    if isinstance(value, str) and not blank_said_later and (problem := blank_path_problem(value)):
        raise TRMError(f"{name} {problem}")
    return value


def sequence_argument(name: str, value: object, what: str) -> list:
    """`value`, a list (or other iterable) that is no str, bytes or mapping, as a list (its items are the caller's
    to check); else a TypeError naming the argument: the seeds '10' were read as [1, 0]."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise TypeError(f"{name}: expected a list of {what}, got {type_name(value)}")
    return list(value)


def texts_argument(name: str, value: object, what: str, mapping_hint: str = "") -> list[str]:
    """`value`, one str or a list (any iterable) of str, as a list; else a TypeError naming the argument. One str
    is one item, taken whole: list("cpu-smoke") was the presets 'c', 'p', 'u', ...; 5 was "'int' object is not
    iterable" and [5] an AttributeError from deep in the override grammar. `mapping_hint`: said for a mapping
    (where the call takes settings as a mapping elsewhere)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, (bytes, Mapping)) or not isinstance(value, Iterable):
        hint = f" ({mapping_hint})" if mapping_hint and isinstance(value, Mapping) else ""
        raise TypeError(f"{name}: expected {what} or a list of them{hint}, got {type_name(value)}")
    items = list(value)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise TypeError(f"{name}[{i}]: expected a str ({what}), got {type_name(item)}")
    return items


def _boolean(value: object) -> bool:
    """A bool, or numpy's (`np.bool_`, which is no `bool` and which pydantic reads as 1 too)."""
    return isinstance(value, bool) or getattr(getattr(value, "dtype", None), "kind", None) == "b"


def _real(value: object) -> float | None:
    """`value` as a finite float when it is a real number (an int, a float, numpy's numbers; never a bool), else
    None. An int too large for a float (10**400) is None too: math.isfinite of it raised OverflowError past every
    caller's check."""
    if _boolean(value) or not isinstance(value, numbers.Real):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def number_argument(name: str, value: object, low: float, high: float) -> float:
    """`value`, a library call's real-valued setting (a noise level), when it is a finite number from `low` to
    `high`: NaN compared false with every bound and passed a check written as `value < low`."""
    if (number := _real(value)) is not None and low <= number <= high:
        return number
    raise ValueError(f"{name}={clipped(value, 40)}: expected a number from {low:g} to {high:g}")


def seconds_argument(name: str, value: object) -> float | None:
    """`value`, a library call's time (a deadline, a limit), when it is None or a finite number: NaN compared
    false with every clock and was no deadline at all."""
    if value is None:
        return None
    if (number := _real(value)) is not None:
        return number
    raise ValueError(f"{name}={clipped(value, 40)}: expected a finite number of seconds, or None")


def _checked_number(value, where: str = ""):
    """Every number of every config, whatever the field's own bounds: a float is finite (NaN slips through
    comparisons, inf through lower bounds) and an int fits the 64-bit integers torch and numpy compute with."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where}must be a finite number")
    if isinstance(value, int) and not isinstance(value, bool) and not -_INT64 <= value < _INT64:
        raise ValueError(f"{where}{clipped(value, 40)} is out of range (a 64-bit integer)")
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _checked_number(item, f"item {i}: ")
    return value


def _kinds(annotation) -> set:
    """The types a field of this type takes (Optional and Union looked through; a Literal as itself)."""
    kinds, todo = set(), [annotation]
    while todo:
        t = todo.pop()
        args = typing.get_args(t)
        if args and typing.get_origin(t) is not Literal:
            todo.extend(args)
        else:
            kinds.add(t)
    return kinds


def _numeric_not_boolean(annotation) -> bool:
    """Whether a field of this type takes an int or a float but no bool (Optional and Union looked through)."""
    kinds = _kinds(annotation)
    return bool(kinds & {int, float}) and bool not in kinds and typing.Any not in kinds


def _takes_number(annotation) -> bool:
    """Whether a number may be the value of a field of this type: else a NaN there (`device=nan`, read as a float)
    is said by the field's own check, its choices, not as a number that is not finite."""
    kinds = _kinds(annotation)
    return bool(kinds & {int, float, typing.Any}) or any(not isinstance(k, type) and typing.get_origin(k) is not
                                                          Literal for k in kinds)


#: The settings that name a folder or a file (an empty one is refused, never taken as the current folder)
PATH_FIELD = re.compile(r"(_dir|_path|_paths|_paths_test|_file|_prefix|^output|^out|^weights|^challenges|"
                        r"^compile_cache|^report|^data|^corpus)$")


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    @field_validator("*", mode="before")
    @classmethod
    def _finite_first(cls, value, info: ValidationInfo):  # before the field's bounds: "nan <= 1" puzzles
        value = utf8_setting(value)
        if _boolean(value) and _numeric_not_boolean(cls.model_fields[info.field_name].annotation):
            # pydantic reads true as 1: `max_steps: true` in a YAML file trained one step without a word
            raise ValueError(f"{value} is a boolean, not a number")
        if (isinstance(value, (list, tuple)) and any(_boolean(v) for v in value)
                and _numeric_not_boolean(cls.model_fields[info.field_name].annotation)):  # `seeds: [true]`
            raise ValueError(f"item {[_boolean(v) for v in value].index(True)}: a boolean, not a number")
        if (isinstance(value, str) and not value.isascii() and any(c.isdigit() for c in value)
                and _numeric_not_boolean(cls.model_fields[info.field_name].annotation)):
            raise ValueError(f"{value!r} is no number in ASCII digits (pydantic reads '５' as 5)")
        numeric = _takes_number(cls.model_fields[info.field_name].annotation)
        return _checked_number(value) if isinstance(value, float) and numeric else value

    @field_validator("*", mode="after")
    @classmethod
    def _numbers_in_range(cls, value, info: ValidationInfo):
        if _holds_nul(value):  # no path, name or choice holds one: the system said "embedded null byte", no more
            raise ValueError("holds a NUL byte, which no path or name can")
        if PATH_FIELD.search(info.field_name) and (problem := blank_path_problem(value)):
            raise ValueError(problem)
        return _checked_number(value)


def _surrogates(text: str) -> bool:
    return not text.isascii() and any("\ud800" <= c <= "\udfff" for c in text)


def utf8_setting(value):
    """`value` (text, or a list or mapping of texts) as UTF-8 text. A setting typed under a locale that is not
    UTF-8 reaches Python with its bytes escaped ('é' as '\\udcc3\\udca9'): it is read again as UTF-8. Bytes that are
    not UTF-8 (or a lone surrogate from a JSON escape) are refused here: a run's records, job files and lock lines
    are UTF-8, and writing them once ended a command in a traceback with a folder half made."""
    if isinstance(value, str):
        if not _surrogates(value):
            return value
        text = typed_name(value)
        if _surrogates(text):
            raise ValueError(f"{clipped(text, 60)} holds bytes that are not UTF-8 text: settings are "
                             "written into UTF-8 records; retype or rename it")
        return text
    if isinstance(value, (list, tuple)):
        return type(value)(utf8_setting(v) for v in value)
    if isinstance(value, dict):
        return {utf8_setting(k): utf8_setting(v) for k, v in value.items()}
    return value


def _holds_nul(value) -> bool:
    """Whether a setting's text (or a text of its list) holds a NUL byte."""
    if isinstance(value, str):
        return "\0" in value
    return isinstance(value, (list, tuple)) and any(isinstance(v, str) and "\0" in v for v in value)


#: torch.compile of the model (`trm_kaggle.model.compiling`): auto = on for CUDA, off elsewhere; on; off.
CompileSetting = Literal["auto", "on", "off"]
_COMPILE_SPELLINGS = {"auto": "auto", "on": "on", "true": "on", "yes": "on", "1": "on",
                      "off": "off", "false": "off", "no": "off", "0": "off"}


def compile_setting(value) -> str:
    """A compile setting in its one spelling: 'auto', 'on' or 'off'. True/False (the setting's old values, still
    what `compile=True` in an override or a saved config gives) mean on/off; ValueError for anything else."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, str) and value.strip().lower() in _COMPILE_SPELLINGS:
        return _COMPILE_SPELLINGS[value.strip().lower()]
    raise ValueError(f"{value!r} is not a compile setting: auto, on or off (True and False mean on and off)")
