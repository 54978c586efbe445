"""Read and write checkpoints of the paper's reference code ("upstream").

An upstream checkpoint `step_<N>` is `torch.save(state_dict)` of its loss head
wrapping the ACT model, usually after torch.compile, so every key looks like

    [_orig_mod.]model.inner.<name>

with <name> one of H_init, L_init, embed_tokens.embedding_weight,
embed_pos.embedding_weight, lm_head.weight, q_head.weight, q_head.bias,
puzzle_emb.weights, L_level.layers.<i>.{self_attn.qkv_proj, self_attn.o_proj,
mlp.gate_up_proj, mlp.down_proj, mlp_t.gate_up_proj, mlp_t.down_proj}.weight.
Our `TinyRecursiveModel` uses the same tensors under shorter names
(`embed_tokens.weight`, `layers.<i>....`), so the mapping is a pure renaming;
values are converted to float32 (upstream stores H_init/L_init in bfloat16).
The run's `all_config.yaml` sits beside the checkpoints. `import_upstream` turns
a checkpoint and its config into one of our exports (`trm_kaggle.model.export`).
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Union

import torch
from pydantic import ValidationError

from trm_kaggle.config import (MAX_GRID_CELLS, MAX_PUZZLE_IDENTIFIERS, ArchConfig, path_argument, validation_line,
                               whole_argument)
from trm_kaggle.data import load_metadata
from trm_kaggle.errors import TRMError
from trm_kaggle.jsonio import open_regular, readable_file
from trm_kaggle.model.export import (PUZZLE_EMB_KEY, count_bounds, export_inference, fit_state_dict,
                                     resize_puzzle_embedding, weights_problem)
from trm_kaggle.model.finite import check_finite, first_nonfinite, no_plain_data
from trm_kaggle.model.hub import resolve_checkpoint, snapshot_commit
from trm_kaggle.model.safe_load import load_weights_only
from trm_kaggle.model.trm import TinyRecursiveModel
from trm_kaggle.wording import clipped
from trm_kaggle.yamlio import read_yaml

log = logging.getLogger(__name__)

COMPILE_PREFIX = "_orig_mod."
UPSTREAM_PREFIX = "model.inner."

# (ours, upstream) for names that differ; anything else maps to itself.
_RENAMES = [
    (re.compile(r"^layers\.(\d+)\."), r"L_level.layers.\1."),
    (re.compile(r"^embed_tokens\.weight$"), "embed_tokens.embedding_weight"),
    (re.compile(r"^embed_pos\.weight$"), "embed_pos.embedding_weight"),
]
_RENAMES_BACK = [
    (re.compile(r"^L_level\.layers\.(\d+)\."), r"layers.\1."),
    (re.compile(r"^embed_tokens\.embedding_weight$"), "embed_tokens.weight"),
    (re.compile(r"^embed_pos\.embedding_weight$"), "embed_pos.weight"),
]
_KNOWN_UPSTREAM = re.compile(
    r"^(H_init|L_init|embed_tokens\.embedding_weight|embed_pos\.embedding_weight|lm_head\.weight|"
    r"q_head\.weight|q_head\.bias|puzzle_emb\.weights|"
    r"L_level\.layers\.\d+\.(self_attn\.qkv_proj|self_attn\.o_proj|mlp\.gate_up_proj|mlp\.down_proj|"
    r"mlp_t\.gate_up_proj|mlp_t\.down_proj)\.weight)$"
)


def _rename(name: str, rules) -> str:
    for pattern, repl in rules:
        name = pattern.sub(repl, name)
    return name


# ---------------------------------------------------------------------------
# State dict conversion
# ---------------------------------------------------------------------------


# Our names of the upstream tensors that are vectors; every other one is a matrix.
_VECTORS = frozenset({"H_init", "L_init", "q_head.bias"})


def from_upstream_state_dict(state: Mapping[str, Any], source: str = "state dict") -> Dict[str, torch.Tensor]:
    """Upstream keys (with or without `_orig_mod.`, any float dtype) -> our names, float32 tensors.

    Raises TRMError naming `source` when a key is not an upstream TRM key or a value is not a tensor (see
    `_renamed`).
    """
    return {k: v.float() if v.is_floating_point() else v for k, v in _renamed(state, source).items()}


def _renamed(state: Mapping[str, Any], source: str) -> Dict[str, torch.Tensor]:
    """Upstream's tensors under our names, in their own dtypes (nothing copied: a tensor's declared size is checked
    before any copy of it is made), each a plain tensor with data of its number of dimensions and a puzzle table
    whose rows are within the package's bound. TRMError naming `source` and the key otherwise."""
    if not isinstance(state, Mapping):
        raise TRMError(f"{source}: expected a state dict (a mapping of names to tensors), got {type(state).__name__}")
    out: Dict[str, torch.Tensor] = {}
    unknown = []
    for key, value in state.items():
        name = str(key)
        if name.startswith(COMPILE_PREFIX):
            name = name[len(COMPILE_PREFIX):]
        if not name.startswith(UPSTREAM_PREFIX) or not _KNOWN_UPSTREAM.match(name[len(UPSTREAM_PREFIX):]):
            unknown.append(str(key))
            continue
        if not isinstance(value, torch.Tensor):
            raise TRMError(f"{source}: entry {key!r} is a {type(value).__name__}, not a tensor")
        name = _rename(name[len(UPSTREAM_PREFIX):], _RENAMES_BACK)
        if name in out:  # one weight given twice (with and without `_orig_mod.`): neither is taken unsaid
            raise TRMError(f"{source}: the weight {name} is given twice ({key!r} and another key naming it, with "
                           f"or without {COMPILE_PREFIX!r}): not one checkpoint")
        _check_tensor(value, name, key, source)
        out[name] = value
    if unknown:
        shown = ", ".join(unknown[:5]) + (f" (+{len(unknown) - 5} more)" if len(unknown) > 5 else "")
        raise TRMError(f"{source}: not an upstream TRM checkpoint: unexpected keys {shown}")
    if not out:
        raise TRMError(f"{source}: no upstream TRM weights found (empty state dict)")
    return out


