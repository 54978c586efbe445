"""Inference exports: a trained model as `weights.safetensors` + `config.json`, and back.

An export is a directory with no pickle in it. `config.json` records the
architecture, the sequence length, the vocabulary and the puzzle-embedding table
it holds: "full" (one row per puzzle identifier it was trained on) or "mean" (a
single row, which is all that unseen tasks need; 2.4 GB less for
arc2concept-aug-1000).

The mean row has one rule everywhere (`mean_puzzle_row`): the mean over ALL rows
of the table, row 0 (the blank identifier) included. It is upstream's load-time
rule: when a checkpoint's table has another row count than the model, upstream's
pretrain.py fills every row with `torch.mean(saved_table, dim=0)`. Exports with
`mean_embedding=True`, loading an export for a dataset with other identifiers and
importing an upstream checkpoint all use it.

`model_from_train_state` rebuilds the model a train state describes (the state is
read by `trm_kaggle.train.checkpoint`; this module never reads train files itself).
"""

from __future__ import annotations

import json
import logging
import math
import numbers
import os
from pathlib import Path
from typing import Any, Callable, Mapping, get_args

import pydantic
import torch

from trm_kaggle import __version__
from trm_kaggle.atomic import Found, atomic_directory, atomic_write_json, shared_file_mode
from trm_kaggle.config import (EXECUTION_FIELDS, MAX_PUZZLE_IDENTIFIERS, MAX_SEED, ArchConfig, ExportConfig,
                               TaskIdMode, TrainConfig, flag_argument, path_argument, validation_line,
                               whole_argument)
from trm_kaggle.data import load_metadata
from trm_kaggle.errors import DamagedFile, DataError, TRMError
from trm_kaggle.hardware import place_model
from trm_kaggle.jsonio import directory_problem, parse_json, read_failure, read_json, readable_file
from trm_kaggle.model.digest import content_digest
from trm_kaggle.model.finite import check_finite
from trm_kaggle.model.trm import ParameterCount, TinyRecursiveModel
from trm_kaggle.wording import clipped, command_line, count, shown, type_name

log = logging.getLogger(__name__)

EXPORT_FORMAT = "trm_kaggle.inference"
PUZZLE_EMB_KEY = "puzzle_emb.weights"
# arch fields added after exports were first written: an export that lacks one was written before it existed and
# computed its default (weights/arc2-cpu-tiny has none of them); any other field missing is refused, never filled
LATER_ARCH_FIELDS = ("swiglu_norm", "kernels", "fp8")


# ---------------------------------------------------------------------------
# The puzzle-embedding table for unseen puzzles
# ---------------------------------------------------------------------------


def mean_puzzle_row(table: torch.Tensor) -> torch.Tensor:
    """The (1, D) mean of every row of a (N, D) puzzle-embedding table, row 0 (blank) included."""
    return table.mean(dim=0, keepdim=True)


def resize_puzzle_embedding(table: torch.Tensor, num_identifiers: int) -> torch.Tensor:
    """A table of `num_identifiers` rows, every row `mean_puzzle_row(table)`; unchanged when the count fits."""
    # 0 rows once gave a NaN mean and a score of 0; 2**31 asked for 256 GiB
    num_identifiers = whole_argument("num_identifiers", num_identifiers, 1, MAX_PUZZLE_IDENTIFIERS)
    # the table's own rows likewise (read from a file: one line): a mean of no rows, or of a NaN, filled every row
    # with NaN without a word
    if not isinstance(table, torch.Tensor) or table.ndim != 2 or not table.is_floating_point():
        shape = f"{table.ndim}-D {table.dtype} tensor" if isinstance(table, torch.Tensor) else type(table).__name__
        raise DataError(f"table: a puzzle-embedding table is a 2-D floating-point tensor (rows x width), got a {shape}")
    if table.shape[0] == 0:
        raise DataError(f"table: the puzzle-embedding table has no rows ({tuple(table.shape)}): no mean row to start "
                        "from")
    if not bool(torch.isfinite(mean_puzzle_row(table)).all()):  # a NaN or inf anywhere reaches the mean
        raise DataError("table: the puzzle-embedding table's mean row is not finite (a NaN or inf in the table)")
    if table.shape[0] == num_identifiers:
        return table
    return mean_puzzle_row(table).expand(num_identifiers, -1).contiguous()


# ---------------------------------------------------------------------------
# Does the model need its own task id? (`trm-kaggle evaluate --task-ids`)
# ---------------------------------------------------------------------------

TASK_ID_MODES: tuple[str, ...] = get_args(TaskIdMode)


