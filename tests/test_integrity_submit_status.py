"""`submit` says when the model could not run on any task: exit status 3, one line, the fallback written.

Truncated weights, a config.json that is not a file, a budget the safety margin uses up, an error on
every task: the submission is still the valid fallback, the command exits 3 (documented in its help),
and the cause is said once, not once per task. The Kaggle kernel calls the package's `solve()` and
reads its report, never an exit status, so this status cannot make it raise.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import trm_kaggle.solve.worker as unit_mod
from trm_kaggle.cli import build_parser, main
from trm_kaggle.cli.kaggle import MODEL_FAILED_STATUS
from trm_kaggle.evaluate.submission import check_submission
from trm_kaggle.solve.job import model_failure

from conftest import make_export

REPO = Path(__file__).resolve().parents[1]
TASK = {"train": [{"input": [[1, 2], [3, 4]], "output": [[4, 3], [2, 1]]}], "test": [{"input": [[2, 1], [4, 3]]}]}


@pytest.fixture
def world(tmp_path):
    (tmp_path / "c.json").write_text(json.dumps({f"task{i}": TASK for i in range(3)}))
    make_export(tmp_path / "exp")
    return tmp_path


def submit(world: Path, *extra: str, weights: str = "exp") -> list[str]:
    return ["submit", "--challenges", str(world / "c.json"), "--weights", str(world / weights), "--output",
            str(world / "s.json"), "--work-dir", str(world / "work"), "--num-aug", "1", "--finetune-steps", "1",
            "--batch-size", "4", "--eval-batch-size", "16", "--device", "cpu", "--workers", "1", "--no-progress",
            *extra]


def failed_once(capsys, rc: int, world: Path) -> str:
    """The contract: status 3, one error line, no per-task warning, a valid fallback submission."""
    err = capsys.readouterr().err
    assert rc == MODEL_FAILED_STATUS == 3, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: the model could not run on any of its 3 tasks: "), err
    check_submission(world / "s.json", world / "c.json")
    return lines[0]


def test_truncated_weights(world, capsys):
    data = (world / "exp" / "weights.safetensors").read_bytes()
    (world / "exp" / "weights.safetensors").write_bytes(data[: len(data) // 2])
    line = failed_once(capsys, main(submit(world)), world)
    assert "weights.safetensors" in line and "truncated" in line and "s.json holds the fallback answers" in line


def test_weights_missing_entirely(world, capsys):
    (world / "exp" / "weights.safetensors").unlink()
    assert "weights.safetensors" in failed_once(capsys, main(submit(world)), world)


def test_a_config_json_that_is_a_device(world, capsys):
    (world / "exp" / "config.json").unlink()
    (world / "exp" / "config.json").symlink_to("/dev/urandom")
    line = failed_once(capsys, main(submit(world)), world)
    assert "config.json must be a regular file, not a character device" in line


def test_a_budget_the_safety_margin_uses_up(world, capsys):
    line = failed_once(capsys, main(submit(world, "--time-budget", "5", "--safety-margin", "60")), world)
    assert "safety margin" in line


def test_an_error_on_every_task_is_said_once(world, capsys, monkeypatch):
    """Each task fails in its own folder (another path, another number): one line, the cause once."""
    def broken(cfg, unit, *a, **k):
        raise OSError(27, "File too large", f"{world}/work/units/u{unit.index:05d}/finetune/state_step1.pt")

    monkeypatch.setattr(unit_mod, "solve_unit", broken)
    line = failed_once(capsys, main(submit(world)), world)
    assert line.count("File too large") == 1 and "ulimit -f" in line and "other kind" not in line


def test_a_model_that_runs_exits_0(world, capsys):
    assert main(submit(world, "--max-tasks", "1")) == 0
    out = capsys.readouterr()
    # the model ran on its one task (a tiny random model may decode no valid grid: said, and still status 0)
    assert ("1 answered by the model" in out.out or "0 answered by the model (1 more predicted" in out.out), out.out
    assert "error" not in out.err
    check_submission(world / "s.json", world / "c.json")


def test_a_task_whose_result_the_work_dir_cannot_hold_is_named_not_said_cut_by_the_budget(world, capsys):
    """A FIFO where the first task's folder goes: the task failed, its result could not be written either, and
    it kept the fallback with no word but a -v line that blamed the time budget (46 s of it left)."""
    import os

    (world / "work" / "units").mkdir(parents=True)
    os.mkfifo(world / "work" / "units" / "u00000")
    assert main(submit(world)) == 0  # the other tasks answered
    err = capsys.readouterr().err
    assert "warning: task task0: " in err and "a pipe (FIFO) where the task's folder goes" in err, err
    assert "the work dir could not hold its result" in err and "time budget" not in err, err
    report = json.loads((world / "work" / "solve_report.json").read_text())
    assert any("task task0" in e for e in report["errors"]), report["errors"]
    check_submission(world / "s.json", world / "c.json")


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_special_file_where_one_tasks_result_goes_costs_that_task_alone(world, capsys, kind):
    """A FIFO or a folder at `units/u00000/result.json`: the refusal to write there (a TRMError, not an OSError)
    stopped the whole worker, and every task of it kept the fallback (exit 3)."""
    import os

    place = world / "work" / "units" / "u00000" / "result.json"
    place.parent.mkdir(parents=True)
    os.mkfifo(place) if kind == "fifo" else place.mkdir()
    assert main(submit(world)) == 0
    err = capsys.readouterr().err
    assert "warning: task task0: " in err and "the work dir could not hold its result" in err, err
    report = json.loads((world / "work" / "solve_report.json").read_text())
    assert sorted(report["task_reports"]) == ["task1", "task2"]  # the worker's other tasks ran
    check_submission(world / "s.json", world / "c.json")


def test_a_model_of_another_kind_of_task_is_said_once_as_such(world, capsys):
    """A Sudoku export (vocabulary 6, 16 cells) failed every task with torch's "IndexError: index out of range in
    self"; the bundle refused the same export as "not an ARC model"."""
    from trm_kaggle.config import ArchConfig
    from trm_kaggle.model.export import export_inference
    from trm_kaggle.model.trm import TinyRecursiveModel

    arch = ArchConfig(hidden_size=16, num_heads=2, expansion=2.0, H_cycles=1, L_cycles=1, L_layers=1,
                      halt_max_steps=2, puzzle_emb_len=2, forward_dtype="float32")
    export_inference(world / "sudoku", TinyRecursiveModel(arch, 16, 6, 3), arch=arch, seq_len=16, vocab_size=6,
                     mean_embedding=True, info={})
    line = failed_once(capsys, main(submit(world, weights="sudoku")), world)
    assert "sudoku: not an ARC model: its config.json has vocab_size 6 and seq_len 16" in line, line
    assert "IndexError" not in line


