"""Train states: full checkpoints for exact resume, and the export of a run.

A train state (`state_step00001234.pt`) holds everything a run needs to continue
as if it had never stopped: model, EMA shadow, both optimizers, step and epoch,
RNG state, the data loader's position, every rank's ACT carry, the config, and a
fingerprint of the dataset, every tensor on the CPU (so a state written on a GPU or
a TPU resumes on any device). Written atomically (temp file + rename); the newest
`keep` states are kept. Loaded with `torch.load(weights_only=True)`: no pickle.

Each state carries a checksum of its contents (`sha256`, inside the file, so both are
replaced in one rename) and the id of its run (`run_id`, also kept in the run directory's
`run.json`). Resuming verifies both: a damaged state is set aside by name and the newest
good one is used (a state that cannot be read, e.g. for want of permission, is not damaged: it
stops the resume and is left as it is); a state of another run copied into the directory is
never taken as the newest. States written before checksums and run ids are accepted with a note.

`export_run` turns a run's newest state into an inference export
(`trm_kaggle.model.export`, which owns that format).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import re
import uuid
from pathlib import Path
from typing import Any, Callable, ContextManager

import pydantic
import torch

from trm_kaggle import __version__
from trm_kaggle.atomic import atomic_write, atomic_write_json, found_at
from trm_kaggle.config import TrainConfig, flag_argument, path_argument, validation_line
from trm_kaggle.data import DatasetMetadata, contents_hash
from trm_kaggle.errors import DamagedFile, TRMError, UnreadableFile, os_error_line
from trm_kaggle.jsonio import (directory_problem, is_regular, open_regular, parse_json, read_json,
                               readable_file)
from trm_kaggle.model import (DTYPES, NonFiniteTraining, content_digest, export_inference, first_nonfinite,
                              load_weights_only, model_from_train_state)
from trm_kaggle.outputs import Input, Output, check_kept, refuse_nul
from trm_kaggle.wording import clipped

log = logging.getLogger(__name__)

STATE_FORMAT = "trm_kaggle.train_state"
_STATE_RE = re.compile(r"state_step([0-9]+)\.pt\Z")  # ASCII digits (\d takes any script's); \Z, not `$`,
# which also matches before a final newline
RUN_RECORD = "run.json"  # {"run_id": ...}: which run the directory's states belong to


# ---------------------------------------------------------------------------
# Train states
# ---------------------------------------------------------------------------


def dataset_fingerprint(paths: list[str]) -> str:
    """Changes when a dataset is rebuilt or replaced: the hash of its contents its builder recorded (checked
    cheaply against the files), else (datasets built before such records) its dataset.json files, array
    sizes and identifiers."""
    h = hashlib.sha256()
    for p in paths:
        root = Path(p)
        recorded = contents_hash(root)
        if recorded is not None:
            h.update(f"contents:{recorded}".encode())
            continue
        for rel in ("train/dataset.json", "test/dataset.json", "identifiers.json"):
            f = root / rel
            h.update(rel.encode())
            if f.exists():
                with open_regular(f, rel) as opened:  # a FIFO in place of a file never blocks
                    size = os.fstat(opened.fileno()).st_size
                    h.update(opened.read() if size < (1 << 20) else str(size).encode())
        for split in ("train", "test"):
            f = root / split / "all__inputs.npy"
            h.update(str(f.stat().st_size if f.exists() else -1).encode())
    return h.hexdigest()[:16]


def state_path(run_dir: Path, step: int) -> Path:
    return run_dir / f"state_step{step:08d}.pt"


def is_state_file(path: str | os.PathLike) -> bool:
    """True when the file name is a train state's (`state_step<N>.pt`)."""
    return _STATE_RE.search(Path(path).name) is not None


def saved_config(path: str | os.PathLike, state: dict[str, Any]) -> TrainConfig:
    """The settings a train state read from `path` was trained with; TRMError naming the file and the setting when
    this version cannot read them (a newer version's setting, a value of another type). `train` resuming and the
    training kernel carrying a state both ask here, so both say it alike."""
    try:
        return TrainConfig.model_validate_json(state["config"])
    except pydantic.ValidationError as e:
        raise TRMError(f"{path}: field 'config': not settings this trm_kaggle can resume with: "
                       f"{validation_line(e)}") from None


