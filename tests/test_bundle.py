"""The offline Kaggle bundle as a whole: `build_bundle` and the build_bundle.py command line.

Each part has its own tests beside its module (test_metadata, test_wheels, test_weights_dataset, test_kernel,
test_push, test_sandbox); the bundle they share is built once by the fixtures in conftest.py.
"""

from __future__ import annotations

import pytest

from trm_kaggle.kaggle import bundle as B


def test_missing_notebook_fails_clearly(inputs, tmp_path, capsys):
    rc = B.main([str(tmp_path / "out"), "--no-download", "--weights", str(inputs["export"]),
                 "--notebook", str(tmp_path / "nope.ipynb")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "nope.ipynb does not exist" in err and "--notebook" in err
    assert not (tmp_path / "out" / "wheels").exists()


@pytest.mark.parametrize("part", ["wheels", "weights", "kernel"])
def test_a_part_planted_as_a_link_is_refused_never_built_through(inputs, tmp_path, capsys, part):
    """OUT_DIR/wheels a link to an empty folder outside OUT_DIR: the whole wheels dataset was written there, exit 0."""
    (tmp_path / "out").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "out" / part).symlink_to(tmp_path / "elsewhere")
    rc = B.main([str(tmp_path / "out"), "--no-download", "--weights", str(inputs["export"]),
                 "--notebook", str(inputs["notebook"])])
    err = capsys.readouterr().err
    assert rc == 2 and f"OUT_DIR part {part}/" in err and "never through a link" in err, err
    assert not list((tmp_path / "elsewhere").iterdir())


def test_a_part_planted_as_a_link_to_a_full_folder_or_as_a_fifo_is_named_as_it_is(inputs, tmp_path, capsys):
    """A link to a folder holding files was refused as a foreign folder, a FIFO as "not a directory": said as
    what stands there."""
    import os

    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "mine.txt").write_text("x")
    (out / "kernel").symlink_to(tmp_path / "elsewhere")
    os.mkfifo(out / "wheels")
    argv = [str(out), "--no-download", "--weights", str(inputs["export"]), "--notebook", str(inputs["notebook"])]
    assert B.main(argv) == 2
    err = capsys.readouterr().err
    assert "wheels exists and is a pipe (FIFO), not a directory" in err, err
    (out / "wheels").unlink()
    assert B.main(argv) == 2
    assert "OUT_DIR part kernel/" in (err := capsys.readouterr().err) and "never through a link" in err, err
    assert [p.name for p in (tmp_path / "elsewhere").iterdir()] == ["mine.txt"]


@pytest.mark.parametrize("case", ["the root", "around its weights", "a NUL byte", "the training's root"])
def test_the_librarys_builders_check_their_out_folder_as_the_command_does(inputs, tmp_path, monkeypatch, case):
    """`build_bundle("/")` made /wheels, /weights, /kernel and a lock at the filesystem root, and
    `build_training("/")` /data; `build_bundle(OUT, weights=OUT/weights)` replaced its input with a copy of
    itself; "a\0b" was Python's bare "embedded null byte". build_bundle.py refused each: so do the builders."""
    import shutil

    from trm_kaggle.errors import TRMError
    from trm_kaggle.kaggle.metadata import BundleIds

    def nothing_written(*args, **kw):  # where the first byte would be written: never reached
        pytest.fail("the out folder was taken")

    monkeypatch.setattr(B, "_out_dir_lock", nothing_written)
    ids = BundleIds(user="u", prefix="p")
    weights = shutil.copytree(inputs["export"], tmp_path / "out" / "weights")
    if case == "the training's root":
        with pytest.raises(TRMError, match="^out_dir / "):
            B.build_training("/", ids=ids, dataset=tmp_path, download=False, log=lambda _: None)
        return
    out, words = {"the root": ("/", "^out_dir / "), "around its weights": (tmp_path / "out", "holds the input weights"),
                  "a NUL byte": ("a\0b", "NUL byte")}[case]
    with pytest.raises(TRMError, match=words):
        B.build_bundle(out, ids=ids, weights=weights, notebook=inputs["notebook"], download=False, log=lambda _: None)


def test_weights_must_be_an_export(inputs, tmp_path, capsys):
    (tmp_path / "notexport").mkdir()
    rc = B.main([str(tmp_path / "out"), "--no-download", "--weights", str(tmp_path / "notexport"),
                 "--notebook", str(inputs["notebook"])])
    assert rc == 2 and "not an export" in capsys.readouterr().err


