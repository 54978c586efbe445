"""How long the kernel takes: the step timer, its cap and batch sizing, and the extrapolation built on it."""

from __future__ import annotations

import dataclasses
import re
import time

import pytest
import torch

import trm_kaggle.solve.step_timer as T
from trm_kaggle.config import ArchConfig, SolveConfig
from trm_kaggle.solve.pricing import (DEMO_PAIRS_PER_TASK, KAGGLE_LIMIT_S, TASK_OVERHEAD_S, TEST_INPUTS_PER_TASK,
                                      estimate, format_estimate)
from trm_kaggle.solve.schedule import MODES
from trm_kaggle.solve.step_timer import StepTimer, seconds_per_call, time_steps, timing_cap

from conftest import TINY_ARCH as ARCH

CPU = torch.device("cpu")


def test_step_timer_warms_up_once_then_takes_the_median():
    calls = []
    seconds, how = seconds_per_call(lambda: calls.append(1), CPU, repeats=3)
    assert len(calls) == 4 and seconds >= 0.0 and how == "median of 3 calls after a warm-up"
    calls.clear()
    seconds, how = seconds_per_call(lambda: calls.append(1), CPU, repeats=1, warm_up=False)
    assert len(calls) == 1 and how == "its first call, no warm-up"
    # one call slowed by other work (or the first call's one-time costs) does not move the figure
    costs = iter([0.3, 0.01, 0.2, 0.01, 0.012])
    seconds, _ = seconds_per_call(lambda: time.sleep(next(costs)), CPU, repeats=4)
    assert seconds < 0.1


def test_a_call_past_the_cap_is_not_followed_by_another():
    calls = []

    def slow():
        calls.append(1)
        time.sleep(0.05)

    seconds, how = seconds_per_call(slow, CPU, repeats=5, stop_at=time.perf_counter() + 0.01)
    assert len(calls) == 1 and seconds >= 0.05 and "warm-up call alone" in how and "upper bound" in how
    calls.clear()
    seconds, how = seconds_per_call(slow, CPU, repeats=5, warm_up=False, stop_at=time.perf_counter() + 0.08)
    assert len(calls) == 2 and how == "median of 2 calls, no warm-up"


def test_the_timing_cap_is_a_share_of_the_time_left_with_a_floor_and_a_ceiling():
    assert timing_cap(120) == pytest.approx(12.0)
    assert timing_cap(73) == pytest.approx(73 / 8)  # a short budget gets up to TIMING_FLOOR_S, an eighth of it
    assert timing_cap(97) == pytest.approx(T.TIMING_FLOOR_S)
    assert timing_cap(15) < T.MIN_TIMING_S  # too short to time anything
    assert timing_cap(12 * 3600) == timing_cap(None) == T.TIMING_MAX_S
    assert timing_cap(-5) == 0.0


@pytest.fixture
def fake_steps(monkeypatch):
    """Steps of a known cost that really take that long (sleeps: the cap is checked against the clock):
    `cost[kind]` seconds per row; each call is recorded as (kind, rows). The memory share is stubbed."""
    calls, cost = [], {"train": 0.02, "frozen": 0.01, "infer": 0.005}

    def train(self, rows, freeze_weights):
        kind = "frozen" if freeze_weights else "train"
        calls.append((kind, rows))
        what = "a fine-tuning step of " + ("the puzzle rows alone" if freeze_weights else "every weight")
        return self._timed(what, rows, lambda: time.sleep(cost[kind] * rows))

    def infer(self, rows):
        calls.append(("infer", rows))
        return self._timed("a prediction step", rows, lambda: time.sleep(cost["infer"] * rows))

    monkeypatch.setattr(StepTimer, "train", train)
    monkeypatch.setattr(StepTimer, "infer", infer)
    monkeypatch.setattr(T, "fitting_batch", lambda arch, **kw: (10_000, 64 * 1024**3))
    return calls, cost