def state_step(path: str | os.PathLike) -> int | None:
    """The step in a train state's file name (`state_step<N>.pt`), or None for another name."""
    m = _STATE_RE.search(Path(path).name)
    return int(m.group(1)) if m else None


def run_dir_argument(run_dir: object) -> str | os.PathLike:
    """`run_dir`, a library call's run folder, when it is a path; else a TypeError naming the argument."""
    return path_argument("run_dir", run_dir, "a run folder's path")


def list_states(run_dir: str | os.PathLike) -> list[Path]:
    """Train states in `run_dir`, oldest first."""
    found = [(step, p) for p in Path(run_dir_argument(run_dir)).glob("state_step*.pt")
             if (step := state_step(p)) is not None]
    return [p for _, p in sorted(found)]


def newest_step(run_dir: str | os.PathLike) -> int:
    """The step a resumed run in `run_dir` continues from (its newest state that loads); 0 when there is none."""
    if not list_states(run_dir):
        return 0
    return int(load_newest_state(run_dir)[1]["step"])


def load_newest_state(run_dir: str | os.PathLike, quarantine: bool = False, purpose: str = "resume from"
                      ) -> tuple[Path, dict[str, Any]]:
    """(path, state) of the newest train state in `run_dir` that loads; `purpose` (what the state is for, "resume
    from", "export") words the refusal when none does.

    A newer state that is damaged (truncated, corrupt, its checksum wrong: a kill during a copy, a full disk)
    does not block the run: it is skipped with a warning and the next older one is tried. With `quarantine`
    (resuming, which will write new states beside it) each damaged file newer than the state resumed from is
    renamed to `<name>.corrupt`: kept for inspection, never deleted, and no longer mistaken for the newest
    state; when no state loads, nothing is renamed. A state that cannot be read at all (no permission, a
    directory, a FIFO or device, a failing disk) is not damaged: it stops the load with one line naming the
    cause, and nothing is renamed (resuming from an older state would throw its steps away).
    """
    run_dir = run_dir_argument(run_dir)
    quarantine = flag_argument("quarantine", quarantine)  # "no" was taken as yes: damaged states renamed
    states = list_states(Path(run_dir))
    if not states:
        if os.path.islink(run_dir) and not os.path.exists(run_dir):
            raise TRMError(directory_problem(run_dir, "run folder"))  # a loop of links, a dangling link: said so
        missing = not os.path.lexists(run_dir)  # a typo: said as missing, not as a run without states
        if not missing and os.path.isdir(run_dir):
            try:  # a folder this user cannot list hides its states: the glob found none, the listing says why
                os.listdir(run_dir)
            except OSError as e:
                raise TRMError(f"run folder {os_error_line(e)}") from None
        raise TRMError(f"{run_dir}: " + ("no such file or folder" if missing else "no train state (state_step*.pt)"))
    errors: list[str] = []
    damaged: list[Path] = []
    run_id = recorded_run_id(run_dir)
    for path in reversed(states):
        try:
            state = load_train_state(path)
            owner = state.get("run_id")
            if run_id is not None and owner is not None and owner != run_id:
                raise ForeignState(f"{path}: written by another run (run id {clipped(owner)}, this directory's run "
                                   f"is {clipped(run_id)}; see {RUN_RECORD}): not resumed from, left in place")
            if state["step"] != (named := int(_STATE_RE.search(path.name).group(1))):
                # a renamed copy: resumed from, it would stay the newest however far the run went on
                raise ForeignState(f"{path}: holds step {state['step']}, not the step {named} its name says (a "
                                   "renamed copy?): not resumed from, left in place")
        except UnreadableFile as e:
            raise UnreadableFile(f"{e}; no train state of {run_dir} was renamed or resumed from") from None
        except (ForeignState, DamagedFile) as e:
            errors.append(str(e))
            if isinstance(e, DamagedFile):
                damaged.append(path)
            log.warning("%s; trying the previous state", e)
            continue
        if quarantine:
            for bad in damaged:
                kept = set_aside(bad, ".corrupt")
                log.warning("%s: renamed to %s (kept, not deleted): resuming from %s", bad, kept.name, path.name)
        return path, state
    kept = (f" (left in place: no good state to {purpose}" + ("; move them away to start afresh)"
                                                                if purpose == "resume from" else ")")) if damaged else ""
    raise TRMError(f"{run_dir}: no readable train state ({len(errors)} tried; newest: {errors[0]}){kept}")


