"""An output never overwrites an input: every command checks its outputs against its inputs before any work.

Each case runs the real command line (`trm_kaggle.cli.main`) with an output that is an input (same path,
a symbolic link, a hard link), that holds one, or that lies inside an input folder, and asserts one
`error:` line, exit status 2 and every input byte for byte as it was.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cli_helpers import one_error_line
from trm_kaggle.cli import main
from trm_kaggle.errors import TRMError
from trm_kaggle.outputs import Input, Output, check_io

from conftest import make_export


def contents(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def world(tmp_path):
    """Inputs of every kind: a challenges file (with a hard link and a symbolic link to it), an export,
    a dataset-like folder, a run folder with a train state, a votes file."""
    (tmp_path / "c.json").write_text('{"t1": {"train": [], "test": [{"input": [[1]]}]}}')
    os.link(tmp_path / "c.json", tmp_path / "hard.json")
    (tmp_path / "soft.json").symlink_to(tmp_path / "c.json")
    make_export(tmp_path / "exp")
    (tmp_path / "exp-link").symlink_to(tmp_path / "exp")
    (tmp_path / "data" / "train").mkdir(parents=True)
    (tmp_path / "data" / "train" / "dataset.json").write_text("{}")
    (tmp_path / "data" / "test_puzzles.json").write_text("{}")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "state_step00000005.pt").write_bytes(b"state")
    (tmp_path / "votes.npz").write_bytes(b"votes")
    return tmp_path


def submit(world: Path, output: str, work: str = "work", challenges: str = "c.json", weights: str = "exp"):
    return main(["submit", "--challenges", str(world / challenges), "--weights", str(world / weights),
                 "--output", str(world / output), "--work-dir", str(world / work), "--no-progress"])


@pytest.mark.parametrize("output, words", [
    ("c.json", "is also the input --challenges"),                        # onto its own challenges file
    ("hard.json", "a hard link"),                                       # a hard link to it
    ("soft.json", "through a link"),                                    # a symbolic link to it
    ("exp/config.json", "is inside the input --weights"),               # the export's config.json
    ("exp/weights.safetensors", "is inside the input --weights"),
    ("exp-link/config.json", "through a link"),                         # the export through a link
    ("exp", "is also the input --weights"),                             # the export folder itself
])
def test_submit_never_overwrites_its_inputs(world, capsys, output, words):
    before = contents(world)
    line = one_error_line(capsys, submit(world, output))
    assert words in line and "--output" in line, line
    assert contents(world) == before and not (world / "work").exists()


def test_submit_never_overwrites_the_compile_cache_it_reads(world, capsys):
    (world / "cache.bin").write_bytes(b"MY-CACHE")
    before = contents(world)
    line = one_error_line(capsys, main(["submit", "--challenges", str(world / "c.json"), "--weights",
                                        str(world / "exp"), "--output", str(world / "cache.bin"), "--compile-cache",
                                        str(world / "cache.bin"), "--work-dir", str(world / "work"),
                                        "--no-progress"]))
    assert "--output" in line and "is also the input --compile-cache" in line, line
    assert contents(world) == before


def test_submit_work_dir_inside_the_export_or_equal_to_the_output_is_refused(world, capsys):
    before = contents(world)
    assert "is inside the input --weights" in one_error_line(capsys, submit(world, "s.json", work="exp/ttt"))
    assert "are one path" in one_error_line(capsys, submit(world, "w2", work="w2"))
    assert contents(world) == before


@pytest.mark.parametrize("flag, path, words", [
    ("--save-votes", "data/train/dataset.json", "is inside the input --data"),  # onto a dataset file
    ("--save-votes", "data/votes.npz", "is inside the input --data"),           # a new file inside the dataset
    ("--save-votes", "exp/config.json", "is inside the input --weights"),
    ("--save-votes", "votes.npz", "is also the input --pool-with file"),      # over the votes it pools with
    ("--report-dir", "data", "is also the input --data"),
    ("--report-dir", "exp/report", "is inside the input --weights"),         # a report inside the export
])
def test_evaluate_never_writes_over_or_into_its_inputs(world, capsys, flag, path, words):
    before = contents(world)
    args = ["evaluate", "--weights", str(world / "exp"), "--data", str(world / "data"), flag, str(world / path)]
    if flag == "--save-votes":
        args += ["--pool-with", str(world / "votes.npz")]
    line = one_error_line(capsys, main(args))
    assert words in line, line
    assert contents(world) == before


def test_export_and_train_outputs_against_their_inputs(world, capsys):
    before = contents(world)
    assert "is also the input run" in one_error_line(capsys, main(["export", str(world / "run"), "--out",
                                                                   str(world / "run")]))
    state = world / "run" / "state_step00000005.pt"
    assert "holds the input run" in one_error_line(capsys, main(["export", str(state), "--out", str(world / "run")]))
    data = f"data_paths=[{world / 'data'}]"
    for run_dir, words in ((world / "data", "is also the input data path"),
                           (world / "data" / "run", "is inside the input data path")):
        line = one_error_line(capsys, main(["train", data, f"checkpoint_path={run_dir}", "--no-progress"]))
        assert words in line, line
    line = one_error_line(capsys, main(["train", data, f"checkpoint_path={world / 'r2'}", "--export",
                                        str(world / "data"), "--no-progress"]))
    assert "--export" in line and "is also the input data path" in line
    # a run that would rotate away the state it starts from
    line = one_error_line(capsys, main(["train", data, f"checkpoint_path={world / 'run'}",
                                        f"load_checkpoint={state}", "--no-progress"]))
    assert "holds the input load_checkpoint" in line
    assert contents(world) == before and not (world / "r2").exists()


def test_export_never_writes_into_the_run_folder_it_reads(world, capsys):
    """K03: `export RUN --out RUN/sub` is refused; a state file named alone may still be exported beside it."""
    from trm_kaggle.cli import build_parser
    from trm_kaggle.command_io import command_io

    before = contents(world)
    line = one_error_line(capsys, main(["export", str(world / "run"), "--out", str(world / "run" / "sub")]))
    assert "--out" in line and "is inside the input run" in line, line
    assert contents(world) == before and not (world / "run" / "sub").exists()
    args = build_parser().parse_args(["export", str(world / "run" / "state_step00000005.pt"), "--out",
                                      str(world / "run" / "export5")])
    check_io(*command_io("export", args))


def test_builders_never_replace_or_write_into_their_sources(world, capsys, arc_prefix):
    before = contents(arc_prefix.parent)
    line = one_error_line(capsys, main(["build-arc", "--input-file-prefix", str(arc_prefix), "--output-dir",
                                        str(arc_prefix.parent), "--no-progress"]))
    assert "holds the input --input-file-prefix file" in line
    line = one_error_line(capsys, main(["build-sudoku", "--input-dir", str(world / "data"), "--output-dir",
                                        str(world / "data" / "out"), "--no-progress"]))
    assert "is inside the input --input-dir" in line
    line = one_error_line(capsys, main(["build-maze", "--input-dir", str(world / "data"), "--output-dir",
                                        str(world / "data"), "--no-progress"]))
    assert "is also the input --input-dir" in line
    assert contents(arc_prefix.parent) == before


def test_compare_and_bundle(world, capsys):
    before = contents(world)
    line = one_error_line(capsys, main(["compare", str(world / "run"), "--out", str(world / "run")]))
    assert "is also the input run folder" in line
    # a bundle whose weights/ part would replace the export it ships
    (world / "bundle").mkdir()
    os.rename(world / "exp", world / "bundle" / "weights")
    line = one_error_line(capsys, main(["bundle", str(world / "bundle"), "--weights", str(world / "bundle" / "weights"),
                                        "--no-download"]))
    assert "OUT_DIR" in line and "holds the input --weights" in line
    os.rename(world / "bundle" / "weights", world / "exp")
    assert contents(world) == before


def test_outputs_beside_the_inputs_pass(tmp_path):
    """The check refuses overlaps only: outputs next to the inputs, and a table inside a run folder, pass."""
    (tmp_path / "c.json").write_text("{}")
    (tmp_path / "run").mkdir()
    check_io([Input(tmp_path / "c.json", "--challenges"), Input(tmp_path / "exp", "--weights", tree=True)],
             [Output(tmp_path / "s.json", "--output"), Output(tmp_path / "work", "--work-dir", "folder")])
    check_io([Input(tmp_path / "run", "run folder")], [Output(tmp_path / "run" / "compare", "--out", "folder")])
    with pytest.raises(TRMError, match="is also the input"):
        check_io([Input(tmp_path / "c.json", "--challenges")], [Output(tmp_path / "x" / ".." / "c.json", "--output")])


def test_sweep_import_and_repair_evaluation(world, capsys):
    before = contents(world)
    (world / "sw").mkdir()
    (world / "sw" / "grid.yaml").write_text("variants: {a: {}}\n")
    line = one_error_line(capsys, main(["sweep", str(world / "sw" / "grid.yaml"), "--sweep-dir", str(world / "sw")]))
    assert "--sweep-dir" in line and "holds the input grid file" in line
    (world / "up").mkdir()
    (world / "up" / "step_10").write_bytes(b"upstream")
    line = one_error_line(capsys, main(["import-upstream", str(world / "up" / "step_10"), "--out", str(world / "up")]))
    assert "holds the input checkpoint" in line
    line = one_error_line(capsys, main(["evaluate-repair", "--weights", str(world / "exp"), "--data",
                                        str(world / "data"), "--report", str(world / "data" / "test_puzzles.json")]))
    assert "--report" in line and "is inside the input --data" in line
    assert {k: v for k, v in contents(world).items() if not k.startswith(("sw/", "up/"))} == before
    assert (world / "up" / "step_10").read_bytes() == b"upstream"


def test_an_output_where_another_output_folder_writes_its_own_entry_is_refused(world, capsys):
    """evaluate --report-dir rx --save-votes rx/report.json: the report would replace the votes; and so would it
    beside the report's entries (rx/votes.npz ran the whole evaluation, then the report refused the folder)."""
    before = contents(world)
    args = ["evaluate", "--weights", str(world / "exp"), "--data", str(world / "data"), "--report-dir",
            str(world / "rx")]
    line = one_error_line(capsys, main(args + ["--save-votes", str(world / "rx" / "report.json")]))
    assert "--save-votes" in line and "lies inside --report-dir" in line, line
    for votes in ("pictures/v.npz", "votes.npz"):
        line = one_error_line(capsys, main(args + ["--save-votes", str(world / "rx" / votes)]))
        assert "lies inside --report-dir" in line, line
    assert contents(world) == before and not (world / "rx").exists()
    check_io([], [Output(world / "rx" / "votes.npz", "--save-votes"),
                  Output(world / "rx", "--report-dir", "folder", ("report.json", "report.md", "pictures"))])
    with pytest.raises(TRMError, match="lies inside --out"):
        check_io([], [Output(world / "o" / "x", "--save"), Output(world / "o", "--out", "replaced")])


