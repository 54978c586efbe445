"""The override parser: upstream's (hydra) `key=value` command-line grammar.

* value parsing: `True`/`false`, numbers, `null`, `[a,b]`, `{k: v}`, quotes and
  `${...}` interpolations, as hydra reads them (a key twice in one `{k: v}` is refused, as the YAML reader
  refuses it); `~key` (delete: back to the default);
* `split_cli_args`: a command line cut into flags and overrides;
* `override_list` / `override_mapping`: a notebook parameter's overrides, a mapping {key: value} (what papermill's
  `-y` passes, and a parameters cell papermill can read: no `=` inside the line) or a list of `key=value`.

Where the parsed values go (the layers of a `TrainConfig`) is `trm_kaggle.train.config_layers`.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any, Iterable, Mapping, Sequence

from trm_kaggle.errors import TRMError
from trm_kaggle.wording import clipped

log = logging.getLogger(__name__)

# the value of a `~key` override (back to the default), and of a key a tree does not hold
MISSING = object()

# ---------------------------------------------------------------------------
# Value parsing (hydra override grammar, the parts users type)
# ---------------------------------------------------------------------------

_INT_RE = re.compile(r"^[+-]?\d(?:_?\d)*$", re.ASCII)
# the fraction follows a required dot: with an optional one, a run of digits splits between the two groups in
# every way, and a 100,000-digit value took hours to refuse
_FLOAT_RE = re.compile(r"^[+-]?(?:\d(?:_?\d)*(?:\.(?:\d(?:_?\d)*)?)?|\.\d(?:_?\d)*)(?:[eE][+-]?\d+)?$", re.ASCII)
_SPECIAL_FLOATS = {"inf": float("inf"), "+inf": float("inf"), "-inf": float("-inf"), "nan": float("nan")}
_NULLS = {"null", "None", "NULL", "Null", "~"}


class Interpolation(str):
    """A `${...}` interpolation, resolved after every layer is applied."""


def _primitive(text: str) -> Any:
    s = text.strip()
    if s in _NULLS:
        return None
    if s.lower() == "true":
        return True
    if s.lower() == "false":
        return False
    if _INT_RE.match(s):
        return int(s.replace("_", ""))
    if _FLOAT_RE.match(s) and any(ch.isdigit() for ch in s):
        return float(s.replace("_", ""))
    if s.lower() in _SPECIAL_FLOATS:
        return _SPECIAL_FLOATS[s.lower()]
    if "${" in s:
        return Interpolation(s)
    return s


class _Parser:
    def __init__(self, text: str):
        self.s, self.i = text, 0

    def error(self, what: str) -> ValueError:
        return ValueError(f"{what} at position {self.i} in {clipped(self.s)}")

    def ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i].isspace():
            self.i += 1

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def value(self, stop: str) -> Any:
        self.ws()
        ch = self.peek()
        if ch == "[":
            return self.sequence("[", "]")
        if ch == "{":
            return self.mapping()
        if ch and ch in "'\"":  # ("" is in every string: the end of the text is no quote)
            return self.quoted()
        return self.bare(stop)

    def quoted(self) -> str:
        q = self.s[self.i]
        self.i += 1
        out = []
        while self.i < len(self.s):
            ch = self.s[self.i]
            if ch == "\\" and self.i + 1 < len(self.s) and self.s[self.i + 1] in (q, "\\"):
                out.append(self.s[self.i + 1])
                self.i += 2
                continue
            if ch == q:
                self.i += 1
                text = "".join(out)
                return Interpolation(text) if "${" in text else text
            out.append(ch)
            self.i += 1
        raise self.error("unterminated quote")

    def bare(self, stop: str) -> Any:
        start, depth = self.i, 0
        while self.i < len(self.s):
            ch = self.s[self.i]
            if ch == "$" and self.s.startswith("${", self.i):
                depth += 1
                self.i += 2
                continue
            if ch == "}" and depth:
                depth -= 1
            elif ch in stop and not depth:
                break
            self.i += 1
        return _primitive(self.s[start:self.i])

    def sequence(self, open_: str, close: str) -> list:
        self.i += 1
        items: list = []
        self.ws()
        if self.peek() == close:
            self.i += 1
            return items
        while True:
            items.append(self.value(stop="," + close))
            self.ws()
            ch = self.peek()
            if not ch:
                raise self.error(f"the text ends before the closing '{close}'")
            self.i += 1
            if ch == close:
                return items
            if ch != ",":
                self.i -= 1
                raise self.error(f"expected ',' or '{close}'")

    def mapping(self) -> dict:
        self.i += 1
        out: dict = {}
        self.ws()
        if self.peek() == "}":
            self.i += 1
            return out
        while True:
            self.ws()
            start = self.i
            key = self.quoted() if self.peek() and self.peek() in "'\"" else self.bare(stop=":").strip()
            self.ws()
            if self.peek() != ":":
                raise self.error("expected ':'" if self.peek() else "the text ends before the closing '}'")
            if str(key) in out:  # the later would win unsaid: refused, as in a config file
                from trm_kaggle.yamlio import twice_in_one_mapping

                self.i = start
                raise self.error(twice_in_one_mapping(str(key)))
            self.i += 1
            out[str(key)] = self.value(stop=",}")
            self.ws()
            ch = self.peek()
            if not ch:
                raise self.error("the text ends before the closing '}'")
            self.i += 1
            if ch == "}":
                return out
            if ch != ",":
                self.i -= 1
                raise self.error("expected ',' or '}'")


def parse_value(text: str) -> Any:
    """Parse an override's value like hydra does: `True`/`false` -> bool, `1e-4` -> float,
    `null`/`None` -> None, `[a,b]` -> list, `{k: v}` -> dict, quotes -> string, else string.

    A quoted list (`"[data/a]"`, as typed for a shell, reaching us with its quotes) is a list.
    """
    s = text.strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
        inner = s[1:-1].strip()
        if inner[:1] in ("[", "{"):
            s = inner
    if s[:1] in ("[", "{", "'", '"'):
        p = _Parser(s)
        value = p.value(stop="")
        p.ws()
        if p.i != len(s):
            raise p.error("unexpected text")
        return value
    return _primitive(s)


def parse_override(text: str) -> tuple[str, Any]:
    """`"+arch.L_cycles=4"` -> `("arch.L_cycles", 4)`. A `~key` (hydra delete) gives the value MISSING."""
    raw = text.strip()
    if "=" not in raw and not raw.startswith("~"):
        raise TRMError(f"override {clipped(text)}: expected key=value (for example arch.L_cycles=4)")
    key, equals, value = raw.partition("=")
    key = key.strip()
    # hydra's prefixes, one at a time: `+` and `++` add, `~` deletes (`+~lr=5` set lr, `~~lr` deleted it)
    prefix = re.match(r"\+\+|\+|~|", key).group()
    delete = prefix == "~"
    key = key[len(prefix):].strip()
    if key[:1] in ("+", "~"):
        raise TRMError(f"override {clipped(text)}: one prefix at most (+key=value, ++key=value or ~key)")
    if not key or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", key) or ".." in key or key.endswith("."):
        raise TRMError(f"override {clipped(text)}: {clipped(key)} is not a config key")
    if delete:
        if equals:  # hydra deletes only where the value matches: `~lr=0.1` reset lr whatever it held
            raise TRMError(f"override {clipped(text)}: ~{key} takes no value (it sets {key} back to its default); "
                           f"write ~{key}, or {key}=VALUE")
        return key, MISSING
    try:
        return key, parse_value(value)
    except ValueError as err:
        raise TRMError(f"override {clipped(text)}: cannot parse the value: {err}") from None
    except RecursionError:  # the parser goes one level down per bracket
        raise TRMError(f"override {clipped(text)}: cannot parse the value: nested too deeply") from None


def dotted(tree: dict, prefix: str = "") -> dict[str, Any]:
    """Nested settings as dotted keys, as an override names them: {"arch": {"H_cycles": 4}} -> {"arch.H_cycles": 4}."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(dotted(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


