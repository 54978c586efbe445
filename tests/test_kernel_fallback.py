"""The submission kernel's first code cell, run here as the notebook runs it: standard library only, it checks the
parameters (a bad one falls back to its default with a warning, never an exception), picks the save-run or
full mode, finds the challenges file in either mount layout (the same file reached twice counts once) and writes
a valid fallback submission.json before anything else can fail."""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

import numpy as np
import pytest

from trm_kaggle.evaluate.submission import check_submission
from trm_kaggle.kaggle.inputs import find_challenges

from conftest import random_task

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "kaggle_submission.ipynb"
NAME = "arc-agi_test_challenges.json"


def _code_cells() -> list[str]:
    nb = json.loads(NOTEBOOK.read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def run_fallback_cell(tmp_path: Path, monkeypatch, env: dict | None = None, **params) -> tuple[dict, str]:
    """The parameters cell, papermill's overrides (`params`), then the fallback cell; (its globals, its output)."""
    for name in ("KAGGLE_KERNEL_RUN_TYPE", "KAGGLE_URL_BASE", "KAGGLE_IS_COMPETITION_RERUN"):
        monkeypatch.delenv(name, raising=False)
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    cells = _code_cells()
    scope: dict = {}
    exec(cells[0], scope)
    scope.update(KAGGLE_INPUT=str(tmp_path / "input"), KAGGLE_WORKING=str(tmp_path / "working"))
    scope.update(params)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(cells[1], scope)  # must not raise, whatever the parameters
    return scope, out.getvalue()


def write_competition(directory: Path, n: int = 4, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    tasks = {f"{seed:02d}{i:06x}": random_task(rng, n_train=2, n_test=1 + i % 2, max_side=5)[0] for i in range(n)}
    directory.mkdir(parents=True, exist_ok=True)
    (directory / NAME).write_text(json.dumps(tasks))
    return directory / NAME


@pytest.mark.parametrize("layout", ["input/arc-prize-2025", "input/competitions/arc-prize-2026-arc-agi-2"])
def test_fallback_written_first_in_either_mount_layout(tmp_path, monkeypatch, layout):
    challenges = write_competition(tmp_path / layout)
    scope, out = run_fallback_cell(tmp_path, monkeypatch)
    submission = tmp_path / "working" / "submission.json"
    assert scope["READY"] and Path(scope["CHALLENGES"]) == challenges
    check_submission(submission, challenges)  # every task, every test input, both attempts, valid grids
    tasks = json.loads(challenges.read_text())
    answer = json.loads(submission.read_text())
    assert all(a["attempt_1"] == t["input"] for k in tasks for a, t in zip(answer[k], tasks[k]["test"]))
    assert f"answers all {len(tasks)} tasks" in out and "WARNING" not in out
    assert not list((tmp_path / "working").glob(".*partial*"))  # written atomically: no temporary left


def test_the_same_competition_reached_twice_counts_once(tmp_path, monkeypatch):
    challenges = write_competition(tmp_path / "input" / "competitions" / "arc-prize-2026-arc-agi-2")
    (tmp_path / "input" / "arc-prize-2026-arc-agi-2").symlink_to(challenges.parent)  # an alias of the mount
    (tmp_path / "input" / "datasets" / "me" / "copy").mkdir(parents=True)
    (tmp_path / "input" / "datasets" / "me" / "copy" / NAME).symlink_to(challenges)  # three down: not searched
    scope, out = run_fallback_cell(tmp_path, monkeypatch)
    assert scope["READY"] and Path(scope["CHALLENGES"]).resolve() == challenges.resolve(), out
    assert find_challenges(tmp_path / "input").resolve() == challenges.resolve()  # the package's own search too


def test_of_two_competitions_the_kernel_takes_its_own_and_says_so(tmp_path, monkeypatch):
    """The reproducer: two attached challenges files left no submission at all. The kernel knows its competition
    (COMPETITION, which the bundle sets to the one its metadata attaches) and answers that one's tasks."""
    write_competition(tmp_path / "input" / "arc-prize-2025", seed=1)
    own = write_competition(tmp_path / "input" / "competitions" / "arc-prize-2026-arc-agi-2", seed=2)
    scope, out = run_fallback_cell(tmp_path, monkeypatch)
    assert scope["READY"] and Path(scope["CHALLENGES"]) == own, out
    lines = [line for line in out.splitlines() if "2 different arc-agi_test_challenges.json files" in line]
    assert len(lines) == 1 and f"using {own}, the one of this kernel's competition arc-prize-2026-arc-agi-2" in \
        lines[0] and "arc-prize-2025" in lines[0] and "WARNING" not in out
    check_submission(tmp_path / "working" / "submission.json", own)
    assert find_challenges(tmp_path / "input", "arc-prize-2026-arc-agi-2") == own  # the package's own search too
    # last year's kernel (COMPETITION=arc-prize-2025) takes last year's file
    scope, _ = run_fallback_cell(tmp_path, monkeypatch, COMPETITION="arc-prize-2025")
    assert Path(scope["CHALLENGES"]).parent.name == "arc-prize-2025"


def test_a_folder_name_found_below_the_inputs_is_shown_escaped(tmp_path, monkeypatch):
    """A second challenges file in a folder named `oth<ESC>[31mer<newline>`: the line naming both files printed the
    escape sequence and the newline raw (a name read from the disk)."""
    write_competition(tmp_path / "input" / "oth\x1b[31mer\n", seed=1)
    own = write_competition(tmp_path / "input" / "arc-prize-2026-arc-agi-2", seed=2)
    scope, out = run_fallback_cell(tmp_path, monkeypatch)
    assert scope["READY"] and Path(scope["CHALLENGES"]) == own, out
    assert "\x1b" not in out and "oth\\x1b[31mer\\n/" in out, out


def test_two_competitions_neither_its_own_stop_the_model_but_never_raise(tmp_path, monkeypatch):
    write_competition(tmp_path / "input" / "arc-prize-2024", seed=1)
    write_competition(tmp_path / "input" / "competitions" / "arc-prize-2025", seed=2)
    scope, out = run_fallback_cell(tmp_path, monkeypatch)
    assert scope["READY"] is False and "2 different arc-agi_test_challenges.json files" in out
    assert "none of them the competition arc-prize-2026-arc-agi-2's alone" in out and "set CHALLENGES" in out


@pytest.mark.parametrize("challenges_text, words", [
    (None, "no arc-agi_test_challenges.json"),
    ("{not json", f"{NAME} is not JSON (Expecting"),
    ("[1, 2]", f"{NAME} does not hold a JSON object"),
    ("", f"{NAME} is empty"),  # the file is named, never json's bare "Expecting value: line 1 column 1"
    ("  \n", f"{NAME} is empty"),
])
def test_no_usable_challenges_file_never_raises(tmp_path, monkeypatch, challenges_text, words):
    (tmp_path / "input" / "comp").mkdir(parents=True)
    if challenges_text is not None:
        (tmp_path / "input" / "comp" / NAME).write_text(challenges_text)
    scope, out = run_fallback_cell(tmp_path, monkeypatch)
    assert scope["READY"] is False and words in out and out.count("WARNING") == 1, out


def test_malformed_tasks_still_get_a_valid_fallback(tmp_path, monkeypatch):
    tasks = {"aaaaaaaa": {"train": [], "test": [{"input": [[1, 2], [3]]}, {"input": [[11]]}, {"x": 1}]},
             "bbbbbbbb": {"train": [], "test": [{"input": [[True]]}]}, "cccccccc": {"train": []}}
    (tmp_path / "input" / "comp").mkdir(parents=True)
    (tmp_path / "input" / "comp" / NAME).write_text(json.dumps(tasks))
    scope, _ = run_fallback_cell(tmp_path, monkeypatch)
    answer = json.loads((tmp_path / "working" / "submission.json").read_text())
    assert answer == {"aaaaaaaa": [{"attempt_1": [[0]], "attempt_2": [[1]]}] * 3,
                      "bbbbbbbb": [{"attempt_1": [[0]], "attempt_2": [[1]]}], "cccccccc": []}


@pytest.mark.parametrize("params, expected, warned", [
    ({"TIME_BUDGET": "abc"}, {"TIME_BUDGET": 11.5 * 3600}, ["TIME_BUDGET='abc'"]),
    ({"TIME_BUDGET": -5}, {"TIME_BUDGET": 11.5 * 3600}, ["TIME_BUDGET=-5"]),
    ({"TIME_BUDGET": float("nan")}, {"TIME_BUDGET": 11.5 * 3600}, ["TIME_BUDGET=nan"]),
    ({"TIME_BUDGET": "600"}, {"TIME_BUDGET": 600.0}, []),  # a number given as text is taken
    ({"NUM_AUG": -1}, {"NUM_AUG": "auto"}, ["NUM_AUG=-1"]),
    ({"NUM_AUG": 2.5, "FINETUNE_STEPS": True}, {"NUM_AUG": "auto", "FINETUNE_STEPS": "auto"},
     ["NUM_AUG=2.5", "FINETUNE_STEPS=True"]),
    ({"MAX_TASKS": 0, "WORKERS": "two"}, {"MAX_TASKS": None, "WORKERS": None}, ["MAX_TASKS=0", "WORKERS='two'"]),
    ({"DEVICE": "gpu", "MODE": "fast"}, {"DEVICE": "auto", "MODE": "full"}, ["DEVICE='gpu'", "MODE='fast'"]),
    ({"TIME_BUDGET": None, "NUM_AUG": "auto"}, {"TIME_BUDGET": 11.5 * 3600}, ["TIME_BUDGET=None with 'auto'"]),
    ({"TIME_BUDGET": None, "NUM_AUG": 2, "FINETUNE_STEPS": 3}, {"TIME_BUDGET": None, "NUM_AUG": 2}, []),
    ({"KAGGLE_INPUT": 3}, {"READY": False}, ["KAGGLE_INPUT=3", "no arc-agi_test_challenges.json"]),
    # a NUL byte is in no path: the default, said, instead of a kernel that wrote no submission
    ({"CHALLENGES": "c\0.json"}, {"READY": True}, ["CHALLENGES='c\\x00.json' is not a path"]),
])
def test_bad_parameters_degrade_to_defaults_with_a_warning(tmp_path, monkeypatch, params, expected, warned):
    write_competition(tmp_path / "input" / "comp")
    scope, out = run_fallback_cell(tmp_path, monkeypatch, **params)
    for name, value in expected.items():
        assert scope[name] == value, (name, scope[name], out)
    warnings = [line for line in out.splitlines() if line.startswith("WARNING")]
    assert len(warnings) >= len(warned) and all(any(w in line for line in warnings) for w in warned), out
    if not warned:
        assert not warnings, out


@pytest.mark.parametrize("env, params, mode, max_tasks, budget", [
    ({}, {}, "full", None, 11.5 * 3600),  # not on Kaggle
    ({"KAGGLE_KERNEL_RUN_TYPE": "Interactive"}, {}, "save", 4, 900.0),  # Kaggle's Save Version run
    ({"KAGGLE_KERNEL_RUN_TYPE": "Batch", "KAGGLE_IS_COMPETITION_RERUN": "True"}, {}, "full", None, 11.5 * 3600),
    ({"KAGGLE_KERNEL_RUN_TYPE": "Interactive"}, {"MAX_TASKS": 10, "TIME_BUDGET": 1200}, "save", 10, 1200.0),
    ({"KAGGLE_KERNEL_RUN_TYPE": "Interactive"}, {"MODE": "full"}, "full", None, 11.5 * 3600),
    ({"KAGGLE_IS_COMPETITION_RERUN": "1", "KAGGLE_URL_BASE": "https://www.kaggle.com"}, {"MODE": "save"}, "save", 4,
     900.0),
])
def test_save_run_and_rerun(tmp_path, monkeypatch, env, params, mode, max_tasks, budget):
    write_competition(tmp_path / "input" / "comp")
    scope, out = run_fallback_cell(tmp_path, monkeypatch, env=env, **params)
    assert (scope["MODE"], scope["MAX_TASKS"], scope["TIME_BUDGET"]) == (mode, max_tasks, budget)
    first = out.splitlines()[0]
    assert first.startswith(f"mode: {mode} (") and "every task is submitted" in first
    if mode == "save" and not params:
        assert "Save Version" in first and "the first 4 tasks within 900 s" in first


@pytest.mark.parametrize("params, expected, warned", [
    ({"NUM_AUG": 10**400}, {"NUM_AUG": "auto"}, ["NUM_AUG=1000000000000000000000000000000000000..."]),
    ({"TIME_BUDGET": 10**400}, {"TIME_BUDGET": 11.5 * 3600}, ["TIME_BUDGET="]),
    ({"TIME_BUDGET": 1e308}, {"TIME_BUDGET": 11.5 * 3600}, ["TIME_BUDGET=1e+308 is not"]),
    ({"FINETUNE_STEPS": 10**5000}, {"FINETUNE_STEPS": "auto"},
     ["FINETUNE_STEPS=<a whole number of about 5,000 digits>"]),
    ({"TEST_DEPTH": 10**9, "TRAJECTORY_NOISE": 1e308}, {"TEST_DEPTH": None, "TRAJECTORY_NOISE": 0.0},
     ["TEST_DEPTH=1000000000 is not None or a whole number from 1 to 1,024", "TRAJECTORY_NOISE=1e+308"]),
    ({"TRAJECTORIES": "33"}, {"TRAJECTORIES": 1}, ["TRAJECTORIES=33"]),
])
def test_numbers_past_the_packages_bounds_degrade_and_never_raise(tmp_path, monkeypatch, params, expected, warned):
    """Papermill writes any literal a user gives (`-p NUM_AUG 1000...0`): one too large for a float must not
    raise (OverflowError in a finiteness check) nor pass on to the package's refusal after the install."""
    test_bad_parameters_degrade_to_defaults_with_a_warning(tmp_path, monkeypatch, params, expected, warned)


def solve_bound(name: str):
    from trm_kaggle.config import MAX_FINETUNE_STEPS, MAX_NUM_AUG, SolveConfig

    special = {"num_aug": MAX_NUM_AUG, "finetune_steps": MAX_FINETUNE_STEPS}
    if name in special:
        return special[name]
    name = "time_budget" if name == "save_time_budget" else name  # the save run's budget is the solve's too
    return next(m.le for m in SolveConfig.model_fields[name].metadata if hasattr(m, "le"))


@pytest.mark.parametrize("name", ["NUM_AUG", "FINETUNE_STEPS", "WORKERS", "TRAJECTORIES", "TRAJECTORY_NOISE",
                                  "TEST_DEPTH", "TIME_BUDGET", "SAVE_TIME_BUDGET"])
def test_the_notebooks_bounds_are_the_packages(tmp_path, monkeypatch, name):
    most = solve_bound(name.lower())
    write_competition(tmp_path / "input" / "comp")
    scope, out = run_fallback_cell(tmp_path, monkeypatch, **{name: most})
    assert scope[name] == most and "WARNING" not in out, out
    past = most + (1 if isinstance(most, int) else most * 1e-9)
    scope, out = run_fallback_cell(tmp_path, monkeypatch, **{name: past})
    assert scope[name] != past and f"WARNING: {name}=" in out, out


def test_a_budget_past_kaggles_12_hours_is_cut_to_its_limit_on_kaggle(tmp_path, monkeypatch):
    write_competition(tmp_path / "input" / "comp")
    env = {"KAGGLE_KERNEL_RUN_TYPE": "Batch", "KAGGLE_IS_COMPETITION_RERUN": "1"}
    scope, out = run_fallback_cell(tmp_path, monkeypatch, env=env, TIME_BUDGET=20 * 3600)
    assert scope["TIME_BUDGET"] == 11.5 * 3600 and "TIME_BUDGET=72000 s is past a Kaggle kernel's 12 h" in out
    scope, out = run_fallback_cell(tmp_path, monkeypatch, TIME_BUDGET=20 * 3600)  # off Kaggle: taken
    assert scope["TIME_BUDGET"] == 20 * 3600 and "WARNING" not in out


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-32"])
def test_a_challenges_file_with_a_byte_order_mark_gets_its_fallback(tmp_path, monkeypatch, encoding):
    """The package reads such a file (its one JSON reader); the kernel's standard-library fallback must too."""
    path = write_competition(tmp_path / "input" / "comp")
    tasks = json.loads(path.read_text())
    path.write_text(json.dumps(tasks), encoding=encoding)
    scope, out = run_fallback_cell(tmp_path, monkeypatch)
    answer = json.loads((tmp_path / "working" / "submission.json").read_text())
    assert scope["READY"] and sorted(answer) == sorted(tasks) and "WARNING" not in out, out
    check_submission(answer, tasks)


@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
def test_a_challenges_path_that_is_no_regular_file_is_refused_unread(tmp_path, monkeypatch, kind):
    """A FIFO would block the kernel forever and /dev/zero fill its memory before any submission exists: both
    are refused before a byte is read, in one warning (an alarm fails the test instead of a hang)."""
    import os
    import signal

    path = tmp_path / "challenges.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()

    def hung(*_):
        raise AssertionError("the fallback cell blocked on the challenges path")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    try:
        scope, out = run_fallback_cell(tmp_path, monkeypatch, CHALLENGES=str(path))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert scope["READY"] is False and out.count("WARNING") == 1, out
    assert "is not a regular file (a folder, FIFO, device or socket); it is not read" in out
    assert not (tmp_path / "working" / "submission.json").exists()


def test_no_limit_on_kaggle_is_its_12_hours(tmp_path, monkeypatch):
    """Kaggle stops every kernel at 12 h: TIME_BUDGET=None there would plan past the stop."""
    write_competition(tmp_path / "input" / "comp")
    env = {"KAGGLE_KERNEL_RUN_TYPE": "Batch", "KAGGLE_IS_COMPETITION_RERUN": "1"}
    scope, out = run_fallback_cell(tmp_path, monkeypatch, env=env, TIME_BUDGET=None, NUM_AUG=2, FINETUNE_STEPS=3)
    assert scope["TIME_BUDGET"] == 11.5 * 3600 and "TIME_BUDGET=None (no limit) is past" in out, out


def test_challenges_that_are_the_submission_file_are_left_as_they_are(tmp_path, monkeypatch):
    """CHALLENGES pointing at KAGGLE_WORKING/submission.json: the fallback once replaced the input with its
    answers (and the solve then blamed a solutions file). The input stands; one warning says why."""
    working = tmp_path / "working"
    working.mkdir()
    challenges = write_competition(working)
    target = working / "submission.json"
    challenges.rename(target)
    before = target.read_bytes()
    scope, out = run_fallback_cell(tmp_path, monkeypatch, CHALLENGES=str(target))
    assert target.read_bytes() == before and scope["READY"] is False and out.count("WARNING") == 1, out
    assert "the file this kernel writes its submission to; it is left as it is" in out


def test_a_submission_link_to_the_challenges_is_replaced_never_written_through(tmp_path, monkeypatch):
    """working/submission.json a link to the challenges file the kernel found: it wrote no fallback at all (the
    check followed the link), though its writer replaces the link and leaves the challenges as they are."""
    challenges = write_competition(tmp_path / "input" / "arc-prize-2025")
    before = challenges.read_bytes()
    (tmp_path / "working").mkdir()
    submission = tmp_path / "working" / "submission.json"
    submission.symlink_to(challenges)
    scope, out = run_fallback_cell(tmp_path, monkeypatch)
    assert scope["READY"] and "WARNING" not in out, out
    assert challenges.read_bytes() == before and not submission.is_symlink()
    check_submission(submission, challenges)


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="Linux's /proc")
def test_a_challenges_path_into_proc_is_refused_unopened(tmp_path, monkeypatch):
    link = tmp_path / "c.json"
    link.symlink_to("/proc/self/status")
    scope, out = run_fallback_cell(tmp_path, monkeypatch, CHALLENGES=str(link))
    assert scope["READY"] is False and "is a file of the kernel's /proc or /sys" in out, out


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/proc/self/status").is_file(), reason="mounting needs root")
def test_kmsg_of_a_procfs_mounted_elsewhere_is_read_as_empty_never_waited_on(tmp_path, monkeypatch):
    """The cell reads a file's size when opened, no more: a procfs file mounted anywhere calls itself empty."""
    import subprocess

    where = tmp_path / "p"
    where.mkdir()
    if subprocess.run(["mount", "-t", "proc", "proc", str(where)], capture_output=True).returncode != 0:
        pytest.skip("this machine lets no one mount a procfs")
    try:
        scope, out = run_fallback_cell(tmp_path, monkeypatch, CHALLENGES=str(where / "kmsg"))
    finally:
        subprocess.run(["umount", str(where)], capture_output=True)
    assert scope["READY"] is False and out.count("WARNING") == 1, out


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_special_sample_submission_is_named_never_waited_on(tmp_path, monkeypatch, kind):
    """The check cell compares task ids with `sample_submission.json` beside the challenges: it reads it through
    the cell's one careful reader, so a FIFO (or a device, or a kernel file) there is a warning, never a hang, and
    never passed over without a word."""
    challenges = write_competition(tmp_path / "input" / "comp")
    sample = challenges.parent / "sample_submission.json"
    if kind == "fifo":
        os.mkfifo(sample)
    else:
        sample.symlink_to("/dev/zero")
    scope, out = run_fallback_cell(tmp_path, monkeypatch, CHALLENGES=str(challenges))
    check = _code_cells()[6]
    assert check.startswith("def check_against_sample")
    scope.update(report=None, READY=False)  # the model skipped: the check runs on the fallback
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(check, scope)  # defines the check and runs it
    said = printed.getvalue()
    assert "could not be read" in said and "not a regular file" in said and "task ids not compared" in said, said


def test_a_failed_fallback_write_leaves_no_partial_file(tmp_path, monkeypatch):
    write_competition(tmp_path / "input" / "comp")
    (tmp_path / "working" / "submission.json").mkdir(parents=True)  # a folder where the file goes
    scope, out = run_fallback_cell(tmp_path, monkeypatch)
    assert scope["READY"] is False and "could not be written" in out
    assert [p.name for p in (tmp_path / "working").iterdir()] == ["submission.json"]


def test_a_special_file_found_by_the_search_is_named_not_called_missing(tmp_path, monkeypatch):
    import os

    (tmp_path / "input" / "comp").mkdir(parents=True)
    os.mkfifo(tmp_path / "input" / "comp" / NAME)
    scope, out = run_fallback_cell(tmp_path, monkeypatch)
    assert scope["READY"] is False and f"that is a regular file ({tmp_path / 'input' / 'comp' / NAME} is not)" in out


def test_every_device_the_package_solves_on_is_a_device_the_notebook_takes(tmp_path, monkeypatch):
    from typing import get_args

    from trm_kaggle.config import SolveConfig

    write_competition(tmp_path / "input" / "comp")
    for device in get_args(SolveConfig.model_fields["device"].annotation):
        scope, out = run_fallback_cell(tmp_path, monkeypatch, DEVICE=device)
        assert scope["DEVICE"] == device and "WARNING" not in out, (device, out)


@pytest.mark.parametrize("name", ["TIME_BUDGET", "SESSION_STEPS", "SAVE_MARGIN", "SAVE_EVERY_S"])
def test_the_training_kernels_numbers_too_large_for_a_float_degrade_too(tmp_path, monkeypatch, name):
    """The training notebook's first cell checks its parameters as the submission's does: 10**400 raised
    OverflowError there (math.isfinite of an int) before session.json was written."""
    nb = json.loads((NOTEBOOK.parent / "kaggle_train.ipynb").read_text())
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    for var in ("KAGGLE_KERNEL_RUN_TYPE", "KAGGLE_URL_BASE", "KAGGLE_IS_COMPETITION_RERUN"):
        monkeypatch.delenv(var, raising=False)
    scope: dict = {}
    exec(cells[0], scope)
    scope.update(KAGGLE_INPUT=str(tmp_path / "input"), KAGGLE_WORKING=str(tmp_path / "working"))
    scope[name] = 10**400
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(cells[1], scope)  # must not raise
    assert scope[name] != 10**400 and f"WARNING: {name}=" in out.getvalue(), out.getvalue()


def test_a_folder_at_the_training_kernels_session_json_is_named_and_nothing_is_left(tmp_path, monkeypatch):
    """KAGGLE_WORKING/session.json a folder: the kernel left `.session.json.partial-N` and called the working folder
    "not writable" (it had just written there). The folder is named; no partial file stays."""
    nb = json.loads((NOTEBOOK.parent / "kaggle_train.ipynb").read_text())
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    for var in ("KAGGLE_KERNEL_RUN_TYPE", "KAGGLE_URL_BASE", "KAGGLE_IS_COMPETITION_RERUN"):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "working" / "session.json").mkdir(parents=True)
    scope: dict = {}
    exec(cells[0], scope)
    scope.update(KAGGLE_INPUT=str(tmp_path / "input"), KAGGLE_WORKING=str(tmp_path / "working"))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(cells[1], scope)  # must not raise
    assert scope["READY"] is False
    assert f"error: {tmp_path / 'working' / 'session.json'} is a folder" in out.getvalue(), out.getvalue()
    assert sorted(p.name for p in (tmp_path / "working").iterdir()) == ["session.json"]


