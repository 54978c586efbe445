"""Benchmark: time to the first training step and to the first evaluation, ours beside upstream's.

    python benchmarks/bench_startup.py                                    # ours only, on this CPU
    python benchmarks/bench_startup.py --upstream-dir PATH/TO/TinyRecursiveModels   # + upstream's, alternated
    python benchmarks/bench_startup.py --upstream-dir DIR --device cuda   # the same on a GPU

Each side runs in a fresh Python process, timed from the moment the process is started (interpreter start,
imports, dataset opening, model and optimizers, the first step, then training to the first evaluation), so
that neither pays one-time costs for the other: in one process the second side finds torch's lazily imported
modules loaded (the first torch optimizer imports `torch._dynamo`: seconds here) and, on a GPU, CUDA started.

* ours: `trm_kaggle.train.loop.train` with the `sudoku4-cpu` preset (benchmarks/bench_learn_sudoku.py's recipe)
  on generated 4x4 Sudoku, evaluating the held-out puzzles every 2 epochs as that recipe does;
* upstream: its model, ACT loss head and sparse SignSGD (`models/` of `--upstream-dir`, which needs `einops`),
  driven as the GPU suite's part 2 drives them (benchmarks/gpu_suite/part2_learning.py): the same architecture,
  batch, learning rates, our loader's batches and this package's AdamATan2, upstream's evaluation of every
  held-out puzzle after all its ACT steps at the same epoch.
* part 2's way (with `--upstream-dir`): both in one process, ours first, each on the clock part 2 gives it:
  ours from the call of train(), upstream's from after its model and optimizers were built. The difference
  from the fresh processes is what that order and those clocks add to ours' figures.

Printed per side (median over `--rounds`, sides alternated): seconds to its imports done and the process's CPU
seconds by then, seconds to the end of the first training step and the CPU seconds from the imports to it
(CPU seconds are what load from other processes inflates least), seconds to the end of the first evaluation,
the evaluation's own seconds (from the end of the step before it; ours includes the train state it writes at
every evaluation, as upstream's pretrain.py does by default), the step it came after, and the steps per
second in between.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def ours(args: dict, start: float | None) -> dict:
    """Ours' train(); times are seconds after `start` (None: part 2's clock, from the call of train())."""
    from trm_kaggle.train import load_train_config, train

    t = {"imports": time.time() - start if start else 0.0, "cpu_imports": time.process_time()}
    cfg = load_train_config(presets=["sudoku4-cpu"], overrides=[
        f"data_paths=[{args['data']}]", f"checkpoint_path={args['run']}", "seed=0", "progress=False",
        "log_interval=1", f"threads={args['threads']}", f"device={args['device']}"])
    steps: list[float] = []
    start = start or time.time()

    def on_step(step: int, m: dict) -> None:
        steps.append(time.time() - start)
        t.setdefault("cpu_first_step", time.process_time())

    def on_eval(step: int, m: dict) -> bool:
        t["eval_end"], t["eval_step"] = time.time() - start, step
        return True

    train(cfg, on_step=on_step, on_eval=on_eval, banner=False)
    t.update(first_step=steps[0], before_eval=steps[-1], steps=len(steps))
    return t


def upstream(args: dict, start: float | None) -> dict:
    """Upstream's model, loss head and sparse SignSGD as part 2 drives them (`UpstreamSide`); `start` None:
    part 2's clock, from after the model and optimizers are built."""
    import torch

    sys.path.insert(0, args["upstream"])
    import models.losses  # noqa: F401  (upstream's imports count in its start-up)
    import models.recursive_reasoning.trm  # noqa: F401
    import models.sparse_embedding  # noqa: F401

    from benchmarks.gpu_suite.part2_learning import UpstreamSide
    from trm_kaggle.train import load_train_config

    t = {"imports": time.time() - start if start else 0.0, "cpu_imports": time.process_time()}
    dev = torch.device(args["device"])
    torch.set_num_threads(args["threads"])
    cfg = load_train_config(presets=["sudoku4-cpu"], overrides=[f"data_paths=[{args['data']}]", "seed=0"])
    side = UpstreamSide(cfg, dev)
    start = start or time.time()
    steps = []
    for batch in side.train_loader.iterate():
        side.train_step(batch)
        _sync(args["device"])
        steps.append(time.time() - start)
        t.setdefault("cpu_first_step", time.process_time())
        if side.train_loader.epoch >= cfg.eval_interval:  # the first evaluation: every held-out puzzle, all steps
            side.exact_accuracy()
            t["eval_end"], t["eval_step"] = time.time() - start, side.step
            break
    t.update(first_step=steps[0], before_eval=steps[-1], steps=len(steps))
    return t


def child(args: dict) -> None:
    if args["mode"] == "part2":  # both in this process, ours first, each on part 2's clock
        out = {"ours": ours(args, None), "upstream": upstream(args, None)}
    else:
        out = {args["mode"]: (ours if args["mode"] == "ours" else upstream)(args, args["spawned"])}
    print("RESULT " + json.dumps(out))


