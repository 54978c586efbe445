"""The kernel's time plan (trm_kaggle.solve.plan): auto settings fit the budget with the stated margin, fixed
ones are kept and said not to fit, the phase lines show elapsed and remaining time."""

from __future__ import annotations

import time

import pytest
import torch

from trm_kaggle.config import SolveConfig
from trm_kaggle.solve.pricing import inference_seconds
import trm_kaggle.solve.plan as P
from trm_kaggle.solve.plan import (
    AUTO_MAX_AUG, AUTO_MAX_STEPS, INFERENCE_SHARE, SHORT_BATCH, SHORT_NUM_AUG, TASK_OVERHEAD_S, Budget, Rates,
    DEMO_ROWS, batch_sizes, demo_rows, hms, make_plan, measure_rates, plan_worker, reserve_seconds, task_deadlines,
)

from conftest import TINY_ARCH as ARCH

RATES = Rates("cuda:0 (test)", step_s=0.5, embeddings_step_s=0.4, row_step_s=0.02, halt_max_steps=16, batch=64,
              eval_batch=256)
UNITS = [(1, 3)] * 20 + [(2, 4)] * 10  # (test inputs, demonstration pairs) of 30 tasks


def cfg(**kw) -> SolveConfig:
    return SolveConfig(challenges="c.json", weights="w", time_budget=3600, **kw)


def test_auto_fits_the_budget_with_the_margin():
    c = cfg(num_aug="auto", finetune_steps="auto", plan_margin=0.2, finetune="all")
    plan = make_plan(c, UNITS, RATES, 10_000.0, worker=1)
    assert plan.auto == ("num_aug", "finetune_steps") and plan.fits
    assert 0 < plan.num_aug < AUTO_MAX_AUG and 0 < plan.finetune_steps < AUTO_MAX_STEPS
    planned = 10_000.0 * (1 - 0.2)
    assert plan.total_s <= planned  # the margin stays free
    # inference takes at most its share; one more augmentation would not fit in it
    assert plan.inference_s <= INFERENCE_SHARE * planned
    more = make_plan(cfg(num_aug=plan.num_aug + 1, finetune_steps="auto", plan_margin=0.2, finetune="all"), UNITS,
                     RATES, 10_000.0)
    assert more.inference_s > INFERENCE_SHARE * (planned - plan.overhead_s) - 1e-6
    # fine-tuning spends the rest: one more step per task would pass the planned time
    assert plan.total_s + len(UNITS) * RATES.step_s > planned
    assert plan.inference_s == pytest.approx(sum(reserve_seconds(t * (plan.num_aug + 1), RATES) for t, _ in UNITS))


def test_auto_augmentations_without_finetuning_use_the_whole_plan():
    plan = make_plan(cfg(num_aug="auto", finetune="none"), UNITS, RATES, 3_000.0)
    assert plan.finetune_steps == 0 and plan.finetune_s == 0 and plan.fits
    assert plan.total_s <= 3_000.0 * 0.85 < make_plan(cfg(num_aug=plan.num_aug + 1, finetune="none"), UNITS, RATES,
                                                       3_000.0).total_s
    rich = make_plan(cfg(num_aug="auto", finetune="none"), UNITS, RATES, 1e9)
    assert rich.num_aug == AUTO_MAX_AUG


def test_auto_steps_price_each_step_by_what_it_trains():
    # num_aug 63: every task has 64 or more demonstration rows and predicts 64 or more, so the overhead is the
    # one the plan reserved
    staged = make_plan(cfg(num_aug=63, finetune_steps="auto"), UNITS, RATES, 5_000.0)
    every = make_plan(cfg(num_aug=63, finetune_steps="auto", finetune="all"), UNITS, RATES, 5_000.0)
    assert staged.finetune_steps > every.finetune_steps > 0  # steps on the rows alone are cheaper
    for plan, mode in ((staged, "embeddings-then-all"), (every, "all")):  # the most steps that fit
        room = 5_000.0 * 0.85 - plan.overhead_s - plan.inference_s
        one_more = make_plan(cfg(num_aug=63, finetune_steps=plan.finetune_steps + 1, finetune=mode), UNITS, RATES,
                             5_000.0)
        assert plan.finetune_s <= room < one_more.finetune_s


