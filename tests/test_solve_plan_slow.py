"""A slow step is a measurement, not a failure: the solve's plan prices from what it measured whatever the step
cost, fine-tunes when the hours allow it, answers the cheapest tasks first, and keeps each task's share of the
time by cutting its prediction batches (issue: a loaded 2-core machine answered 25 of 240 tasks in 420 s and
left most of 4,200 s and 11.5 h idle on the fixed small plan)."""

from __future__ import annotations

import time

import torch

import trm_kaggle.solve.plan as P
import trm_kaggle.solve.step_timer as T
import trm_kaggle.solve.worker as W
from trm_kaggle.config import SolveConfig
from trm_kaggle.solve.plan import Rates, cheapest_first, make_plan, plan_worker, prediction_batch
from trm_kaggle.solve.workdir import Unit, WorkerSpec

from conftest import TINY_ARCH as ARCH

CPU = torch.device("cpu")


def slow_timer(monkeypatch, step_s: float):
    """Every timed call takes `step_s` seconds (no sleeping: the clock is read from a counter)."""
    clock = [time.perf_counter()]
    monkeypatch.setattr(T.time, "perf_counter", lambda: clock[0])

    def seconds_per_call(fn, device, repeats=3, **kw):
        clock[0] += 2 * step_s  # the warm-up and one call
        return step_s, "1 call after a warm-up"

    monkeypatch.setattr(T, "seconds_per_call", seconds_per_call)
    monkeypatch.setattr(T.StepTimer, "_train_fn", lambda self, rows, frozen: (lambda: None))
    monkeypatch.setattr(T.StepTimer, "_infer_fn", lambda self, rows: (lambda: None))


def test_a_step_slower_than_the_cap_prices_the_plan(monkeypatch):
    slow_timer(monkeypatch, 16.0)  # a warm-up and one call of a fine-tuning step take longer than the 30 s cap
    lines = []
    t = T.time_steps(ARCH, 16, 12, CPU, batch=8, eval_batch=8, cap_s=30.0, say=lines.append)
    assert t is not None and t.step_s == 16.0 and t.row_step_s == 16.0  # one row, priced as a fine-tuning step
    assert any("priced as a fine-tuning step of as many rows (an upper bound)" in n for n in t.notes)
    cfg = SolveConfig(challenges="c", weights="w", time_budget=41_400, num_aug="auto", finetune_steps="auto")
    units = [(1, 3)] * 24
    plans = []
    for seconds in (420.0, 4_200.0, 11.5 * 3600):
        plan, _ = plan_worker(cfg, ARCH, 16, 12, CPU, units, time.monotonic() + seconds)
        assert plan.rates is not None and not plan.short, plan.describe()  # priced, never the fixed small plan
        assert seconds < 1000 or plan.fits and plan.total_s > 0.5 * plan.available_s, plan.describe()  # used
        plans.append(plan)
    assert plans[0].num_aug <= plans[1].num_aug < plans[2].num_aug and plans[0].total_s < plans[1].total_s
    assert plans[2].finetune_steps > 0  # the hours allow fine-tuning: it is planned


def test_cheapest_tasks_first_and_batches_cut_to_the_share(monkeypatch, tmp_path):
    units = [Unit(0, "a", 3, 2), Unit(1, "b", 1, 5), Unit(2, "c", 1, 2), Unit(3, "d", 2, 1)]
    assert [u.task_id for u in cheapest_first(units)] == ["c", "b", "d", "a"]
    rates = Rates("cpu", 1.0, 1.0, row_step_s=0.05, halt_max_steps=4, batch=8, eval_batch=64)
    plan = make_plan(SolveConfig(challenges="c", weights="w", num_aug=3, finetune="none"), [(1, 1)], rates, 100.0)
    per_row = 4 * 0.05 * P.DECODE_OVERHEAD
    assert prediction_batch(plan, 64, 10 * per_row + 0.01) == 10
    assert prediction_batch(plan, 64, 1e6) == 64 and prediction_batch(plan, 64, 0.0) == 1
    # the worker: cheapest first, each task's prediction batch cut to fit its share
    seen = []
    monkeypatch.setattr(W, "read_export", lambda weights: ({"arch": ARCH.model_dump(), "seq_len": 16,
                                                             "vocab_size": 12}, None))
    monkeypatch.setattr(W, "export_canvas", lambda weights: 30)
    monkeypatch.setattr(W, "plan_worker", lambda cfg, *a, **kw: (plan, cfg))

    def solve_unit(cfg, unit, *a, **kw):
        seen.append((unit.task_id, cfg.eval_batch_size))
        return {"predicted": 1, "examples": 1, "predict_s": 0.0}

    monkeypatch.setattr(W, "solve_unit", solve_unit)
    cfg = SolveConfig(challenges="c", weights="w", num_aug=3, finetune="none", eval_batch_size=64,
                      time_budget=100)
    spec = WorkerSpec(0, "cpu", units, {u.task_id: {} for u in units}, cfg.model_dump_json(), {}, str(tmp_path),
                      time.monotonic(), time.monotonic() + 60.0)
    W.run_units(spec, lambda line: None)
    assert [t for t, _ in seen] == ["c", "b", "d", "a"]
    # 60 s over 4 tasks: the first task's share holds no 64-row batch (the next get the time it left)
    assert 1 <= seen[0][1] < 64 and seen[-1][1] == 64, seen


def test_a_task_slower_than_its_share_takes_half_a_share_more_at_most(monkeypatch, tmp_path):
    """A task's un-augmented test inputs were predicted until the worker's own end: with levers that made one
    prediction cost more than the task's share (32 trajectories, test depth 1024) the first task took the whole
    budget and the tasks after it were never reached. They run past the task's end by half its share at most."""
    import trm_kaggle.solve.task as TK

    seen = {}

    class Stop(Exception):
        pass

    class Model:
        arch = ARCH

    def evaluate(model, data_dir, ecfg, **kw):
        seen.update(kw)
        raise Stop

    monkeypatch.setattr(TK, "build_unseen_dataset", lambda *a, **kw: tmp_path / "data")
    monkeypatch.setattr(TK, "load_model_for_dataset", lambda *a, **kw: (Model(), None, None))
    monkeypatch.setattr(TK, "apply_compile", lambda *a, **kw: None)
    monkeypatch.setattr(TK, "evaluate", evaluate)
    cfg = SolveConfig(challenges="c", weights="w", num_aug=0, finetune="none", trajectories=32,
                      trajectory_noise=0.5, test_depth=1024)
    now = time.monotonic()
    for hard, most in ((now + 3600.0, now + 10.0 + TK.GRACE_SHARE * 10.0), (now + 12.0, now + 12.0)):
        try:
            TK.solve_unit(cfg, Unit(0, "a", 1, 1), {}, {}, str(tmp_path), CPU, now, now + 10.0, hard_deadline=hard)
        except Stop:
            pass
        assert seen["deadline"] == now + 10.0 and seen["always"] == 1  # its test input, past the task's end
        assert now + 10.0 < seen["always_until"] <= most, (seen["always_until"] - now, most - now)
