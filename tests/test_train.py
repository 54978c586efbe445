"""The training engine on CPU with a tiny model: exact resume, accumulation, DDP, checkpoints, export."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import free_port
from integrity_helpers import build_sudoku4
from test_cli import summary_line
from trm_kaggle.cli import main
from trm_kaggle.config import TrainConfig
from trm_kaggle.data.format import load_metadata
from trm_kaggle.errors import TRMError
from trm_kaggle.model.export import load_inference_model, read_export
from trm_kaggle.train import checkpoint as ckpt
from trm_kaggle.train.loop import train
from trm_kaggle.train.schedules import cosine_lr, cycles_at, exploration_at, lr_at_step, total_train_steps
from trm_kaggle.train.settings import load_train_config

TINY = ["arch.hidden_size=32", "arch.num_heads=2", "arch.expansion=2", "arch.H_cycles=2", "arch.L_cycles=2",
        "arch.L_layers=1", "arch.halt_max_steps=3", "arch.puzzle_emb_len=2", "arch.forward_dtype=float32",
        "global_batch_size=8", "lr=3e-3", "lr_warmup_steps=2", "puzzle_emb_lr=1e-2", "eval_interval=null",
        "log_interval=1", "progress=False", "device=cpu", "threads=1", "deterministic=True", "seed=3"]


@pytest.fixture(scope="module")
def sudoku4(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("data") / "sudoku4"
    return build_sudoku4(out)


def cfg_for(data: Path, run: Path, *extra: str) -> TrainConfig:
    return load_train_config(overrides=[f"data_paths=[{data}]", f"checkpoint_path={run}", *TINY, *extra])


def losses(run: Path) -> list[tuple[int, float]]:
    return [(r["step"], r["loss"]) for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
            if "loss" in r]


def final_params(run: Path) -> dict[str, torch.Tensor]:
    return ckpt.load_train_state(ckpt.list_states(run)[-1])["model"]


def test_resume_reproduces_the_uninterrupted_run_exactly(sudoku4, tmp_path):
    full = train(cfg_for(sudoku4, tmp_path / "a", "max_steps=8", "ema=True"))
    assert full.step == 8
    part = train(cfg_for(sudoku4, tmp_path / "b", "max_steps=4", "ema=True"))
    assert part.step == 4
    resumed = train(cfg_for(sudoku4, tmp_path / "b", "max_steps=8", "ema=True"))
    assert resumed.step == 8  # the step counter continues (upstream restarts at 0)
    assert [s for s, _ in losses(tmp_path / "b")] == list(range(1, 9))
    assert losses(tmp_path / "a") == losses(tmp_path / "b")  # bit-identical losses
    a, b = final_params(tmp_path / "a"), final_params(tmp_path / "b")
    assert all(torch.equal(a[k], b[k]) for k in a)
    sa = ckpt.load_train_state(ckpt.list_states(tmp_path / "a")[-1])
    sb = ckpt.load_train_state(ckpt.list_states(tmp_path / "b")[-1])
    assert all(torch.equal(sa["ema"][k], sb["ema"][k]) for k in sa["ema"])


def test_resume_keeps_the_dtype_auto_chose(sudoku4, tmp_path, monkeypatch):
    """forward_dtype=auto on CPU is a timing: a resumed run keeps the checkpoint's dtype (here bf16)
    even when this process measures otherwise, and still reproduces the uninterrupted run."""
    from trm_kaggle.model import dtype as dtype_mod

    wide = ["arch.hidden_size=128", "arch.num_heads=4", "arch.forward_dtype=auto"]
    monkeypatch.setattr(dtype_mod, "cpu_bf16_speedup", lambda threads: 2.0)  # bf16 measured fast
    full = train(cfg_for(sudoku4, tmp_path / "a", "max_steps=4", *wide))
    train(cfg_for(sudoku4, tmp_path / "b", "max_steps=2", *wide))
    state = ckpt.load_train_state(ckpt.list_states(tmp_path / "b")[-1])
    assert state["forward_dtype"] == "bfloat16" and state["carries"][0][0]["z_H"].dtype == torch.bfloat16
    monkeypatch.setattr(dtype_mod, "cpu_bf16_speedup", lambda threads: 0.5)  # now it would pick float32
    resumed = train(cfg_for(sudoku4, tmp_path / "b", "max_steps=4", *wide))
    assert full.step == resumed.step == 4
    assert losses(tmp_path / "a") == losses(tmp_path / "b")
    state = ckpt.load_train_state(ckpt.list_states(tmp_path / "b")[-1])
    assert state["forward_dtype"] == "bfloat16"


def test_lion_and_grad_checkpointing_in_training(sudoku4, tmp_path):
    """optimizer=lion resumes exactly (its moment is in the train state); grad_checkpointing trains the same
    run (same gradients) and may be switched on or off when a run resumes."""
    full = train(cfg_for(sudoku4, tmp_path / "a", "max_steps=4", "optimizer=lion", "lr=1e-3"))
    train(cfg_for(sudoku4, tmp_path / "b", "max_steps=2", "optimizer=lion", "lr=1e-3", "grad_checkpointing=True"))
    state = ckpt.load_train_state(ckpt.list_states(tmp_path / "b")[-1])
    assert {"exp_avg"} == set(state["optimizer"]["state"][0])
    resumed = train(cfg_for(sudoku4, tmp_path / "b", "max_steps=4", "optimizer=lion", "lr=1e-3"))
    assert full.step == resumed.step == 4
    for (sa, la), (sb, lb) in zip(losses(tmp_path / "a"), losses(tmp_path / "b"), strict=True):
        assert sa == sb and la == pytest.approx(lb, rel=1e-5)
    a, b = final_params(tmp_path / "a"), final_params(tmp_path / "b")
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-6, rtol=1e-5), k


def test_gradient_accumulation_keeps_the_global_batch(sudoku4, tmp_path):
    train(cfg_for(sudoku4, tmp_path / "full", "max_steps=3"))
    train(cfg_for(sudoku4, tmp_path / "acc", "max_steps=3", "micro_batch_size=2"))
    a, b = final_params(tmp_path / "full"), final_params(tmp_path / "acc")
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-5, rtol=1e-4), k


@pytest.mark.slow
def test_two_gloo_processes_equal_one_process(sudoku4, tmp_path):
    args = [f"data_paths=[{sudoku4}]", *TINY, "max_steps=3"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    one = subprocess.run([sys.executable, "-m", "trm_kaggle", "train", f"checkpoint_path={tmp_path / 'one'}", *args],
                         capture_output=True, text=True, env=env)
    assert one.returncode == 0, one.stderr[-2000:]
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                          str(free_port()), "-m", "trm_kaggle", "train", f"checkpoint_path={tmp_path / 'two'}", *args],
                         capture_output=True, text=True, env=env)
    assert two.returncode == 0, two.stderr[-3000:]
    a, b = final_params(tmp_path / "one"), final_params(tmp_path / "two")
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-5, rtol=1e-4), k
    assert ckpt.load_train_state(ckpt.list_states(tmp_path / "two")[-1])["world_size"] == 2


def test_resume_refuses_a_different_config_or_dataset(sudoku4, tmp_path):
    train(cfg_for(sudoku4, tmp_path / "r", "max_steps=2"))
    with pytest.raises(TRMError, match=r"state_step00000002.pt was saved by a run with a different config "
                                       r"\(arch.L_cycles: 2 in it, 3 now\)"):
        train(cfg_for(sudoku4, tmp_path / "r", "max_steps=4", "arch.L_cycles=3"))


def test_a_test_path_that_is_no_dataset_is_refused_before_the_first_step(sudoku4, tmp_path):
    """data_paths_test=[missing]: a run that reached an evaluation failed there, its steps unsaved (one that did
    not reach one ended with status 0, the setting never read)."""
    for interval in ("eval_interval=1", "eval_interval=null"):  # null: once, at the schedule's end
        with pytest.raises(TRMError, match=r"^data_paths_test: .*nonexist"):
            train(cfg_for(sudoku4, tmp_path / "r", "max_steps=2", interval,
                          f"data_paths_test=[{tmp_path / 'nonexist'}]"))
    assert not (tmp_path / "r" / "metrics.jsonl").exists()
    train(cfg_for(sudoku4, tmp_path / "ok", "max_steps=1", "eval_interval=1", f"data_paths_test=[{sudoku4}]"))


@pytest.mark.parametrize("where", ["data_paths", "data_paths_test"])
@pytest.mark.parametrize("array", ["labels", "inputs"])
def test_a_test_split_token_outside_the_vocabulary_is_refused_before_the_run_folder(sudoku4, tmp_path, where, array):
    """A test-split token past the vocabulary (which verify refuses) was found at the first evaluation, after the
    training, and the run ended there with its steps lost (with no evaluation it exited 0)."""
    import shutil

    import numpy as np

    copy = tmp_path / "oov"
    shutil.copytree(sudoku4, copy)
    (copy / "contents.json").unlink(missing_ok=True)  # an upstream-format dataset: no record of its bytes
    path = copy / "test" / f"all__{array}.npy"
    a = np.load(path)
    a[0, 0] = load_metadata(copy, "test").vocab_size + 1
    np.save(path, a)
    given = [f"data_paths_test=[{copy}]"] if where == "data_paths_test" else []
    with pytest.raises(TRMError, match=rf"test/all__{array}.npy: row 0 has token \d+, outside 0\.\."):
        train(cfg_for(sudoku4 if given else copy, tmp_path / "r", "max_steps=2", "eval_interval=1", *given))
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("deadline", [float("nan"), float("inf"), "soon", True])
def test_a_deadline_that_is_no_finite_time_is_named_before_the_run(sudoku4, tmp_path, deadline):
    """`train(cfg, deadline=nan)` trained: NaN compares false with every clock, so no deadline ever came."""
    with pytest.raises(ValueError, match="deadline=.*expected a finite number of seconds, or None"):
        train(cfg_for(sudoku4, tmp_path / "r", "max_steps=2"), deadline=deadline)
    assert not (tmp_path / "r").exists()


def test_no_eval_interval_evaluates_once_at_the_schedules_end(sudoku4, tmp_path):
    """eval_interval=None is documented (and refused beside min_eval_interval) as "only the end evaluates", as
    upstream (its eval_interval is then the run's epochs); no evaluation ran at all."""
    result = train(cfg_for(sudoku4, tmp_path / "r", "epochs=2", "eval_interval=null"))
    records = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    evals = [r["step"] for r in records if "eval_exact_accuracy" in r]
    assert evals == [result.step] and result.epoch == pytest.approx(2.0, abs=0.5), (evals, result.epoch)


def test_checkpoint_retention_and_bad_files(sudoku4, tmp_path):
    train(cfg_for(sudoku4, tmp_path / "r", "max_steps=2", "checkpoint_keep=2"))
    train(cfg_for(sudoku4, tmp_path / "r", "max_steps=3", "checkpoint_keep=2"))
    train(cfg_for(sudoku4, tmp_path / "r", "max_steps=4", "checkpoint_keep=2"))
    assert [p.name for p in ckpt.list_states(tmp_path / "r")] == ["state_step00000003.pt", "state_step00000004.pt"]
    bad = tmp_path / "r" / "state_step00000009.pt"
    good = ckpt.list_states(tmp_path / "r")[-1].read_bytes()
    bad.write_bytes(good[: len(good) // 2])
    with pytest.raises(TRMError, match="state_step00000009.pt: not a readable train state"):
        ckpt.load_train_state(bad)
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    with pytest.raises(TRMError, match="not a trm-kaggle train state"):
        ckpt.load_train_state(foreign)


def test_export_with_mean_embedding_and_reload(sudoku4, tmp_path, capsys):
    result = train(cfg_for(sudoku4, tmp_path / "r", "max_steps=2"))
    count = result.parameters
    assert count.puzzle_rows == load_metadata(sudoku4, "train").num_puzzle_identifiers
    assert result.summary().startswith(f"model: {count}\n")
    assert main(["export", str(tmp_path / "r"), "--out", str(tmp_path / "exp"), "--mean-embedding"]) == 0
    out = capsys.readouterr().out.strip()
    state = tmp_path / "r" / "state_step00000002.pt"
    assert re.fullmatch(re.escape(f"exported {tmp_path / 'exp'}: step 2 of {state}, {count} (the export keeps only "
                                  "its mean row) in ") + r"\d+\.\d s", out), out
    config = json.loads((tmp_path / "exp" / "config.json").read_text())
    assert config["puzzle_embedding"] == "mean" and config["seq_len"] == 16
    model, _ = load_inference_model(tmp_path / "exp", num_puzzle_identifiers=5)
    assert model.puzzle_emb.weights.shape[0] == 5
    (tmp_path / "exp" / "weights.safetensors").write_bytes(b"\x00" * 10)
    with pytest.raises(TRMError, match="weights.safetensors: unreadable or truncated"):
        read_export(tmp_path / "exp")


def test_import_upstream_checkpoint_matches_logits(sudoku4, tmp_path, capsys):
    from trm_kaggle.model.upstream import to_upstream_state_dict

    train(cfg_for(sudoku4, tmp_path / "r", "max_steps=2"))
    assert main(["export", str(tmp_path / "r"), "--out", str(tmp_path / "ours")]) == 0
    ours, config = load_inference_model(tmp_path / "ours")
    up = tmp_path / "upstream_run"
    up.mkdir()
    torch.save(to_upstream_state_dict(ours, compiled=True, dtype=torch.bfloat16), up / "step_2")
    a = config["arch"]
    (up / "all_config.yaml").write_text(
        "arch:\n  name: recursive_reasoning.trm@TinyRecursiveReasoningModel_ACTV1\n"
        "  loss: {name: losses@ACTLossHead, loss_type: stablemax_cross_entropy}\n"
        + "".join(f"  {k}: {a[k]}\n" for k in ("halt_exploration_prob", "halt_max_steps", "H_cycles", "L_cycles",
                                                "H_layers", "L_layers", "hidden_size", "num_heads", "expansion",
                                                "pos_encodings", "puzzle_emb_len", "mlp_t", "no_ACT_continue"))
        + "  puzzle_emb_ndim: ${.hidden_size}\n  forward_dtype: bfloat16\n"
        f"data_paths: [{sudoku4}]\n")
    capsys.readouterr()
    assert main(["import-upstream", str(up / "step_2"), "--out", str(tmp_path / "imported")]) == 0
    assert summary_line(capsys.readouterr().out, tmp_path / "imported").group(1) == "imported"  # the builds' shape
    imported, _ = load_inference_model(tmp_path / "imported")
    batch = {"inputs": torch.randint(0, 6, (3, 16)), "puzzle_identifiers": torch.zeros(3, dtype=torch.long),
             "labels": torch.zeros(3, 16, dtype=torch.long)}
    ours.eval(), imported.eval()
    with torch.no_grad():
        _, out_a = ours(ours.initial_carry(batch), batch)
        _, out_b = imported(imported.initial_carry(batch), batch)
    # upstream checkpoints are bf16: logits agree to bf16 rounding of the weights
    assert torch.allclose(out_a["logits"], out_b["logits"], atol=5e-2, rtol=5e-2)
    # --seq-len within the readers' bound: 0 became the default silently, 2**70 was a traceback, -1 and 10**7
    # wrote an export every reader refused
    for bad in ("0", "-1", str(10**7), str(2**70)):
        assert main(["import-upstream", str(up / "step_2"), "--out", str(tmp_path / f"s{bad}"), "--seq-len", bad]) == 2
        assert f"--seq-len {bad}: must be from 1 to" in capsys.readouterr().err and not (tmp_path / f"s{bad}").exists()
    from trm_kaggle.errors import DataError
    from trm_kaggle.model.export import export_inference

    with pytest.raises(DataError, match="not written, its config.json would be refused: seq_len"):
        export_inference(tmp_path / "never", ours, arch=ours.arch, seq_len=10**7, vocab_size=ours.vocab_size)
    assert not (tmp_path / "never").exists()


def test_schedules():
    assert cosine_lr(0, 1.0, 10, 100, 0.1) == 0.0 and cosine_lr(5, 1.0, 10, 100, 0.1) == 0.5
    assert cosine_lr(10, 1.0, 10, 100, 0.1) == pytest.approx(1.0) and cosine_lr(100, 1.0, 10, 100, 0.1) == pytest.approx(0.1)
    assert cosine_lr(60, 2.0, 10, 100, 1.0) == 2.0  # upstream's default min ratio 1.0: constant
    # upstream counts the step before computing its rate: the first optimizer step uses lr(1), not lr(0) = 0
    assert lr_at_step(0, 1.0, 10, 100, 0.1) == pytest.approx(0.1) and lr_at_step(9, 1.0, 10, 100, 0.1) == 1.0
    # upstream's length: int(epochs * groups * mean examples / batch) = int(7.875) = 7 (a ceil would give 8)
    assert total_train_steps(3, 7, 1.5, 4) == 7 and total_train_steps(1, 1, 1.0, 768) == 1
    cfg = load_train_config(overrides=["arch.H_cycles=3", "arch.L_cycles=6", "curriculum.start_H_cycles=1",
                                       "curriculum.start_L_cycles=2", "curriculum.epochs=10",
                                       "halt_schedule.start_prob=0.5", "halt_schedule.end_prob=0.1",
                                       "halt_schedule.epochs=4"])
    assert cycles_at(cfg, 0) == (1, 2) and cycles_at(cfg, 5) == (2, 4) and cycles_at(cfg, 10) == (3, 6)
    assert exploration_at(cfg, 0) == 0.5 and exploration_at(cfg, 2) == pytest.approx(0.3) and exploration_at(cfg, 9) == 0.1


def test_curriculum_reaches_the_model(sudoku4, tmp_path):
    seen = []
    import trm_kaggle.train.step as step_mod
    orig = step_mod.act_loss

    def spy(*a, **k):
        seen.append(1)
        return orig(*a, **k)

    cfg = cfg_for(sudoku4, tmp_path / "c", "max_steps=2", "arch.L_cycles=3", "curriculum.start_L_cycles=1",
                  "curriculum.epochs=1000")
    from trm_kaggle.model.trm import TinyRecursiveModel
    calls = []
    real_recurse = TinyRecursiveModel.recurse

    def recurse(self, *a, **k):
        calls.append(self.L_cycles)
        return real_recurse(self, *a, **k)

    TinyRecursiveModel.recurse = recurse
    try:
        train(cfg)
    finally:
        TinyRecursiveModel.recurse = real_recurse
    assert calls and set(calls) == {1}  # early in a 1000-epoch ramp from 1 to 3: one L cycle


def test_train_cli_with_upstream_overrides_and_export(sudoku4, tmp_path, capsys):
    rc = main(["train", "--preset", "cpu-smoke", f"data_paths=[{sudoku4}]", f"+checkpoint_path={tmp_path / 'r'}",
               "max_steps=3", "ema=True", "progress=False", "--export", str(tmp_path / "e")])
    assert rc == 0
    out = capsys.readouterr().out
    assert "trained 3 steps" in out and (tmp_path / "e" / "weights.safetensors").exists()
    assert main(["train", f"data_paths=[{sudoku4}]", "arch.L_cycle=4"]) == 2
    assert "did you mean arch.L_cycles" in capsys.readouterr().err


def test_out_of_memory_retries_with_a_smaller_micro_batch(sudoku4, tmp_path, monkeypatch):
    """auto_batch: a step that runs out of memory is retried with half the micro-batch, same result."""
    from trm_kaggle.model.trm import TinyRecursiveModel

    real_forward = TinyRecursiveModel.forward

    def forward(self, carry, batch, exploration=None):
        if batch["inputs"].shape[0] > 2:
            raise torch.OutOfMemoryError("simulated: CUDA out of memory")
        return real_forward(self, carry, batch, exploration)

    monkeypatch.setattr(TinyRecursiveModel, "forward", forward)
    with pytest.raises(TRMError, match="out of memory on cpu in training step 1: lower micro_batch_size"):
        train(cfg_for(sudoku4, tmp_path / "no", "max_steps=2"))
    train(cfg_for(sudoku4, tmp_path / "auto", "max_steps=3", "auto_batch=True"))
    monkeypatch.setattr(TinyRecursiveModel, "forward", real_forward)
    train(cfg_for(sudoku4, tmp_path / "ref", "max_steps=3", "micro_batch_size=2"))
    a, b = final_params(tmp_path / "auto"), final_params(tmp_path / "ref")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_time_bounded_run_shows_seconds_against_the_budget(sudoku4, tmp_path, capsys):
    # epochs=100000 makes a schedule of hundreds of thousands of steps; the time limit ends the run long before
    train(cfg_for(sudoku4, tmp_path / "t", "time_limit=4", "progress=True", "epochs=100000"))
    err = capsys.readouterr().err.replace("\r", "\n")
    bars = [line for line in err.splitlines() if ", budget=" in line]
    assert bars, err
    for line in bars:  # "37%|███ | 1/4 s, budget=4 s, step=12, loss=..."
        done, total = re.search(r"(\d+)/(\d+) s, budget=", line).groups()
        assert int(done) <= int(total) <= 4
        assert "step=" not in line or "/" not in line.split("step=")[1].split(",")[0]  # never the step total


def test_a_run_whose_rows_never_halt_records_no_accuracy_rather_than_zero(sudoku4, tmp_path, capsys):
    """halt_max_steps 16 against 4 steps: no row halts in any interval, so no accuracy has data. The records leave
    the averages over halted rows out (they once said 0.0), and what reads them says "no data"."""
    from trm_kaggle.experiments.compare import group_curves, load_runs, write_comparison
    from trm_kaggle.pipeline import learning_summary
    from trm_kaggle.train.metrics import HALTED_ROW_METRICS, read_metrics

    run = tmp_path / "never"
    result = train(cfg_for(sudoku4, run, "max_steps=4", "arch.halt_max_steps=16", "progress=True"))
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert all(r["halted_examples"] == 0 and "loss" in r and not set(HALTED_ROW_METRICS) & set(r) for r in records)
    assert "exact=no data" in capsys.readouterr().err  # the bar's note
    assert "exact accuracy (train batches, halted rows) no data" in result.summary()
    assert "token accuracy no data -> no data" in learning_summary(run)

    paths = write_comparison([run], tmp_path / "cmp")  # the default metric, exact_accuracy: no run has data
    assert "no data yet" in paths["markdown_text"]
    row = next(line for line in paths["markdown_text"].splitlines() if line.startswith("| never |"))
    assert row.count("| no data ") == 3  # final exact, best exact, final token (train)
    assert group_curves(load_runs([run]), "exact_accuracy") == {}  # nothing drawn, no 0 line
    assert read_metrics(run)[0][-1].get("exact_accuracy") is None


def test_progress_bar_without_a_deadline_counts_steps_and_with_one_the_nearer_end():
    from trm_kaggle.train.progress import TrainProgress
    import time

    steps = TrainProgress(10, 0, None, enabled=True)
    steps.advance(1)
    assert steps.bar.total == 10 and steps.bar.n == 1
    # 20 steps at ~0.05 s each end long before a 1-hour deadline: the bar's total is their time, with the steps
    near = TrainProgress(20, 0, time.monotonic() + 3600, enabled=True)
    time.sleep(0.1)
    near.advance(2)
    assert near.bar.total < 60 and near.extra["step"] == "2/20"
    # a schedule of 135,532 steps bounded by a 5 s deadline: the bar counts toward the deadline's 5 s
    far = TrainProgress(135_532, 0, time.monotonic() + 5, enabled=True)
    time.sleep(0.05)
    far.advance(1)
    assert far.bar.total == pytest.approx(5, abs=0.2) and far.extra["step"] == "1"
    for bar in (steps, near, far):
        bar.close()


# ---------------------------------------------------------------------------
# Resume after a crash (issue 10): a truncated newest state, metrics past the resumed step
# ---------------------------------------------------------------------------


def steps_logged(run: Path) -> list[int]:
    return [r["step"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


@pytest.mark.parametrize("damage", ["truncated", "empty", "foreign bytes"])
def test_resume_falls_back_to_the_newest_readable_state(sudoku4, tmp_path, caplog, damage):
    run = tmp_path / "run"
    train(cfg_for(sudoku4, run, "max_steps=2", "checkpoint_keep=3"))
    train(cfg_for(sudoku4, run, "max_steps=4", "checkpoint_keep=3"))
    newest = ckpt.list_states(run)[-1]
    data = newest.read_bytes()
    newest.write_bytes({"truncated": data[: len(data) // 2], "empty": b"", "foreign bytes": b"\x00" * 100}[damage])
    resumed = train(cfg_for(sudoku4, run, "max_steps=6", "checkpoint_keep=3"))
    assert resumed.step == 6
    assert "trying the previous state" in caplog.text and "renamed to state_step00000004.pt.corrupt" in caplog.text
    assert (run / "state_step00000004.pt.corrupt").exists()  # kept for inspection, never deleted
    assert steps_logged(run) == [1, 2, 3, 4, 5, 6]  # steps 3-4 ran again: logged once


def test_metrics_past_the_resumed_step_are_logged_once(sudoku4, tmp_path):
    run = tmp_path / "run"
    train(cfg_for(sudoku4, run, "max_steps=3"))
    with open(run / "metrics.jsonl", "a") as f:  # a run killed after logging steps 4-5 but before saving them
        f.write(json.dumps({"step": 4, "loss": 1.0}) + "\n" + json.dumps({"step": 5, "loss": 1.0}) + "\n")
        f.write('{"step": 6, "lo')  # and cut off mid-line
    train(cfg_for(sudoku4, run, "max_steps=5"))
    assert steps_logged(run) == [1, 2, 3, 4, 5]


def test_a_rerun_of_a_finished_run_says_so_and_changes_nothing(sudoku4, tmp_path, capsys):
    run = tmp_path / "run"
    args = ["train", f"data_paths=[{sudoku4}]", f"checkpoint_path={run}", *TINY]
    assert main([*args, "max_steps=3"]) == 0
    assert "trained 3 steps" in capsys.readouterr().out
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    assert main([*args, "max_steps=3"]) == 0
    out = capsys.readouterr().out
    assert "already done at step 3 (" in out and "max_steps=3 (raise it to train further)" in out
    assert "nothing trained, metrics.jsonl unchanged; last logged loss " in out
    assert "nan" not in out and "examples/s" not in out
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before  # metrics, states and config untouched
    assert main([*args, "max_steps=5"]) == 0  # a higher limit continues, and says from where
    assert "trained 2 new steps, resuming at step 3, to step 5 (" in capsys.readouterr().out
    # a run at the end of its schedule (epochs) names that instead
    done = train(cfg_for(sudoku4, tmp_path / "epoch", "epochs=1"))
    again = train(cfg_for(sudoku4, tmp_path / "epoch", "epochs=1"))
    assert again.already_done.startswith(f"the end of its schedule ({done.step} steps for epochs=1")
    assert again.step == done.step and again.new_steps == 0 and again.metrics == done.metrics


def test_normal_events_are_logged_at_info_level(sudoku4, tmp_path, caplog):
    """Resuming, dropping the records of steps run again and reaching the time budget are what a run does,
    not problems: INFO, never WARNING."""
    import logging

    run = tmp_path / "run"
    with caplog.at_level(logging.INFO, logger="trm_kaggle"):
        train(cfg_for(sudoku4, run, "max_steps=3"))
        with open(run / "metrics.jsonl", "a") as f:  # a record of a step the state does not hold
            f.write(json.dumps({"step": 4, "loss": 1.0}) + "\n")
        result = train(cfg_for(sudoku4, run, "max_steps=1000", "time_limit=1"))
    messages = {r.getMessage(): r.levelno for r in caplog.records}
    assert messages[f"resuming {run} from step 3"] == logging.INFO
    assert messages["metrics.jsonl: dropped 1 records after step 3 (those steps run again)"] == logging.INFO
    assert messages[f"time budget reached at step {result.step}: stopping training"] == logging.INFO
    assert result.stopped_by == "the time limit" and "stopped by the time limit" in result.summary()
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    # the interval cut short by the deadline is logged too: the last record is the last step's
    assert steps_logged(run)[-1] == result.step


def test_a_time_limit_no_step_fits_says_no_loss_not_nan(sudoku4, tmp_path):
    """No step ran, so there is no loss: the closing line says so rather than print a nan that reads as a
    diverged run."""
    result = train(cfg_for(sudoku4, tmp_path / "run", "max_steps=3", "time_limit=1e-300"))
    assert result.step == 0 and result.stopped_by == "the time limit"
    summary = result.summary()
    assert "no step logged: no loss, no accuracy" in summary and "nan" not in summary


def test_no_readable_state_is_one_clear_error(sudoku4, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "state_step00000003.pt").write_bytes(b"junk")
    with pytest.raises(TRMError, match="no readable train state"):
        train(cfg_for(sudoku4, run, "max_steps=4"))


def test_every_rank_resumes_from_the_state_rank_0_chose(sudoku4, tmp_path, monkeypatch):
    """Under torchrun rank 0 picks the newest state that loads and every rank reads that file, whatever it lists
    itself; a rank that cannot (checkpoint_path not shared between hosts) stops every rank with one error."""
    import shutil

    from trm_kaggle.train import state as train_state
    from trm_kaggle.train.runtime import Runtime

    run = tmp_path / "run"
    train(cfg_for(sudoku4, run, "max_steps=2"))
    train(cfg_for(sudoku4, run, "max_steps=4"))
    aside = tmp_path / "aside.pt"
    shutil.copy(ckpt.state_path(run, 4), aside)
    train(cfg_for(sudoku4, run, "max_steps=6"))  # a newer state rank 0 has not chosen
    shutil.copy(aside, ckpt.state_path(run, 4))  # back, if rotation took it
    rank1 = Runtime(torch.device("cpu"), torch.float32, "test", rank=1, world_size=2)

    def collectives(*sums):  # what the all-reduces return on this rank: rank 0's choice, then the ranks able
        it = iter(sums)
        monkeypatch.setattr(train_state, "sum_over_ranks", lambda value, rt: next(it))

    collectives(4, 2)
    path, state = train_state.state_to_resume(run, rank1)
    assert path == ckpt.state_path(run, 4) and state["step"] == 4
    collectives(8, 1)  # rank 0 resumes from a state this rank does not see
    with pytest.raises(TRMError, match="1 of 2 ranks cannot resume .*filesystem every host sees"):
        train_state.state_to_resume(run, rank1)
    collectives(-1, 1)  # rank 0 finds no state at all, this rank finds some
    with pytest.raises(TRMError, match="rank 1 finds train states .* where rank 0 finds none"):
        train_state.state_to_resume(run, rank1)
    collectives(-2, 0)  # rank 0 finds none that loads
    with pytest.raises(TRMError, match="rank 0 finds no readable train state"):
        train_state.state_to_resume(run, rank1)
    collectives(-1, 2)
    assert train_state.state_to_resume(tmp_path / "fresh", rank1) is None  # nobody resumes: fine
    rank0 = Runtime(torch.device("cpu"), torch.float32, "test", rank=0, world_size=2)
    collectives(6, 2)  # rank 0 adds its own choice, the newest state that loads
    path, state = train_state.state_to_resume(run, rank0)
    assert path == ckpt.state_path(run, 6)


def test_a_write_cut_off_by_a_kill_leaves_no_temporary_behind_a_resume(sudoku4, tmp_path):
    """A worker group killed while rank 0 wrote a state leaves `.state_step*.pt.*.tmp`; the next start removes
    it (and only temporaries of the run's own files)."""
    run = tmp_path / "run"
    train(cfg_for(sudoku4, run, "max_steps=2"))
    leftover = run / ".state_step00000003.pt.k2j4x9ab.tmp"
    leftover.write_bytes(b"half a state")
    other = run / ".notes.txt.abc.tmp"
    other.write_text("not ours")
    train(cfg_for(sudoku4, run, "max_steps=3"))
    assert not leftover.exists() and other.exists()


@torch.no_grad()
def test_the_test_split_check_equals_one_full_length_rollout_of_the_split(sudoku4, tmp_path):
    """evaluate_split (a fixed batch refilled from the split, only the last step decoded) gives the metrics of
    every test example run in one batch through all its steps and scored by the loss head, with a batch size
    that does not divide the split. The model answers with each example's solution or its input (by the parity
    of the input's sum), so each example's score depends on its own labels."""
    from conftest import SolvesEven
    from trm_kaggle.data.loader import PuzzleLoader
    from trm_kaggle.model.losses import act_loss
    from trm_kaggle.model.rollout import act_rollout
    from trm_kaggle.train.evaluation import evaluate_split
    from trm_kaggle.train.runtime import Runtime

    cfg = cfg_for(sudoku4, tmp_path / "r", "global_batch_size=3")
    meta = load_metadata(sudoku4, "train")
    torch.manual_seed(0)
    model = SolvesEven(cfg.arch, meta.seq_len, meta.vocab_size, meta.num_puzzle_identifiers)
    loader = PuzzleLoader([str(sudoku4)], "test", 1, prefetch=0)
    assert loader.num_examples % 3
    batch = loader.examples(range(loader.num_examples))
    r = act_rollout(model.eval(), batch, cfg.arch.halt_max_steps)
    _, m = act_loss(r.outputs, batch["labels"], torch.ones_like(r.carry.halted), r.carry.steps)
    got = evaluate_split(model.train(), cfg, Runtime(torch.device("cpu"), torch.float32, "float32"))
    assert model.training  # the caller's mode is restored
    n = int(m["count"])
    assert got["eval_examples"] == n == loader.num_examples
    assert 0 < float(m["exact_accuracy"]) < n and 0 < float(m["token_accuracy"]) < n
    assert got["eval_exact_accuracy"] == pytest.approx(float(m["exact_accuracy"]) / n, abs=1e-12)
    assert got["eval_token_accuracy"] == pytest.approx(float(m["token_accuracy"]) / n, rel=1e-6)
    assert got["eval_steps"] == cfg.arch.halt_max_steps


_NO_DYNAMO = r"""
import sys
from trm_kaggle.cli import main
from trm_kaggle.model import cpu_kernels

calls = []
kernel = cpu_kernels._onednn_kernel
cpu_kernels._onednn_kernel = lambda *a: calls.append(1) or kernel(*a)
data, run, out = sys.argv[1:4]
assert main(["train", f"data_paths=[{data}]", f"checkpoint_path={run}", *sys.argv[4:]]) == 0
assert main(["export", run, "--out", f"{out}/weights"]) == 0
from trm_kaggle.evaluate.predict import predict_split
from trm_kaggle.model.export import load_model_for_dataset
model = load_model_for_dataset(f"{out}/weights", data, "cpu")[0]
assert (predict_split(model, data, batch_size=32).steps > 0).all()
from trm_kaggle.train.memory import count_parameters, fitting_batch
assert count_parameters(model.arch, model.seq_len, model.vocab_size) == model.num_parameters()
assert fitting_batch(model.arch, seq_len=model.seq_len, vocab_size=model.vocab_size, num_puzzle_identifiers=2,
                     device="cpu")[0] > 0  # the solver's sizing: models on the meta device, a probe on the CPU
print("onednn calls", len(calls) if cpu_kernels.ONEDNN_LINEAR else "n/a", "dynamo", "torch._dynamo" in sys.modules)
"""


def test_cpu_training_and_prediction_never_import_torch_dynamo(sudoku4, tmp_path):
    """Eager CPU work keeps torch._dynamo unimported: its import is 1.2 s of every process's start-up (torch's
    optimizers and custom ops import it on their first call; `optim.common` and `model.cpu_kernels._onednn` avoid
    those calls while nothing compiles). The model is wide enough that its matmuls take the oneDNN path. The
    memory estimate (`auto_batch`, the solver's sizing) builds models on the meta device, whose arithmetic
    imports it: their RoPE tables and pair order are computed on the CPU.
    (`deterministic=True` imports it: torch.use_deterministic_algorithms sets torch._inductor's options.)"""
    p = subprocess.run([sys.executable, "-c", _NO_DYNAMO, str(sudoku4), str(tmp_path / "run"), str(tmp_path),
                        *TINY, "arch.hidden_size=256", "arch.num_heads=4", "global_batch_size=32", "max_steps=2",
                        "deterministic=False", "auto_batch=True"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    line = p.stdout.strip().splitlines()[-1]
    assert line.endswith("dynamo False"), line
    assert not line.startswith("onednn calls 0 "), line  # the oneDNN matmuls ran, outside the custom op


RUN_IS_DATA = "is also the input data path {data}: an output never overwrites an input"
RUN_IN_DATA = "is inside the input data path {data}: an input folder is never written into; choose an output outside it"


@pytest.mark.parametrize("inside, said", [(False, RUN_IS_DATA), (True, RUN_IN_DATA)], ids=["same", "inside"])
def test_the_library_refuses_a_run_folder_in_its_data_as_the_command_does(tmp_path, capsys, inside, said):
    """`train(cfg)` (the notebooks, the pipeline) once wrote config.json, run.json, a state and its lock into the
    dataset it read, or a folder inside it; `trm-kaggle train` refused both. The same line, nothing written."""
    data = tmp_path / "ds"
    build_sudoku4(data)
    before = sorted(p.relative_to(data) for p in data.rglob("*"))
    run = data / "sub" if inside else data
    line = f"run folder (checkpoint_path) {run} " + said.format(data=data)
    with pytest.raises(TRMError) as refused:
        train(cfg_for(data, run, "max_steps=1"))
    assert str(refused.value) == line
    assert sorted(p.relative_to(data) for p in data.rglob("*")) == before
    assert main(["train", f"data_paths=[{data}]", f"checkpoint_path={run}", *TINY, "max_steps=1"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"error: {line}"


@pytest.mark.parametrize("place", ["a file", "under a file", "a dangling link", "a FIFO", "in /proc"])
def test_the_library_refuses_a_run_folder_it_cannot_write_as_the_command_does(tmp_path, capsys, place):
    """`train(cfg)` with checkpoint_path a file, a path under one, a dangling link, a FIFO or a place in /proc
    raised Python's own FileExistsError/NotADirectoryError/FileNotFoundError ("File exists" for a dangling link),
    naming no setting; `trm-kaggle train` refused each in one line. The library now says the command's line."""
    data = tmp_path / "ds"
    build_sudoku4(data)
    (tmp_path / "afile").write_text("hi")
    run = {"a file": tmp_path / "afile", "under a file": tmp_path / "afile" / "sub",
           "a dangling link": tmp_path / "dl", "a FIFO": tmp_path / "ff", "in /proc": Path("/proc/self/x")}[place]
    if place == "a dangling link":
        run.symlink_to(tmp_path / "nowhere")
    if place == "a FIFO":
        os.mkfifo(run)
    with pytest.raises(TRMError) as refused:
        train(cfg_for(data, run, "max_steps=1"))
    assert str(refused.value).startswith(f"run folder (checkpoint_path) {run}"), refused.value
    assert not (tmp_path / "nowhere").exists() and (tmp_path / "afile").read_text() == "hi"
    assert main(["train", f"data_paths=[{data}]", f"checkpoint_path={run}", *TINY, "max_steps=1"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"error: {refused.value}"


@pytest.mark.parametrize("planted", ["a link", "a folder"])
def test_a_log_refused_mid_run_costs_no_trained_step(sudoku4, tmp_path, planted):
    """metrics.jsonl replaced by a link (or a folder) while a run trained: the next log write was refused and ended
    the run before any state was saved (a Ctrl-C's last log then cost every step since the last state). The steps are saved
    first; the link's target is never written."""
    from trm_kaggle.train import checkpoint as ckpt

    run, outside = tmp_path / "r", tmp_path / "outside.txt"
    outside.write_text("secret")

    def plant(step, record):
        if step == 3:
            (run / "metrics.jsonl").unlink()
            if planted == "a link":
                (run / "metrics.jsonl").symlink_to(outside)
            else:
                (run / "metrics.jsonl").mkdir()

    with pytest.raises((TRMError, OSError)):
        train(cfg_for(sudoku4, run, "max_steps=8", "log_interval=1"), on_step=plant)
    assert ckpt.newest_step(run) == 4 and outside.read_text() == "secret"


def test_a_log_refused_at_an_evaluation_costs_no_trained_step(sudoku4, tmp_path):
    """The same refusal met by an evaluation's record (no interval record due): the run ended before that
    evaluation's state was saved, and every step since the evaluation before was lost."""
    from trm_kaggle.train import checkpoint as ckpt

    run, evaluated = tmp_path / "r", []

    def plant(step, metrics):
        evaluated.append(step)
        if len(evaluated) == 1:
            (run / "metrics.jsonl").unlink()
            (run / "metrics.jsonl").mkdir()

    with pytest.raises((TRMError, OSError)):
        train(cfg_for(sudoku4, run, "max_steps=400", "log_interval=1000", "eval_interval=1"), on_eval=plant)
    assert evaluated and ckpt.newest_step(run) > evaluated[0], (evaluated, ckpt.newest_step(run))


def test_a_resume_says_that_its_load_checkpoint_is_not_loaded(sudoku4, tmp_path, caplog):
    """load_checkpoint gives a run its first weights; a resume trains on from its own state, and said nothing of
    the file it was given."""
    import logging

    first = tmp_path / "first"
    train(cfg_for(sudoku4, first, "max_steps=2"))
    state = ckpt.list_states(first)[-1]
    run = tmp_path / "r"
    train(cfg_for(sudoku4, run, "max_steps=2", f"load_checkpoint={state}"))
    with caplog.at_level(logging.WARNING):
        train(cfg_for(sudoku4, run, "max_steps=3", f"load_checkpoint={state}"))
    said = [r.getMessage() for r in caplog.records if "load_checkpoint" in r.getMessage()]
    assert said == [f"load_checkpoint {state} is not loaded: the run resumes from its own state at step 2"], said


@pytest.mark.parametrize("update, field", [({"seed": 2**70}, "seed"), ({"log_interval": 0}, "log_interval"),
                                           ({"max_steps": "abc"}, "max_steps"), ({"max_steps": -5}, "max_steps"),
                                           ({"lr": float("nan")}, "lr"), ({"data_paths": "/x/s4"}, "data_paths")])
def test_a_config_copied_around_its_validators_is_checked_by_train(sudoku4, tmp_path, update, field):
    """A notebook's `cfg.model_copy(update=...)` skips the config's checks: seed=2**70 reached torch's overflow,
    log_interval=0 a division by zero after the run folder was made, max_steps=-5 a 0-step run that said it ended,
    lr=nan was blamed on the schedule "not the config", and a data_paths string was read letter by letter. train()
    checks the config it is given, naming the setting, before anything is made."""
    cfg = cfg_for(sudoku4, tmp_path / "r", "max_steps=2").model_copy(update=update)
    with pytest.raises(TRMError, match=rf"^TrainConfig: {field}: "):
        train(cfg)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("answer", [float("nan"), "no", 0.0])
def test_an_evaluation_callback_answering_neither_yes_nor_no_is_named_after_a_save(sudoku4, tmp_path, answer):
    """`on_eval` returning NaN or the word "no" stopped a 14-step run at its first evaluation as if it had said True,
    without a word. It returns True to stop, False or None to go on; another answer is named, the state saved."""
    run = tmp_path / "r"
    with pytest.raises(TRMError, match=r"on_eval returned .* at step (\d+): it returns True to stop"):
        train(cfg_for(sudoku4, run, "max_steps=14", "eval_interval=1"), on_eval=lambda step, m: answer)
    assert ckpt.newest_step(run) > 0
    for fine in (None, False):
        assert train(cfg_for(sudoku4, tmp_path / f"ok{fine}", "max_steps=3", "eval_interval=1"),
                     on_eval=lambda step, m: fine).step == 3


def test_numpys_bools_from_an_evaluation_callback_are_answers(sudoku4, tmp_path):
    """`on_eval` returning `np.mean(...) > 0.99` gives numpy's bool, whose type numpy 2 names `bool`: np.False_ ended
    the run with "on_eval returned np.False_ ...: False or None to go on". False goes on, True stops."""
    import numpy as np

    assert train(cfg_for(sudoku4, tmp_path / "no", "max_steps=3", "eval_interval=1"),
                 on_eval=lambda step, m: np.float64(m.get("eval_exact_accuracy", 0.0)) > 2.0).step == 3
    stopped = train(cfg_for(sudoku4, tmp_path / "yes", "max_steps=12", "eval_interval=1"),
                    on_eval=lambda step, m: np.True_)
    assert stopped.stopped_by == "the evaluation callback" and stopped.step < 12


def test_the_dtype_line_is_logged_when_progress_is_off(sudoku4, tmp_path, caplog, capsys):
    """docs/training.md: the run says which dtype it chose and why. With `--no-progress` (progress=False) nothing
    said it, even with -v. It is logged then (INFO: shown with -v), and printed as before with progress on."""
    import logging

    with caplog.at_level(logging.INFO, logger="trm_kaggle"):
        train(cfg_for(sudoku4, tmp_path / "quiet", "max_steps=1"))
    assert "trm-kaggle train: device cpu, torch.float32 (" in caplog.text
    assert "trm-kaggle train: device" not in capsys.readouterr().err


def test_the_closing_rate_is_the_last_records(sudoku4, tmp_path, monkeypatch):
    """The closing line said 11.9 examples/s where the last record (at the same, final step) said 12.07: the rate was
    taken after the final save (here made to take a second). It is the last record's rate now."""
    import time

    import trm_kaggle.train.loop as loop

    real_save = loop._save
    monkeypatch.setattr(loop, "_save", lambda run, control: (time.sleep(1.0), real_save(run, control)))
    run = tmp_path / "r"
    result = train(cfg_for(sudoku4, run, "max_steps=6", "log_interval=6"))
    last = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()][-1]
    assert last["step"] == result.step == 6
    assert result.examples_per_second == last["examples_per_s"], (result.examples_per_second, last["examples_per_s"])


def test_a_resumed_run_whose_time_fits_no_step_shows_no_rate(sudoku4, tmp_path):
    """A continued run whose budget fit no new step said "at 0.0 examples/s" (the pipeline's line and summary), a
    rate nothing measured."""
    run = tmp_path / "r"
    train(cfg_for(sudoku4, run, "max_steps=2"))
    result = train(cfg_for(sudoku4, run, "max_steps=4", "time_limit=0.000001"))
    assert result.new_steps == 0 and result.step == 2
    line = next(ln for ln in result.summary_lines() if ln.startswith("trained"))
    assert "no rate measured" in line and "examples/s" not in line, line


def test_the_schedules_last_step_ends_its_last_interval(sudoku4, tmp_path, caplog):
    """epochs=3 eval_interval=1 on 6.25 steps an epoch: the schedule is 18 steps, the third interval ended at
    step 19, so the final weights were never evaluated and the summary showed step 13's score (here 40 puzzles in
    batches of 7: 17 steps, the third interval at 18). An eval_interval longer than the run's epochs evaluated
    nothing, without a word."""
    import logging

    result = train(cfg_for(sudoku4, tmp_path / "r", "epochs=3", "eval_interval=1", "global_batch_size=7"))
    records = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    evals = [r["step"] for r in records if "eval_exact_accuracy" in r]
    assert len(evals) == 3 and evals[-1] == result.step, (evals, result.step)
    with caplog.at_level(logging.WARNING, logger="trm_kaggle"):
        train(cfg_for(sudoku4, tmp_path / "never", "epochs=3", "eval_interval=7", "max_steps=2"))
    said = [r.getMessage() for r in caplog.records if "never evaluated" in r.getMessage()]
    assert len(said) == 1 and "eval_interval=7 with epochs=3" in said[0], said


def test_a_max_steps_stop_that_misses_the_evaluations_is_said(sudoku4, tmp_path, caplog):
    """max_steps=6 with eval_interval=1 (0.96 epochs) stopped the run before its first evaluation, and max_steps=14
    (2.24 epochs) after its last (step 13): nothing said either time. max_steps only stops the schedule early, so
    each is a warning at the start, and the closing lines say the test split went unevaluated; a stop that
    evaluates, a max_steps past the schedule's end and the schedule's own warning say nothing more. With
    eval_interval=null (one evaluation, at the schedule's end: cpu-smoke's max_steps stops before it by design) it is
    the closing line alone. Here 5 steps an epoch: evaluations at steps 5, 10 and 15 (the schedule's end)."""
    import logging

    def said(run: str, *extra: str) -> tuple[list[str], list[str]]:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="trm_kaggle"):
            result = train(cfg_for(sudoku4, tmp_path / run, "epochs=3", "eval_interval=1", *extra))
        return ([r.getMessage() for r in caplog.records if "max_steps=" in r.getMessage()],
                [line for line in result.summary_lines() if line.startswith("test split")])

    first, closing = said("early", "max_steps=3")
    text = ("not evaluated: max_steps=3 stops the run at step 3 (epoch 0.60), before its first evaluation, at step "
            "5: max_steps=5 ends on one; `trm-kaggle evaluate` scores an export of the run")
    assert first == [f"the test split is {text}"] and closing == [f"test split: {text}"], (first, closing)
    assert not [r for r in map(json.loads, (tmp_path / "early" / "metrics.jsonl").read_text().splitlines())
                if "eval_examples" in r]
    assert said("early", "max_steps=4")[0] == [  # resumed: the same rule on the steps left
        "the test split is not evaluated: max_steps=4 stops the run at step 4 (epoch 0.80), before its next "
        "evaluation, at step 5: max_steps=5 ends on one; `trm-kaggle evaluate` scores an export of the run"]
    last, closing = said("early", "max_steps=7")
    assert len(last) == 1 and last[0].startswith(
        "max_steps=7 stops the run at step 7, which does not evaluate: the final weights are not evaluated (the "
        "last evaluation is at step 5; max_steps=10 ends on one;"), last
    assert closing[0].startswith("test split: exact accuracy"), closing  # step 5's evaluation, this call's
    assert said("late", "max_steps=10")[0] == []  # the stop evaluates
    assert said("beyond", "max_steps=100")[0] == []  # the schedule's end evaluates
    never = said("never", "eval_interval=7", "max_steps=2")  # the schedule's own warning alone
    assert never == ([], []) and "eval_interval=7 with epochs=3" in caplog.text
    null, closing = said("null", "eval_interval=null", "max_steps=2")
    assert null == [] and closing == [
        "test split: not evaluated: max_steps=2 stops the run at step 2 (epoch 0.40), before its first evaluation, "
        "at step 15 (the schedule's end): an eval_interval (epochs) evaluates sooner; `trm-kaggle evaluate` scores "
        "an export of the run"], closing


@pytest.fixture(scope="module")
def one_step_run(sudoku4, tmp_path_factory) -> Path:
    """A run of one step (its train state) and its export, `<run>/../export`, made once per module."""
    run = tmp_path_factory.mktemp("one_step") / "run"
    train(cfg_for(sudoku4, run, "max_steps=1"))
    ckpt.export_run(run, run.parent / "export")
    return run


def _blank_model(sudoku4: Path):
    from trm_kaggle.model import TinyRecursiveModel

    meta = load_metadata(sudoku4, "train")
    torch.manual_seed(99)
    return TinyRecursiveModel(cfg_for(sudoku4, Path("unused")).arch, meta.seq_len, meta.vocab_size,
                              meta.num_puzzle_identifiers)


def test_load_checkpoint_takes_a_train_state_by_what_it_holds_whatever_its_name(sudoku4, one_step_run, tmp_path):
    """A train state renamed (mystate.pt) was 'not an upstream TRM checkpoint: unexpected keys format, version,
    step, ...': the file's name, not its content, chose the reader."""
    from trm_kaggle.train.state import load_initial_weights

    renamed = tmp_path / "mystate.pt"
    renamed.write_bytes(ckpt.list_states(one_step_run)[-1].read_bytes())
    model = _blank_model(sudoku4)
    load_initial_weights(model, str(renamed))
    saved = ckpt.load_train_state(renamed)["model"]
    assert all(torch.equal(v, saved[k]) for k, v in model.state_dict().items())


def test_load_checkpoint_given_an_exports_weights_file_loads_that_export(sudoku4, one_step_run, tmp_path):
    """An export's weights.safetensors named as the file was 'not a readable PyTorch checkpoint (truncated or
    foreign file?)'; a safetensors file in no export says what load_checkpoint takes."""
    from trm_kaggle.train.state import load_initial_weights

    export = one_step_run.parent / "export"
    model = _blank_model(sudoku4)
    load_initial_weights(model, str(export / "weights.safetensors"))
    _, saved = read_export(export)
    assert all(torch.equal(v, saved[k]) for k, v in model.state_dict().items())
    for lone in (tmp_path / "weights.safetensors", tmp_path / "w.safetensors"):
        lone.write_bytes((export / "weights.safetensors").read_bytes())
        if lone.name == "w.safetensors":  # beside a config.json that describes another file
            (tmp_path / "config.json").write_bytes((export / "config.json").read_bytes())
        with pytest.raises(TRMError, match=re.escape(f"{lone}: a safetensors file that is no export's "
                                                     "weights.safetensors beside its config.json: load_checkpoint "
                                                     "takes an export's folder")):
            load_initial_weights(_blank_model(sudoku4), str(lone))


def test_a_training_run_given_as_an_export_points_to_trm_kaggle_export(sudoku4, one_step_run, tmp_path, capsys):
    """`evaluate --weights RUN_DIR` said `RUN_DIR/config.json: not a trm-kaggle inference config`: true, but not
    what the folder is nor how to make an export of it. A run folder whose states are gone is told by its
    config.json (the run's settings)."""
    settings_only = tmp_path / "settings_only"
    settings_only.mkdir()
    (settings_only / "config.json").write_bytes((one_step_run / "config.json").read_bytes())
    for run in (one_step_run, settings_only):
        assert main(["evaluate", "--weights", str(run), "--data", str(sudoku4)]) == 2
        err = capsys.readouterr().err
        assert err == (f"error: {run}: a training run's folder, not an export (its config.json holds the run's "
                       f"settings): write one with `trm-kaggle export {run} --out EXPORT_DIR` and name that "
                       "folder\n"), err
    (settings_only / "config.json").write_text("{}")  # no run's settings: said as before
    assert main(["evaluate", "--weights", str(settings_only), "--data", str(sudoku4)]) == 2
    assert capsys.readouterr().err == f"error: {settings_only / 'config.json'}: not a trm-kaggle inference config\n"


def test_a_runs_torch_settings_end_with_it(sudoku4, tmp_path):
    """`deterministic=True` and `threads` are torch's settings for the whole process: they stayed set after train()
    returned, so a second run of the process that asked for deterministic=False ran deterministic, and so did the
    caller's own torch code. Each run has its own while it trains, and the caller's are back when it ends, whether
    it trained to its end or failed."""
    from trm_kaggle.train.step import StepRules

    kept = torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()
    seen = []

    def watch(step, metrics):
        seen.append((torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()))

    def failing(*args):
        watch(0, {})
        return None

    try:
        torch.use_deterministic_algorithms(False)
        torch.set_num_threads(2)  # the caller's own (TINY trains with threads=1)
        train(cfg_for(sudoku4, tmp_path / "a", "max_steps=1"), on_step=watch)
        assert (torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()) == (False, 2)
        train(cfg_for(sudoku4, tmp_path / "b", "max_steps=1", "deterministic=False"), on_step=watch)
        with pytest.raises(TRMError, match="StepRules.schedule at step 1"):
            train(cfg_for(sudoku4, tmp_path / "c", "max_steps=1"), rules=StepRules(schedule=failing))
        assert seen == [(True, 1), (False, 1), (True, 1)], seen
        assert (torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()) == (False, 2)
    finally:
        torch.use_deterministic_algorithms(kept[0])
        torch.set_num_threads(kept[1])


@pytest.mark.parametrize("change, said", [({"position": 10**12}, "position 1000000000000 is outside 0..40"),
                                          ({"epoch": 10**9, "step": 10**9}, "epoch 1000000000 is outside 0..")])
def test_a_data_position_no_stream_reaches_is_refused_on_resume(sudoku4, tmp_path, change, said):
    """A train state's data position, edited and signed again, was clipped to the dataset (or taken as it was)
    without a word, and the resume trained on another stream. It is refused as another field that does not fit."""
    from trm_kaggle.model import content_digest

    run = tmp_path / "r"
    train(cfg_for(sudoku4, run, "max_steps=2"))
    path = ckpt.state_path(run, 2)
    state = torch.load(path, map_location="cpu", weights_only=True)
    state.pop("sha256")
    state["loader"] = json.dumps({**json.loads(state["loader"]), **change})
    state["sha256"] = content_digest(state)
    torch.save(state, path)
    with pytest.raises(TRMError) as e:
        train(cfg_for(sudoku4, run, "max_steps=4"))
    assert str(e.value).startswith(f"{path}: field 'loader' does not fit this run: cannot resume the data stream "
                                   f"exactly: the saved state's {said}"), str(e.value)
    assert ckpt.list_states(run) == [path]


def test_an_answer_from_on_step_is_said_once_not_read(sudoku4, tmp_path, caplog):
    """`on_step` returning True (a caller expecting a stop) was ignored without a word: the run trained to its end.
    What it returns is still not read, and a warning says so once."""
    import logging

    with caplog.at_level(logging.WARNING, logger="trm_kaggle"):
        assert train(cfg_for(sudoku4, tmp_path / "r", "max_steps=3"), on_step=lambda step, m: True).step == 3
    said = [r.getMessage() for r in caplog.records if "on_step" in r.getMessage()]
    assert said == ["on_step returned a value at step 1: it is not read (on_step only watches; on_eval's True, a "
                    "deadline or time_limit stop a run)"], said
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="trm_kaggle"):
        train(cfg_for(sudoku4, tmp_path / "quiet", "max_steps=2"), on_step=lambda step, m: None)
    assert "on_step" not in caplog.text