def test_a_folder_output_refuses_only_inputs_among_what_it_writes(world):
    """A settings file a sweep (or a cluster job) put in the run folder is read, never written: allowed; a
    train state there is what the rotation deletes: refused."""
    from trm_kaggle.cli import build_parser
    from trm_kaggle.command_io import command_io

    (world / "run" / "run_config.yaml").write_text(f"data_paths: [{world / 'data'}]\n")
    args = build_parser().parse_args(["train", "--config", str(world / "run" / "run_config.yaml"),
                                      f"checkpoint_path={world / 'run'}"])
    check_io(*command_io("train", args))
    args = build_parser().parse_args(["train", "--config", str(world / "run" / "run_config.yaml"),
                                      f"checkpoint_path={world / 'run'}",
                                      f"load_checkpoint={world / 'run' / 'state_step00000005.pt'}"])
    with pytest.raises(TRMError, match="holds the input load_checkpoint"):
        check_io(*command_io("train", args))
    (world / "work").mkdir()
    (world / "work" / "c.json").write_text("{}")
    args = build_parser().parse_args(["submit", "--challenges", str(world / "work" / "c.json"), "--weights",
                                      str(world / "exp"), "--work-dir", str(world / "work")])
    check_io(*command_io("submit", args))  # beside what submit writes there
    args = build_parser().parse_args(["submit", "--challenges", str(world / "work" / "solve_report.json"),
                                      "--weights", str(world / "exp"), "--work-dir", str(world / "work")])
    with pytest.raises(TRMError, match="--work-dir .* holds the input --challenges"):
        check_io(*command_io("submit", args))


