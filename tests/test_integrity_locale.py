"""Whatever the locale, files are UTF-8 and the console escapes what it cannot show.

Under `LC_ALL=C` (without Python's UTF-8 mode) or `PYTHONIOENCODING=ascii` a task id such as `é-tâche`
cannot be encoded on the console: the CLI escapes it (`\\xe9`) instead of ending in a UnicodeEncodeError.
Files are another matter: every text file the package opens is opened as UTF-8 (a scan of the package
keeps it so), a name typed on the command line is read as the UTF-8 it is in the files, and a report is
made whole in memory before its first file is written.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import trm_kaggle
from test_evaluate import make_model
from test_integrity_task_content import task, write_tasks
from trm_kaggle.config import ArcBuildConfig
from trm_kaggle.data.arc.build import build_arc
from trm_kaggle.evaluate import report as R
from trm_kaggle.evaluate.pipeline import evaluate
from trm_kaggle.names import typed_name

ID = "é-tâche"
LOCALES = {"C without UTF-8 mode": {"LC_ALL": "C", "PYTHONUTF8": "0"},
           "ascii console": {"PYTHONIOENCODING": "ascii"},
           "both": {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": "ascii"}}


def run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("LC_", "LANG", "PYTHONIOENCODING",
                                                                        "PYTHONUTF8"))}
    return subprocess.run([sys.executable, "-m", "trm_kaggle", *args], capture_output=True, cwd=cwd,
                          env={**environ, **env}, timeout=300)


def no_traceback(r: subprocess.CompletedProcess) -> str:
    err = r.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err and "UnicodeEncodeError" not in err, err
    return err


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    root = tmp_path_factory.mktemp("score")
    (root / "sub.json").write_text(json.dumps({ID: [{"attempt_1": [[1]], "attempt_2": [[2]]}],
                                               "plain": [{"attempt_1": [[3]], "attempt_2": [[3]]}]}))
    (root / "sol.json").write_text(json.dumps({ID: [[[1]]], "plain": [[[4]]]}))
    return root


@pytest.mark.parametrize("locale", list(LOCALES))
@pytest.mark.parametrize("as_json", [False, True])
def test_score_under_a_console_that_cannot_show_the_ids(scored, locale, as_json):
    r = run(["score", "sub.json", "--solutions", "sol.json", *(["--json"] if as_json else [])], LOCALES[locale],
            scored)
    no_traceback(r)
    assert r.returncode == 0
    out = r.stdout.decode("ascii")  # what the console could take
    assert ("\\xe9-t\\xe2che" in out) or ("\\u00e9-t\\u00e2che" in out), out  # escaped, not lost
    assert "plain" in out


@pytest.mark.parametrize("locale", list(LOCALES))
def test_an_error_line_naming_such_a_path(tmp_path, locale):
    r = run(["verify", str(tmp_path / "données")], LOCALES[locale], tmp_path)
    err = no_traceback(r)
    assert r.returncode == 2 and err.startswith("error: ") and "donn" in err


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    """A dataset whose test task ids need UTF-8, and an export that fits it."""
    from trm_kaggle.model.export import export_inference

    root = tmp_path_factory.mktemp("evaluated")
    src = write_tasks(root / "tasks", {"training": {"t0": task(seed=1)},
                                       "evaluation": {ID: task(seed=2), "plain": task(seed=3)}})
    build_arc(ArcBuildConfig(output_dir=str(root / "ds"), task_dir=str(src), subsets=["training", "evaluation"],
                             test_set_name="evaluation", num_aug=1, workers=1, progress=False, canvas=10))
    model = make_model(root / "ds", H_cycles=1)
    export_inference(root / "exp", model, arch=model.arch, seq_len=model.seq_len, vocab_size=model.vocab_size)
    return root


@pytest.mark.parametrize("locale", list(LOCALES))
def test_evaluate_writes_its_whole_report_under_any_locale(evaluated, tmp_path, locale):
    rep = tmp_path / "rep"
    r = run(["evaluate", "--weights", str(evaluated / "exp"), "--data", str(evaluated / "ds"), "--device", "cpu",
             "--no-progress", "--report-dir", str(rep), "--tasks", f"{ID},plain"], LOCALES[locale], tmp_path)
    no_traceback(r)
    assert r.returncode == 0
    assert ID in (rep / "report.md").read_text(encoding="utf-8")
    assert ID in json.loads((rep / "report.json").read_text(encoding="utf-8"))["tasks"]
    assert sorted(p.name for p in (rep / "pictures").iterdir()) == ["%C3%A9-t%C3%A2che.png", "plain.png"]


def test_a_report_is_made_whole_before_it_is_written(evaluated, tmp_path, monkeypatch):
    from trm_kaggle.model.export import load_inference_model

    model, _ = load_inference_model(evaluated / "exp")
    result = evaluate(model, evaluated / "ds", batch_size=8)
    R.write_report(result, tmp_path / "rep", first_n=2)
    before = {p.name: p.read_bytes() for p in (tmp_path / "rep").rglob("*") if p.is_file()}
    real = R.task_picture_png

    def fails_on_the_second(result, task_id, attempts=2):
        if task_id == "plain":
            raise RuntimeError("a picture that cannot be drawn")
        return real(result, task_id, attempts)

    monkeypatch.setattr(R, "task_picture_png", fails_on_the_second)
    with pytest.raises(RuntimeError):
        R.write_report(result, tmp_path / "rep", first_n=2, top=1)  # another report.json than the one there
    assert {p.name: p.read_bytes() for p in (tmp_path / "rep").rglob("*") if p.is_file()} == before


def test_a_typed_name_is_read_as_utf8():
    assert typed_name(ID) == ID and typed_name("plain") == "plain"
    escaped = b"\xc3\xa9-t\xc3\xa2che".decode("ascii", "surrogateescape")  # what argv holds under LC_ALL=C
    if os.fsencode(escaped) == b"\xc3\xa9-t\xc3\xa2che":
        assert typed_name(escaped) == ID


def test_files_are_utf8_under_a_locale_that_is_not(tmp_path):
    code = ("from trm_kaggle.atomic import atomic_write_text, append_line; "  # ASCII: argv under LC_ALL=C
            f"atomic_write_text({str(tmp_path / 'a.md')!r}, '\\u00e9-t\\u00e2che'); "
            f"append_line({str(tmp_path / 'b.log')!r}, '\\u00e9')")
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0"},
                       capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "a.md").read_bytes() == ID.encode("utf-8")
    assert (tmp_path / "b.log").read_bytes() == "é\n".encode("utf-8")


def _text_opens_without_encoding(path: Path) -> list[str]:
    """Calls in `path` that open text with the locale's encoding: open()/os.fdopen() in text mode, Path.read_text
    and write_text, and subprocess calls with text pipes, each without an explicit encoding."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        f, keys = node.func, {k.arg for k in node.keywords}
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
        if "encoding" in keys:
            continue
        if (name == "open" and isinstance(f, ast.Name)) or name == "fdopen":
            mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"),
                                                                 ast.Constant("r"))
            text = not (isinstance(mode, ast.Constant) and "b" in mode.value)
        elif name in ("read_text", "write_text"):
            text = isinstance(f, ast.Attribute)  # Path's; jsonio.read_text decodes UTF-8 itself
        else:
            text = name in ("Popen", "run", "check_output") and bool(keys & {"text", "universal_newlines"})
        if text:
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)[:80]}")
    return found


