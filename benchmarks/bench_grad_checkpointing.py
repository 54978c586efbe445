"""Peak training memory and step time with and without `grad_checkpointing`, side by side.

    python benchmarks/bench_grad_checkpointing.py [--rounds 3] [--steps 4] [--hidden 128] [--batch 64]
        [--seq 81] [--H 3] [--L 6] [--layers 2] [--mlp-t] [--dtype float32] [--device auto]

Each measurement is a fresh subprocess running full training steps (ACT forward, stablemax loss,
backward, AdamATan2 + SignSGD) on random Sudoku-shaped batches, so one variant's allocations never
inflate the other's peak. Memory: on CPU the process's peak RSS (`ru_maxrss`) and its increase over
the RSS before the first step (the training's own memory: activations, gradients, optimizer moments);
on CUDA `torch.cuda.max_memory_allocated` and its increase over the allocation before the first step.
Step time: the median of the steps after the first. Rounds alternate the order of the two variants;
the ratios printed are medians of the per-round ratios (checkpointing / plain).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time


def child(args: argparse.Namespace) -> None:
    import torch

    from trm_kaggle.config import ArchConfig, TrainConfig
    from trm_kaggle.model.losses import act_loss
    from trm_kaggle.model.trm import TinyRecursiveModel
    from trm_kaggle.train.loop import make_optimizers
    from trm_kaggle.train.runtime import pick_device

    device = pick_device(args.device)
    torch.manual_seed(0)
    arch = ArchConfig(hidden_size=args.hidden, num_heads=max(1, args.hidden // 64), H_cycles=args.H, L_cycles=args.L,
                      L_layers=args.layers, halt_max_steps=16, puzzle_emb_len=16, mlp_t=args.mlp_t,
                      pos_encodings="none" if args.mlp_t else "rope", forward_dtype=args.dtype)
    vocab, ids = 11, 1000
    model = TinyRecursiveModel(arch, args.seq, vocab, ids, forward_dtype=getattr(torch, args.dtype),
                               grad_checkpointing=args.checkpointing).to(device).train()
    dense, sparse = make_optimizers(TrainConfig(arch=arch, lr=1e-4), model)
    g = torch.Generator().manual_seed(1)
    batch = {"inputs": torch.randint(1, vocab, (args.batch, args.seq), generator=g).to(device),
             "labels": torch.randint(1, vocab, (args.batch, args.seq), generator=g).to(device),
             "puzzle_identifiers": torch.randint(1, ids, (args.batch,), generator=g, dtype=torch.int32).to(device)}
    carry = model.initial_carry(batch)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        with open("/proc/self/statm") as f:
            base = int(f.read().split()[1]) * resource.getpagesize()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        carry, out = model(carry, batch)
        loss, _ = act_loss(out, carry.current_data["labels"], carry.halted, carry.steps, arch.loss_type)
        (loss / args.batch).backward()
        dense.step()
        dense.zero_grad(set_to_none=True)
        sparse.step()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated() if cuda else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"device": str(device), "peak": peak, "base": base, "step_s": statistics.median(times[1:]),
                      "params": model.num_parameters()}))


def measure(args: argparse.Namespace, checkpointing: bool) -> dict:
    cmd = [sys.executable, __file__, "--child", *sys.argv[1:]] + (["--checkpointing"] if checkpointing else [])
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"the measuring process failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=4, help="training steps per measurement (the first is not timed)")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=81, help="sequence length (81: 9x9 Sudoku)")
    ap.add_argument("--H", type=int, default=3, help="H_cycles")
    ap.add_argument("--L", type=int, default=6, help="L_cycles")
    ap.add_argument("--layers", type=int, default=2, help="L_layers")
    ap.add_argument("--mlp-t", action="store_true", help="MLP across the sequence instead of attention")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--device", default="auto")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--checkpointing", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    if args.steps < 2:
        ap.error("--steps must be at least 2 (the first step is not timed)")

    print(f"hidden {args.hidden}, batch {args.batch}, seq {args.seq} (+16 puzzle positions), H_cycles {args.H}, "
          f"L_cycles {args.L}, L_layers {args.layers}, {'mlp_t' if args.mlp_t else 'attention'}, {args.dtype}; "
          f"{args.steps} steps per measurement, {args.rounds} rounds")
    mib = 1 / 2**20
    ratios_mem, ratios_peak, ratios_time = [], [], []
    for r in range(args.rounds):
        order = (False, True) if r % 2 == 0 else (True, False)
        got = {on: measure(args, on) for on in order}
        plain, ckpt = got[False], got[True]
        what = "max_memory_allocated" if plain["device"].startswith("cuda") else "peak RSS"
        for name, m in (("plain", plain), ("checkpointing", ckpt)):
            print(f"  round {r + 1} {name:<13} {plain['device']}: {what} {m['peak'] * mib:8.1f} MiB "
                  f"(training +{(m['peak'] - m['base']) * mib:7.1f} MiB), step {m['step_s']:.3f} s", flush=True)
        ratios_mem.append((ckpt["peak"] - ckpt["base"]) / max(1, plain["peak"] - plain["base"]))
        ratios_peak.append(ckpt["peak"] / plain["peak"])
        ratios_time.append(ckpt["step_s"] / plain["step_s"])
    print(f"model: {plain['params']:,} parameters")
    print(f"checkpointing / plain (medians over {args.rounds} rounds): training memory "
          f"{statistics.median(ratios_mem):.2f}x, whole-process peak {statistics.median(ratios_peak):.2f}x, "
          f"step time {statistics.median(ratios_time):.2f}x")


if __name__ == "__main__":
    main()
