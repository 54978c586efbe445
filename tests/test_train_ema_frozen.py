"""An EMA run with frozen weights (`freeze_weights`): fresh, and as the second stage of a staged schedule."""

from pathlib import Path

import pytest
import torch

from trm_kaggle.model.export import read_export
from trm_kaggle.train import checkpoint as ckpt
from trm_kaggle.train.loop import train
from trm_kaggle.train.settings import load_train_config

TINY = ["arch.hidden_size=32", "arch.num_heads=2", "arch.expansion=2", "arch.H_cycles=2", "arch.L_cycles=2",
        "arch.L_layers=1", "arch.halt_max_steps=3", "arch.puzzle_emb_len=2", "arch.forward_dtype=float32",
        "global_batch_size=8", "lr_warmup_steps=2", "puzzle_emb_lr=1e-2", "eval_interval=null",
        "log_interval=1", "progress=False", "device=cpu", "threads=1", "seed=3", "ema=true"]


def cfg_for(data: Path, run: Path, *extra: str):
    return load_train_config(overrides=[f"data_paths=[{data}]", f"checkpoint_path={run}", *TINY, *extra])


def test_a_frozen_stage_keeps_the_average_of_the_stage_before(sudoku4, tmp_path):
    """freeze_weights=true ema=true was a traceback at the first step (an average of no tensors); the average of a
    stage that trained the weights is kept whole through the frozen stage and exported as before."""
    run = tmp_path / "run"
    train(cfg_for(sudoku4, run, "max_steps=2"))
    averaged = ckpt.load_train_state(ckpt.list_states(run)[-1])["ema"]
    assert train(cfg_for(sudoku4, run, "max_steps=4", "freeze_weights=true")).step == 4
    saved = ckpt.load_train_state(ckpt.list_states(run)[-1])
    assert saved["ema"].keys() == averaged.keys()
    for name, t in averaged.items():
        torch.testing.assert_close(saved["ema"][name], t, rtol=0, atol=0)
    ckpt.export_run(run, tmp_path / "export")
    _, weights = read_export(tmp_path / "export")
    torch.testing.assert_close(weights["lm_head.weight"], averaged["lm_head.weight"], rtol=0, atol=0)


def test_a_fresh_frozen_run_averages_its_starting_weights(sudoku4, tmp_path):
    result = train(cfg_for(sudoku4, tmp_path / "run", "max_steps=2", "freeze_weights=true"))
    assert result.step == 2
    saved = ckpt.load_train_state(ckpt.list_states(tmp_path / "run")[-1])
    assert saved["ema"] and all(torch.equal(saved["ema"][n], saved["model"][n]) for n in saved["ema"])


@pytest.fixture(scope="module")
def sudoku4(tmp_path_factory) -> Path:
    from trm_kaggle.config import SudokuBuildConfig
    from trm_kaggle.data.puzzles.sudoku import build_sudoku

    out = tmp_path_factory.mktemp("data") / "sudoku4"
    build_sudoku(SudokuBuildConfig(output_dir=str(out), size=4, num_train=16, num_test=4, num_aug=1, progress=False))
    return out