def test_a_stop_before_the_training_kernels_session_ends_it_interrupted_not_dead(tmp_path, monkeypatch):
    """SIGTERM to the training kernel while it imported trm_kaggle and torch (before the session's own handler)
    met the default handler: the kernel died, papermill raised DeadKernelError and session.json kept "started".
    The first cell notes it; the session (its previous state carried first) ends "interrupted" with nothing
    trained."""
    import signal

    nb = json.loads((NOTEBOOK.parent / "kaggle_train.ipynb").read_text())
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    for var in ("KAGGLE_KERNEL_RUN_TYPE", "KAGGLE_URL_BASE", "KAGGLE_IS_COMPETITION_RERUN"):
        monkeypatch.delenv(var, raising=False)
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        scope: dict = {}
        exec(cells[0], scope)
        scope.update(KAGGLE_INPUT=str(tmp_path / "input"), KAGGLE_WORKING=str(tmp_path / "working"))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(cells[1], scope)
            os.kill(os.getpid(), signal.SIGTERM)  # as if during the install or torch's import
            session_cell = next(c for c in cells if "run_session(" in c)
            exec(session_cell, scope)  # must not raise, and must not train
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
    record = json.loads((tmp_path / "working" / "session.json").read_text())
    assert record["status"] == "interrupted" and "stopped by SIGTERM before it finished" in record["message"]
    assert scope["REPORT"].status == "interrupted" and scope["REPORT"].step == 0, out.getvalue()
    assert not (tmp_path / "working" / "run").exists()  # nothing trained


