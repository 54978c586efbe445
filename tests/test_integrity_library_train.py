"""train() and its rules from Python: a recipe's schedule or loss of the wrong kind, arguments of the wrong type and
a preset given as one string are each one error naming what is wrong; a rule's error stops the loader's thread."""

import dataclasses
import threading

import numpy as np
import pytest
import torch

from test_train import cfg_for
from trm_kaggle.errors import TRMError
from trm_kaggle.model.losses import act_loss
from trm_kaggle.train import StepRules, load_train_config, schedule_at, train


def _schedule_with(**change):
    return lambda *a, **k: dataclasses.replace(schedule_at(*a, **k), **change)


def test_one_preset_is_taken_whole():
    """`presets="cpu-smoke"` was read letter by letter: "unknown preset 'c'"."""
    assert load_train_config(presets="cpu-smoke") == load_train_config(presets=["cpu-smoke"])


def test_numpy_numbers_and_0d_tensors_from_a_schedule_are_numbers(sudoku4, tmp_path):
    """A schedule computed with numpy or torch returns their scalars: np.int64(2) was "not a whole number"; the step
    takes the plain numbers they hold."""
    seen = []

    def configure(model, schedule):
        seen.append(schedule)

    rules = StepRules(schedule=_schedule_with(H_cycles=np.int64(2), L_cycles=torch.tensor(1), lr=torch.tensor(1e-4),
                                              emb_lr=np.float32(0.01), exploration=np.float64(0.1)),
                      configure=configure)
    assert train(cfg_for(sudoku4, tmp_path / "r", "max_steps=1"), rules=rules).step == 1
    assert [(type(v), v) for v in dataclasses.astuple(seen[0])][2:4] == [(int, 2), (int, 1)]
    assert type(seen[0].lr) is float and seen[0].lr == pytest.approx(1e-4)


@pytest.mark.parametrize("change, said", [
    ({"H_cycles": np.float64(2.0)}, "H_cycles np.float64(2.0) is not a whole number from 1 to 256 (a numpy.float64;"),
    ({"lr": np.array([1e-4])}, "(a numpy.ndarray; the config's settings are not the cause"),
    ({"H_cycles": np.True_}, "H_cycles np.True_ is not a whole number"),
])
def test_a_schedules_value_of_the_wrong_kind_says_its_type(sudoku4, tmp_path, change, said):
    with pytest.raises(TRMError) as e:
        train(cfg_for(sudoku4, tmp_path / "r", "max_steps=1"), rules=StepRules(schedule=_schedule_with(**change)))
    assert str(e.value).startswith("StepRules.schedule at step 1: ") and said in str(e.value), str(e.value)


def _loss_returning(wrong):
    def loss(outputs, labels, halted, steps, loss_type):
        total, metrics = act_loss(outputs, labels, halted, steps, loss_type)
        return wrong(total, metrics)
    return loss


@pytest.mark.parametrize("wrong, said", [
    (lambda x, m: (x.repeat(2), m), "the loss is a torch.float32 tensor of shape (2,), not one floating-point number"),
    (lambda x, m: (x.detach(), m), "the loss requires no gradient: it is detached"),
    (lambda x, m: 1.5, "returned 1.5 (a float): expected a pair (loss, metrics)"),
    (lambda x, m: (1.5, m), "the loss is 1.5 (a float), not a torch tensor"),
    (lambda x, m: (x, None), "comes with metrics None (a NoneType), not act_loss's mapping"),
    (lambda x, m: (x, {"count": m["count"]}), "lack act_loss's tensors lm_loss, q_halt_loss"),
])
def test_a_rules_loss_of_the_wrong_kind_is_named(sudoku4, tmp_path, wrong, said):
    """A loss of two numbers, a detached one or a float ended in torch's or Python's own errors ("grad can be
    implicitly created only for scalar outputs"), naming no rule; no step trains."""
    run = tmp_path / "r"
    with pytest.raises(TRMError) as e:
        train(cfg_for(sudoku4, run, "max_steps=2"), rules=StepRules(loss=_loss_returning(wrong)))
    assert str(e.value).startswith("StepRules.loss at step 1") and said in str(e.value), str(e.value)


@pytest.mark.parametrize("call, said", [
    (lambda cfg: train(cfg.model_dump()), "cfg: expected a TrainConfig (load_train_config(values={...}) makes one"),
    (lambda cfg: train(cfg, rules={"loss": act_loss}), "rules: expected a StepRules (StepRules(loss=...)"),
    (lambda cfg: train(cfg, rules=StepRules(loss=None)), "rules.loss: expected a function, got a NoneType"),
    (lambda cfg: train(cfg, on_step="print"), "on_step: expected a function, got a str"),
])
def test_arguments_of_the_wrong_type_are_named(sudoku4, tmp_path, call, said):
    """A dict for cfg was "type object 'dict' has no attribute 'model_validate'", one for rules "'dict' object has no
    attribute 'loss'" at the first step; nothing is made."""
    run = tmp_path / "r"
    with pytest.raises(TypeError) as e:
        call(cfg_for(sudoku4, run, "max_steps=1"))
    assert str(e.value).startswith(said), str(e.value)
    assert not run.exists()


def test_a_rules_error_stops_the_loaders_thread(sudoku4, tmp_path):
    """While a rule's error is being handled (and after, when it reaches the top: Python keeps its traceback to the
    exit) the loop's frame lives on; its loader's prefetch thread ran on with it, and at the interpreter's exit a
    daemon thread inside torch aborted the process now and then (exit 134 after the error was printed)."""
    with pytest.raises(TRMError) as e:
        train(cfg_for(sudoku4, tmp_path / "r", "max_steps=2"), rules=StepRules(schedule=_schedule_with(H_cycles=0)))
    assert e.value.__traceback__ is not None  # the frames are still held here
    assert [t.name for t in threading.enumerate() if t.name == "PuzzleLoader-prefetch"] == []
