"""The settings layering: a `TrainConfig` as a plain nested dict that presets, config files and overrides are
applied to in turn, translating upstream's spellings, then checked by pydantic with the origin of every bad
value in the message.

* the key catalogue: every dotted key a `TrainConfig` has, derived from the pydantic models, with a
  suggestion for a key that is not one;
* `ConfigLayers`: the layers applied, `${...}` interpolations resolved, the result validated.

The `key=value` grammar itself is `trm_kaggle.train.overrides`.
"""

from __future__ import annotations

import difflib
import json
import logging
import re
import types
import typing
from typing import Any, Literal, Mapping, Optional, Union

import pydantic

from trm_kaggle.config import TrainConfig
from trm_kaggle.errors import TRMError
from trm_kaggle.train.overrides import ALIASES, MISSING, Interpolation, parse_override
from trm_kaggle.wording import clipped

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------
# Key catalogue (derived from the pydantic models)
# ---------------------------------------------------------------------------


def _submodel(annotation: Any) -> Optional[type[pydantic.BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return annotation
    return None


def _catalogue(model: type[pydantic.BaseModel], prefix: str = "") -> tuple[dict[str, Any], set[str]]:
    leaves: dict[str, Any] = {}
    groups: set[str] = set()
    for name, field in model.model_fields.items():
        sub = _submodel(field.annotation)
        if sub is not None:
            groups.add(prefix + name)
            sub_leaves, sub_groups = _catalogue(sub, prefix + name + ".")
            leaves.update(sub_leaves)
            groups |= sub_groups
        else:
            leaves[prefix + name] = field.annotation
    return leaves, groups


_LEAVES, _GROUPS = _catalogue(TrainConfig)

# upstream names of the model class and the loss head: checked, then dropped
_UPSTREAM_ARCH_NAME = "TinyRecursiveReasoningModel_ACTV1"  # config/arch/trm.yaml: recursive_reasoning.trm@...
_UPSTREAM_LOSS_NAME = "ACTLossHead"  # losses@ACTLossHead
# upstream settings with no counterpart here; dropped with a note
UPSTREAM_ONLY = {
    "eval_save_outputs": "upstream saves raw eval tensors; `trm-kaggle evaluate` writes its own outputs",
    "supervision_curriculum": "use curriculum.* here",
    "curriculum_min_depth": "use curriculum.* here",
    "curriculum_max_depth": "use curriculum.* here",
    "curriculum_warmup_epochs": "use curriculum.* here",
    "defaults": "hydra composition list",
    "hydra": "hydra runtime settings",
}


def valid_keys() -> list[str]:
    """Every dotted key an override or config file may set."""
    return sorted(_LEAVES)


def _suggest(key: str) -> str:
    candidates = list(_LEAVES) + list(ALIASES)
    lower = {c.lower(): c for c in candidates}
    if key.lower() in lower:
        return lower[key.lower()]
    leaf = key.rsplit(".", 1)[-1]
    for c in candidates:  # right leaf name, wrong (or missing) group: L_cycles -> arch.L_cycles
        if c.rsplit(".", 1)[-1].lower() == leaf.lower():
            return c
    close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.6)
    if close:
        return close[0]
    by_leaf: dict[str, str] = {}
    for c in candidates:
        by_leaf.setdefault(c.rsplit(".", 1)[-1], c)
    close = difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.75)
    return by_leaf[close[0]] if close else ""


def _unknown_key(key: str, source: str) -> TRMError:
    hint = _suggest(key)
    hint = f"; did you mean {hint}?" if hint else "; see `trm-kaggle train --help` for the settings"
    return TRMError(f"{source}: unknown config key {clipped(key)}{hint}")


# ---------------------------------------------------------------------------
# Applying layers to a plain nested dict
# ---------------------------------------------------------------------------