def set_aside(path: Path, suffix: str) -> Path:
    """Rename `path` to `<name><suffix>`, or `<name><suffix>.1`, `.2`, ... where that is taken: a file set aside
    earlier (or anything else there) is never replaced. The caller holds the run directory's lock."""
    for n in range(1000):
        target = path.with_name(f"{path.name}{suffix}" + (f".{n}" if n else ""))
        if not os.path.lexists(target):
            os.rename(path, target)
            return target
    raise TRMError(f"{path}: cannot be set aside, {path.name}{suffix} to {path.name}{suffix}.999 are all taken: "
                   "move them away")


class ForeignState(TRMError):
    """A train state in a run directory that another run wrote (a copied-in file)."""


def recorded_run_id(run_dir: str | os.PathLike) -> str | None:
    """The run id in `run_dir`'s run.json; None when there is none (a new run, or one from before run ids)."""
    record = Path(run_dir) / RUN_RECORD
    if not is_regular(record, RUN_RECORD):  # a FIFO there is one line, never "no record" (a foreign state let in)
        return None
    value = read_json(record, RUN_RECORD)
    if not isinstance(value, dict) or not isinstance(value.get("run_id"), str):
        raise TRMError(f"{record}: not a run record (expected {{\"run_id\": \"...\"}})")
    return value["run_id"]


