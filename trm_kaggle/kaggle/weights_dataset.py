"""The weights dataset: an export's weights.safetensors + config.json, MODEL_CARD.md and the manifest:
`build_weights`; with `compile_cache`, a compile cache made for the kernel's GPU and torch
(compile_cache.bin + compile_cache.json, see `trm_kaggle.model.compiling`), which the kernel loads when both
match.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable

from trm_kaggle.atomic import atomic_directory, atomic_write_json, atomic_write_text
from trm_kaggle.errors import TRMError, os_error_line
from trm_kaggle.jsonio import is_regular, read_json
from trm_kaggle.kaggle.metadata import (
    DATASET_META, LICENSE, MODEL_CARD, REPO_ROOT, BundleIds, dataset_metadata, write_manifest,
)
from trm_kaggle.kaggle.wheels import install_line
from trm_kaggle.wording import one_line


def export_problem(path: Path) -> str | None:
    """Why `path` is not an export folder (one phrase naming the file and the cause), or None when it is one:
    `weights.safetensors` beside a `config.json` that `trm-kaggle export` or `import-upstream` wrote."""
    from trm_kaggle.model import EXPORT_FORMAT

    cfg = Path(path) / "config.json"
    if not is_regular(cfg, "config.json") or not is_regular(Path(path) / "weights.safetensors", "weights"):
        if os.path.isdir(path):
            try:  # a folder this user cannot read hides its files: the permission is the cause, not the folder
                os.listdir(path)
            except OSError as e:
                return f"cannot be read ({os_error_line(e)})"
        return "not an export (needs weights.safetensors + config.json)"
    try:
        config = read_json(cfg, "config.json")
    except TRMError as e:  # its own line names the file and the cause (cut, a duplicated key, a huge integer)
        return f"not a readable export: {e}"
    if not isinstance(config, dict) or config.get("format") != EXPORT_FORMAT:
        return (f"not an export: {cfg} was not written by `trm-kaggle export` or `trm-kaggle import-upstream` "
                f"(its \"format\" is not {EXPORT_FORMAT!r})")
    return None


def is_export(path: Path) -> bool:
    return export_problem(path) is None


def default_weights(repo: Path = REPO_ROOT) -> Path | None:
    """The repo's `weights/` directory if it is an export, or its only subdirectory that is one."""
    root = Path(repo) / "weights"
    if is_export(root):
        return root
    subs = [p for p in sorted(root.iterdir()) if p.is_dir() and is_export(p)] if root.is_dir() else []
    return subs[0] if len(subs) == 1 else None


def _md_value(v: Any) -> str:
    return f"`{v}`" if not isinstance(v, (dict, list)) else f"`{json.dumps(v)}`"


def _parameters(config: dict) -> str:
    """Parameter counts without and with the trained puzzle-embedding table, from the export's config."""
    from trm_kaggle.model import export_parameter_count

    try:
        text = str(export_parameter_count(config))
    except (KeyError, TypeError, ValueError) as e:  # pydantic's ValidationError is a ValueError
        return f"unknown (the config does not describe the model: {e})"
    if config.get("puzzle_embedding") == "mean":
        text += "; the export ships the mean row alone"
    return text


def model_card(config: dict, export_dir: Path, ids: BundleIds) -> str:
    """MODEL_CARD.md from an export's config.json (architecture, and `info`: training command, data, metrics)."""
    arch = config.get("arch", {})
    info = config.get("info") or {}
    tcfg = info.get("train_config") if isinstance(info.get("train_config"), dict) else {}
    lines = [f"# {ids.weights_slug}", "",
             "Tiny Recursive Model (TRM, arXiv 2510.04871) weights for ARC-AGI, exported by trm_kaggle "
             f"{config.get('trm_kaggle_version', '?')} (`weights.safetensors` + `config.json`, no pickle).", "",
             "## Use", "",
             "```python",
             "from pathlib import Path",
             "",
             "from trm_kaggle.model.export import load_inference_model",
             "",
             f'weights = next(Path("/kaggle/input").glob("**/{ids.weights_slug}"))  # either mount layout',
             "model, config = load_inference_model(weights)",
             "```", "",
             f"Offline install of the package: `{install_line(ids.wheels_slug)}` (dataset {ids.wheels_id}).", "",
             "## Model", ""]
    lines.append(f"- parameters: {_parameters(config)}")
    for key in ("seq_len", "vocab_size", "num_puzzle_identifiers", "puzzle_embedding"):
        lines.append(f"- {key}: {_md_value(config.get(key))}")
    for key in ("hidden_size", "num_heads", "expansion", "H_cycles", "L_cycles", "L_layers", "halt_max_steps",
                "pos_encodings", "puzzle_emb_len", "mlp_t", "forward_dtype", "loss_type"):
        if key in arch:
            lines.append(f"- arch.{key}: {_md_value(arch[key])}")
    lines += ["", "## Training", ""]
    command = info.get("command") or info.get("training_command")
    if command:
        lines.append(f"- command: `{command if isinstance(command, str) else ' '.join(map(str, command))}`")
    data = info.get("data_paths") or info.get("data") or tcfg.get("data_paths")
    if data:
        lines.append(f"- data: {_md_value(data)}")
    for key in ("source", "imported_from", "step", "ema"):
        if key in info:
            lines.append(f"- {key}: {_md_value(info[key])}")
    for key in ("global_batch_size", "lr", "puzzle_emb_lr", "weight_decay", "epochs", "max_steps", "seed"):
        if key in tcfg:
            lines.append(f"- {key}: {_md_value(tcfg[key])}")
    if not (command or data or tcfg or info):
        lines.append("No training information was recorded in the export.")
    metrics = info.get("metrics")
    lines += ["", "## Metrics", ""]
    if isinstance(metrics, dict) and metrics:
        lines += [f"- {k}: {_md_value(v)}" for k, v in metrics.items()]
        lines += ["", "Token accuracy is not a solve rate: the ARC Prize scores exact grids (pass@2)."]
    elif metrics:
        lines.append(f"{_md_value(metrics)}")
    else:
        lines.append("None recorded in the export.")
    other = {k: v for k, v in info.items() if k not in {"train_config", "metrics", "command", "training_command",
                                                       "data_paths", "data", "source", "imported_from", "step",
                                                       "ema"}}
    # each line of text one line, its control characters escaped: the values come from the export's config.json (a
    # version "99.0\x1b[31m" reached the published card raw); the JSON blocks below are escaped by json.dumps
    lines = [one_line(line) for line in lines]
    if other:
        lines += ["", "## Other information", "", "```json", json.dumps(other, indent=2, default=str), "```"]
    if tcfg:
        lines += ["", "## Full training configuration", "", "```json", json.dumps(tcfg, indent=2, default=str),
                  "```"]
    lines += ["", f"License: {LICENSE}.", one_line(f"Source export: `{Path(export_dir).name}`."), ""]
    return "\n".join(lines)