def test_auto_steps_around_a_fixed_num_aug_and_caps():
    plan = make_plan(cfg(num_aug=8, finetune_steps="auto"), UNITS, RATES, 1e9)
    assert plan.num_aug == 8 and plan.finetune_steps == AUTO_MAX_STEPS
    starved = make_plan(cfg(num_aug=500, finetune_steps="auto"), UNITS, RATES, 60.0)
    assert starved.finetune_steps == 0 and not starved.fits  # fixed settings are kept, and said not to fit
    assert "does NOT fit" in starved.describe()


def test_fixed_settings_are_kept_and_described():
    plan = make_plan(cfg(num_aug=10, finetune_steps=100), UNITS, RATES, 1e6, worker=3)
    assert (plan.num_aug, plan.finetune_steps, plan.auto) == (10, 100, ())
    # the default staged schedule: per task 50 steps on the rows alone, then 50 on every weight
    assert plan.finetune_s == pytest.approx(30 * (50 * 0.4 + 50 * 0.5))
    assert make_plan(cfg(num_aug=10, finetune_steps=100, finetune="all"), UNITS, RATES, 1e6).finetune_s == 30 * 100 * 0.5
    assert plan.inference_s == pytest.approx(inference_seconds(40 * 11, 16, 0.02) * 1.3 + 30)
    text = plan.describe()
    assert text.startswith("worker 3 on cuda:0 (test): 30 tasks (40 test inputs), num_aug 10, 100 fine-tuning steps")
    assert "0.5 s per fine-tuning step of every weight, 0.4 s of the puzzle rows alone (64 rows)" in text
    assert "20 ms per row and ACT step (256 rows, 16 steps)" in text
    assert text.endswith("of 277h46m40s until the deadline")
    assert make_plan(cfg(num_aug="auto"), UNITS, RATES, 1e4).describe().endswith("until the deadline (15% kept free)")
    assert plan.as_dict()["fits"] is True


def test_no_budget_needs_no_timing_and_refuses_auto():
    plan = make_plan(SolveConfig(challenges="c", weights="w", num_aug=3), UNITS, None, None)
    assert plan.fits and "no time limit" in plan.describe()
    with pytest.raises(ValueError, match="time_budget"):
        SolveConfig(challenges="c", weights="w", finetune_steps="auto")


def test_measured_rates_come_from_a_timed_batch():
    lines = []
    r = measure_rates(ARCH, 16, 12, torch.device("cpu"), 2, 4, cap_s=60.0, say=lines.append)
    assert r.device == "cpu" and r.step_s > 0 and r.row_step_s > 0
    # on a CPU the sizes asked for are the most a batch may have: a tiny model grows to them
    assert (r.batch, r.eval_batch) == (2, 4) and 0 < r.timing_s <= r.cap_s == 60.0
    assert "timing a fine-tuning step of every weight at batch 1 on cpu ..." in lines
    assert "timed batch:" in make_plan(cfg(num_aug=1), UNITS, r, 100.0).describe()


def test_a_budget_too_short_to_time_gets_the_fixed_small_plan(monkeypatch):
    monkeypatch.setattr(P, "measure_rates", lambda *a, **kw: pytest.fail("nothing may be timed"))
    c = cfg(num_aug="auto", finetune_steps="auto", global_batch_size=64, eval_batch_size=256)
    plan, run = plan_worker(c, ARCH, 16, 12, torch.device("cpu"), UNITS, time.monotonic() + 15.0)  # cap 1.5 s
    assert plan.short and plan.rates is None
    assert (plan.num_aug, plan.finetune_steps) == (SHORT_NUM_AUG, 0)
    assert (run.global_batch_size, run.eval_batch_size) == (SHORT_BATCH, SHORT_BATCH) == (plan.batch, plan.eval_batch)
    text = plan.describe()
    assert "num_aug 2 (fixed small plan), 0 fine-tuning steps per task (fixed small plan)" in text
    assert "too short to time anything" in text and "the fixed small plan, nothing priced, no fine-tuning" in text
    # a fixed num_aug is kept; nothing was timed to fit fine-tuning, so there is none
    fixed, _ = plan_worker(cfg(num_aug=5, finetune_steps=30), ARCH, 16, 12, torch.device("cpu"), UNITS,
                           time.monotonic() + 15.0)
    assert fixed.short and (fixed.num_aug, fixed.finetune_steps) == (5, 0)


