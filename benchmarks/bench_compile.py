"""Benchmark: what torch.compile costs and gives a training step, each way in a fresh process.

    python benchmarks/bench_compile.py                      # bench_train_cpu.py's model and batch, on the CPU
    python benchmarks/bench_compile.py --device cuda --paper --batch 128 --dtype bfloat16   # the paper's ARC config

Each variant runs in a process of its own with an inductor cache directory of its own (nothing compiled before
helps it, except where said), and times its first training steps (where the compiling happens) and then
`--steps` steady ones:
* eager: no compile;
* whole model: `torch.compile(model)` around the ACT step, the loss eager (what `train` did with
  compile=True before the regional compile);
* regional cold: `apply_compile(model, "on", device)` (one block traced once for every layer, the ACT step's
  restart and halting rule) and the loss (`regions.region(act_loss)`), what `compile=auto` runs on CUDA;
* regional warm: the same in a new process and a new inductor cache, after loading the compile cache file the
  cold run saved (`trm_kaggle.model.compiling`), as a resumed run or a bundle's kernel does.
Printed: seconds to the end of the first two steps (the compile happens there: with gradients, and the
no-gradient cycles), steady examples/s (median over rounds) and its ratio to eager in this run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

VARIANTS = ("eager", "whole model", "regional cold", "regional warm")


def child(args) -> None:
    """One variant, in this process: prints one JSON line."""
    import torch

    from benchmarks.bench_train_cpu import ADAMW, arch_dict, make_batches
    from trm_kaggle.config import ArchConfig
    from trm_kaggle.model import TinyRecursiveModel, act_loss, apply_compile, load_compile_cache, save_compile_cache

    torch.manual_seed(0)
    a = arch_dict(argparse.Namespace(heads=8))
    seq_len, vocab = 81, 11
    if args.paper:
        a.update(hidden_size=512, L_cycles=4, puzzle_emb_ndim=512)
        seq_len, vocab = 900, 12
    device = torch.device(args.device)
    arch = ArchConfig(**a, forward_dtype=args.dtype, loss_type="stablemax_cross_entropy")
    model = TinyRecursiveModel(arch, seq_len, vocab, 1000).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), **ADAMW)
    loss_fn, forward = act_loss, model
    loaded = False
    if args.variant == "whole model":
        forward = torch.compile(model)
    elif args.variant.startswith("regional"):
        if args.variant == "regional warm":
            loaded = load_compile_cache(args.cache, device, say=lambda line: None)
        loss_fn = apply_compile(model, "on", device).region(act_loss)
    batches = make_batches(4, args.batch, seed=1, seq_len=seq_len, vocab=vocab, device=device)
    carry = None

    def step(i):
        nonlocal carry
        data = batches[i % len(batches)]
        carry = model.initial_carry(data) if carry is None else carry
        carry, out = forward(carry, data)
        loss, _ = loss_fn(out, carry.current_data["labels"], carry.halted, carry.steps, "stablemax_cross_entropy")
        (loss / args.batch).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    t0 = time.perf_counter()
    for i in range(2):
        step(i)
    sync()
    first = time.perf_counter() - t0
    if args.variant == "regional cold":
        save_compile_cache(args.cache, device)
    rates = []
    for r in range(args.repeats):
        sync()
        t = time.perf_counter()
        for i in range(args.steps):
            step(i)
        sync()
        rates.append(args.batch * args.steps / (time.perf_counter() - t))
    print(json.dumps({"variant": args.variant, "first_two_steps_s": first, "examples_per_s": statistics.median(rates),
                      "cache_loaded": loaded}))


def main(argv=None) -> int:
    from trm_kaggle.wording import OneLineParser  # an error line quotes what was typed escaped
    p = OneLineParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--paper", action="store_true", help="the paper's ARC config (hidden 512, 916 positions)")
    p.add_argument("--steps", type=int, default=3, help="steady steps per round")
    p.add_argument("--repeats", type=int, default=3, help="rounds of steady steps")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    p.add_argument("--variant", help=argparse.SUPPRESS)  # the child's
    p.add_argument("--cache", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    from benchmarks.entry import check_options

    check_options(counts={"--batch": args.batch, "--steps": args.steps, "--repeats": args.repeats})  # batch 0
    if args.variant:
        child(args)
        return 0
    import torch

    print(f"torch {torch.__version__}, device {args.device}, {args.dtype}, batch {args.batch}, "
          f"{'paper ARC config' if args.paper else 'bench_train_cpu.py config'}, load average "
          f"{os.getloadavg()[0]:.1f} (other processes share these cores: compare ratios, not absolutes)")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for variant in args.variants:
            env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(Path(tmp) / variant.replace(" ", "-")),
                   "TRM_KAGGLE_CACHE_DIR": str(Path(tmp) / "key")}
            cmd = [sys.executable, str(Path(__file__).resolve()), "--variant", variant, "--cache",
                   str(Path(tmp) / "compile"), "--device", args.device, "--dtype", args.dtype, "--batch",
                   str(args.batch), "--steps", str(args.steps), "--repeats", str(args.repeats)]
            t = time.perf_counter()
            done = subprocess.run(cmd + (["--paper"] if args.paper else []), capture_output=True, text=True, env=env)
            if done.returncode != 0:
                print(f"{variant}: failed ({done.stderr.strip().splitlines()[-1] if done.stderr.strip() else '?'})")
                continue
            results[variant] = json.loads(done.stdout.strip().splitlines()[-1])
            results[variant]["process_s"] = time.perf_counter() - t
            r = results[variant]
            print(f"{variant:14s} first two steps {r['first_two_steps_s']:7.1f} s, steady {r['examples_per_s']:7.1f} "
                  f"examples/s" + (", compile cache loaded" if r["cache_loaded"] else "")
                  + (f" = {r['examples_per_s'] / results['eager']['examples_per_s']:.2f}x eager"
                     if "eager" in results and variant != "eager" else ""), flush=True)
    return 0


if __name__ == "__main__":
    # a refusal, a stop: one line and the status of the package's commands
    from benchmarks.entry import command

    sys.exit(command(main))
