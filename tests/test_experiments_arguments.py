"""The experiment functions called from Python: an argument of the wrong type is one TypeError naming it, before
any work (the config package's argument checks, which train() uses too). A str where a list goes was read a
character at a time (the seeds '10' as [1, 0], the preset 's'): one name is now one name, and seeds are refused;
None or a number where a path goes was pathlib's TypeError, naming nothing."""

from __future__ import annotations

import pytest

from trm_kaggle.config import SweepGrid
from trm_kaggle.experiments import load_grid, load_runs, plan_sweep, regress, run_sweep, with_seeds, write_comparison

GRID = SweepGrid(name="g1", axes=[[{"name": "baseline"}, {"name": "no-ema"}]], seeds=[0])


@pytest.mark.parametrize("call, said", [
    (lambda d: with_seeds(GRID, "10"), "seeds: expected a list of whole numbers, got str"),
    (lambda d: with_seeds(GRID, 5), "seeds: expected a list of whole numbers, got int"),
    (lambda d: with_seeds({"axes": []}, [0]), "grid: expected a SweepGrid"),
    (lambda d: plan_sweep(GRID, d, overrides=b"max_steps=4"),
     "overrides: expected a key=value override or a list of them, got bytes"),
    (lambda d: plan_sweep(GRID, d, presets=5), "presets: expected a preset's name or a list of them, got int"),
    (lambda d: plan_sweep({"axes": [["baseline"]]}, d), "grid: expected a SweepGrid (load_grid reads one; "
                                                        "SweepGrid.model_validate makes one of a dict), got dict"),
    (lambda d: plan_sweep(GRID, d, overrides=[5]), "overrides[0]: expected a str (a key=value override), got int"),
    (lambda d: plan_sweep(GRID, d, config_file=5), "config_file: expected a config file's path (a str or "
                                                   "os.PathLike) or None, got int"),
    (lambda d: plan_sweep(GRID, None), "sweep_dir: expected the sweep folder's path (a str or os.PathLike), got "
                                       "NoneType"),
    (lambda d: run_sweep(GRID, 5), "sweep_dir: expected the sweep folder's path"),
    (lambda d: run_sweep(GRID, d, presets={"sudoku4-cpu": 1}), "presets: expected a preset's name or a list"),
    (lambda d: load_grid(None), "spec: expected a built-in grid's name or a grid file's path (a str or "
                                "os.PathLike), got NoneType"),
    (lambda d: load_runs([5]), "dirs[0]: expected a folder's path (a str or os.PathLike), got int"),
    (lambda d: load_runs(5), "dirs: expected a list of folders' paths, got int"),
    (lambda d: write_comparison([d], d / "c", metric=5), "metric: expected a metric's name (a str), or None, got int"),
    (lambda d: write_comparison([d], None), "out_dir: expected the output folder's path"),
    (lambda d: write_comparison(None, d / "c"), "dirs: expected a list of folders' paths, got NoneType"),
    (lambda d: regress([], out=None), "out: expected the output folder's path (a str or os.PathLike), got NoneType"),
    (lambda d: regress([], out=d / "o", notebook_dir=5), "notebook_dir: expected the notebooks folder's path (a str "
                                                         "or os.PathLike) or None, got int"),
    (lambda d: regress(["golden", None], out=d / "o", notebook_dir=d), "names[1]: expected a str (a notebook's "
                                                                       "name), got NoneType"),
])
def test_a_wrong_argument_type_is_named_before_any_work(tmp_path, call, said):
    work = tmp_path / "work"
    with pytest.raises(TypeError) as err:
        call(work)
    assert str(err.value).startswith(said)
    assert not work.exists() and not (tmp_path / "c").exists()  # nothing made


def test_one_preset_or_override_alone_is_one():
    """As in train(): one str is one name ('sudoku4-cpu' was the presets 's', 'u', ...), never its characters."""
    one = plan_sweep(GRID, "sw", presets="sudoku4-cpu", overrides="max_steps=4")
    listed = plan_sweep(GRID, "sw", presets=["sudoku4-cpu"], overrides=["max_steps=4"])
    assert [r.config for r in one] == [r.config for r in listed] and one[0].config.max_steps == 4