#: Upstream spellings of a setting whose home here is another key (one setting, two names).
ALIASES = {"arch.loss.loss_type": "arch.loss_type"}


def _keys_set(text: str) -> list[str]:
    """The settings one override sets, in the spelling they are applied under: its key, or each key its mapping
    sets (`arch={hidden_size: 48}` sets arch.hidden_size, as `arch.hidden_size=48` does: a group's mapping is
    applied field by field, over the others)."""
    key, value = parse_override(text)
    keys = list(dotted(value, f"{key}.")) if isinstance(value, dict) else [key]
    return [ALIASES.get(k, k) for k in keys]  # either spelling sets one setting


def repeated_keys(overrides: Sequence[str]) -> list[tuple[str, str, str]]:
    """(key, earlier override, later override) for each key one list of overrides sets more than once."""
    seen: dict[str, str] = {}
    found = []
    for text in overrides:
        for key in _keys_set(text):
            if key in seen:
                found.append((key, seen[key], text))
            seen[key] = text
    return found


def warn_repeated(overrides: Sequence[str]) -> list[str]:
    """A warning for each key one list of overrides typed together sets more than once (`seed=5 seed=6`): the
    later wins, as layers do (a preset, a grid, then the command line; a script's base settings and its one
    change), but never without a word. Logged, and returned."""
    lines = []
    for key, earlier, later in repeated_keys(overrides):
        lines.append(f"{key} is set twice on one line ({clipped(earlier)}, then {clipped(later)}): the later is used")
        log.warning(lines[-1])
    return lines


