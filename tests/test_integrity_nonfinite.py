"""NaN and inf are caught where they arise: a diverging training run skips non-finite steps and then stops with
one line and a non-zero exit; export, the bundle, evaluate and submit refuse non-finite weights naming the file
and the tensor."""

from __future__ import annotations

import json
import math

import pytest
import torch

from integrity_helpers import train_args
from cli_helpers import one_error_line
from trm_kaggle.cli import main
from trm_kaggle.model.digest import content_digest
from trm_kaggle.model.finite import NonFiniteSteps, NonFiniteTraining, check_finite
from trm_kaggle.errors import TRMError
from trm_kaggle.train import checkpoint as ckpt


@pytest.fixture(scope="module")
def export(data, tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    assert main(train_args(data, root / "run", "max_steps=2")) == 0
    assert main(["export", str(root / "run"), "--out", str(root / "w")]) == 0
    return root / "w"


@pytest.mark.parametrize("setting", ["lr=1e30", "puzzle_emb_lr=1e30", "lr=1e29"])
def test_a_diverging_run_stops_with_one_line_and_a_non_zero_exit(data, tmp_path, capsys, setting):
    run = tmp_path / "run"
    code = main(train_args(data, run, "max_steps=40", "lr_warmup_steps=0", "max_nonfinite_steps=3", setting))
    line = one_error_line(capsys)
    assert code == 1 and "training diverged" in line and "max_nonfinite_steps=3" in line, line
    assert "lower lr" in line
    # no state with non-finite weights was written, and nothing logged a NaN loss
    for path in ckpt.list_states(run):
        state = ckpt.load_train_state(path)
        assert all(torch.isfinite(t).all() for t in state["model"].values() if t.is_floating_point())
    if (run / "metrics.jsonl").exists():
        for record in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()):
            assert math.isfinite(record.get("loss", 0.0)), record


@pytest.mark.parametrize("settings, named", [
    (["weight_decay=1e30", "lr=1e-10", "puzzle_emb_lr=1e-10"], "weight_decay=1e+30 is far above its usual size"),
    (["optimizer=muon", "muon_lr=1e30", "lr=1e-10"], "muon_lr=1e+30 is far above its usual size"),
])
def test_a_run_diverged_by_another_setting_than_lr_names_it(data, tmp_path, capsys, settings, named):
    """A weight decay of 1e30 (or muon_lr 1e30) diverged with lr at 1e-10, and the line only said to lower lr."""
    code = main(train_args(data, tmp_path / "run", "max_steps=20", "lr_warmup_steps=0", "max_nonfinite_steps=2",
                           *settings))
    line = one_error_line(capsys)
    assert code == 1 and "training diverged" in line and named in line and "lower it first" in line, line



def test_isolated_non_finite_steps_are_skipped_and_the_count_resets():
    steps = NonFiniteSteps(limit=3)
    assert [steps.skip(ok, i) for i, ok in enumerate([True, False, False, True, False, False, True])] == \
        [False, True, True, False, True, True, False]
    with pytest.raises(NonFiniteTraining, match="3 step.s. in a row, up to step 3"):
        for i in range(3):
            steps.skip(False, i)


@pytest.mark.parametrize("setting", ["max_nonfinite_steps=0", "max_nonfinite_steps=-1", "max_nonfinite_steps=nan"])
def test_the_bound_is_a_checked_setting(setting, capsys):
    assert main(["train", "--print-config", setting]) == 2
    assert "max_nonfinite_steps" in one_error_line(capsys)


def test_a_state_with_nan_weights_is_never_written(data, tmp_path):
    run = tmp_path / "run"
    assert main(train_args(data, run, "max_steps=2")) == 0
    state = ckpt.load_train_state(ckpt.list_states(run)[-1])
    name = next(k for k, v in state["model"].items() if v.is_floating_point() and v.numel() > 1)
    state["model"][name][0] = float("inf")
    with pytest.raises(NonFiniteTraining, match=f"state_step00000009.pt \\(not written\\): tensor {name} "):
        ckpt.save_train_state(run, 9, {k: v for k, v in state.items() if k not in ("format", "version", "step")}, 3)
    assert [p.name for p in ckpt.list_states(run)] == ["state_step00000002.pt"]


def poisoned_state(run, value: float) -> str:
    """Put `value` into a weight of the run's newest state, rewritten with a valid checksum; returns its name."""
    path = ckpt.list_states(run)[-1]
    state = torch.load(path, weights_only=True)
    del state["sha256"]
    name = next(k for k, v in state["model"].items() if v.is_floating_point() and v.numel() > 1)
    state["model"][name].view(-1)[3] = value
    if state.get("ema"):
        state["ema"][name].view(-1)[3] = value
    state["sha256"] = content_digest(state)
    torch.save(state, path)
    return name


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_export_refuses_a_state_with_non_finite_weights(data, tmp_path, capsys, value):
    run = tmp_path / "run"
    assert main(train_args(data, run, "max_steps=2")) == 0
    name = poisoned_state(run, value)
    capsys.readouterr()
    assert main(["export", str(run), "--out", str(tmp_path / "w")]) == 2
    line = one_error_line(capsys)
    # a run saves no NaN or inf (its save refuses them): such a state is damaged, named with the tensor
    assert f"field 'model' tensor {name} holds 1 non-finite value" in line, line
    assert not (tmp_path / "w").exists()


