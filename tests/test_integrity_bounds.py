"""Out-of-range settings are refused where every command reads them, the pydantic configs: one `error:` line
naming the setting, exit status 2, nothing written. Every number of every config is finite and fits 64 bits,
whatever bounds its field adds."""

from __future__ import annotations

import math
import typing

import pytest
from pydantic import BaseModel, ValidationError

from cli_helpers import one_error_line
import trm_kaggle.config as config_module
from trm_kaggle.config.common import _Config
from trm_kaggle.cli import main

BIG = str(2**70)


TRAIN = [  # the examples, then their siblings
    ("lr=-1", "lr"), ("lr=nan", "lr"), ("ema_rate=2", "ema_rate"), ("ema_rate=nan", "ema_rate"),
    ("max_steps=-5", "max_steps"), ("time_limit=nan", "time_limit"), ("time_limit=-1", "time_limit"),
    ("lr_warmup_steps=-10", "lr_warmup_steps"), (f"seed={BIG}", "seed"), ("weight_decay=-1e9", "weight_decay"),
    ("log_interval=0", "log_interval"), ("threads=-4", "threads"),
    ("lr=inf", "lr"), ("lr=1e31", "lr"), ("puzzle_emb_lr=-1", "puzzle_emb_lr"), ("puzzle_emb_lr=nan", "puzzle_emb_lr"),
    ("ema_rate=-0.1", "ema_rate"), ("max_steps=0", "max_steps"), (f"max_steps={BIG}", "max_steps"),
    ("time_limit=inf", "time_limit"), ("seed=-1", "seed"), ("weight_decay=nan", "weight_decay"),
    ("weight_decay=inf", "weight_decay"), ("puzzle_emb_weight_decay=-1", "puzzle_emb_weight_decay"),
    ("log_interval=-3", "log_interval"), ("threads=0", "threads"), ("global_batch_size=0", "global_batch_size"),
    (f"global_batch_size={BIG}", "global_batch_size"), ("epochs=-1", "epochs"), (f"epochs={BIG}", "epochs"),
    ("eval_interval=0", "eval_interval"), ("min_eval_interval=-1", "min_eval_interval"),
    ("micro_batch_size=0", "micro_batch_size"), ("checkpoint_keep=0", "checkpoint_keep"),
    ("lr_min_ratio=nan", "lr_min_ratio"), ("lr_min_ratio=2", "lr_min_ratio"), ("beta1=nan", "beta1"),
    ("beta2=1", "beta2"), ("max_nonfinite_steps=0", "max_nonfinite_steps"),
    ("arch.expansion=nan", "arch.expansion"), ("arch.rope_theta=inf", "arch.rope_theta"),
    ("arch.rms_norm_eps=nan", "arch.rms_norm_eps"), ("arch.halt_exploration_prob=nan", "arch.halt_exploration_prob"),
    ("arch.hidden_size=0", "arch.hidden_size"), (f"arch.puzzle_emb_ndim={BIG}", "arch.puzzle_emb_ndim"),
    ("halt_schedule.start_prob=nan", "halt_schedule.start_prob"), ("curriculum.epochs=-1", "curriculum.epochs"),
    ("global_batch_size=1000000000000000", "global_batch_size"), ("micro_batch_size=2000000", "micro_batch_size"),
    # a boolean where a number goes was read as 1 or 0 (`max_steps: true` trained one step)
    ("max_steps=true", "max_steps: True is a boolean, not a number"), ("seed=false", "seed: False is a boolean"),
    ("arch.H_cycles=true", "arch.H_cycles: True is a boolean"), ("lr=true", "lr: True is a boolean"),
    # in bounds once, yet no run: an EMA that never moves exported the first weights; a SwiGLU of no width was a
    # ZeroDivisionError; two shares of 1e308 summed to inf
    ("ema_rate=1", "ema_rate"), ("arch.expansion=0.001", "rounds to a SwiGLU of no width"),
    ("stages=[{share: 1e308}, {share: 1e308}]", "stages.share"),
]


@pytest.mark.parametrize("override, field", TRAIN)
def test_training_settings(override, field, capsys):
    assert main(["train", "--print-config", override]) == 2
    line = one_error_line(capsys)
    assert field in line, line


def test_nan_is_called_not_finite_not_out_of_range(capsys):
    assert main(["train", "--print-config", "ema_rate=nan"]) == 2
    assert "ema_rate: must be a finite number" in one_error_line(capsys)


SUBMIT = [
    (["--seed", "-1"], "seed"), (["--seed", BIG], "seed"), (["--time-budget", "nan"], "time_budget"),
    (["--time-budget", "-1"], "time_budget"), (["--time-budget", "inf"], "time_budget"),
    (["--time-budget", "604801"], "time_budget"),  # past a week: no session runs that long
    (["--safety-margin", "nan"], "safety_margin"), (["--plan-margin", "1"], "plan_margin"),
    (["--num-aug", "-1"], "num_aug"),
    (["--num-aug", BIG], "num_aug"), (["--finetune-steps", "-2"], "finetune_steps"),
    (["--embeddings-fraction", "nan"], "embeddings_fraction"), (["--threads", "-4"], "threads"),
    (["--workers", "0"], "workers"), (["--batch-size", "0"], "global_batch_size"),
]


