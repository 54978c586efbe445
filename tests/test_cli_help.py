"""`--help` that teaches: descriptions, help texts with defaults, required flags, the settings list; the
wording of counts and of a few messages."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from trm_kaggle.cli import build_parser, main
from trm_kaggle.config import TrainConfig
from trm_kaggle.model.trm import ParameterCount
from trm_kaggle.wording import count

REPO = Path(__file__).resolve().parents[1]


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


@pytest.mark.parametrize("name", sorted(subcommands()))
def test_every_subcommand_describes_itself_and_every_option(name):
    p = subcommands()[name]
    assert p.description and len(p.description) > 40, f"{name}: no description"
    for a in p._actions:
        if isinstance(a, argparse._HelpAction) or a.help == argparse.SUPPRESS:
            continue
        what = a.option_strings[0] if a.option_strings else a.dest
        assert a.help, f"{name} {what}: no help text"
        takes_value = a.nargs != 0
        if takes_value and a.option_strings:
            assert "default" in a.help or "required" in a.help, f"{name} {what}: help names no default: {a.help}"
        if a.required and a.option_strings:  # positionals are required by nature (no brackets in the usage)
            assert "(required)" in a.help, f"{name} {what}: required but not shown as such"
    p.format_help()  # every %-sequence in the texts is well formed


def test_help_defaults_come_from_the_config_that_owns_them():
    from trm_kaggle.config import ArcBuildConfig, SolveConfig

    helps = {a.dest: a.help for a in subcommands()["build-arc"]._actions}
    assert f"(default: {ArcBuildConfig.model_fields['num_aug'].default})" in helps["num_aug"]
    helps = {a.dest: a.help for a in subcommands()["submit"]._actions}
    assert f"(default: {SolveConfig.model_fields['finetune_steps'].default})" in helps["finetune_steps"]
    assert "(required)" in {a.dest: a.help for a in subcommands()["evaluate"]._actions}["weights"]


def test_train_help_points_to_a_settings_list_that_names_every_setting(capsys):
    assert "--list-settings" in subcommands()["train"].format_help()
    assert main(["train", "--list-settings"]) == 0
    out = capsys.readouterr().out

    def keys(model, prefix=""):
        for name, field in model.model_fields.items():
            sub = field.annotation
            if isinstance(sub, type) and hasattr(sub, "model_fields"):
                yield from keys(sub, f"{prefix}{name}.")
            else:
                yield prefix + name

    listed = {line.split(" = ")[0].strip() for line in out.splitlines() if line.startswith("  ") and " = " in line
              and not line.startswith("      ")}
    assert listed == set(keys(TrainConfig))
    assert "  lr = 0.0001  [float; > 0, <= 1e+30, finite]" in out
    assert "  arch.L_cycles = 6  [int; >= 1, <= 256]" in out


@pytest.mark.parametrize("override, field", [
    ("lr=-1", "lr"), ("lr=nan", "lr"), ("lr=inf", "lr"), ("ema_rate=2", "ema_rate"), ("ema_rate=nan", "ema_rate"),
    ("max_steps=-5", "max_steps"), ("time_limit=nan", "time_limit"), ("time_limit=-1", "time_limit"),
    ("lr_warmup_steps=-10", "lr_warmup_steps"), (f"seed={2**70}", "seed"), ("weight_decay=-1e9", "weight_decay"),
    ("log_interval=0", "log_interval"), ("threads=-4", "threads"), ("beta2=1.5", "beta2"),
    ("checkpoint_keep=0", "checkpoint_keep"), ("curriculum.epochs=-1", "curriculum.epochs"),
])
def test_out_of_range_settings_are_one_error_line(override, field, capsys):
    assert main(["train", "--print-config", override]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and field in err[0], err


def test_submit_refuses_a_negative_seed(tmp_path, capsys):
    assert main(["submit", "--challenges", str(tmp_path / "c.json"), "--weights", str(tmp_path / "w"),
                 "--seed", "-1", "--output", str(tmp_path / "s.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "seed" in err
    assert not (tmp_path / "s.json").exists()


def test_counts_read_as_english():
    assert count(1, "test input") == "1 test input"
    assert count(2, "test input") == "2 test inputs"
    assert count(0, "task") == "0 tasks"
    assert count(12_345, "example") == "12,345 examples"
    assert count(1, "query", "queries") == "1 query" and count(3, "query", "queries") == "3 queries"


def test_a_model_without_a_puzzle_table_says_so():
    assert str(ParameterCount(weights=1234, puzzle_rows=1, puzzle_dim=0)) == "1,234 parameters (no puzzle-embedding table)"
    assert "(10 rows x 8)" in str(ParameterCount(weights=5, puzzle_rows=10, puzzle_dim=8))


def test_refusing_to_replace_a_directory_uses_the_right_article(tmp_path):
    from trm_kaggle.atomic import atomic_directory
    from trm_kaggle.errors import TRMError

    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(TRMError, match="is not an export written by this package"):
        with atomic_directory(tmp_path / "mine", kind="export"):
            pass
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_import_upstream_names_a_missing_checkpoint_not_its_config(tmp_path, capsys):
    assert main(["import-upstream", str(tmp_path / "nonexistent"), "--out", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'nonexistent'}: checkpoint file not found" in err and "all_config.yaml" not in err
    assert main(["import-upstream", str(tmp_path), "--out", str(tmp_path / "w")]) == 2
    assert "it is a directory" in capsys.readouterr().err


def test_default_output_directories_are_git_ignored():
    """What the commands and the docs' examples create inside a clone never shows up as untracked files."""
    from trm_kaggle.config import PipelineConfig, SolveConfig

    ignored = {line.strip() for line in (REPO / ".gitignore").read_text().splitlines()}
    wanted = {"runs/", f"/{SolveConfig(challenges='c', weights='w').work_dir}/", "/bundle/", "/reports/",
              f"/{SolveConfig.model_fields['output'].default}"}
    assert PipelineConfig.model_fields["work_dir"].default.startswith("runs/")
    assert wanted <= ignored, wanted - ignored