@pytest.mark.parametrize("text, said", [
    (lambda good: good[:200], "the file ends early"),
    (lambda good: good.rstrip().rstrip("}") + ', "x": ' + "9" * 5000 + "}", "an integer of 5,000 digits"),
    (lambda good: good.rstrip().rstrip("}") + ', "format": "again"}', "the key 'format' appears twice"),
])
def test_an_export_whose_config_cannot_be_read_is_named_with_its_cause(inputs, tmp_path, capsys, text, said):
    """Not "not an export": both files are there, so the line names config.json and what is wrong with it."""
    import shutil

    export = tmp_path / "export"
    shutil.copytree(inputs["export"], export)
    good = (export / "config.json").read_text()
    (export / "config.json").write_text(text(good))
    rc = B.main([str(tmp_path / "out"), "--no-download", "--weights", str(export), "--notebook",
                 str(inputs["notebook"])])
    err = capsys.readouterr().err
    assert rc == 2 and f"--weights {export}: not a readable export: {export / 'config.json'}" in err and said in err
    assert err.count("\n") == 1 and not (tmp_path / "out").exists()


@pytest.mark.parametrize("vocab_size, seq_len", [(6, 16), (12, 20), (97, 900)])
def test_a_model_that_answers_no_arc_task_is_refused(tmp_path, inputs, capsys, vocab_size, seq_len):
    """A Sudoku export (vocabulary 6, 16 cells), a canvas that is no square, a code model's vocabulary: the
    submission kernel would answer no ARC task with them, so the bundle is refused before anything is built."""
    from trm_kaggle.config import ArchConfig
    from trm_kaggle.model.export import export_inference
    from trm_kaggle.model.trm import TinyRecursiveModel

    arch = ArchConfig(hidden_size=16, num_heads=2, expansion=2.0, H_cycles=1, L_cycles=1, L_layers=1,
                      halt_max_steps=2, puzzle_emb_len=2, forward_dtype="float32")
    export = export_inference(tmp_path / "sudoku", TinyRecursiveModel(arch, seq_len, vocab_size, 3), arch=arch,
                              seq_len=seq_len, vocab_size=vocab_size, mean_embedding=True, info={})
    rc = B.main([str(tmp_path / "out"), "--no-download", "--weights", str(export),
                 "--notebook", str(inputs["notebook"])])
    err = capsys.readouterr().err
    assert rc == 2 and f"--weights {export}: not an ARC model" in err
    assert f"vocab_size {vocab_size} and seq_len {seq_len}" in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_a_refused_bundle_leaves_no_out_dir_it_made(inputs, tmp_path, monkeypatch, capsys):
    """U08: an extra wheel found to be no zip once OUT_DIR is locked: the OUT_DIR this made (and the folder made
    above it) is gone, not left holding its lock file; a folder that was there before stays with what it held."""
    import shutil
    from pathlib import Path

    from trm_kaggle.kaggle import wheels as W

    def fake_project_wheel(dest, repo=None, builder="auto", log=print):  # the refusal, without a real build
        dest.mkdir(parents=True, exist_ok=True)
        return Path(shutil.copy(inputs["extra"], dest))

    monkeypatch.setattr(W, "build_project_wheel", fake_project_wheel)
    (tmp_path / "x-1.0-py3-none-any.whl").write_text("notazip")
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "mine.txt").write_text("mine")
    for out in (tmp_path / "new" / "ob", tmp_path / "kept"):
        rc = B.main([str(out), "--no-download", "--user", "me", "--weights", str(inputs["export"]), "--notebook",
                     str(inputs["notebook"]), "--extra-wheel", str(tmp_path / "x-1.0-py3-none-any.whl")])
        assert rc == 2 and "not a wheel (bad zip file)" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
    assert (tmp_path / "kept" / "mine.txt").read_text() == "mine" and not (tmp_path / "kept" / "wheels").exists()


def test_execute_rehearses_the_mount_layout_asked_for(inputs, tmp_path, monkeypatch, capsys):
    """`--execute --mounts 2026` runs the kernel in 2026's layout (tests/test_kaggle_kernel.py runs it for real)."""
    seen = {}

    def fake_execute(out, **kw):
        seen.update(kw)
        return {"notebook_s": 1.0, "papermill_rc": 0, "submission_valid": True, "tasks": 1, "trm_kaggle_file": "x",
                "trm_kaggle_in_venv": True, "log": "log", "executed_notebook": "nb", "ok": True, "problems": [],
                "answered": 1, "model_tasks": 1}

    monkeypatch.setattr(B, "execute", fake_execute)
    assert B.main([str(tmp_path / "out"), "--no-download", "--user", "tester", "--weights", str(inputs["export"]),
                   "--notebook", str(inputs["notebook"]), "--execute", "--mounts", "2026"]) == 0
    assert seen["mounts"] == "2026" and "executed the kernel offline (2026 mounts)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        B.main([str(tmp_path / "out"), "--execute", "--mounts", "2027"])  # argparse: not one of the layouts