def _type_parts(annotation: Any) -> tuple[bool, bool, list, bool]:
    """(accepts str, accepts None, literal options, is a list)."""
    accepts_str = accepts_none = is_list = False
    literals: list = []
    todo = [annotation]
    while todo:
        a = todo.pop()
        origin = typing.get_origin(a)
        if a is str:
            accepts_str = True
        elif a is type(None) or a is None:
            accepts_none = True
        elif origin is Literal:
            literals.extend(typing.get_args(a))
        elif origin in (Union, types.UnionType):
            todo.extend(typing.get_args(a))
        elif a is list or origin is list:
            is_list = True
    return accepts_str, accepts_none, literals, is_list


def _coerce(key: str, value: Any, raw: Optional[str]) -> Any:
    """Fit a parsed value to the field's type where the user's intent is unambiguous."""
    if isinstance(value, Interpolation) or value is None and raw is None:
        return value
    accepts_str, accepts_none, literals, is_list = _type_parts(_LEAVES[key])
    text = raw.strip() if raw is not None else None
    if text is not None and len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    if literals:
        for option in literals:  # pos_encodings=none, forward_dtype=bfloat16: the literal string, not null
            if isinstance(option, str) and isinstance(value, (str, type(None))) and text is not None \
                    and text.lower() == option.lower():
                return option
        return value
    if accepts_str and value is not None and not isinstance(value, (list, dict)):
        # run_name=123 or run_name=True is the string the user typed
        if text is not None:
            return text
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
    if is_list and isinstance(value, str) and not isinstance(value, Interpolation):
        return [part.strip() for part in value.split(",") if part.strip()]  # data_paths=data/a,data/b
    return value


def _set(tree: dict, key: str, value: Any) -> None:
    node = tree
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def _get(tree: Mapping, key: str, default: Any = MISSING) -> Any:
    node: Any = tree
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