def test_cpu_batches_grow_from_one_row_until_a_step_would_pass_the_bound(fake_steps):
    calls, cost = fake_steps
    cost.update(train=0.01, frozen=0.005, infer=0.0025)
    lines = []
    # cap 7 s: a size's warm-up and one timed call may take a third of it, a step 1.17 s, so about 100 rows of
    # fine-tuning at 0.01 s a row; the prediction grows to its most, 128 rows
    t = time_steps(ARCH, 16, 12, CPU, batch=1024, eval_batch=128, cap_s=7.0, say=lines.append)
    assert calls[:2] == [("train", 1), ("infer", 1)]  # one row of each kind first
    grown = [rows for kind, rows in calls[2:] if kind == "train"]
    assert grown == sorted(set(grown)) and grown[-1] == t.batch  # then larger sizes, the largest kept
    assert 32 <= t.batch <= 64 and t.batch & (t.batch - 1) == 0  # the largest power of two under the bound
    assert t.step_s <= 7 / 6 < 2 * t.batch * cost["train"] * 1.0001
    assert t.eval_batch == 128 > t.batch and ("infer", t.eval_batch) in calls  # a prediction row costs less
    assert calls[-1] == ("frozen", t.batch)  # last: it freezes the weights
    assert t.spent_s <= t.cap_s == 7.0
    assert any(f"fine-tuning batch {t.batch} of 1024" in n for n in t.notes)
    # every step announced before it ran and reported after, in order
    assert lines[0].startswith("sizing the batches for cpu: at most 1024 rows (fine-tuning) and 128 (prediction)")
    assert lines[1] == "timing a fine-tuning step of every weight at batch 1 on cpu ..."
    assert lines[2].startswith("a fine-tuning step of every weight at batch 1: ")
    assert lines[2].endswith("(median of 3 calls after a warm-up)")
    assert lines[3] == "timing a prediction step at batch 1 on cpu ..."
    assert len(lines) == 1 + 2 * len(calls)


def test_cpu_batches_are_cut_to_the_memory_share(fake_steps, monkeypatch):
    monkeypatch.setattr(T, "fitting_batch", lambda arch, **kw: (4, 2 * 1024**3))
    t = time_steps(ARCH, 16, 12, CPU, batch=64, eval_batch=256, cap_s=30.0)
    assert (t.batch, t.eval_batch) == (4, 4)
    assert "the memory share (2.0 GB) holds batches of 4 rows" in t.notes


def test_without_room_for_a_prediction_step_nothing_more_is_timed(fake_steps):
    calls, cost = fake_steps
    cost["train"] = 0.2
    lines = []
    t = time_steps(ARCH, 16, 12, CPU, batch=8, eval_batch=8, cap_s=0.5, say=lines.append)
    assert calls == [("train", 1)] and "left no room for a prediction step" in lines[-1]
    assert t.row_step_s == t.step_s == t.embeddings_step_s  # priced from the step measured: upper bounds
    # the command line's estimate needs its figures: it times the steps it needs whatever they cost
    calls.clear()
    t = time_steps(ARCH, 16, 12, CPU, batch=8, eval_batch=8, cap_s=0.5, must_finish=True)
    assert calls[:2] == [("train", 1), ("infer", 1)] and t.batch == 1 and t.row_step_s < t.step_s
    assert any("puzzle rows alone priced as one of every weight" in n for n in t.notes)
    assert t.embeddings_step_s == t.step_s


def test_configured_batches_are_timed_as_they_are_off_cpu(fake_steps, monkeypatch):
    """CUDA and XLA keep the configured batches (the device is stubbed: a CPU tensor stands in for it)."""
    calls, _ = fake_steps
    monkeypatch.setattr(T, "SIZED_DEVICES", ())
    t = time_steps(ARCH, 16, 12, CPU, batch=16, eval_batch=32, cap_s=30.0)
    assert calls == [("train", 16), ("infer", 32), ("frozen", 16)] and (t.batch, t.eval_batch) == (16, 32)
    assert not t.notes


