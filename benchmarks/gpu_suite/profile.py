"""Part 1's profile: where a compiled training step's time goes, how often it waits for the host, and what
compiling costs.

* `torch.profiler` over 3 steps of ours compiled (`ours_compiled`, bf16 on CUDA) at the throughput batch, after
  the warm-up steps: the device time of every kernel, grouped (`kernel_group`: GEMM, attention with the
  kernels' names, element-wise, copies, other). On a CPU there are no kernels: the operators' own CPU time
  is grouped the same way (smoke mode: a code-path check).
* Host syncs per step: CUDA's sync debug mode warns at every operation that makes the host wait for the
  device; the warnings of one step are counted, and beside them the profiler's synchronising runtime calls per
  step. On a CPU nothing waits: the host reads of tensor values that would wait on CUDA (`.item()`, `bool()`,
  `nonzero`, `unique`) are counted from the profiler instead, and the sync debug mode is said not measured.
* Compile time of the whole model (`torch.compile` of it, forward and backward of a training step), of
  ours' regions (`apply_compile()`, through `ours_compiled`) and of one block (forward and backward), each the
  first step's time minus a steady step's, cold (a fresh inductor and Triton cache folder, dynamo reset) and
  warm (again in a fresh folder, after `torch.compiler.load_cache_artifacts` of what the cold compile saved
  with `save_cache_artifacts`: what a Kaggle bundle carrying the cache would see). The most expensive comes
  last; one that would not fit in what the stage has left is listed as not measured (smoke mode leaves the
  whole model out).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
import warnings
from collections import defaultdict
from typing import Callable, Iterator

import torch

from benchmarks import bench_train_cpu as B
from benchmarks.gpu_suite import variants
from benchmarks.gpu_suite.context import VOCAB, Context
from benchmarks.gpu_suite.report import PartReport

GROUPS = ("GEMM", "attention", "element-wise", "copies", "other")
#: Substrings of kernel (or CPU operator) names, lower case, tried in this order: attention before GEMM (cuDNN's
#: and cutlass's attention kernels carry GEMM-like names), copies before element-wise (a copy is an
#: element-wise kernel in CUDA's naming).
PATTERNS = (
    ("attention", ("flash", "fmha", "attention", "sdpa", "attn")),
    ("GEMM", ("gemm", "xmma", "cutlass", "cublas", "nvjet", "wgmma", "triton_tem", "aten::mm", "aten::addmm",
              "aten::bmm", "aten::_weight_int", "matmul", "mkldnn_linear", "aten::linear")),
    ("copies", ("memcpy", "memset", "copy", "aten::cat", "aten::_to_copy", "catarraybatched")),
    ("element-wise", ("triton_poi", "triton_red", "triton_per", "elementwise", "reduce", "aten::add", "aten::mul",
                      "aten::sub", "aten::div", "aten::silu", "aten::rsqrt", "aten::pow", "aten::mean",
                      "aten::sum", "aten::neg", "aten::where", "aten::exp", "aten::softmax", "aten::_softmax",
                      "aten::sigmoid", "aten::clamp", "aten::square", "aten::lerp", "aten::sqrt", "aten::fill_",
                      "aten::zero_", "aten::addcdiv", "aten::addcmul", "aten::sign", "aten::abs", "aten::max",
                      "aten::argmax", "aten::log")),
)
#: Runtime calls after which the host waits for the device (profiler event names, CUDA).
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")
#: Operators whose result the host reads (on CUDA they wait for the device).
HOST_READS = ("aten::_local_scalar_dense", "aten::nonzero", "aten::unique", "aten::_unique", "aten::_unique2",
              "aten::unique_consecutive")


def kernel_group(name: str) -> str:
    n = name.lower()
    for group, keys in PATTERNS:
        if any(k in n for k in keys):
            return group
    return "other"


def profile_stage(rep: PartReport, ctx: Context, s: dict) -> None:
    """The stage: the profile of 3 compiled steps, the syncs, then the compile times."""
    res: dict = {"batch": s["batch"], "dtype": "bfloat16" if ctx.cuda else "float32"}
    rep.set("profile", res)
    with rep.stage("profile_kernels"):
        kernels_and_syncs(rep, ctx, s, res)
    with rep.stage("profile_compile"):
        compile_times(rep, ctx, s, res)


def _trainer(s: dict, ctx: Context, compiled: bool) -> B.Ours:
    t = B.Ours(s["arch"], s["batch"], False, "bfloat16" if ctx.cuda else "float32", device=ctx.device,
               seq_len=s["seq_len"], vocab=VOCAB, num_ids=s["num_ids"])
    if compiled:
        t.model = variants.ours_compiled(t.model, **s["timed_compile_kwargs"])
    return t


def kernels_and_syncs(rep: PartReport, ctx: Context, s: dict, res: dict) -> None:
    from torch.profiler import ProfilerActivity, profile

    torch._dynamo.reset()
    batches = B.make_batches(3, s["batch"], 4, s["seq_len"], VOCAB, s["num_ids"], ctx.device)
    t = _trainer(s, ctx, compiled=True)
    for i in range(s["compile_warmup"]):
        t.step(batches[i % len(batches)])
    ctx.sync()
    steps = 3
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.cuda else [])
    with profile(activities=activities) as prof:
        for i in range(steps):
            t.step(batches[i % len(batches)])
        ctx.sync()
    events = prof.events()
    device_events = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    if device_events:
        source = "CUDA kernels (device time)"
        times = [(e.name, e.time_range.elapsed_us()) for e in device_events]
    else:
        source = "CPU operators' own time (no device kernels here)"
        times = [(a.key, a.self_cpu_time_total) for a in prof.key_averages()]
    groups: dict[str, float] = defaultdict(float)
    names: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for name, us in times:
        g = kernel_group(name)
        groups[g] += us
        names[g][name] += us
    total = sum(groups.values()) or 1.0
    top = {g: sorted(v.items(), key=lambda kv: -kv[1])[:5] for g, v in names.items()}
    res["kernels"] = {"source": source, "steps": steps, "ms_per_step": {g: groups[g] / 1e3 / steps for g in GROUPS},
                      "share": {g: groups[g] / total for g in GROUPS},
                      "attention_kernels": [n for n, _ in top.get("attention", [])],
                      "top": {g: [[n[:120], us / 1e3 / steps] for n, us in v] for g, v in top.items()}}
    counts = defaultdict(int)
    for e in events:
        for key in SYNC_CALLS + HOST_READS:
            if e.name == key or e.name.startswith(key + "("):
                counts[key] += 1
    res["syncs"] = {"profiler_sync_calls_per_step": sum(counts[k] for k in SYNC_CALLS) / steps,
                    "host_reads_per_step": sum(counts[k] for k in HOST_READS) / steps,
                    "by_name_per_step": {k: v / steps for k, v in counts.items()},
                    "sync_debug_mode_per_step": sync_debug_count(t, batches[0]) if ctx.cuda else None}
    rep.table(f"profile: {steps} compiled training steps, batch {s['batch']}, {res['dtype']} ({source})",
              ["group", "ms per step", "share", "largest"],
              [[g, res["kernels"]["ms_per_step"][g], res["kernels"]["share"][g],
                "; ".join(n[:60] for n, _ in top.get(g, [])[:2])] for g in GROUPS],
              note=f"attention kernels: {', '.join(res['kernels']['attention_kernels']) or 'none seen'}")
    sy = res["syncs"]
    rep.table("host syncs per training step", ["measure", "per step"],
              [["CUDA sync debug mode warnings", sy["sync_debug_mode_per_step"]],
               ["profiler: synchronising CUDA runtime calls", sy["profiler_sync_calls_per_step"] if ctx.cuda
                else None],
               ["profiler: host reads of tensor values (.item, bool, nonzero, unique)", sy["host_reads_per_step"]]],
              note="" if ctx.cuda else "no CUDA: the sync debug mode and the runtime's sync calls are not measured; "
                                       "the host reads are what would wait on CUDA")
    if not ctx.cuda:
        rep.skip("host syncs: CUDA's sync debug mode", "needs CUDA")


def sync_debug_count(t: B.Ours, batch: dict) -> int:
    """Warnings of CUDA's sync debug mode during one training step: one per operation that waits for the GPU."""
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            t.step(batch)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