def refuse_foreign_run_files(run_dir: str | os.PathLike) -> None:
    """TRMError when `run_dir` holds a config.json or metrics.jsonl that no training recorded (no run.json, no
    train state: a folder of the user's): a new run there would replace them."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir() or recorded_run_id(run_dir) is not None or list_states(run_dir):
        return
    theirs = [name for name in ("config.json", "metrics.jsonl")  # (a link there is refused as a link, later)
              if os.path.lexists(run_dir / name) and not (run_dir / name).is_symlink()]
    if theirs:
        raise TRMError(f"checkpoint_path {run_dir} holds {' and '.join(theirs)} that no training recorded (no "
                       f"{RUN_RECORD}, no train state): a new run would replace them; choose another checkpoint_path "
                       "or move them")


def claim_run_id(run_dir: Path, resumed: dict[str, Any] | None) -> str:
    """The run id of the run in `run_dir`, recorded in run.json: the recorded one, else the resumed state's,
    else a new one (the run's rank 0 calls this before writing states)."""
    recorded = recorded_run_id(run_dir)
    run_id = recorded or (resumed or {}).get("run_id") or uuid.uuid4().hex
    if recorded != run_id:
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_json(run_dir / RUN_RECORD, {"run_id": run_id}, indent=1)
    return run_id


#: The files a run directory's writer replaces atomically (`trm_kaggle.atomic` writes `.<name>.<random>.tmp`
#: beside each and renames it into place): a process killed mid-write leaves such a temporary behind.
_TEMPORARY_RE = re.compile(r"^\.(state_step[0-9]+\.pt|metrics\.jsonl|config\.json|run\.json)\.[^.]+\.tmp\Z")


def remove_stale_temporaries(run_dir: str | os.PathLike) -> list[Path]:
    """Delete the temporaries of interrupted writes in a run directory (only when no writer is at work there:
    the run's rank 0, before it starts). Returns what was removed."""
    removed = []
    if Path(run_dir).is_dir():
        for p in Path(run_dir).iterdir():
            if _TEMPORARY_RE.match(p.name) and p.is_file():
                p.unlink(missing_ok=True)
                removed.append(p)
    return sorted(removed)


def save_train_state(run_dir: Path, step: int, state: dict[str, Any], keep: int,
                     settled: Callable[[], ContextManager] = contextlib.nullcontext) -> Path:
    """Write the state (with the checksum of its contents) atomically, then delete all but the newest `keep`
    states up to this step: a state numbered beyond it is not this run's (a copied-in file, or one set aside)
    and neither counts nor is deleted. A state with NaN or inf weights is refused, not written. The rotation
    runs inside `settled()`: the state is on disk by then, so a caller may let a stop signal end it at once."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = state_path(run_dir, step)
    payload = {"format": STATE_FORMAT, "version": __version__, "step": step, **_to_cpu(state)}
    bad = first_nonfinite(payload.get("model") or {})
    if bad is not None:
        raise NonFiniteTraining(f"{path} (not written): tensor {bad[0]} of the model holds {bad[1]} NaN or inf "
                                f"values; the run diverged (lower lr); the older train states are kept")
    payload["run_id"] = recorded_run_id(run_dir)  # None: a state saved outside a training run
    payload["sha256"] = content_digest(payload)
    # Streamed into the temporary file: serialising into memory first would hold a second copy of
    # the whole state (the puzzle table alone is 2.4 GB for upstream's ARC datasets) at every save.
    if os.path.lexists(path) and not _written_by(path, payload["run_id"], step):
        # another run's state copied in, a renamed copy of an older one, or what cannot be read: left in place when
        # the run resumed (never its newest), it is set aside now rather than replaced by this step's state
        kept = set_aside(path, ".other")
        log.warning("%s: not this run's state of step %d (another run's, a renamed copy, or unreadable): renamed to "
                    "%s (kept, not deleted) before this run saves its step %d there", path, step, kept.name, step)
    atomic_write(path, lambda f: torch.save(payload, f), mode="wb")
    with settled():
        # this run's states, each holding the step its name says: a renamed copy (the resume just said it was
        # "left in place") is the user's, never rotated away
        ours = [p for p in list_states(run_dir) if (named := int(_STATE_RE.search(p.name).group(1))) <= step
                and _written_by(p, payload["run_id"], named)]
        for old in ours[:-keep] if keep > 0 else []:
            old.unlink(missing_ok=True)
    return path


def _written_by(path: Path, run_id: str | None, step: int | None = None) -> bool:
    """Whether the state at `path` is this run's to rotate away (or, with `step`, to replace by its state of that
    step): its run id is `run_id`, or it has none (written before run ids). Read memory-mapped: the tensors are not
    loaded. An unreadable file is not ours to delete, and a FIFO or device named like a state is never opened for
    reading (its open could wait for ever)."""
    try:
        readable_file(path, "train state")  # the one gate: refuses what is not a regular file without waiting
        state = load_weights_only(path, mmap=True)
        owner = state.get("run_id")
    except Exception:  # noqa: BLE001 - truncated, foreign: left in place
        return False
    return (owner is None or owner == run_id) and (step is None or state.get("step") == step)


def _to_cpu(value: Any) -> Any:
    """Every tensor of a nested state on the CPU: a state from a GPU or a TPU (XLA) resumes anywhere."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    return value


def load_train_state(path: Path) -> dict[str, Any]:
    """The state in `path`, checked against its checksum. `UnreadableFile` when it cannot be read (missing, no
    permission, not a regular file: not damaged), `DamagedFile` when its bytes are wrong."""
    return checked_train_state(path, read_torch_file(path))


def read_torch_file(path: Path, what: str = "train state") -> Any:
    """What the torch file `path` holds, loaded weights_only (no pickle's code runs). `UnreadableFile` when it
    cannot be read, `DamagedFile` when its bytes are no torch file's (said as a train state's, or for another
    `what` as any PyTorch checkpoint's)."""
    said, guess = (("not a readable train state", "truncated or not written by trm-kaggle?") if what == "train state"
                   else ("not a readable PyTorch checkpoint", "truncated or foreign file?"))
    with open_regular(path, what) as f:  # a FIFO never blocks, a missing permission is not damage
        return load_weights_only(f, path=path, what=what, said=said, guess=guess)


def holds_train_state(loaded: Any) -> bool:
    """Whether what a torch file held (loaded weights_only) is a train state by its content, whatever its name."""
    return isinstance(loaded, dict) and loaded.get("format") == STATE_FORMAT