@pytest.mark.parametrize("path, words", [("/dev/null", "/dev/null is a character device; a folder is written there"),
                                         ("/dev/null/run", "/dev/null is a character device, not a folder")])
def test_a_folder_output_on_a_device_is_named_as_one(path, words):
    with pytest.raises(TRMError, match=words):
        check_io([], [Output(Path(path), "--work-dir", "folder")])


@pytest.mark.parametrize("output, words", [
    ("other/test/dataset.json", "lies in the split folder {w}/other/test of the dataset {w}/other"),
    ("other/test/new.json", "lies in the split folder"),               # nothing of ours goes into a split
    ("other/identifiers.json", "is a file of the dataset {w}/other"),
    ("exp2/config.json", "is a file of the export {w}/exp2"),
    ("exp2/weights.safetensors", "is a file of the export {w}/exp2"),
])
def test_a_file_output_never_breaks_a_dataset_or_export_the_command_does_not_read(world, capsys, output, words):
    """`submit --output other/test/dataset.json` replaced the file of a dataset it does not read (`verify` then
    refused the dataset), while a --work-dir inside that dataset was refused."""
    for split in ("train", "test"):
        (world / "other" / split).mkdir(parents=True)
        (world / "other" / split / "dataset.json").write_text("{}")
    (world / "other" / "identifiers.json").write_text("[]")
    make_export(world / "exp2")
    before = contents(world)
    assert submit(world, output) == 2
    assert words.format(w=world) in one_error_line(capsys)
    assert contents(world) == before
    # beside them, and a file of another name at a dataset's or an export's root, are written as before
    check_io([], [Output(world / "other" / "votes.npz", "--save-votes"), Output(world / "exp2" / "s.json", "-o")])