# ---------------------------------------------------------------------------
# Command lines
# ---------------------------------------------------------------------------


_OVERRIDE_RE = re.compile(r"^(?:\+{1,2}|~)?[A-Za-z_][A-Za-z0-9_.]*(?:=|$)")


def _looks_like_override(token: str) -> bool:
    if token.startswith("~"):
        return bool(_OVERRIDE_RE.match(token))
    return "=" in token and bool(_OVERRIDE_RE.match(token))


def split_cli_args(argv: Sequence[str], value_flags: Iterable[str] = ()) -> tuple[list[str], list[str]]:
    """Split a command line into (flags for argparse, key=value overrides), keeping each side's order.

    `--flag value`, `--flag=value` and positional words go to flags; `key=value`, `+key=value`,
    `++key=value` and `~key` go to overrides. A token right after one of `value_flags` (e.g.
    `--config`) is always that flag's value, even when it contains `=`. After `--`,
    every token is an override.
    """
    value_flags = set(value_flags)
    flags: list[str] = []
    overrides: list[str] = []
    tokens = list(argv)
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == "--":
            overrides.extend(tokens[i + 1:])
            break
        if tok.startswith("-"):
            flags.append(tok)
            if tok in value_flags and i + 1 < len(tokens):
                flags.append(tokens[i + 1])
                i += 1
        elif _looks_like_override(tok):
            overrides.append(tok)
        else:
            flags.append(tok)
        i += 1
    return flags, overrides


# ---------------------------------------------------------------------------
# Notebook parameters
# ---------------------------------------------------------------------------

_PLAIN_TEXT = re.compile(r"^[^\s,\[\]{}:'\"]+\Z")  # a string that needs no quotes inside a list or a mapping


def _text(value: Any, inner: bool = False) -> str:
    """`value` in the override grammar (parse_value reads it back): strings as they are (at the top: the
    override's own text), None as null, lists and mappings in brackets, strings inside them quoted as needed."""
    if isinstance(value, str):
        return value if not inner or _PLAIN_TEXT.match(value) else json.dumps(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_text(v, True) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_text(str(k), True)}: {_text(v, True)}" for k, v in value.items()) + "}"
    raise TRMError(f"override value {value!r}: not a number, string, boolean, null, list or mapping")


def override_list(value: Any) -> list[str]:
    """`key=value` overrides from a notebook parameter: a mapping {key: value} (`-y "OVERRIDES: {max_steps: 2}"`;
    `{"~key": null}` resets a key), a list of `key=value` strings, a JSON text of either (`-p OVERRIDES
    '{"max_steps": 2}'`), one `key=value` string, or None (none)."""
    if value is None:
        return []
    if isinstance(value, str):
        text = value.strip()
        if not text.startswith(("[", "{")):
            return [text] if text else []
        try:
            value = json.loads(text)
        except (ValueError, RecursionError) as err:  # RecursionError: brackets nested thousands deep
            raise TRMError(f"overrides {text[:60]!r}: not a JSON list or mapping: {err}") from None
    if isinstance(value, Mapping):
        try:
            return [str(k) if str(k).startswith("~") and v is None else f"{k}={_text(v)}" for k, v in value.items()]
        except (ValueError, RecursionError) as err:  # a whole number of 5,000 digits, lists nested past the stack
            raise TRMError(f"overrides: a value cannot be written as a setting ({err})") from None
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    raise TRMError(f"overrides {value!r}: expected a mapping {{key: value}} or a list of key=value strings")


def override_mapping(overrides: Sequence[str]) -> dict[str, str]:
    """`key=value` strings as the mapping {key: value text} that `override_list` turns back into them (`~key`:
    {"~key": None}); a later override of a key replaces an earlier one, as it would when applied."""
    out: dict[str, Any] = {}
    for text in overrides:
        key, sep, value = text.strip().partition("=")
        out.pop(key, None)
        out[key] = value if sep else None
    return out
