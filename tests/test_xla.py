"""PyTorch/XLA (trm_kaggle/xla.py): device=xla training, resume across devices, inference.

The XLA tests run wherever torch_xla imports, on PJRT's CPU client (PJRT_DEVICE=CPU), and are
skipped elsewhere with the reason "torch_xla is not installed". torch_xla needs its own torch
(2.9.0 with torch_xla 2.9.0): `scripts/check_xla.sh` builds that environment in a cache
directory and runs this file there. The first tests need no torch_xla and run everywhere.

Stated tolerance: an XLA run's losses equal the CPU eager run's within 1e-5 (absolute), its weights
within 1e-5 (absolute, float32), its q_halt logits within 1e-5 (relative); the runs are not
bit-identical because XLA fuses and reorders float32 arithmetic.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from integrity_helpers import build_sudoku4
from trm_kaggle import xla
from trm_kaggle.cli import main
from trm_kaggle.errors import TRMError
from trm_kaggle.hardware import pick_device
from trm_kaggle.train import checkpoint as ckpt
from trm_kaggle.train.loop import train
from trm_kaggle.train.metrics import read_metrics
from trm_kaggle.train.settings import load_train_config

needs_xla = pytest.mark.skipif(not xla.installed(), reason="torch_xla is not installed")
TOL = 1e-5

TINY = ["arch.hidden_size=32", "arch.num_heads=2", "arch.expansion=2", "arch.H_cycles=2", "arch.L_cycles=2",
        "arch.L_layers=1", "arch.halt_max_steps=3", "arch.puzzle_emb_len=2", "arch.forward_dtype=float32",
        "global_batch_size=8", "lr=3e-3", "lr_warmup_steps=2", "puzzle_emb_lr=1e-2", "eval_interval=1",
        "log_interval=1", "progress=False", "deterministic=True", "seed=3", "ema=True"]


# ---------------------------------------------------------------------------
# Without torch_xla
# ---------------------------------------------------------------------------


def test_auto_picks_xla_only_when_installed_and_requested(monkeypatch):
    sentinel = torch.device("meta")
    monkeypatch.setattr(xla, "device", lambda: sentinel)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("PJRT_DEVICE", "TPU")
    monkeypatch.setattr(xla, "installed", lambda: False)
    assert pick_device("auto").type == "cpu"  # PJRT_DEVICE alone: no torch_xla, no XLA
    monkeypatch.setattr(xla, "installed", lambda: True)
    assert pick_device("auto") is sentinel
    assert pick_device("xla") is sentinel
    monkeypatch.delenv("PJRT_DEVICE")
    assert pick_device("auto").type == "cpu"  # torch_xla installed but not asked for


@pytest.mark.skipif(xla.installed(), reason="torch_xla is installed")
@pytest.mark.parametrize("helper, args", [
    ("device_kind", ()), ("replica", ()), ("local_devices", ()), ("wait", ()), ("compile_stats", ()),
    ("all_reduce_", ([torch.zeros(1)],)), ("all_gather_rows", (torch.zeros(1),)),
    ("gather_to_cpu", ([torch.zeros(1)], 1)), ("device", ()), ("step_boundary", ()),
])
def test_every_helper_without_torch_xla_says_the_same_line(helper, args):
    """device() said what to install; device_kind(), replica() and six more raised a bare ModuleNotFoundError."""
    with pytest.raises(TRMError, match="^device=xla needs torch_xla"):
        getattr(xla, helper)(*args)


@pytest.mark.skipif(xla.installed(), reason="torch_xla is installed")
def test_device_xla_without_torch_xla_is_one_clear_line(tmp_path, capsys):
    assert main(["train", "device=xla", "data_paths=[x]", f"checkpoint_path={tmp_path / 'r'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: device=xla needs torch_xla") and "Traceback" not in err


def test_launch_refuses_thread_replicas_on_a_cpu_host(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    monkeypatch.setenv("CPU_NUM_DEVICES", "2")
    with pytest.raises(TRMError, match="torchrun --nproc-per-node N"):
        xla.launch(print)
    assert main(["train", "--xla-launch", "device=cpu", "data_paths=[x]"]) == 2
    assert "--xla-launch starts XLA replicas, but the config says device=cpu" in capsys.readouterr().err


def test_compile_watch_warns_only_after_the_warm_up(monkeypatch, caplog):
    compiles = iter([0, 2, 2, 3, 3, 3, 3, 3, 3, 5])  # (begin, end) per step: +2, +1, +0, +0, +2
    monkeypatch.setattr(xla, "compile_stats", lambda: (next(compiles), 1.5, 0.5))
    monkeypatch.setattr(xla, "step_boundary", lambda: None)
    watch = xla.CompileWatch(warmup=2)
    for step in range(1, 6):
        watch.begin_step()
        watch.end_step(step)
    # step 2's compilation is inside the warm-up; step 5's two are recompilations
    assert watch.recompiles == 2
    assert [r.message.split(" in step ")[1][:1] for r in caplog.records] == ["5"]
    assert "after the 2 warm-up steps" in caplog.records[0].message


# ---------------------------------------------------------------------------
# With torch_xla (PJRT's CPU client)
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def xla_device():
    if not xla.installed():
        pytest.skip("torch_xla is not installed")
    os.environ.setdefault("PJRT_DEVICE", "CPU")  # before the XLA runtime starts in this process
    return xla.device()


@pytest.fixture(scope="module")
def sudoku4(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("data") / "sudoku4"
    return build_sudoku4(out)


def cfg_for(data: Path, run: Path, *extra: str):
    return load_train_config(overrides=[f"data_paths=[{data}]", f"checkpoint_path={run}", *TINY, *extra])


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "CPU_NUM_DEVICES"}
    return {**env, "PJRT_DEVICE": "CPU", "OMP_NUM_THREADS": "1"}


def xla_train(data: Path, run: Path, *extra: str, replicas: int = 1) -> subprocess.CompletedProcess:
    """`trm-kaggle train device=xla` in a fresh process (one XLA runtime per process); with
    replicas > 1 under torchrun (on a CPU host gloo carries the collectives)."""
    args = ["-m", "trm_kaggle", "train", f"data_paths=[{data}]", f"checkpoint_path={run}", *TINY, "device=xla",
            *extra]
    if replicas > 1:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        args = ["-m", "torch.distributed.run", "--nproc-per-node", str(replicas), "--master-port", str(port), *args]
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=_env(), timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def losses(run: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_metrics(run)[0]}


def last_state(run: Path) -> dict:
    return ckpt.load_train_state(ckpt.list_states(run)[-1])


def assert_close_states(a: dict, b: dict) -> None:
    for part in ("model", "ema"):
        for k in a[part]:
            assert a[part][k].device.type == b[part][k].device.type == "cpu"
            assert torch.allclose(a[part][k], b[part][k], rtol=0, atol=TOL), (part, k)


def assert_close_losses(a: dict[int, float], b: dict[int, float], steps) -> None:
    for s in steps:
        assert abs(a[s] - b[s]) <= TOL, (s, a[s], b[s])


@pytest.fixture(scope="module")
def runs(xla_device, sudoku4, tmp_path_factory) -> dict[str, Path]:
    """The CPU eager reference (12 steps; an epoch is 5 steps, so evaluations and checkpoints at steps
    5 and 10) and the XLA run (10 steps, one replica) every test below compares against."""
    root = tmp_path_factory.mktemp("runs")
    train(cfg_for(sudoku4, root / "cpu", "device=cpu", "threads=1", "max_steps=12"))
    xla_train(sudoku4, root / "xla", "max_steps=10")
    return {"cpu": root / "cpu", "xla": root / "xla", "root": root}


def test_xla_losses_equal_cpu_eager_and_compile_once(runs):
    cpu, xl = losses(runs["cpu"]), losses(runs["xla"])
    assert sorted(xl) == list(range(1, 11))
    assert_close_losses(cpu, xl, range(1, 11))
    # no recompilation after step 3: no training step after it compiled, and the count of compilations
    # stays put from step 3 on, except for the first evaluation (step 5, one epoch), whose graphs the
    # second one (step 10) reuses
    train_records, eval_records = read_metrics(runs["xla"])
    counts = {r["step"]: r["xla_compiles"] for r in train_records}
    assert train_records[-1]["xla_recompiles"] == 0
    assert counts[3] == counts[4] == counts[5] > 0 and all(counts[s] == counts[6] for s in range(6, 11)), counts
    assert [r["step"] for r in eval_records] == [5, 10]
    assert eval_records[0]["xla_compiles"] == counts[6] and eval_records[1]["xla_compiles"] == counts[10]
    assert train_records[-1]["xla_compile_s"] > 0 and train_records[-1]["xla_execute_s"] > 0
    # the evaluations (the test split on the device, EMA weights) agree with CPU's
    for cpu_eval, xla_eval in zip(read_metrics(runs["cpu"])[1], eval_records, strict=True):
        assert cpu_eval["step"] == xla_eval["step"] and cpu_eval["eval_examples"] == xla_eval["eval_examples"]
        for k in ("eval_exact_accuracy", "eval_token_accuracy", "eval_steps"):
            assert abs(cpu_eval[k] - xla_eval[k]) <= TOL, k


def test_two_replicas_equal_one_replica(runs, sudoku4):
    two = runs["root"] / "xla2"
    xla_train(sudoku4, two, "max_steps=10", replicas=2)
    assert_close_losses(losses(runs["xla"]), losses(two), range(1, 11))
    state = last_state(two)
    assert state["world_size"] == 2 and len(state["carries"]) == 2  # rank 0 saved every replica's ACT carry
    assert_close_states(last_state(runs["xla"]), state)
    assert read_metrics(two)[0][-1]["xla_recompiles"] == 0


def test_a_tpu_state_resumes_on_cpu_and_a_cpu_state_on_xla(runs, sudoku4):
    cpu_state = None
    # XLA -> CPU: the XLA run's state at step 10 continues on the CPU to step 12
    to_cpu = runs["root"] / "to_cpu"
    shutil.copytree(runs["xla"], to_cpu)
    train(cfg_for(sudoku4, to_cpu, "device=cpu", "threads=1", "max_steps=12"))
    assert_close_losses(losses(runs["cpu"]), losses(to_cpu), range(1, 13))
    cpu_state = last_state(runs["cpu"])
    assert_close_states(cpu_state, last_state(to_cpu))
    # CPU -> XLA: a CPU state at step 6 continues on XLA to step 12
    to_xla = runs["root"] / "to_xla"
    train(cfg_for(sudoku4, to_xla, "device=cpu", "threads=1", "max_steps=6"))
    done = xla_train(sudoku4, to_xla, "max_steps=12")
    assert "resuming" in done.stderr
    assert_close_losses(losses(runs["cpu"]), losses(to_xla), range(1, 13))
    assert_close_states(cpu_state, last_state(to_xla))


def test_inference_on_xla_equals_cpu_with_one_program_per_shape(xla_device, sudoku4, runs):
    """predict_split (evaluate/submit's model part): the padded last batch and masked early exit give
    CPU's predictions; a second pass over the split compiles nothing new."""
    from trm_kaggle.evaluate.predict import predict_split
    from trm_kaggle.model.export import model_from_train_state

    model, _, _ = model_from_train_state(last_state(runs["xla"]), use_ema=True)
    with torch.no_grad():  # a q head whose sign differs from row to row, so early exit stops some rows early
        model.q_head.weight.normal_(0.0, 10.0, generator=torch.Generator().manual_seed(0))
        first = predict_split(model, sudoku4, batch_size=3, device="cpu", max_steps=1).q_halt
        model.q_head.bias[0] -= float(np.median(first))
    for early_exit in (False, True):
        cpu = predict_split(model, sudoku4, batch_size=3, device="cpu", early_exit=early_exit)
        on_xla = predict_split(model.to(xla_device), sudoku4, batch_size=3, early_exit=early_exit)
        compiles = xla.compile_stats()[0]
        again = predict_split(model, sudoku4, batch_size=3, early_exit=early_exit)
        model.to("cpu")
        assert xla.compile_stats()[0] == compiles
        assert (cpu.tokens == on_xla.tokens).all() and (cpu.steps == on_xla.steps).all()
        assert (again.tokens == on_xla.tokens).all()
        assert np.allclose(cpu.q_halt, on_xla.q_halt, rtol=TOL, atol=TOL)  # logits of ~30 here: relative
    assert cpu.steps.min() < 3 and cpu.steps.max() == 3  # early exit stopped some rows, not all


def test_collectives_of_a_single_replica(xla_device):
    """The in-graph collectives (the TPU path; more than one replica cannot run on PJRT's CPU client)
    with one replica: shapes, dtypes and the bool round trip of gather_to_cpu."""
    t = torch.arange(6.0).view(2, 3).to(xla_device)
    flags = torch.tensor([True, False]).to(xla_device)
    xla.all_reduce_([t])
    xla.broadcast_([t], rank=0)
    (got_t, got_flags), = xla.gather_to_cpu([t, flags], world=1)
    assert torch.equal(got_t, torch.arange(6.0).view(2, 3)) and torch.equal(got_flags, torch.tensor([True, False]))
    assert xla.all_gather_rows(t).shape == (2, 3)


def test_submit_on_xla_writes_cpus_submission(xla_device, tmp_path):
    """`trm-kaggle submit --device xla`: dataset, fine-tuning (train on XLA), inference and voting give
    the submission the CPU gives."""
    from conftest import random_task

    from trm_kaggle.config import ArchConfig, SolveConfig
    from trm_kaggle.model.export import export_inference
    from trm_kaggle.model.trm import TinyRecursiveModel
    from trm_kaggle.solve import solve

    rng = np.random.default_rng(0)
    challenges = tmp_path / "challenges.json"
    challenges.write_text(json.dumps({f"t{i:03d}": random_task(rng, max_side=5)[0] for i in range(2)}))
    arch = ArchConfig(hidden_size=32, num_heads=2, expansion=2, H_cycles=1, L_cycles=1, L_layers=1, halt_max_steps=2,
                      puzzle_emb_len=1, forward_dtype="float32")
    torch.manual_seed(0)
    export_inference(tmp_path / "weights", TinyRecursiveModel(arch, 900, 12, 10), arch=arch, seq_len=900,
                     vocab_size=12, mean_embedding=True)
    reports = {}
    for device in ("cpu", "xla"):
        reports[device] = solve(SolveConfig(
            challenges=str(challenges), weights=str(tmp_path / "weights"), output=str(tmp_path / f"{device}.json"),
            work_dir=str(tmp_path / f"work_{device}"), num_aug=2, finetune_steps=3, global_batch_size=8,
            eval_batch_size=16, device=device, progress=False, safety_margin=0.0))
    assert reports["xla"]["valid"] and reports["xla"]["errors"] == [] and reports["xla"]["answered"] == 2
    assert (tmp_path / "xla.json").read_text() == (tmp_path / "cpu.json").read_text()
    for task, on_xla in reports["xla"]["task_reports"].items():  # fine-tuned per task, on XLA as on the CPU
        on_cpu = reports["cpu"]["task_reports"][task]
        assert on_xla["finetune_steps"] == on_cpu["finetune_steps"] == 3
        assert on_xla["after_finetune"] == pytest.approx(on_cpu["after_finetune"], abs=TOL)