def test_a_file_output_ending_with_a_slash_is_refused(world, capsys):
    """`evaluate --save-votes newdir/` wrote the votes as a file named newdir, with no word of where they went."""
    assert main(["submit", "--challenges", str(world / "c.json"), "--weights", str(world / "exp"), "--output",
                 f"{world / 'newdir'}/", "--work-dir", str(world / "work"), "--no-progress"]) == 2
    assert "--output " in (line := one_error_line(capsys)) and "ends with a slash, which names a folder" in line
    assert not (world / "newdir").exists()
    check_io([], [Output(str(world / "newdir") + "/", "--work-dir", "folder")])  # a folder may end with one


def test_a_replaced_output_inside_a_dataset_or_an_export_is_refused(world, capsys):
    """`build-sudoku --output-dir data/train/inner` built a dataset inside another's split folder (as export,
    compare and evaluate reports could): the outer one could then never be rebuilt (it held an entry this package
    did not write there) short of deleting the inner one. A folder written into one was refused already."""
    before = contents(world)
    for args, flag, at in (
            (["build-sudoku", "--size", "4", "--num-train", "4", "--num-test", "2", "--output-dir",
              str(world / "data" / "train" / "inner"), "--no-progress"], "--output-dir", "data"),
            (["export", str(world / "run"), "--out", str(world / "exp" / "again")], "--out", "exp"),
            (["compare", str(world / "run"), "--out", str(world / "data" / "cmp")], "--out", "data")):
        line = one_error_line(capsys, main(args))
        assert flag in line and f"lies inside {world / at}, which is" in line, line
    assert contents(world) == before
    # in the place of one, a rebuild replaces it: that is the builder's own kind, not refused here
    check_io([], [Output(world / "data", "--output-dir", "replaced")])
    from trm_kaggle.config import SudokuBuildConfig  # the library's builders too (atomic_directory asks)
    from trm_kaggle.data.puzzles.sudoku import build_sudoku
    with pytest.raises(TRMError, match="lies inside .*data, which is a dataset"):
        build_sudoku(SudokuBuildConfig(output_dir=str(world / "data" / "lib"), size=4, num_train=4, num_test=2,
                                       num_aug=1, progress=False))
    make_export(world / "other")  # an export this evaluation does not read
    with pytest.raises(TRMError, match="report_dir .* lies inside .*other, which is an export"):
        from trm_kaggle.evaluate import evaluate_export
        evaluate_export(str(world / "exp"), str(world / "data"), report_dir=str(world / "other" / "report"))