#: The floating dtypes a checkpoint's weights are read in (each cast to float32 exactly, float64 within its range).
_READ_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


def _check_tensor(value: torch.Tensor, name: str, key: Any, source: str) -> None:
    """One line for a tensor that cannot be upstream's weight `name` (our name; `key` as the file says it): meta,
    sparse, nested or quantized (no plain data: torch's copy failed with a traceback, as the train-state reader
    refuses it in one line), of another number of dimensions (a 0-D embedding was an IndexError), or a puzzle table
    whose rows are past the package's bound (a stride-0 tensor declares any size in a file of kilobytes)."""
    if kind := no_plain_data(value):
        raise TRMError(f"{source}: not a usable checkpoint: entry {key!r} holds a {kind} tensor (no plain data to "
                       "load)")
    if value.is_floating_point() and value.dtype not in _READ_DTYPES:  # float8 was cast without its scales, unsaid
        raise TRMError(f"{source}: entry {key!r} is {value.dtype}; upstream's weights are float32, bfloat16 or "
                       "float16 (float64 is read too): a float8 tensor keeps no scale here to undo its quantisation")
    ndim = 1 if name in _VECTORS else 2
    if value.ndim != ndim:
        raise TRMError(f"{source}: entry {key!r} has {value.ndim} dimensions {tuple(value.shape)}; the model's "
                       f"{name} has {ndim}")
    if name == PUZZLE_EMB_KEY and value.shape[0] == 0:  # its mean, the row of every unseen puzzle, would be NaN
        raise TRMError(f"{source}: entry {key!r}, the puzzle-embedding table, has no rows (the checkpoint is damaged "
                       "or not a TRM run's)")
    if name == PUZZLE_EMB_KEY and value.shape[0] > MAX_PUZZLE_IDENTIFIERS:
        raise TRMError(f"{source}: entry {key!r} holds {value.shape[0]:,} puzzle-embedding rows; a table holds 1 to "
                       f"{MAX_PUZZLE_IDENTIFIERS:,} (the checkpoint is damaged or not a TRM run's)")


def to_upstream_state_dict(state: Union[TinyRecursiveModel, Mapping[str, torch.Tensor]], compiled: bool = True,
                           dtype: Optional[torch.dtype] = None,
                           init_dtype: Optional[torch.dtype] = torch.bfloat16) -> Dict[str, torch.Tensor]:
    """Our model (or its state dict) -> upstream key layout.

    compiled: prefix keys with `_orig_mod.` as upstream's torch.compile'd runs save them.
    dtype: cast every floating tensor (None keeps float32, as upstream stores its weights).
    init_dtype: dtype of H_init/L_init when `dtype` is None (upstream keeps them in its forward dtype).
    """
    if isinstance(state, torch.nn.Module):
        state = state.state_dict()
    prefix = (COMPILE_PREFIX if compiled else "") + UPSTREAM_PREFIX
    out = {}
    for name, value in state.items():
        value = value.detach()
        if value.is_floating_point():
            target = dtype if dtype is not None else (init_dtype if name in ("H_init", "L_init") else None)
            if target is not None:
                value = value.to(target)
        out[prefix + _rename(name, _RENAMES)] = value.clone()
    return out


