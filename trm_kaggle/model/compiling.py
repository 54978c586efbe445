"""torch.compile of the model: the setting (auto, on, off), the compiled regions and their eager fallback, the
compile cache a folder keeps.

    resolve_compile(setting, device) -> bool       auto: on for CUDA, off elsewhere
    apply_compile(model, setting, device) -> Regions  the model's regions compiled, where the setting says so
    is_compiled(model) -> bool
    Regions                                         compiled functions that fall back to eager together
    load_compile_cache(folder, device) / save_compile_cache(folder, device)

The compile is applied from outside the model: `apply_compile` replaces the callables a step of
`TinyRecursiveModel` runs through with compiled versions. What it compiles is regional: the recursive network
(`model.net`) with one transformer block traced once and reused by every layer
(`torch.compiler.nested_compile_region`; where this torch lacks it, one `torch.compile` of the block call that
all blocks share), the ACT step's restart of halted rows and its halting rule (`model.act_begin`,
`model.act_end`), and in training the loss (`regions.region(act_loss)`). Never the whole model: its recursion
unrolls into
H_cycles x (L_cycles + 1) network calls per ACT step, and compiling them all took a 45-second GPU run's whole
budget (one step). Shapes start static; a second batch size compiles once more, with the batch dimension
symbolic (torch's automatic dynamic shapes, `dynamic=None`), and that graph serves every size after it. A
training run keeps one batch shape (static kernels, CUDA graphs); the Kaggle solve, whose tasks fine-tune and
predict in batches of their own sizes, compiles each region at most twice instead of once per size (with
`dynamic=False` dynamo stops compiling after 8 sizes and runs the rest eagerly).

`cuda_graphs` (CUDA only; elsewhere ignored, in one line): the network replays as CUDA graphs (torch.compile's
reduce-overhead mode), and the model's step does what replays ask of it: each forward starts a new step
(`torch.compiler.cudagraph_mark_step_begin`), and the recursion's latents, which the carry keeps into the next
step, are copied out of the memory the next replays reuse.

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
import functools
import json
import logging
import os
import secrets
import sys
import weakref
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from trm_kaggle.atomic import atomic_write_bytes, atomic_write_json
from trm_kaggle.config import compile_setting
from trm_kaggle.errors import DataError, TRMError
from trm_kaggle.jsonio import is_regular, read_bytes, read_json
from trm_kaggle.wording import clipped, one_line

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
    `optim.common.BaseOptimizer`, `model.cpu_kernels._onednn`."""
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


# ---------------------------------------------------------------------------
# The compile, applied from outside the model
# ---------------------------------------------------------------------------

#: The Regions of each model apply_compile compiled (held here: the model itself keeps no compile state).
_COMPILED: "weakref.WeakKeyDictionary[torch.nn.Module, Regions]" = weakref.WeakKeyDictionary()


def _run_block(block, h: torch.Tensor, cos_sin) -> torch.Tensor:
    return block(h, cos_sin)


@functools.lru_cache(maxsize=None)
def _block_region() -> Optional[Callable]:
    """One transformer block as a region torch.compile traces once and reuses for every layer (the layers are the
    same code on other weights): one for the process, so every model's network shares it. A no-op outside
    torch.compile; None where this torch lacks it."""
    nested = getattr(torch.compiler, "nested_compile_region", None)
    return None if nested is None else nested(_run_block)


def apply_compile(model, setting: Any, device: str | torch.device, cuda_graphs: bool = False,
                  **compile_kwargs) -> Optional["Regions"]:
    """Compile `model`'s regions (the module text) when `setting` resolves to on for `device`, by swapping
    compiled versions in for its `net`, `act_begin` and `act_end` (lazily: each compiles at its first call,
    again for the other grad mode, and once more at a second batch size). Returns the compile's `Regions`,
    whose `region(fn)` compiles one more function (the trainer's loss) with the same fallback; None when
    nothing compiled. Inductor fuses the element-wise work (norms, RoPE, SiLU gating and their backwards)
    around the matmuls: the same arithmetic as eager up to float32 rounding. A model compiled before keeps its
    regions. `cuda_graphs`: see the module text. `compile_kwargs` go to torch.compile (a backend, in tests).
    XLA compiles on its own: there `auto` is off and `on` is refused."""
    if not resolve_compile(setting, device):
        return None
    if model in _COMPILED:
        return _COMPILED[model]
    if model.H_init.device.type == "xla":
        raise TRMError("compiling the network is torch.compile (inductor), which does not run on XLA devices; "
                       "XLA compiles the model itself: use compile off (or auto)")
    graphs = cuda_graph_options(cuda_graphs, device)
    regions = Regions(**compile_kwargs)
    block = _block_region()
    # dynamo's "eager" backend runs a nested region's backward without the fake tensors torch requires
    # there ("fake_mode should be enabled for HOPs", torch 2.13): with it, each block compiles on its own
    if block is not None and compile_kwargs.get("backend") != "eager":
        def regional_net(h, injection, cos_sin):  # each block a nested region: traced once, reused by every layer
            return model.run_layers(h, injection, cos_sin, block)

        model.net = regions.region(regional_net, eager=model.run_layers, **graphs)
    else:  # no nested regions in this torch: one compiled function runs every block
        run_block = regions.region(_run_block, **graphs)
        model.net = lambda h, injection, cos_sin: model.run_layers(h, injection, cos_sin, run_block)
    model.act_begin, model.act_end = regions.region(model.act_begin), regions.region(model.act_end)
    model.cycles_in_inference_mode = False
    if graphs:
        _step_with_cuda_graphs(model)
    _COMPILED[model] = regions
    return regions