@pytest.mark.parametrize("name", ["state_step00000005.pt", "run.json", "metrics.jsonl", "config.json"])
def test_a_file_output_over_a_training_runs_own_file_is_refused(world, capsys, name):
    """`submit --output run/state_step00000005.pt` (or `evaluate --save-votes` there) replaced the run's newest
    train state with a submission, exit 0: the run could not resume. A run folder's own files are refused as a
    dataset's and an export's are; another file beside them is the user's choice."""
    (world / "run" / "run.json").write_text("{}")
    before = contents(world)
    line = one_error_line(capsys, submit(world, f"run/{name}"))
    assert f"is a file of the training run folder {world / 'run'}" in line, line
    line = one_error_line(capsys, main(["evaluate", "--weights", str(world / "exp"), "--data", str(world / "data"),
                                        "--save-votes", str(world / "run" / name)]))
    assert f"is a file of the training run folder {world / 'run'}" in line, line
    assert contents(world) == before


@pytest.mark.parametrize("name", [".trm_kaggle.lock", ".trm_kaggle_output.json"])
def test_a_file_output_named_as_a_lock_or_an_owner_record_is_refused(world, capsys, name):
    """`submit --output run/.trm_kaggle.lock` said "wrote ... (valid)", exit 0, and the run's next training
    rewrote the file with its lock record: the submission was gone without a word."""
    before = contents(world)
    line = one_error_line(capsys, submit(world, f"run/{name}"))
    assert f"{name} is a name this package keeps for its own records" in line, line
    line = one_error_line(capsys, main(["evaluate", "--weights", str(world / "exp"), "--data", str(world / "data"),
                                        "--save-votes", str(world / name)]))
    assert f"{name} is a name this package keeps for its own records" in line, line
    assert contents(world) == before


def test_a_file_output_over_another_commands_record_is_refused(world, capsys):
    """`submit --output SWEEP/sweep.json` (and `--save-votes` there) replaced a sweep's record, exit 0: compare and
    the sweep's rerun then refused the folder; `submit --output LAUNCH/.trm_kaggle_jobs` or over a job file made
    the next `launch` blame its own file. Refused, as a run's own files are."""
    (world / "sw").mkdir()
    (world / "sw" / "sweep.json").write_text('{"runs": {}}')
    (world / "jobs").mkdir()
    (world / "jobs" / ".trm_kaggle_jobs").write_text(json.dumps({"format": "trm_kaggle.jobs",
                                                                 "files": {"trm-arc.sbatch": ["0" * 64]}}))
    (world / "jobs" / "trm-arc.sbatch").write_text("#!/bin/bash\n")
    before = contents(world)
    for target, said in (("sw/sweep.json", "is the record of a sweep"),
                         ("jobs/.trm_kaggle_jobs", "is a name this package keeps for its own records"),
                         ("jobs/trm-arc.sbatch", "is a job file `launch` wrote")):
        line = one_error_line(capsys, submit(world, target))
        assert said in line, line
        line = one_error_line(capsys, main(["evaluate", "--weights", str(world / "exp"), "--data",
                                            str(world / "data"), "--save-votes", str(world / target)]))
        assert said in line, line
    assert contents(world) == before


def test_the_librarys_write_submission_checks_what_submit_checks(world):
    """`write_submission` checked only the challenges: it wrote over a run's run.json, a dataset's files, an
    export's owner record, a lock and into a dataset's split folder, all of which `submit` refuses."""
    from trm_kaggle.evaluate import write_submission

    make_export(world / "other")
    (world / "run" / "run.json").write_text("{}")
    (world / "data" / "identifiers.json").write_text("[]")
    before = contents(world)
    for target in ("run/run.json", "data/identifiers.json", "data/train/sub.json", "run/.trm_kaggle.lock",
                   "other/config.json"):
        with pytest.raises(TRMError, match="submission"):
            write_submission(world / target, {"t1": [{"attempt_1": [[1]], "attempt_2": [[1]]}]})
    assert contents(world) == before
    write_submission(world / "fine.json", {"t1": [{"attempt_1": [[1]], "attempt_2": [[1]]}]})  # elsewhere: written


def test_the_run_files_outputs_protects_are_the_trainings():
    """outputs (below train in the package) names the run's files itself: they are the training's."""
    import fnmatch

    from trm_kaggle import outputs
    from trm_kaggle.train import checkpoint, metrics

    assert {checkpoint.RUN_RECORD, metrics.METRICS_FILE, "config.json"} <= set(outputs._RUN_FILES)
    state = checkpoint.state_path(Path("r"), 5).name
    assert checkpoint._STATE_RE.search(state) and any(fnmatch.fnmatchcase(state, p) for p in outputs._RUN_FILES)
    from trm_kaggle import atomic, locks

    from trm_kaggle.experiments.sweep import SWEEP_FILE
    from trm_kaggle.launch import files as launch_files

    assert {locks.LOCK_FILE, atomic.OWNER_RECORD, launch_files.RECORD} == set(outputs.RESERVED_NAMES)
    assert SWEEP_FILE in outputs._FOLDER_RECORDS


