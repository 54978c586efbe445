"""The training step's seams: the non-finite policy chosen at setup, StepRules (what a recipe changes), and
when the loop evaluates (eval_interval, min_eval_interval as upstream's)."""

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from test_train import cfg_for, sudoku4  # noqa: F401 (the 40-puzzle dataset: 5 steps an epoch)
from trm_kaggle.model.finite import NonFiniteSteps, NonFiniteTraining
from trm_kaggle.model.losses import act_loss
from trm_kaggle.train import nonfinite
from trm_kaggle.train.amp import LossScaler
from trm_kaggle.train.loop import train
from trm_kaggle.train.runtime import Runtime
from trm_kaggle.train.schedules import schedule_at
from trm_kaggle.train.state import TrainState
from trm_kaggle.train import checkpoint as ckpt
from trm_kaggle.train.step import StepRules, configure_model


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _state(dtype=torch.float32, device="cpu") -> TrainState:
    model = torch.nn.Linear(2, 2)
    dense = torch.optim.SGD(model.parameters(), lr=0.1)
    return TrainState(model, dense, None, None, LossScaler(dtype, torch.device(device)), position=None,
                      fingerprint="", micro=1)


def test_the_policy_follows_the_device_and_the_dtype(monkeypatch):
    cpu = Runtime(torch.device("cpu"), torch.float32, "test")
    assert type(nonfinite.nonfinite_policy(_state(), cpu, 3)) is nonfinite.HostCheck
    assert nonfinite.nonfinite_policy(_state(), cpu, 3).per_step
    monkeypatch.setattr(nonfinite, "SYNC_FREE_DEVICES", ("cuda", "cpu"))
    assert type(nonfinite.nonfinite_policy(_state(), cpu, 3)) is nonfinite.DeviceGuard
    scaled = _state(torch.float16)
    if scaled.scaler.enabled:  # float16's scaler wins over the device's check wherever it is on
        assert type(nonfinite.nonfinite_policy(scaled, cpu, 3)) is nonfinite.LossScaling


def test_the_xla_check_reads_the_logged_loss_once_per_interval():
    """Without a per-step check the run cannot skip a step it never saw: a non-finite logged loss stops it."""
    policy = nonfinite.HostCheck(NonFiniteSteps(2), per_step=False)
    policy.logged({"loss": 1.0}, 4)
    with pytest.raises(NonFiniteTraining, match="1 step\\(s\\) in a row, up to step 5"):
        policy.logged({"loss": float("nan")}, 5)


def test_rules_replace_the_loss_and_the_schedule(sudoku4, tmp_path):
    """A recipe's loss sees each supervision step's rows (here: it weights the loss by the rows' ACT step); a
    schedule with lr 0 leaves every weight and puzzle row as it was, step after step."""
    calls, weights = [], []

    def weighted(outputs, labels, halted, steps, loss_type):
        loss, metrics = act_loss(outputs, labels, halted, steps, loss_type)
        calls.append(steps.clone())
        return loss * steps.float().mean(), metrics

    def frozen(cfg, step, epoch, total_steps, lr_factor=1.0):
        s = schedule_at(cfg, step, epoch, total_steps, lr_factor)
        return type(s)(0.0, 0.0, s.H_cycles, s.L_cycles, s.exploration)

    def configure(model, schedule):
        configure_model(model, schedule)
        weights.append({k: v.clone() for k, v in model.state_dict().items()})

    run = tmp_path / "rules"
    result = train(cfg_for(sudoku4, run, "max_steps=3"), rules=StepRules(schedule=frozen, loss=weighted,
                                                                        configure=configure))
    assert result.step == 3 and len(calls) == 3 and [int(c.max()) for c in calls] == [1, 2, 3]
    assert [r["lr"] for r in records(run)] == [0.0, 0.0, 0.0]
    final = ckpt.load_train_state(ckpt.list_states(run)[-1])["model"]
    for seen in weights[1:] + [final]:
        assert all(torch.equal(weights[0][k], seen[k]) for k in final)