def test_a_config_value_holding_control_characters_reaches_no_line_raw(world, capsys, caplog):
    """An export's config.json with `vocab_size: "12\x1b[31mX\n"`: the fallback line split in two at the newline
    and the kernel's "model path failed" log line carried the escape sequence raw."""
    config = json.loads((world / "exp" / "config.json").read_text())
    (world / "exp" / "config.json").write_text(json.dumps({**config, "vocab_size": "12\x1b[31mX\n"}))
    rc = main([a for a in submit(world) if a != "--no-progress"])  # the lines a terminal shows
    captured = capsys.readouterr()
    out = captured.out + captured.err + caplog.text
    assert rc == MODEL_FAILED_STATUS and "\x1b" not in out, out
    assert "config.json: vocab_size '12\\x1b[31mX\\n' is not a whole number" in captured.err, out
    said = [x for x in out.splitlines() if "keep" in x and "the fallback answer" in x]
    assert said and all("is not a whole number" in x for x in said), out  # each fallback line whole


def test_a_compile_cache_nothing_reads_is_said_in_one_line(world, capsys, caplog):
    """`--compile-cache` with nothing compiled (compile off, or auto on a CPU): never named, though its help says
    a cache not loaded is "ignored with one line"."""
    import logging

    caplog.set_level(logging.INFO)
    assert main(submit(world, "--max-tasks", "1", "--compile", "off", "--compile-cache", str(world / "c.bin"))) == 0
    said = [r for r in caplog.records if "c.bin" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING, said  # on the console, also with --no-progress
    assert "compile cache" in said[0].getMessage() and "nothing is compiled here (compile off on cpu)" in \
        said[0].getMessage()


def test_a_compile_cache_that_cannot_be_loaded_is_said_also_with_no_progress(world, capsys, caplog, monkeypatch):
    """A --compile-cache that is no cache, where the model compiles: its "ignored" line was a worker's progress
    line, gone with --no-progress. The job says it as a warning and the workers are not given the file."""
    import logging

    from trm_kaggle.solve import job

    monkeypatch.setattr(job, "resolve_compile", lambda compile, device: True)  # as where it compiles (a GPU)
    (world / "notacache.bin").write_bytes(b"x" * 64)
    caplog.set_level(logging.INFO)
    assert main(submit(world, "--max-tasks", "1", "--compile", "off", "--compile-cache",
                       str(world / "notacache.bin"))) == 0
    said = [r for r in caplog.records if "notacache.bin" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING, said
    assert said[0].getMessage().startswith("compile cache ignored: ") and "record not found" in said[0].getMessage()


def test_model_failure_reasons():
    assert model_failure(0, {}, ["x"]) is None                        # no task for the model
    assert model_failure(2, {"a": {"predicted": 0}}, ["x"]) is None   # a task ran (the deadline cut it)
    assert model_failure(2, {}, []) is None                           # nothing failed: the budget ran out
    assert model_failure(2, {"a": {"error": "e"}, "b": {"error": "e"}}, ["u1: bad", "u2: bad", "other"]) == \
        "u1: bad (and 1 other kind of error)"


def test_the_status_is_documented_and_the_kernel_reads_the_report():
    sub = next(a for a in build_parser()._actions if a.dest == "command").choices["submit"]
    assert "3 the model could not run on any task" in sub.description
    kernel = (REPO / "notebooks" / "kaggle_submission.py").read_text()
    assert "report = solve(" in kernel  # the package's API, not the command line and its exit status
    assert "sys.exit" not in kernel and "trm_kaggle.cli" not in kernel and "trm-kaggle submit" not in kernel


def test_the_closing_line_points_to_the_report_only_once_it_is_written(world, capsys, caplog):
    """A report that could not be written (here a folder in its place) is not named as the place of the details;
    the run still ends with its valid fallback and status 3, not on the report's failure."""
    data = (world / "exp" / "weights.safetensors").read_bytes()
    (world / "exp" / "weights.safetensors").write_bytes(data[: len(data) // 2])
    (world / "work" / "solve_report.json").mkdir(parents=True)
    rc = main(submit(world))
    err = capsys.readouterr().err
    error = [line for line in err.splitlines() if line.startswith("error:")]
    assert rc == 3 and len(error) == 1 and "truncated" in error[0] and "details:" not in error[0], err
    assert "could not write" in caplog.text and "solve_report.json is a folder" in caplog.text
    check_submission(world / "s.json", world / "c.json")


def test_the_closing_line_names_the_written_report(world, capsys):
    data = (world / "exp" / "weights.safetensors").read_bytes()
    (world / "exp" / "weights.safetensors").write_bytes(data[: len(data) // 2])
    line = failed_once(capsys, main(submit(world)), world)
    assert line.endswith(f"(details: {world / 'work' / 'solve_report.json'})")
    assert json.loads((world / "work" / "solve_report.json").read_text())["model_failed"]


def test_the_settings_key_never_reads_a_kernel_file_behind_the_weights(world):
    """`config.json` linked to /proc/kmsg hung `submit` for ever after its fallback: the key that decides whether a
    result can be reused read the file on a plain is_file() check. It now reads through the one gate, so a /proc
    file counts as unreadable (as a missing one), and the load refuses it in its own words."""
    from trm_kaggle.config import SolveConfig
    from trm_kaggle.solve.job import settings_key

    cfg = SolveConfig(challenges=str(world / "c.json"), weights=str(world / "exp"))
    good = settings_key(cfg)["weights"]
    (world / "exp" / "config.json").rename(world / "config.json.bak")
    missing = settings_key(cfg)["weights"]
    (world / "exp" / "config.json").symlink_to("/proc/self/status")  # regular-looking, never meant to be read
    assert settings_key(cfg)["weights"] == missing != good


def test_a_budget_that_cut_every_prediction_is_said_with_status_0(world, capsys, monkeypatch):
    """Levers that made one prediction cost more than the budget (32 trajectories, test depth 1024): every task's
    prediction was cut, none answered, and submit said nothing but "0 answered". The time is no failure of the
    model (status 0, as documented), and it is said in one warning naming what to change."""
    import trm_kaggle.solve

    report = {"output": str(world / "s.json"), "valid": True, "tasks": 3, "answered": 0, "ran": 0, "predicted": 0,
              "elapsed_s": 25.0, "model_tasks": 3, "errors": [], "left_out": {}, "model_failed": None}
    monkeypatch.setattr(trm_kaggle.solve, "solve", lambda cfg, start=None: report)
    assert main(submit(world, "--trajectories", "32", "--trajectory-noise", "1", "--test-depth", "1024")) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["warning: the model answered none of its 3 tasks in the time budget (every prediction was cut by "
                   "its task's deadline): a longer --time-budget or lighter test-time settings (--trajectories, "
                   "--test-depth) lets it answer"], err
    report["ran"] = 1  # a task predicted (decoding no valid grid): no such warning
    assert main(submit(world)) == 0 and "warning" not in capsys.readouterr().err
