"""What the kernels read first and write first, run as the notebooks run their code cells (the parameters cell,
papermill's overrides, then the cells in order): the submission kernel's challenges file (the same competition
mounted in both layouts, a CHALLENGES parameter nested too deeply) and both kernels' first file, never written
through a link planted at its temporary name."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
NAME = "arc-agi_test_challenges.json"
TASKS = {"00000001": {"train": [{"input": [[1]], "output": [[2]]}], "test": [{"input": [[1, 2]]}]}}


def code_cells(notebook: str) -> list[str]:
    nb = json.loads((NOTEBOOKS / notebook).read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def run_cells(notebook: str, tmp_path: Path, monkeypatch, last: int = 1, **params) -> tuple[dict, str]:
    """The parameters cell, `params` as papermill injects them, then the code cells up to `last`; (the globals,
    what they printed). The cells must not raise."""
    for name in ("KAGGLE_KERNEL_RUN_TYPE", "KAGGLE_URL_BASE", "KAGGLE_IS_COMPETITION_RERUN"):
        monkeypatch.delenv(name, raising=False)
    cells = code_cells(notebook)
    scope: dict = {}
    exec(cells[0], scope)
    scope.update(KAGGLE_INPUT=str(tmp_path / "input"), KAGGLE_WORKING=str(tmp_path / "working"), **params)
    out = io.StringIO()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None}
    try:  # the training kernel notes stop signals from its first cell on: this process keeps its own handlers
        with contextlib.redirect_stdout(out):
            for cell in cells[1:last + 1] if last >= 0 else cells[1:]:
                exec(cell, scope)
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)
    return scope, out.getvalue()


def put(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_one_competition_mounted_in_both_layouts_is_one_file(tmp_path, monkeypatch):
    """Byte-identical copies at input/<slug>/ and input/competitions/<slug>/ left no submission: "2 different
    files, none of them the competition's alone". They are one file: the first by path is answered, said once."""
    text = json.dumps(TASKS)
    first = put(tmp_path / "input" / "arc-prize-2026-arc-agi-2" / NAME, text)
    second = put(tmp_path / "input" / "competitions" / "arc-prize-2026-arc-agi-2" / NAME, text)
    scope, out = run_cells("kaggle_submission.ipynb", tmp_path, monkeypatch)
    assert scope["READY"] and scope["WRITTEN"] and Path(scope["CHALLENGES"]) == first, out
    assert "WARNING" not in out, out
    said = [line for line in out.splitlines() if "same bytes" in line]
    assert len(said) == 1 and f"using {first}" in said[0] and str(second) in said[0], out
    assert set(json.loads((tmp_path / "working" / "submission.json").read_text())) == set(TASKS)


def test_several_different_files_are_named_in_the_result_line(tmp_path, monkeypatch):
    """Two different files, neither the competition's alone: the RESULT line said "no challenges file was found"."""
    put(tmp_path / "input" / "arc-prize-2026-arc-agi-2" / NAME, json.dumps(TASKS))
    put(tmp_path / "input" / "competitions" / "arc-prize-2026-arc-agi-2" / NAME, json.dumps({"00000002": {}}))
    scope, out = run_cells("kaggle_submission.ipynb", tmp_path, monkeypatch, last=-1)
    assert scope["READY"] is False and not scope["WRITTEN"]
    result = out.splitlines()[-1]
    assert result.startswith("RESULT: no submission was written"), out
    assert "2 different arc-agi_test_challenges.json files" in result and "no challenges file was found" not in result


def test_a_challenges_parameter_nested_too_deeply_answers_the_competitions(tmp_path, monkeypatch):
    """CHALLENGES naming '[' * 200000: json's RecursionError escaped the fallback to the competition's file and
    no submission was written."""
    own = put(tmp_path / "input" / "arc-prize-2026-arc-agi-2" / NAME, json.dumps(TASKS))
    deep = put(tmp_path / "deep.json", "[" * 200000)
    scope, out = run_cells("kaggle_submission.ipynb", tmp_path, monkeypatch, CHALLENGES=str(deep))
    assert scope["READY"] and scope["WRITTEN"] and Path(scope["CHALLENGES"]) == own, out
    assert out.count("WARNING") == 1 and "nested too deeply" in out and f"answering {own}" in out, out


@pytest.mark.parametrize("notebook, name", [("kaggle_submission.ipynb", "submission.json"),
                                            ("kaggle_train.ipynb", "session.json")])
def test_the_first_write_never_goes_through_a_link_at_its_temporary_name(tmp_path, monkeypatch, notebook, name):
    """A link planted at `.<name>.partial-<pid>` in KAGGLE_WORKING: open(tmp, "w") followed it, overwrote the file
    outside KAGGLE_WORKING it points to, and submission.json became that link."""
    put(tmp_path / "input" / "arc-prize-2026-arc-agi-2" / NAME, json.dumps(TASKS))
    victim = put(tmp_path / "outside" / "keep.txt", "not the kernel's")
    (tmp_path / "working").mkdir()
    (tmp_path / "working" / f".{name}.partial-{os.getpid()}").symlink_to(victim)
    _, out = run_cells(notebook, tmp_path, monkeypatch)
    assert victim.read_text() == "not the kernel's", out
    written = tmp_path / "working" / name
    assert written.is_file() and not written.is_symlink(), out
    json.loads(written.read_text())
    assert sorted(p.name for p in (tmp_path / "working").iterdir()) == [name]  # the link is gone, nothing partial
