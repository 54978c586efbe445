"""Training settings: a run's `TrainConfig`, built in layers, later layers winning:

1. `TrainConfig` defaults (upstream's `cfg_pretrain.yaml` + `arch/trm.yaml` values);
2. named presets, in the order given (`arc2`, then modifiers such as `T3n6`, `no-ema`;
   `trm_kaggle.train.presets`);
3. a config file: our own layout (`dump_config` output, or any subset of it) or an
   upstream run's `all_config.yaml` (told apart automatically), YAML or JSON;
4. `key=value` overrides typed exactly as on upstream's command line
   (`arch.L_cycles=4 +run_name=x ema=True data_paths="[data/arc2concept-aug-1000]"`;
   `trm_kaggle.train.overrides`).

Upstream spellings that have a different home here are translated
(`arch.loss.loss_type` -> `arch.loss_type`); upstream names for the model and loss
head are checked and dropped; upstream-only settings we do not use are dropped with a
note. Anything else that is not one of our keys is an error that names the key and
suggests the closest valid one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

import pydantic
import yaml

from trm_kaggle.config import TrainConfig, path_argument, texts_argument
from trm_kaggle.errors import TRMError
from trm_kaggle.names import blank_path_problem
from trm_kaggle.jsonio import parse_json, read_text
from trm_kaggle.yamlio import MAX_YAML_BYTES, parse_yaml
from trm_kaggle.train.config_layers import _LEAVES, UPSTREAM_ONLY, ConfigLayers, _get
from trm_kaggle.train.overrides import Interpolation
from trm_kaggle.train.presets import PRESETS, expand_preset_names
from trm_kaggle.wording import clipped, one_line, type_name

# config fields that may differ between a run and its resumption (freeze_weights: a staged test-time schedule
# trains the puzzle rows alone, then resumes the same run with every weight; the weights' optimizer starts then;
# data_paths: the same dataset mounted elsewhere, e.g. by the next Kaggle session: its fingerprint, checked
# separately, tells whether it is the same data)
RESUMABLE_CHANGES = {"data_paths", "max_steps", "time_limit", "progress", "log_interval", "checkpoint_keep",
                     "tensorboard", "wandb", "device", "compile", "micro_batch_size", "auto_batch", "threads",
                     "load_checkpoint", "eval_interval", "min_eval_interval", "checkpoint_every_eval", "checkpoint_path",
                     "freeze_weights", "grad_checkpointing", "max_nonfinite_steps", "save_every_s", "cuda_graphs"}


def config_differences(saved: TrainConfig, cfg: TrainConfig, clip: int = 40) -> str | None:
    """What a saved run's settings and `cfg` differ in, beyond `RESUMABLE_CHANGES`, in words ("arch.swiglu_norm:
    False in it, True now; ..."), or None when a resume may go on. A nested block is named by its field: two `arch`
    blocks clipped to one width read alike however they differ. Each difference shows both values: an edited state,
    not the user's settings, may be the odd one."""
    diffs = [k for k in TrainConfig.model_fields if k not in RESUMABLE_CHANGES and getattr(saved, k) != getattr(cfg, k)]
    if saved.stages and saved.max_steps != cfg.max_steps:  # the stages are shares of the run's length: another
        diffs.append("max_steps")  # max_steps moved their bounds under the resumed run (stage 5 became stage 3)
    if not diffs:
        return None
    pairs = []
    for k in diffs:
        old, new = getattr(saved, k), getattr(cfg, k)
        if k == "max_steps":
            pairs.append(("max_steps (the stages are shares of it)", old, new))
        elif isinstance(new, pydantic.BaseModel) and type(old) is type(new):
            pairs += [(f"{k}.{f}", getattr(old, f), getattr(new, f)) for f in type(new).model_fields
                      if getattr(old, f) != getattr(new, f)]
        else:
            pairs.append((k, old, new))
    said = "; ".join(f"{k}: {clipped(old, clip)} in it, {clipped(new, clip)} now" for k, old, new in pairs[:3])
    return said + (" ..." if len(pairs) > 3 else "")


def default_run_dir(cfg: TrainConfig) -> Path:
    """The run's folder: checkpoint_path, else runs/<run_name>, else runs/trm-<the datasets' folder names>."""
    if cfg.checkpoint_path:
        return Path(cfg.checkpoint_path)
    name = cfg.run_name or "trm-" + "-".join(Path(p).name for p in cfg.data_paths)
    return Path("runs") / name