def check_compile_cache(path: str | os.PathLike) -> dict:
    """A compile cache file to ship (`--compile-cache`): its record beside it, its digest the record's. Returns the
    record; TRMError naming the file otherwise. Its target (torch, GPU) is the kernel's to match, not this
    machine's."""
    import hashlib

    from trm_kaggle.model import MAX_CACHE_BYTES, read_cache_record

    path = Path(path)
    if not is_regular(path, "compile cache"):
        raise TRMError(f"--compile-cache {path}: no such file (a compile_cache.bin written by `trm-kaggle submit` or "
                       f"`train` on the target GPU)")
    record = read_cache_record(path)
    if path.stat().st_size > MAX_CACHE_BYTES or hashlib.sha256(path.read_bytes()).hexdigest() != record["sha256"]:
        raise TRMError(f"--compile-cache {path}: its sha256 differs from its record's (damaged or replaced)")
    return record


def build_weights(out_dir: str | os.PathLike, export_dir: str | os.PathLike, *, ids: BundleIds,
                  log: Callable[[str], None] = print, compile_cache: str | os.PathLike | None = None) -> dict:
    """The weights dataset in `out_dir` from an export directory (replaced atomically), with `compile_cache`
    (checked by `check_compile_cache`) beside the weights."""
    export_dir = Path(export_dir)
    if not export_dir.is_dir():
        raise TRMError(f"--weights {export_dir}: no such directory")
    if problem := export_problem(export_dir):
        raise TRMError(f"--weights {export_dir}: {problem}")
    config = read_json(export_dir / "config.json", "config.json")
    from trm_kaggle.model import read_export  # torch: only when a bundle is built

    # what the kernel will load, checked as it will be: readable, bound to its config, intact, finite
    n_tensors = len(read_export(export_dir)[1])
    cache_record = check_compile_cache(compile_cache) if compile_cache is not None else None
    with atomic_directory(out_dir, kind="kaggle weights dataset") as tmp:
        log(f"copying the export {export_dir}")
        for name in ("weights.safetensors", "config.json"):
            shutil.copy2(export_dir / name, tmp / name)
        if is_regular(export_dir / MODEL_CARD, MODEL_CARD):  # a device or /proc file there is refused, never read
            shutil.copy2(export_dir / MODEL_CARD, tmp / MODEL_CARD)
        else:
            atomic_write_text(tmp / MODEL_CARD, model_card(config, export_dir, ids))
        if cache_record is not None:
            from trm_kaggle.model import CACHE_FILE, CACHE_RECORD

            target = cache_record["target"]
            log(f"adding the compile cache {compile_cache} (torch {target.get('torch')}, {target.get('device')}"
                + (f" sm_{''.join(map(str, target['capability']))}" if target.get("capability") else "") + ")")
            shutil.copy2(compile_cache, tmp / CACHE_FILE)
            shutil.copy2(Path(compile_cache).with_name(CACHE_RECORD), tmp / CACHE_RECORD)
        atomic_write_json(tmp / DATASET_META, dataset_metadata(ids.weights_id), indent=2)
        # the export by its folder name only: a published dataset never carries the builder's paths
        manifest = write_manifest(tmp, {"id": ids.weights_id, "export": export_dir.name})
    return {"id": ids.weights_id, "export": str(export_dir), "tensors": n_tensors,
            "files": {k: v["size"] for k, v in manifest["files"].items()},
            "compile_cache": cache_record["target"] if cache_record is not None else None}