def test_timing_cut_by_its_cap_still_prices_the_plan(monkeypatch):
    slow = Rates("cpu", 12.0, 12.0, 12.0, 2, batch=1, eval_batch=1, timing_s=24.0, cap_s=10.0,
                 notes=("the 10 s cap left no room for a prediction step: priced as a fine-tuning step",))
    monkeypatch.setattr(P, "measure_rates", lambda *a, **kw: slow)  # a step slower than the cap: a measurement
    plan, run = plan_worker(cfg(num_aug="auto"), ARCH, 16, 12, torch.device("cpu"), UNITS, time.monotonic() + 100.0)
    assert not plan.short and plan.rates.step_s == slow.step_s and run.global_batch_size == 1
    assert "priced as a fine-tuning step" in plan.describe()


def test_cpu_tasks_run_with_the_batches_timed_and_gpus_with_the_configured_ones(monkeypatch):
    timed = Rates("test", 1.0, 0.5, 0.01, 2, batch=4, eval_batch=16, timing_s=3.0, cap_s=12.0)
    asked = []
    monkeypatch.setattr(P, "measure_rates", lambda *a, **kw: asked.append((a[4:], kw["cap_s"])) or timed)
    c = cfg(num_aug=1, global_batch_size=64, eval_batch_size=256)
    plan, run = plan_worker(c, ARCH, 16, 12, torch.device("cpu"), UNITS, time.monotonic() + 120.0)
    assert asked[0][0] == batch_sizes(c, UNITS) and asked[0][1] == pytest.approx(12.0, abs=0.1)
    assert (run.global_batch_size, run.eval_batch_size) == (4, 16) == (plan.batch, plan.eval_batch)
    assert plan.rates == timed and "timing 3.0 s of its 12 s cap" in plan.describe()
    plan, run = plan_worker(c, ARCH, 16, 12, torch.device("cuda"), UNITS, time.monotonic() + 120.0)
    assert run == c and (plan.batch, plan.eval_batch) == (64, 256)


def test_without_a_budget_cpu_batches_are_cut_to_the_memory_share_only(monkeypatch):
    monkeypatch.setattr(P, "measure_rates", lambda *a, **kw: pytest.fail("nothing is timed without a limit"))
    c = SolveConfig(challenges="c", weights="w", num_aug=3, global_batch_size=64, eval_batch_size=256)
    import trm_kaggle.solve.step_timer as T

    monkeypatch.setattr(T, "fitting_batch", lambda arch, **kw: (10_000, 8 * 1024**3))
    plan, run = plan_worker(c, ARCH, 16, 12, torch.device("cpu"), UNITS, None)
    assert run == c and plan.rates is None and not plan.short  # the configured batches fit: kept as they are
    monkeypatch.setattr(T, "fitting_batch", lambda arch, **kw: (24, 2 * 1024**3))
    plan, run = plan_worker(c, ARCH, 16, 12, torch.device("cpu"), UNITS, None)
    assert (run.global_batch_size, run.eval_batch_size) == (24, 24)
    assert "the memory share (2.0 GB) holds batches of 24 rows" in plan.describe()


def test_each_task_gets_its_price_and_an_equal_share_of_the_rest():
    c = cfg(num_aug=3, finetune_steps=100, finetune="all", global_batch_size=8, eval_batch_size=8)
    plan = make_plan(c, UNITS, RATES, 10_000.0)
    units = [(2, 4), (1, 3), (1, 3)]
    finetune_by, predict_by = task_deadlines(c, plan, units, time.monotonic() + 1_000.0)
    now = time.monotonic()
    demo = min(8, 4 * 4) * RATES.halt_max_steps * RATES.row_step_s  # one scoring of the first task's rows
    # scored: at most the batch (8), the task's demonstration rows and its predicted rows (t * 4)
    priced = [TASK_OVERHEAD_S + 2 * min(8, t * 4, d * 4) * 16 * 0.02 + reserve_seconds(t * 4, RATES)
              for t, d in units]
    tune = (1_000.0 - sum(priced)) / 3
    assert finetune_by - now == pytest.approx(TASK_OVERHEAD_S + demo + tune, abs=0.05)
    assert predict_by - finetune_by == pytest.approx(demo + reserve_seconds(2 * 4, RATES))
    # prices that do not fit: no fine-tuning (nor demonstration scoring), the time split by price
    finetune_by, predict_by = task_deadlines(c, plan, units, time.monotonic() + 10.0)
    bare = [TASK_OVERHEAD_S + reserve_seconds(t * 4, RATES) for t, _ in units]
    assert finetune_by <= time.monotonic() and predict_by - finetune_by == pytest.approx(10.0 * bare[0] / sum(bare),
                                                                                    abs=0.05)
    # the fixed small plan: no fine-tuning, equal shares
    short = make_plan(c, UNITS, None, 30.0)
    finetune_by, predict_by = task_deadlines(c, short, units, time.monotonic() + 30.0)
    assert finetune_by <= time.monotonic() and predict_by - time.monotonic() == pytest.approx(10.0, abs=0.05)