def checked_train_state(path: Path, state: Any) -> dict[str, Any]:
    """`state`, as loaded (weights_only) from `path`, once it proves a train state: its checksum, its fields and
    its tensors checked (`load_train_state`). Its checksum entry is taken out of it."""
    if not holds_train_state(state):
        raise DamagedFile(f"{path}: not a trm-kaggle train state (for upstream step_N files use "
                          "`trm-kaggle import-upstream`)")
    digest = state.pop("sha256", None)
    try:
        computed = content_digest(state)
    except ValueError as e:  # a meta, sparse or nested tensor: no run saves one
        raise DamagedFile(f"{path}: not a usable train state: it holds {e}") from None
    except (TypeError, RuntimeError, NotImplementedError) as e:  # anything else torch loads but cannot give bytes of
        raise DamagedFile(f"{path}: not a usable train state: its contents cannot be checked ({type(e).__name__}: "
                          f"{clipped(str(e).splitlines()[0] if str(e) else '', 120)})") from None
    if digest is None:
        log.warning("%s: written before train states carried a checksum; loaded unverified", path)
    elif computed != digest:
        raise DamagedFile(f"{path}: damaged: its contents do not match the checksum written with them (bytes "
                          f"changed on disk or in a copy)")
    problem = _field_problem(state)
    if problem is not None:  # a checksum proves the bytes are the ones written, not that a writer wrote them well
        raise DamagedFile(f"{path}: not a usable train state: field {problem}")
    if _release(state.get("version") or "") > _release(__version__):  # read by its format, but said
        log.warning("%s: written by trm-kaggle %s, newer than this %s; its fields are checked, but settings the "
                    "newer version adds are unknown here (upgrade to resume it as written)", path,
                    clipped(state["version"]), __version__)
    return state


def _release(version: str) -> tuple[int, ...]:
    """The leading release numbers of a version string ('0.2.1rc1' -> (0, 2, 1)); () when it has none."""
    m = re.match(r"[0-9]{1,9}(?:\.[0-9]{1,9})*", version)  # ASCII, bounded: int() of 5,000 digits raises
    return tuple(int(x) for x in m.group(0).split(".")[:8]) if m else ()


def _is_int(v: Any, low: int = 0) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and low <= v < 2**63


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _tensors(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(k, str) and isinstance(t, torch.Tensor) for k, t in v.items())


def _unsaveable(state: dict[str, Any]) -> str | None:
    """What no run's save writes, for the first tensor or setting that holds it: NaN or inf in a weight, a latent
    state or an optimizer's moment (a save refuses them; resumed, the run would fail at its next save with advice
    about the learning rate), a moment that is no floating-point tensor (torch's load would cast it to the
    weights' dtype), a float64 or float8 tensor (no run saves one; 1e300 turns inf as float32), a mean of squares
    below 0 (its square root is NaN at the next step); then a step count that is no whole number from 0 or passes the
    state's own step, and a NaN setting of an optimizer. One pass over the tensors."""
    carries = [(f"carry {i}.{k}", c[k]) for rank in state.get("carries") or [] for i, c in enumerate(rank)
               for k in ("z_H", "z_L")]

    def moments(key: str) -> list[tuple[str, torch.Tensor]]:
        return [(f"{i}.{k}", t) for i, st in ((state.get(key) or {}).get("state") or {}).items()
                for k, t in st.items() if isinstance(t, torch.Tensor)]

    for field, named in (("model", state["model"].items()), ("ema", (state.get("ema") or {}).items()),
                         ("carries", carries), ("optimizer", moments("optimizer")),
                         ("sparse_optimizer", moments("sparse_optimizer"))):
        optimizer = field.endswith("optimizer")
        for name, t in named:
            if t.is_floating_point() and field != "carries" and t.dtype not in DTYPES.values():  # float64, float8
                return f"{field!r} tensor {name} is {t.dtype}; a run saves float32, bfloat16 or float16"
            if t.is_floating_point() and (found := first_nonfinite({name: t})):
                bad = found[1]
                return f"{field!r} tensor {name} holds {bad} non-finite value{'s' if bad > 1 else ''} (NaN or inf)"
            if optimizer and not t.is_floating_point():
                return f"{field!r} tensor {name} is {t.dtype}; a run saves its optimizer's state as floating point"
            if optimizer and name.endswith("_sq") and (bad := int((t < 0).sum())):
                return f"{field!r} tensor {name} holds {bad} negative value{'s' if bad > 1 else ''} (a mean of squares)"
    for key in ("optimizer", "sparse_optimizer"):  # a step count below 0 or between whole numbers: Adam's bias
        for i, st in ((state.get(key) or {}).get("state") or {}).items():  # correction takes its log
            v = st.get("step") if isinstance(st, dict) else None
            n = float(v) if isinstance(v, torch.Tensor) and v.numel() == 1 else v if _is_number(v) else None
            if n is not None and not (n >= 0 and float(n).is_integer()):
                return f"{key!r} state {i}.step is {n!r}; a run counts its steps as whole numbers from 0"
            run_step = state.get("step")  # an optimizer steps at most once per training step (a skip: fewer)
            if n is not None and _is_number(run_step) and n > run_step:
                return f"{key!r} state {i}.step is {n:.0f}, past the state's own step {run_step}"
    for key in ("optimizer", "sparse_optimizer"):  # a NaN rate or beta: every step after it would be NaN
        for g in (state.get(key) or {}).get("param_groups") or []:
            for name, v in g.items():
                values = v if isinstance(v, (list, tuple)) else [v]
                if any(isinstance(x, float) and not math.isfinite(x) for x in values):
                    return f"{key!r} setting {name} is {v!r}; a finite number is what a run saves"
    return None