def test_estimate_times_both_kinds_of_step_and_prices_every_mode():
    e = estimate(ARCH, tasks=2, num_aug=1, finetune_steps=10, finetune="embeddings-then-all", embeddings_fraction=0.3,
                 batch_size=2, eval_batch_size=4, seq_len=16, vocab_size=12, repeats=1)
    assert e.finetune_step_s > 0 and e.embeddings_step_s > 0 and e.row_step_s > 0
    # per task (each is fine-tuned on its own): 3 steps on the rows alone, then 7 on every weight
    assert e.finetune_s == pytest.approx(2 * (3 * e.embeddings_step_s + 7 * e.finetune_step_s))
    assert e.finetune_seconds("all") == pytest.approx(2 * 10 * e.finetune_step_s)
    assert e.finetune_seconds("embeddings") == pytest.approx(2 * 10 * e.embeddings_step_s)
    assert e.finetune_seconds("none") == 0.0
    assert e.total_s == pytest.approx(e.finetune_s + e.inference_s + e.overhead_s) and e.total_s < KAGGLE_LIMIT_S
    text = format_estimate(e, 2, 1)
    assert "fits in Kaggle's 12 h limit" in text
    assert all(mode in text for mode in MODES) and "* embeddings-then-all" in text
    assert "10 fine-tuning steps per task (embeddings-then-all)" in text
    # without fine-tuning the header said "10 fine-tuning steps per task (none)"
    none = format_estimate(dataclasses.replace(e, mode="none"), 2, 1).splitlines()[0]
    assert none.endswith("no fine-tuning (the modes below priced at 10 steps per task):"), none


def test_estimate_prices_each_tasks_work_outside_fine_tuning_and_prediction():
    """A task's dataset and model load, and its demonstration pairs scored before and after fine-tuning: priced
    as the plan prices them. Without them `estimate` said about half of what `submit` took on small settings."""
    e = estimate(ARCH, tasks=3, num_aug=4, finetune_steps=5, batch_size=2, eval_batch_size=4, seq_len=16,
                 vocab_size=12, repeats=1, scored_rows=64)
    # per task: min(64 rows, its test rows, its demonstration rows) scored twice for the export's ACT steps
    rows = 3 * min(64, TEST_INPUTS_PER_TASK * 5, DEMO_PAIRS_PER_TASK * 5)
    assert e.setup_s == pytest.approx(3 * TASK_OVERHEAD_S)
    assert e.demo_s == pytest.approx(2 * rows * ARCH.halt_max_steps * e.row_step_s) and e.demo_s > 0
    assert e.overhead_s == pytest.approx(e.setup_s + e.demo_s)
    assert e.total_s == pytest.approx(e.finetune_s + e.inference_s + e.setup_s + e.demo_s)
    # no fine-tuning: no demonstration scoring (`solve_unit`), the dataset and the model still
    assert e.total_seconds("none") == pytest.approx(e.inference_s + e.setup_s)
    text = format_estimate(e, 3, 4)
    assert re.search(r"^  per task +0h\d\dm\d\ds +\(dataset and model load, 2 s a task, and its demonstration pairs "
                     r"scored before and after fine-tuning", text, re.M), text


def test_each_kind_of_step_is_timed_with_the_optimizers_submit_builds(monkeypatch):
    """The embeddings step is timed with the optimizers `submit` builds for it: no AdamATan2, SignSGD on the rows."""
    built = []
    real = T.make_optimizers
    monkeypatch.setattr(T, "make_optimizers", lambda cfg, model: built.append(cfg.freeze_weights) or real(cfg, model))
    estimate(ARCH, tasks=2, num_aug=1, finetune_steps=4, batch_size=2, eval_batch_size=2, seq_len=16, repeats=1)
    assert built == [False, True]


