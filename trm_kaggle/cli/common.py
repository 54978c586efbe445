"""What every room of `trm-kaggle` shares: the flag helpers (an option that sets a config field takes its help
from the field's description), the option lists `main` splits command lines with, the top of the parser, and
help texts that say each option's default."""

from __future__ import annotations

import argparse
from typing import Any, Callable

from trm_kaggle import __version__
from trm_kaggle.config import field_help, take_each_option_once
from trm_kaggle.wording import OneLineParser


def flag(parser, name: str, model=None, *, more: str = "", **kw) -> None:
    """Add `--some-name` with `--some_name` as an alias (upstream's argdantic accepts the dashed form). With a
    config `model`, the option sets its field `name` and its help is that field's description (`field_help`),
    then `more`."""
    dashed, under = "--" + name.replace("_", "-"), "--" + name
    if model is not None and "help" not in kw:
        kw["help"] = field_help(model, name, more)
    parser.add_argument(*dict.fromkeys([dashed, under]), dest=name, **kw)


def common_flags(p: argparse.ArgumentParser) -> None:
    """The flags every subcommand takes (no-ops where there is no progress bar or nothing to log)."""
    p.add_argument("--no-progress", dest="progress", action="store_false", help="hide progress bars")
    p.add_argument("-v", "--verbose", action="store_true", help="more log output")


def config_kwargs(args: argparse.Namespace, names) -> dict:
    return {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}


def value_flags(parser: argparse.ArgumentParser) -> list[str]:
    """Every spelling of the options of `parser` that take a value (`--weights DIR`): the word after one is its
    value, never a key=value setting, when a line's settings are split off before argparse reads it."""
    return [o for a in parser._actions if a.option_strings and a.nargs != 0 for o in a.option_strings]


def say_defaults(parser: argparse.ArgumentParser, model=None) -> None:
    """End each option's help with "(required)" or its default, read from the config model that owns it.

    Most options default to None here so that the config's own default applies; the help must still say what
    that default is, and reading it from the model keeps one source for it. Options whose help already says
    its default (or why there is none) are left as written."""
    for a in parser._actions:
        if not a.option_strings or a.help in (None, argparse.SUPPRESS) or a.nargs == 0:
            continue  # positionals, --help, plain switches
        if a.required:
            a.help += " (required)"
            continue
        if "default" in a.help or "required" in a.help:
            continue
        value = a.default  # an option's own default wins over its field's (estimate's smaller batches)
        if value is None and model is not None and a.dest in model.model_fields:
            value = model.model_fields[a.dest].get_default(call_default_factory=True)
        if value is not None and value != []:
            shown = " ".join(map(str, value)) if isinstance(value, list) else str(value)
            a.help += f" (default: {shown.replace('%', '%%')})"


def _ascii_number(kind: type) -> Callable[[str], Any]:
    """`kind` (int or float) of ASCII text only: Python's int() and float() read any script's digits ('２' is 2),
    which no user means as a count."""
    def parse(text: str):
        if not str(text).isascii():
            raise ValueError(text)
        return kind(text)

    parse.__name__ = kind.__name__  # argparse's "invalid int value: '２'"
    return parse


class Parser(OneLineParser):
    """argparse, whose `type=int` and `type=float` take ASCII digits only, whose options that take a value take
    it once, and whose errors are one escaped line (its subcommands' parsers are of this class too)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register("type", int, _ascii_number(int))
        self.register("type", float, _ascii_number(float))
        take_each_option_once(self)


def command_parser(description: str | None = None) -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    """`trm-kaggle` and its (still empty) set of subcommands: the top of `build_parser`, and the parser
    `train_settings` reads a torchrun line's `train` arguments with (the same usage line in its errors)."""
    parser = Parser(prog="trm-kaggle", description=description)
    parser.add_argument("--version", action="version", version=f"trm-kaggle {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    return parser, sub


#: The options of the cluster launchers (cluster.py), by their ClusterConfig field (a value's flag may hold '=').
CLUSTER_VALUE_FLAGS = ("--nodes", "--gpus-per-node", "--out", "--name", "--max-restarts", "--rdzv-port",
                       "--rdzv-timeout", "--env", "--export", "--image", "--pvc", "--mount", "--namespace", "--flavor",
                       "--node-selector", "--toleration", "--shm-size", "--shared-dir", "--time", "--partition",
                       "--account", "--cpus-per-task", "--setup", "--launcher")


#: Options of `sweep` and `launch` that take a value (their key=value overrides may come anywhere on the line).
SWEEP_VALUE_FLAGS = ("--preset", "--config", "--seeds", "--sweep-dir", "--sweep_dir", "--parallel",
                     *CLUSTER_VALUE_FLAGS)


def typed_flags(parser: argparse.ArgumentParser, argv: list[str]) -> dict[str, str]:
    """Each option's dest -> the spelling the user typed on `argv` (`--train_seconds` or `--train-seconds`), else
    its first, over the parser and the subcommands `argv` chose: errors name flags as the user wrote them."""
    typed = {a.split("=", 1)[0] for a in argv if a.startswith("-")}
    names: dict[str, str] = {}
    parsers = [parser]
    while parsers:
        p = parsers.pop()
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = next((a for a in argv if a in action.choices), None)
                if chosen is not None:
                    parsers.append(action.choices[chosen])
            elif action.option_strings and action.dest != "help":
                names.setdefault(action.dest, next((o for o in action.option_strings if o in typed),
                                                   action.option_strings[0]))
    return names