def checked_against_sample(tmp_path: Path, monkeypatch, sample) -> tuple[str, Path]:
    """(what the check cell says, the challenges file) for a competition whose sample_submission.json holds
    `sample(task ids)`."""
    challenges = write_competition(tmp_path / "input" / "comp")
    (challenges.parent / "sample_submission.json").write_text(sample(list(json.loads(challenges.read_text()))))
    scope, _ = run_fallback_cell(tmp_path, monkeypatch, CHALLENGES=str(challenges))
    scope.update(report=None, READY=False)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(_code_cells()[6], scope)
    return printed.getvalue(), challenges


def test_task_ids_that_differ_from_the_sample_reach_the_log_escaped(tmp_path, monkeypatch):
    """A task id holding an escape sequence or a bell, beside sample_submission.json's ids, reached the log raw:
    every warning of the kernel is one escaped line."""
    said, _ = checked_against_sample(tmp_path, monkeypatch, lambda ids: json.dumps(
        {i: [] for i in ids[1:]} | {"e\x1b[2J\x1b[31mvil": []}))
    assert "task ids differ" in said and "e\\x1b[2J\\x1b[31mvil" in said and "\x1b" not in said, said


@pytest.mark.parametrize("sample", ['[1, "a"]', "[1, 2]", "[[1], [2]]", "5", '"abc"'])
def test_a_sample_submission_of_no_task_ids_is_named_not_the_submission(tmp_path, monkeypatch, sample):
    """A sample_submission.json holding a list of numbers: "checking .../submission.json failed (TypeError ...)",
    blaming the valid submission; a JSON string was compared as its letters."""
    said, challenges = checked_against_sample(tmp_path, monkeypatch, lambda ids: sample)
    assert f"{challenges.parent / 'sample_submission.json'} is not a JSON object of task ids" in said, said
    assert "checking" not in said and "task ids differ" not in said, said