def test_a_work_folder_nobody_typed_is_named_as_derived(world, capsys):
    """`submit --output OTHER_EXPORT/s.json` was refused naming `--work-dir OTHER_EXPORT/s-ttt`, a flag not typed."""
    make_export(world / "other")
    main_args = ["submit", "--challenges", str(world / "c.json"), "--weights", str(world / "exp"), "--output",
                 str(world / "other" / "s.json"), "--no-progress"]
    line = one_error_line(capsys, main(main_args))
    derived = world / "other" / "s-ttt"
    assert line.startswith(f"error: --work-dir (by default beside --output) {derived} lies inside"), line


@pytest.mark.skipif(os.geteuid() != 0, reason="a bind mount needs root")
def test_an_output_inside_an_input_through_a_mount_says_a_mount_not_a_link(world):
    """A bind mount of the export is the same folder by another path, with no link anywhere: said as such."""
    import subprocess

    where = world / "bound"
    where.mkdir()
    if subprocess.run(["mount", "--bind", str(world / "exp"), str(where)], capture_output=True).returncode != 0:
        pytest.skip("this machine lets no one bind-mount a folder")
    try:
        with pytest.raises(TRMError, match=r"inside the input --weights .* \(the same folder by another path: a "
                                           r"mount\)"):
            check_io([Input(world / "exp", "--weights", tree=True)], [Output(where / "r", "--report-dir", "replaced")])
        with pytest.raises(TRMError, match=r"is also the input --c .* \(the same file by another path: a mount\)"):
            check_io([Input(world / "exp" / "config.json", "--c")], [Output(where / "config.json", "--output")])
        with pytest.raises(TRMError, match=r"inside the input --weights .* \(through a link\)"):
            check_io([Input(world / "exp", "--weights", tree=True)],
                     [Output(world / "exp-link" / "r", "--report-dir", "replaced")])
    finally:
        subprocess.run(["umount", str(where)], capture_output=True)


def test_compare_out_name_too_long_is_named_as_typed(world, capsys):
    """compare's folder is replaced as a whole (built beside itself): a 235-byte name, which the disk takes, was
    refused only when that folder was built, naming an absolute path nobody typed."""
    long = "c" * 235
    line = one_error_line(capsys, main(["compare", str(world / "run"), "--out", str(world / long)]))
    assert line.startswith(f"error: --out {world / long}: its name is 235 bytes") and "partial" not in line, line


def test_an_output_name_too_long_is_named_as_typed(world, capsys):
    """`submit --output` of a 300-character name was refused as `<it>/solve_report.json: File name too long`: the
    check for another submit's work folder asked for an entry inside it, a path nobody typed or would write."""
    long = "b" * 300 + ".json"
    line = one_error_line(capsys, submit(world, long))
    assert f"--output {world / long}: the name" in line and "is 305 bytes, past the 255" in line, line
    assert "solve_report" not in line


def test_a_name_its_file_system_cannot_hold_is_refused_before_anything_is_written(world, capsys):
    """`submit --work-dir wd/<300 characters>` warned of a lock not taken, wrote the fallback and made wd/, then
    failed; `export --out <245 characters>`, a name the disk takes, failed naming `<it>.partial-PID.record`."""
    from trm_kaggle import atomic
    from trm_kaggle.outputs import BUILT_BESIDE_BYTES

    before = contents(world)
    line = one_error_line(capsys, submit(world, "sub.json", work="wd/" + "x" * 300))
    assert "--work-dir" in line and "is 300 bytes, past the 255 its file system takes" in line, line
    assert not (world / "sub.json").exists() and not (world / "wd").exists()
    line = one_error_line(capsys, main(["export", str(world / "run"), "--out", str(world / ("z" * 245))]))
    assert "--out" in line and "give a name of at most 231 bytes" in line and "partial" not in line, line
    assert contents(world) == before
    check_io([], [Output(world / ("z" * 231), "--out", "replaced"), Output(world / ("y" * 231), "--x")])  # they fit
    # what the atomic writes add to a name fits the room kept for it
    assert len(atomic.PARTIAL_MARK) + len(str(2**22)) + len(atomic.PARTIAL_RECORD_SUFFIX) <= BUILT_BESIDE_BYTES
    assert len(".") + len(".") + 8 + len(".tmp") <= BUILT_BESIDE_BYTES  # mkstemp's .<name>.<8 random>.tmp


