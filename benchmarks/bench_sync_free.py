"""Benchmark: the training step with its finite check on the host (the CPU's) against the one decided on the
device (CUDA's, `trm_kaggle.train.step_guard`), side by side on this machine, through `train` itself.

    python benchmarks/bench_sync_free.py
    python benchmarks/bench_sync_free.py --device cuda --hidden 512 --batch 128

Each round trains a fresh run of `--steps` steps in each mode (A B A B ...) on generated 4x4 Sudoku, and
counts the host reads of its steps (`HostReads`: tensor-to-Python conversions and data-dependent shapes asked
for from Python; on CUDA each one waits for the device). Reported: host reads per steady step (the count of a
run of 2N steps minus that of N steps, over N) and examples/s (median over rounds) with its ratio. On a CPU
a host read costs nothing: what this shows there is the price of the device-side check (copies of the weights,
the optimizer state, the EMA and the carries, put back with torch.where), not its gain.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.entry import check_options, loading  # noqa: E402

with loading(__name__):  # a stop while these load: one line and status, as in main
    import torch
    from torch.overrides import TorchFunctionMode

# What reads a tensor's values into Python, or gives a shape that depends on them: on CUDA each waits for the
# device (a host sync).
READS = {"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "__repr__", "__format__", "cpu",
         "numpy", "nonzero", "argwhere", "unique", "unique_consecutive", "masked_select", "_local_scalar_dense"}


class HostReads(TorchFunctionMode):
    """Counts the tensor-to-Python conversions and data-dependent shapes asked for from Python code (a boolean
    mask as an index, one-argument torch.where, and the calls of READS)."""

    def __init__(self):
        super().__init__()
        self.count, self.seen = 0, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        index = args[1] if name == "__getitem__" and len(args) > 1 else ()
        mask_index = any(isinstance(i, torch.Tensor) and i.dtype == torch.bool
                         for i in (index if isinstance(index, tuple) else (index,)))
        single_where = name == "where" and len(args) + len(kwargs) == 1
        if name in READS or mask_index or single_where:
            self.count += 1
            self.seen.append(name)
        return func(*args, **kwargs)


def main(argv=None) -> int:
    from trm_kaggle.wording import OneLineParser  # an error line quotes what was typed escaped
    p = OneLineParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=20, help="steps per run (a run of twice as many counts reads)")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    check_options(counts={"--hidden": args.hidden, "--batch": args.batch, "--steps": args.steps,
                          "--repeats": args.repeats})

    from trm_kaggle.config import SudokuBuildConfig
    from trm_kaggle.data import build_sudoku
    from trm_kaggle.train import load_train_config, loop, nonfinite

    print(f"torch {torch.__version__}, device {args.device}, hidden {args.hidden}, batch {args.batch}, load average "
          f"{os.getloadavg()[0]:.1f} (other processes share these cores: compare ratios, not absolutes)")
    logging_off = __import__("logging").getLogger("trm_kaggle")
    logging_off.setLevel("ERROR")
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "sudoku4"
        build_sudoku(SudokuBuildConfig(output_dir=str(data), size=4, num_train=400, num_test=8, num_aug=1, seed=0,
                                       progress=False))
        runs = 0

        def run(mode: str, steps: int) -> tuple[float, int]:
            nonlocal runs
            runs += 1
            nonfinite.SYNC_FREE_DEVICES = ("cuda", "cpu") if mode == "device" else ()
            cfg = load_train_config(overrides=[
                f"data_paths=[{data}]", f"checkpoint_path={Path(tmp) / f'run{runs}'}", f"device={args.device}",
                f"arch.hidden_size={args.hidden}", "arch.num_heads=4", "arch.H_cycles=2", "arch.L_cycles=2",
                "arch.halt_max_steps=4", "arch.puzzle_emb_len=2", "arch.forward_dtype=float32", "compile=off",
                f"global_batch_size={args.batch}", f"max_steps={steps}", "log_interval=1000", "ema=True",
                "eval_interval=null", "progress=False", "seed=0"])
            with HostReads() as reads:
                t = time.perf_counter()
                loop.train(cfg)
            return time.perf_counter() - t, reads.count

        rates: dict[str, list[float]] = {"host": [], "device": []}
        per_step: dict[str, float] = {}
        for mode in rates:  # warm-up, and the count of host reads per steady step
            short, long_ = run(mode, args.steps)[1], run(mode, 2 * args.steps)[1]
            per_step[mode] = (long_ - short) / args.steps
        for _ in range(args.repeats):
            for mode in rates:
                seconds, _ = run(mode, args.steps)
                rates[mode].append(args.batch * args.steps / seconds)
        print(json.dumps({"host_reads_per_step": per_step}))
        med = {m: statistics.median(v) for m, v in rates.items()}
        ratio = statistics.median(d / h for h, d in zip(rates["host"], rates["device"]))
        for m in rates:
            print(f"check on the {m:6s}: {per_step[m]:.1f} host reads per steady step, {med[m]:7.1f} examples/s "
                  f"(median of {args.repeats} runs of {args.steps} steps, set-up included)")
        print(f"device-side check / host check: {ratio:.2f}x examples/s (median of per-round ratios)")
    return 0


if __name__ == "__main__":
    # a refusal, a stop: one line and the status of the package's commands
    from benchmarks.entry import command

    sys.exit(command(main))