def test_validate_submission_counts_in_the_singular(tmp_path):
    import json

    (tmp_path / "c.json").write_text(json.dumps({"abc": {"train": [{"input": [[1]], "output": [[2]]}],
                                                          "test": [{"input": [[1]]}]}}))
    (tmp_path / "s.json").write_text(json.dumps({"abc": [{"attempt_1": [[1]], "attempt_2": [[2]]}]}))
    p = subprocess.run([sys.executable, "-m", "trm_kaggle", "validate-submission", str(tmp_path / "s.json"),
                        "--challenges", str(tmp_path / "c.json")], capture_output=True, text=True)
    assert p.returncode == 0 and "(1 task, 1 test input, two attempts each)" in p.stdout, p.stdout + p.stderr


def test_validate_submission_names_the_challenges_malformed_tasks_beside_its_verdict(tmp_path):
    """A challenges file with a cell 11 and a cell true: the submission is valid (Kaggle's scorer judges only its
    ids, counts and grids), and the note on stderr names the file and the tasks submit answers with the fallback."""
    import json

    good = {"train": [{"input": [[1]], "output": [[2]]}], "test": [{"input": [[1]]}]}
    bad = {"train": [{"input": [[11]], "output": [[True]]}], "test": [{"input": [[1]]}]}
    (tmp_path / "c.json").write_text(json.dumps({"aaa": good, "bbb": bad, "ccc": bad}))
    (tmp_path / "s.json").write_text(json.dumps({t: [{"attempt_1": [[1]], "attempt_2": [[2]]}] for t in "abc"
                                                  for t in [t * 3]}))
    p = subprocess.run([sys.executable, "-m", "trm_kaggle", "validate-submission", str(tmp_path / "s.json"),
                        "--challenges", str(tmp_path / "c.json")], capture_output=True, text=True)
    assert p.returncode == 0 and ": valid (3 tasks" in p.stdout, p.stdout + p.stderr
    assert p.stderr.strip() == (f"note: {tmp_path / 'c.json'}: 2 malformed tasks, which submit answers with the "
                                "fallback (task bbb: train pair 0 input: value 11 at row 0, column 0 is not an integer "
                                "0..9; and 1 more)"), p.stderr
    (tmp_path / "c4.json").write_text(json.dumps({"aaa": good, "bbb": bad, "ccc": bad, "ddd": bad}))
    (tmp_path / "s4.json").write_text(json.dumps({t * 3: [{"attempt_1": [[1]], "attempt_2": [[2]]}] for t in "abcd"}))
    p = subprocess.run([sys.executable, "-m", "trm_kaggle", "validate-submission", str(tmp_path / "s4.json"),
                        "--challenges", str(tmp_path / "c4.json")], capture_output=True, text=True)
    assert p.stderr.strip().endswith("; and 2 more)"), p.stderr  # once "and 2 mores"
    (tmp_path / "c.json").write_text(json.dumps({"aaa": good, "bbb": good, "ccc": good}))
    p = subprocess.run([sys.executable, "-m", "trm_kaggle", "validate-submission", str(tmp_path / "s.json"),
                        "--challenges", str(tmp_path / "c.json")], capture_output=True, text=True)
    assert p.returncode == 0 and not p.stderr, p.stderr


