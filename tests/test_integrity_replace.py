"""Replacing an output leaves nothing beside it, and every refusal comes before the first byte is written.

One helper replaces every output folder (`trm_kaggle.atomic.atomic_directory`, checked by `replace_problem`)
and one writes every file (`atomic_write`). Through a symbolic link the output is written where the link
points (the link stays a link; no `.old-<pid>` link is left beside it); a dangling link is refused with
its own message; a read-only or immutable folder is refused before the new output is built; when the final
rename fails anyway, the old output is put back and the `.partial-<pid>` folder removed. A bundle checks all
of its parts before it writes the first.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import trm_kaggle.atomic as A
from cli_helpers import one_error_line
from integrity_helpers import build_sudoku4, train_args
from trm_kaggle.atomic import atomic_directory, atomic_write_text, remove_stale_partials
from trm_kaggle.cli import main
from trm_kaggle.errors import TRMError
from trm_kaggle.kaggle import bundle as B

from conftest import USER, make_export


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("run")
    data = build_sudoku4(root / "data")
    assert main(train_args(data, root / "run", "max_steps=2")) == 0
    return root / "run"


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".old-" in p.name or ".partial-" in p.name or
                  p.name.endswith(".tmp"))


def export(run: Path, out: Path) -> list[str]:
    return ["export", str(run), "--out", str(out)]


def dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


@pytest.fixture
def immutable():
    """immutable(path): `chattr +i path` (removed again at the end); skips where chattr is not allowed."""
    made = []

    def make(path: Path) -> Path:
        if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(path)],
                                                            capture_output=True).returncode:
            pytest.skip("chattr +i is not allowed here (needs CAP_LINUX_IMMUTABLE)")
        made.append(path)
        return path

    yield make
    for path in made:
        subprocess.run(["chattr", "-i", str(path)], check=False)


# ---------------------------------------------------------------------------
# Through a symbolic link
# ---------------------------------------------------------------------------


def test_export_through_a_symlink_leaves_no_old_link(run, tmp_path, capsys):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to("real")
    for _ in range(2):  # the first fills the empty folder, the second replaces the export in it
        assert main(export(run, tmp_path / "link")) == 0
    assert leftovers(tmp_path) == []
    assert (tmp_path / "link").is_symlink() and os.readlink(tmp_path / "link") == "real"
    assert (tmp_path / "real" / "weights.safetensors").is_file()


def test_build_arc_through_a_symlink_leaves_no_old_link(tmp_path, arc_prefix):
    (tmp_path / "real-ds").mkdir()
    (tmp_path / "ds").symlink_to(tmp_path / "real-ds")
    args = ["build-arc", "--input-file-prefix", str(arc_prefix), "--subsets", "training", "evaluation",
            "--test-set-name", "evaluation", "--num-aug", "0", "--workers", "1", "--no-progress",
            "--output-dir", str(tmp_path / "ds")]
    for _ in range(2):
        assert main(args) == 0
    assert leftovers(tmp_path) == []
    assert (tmp_path / "ds").is_symlink() and (tmp_path / "real-ds" / "test_puzzles.json").is_file()


def test_a_link_in_a_parent_folder(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "via").symlink_to(tmp_path / "elsewhere")
    for _ in range(2):
        make_export(tmp_path / "via" / "exp")
    assert leftovers(tmp_path / "elsewhere") == [] and (tmp_path / "elsewhere" / "exp" / "config.json").is_file()


@pytest.mark.parametrize("command", ["export", "import-upstream", "build-sudoku"])
def test_a_dangling_link_is_refused_with_its_own_message(run, tmp_path, capsys, command):
    (tmp_path / "out").symlink_to(tmp_path / "nowhere")
    args = {"export": export(run, tmp_path / "out"),
            "import-upstream": ["import-upstream", str(tmp_path / "step_1"), "--out", str(tmp_path / "out")],
            "build-sudoku": ["build-sudoku", "--output-dir", str(tmp_path / "out"), "--size", "4",
                             "--num-train", "4", "--num-test", "2", "--no-progress"]}[command]
    if command == "import-upstream":
        (tmp_path / "step_1").write_bytes(b"x")
    for _ in range(2):  # a new try leaves no more than the first
        line = one_error_line(capsys, main(args))
        assert "dangling link" in line and "Not a directory" not in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["out"] + (["step_1"] if command == "import-upstream"
                                                                            else []))
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("link", ["dangling", "loop"])
@pytest.mark.parametrize("command", ["build-sudoku", "submit --work-dir", "submit --output", "library"])
def test_an_output_below_a_link_to_nothing_is_named_before_any_work(tmp_path, capsys, link, command):
    """An output one level below a dangling link (or a loop of links): "File exists (needed: the path to be free)"
    from each command, after the work for some (a submit ran to exit 3 with a raw FileExistsError; votes were lost
    after a whole evaluation), and a raw OSError from the library."""
    from trm_kaggle.config import SudokuBuildConfig
    from trm_kaggle.data import build_sudoku

    if link == "dangling":
        (tmp_path / "via").symlink_to(tmp_path / "nowhere")
    else:
        (tmp_path / "via").symlink_to(tmp_path / "loop2")
        (tmp_path / "loop2").symlink_to(tmp_path / "via")
    words = "dangling link" if link == "dangling" else "loop of symbolic links"
    if command == "library":
        with pytest.raises(TRMError, match=words):
            build_sudoku(SudokuBuildConfig(output_dir=str(tmp_path / "via" / "x"), size=4, num_train=4, num_test=2,
                                           progress=False))
        return
    (tmp_path / "c.json").write_text(json.dumps({"t": {"train": [{"input": [[1]], "output": [[1]]}],
                                                        "test": [{"input": [[1]]}]}}))
    make_export(tmp_path / "exp")
    submit = ["submit", "--challenges", str(tmp_path / "c.json"), "--weights", str(tmp_path / "exp"), "--no-progress"]
    args = {"build-sudoku": ["build-sudoku", "--output-dir", str(tmp_path / "via" / "x"), "--size", "4",
                             "--num-train", "4", "--num-test", "2", "--no-progress"],
            "submit --work-dir": [*submit, "--output", str(tmp_path / "s.json"), "--work-dir",
                                  str(tmp_path / "via" / "w")],
            "submit --output": [*submit, "--output", str(tmp_path / "via" / "s.json"), "--work-dir",
                                str(tmp_path / "w")]}[command]
    line = one_error_line(capsys, main(args))
    assert f"the folder {tmp_path / 'via'} is a" in line and words in line and "File exists" not in line, line
    assert not (tmp_path / "s.json").exists() and not (tmp_path / "w").exists()


def test_a_file_output_through_links(tmp_path, capsys):
    (tmp_path / "target.txt").write_text("old")
    (tmp_path / "link.txt").symlink_to("target.txt")
    atomic_write_text(tmp_path / "link.txt", "new", through_link=True)  # a path the user named (--output)
    assert (tmp_path / "link.txt").is_symlink() and (tmp_path / "target.txt").read_text() == "new"
    (tmp_path / "dangling.txt").symlink_to(tmp_path / "gone" / "x.txt")
    with pytest.raises(TRMError, match="dangling link"):
        atomic_write_text(tmp_path / "dangling.txt", "x", through_link=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling.txt", "link.txt", "target.txt"]


def test_a_file_output_of_a_command_that_is_a_dangling_link(tmp_path, capsys):
    (tmp_path / "c.json").write_text(json.dumps({"t": {"train": [{"input": [[1]], "output": [[1]]}],
                                                        "test": [{"input": [[1]]}]}}))
    make_export(tmp_path / "exp")
    (tmp_path / "s.json").symlink_to(tmp_path / "no" / "s.json")
    line = one_error_line(capsys, main(["submit", "--challenges", str(tmp_path / "c.json"), "--weights",
                                        str(tmp_path / "exp"), "--output", str(tmp_path / "s.json"),
                                        "--work-dir", str(tmp_path / "w"), "--no-progress"]))
    assert "--output" in line and "dangling link" in line
    assert not (tmp_path / "w").exists()


# ---------------------------------------------------------------------------
# Refused before the first byte
# ---------------------------------------------------------------------------


def test_an_immutable_export_is_refused_before_it_is_built(run, tmp_path, capsys, immutable):
    assert main(export(run, tmp_path / "exp")) == 0
    before = sorted(p.name for p in (tmp_path / "exp").iterdir())
    immutable(tmp_path / "exp")
    for _ in range(2):
        line = one_error_line(capsys, main(export(run, tmp_path / "exp")))
        assert "immutable" in line, line
    assert leftovers(tmp_path) == [] and sorted(p.name for p in (tmp_path / "exp").iterdir()) == before


def test_an_export_into_an_immutable_folder(run, tmp_path, capsys, immutable):
    (tmp_path / "locked").mkdir()
    immutable(tmp_path / "locked")
    line = one_error_line(capsys, main(export(run, tmp_path / "locked" / "exp")))
    assert "locked" in line and "not writable" in line, line
    assert leftovers(tmp_path) == [] and not any((tmp_path / "locked").iterdir())


def test_a_failed_final_rename_puts_the_old_output_back(tmp_path, monkeypatch):
    make_export(tmp_path / "exp")
    before = (tmp_path / "exp" / "weights.safetensors").read_bytes()
    real = os.replace

    def refuse_the_new_one(src, dst):
        if ".partial-" in Path(src).name and Path(src).is_dir():  # the finished folder renamed into place
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), str(src), None, str(dst))
        return real(src, dst)

    monkeypatch.setattr(A.os, "replace", refuse_the_new_one)
    with pytest.raises(PermissionError):
        make_export(tmp_path / "exp")
    assert leftovers(tmp_path) == []
    assert (tmp_path / "exp" / "weights.safetensors").read_bytes() == before


def test_stale_leftovers_of_a_killed_replacement(tmp_path):
    pid = dead_pid()
    with A.atomic_directory(tmp_path / "out", kind="report") as d:
        (d / "a.txt").write_text("a")
    # a replacement killed while the old output was removed: the old one, put aside, holds its owner record, and
    # the record beside it says this host put it there
    shutil.copytree(tmp_path / "out", tmp_path / f"out.old-{pid}")
    A.atomic_write_json(tmp_path / f"out.old-{pid}.record", {"format": A.PARTIAL_FORMAT, "host": A._HOST})
    # a build killed while it built: its folder, with the record beside it that says this host made it
    (tmp_path / f"out.partial-{pid}").mkdir()
    A.atomic_write_json(tmp_path / f"out.partial-{pid}.record", {"format": A.PARTIAL_FORMAT, "host": A._HOST})
    (tmp_path / f"out.old-{os.getpid()}").mkdir()  # a live process's: not touched
    removed = remove_stale_partials(tmp_path / "out", "report")
    assert sorted(p.name for p in removed) == [f"out.old-{pid}", f"out.partial-{pid}"]
    assert leftovers(tmp_path) == [f"out.old-{os.getpid()}"]
    (tmp_path / "gone.old-1").mkdir()  # no output in place: the old one is all there is, and it is kept
    remove_stale_partials(tmp_path / "gone", "report")
    assert (tmp_path / "gone.old-1").is_dir() or A.pid_alive(1)


def test_the_leftovers_of_a_killed_build_not_yet_reaped_are_removed(tmp_path):
    """A build killed with SIGKILL whose parent has not reaped it yet (a zombie) writes nothing any more: its
    leftovers went through the next build, which took the pid's answer to a signal for a live process."""
    import time

    child = subprocess.Popen(["sleep", "0.01"])
    for _ in range(200):  # exited, not reaped: /proc says Z
        if A._zombie(child.pid):
            break
        time.sleep(0.01)
    try:
        assert A._zombie(child.pid) and not A.pid_alive(child.pid) and A.pid_alive(os.getpid())
        with A.atomic_directory(tmp_path / "out", kind="report") as d:
            (d / "a.txt").write_text("a")
        (tmp_path / f"out.partial-{child.pid}").mkdir()
        A.atomic_write_json(tmp_path / f"out.partial-{child.pid}.record",
                            {"format": A.PARTIAL_FORMAT, "host": A._HOST})
        assert [p.name for p in remove_stale_partials(tmp_path / "out", "report")] == [f"out.partial-{child.pid}"]
        assert leftovers(tmp_path) == []
    finally:
        child.wait()