@pytest.mark.parametrize("change, said", [
    ({"lr": float("nan")}, "lr nan is not a number from 0 to 1e+30"),
    ({"emb_lr": float("inf")}, "emb_lr inf is not a number from 0 to 1e+30"),
    # the config's bound: above float32's range the optimizer's own overflow error named no rule and no field
    ({"lr": 1e39}, "lr 1e+39 is not a number from 0 to 1e+30"),
    ({"emb_lr": 1e300}, "emb_lr 1e+300 is not a number from 0 to 1e+30"),
    ({"lr": "0.1"}, "lr '0.1' is not a number"),
    ({"lr": -1.0}, "lr -1.0 is not a number from 0"),
    ({"H_cycles": 0}, "H_cycles 0 is not a whole number from 1 to 256"),
    ({"L_cycles": 2.5}, "L_cycles 2.5 is not a whole number"),
    ({"H_cycles": 10**9}, "H_cycles 1000000000 is not a whole number"),
    ({"exploration": 2.0}, "exploration 2.0 is not a number from 0 to 1"),
    ({"warmup": -1}, "warmup -1 is not a whole number from 0 to 2"),
    (None, "returned NoneType: expected a StepSchedule"),
])
def test_a_rules_schedule_out_of_bounds_is_named_before_its_step(sudoku4, tmp_path, change, said):
    """A recipe's schedule is a user's code: a NaN rate trained its step (NaN weights, then skipped steps called
    divergence and blamed on the config's lr), a depth of 0 was pydantic's error about an ArchConfig set right, a
    text rate Python's own error. Each is one TRMError naming the rule, the step and the field; no step trains."""
    from trm_kaggle.errors import TRMError

    def bad(cfg, step, epoch, total, factor=1.0):
        return None if change is None else dataclasses.replace(schedule_at(cfg, step, epoch, total, factor), **change)

    run = tmp_path / "r"
    with pytest.raises(TRMError) as e:
        train(cfg_for(sudoku4, run, "max_steps=3"), rules=StepRules(schedule=bad))
    assert str(e.value).startswith("StepRules.schedule at step 1") and said in str(e.value), str(e.value)
    assert not (run / "metrics.jsonl").exists() or not records(run)


def _supervise_returning(wrong):
    from trm_kaggle.train.recipes import supervise

    def rule(*args):
        return wrong(*supervise(*args))
    return rule


@pytest.mark.parametrize("wrong, said", [
    (lambda c, o: None, "returned None (a NoneType): expected a pair (carry, outputs)"),
    (lambda c, o: o, "(a dict): expected a pair (carry, outputs)"),
    (lambda c, o: (None, o), "the carry is None (a NoneType), not the model's Carry"),
    (lambda c, o: (c, {}), "the outputs are an empty mapping"),
    (lambda c, o: (c, [o["logits"]]), "the outputs are [tensor("),
    (lambda c, o: (c, {"q_halt_logits": o["q_halt_logits"]}), "the outputs lack logits, which the loss (act_loss)"),
    (lambda c, o: (c, {**o, "logits": o["logits"][:2]}), "the outputs' logits has shape (2, 16, 6): expected 8 rows"),
    (lambda c, o: (c, {**o, "q_halt_logits": 0.5}), "the outputs' q_halt_logits is 0.5 (a float), not a torch tensor"),
    (lambda c, o: (dataclasses.replace(c, z_H=c.z_H[:3]), o), "the carry's z_H has shape (3,"),
    (lambda c, o: (dataclasses.replace(c, current_data={}), o), "the carry's current_data['labels'] is None"),
    # detached outputs were blamed on the loss rule that read them
    (lambda c, o: (c, {k: v.detach() for k, v in o.items()}), "no output requires a gradient: they are detached"),
])
def test_a_rules_supervise_of_the_wrong_kind_is_named(sudoku4, tmp_path, wrong, said):
    """What `StepRules.supervise` returns is checked at every step as the schedule and the loss are: None, the
    outputs alone or a carry of None ended in Python's unpacking and attribute errors, outputs of other rows in
    torch's, naming neither the rule nor the step."""
    from trm_kaggle.errors import TRMError

    with pytest.raises(TRMError) as e:
        train(cfg_for(sudoku4, tmp_path / "r", "max_steps=2"), rules=StepRules(supervise=_supervise_returning(wrong)))
    assert str(e.value).startswith("StepRules.supervise at step 1") and said in str(e.value), str(e.value)


def test_a_recipes_own_loss_reads_the_outputs_its_supervise_returns(sudoku4, tmp_path):
    """act_loss's outputs are required only of a run whose loss is act_loss: a recipe's pair of rules agrees on
    its own."""
    def supervise(*args):
        return _supervise_returning(lambda c, o: (c, {"mine": o["logits"]}))(*args)

    def loss(outputs, labels, halted, steps, loss_type):
        zero = outputs["mine"].sum() * 0
        return zero, {n: torch.zeros(()) for n in ("count", "lm_loss", "q_halt_loss", "token_accuracy",
                                                   "exact_accuracy", "q_halt_accuracy", "steps")}

    assert train(cfg_for(sudoku4, tmp_path / "r", "max_steps=1"), rules=StepRules(supervise=supervise,
                                                                                   loss=loss)).step == 1


def test_the_default_rules_are_upstreams(sudoku4, tmp_path):
    """StepRules() trains exactly as no rules: the same losses, step for step."""
    plain, ruled = tmp_path / "plain", tmp_path / "ruled"
    train(cfg_for(sudoku4, plain, "max_steps=3"))
    train(cfg_for(sudoku4, ruled, "max_steps=3"), rules=StepRules())
    assert [r["loss"] for r in records(plain)] == [r["loss"] for r in records(ruled)]