def run_child(mode: str, args: dict) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    spec = json.dumps({**args, "mode": mode, "spawned": time.time()})
    proc = subprocess.run([sys.executable, __file__, "--child", spec], capture_output=True, text=True, env=env,
                          cwd=REPO)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode or line is None:
        from benchmarks.entry import child_failed

        raise child_failed(f"the {mode} side", proc.returncode, proc.stderr)
    out = {}
    for side, t in json.loads(line[len("RESULT "):]).items():
        out[side] = {"imports": t["imports"], "cpu_imports": t["cpu_imports"], "first_step": t["first_step"],
                     "eval_end": t["eval_end"],
                     "eval_s": t["eval_end"] - t["before_eval"], "eval_step": t["eval_step"],
                     "cpu_to_step": t["cpu_first_step"] - t["cpu_imports"],
                     "steps_per_s": (t["steps"] - 1) / max(t["before_eval"] - t["first_step"], 1e-9)}
    return out


def main() -> None:
    from trm_kaggle.wording import OneLineParser  # an error line quotes what was typed escaped
    ap = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream-dir", default=None, help="a checkout of upstream's code (its models/ package)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--train", type=int, default=500, help="training puzzles (the first evaluation comes after "
                                                           "2 epochs of them)")
    ap.add_argument("--test", type=int, default=200, help="held-out puzzles")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda on a GPU machine")
    ap.add_argument("--work-dir", default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    from benchmarks.entry import check_options, upstream_problem, work_folder
    from trm_kaggle.errors import TRMError
    from trm_kaggle.train import load_train_config

    check_options(counts={"--rounds": args.rounds, "--train": args.train, "--test": args.test},
                  threads={"--threads": args.threads})
    # each side trains on the recipe's batches: fewer puzzles than one was the child's refusal after the build,
    # naming no option
    if args.train < (batch := load_train_config(presets=["sudoku4-cpu"]).global_batch_size):
        raise TRMError(f"--train {args.train}: the sudoku4-cpu recipe trains on batches of {batch} puzzles; give "
                       f"at least {batch} training puzzles")
    if args.upstream_dir and (problem := upstream_problem(args.upstream_dir)):
        raise TRMError(problem)
    modes = ["ours"] + (["upstream", "part2"] if args.upstream_dir else [])
    run_names = [f"run_{mode}_{r}" for r in range(args.rounds) for mode in modes]
    with work_folder(args.work_dir, "bench_startup_", run_names, "startup benchmark") as work:
        runs = measure(args, work, modes)
    print(f"4x4 Sudoku, {args.train} training / {args.test} held-out puzzles, sudoku4-cpu recipe, {args.device}, "
          f"{args.threads} thread(s), median of {args.rounds} rounds; seconds from the process start (part 2: "
          f"both sides in one process, ours first, each on part 2's clock)")
    print(f"{'side':18s} {'imports':>8s} {'cpu s':>6s} {'1st step':>9s} {'cpu s':>6s} {'1st eval':>9s} "
          f"{'eval s':>7s} {'at step':>8s} {'steps/s':>8s}")
    med = {}
    for name, rs in runs.items():
        med[name] = m = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        print(f"{name:18s} {m['imports']:8.2f} {m['cpu_imports']:6.2f} {m['first_step']:9.2f} {m['cpu_to_step']:6.2f} "
              f"{m['eval_end']:9.2f} {m['eval_s']:7.2f} {m['eval_step']:8.0f} {m['steps_per_s']:8.2f}")
    for a, b in (("ours", "upstream"), ("ours (part 2)", "upstream (part 2)")):
        if a in med and b in med:
            o, u = med[a], med[b]
            print(f"{a} - {b}: first step {o['first_step'] - u['first_step']:+.2f} s, first evaluation "
                  f"{o['eval_end'] - u['eval_end']:+.2f} s (per round: "
                  + ", ".join(f"{x['first_step'] - y['first_step']:+.2f}/{x['eval_end'] - y['eval_end']:+.2f}"
                              for x, y in zip(runs[a], runs[b])) + ")")


def _built_as(data: Path, cfg) -> bool:
    """Whether `data` is a dataset the package built, whole, with `cfg` (an earlier run's: reused as it is)."""
    from trm_kaggle.atomic import owner_problem

    try:
        recorded = json.loads((data / "build_info.json").read_text()).get("config")
    except (OSError, ValueError, AttributeError):
        return False
    return owner_problem(data, "dataset") is None and recorded == json.loads(json.dumps(cfg.model_dump()))


def measure(args: argparse.Namespace, work: Path, modes: list[str]) -> dict[str, list[dict]]:
    """Every round of every mode, alternated, in `work`: the dataset reused where an earlier run built it (anything
    else in its place is the builder's to refuse, never taken as the data), each run folder removed after its run."""
    from trm_kaggle.config import SudokuBuildConfig
    from trm_kaggle.data import build_sudoku

    work = work.absolute()  # the children run in the repository
    data = work / "sudoku4"
    build = SudokuBuildConfig(output_dir=str(data), size=4, num_train=args.train, num_test=args.test, seed=0,
                              progress=False)
    if not _built_as(data, build):
        build_sudoku(build)
    runs: dict[str, list[dict]] = {}
    for r in range(args.rounds):
        for mode in modes:
            spec = {"data": str(data), "run": str(work / f"run_{mode}_{r}"), "threads": args.threads,
                    "upstream": args.upstream_dir, "device": args.device}
            try:
                for side, res in run_child(mode, spec).items():
                    runs.setdefault(side if mode != "part2" else f"{side} (part 2)", []).append(res)
            finally:  # this run's folder (`work_folder` refused one there before)
                shutil.rmtree(spec["run"], ignore_errors=True)
    return runs


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: benchmarks.entry
    # a refusal, a stop: one line and the status of the package's commands
    from benchmarks.entry import command

    sys.exit(command(main))