def load_upstream_state_dict(model: TinyRecursiveModel, state: Mapping[str, Any], source: str = "state dict") -> None:
    """Load an upstream state dict into `model` (puzzle table resized if its identifier count differs)."""
    ours = _renamed(state, source)  # in their own dtypes: loading casts each into the model's float32
    expected = model.state_dict()
    if PUZZLE_EMB_KEY in ours and PUZZLE_EMB_KEY in expected:
        want = expected[PUZZLE_EMB_KEY].shape
        have = ours[PUZZLE_EMB_KEY].shape
        if have[1:] == want[1:] and have[0] != want[0]:
            ours[PUZZLE_EMB_KEY] = resize_puzzle_embedding(ours[PUZZLE_EMB_KEY].float(), want[0])
    fit_state_dict(model, ours, source, display=lambda k: _rename(k, _RENAMES))


def read_checkpoint(path: Union[str, os.PathLike]) -> Dict[str, torch.Tensor]:
    """Raw tensors of a torch checkpoint file, loaded safely (weights_only) on the CPU."""
    path = os.fspath(path)
    with open_regular(path, "checkpoint file") as f:  # a FIFO never blocks; a missing permission is said as such
        state = load_weights_only(f, path=path, what="checkpoint file", said="not a readable PyTorch checkpoint",
                                  guess="truncated or foreign file?")
    if not isinstance(state, Mapping):
        raise TRMError(f"{path}: expected a state dict, found a {type(state).__name__}")
    return dict(state)


def load_upstream_checkpoint(model: TinyRecursiveModel, path: Union[str, os.PathLike],
                             contents: Any = None) -> None:
    """Load upstream's `step_<N>` file into `model`; `contents` is what the file holds when the caller has read it
    already (`train load_checkpoint=` reads a file once to tell what it is). Each entry is checked as
    import-upstream checks it (`_renamed`: a sparse or meta tensor was a traceback from the NaN check) before its
    values are read; a NaN or inf is refused naming the file and the tensor (`train load_checkpoint=` trained 20
    non-finite steps from one, then advised a lower lr; in its puzzle table it was "table: ... not finite", naming
    no file)."""
    source = os.fspath(path)
    tensors = read_checkpoint(path) if contents is None else contents
    _renamed(tensors, source)
    check_finite(tensors, source)
    load_upstream_state_dict(model, tensors, source=source)


# ---------------------------------------------------------------------------
# all_config.yaml
# ---------------------------------------------------------------------------

_IGNORED_ARCH_FIELDS = {"name", "loss"}


def arch_config_from_upstream_yaml(cfg: Mapping[str, Any], strict: bool = True,
                                   keep_forward_dtype: bool = False, where: str = "all_config.yaml") -> ArchConfig:
    """ArchConfig from upstream's `all_config.yaml` (the whole dict, or its `arch:` section); `where` names the
    file in errors.

    `name` fields are ignored and `loss.loss_type` maps to `loss_type`. Upstream's
    forward_dtype is bfloat16 only because it ran on CUDA; it becomes "auto" (bf16 on
    CUDA, on CPUs only where bf16 is measured fast) unless keep_forward_dtype. Unknown fields raise TRMError when strict.
    """
    arch = cfg.get("arch", cfg) if isinstance(cfg, Mapping) else None
    if not isinstance(arch, Mapping):  # there, but a list or a word, is said as what it is
        there = isinstance(cfg, Mapping) and "arch" in cfg
        raise TRMError(f"{where}: its `arch:` section is {type(arch).__name__ if arch is not None else 'empty'}, not "
                       "a mapping of settings" if there else f"{where}: no `arch:` section")
    fields: Dict[str, Any] = {}
    unknown = []
    for key, value in arch.items():
        if key in _IGNORED_ARCH_FIELDS:
            continue
        if key in ArchConfig.model_fields:
            fields[key] = value
        else:
            unknown.append(key)
    loss = arch.get("loss")
    if isinstance(loss, Mapping) and loss.get("loss_type") is not None:
        fields["loss_type"] = loss["loss_type"]
    elif loss is not None and not isinstance(loss, Mapping):  # `loss: 5` was passed over without a word
        log.warning("%s: arch.loss is %s, not a mapping (upstream writes `loss: {name: ..., loss_type: ...}`): "
                    "ignored; loss_type is %s", where, clipped(loss), fields.get("loss_type",
                                                                       ArchConfig.model_fields["loss_type"].default))
    ndim = fields.get("puzzle_emb_ndim")
    if isinstance(ndim, str):  # unresolved interpolation such as ${.hidden_size}
        fields["puzzle_emb_ndim"] = None if "hidden_size" in ndim else ndim
    if fields.get("forward_dtype") == "bfloat16" and not keep_forward_dtype:
        fields["forward_dtype"] = "auto"
    if unknown and strict:
        # a file without `arch:` is read as the section itself: a whole all_config.yaml missing it says so
        whole = "arch" not in cfg and any(key in cfg for key in ("data_paths", "global_batch_size", "epochs"))
        raise TRMError(f"{where}: " + ("no `arch:` section (read as one itself, it holds " if whole else "")
                       + f"arch fields this package does not know: {', '.join(map(str, unknown))}" + (")" if whole else ""))
    try:
        return ArchConfig(**fields)
    except ValidationError as err:  # one line, as every config reader says it (pydantic's own text spans lines)
        raise TRMError(f"{where}: invalid arch section: {validation_line(err)}") from None