def _json_object(v: Any) -> bool:
    return isinstance(_parsed(v), dict)


def _parsed(v: Any) -> Any:
    """The JSON text `v` parsed by the one reader (nested too deep, a repeated key, an integer too long: refused),
    or None where it is not such a text."""
    try:
        return parse_json(v, "train state") if isinstance(v, str) else None
    except (TRMError, ValueError, RecursionError):
        return None


#: the training loader's position (`PuzzleLoader.state_dict`): counts of epochs, groups and batches
_LOADER_COUNTS = ("epoch", "position", "batch_in_epoch", "step", "seed", "global_batch_size", "total_groups")
#: below it, a count has room to go on counting: one at 2**63 - 1 resumed, and the next state it wrote (2**63) was
#: refused as damaged by the resume after
_LOADER_COUNT_END = 2**62


def _loader_state(v: Any) -> bool:
    """A data position as `PuzzleLoader.state_dict` writes it: its version, the test-mode flag, and (training)
    whole numbers from 0 below `_LOADER_COUNT_END` for every count; a resume would otherwise fail inside the
    first step or loop on a NaN."""
    d = _parsed(v)
    if not isinstance(d, dict) or not _is_int(d.get("version")) or not isinstance(d.get("test_mode"), bool):
        return False
    return d["test_mode"] or all(_is_int(d.get(k)) and d[k] < _LOADER_COUNT_END for k in _LOADER_COUNTS)


_RNG_BYTES = torch.get_rng_state().numel()  # the CPU generator's state: the same size on every machine


def _rng_state(v: Any) -> bool:
    """The CPU generator's state: its size, and contents the generator takes (all zeros is no Mersenne Twister
    state: a resume would stop at its first draw)."""
    if not (isinstance(v, torch.Tensor) and v.dtype == torch.uint8 and v.dim() == 1 and v.numel() == _RNG_BYTES):
        return False
    try:
        torch.Generator().set_state(v)
    except RuntimeError:
        return False
    return True


def _bound(name: str) -> int:
    """The largest value dataset.json may give `name`: a state's model_shape sizes tensors just as a dataset's does."""
    return next(m.le for m in DatasetMetadata.model_fields[name].metadata if getattr(m, "le", None) is not None)


_SHAPE_BOUNDS = {k: _bound(k) for k in ("seq_len", "vocab_size", "num_puzzle_identifiers")}
_MAX_WORLD_SIZE = 65536


def _model_shape(v: Any) -> bool:
    return isinstance(v, dict) and all(_is_int(v.get(k), 1) and v[k] <= top for k, top in _SHAPE_BOUNDS.items())


