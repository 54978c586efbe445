"""What this machine is: CPU, memory, accelerators, the torch build; how much memory we use; which device runs,
and whether its GPUs can run this torch build.

Read from the operating system without extra packages: /proc on Linux, `sysctl` on macOS.
Everything the doctor and the memory-aware trainer decide from is gathered in one
`HardwareFacts` value, so tests can hand them invented machines.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from trm_kaggle.errors import TRMError
from trm_kaggle.names import ascii_number
from trm_kaggle.wording import count, shown

if TYPE_CHECKING:  # torch is imported where it is used: the worker processes choose their GPU before it starts
    import torch

GB = 1024**3

# CPU features that decide what runs fast here (the names /proc/cpuinfo uses on x86).
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile", "asimd", "sve")


@dataclass
class GPUInfo:
    name: str
    total_bytes: int
    capability: tuple[int, int]
    free_bytes: int | None = None


@dataclass
class HardwareFacts:
    system: str  # "Linux", "Darwin", ...
    machine: str  # "x86_64", "arm64", ...
    cpu_model: str
    cores: int  # logical CPUs this process may use
    isa: list[str]  # ISA_FLAGS present
    memory_total: int | None  # bytes; None where it cannot be read
    memory_available: int | None
    gpus: list[GPUInfo] = field(default_factory=list)
    mps: bool = False
    torch_version: str = ""
    torch_cuda: str | None = None
    torch_cpu_capability: str = ""
    blas: str = ""
    onednn: str = ""
    cpu_bf16_speedup: float | None = None  # bf16 / float32 matmul rate here (model/dtype.py measures it)

    def as_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------------------
# Memory of the machine and of this process
# ---------------------------------------------------------------------------


def read_meminfo(path: str | os.PathLike = "/proc/meminfo") -> tuple[int | None, int | None]:
    """(MemTotal, MemAvailable) in bytes from a Linux meminfo file; (None, None) if unreadable."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):  # not the kernel's file: unreadable, as a missing one
        return None, None
    values = {}
    for line in text.splitlines():
        m = re.match(r"(\w+):\s+(\d+)\s*kB", line)
        if m:
            values[m.group(1)] = int(m.group(2)) * 1024
    return values.get("MemTotal"), values.get("MemAvailable", values.get("MemFree"))