def test_a_budget_far_short_of_the_plan_answers_tasks_one_after_another():
    """60 cheap tasks in 25 s, priced at 5 minutes: each got 25/60 s, less than its un-augmented copies cost, so
    every prediction was cut and none answered (0 of 60). A task now gets at least that price while the time
    left holds it; a fast one leaves the rest to the next."""
    c = cfg(num_aug=1, finetune="none", global_batch_size=8, eval_batch_size=8)
    units = [(1, 2)] * 60
    plan = make_plan(c, units, RATES, 25.0)
    _, predict_by = task_deadlines(c, plan, units, time.monotonic() + 25.0)
    answer = TASK_OVERHEAD_S + reserve_seconds(1, RATES)
    assert predict_by - time.monotonic() == pytest.approx(answer, abs=0.05) and answer > 25.0 / 60
    _, predict_by = task_deadlines(c, plan, units, time.monotonic() + 2.0)  # less than that left: all of it
    assert predict_by - time.monotonic() == pytest.approx(2.0, abs=0.05)


def test_a_measured_setup_time_replaces_the_allowance_in_each_share():
    """A worker whose tasks take 30 s each to build and load (a slow disk, a large canvas) promises the next task
    30 s of that, not the 2 s allowance: its fine-tuning window shrinks by the difference, and the predict window
    (its reserve) stays whole."""
    from trm_kaggle.solve.worker import SetupTimes

    c = cfg(num_aug=3, finetune_steps=100, finetune="all", global_batch_size=8, eval_batch_size=8)
    plan = make_plan(c, UNITS, RATES, 10_000.0)
    units = [(2, 4), (1, 3), (1, 3)]
    end = time.monotonic() + 1_000.0
    t_a, p_a = task_deadlines(c, plan, units, end)
    t_b, p_b = task_deadlines(c, plan, units, end, overhead_s=30.0)
    # the first task's 28 s more of setup come out of the fine-tuning shares: the same end, a shorter window
    assert (t_b - t_a) == pytest.approx(28.0 - 28.0, abs=0.05) and (p_b - t_b) == pytest.approx(p_a - t_a)
    # a deadline that leaves no fine-tuning: the time split in proportion to the prices, the measured setup in each
    _, p_slow = task_deadlines(c, plan, units, time.monotonic() + 100.0, overhead_s=30.0)
    priced = [30.0 + reserve_seconds(t * 4, RATES) for t, _ in units]
    assert p_slow - time.monotonic() == pytest.approx(100.0 * priced[0] / sum(priced), abs=0.05)
    # one that holds less than the first task's setup and un-augmented copies: all of it goes to that task
    _, p_slow = task_deadlines(c, plan, units, time.monotonic() + 10.0, overhead_s=30.0)
    assert p_slow - time.monotonic() == pytest.approx(10.0, abs=0.05)

    times = SetupTimes()
    assert times.typical() == TASK_OVERHEAD_S
    times.add(9.0, first=True)  # imports and caches: used only until a second task is measured
    assert times.typical() == 9.0
    for s in (3.0, float("nan"), None, -1.0, 5.0, 4.0):  # what is no duration is not counted
        times.add(s)
    assert times.typical() == 4.0


def test_the_timed_batches_are_the_sizes_the_tasks_will_use():
    c = cfg(num_aug=1, global_batch_size=64, eval_batch_size=256)
    assert batch_sizes(c, [(1, 3), (2, 4)]) == (8, 4)  # 4 pairs x 2 copies; 2 test inputs x 2 copies
    assert batch_sizes(cfg(num_aug=200), [(1, 3)]) == (64, 201)
    assert batch_sizes(cfg(num_aug="auto"), [(1, 3)]) == (64, 256)


def test_budget_lines_show_elapsed_and_left():
    b = Budget(3600, 60, start=time.monotonic() - 125)
    line = b.line("plan", "worker 0 ...")
    assert line.startswith("[elapsed 2m0") and ", left 56m5" in line and line.endswith("] plan: worker 0 ...")
    assert Budget(None, 60).line("tasks").endswith("left no limit] tasks")
    assert hms(5.25) == "5.2s" and hms(3725) == "1h02m05s" and hms(float("inf")) == "no limit"
    assert hms(None) == "no limit" and hms(-3) == "0.0s"
    until = Budget.until(100.0, 200.0)
    assert until.start == 100.0 and until.deadline(10) == 190.0