def run_kernel_script(tmp_path: Path, **params) -> tuple[int, str]:
    """The whole submission kernel run as a script (its `.py` twin), `params` set in its parameters cell."""
    import re
    import subprocess
    import sys

    text = NOTEBOOK.with_suffix(".py").read_text()
    for name, value in params.items():
        text, n = re.subn(rf"^{name} = .*$", f"{name} = {value!r}", text, count=1, flags=re.M)
        assert n == 1, name
    (tmp_path / "k.py").write_text(text)
    p = subprocess.run([sys.executable, "k.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr


@pytest.mark.slow
@pytest.mark.parametrize("case", ["a folder 1,100 levels deep", "an input path too long", "a working path too long"])
def test_the_kernel_never_raises_after_its_fallback_on_odd_folders(tmp_path, monkeypatch, case):
    """After the fallback was written, the search for the weights (`Path.rglob`: RecursionError in a folder
    1,100 levels deep, ENAMETOOLONG under a 300-character KAGGLE_INPUT) and the check of submission.json
    (ENAMETOOLONG under such a KAGGLE_WORKING) raised outside any `try`: exit 1, no RESULT line."""
    monkeypatch.chdir(tmp_path)  # the test's own walks below end here; the one before it is restored after
    write_competition(tmp_path / "in" / "arc-prize-2026-arc-agi-2")
    params = dict(KAGGLE_INPUT="in", KAGGLE_WORKING="out", TIME_BUDGET=60)
    if case.startswith("a folder"):
        deep = tmp_path / "in" / "deep"
        deep.mkdir()
        os.chdir(deep)  # one level at a time: the whole path is longer than the system takes at once
        try:
            for _ in range(1100):
                os.mkdir("a")
                os.chdir("a")
        finally:
            os.chdir(tmp_path)
    elif case == "an input path too long":
        params.update(KAGGLE_INPUT="in_" + "x" * 300, CHALLENGES=f"in/arc-prize-2026-arc-agi-2/{NAME}")
    else:
        params.update(KAGGLE_WORKING="out_" + "x" * 300)
    code, out = run_kernel_script(tmp_path, **params)
    if case.startswith("a folder"):  # removed here, bottom up: a recursive removal stops at Python's depth limit
        os.chdir(tmp_path / "in" / "deep")
        try:
            for _ in range(1100):
                os.chdir("a")
            for _ in range(1100):
                os.chdir("..")
                os.rmdir("a")
        finally:
            os.chdir(tmp_path)
    assert code == 0 and "Traceback" not in out, out[-3000:]
    result = [line for line in out.splitlines() if line.startswith("RESULT")]
    assert len(result) == 1 and out.rstrip().endswith(result[0]), out[-3000:]
    if case == "a working path too long":
        assert result[0].startswith("RESULT: no submission was written")
    else:
        assert "holds the fallback answers" in result[0]
        check_submission(tmp_path / "out" / "submission.json", tmp_path / "in" / "arc-prize-2026-arc-agi-2" / NAME)


@pytest.mark.parametrize("kind", ["missing", "folder", "not JSON"])
def test_a_challenges_parameter_naming_no_challenges_file_answers_the_competitions(tmp_path, monkeypatch, kind):
    """CHALLENGES naming a missing file or a folder left no submission at all, though the competition's own file
    was attached and found with CHALLENGES=None: one warning, and the competition's tasks are answered."""
    challenges = write_competition(tmp_path / "input" / "arc-prize-2026-arc-agi-2")
    named = tmp_path / "typo.json"
    if kind == "folder":
        named.mkdir()
    elif kind == "not JSON":
        named.write_text("{")
    scope, out = run_fallback_cell(tmp_path, monkeypatch, CHALLENGES=str(named))
    assert scope["READY"] and out.count("WARNING") == 1 and f"CHALLENGES: " in out and str(named) in out, out
    assert f"answering {challenges}, the challenges file found below" in out, out
    assert Path(scope["CHALLENGES"]) == challenges
    check_submission(tmp_path / "working" / "submission.json", challenges)


@pytest.mark.parametrize("where", ["a previous output in KAGGLE_INPUT", "KAGGLE_INPUT itself", "WEIGHTS_DIR",
                                   "a bundle part"])
def test_a_working_folder_in_the_inputs_gets_no_fallback_written(tmp_path, monkeypatch, where):
    """KAGGLE_WORKING inside KAGGLE_INPUT: the fallback replaced a previous output's submission.json and made
    ttt_work/ in the input, and inside the weights dataset or a bundle part it was written before the solve refused
    the folder. Nothing is written: the RESULT line says why."""
    write_competition(tmp_path / "input" / "arc-prize-2026-arc-agi-2")
    (tmp_path / "input" / "prev").mkdir()
    (tmp_path / "input" / "prev" / "submission.json").write_text('{"keep": "this input file"}')
    (tmp_path / "weights").mkdir()
    (tmp_path / "bundle" / "kernel").mkdir(parents=True)
    (tmp_path / "bundle" / "kernel" / ".trm_kaggle_output.json").write_text("{}")
    working, said, params = {"a previous output in KAGGLE_INPUT": (tmp_path / "input" / "prev", "KAGGLE_INPUT", {}),
                             "KAGGLE_INPUT itself": (tmp_path / "input", "KAGGLE_INPUT", {}),
                             "WEIGHTS_DIR": (tmp_path / "weights", "WEIGHTS_DIR",
                                             {"WEIGHTS_DIR": str(tmp_path / "weights")}),
                             "a bundle part": (tmp_path / "bundle" / "kernel" / "w", "a folder the package builds",
                                               {})}[where]
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    scope, out = run_fallback_cell(tmp_path, monkeypatch, KAGGLE_WORKING=str(working), **params)
    assert not scope["READY"] and not scope["WRITTEN"] and f"KAGGLE_WORKING {working} lies in" in out, out
    assert said in scope["NO_MODEL"] and "choose a folder of its own" in scope["NO_MODEL"]
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before  # nothing written anywhere
    scope.update(report=None)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        for cell in _code_cells()[6:]:  # the check and the RESULT line
            exec(cell, scope)
    result = printed.getvalue().splitlines()[-1]
    assert result.startswith("RESULT: no submission was written") and "lies in" in result, printed.getvalue()


def test_the_training_kernels_status_line_names_no_last_step_it_does_not_know(tmp_path):
    """A session refused before its config was read said "step 2 -> 2 of 0"."""
    from trm_kaggle.kaggle_training import SessionReport

    nb = json.loads((NOTEBOOK.parent / "kaggle_train.ipynb").read_text())
    last = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"][-1]
    for target, said in ((0, "status: refused; step 2 -> 2; 1 s; why"), (6, "status: refused; step 2 -> 2 of 6; 1 s")):
        scope = {"REPORT": SessionReport(status="refused", start_step=2, step=2, target_step=target, seconds=1.0,
                                         message="why"), "KAGGLE_WORKING": str(tmp_path), "Path": Path,
                 "warn": print, "say": print}
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(last, scope)
        assert out.getvalue().startswith(said), out.getvalue()


@pytest.mark.slow
@pytest.mark.parametrize("planted", ["a link", "a file"])
def test_the_kernel_never_works_through_a_ttt_work_link_planted_in_its_working_folder(tmp_path, monkeypatch, planted):
    """`KAGGLE_WORKING/ttt_work` linked to another folder (or into KAGGLE_INPUT): the model's work folder, lock and
    results were written where the link pointed; a file there was blamed on a lock it could not take. The model
    is refused, said as what is there; the fallback stands."""
    import shutil

    monkeypatch.chdir(tmp_path)
    write_competition(tmp_path / "in" / "arc-prize-2026-arc-agi-2")
    shutil.copytree(Path(__file__).resolve().parents[1] / "weights" / "arc2-cpu-tiny", tmp_path / "in" / "w")
    (tmp_path / "out").mkdir()
    (tmp_path / "elsewhere").mkdir()
    if planted == "a link":
        (tmp_path / "out" / "ttt_work").symlink_to(tmp_path / "elsewhere")
    else:
        (tmp_path / "out" / "ttt_work").write_text("mine")
    code, out = run_kernel_script(tmp_path, KAGGLE_INPUT="in", KAGGLE_WORKING="out", TIME_BUDGET=60, DEVICE="cpu")
    assert code == 0 and "Traceback" not in out, out[-3000:]
    said = "ttt_work is a symbolic link" if planted == "a link" else "ttt_work is a file, where the kernel's work"
    assert said in out and "no lock taken" not in out and not list((tmp_path / "elsewhere").iterdir()), out[-3000:]
    assert json.loads((tmp_path / "out" / "submission.json").read_text())


def test_a_save_budget_past_12_hours_is_named_as_the_save_budget(tmp_path, monkeypatch):
    """SAVE_TIME_BUDGET=50000 in a Save Version run was warned about as "TIME_BUDGET=50000 s", a parameter the user
    had left alone."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Interactive")
    write_competition(tmp_path / "in" / "arc-prize-2026-arc-agi-2")
    code, out = run_kernel_script(tmp_path, KAGGLE_INPUT="in", KAGGLE_WORKING="out", SAVE_TIME_BUDGET=50000)
    assert code == 0 and "WARNING: SAVE_TIME_BUDGET=50000 s is past a Kaggle kernel's 12 h" in out, out[-3000:]
    assert "WARNING: TIME_BUDGET=" not in out


@pytest.mark.parametrize("params, setting", [({"MODE": "save", "SAVE_TIME_BUDGET": 65}, "SAVE_TIME_BUDGET"),
                                             ({"MODE": "full", "TIME_BUDGET": 65}, "TIME_BUDGET")])
def test_a_budget_too_small_names_the_parameter_it_came_from(tmp_path, monkeypatch, params, setting):
    """A Save Version run with SAVE_TIME_BUDGET=65 said "give a larger time budget: --time-budget, the kernel's
    TIME_BUDGET; or a smaller --safety-margin" in its warning and RESULT line: a parameter the user had left alone
    (TIME_BUDGET would change the scored rerun's budget too) and an option the kernel does not have."""
    monkeypatch.chdir(tmp_path)
    write_competition(tmp_path / "in" / "arc-prize-2026-arc-agi-2")
    code, out = run_kernel_script(tmp_path, KAGGLE_INPUT="in", KAGGLE_WORKING="out", DEVICE="cpu", **params)
    advice = f"leaves 5 s after its safety margin (60 s), less than the 10 s a worker needs to time its device and " \
             f"plan (give a larger time budget: {setting})"
    result = [line for line in out.splitlines() if line.startswith("RESULT:")]
    assert code == 0 and f"warning: the time budget (65 s) {advice}" in out, out[-3000:]
    assert len(result) == 1 and "holds the fallback answers" in result[0] and result[0].endswith(advice), result
    assert "--time-budget" not in out and "--safety-margin" not in out, out[-3000:]
    assert json.loads((tmp_path / "out" / "submission.json").read_text())


def test_a_failed_check_of_what_the_model_wrote_reaches_the_result_line(tmp_path, monkeypatch):
    """A check of the written submission that fails (here the checker refuses it): the RESULT line said "the model
    ran" alone, with the failure only in a WARNING above. The line says both."""
    from trm_kaggle.errors import DataError
    from trm_kaggle.evaluate import expected_counts

    write_competition(tmp_path / "input" / "arc-prize-2026-arc-agi-2", n=2)
    scope, out = run_fallback_cell(tmp_path, monkeypatch)
    assert scope["WRITTEN"], out

    def refused(*_):
        raise DataError("challenges.json: planted failure")

    scope.update(report={"ran": 1, "answered": 1, "predicted": 1, "elapsed_s": 1.0, "errors": []},
                 check_submission=refused, expected_counts=expected_counts)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        for cell in _code_cells()[6:]:  # the check and the RESULT line
            exec(cell, scope)
    result = printed.getvalue().splitlines()[-1]
    assert result.startswith("RESULT: the model ran") and "but checking" in result and "planted failure" in result, \
        printed.getvalue()


def test_a_task_id_written_twice_is_checked_by_its_last_copy(tmp_path, monkeypatch):
    """A task id written twice with different test counts: the first cell answered the last copy (Python's json),
    and then the check called the file unreadable and the RESULT line said the check failed. Every reader keeps
    the last copy: the check passes."""
    from trm_kaggle.evaluate import expected_counts

    path = write_competition(tmp_path / "input" / "arc-prize-2026-arc-agi-2", n=2)
    tasks = json.loads(path.read_text())
    first = next(iter(tasks))
    two = {**tasks[first], "test": tasks[first]["test"] * 2}
    path.write_text(json.dumps(tasks)[:-1] + f", {json.dumps(first)}: {json.dumps(two)}}}")
    scope, out = run_fallback_cell(tmp_path, monkeypatch)
    assert scope["WRITTEN"], out
    assert len(json.loads((tmp_path / "working" / "submission.json").read_text())[first]) == len(two["test"])
    scope.update(report={"ran": 1, "answered": 1, "predicted": 1, "elapsed_s": 1.0, "errors": []},
                 check_submission=check_submission, expected_counts=expected_counts)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        for cell in _code_cells()[6:]:
            exec(cell, scope)
    result = printed.getvalue().splitlines()[-1]
    assert result.startswith("RESULT: the model ran") and "but checking" not in result, printed.getvalue()


def test_refused_test_time_settings_are_said_in_the_packages_words():
    """The solve cell's check of TRAJECTORIES, TRAJECTORY_NOISE and TEST_DEPTH warned with pydantic's own text (its
    error type, a cut input dict, a web address); it says the package's one line, and predicts without them."""
    from trm_kaggle.config import SolveConfig, validation_line

    cell = next(c for c in _code_cells() if "test_time = dict(" in c)
    lines = cell.splitlines()
    first = next(i for i, line in enumerate(lines) if "test_time = dict(" in line)
    last = next(i for i, line in enumerate(lines) if line.strip() == "test_time = {}")
    indent = len(lines[first]) - len(lines[first].lstrip())
    check = "\n".join(line[indent:] for line in lines[first:last + 1])
    said = []
    scope = dict(SolveConfig=SolveConfig, validation_line=validation_line, warn=said.append, CHALLENGES="c.json",
                 weights="w", TRAJECTORIES=2, TRAJECTORY_NOISE=0.0, TEST_DEPTH=None)
    exec(check, scope)
    assert scope["test_time"] == {} and len(said) == 1, said
    assert "trajectories 2 need a trajectory_noise above 0" in said[0], said
    assert "pydantic" not in said[0] and "type=" not in said[0] and "input_value" not in said[0], said


def test_the_weights_search_prefers_an_export_and_says_which_of_several_it_took(tmp_path):
    """With WEIGHTS_DIR unset the kernel took the first folder holding a weights.safetensors: another dataset's
    file without config.json, sorted first, was taken over the attached weights dataset without a word."""
    import ast

    source = _code_cells()[2]
    (function,) = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "first_dir_with"]
    said: list[str] = []
    scope = {"Path": Path, "os": os, "KAGGLE_INPUT": str(tmp_path), "warn": said.append}
    exec(ast.get_source_segment(source, function), scope)
    for folder, files in (("aaa-other", ["weights.safetensors"]), ("trm-kaggle-weights", ["weights.safetensors",
                                                                                          "config.json"])):
        (tmp_path / folder).mkdir()
        for name in files:
            (tmp_path / folder / name).write_text("x")
    (tmp_path / "again").symlink_to(tmp_path / "trm-kaggle-weights")  # one folder reached twice counts once
    found = scope["first_dir_with"]("weights.safetensors", beside="config.json", parameter="WEIGHTS_DIR")
    assert found == str(tmp_path / "again") or found == str(tmp_path / "trm-kaggle-weights")
    assert len(said) == 1 and "2 folders" in said[0] and "set WEIGHTS_DIR" in said[0], said
    said.clear()
    (tmp_path / "aaa-other" / "weights.safetensors").unlink()
    assert scope["first_dir_with"]("weights.safetensors", beside="config.json") is not None and not said