# ---------------------------------------------------------------------------
# Config files
# ---------------------------------------------------------------------------


def read_config_file(path: Union[str, os.PathLike]) -> dict:
    """Parse a YAML or JSON config file (or a checkpoint directory holding upstream's all_config.yaml)."""
    path = os.fspath(path)
    if problem := blank_path_problem(path, "a YAML or JSON config file, or a run folder"):
        raise TRMError(f"--config {problem}")  # '' was read as the current folder: ".: ... found a directory"
    if os.path.isdir(path):
        path = os.path.join(path, "all_config.yaml")
    text = read_text(path, "config file", max_bytes=MAX_YAML_BYTES)
    # one reader per format: aliases budgeted, repeated keys refused, errors one short line
    data = parse_json(text, path, "config file") if path.lower().endswith(".json") else \
        parse_yaml(text, path, "config file")
    if data is None:  # a file cut to nothing by a failed write ran on the defaults, where an empty JSON file is refused
        raise TRMError(f"{one_line(path)}: the config file holds no settings (it is empty, blank or null): name "
                       "settings in it, or leave it out")
    if not isinstance(data, dict):
        raise TRMError(f"{path}: expected a mapping of settings at the top level, got {type(data).__name__}")
    return data


def is_upstream_run_config(data: Mapping) -> bool:
    """True for upstream's layout (`all_config.yaml`, `cfg_pretrain.yaml`, or `arch/trm.yaml` alone)."""
    arch = data.get("arch")
    if isinstance(arch, Mapping) and ("name" in arch or "loss" in arch):
        return True
    if "name" in data and "loss" in data:  # an arch file such as config/arch/trm.yaml
        return True
    return any(key in data for key in UPSTREAM_ONLY)


def _from_upstream(data: Mapping) -> dict:
    """Upstream's nested layout -> ours (same field names; arch-only files wrapped)."""
    if "name" in data and "loss" in data and "arch" not in data:
        data = {"arch": dict(data)}
    out = dict(data)
    arch = out.get("arch")
    if isinstance(arch, Mapping):
        arch = dict(arch)
        ndim = arch.get("puzzle_emb_ndim")
        if isinstance(ndim, str) and "${" in ndim:
            arch["puzzle_emb_ndim"] = Interpolation(ndim)
        # upstream wrote bfloat16 because it only ran on CUDA; "auto" keeps bf16 there and
        # picks float32 where bf16 is slow (CPUs without AVX-512/AMX). An explicit override still wins.
        if arch.get("forward_dtype") == "bfloat16":
            arch["forward_dtype"] = "auto"
        out["arch"] = arch
    return out


# ---------------------------------------------------------------------------
# Public entry points
# ---------------------------------------------------------------------------


def load_train_config(config_file: Union[str, os.PathLike, None] = None, presets: Union[str, Sequence[str]] = (),
                      overrides: Union[str, Sequence[str]] = (), notes: Optional[list[str]] = None,
                      values: Optional[Mapping[str, Any]] = None) -> TrainConfig:
    """Build a TrainConfig: defaults, then `presets` in order, then `config_file`, then `values`, then `overrides`.

    `values` ({"data_paths": [folder], "checkpoint_path": run}) are set as they are: a folder pasted into an
    override's text (`data_paths=[{folder}]`) was read by the override grammar, so a name holding a comma trained
    on two other folders, and a `]` or a trailing space changed what was named.

    `config_file` is YAML or JSON in our layout (`dump_config`, possibly partial) or an
    upstream run's `all_config.yaml` (a checkpoint directory holding one also works).
    `overrides` are hydra-style `key=value` strings; `presets` and `overrides` take a list, or one string alone.
    Upstream-only settings that are dropped are appended to `notes` (when given) and logged as warnings.
    Raises TRMError for unknown keys, bad values and unknown presets.
    """
    presets = texts_argument("presets", presets, "a preset's name")
    overrides = texts_argument("overrides", overrides, "a key=value override",
                               mapping_hint="values= takes a mapping of settings")
    # an empty one: read_config_file's line, which names --config as the command line gives it
    path_argument("config_file", config_file, "a config file's path", optional=True, blank_said_later=True)
    if values is not None and not isinstance(values, Mapping):
        raise TypeError(f"values: expected a mapping of settings ({{\"lr\": 1e-4}}) or None, got {type_name(values)}")
    if notes is not None and not isinstance(notes, list):
        raise TypeError(f"notes: expected a list (the notes are appended to it) or None, got {type_name(notes)}")
    layers = ConfigLayers(notes if notes is not None else [])
    for name in expand_preset_names(presets):
        layers.apply_mapping(PRESETS[name]["overrides"], f"preset {name}")
    if config_file is not None:
        source = os.fspath(config_file)
        data = read_config_file(config_file)
        if upstream := is_upstream_run_config(data):
            data = _from_upstream(data)
        layers.apply_mapping(data, source)
        # a record of a whole run (upstream's all_config.yaml, our config.json or `dump_config`) holds every
        # setting, read or not; a file that sets some is the user's choice, and its unread ones are said
        partial = not upstream and {k for k, v in layers.origin.items() if v == source} < set(_LEAVES)
    if values:
        layers.apply_mapping(values, "the given values")
    for text in overrides:
        layers.apply_override(text)
    cfg = layers.build()
    if config_file is not None and partial:
        _note_unread_in_file(cfg, layers, source)
    _note_attention_without_positions(cfg, layers)
    return _read_by_something(cfg, overrides)