def test_demonstration_scoring_never_outgrows_the_batches_nor_the_tasks_predictions():
    """Scored twice per task, the demonstrations cost at most twice its predictions (a CPU plan's small tasks)."""
    assert demo_rows(cfg(global_batch_size=768, eval_batch_size=768)) == DEMO_ROWS
    assert demo_rows(cfg(global_batch_size=16, eval_batch_size=24)) == 24
    assert demo_rows(cfg(global_batch_size=768, eval_batch_size=768), test_rows=9) == 9
    assert demo_rows(cfg(global_batch_size=16, eval_batch_size=24), test_rows=1000) == 24
    assert demo_rows(cfg(), test_rows=0) == 1


@pytest.mark.parametrize("available_s", [float("nan"), -1, True, float("inf"), "600"])
def test_make_plan_refuses_a_budget_that_is_no_seconds_before_any_work(available_s):
    """NaN, -1 and True once planned silently ("of no limit: does NOT fit"), inf failed in int()."""
    for rates in (RATES, None):
        with pytest.raises(ValueError, match=r"^available_s="):
            make_plan(cfg(num_aug="auto", finetune_steps="auto"), UNITS, rates, available_s)


def test_make_plan_without_a_limit_takes_no_rates_and_plans_the_most_for_a_huge_budget():
    with pytest.raises(ValueError, match=r"^available_s=None: timed rates"):  # once a TypeError
        make_plan(cfg(num_aug=1, finetune_steps=2), UNITS, RATES, None)
    assert make_plan(cfg(num_aug=1, finetune_steps=2), UNITS, None, None).fits
    for rates in (RATES, Rates("cpu", 0.1, 0.05, 5e-324, 16, 8, 8)):  # a rate that rounds the copies to inf
        plan = make_plan(cfg(num_aug="auto", finetune_steps="auto"), UNITS, rates, float(2**63))
        assert (plan.num_aug, plan.finetune_steps, plan.fits) == (AUTO_MAX_AUG, AUTO_MAX_STEPS, True)
    assert make_plan(cfg(num_aug="auto", finetune_steps="auto"), UNITS, RATES, 0).available_s == 0.0


@pytest.mark.parametrize("unit", [(-5, 3), (float("nan"), 3), (True, 3), (1.0, 3), (1, -1), (1,), 7])
def test_make_plan_refuses_units_that_are_no_counts(unit):
    """A negative unit once gave a negative total, a NaN one a ValueError of int()."""
    with pytest.raises(ValueError, match=r"^units\[1\]"):
        make_plan(cfg(num_aug="auto", finetune_steps="auto"), [(1, 3), unit], RATES, 600.0)


@pytest.mark.parametrize("worker", [-1, float("nan"), True, 2.0])
def test_make_plan_refuses_a_worker_that_is_no_number(worker):
    with pytest.raises(ValueError, match=r"^worker="):
        make_plan(cfg(num_aug=1), UNITS, RATES, 600.0, worker=worker)


@pytest.mark.parametrize("field, value", [("step_s", float("nan")), ("embeddings_step_s", -1.0),
                                          ("row_step_s", float("inf")), ("row_step_s", -1.0), ("step_s", True),
                                          ("timing_s", float("nan")), ("cap_s", float("inf")),
                                          ("halt_max_steps", 0), ("halt_max_steps", 16.0), ("batch", True),
                                          ("eval_batch", -8)])
def test_rates_refuse_fields_that_are_no_seconds_or_counts(field, value):
    """A NaN step once priced a NaN plan, a negative row rate a negative total and the most augmentations."""
    fields = dict(device="cpu", step_s=0.1, embeddings_step_s=0.05, row_step_s=0.001, halt_max_steps=16, batch=8,
                  eval_batch=8)
    with pytest.raises(ValueError, match=rf"^{field}="):
        Rates(**{**fields, field: value})


def test_a_deadline_that_has_come_plans_with_no_time_left(monkeypatch):
    """The kernel's own path: a deadline already past is 0 s left, not a refused negative budget."""
    monkeypatch.setattr(P, "measure_rates", lambda *a, **kw: pytest.fail("nothing may be timed"))
    plan, _ = plan_worker(cfg(num_aug="auto"), ARCH, 16, 12, torch.device("cpu"), UNITS, time.monotonic() - 5.0)
    assert plan.short and plan.available_s == 0.0


