"""Peak training memory and step time with and without `grad_checkpointing`, side by side.

    python benchmarks/bench_grad_checkpointing.py [--pairs 6] [--hidden 128] [--batch 64] [--seq 81]
        [--H 3] [--L 6] [--layers 2] [--mlp-t] [--dtype float32] [--device auto]

Full training steps (ACT forward, stablemax loss, backward, AdamATan2 + SignSGD) on random Sudoku-shaped
batches (the upstream Sudoku model's depth, H_cycles 3 x L_cycles 6, at a CPU-sized width by default).

* Memory: each variant in a fresh subprocess (so one variant's allocations never inflate the other's
  peak), two steps each. On CPU the process's peak RSS (`ru_maxrss`) and its increase over the RSS before
  the first step, which is the training's own memory (activations, gradients, optimizer moments); on CUDA
  `torch.cuda.max_memory_allocated` and its increase over the allocation before the first step.
* Step time: one process, one model, the two variants alternating step by step (`--pairs` pairs after a
  warm-up pair), so a machine whose load changes slows both alike; the ratio printed is the median of the
  per-pair ratios (checkpointing / plain).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


def setup(args: argparse.Namespace, checkpointing: bool):
    """(model, one-step function, device) for the benchmark's model and a fixed random batch."""
    import torch

    from trm_kaggle.config import ArchConfig, TrainConfig
    from trm_kaggle.model import TinyRecursiveModel, act_loss
    from trm_kaggle.hardware import pick_device
    from trm_kaggle.train import make_optimizers, optimizer_step

    device = pick_device(args.device)
    torch.manual_seed(0)
    arch = ArchConfig(hidden_size=args.hidden, num_heads=max(1, args.hidden // 64), H_cycles=args.H, L_cycles=args.L,
                      L_layers=args.layers, halt_max_steps=16, puzzle_emb_len=16, mlp_t=args.mlp_t,
                      pos_encodings="none" if args.mlp_t else "rope", forward_dtype=args.dtype)
    vocab, ids = 11, 1000
    model = TinyRecursiveModel(arch, args.seq, vocab, ids, forward_dtype=getattr(torch, args.dtype),
                               grad_checkpointing=checkpointing).to(device).train()
    dense, sparse = make_optimizers(TrainConfig(arch=arch, lr=1e-4), model)
    g = torch.Generator().manual_seed(1)
    batch = {"inputs": torch.randint(1, vocab, (args.batch, args.seq), generator=g).to(device),
             "labels": torch.randint(1, vocab, (args.batch, args.seq), generator=g).to(device),
             "puzzle_identifiers": torch.randint(1, ids, (args.batch,), generator=g, dtype=torch.int32).to(device)}
    state = {"carry": model.initial_carry(batch)}

    def step() -> float:
        t0 = time.perf_counter()
        carry, out = model(state["carry"], batch)
        loss, _ = act_loss(out, carry.current_data["labels"], carry.halted, carry.steps, arch.loss_type)
        (loss / args.batch).backward()
        optimizer_step(dense, sparse)
        if device.type == "cuda":
            torch.cuda.synchronize()
        state["carry"] = carry
        return time.perf_counter() - t0

    return model, step, device


def memory_child(args: argparse.Namespace) -> None:
    import torch

    _, step, device = setup(args, args.checkpointing)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        with open("/proc/self/statm") as f:
            base = int(f.read().split()[1]) * resource.getpagesize()
    for _ in range(2):  # the second step holds the optimizer moments as well
        step()
    peak = torch.cuda.max_memory_allocated() if cuda else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"device": str(device), "peak": peak, "base": base}))


def measure_memory(checkpointing: bool) -> dict:
    cmd = [sys.executable, __file__, "--memory-child", *sys.argv[1:]] + (["--checkpointing"] if checkpointing else [])
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        from benchmarks.entry import child_failed

        raise child_failed("the measuring process", done.returncode, done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    from trm_kaggle.wording import OneLineParser  # an error line quotes what was typed escaped
    ap = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=6, help="timed step pairs (plain, checkpointing), after a warm-up")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=81, help="sequence length (81: 9x9 Sudoku)")
    ap.add_argument("--H", type=int, default=3, help="H_cycles")
    ap.add_argument("--L", type=int, default=6, help="L_cycles")
    ap.add_argument("--layers", type=int, default=2, help="L_layers")
    ap.add_argument("--mlp-t", action="store_true", help="MLP across the sequence instead of attention")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--checkpointing", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    from benchmarks.entry import check_options

    check_options(counts={"--pairs": args.pairs, "--hidden": args.hidden, "--batch": args.batch, "--seq": args.seq,
                          "--H": args.H, "--L": args.L, "--layers": args.layers})
    if args.memory_child:
        return memory_child(args)

    print(f"hidden {args.hidden}, batch {args.batch}, seq {args.seq} (+16 puzzle positions), H_cycles {args.H}, "
          f"L_cycles {args.L}, L_layers {args.layers}, {'mlp_t' if args.mlp_t else 'attention'}, {args.dtype}")
    mib = 1 / 2**20
    mem = {on: measure_memory(on) for on in (False, True)}
    what = "max_memory_allocated" if mem[False]["device"].startswith("cuda") else "peak RSS"
    for on, name in ((False, "plain"), (True, "checkpointing")):
        m = mem[on]
        print(f"  {name:<13} {m['device']}: {what} {m['peak'] * mib:8.1f} MiB, training's own "
              f"{(m['peak'] - m['base']) * mib:7.1f} MiB (fresh process, 2 steps)", flush=True)

    model, step, _ = setup(args, False)
    print(f"  model: {model.num_parameters():,} parameters; timing {args.pairs} step pairs...", flush=True)
    times: dict[bool, list[float]] = {False: [], True: []}
    for i in range(args.pairs + 1):
        for on in ((False, True) if i % 2 == 0 else (True, False)):  # alternate which goes first
            model.grad_checkpointing = on
            t = step()
            if i > 0:  # the first pair warms up kernels and allocator
                times[on].append(t)
    ratios = [c / p for p, c in zip(times[False], times[True])]
    print(f"  step time: plain median {statistics.median(times[False]):.3f} s, checkpointing median "
          f"{statistics.median(times[True]):.3f} s; per-pair ratios {', '.join(f'{r:.2f}' for r in ratios)}")
    train_ratio = (mem[True]["peak"] - mem[True]["base"]) / max(1, mem[False]["peak"] - mem[False]["base"])
    print(f"checkpointing / plain: training memory {train_ratio:.2f}x, whole-process peak "
          f"{mem[True]['peak'] / mem[False]['peak']:.2f}x, step time {statistics.median(ratios):.2f}x "
          "(median of pairs)")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: benchmarks.entry
    # a refusal, a stop: one line and the status of the package's commands
    from benchmarks.entry import command

    sys.exit(command(main))