# ---------------------------------------------------------------------------
# The library's writers check the same, whoever calls them
# ---------------------------------------------------------------------------


def _solve(world: Path, **paths):
    from trm_kaggle.config import SolveConfig
    from trm_kaggle.solve import solve

    fields = {"challenges": "c.json", "weights": "exp", "output": "sub.json", "work_dir": "work", **paths}
    return solve(SolveConfig(**{k: str(world / v) for k, v in fields.items()}, progress=False))


@pytest.mark.parametrize("paths, words", [
    ({"output": "c.json"}, "output .*c.json is also the input challenges"),        # the submission over its tasks
    ({"output": "soft.json"}, "through a link"),
    ({"output": "exp/weights.safetensors"}, "is inside the input weights"),      # the fallback over the weights
    ({"work_dir": "exp"}, "work_dir .* is also the input weights"),
    ({"work_dir": "data/w"}, "work_dir .* lies inside .*data, which is a dataset"),  # a dataset it does not read
    ({"output": "work/solve_report.json"}, "output .* lies inside work_dir"),  # the report over the submission
])
def test_the_library_solve_never_writes_over_or_into_an_input(world, paths, words):
    # the command refused these; `solve` called from Python wrote them (its submission over the challenges, then
    # "valid")
    before = contents(world)
    with pytest.raises(TRMError, match=words):
        _solve(world, **paths)
    assert contents(world) == before and not (world / "work").exists()


@pytest.mark.parametrize("save_votes, report_dir, words", [
    ("exp/weights.safetensors", None, "save_votes .* is inside the input weights"),
    ("data/test_puzzles.json", None, "save_votes .* is inside the input data"),
    ("votes.npz", None, "save_votes .* is also the input pool_with file"),
    ("rx/votes.npz", "rx", "save_votes .* lies inside report_dir"),
])
def test_the_library_evaluation_never_writes_over_or_into_an_input(world, save_votes, report_dir, words):
    from trm_kaggle.evaluate import evaluate_export

    before = contents(world)
    with pytest.raises(TRMError, match=words):
        evaluate_export(str(world / "exp"), str(world / "data"), save_votes=str(world / save_votes),
                        report_dir=report_dir and str(world / report_dir), pool_with=[str(world / "votes.npz")])
    assert contents(world) == before and not (world / "rx").exists()


def test_write_challenges_never_writes_both_files_to_one_path(world):
    from trm_kaggle.data import parse_task, write_challenges

    task = parse_task("t", {"train": [{"input": [[1]], "output": [[2]]}], "test": [{"input": [[1]], "output": [[2]]}]},
                      "here")
    before = contents(world)
    for solutions in ("new.json", "soft.json"):
        target = "new.json" if solutions == "new.json" else "c.json"
        with pytest.raises(TRMError, match="challenges .* and solutions .* are one path"):
            write_challenges([task], world / target, world / solutions)
    assert contents(world) == before
    assert write_challenges([task], world / "ch.json", world / "sol.json") == 1


def test_a_work_dir_below_the_output_file_is_refused_before_anything_is_made(world, capsys):
    """`submit --output sub.json --work-dir sub.json/wd`: the work dir's lock made sub.json a folder, then the
    output was blamed for being one, and the folders stayed (a corrected rerun failed on them)."""
    before = contents(world)
    line = one_error_line(capsys, submit(world, "sub.json", work="sub.json/wd"))
    assert f"--work-dir {world / 'sub.json' / 'wd'} lies inside --output {world / 'sub.json'}, a file" in line, line
    assert not (world / "sub.json").exists() and contents(world) == before


