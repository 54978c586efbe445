"""The train state: everything a step changes, and everything a resumed run needs to go on as if never stopped.

    TrainState = model + optimizers + EMA + loss scaler + loader position + ACT carries + step (+ dataset fingerprint)

`save_state` writes it (rank 0, after gathering every rank's carries); `state_to_resume` chooses the file every
rank resumes from and `restore` puts it back, refusing a run whose settings or dataset changed. The files
themselves (names, checksums, rotation) are `trm_kaggle.train.checkpoint`'s.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator

import torch
import torch.distributed as dist

from trm_kaggle import xla
from trm_kaggle.config import TrainConfig
from trm_kaggle.data import IGNORE_LABEL_ID, PuzzleLoader
from trm_kaggle.errors import TRMError
from trm_kaggle.jsonio import open_regular
from trm_kaggle.model import (Carry, DTYPES, PUZZLE_EMB_KEY, TinyRecursiveModel, begins_as_safetensors,
                              fit_state_dict, load_upstream_checkpoint, read_export, resize_puzzle_embedding,
                              shadow_problem)
from trm_kaggle.optim import EMA
from trm_kaggle.train import checkpoint as ckpt
from trm_kaggle.train.amp import LossScaler
from trm_kaggle.train.runtime import Runtime, all_reduce_, dtype_name
from trm_kaggle.train.settings import config_differences
from trm_kaggle.wording import clipped, shown

log = logging.getLogger(__name__)


@dataclass
class TrainState:
    """What one optimizer step reads and writes. `micro` is the rows per micro-batch (halved by an out-of-memory
    retry); `carries` holds one ACT carry per micro-batch (None until the first batch); `position` is what the
    train state records of the data stream (the loader, or XLA's device-side batches over it); `evaluation_due`:
    the evaluation of `step` was cut short by a stop signal, so a resume runs it before its first step;
    `log_window`: the training loop's `LogWindow`, whose sums of the log interval's steps so far a state keeps."""

    model: TinyRecursiveModel
    dense: torch.optim.Optimizer | None
    sparse: torch.optim.Optimizer | None
    ema: EMA | None
    scaler: LossScaler | None  # set once a resume has settled the dtype
    position: Any
    fingerprint: str
    micro: int
    step: int = 0
    carries: list[Carry] | None = None
    evaluation_due: bool = False
    log_window: Any = None


# ---------------------------------------------------------------------------
# The model's first weights
# ---------------------------------------------------------------------------


def build_model(cfg: TrainConfig, loader: PuzzleLoader, rt: Runtime) -> TinyRecursiveModel:
    meta = loader.metadata
    model = TinyRecursiveModel(cfg.arch, meta.seq_len, meta.vocab_size, meta.num_puzzle_identifiers,
                               forward_dtype=rt.dtype, grad_checkpointing=cfg.grad_checkpointing)
    if cfg.load_checkpoint:
        load_initial_weights(model, cfg.load_checkpoint)
    return model.to(rt.device)


def load_initial_weights(model: TinyRecursiveModel, path: str) -> None:
    """Weights from one of our exports, our train states, or an upstream `step_<N>` file, told apart by what the
    file holds, not by its name: a train state renamed was refused as an upstream file of unexpected keys, an
    export's weights.safetensors as a truncated PyTorch checkpoint."""
    p = Path(path)
    if p.is_dir():
        _, state = read_export(p)
    elif _is_safetensors(p):
        _, state = read_export(_export_holding(p))
    elif ckpt.is_state_file(p):  # named as one: a file that cannot be read is said as a train state
        state = ckpt.load_train_state(p)["model"]
    else:
        loaded = ckpt.read_torch_file(p, "checkpoint file")  # read once, whichever it proves to be
        if not ckpt.holds_train_state(loaded):
            load_upstream_checkpoint(model, p, loaded)
            return
        state = ckpt.checked_train_state(p, loaded)["model"]
    key = PUZZLE_EMB_KEY
    if key in state and model.puzzle_emb is not None and state[key].shape != model.puzzle_emb.weights.shape:
        state = dict(state)
        state[key] = resize_puzzle_embedding(state[key], model.puzzle_emb.weights.shape[0])
    fit_state_dict(model, state, str(path))


def _is_safetensors(path: Path) -> bool:
    """Whether the file begins as a safetensors file does (`begins_as_safetensors`)."""
    with open_regular(path, "checkpoint file") as f:  # missing, a FIFO, no permission: one line here
        return begins_as_safetensors(f.read(9), os.fstat(f.fileno()).st_size)


def _export_holding(weights: Path) -> Path:
    """The export whose weights.safetensors `weights` is (the folder holding it beside its config.json); TRMError
    for another safetensors file (the folder's config.json describes its weights.safetensors alone)."""
    if weights.name != "weights.safetensors" or not (weights.parent / "config.json").is_file():
        raise TRMError(f"{weights}: a safetensors file that is no export's weights.safetensors beside its "
                       "config.json: load_checkpoint takes an export's folder, a train state or an upstream step_N "
                       "file")
    log.info("load_checkpoint %s: the weights of the export %s; loading that export", weights, weights.parent)
    return weights.parent


# ---------------------------------------------------------------------------
# ACT carries: split into micro-batches, saved on the CPU
# ---------------------------------------------------------------------------


def resplit(carries: list[Carry], size: int) -> list[Carry]:
    """The same rows' carries, cut into micro-batches of `size` rows."""
    z_H = torch.cat([c.z_H for c in carries])
    z_L = torch.cat([c.z_L for c in carries])
    steps = torch.cat([c.steps for c in carries])
    halted = torch.cat([c.halted for c in carries])
    data = {k: torch.cat([c.current_data[k] for c in carries]) for k in carries[0].current_data}
    return [Carry(z_H[i:i + size], z_L[i:i + size], steps[i:i + size], halted[i:i + size],
                  {k: v[i:i + size] for k, v in data.items()}) for i in range(0, len(steps), size)]


def _carry_state(carry: Carry) -> dict[str, Any]:
    return {"z_H": carry.z_H.cpu(), "z_L": carry.z_L.cpu(), "steps": carry.steps.cpu(), "halted": carry.halted.cpu(),
            "current_data": {k: v.cpu() for k, v in carry.current_data.items()}}


def _carry_tensors(carry: Carry) -> list[torch.Tensor]:
    return [carry.z_H, carry.z_L, carry.steps, carry.halted, *carry.current_data.values()]


def _carry_from_tensors(ts: list[torch.Tensor], like: Carry) -> Carry:
    return Carry(ts[0], ts[1], ts[2], ts[3], dict(zip(like.current_data, ts[4:])))


def _carry_from_state(s: dict[str, Any], device: torch.device) -> Carry:
    return Carry(s["z_H"].to(device), s["z_L"].to(device), s["steps"].to(device), s["halted"].to(device),
                 {k: v.to(device) for k, v in s["current_data"].items()})


def _gather_carries(carries: list[Carry], rt: Runtime) -> list[Any]:
    """Every rank's carries (CPU copies), in rank order: a train state holds the whole global batch's."""
    if rt.distributed and rt.device.type == "xla" and not xla.host_collectives():  # XLA: in-graph all-gather
        flat = [t for c in carries for t in _carry_tensors(c)]
        per_rank = xla.gather_to_cpu(flat, rt.world_size)
        n = len(flat) // len(carries)
        return [[_carry_state(_carry_from_tensors(ts[i * n:(i + 1) * n], carries[0])) for i in range(len(carries))]
                for ts in per_rank]
    local = [_carry_state(c) for c in carries]
    if not rt.distributed:
        return [local]
    everyone = [None] * rt.world_size
    dist.all_gather_object(everyone, local)
    return everyone


# ---------------------------------------------------------------------------
# Save and restore
# ---------------------------------------------------------------------------


def save_state(state: TrainState, run_dir: Path, cfg: TrainConfig, rt: Runtime,
               settled: Callable[[], ContextManager] = contextlib.nullcontext) -> None:
    """Write `state` as the run's train state of its step (every rank calls it: the carries are gathered);
    `settled`: the context of what follows once the file is on disk (the rotation of older states)."""
    all_carries = _gather_carries(state.carries, rt) if state.carries is not None else None
    if not rt.is_main:
        return
    model = state.model
    saved = {
        "config": cfg.model_dump_json(),
        "dataset_fingerprint": state.fingerprint,
        "world_size": rt.world_size,
        "forward_dtype": dtype_name(rt.dtype),  # what "auto" resolved to: a resume keeps it
        "model_shape": {"seq_len": model.seq_len, "vocab_size": model.vocab_size,
                        "num_puzzle_identifiers": model.num_puzzle_identifiers},
        "model": model.state_dict(),
        "ema": state.ema.state_dict() if state.ema is not None else None,
        "optimizer": state.dense.state_dict() if state.dense is not None else None,
        "sparse_optimizer": state.sparse.state_dict() if state.sparse is not None else None,
        "rng_torch": torch.get_rng_state(),
        "loader": json.dumps(state.position.state_dict()),
        "carries": all_carries,
        "amp": state.scaler.state_dict() if state.scaler is not None else None,  # float16's loss scale
        "evaluation_due": state.evaluation_due,  # the step's evaluation, cut short: a resume runs it first
        # the log interval's steps so far (a state saved between log steps): the resumed record averages them too
        "log_window": state.log_window.state_dict() if state.log_window is not None else {},
    }
    ckpt.save_train_state(run_dir, state.step, saved, cfg.checkpoint_keep, settled)


def restore(state: TrainState, path: Path, saved: dict[str, Any], cfg: TrainConfig, rt: Runtime) -> None:
    """Put the saved train state `saved` (read from `path`) into `state`, refusing one of another run. The loss
    scaler is restored by the caller, once the resumed dtype is known."""
    previous = ckpt.saved_config(path, saved)  # settings this version does not know (or bounds it does not allow)
    if said := config_differences(previous, cfg):
        raise TRMError(f"{path} was saved by a run with a different config ({said}); resume with the same "
                       "settings or choose another checkpoint_path")
    if saved["dataset_fingerprint"] != state.fingerprint:
        raise TRMError(f"{path}: the dataset changed since this checkpoint, or the checkpoint was trained on another "
                       f"one (fingerprint {shown(str(saved['dataset_fingerprint']), 40)} recorded, "
                       f"{state.fingerprint} now); choose another checkpoint_path")
    saved_dtype = saved.get("forward_dtype")
    if saved_dtype is not None and saved_dtype != dtype_name(rt.dtype) and cfg.arch.forward_dtype == "auto":
        # "auto" on a CPU is a timing; the run keeps the arithmetic it started with.
        log.info("resuming in the checkpoint's %s (forward_dtype=auto would pick %s here)", saved_dtype,
                 dtype_name(rt.dtype))
        rt.dtype = DTYPES[saved_dtype]
        state.model.forward_dtype = rt.dtype
    with _field(path, "model"):  # another architecture's tensors: the one check names what differs
        fit_state_dict(state.model, saved["model"], "its weights", same_dtype=True)
    for part, key in ((state.ema, "ema"), (state.dense, "optimizer"), (state.sparse, "sparse_optimizer")):
        if part is not None and saved.get(key) is None and not (key == "optimizer" and _froze_weights(saved)):
            # the state's own settings make this part, and every save writes it: restarting it would leave a
            # resume inexact without a word (only the weights' optimizer starts late: after freeze_weights)
            raise TRMError(f"{path}: field {key!r} does not fit this run: it is missing, and this run, with the "
                           "state's own settings, keeps one (resumed without it, the run would not be exact)")
        if part is not None and saved.get(key) is not None:
            with _field(path, key):
                if isinstance(part, torch.optim.Optimizer):
                    settings = [{k: v for k, v in g.items() if k != "params"} for g in part.param_groups]
                    _check_parameter_order(part, saved[key])
                    _check_moment_dtypes(part, saved[key])
                elif problem := shadow_problem(state.model, saved[key]):  # the EMA's: copied in as it is
                    raise ValueError(problem)
                part.load_state_dict(saved[key])
                if isinstance(part, torch.optim.Optimizer):
                    _check_settings(part, settings)
                    _check_moments(part, _steps_taken(saved) if part is state.dense else 0)
    with _field(path, "rng_torch"):
        torch.set_rng_state(saved["rng_torch"])
    with _field(path, "loader"):  # another seed, batch size or dataset: the loader names what differs
        state.position.load_state_dict(json.loads(saved["loader"]))
    state.step, state.carries = int(saved["step"]), None
    state.evaluation_due = saved.get("evaluation_due") is True  # absent in states written before it was recorded
    if state.log_window is not None:  # absent in states written before it was recorded: the window starts empty
        with _field(path, "log_window"):
            state.log_window.load_state_dict(saved.get("log_window") or {})
    saved_carries = saved.get("carries")
    if saved_carries is not None and saved.get("world_size") == rt.world_size:
        with _field(path, "carries"):
            state.carries = [_carry_from_state(c, rt.device) for c in saved_carries[rt.rank]]
            _check_carries(state.carries, state.model)
            rows = sum(len(c.steps) for c in state.carries)
            if len(state.carries) != rows // state.micro:  # another micro-batch size now
                state.carries = resplit(state.carries, state.micro)
    elif saved_carries is not None:
        log.warning("world size changed since the checkpoint: ACT carries restart (results differ slightly)")
    elif state.step > 0:  # saved before its first step after such a change; a resume is then not exact either
        log.warning("%s holds no ACT carries: they restart (results differ slightly from an unbroken run)", path)


def _froze_weights(saved: dict[str, Any]) -> bool:
    """Whether the state's run trained the puzzle rows alone (`freeze_weights`): it holds no weights' optimizer."""
    return bool(json.loads(saved["config"]).get("freeze_weights"))


#: group entries a run does not choose by its settings: the rate the schedule writes before every step, and how
#: torch computes on this device (a run saved on a GPU resumes on a CPU)
_UNSET_BY_SETTINGS = frozenset({"lr", "initial_lr", "capturable", "foreach", "fused", "differentiable"})


def _check_settings(optimizer: torch.optim.Optimizer, settings: list[dict[str, Any]]) -> None:
    """ValueError unless the loaded parameter groups hold the settings this run's optimizer was built with
    (`settings`, taken before loading): the config was checked to be the run's, so a momentum, a number of
    Newton-Schulz steps, betas or a weight decay of other values (or missing) were not written by this run, and
    torch's `load_state_dict` takes them as they are."""
    if len(optimizer.param_groups) != len(settings):
        raise ValueError(f"{len(optimizer.param_groups)} parameter groups, this run's optimizer has {len(settings)}")
    for i, (group, mine) in enumerate(zip(optimizer.param_groups, settings)):
        for name, value in mine.items():
            if name in _UNSET_BY_SETTINGS:
                continue
            got = group.get(name, "missing")
            same = (list(got) == list(value) if isinstance(value, (list, tuple)) and isinstance(got, (list, tuple))
                    else type(got) is type(value) and got == value)
            if not same:
                raise ValueError(f"group {i}'s setting {name!r} is {clipped(got)}, this run's settings give "
                                 f"{clipped(value)}")


def _check_moment_dtypes(optimizer: torch.optim.Optimizer, saved: dict[str, Any]) -> None:
    """ValueError when a saved moment's dtype is not its parameter's: torch's load casts it without a word (a
    bfloat16 moment of a float32 weight, rounded: a silently inexact resume). Parameters pair up by position,
    as torch pairs them."""
    ids = [i for g in saved.get("param_groups") or [] for i in g.get("params") or []]
    params = [p for g in optimizer.param_groups for p in g["params"]]
    for i, p in zip(ids, params):
        for name, t in (saved.get("state") or {}).get(i, {}).items():
            if isinstance(t, torch.Tensor) and t.dim() > 0 and t.dtype != p.dtype:
                raise ValueError(f"its {name!r} of parameter {i} is {t.dtype}, its parameter {p.dtype}")


def _steps_taken(saved: dict[str, Any]) -> int:
    """Optimizer steps the saved run took: its steps less those its loss scaler skipped (a float16 run's)."""
    amp = saved.get("amp") if isinstance(saved.get("amp"), dict) else {}
    return max(0, int(saved["step"]) - int(amp.get("skipped") or 0))


def _check_parameter_order(optimizer: torch.optim.Optimizer, saved: dict[str, Any]) -> None:
    """ValueError unless each saved group lists its parameters as this run's optimizer numbers them: torch's
    `load_state_dict` pairs them by position, so two same-shaped parameters listed the other way round would
    take each other's moments (a silent, inexact resume)."""
    mine = [g["params"] for g in optimizer.state_dict()["param_groups"]]
    theirs = [g.get("params") for g in saved.get("param_groups") or []]
    if mine != theirs:
        raise ValueError("its parameter groups list the parameters " + (
            "in another order than this run's optimizer numbers them" if sorted(map(sorted, mine)) ==
            sorted(sorted(t or []) for t in theirs) else "otherwise than this run's optimizer (other indices)"))


def _check_moments(optimizer: torch.optim.Optimizer, steps_taken: int = 0) -> None:
    """ValueError when a per-parameter state tensor (a moment, a momentum buffer) has another shape than its
    parameter: torch's `load_state_dict` matches them by position only, and the first step would fail on it;
    and when a parameter's state is missing or lacks what the others' of its group hold (a Muon momentum buffer,
    an Adam moment): the optimizer would start it afresh at zero, and the resumed run would silently differ.
    Every trained parameter of the model gets a gradient at every step, so after `steps_taken` optimizer steps
    each holds state, and within a group all or none do."""
    for i, group in enumerate(optimizer.param_groups):
        kinds: dict[frozenset, int] = {}
        bare = 0
        for p in group["params"]:
            for name, t in optimizer.state.get(p, {}).items():
                if isinstance(t, torch.Tensor) and t.dim() > 0 and t.shape != p.shape:
                    raise ValueError(f"its {name!r} has shape {tuple(t.shape)}, its parameter {tuple(p.shape)}")
            if optimizer.state.get(p):
                kinds.setdefault(frozenset(optimizer.state[p]), len(kinds))
            elif p.requires_grad:
                bare += 1
        if bare and (kinds or steps_taken):
            raise ValueError(f"{bare} of group {i}'s {len(group['params'])} parameters hold no state, yet "
                             + (f"the run took {steps_taken} optimizer steps" if steps_taken else
                                "the others of its group do") + " (a run steps every parameter of a group at once)")
        counts = {float(n) for p in group["params"] if (n := optimizer.state.get(p, {}).get("step")) is not None}
        if len(counts) > 1:  # one parameter's bias correction behind the others': a silently inexact resume
            raise ValueError(f"group {i}'s parameters have taken different numbers of steps "
                             f"({', '.join(f'{n:g}' for n in sorted(counts))}; a run steps every parameter of a "
                             "group at once)")
        if len(kinds) > 1:
            full = max(kinds, key=len)
            lacking = sorted({k for kind in kinds for k in full - kind})
            raise ValueError(f"group {i}'s parameters hold different state: some lack {', '.join(lacking) or 'none'} "
                             f"that others hold ({', '.join(sorted(full))})")


def _check_carries(carries: list[Carry], model: TinyRecursiveModel) -> None:
    """ValueError unless each carry holds this model's latent states ((rows, positions, hidden), both alike, in
    the dtype it computes in), one step count, halt flag and data row per row, and data rows this model can read
    (its sequence length, tokens inside its vocabulary, puzzles inside its table): a carry of other sizes would be
    broadcast, not refused, and one of another dtype or tokens fail inside the first step."""
    for c in carries:
        rows = c.z_H.shape[0] if c.z_H.dim() == 3 else -1
        if c.z_H.shape != (rows, model.total_len, model.arch.hidden_size) or c.z_L.shape != c.z_H.shape:
            raise ValueError(f"latent states of shape {tuple(c.z_H.shape)} and {tuple(c.z_L.shape)}, this model's "
                             f"are (rows, {model.total_len}, {model.arch.hidden_size})")
        dtype = model.compute_dtype(c.z_H.device)
        if c.z_H.dtype != dtype or c.z_L.dtype != dtype:
            raise ValueError(f"latent states in {c.z_H.dtype} and {c.z_L.dtype}, this run computes in {dtype}")
        if any(t.shape[:1] != (rows,) for t in (c.steps, c.halted, *c.current_data.values())):
            raise ValueError(f"step counts, halt flags or data rows that are not one per row of its {rows} rows")
        top = model.arch.halt_max_steps  # a row halts when its count reaches it: no run saves more
        if c.halted.dtype != torch.bool or c.steps.is_floating_point() or c.steps.dtype == torch.bool or (
                c.steps.numel() and not (0 <= int(c.steps.min()) and int(c.steps.max()) <= top)):
            raise ValueError(f"halt flags that are not booleans or step counts that are not whole numbers from 0 "
                             f"to {top}")
        inputs, ids = c.current_data.get("inputs"), c.current_data.get("puzzle_identifiers")
        labels = c.current_data.get("labels")
        if inputs is None or inputs.shape != (rows, model.seq_len) or inputs.is_floating_point():
            raise ValueError(f"data rows whose inputs are not {rows} x {model.seq_len} tokens")
        if inputs.numel() and not (0 <= int(inputs.min()) and int(inputs.max()) < model.vocab_size):
            raise ValueError(f"input tokens outside this model's vocabulary of {model.vocab_size}")
        if labels is not None and (labels.shape != inputs.shape or labels.is_floating_point() or bool(
                ((labels < 0) | (labels >= model.vocab_size))[labels != IGNORE_LABEL_ID].any())):
            raise ValueError(f"label tokens that are neither inside this model's vocabulary of {model.vocab_size} "
                             f"nor the ignored label {IGNORE_LABEL_ID}")
        table = model.num_puzzle_identifiers
        if ids is not None and ids.numel() and not (0 <= int(ids.min()) and int(ids.max()) < table):
            raise ValueError(f"puzzle identifiers outside this model's {table}")


@contextlib.contextmanager
def _field(path: Path, key: str) -> Iterator[None]:
    """One line naming the file and the field when a field of the right kind still does not fit this run (another
    model's parameter count, tensors of other sizes, a rank missing from the carries): the load check sees each
    field alone, only restoring sees it against the model."""
    try:
        yield
    except torch.OutOfMemoryError:  # a RuntimeError too, but the device is full, not the field wrong
        raise
    except (TypeError, ValueError, RuntimeError, KeyError, IndexError, TRMError) as e:
        kind = "" if isinstance(e, TRMError) else f"{type(e).__name__}: "  # ours already say what differs
        raise TRMError(f"{path}: field {key!r} does not fit this run: {kind}"
                       f"{(str(e).splitlines() or [''])[0][:200]}") from None


def state_to_resume(run_dir: Path, rt: Runtime) -> tuple[Path, dict[str, Any]] | None:
    """(path, state) every rank resumes from, or None when the run starts fresh.

    Rank 0 (the only writer) picks the newest state that loads, setting aside a corrupt newer one, and every
    rank then reads that very file: ranks never resume from different steps, whatever each of them lists (a
    state being renamed into place, a shared filesystem that shows new files late). On several hosts
    checkpoint_path must be a directory all of them see; a rank that cannot read the chosen state (or finds
    states where rank 0 finds none) stops every rank with the same error instead of training diverged replicas.
    """
    if not rt.distributed:
        return ckpt.load_newest_state(run_dir, quarantine=True) if ckpt.list_states(run_dir) else None
    chosen, problem, code = None, None, 0  # code (rank 0's): the chosen step, -1 for no state, -2 for none readable
    if rt.is_main:
        code = -1
        if ckpt.list_states(run_dir):
            try:
                chosen = ckpt.load_newest_state(run_dir, quarantine=True)
                code = int(chosen[1]["step"])
            except TRMError as err:
                problem, code = str(err), -2
    code = sum_over_ranks(code, rt)  # every other rank adds 0: rank 0's code, on every rank
    if code == -2:
        problem = problem or f"rank 0 finds no readable train state in {run_dir}"
    elif code == -1:
        if ckpt.list_states(run_dir):
            problem = f"rank {rt.rank} finds train states in {run_dir} where rank 0 finds none"
    elif not rt.is_main:
        try:
            path = ckpt.state_path(run_dir, code)
            chosen = path, ckpt.load_train_state(path)
        except TRMError as err:
            problem = f"rank {rt.rank}: {err}"
    able = sum_over_ranks(0 if problem else 1, rt)
    if able != rt.world_size:
        raise TRMError((problem + "; " if problem else "") +
                       f"{rt.world_size - able} of {rt.world_size} ranks cannot resume from the state rank 0 chose in "
                       f"{run_dir}: put checkpoint_path on a filesystem every host sees (rank 0 writes the states; "
                       "every rank reads them to resume)")
    return chosen


def sum_over_ranks(value: int, rt: Runtime) -> int:
    total = torch.tensor([value], dtype=torch.int64).to(rt.device)
    all_reduce_([total])
    if rt.device.type == "xla":
        xla.step_boundary()  # XLA: run the reduction before the host reads it
    return int(total.item())