def cgroup_memory(root: str | os.PathLike = "/sys/fs/cgroup") -> tuple[int | None, int | None]:
    """(limit, usage) in bytes of this process's cgroup (containers, Kaggle); (None, None) without a limit."""
    for limit_name, usage_name in (("memory.max", "memory.current"),  # cgroup v2
                                   ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes")):  # v1
        try:
            limit = (Path(root) / limit_name).read_text(encoding="utf-8").strip()
        except OSError:
            continue
        limit = ascii_number(limit)
        if limit is None or limit >= (1 << 60):  # "max", or v1's "unlimited" huge number
            return None, None
        if limit < current_rss():  # this process lives within its group's limit: the file is not that limit
            return None, None
        try:
            # read as the limit is: int() took fullwidth digits ('５０')
            usage = ascii_number((Path(root) / usage_name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            usage = None
        # a group briefly over its limit (reclaim catching up) has nothing free, never less than nothing
        return limit, None if usage is None or usage < 0 else min(usage, limit)
    return None, None


def _sysctl(name: str) -> str | None:
    try:
        return subprocess.run(["sysctl", "-n", name], capture_output=True, timeout=5, encoding="utf-8",
                              errors="replace").stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def memory() -> tuple[int | None, int | None]:
    """(total, available) bytes of memory for this process: the machine's, capped by a cgroup limit."""
    total, available = read_meminfo()
    if total is None and sys.platform == "darwin":
        size = _sysctl("hw.memsize")
        total = ascii_number(size)
        available = _darwin_available(total)
    limit, usage = cgroup_memory()
    if limit is not None:
        total = min(total, limit) if total else limit
        free_in_group = limit - (usage or 0)
        available = min(available, free_in_group) if available is not None else free_in_group
    return total, available


def _darwin_available(total: int | None) -> int | None:
    try:
        out = subprocess.run(["vm_stat"], capture_output=True, timeout=5, encoding="utf-8", errors="replace").stdout
    except (OSError, subprocess.SubprocessError):
        return None
    page = int(re.search(r"page size of (\d+)", out).group(1)) if "page size of" in out else 4096
    pages = sum(int(m.group(1)) for m in re.finditer(r"Pages (?:free|inactive|speculative):\s+(\d+)", out))
    return pages * page if pages else total


def current_rss() -> int:
    """Resident memory of this process now, in bytes (0 where it cannot be read)."""
    try:
        pages = int(Path("/proc/self/statm").read_text(encoding="utf-8").split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return peak_rss()  # no current figure on macOS without extra packages: the peak bounds it


def peak_rss() -> int:
    """The highest resident memory this process has had, in bytes.

    Linux: VmHWM of /proc/self/status, the high-water mark of this program's own memory. Not ru_maxrss there:
    it carries over the resident size of the parent a subprocess was forked from (a child of a 2 GB process
    reports 2 GB before it allocates anything). Elsewhere ru_maxrss (bytes on macOS)."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource
    except ImportError:  # Windows
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


class RSSSampler:
    """The highest resident memory seen since the last `take()`, sampled by a background thread.

    The kernel's own high-water mark (VmHWM, ru_maxrss) can only be reset for the whole
    process, which would falsify every other reader of it; sampling leaves it alone. Spikes
    shorter than the interval can be missed, so `take()` also folds in the current value."""

    def __init__(self, interval_s: float = 0.02):
        import threading

        from trm_kaggle.config import number_argument

        # checked here: 0 or NaN spun the thread without a pause, 'x' or inf ended it in a traceback on stderr
        self.interval_s = number_argument("interval_s", interval_s, 0.001, 86400)
        self._peak = current_rss()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            rss = current_rss()
            with self._lock:
                self._peak = max(self._peak, rss)

    def take(self) -> int:
        """Peak bytes since the previous call (or since creation), then start a new interval."""
        rss = current_rss()
        with self._lock:
            peak, self._peak = max(self._peak, rss), rss
        return peak

    def close(self) -> None:
        self._stop.set()


# ---------------------------------------------------------------------------
# CPU, accelerators, torch build
# ---------------------------------------------------------------------------


def read_cpuinfo(path: str | os.PathLike = "/proc/cpuinfo") -> tuple[str, list[str]]:
    """(model name, ISA_FLAGS present) from a Linux cpuinfo file; ("", []) if unreadable."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError:
        return "", []
    model = next((line.split(":", 1)[1].strip() for line in text.splitlines()
                  if line.startswith(("model name", "Model", "Hardware"))), "")
    model = shown(model, 120)  # it reaches the terminal and the benchmarks' tables: no raw control characters
    flags: set[str] = set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            flags.update(line.split(":", 1)[1].split())
    return model, [f for f in ISA_FLAGS if f in flags]


def _cpu() -> tuple[str, list[str]]:
    model, isa = read_cpuinfo()
    if not model and sys.platform == "darwin":
        model = shown(_sysctl("machdep.cpu.brand_string") or platform.processor(), 120)
        features = " ".join(filter(None, (_sysctl("machdep.cpu.features"), _sysctl("machdep.cpu.leaf7_features"))))
        isa = [f for f in ISA_FLAGS if f.upper().replace("_", ".") in features.upper()]
        if platform.machine() == "arm64":
            isa.append("asimd")
    return model or platform.processor() or "unknown", isa


def _torch_build() -> tuple[str, str]:
    """(BLAS, oneDNN) as torch's build configuration names them."""
    import torch

    text = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=(\w+)", text)
    onednn = re.search(r"(?:oneDNN|MKL-DNN|Intel\(R\) MKL-DNN)[^\n]*?(v[\d.]+)", text)
    mkl = "Math Kernel Library" in text or "MKL" in (blas.group(1).upper() if blas else "")
    blas_name = blas.group(1) if blas else ("mkl" if mkl else "unknown")
    dnn = onednn.group(1) if onednn else ("available" if torch.backends.mkldnn.is_available() else "not built")
    return blas_name, dnn


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask where the system has one): the one count of
    cores that threads, build workers and parallel runs are sized from."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


#: The variable OpenMP (and torch's CPU thread pool) reads: set, it decides the threads of every process that
#: inherits it, and the package never overrides it silently.
THREADS_ENV = "OMP_NUM_THREADS"


def env_count(name: str, default: int, low: int = 0, high: int = 999_999_999) -> int:
    """The count the environment variable `name` holds, `default` when it is unset or empty. torchrun sets
    WORLD_SIZE, RANK and their kin; one left in a shell or an image with another value ('abc', '²', or a count
    outside `low`..`high`) is refused in one line naming it rather than read by `int()` somewhere later."""
    raw = os.environ.get(name, "")
    if not raw.strip():
        return default
    count = ascii_number(raw, max_digits=9)
    if count is None or not low <= count <= high:
        what = "is not a count (ASCII digits)" if count is None else f"is not a count from {low:,} to {high:,}"
        raise TRMError(f"{name}='{shown(raw)}' in the environment {what}: unset it, or start "
                       "the ranks with `trm-kaggle torchrun`, which sets it")
    return count


MAX_THREADS = 4096  # OpenMP's counts and the `threads` setting's bound


def local_processes() -> tuple[int, str]:
    """(processes, note): how many processes of one run share this machine's cores and memory, the one rule of
    `train` (threads, auto_batch) and `doctor`. Under torchrun (WORLD_SIZE set) its LOCAL_WORLD_SIZE, from 1 to
    WORLD_SIZE and `MAX_THREADS`; alone, 1, and a LOCAL_WORLD_SIZE left in the environment is ignored and said in
    `note` (one of 4096 split the memory and blamed the machine's)."""
    if not os.environ.get("WORLD_SIZE", "").strip():
        stray = os.environ.get("LOCAL_WORLD_SIZE", "")
        return 1, (f"LOCAL_WORLD_SIZE={shown(stray, 20)} ignored: WORLD_SIZE is unset, so this is one process"
                   if stray.strip() else "")
    world_size = env_count("WORLD_SIZE", 1, low=1)  # 0 ranks is no run (torchrun_ranks says so too)
    return env_count("LOCAL_WORLD_SIZE", world_size, 1, min(world_size, MAX_THREADS)), ""


def env_threads() -> int | None:
    """OMP_NUM_THREADS as a count (None when unset or not a positive integer in ASCII digits: OpenMP then ignores
    it too; it reads neither '²' nor '１')."""
    count = ascii_number(os.environ.get(THREADS_ENV, ""))
    return count if count is not None and 0 < count <= MAX_THREADS else None


#: GNU OpenMP (torch's CPU thread pool on Linux) lets a thread that finished its share of a parallel region spin
#: `GOMP_SPINCOUNT` times (300,000 by default) before it sleeps. On a core another process wants, that spinning
#: takes the core from the thread it waits for: one training with 2 threads ran at 235 examples/s in one round
#: against about 1,200 in the others. 10,000 spins kept an idle machine's speed (x0.99) and under load ran 1.41x
#: faster and gave the neighbours 13 % more of their work; `OMP_WAIT_POLICY=PASSIVE` halved the idle speed
#: (docs/benchmarks.md, "CPU threads on a shared machine").
WAIT_ENVS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
SHORT_SPIN = "10000"


def quiet_openmp_waits() -> str:
    """Shorten OpenMP's spinning waits (`GOMP_SPINCOUNT=10000`) for this process and the ones it starts, unless
    OMP_WAIT_POLICY or GOMP_SPINCOUNT is set (the user's choice stands). OpenMP reads it once, when torch loads
    it: the CLI's entry and the notebooks call this before torch is imported; afterwards it changes nothing.
    Returns what holds, in words (`trm-kaggle doctor` shows it)."""
    default = f"GOMP_SPINCOUNT={SHORT_SPIN} (trm_kaggle's default: shorter spinning waits)"
    chosen = [f"{k}={shown(os.environ[k])}" for k in WAIT_ENVS if k in os.environ]  # said on the terminal
    if chosen:
        return default if chosen == [f"GOMP_SPINCOUNT={SHORT_SPIN}"] else ", ".join(chosen) + " (as set)"
    if "torch" in sys.modules:
        return "OpenMP's own spinning waits (torch was imported before trm_kaggle could shorten them)"
    os.environ["GOMP_SPINCOUNT"] = SHORT_SPIN
    return default


def free_cores() -> tuple[int, int, float]:
    """(free, usable, load): of the cores this process may run on (`usable_cores`), those other work leaves free,
    from the 1-minute load average (one runnable process, this one, is ours), and the load itself. A machine
    whose load average counts more cores than ours (a container given some of them) is scaled to our share."""
    cores = usable_cores()
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average here (Windows): every core counts as free
        return cores, cores, 0.0
    others = max(0.0, load - 1.0) * cores / max(cores, os.cpu_count() or cores)
    return max(1, min(cores, round(cores - others))), cores, load


_AUTO: dict[int, tuple[int, str]] = {}


def choose_threads(requested: int | None = None, share: int = 1) -> tuple[int, str]:
    """(threads, why) for a CPU process that trains or predicts: the one rule of `train`, `pipeline`, `submit`
    and the notebooks. `requested` (the `threads` setting) wins, said when it overrides OMP_NUM_THREADS;
    else OMP_NUM_THREADS, as the user set it; else the free cores (`free_cores`) split among the `share`
    processes that run side by side (torchrun's local ranks, solve's workers). A core that another process keeps
    busy costs more than it gives: intra-op threads spin and wait on one another (docs/benchmarks.md). The
    automatic choice is made once per process and `share`, so the many short trainings of one process
    (test-time training) all run with the same threads. Never more than the cores this process may use
    (`_within_cores`, said in `why`). A count out of bounds is one ValueError naming it (-1 was handed to torch,
    whose own error followed)."""
    from trm_kaggle.config import whole_argument

    requested = None if requested is None else whole_argument("threads", requested, 0, MAX_THREADS)  # 0: auto
    share = whole_argument("share", share, 0, MAX_THREADS)
    omp = env_threads()
    if requested:
        return _within_cores(requested, f"threads={requested}" + (f", over {THREADS_ENV}={omp}"
                                                                  if omp not in (None, requested) else ""))
    if omp is not None:
        return _within_cores(omp, f"{THREADS_ENV}={omp}")
    share = max(1, share)
    if share not in _AUTO:
        free, cores, load = free_cores()
        why = f"{free} of {cores} cores free (load average {load:.1f})"
        if (raw := os.environ.get(THREADS_ENV, "").strip()):  # set, but no count OpenMP would take either
            why += f"; {THREADS_ENV}={shown(raw, 20)} ignored: not a whole number from 1 to {MAX_THREADS}"
        _AUTO[share] = (max(1, free // share), why + (f", shared by {share} processes" if share > 1 else ""))
    return _AUTO[share]


def _within_cores(n: int, why: str) -> tuple[int, str]:
    """(n, why), or the cores this process may use when `n` is more: threads past them only wait on one another,
    and a count in the thousands (2,048 threads on a 2-core machine) ended the process in a segmentation fault
    inside OpenMP, without a word."""
    cores = usable_cores()
    if n <= cores:
        return n, why
    return cores, f"{why}, capped at the {count(cores, 'core')} this process may use"


def set_cpu_threads(requested: int | None = None, share: int = 1) -> tuple[int, str]:
    """Give torch's CPU thread pool `choose_threads(requested, share)` threads; returns them and why."""
    import torch

    n, why = choose_threads(requested, share)
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n, why


def visible_cuda_ids(count: int) -> list[str]:
    """The ids of the `count` CUDA devices this process sees, as a child's CUDA_VISIBLE_DEVICES names them: the
    entries of our own CUDA_VISIBLE_DEVICES where it is set (a kernel given GPUs 2,5 hands out 2 and 5), else
    0..count-1. A count that is no whole number up to `MAX_THREADS` is one ValueError (2**70 built a list until
    memory ran out)."""
    from trm_kaggle.config import whole_argument

    count = whole_argument("count", count, 0, MAX_THREADS)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [x.strip() for x in visible.split(",") if x.strip()] if visible else [str(i) for i in range(count)]
    return ids[:count]


def pick_device(requested: str) -> torch.device:
    """The torch device of a `device` setting: auto is XLA (torch_xla installed and PJRT_DEVICE set) > CUDA >
    MPS > CPU; a device asked for but absent is one clear error."""
    import torch

    from trm_kaggle import xla
    from trm_kaggle.errors import TRMError

    if requested == "xla" or (requested == "auto" and xla.wanted()):
        return xla.device()
    if requested == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(requested)
    except (RuntimeError, TypeError, ValueError):  # torch's list of every device type it knows, unasked
        raise TRMError(f"device={str(requested)[:40]!r}: not a device (auto, cpu, cuda, cuda:N, mps or xla)") from None
    if device.type not in ("cpu", "cuda", "mps", "xla"):  # torch knows meta, lazy, hpu, ...: none runs this package
        raise TRMError(f"device={str(requested)[:40]!r}: not a device this package runs on (auto, cpu, cuda, cuda:N, "
                       "mps or xla)")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise TRMError(f"device={requested} requested but no CUDA device is available (use device=auto or "
                           "device=cpu)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise TRMError(f"device={requested}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                           f"cuda:0 to cuda:{torch.cuda.device_count() - 1}")
    if device.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise TRMError(f"device={requested} requested but MPS is not available")
    return device


def place_model(model: "torch.nn.Module", device: "str | torch.device | None" = None) -> "torch.device":
    """Put `model` on `device` and return that device: the one rule of the Python entry points that take a
    model and a device (`evaluate`, `predict_split`, `evaluate_repair`, the solver's demonstration accuracy).

    None: where the model's weights are (the CPU for a model without any). A device given is resolved as the
    `device` setting is (`pick_device`: auto, cpu, cuda, cuda:1, mps, xla); one this machine lacks is refused
    in one line. The model is moved in place (`nn.Module.to`), so a caller that passes a CPU model and
    device="cuda" gets its model back on the GPU."""
    import itertools

    import torch

    from trm_kaggle.errors import TRMError

    tensors = list(itertools.chain(model.parameters(), model.buffers()))
    if device is None:
        return tensors[0].device if tensors else torch.device("cpu")
    if isinstance(device, str) and device in ("auto", "xla", "cuda", "mps"):
        target = pick_device(device)
    else:
        try:
            target = torch.device(device)
        except (RuntimeError, TypeError) as e:
            raise TRMError(f"device={device!r} is not a device ({str(e).splitlines()[0]})") from None
    if target.type == "cuda" and (not torch.cuda.is_available() or (target.index or 0) >= torch.cuda.device_count()):
        raise TRMError(f"device={target} requested but this machine has "
                       f"{torch.cuda.device_count() if torch.cuda.is_available() else 'no'} CUDA device(s)")
    if target.type == "cuda" and target.index is None:
        target = torch.device("cuda", torch.cuda.current_device())
    if target.type == "mps":
        pick_device("mps")  # one line when MPS is absent
    if any(t.device != target for t in tensors):
        try:
            model.to(target)
        except (RuntimeError, NotImplementedError) as e:
            here = sorted({str(t.device) for t in tensors})
            raise TRMError(f"cannot move the model from {', '.join(here)} to {target}: "
                           f"{str(e).splitlines()[0]}") from None
    return target


def gather() -> HardwareFacts:
    """The facts of the machine this process runs on."""
    import torch

    model, isa = _cpu()
    total, available = memory()
    gpus = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            try:
                free = torch.cuda.mem_get_info(i)[0]
            except RuntimeError:
                free = None
            gpus.append(GPUInfo(p.name, p.total_memory, (p.major, p.minor), free))
    mps = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())
    blas, onednn = _torch_build()
    return HardwareFacts(platform.system(), platform.machine(), model, usable_cores(), isa, total, available, gpus,
                         mps, torch.__version__, torch.version.cuda, torch.backends.cpu.get_cpu_capability(), blas,
                         onednn)


# ---------------------------------------------------------------------------
# Whether the GPUs this machine shows can run this torch build, asked before any worker starts.
#
# A torch wheel carries kernels for a list of GPU architectures (`torch.cuda.get_arch_list()`); a GPU whose
# compute capability is missing there (no matching `sm_XY`, nor PTX old enough to be compiled for it) fails at its
# first CUDA operation, in every worker and on every task. The check runs in a child process, so that this one
# never starts CUDA (the workers need their GPUs whole); the solve then falls back to the CPU with one warning.
# ---------------------------------------------------------------------------

PROBE_TIMEOUT_S = 180.0


def _number(arch: str) -> int | None:
    digits = re.sub(r"\D", "", arch.split("_", 1)[-1])
    return int(digits) if digits else None


def arch_problem(capability: tuple[int, int], arch_list: list[str]) -> str | None:
    """Why a GPU of `capability` has no kernels in `arch_list` (None when it has: its own sm_XY, or PTX of
    an equal or older architecture, which the driver compiles for it)."""
    major, minor = capability
    own = major * 10 + minor
    if not arch_list:
        return None  # a build that does not say: let the first operation decide
    for arch in arch_list:
        n = _number(arch)
        if n is None:
            continue
        if arch.startswith("sm_") and n == own:
            return None
        if arch.startswith("compute_") and n <= own:
            return None
    return f"compute capability {major}.{minor} (sm_{own}) is not among this torch build's ({', '.join(arch_list)})"


def probe() -> str | None:
    """In this process: why CUDA cannot run here (None when every visible GPU can). Starts CUDA."""
    import torch

    if not torch.cuda.is_available():
        return "torch sees no usable CUDA device"
    arch_list = list(torch.cuda.get_arch_list())
    for i in range(torch.cuda.device_count()):
        problem = arch_problem(tuple(torch.cuda.get_device_capability(i)), arch_list)
        name = torch.cuda.get_device_name(i)
        if problem:
            return f"GPU {i} ({name}): {problem}"
        try:
            torch.ones(4, device=f"cuda:{i}").add_(1).sum().item()
        except Exception as e:  # noqa: BLE001 - any failure of the first operation means: not usable
            return f"GPU {i} ({name}): the first CUDA operation failed ({type(e).__name__}: {str(e)[:200]})"
    return None


_CHILD = ("import json, sys\nfrom trm_kaggle.hardware import probe\n"
          "print(json.dumps({'problem': probe()}))\n")


_ANSWERS: dict[str | None, str | None] = {}  # per CUDA_VISIBLE_DEVICES: the GPUs do not change within a process


def cuda_problem(timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Why this machine's GPUs cannot run this torch build (asked once per process, in a child), or None."""
    from trm_kaggle.config import number_argument

    timeout = number_argument("timeout", timeout, 1, 3600)  # NaN and -1 reached the child's clock
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible not in _ANSWERS:
        _ANSWERS[visible] = _ask_child(timeout)
    return _ANSWERS[visible]


def _ask_child(timeout: float) -> str | None:
    try:
        res = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, timeout=timeout, encoding="utf-8",
                             errors="replace")
    except subprocess.TimeoutExpired:
        return f"the CUDA check did not finish in {timeout:.0f} s"
    except OSError as e:
        return f"the CUDA check could not start ({e})"
    lines = res.stdout.strip().splitlines()
    if res.returncode != 0 or not lines:
        last = (res.stderr.strip().splitlines() or [f"status {res.returncode}"])[-1]
        return f"the CUDA check failed ({last})"
    try:
        return json.loads(lines[-1])["problem"]
    except (ValueError, KeyError, TypeError):
        return f"the CUDA check answered {lines[-1][:200]!r}"
