"""Test-time levers in the rollout: noisy trajectories (K rows per example, seeded noise, Q-halt selection,
first-to-halt), settling at a test depth, their bounds in the configs and their price in a solve's plan."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import TINY_ARCH
from trm_kaggle.config import EvaluateConfig, SolveConfig
from trm_kaggle.data import PuzzleLoader
from trm_kaggle.data.format import load_metadata
from trm_kaggle.model import ContinuousRollout, TinyRecursiveModel, act_rollout
from trm_kaggle.model.rollout import Finished


def _model(data, steps: int = 4) -> TinyRecursiveModel:
    meta = load_metadata(data, "test")
    torch.manual_seed(0)
    model = TinyRecursiveModel(TINY_ARCH.with_recursion(halt_max_steps=steps), meta.seq_len, meta.vocab_size,
                               meta.num_puzzle_identifiers).eval()
    with torch.no_grad():  # a q head that says something: some rows halt early, q_halt differs between rows
        torch.nn.init.normal_(model.q_head.weight, std=0.5)
        model.q_head.bias.fill_(0.0)
    return model


def _batches(data, size: int = 5):
    return [{k: item.batch[k][:item.num_real] for k in ("inputs", "labels", "puzzle_identifiers")}
            for item in PuzzleLoader(data, "test", size, test_mode=True, prefetch=0)]


def _run(model, data, slots=6, steps=4, **kw) -> Finished:
    from trm_kaggle.model.rollout import _merge

    with torch.no_grad():
        done = _merge(list(ContinuousRollout(model, slots, steps, device="cpu", **kw).run(_batches(data))))
    order = np.lexsort((np.zeros(len(done.ids)) if done.trajectory is None else done.trajectory, done.ids))
    from trm_kaggle.model.rollout import _take

    return _take(done, order)


def test_one_trajectory_or_no_noise_is_todays_rollout_bit_for_bit_and_noise_is_seeded(sudoku4):
    model = _model(sudoku4)
    plain = _run(model, sudoku4)
    for kw in ({"trajectories": 1}, {"trajectories": 8, "noise": 0.0}, {"trajectories": 1, "noise": 0.5}):
        same = _run(model, sudoku4, **kw)
        for f in ("tokens", "q_halt", "steps"):
            assert torch.equal(getattr(same, f), getattr(plain, f)), (kw, f)
        assert same.trajectory is None
    noisy = _run(model, sudoku4, trajectories=4, noise=0.5, seed=3, select="all")
    assert len(noisy) == 4 * len(plain) and noisy.trajectory.tolist() == [0, 1, 2, 3] * len(plain)
    again = _run(model, sudoku4, trajectories=4, noise=0.5, seed=3, select="all")
    for f in ("tokens", "q_halt", "steps"):  # the same seed draws the same noise
        assert torch.equal(getattr(noisy, f), getattr(again, f)), f
    other = _run(model, sudoku4, trajectories=4, noise=0.5, seed=4, select="all")
    assert not torch.equal(noisy.q_halt, other.q_halt)  # another seed, other noise
    zero = noisy.trajectory == 0  # trajectory 0 runs without noise: today's prediction, whatever its neighbours
    torch.testing.assert_close(noisy.q_halt[torch.from_numpy(zero)], plain.q_halt)
    assert not torch.equal(noisy.q_halt[torch.from_numpy(~zero)].view(len(plain), 3)[:, 0], plain.q_halt)
    chosen = _run(model, sudoku4, trajectories=4, noise=0.5, seed=3)  # one per example: the highest q_halt
    assert chosen.ids.tolist() == plain.ids.tolist()
    best = noisy.q_halt.view(-1, 4).argmax(-1)
    assert chosen.trajectory.tolist() == best.tolist()
    assert torch.equal(chosen.q_halt, noisy.q_halt.view(-1, 4).max(-1).values)


def _finished(ids, q, steps, traj) -> Finished:
    n = len(ids)
    return Finished(np.array(ids), torch.arange(n, dtype=torch.uint8).view(n, 1), torch.tensor(q), torch.tensor(steps),
                    {}, None, np.array(traj))


def test_selection_rules_q_halt_and_first_to_halt():
    rollout = ContinuousRollout.__new__(ContinuousRollout)
    #             example 0: none halted     example 1: two halted, the earlier wins    example 2: a tie
    f = _finished([0, 0, 0, 1, 1, 1, 2, 2], [-1.0, -0.5, -2.0, 3.0, 0.5, 2.0, 1.0, 1.0], [4, 4, 4, 4, 2, 3, 2, 2],
                  [0, 1, 2, 0, 1, 2, 0, 1])
    rollout.select = "q_halt"
    got = rollout._choose(f)
    assert got.ids.tolist() == [0, 1, 2] and got.trajectory.tolist() == [1, 0, 0]
    rollout.select = "first_halt"
    got = rollout._choose(f)
    assert got.trajectory.tolist() == [1, 1, 0]  # none halted: the highest q_halt; a tie: trajectory 0


def test_first_halt_stops_trajectories_at_their_first_halt_and_settling_matches_the_predictions(sudoku4):
    model = _model(sudoku4)
    first = _run(model, sudoku4, trajectories=3, noise=0.3, select="first_halt", early_exit=True)
    assert len(first) == len(_run(model, sudoku4)) and (first.steps <= 4).all()
    # settled = the predictions of the last three steps equal, checked against three separate rollouts
    batch = {k: torch.cat([b[k] for b in _batches(sudoku4)]) for k in ("inputs", "labels", "puzzle_identifiers")}
    with torch.no_grad():
        tokens = [act_rollout(model, batch, s).tokens for s in (6, 7, 8)]
    want = ((tokens[0] == tokens[1]).all(-1) & (tokens[1] == tokens[2]).all(-1))
    deep = _run(model, sudoku4, slots=len(batch["inputs"]), steps=8, track_settled=True)
    assert torch.equal(deep.settled, want) and torch.equal(deep.tokens, tokens[2])
    assert not _run(model, sudoku4, steps=2, track_settled=True).settled.any()  # fewer than three steps


def test_bounds_and_contradictions_are_refused_and_the_plan_prices_the_work():
    from pydantic import ValidationError

    from trm_kaggle.solve.pricing import prediction_steps, with_test_time
    from trm_kaggle.solve.plan import Rates

    for bad, words in (({"trajectories": 4}, "need a trajectory_noise"),
                       ({"trajectory_noise": 0.1}, "needs trajectories of 2"),
                       # settings of the trajectories that nothing reads with one trajectory
                       ({"trajectory_select": "first_halt"}, "trajectory_select 'first_halt' needs trajectories"),
                       ({"trajectory_seed": 3, "trajectory_noise": 0.1}, "trajectory_noise 0.1, trajectory_seed 3 "
                                                                         "need trajectories of 2"),
                       ({"trajectories": 33, "trajectory_noise": 0.1}, "less than or equal to 32"),
                       ({"trajectories": 2, "trajectory_noise": 1.5}, "less than or equal to 1"),
                       # float32 rounds it away: K identical runs at K x the time
                       ({"trajectories": 2, "trajectory_noise": 5e-324}, "trajectory_noise 5e-324 is below 1e-06"),
                       ({"test_depth": 0}, "greater than or equal to 1"),
                       ({"test_depth": 8, "max_steps": 4}, "disagree")):
        with pytest.raises(ValidationError, match=words):
            EvaluateConfig(**bad)
    cfg = EvaluateConfig(trajectories=4, trajectory_noise=0.2, trajectory_select="first_halt", test_depth=12)
    assert cfg.steps == 12 and cfg.stops_at_first_halt
    solve = SolveConfig(challenges="c.json", weights="w", trajectories=8, trajectory_noise=0.25, test_depth=32)
    assert solve.evaluation().trajectories == 8 and solve.evaluation().test_depth == 32
    with pytest.raises(ValidationError, match="need a trajectory_noise"):
        SolveConfig(challenges="c.json", weights="w", trajectories=8)
    with pytest.raises(ValidationError, match="trajectory_noise 1e-300 is below 1e-06 of the state's size"):
        SolveConfig(challenges="c.json", weights="w", trajectories=4, trajectory_noise=1e-300)
    assert SolveConfig(challenges="c.json", weights="w", trajectories=4, trajectory_noise=1e-6).trajectories == 4
    with pytest.raises(ValidationError, match="trajectory_select 'first_halt' needs trajectories of 2"):
        SolveConfig(challenges="c.json", weights="w", trajectory_select="first_halt")
    # a submit's seed (the Kaggle kernel's SEED, the pipeline's 42) seeds the noise of trajectories it may not have
    assert SolveConfig(challenges="c.json", weights="w", seed=42).evaluation().trajectory_seed == 0
    assert SolveConfig(challenges="c.json", weights="w", seed=42, trajectories=2,
                       trajectory_noise=0.1).evaluation().trajectory_seed == 42
    assert prediction_steps(solve, 16) == 8 * 32
    assert prediction_steps(SolveConfig(challenges="c.json", weights="w"), 16) == 16
    rates = Rates("cpu", 1.0, 0.5, 0.01, 16, 8, 8)
    assert with_test_time(solve, rates).halt_max_steps == 256 and rates.halt_max_steps == 16


@pytest.mark.slow  # a whole solve: about 15 s on a busy 2-core machine
def test_submit_predicts_with_the_trajectories_and_depth_it_was_given(tmp_path, monkeypatch):
    import trm_kaggle.solve.task as T
    from conftest import SOLVE_ARCH, small_unseen_tasks, solve_config
    from trm_kaggle.solve import solve

    (tmp_path / "unseen").mkdir()
    unseen = small_unseen_tasks(tmp_path / "unseen", 1, SOLVE_ARCH)
    seen, got, real = [], [], T.evaluate
    monkeypatch.setattr(T, "evaluate", lambda model, data, cfg, **kw: seen.append(cfg) or got.append(
        real(model, data, cfg, **kw)) or got[-1])
    cfg = solve_config(unseen, tmp_path, finetune="none", trajectories=2, trajectory_noise=0.2, test_depth=3)
    report = solve(cfg)
    assert report["valid"] and not report["errors"] and report["answered"] == 1
    (used,) = seen
    assert (used.trajectories, used.trajectory_noise, used.test_depth, used.trajectory_seed) == (2, 0.2, 3, cfg.seed)
    (res,) = got
    assert res.predictions.trajectories == 2 and res.summary()["prediction_rows"] == 2 * res.summary()["num_examples"]
    assert res.summary()["settled"] is not None and res.predictions.max_steps == 3
    result = json.loads(next((tmp_path / "work" / "units").glob("*/result.json")).read_text())
    assert result["key"]["trajectories"] == 2 and result["key"]["test_depth"] == 3  # a rerun without them re-solves


def test_an_examples_noise_is_its_own_whatever_the_batch_or_the_examples_run_beside_it(sudoku4):
    from trm_kaggle.evaluate.predict import predict_split

    model = _model(sudoku4)
    with torch.no_grad():  # q_halt about 0: the rows stop at steps 2 to 4, and their slots take the next rows
        model.q_head.bias.fill_(-1.0)
    kw = dict(device="cpu", early_exit=True, max_steps=4, trajectories=4, noise=0.5, seed=3, prefetch=0)
    whole = predict_split(model, sudoku4, batch_size=8, **kw)
    n = len(whole) // 4
    assert n >= 4 and len(np.unique(whole.steps)) > 1  # rows stop at different steps: refills mix the batch
    for size in (1, 3):  # other batches: other rows beside each example, started at other loop iterations
        got = predict_split(model, sudoku4, batch_size=size, **kw)
        assert np.array_equal(got.tokens, whole.tokens) and np.array_equal(got.steps, whole.steps), size
        np.testing.assert_allclose(got.q_halt, whole.q_halt, rtol=1e-4, atol=1e-5)
    picked = np.arange(1, n, 2)  # part of the split: each example draws the noise the whole split drew for it
    part = predict_split(model, sudoku4, batch_size=3, examples=picked, **kw)
    rows = (picked[:, None] * 4 + np.arange(4)).ravel()
    assert np.array_equal(part.tokens, whole.tokens[rows]) and np.array_equal(part.steps, whole.steps[rows])
    np.testing.assert_allclose(part.q_halt, whole.q_halt[rows], rtol=1e-4, atol=1e-5)
    # and the trajectories of one example draw apart: noise of their own, trajectory 0 none
    q = whole.q_halt.reshape(n, 4)
    assert all(len(np.unique(row[1:])) == 3 for row in q)
    # a Sudoku's score (one selected trajectory per example) is the batch size's no more than the votes are
    from trm_kaggle.evaluate.dataset import score_dataset

    cfg = EvaluateConfig(trajectories=4, trajectory_noise=0.5, trajectory_seed=3, trajectory_select="first_halt",
                         max_steps=4)
    scores = [score_dataset(model, sudoku4, cfg, device="cpu", batch_size=size).summary() for size in (2, 8)]
    for field in ("token_accuracy", "exact_accuracy", "mean_steps", "noisy_chosen"):
        assert scores[0][field] == scores[1][field], field