class ConfigLayers:
    """The config as a plain nested dict, plus where each key was last set."""

    def __init__(self, notes: list[str]):
        self.defaults = TrainConfig().model_dump()
        self.tree = TrainConfig().model_dump()
        self.origin: dict[str, str] = {}
        self.notes = notes
        self._layer: dict[str, str] | None = None  # the settings one file has set so far, while it is applied

    def note(self, text: str) -> None:
        self.notes.append(text)
        log.warning(text)

    def assign(self, key: str, value: Any, source: str, raw: Optional[str] = None) -> None:
        """Set one dotted key (already parsed), translating upstream spellings."""
        key = ALIASES.get(key, key)
        # `~arch` is the whole group back to our defaults (below), never a name: its placeholder was said as
        # "arch=<object object at 0x...> is not supported"; `~arch.name` deletes a name that is only checked
        if key == "arch" and value is not MISSING and not isinstance(value, Mapping):
            self._check_name(value, "arch", source)
            return
        if key in ("arch.name", "arch.loss.name"):
            if value is not MISSING:
                self._check_name(value, key, source)
            return
        if key in UPSTREAM_ONLY:
            self.note(f"{source}: ignored upstream-only setting {key} ({UPSTREAM_ONLY[key]})")
            return
        if key in _GROUPS or key == "arch.loss":
            if value is MISSING:
                if key in _GROUPS:
                    _set(self.tree, key, json.loads(json.dumps(_get(self.defaults, key))))
                return
            if not isinstance(value, Mapping):
                raise TRMError(f"{source}: {key} is a group of settings; set its fields, e.g. {key}.<field>=...")
            for sub, sub_value in value.items():
                self.assign(f"{key}.{sub}", sub_value, source)
            return
        if key not in _LEAVES:
            raise _unknown_key(key, source)
        if value is MISSING:  # hydra `~key`: back to our default
            value = _get(self.defaults, key)
        elif key == "arch.puzzle_emb_ndim" and isinstance(value, Interpolation) \
                and value.replace(" ", "") in ("${.hidden_size}", "${arch.hidden_size}"):
            value = None  # upstream's default, our None: follow hidden_size
        else:
            value = _coerce(key, value, raw)
        if self._layer is not None:  # one file setting one setting twice (`arch: {hidden_size: 32}` and
            if key in self._layer:  # `arch.hidden_size: 48`): the later is used, as on a command line, but said
                self.note(f"{source}: {key} is set twice in it ({self._layer[key]}, then {clipped(value)}): the "
                          "later is used")
            self._layer[key] = clipped(value)
        _set(self.tree, key, value)
        self.origin[key] = source

    def _check_name(self, value: Any, key: str, source: str) -> None:
        text = str(value).strip()
        if key == "arch":
            if text.lower() in ("trm", "trm.yaml"):
                return
            raise TRMError(f"{source}: arch={text} is not supported: this package trains TRM only (use arch=trm)")
        if key == "arch.name":
            if text.rsplit("@", 1)[-1] == _UPSTREAM_ARCH_NAME:
                return
            raise TRMError(f"{source}: arch.name={text} is not supported: this package trains TRM only "
                           f"(upstream's recursive_reasoning.trm@{_UPSTREAM_ARCH_NAME})")
        if text.rsplit("@", 1)[-1] == _UPSTREAM_LOSS_NAME:
            return
        raise TRMError(f"{source}: arch.loss.name={text} is not supported: only upstream's "
                       f"losses@{_UPSTREAM_LOSS_NAME} is implemented")

    def apply_mapping(self, data: Mapping, source: str) -> None:
        self._layer = {}
        try:
            for key, value in data.items():
                self.assign(str(key), value, source)
        finally:
            self._layer = None

    def apply_override(self, text: str) -> None:
        key, value = parse_override(text)
        raw = text.partition("=")[2] if value is not MISSING else None
        self.assign(key, value, f"override {clipped(text.strip())}", raw=raw)

    # --- interpolations ---

    def resolve(self) -> None:
        for key in list(_LEAVES):
            value = _get(self.tree, key)
            if isinstance(value, Interpolation):
                _set(self.tree, key, self._resolve_one(key, value, set()))
            elif isinstance(value, list):
                _set(self.tree, key, [self._resolve_one(key, v, set()) if isinstance(v, Interpolation) else v
                                      for v in value])

    def _resolve_one(self, key: str, value: Interpolation, seen: set) -> Any:
        source = self.origin.get(key, "config")
        if key in seen:
            raise TRMError(f"{source}: circular interpolation at {key}")
        seen = seen | {key}

        def lookup(ref: str) -> Any:
            ref = ref.strip()
            if ref.startswith("."):
                dots = len(ref) - len(ref.lstrip("."))
                parent = key.split(".")[:-1]
                parent = parent[:len(parent) - (dots - 1)] if dots > 1 else parent
                target = ".".join(parent + [ref[dots:]]) if parent else ref[dots:]
            else:
                target = ref
            target = ALIASES.get(target, target)
            found = _get(self.tree, target)
            if found is MISSING or target not in _LEAVES:
                raise TRMError(f"{source}: cannot resolve ${{{ref}}} for {key}")
            if isinstance(found, Interpolation):
                found = self._resolve_one(target, found, seen)
            return found

        whole = re.fullmatch(r"\$\{([^${}]+)\}", value.strip())
        if whole:
            return lookup(whole.group(1))
        return re.sub(r"\$\{([^${}]+)\}", lambda m: str(lookup(m.group(1))), value)

    # --- validation ---

    def build(self) -> TrainConfig:
        self.resolve()
        try:
            cfg = TrainConfig.model_validate(self.tree)
        except pydantic.ValidationError as err:
            problems = []
            for e in err.errors():
                key = ".".join(str(p) for p in e["loc"] if not isinstance(p, int))
                where = self.origin.get(key)
                got = e.get("input")
                msg = e["msg"].removeprefix("Value error, ")
                detail = f"{key}: {msg}" if key else msg  # a check across fields names its fields itself
                if not isinstance(got, (dict, pydantic.BaseModel)):
                    detail += f" (got {clipped(got)})"
                if where:
                    detail += f" [from {where}]"
                problems.append(detail)
            raise TRMError("invalid training config: " + "; ".join(problems)) from None
        arch = cfg.arch
        if not arch.mlp_t and arch.hidden_size % arch.num_heads:
            raise TRMError(f"invalid training config: arch.hidden_size ({arch.hidden_size}) must be divisible "
                           f"by arch.num_heads ({arch.num_heads})")
        return cfg