def test_estimate_command_applies_a_recipe(capsys, tmp_path, monkeypatch):
    import trm_kaggle.solve.pricing as E
    from trm_kaggle.cli import main
    from trm_kaggle.model.export import export_inference
    from trm_kaggle.model.trm import TinyRecursiveModel

    export_inference(tmp_path / "w", TinyRecursiveModel(ARCH, 16, 12, 3), arch=ARCH, seq_len=16, vocab_size=12)
    timed, real = [], E.estimate
    monkeypatch.setattr(E, "estimate", lambda arch, **kw: timed.append(arch) or real(arch, **kw))
    assert main(["estimate", "--weights", str(tmp_path / "w"), "--tasks", "2", "--recipe", "nvarc",
                 "--finetune-steps", "4", "--batch-size", "2", "--eval-batch-size", "2", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "num_aug 128, 4 fine-tuning steps per task (embeddings-then-all)" in out
    assert (timed[0].H_cycles, timed[0].halt_max_steps, timed[0].hidden_size) == (4, 10, ARCH.hidden_size)
    assert main(["estimate", "--tasks", "2"]) == 2
    assert "needs --weights EXPORT_DIR or --preset NAME" in capsys.readouterr().err


def test_estimate_prints_each_measurement_as_it_is_made(tmp_path, capsys, monkeypatch):
    """Each step's line is out before the next step starts, the table comes last, and on a CPU the table's
    batch is the one sized for the device (here the memory share's 4 rows, not the 16 asked for)."""
    from conftest import make_export

    from trm_kaggle.cli import main

    weights = make_export(tmp_path / "w")
    monkeypatch.setattr(T, "fitting_batch", lambda arch, **kw: (4, 3 * 1024**3))
    seen_before, real = [], StepTimer._timed

    def timed(self, what, rows, fn):
        seen_before.append(capsys.readouterr().err)  # what was printed before this step started
        return real(self, what, rows, fn)

    monkeypatch.setattr(StepTimer, "_timed", timed)
    assert main(["estimate", "--weights", str(weights), "--tasks", "3", "--num-aug", "1", "--finetune-steps", "2",
                 "--batch-size", "16", "--eval-batch-size", "16", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert len(seen_before) >= 3
    assert "sizing the batches for cpu" in seen_before[0]
    for before in seen_before[1:]:  # the previous step: announced, then measured, before this one began
        announce, measured = before.strip().splitlines()[-2:]
        assert announce.startswith("timing ") and announce.endswith(" on cpu ...")
        assert ": " in measured and " s (" in measured
    # the batch timed is at most what the memory share holds (how far it grows depends on this machine's speed)
    assert re.search(r"s per step of [1-4] rows training every weight", out) and re.search(r"timed on [1-4] rows", out)
    assert "the memory share (3.0 GB) holds batches of 4 rows" in out


def test_estimate_command_per_device(tmp_path, capsys):
    from conftest import make_export

    from trm_kaggle.cli import main

    weights = make_export(tmp_path / "w")
    assert main(["estimate", "--weights", str(weights), "--tasks", "5", "--devices", "2", "--num-aug", "1",
                 "--finetune-steps", "3", "--batch-size", "2", "--eval-batch-size", "4", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "for 3 tasks, num_aug 1, 3 fine-tuning steps per task" in out and "5 tasks over 2 devices" in out
    assert main(["estimate", "--weights", str(weights), "--devices", "0"]) == 2


# ---------------------------------------------------------------------------
# Timing a device whose calls cost what a script says, on a clock that only the fake steps advance: the
# first call in the process starts the device up, the first call of each kind and size carries one-time
# costs (kernel choice, memory), later calls cost their steady price.
# ---------------------------------------------------------------------------


class FakeClock:
    def __init__(self):
        self.now = 1_000.0

    def perf_counter(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class FakeDevice:
    """Calls of a known price on `clock`: `steady[kind](rows)` seconds, plus `first_call(kind, rows, price)` the
    first time a kind runs at a size, plus `startup` for the very first call."""

    def __init__(self, clock: FakeClock, steady: dict, first_call, startup: float = 0.0):
        self.clock, self.steady, self.first_call, self.startup = clock, steady, first_call, startup
        self.seen: set = set()
        self.calls: list[tuple[str, int]] = []

    def fn(self, kind: str, rows: int):
        def call():
            price = self.steady[kind](rows)
            if not self.seen:
                price += self.startup
            if (kind, rows) not in self.seen:
                price += self.first_call(kind, rows, price)
                self.seen.add((kind, rows))
            self.calls.append((kind, rows))
            self.clock.sleep(price)
        return call


@pytest.fixture
def fake_device(monkeypatch):
    import trm_kaggle.solve.plan as P

    clock = FakeClock()
    monkeypatch.setattr(T, "time", clock)
    monkeypatch.setattr(P, "time", clock)
    monkeypatch.setattr(T, "_wait", lambda device: None)
    monkeypatch.setattr(P, "device_name", lambda device: f"{device} (fake)")

    def install(steady: dict, first_call=lambda kind, rows, price: 0.0, startup: float = 0.0) -> FakeDevice:
        dev = FakeDevice(clock, steady, first_call, startup)
        monkeypatch.setattr(StepTimer, "_train_fn",
                            lambda self, rows, frozen: dev.fn("frozen" if frozen else "train", rows))
        monkeypatch.setattr(StepTimer, "_infer_fn", lambda self, rows: dev.fn("infer", rows))
        return dev

    return clock, install


PAPER = ArchConfig(hidden_size=512, num_heads=8, H_cycles=3, L_cycles=4, L_layers=2, halt_max_steps=16)


def test_cuda_start_up_is_left_out_and_a_short_budget_still_prices_a_plan(fake_device):
    """The solve of the first H100 run: 73 s until the deadline of a 97 s budget, and a plan that priced nothing
    because CUDA's first call (8 s: the context, the kernel libraries) and a new shape's first call ate the
    timing cap before one step was timed. Now the start-up runs before the cap's clock, the cap has a floor,
    and the plan is priced from steady steps."""
    import trm_kaggle.solve.plan as P

    clock, install = fake_device
    dev = install({"train": lambda rows: 0.2 * rows / 64, "frozen": lambda rows: 0.12 * rows / 64,
                   "infer": lambda rows: 0.1 * rows / 256},
                  first_call=lambda kind, rows, price: 1.5, startup=8.0)
    c = SolveConfig(challenges="c.json", weights="w", time_budget=97, num_aug="auto", finetune_steps="auto")
    plan, run = P.plan_worker(c, PAPER, 900, 12, torch.device("cuda"), [(1, 3)] * 12, clock.monotonic() + 73.0)
    r = plan.rates
    assert r is not None and not plan.short, plan.describe()
    assert dev.calls[:2] == [("train", 1), ("infer", 1)] and r.startup_s >= 8.0  # the start-up, untimed
    assert (r.batch, r.eval_batch) == (64, 256)  # CUDA-sized steps, each timed after its own warm-up
    assert r.step_s == pytest.approx(0.2) and r.row_step_s == pytest.approx(0.1 / 256)
    assert r.embeddings_step_s == pytest.approx(0.12)
    assert r.timing_s <= r.cap_s == pytest.approx(73 / 8)
    assert plan.fits and plan.finetune_steps > 0, plan.describe()  # fine-tuning priced into the time left
    assert f"start-up {r.startup_s:.1f} s (not counted)" in plan.describe()


def test_the_cap_is_honoured_and_first_calls_never_set_a_price(fake_device, monkeypatch):
    """`estimate` on a CPU whose memory estimate takes 5 s (said, before the cap's clock), whose first call at
    each size costs three times the steady price, and whose first step of the puzzle rows alone costs more than
    a full step: the timing ends inside its cap (one call past it at most), every figure is a steady price, and
    the rows-alone step is never priced over a full one."""
    clock, install = fake_device

    def slow_memory_estimate(arch, **kw):
        clock.sleep(5.0)
        return (10_000, 64 * 1024**3)

    monkeypatch.setattr(T, "fitting_batch", slow_memory_estimate)
    dev = install({"train": lambda rows: 0.4 + 0.05 * rows, "frozen": lambda rows: 0.2 + 0.03 * rows,
                   "infer": lambda rows: 0.05 + 0.01 * rows},
                  first_call=lambda kind, rows, price: (4.0 if kind == "frozen" else 2.0) * price)
    start = clock.perf_counter()
    e = estimate(ARCH, tasks=120, num_aug=8, finetune_steps=100, batch_size=64, eval_batch_size=64, device="cpu",
                 cap_s=45.0)
    elapsed = clock.perf_counter() - start
    longest = max(dev.steady[k](n) * (5 if k == "frozen" else 3) for k, n in dev.calls)
    assert e.timing.spent_s <= 45.0 + longest and e.timing.spent_s == pytest.approx(elapsed - 5.0)
    assert ("frozen", e.batch) in dev.calls
    assert e.timing.sizing_s == pytest.approx(5.0)
    assert e.finetune_step_s == pytest.approx(dev.steady["train"](e.batch))
    assert e.row_step_s == pytest.approx(dev.steady["infer"](e.eval_batch) / e.eval_batch)
    assert e.embeddings_step_s == pytest.approx(dev.steady["frozen"](e.batch))
    assert e.embeddings_step_s < e.finetune_step_s


@pytest.mark.slow
def test_estimate_prices_test_time_sampling_k_trajectories_times_the_depth(tmp_path, capsys, monkeypatch):
    """`--trajectories K --test-depth H` reach the estimate as K x H row-steps per test input, and it says so."""
    import trm_kaggle.solve.pricing as E
    from conftest import make_export

    from trm_kaggle.cli import main

    weights = make_export(tmp_path / "w")
    seen, real = [], E.estimate
    monkeypatch.setattr(E, "estimate", lambda arch, **kw: seen.append(kw["act_steps"]) or real(arch, **kw))
    common = ["estimate", "--weights", str(weights), "--tasks", "2", "--num-aug", "1", "--finetune-steps", "1",
              "--batch-size", "2", "--eval-batch-size", "2", "--device", "cpu"]
    assert main([*common, "--trajectories", "4", "--test-depth", "6", "--trajectory-noise", "0.3"]) == 0
    assert "4 trajectories x 6 ACT steps = 24 row-steps per augmented test input" in capsys.readouterr().out
    assert main(common) == 0
    assert "trajectories x" not in capsys.readouterr().out
    assert seen[0] == 24 and seen[1] < 24
    assert main([*common, "--test-depth", "8"]) == 0
    assert "1 trajectory x 8 ACT steps = 8 row-steps" in capsys.readouterr().out and seen[2] == 8
    assert main([*common, "--trajectories", "99"]) == 2  # the config's bound, one line
    assert "trajectories" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--num-aug", "--finetune-steps"])
def test_estimate_refuses_auto_which_only_a_time_budget_can_size(flag, capsys):
    from trm_kaggle.cli import main

    assert main(["estimate", "--preset", "arc2", flag, "auto", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"{flag} auto: estimate prices a given count" in err and "time_budget" not in err


def test_estimate_refuses_a_preset_modifier_that_sets_no_architecture(capsys):
    """`--preset sudoku4-cpu+lion+batch2048+no-ema` ran with status 0 and no word of the three modifiers: estimate
    times the preset's architecture alone. A modifier that sets none is refused, naming what it sets."""
    from trm_kaggle.cli import main

    assert main(["estimate", "--preset", "sudoku4-cpu+lion+batch2048+no-ema", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --preset sudoku4-cpu+lion+batch2048+no-ema: lion sets no architecture (beta2, optimizer), "
                   "and estimate times the preset's architecture alone: drop lion"], err


@pytest.mark.parametrize("arguments, words", [
    (dict(act_steps=-3), "act_steps=-3"),  # priced negative seconds
    (dict(tasks=-1), "tasks=-1"),  # a torch error deep in the timing
    (dict(tasks=float("nan")), "tasks=nan"),
    (dict(num_aug=float("inf")), "num_aug=inf"),
    (dict(finetune="bogus"), "finetune='bogus': expected one of"),
    (dict(embeddings_fraction=float("nan")), "embeddings_fraction=nan"),
    (dict(batch_size=0), "batch_size=0"),
    (dict(seq_len=-1), "seq_len=-1"),
    (dict(vocab_size=1), "vocab_size=1"),
    (dict(cap_s=0), "cap_s=0"),
])
def test_the_library_estimates_arguments_are_checked_before_a_step_is_timed(monkeypatch, arguments, words):
    monkeypatch.setattr("trm_kaggle.solve.pricing.time_steps", lambda *a, **k: pytest.fail("timed"))
    with pytest.raises(ValueError, match=re.escape(words)):
        estimate(ArchConfig(hidden_size=32, L_layers=1, num_heads=2), **arguments)


@pytest.mark.parametrize("arguments, words", [(dict(devices=0), "devices=0"), (dict(tasks=-1), "tasks=-1")])
def test_estimate_kernels_counts_are_checked_first(tmp_path, arguments, words):
    """`estimate_kernel(devices=0)` was a ZeroDivisionError."""
    from trm_kaggle.solve.pricing import estimate_kernel

    with pytest.raises(ValueError, match=re.escape(words)):
        estimate_kernel(SolveConfig(challenges="c.json", weights="w"), preset="sudoku4-cpu", **arguments)


@pytest.mark.parametrize("device, words", [("nosuch", "device='nosuch': not a device"), ("", "device='': not a device"),
                                           (5, "device=5: expected a device name"), (None, "device=None")])
def test_estimates_device_is_checked_as_every_device_setting(monkeypatch, device, words):
    """`estimate(device="nosuch")` was torch's RuntimeError, naming no argument."""
    from trm_kaggle.errors import TRMError

    monkeypatch.setattr("trm_kaggle.solve.pricing.time_steps", lambda *a, **k: pytest.fail("timed"))
    with pytest.raises((ValueError, TRMError), match=re.escape(words)):
        estimate(ArchConfig(hidden_size=32, L_layers=1, num_heads=2), device=device)


@pytest.mark.parametrize("device", ["meta", "lazy", "hpu"])
def test_a_device_type_torch_knows_but_nothing_here_runs_on_is_one_line(capsys, device):
    """`estimate --device meta` was a traceback, exit 1: torch.device took it, the timing failed on it."""
    from trm_kaggle.cli import main

    assert main(["estimate", "--preset", "sudoku4-cpu", "--device", device]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: device='{device}': not a device this package runs on") and err.count("\n") == 1


@pytest.mark.parametrize("arguments, words", [
    (dict(), "weights=None and preset=None: expected one of them"),  # the defaults: a TypeError from the presets
    (dict(weights=""), "weights='' and preset=None: expected one of them"),
    (dict(weights="", preset=""), "weights='' and preset='': expected one of them"),
    (dict(weights="w", preset="arc2"), "weights='w' and preset='arc2': expected one of them"),
    (dict(weights=5), "weights=5: expected an export folder"),
    (dict(preset=["arc2"]), "preset=['arc2']: expected a training preset's name"),
])
def test_estimate_kernel_needs_one_of_weights_or_preset(monkeypatch, arguments, words):
    """`estimate_kernel(cfg)` with neither was Python's TypeError from the preset reader, naming no argument."""
    from trm_kaggle.solve.pricing import estimate_kernel

    monkeypatch.setattr("trm_kaggle.solve.pricing.time_steps", lambda *a, **k: pytest.fail("timed"))
    with pytest.raises(ValueError, match=re.escape(words)):
        estimate_kernel(SolveConfig(challenges="-", weights="-", num_aug=1, finetune_steps=1), **arguments)


def test_estimate_refuses_an_export_that_is_no_arc_model(tmp_path, capsys, monkeypatch):
    """A Sudoku export (vocab 6, seq_len 16) was priced for the ARC kernel with status 0, although the bundle
    refuses it: the kernel answers no ARC task with it. Both refuse it with the bundle's check, in one line."""
    from trm_kaggle.cli import main
    from trm_kaggle.errors import TRMError
    from trm_kaggle.model.export import export_inference
    from trm_kaggle.model.trm import TinyRecursiveModel
    from trm_kaggle.solve.pricing import estimate_kernel

    weights = export_inference(tmp_path / "sudoku", TinyRecursiveModel(ARCH, 16, 6, 3), arch=ARCH, seq_len=16,
                               vocab_size=6)
    monkeypatch.setattr("trm_kaggle.solve.pricing.time_steps", lambda *a, **k: pytest.fail("timed"))
    with pytest.raises(TRMError, match=re.escape(f"{weights}: not an ARC model: its config.json has vocab_size 6")):
        estimate_kernel(SolveConfig(challenges="-", weights="-"), weights=str(weights), device="cpu")
    assert main(["estimate", "--weights", str(weights), "--tasks", "2", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {weights}: not an ARC model") and err.count("\n") == 1, err
