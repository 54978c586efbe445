"""`trm-kaggle doctor`: what this machine is, and what `train` would choose on it.

The machine part lists the CPU (model, cores, the ISA features that decide speed),
memory, accelerators and the torch build. The plan part resolves a preset (and a
dataset, when given) the way `train` would: device, activation dtype with its
measured reason, threads, the micro-batch a memory-aware run picks and the expected
peak memory (`train/memory.py`), with warnings for choices that will not fit.

`diagnose` takes the hardware facts as an argument, so tests can ask it about
machines that are not this one.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import torch

from trm_kaggle import hardware
from trm_kaggle.errors import TRMError
from trm_kaggle.jsonio import directory_problem

GB = hardware.GB
# Assumed when no dataset is given: an ARC dataset (30 x 30 canvas, 12 tokens), no puzzle table.
DEFAULT_SEQ_LEN, DEFAULT_VOCAB = 900, 12


@dataclass
class Plan:
    device: str
    dtype: str
    dtype_reason: str
    threads: int
    local_batch: int
    micro_batch: int | None  # None: not even one example fits
    expected_peak: int
    available: int | None
    memory_parts: dict[str, int]
    parameters: int
    puzzle_rows: int
    puzzle_values: int
    seq_len: int
    vocab_size: int
    data: str | None
    warnings: list[str] = field(default_factory=list)
    threads_why: str = ""


def _device_for(requested: str, facts: hardware.HardwareFacts) -> str:
    from trm_kaggle import xla

    if requested != "auto":
        return requested
    if xla.wanted():  # pick_device's order
        return "xla"
    if facts.gpus:
        return "cuda"
    return "mps" if facts.mps else "cpu"


def _absent_device(requested: str, facts: hardware.HardwareFacts) -> str | None:
    """Why train would refuse the device asked for on a machine with `facts` (pick_device's refusals), or None."""
    from trm_kaggle import xla

    kind, _, index = requested.partition(":")
    if kind == "xla" and not xla.installed():
        return "device=xla needs torch_xla, which is not installed here"
    if kind == "cuda" and len(facts.gpus) <= int(index or 0):
        return f"device={requested} requested but this machine has {len(facts.gpus) or 'no'} CUDA device(s)"
    if kind == "mps" and not facts.mps:
        return f"device={requested} requested but MPS is not available"
    return None


def _dataset_shape(data: str | None) -> tuple[int, int, int, int]:
    """(seq_len, vocab, puzzle identifiers, puzzles) of a dataset's train split, or the ARC defaults."""
    if data is None:
        return DEFAULT_SEQ_LEN, DEFAULT_VOCAB, 0, 0
    from trm_kaggle.data import load_metadata

    meta = load_metadata(data, "train")
    return meta.seq_len, meta.vocab_size, meta.num_puzzle_identifiers, meta.total_puzzles


def _checked_arguments(cfg, facts, data, baseline, threads, processes) -> tuple[int, str] | None:
    """`diagnose`'s arguments, each named where it is wrong (threads=-3 made a plan of -3 threads, a negative
    baseline a negative peak, a dict as cfg an AttributeError); returns `threads` as checked."""
    from trm_kaggle.config import TrainConfig, path_argument, sequence_argument, whole_argument
    from trm_kaggle.wording import type_name

    if not isinstance(cfg, TrainConfig):
        raise TypeError(f"cfg: expected a TrainConfig, got {type_name(cfg)}")
    if not isinstance(facts, hardware.HardwareFacts):
        raise TypeError(f"facts: expected a hardware.HardwareFacts, got {type_name(facts)}")
    path_argument("data", data, "the dataset directory", optional=True)
    if baseline is not None:
        whole_argument("baseline", baseline, 0, 1 << 62)
    whole_argument("processes", processes, 1, hardware.MAX_THREADS)
    if threads is None:
        return None
    pair = sequence_argument("threads", threads, "(count, why)")
    if len(pair) != 2 or not isinstance(pair[1], str):
        raise TypeError(f"threads: expected (count, why), as hardware.choose_threads gives them, got {pair!r:.60}")
    return whole_argument("threads[0]", pair[0], 1, hardware.MAX_THREADS), pair[1]


def diagnose(cfg, facts: hardware.HardwareFacts, data: str | None = None, *, baseline: int | None = None,
             threads: tuple[int, str] | None = None, processes: int = 1) -> Plan:
    """What `train` would do with `cfg` (a TrainConfig) on a machine with `facts`. `threads`: (count, why) as
    `hardware.choose_threads` gives them on this machine; without it, the setting or one per core of `facts`.
    `processes`: the local ranks that split the memory (`hardware.local_processes`, train's rule). An argument
    of the wrong type or out of bounds is one TypeError or ValueError naming it."""
    from trm_kaggle.model import resolve_forward_dtype
    from trm_kaggle.train import (DEFAULT_MEMORY_FRACTION, dtype_name, estimate_training_memory,
                                  largest_fitting_micro_batch, logger_problem, micro_batch_problem, run_rss)

    threads = _checked_arguments(cfg, facts, data, baseline, threads, processes)
    warnings = []
    if data is None and cfg.data_paths:
        if os.path.isdir(cfg.data_paths[0]):
            data = cfg.data_paths[0]
        else:
            warnings.append(f"the preset's dataset {cfg.data_paths[0]} is not here: planned with ARC shapes "
                            "and no puzzle table (pass DATA for the real figures)")
    seq_len, vocab, rows, puzzles = _dataset_shape(data)
    device = _device_for(cfg.device, facts)
    gpu = facts.gpus[0] if facts.gpus else None
    # without torch_xla the XLA device cannot be asked its kind: planned as the CPU, and said (train refuses it)
    absent_xla = device.partition(":")[0] == "xla" and _absent_device(device, facts) is not None
    dtype, reason = resolve_forward_dtype(cfg.arch, "cpu" if absent_xla else device,
                                          bf16_speedup=facts.cpu_bf16_speedup,
                                          cuda_capability=gpu.capability if gpu and device == "cuda" else None)
    threads, threads_why = threads or (cfg.threads or facts.cores,
                                       "threads setting" if cfg.threads else "one per core")
    local_batch = cfg.global_batch_size
    # The activations are probed on this machine's own device of that kind when it has one, else on the CPU.
    probe_device = device if (device == "cpu" or (device == "cuda" and torch.cuda.is_available())
                              or (device == "mps" and facts.mps and torch.backends.mps.is_available())) else "cpu"
    if device == "cuda" and gpu is not None:
        available = gpu.free_bytes if gpu.free_bytes is not None else gpu.total_bytes
        baseline = 0  # the process's own memory is host memory, not the GPU's
    else:  # split between the local ranks, as train's auto_batch splits it
        available = None if facts.memory_available is None else facts.memory_available // processes
        baseline = run_rss(cfg, device) if baseline is None else baseline
    # planned from the shapes: where the weights and optimizer state alone do not fit, the activations are not
    # probed (the probe allocates the model: a model of 50 GB ran the machine out of memory before a word)
    est = estimate_training_memory(cfg, seq_len=seq_len, vocab_size=vocab, num_puzzle_identifiers=rows,
                                   num_puzzles=puzzles, device=probe_device, dtype=dtype, baseline=baseline,
                                   budget=None if available is None else int(DEFAULT_MEMORY_FRACTION * available))
    requested = min(cfg.micro_batch_size or local_batch, local_batch)
    micro: int | None = requested
    if available is not None:
        fitting = largest_fitting_micro_batch(est, local_batch, int(DEFAULT_MEMORY_FRACTION * available))
        if fitting is None:
            micro = None
            warnings.append(f"even micro_batch_size=1 needs {'about' if est.measured else 'over'} "
                            f"{est.total(1) / GB:.2f} GB{'' if est.measured else ' before its activations'}, more than "
                            f"{DEFAULT_MEMORY_FRACTION:.0%} of the {available / GB:.2f} GB available: train refuses "
                            "to start with auto_batch=True; use a smaller model, dataset or another machine")
        elif cfg.auto_batch and device in ("cpu", "mps"):
            micro = min(fitting, requested)
            while local_batch % micro:
                micro -= 1
        elif est.total(requested) > 0.9 * available:
            warnings.append(f"micro_batch_size={requested} needs about {est.total(requested) / GB:.2f} GB, over 90 % "
                            f"of the {available / GB:.2f} GB available" + (
                                "; the run will retry with smaller micro-batches when CUDA runs out" if device == "cuda"
                                else f"; set auto_batch=True (it would pick {fitting}) or micro_batch_size={fitting}"))
    # what train refuses before its first step, said as train says it
    for problem in (_absent_device(cfg.device, facts), micro and micro_batch_problem(micro, local_batch),
                    logger_problem(cfg)):
        if problem:
            warnings.append(f"{problem}: train refuses to start")
    if est.puzzle_table > GB:
        warnings.append(f"the puzzle-embedding table alone takes {est.puzzle_table / GB:.2f} GB "
                        f"({rows:,} identifiers x {cfg.arch.emb_ndim} floats)")
    if device == "cpu" and dtype == torch.float32 and cfg.arch.forward_dtype not in ("auto", "float32"):
        warnings.append("reduced precision was asked for, but this CPU has no fast bf16 units")
    if "slow" in reason or "warning" in reason:
        warnings.append(reason)
    peak = est.total(micro or 1)
    return Plan(device, dtype_name(dtype), reason, threads, local_batch, micro, peak, available, est.parts(micro or 1),
                est.parameters, rows, rows * cfg.arch.emb_ndim, seq_len, vocab, data, warnings, threads_why)


def machine_lines(f: hardware.HardwareFacts) -> list[str]:
    mem = (f"{f.memory_total / GB:.1f} GB total, {f.memory_available / GB:.1f} GB available"
           if f.memory_total and f.memory_available is not None else "unknown")
    lines = [f"CPU: {f.cpu_model} ({f.machine}), {f.cores} cores; ISA: {', '.join(f.isa) or 'none detected'}; "
             f"torch CPU capability {f.torch_cpu_capability}",
             f"memory: {mem}"]
    if f.cpu_bf16_speedup is not None:
        lines.append(f"bf16 matmuls: {f.cpu_bf16_speedup:.2g}x the float32 rate on this CPU (measured)")
    for i, g in enumerate(f.gpus):
        free = f", {g.free_bytes / GB:.1f} GB free" if g.free_bytes is not None else ""
        lines.append(f"GPU {i}: {g.name}, {g.total_bytes / GB:.1f} GB{free}, compute capability "
                     f"{g.capability[0]}.{g.capability[1]}")
    if not f.gpus:
        lines.append("GPU: none visible to torch" + ("; Apple MPS available" if f.mps else ""))
    lines.append(f"torch {f.torch_version}" + (f", CUDA {f.torch_cuda}" if f.torch_cuda else ", CPU build")
                 + f"; BLAS {f.blas}; oneDNN {f.onednn}")
    lines.append(f"OpenMP waits: {hardware.quiet_openmp_waits()}")
    return lines


def plan_lines(p: Plan, preset: str) -> list[str]:
    data = p.data or f"none given: assuming ARC (seq_len {p.seq_len}, vocab {p.vocab_size}), no puzzle table"
    micro = "none fits" if p.micro_batch is None else f"{p.micro_batch} of the per-rank batch {p.local_batch}"
    refused = any("train refuses to start" in w for w in p.warnings)
    lines = [f"train --preset {preset} would " + ("refuse to start (see the warnings below); past that it would use:"
                                                   if refused else "use:"),
             f"  data: {data}",
             f"  device {p.device}; dtype {p.dtype} ({p.dtype_reason}); {p.threads} threads"
             + (f" ({p.threads_why})" if p.threads_why else ""),
             f"  {p.parameters:,} parameters without the puzzle-embedding table, "
             f"{p.parameters + p.puzzle_values:,} with it ({p.puzzle_rows:,} rows)",
             f"  micro-batch: {micro}; expected peak memory {p.expected_peak / GB:.2f} GB"
             + (f" of {p.available / GB:.2f} GB available" if p.available is not None else ""),
             "  memory by part: " + ", ".join(f"{k} {v / GB:.3f} GB" for k, v in p.memory_parts.items() if v)]
    lines += [f"  warning: {w}" for w in p.warnings]
    return lines


def run_doctor(presets: list[str], data: str | None, overrides: list[str], as_json: bool) -> str:
    from trm_kaggle.config import flag_argument, path_argument, texts_argument
    from trm_kaggle.model import cpu_bf16_speedup
    from trm_kaggle.train import load_train_config, parse_override

    # one str is one preset or override (it was read per character: the presets 'c', 'p', 'u', ...)
    presets = texts_argument("presets", presets, "a preset name")
    overrides = texts_argument("overrides", overrides, "an override key=value")
    path_argument("data", data, "the dataset directory", optional=True)
    as_json = flag_argument("as_json", as_json)
    if data is not None and (problem := directory_problem(data, "dataset directory")):
        raise TRMError(problem)
    cfg = load_train_config(None, presets, list(overrides) + ["progress=False"])
    typed = [o for o in overrides if parse_override(o)[0] == "data_paths"]
    if data is not None and typed:  # the plan reads DATA: the typed one would be read by nothing
        raise TRMError(f"doctor {data} and {typed[-1]} both name the data: give the dataset once (DATA, or "
                       "data_paths=[...] without DATA)")
    facts = hardware.gather()
    processes, note = hardware.local_processes()  # train's rule: a stray LOCAL_WORLD_SIZE is ignored, said
    n, why = hardware.set_cpu_threads(cfg.threads, share=processes)  # the measurement runs with these threads
    facts.cpu_bf16_speedup = cpu_bf16_speedup(torch.get_num_threads())
    plan = diagnose(cfg, facts, data, threads=(n, why + (f"; {note}" if note else "")), processes=processes)
    if as_json:
        return json.dumps({"machine": facts.as_dict(), "plan": plan.__dict__}, indent=2, default=str)
    name = "+".join(presets) if presets else "(defaults)"
    return "\n".join(machine_lines(facts) + [""] + plan_lines(plan, name))