def test_folders_named_like_leftovers_that_we_did_not_make_are_never_removed(tmp_path):
    """`exp.old-2023` (a user's backup: mv exp exp.old-2023), `exp.partial-1999` and a link of that name were
    deleted by the next `export --out exp`, whose process numbers they seemed to carry."""
    pid = dead_pid()
    with A.atomic_directory(tmp_path / "exp", kind="report") as d:
        (d / "a.txt").write_text("a")
    (tmp_path / f"exp.old-{pid}").mkdir()
    (tmp_path / f"exp.old-{pid}" / "NOTES.txt").write_text("my backup")
    shutil.copytree(tmp_path / "exp", tmp_path / f"exp.old-{pid + 2}")  # `cp -r exp exp.old-N`: our owner record
    (tmp_path / f"exp.partial-{pid}").mkdir()  # no record beside it
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / f"exp.partial-{pid + 1}").symlink_to(tmp_path / "elsewhere")
    foreign = tmp_path / f"exp.partial-{os.getpid()}"  # where this process would build: refused, not emptied
    foreign.mkdir()
    (foreign / "mine.txt").write_text("mine")
    with pytest.raises(TRMError, match=r"exists and this package did not make it"):
        with A.atomic_directory(tmp_path / "exp", kind="report") as d:
            pass
    foreign.rename(tmp_path / "kept")
    with A.atomic_directory(tmp_path / "exp", kind="report") as d:
        (d / "b.txt").write_text("b")
    assert (tmp_path / f"exp.old-{pid}" / "NOTES.txt").read_text() == "my backup"
    assert (tmp_path / f"exp.partial-{pid}").is_dir() and (tmp_path / f"exp.partial-{pid + 1}").is_symlink()
    assert (tmp_path / f"exp.old-{pid + 2}" / "a.txt").read_text() == "a"
    assert (tmp_path / "kept" / "mine.txt").read_text() == "mine" and (tmp_path / "exp" / "b.txt").exists()
    assert not list(tmp_path.glob("*.record"))  # the build's own record went with its folder