def task_id_table(table: torch.Tensor, mode: str, seed: int = 0) -> torch.Tensor:
    """The table with every puzzle's row replaced according to `mode`:

    own     unchanged: each puzzle keeps the row it was trained with
    blank   row 0 (identifier 0, "<blank>", never trained) for every puzzle
    random  the row of another trained identifier (1..N-1, never its own), drawn per puzzle from `seed`
    mean    `mean_puzzle_row(table)` for every puzzle: what an unseen task starts from
    """
    n = table.shape[0]
    if mode == "own":
        return table
    if mode == "blank":
        return table[:1].expand(n, -1).clone()
    if mode == "mean":
        return mean_puzzle_row(table).expand(n, -1).clone()
    if mode == "random":
        if n < 3:
            raise TRMError(f"--task-ids random needs at least two trained identifiers; the table has {n} rows")
        g = torch.Generator().manual_seed(seed)
        pick = torch.randint(1, n - 1, (n,), generator=g)  # one of the N-2 trained rows other than its own ...
        own = torch.arange(n)
        pick = pick + ((pick >= own) & (own >= 1)).long()  # ... shifted past its own row (row 0 takes any)
        return table[pick]
    raise TRMError(f"unknown task-id mode {mode!r}: choose one of {', '.join(TASK_ID_MODES)}")


def apply_task_ids(model: TinyRecursiveModel, mode: str, seed: int = 0) -> str | None:
    """Replace the model's puzzle rows in place (`task_id_table`); returns a note when the modes cannot differ."""
    if mode not in TASK_ID_MODES:
        raise TRMError(f"unknown task-id mode {mode!r}: choose one of {', '.join(TASK_ID_MODES)}")
    seed = whole_argument("seed", seed, 0, MAX_SEED)  # NaN failed in torch's manual_seed; -1 was taken
    if model.puzzle_emb is None:
        return "the model has no puzzle embedding (puzzle_emb_ndim=0): every task-id mode is the same model"
    table = model.puzzle_emb.weights
    if torch.equal(table, table[:1].expand_as(table)):
        return ("every row of this model's puzzle-embedding table is the same (an export with --mean-embedding, "
                "or one loaded for puzzles it was not trained on): own, blank, random and mean give the same "
                "answers; the question needs an export that kept its full table")
    with torch.no_grad():
        table.copy_(task_id_table(table, mode, seed))
    return None


# ---------------------------------------------------------------------------
# Writing and reading exports
# ---------------------------------------------------------------------------


def count_bounds(field: str) -> tuple[int, int]:
    """(low, high) of a count in an export's config.json (`ExportConfig`'s `ge`/`le`, written there alone)."""
    meta = ExportConfig.model_fields[field].metadata
    return next(m.ge for m in meta if hasattr(m, "ge")), next(m.le for m in meta if hasattr(m, "le"))


def export_inference(out_dir: str | os.PathLike, model: torch.nn.Module, *, arch: ArchConfig, seq_len: int,
                     vocab_size: int, mean_embedding: bool = False, info: dict | None = None,
                     found: Found | None = None, written: dict | None = None) -> Path:
    """Write `weights.safetensors` + `config.json` (atomically, as a directory). Nothing is written for arguments
    its readers would not take back: `arch` is an `ArchConfig` (a dict is a TypeError: `ArchConfig.model_validate`
    reads one), `seq_len` and `vocab_size` those the model was built for, `mean_embedding` True or False, and the
    model's weights on a device that holds them (not meta) and finite.

    `found`: what stood at `out_dir` when the command started (`atomic.found_at`): an export another command wrote
    there since is kept and this one refused. `written`, a dict, receives the config.json written: what a success
    line describes (read back from the folder, it could be another command's)."""
    from safetensors.torch import save_file

    _folder_argument("out_dir", out_dir)
    if not isinstance(model, TinyRecursiveModel):  # an export holds what its readers build: a TRM model
        raise DataError(f"{out_dir}: not written: the model is a {type(model).__name__}, not a TinyRecursiveModel")
    if not isinstance(arch, ArchConfig):  # a dict failed on its first attribute, naming no argument
        raise TypeError(f"arch: expected an ArchConfig (ArchConfig.model_validate reads a dict), got "
                        f"{type_name(arch)}")
    mean_embedding = flag_argument("mean_embedding", mean_embedding)  # "no" was taken as yes: the table dropped
    seq_len, vocab_size = _plain_count(seq_len), _plain_count(vocab_size)
    _check_info(out_dir, info)
    # a model built on the meta device (shapes alone) failed in torch's copy below, naming neither it nor the export
    if empty := next((k for k, t in model.state_dict().items() if isinstance(t, torch.Tensor) and t.is_meta), None):
        raise TRMError(f"{out_dir}: not written: model: tensor {empty} is on the meta device: it holds no weights "
                       "to export (load them first)")
    tensors = {k: v.detach().to("cpu", torch.float32).contiguous() for k, v in model.state_dict().items()}
    num_ids = None
    if PUZZLE_EMB_KEY in tensors:
        num_ids = int(tensors[PUZZLE_EMB_KEY].shape[0])
        if mean_embedding:
            tensors[PUZZLE_EMB_KEY] = mean_puzzle_row(tensors[PUZZLE_EMB_KEY])
    config = {
        "format": EXPORT_FORMAT,
        "trm_kaggle_version": __version__,
        "arch": portable_arch(arch),
        "seq_len": seq_len,
        "vocab_size": vocab_size,
        "num_puzzle_identifiers": num_ids,
        "puzzle_embedding": "mean" if mean_embedding else "full",
        "info": info or {},
    }
    try:  # never an export its readers refuse (a --seq-len past their bound, numpy's True) ...
        checked = ExportConfig.model_validate(config)
    except pydantic.ValidationError as e:
        raise DataError(f"{out_dir}: not written, its config.json would be refused: {validation_line(e)}") from None
    # ... and the sizes as the readers take them (16.0 or "16" was written as given; a numpy bool reached json's
    # TypeError below, before this check)
    seq_len = config["seq_len"] = checked.seq_len
    vocab_size = config["vocab_size"] = checked.vocab_size
    config["arch"] = checked.arch.model_dump()  # likewise the arch's fields ("yes" of a model_construct'ed arch)
    # the weights carry the shape-defining config they were saved with: a later edit of config.json
    # (num_heads, puzzle_emb_len, ... change no tensor shape) is caught when loading
    # and a checksum of the tensors, in the same file: bytes changed on disk or in a copy are caught when loading
    weights_meta = {"format": EXPORT_FORMAT, "config": json.dumps(_shape_config(config), sort_keys=True),
                    "sha256": content_digest(tensors)}
    _check_fits(out_dir, model, arch, seq_len, vocab_size)  # ... nor weights that do not fit it (sizes bounded now)
    check_finite(tensors, f"{Path(out_dir) / 'weights.safetensors'} (not written)")
    with atomic_directory(out_dir, kind="export", found=found) as tmp:
        save_file(tensors, str(tmp / "weights.safetensors"), metadata=weights_meta)
        _sort_metadata(tmp / "weights.safetensors")
        # safetensors writes it private; exports are shared as far as the user's umask says (0644 ignored it)
        os.chmod(tmp / "weights.safetensors", shared_file_mode())
        atomic_write_json(tmp / "config.json", config, indent=2)
    if written is not None:
        written.update(config)
    return Path(out_dir)


