"""Checkpoints: full train states for exact resume, and inference exports.

* A train state (`state_step00001234.pt`) holds everything a run needs to continue
  as if it had never stopped: model, EMA shadow, both optimizers, step and epoch,
  RNG state, the data loader's position, every rank's ACT carry, the config, and a
  fingerprint of the dataset. Written atomically (temp file + rename); the newest
  `keep` states are kept. Loaded with `torch.load(weights_only=True)`: no pickle.
* An inference export is a directory with `weights.safetensors` + `config.json`
  (no pickle at all). `mean_embedding=True` replaces the per-puzzle embedding table
  (2.4 GB for arc2concept-aug-1000) by its mean row: unseen tasks start from that row.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
from pathlib import Path
from typing import Any

import torch

from trm_kaggle import __version__
from trm_kaggle.atomic import atomic_directory, atomic_write, atomic_write_json
from trm_kaggle.config import ArchConfig
from trm_kaggle.errors import TRMError
from trm_kaggle.jsonio import read_json

STATE_FORMAT = "trm_kaggle.train_state"
EXPORT_FORMAT = "trm_kaggle.inference"
_STATE_RE = re.compile(r"state_step(\d+)\.pt$")


# ---------------------------------------------------------------------------
# Train states
# ---------------------------------------------------------------------------


def dataset_fingerprint(paths: list[str]) -> str:
    """Changes when a dataset is rebuilt or replaced: hashes dataset.json files, array sizes and identifiers."""
    h = hashlib.sha256()
    for p in paths:
        root = Path(p)
        for rel in ("train/dataset.json", "test/dataset.json", "identifiers.json"):
            f = root / rel
            h.update(rel.encode())
            if f.exists():
                h.update(f.read_bytes() if f.stat().st_size < (1 << 20) else str(f.stat().st_size).encode())
        for split in ("train", "test"):
            f = root / split / "all__inputs.npy"
            h.update(str(f.stat().st_size if f.exists() else -1).encode())
    return h.hexdigest()[:16]


def state_path(run_dir: Path, step: int) -> Path:
    return run_dir / f"state_step{step:08d}.pt"


def list_states(run_dir: Path) -> list[Path]:
    """Train states in `run_dir`, oldest first."""
    found = [(int(m.group(1)), p) for p in Path(run_dir).glob("state_step*.pt") if (m := _STATE_RE.search(p.name))]
    return [p for _, p in sorted(found)]


def save_train_state(run_dir: Path, step: int, state: dict[str, Any], keep: int) -> Path:
    """Write the state atomically, then delete all but the newest `keep` states."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = state_path(run_dir, step)
    payload = {"format": STATE_FORMAT, "version": __version__, "step": step, **state}
    buf = io.BytesIO()
    torch.save(payload, buf)
    atomic_write(path, lambda f: f.write(buf.getbuffer()), mode="wb")
    for old in list_states(run_dir)[:-keep] if keep > 0 else []:
        old.unlink(missing_ok=True)
    return path


def load_train_state(path: Path) -> dict[str, Any]:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise TRMError(f"{path}: no such checkpoint") from None
    except Exception as e:  # truncated zip, foreign pickle, ...
        raise TRMError(f"{path}: not a readable train state (truncated or not written by trm-kaggle?): "
                       f"{type(e).__name__}: {str(e).splitlines()[0][:200]}") from None
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        raise TRMError(f"{path}: not a trm-kaggle train state (for upstream step_N files use `trm-kaggle import-upstream`)")
    return state


# ---------------------------------------------------------------------------
# Inference exports
# ---------------------------------------------------------------------------