@contextlib.contextmanager
def fresh_compile_cache() -> Iterator[None]:
    """Dynamo reset and an empty inductor and Triton cache folder (removed after), so that a compile is cold."""
    keys = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
    old = {k: os.environ.get(k) for k in keys}
    with tempfile.TemporaryDirectory(prefix="gpu_suite_compile_") as d:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(d, "inductor")
        os.environ["TRITON_CACHE_DIR"] = os.path.join(d, "triton")
        torch._dynamo.reset()
        try:
            yield
        finally:
            torch._dynamo.reset()
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def first_minus_steady(step: Callable[[], object], ctx: Context) -> tuple[float, float]:
    """(seconds of the first call minus a steady one: the compile time, seconds of a steady call)."""
    ctx.sync()
    t = time.perf_counter()
    step()
    ctx.sync()
    first = time.perf_counter() - t
    steady = []
    for _ in range(2):
        t = time.perf_counter()
        step()
        ctx.sync()
        steady.append(time.perf_counter() - t)
    return max(first - min(steady), 0.0), min(steady)


def compile_targets(s: dict, ctx: Context) -> dict[str, Callable[[], Callable[[], object]]]:
    """Each target: a maker of its step (called inside a fresh cache; the step's first call compiles)."""
    batch = B.make_batches(1, s["batch"], 5, s["seq_len"], VOCAB, s["num_ids"], ctx.device)[0]

    def block():
        t = _trainer(s, ctx, compiled=False)
        model = t.model
        dtype = model.compute_dtype(ctx.device)
        blk = torch.compile(model.layers[0], **s["timed_compile_kwargs"])
        cos_sin = model.rotary_emb() if model.rotary_emb is not None else None
        x = torch.randn(s["batch"], model.total_len, model.arch.hidden_size, device=ctx.device, dtype=dtype,
                        requires_grad=True)
        return lambda: blk(x, cos_sin).float().square().mean().backward()

    def net():
        t = _trainer(s, ctx, compiled=True)
        return lambda: t.step(batch)

    def whole():
        t = _trainer(s, ctx, compiled=False)
        t.model = torch.compile(t.model, **s["timed_compile_kwargs"])
        return lambda: t.step(batch)

    targets = {"one block": block, "apply_compile()": net, "whole model": whole}
    if ctx.smoke:  # CI's time: the whole model alone costs more than the rest of the profile, by the same path
        del targets["whole model"]
    return targets