@pytest.mark.parametrize("min_eval_interval, evaluated", [(0, [5, 10, 15, 20]), (2, [15, 20])])
def test_evaluation_starts_at_min_eval_interval_as_upstreams(sudoku4, tmp_path, min_eval_interval, evaluated):
    """eval_interval=1 epoch (5 steps of 8 rows over 40 examples): upstream evaluates after iteration i
    (counted from 0) only when i >= min_eval_interval."""
    run = tmp_path / "run"
    train(cfg_for(sudoku4, run, "max_steps=20", "epochs=4", "eval_interval=1",
                  f"min_eval_interval={min_eval_interval}", "checkpoint_every_eval=False"))
    assert [r["step"] for r in records(run) if "eval_exact_accuracy" in r] == evaluated


CPU_ALLOCATOR = "DefaultCPUAllocator: can't allocate memory: you tried to allocate 3221225472 bytes."


def _forward_out_of_memory_above(monkeypatch, rows: int) -> list:
    """The model's forward runs out of memory on micro-batches of more than `rows` rows, holding what it had made
    (its activations) in its frame as a real one does; returns weak references to those."""
    import weakref

    from trm_kaggle.model.trm import TinyRecursiveModel

    real, held = TinyRecursiveModel.forward, []

    def forward(self, carry, batch, exploration=None):
        if batch["inputs"].shape[0] > rows:
            activations = torch.empty(1024)
            held.append(weakref.ref(activations))
            raise RuntimeError(CPU_ALLOCATOR)
        return real(self, carry, batch, exploration)

    monkeypatch.setattr(TinyRecursiveModel, "forward", forward)
    return held


def test_an_out_of_memory_step_is_retried_once_its_memory_is_free(sudoku4, tmp_path, monkeypatch, caplog):
    """auto_batch on a CPU: the step's retry cut the carries anew while the failed attempt's exception (and with it
    its activations) was alive, ran out of memory again and the run ended blaming its set-up. The retry starts
    once that memory is free and trains on with the halved micro-batch."""
    from trm_kaggle.train import step

    held, real_resplit, splits = _forward_out_of_memory_above(monkeypatch, 4), step.resplit, []

    def resplit(carries, size):
        if any(ref() is not None for ref in held):  # the failed attempt's memory is still taken
            raise RuntimeError(CPU_ALLOCATOR)
        splits.append(size)
        return real_resplit(carries, size)

    monkeypatch.setattr(step, "resplit", resplit)
    result = train(cfg_for(sudoku4, tmp_path / "r", "max_steps=2", "auto_batch=True"))
    assert result.step == 2 and splits and set(splits) == {4}, splits
    assert "out of memory: retrying with micro_batch_size=4" in caplog.text


def test_out_of_memory_preparing_the_retry_is_the_steps(sudoku4, tmp_path, monkeypatch, capsys):
    """Memory that runs out while the retry cuts the carries anew is named as the training step's, with the
    micro-batch then in use, not as the set-up's with the configured one."""
    from cli_helpers import one_error_line
    from test_train import TINY
    from trm_kaggle.cli import main
    from trm_kaggle.train import step

    def resplit(carries, size):
        raise RuntimeError(CPU_ALLOCATOR)

    _forward_out_of_memory_above(monkeypatch, 4)
    monkeypatch.setattr(step, "resplit", resplit)
    rc = main(["train", f"data_paths=[{sudoku4}]", f"checkpoint_path={tmp_path / 'r'}", *TINY, "max_steps=2",
               "auto_batch=True"])
    line = one_error_line(capsys, rc)
    assert line.startswith("error: out of memory on cpu in training step 1: lower micro_batch_size (now 4;"), line


@pytest.mark.parametrize("rule", ["schedule", "supervise"])
def test_a_rule_refused_at_a_later_step_saves_the_state_before_it(sudoku4, tmp_path, rule):
    """A rule refused at step 3 ended the run with no save, and steps 1 and 2 were lost. The state before the step
    is saved first (nothing of step 3 had changed it), and a resume with a good rule trains as an unbroken run:
    the data position went back to before step 3's batch."""
    from trm_kaggle.errors import TRMError
    from trm_kaggle.train.recipes import supervise

    def schedule(cfg, step, epoch, total, factor=1.0):
        s = schedule_at(cfg, step, epoch, total, factor)
        return dataclasses.replace(s, lr=float("nan")) if step == 2 else s

    def forward(*args):
        carry, outputs = supervise(*args)
        return (carry, {}) if args[-1].max_steps == 5 and len(seen) == 2 else (carry, outputs)

    seen = []
    rules = StepRules(schedule=schedule) if rule == "schedule" else StepRules(supervise=forward)
    run, whole = tmp_path / "r", tmp_path / "whole"
    with pytest.raises(TRMError) as e:
        train(cfg_for(sudoku4, run, "max_steps=5"), rules=rules, on_step=lambda step, m: seen.append(step))
    assert str(e.value).startswith(f"StepRules.{rule} at step 3") and str(e.value).endswith(
        "(the state at step 2 is saved)"), str(e.value)
    assert [ckpt.state_step(p) for p in ckpt.list_states(run)] == [2]
    train(cfg_for(sudoku4, run, "max_steps=4"))
    train(cfg_for(sudoku4, whole, "max_steps=4"))
    assert [r["loss"] for r in records(run)] == [r["loss"] for r in records(whole)]
