"""A name that becomes a path never leaves its folder: run names, subset names, the file names a record lists.

`runs/<run_name>` is where `train` writes when no checkpoint_path is given: a run name is one plain folder
name, checked like a task id (`trm_kaggle.names.name_problem`): no separator, no `..`, no control
character; an absolute path or `../..` is refused in one line before anything is written. The same rule
holds for the subset names `build-arc` turns into file names, and for the relative paths a dataset's
`contents.json` lists (`relative_path_problem`).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from cli_helpers import one_error_line
from integrity_helpers import TINY
from trm_kaggle.cli import main
from trm_kaggle.names import name_problem, relative_path_problem, task_id_problem

ESCAPES = ["../../escapeK7", "/tmp/absK8-{tmp}", "..", ".", "a/b", "a\\b", "c:", "x\x01y", "tab\there", "x" * 100_000]


def everything(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


@pytest.mark.parametrize("name", ESCAPES)
def test_a_run_name_that_would_leave_runs_is_refused(data, tmp_path, capsys, monkeypatch, name):
    name = name.format(tmp=tmp_path.name)
    work = tmp_path / "work" / "deep"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    line = one_error_line(capsys, main(["train", f"data_paths=[{data}]", *TINY, "max_steps=1", f"+run_name={name}"]))
    assert "run_name" in line and "one folder name inside runs/" in line, line
    assert len(line) < 600  # a long name is echoed cut
    assert everything(tmp_path) == {"work", "work/deep"}  # nothing written, neither inside nor outside
    assert not Path(f"/tmp/absK8-{tmp_path.name}").exists()


def test_a_run_name_in_a_config_file_is_checked_alike(data, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for text in ("run_name: ../../escapeK9\n", 'run_name: "/etc/cron.d/x"\n', '{"run_name": "a/../../b"}'):
        cfg = tmp_path / ("c.json" if text.startswith("{") else "c.yaml")
        cfg.write_text(text)
        line = one_error_line(capsys, main(["train", "--config", str(cfg), f"data_paths=[{data}]", *TINY,
                                            "max_steps=1"]))
        assert "run_name" in line, line
        cfg.unlink()
    assert not (tmp_path / "runs").exists() and not (tmp_path.parent.parent / "escapeK9").exists()


def test_an_upstream_run_config_with_an_escaping_run_name(data, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "all_config.yaml").write_text("run_name: ../../up\narch:\n  name: recursive_reasoning.trm@TinyRecursiveReasoningModel_ACTV1\n"
                                              "  loss:\n    name: losses@ACTLossHead\n    loss_type: stablemax_cross_entropy\n")
    line = one_error_line(capsys, main(["train", "--config", str(tmp_path / "all_config.yaml"),
                                        f"data_paths=[{data}]", *TINY, "max_steps=1"]))
    assert "run_name" in line


def test_a_launch_with_an_escaping_run_name_writes_nothing(tmp_path, capsys):
    line = one_error_line(capsys, main(["launch", "slurm", "--nodes", "1", "--gpus-per-node", "1", "--out",
                                        str(tmp_path / "jobs"), "--shared-dir",
                                        str(tmp_path), "data_paths=[data/x]", "+run_name=../../escapeL"]))
    assert "run_name" in line
    assert not (tmp_path / "jobs").exists()


def test_a_plain_run_name_still_goes_under_runs(data, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["train", f"data_paths=[{data}]", *TINY, "max_steps=1", "+run_name=plain-é.1"]) == 0
    assert (tmp_path / "runs" / "plain-é.1" / "state_step00000001.pt").is_file()
    assert main(["train", f"data_paths=[{data}]", *TINY, "max_steps=1", "+run_name="]) == 0  # "": the default name
    assert (tmp_path / "runs" / f"trm-{data.name}").is_dir()


@pytest.mark.parametrize("flag, value", [("--subsets", "../../etc"), ("--subsets", "/abs"), ("--test-set-name", ".."),
                                         ("--test-set-name", "a/b"), ("--subsets", "")])
def test_subset_names_become_file_names_and_are_checked(tmp_path, capsys, flag, value, arc_prefix):
    args = ["build-arc", "--input-file-prefix", str(arc_prefix), "--output-dir", str(tmp_path / "ds"),
            "--subsets", "training", "evaluation", "--test-set-name", "evaluation", "--num-aug", "0", "--workers", "1",
            "--no-progress"]
    i = args.index(flag)
    args[i + 1] = value
    line = one_error_line(capsys, main(args))
    assert "subset name" in line, line
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize("rel", ["../outside.npy", "/etc/hostname", "train/../../x", "", "a//b"])
def test_contents_json_names_never_read_outside_the_dataset(data, tmp_path, capsys, rel):
    ds = Path(shutil.copytree(data, tmp_path / "ds"))
    record = json.loads((ds / "contents.json").read_text())
    record["files"][rel] = {"size": 1, "sha256": "0", "sampled_sha256": "0"}
    (ds / "contents.json").write_text(json.dumps(record))
    (tmp_path / "outside.npy").write_bytes(b"x")
    line = one_error_line(capsys, main(["verify", str(ds)]))
    assert "contents.json: the file name" in line, line


def test_the_rules():
    for good in ("run1", "plain-é.1", "a b", "x" * 128):
        assert name_problem(good) is None
    for bad in ("", ".", "..", "a/b", "/a", "a\\b", "a:b", "a\x00b", "a\nb", "x" * 129, None, 3):
        assert name_problem(bad), bad
    assert relative_path_problem("train/all__inputs.npy") is None
    for bad in ("/abs", "../x", "a/../b", "a//b", "a/", "a/./b"):
        assert relative_path_problem(bad), bad
    assert task_id_problem("a|||b") and name_problem("a|||b") is None  # the separator matters to task ids only
    # the blank identifier's name: a task so named held identifiers.json's '<blank>' twice
    assert "the name of the blank puzzle identifier 0" in task_id_problem("<blank>") and name_problem("<blank>") is None


def test_the_blank_name_is_the_formats(tmp_path, capsys):
    """names.BLANK_NAME (the base layer's) is the format's BLANK_IDENTIFIER, and build-arc refuses a task of that
    name in one line naming the file, writing nothing."""
    from trm_kaggle.data.format import BLANK_IDENTIFIER
    from trm_kaggle.names import BLANK_NAME

    assert BLANK_NAME == BLANK_IDENTIFIER
    task = {"train": [{"input": [[1]], "output": [[2]]}], "test": [{"input": [[3]], "output": [[4]]}]}
    (tmp_path / "p_training_challenges.json").write_text(json.dumps({"<blank>": task, "t1": task}))
    line = one_error_line(capsys, main(["build-arc", "--input-file-prefix", str(tmp_path / "p"), "--subsets",
                                        "training", "--num-aug", "1", "--output-dir", str(tmp_path / "ds"),
                                        "--no-progress"]))
    assert line == (f"error: {tmp_path / 'p_training_challenges.json'}: task id '<blank>' is the name of the blank "
                    "puzzle identifier 0: name the task otherwise"), line
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize("name", ["a\nb", "x\x1b[2J\x1b[31mRED"])
def test_a_file_name_with_control_characters_stays_one_escaped_error_line(tmp_path, capsys, name):
    """`build-arc --task-dir` escaped the task id but printed the file's path raw: a newline in the name split
    the one `error:` line in two, an escape sequence cleared the terminal. Every error line is escaped whole."""
    import json

    task = {"train": [{"input": [[1, 2]], "output": [[2, 1]]}], "test": [{"input": [[1, 2]], "output": [[2, 1]]}]}
    tasks = tmp_path / "tasks"
    for subset in ("tr", "ev"):
        (tasks / subset).mkdir(parents=True)
        (tasks / subset / f"g{subset}.json").write_text(json.dumps(task))
    (tasks / "tr" / f"{name}.json").write_text(json.dumps(task))
    rc = main(["build-arc", "--task-dir", str(tasks), "--subsets", "tr", "ev", "--test-set-name", "ev",
               "--num-aug", "1", "--workers", "1", "--no-progress", "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "\x1b" not in err, repr(err)
    assert name.encode("unicode_escape").decode() in err


def test_skipped_task_files_with_control_characters_are_escaped_in_warnings_and_notes(tmp_path):
    """`build-arc --skip-invalid` printed a skipped task file's path raw in its WARNING line and its closing note
    (the id beside it escaped): every log line of the command line is one escaped line now, and so is each note."""
    import subprocess
    import sys

    task = {"train": [{"input": [[1, 2]], "output": [[2, 1]]}], "test": [{"input": [[1, 2]], "output": [[2, 1]]}]}
    tasks = tmp_path / "tasks" / "tr"
    tasks.mkdir(parents=True)
    for name in ("ok", "esc\x1b[2J\x1b[31mred", "nl\nx"):
        (tasks / f"{name}.json").write_text(json.dumps(task))
    r = subprocess.run([sys.executable, "-m", "trm_kaggle", "build-arc", "--task-dir", str(tmp_path / "tasks"),
                        "--subsets", "tr", "--num-aug", "0", "--workers", "1", "--no-progress", "--skip-invalid",
                        "--output-dir", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "\x1b" not in out, out
    warnings = [line for line in out.splitlines() if line.startswith("WARNING: skipped malformed task")]
    notes = [line for line in out.splitlines() if line.startswith("  note: skipped malformed task")]
    assert len(warnings) == len(notes) == 2 and all("nl\\nx.json" in w or "esc\\x1b" in w for w in warnings), out


def test_submits_closing_line_shows_a_typed_output_escaped(tmp_path, capsys):
    """`submit --output $'s\\e[2J.json'`: its log lines showed the name escaped, its closing `wrote ...` line raw."""
    (tmp_path / "c.json").write_text(json.dumps({"t1": {"train": [{"input": [[1, 2]], "output": [[2, 1]]}],
                                                        "test": [{"input": [[1, 2]]}]}}))
    out = tmp_path / "s\x1b[2J.json"
    weights = Path(__file__).resolve().parents[1] / "weights" / "arc2-cpu-tiny"
    assert main(["submit", "--challenges", str(tmp_path / "c.json"), "--weights", str(weights), "--output", str(out),
                 "--work-dir", str(tmp_path / "w"), "--num-aug", "0", "--finetune", "none", "--no-progress"]) == 0
    said = capsys.readouterr()
    assert out.is_file() and "\x1b" not in said.out + said.err and "s\\x1b[2J.json (valid)" in said.out, said.out


def _nul_calls(tmp_path):
    """Each library writer and setting given a path holding a NUL byte (the command line cannot pass one)."""
    import numpy as np

    from trm_kaggle.config import SolveConfig, TrainConfig
    from trm_kaggle.data import build_grid_dataset
    from trm_kaggle.evaluate import write_submission
    from trm_kaggle.train import checkpoint as ckpt

    bad = str(tmp_path / "a\x00b")
    pair = [("p", [(np.ones((3, 3), int), np.ones((3, 3), int))])]
    return {
        "write_submission": lambda: write_submission(bad, {"t": []}),
        "build_grid_dataset": lambda: build_grid_dataset(bad, train=[pair], test=[pair], vocab_size=5,
                                                         grid_shape=(3, 3)),
        "export_run(out=)": lambda: ckpt.export_run(tmp_path / "run", bad),
        "export_run(run=)": lambda: ckpt.export_run(bad, tmp_path / "out"),
        "SolveConfig(output=)": lambda: SolveConfig(challenges="c.json", weights="w", output=bad),
        "TrainConfig(checkpoint_path=)": lambda: TrainConfig(checkpoint_path=bad),
        "TrainConfig(data_paths=)": lambda: TrainConfig(data_paths=[bad]),
    }


@pytest.mark.parametrize("call", ["write_submission", "build_grid_dataset", "export_run(out=)", "export_run(run=)",
                                  "SolveConfig(output=)", "TrainConfig(checkpoint_path=)",
                                  "TrainConfig(data_paths=)"])
def test_a_path_holding_a_nul_byte_is_named_by_every_writer(tmp_path, call):
    """Python's bare "ValueError: embedded null byte" named neither the path nor what it was for (solve, the
    writers, export_run, a setting); export_run's message printed the NUL itself."""
    from trm_kaggle.errors import TRMError

    with pytest.raises((ValueError, TRMError), match="holds a NUL byte") as caught:
        _nul_calls(tmp_path)[call]()
    assert "\x00" not in str(caught.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize("where", ["/dev/trm-submission-probe.json", "{tmp}/f/s.json"])
def test_the_library_writer_of_submissions_checks_its_path_as_submit_does(tmp_path, where):
    """`write_submission("/dev/x.json", ...)` wrote into /dev; a file on the path was a raw OSError."""
    from trm_kaggle.errors import TRMError
    from trm_kaggle.evaluate import write_submission

    (tmp_path / "f").write_text("a file")
    with pytest.raises(TRMError, match="^submission "):
        write_submission(where.format(tmp=tmp_path), {"t": [{"attempt_1": [[1]], "attempt_2": [[1]]}]})
    assert not os.path.lexists("/dev/trm-submission-probe.json")


@pytest.mark.parametrize("builder", ["sudoku", "maze", "code-repair", "arc", "export_run"])
def test_the_librarys_builders_never_write_inside_their_own_input(tmp_path, builder):
    """`build_sudoku(output_dir="csvs/out", input_dir="csvs")` (and the maze, ARC and code-repair builders, and
    `export_run("run", "run/exp")`) built into the folder they read; their commands refused it in one line."""
    from trm_kaggle.config import ArcBuildConfig, CodeRepairBuildConfig, MazeBuildConfig, SudokuBuildConfig
    from trm_kaggle.data import build_arc, build_code_repair, build_maze, build_sudoku
    from trm_kaggle.errors import TRMError
    from trm_kaggle.train import checkpoint as ckpt

    src = tmp_path / "src"
    src.mkdir()
    (src / "mine.txt").write_text("an input")
    out = str(src / "out")
    call = {"sudoku": lambda: build_sudoku(SudokuBuildConfig(output_dir=out, input_dir=str(src), progress=False)),
            "maze": lambda: build_maze(MazeBuildConfig(output_dir=out, input_dir=str(src), progress=False)),
            "code-repair": lambda: build_code_repair(CodeRepairBuildConfig(output_dir=out, corpus=str(src),
                                                                           progress=False)),
            "arc": lambda: build_arc(ArcBuildConfig(output_dir=out, task_dir=str(src), subsets=["training"],
                                                    test_set_name="training", progress=False)),
            "export_run": lambda: ckpt.export_run(src, out)}[builder]
    with pytest.raises(TRMError, match=r"is inside the input .*: an input folder is never written into"):
        call()
    assert sorted(p.name for p in src.iterdir()) == ["mine.txt"]


def test_a_name_past_the_file_systems_length_is_the_packages_error_from_the_library(tmp_path):
    """`build_sudoku(output_dir="a" * 300)` raised the system's raw "[Errno 36] File name too long" (a 240-byte
    name was already refused in the package's words)."""
    from trm_kaggle.config import SudokuBuildConfig
    from trm_kaggle.data import build_sudoku
    from trm_kaggle.errors import TRMError

    with pytest.raises(TRMError, match="is 300 bytes, past the"):
        build_sudoku(SudokuBuildConfig(output_dir=str(tmp_path / ("a" * 300)), size=4, num_train=4, num_test=2,
                                       progress=False))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("call", ["build_sudoku(input_dir=)", "export_run"])
def test_a_name_too_long_is_said_before_the_inputs_are_compared(tmp_path, call):
    """A builder that reads an input (and `export_run`) compared the output with it first: the system's raw
    "[Errno 36] File name too long" from that comparison."""
    from trm_kaggle.config import SudokuBuildConfig
    from trm_kaggle.data import build_sudoku
    from trm_kaggle.errors import TRMError
    from trm_kaggle.train import checkpoint as ckpt

    (tmp_path / "csv").mkdir()
    long = str(tmp_path / ("y" * 256))
    with pytest.raises(TRMError, match="is 256 bytes, past the"):
        {"build_sudoku(input_dir=)": lambda: build_sudoku(SudokuBuildConfig(output_dir=long, input_dir=str(
            tmp_path / "csv"), progress=False)), "export_run": lambda: ckpt.export_run(tmp_path / "csv", long)}[call]()


def test_blank_path_problem_one_rule_for_every_path_setting(tmp_path, capsys):
    """An empty or blank path (an unset shell variable) is the current folder to the system: one rule refuses it
    in a config, in `evaluate`'s options, in `compare` and in the bundle, each naming its setting."""
    from trm_kaggle.names import blank_path_problem

    for blank in ("", "  ", "\t", b"", ["a", ""], ("", "b")):
        assert blank_path_problem(blank), blank
    for taken in (None, "a", ".", tmp_path, ["a", "b"], []):
        assert blank_path_problem(taken) is None, taken
    assert blank_path_problem("", "a file", "or leave it out") == "is empty: name a file (or leave it out)"

    from trm_kaggle.cli import main
    from trm_kaggle.config import RepairEvalConfig

    with pytest.raises(ValueError, match="report\n.*is empty: name a folder or a file"):
        RepairEvalConfig(report=" ")
    assert main(["compare", str(tmp_path), "--out", " "]) == 2
    assert capsys.readouterr().err.strip() == ("error: --out is empty: name a folder or a file (`.` for the current "
                                               "folder)")