def _plain_count(value: Any) -> Any:
    """numpy's integers as the ints they are (json cannot write them); anything else as given, for ExportConfig to
    judge (a bool is no integer here: numpy's is none either)."""
    return int(value) if isinstance(value, numbers.Integral) and not isinstance(value, bool) else value


def _check_info(out_dir: str | os.PathLike, info: Any) -> None:
    """Refuse, before anything is written, an `info` record that strict JSON cannot hold: a NaN or inf was written
    as a bare `NaN` into config.json, which other JSON readers refuse; a set or a numpy float was json's TypeError.
    (Readers take `info` as it is, as they take a dataset's `build_info`: the check is the writers'.)"""
    try:
        json.dumps(info, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as e:
        # json stopped at the first NaN or inf, so the walk in json's order meets it before any cycle or depth
        where = _not_finite(info, "info") if isinstance(e, ValueError) and "Out of range" in str(e) else None
        said = f"{shown(where, 120)} is not a finite number (strict JSON has no NaN or infinity)" if where else \
            f"info is not a record strict JSON can hold ({shown(str(e), 120)})"
        raise DataError(f"{out_dir}: not written: {said}") from None


def _not_finite(value: Any, where: str) -> str | None:
    """Where in `value` (a record json wrote up to its first problem) the first NaN or inf lies, or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else where
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    return next((found for key, item in items if (found := _not_finite(item, f"{where}[{clipped(key, 40)}]"))), None)


def _check_fits(out_dir: str | os.PathLike, model: TinyRecursiveModel, arch: ArchConfig, seq_len: int,
                vocab_size: int) -> None:
    """Refuse, before anything is written, a model whose tensors are not those of the TRM model that `arch`,
    `seq_len` and `vocab_size` describe: its readers build that model from config.json and refuse the weights
    (`check_export`), so such an export was written, said done, and failed later in a bundle or a Kaggle run."""
    where = f"{out_dir}: not written"
    # RoPE has no tensor per position, so another seq_len shows in no shape: its readers ran the model on
    # sequences it was not trained for, without a word
    if model.seq_len != seq_len:
        raise DataError(f"{where}: seq_len={seq_len} given, but the model was built for seq_len {model.seq_len}")
    rows = int(model.puzzle_emb.weights.shape[0]) if model.puzzle_emb is not None else 1
    if rows == 0:  # its readers would resize it to its mean: NaN
        raise DataError(f"{where}: the model's puzzle-embedding table ({PUZZLE_EMB_KEY}) has no rows")
    try:
        with torch.device("meta"):  # shapes only: no memory, whatever the sizes
            described = TinyRecursiveModel(arch, seq_len, vocab_size, rows)
    except (ValueError, AssertionError) as e:  # an architecture the model cannot be built with
        raise DataError(f"{where}: the model its config.json would describe cannot be built: {e}") from None
    problem = weights_problem(described.state_dict(), model.state_dict(), sides=("in the model", "in the config"))
    if problem:
        raise DataError(f"{where}: the model's weights do not fit the arch, seq_len and vocab_size given (its "
                        f"readers would refuse them): {problem}")


def _sort_metadata(path: Path) -> None:
    """Put a safetensors header's metadata keys in sorted order, in place. safetensors writes them in the order of a
    hash map seeded anew for each file, so one model exported twice differed in bytes (a file hash, a Kaggle
    dataset's version) though in no tensor. The header keeps its length: the same text, reordered."""
    with open(path, "r+b") as f:
        size = int.from_bytes(f.read(8), "little")
        text = f.read(size).decode("utf-8")
        header = json.loads(text)
        header["__metadata__"] = dict(sorted(header.get("__metadata__", {}).items()))
        ordered = json.dumps(header, separators=(",", ":"), ensure_ascii=False)
        if len(ordered.encode("utf-8")) == len(text.rstrip(" ").encode("utf-8")):  # the writer's JSON, or leave it
            f.seek(8)
            f.write(ordered.encode("utf-8").ljust(size, b" "))


def portable_arch(arch: ArchConfig) -> dict:
    """The arch an export records: how its run computed is no promise about where the export runs. Fused Triton
    kernels become `auto` (Triton where it imports and passes its self-check, else torch: a CPU-only Kaggle kernel
    still loads the weights) and float8 becomes `off` (the inference that wants it opts in): neither changes a
    tensor."""
    record = arch.model_dump(warnings=False)  # an arch built around its validators is checked by the caller
    if record.get("kernels") == "triton":
        record["kernels"] = "auto"
    record["fp8"] = "off"
    return record


def _shape_config(config: dict) -> dict:
    """What decides the model's computation: the arch (how it computes aside: dtype, kernels, fp8) and the
    sequence and vocabulary sizes."""
    arch = {k: v for k, v in config["arch"].items() if k not in EXECUTION_FIELDS}
    return {"arch": arch, "seq_len": config["seq_len"], "vocab_size": config["vocab_size"]}


def _is_training_run(path: Path, config: Any) -> bool:
    """Whether `path`, whose config.json holds `config`, is a training run's folder: its train states or run
    record, or the settings a run writes (a whole TrainConfig: `{}` would pass as one of defaults)."""
    if (path / "run.json").is_file() or any(path.glob("state_step*.pt")):
        return True
    if not isinstance(config, dict) or "data_paths" not in config:
        return False
    try:
        TrainConfig.model_validate(config)
    except (pydantic.ValidationError, ValueError, TypeError):
        return False
    return True


def read_export(path: str | os.PathLike) -> tuple[dict, dict[str, torch.Tensor]]:
    """(config, tensors) of an export directory; one clear line for a missing, truncated or foreign file,
    a config.json field that is missing, unknown, of the wrong type or out of bounds, and a config.json
    edited after the weights were written."""
    from safetensors import SafetensorError, safe_open

    path = Path(_folder_argument("path", path))
    if path.is_file():  # named by one of its files: `{file}/config.json` would be the path said
        raise TRMError(f"{path}: a file, not an export folder (give the folder holding config.json and "
                       "weights.safetensors)")
    if os.path.islink(path) and not os.path.exists(path):  # a loop, a dangling link: said as such, never as its
        raise TRMError(directory_problem(path, "export folder"))  # weights "missing"
    if not os.path.lexists(path):  # said as its config.json "not found", the folder named looked present
        raise TRMError(f"{path}: no such export folder (give the folder `trm-kaggle export` or `train --export` "
                       "wrote)")
    cfg_path, w_path = path / "config.json", path / "weights.safetensors"
    if os.path.lexists(w_path):  # a FIFO would block safetensors, a device never end; safetensors calls a
        readable_file(w_path, "weights")  # missing permission "No such file": the cause is named here instead
    raw = read_json(cfg_path, "config.json", hint=f"is {path} an export made by `trm-kaggle export`?")
    if not isinstance(raw, dict) or raw.get("format") != EXPORT_FORMAT:
        if _is_training_run(path, raw):  # its config.json is the run's settings: the export is one command away
            raise TRMError(f"{path}: a training run's folder, not an export (its config.json holds the run's "
                           f"settings): write one with `{command_line('trm-kaggle', 'export', path, '--out', 'EXPORT_DIR')}` "
                           "and name that folder")
        raise TRMError(f"{cfg_path}: not a trm-kaggle inference config")
    try:  # strictly: "32" for a number or "yes" for a boolean was taken as 32 and True (a model card showed "32")
        config = ExportConfig.model_validate(raw, strict=True).model_dump()
    except pydantic.ValidationError as e:
        raise TRMError(f"{cfg_path}: invalid export config: {validation_line(e)}{_given(e)}") from None
    # ArchConfig's defaults filled a missing halt_max_steps or num_heads: another model, run without a word
    missing = [k for k in ArchConfig.model_fields if k not in raw["arch"] and k not in LATER_ARCH_FIELDS]
    if missing:
        raise TRMError(f"{cfg_path}: invalid export config: {'; '.join(f'arch.{k}: Field required' for k in missing)}"
                       " (an export records its model's every arch field; the package's default is no stand-in)")
    try:  # every check reads the header alone: a tensor is read only once its name, shape and dtype are the
        # model's (a file declaring a tensor of gigabytes beside them cost that memory, then a wrong line)
        with safe_open(str(w_path), framework="pt") as f:
            metadata = f.metadata() or {}
            _check_header(config, cfg_path, w_path, metadata, {k: _header_tensor(f, k, w_path) for k in f.keys()})
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except FileNotFoundError:
        raise TRMError(f"{w_path}: missing") from None
    except (SafetensorError, OSError, ValueError) as e:  # a failing disk is no damage: `read_failure` tells
        raise read_failure(e, w_path, "weights") or DamagedFile(f"{w_path}: unreadable or truncated safetensors "
                                                               f"file: {e}") from None
    digest = metadata.get("sha256")
    if digest is not None and content_digest(tensors) != digest:  # older exports carry none: nothing to verify
        raise DamagedFile(f"{w_path}: damaged: its tensors do not match the checksum written with them (bytes changed "
                          f"on disk or in a copy); export the weights again")
    check_finite(tensors, str(w_path))
    return config, tensors


#: safetensors' names of the dtypes an export's tensors could be read as (anything else no export of ours wrote)
_HEADER_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
                  "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
                  "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2}


def _header_tensor(f: Any, name: str, w_path: Path) -> torch.Tensor:
    """The tensor `name` of an open safetensors file as its header declares it: a meta-device tensor of its shape
    and dtype, no byte of it read."""
    piece = f.get_slice(name)
    dtype = _HEADER_DTYPES.get(piece.get_dtype())
    if dtype is None:
        raise DamagedFile(f"{w_path}: tensor {clipped(name, 80)} is {clipped(piece.get_dtype(), 20)}; an export holds "
                          "float32 (export the weights again)")
    return torch.empty(piece.get_shape(), dtype=dtype, device="meta")


def _check_header(config: dict, cfg_path: Path, w_path: Path, metadata: dict, declared: dict[str, torch.Tensor]
                  ) -> None:
    """Refuse weights whose header (its metadata, and each tensor's name, shape and dtype in `declared`, as
    `_header_tensor` gives them) do not fit `config`, the export's config.json: one line naming the file and the
    tensor, before any tensor is read."""
    tag = metadata.get("format")
    if tag not in (None, EXPORT_FORMAT, "pt"):  # another program's weights beside our config.json ("pt" is
        # safetensors' own tag for torch tensors: what `safetensors.torch.save_file` users write back)
        raise TRMError(f"{w_path}: its metadata says format {clipped(tag)}, not {EXPORT_FORMAT!r}: not the "
                       "weights of a trm-kaggle export")
    saved = metadata.get("config")
    if saved is not None:  # exports of older versions carry no config: nothing to compare
        saved = _recorded_config(saved, w_path)
        ours = _shape_config(config)
        # a field the weights' version did not have yet is that field's default (what that version computed)
        recorded = {**{k: f.default for k, f in ArchConfig.model_fields.items()}, **saved.get("arch", {})}
        changed = [f"{k}: {recorded.get(k)!r} in the weights, {v!r} in config.json"
                   for k, v in ours["arch"].items() if recorded.get(k) != v]
        changed += [f"{k}: {saved.get(k)!r} in the weights, {ours[k]!r} in config.json"
                    for k in ("seq_len", "vocab_size") if saved.get(k) != ours[k]]
        if changed:
            raise TRMError(f"{cfg_path}: differs from the config the weights were saved with ({'; '.join(changed[:3])}"
                           f"{' ...' if len(changed) > 3 else ''}): the model would compute something else")
    # every export is written in float32: float64 (1e300 would load as inf) or a half type (cast without a word)
    # was written by no export of ours
    other = [(k, t.dtype) for k, t in declared.items() if t.is_floating_point() and t.dtype != torch.float32]
    if other:
        raise DamagedFile(f"{w_path}: tensor {other[0][0]} is {other[0][1]}; an export holds float32 (export the "
                          f"weights again)")
    table = declared.get(PUZZLE_EMB_KEY)
    # rows x width in floating point, as every reader takes it: an integer or 3-D table was refused by the resize
    # under its argument's name alone ("table: ..."), a flattened one counted its values as rows against config.json
    if table is not None and (table.ndim != 2 or not table.is_floating_point()):
        raise DamagedFile(f"{w_path}: tensor {PUZZLE_EMB_KEY} is a {table.ndim}-D {table.dtype} tensor of shape "
                          f"{tuple(table.shape)}; an export holds a 2-D floating-point table (rows x width) (export "
                          "the weights again)")
    if table is not None and table.shape[0] == 0:  # resized for the puzzles, its mean of 0 rows would be NaN
        raise DamagedFile(f"{w_path}: tensor {PUZZLE_EMB_KEY} has no rows; an export holds its trained rows or their "
                          "mean (export the weights again)")
    # the table's rows as config.json counts them (its mean alone in a mean export): an edited count loaded the
    # mean row for every trained one, with a note blaming another dataset
    n, kind = config["num_puzzle_identifiers"], config["puzzle_embedding"]
    rows, expected = (None if table is None else table.shape[0]), (None if n is None else 1 if kind == "mean" else n)
    if rows != expected:
        raise TRMError(f"{cfg_path}: num_puzzle_identifiers {n} with puzzle_embedding {kind!r} calls for "
                       f"{count(expected or 0, 'puzzle-table row')}, and {w_path.name} holds {rows or 'none'}: "
                       "config.json differs from the weights (export them again)")
    # every other tensor the one the model config.json describes has, in its shape
    try:
        with torch.device("meta"):  # shapes only: no memory, whatever the sizes
            model = TinyRecursiveModel(ArchConfig(**config["arch"]), config["seq_len"], config["vocab_size"],
                                       expected or 1)
    except (ValueError, AssertionError) as e:  # an architecture the model cannot be built with
        raise TRMError(f"{cfg_path}: the model it describes cannot be built: {e}") from None
    if problem := weights_problem(model.state_dict(), declared):
        raise TRMError(f"{w_path}: weights do not match the model config: {problem}")


def _folder_argument(name: str, value: Any) -> str | os.PathLike:
    """`value`, a library call's export folder, when it is a path; else a TypeError naming the argument (5 was said
    as None)."""
    return path_argument(name, value, "an export folder's path")


def _recorded_config(text: str, w_path: Path) -> dict:
    """The config a weights file records (its metadata's "config"), read by the one JSON reader (too deep, an
    integer too long, a repeated key: one line) and checked for the shape it is compared by: an object whose
    `arch` is an object. Anything else is one line naming the file, never a traceback."""
    where = f"{w_path} (its recorded config)"
    saved = parse_json(text, where, "recorded config")
    if not isinstance(saved, dict):
        raise DamagedFile(f"{where}: not a JSON object but {_kind(saved)}; export the weights again")
    if not isinstance(saved.get("arch", {}), dict):
        raise DamagedFile(f"{where}: 'arch' is {_kind(saved['arch'])}, not an object; export the weights again")
    return saved


def _given(e: pydantic.ValidationError) -> str:
    """What config.json gave for the first field of the wrong JSON type, or "": pydantic's words alone ("Input
    should be a valid integer") read as if 32 were no integer when config.json wrote the string "32"."""
    errors = e.errors()
    err = next((err for err in errors if err["type"] in ("int_type", "float_type", "bool_type", "string_type")),
               None)
    if err is None:
        return ""
    value = err["input"]
    kind = "a decimal number" if isinstance(value, float) else _kind(value)
    where = f"{'.'.join(map(str, err['loc']))}: " if len(errors) > 1 else ""
    return f" ({where}given {kind}, {clipped(value, 40)})"


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def export_digest(path: str | os.PathLike) -> str:
    """The sha256 of an export's tensors (`content_digest`): the one written in its weights file, or for an older
    export that carries none, computed from the tensors. What a report records of the weights it evaluated."""
    from safetensors import SafetensorError, safe_open

    if os.path.islink(_folder_argument("path", path)) and not os.path.exists(path):
        raise TRMError(directory_problem(path, "export folder"))
    w_path = Path(path) / "weights.safetensors"
    if os.path.lexists(w_path):  # as `read_export`: a FIFO there would block safetensors' open for ever
        readable_file(w_path, "weights")
    try:
        with safe_open(str(w_path), framework="pt") as f:
            digest = (f.metadata() or {}).get("sha256")
    except FileNotFoundError:
        raise TRMError(f"{w_path}: missing") from None
    except (SafetensorError, OSError, ValueError) as e:
        raise TRMError(f"{w_path}: unreadable or truncated safetensors file: {e}") from None
    return digest or content_digest(read_export(path)[1])


def fit_state_dict(model: torch.nn.Module, tensors: Mapping[str, torch.Tensor], source: str,
                   display: Callable[[str], str] = str, same_dtype: bool = False) -> None:
    """Load `tensors` into `model` strictly, or TRMError naming the missing, unexpected and misshapen
    tensors (each with both shapes): the one check behind every load of weights. `display` names a
    tensor in messages (e.g. upstream's key for an upstream checkpoint). `same_dtype`: each tensor in the
    model's own dtype (a train state resumed exactly; an upstream checkpoint in bfloat16 is cast)."""
    problem = weights_problem(model.state_dict(), tensors, display, same_dtype)
    if problem:
        raise TRMError(f"{source}: weights do not match the model config: {problem}")
    model.load_state_dict(dict(tensors), strict=True)


def weights_problem(expected: Mapping[str, torch.Tensor], tensors: Mapping[str, torch.Tensor],
                    display: Callable[[str], str] = str, same_dtype: bool = False,
                    sides: tuple[str, str] = ("in the file", "in the model")) -> str | None:
    """What keeps `tensors` from loading into a model whose state dict is `expected` (None when nothing does): the
    missing, unexpected and misshapen tensors (each with both shapes, said with `sides`) and those of another kind.
    Only names, shapes and dtypes are read, so `expected` may be a meta-device model's: a model is compared before
    it is built."""

    def listed(names: list[str]) -> str:
        return ", ".join(names[:4]) + (f" (+{len(names) - 4} more)" if len(names) > 4 else "")

    missing = [display(k) for k in sorted(set(expected) - set(tensors))]
    unexpected = [display(k) for k in sorted(set(tensors) - set(expected))]
    bad = [f"{display(k)} {tuple(tensors[k].shape)} {sides[0]}, {tuple(v.shape)} {sides[1]}"
           for k, v in expected.items() if k in tensors and tuple(tensors[k].shape) != tuple(v.shape)]
    # load_state_dict would copy integers or booleans into the weights without a word (no writer saves them)
    kinds = [f"{display(k)} {tensors[k].dtype}" for k, v in expected.items()
             if k in tensors and (v.is_floating_point() and not tensors[k].is_floating_point()
                                  or same_dtype and tensors[k].dtype != v.dtype)]
    parts = ([f"missing keys {listed(missing)}"] if missing else []) + \
            ([f"keys this model does not have {listed(unexpected)}"] if unexpected else []) + \
            ([f"tensor shapes do not match: {listed(bad)}"] if bad else []) + \
            ([f"tensors of another dtype than the model's: {listed(kinds)}" if same_dtype else
              f"tensors that are not floating point: {listed(kinds)}"] if kinds else [])
    return "; ".join(parts) or None


def shadow_problem(model: torch.nn.Module, shadow: Mapping[str, torch.Tensor]) -> str | None:
    """What is wrong with `shadow`, an EMA's averaged weights, for `model` (None when nothing is): each name one of
    the model's parameters (buffers are never averaged), in its shape, floating point. Copied in unchecked, an
    integer would be cast into the weights without a word and another shape or a buffer's name be a traceback."""
    params = dict(model.named_parameters())
    foreign = sorted(set(shadow) - set(params))
    bad = [f"{k} {tuple(t.shape)}, the parameter {tuple(params[k].shape)}" for k, t in shadow.items()
           if k in params and tuple(t.shape) != tuple(params[k].shape)]
    kinds = [f"{k} {t.dtype}" for k, t in shadow.items() if k in params and not t.is_floating_point()]
    parts = ([f"names that are no parameter of the model: {', '.join(foreign[:4])}"] if foreign else []) + \
            ([f"shapes that differ: {', '.join(bad[:4])}"] if bad else []) + \
            ([f"tensors that are not floating point: {', '.join(kinds[:4])}"] if kinds else [])
    return "; ".join(parts) or None


# ---------------------------------------------------------------------------
# Loading a model
# ---------------------------------------------------------------------------


def load_inference_model(path: str | os.PathLike, num_puzzle_identifiers: int | None = None,
                         device: str | torch.device = "cpu"):
    """The exported model. With `num_puzzle_identifiers` (e.g. for new tasks), the table is resized and
    every row starts from the mean row (`mean_puzzle_row`, upstream's rule for unseen puzzles)."""
    _folder_argument("path", path)
    if _is_meta(device):  # the model moved there has no weights: it was returned without a word
        raise TRMError(f"device={clipped(device, 40)}: a meta device holds no data (the model loaded there would "
                       "hold no weights): name cpu, cuda, mps or xla, or leave device out")
    if num_puzzle_identifiers is not None:
        try:  # numpy's integers are whole numbers too
            num_puzzle_identifiers = whole_argument("num_puzzle_identifiers", num_puzzle_identifiers, 1,
                                                    MAX_PUZZLE_IDENTIFIERS)
        except ValueError:
            raise TRMError(f"num_puzzle_identifiers={clipped(num_puzzle_identifiers)}: a whole number from 1 to "
                           f"{MAX_PUZZLE_IDENTIFIERS:,} (the table's rows), or None for the export's own count"
                           ) from None
    config, tensors = read_export(path)
    arch = ArchConfig(**config["arch"])
    n = num_puzzle_identifiers or (config.get("num_puzzle_identifiers") or 1)
    if PUZZLE_EMB_KEY in tensors:
        tensors[PUZZLE_EMB_KEY] = resize_puzzle_embedding(tensors[PUZZLE_EMB_KEY], n)
    model = TinyRecursiveModel(arch, config["seq_len"], config["vocab_size"], n)
    fit_state_dict(model, tensors, str(Path(path) / "weights.safetensors"))
    place_model(model, device)  # a device this machine lacks is one line, as the `device` setting's
    return model, config


def _is_meta(device: Any) -> bool:
    """Whether torch reads `device` as the meta device (a device it cannot read is `place_model`'s to say)."""
    try:
        return isinstance(device, (str, torch.device)) and torch.device(device).type == "meta"
    except (RuntimeError, TypeError, ValueError):
        return False


def unchecked_config_note(path: str | os.PathLike) -> str | None:
    """A note when the export's weights file records no config (re-saved by another program with safetensors' own
    `save_file`, or written by an older version), or None: its config.json's cycles, heads and embedding length,
    which no tensor's shape shows, are then taken as written. Read after `read_export` took the file."""
    from safetensors import safe_open

    w_path = Path(path) / "weights.safetensors"
    with safe_open(str(w_path), framework="pt") as f:
        if (f.metadata() or {}).get("config") is not None:
            return None
    return (f"{w_path} records no config (re-saved by another program, or an older export): config.json's cycles, "
            "heads and embedding length are taken as written, unchecked")


def check_export(path: str | os.PathLike) -> dict:
    """The config of an export whose tensors were loaded into the model its config.json describes, as `submit`
    and the Kaggle kernel will load them: `read_export`'s checks, then every tensor's name and shape (an export
    without the record of its config, whose config.json says another hidden size or vocabulary, is refused
    here, not in every task of a submission). The puzzle table is checked by its row width alone (a table of
    any length is resized to the tasks at hand)."""
    config, tensors = read_export(path)
    if PUZZLE_EMB_KEY in tensors:
        tensors[PUZZLE_EMB_KEY] = tensors[PUZZLE_EMB_KEY][:1]
    try:
        model = TinyRecursiveModel(ArchConfig(**config["arch"]), config["seq_len"], config["vocab_size"], 1)
    except (ValueError, AssertionError) as e:  # an architecture the model cannot be built with
        raise TRMError(f"{Path(path) / 'config.json'}: the model it describes cannot be built: {e}") from None
    fit_state_dict(model, tensors, str(Path(path) / "weights.safetensors"))
    if note := unchecked_config_note(path):
        log.warning(note)
    return config


def load_model_for_dataset(weights: str | os.PathLike, dataset_dir: str | os.PathLike,
                           device: str | torch.device = "cpu") -> tuple[torch.nn.Module, dict, str | None]:
    """An exported model sized for `dataset_dir`'s puzzle identifiers, and a note for the user if resized.

    Unseen puzzles (more identifiers than the export holds) get rows equal to the mean row;
    a model trained on another dataset with as many or more rows is loaded as is, with a warning note.
    """
    _folder_argument("weights", weights)  # before the dataset is read; the readers would name it `path`
    n_ids = load_metadata(dataset_dir, "train").num_puzzle_identifiers
    config, _ = read_export(weights)
    saved = config.get("num_puzzle_identifiers") or 1
    if config.get("puzzle_embedding") == "mean" or saved < n_ids:
        model, config = load_inference_model(weights, num_puzzle_identifiers=n_ids, device=device)
        note = None if config.get("puzzle_embedding") == "mean" else (
            f"the export has {saved} puzzle embeddings, the dataset {n_ids} identifiers: every row starts "
            "from the mean of the saved rows")
        return model, config, "; ".join(filter(None, (note, unchecked_config_note(weights)))) or None
    model, config = load_inference_model(weights, device=device)
    note = None if saved == n_ids else (
        f"the export has {saved} puzzle embeddings but the dataset {n_ids} identifiers: was it trained on "
        "another dataset? Its per-puzzle embeddings will not match these puzzles")
    return model, config, "; ".join(filter(None, (note, unchecked_config_note(weights)))) or None


def export_parameter_count(config: dict) -> ParameterCount:
    """Parameters of an export's model without and with the puzzle table it was trained with (an export made
    with --mean-embedding keeps one row but records the trained row count)."""
    arch = ArchConfig(**config["arch"])
    model = TinyRecursiveModel(arch, config["seq_len"], config["vocab_size"], 1)
    return model.parameter_count(puzzle_rows=config.get("num_puzzle_identifiers") or 1)


def model_from_train_state(state: dict[str, Any], use_ema: bool = True, source: str = "train state"
                           ) -> tuple[TinyRecursiveModel, TrainConfig, bool]:
    """(model, its training config, whether EMA weights were used) of a loaded train state; `source` names it in
    errors (`train state PATH`).

    With `use_ema` and an EMA shadow in the state, the model gets the EMA weights
    (what exports ship); otherwise the live weights.
    """
    try:
        cfg = TrainConfig.model_validate_json(state["config"])
    except pydantic.ValidationError as e:
        raise DataError(f"{source} field 'config': not settings this trm_kaggle can read: {validation_line(e)}"
                        ) from None
    shape = state["model_shape"]
    model = TinyRecursiveModel(cfg.arch, shape["seq_len"], shape["vocab_size"], shape["num_puzzle_identifiers"])
    # the state's own settings and model_shape size the model: its weights must fit them
    fit_state_dict(model, state["model"], f"{source} (its fields 'config' and 'model_shape')")
    if state.get("ema") and not cfg.ema:  # no such run keeps an average: these weights came from elsewhere
        raise DataError(f"{source} field 'ema': averaged weights in a run whose settings say ema=false")
    if state.get("ema") and (problem := shadow_problem(model, state["ema"])):
        raise DataError(f"{source} field 'ema': {problem}")
    ema = bool(use_ema and state.get("ema"))
    if ema:
        with torch.no_grad():
            params = dict(model.named_parameters())
            for name, tensor in state["ema"].items():
                params[name].copy_(tensor)
    return model, cfg, ema