def test_progress_and_summary_lines_escape_the_users_paths(inputs, tmp_path, capsys):
    """An export folder named with an escape sequence and a newline reached the terminal raw in "copying the export
    ..." (the screen cleared, the line split): every progress and summary line is one escaped line."""
    import shutil

    export = tmp_path / "exp\x1b[2Jnl\nx"
    shutil.copytree(inputs["export"], export)
    assert B.main([str(tmp_path / "out"), "--no-download", "--user", "tester", "--weights", str(export),
                   "--notebook", str(inputs["notebook"])]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "copying the export" in out and "exp\\x1b[2Jnl\\nx" in out
    assert all(line.strip() for line in out.splitlines())  # no line split in two by the name's newline


def test_a_prefix_is_checked_against_the_ids_this_build_makes_only(inputs, tmp_path, capsys):
    """A 34-character --slug-prefix fits every id of the submission bundle, yet the build was refused for the
    id of the adam-atan2 wheel kernel, which only --wheel-kernel makes."""
    prefix = "p" * 34
    args = [str(tmp_path / "out"), "--no-download", "--user", "bob", "--weights", str(inputs["export"]),
            "--notebook", str(inputs["notebook"]), "--slug-prefix", prefix]
    assert B.main(args) == 0
    assert f"bob/{prefix}-submission" in capsys.readouterr().out
    assert B.main([str(tmp_path / "other"), *args[1:], "--wheel-kernel"]) == 2  # that kernel's id is too long
    assert f"bob/{prefix}-adam-atan2-wheel" in capsys.readouterr().err and not (tmp_path / "other").exists()


def test_a_compile_cache_the_kernel_never_reads_is_refused(inputs, tmp_path, capsys, monkeypatch):
    """A `--cpu` kernel compiles nothing, and a GPU kernel loads only a cache made on a GPU: both once shipped
    the cache and found out only on Kaggle, after the push."""
    import torch

    from trm_kaggle.model.compiling import CACHE_FILE, save_compile_cache

    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: (b"artifacts", None))
    save_compile_cache(tmp_path / "made", "cpu")
    common = ["--no-download", "--user", "tester", "--weights", str(inputs["export"]), "--notebook",
              str(inputs["notebook"]), "--compile-cache", str(tmp_path / "made" / CACHE_FILE)]
    assert B.main([str(tmp_path / "gpu"), *common]) == 2
    assert "made on 'cpu', and the kernel runs on a GPU" in capsys.readouterr().err
    assert B.main([str(tmp_path / "cpu"), *common, "--cpu"]) == 2
    assert "with --cpu: a CPU kernel compiles nothing" in capsys.readouterr().err
    assert not (tmp_path / "gpu").exists() and not (tmp_path / "cpu").exists()