def test_validate_submissions_note_escapes_the_task_id_it_names(tmp_path, capsys):
    import json

    task = {"train": [{"input": [[1]], "output": [[2]]}], "test": [{"input": [[3]]}]}
    ids = ["\x1b[31mRED", "ok1"]
    (tmp_path / "c.json").write_text(json.dumps({i: task for i in ids}))
    (tmp_path / "s.json").write_text(json.dumps({i: [{"attempt_1": [[4]], "attempt_2": [[4]]}] for i in ids}))
    assert main(["validate-submission", str(tmp_path / "s.json"), "--challenges", str(tmp_path / "c.json")]) == 0
    err = capsys.readouterr().err
    assert "1 malformed task" in err and "task \\x1b[31mRED: " in err and "\x1b" not in err, err


def all_parsers() -> dict[str, argparse.ArgumentParser]:
    """Every parser whose help a user can print: the top level, each subcommand, launch's launchers, build_bundle.py."""
    from trm_kaggle.kaggle.bundle import make_parser

    found = {"trm-kaggle": build_parser(), "build_bundle.py": make_parser()}
    todo = list(found.items())
    while todo:
        name, p = todo.pop()
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for sub, q in a.choices.items():
                    found[f"{name} {sub}"] = q
                    todo.append((f"{name} {sub}", q))
    return found


def test_help_texts_print_percent_signs_as_percent_signs():
    """argparse %-formats option help (where `%%` is one `%`) but not a description or an epilog: `95 %% intervals`
    printed as written in `evaluate --help` and `score --help`."""
    helps = {name: p.format_help() for name, p in all_parsers().items()}
    assert len(helps) > 25
    doubled = [f"{name}: {line.strip()}" for name, text in helps.items() for line in text.splitlines() if "%%" in line]
    assert not doubled, "\n".join(doubled)
    assert "95 % interval" in " ".join(helps["trm-kaggle evaluate"].split())
    assert "95 % interval" in " ".join(helps["trm-kaggle score"].split())


def test_the_bare_command_and_help_point_to_pipeline(capsys):
    assert main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: trm-kaggle") and "Start with `trm-kaggle pipeline`" in err
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    assert "Start with `trm-kaggle pipeline`" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("flag", ["--train-seconds", "--train_seconds"])
def test_a_bad_value_is_named_by_the_flag_as_typed(flag, tmp_path, capsys):
    from cli_helpers import one_error_line

    rc = main(["pipeline", flag, "0", "--work-dir", str(tmp_path / "p")])
    assert one_error_line(capsys, rc) == f"error: invalid option: {flag}: Input should be greater than 0"
    assert not (tmp_path / "p").exists()


def test_a_check_across_options_names_each_by_its_flag(tmp_path, capsys):
    from cli_helpers import one_error_line

    (tmp_path / "c.json").write_text('{"t1": {"train": [], "test": [{"input": [[1]]}]}}')
    rc = main(["submit", "--challenges", str(tmp_path / "c.json"), "--weights", str(REPO / "weights" / "arc2-cpu-tiny"),
               "--output", str(tmp_path / "s.json"), "--num-aug", "auto"])
    line = one_error_line(capsys, rc)
    assert "--num-aug='auto'" in line and "set --time-budget" in line and "time_budget" not in line, line