def poisoned_export(export, out, value: float) -> str:
    """A copy of `export` whose weights hold `value` once (with a matching checksum, as a diverged run would
    have written it before exports were checked)."""
    import shutil

    from safetensors import safe_open
    from safetensors.torch import save_file

    shutil.copytree(export, out)
    with safe_open(str(out / "weights.safetensors"), framework="pt") as f:
        meta, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    name = sorted(k for k, v in tensors.items() if v.numel() > 1)[-1]
    tensors[name].view(-1)[0] = value
    meta["sha256"] = content_digest(tensors)
    save_file(tensors, str(out / "weights.safetensors"), metadata=meta)
    return name


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
@pytest.mark.parametrize("command", ["evaluate", "submit", "bundle"])
def test_non_finite_weights_are_refused_by_name(data, export, tmp_path, capsys, value, command):
    bad = tmp_path / "bad"
    if command == "submit":  # an ARC model: a Sudoku one is refused as such before its tensors are read
        from conftest import make_export

        export = make_export(tmp_path / "arc-export")
    name = poisoned_export(export, bad, value)
    challenges = tmp_path / "c.json"
    challenges.write_text(json.dumps({"00000001": {"train": [{"input": [[1]], "output": [[1]]}],
                                                   "test": [{"input": [[1]]}]}}))
    capsys.readouterr()
    if command == "evaluate":
        code = main(["evaluate", "--weights", str(bad), "--data", str(data), "--device", "cpu"])
    elif command == "submit":
        code = main(["submit", "--challenges", str(challenges), "--weights", str(bad), "--output",
                     str(tmp_path / "s.json"), "--work-dir", str(tmp_path / "work"), "--num-aug", "1",
                     "--finetune-steps", "0", "--device", "cpu", "--no-progress"])
    else:
        code = main(["bundle", str(tmp_path / "bundle"), "--weights", str(bad), "--no-download"])
    out, err = capsys.readouterr()
    assert f"{bad / 'weights.safetensors'}: tensor {name} holds 1 non-finite value" in err, err
    if command == "submit":  # the kernel's rule: the valid fallback stays the answer, the model answered nothing
        assert "0 answered by the model" in out, out
        assert json.loads((tmp_path / "s.json").read_text())["00000001"][0]["attempt_1"] == [[1]]
    else:
        assert code == 2, err
    if command == "bundle":
        assert not (tmp_path / "bundle").exists()


def test_check_finite_names_the_first_bad_tensor_and_ignores_integer_tensors():
    check_finite({"a": torch.ones(3), "ids": torch.arange(3)}, "f")
    with pytest.raises(TRMError, match="^f: tensor b holds 2 non-finite values \\(NaN or inf\\) of 4"):
        check_finite({"a": torch.ones(3), "b": torch.tensor([1.0, float("nan"), float("inf"), 0.0])}, "f")
    with pytest.raises(TRMError, match="tensor h holds 1 non-finite value "):
        check_finite({"h": torch.tensor([float("inf")], dtype=torch.bfloat16)}, "f")


def test_an_isolated_non_finite_step_is_skipped_and_training_goes_on(data, tmp_path, monkeypatch, caplog):
    import logging

    from trm_kaggle.train import step

    real, calls = step.accumulate, []

    def one_nan_gradient(forward, model, *args):
        out = real(forward, model, *args)
        calls.append(1)
        if len(calls) == 2:  # the second step's gradients get a NaN
            next(p for p in model.parameters() if p.grad is not None).grad.view(-1)[0] = float("nan")
        return out

    monkeypatch.setattr(step, "accumulate", one_nan_gradient)
    caplog.set_level(logging.WARNING)
    run = tmp_path / "run"
    assert main(train_args(data, run, "max_steps=4", "ema=True")) == 0
    assert "step 2: the loss or the gradients are not finite; step skipped (1 in a row" in caplog.text
    assert len(calls) == 5  # four optimizer steps took five attempts
    assert [r["step"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())] == [1, 2, 3, 4]
    state = ckpt.load_train_state(ckpt.list_states(run)[-1])
    for group in ("model", "ema"):
        assert all(torch.isfinite(t).all() for t in state[group].values() if t.is_floating_point()), group


def test_build_bundle_py_refuses_to_ship_non_finite_weights(export, tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    bad = tmp_path / "bad"
    name = poisoned_export(export, bad, float("nan"))
    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(repo / "build_bundle.py"), str(tmp_path / "bundle"), "--weights",
                           str(bad), "--no-download"], capture_output=True, text=True, timeout=300)
    err = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(err) == 1, done.stderr[-2000:]
    assert f"tensor {name} holds 1 non-finite value" in err[0] and str(bad / "weights.safetensors") in err[0]
    assert not (tmp_path / "bundle").exists()