def cache_artifacts() -> bytes | None:
    saved = torch.compiler.save_cache_artifacts()
    return saved[0] if saved else None


def compile_times(rep: PartReport, ctx: Context, s: dict, res: dict) -> None:
    """Cold and warm compile time of each target, the cheapest first; a target is started only when the stage
    has left 4x what the one before it took (each costs several times the one before)."""
    rows, out, last = [], {}, None
    res["compile"] = out
    for name, make in compile_targets(s, ctx).items():
        if last is not None and rep.left() < 4 * last:
            rep.skip(f"compile time of {name}", f"{rep.left():.0f} s left of the stage, the target before it took "
                                                f"{last:.0f} s", cut=True)
            continue
        started = time.perf_counter()
        done = out[name] = {"cold_s": None, "warm_s": None, "steady_s": None}
        try:
            _clear_artifacts()
            with fresh_compile_cache():
                done["cold_s"], done["steady_s"] = first_minus_steady(make(), ctx)
            art = cache_artifacts()
            if art is None:
                rep.skip(f"compile time of {name} with a warm cache", "torch.compiler.save_cache_artifacts saved "
                         f"nothing (backend {s['timed_compile_kwargs'].get('backend', 'inductor')})")
            else:
                with fresh_compile_cache():
                    torch.compiler.load_cache_artifacts(art)
                    done["warm_s"], _ = first_minus_steady(make(), ctx)
                done["artifacts_mib"] = len(art) / 2**20
        except Exception as e:  # noqa: BLE001 - one target's failure (a compile error, out of memory) is its own
            done["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            rep.note(f"compile time of {name}: {done['error']}")
        finally:
            if ctx.cuda:
                torch.cuda.empty_cache()
        last = time.perf_counter() - started
        rows.append([name, done["cold_s"], done["warm_s"], done.get("artifacts_mib"), done["steady_s"]])
    rep.table(f"compile time, batch {s['batch']} (first step minus a steady one)",
              ["target", "cold s", "warm cache s", "cache artifacts MiB", "steady step s"], rows,
              note="cold: dynamo reset, empty inductor and Triton cache folders; warm: again in empty folders, "
                   "after torch.compiler.load_cache_artifacts of what the cold compile saved")


def _clear_artifacts() -> None:
    """Forget the cache artifacts recorded so far, so that the next save holds one target's alone."""
    try:
        from torch.compiler._cache import CacheArtifactManager

        CacheArtifactManager.clear()
    except Exception:  # noqa: BLE001 - another torch version: the save then holds earlier targets' too
        pass