def _wrong_calls():
    """(call, exception, words) of the plan's helpers given a wrong argument."""
    import math

    from trm_kaggle.solve import pricing
    from trm_kaggle.solve.step_timer import timing_cap

    c = cfg(num_aug=2, finetune_steps=10, finetune="all")
    plan = make_plan(c, [(1, 2)], RATES, 100.0)
    now = time.monotonic()
    nan = math.nan
    return [
        (lambda: make_plan({}, [(1, 2)], RATES, 100.0), TypeError, "cfg: expected a SolveConfig"),
        (lambda: make_plan(c, None, RATES, 100.0), TypeError, "units: expected a list of"),
        (lambda: make_plan(c, [(1, 2)], RATES, 100.0, notes=5), TypeError, "notes: expected a note"),
        (lambda: pricing.with_test_time(c, {}), TypeError, "rates: expected the plan's Rates, got dict"),
        (lambda: pricing.with_test_time({}, RATES), TypeError, "cfg: expected a SolveConfig"),
        (lambda: task_deadlines(c, plan, [], now + 100), ValueError, "units=[]"),
        (lambda: task_deadlines(c, plan, [(1, 2)], nan), ValueError, "deadline=nan"),
        (lambda: task_deadlines(c, plan, [(1, 2)], now + 100, overhead_s=nan), ValueError, "overhead_s=nan"),
        (lambda: task_deadlines(c, plan, [(1, 2)], now + 100, overhead_s=-1e9), ValueError, "overhead_s=-1"),
        (lambda: Budget(nan, 0), ValueError, "seconds=nan"),
        (lambda: Budget("10", 0), ValueError, "seconds='10'"),
        (lambda: Budget(10, -math.inf), ValueError, "margin=-inf"),
        (lambda: pricing.hms(-5), ValueError, "s=-5"),
        (lambda: pricing.hms(nan), ValueError, "s=nan"),
        (lambda: hms(nan), ValueError, "seconds=nan"),
        (lambda: hms("x"), ValueError, "seconds='x'"),
        (lambda: Budget(10, 1).deadline(nan), ValueError, "reserve=nan"),
        (lambda: Budget(10, 1).deadline(-1), ValueError, "reserve=-1"),
        (lambda: pricing.prediction_steps(c, -3), ValueError, "halt_max_steps=-3"),
        (lambda: pricing.finetune_seconds(-3, "all", 0.5, 10, 0.1, 0.1), ValueError, "tasks=-3"),
        (lambda: pricing.finetune_seconds(3, "all", 2.0, 10, 0.1, 0.1), ValueError, "embeddings_fraction=2.0"),
        (lambda: reserve_seconds(nan, RATES), ValueError, "test_rows=nan"),
        (lambda: inference_seconds(nan, 16, 0.1), ValueError, "examples=nan"),
        (lambda: P.prediction_batch(plan, "8", 10), ValueError, "eval_batch='8'"),
        (lambda: P.prediction_batch(plan, -5, 10), ValueError, "eval_batch=-5"),
        (lambda: P.prediction_batch(plan, 8, nan), ValueError, "window_s=nan"),
        (lambda: timing_cap(nan), ValueError, "left_s=nan"),
        (lambda: timing_cap([5]), ValueError, "left_s=[5]"),
        (lambda: timing_cap("5"), ValueError, "left_s='5'"),
    ]


@pytest.mark.parametrize("case", range(29))
def test_the_plan_helpers_name_a_wrong_argument(case):
    """A dict as cfg, None as units and 5 as notes were AttributeErrors and TypeErrors past make_plan's promise;
    no task left divided by zero, a NaN deadline or overhead gave NaN deadlines, a margin of -inf showed a 10 s
    budget as "no limit", hms(-5) was -1h59m55s, a negative count priced negative seconds, and a NaN time left
    gave the longest timing cap; the phase log's hms(nan) said "no limit", hms('x') was a bare TypeError, and a NaN
    reserve a NaN deadline."""
    import re

    call, kind, said = _wrong_calls()[case]
    with pytest.raises(kind, match=re.escape(said)):
        call()
    assert P.prediction_batch(make_plan(cfg(num_aug=2, finetune_steps=10), [(1, 2)], RATES, 100.0), 8,
                              float("inf")) == 8  # no deadline: the whole batch