#: Settings typed as overrides that the run they build would not read, by the switch that leaves them unread:
#: (the settings, their switches, whether `cfg` leaves them unread, what the switch says).
_UNREAD = [
    (("ema_rate",), ("ema",), lambda c: not c.ema, "ema=false"),
    (("arch.rope_theta",), ("arch.pos_encodings",), lambda c: c.arch.pos_encodings != "rope",
     "arch.pos_encodings is not rope"),
    # with mlp_t the token mixer is a SwiGLU along the sequence: no attention reads heads or rotary angles
    (("arch.num_heads", "arch.rope_theta"), ("arch.mlp_t",), lambda c: c.arch.mlp_t, "arch.mlp_t=true (no attention)"),
    (("puzzle_emb_lr", "puzzle_emb_weight_decay", "arch.puzzle_emb_len"), ("arch.puzzle_emb_ndim",),
     lambda c: c.arch.puzzle_emb_ndim == 0, "arch.puzzle_emb_ndim=0 (no puzzle table)"),
    (("lr", "weight_decay", "beta1", "beta2", "optimizer"), ("freeze_weights",), lambda c: c.freeze_weights,
     "freeze_weights=true (the puzzle rows alone train: no optimizer for the weights)"),
    # (the end's evaluation is followed by the end's save whatever checkpoint_every_eval says)
    (("min_eval_interval", "checkpoint_every_eval"), ("eval_interval",), lambda c: c.eval_interval is None,
     "eval_interval=None (only the end evaluates)"),
]


def _read_by_something(cfg: TrainConfig, overrides: Sequence[str]) -> TrainConfig:
    """`cfg`, or TRMError for an override (`key=value` typed by the user, never a preset's or a saved config's
    value) that nothing in `cfg` reads because its switch is off, by a preset, the default or the user. Overrides
    that turn the switch on and off again (`ema=true ema_rate=0.99 ema=false`) layer on purpose, as a sweep's
    variant over its base does."""
    from trm_kaggle.train.overrides import parse_override

    keys_typed = [parse_override(text)[0] for text in overrides]
    typed = dict(zip(keys_typed, overrides))
    for keys, switches, unread, why in _UNREAD:
        layered = any(keys_typed.count(s) > 1 for s in switches)
        for key in keys:
            if key in typed and not layered and unread(cfg):
                raise TRMError(f"{typed[key]}: read by nothing, {why} here: change {' or '.join(switches)}, or "
                               "drop it")
    return cfg


def _note_attention_without_positions(cfg: TrainConfig, layers: ConfigLayers) -> None:
    """Attention turned on by the user (`arch.mlp_t=false` typed or in a file) over a preset's
    `arch.pos_encodings=none` (the MLP mixer's, as `sudoku4-cpu` sets it): a valid run, so said (a warning, and
    `notes`) rather than refused, as a preset's value never is. Silently, its attention saw no positions."""
    mixer, positions = layers.origin.get("arch.mlp_t", ""), layers.origin.get("arch.pos_encodings", "")
    if not cfg.arch.mlp_t and cfg.arch.pos_encodings == "none" and mixer and not mixer.startswith("preset ") \
            and positions.startswith("preset "):
        layers.note(f"{mixer}: attention keeps {positions}'s arch.pos_encodings=none (no position encoding): add "
                    "arch.pos_encodings=rope, or the attention preset, for RoPE")