def test_every_text_file_of_the_package_is_opened_as_utf8(tmp_path):
    package = Path(trm_kaggle.__file__).parent
    found = [hit for p in sorted(package.rglob("*.py")) for hit in _text_opens_without_encoding(p)]
    assert found == []
    planted = tmp_path / "planted.py"  # the scan sees each kind of call it is meant to see
    planted.write_text("open(p)\nopen(p, 'w')\nos.fdopen(fd, mode)\nPath(p).read_text()\nq.write_text(s)\n"
                       "subprocess.run(c, text=True)\nopen(p, 'rb')\nread_text(p)\nopen(p, encoding='utf-8')\n")
    assert len(_text_opens_without_encoding(planted)) == 6


def test_a_path_with_bytes_that_are_not_utf8_in_a_report(evaluated, tmp_path):
    """A folder name holding a byte that is not UTF-8 (0xe9, latin-1's é) reaches Python as a surrogate escape:
    the report naming it is still written, as UTF-8, the byte escaped."""
    import shutil

    from trm_kaggle.atomic import atomic_write_text

    atomic_write_text(tmp_path / "a.md", "ds\udce9")
    assert (tmp_path / "a.md").read_bytes() == b"ds\\udce9"
    data = os.fsencode(tmp_path) + b"/ds\xe9"
    shutil.copytree(os.fsencode(evaluated / "ds"), data)
    r = run(["evaluate", "--weights", str(evaluated / "exp"), "--data", os.fsdecode(data), "--device", "cpu",
             "--no-progress", "--report-dir", str(tmp_path / "rep")], {"LC_ALL": "C.UTF-8"}, tmp_path)
    no_traceback(r)
    assert r.returncode == 0
    assert "ds\\udce9" in (tmp_path / "rep" / "report.md").read_text(encoding="utf-8")