@pytest.mark.parametrize("flags, field", SUBMIT)
def test_submit_settings(flags, field, tmp_path, capsys):
    out = tmp_path / "s.json"
    (tmp_path / "w").mkdir()  # the weights folder: an input, apart from the outputs
    assert main(["submit", "--challenges", str(tmp_path / "c.json"), "--weights", str(tmp_path / "w"), "--output",
                 str(out), "--work-dir", str(tmp_path / "work"), *flags]) == 2
    assert flags[0] in one_error_line(capsys)  # the flag as typed (`field` is the setting behind it)
    assert not out.exists() and not (tmp_path / "work").exists()


BUILDERS = [
    (["build-sudoku", "--seed", "-1"], "seed"), (["build-sudoku", "--seed", BIG], "seed"),
    (["build-sudoku", "--min-difficulty", "-1"], "min_difficulty"),
    (["build-maze", "--seed", "-1"], "seed"), (["build-maze", "--size", "100000"], "size"),
    (["build-maze", "--min-path-length", "-1"], "min_path_length"),
    (["build-arc", "--seed", "-1"], "seed"), (["build-arc", "--seed", BIG], "seed"),
    (["build-arc", "--workers", "-4"], "workers"),
    (["build-code-repair", "--seed", "-1"], "seed"), (["build-code-repair", "--val-fraction", "nan"], "val_fraction"),
]


@pytest.mark.parametrize("args, field", BUILDERS)
def test_builder_settings(args, field, tmp_path, capsys):
    out = tmp_path / "ds"
    assert main([args[0], "--output-dir", str(out), *args[1:]]) == 2
    assert args[1] in one_error_line(capsys)  # the flag as typed (`field` is the setting behind it)
    assert not out.exists()


@pytest.mark.parametrize("flags, field", [(["--seed", "-1"], "seed"), (["--train-seconds", "nan"], "train_seconds"),
                                          (["--train-seconds", "inf"], "train_seconds"), (["--canvas", "31"], "canvas")])
def test_pipeline_settings(flags, field, tmp_path, capsys):
    assert main(["pipeline", "--work-dir", str(tmp_path / "p"), *flags]) == 2
    assert flags[0] in one_error_line(capsys)  # the flag as typed (`field` is the setting behind it)
    assert not (tmp_path / "p").exists()


def test_sweep_seeds(tmp_path, capsys):
    grid = tmp_path / "grid.yaml"
    grid.write_text("name: g\nseeds: [0, -1]\n")
    assert main(["sweep", str(grid), "--out", str(tmp_path / "sweeps"), "--dry-run"]) == 2
    assert "seeds" in one_error_line(capsys)


def configs() -> list[type[BaseModel]]:
    return [m for m in vars(config_module).values() if isinstance(m, type) and issubclass(m, BaseModel)
            and m.__module__.startswith(config_module.__name__ + ".") and m is not _Config]


def number_fields():
    for model in configs():
        for name, field in model.model_fields.items():
            kinds = {a for a in typing.get_args(field.annotation) or (field.annotation,)}
            if float in kinds or int in kinds:
                yield pytest.param(model, name, float in kinds, id=f"{model.__name__}.{name}")


@pytest.mark.parametrize("model, name, is_float", list(number_fields()))
def test_every_number_of_every_config_is_finite_and_fits_64_bits(model, name, is_float):
    bad = [math.nan, math.inf, -math.inf] if is_float else [2**63, -(2**63) - 1, 2**70]
    for value in bad:
        with pytest.raises(ValidationError) as e:
            model.model_validate({name: value})
        assert any(err["loc"][:1] == (name,) for err in e.value.errors()), (name, value, e.value.errors())


@pytest.mark.parametrize("flags", [["--batch-size", "1000000000000"], ["--batch-size", "0"], ["--max-steps", "0"],
                                   ["--max-tasks", "0"], ["--device", "gpu"], ["--task-id-seed", "-5"],
                                   ["--task-id-seed", str(10**23)], ["--first", str(10**20)],
                                   ["--tasks", "abc"], ["--first", "3"]])  # the last two: no --report-dir to draw in
def test_evaluate_settings(flags, tmp_path, capsys):
    """trm-kaggle evaluate's settings are an EvaluateConfig: a value out of bounds is one line naming the flag."""
    (tmp_path / "w").mkdir()
    (tmp_path / "d").mkdir()
    assert main(["evaluate", "--weights", str(tmp_path / "w"), "--data", str(tmp_path / "d"), "--no-progress",
                 *flags]) == 2
    assert flags[0] in one_error_line(capsys)


@pytest.mark.parametrize("flags", [["--tasks", "1000000000000000"], ["--tasks", "0"], ["--devices", "0"],
                                   ["--eval-batch-size", "100000000000"], ["--batch-size", "1000000000000"]])
def test_estimate_settings(flags, capsys):
    """estimate's own flags have bounds: one line naming the flag, before anything is timed."""
    assert main(["estimate", "--preset", "cpu-smoke", "--no-progress", *flags]) == 2
    assert flags[0] in one_error_line(capsys)


