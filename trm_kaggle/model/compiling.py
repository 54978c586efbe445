"""torch.compile of the model: the setting (auto, on, off), the compiled regions and their eager fallback, the
compile cache a folder keeps.

    resolve_compile(setting, device) -> bool      auto: on for CUDA, off elsewhere
    compile_model(model, setting, device) -> bool  TinyRecursiveModel.compile_net() where the setting says so
    Regions                                        compiled functions that fall back to eager together
    load_compile_cache(folder, device) / save_compile_cache(folder, device)

What `TinyRecursiveModel.compile_net()` compiles is regional: the recursive network's step with one
transformer block traced once and reused by every layer (`torch.compiler.nested_compile_region`; where this
torch lacks it, one `torch.compile` of the block call that all blocks share), the ACT step's restart of halted
rows and its halting rule, and in training the loss. Never the whole model: its recursion unrolls into
H_cycles x (L_cycles + 1) network calls per ACT step, and compiling them all took a 45-second GPU run's whole
budget (one step). Shapes start static; a second batch size compiles once more, with the batch dimension
symbolic (torch's automatic dynamic shapes, `dynamic=None`), and that graph serves every size after it. A
training run keeps one batch shape (static kernels, CUDA graphs); the Kaggle solve, whose tasks fine-tune and
predict in batches of their own sizes, compiles each region at most twice instead of once per size (with
`dynamic=False` dynamo stops compiling after 8 sizes and runs the rest eagerly).

`auto` compiles on CUDA, where inductor's fused element-wise work pays (docs/benchmarks.md); on a CPU it stays
off: a compiled step there was no faster than the eager one (whose matmuls already fuse their epilogues) and
costs a compile of about a minute. `on` compiles wherever inductor runs (a CPU needs a C++ compiler).

A compile that fails (no C++ compiler, a backend error, an op inductor cannot lower) does not stop the run:
one warning, and every region of that compile runs eagerly from then on; later compiles in the process with
the same options stay eager without trying again. The backward graph is compiled together with the forward
(`force_non_lazy_backward_lowering`), so that its failure shows at the first call too, where it is caught.

The compile cache: `torch.compiler.save_cache_artifacts()` gathers what this process compiled (inductor's
generated code and compiled kernels, AOTAutograd's graphs); `load_cache_artifacts()` writes them back into
torch's on-disk caches, so that the next process compiles from them in seconds. Those entries are pickled
objects and generated source that a later compile unpickles and runs: loading an artifact file is running
code. So a file is loaded only when it was written on this machine by this user (its record carries an HMAC
under a key kept in the user's cache directory, never in the run folder) or when it is a file the caller
vouches for (`trusted`: a bundle's author shipped it on purpose), and in both cases only when its sha256 is
the one recorded and it was made by this torch for this device (else one line says why it is ignored).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from trm_kaggle.atomic import atomic_write_bytes, atomic_write_json
from trm_kaggle.config import compile_setting
from trm_kaggle.errors import DataError
from trm_kaggle.jsonio import read_json

log = logging.getLogger(__name__)

CACHE_FILE = "compile_cache.bin"
CACHE_RECORD = "compile_cache.json"
CACHE_FORMAT = "trm_kaggle-compile-cache"
MAX_CACHE_BYTES = 2 << 30
KEY_ENV = "TRM_KAGGLE_CACHE_DIR"  # where the key lives (default: $XDG_CACHE_HOME/trm_kaggle or ~/.cache/trm_kaggle)


# ---------------------------------------------------------------------------
# The setting
# ---------------------------------------------------------------------------


def may_be_tracing() -> bool:
    """Whether torch.compile can be tracing now: not before torch._dynamo is imported. Eager code that checks
    this first can skip the torch helpers whose first call imports it (1.2 s of a CPU process's start-up):
    `optim.common.BaseOptimizer`, `model.layers._onednn`."""
    return "torch._dynamo" in sys.modules


def resolve_compile(setting: Any, device: str | torch.device) -> bool:
    """Whether to compile on `device`: on/True and off/False as said; auto = CUDA only (see the module text)."""
    choice = compile_setting(setting)
    if choice != "auto":
        return choice == "on"
    return torch.device(device).type == "cuda"


def cuda_graph_options(cuda_graphs: bool, device: str | torch.device) -> dict:
    """torch.compile options of the network for `cuda_graphs`: reduce-overhead (CUDA graphs) on CUDA; elsewhere
    nothing (said in one line), the compile as without it."""
    if not cuda_graphs:
        return {}
    if torch.device(device).type == "cuda":
        return {"mode": "reduce-overhead"}
    log.info("cuda_graphs: %s has no CUDA graphs; the network compiles without them", torch.device(device).type)
    return {}


def compile_model(model, setting: Any, device: str | torch.device, cuda_graphs: bool = False) -> bool:
    """`model.compile_net()` when `setting` resolves to on for `device` (the regions of the module text);
    returns whether it did. XLA compiles on its own: there `auto` is off and `on` is refused by compile_net."""
    if not resolve_compile(setting, device):
        return False
    model.compile_net(**cuda_graph_options(cuda_graphs, device))
    return True


def apply_compile(model, setting: Any, device: str | torch.device, cuda_graphs: bool = False) -> Optional["Regions"]:
    """Compile `model`'s regions from outside when `setting` resolves to on for `device`; the compile's
    `Regions` (whose `region(fn)` compiles one more function, such as the trainer's loss, with the same
    fallback), or None when nothing compiled."""
    if not compile_model(model, setting, device, cuda_graphs):
        return None
    return model._regions


# ---------------------------------------------------------------------------
# Compiled regions, with an eager fallback
# ---------------------------------------------------------------------------

#: Compile options (as text) whose compile failed in this process: the first failure's line.
_FAILED: dict[str, str] = {}


def _compile_errors() -> tuple[type[BaseException], ...]:
    from torch._dynamo.exc import TorchDynamoException  # BackendCompilerFailed, InductorError, ... derive from it

    return (TorchDynamoException,)


def _first_line(e: BaseException) -> str:
    """`Type: first line`, of the error the compiler met when it wraps one (BackendCompilerFailed does)."""
    cause = getattr(e, "inner_exception", None) or e.__cause__ or e
    text = str(cause).strip().splitlines()
    name = type(e).__name__ + (f" ({type(cause).__name__})" if cause is not e else "")
    return f"{name}: {text[0][:300]}" if text else name


class Regions:
    """The compiled functions of one compile (one model): each runs compiled until a compile fails, then every
    region of this compile runs its eager function. One warning per process and compile options."""

    def __init__(self, **compile_kwargs):
        self.kwargs = {"dynamic": None, **compile_kwargs}  # static first, symbolic batch from a second size on
        self.key = repr(sorted(self.kwargs.items()))
        # the backward compiles with the forward, so that its failure too raises where the fallback catches it
        import torch._functorch.config as functorch_config

        if hasattr(functorch_config, "force_non_lazy_backward_lowering"):
            functorch_config.force_non_lazy_backward_lowering = True

    @property
    def failed(self) -> bool:
        return self.key in _FAILED

    def region(self, fn: Callable, eager: Optional[Callable] = None, **extra) -> Callable:
        """`fn` compiled (lazily: at its first call), falling back to `eager` (default: `fn` itself)."""
        compiled = torch.compile(fn, **{**self.kwargs, **extra})
        eager = fn if eager is None else eager
        errors = _compile_errors()

        def run(*args, **kwargs):
            if self.failed:
                return eager(*args, **kwargs)
            try:
                return compiled(*args, **kwargs)
            except errors as e:
                if "out of memory" in str(e).lower():
                    raise  # memory, not the compiler: the caller's out-of-memory handling decides
                self.fail(e)
                return eager(*args, **kwargs)

        run.eager = eager  # type: ignore[attr-defined]
        return run

    def fail(self, e: BaseException) -> None:
        if self.failed:
            return
        _FAILED[self.key] = _first_line(e)
        log.warning("torch.compile failed (%s); running eagerly from here on (the same numbers, slower; "
                    "compile=off skips the attempt)", _FAILED[self.key])


def is_compile_error(e: BaseException) -> bool:
    """Whether `e` is torch.compile's (a compile that failed), not the computation's."""
    return isinstance(e, _compile_errors())


# ---------------------------------------------------------------------------
# The compile cache
# ---------------------------------------------------------------------------


def cache_target(device: str | torch.device) -> dict:
    """What a cache is made for: torch, Python, the device type and, on CUDA, its capability."""
    d = torch.device(device)
    target: dict[str, Any] = {"torch": torch.__version__, "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
                              "device": d.type}
    if d.type == "cuda":
        target["capability"] = list(torch.cuda.get_device_capability(d))
        target["cuda"] = torch.version.cuda
    return target


def _key_dir() -> Path:
    if os.environ.get(KEY_ENV):
        return Path(os.environ[KEY_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "trm_kaggle"


def _local_key(create: bool) -> Optional[bytes]:
    """This user's key for the caches' HMACs (32 random bytes, mode 0600), made on first use; None when it
    cannot be read or made."""
    path = _key_dir() / "compile-cache.key"
    try:
        key = path.read_bytes()
        if len(key) >= 32:
            return key
    except OSError:
        pass
    if not create:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        key = secrets.token_bytes(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key)
        return key
    except FileExistsError:  # made at the same moment by another process: theirs
        return _local_key(create=False)
    except OSError as e:
        log.info("compile cache: no key could be kept in %s (%s); the cache is not saved", path.parent, e)
        return None


def _mac(key: bytes, digest: str, target: dict) -> str:
    message = json.dumps({"sha256": digest, "target": target}, sort_keys=True).encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def save_compile_cache(folder: str | os.PathLike, device: str | torch.device) -> Optional[Path]:
    """Write what this process compiled into `folder` (compile_cache.bin + compile_cache.json, atomically);
    the path, or None when there is nothing to save (or this torch cannot save it)."""
    save = getattr(torch.compiler, "save_cache_artifacts", None)
    if save is None:
        return None
    got = save()
    if not got or not got[0]:
        return None
    key = _local_key(create=True)
    if key is None:
        return None
    data, target = got[0], cache_target(device)
    digest = hashlib.sha256(data).hexdigest()
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # the artifacts first, then their record: a reader holding a new file and an old record sees the digests
        # differ and ignores both
        atomic_write_bytes(folder / CACHE_FILE, data)
        atomic_write_json(folder / CACHE_RECORD, {"format": CACHE_FORMAT, "version": 1, "target": target,
                                                  "sha256": digest, "bytes": len(data),
                                                  "hmac": _mac(key, digest, target)}, indent=2)
    except OSError as e:  # a cache is a saving of time: never a reason to stop
        log.warning("compile cache not saved in %s: %s", folder, e.strerror or e)
        return None
    return folder / CACHE_FILE


def read_cache_record(path: str | os.PathLike) -> dict:
    """The record (compile_cache.json) of a cache file, checked for its shape; DataError naming the file."""
    record_path = Path(path).with_name(CACHE_RECORD)
    record = read_json(record_path, "compile cache record", hint=f"written beside {Path(path).name}")
    if not (isinstance(record, dict) and record.get("format") == CACHE_FORMAT and isinstance(record.get("target"), dict)
            and isinstance(record.get("sha256"), str)):
        raise DataError(f"{record_path}: not a compile cache record")
    return record


def cache_problem(path: str | os.PathLike, device: str | torch.device, trusted: bool = False
                  ) -> tuple[Optional[str], Optional[bytes]]:
    """(why the cache file at `path` is not loaded here, None) or (None, its bytes)."""
    path = Path(path)
    if not path.is_file():
        return f"{path}: no such file", None
    try:
        record = read_cache_record(path)
    except DataError as e:
        return str(e), None
    target = cache_target(device)
    if record["target"] != target:
        differ = [k for k in sorted(set(target) | set(record["target"])) if record["target"].get(k) != target.get(k)]
        return (f"{path}: made for " + ", ".join(f"{k} {record['target'].get(k)}" for k in differ) + "; here "
                + ", ".join(f"{k} {target.get(k)}" for k in differ)), None
    if not trusted:
        key = _local_key(create=False)
        if key is None or not hmac.compare_digest(str(record.get("hmac", "")), _mac(key, record["sha256"], target)):
            return f"{path}: not written by this user on this machine (a cache is code: only our own is loaded)", None
    size = path.stat().st_size
    if size > MAX_CACHE_BYTES:
        return f"{path}: {size:,} bytes, more than a compile cache holds", None
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != record["sha256"]:
        return f"{path}: its sha256 differs from its record's (damaged or replaced)", None
    return None, data


def load_compile_cache(path: str | os.PathLike, device: str | torch.device, trusted: bool = False,
                       say: Callable[[str], None] = log.info) -> bool:
    """Load a cache written by `save_compile_cache` (`path`: the file, or its folder) before compiling; whether
    it was loaded. A missing file says nothing; one that does not fit or is not ours is ignored with one line.
    `trusted`: the caller vouches for the file (a bundle's author shipped it): no HMAC, the digest still holds."""
    path = Path(path)
    if path.is_dir():
        path = path / CACHE_FILE
    load = getattr(torch.compiler, "load_cache_artifacts", None)
    if load is None or not path.exists():
        return False
    try:
        problem, data = cache_problem(path, device, trusted)
    except OSError as e:
        problem, data = f"{path}: unreadable ({e.strerror or e})", None
    if problem is not None:
        say(f"compile cache ignored: {problem}")
        return False
    try:
        load(data)
    except Exception as e:  # noqa: BLE001 - a cache that torch cannot take costs a compile, nothing else
        say(f"compile cache ignored: {path}: torch could not load it ({_first_line(e)})")
        return False
    say(f"compile cache loaded: {path}")
    return True


def compiled_graphs() -> int:
    """Graphs torch.compile has made in this process so far (grows when something new compiled)."""
    try:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])
    except Exception:  # noqa: BLE001 - a torch without the counter: every check says "maybe new"
        return -1