def _optimizer_state(v: Any) -> bool:
    """What torch's `Optimizer.load_state_dict` indexes without checking: per-parameter state keyed by index, and
    parameter groups each listing its parameters' indices."""
    return (isinstance(v, dict) and isinstance(v.get("state"), dict)
            and all(_is_int(k) and isinstance(s, dict) and all(isinstance(n, str) for n in s)
                    and all(isinstance(x, torch.Tensor) for x in s.values())  # every optimizer here keeps tensors
                    for k, s in v["state"].items())
            and isinstance(v.get("param_groups"), list)
            and all(isinstance(g, dict) and isinstance(g.get("params"), list) and all(_is_int(i) for i in g["params"])
                    for g in v["param_groups"]))


_CARRY_TENSORS = ("z_H", "z_L", "steps", "halted")


def _carries(v: Any) -> bool:
    """Each rank's list of micro-batch carries, each a mapping of tensors (what `save_state` gathers): at least
    one per rank (a run's step takes each of its micro-batches' carries)."""
    return isinstance(v, list) and bool(v) and all(
        isinstance(rank, list) and bool(rank) and all(
            isinstance(c, dict) and all(isinstance(c.get(k), torch.Tensor) for k in _CARRY_TENSORS)
            and _tensors(c.get("current_data")) for c in rank) for rank in v)


def _loss_scale(v: Any) -> bool:
    scaler = v.get("scaler") if isinstance(v, dict) else None
    return (isinstance(scaler, dict) and bool(scaler) and all(isinstance(x, (int, float)) for x in scaler.values())
            and (v.get("skipped") is None or _is_int(v["skipped"])))


#: What each field of a train state must be (what `save_state` writes; a resume and `export` read them unchecked).
_FIELDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "step": ("a whole number from 0 below 2**63", _is_int),
    "model": ("a non-empty mapping of names to tensors", lambda v: _tensors(v) and bool(v)),
    "config": ("the run's settings as a JSON object", _json_object),
    "loader": ("the data position as a JSON object (version, test_mode and whole numbers from 0 below 2**62 for "
               + ", ".join(_LOADER_COUNTS) + ")", _loader_state),
    "dataset_fingerprint": ("a non-empty string", lambda v: isinstance(v, str) and bool(v)),
    "rng_torch": (f"the CPU generator's state, a tensor of {_RNG_BYTES} bytes it takes", _rng_state),
    "model_shape": ("seq_len, vocab_size and num_puzzle_identifiers, each an integer from 1 up to what "
                    "dataset.json allows (" + ", ".join(f"{k} <= {top}" for k, top in _SHAPE_BOUNDS.items()) + ")",
                    _model_shape),
}
_OPTIMIZER = ("an optimizer's state (a mapping with 'state', of tensors, and 'param_groups', each group "
              "listing its 'params')")
_OPTIONAL: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "ema": ("a mapping of names to tensors", _tensors),
    "optimizer": (_OPTIMIZER, _optimizer_state),
    "sparse_optimizer": (_OPTIMIZER, _optimizer_state),
    "amp": ("a loss scaler's state (a mapping with 'scaler', a mapping of numbers)", _loss_scale),
    "carries": (("a list of each rank's non-empty list of carries, each a mapping of tensors (z_H, z_L, steps, "
                 "halted, current_data)"), _carries),
    "world_size": (f"an integer from 1 to {_MAX_WORLD_SIZE}", lambda v: _is_int(v, 1) and v <= _MAX_WORLD_SIZE),
    "forward_dtype": ("one of float32, bfloat16, float16", lambda v: v in DTYPES),
    "run_id": ("a string", lambda v: isinstance(v, str)),
    "version": ("the writer's version, a string", lambda v: isinstance(v, str)),
    "evaluation_due": ("True or False", lambda v: isinstance(v, bool)),
    "log_window": ("a mapping of names to numbers", lambda v: isinstance(v, dict) and all(
        isinstance(k, str) and isinstance(x, (int, float)) and not isinstance(x, bool) for k, x in v.items())),
}