@pytest.mark.parametrize("seconds", [1e10, 1e300])
def test_a_repair_run_s_time_limit_has_an_upper_bound(seconds):
    """evaluate-repair --time-limit reached subprocess's timeout and overflowed its clock: at most a day."""
    from pydantic import ValidationError

    from trm_kaggle.config import RepairEvalConfig

    with pytest.raises(ValidationError, match="time_limit"):
        RepairEvalConfig(weights="w", data="d", doctests=True, time_limit=seconds)


@pytest.mark.parametrize("second", ["{d}", "{d}/", "{d}/../{name}", "link"])
def test_a_dataset_named_twice_is_refused(tmp_path, capsys, second):
    """`data_paths=[D,D]` (or `D` and `D/`, `x/../D`, a link to D) once trained on D mixed with itself: its
    puzzles twice as likely and a second embedding row each, with no word."""
    d = tmp_path / "s4"
    d.mkdir()
    (tmp_path / "link").symlink_to(d)
    other = str(tmp_path / "link") if second == "link" else second.format(d=d, name=d.name)
    rc = main(["train", f"data_paths=[{d},{other}]", f"checkpoint_path={tmp_path / 'run'}", "--print-config"])
    line = one_error_line(capsys, rc)
    assert "data_paths: names the dataset" in line and "twice" in line and "each dataset is read once" in line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("argv", [
    ["submit", "--challenges", "c.json", "--weights", "w", "--workers", "\uff12"],
    ["submit", "--challenges", "c.json", "--weights", "w", "--num-aug", "\uff15"],
    ["sweep", "grid.yaml", "--parallel", "\uff13"],
    ["train", "--print-config", "max_steps=\uff15"],
])
def test_a_number_in_another_scripts_digits_is_refused(argv, capsys):
    """Python's int() reads '２' as 2: every flag and override took a fullwidth digit as a count."""
    with pytest.raises(SystemExit) if argv[0] != "train" else __import__("contextlib").nullcontext():
        rc = main(argv)
        assert rc == 2
    err = capsys.readouterr().err
    assert ("invalid" in err and "value:" in err) or "is no number in ASCII digits" in err, err


def test_a_safety_margin_past_a_week_is_refused_by_the_config():
    """The library's SolveConfig took `safety_margin=1e308` (the command refused it only for want of a budget)."""
    from trm_kaggle.config import SolveConfig

    with pytest.raises(ValueError, match="safety_margin"):
        SolveConfig(challenges="c.json", weights="w", safety_margin=1e308)


@pytest.mark.parametrize("argv, flag", [
    (["pipeline", "--work-dir", "", "--no-progress"], "--work-dir"),
    (["pipeline", "--work-dir", "  ", "--no-progress"], "--work-dir"),
    (["build-sudoku", "--output-dir", "", "--size", "4"], "--output-dir"),
    (["train", "data_paths=[a,'']", "checkpoint_path=r"], "data_paths"),
    (["bundle", "--no-download", ""], "OUT_DIR"),
    (["evaluate-repair", "--weights", "w", "--data", "d", "--report", ""], "--report"),  # no report, no word
    # each read the current folder ("error: .: not a dataset directory", ": no such file or folder"); `regress
    # --out ''` ran its notebooks there, and `train --export ''` was said to hold the run folder
    (["verify", ""], "DATASET_DIR"), (["export", "", "--out", "x"], "run"), (["export", "r", "--out", " "], "--out"),
    (["import-upstream", "", "--out", "x"], "checkpoint"), (["validate-submission", "s", "--challenges", ""],
                                                            "--challenges"),
    (["score", "", "--solutions", "x"], "SUBMISSION"), (["evaluate", "--weights", "", "--data", "d"], "--weights"),
    (["regress", "--out", ""], "--out"), (["regress", "--notebooks", "", "--out", "y"], "--notebooks"),
    (["sweep", "tn", "--sweep-dir", ""], "--sweep-dir"), (["doctor", ""], "DATA"),
    (["estimate", "--weights", "  "], "--weights"), (["train", "data_paths=[x]", "--export", ""], "--export"),
    # the bundle took an empty --weights as the default weights, and --repo '' as the current folder
    (["bundle", "--no-download", "b", "--weights", ""], "--weights"), (["bundle", "--no-download", "b", "--repo", ""],
                                                                      "--repo"),
    (["submit", "--challenges", "", "--weights", "w"], "--challenges"),  # "submit needs --challenges"
])
def test_an_empty_path_setting_is_refused_not_taken_as_the_current_folder(tmp_path, monkeypatch, capsys, argv, flag):
    """`pipeline --work-dir ''` (an unset shell variable) wrote its seven stage folders into the current folder,
    among the user's own, and said "outputs under ;". A folder or file setting that is empty or blank is refused,
    by every command (the configs' one rule)."""
    from trm_kaggle.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").mkdir()
    assert main(argv) == 2
    err = capsys.readouterr().err
    said = ("is empty: name a folder", "holds an empty name: name each as a folder")  # one path, or one among many
    assert any(s in err for s in said) and flag in err and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]