def _step_with_cuda_graphs(model) -> None:
    """Wrap the model's forward and recursion in what CUDA graph replays ask of a step (the module text)."""
    forward, recurse = model.forward, model.recurse

    def step(*args, **kwargs):
        torch.compiler.cudagraph_mark_step_begin()  # the graphs' outputs of the last step are no longer read
        return forward(*args, **kwargs)

    def recurse_and_copy(*args, **kwargs):
        z_H, z_L = recurse(*args, **kwargs)
        return z_H.clone(), z_L.clone()  # the carry outlives this step: out of the memory replays reuse

    model.forward, model.recurse = step, recurse_and_copy


def is_compiled(model) -> bool:
    """Whether apply_compile compiled `model`."""
    return model in _COMPILED


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


def _key_dir() -> tuple[Path, str]:
    """(the folder of the key, what chose it: the variable, or the home folder's cache), for its lines."""
    if os.environ.get(KEY_ENV):
        return Path(os.environ[KEY_ENV]), KEY_ENV
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):  # a relative one is to be ignored (the XDG base directory rules)
        return Path(xdg) / "trm_kaggle", "XDG_CACHE_HOME"
    return Path.home() / ".cache" / "trm_kaggle", "the home folder's .cache"


KEY_FILE = "compile-cache.key"
_KEY_BYTES = 32
_KEY_MAX_BYTES = 4096  # a key is 32 bytes: more is not a key (a link to /dev/zero is refused before that)
_KEY_SAID: set[str] = set()


def _key_refused(problem: str) -> None:
    if problem not in _KEY_SAID:  # once per process: every save and load would say it again
        _KEY_SAID.add(problem)
        log.warning("compile cache: %s; no compile cache is saved or loaded under this key", problem)


def _local_key(create: bool) -> Optional[bytes]:
    """This user's key for the caches' HMACs (32 random bytes, mode 0600), made on first use; None when it
    cannot be read or made. The key is read by the package's one reader of files (`read_bytes`: a FIFO, a
    device or an oversized file is one line, never a wait), and trusted only when it is this user's and
    closed to others (`private`): a key others can read or write would let them sign code that we load."""
    folder, chosen_by = _key_dir()
    path = folder / KEY_FILE
    if os.path.lexists(path):
        try:
            key = read_bytes(path, "compile cache key", max_bytes=_KEY_MAX_BYTES, private=True)
        except DataError as e:
            _key_refused(str(e))
            return None
        if len(key) < _KEY_BYTES:
            _key_refused(f"{path}: compile cache key of {len(key)} bytes, not a key (remove it: a new one is made)")
            return None
        return key
    if not create:
        return None
    # said as a warning naming the folder and what chose it: a file, a FIFO or a dangling link there (mkdir's
    # FileExistsError) was taken for another process's key, and the compile cache went unsaved without a word
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        _key_refused(f"{one_line(folder)} (from {chosen_by}) is no folder and cannot be made one ({e.strerror or e})")
        return None
    try:
        key = secrets.token_bytes(_KEY_BYTES)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key)
        return key
    except FileExistsError:  # made at the same moment by another process: theirs
        return _local_key(create=False)
    except OSError as e:
        _key_refused(f"no key can be kept in {one_line(folder)} (from {chosen_by}: {e.strerror or e})")
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
    target = record["target"]  # as `cache_target` writes it: its fields are shown and compared
    if not all(isinstance(target.get(k), str) for k in ("torch", "python", "device")) or (
            "capability" in target and not (isinstance(target["capability"], list) and len(target["capability"]) == 2
                                            and all(type(c) is int and 0 <= c < 1000 for c in target["capability"]))):
        raise DataError(f"{record_path}: its target is none `trm-kaggle` writes (torch, python and device as text, a "
                        f"CUDA capability as two whole numbers): {clipped(target, 80)}")
    return record


def cache_problem(path: str | os.PathLike, device: str | torch.device, trusted: bool = False
                  ) -> tuple[Optional[str], Optional[bytes]]:
    """(why the cache file at `path` is not loaded here, None) or (None, its bytes)."""
    path = Path(path)
    try:  # the file itself first: a FIFO in its place is named as one, not by its record's absence
        if not is_regular(path, "compile cache"):
            return f"{path}: {'a folder, not a cache file' if path.is_dir() else 'no such file'}", None
    except DataError as e:
        return str(e), None
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
    try:
        data = read_bytes(path, "compile cache", max_bytes=MAX_CACHE_BYTES)  # never a FIFO's wait, never /dev/zero
    except DataError as e:
        return str(e), None
    if hashlib.sha256(data).hexdigest() != record["sha256"]:
        return f"{path}: its sha256 differs from its record's (damaged or replaced)", None
    return None, data


class _Heard(logging.Filter):
    """Keeps the first line of what torch's cache loader logs (and keeps it off the console)."""

    def __init__(self):
        super().__init__()
        self.said = ""

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.said:
            exc = record.exc_info[1] if record.exc_info else None
            self.said = record.getMessage() + (f": {_first_line(exc)}" if exc is not None else "")
        return False


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
    heard = _Heard()
    torch_log = logging.getLogger("torch.compiler._cache")
    torch_log.addFilter(heard)
    try:
        loaded = load(data)
    except Exception as e:  # noqa: BLE001 - a cache that torch cannot take costs a compile, nothing else
        say(f"compile cache ignored: {path}: torch could not load it ({_first_line(e)})")
        return False
    finally:
        torch_log.removeFilter(heard)
    if loaded is None:  # torch logs its failure with a traceback and returns None: one line of ours instead
        say(f"compile cache ignored: {path}: torch could not load it ({heard.said or 'it returned nothing'})")
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