def test_help_imports_no_torch():
    """The parser of every command is built without torch (each command imports it when it runs): `--help` and a
    mistyped flag answer at once."""
    code = ("import sys\nfrom trm_kaggle.cli import main\n"
            "for argv in (['--help'], ['train', '--help'], ['submit', '--help'], ['launch', 'k8s', '--help']):\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
            "print('torch' in sys.modules, file=sys.stderr)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 0 and p.stderr.strip() == "False", p.stderr[-2000:]


def test_an_interrupt_from_the_first_import_on_is_one_line(monkeypatch, capsys):
    """The console script imports `trm_kaggle.cli` before `main` runs: that import holds only the standard
    library, and a Ctrl-C in any later import (here: building the parser) is one line and status 130."""
    code = ("import sys, trm_kaggle.cli\n"
            "print(sorted(m for m in sys.modules if m.startswith(('trm_kaggle', 'pydantic'))))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 0 and p.stdout.strip() == "['trm_kaggle', 'trm_kaggle.cli']", p.stdout + p.stderr[-2000:]
    import trm_kaggle.cli as cli

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert main(["train", "--help"]) == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_lists_plans_and_job_files_import_no_torch(tmp_path):
    """Commands that only read settings and write text answer without torch (1-2 s of start-up): the recipe and
    grid lists, a sweep's dry run on the CPU (device=auto asks torch whether CUDA is there, to check --parallel
    against the GPUs), the job files of a cluster launch."""
    code = ("import sys\nfrom trm_kaggle.cli import main\n"
            "for argv in (['submit', '--list-recipes'], ['estimate', '--list-recipes'], ['sweep', '--list-grids'],\n"
            "             ['sweep', 'ablations', 'data_paths=[d]', 'device=cpu', '--dry-run', '--sweep-dir',\n"
            "              sys.argv[1] + '/s'],\n"
            "             ['launch', 'k8s', '--preset', 'arc2', 'data_paths=[d]', '--nodes', '2', '--gpus-per-node',\n"
            "              '8', '--image', 'r.example/trm:1', '--pvc', 'data', '--out', sys.argv[1] + '/k8s']):\n"
            "    assert main(argv) == 0, argv\n"
            "print('torch' in sys.modules, file=sys.stderr)")
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 0 and p.stderr.strip().splitlines()[-1] == "False", p.stderr[-2000:]
    assert (tmp_path / "k8s").is_dir()


@pytest.mark.parametrize("args", [["--help"], ["--bogus"], ["--config"]])
def test_torchrun_reads_the_train_arguments_as_train_does(args, capsys):
    """`torchrun ... -m trm_kaggle train ARGS` checks ARGS before the rendezvous with `train`'s parser alone: the
    same help, the same error lines and status as `trm-kaggle train ARGS`."""
    def run(argv):
        with pytest.raises(SystemExit) as done:
            main(argv)
        return done.value.code, capsys.readouterr()

    assert run(["torchrun", "--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:9", "-m",
                "trm_kaggle", "train", *args]) == run(["train", *args])


@pytest.mark.parametrize("name", ["build-arc", "build-sudoku", "build-maze", "build-code-repair", "pipeline", "submit",
                                  "evaluate", "evaluate-repair"])
def test_an_option_that_sets_a_field_says_what_the_field_says(name):
    """One text per setting: the help of an option that sets a config field starts with the field's description."""
    from trm_kaggle import config as C

    model = {"build-arc": C.ArcBuildConfig, "build-sudoku": C.SudokuBuildConfig, "build-maze": C.MazeBuildConfig,
             "build-code-repair": C.CodeRepairBuildConfig, "pipeline": C.PipelineConfig, "submit": C.SolveConfig,
             "evaluate": C.EvaluateConfig, "evaluate-repair": C.RepairEvalConfig}[name]
    checked = 0
    for a in subcommands()[name]._actions:
        if a.option_strings and a.dest in model.model_fields and a.dest != "progress":  # --no-progress: common
            assert a.help.startswith(C.field_help(model, a.dest)), (a.option_strings[0], a.help)
            checked += 1
    assert checked >= 5


def test_train_mean_embedding_without_an_export_is_refused(tmp_path, capsys):
    """`train --mean-embedding` without `--export` trained, exported nothing and said nothing: the flag shapes an
    export that was never asked for."""
    from trm_kaggle.cli import main

    assert main(["train", "--mean-embedding", f"checkpoint_path={tmp_path / 'run'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --mean-embedding shapes the export of --export DIR"), err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("listing", ["--list-settings", "--list-presets"])
@pytest.mark.parametrize("given", [["bogus=1"], ["--config", "missing.yaml"], ["--preset", "sudoku4-cpu"]])
def test_a_listing_given_settings_says_it_reads_none(capsys, listing, given):
    """`train --list-settings bogus=1` (or a config that does not load beside it) printed the list and exited 0:
    the typo went unnoticed. The listing reads no settings, and says so."""
    assert main(["train", listing, *given]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {listing} prints the defaults and reads no settings"), err
