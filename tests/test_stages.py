"""Data curriculum: each stage samples only what it allows, at its own LR, switching at the right step."""

import json
from pathlib import Path

import numpy as np
import pytest

from trm_kaggle.config import TrainConfig, TrainStage
from trm_kaggle.data.puzzles.grids import build_grid_dataset
from trm_kaggle.errors import TRMError
from trm_kaggle.data.loader import PuzzleLoader
from trm_kaggle.train.stages import StagePlan, stage_bounds

TYPES = ["missing_colon", "flipped_comparison", "wrong_variable"]


@pytest.fixture
def tagged(tmp_path: Path) -> Path:
    """60 one-pair groups; example i holds token i + 1 first, has bug type TYPES[i % 3] and difficulty i / 60."""
    n = 60
    train = [[(None, [([[i + 1, 0]], [[i + 1, 1]])])] for i in range(n)]
    test = [[(None, [([[1, 0]], [[1, 1]])])]]
    out = tmp_path / "ds"
    build_grid_dataset(out, train=train, test=test, vocab_size=n + 2, grid_shape=(1, 2))
    with open(out / "train" / "repair_meta.jsonl", "w") as f:
        for i in range(n):
            f.write(json.dumps({"example": i, "bug_type": TYPES[i % 3], "category": "x", "difficulty": i / n,
                                "source": f"f{i}.py", "line": 1}) + "\n")
    return out


def examples_of(batch) -> np.ndarray:
    return batch["inputs"][:, 0].numpy() - 1


STAGES = [TrainStage(bug_types=["missing_colon"], share=1), TrainStage(max_difficulty=0.5, share=1, lr_scale=0.5),
          TrainStage(share=2, lr=0.01)]


def test_stage_bounds_normalise_shares():
    assert stage_bounds(STAGES, 40) == [0, 10, 20, 40]
    assert stage_bounds([TrainStage(share=0.15), TrainStage(share=0.85)], 7) == [0, 1, 7]


def test_sampling_honours_each_stage_and_switches_at_its_step(tagged):
    loader = PuzzleLoader(tagged, "train", global_batch_size=4, seed=1, prefetch=0)
    plan = StagePlan(STAGES, [loader.groups_where(np.arange(60) % 3 == 0),
                              loader.groups_where(np.arange(60) / 60 <= 0.5), None], run_steps=12, base_lr=1e-3)
    assert plan.bounds == [0, 3, 6, 12]
    assert [plan.lr_factor(s) for s in (0, 2, 3, 5, 6, 11, 50)] == [1, 1, 0.5, 0.5, 10, 10, 10]
    loader.set_group_filter(plan.group_mask_at)
    seen = []
    for step, batch in zip(range(30), loader):
        ex = examples_of(batch)
        seen.append(ex)
        if step < 3:
            assert (ex % 3 == 0).all(), (step, ex)
        elif step < 6:
            assert (ex / 60 <= 0.5).all(), (step, ex)
    assert any((ex % 3 != 0).any() for ex in seen[3:6])  # the second stage really widened the sampling
    assert any((ex / 60 > 0.5).any() for ex in seen[6:])


def test_filtered_stream_resumes_exactly(tagged):
    def make():
        loader = PuzzleLoader(tagged, "train", global_batch_size=4, seed=2, prefetch=1)
        plan = StagePlan(STAGES, [loader.groups_where(np.arange(60) % 3 == 0), None, None], 8, 1e-3)
        loader.set_group_filter(plan.group_mask_at)
        return loader

    full = [examples_of(b) for _, b in zip(range(14), make())]
    for cut in (2, 3, 7):  # inside the first stage, at the switch, later
        first = make()
        it = iter(first)
        head = [examples_of(next(it)) for _ in range(cut)]
        resumed = make()
        resumed.load_state_dict(first.state_dict())
        tail = [examples_of(b) for _, b in zip(range(14 - cut), resumed)]
        assert all(np.array_equal(a, b) for a, b in zip(head + tail, full)), cut


