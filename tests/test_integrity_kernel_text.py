"""Text the Kaggle kernels and the bundle read or are given: names said as one line, numbers in ASCII digits, ids
matched whole.

A previous output's record naming a state with a newline forged a second line of the training kernel's log; the
kernels' number parameters took '２' where every flag refuses it; `$` in a pattern matched before a final newline,
so a Kaggle user "you\\n" was written into the bundle's metadata, which said "metadata valid".
"""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def notebook_functions(notebook: str, *names: str) -> dict:
    """The named functions of a notebook's paired .py (standard library only), defined in a fresh namespace."""
    tree = ast.parse((NOTEBOOKS / notebook).read_text(encoding="utf-8"))
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    assert {f.name for f in found} == set(names)
    namespace = {"math": math, "Path": Path, "json": json}
    exec(compile(ast.Module(found, []), notebook, "exec"), namespace)
    return namespace


def test_a_state_a_record_names_with_a_newline_is_said_in_one_line(tmp_path):
    from trm_kaggle.kaggle_training import run_session

    (tmp_path / "in" / "prev").mkdir(parents=True)
    (tmp_path / "in" / "prev" / "session.json").write_text(json.dumps({"previous_state": "/x/\x1b[31mRED\nFAKE\x07.pt"}))
    lines = []
    report = run_session(input_root=tmp_path / "in", working=tmp_path / "out", echo=lines.append,
                         scratch=tmp_path / "scratch")
    assert report.status == "refused"
    assert lines and all("\n" not in line and "\x1b" not in line and "\x07" not in line for line in lines), lines
    assert "RED\\nFAKE" in lines[-1]


def test_the_training_notebook_says_each_line_escaped(capsys):
    ns = notebook_functions("kaggle_train.py", "say", "warn")
    ns["say"]("status: refused; /x/\x1b[31mRED\nFAKE\x07.pt")
    ns["warn"]("a\nb")
    assert capsys.readouterr().out == "status: refused; /x/\\x1b[31mRED\\nFAKE\\x07.pt\nWARNING: a\\nb\n"


@pytest.mark.parametrize("notebook", ["kaggle_train.py", "kaggle_submission.py"])
def test_the_kernels_log_records_are_each_one_escaped_line(notebook, capsys):
    """The training kernel's log said a folder name found in the previous output raw: its "trying the previous
    state" warning printed an escape sequence, and a newline in the name forged an `INFO:` line. Both kernels set
    up logging through `log_one_line_each` (no format of their own), which escapes every record."""
    import logging

    from trm_kaggle.wording import log_one_line_each

    source = (NOTEBOOKS / notebook).read_text(encoding="utf-8")
    assert "log_one_line_each(logging.INFO, force=True)" in source and "basicConfig" not in source
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        log_one_line_each(logging.INFO, force=True)
        logging.getLogger("trm_kaggle.train").warning("%s; trying the previous state", "/x/run\nINFO: fake\x1b[31m")
    finally:
        root.handlers[:], root.level = handlers, level
    err = capsys.readouterr().err
    assert err == "WARNING: /x/run\\nINFO: fake\\x1b[31m; trying the previous state\n", err


@pytest.mark.parametrize("text", ["２", "٤٠٠", "１２０"])
def test_the_kernels_number_parameters_are_ascii_digits(capsys, text):
    train = notebook_functions("kaggle_train.py", "say", "warn", "checked_number")
    assert train["checked_number"]("SESSION_STEPS", text, None, none=True, least=1, whole=True) is None
    submission = notebook_functions("kaggle_submission.py", "say", "warn", "checked")
    assert submission["checked"]("WORKERS", text, 1) == 1
    out = capsys.readouterr().out
    assert out.count("WARNING:") == 2 and "SESSION_STEPS" in out and "WORKERS" in out
    assert train["checked_number"]("SESSION_STEPS", "12", None, none=True, least=1, whole=True) == 12


@pytest.mark.parametrize("ident", ["you\n/trm-kaggle-submission", "you/trm-kaggle-submission\n"])
def test_an_id_ending_in_a_newline_is_no_kaggle_id(ident):
    from trm_kaggle.kaggle.metadata import id_problem

    assert id_problem(ident) is not None
    assert id_problem("you/trm-kaggle-submission") is None


def test_a_kaggle_json_username_ending_in_a_newline_names_no_user(tmp_path, monkeypatch):
    from trm_kaggle.kaggle.metadata import configured_user

    (tmp_path / "kaggle.json").write_text(json.dumps({"username": "you\n", "key": "x"}))
    monkeypatch.delenv("KAGGLE_USERNAME", raising=False)
    monkeypatch.setenv("KAGGLE_CONFIG_DIR", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert configured_user()[0] is None
    monkeypatch.setenv("KAGGLE_USERNAME", "you\n")
    assert configured_user()[0] != "you\n"


@pytest.mark.parametrize("shape", ["nvidial4\n", " NvidiaL4 ", "nvidial4"])
def test_a_machine_shape_not_in_kaggles_spelling_is_refused_not_pushed(tmp_path, shape):
    """`"nvidial4\\n"` passed validate_bundle (it compared a cleaned copy) and was pushed as it was."""
    from trm_kaggle.kaggle.metadata import kernel_metadata_problems

    meta = {"id": "you/trm-kaggle-submission", "title": "trm-kaggle-submission", "code_file": "k.ipynb",
            "language": "python", "kernel_type": "notebook", "machine_shape": shape}
    problems = dict(kernel_metadata_problems(meta, None, []))
    assert "machine_shape" in problems and "'NvidiaL4'" in problems["machine_shape"], problems
    assert "machine_shape" not in dict(kernel_metadata_problems({**meta, "machine_shape": "NvidiaL4"}, None, []))


def test_the_training_summary_is_said_line_by_line_with_the_run_folder_whole():
    """The summary embedded the run folder raw: a KAGGLE_WORKING holding a newline split its line in two."""
    from trm_kaggle.train.result import TrainResult
    from trm_kaggle.wording import escaped_echo

    result = TrainResult(run_dir=Path("/w\nFAKE: status: trained/run"), step=2, epoch=0.5, metrics={"loss": 1.0},
                         examples_per_second=10.0)
    lines = []
    for line in result.summary_lines():
        escaped_echo(lines.append)(line)
    assert len(lines) == 1 and lines[0].endswith("run directory /w\\nFAKE: status: trained/run")
    # what `train` prints: the run folder may come from a config file (`checkpoint_path`), and its escape
    # sequence or newline reached the terminal raw
    result.run_dir = Path("r\x1b[31mred\nx")
    assert result.summary().endswith("run directory r\\x1b[31mred\\nx") and "\n" not in result.summary()