@pytest.mark.parametrize("capability", [True, 90, [8, "x"]])
def test_a_compile_cache_record_of_an_odd_target_is_refused_before_the_build(inputs, tmp_path, capsys, monkeypatch,
                                                                             capability):
    """A hand-made compile_cache.json whose target capability was `true` or 90 passed the record's check; the build
    then rebuilt the wheels and ended in a TypeError traceback (exit 1) while logging `sm_...`."""
    import json

    import torch

    from trm_kaggle.model.compiling import CACHE_FILE, CACHE_RECORD, save_compile_cache

    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: (b"artifacts", None))
    save_compile_cache(tmp_path / "made", "cpu")
    record = json.loads((tmp_path / "made" / CACHE_RECORD).read_text())
    record["target"].update(device="cuda", capability=capability)
    (tmp_path / "made" / CACHE_RECORD).write_text(json.dumps(record))
    rc = B.main([str(tmp_path / "out"), "--no-download", "--user", "tester", "--weights", str(inputs["export"]),
                 "--notebook", str(inputs["notebook"]), "--compile-cache", str(tmp_path / "made" / CACHE_FILE)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith(f"error: {tmp_path / 'made' / CACHE_RECORD}: its target"), err
    assert not (tmp_path / "out").exists()


def test_execute_through_link_dotdot_builds_its_sandbox_in_the_bundle(bundle_copy, tmp_path, monkeypatch):
    """`build_bundle.py L/../bx --execute` (L a link into another folder): the bundle was at the place the system
    reaches, the sandbox's venv where `L/..` shortens as text, a folder nobody named, and the run failed there."""
    from trm_kaggle.kaggle import rehearsal

    class Made(Exception):
        pass

    def made(layout, **kw):
        raise Made(layout)

    (tmp_path / "deep" / "inner").mkdir(parents=True)
    (tmp_path / "L").symlink_to(tmp_path / "deep" / "inner")
    bundle_copy.rename(tmp_path / "deep" / "bx")
    monkeypatch.setattr(rehearsal, "probe_netns", lambda: ())
    monkeypatch.setattr(rehearsal, "create_sandbox_venv", made)
    monkeypatch.setattr(rehearsal, "importlib_missing", lambda name: False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(Made) as got:
        rehearsal.execute("L/../bx", echo=lambda line: None)
    assert got.value.args[0].root == tmp_path / "deep" / "bx" / "sandbox"
    assert not (tmp_path / "bx").exists()


def test_the_librarys_execute_refuses_challenges_with_no_task_before_the_sandbox(bundle_copy, tmp_path):
    """`rehearsal.execute(out, challenges=<{}>)` ran the notebook for seconds, then listed the problem in its
    report; `build_bundle.py --execute --challenges` refused the same file before the build."""
    from trm_kaggle.errors import TRMError
    from trm_kaggle.kaggle import rehearsal

    (tmp_path / "empty.json").write_text("{}")
    with pytest.raises(TRMError, match="holds no task"):
        rehearsal.execute(bundle_copy, challenges=tmp_path / "empty.json", echo=lambda line: None)
    assert not (bundle_copy / "sandbox").exists()


def test_the_builders_warnings_are_each_one_escaped_line(tmp_path):
    """build_bundle.py configured no logging: a package warning naming a folder of a downloaded kernel output
    (--continue-from) went through Python's last-resort handler, its escape sequence raw on the terminal."""
    import subprocess
    import sys

    script = ("import logging, sys\n"
              "import trm_kaggle.kaggle.bundle as B\n"
              "B.run = lambda args: (logging.getLogger('trm_kaggle.x').warning('e\\x1b[2J/state: damaged\\nFAKE'), 0)[1]\n"
              f"sys.exit(B.main([{str(tmp_path / 'out')!r}, '--no-download']))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "WARNING: e\\x1b[2J/state: damaged\\nFAKE\n", done.stderr


@pytest.mark.parametrize("record, words", [
    ("session.json", "holds session.json, the record of a Kaggle training session"),
    (".trm_kaggle_jobs", "is a launch's folder (it holds .trm_kaggle_jobs)"),
])
@pytest.mark.parametrize("training", [True, False], ids=["training", "submission"])
def test_out_dir_inside_a_sessions_output_or_a_launchs_folder_is_refused(inputs, tmp_path, capsys, record, words,
                                                                        training):
    """`build_bundle.py K/s1/sub --train-kernel` (K/s1 a Kaggle training session's output) built data/, wheels/ and
    train-kernel/ there, exit 0: the next session found two datasets among its inputs. A launch's folder, or one
    inside it, took a bundle among its job files. Refused "is or lies inside", as `pipeline --work-dir` refuses it."""
    from trm_kaggle.cli import main

    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / record).write_text("{}")
    for out in (kept, kept / "sub"):
        argv = ([str(out), "--train-kernel", "--preset", "sudoku4-cpu"] if training else
                [str(out), "--weights", str(inputs["export"]), "--notebook", str(inputs["notebook"])])
        assert B.main([*argv, "--no-download", "--user", "me"]) == 2
        err = capsys.readouterr().err
        where = "" if out == kept else f" lies inside {kept}, which"
        assert err.startswith(f"error: OUT_DIR {out}{where} ") and words.split(" ", 1)[1] in err, err
        assert err.count("\n") == 1, err
        assert main(["pipeline", "--work-dir", str(out), "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: --work-dir {out}{where} ") and words.split(" ", 1)[1] in err, err
    assert sorted(p.name for p in kept.iterdir()) == [record]


@pytest.mark.parametrize("folder, record, words", [
    ("run", "run.json", "is a training run folder (it holds run.json): its files would mix with the run's"),
    ("session", "session.json", "holds session.json, the record of a Kaggle training session"),
    ("sweep", "sweep.json", "is a sweep's folder (it holds sweep.json)"),
])
@pytest.mark.parametrize("training", [True, False], ids=["training", "submission"])
def test_out_dir_another_commands_output_is_refused_with_the_pipelines_words(inputs, tmp_path, capsys, folder, record,
                                                                             words, training):
    """`build_bundle.py RUN --train-kernel` wrote data/, wheels/ and train-kernel/ among a training run's states, and
    into a Kaggle session's output (the next session's input: a second data dataset there), exit 0. Refused as
    `pipeline --work-dir` refuses the same folders, in its words, before anything is written."""
    from trm_kaggle.cli import main
    from trm_kaggle.errors import TRMError
    from trm_kaggle.kaggle.metadata import BundleIds

    out = tmp_path / folder
    out.mkdir()
    (out / record).write_text("{}")
    before = sorted(p.name for p in out.iterdir())
    argv = ([str(out), "--train-kernel", "--preset", "sudoku4-cpu"] if training else
            [str(out), "--weights", str(inputs["export"]), "--notebook", str(inputs["notebook"])])
    assert B.main([*argv, "--no-download", "--user", "me"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: OUT_DIR {out} {words}" + err.split(words, 1)[1] and err.count("\n") == 1, err
    assert main(["pipeline", "--work-dir", str(out), "--no-progress"]) == 2
    assert f"error: --work-dir {out} {words}" in capsys.readouterr().err
    with pytest.raises(TRMError, match=f"^out_dir {out} {words}".replace("(", r"\(").replace(")", r"\)")):
        B.build_training(out, ids=BundleIds(user="u", prefix="p"), train_kernel=True, presets=["sudoku4-cpu"],
                         download=False, log=lambda _: None)
    assert sorted(p.name for p in out.iterdir()) == before


def _parts(out) -> dict:
    """Every file of a bundle's parts, with its bytes, and the identity of each part's folder (a part replaced by an
    identical one is another folder)."""
    import os

    return {p.relative_to(out).as_posix(): (p.read_bytes() if p.is_file() else os.stat(p).st_ino)
            for p in sorted(out.rglob("*")) if p.name != ".trm_kaggle.lock"}


@pytest.mark.parametrize("stop", ["sigterm", "oserror"])
def test_a_rebuild_stopped_before_its_last_part_leaves_the_old_bundle_whole(built, inputs, tmp_path, monkeypatch,
                                                                          capsys, stop):
    """SIGTERM during a rebuild of an existing bundle left its new parts beside the old ones (a new data/ beside the
    old train-kernel/), said only as "interrupted": a push then published them as one bundle. Every part is now built
    aside and put in place only once all are built; a stop, or a failure, before then leaves the old bundle as it
    was, and nothing of the new one behind."""
    import shutil

    from conftest import USER
    from trm_kaggle.interrupts import Terminated

    out = tmp_path / "b"
    shutil.copytree(built, out)
    before = _parts(out)

    def stopped(*args, **kwargs):
        if stop == "sigterm":
            raise Terminated()
        raise OSError(28, "No space left on device", str(args[0]))

    monkeypatch.setattr(B, "build_kernel", stopped)  # the last part: wheels/ and weights/ are built before it
    rc = B.main([str(out), "--no-download", "--user", USER, "--weights", str(inputs["export"]),
                 "--notebook", str(inputs["notebook"]), "--cpu"])
    assert rc == (143 if stop == "sigterm" else 2), capsys.readouterr()
    assert _parts(out) == before
    assert not list(out.glob(".trm_kaggle_parts-*"))


def test_a_rebuild_whose_parts_cannot_all_be_put_in_place_puts_the_old_ones_back(built, inputs, tmp_path,
                                                                                monkeypatch, capsys):
    """A rename that fails while the new parts take the old ones' places (the second of three): the parts already
    swapped are undone, and the old bundle stands as it was."""
    import os
    import shutil
    from pathlib import Path

    from conftest import USER

    out = tmp_path / "b"
    shutil.copytree(built, out)
    before = _parts(out)
    renames = []
    real_replace = os.replace

    def replace(src, dst):
        if out in (Path(src).parent, Path(dst).parent):  # a part in or out of OUT_DIR (kernel/, weights/, wheels/)
            renames.append((Path(src).name, Path(dst).parent == out))
            if len(renames) == 4:  # the old kernel/ and weights/ put aside, the new kernel/ in place: the new
                raise PermissionError(13, "Permission denied", str(dst))  # weights/ cannot take their place
        return real_replace(src, dst)

    monkeypatch.setattr(B.os, "replace", replace)
    rc = B.main([str(out), "--no-download", "--user", USER, "--weights", str(inputs["export"]),
                 "--notebook", str(inputs["notebook"]), "--cpu"])
    monkeypatch.undo()
    assert rc == 2, capsys.readouterr()
    assert renames[:4] == [("kernel", False), ("kernel", True), ("weights", False), ("weights", True)], renames
    assert _parts(out) == before
    assert not list(out.glob(".trm_kaggle_parts-*"))