def export_inference(out_dir: str | os.PathLike, model: torch.nn.Module, *, arch: ArchConfig, seq_len: int,
                     vocab_size: int, mean_embedding: bool = False, info: dict | None = None) -> Path:
    """Write `weights.safetensors` + `config.json` (atomically, as a directory)."""
    from safetensors.torch import save_file

    tensors = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in model.state_dict().items()}
    num_ids = None
    key = "puzzle_emb.weights"
    if key in tensors:
        num_ids = tensors[key].shape[0]
        if mean_embedding:
            tensors[key] = tensors[key][1:].mean(0, keepdim=True) if num_ids > 1 else tensors[key][:1]
    config = {
        "format": EXPORT_FORMAT,
        "trm_kaggle_version": __version__,
        "arch": arch.model_dump(),
        "seq_len": seq_len,
        "vocab_size": vocab_size,
        "num_puzzle_identifiers": num_ids,
        "puzzle_embedding": "mean" if mean_embedding else "full",
        "info": info or {},
    }
    with atomic_directory(out_dir, is_replaceable=lambda p: (p / "config.json").exists()) as tmp:
        save_file(tensors, str(tmp / "weights.safetensors"), metadata={"format": EXPORT_FORMAT})
        os.chmod(tmp / "weights.safetensors", 0o644)  # safetensors writes it private; exports are shared
        atomic_write_json(tmp / "config.json", config, indent=2)
    return Path(out_dir)


def read_export(path: str | os.PathLike) -> tuple[dict, dict[str, torch.Tensor]]:
    """(config, tensors) of an export directory; clear errors for missing, truncated or foreign files."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    cfg_path, w_path = path / "config.json", path / "weights.safetensors"
    config = read_json(cfg_path, "config.json", hint=f"is {path} an export made by `trm-kaggle export`?")
    if not isinstance(config, dict) or config.get("format") != EXPORT_FORMAT:
        raise TRMError(f"{cfg_path}: not a trm-kaggle inference config")
    try:
        tensors = load_file(str(w_path))
    except FileNotFoundError:
        raise TRMError(f"{w_path}: missing") from None
    except (SafetensorError, OSError, ValueError) as e:
        raise TRMError(f"{w_path}: unreadable or truncated safetensors file: {e}") from None
    return config, tensors


def load_inference_model(path: str | os.PathLike, num_puzzle_identifiers: int | None = None,
                         device: str | torch.device = "cpu"):
    """The exported model. With `num_puzzle_identifiers` (e.g. for new tasks), the table is resized and
    every row starts from the mean of the saved rows (upstream's rule for unseen puzzles)."""
    from trm_kaggle.model.trm import TinyRecursiveModel

    config, tensors = read_export(path)
    arch = ArchConfig(**config["arch"])
    saved = tensors.get("puzzle_emb.weights")
    n = num_puzzle_identifiers or (config.get("num_puzzle_identifiers") or 1)
    if saved is not None and (saved.shape[0] != n):
        mean = saved[1:].mean(0) if saved.shape[0] > 1 and config.get("puzzle_embedding") != "mean" else saved[0]
        tensors["puzzle_emb.weights"] = mean.expand(n, -1).clone()
    model = TinyRecursiveModel(arch, config["seq_len"], config["vocab_size"], n)
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    if missing or unexpected:
        raise TRMError(f"{path}: weights do not fit the config (missing {missing[:3]}, unexpected {unexpected[:3]})")
    return model.to(device), config


def load_model_for_dataset(weights: str | os.PathLike, dataset_dir: str | os.PathLike,
                           device: str | torch.device = "cpu") -> tuple[torch.nn.Module, dict, str | None]:
    """An exported model sized for `dataset_dir`'s puzzle identifiers, and a note for the user if resized.

    Unseen puzzles (more identifiers than the export holds) get rows equal to the mean trained row;
    a model trained on another dataset with as many or more rows is loaded as is, with a warning note.
    """
    from trm_kaggle.data.format import load_metadata

    n_ids = load_metadata(dataset_dir, "train").num_puzzle_identifiers
    config, _ = read_export(weights)
    saved = config.get("num_puzzle_identifiers") or 1
    if config.get("puzzle_embedding") == "mean" or saved < n_ids:
        model, config = load_inference_model(weights, num_puzzle_identifiers=n_ids, device=device)
        note = None if config.get("puzzle_embedding") == "mean" else (
            f"the export has {saved} puzzle embeddings, the dataset {n_ids} identifiers: every row starts "
            "from the mean of the saved rows")
        return model, config, note
    model, config = load_inference_model(weights, device=device)
    note = None if saved == n_ids else (
        f"the export has {saved} puzzle embeddings but the dataset {n_ids} identifiers: was it trained on "
        "another dataset? Its per-puzzle embeddings will not match these puzzles")
    return model, config, note