def test_submit_never_overwrites_the_compile_caches_record(world, capsys):
    """`--output DIR/compile_cache.json` beside `--compile-cache DIR/compile_cache.bin`: the submission replaced the
    cache's record, and the cache could never be loaded again."""
    (world / "cdir").mkdir()
    (world / "cdir" / "compile_cache.bin").write_bytes(b"x" * 100)
    (world / "cdir" / "compile_cache.json").write_text('{"format": "mine"}')
    line = one_error_line(capsys, main(["submit", "--challenges", str(world / "c.json"), "--weights",
                                        str(world / "exp"), "--output", str(world / "cdir" / "compile_cache.json"),
                                        "--compile-cache", str(world / "cdir" / "compile_cache.bin"),
                                        "--work-dir", str(world / "work"), "--no-progress"]))
    assert "is also the input --compile-cache record" in line, line
    assert (world / "cdir" / "compile_cache.json").read_text() == '{"format": "mine"}'


@pytest.mark.parametrize("count", [0, -1, True, float("nan"), 2**63])
def test_resize_puzzle_embeddings_count_is_checked(count):
    """`resize_puzzle_embedding(t, 0)` returned an empty table (a NaN mean, a score of 0 once), -1 one row, and
    2**31 asked for 256 GiB."""
    import torch

    from trm_kaggle.model import resize_puzzle_embedding

    with pytest.raises(ValueError, match=r"^num_identifiers=.*: expected a whole number from 1 to"):
        resize_puzzle_embedding(torch.randn(3, 4), count)


def test_an_export_inside_the_run_being_trained_is_refused_before_training(tmp_path, capsys):
    """`train checkpoint_path=rr --export rr/ex` trained the whole run, then refused the export (exit 2)."""
    from integrity_helpers import build_sudoku4, train_args

    data = build_sudoku4(tmp_path / "ds")
    line = one_error_line(capsys, main(train_args(data, tmp_path / "rr", "max_steps=1", "--no-progress", "--export",
                                                  str(tmp_path / "rr" / "ex"))))
    assert "--export" in line and "is inside the input run folder" in line, line
    assert not (tmp_path / "rr").exists()


def test_an_export_onto_a_folder_it_may_not_replace_is_refused_before_training(tmp_path, capsys):
    """`train --export mine` (a folder of the user's, not an export) trained the whole run, then refused to replace
    the folder (exit 2, the run without its export)."""
    from integrity_helpers import build_sudoku4, train_args

    data = build_sudoku4(tmp_path / "ds")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("the user's")
    line = one_error_line(capsys, main(train_args(data, tmp_path / "rr", "max_steps=1", "--no-progress", "--export",
                                                  str(tmp_path / "mine"))))
    assert "mine exists, is not empty and is not an export written by this package" in line, line
    assert not (tmp_path / "rr").exists() and (tmp_path / "mine" / "notes.txt").read_text() == "the user's"


@pytest.mark.parametrize("seed", [float("nan"), -1, True, 2**64])
def test_the_task_id_seed_is_checked_where_given(seed):
    """`apply_task_ids(model, "random", seed=nan)` failed in torch's manual_seed; -1 and 2**63 were taken, though
    the command refuses `--task-id-seed -1`."""
    from trm_kaggle.config import ArchConfig
    from trm_kaggle.model import apply_task_ids
    from trm_kaggle.model.trm import TinyRecursiveModel

    arch = ArchConfig(hidden_size=16, num_heads=2, expansion=2.0, H_cycles=1, L_cycles=1, L_layers=1,
                      halt_max_steps=2, puzzle_emb_len=2, forward_dtype="float32")
    with pytest.raises(ValueError, match=r"^seed=.*: expected a whole number from 0 to 4,294,967,295$"):
        apply_task_ids(TinyRecursiveModel(arch, 16, 6, 3), "random", seed=seed)


@pytest.mark.parametrize("command", [["pipeline", "--work-dir", "{d}", "--train-seconds", "5"],
                                     ["train", "data_paths=[x]", "checkpoint_path={d}"],
                                     ["sweep", "tn", "data_paths=[x]", "--sweep-dir", "{d}"]])
def test_a_folder_every_user_writes_in_is_no_commands_folder(tmp_path, capsys, command):
    """`pipeline --work-dir /tmp` wrote its folders at /tmp's top and held all of /tmp: every command below it was
    then refused as inside a folder a live command holds."""
    from trm_kaggle.cli import main

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # as /tmp is
    rc = main([part.format(d=shared) for part in command])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and "is a folder every user may write in (as /tmp is)" in err[-1], err
    assert not list(shared.iterdir())
