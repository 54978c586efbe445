"""`run_session` (the Kaggle training kernel's session) from Python, before any data is read: a working folder
another command keeps is refused before anything is written there; an argument of the wrong type is one error
naming it, never an exception (the kernel relies on a session that never raises); a working folder that cannot
be written is said once; an `echo` that raises costs its lines, never the session's record."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from trm_kaggle import kaggle_training
from trm_kaggle.kaggle_training import run_session


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _session(tmp_path: Path, working: object, **kwargs) -> tuple[kaggle_training.SessionReport, list[str]]:
    lines: list[str] = []
    args = dict(input_root=tmp_path / "nothing", working=working, preset="sudoku4-cpu", time_budget=None,
                scratch=tmp_path / "scratch", echo=lines.append)
    return run_session(**{**args, **kwargs}), lines


def test_a_working_folder_another_command_keeps_is_refused_before_anything_is_written(tmp_path):
    """working = a pipeline's work folder trained there and replaced the pipeline's weights/ export; its run
    folder, a plain training run folder and a sweep's folder (or a folder inside one) took run/, weights/ and
    session.json beside their own files."""
    pipe, run, sweep = tmp_path / "p7", tmp_path / "r1", tmp_path / "sw1"
    (pipe / "train").mkdir(parents=True)
    (pipe / "train" / "run.json").write_text('{"run_id": "p"}')
    (pipe / "weights").mkdir()
    (pipe / "weights" / "config.json").write_text("{}")
    run.mkdir()
    (run / "run.json").write_text('{"run_id": "r"}')
    sweep.mkdir()
    (sweep / "sweep.json").write_text('{"runs": []}')
    before = _listing(tmp_path)
    for working, said in ((pipe, f"working {pipe} is a pipeline's work folder (it holds train/run.json)"),
                          (pipe / "train", f"working {pipe / 'train'} is a training run folder (it holds run.json)"),
                          (run, f"working {run} is a training run folder"),
                          (run / "sub", f"working {run / 'sub'} lies inside {run}, which is a training run folder"),
                          (sweep, f"working {sweep} is a sweep's folder (it holds sweep.json)"),
                          (sweep / "s", f"working {sweep / 's'} lies inside {sweep}, which is a sweep's folder")):
        r, lines = _session(tmp_path, working)
        assert not r.ok and r.status == "refused" and r.step == 0, (working, r)
        assert lines == [f"error: {r.message}"] and said in r.message, lines
        assert "choose a folder of its own" in r.message, r.message
    assert _listing(tmp_path) == before  # not even the record


@pytest.mark.parametrize("argument, said", [
    (dict(working=None), "working: expected the working folder (a str or os.PathLike), got NoneType"),
    (dict(working=b"w"), "working: expected the working folder (a str or os.PathLike), got bytes"),
    (dict(input_root=5), "input_root: expected the folder of the inputs (a str or os.PathLike), got int"),
    (dict(stopped="x"), "stopped: expected a list of signal numbers, got str"),
    (dict(stopped=[999]), "stopped[0]=999: expected a whole number from 1 to"),
    (dict(stopped=[signal.SIGTERM, int(signal.SIGALRM)]),
     f"stopped[1]={int(signal.SIGALRM)}: expected the number of a stop signal the session takes"),
    (dict(echo=None), "echo: expected a function taking one line of text (print), got NoneType"),
    (dict(margin=None, time_budget=5), "margin None: a number of seconds from 0 to 10,000,000"),
    (dict(margin=None), "margin None: a number of seconds from 0 to 10,000,000"),
    (dict(data_dir=7), "data_dir: expected the dataset's folder (a str or os.PathLike) or None, got int"),
    (dict(scratch=3), "scratch: expected the folder to unpack into (a str or os.PathLike) or None, got int"),
    (dict(preset=3), "preset: expected a preset name or a list of them, got int"),
    (dict(preset=None), "preset: expected a preset name or a list of them, got NoneType"),
])
def test_an_argument_of_the_wrong_type_is_one_error_naming_it_never_raised(tmp_path, capsys, argument, said):
    """`run_session` is documented never to raise: working None or bytes, stopped 'x', echo None raised pathlib's,
    int()'s or a call's TypeError; input_root 5, preset None, stopped [999] or margin None with a budget ended it
    "error" in Python's words, naming no argument. A wrong path of where it writes writes nothing; the others are
    said in the working folder's record."""
    working = tmp_path / "w"
    others = {k: v for k, v in argument.items() if k != "working"}
    r, lines = _session(tmp_path, argument.get("working", working), **others)
    assert not r.ok and r.status == "error" and r.message.startswith(said), r.message
    shown = lines or capsys.readouterr().out.splitlines()  # a wrong echo: its one line printed
    assert shown == [f"error: {r.message}"], shown
    wrote = "working" not in argument and "input_root" not in argument
    assert working.is_dir() == wrote and (not wrote or json.loads((working / "session.json").read_text())["message"]
                                          == r.message)
    assert not (working / "run").exists()


def test_a_working_folder_that_cannot_be_written_is_said_once(tmp_path):
    """A working folder below a file (or a read-only folder): refused, then a second line, the record's raw errno."""
    (tmp_path / "file").write_text("mine")
    r, lines = _session(tmp_path, tmp_path / "file" / "w")
    assert not r.ok and r.status == "refused" and lines == [f"error: {r.message}"], lines
    assert f"working {tmp_path / 'file' / 'w'}: {tmp_path / 'file'} is a file, not a folder" in r.message


def test_an_echo_that_raises_costs_its_lines_never_the_record(tmp_path):
    """An echo raising on a line left the call as the caller's exception and no session.json."""
    def broken(line: str) -> None:
        raise RuntimeError("the console is gone")

    r = run_session(input_root=tmp_path / "nothing", working=tmp_path / "w", preset="sudoku4-cpu", time_budget=None,
                    scratch=tmp_path / "scratch", echo=broken)
    assert not r.ok and r.status == "error" and "no dataset" in r.message, r
    record = json.loads((tmp_path / "w" / "session.json").read_text())
    assert record["notes"] == ["echo raised RuntimeError: the console is gone; its later lines were not said"]


def test_copy_state_names_a_state_that_is_no_file(tmp_path):
    """copy_state(Path("nosuch.pt"), run) returned run/nosuch.pt, copying nothing, and made the run folder."""
    from trm_kaggle.errors import TRMError

    with pytest.raises(TRMError, match="the train state .*nosuch.pt is not a file"):
        kaggle_training.copy_state(tmp_path / "nosuch.pt", tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("given", ["input_root", "working", "scratch", "data_dir"])
def test_an_empty_folder_argument_is_refused_not_taken_as_the_current_folder(tmp_path, monkeypatch, given):
    """input_root='' and scratch='' were the current folder ("no dataset under .", "UNPACK_DIR . is also the
    input"): an empty path is refused by the one blank-path rule, and nothing is written in the current folder."""
    monkeypatch.chdir(tmp_path)
    args = {"working": tmp_path / "w", given: ""}
    report, lines = _session(tmp_path, args.pop("working"), **args)
    assert report.status == "error" and report.message.startswith(f"{given} is empty"), report.message
    assert sorted(p.name for p in tmp_path.iterdir()) == (["w"] if given in ("scratch", "data_dir") else [])