def read_all_config(path: Union[str, os.PathLike]) -> Dict[str, Any]:
    """Parse an upstream run's all_config.yaml (a file, or the checkpoint directory holding it)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, "all_config.yaml")
    cfg = read_yaml(path, "run config", hint="upstream writes all_config.yaml beside its checkpoints")
    if not isinstance(cfg, dict):
        raise TRMError(f"{path}: expected a mapping at the top level")
    return cfg


# ---------------------------------------------------------------------------
# From an upstream run to our export (`trm-kaggle import-upstream`)
# ---------------------------------------------------------------------------

def _vocabulary(tensors: Mapping[str, torch.Tensor], source: str) -> int:
    """The vocabulary size the checkpoint's token embedding says, within an export's bounds (`_renamed` checked
    that it is a matrix): a missing table is named as every missing weight is (it was a KeyError), a declared
    2**27 tokens is refused before a model of that size is built."""
    table = tensors.get("embed_tokens.weight")
    if table is None:
        raise TRMError(f"{source}: weights do not match the model config: missing keys embed_tokens.weight")
    low, high = count_bounds("vocab_size")
    if not low <= table.shape[0] <= high:
        raise TRMError(f"{source}: embed_tokens.weight holds {table.shape[0]:,} token rows; a vocabulary has {low} "
                       f"to {high:,} (the checkpoint is damaged or not a TRM run's)")
    return int(table.shape[0])


def _as_float32(tensors: Mapping[str, torch.Tensor], ckpt_path: Path) -> Dict[str, torch.Tensor]:
    """The checkpoint's floating tensors as float32 (an export's type), checked where they come from: a NaN in the
    checkpoint, or a float64 value past float32's range (1e300 turned inf in the cast), was blamed on the export
    being written and on "a diverged training run"."""
    check_finite(tensors, str(ckpt_path))
    cast = {k: v.float() if v.is_floating_point() else v for k, v in tensors.items()}
    if (found := first_nonfinite(cast)) is not None:
        name, bad = found
        raise TRMError(f"{ckpt_path}: tensor {name} is {tensors[name].dtype} and holds {bad} "
                       f"value{'s' if bad != 1 else ''} past float32's range (about 3.4e38): an export holds float32, where they would be inf "
                       "(the checkpoint is damaged or not a TRM run's)")
    return cast


#: Arch fields upstream's model config requires and no tensor's shape shows (heads, cycles, ACT steps, position
#: encoding): missing from all_config.yaml, ours are the package's defaults, which may not be the run's.
UNSHOWN_ARCH_FIELDS = ("num_heads", "H_cycles", "L_cycles", "halt_max_steps", "pos_encodings")

# Sequence length of upstream's datasets by vocabulary size, when the run's dataset is not at hand.
DEFAULT_SEQ_LEN = {12: 900, 11: 81, 6: 900}  # ARC, Sudoku-Extreme, Maze-Hard


def import_upstream(checkpoint: Union[str, os.PathLike], out: Union[str, os.PathLike],
                    config: Union[str, os.PathLike, None] = None, seq_len: Optional[int] = None,
                    mean_embedding: bool = False, contents: Any = None) -> TinyRecursiveModel:
    """Convert upstream's `step_<N>` file (with its run's all_config.yaml) into an export in `out`.

    `checkpoint` is a local file or a Hugging Face source (`hf://owner/repo[@revision][/path]`, see
    `trm_kaggle.model.hub`), downloaded into the user's cache first. `config` defaults to the
    all_config.yaml beside the checkpoint. The sequence length comes from `seq_len`, else from the
    run's dataset when it is at hand, else from the vocabulary (`DEFAULT_SEQ_LEN`). `contents` is what
    the local file holds when the caller has read it already (`import-upstream` reads it to tell a train
    state of ours, which this layer cannot name). Returns the model that was exported.
    """
    # before anything is read: 5 was pathlib's TypeError naming no argument, '' the current folder
    path_argument("checkpoint", checkpoint, "an upstream step_<N> file's path or an hf:// source")
    path_argument("config", config, "the run's all_config.yaml path", optional=True)
    path_argument("out", out, "an export folder's path")
    if seq_len is not None:  # before the model is built: NaN and 2**63 failed inside torch
        seq_len = whole_argument("seq_len", seq_len, 1, MAX_GRID_CELLS)
    ckpt_path, hub_source = resolve_checkpoint(checkpoint)
    if ckpt_path.is_dir():  # before its config: a missing checkpoint is the problem to name
        raise TRMError(f"{ckpt_path}: checkpoint file not found (it is a directory: name one step_<N> file in it)")
    readable_file(ckpt_path, "checkpoint file")  # missing, a FIFO, no permission: said before its config
    # what the file holds, before its config (nothing copied before the sizes are checked): a text file or
    # another kind of checkpoint is said as such, not as a missing all_config.yaml beside it
    tensors = _renamed(read_checkpoint(ckpt_path) if contents is None or hub_source else contents, str(ckpt_path))
    config_file = Path(config) if config else ckpt_path.parent / "all_config.yaml"
    if config_file.is_dir():  # read_all_config's rule: a folder stands for the all_config.yaml in it
        config_file = config_file / "all_config.yaml"
    run_cfg = read_all_config(config_file)
    arch = arch_config_from_upstream_yaml(run_cfg, where=str(config_file))
    defaulted = [k for k in UNSHOWN_ARCH_FIELDS if k not in run_cfg.get("arch", run_cfg)]
    vocab = _vocabulary(tensors, str(ckpt_path))
    num_ids = tensors[PUZZLE_EMB_KEY].shape[0] if PUZZLE_EMB_KEY in tensors else 1
    data_paths = run_cfg.get("data_paths") or []
    if not isinstance(data_paths, list) or not all(isinstance(d, str) for d in data_paths):
        raise TRMError(f"{config_file}: data_paths must be a list of folder "
                       f"names, got {clipped(data_paths)}")
    for d in data_paths:
        if seq_len is None and (Path(d) / "train" / "dataset.json").exists():
            meta = load_metadata(d, "train")
            if meta.vocab_size != vocab:  # another dataset's length was taken without a word
                raise TRMError(f"{config_file}: data_paths names {d}, a dataset of {meta.vocab_size} tokens, but "
                               f"{ckpt_path} has {vocab}: it is not the dataset the checkpoint was trained on, so its "
                               "sequence length says nothing; pass --seq-len")
            seq_len = meta.seq_len
    seq_len = DEFAULT_SEQ_LEN.get(vocab) if seq_len is None else seq_len
    if seq_len is None:
        raise TRMError(f"cannot tell the sequence length of this vocabulary ({vocab} tokens): pass --seq-len")
    source = f"{ckpt_path} (with {config_file}; is --seq-len right?)"
    with torch.device("meta"):  # shapes only: a wrong all_config.yaml beside a small file never allocates its model
        described = TinyRecursiveModel(arch, seq_len, vocab, num_ids)
    problem = weights_problem(described.state_dict(), tensors)
    if problem:
        raise TRMError(f"{source}: weights do not match the model config: {problem}")
    model = TinyRecursiveModel(arch, seq_len, vocab, num_ids)
    fit_state_dict(model, _as_float32(tensors, ckpt_path), source)
    export_inference(out, model, arch=arch, seq_len=seq_len, vocab_size=vocab, mean_embedding=mean_embedding,
                     info={"source": str(hub_source or ckpt_path), "imported_from": "upstream",
                           **({"hub_commit": snapshot_commit(ckpt_path)} if hub_source else {})})
    if defaulted:  # said once the export is written: a refusal stays one line
        log.warning("%s: its arch section lacks %s, which no tensor shows: the package's defaults were taken (%s); "
                    "upstream's all_config.yaml records them: check they are the run's", config_file,
                    ", ".join(defaulted), ", ".join(f"{k}={getattr(arch, k)}" for k in defaulted))
    return model