def test_the_helper_refuses_before_yielding(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    entered = []
    with pytest.raises(TRMError, match="not an? 'export' written by this package|not an export written"):
        with atomic_directory(tmp_path / "mine", kind="export"):
            entered.append(True)
    assert not entered and leftovers(tmp_path) == []


# ---------------------------------------------------------------------------
# Bundles: every part checked before the first is written
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("part", ["weights", "kernel"])
def test_a_bundle_with_a_foreign_part_writes_nothing(inputs, tmp_path, capsys, part):
    out = tmp_path / "bundle"
    (out / part).mkdir(parents=True)
    (out / part / "mine.txt").write_text("not the package's")
    rc = B.main([str(out), "--no-download", "--user", USER, "--weights", str(inputs["export"]),
                 "--notebook", str(inputs["notebook"]), "--extra-wheel", str(inputs["extra"])])
    line = one_error_line(capsys, rc)
    assert f"{part}" in line and "refusing to replace it" in line, line
    assert sorted(p.name for p in out.iterdir()) == [part]  # no wheels/ (nor anything else) was written
    assert (out / part / "mine.txt").read_text() == "not the package's"


def test_a_bundle_part_that_is_a_dangling_link(inputs, tmp_path, capsys):
    out = tmp_path / "bundle"
    out.mkdir()
    (out / "kernel").symlink_to(tmp_path / "nowhere")
    rc = B.main([str(out), "--no-download", "--user", USER, "--weights", str(inputs["export"]),
                 "--notebook", str(inputs["notebook"]), "--extra-wheel", str(inputs["extra"])])
    assert "dangling link" in one_error_line(capsys, rc)
    assert sorted(p.name for p in out.iterdir()) == ["kernel"]


@pytest.mark.parametrize("kind", ["fifo", "/dev/null link"])
def test_a_special_file_in_place_of_an_output_file_is_not_replaced(tmp_path, capsys, kind):
    (tmp_path / "c.json").write_text(json.dumps({"t": {"train": [{"input": [[1]], "output": [[1]]}],
                                                        "test": [{"input": [[1]]}]}}))
    make_export(tmp_path / "exp")
    out = tmp_path / "s.json"
    if kind == "fifo":
        os.mkfifo(out)
    else:
        out.symlink_to("/dev/null")
    line = one_error_line(capsys, main(["submit", "--challenges", str(tmp_path / "c.json"), "--weights",
                                        str(tmp_path / "exp"), "--output", str(out), "--work-dir",
                                        str(tmp_path / "w"), "--no-progress"]))
    assert "not a file: it is not replaced" in line
    assert (out.is_fifo() if kind == "fifo" else out.is_symlink()) and Path("/dev/null").is_char_device()
    with pytest.raises(TRMError, match="not a file: it is not replaced"):
        atomic_write_text(out, "x")


def test_a_loop_of_links_is_named(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(TRMError, match="a loop of symbolic links"):
        make_export(tmp_path / "a")
    assert leftovers(tmp_path) == []


def test_another_writer_finishing_first_leaves_no_old_folder(tmp_path, monkeypatch):
    """Two replacements of one output at once, their swaps at the same instant: the one whose rename comes
    second fails with the line of a race (not the rename's raw "Directory not empty"), and removes the old output
    it moved aside (the other writer's is in place) as well as its own partial folder."""
    make_export(tmp_path / "exp")
    real = os.replace

    def the_other_writer_first(src, dst):
        if ".partial-" in Path(src).name and Path(src).is_dir():  # the folder's swap, not its record's write
            make_fake = tmp_path / "other"
            make_fake.mkdir()
            (make_fake / "x").write_text("the other writer's")
            real(make_fake, dst)
            raise OSError(errno.ENOTEMPTY, os.strerror(errno.ENOTEMPTY), str(src), None, str(dst))
        return real(src, dst)

    monkeypatch.setattr(A.os, "replace", the_other_writer_first)
    with pytest.raises(TRMError, match="another command wrote this export while this one was built"):
        make_export(tmp_path / "exp")
    assert leftovers(tmp_path) == [] and (tmp_path / "exp" / "x").read_text() == "the other writer's"


@pytest.mark.parametrize("before", ["none", "an older export"])
def test_an_output_another_command_wrote_meanwhile_is_kept_and_this_one_refused(tmp_path, before):
    """Two `export --out X` (or two builds of one dataset) at once: both once said "exported" and the first
    one's output was silently replaced. Now the second to finish sees another output where it started from,
    keeps it and ends with one line; nothing of its own is left beside it."""
    if before != "none":
        make_export(tmp_path / "exp")
    with pytest.raises(TRMError, match="another command wrote this export while this one was built; that one "
                                       "stands and this one is discarded"):
        with atomic_directory(tmp_path / "exp", kind="export") as tmp:
            (tmp / "mine.txt").write_text("this command's")
            make_export(tmp_path / "exp")  # the other command, finishing first
    assert leftovers(tmp_path) == [] and not (tmp_path / "exp" / "mine.txt").exists()
    assert (tmp_path / "exp" / "weights.safetensors").is_file()


def test_two_export_commands_at_once_one_refused_one_kept(run, tmp_path, capsys, monkeypatch):
    """The command itself: the second export to finish exits 2 with the line, the first's files stand."""
    from trm_kaggle.model import export as E

    real, others = E.atomic_directory, []

    @__import__("contextlib").contextmanager
    def raced(target, *, kind, found=None):
        with real(target, kind=kind, found=found) as tmp:
            yield tmp
            if not others:  # another `export --out` into the same folder ends first
                others.append(target)
                make_export(target)

    monkeypatch.setattr(E, "atomic_directory", raced)
    assert main(["export", str(run), "--out", str(tmp_path / "e")]) == 2
    assert "another command wrote this export while this one was built" in one_error_line(capsys, 2)
    assert leftovers(tmp_path) == [] and (tmp_path / "e" / "config.json").is_file()


def test_a_file_rewritten_by_another_process_meanwhile_is_left_to_it(tmp_path):
    """submit's --output is written again and again (the fallback, then the answers): another process's write in
    between is seen at the next write, which is refused and leaves that process's file as it wrote it."""
    out = tmp_path / "submission.json"
    mine = A.RewrittenFile(out)
    mine.write(lambda: atomic_write_text(out, "fallback"))
    mine.write(lambda: atomic_write_text(out, "answers 1"))  # its own writes follow each other freely
    atomic_write_text(out, "the other's")  # a second command naming the same output
    with pytest.raises(A.OutputTaken, match="another process wrote this file while this command ran"):
        mine.write(lambda: atomic_write_text(out, "answers 2"))
    assert out.read_text() == "the other's"
    with pytest.raises(A.OutputTaken):  # and every later write too
        mine.write(lambda: atomic_write_text(out, "answers 3"))
    assert out.read_text() == "the other's"


def test_a_rewritten_file_that_was_there_before_the_command_is_its_to_replace(tmp_path):
    out = tmp_path / "submission.json"
    out.write_text("an old run's")
    mine = A.RewrittenFile(out)  # what stands at the start is this command's to replace
    mine.write(lambda: atomic_write_text(out, "new"))
    assert out.read_text() == "new"


def test_a_rewritten_file_removed_meanwhile_is_written_again_with_a_warning(tmp_path, caplog):
    """submit's --output deleted mid-run (or its folder moved away) ended the run with "another process wrote this
    file ... it is left as that one wrote it", and no submission: no writer removes a file (each replaces it), so
    nothing there is nobody's, and the command writes its output again."""
    out = tmp_path / "submission.json"
    mine = A.RewrittenFile(out)
    mine.write(lambda: atomic_write_text(out, "fallback"))
    out.unlink()
    with caplog.at_level("WARNING"):
        mine.write(lambda: atomic_write_text(out, "answers"))
    assert out.read_text() == "answers" and "was removed while this command ran: written again" in caplog.text
    atomic_write_text(out, "the other's")  # a writer after that is still seen
    with pytest.raises(A.OutputTaken):
        mine.write(lambda: atomic_write_text(out, "more"))
    assert out.read_text() == "the other's"


def test_a_folder_where_a_file_is_written_is_named_not_its_temporary(tmp_path):
    """A folder in run.json's place was "<dir>/.run.json.x8k.tmp -> <dir>/run.json: Is a directory": the line
    named a temporary file no one made. Now the folder is named, before a temporary file exists."""
    (tmp_path / "run.json").mkdir()
    with pytest.raises(TRMError, match=r"run.json is a folder, not a file: it is not replaced"):
        atomic_write_text(tmp_path / "run.json", "{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")  # a link is replaced itself, whatever it points to
    atomic_write_text(tmp_path / "link", "{}")
    assert (tmp_path / "link").read_text() == "{}" and (tmp_path / "elsewhere").is_dir()


@pytest.mark.parametrize("kind", ["folder", "dangling link"])
def test_an_owner_record_that_is_a_folder_or_a_dangling_link_is_named_so(tmp_path, kind):
    """Refused rightly, but said as "it holds no record that this package wrote it" (a FIFO there was named)."""
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "weights.bin").write_text("x")
    record = tmp_path / "exp" / A.OWNER_RECORD
    record.mkdir() if kind == "folder" else record.symlink_to(tmp_path / "gone")
    said = "is a folder, not a file" if kind == "folder" else "is a link to nothing"
    with pytest.raises(TRMError, match=f"its owner record .* {said}"):
        with atomic_directory(tmp_path / "exp", kind="export"):
            pass


def test_a_run_whose_metrics_log_cannot_be_appended_to_is_refused_before_the_first_step(tmp_path, capsys,
                                                                                      monkeypatch):
    """`train` resuming a run whose metrics.jsonl this user may not write (another user's, mode 444) trained a
    whole log interval, then failed at its first line: those steps were lost."""
    data = build_sudoku4(tmp_path / "ds")
    run = tmp_path / "run"
    assert main(train_args(data, run, "max_steps=2", "--no-progress")) == 0
    capsys.readouterr()
    log = str(run / "metrics.jsonl")
    opened = os.open

    def as_another_user(path, flags, *args):  # root writes a mode-444 file: refuse as the file's mode would
        if os.fspath(path) == log and flags & os.O_APPEND:
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
        return opened(path, flags, *args)

    monkeypatch.setattr(os, "open", as_another_user)
    monkeypatch.setattr("trm_kaggle.train.loop.train_step", lambda *a, **k: pytest.fail("a step was trained"))
    line = one_error_line(capsys, main(train_args(data, run, "max_steps=6", "log_interval=4", "--no-progress")))
    assert f"{log}: Permission denied" in line, line
    assert sorted(p.name for p in run.glob("state_step*.pt")) == ["state_step00000002.pt"]


def test_a_read_only_folder_is_named_not_the_temporary_that_was_never_made(tmp_path, monkeypatch):
    """A read-only run folder (a sweep's rerun, a pipeline's WORK/train) was said as
    `.../.config.json.u84_1ecf.tmp: Permission denied`, a random name nobody made."""
    import tempfile

    from trm_kaggle.errors import os_error_line

    def read_only(*args, dir=None, **kw):
        raise PermissionError(errno.EACCES, "Permission denied", os.path.join(dir, ".config.json.u84_1ecf.tmp"))

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    with pytest.raises(OSError) as e:
        atomic_write_text(tmp_path / "run" / "config.json", "{}")
    assert os_error_line(e.value).startswith(f"{tmp_path / 'run'}: Permission denied"), os_error_line(e.value)


def test_a_pipelines_read_only_run_folder_is_refused_before_its_first_stage(tmp_path, capsys, monkeypatch):
    """`pipeline` over a read-only WORK/train ran its first stage again before it found the folder."""
    import trm_kaggle.outputs as O

    (tmp_path / "pl" / "train").mkdir(parents=True)
    access = os.access
    monkeypatch.setattr(O.os, "access", lambda p, mode: False if str(p).endswith("train") else access(p, mode))
    line = one_error_line(capsys, main(["pipeline", "--work-dir", str(tmp_path / "pl"), "--num-aug", "1",
                                        "--train-seconds", "2", "--canvas", "12", "--eval-tasks", "1",
                                        "--unseen-tasks", "1", "--no-progress"]))
    assert f"--work-dir's run folder {tmp_path / 'pl' / 'train'}" in line and "is not writable" in line, line
    assert sorted(p.name for p in (tmp_path / "pl").iterdir()) == ["train"]