def _field_problem(state: dict[str, Any]) -> str | None:
    """`'name' ...: what it must be` for the first field of `state` that is missing or of the wrong kind."""
    for name, (must, ok) in _FIELDS.items():
        if name not in state:
            return f"{name!r} is missing (it must be {must})"
        if not ok(state[name]):
            return f"{name!r} is {_shown(state[name])}; it must be {must}"
    for name, (must, ok) in _OPTIONAL.items():
        # None stands for "none" where a run writes it so (no EMA, no loss scaler); these it never writes as None
        if name in _NEVER_NONE and name in state and state[name] is None:
            return f"{name!r} is None; it must be {must} or absent"
        if state.get(name) is not None and not ok(state[name]):
            return f"{name!r} is {_shown(state[name])}; it must be {must} or absent"
    return _unsaveable(state)


#: Optional fields a save writes with a value whenever it writes them (older versions left some out).
_NEVER_NONE = ("version", "world_size", "forward_dtype", "evaluation_due", "log_window")


def _shown(v: Any) -> str:
    if isinstance(v, (bool, int, float, str)) or v is None:
        text = repr(v)
        return text if len(text) <= 40 else text[:37] + "..."
    return f"a {type(v).__name__}"


# ---------------------------------------------------------------------------
# From a run to an inference export
# ---------------------------------------------------------------------------


def _warn_other_arch(recorded: Path, cfg: TrainConfig, path: Path) -> None:
    """A warning when the run's config.json records another architecture than the state it exports was trained
    with (one of the two edited by hand): the export follows the state, whose checksum covers its settings."""
    try:
        if not os.path.lexists(recorded):
            return
        theirs = TrainConfig.model_validate(read_json(recorded, "run config.json")).arch
    except (TRMError, ValueError, TypeError, OSError):
        return  # no record, or one no run wrote: nothing to compare
    if differ := [k for k in type(theirs).model_fields if getattr(theirs, k) != getattr(cfg.arch, k)]:
        log.warning("%s records %s where %s was trained with %s: the export follows the state (its checksum covers "
                    "its settings)", recorded, ", ".join(f"arch.{k}={getattr(theirs, k)!r}" for k in differ[:3]),
                    path.name, ", ".join(f"{getattr(cfg.arch, k)!r}" for k in differ[:3]))


def export_run(run: str | os.PathLike, out: str | os.PathLike, mean_embedding: bool = False,
               use_ema: bool = True, written: dict | None = None) -> Path:
    """Inference export of a run's newest readable train state (EMA weights when the run kept them; the live
    ones with `use_ema=False`, refused where the run kept no average: the choice would change nothing).
    `written`, a dict, receives the config.json written (`export_inference`)."""
    mean_embedding, use_ema = flag_argument("mean_embedding", mean_embedding), flag_argument("use_ema", use_ema)
    path_argument("run", run, "a run folder's or train state's path")  # 5 was os.fspath's TypeError, naming none
    path_argument("out", out, "an export folder's path")
    refuse_nul(run, "run")
    refuse_nul(out, "export")  # before the state is loaded (its bytes, then the export refused)
    # as `export` checks it: never written into the run folder it reads (a state file named alone lets the
    # export go beside it)
    check_kept([Input(run, "run", tree=True)], [Output(out, "export", "replaced")])
    # what stands at `out` before the state is read: another export written there meanwhile (two commands naming
    # one --out) is kept and this one refused, never both said done
    found = found_at(out)
    path, state = ((Path(run), load_train_state(Path(run))) if is_regular(run, "train state")
                   else load_newest_state(run, purpose="export"))
    if not use_ema and not state.get("ema"):
        raise TRMError(f"--no-ema: {path} holds no EMA average (the run trained with ema=false), so its export holds "
                       "the live weights already: drop --no-ema")
    model, cfg, ema = model_from_train_state(state, use_ema=use_ema, source=f"train state {path}")
    _warn_other_arch(path.parent / "config.json", cfg, path)
    shape = state["model_shape"]
    info = {"source": str(path), "step": state["step"], "ema": ema, "data_paths": cfg.data_paths,
            "train_config": json.loads(state["config"])}
    return export_inference(out, model, arch=cfg.arch, seq_len=shape["seq_len"], vocab_size=shape["vocab_size"],
                            mean_embedding=mean_embedding, info=info, found=found, written=written)