def test_a_filter_too_narrow_for_a_batch_is_an_error(tagged):
    loader = PuzzleLoader(tagged, "train", global_batch_size=8, seed=0, prefetch=0)
    loader.set_group_filter(lambda step: loader.groups_where(np.arange(60) < 3))
    with pytest.raises(TRMError, match="allows 3 groups, too few to fill a batch of 8"):
        next(iter(loader))


def test_plan_from_config_reads_the_metadata(tagged):
    loader = PuzzleLoader(tagged, "train", global_batch_size=4, prefetch=0)
    cfg = TrainConfig(data_paths=[str(tagged)], stages=[{"bug_types": ["wrong_variable"], "max_difficulty": 0.5},
                                                        {"lr_scale": 2.0}])
    plan = StagePlan.from_config(cfg, loader, 10)
    assert np.flatnonzero(plan.group_masks[0]).tolist() == [2, 5, 8, 11, 14, 17, 20, 23, 26, 29]
    assert plan.group_masks[1] is None
    with pytest.raises(TRMError, match="unknown bug type 'typo'"):
        StagePlan.from_config(cfg.model_copy(update={"stages": [TrainStage(bug_types=["typo"])]}), loader, 10)
    with pytest.raises(TRMError, match="allows no training example"):
        StagePlan.from_config(cfg.model_copy(update={"stages": [TrainStage(bug_types=[TYPES[1]], max_difficulty=0.0)]}), loader, 10)


def test_stage_lr_must_be_one_kind():
    with pytest.raises(ValueError, match="lr or lr_scale, not both"):
        TrainStage(lr=0.1, lr_scale=2)


def test_training_applies_the_stage_lr_and_logs_the_stage(tagged, tmp_path, caplog):
    import logging

    from trm_kaggle.train.loop import train
    from trm_kaggle.train.metrics import read_metrics
    from trm_kaggle.train.settings import load_train_config

    cfg = load_train_config(presets=["cpu-smoke"], overrides=[
        f"data_paths=[{tagged}]", f"checkpoint_path={tmp_path / 'run'}", "max_steps=8", "global_batch_size=4",
        "log_interval=1", "lr=0.001", "lr_warmup_steps=0", "progress=False", "arch.puzzle_emb_ndim=0",
        "stages=[{bug_types: [missing_colon], share: 1}, {lr_scale: 0.5, share: 2}, {lr: 0.01, share: 1}]"])
    with caplog.at_level(logging.INFO, logger="trm_kaggle"):
        train(cfg)
    plan = [r for r in caplog.records if r.getMessage().startswith("data curriculum: ")]
    assert len(plan) == 1 and plan[0].levelno == logging.INFO  # the plan is news, not a problem
    records, _ = read_metrics(tmp_path / "run")
    assert [r["stage"] for r in records] == [1, 1, 2, 2, 2, 2, 3, 3]
    assert [r["lr"] for r in records] == pytest.approx([1e-3] * 2 + [5e-4] * 4 + [1e-2] * 2)


def test_a_staged_run_resumed_with_another_max_steps_is_refused(tagged, tmp_path):
    """The stages are shares of the run's length: a resume with another max_steps moved their bounds under it
    (stage 5 went back to stage 3 at the resumed step) and trained another curriculum without a word."""
    from trm_kaggle.train.loop import train
    from trm_kaggle.train.settings import load_train_config

    def cfg(max_steps: int):
        return load_train_config(presets=["cpu-smoke"], overrides=[
            f"data_paths=[{tagged}]", f"checkpoint_path={tmp_path / 'run'}", f"max_steps={max_steps}",
            "global_batch_size=4", "progress=False", "arch.puzzle_emb_ndim=0",
            "stages=[{bug_types: [missing_colon], share: 1}, {share: 1}]"])

    train(cfg(2))
    with pytest.raises(TRMError, match=r"max_steps \(the stages are shares of it\): 2 in it, 6 now"):
        train(cfg(6))
    assert train(cfg(2)).step == 2  # the same max_steps resumes (nothing left to do)