def _note_unread_in_file(cfg: TrainConfig, layers: ConfigLayers, source: str) -> None:
    """A partial config file's settings that this run would not read, at a value other than the default: said (a
    warning, and `notes`), not refused as typed ones are (a file may be shared by runs whose switches differ).
    Silently, `ema_rate: 0.5` beside `ema: false` trained and went into the run's config.json as if used."""
    tree, said = cfg.model_dump(), set()
    for keys, _switches, unread, why in _UNREAD:
        if not unread(cfg):
            continue
        for key in keys:
            if key not in said and layers.origin.get(key) == source and _get(tree, key) != _get(layers.defaults, key):
                said.add(key)
                layers.note(f"{source}: {key}={clipped(_get(tree, key))} is read by nothing ({why} here): it changes "
                            "nothing in this run")


def apply_overrides(cfg: TrainConfig, overrides: Sequence[str], notes: Optional[list[str]] = None,
                    presets: Sequence[str] = ()) -> TrainConfig:
    """A copy of `cfg` with named `presets` applied on top of it, then hydra-style `key=value` overrides
    (`~key` resets to the default). A sweep's variants change a base config this way."""
    layers = ConfigLayers(notes if notes is not None else [])
    layers.tree = cfg.model_dump()
    for name in expand_preset_names(list(presets)):
        layers.apply_mapping(PRESETS[name]["overrides"], f"preset {name}")
    overrides = [overrides] if isinstance(overrides, str) else list(overrides)
    for text in overrides:
        layers.apply_override(text)
    return _read_by_something(layers.build(), overrides)


def dump_config(cfg: TrainConfig) -> str:
    """The whole config as YAML in our layout; `load_train_config(config_file=...)` reads it back exactly."""
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False, default_flow_style=False)


# ---------------------------------------------------------------------------
# The settings, described (`trm-kaggle train --list-settings`)
# ---------------------------------------------------------------------------


def _type_name(annotation) -> str:
    """A field's type as a user types it: `int`, `float or None`, `adam_atan2 | adamw | lion`, `list`."""
    import typing

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(map(str, args))
    if origin is typing.Union:
        named = [_type_name(a) for a in args if a is not type(None)]
        return " or ".join(named) + (" or None" if type(None) in args else "")
    if origin in (list, tuple):
        return "list"
    return getattr(annotation, "__name__", str(annotation))


def _number(v) -> str:
    return f"{v:,}" if isinstance(v, int) else f"{v:g}"


def _bounds(field) -> str:
    """A field's numeric bounds ('>= 1', '> 0, finite', '0..1') from its pydantic metadata."""
    low = high = ""
    finite = False
    for m in field.metadata:
        for attr, sign in (("ge", ">="), ("gt", ">")):
            if getattr(m, attr, None) is not None:
                low = f"{sign} {_number(getattr(m, attr))}"
        for attr, sign in (("le", "<="), ("lt", "<")):
            if getattr(m, attr, None) is not None:
                high = f"{sign} {_number(getattr(m, attr))}"
        finite = finite or getattr(m, "allow_inf_nan", None) is False
    parts = [p for p in (low, high) if p] + (["finite"] if finite else [])
    return ", ".join(parts)


def describe_settings() -> str:
    """Every `key=value` setting of `train`: dotted key, type, default, bounds and what it does."""
    from pydantic import BaseModel

    rows = []

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            ann = field.annotation
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                walk(ann, f"{prefix}{name}.")
                continue
            default = field.get_default(call_default_factory=True)
            rows.append((prefix + name, _type_name(ann), str(default),
                         _bounds(field), field.description or ""))

    walk(TrainConfig, "")
    lines = ["Settings of `trm-kaggle train`, for key=value overrides, --config files and presets "
             "(key = default  [type; bounds]):", ""]
    for key, kind, default, bounds, text in rows:
        lines.append(f"  {key} = {default}  [{'; '.join(p for p in (kind, bounds) if p)}]")
        if text:
            lines.append(f"      {text}")
    lines += ["", "Upstream spellings work too (arch.loss.loss_type=..., +run_name=...); --print-config shows the "
              "settings a command line resolves to."]
    return "\n".join(lines)
