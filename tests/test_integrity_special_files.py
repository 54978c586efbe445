"""A special file where a regular one is expected is named as what it is, never as missing.

A reader that first asks whether its file is there (`Path.is_file()`) hears False for a FIFO, a device or a
socket too, and used to say "missing", "no such file", "not an export" or "not a grid file". Those checks
go through `trm_kaggle.jsonio.is_regular`: such a file is refused with the line of the one gate
(`open_regular`: "must be a regular file, not a pipe (FIFO)"), without being opened, so that nothing waits
on it, and the command ends with status 2 before it writes anything.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from cli_helpers import one_error_line
from integrity_helpers import build_sudoku4, train_args, woken_fifos
from trm_kaggle.cli import main
from trm_kaggle.errors import UnreadableFile
from trm_kaggle.jsonio import is_regular
from trm_kaggle.kaggle import bundle as B

KINDS = {"fifo": "not a pipe (FIFO)", "/dev/zero link": "not a character device (it links to /dev/zero)"}


@pytest.fixture
def special(tmp_path):
    """make(path, kind): a FIFO, or a symbolic link to /dev/zero, at `path`. A watchdog opens each FIFO for
    writing after 20 s, so that a reader blocked in open() wakes and the test fails on its time, not hangs."""
    with woken_fifos(20) as made:
        def make(path: Path, kind: str) -> Path:
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.exists() or path.is_symlink():
                path.unlink()
            if kind == "fifo":
                os.mkfifo(path)
                made.append(path)
            else:
                path.symlink_to("/dev/zero")
            return path

        yield make


def refused(capsys, rc: int, path: Path, kind: str, t0: float) -> None:
    """One error line naming `path` and what it is, status 2, quickly."""
    line = one_error_line(capsys, rc)
    assert time.perf_counter() - t0 < 15
    assert str(path) in line and "must be a regular file" in line and KINDS[kind] in line, line


def test_the_check(tmp_path, special):
    (tmp_path / "f").write_text("x")
    assert is_regular(tmp_path / "f") and not is_regular(tmp_path) and not is_regular(tmp_path / "nothing")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert not is_regular(tmp_path / "dangling")
    for kind, words in KINDS.items():
        path = special(tmp_path / f"s-{kind[:4]}", kind)
        with pytest.raises(UnreadableFile, match=re.escape(f"grid file must be a regular file, {words}")):
            is_regular(path, "grid file")


def test_a_socket_is_named_a_socket_by_every_reader(tmp_path, capsys):
    """open() of a Unix socket fails with ENXIO ("No such device or address"): the one reader names it as what it
    is, as it names a FIFO, for the challenges, a --config file and any other file it opens."""
    import socket

    from trm_kaggle.jsonio import open_regular

    path = tmp_path / "s.json"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        with pytest.raises(UnreadableFile, match=re.escape(f"{path}: challenges must be a regular file, not a socket")):
            open_regular(path, "challenges")
        assert main(["train", "--print-config", "--config", str(path)]) == 2
        line = one_error_line(capsys, 2)
        assert "not a socket" in line and "No such device" not in line, line


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="Linux's /proc")
def test_a_file_of_proc_is_refused_unopened_behind_a_link_too(tmp_path, capsys):
    """/proc/kmsg calls itself a regular file of size 0 and its read waits for the kernel's next message (a
    hang): files of /proc and /sys are refused by the one gate before they are opened, also behind a link."""
    from trm_kaggle.jsonio import is_regular, open_regular

    link = tmp_path / "config.yaml"
    link.symlink_to("/proc/self/status")
    for path in (Path("/proc/self/status"), link):
        for gate in (open_regular, is_regular):
            with pytest.raises(UnreadableFile, match=re.escape(f"{path}: config must be a regular file, not a file "
                                                               f"of the kernel's /proc or /sys")):
                gate(path, "config")
    assert main(["train", "--print-config", "--config", str(link)]) == 2
    assert "not a file of the kernel's /proc or /sys" in one_error_line(capsys, 2)


@pytest.mark.skipif(not Path("/proc/self/mountinfo").is_file(), reason="Linux's /proc")
def test_a_file_of_a_procfs_mounted_anywhere_is_refused_by_its_file_system(monkeypatch):
    """A procfs may be mounted elsewhere than /proc (`mount -t proc proc /mnt/p`, as root): its files are known by
    their file system (/proc/self/mountinfo), not by their path. Shown on /proc itself with the path rule off."""
    import trm_kaggle.jsonio as J

    assert J.kernel_filesystem(os.stat("/proc/self/status").st_dev) == "proc"
    assert J.kernel_filesystem(os.stat(__file__).st_dev) is None  # a file of a disk (or tmpfs, overlay)
    monkeypatch.setattr(J, "_kernel_file", lambda path: False)  # as if the procfs were mounted at /mnt/p
    for gate in (J.open_regular, J.is_regular):
        with pytest.raises(UnreadableFile, match="not a file of the kernel's /proc or /sys"):
            gate("/proc/self/status", "config")


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/proc/self/mountinfo").is_file(), reason="mounting needs root")
def test_kmsg_of_a_procfs_mounted_elsewhere_never_hangs_a_reader(tmp_path):
    import subprocess

    from trm_kaggle.jsonio import read_json

    where = tmp_path / "p"
    where.mkdir()
    if subprocess.run(["mount", "-t", "proc", "proc", str(where)], capture_output=True).returncode != 0:
        pytest.skip("this machine lets no one mount a procfs")
    try:
        with pytest.raises(UnreadableFile, match="not a file of the kernel's /proc or /sys"):
            read_json(where / "kmsg", "challenges")  # its read would wait for the kernel's next message
    finally:
        subprocess.run(["umount", str(where)], capture_output=True)


@pytest.mark.parametrize("kind", list(KINDS))
def test_export_of_a_special_state_file(tmp_path, special, capsys, kind):
    """K01 (a FIFO), K02 (a link to /dev/zero): not "no train state"."""
    state = special(tmp_path / "state_step00000009.pt", kind)
    t0 = time.perf_counter()
    refused(capsys, main(["export", str(state), "--out", str(tmp_path / "e")]), state, kind, t0)
    assert not (tmp_path / "e").exists()


@pytest.mark.parametrize("builder,kind", [("build-sudoku", "fifo"), ("build-sudoku", "/dev/zero link"),
                                          ("build-maze", "fifo"), ("build-maze", "/dev/zero link")])
def test_a_special_csv_is_not_called_missing(tmp_path, special, capsys, builder, kind):
    """P01, P02 (build-sudoku), P09 (build-maze): train.csv a FIFO or a link to /dev/zero."""
    train = special(tmp_path / "in" / "train.csv", kind)
    (tmp_path / "in" / "test.csv").write_text("source,q,a,rating\n")
    t0 = time.perf_counter()
    rc = main([builder, "--output-dir", str(tmp_path / "o"), "--input-dir", str(tmp_path / "in")])
    refused(capsys, rc, train, kind, t0)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_special_grid_file_is_not_called_unknown(tmp_path, special, capsys, kind):
    """F12 (a FIFO), F11 (a link to /dev/zero): not "neither a built-in grid ... nor a grid file"."""
    grid = special(tmp_path / "g.yaml", kind)
    t0 = time.perf_counter()
    rc = main(["sweep", str(grid), "--dry-run", "--sweep-dir", str(tmp_path / "sw")])
    refused(capsys, rc, grid, kind, t0)
    assert not (tmp_path / "sw").exists()


def bundle(inputs, out: Path, **options: Path) -> int:
    args = {"weights": inputs["export"], "notebook": inputs["notebook"], **options}
    return B.main([str(out), "--no-download", "--user", "me",
                   *(a for k, v in args.items() for a in (f"--{k.replace('_', '-')}", str(v)))])


@pytest.mark.parametrize("kind", list(KINDS))
def test_an_export_with_a_special_config_is_named(inputs, tmp_path, special, capsys, kind):
    """N02: not "not an export"."""
    weights = Path(shutil.copytree(inputs["export"], tmp_path / "w"))
    config = special(weights / "config.json", kind)
    t0 = time.perf_counter()
    refused(capsys, bundle(inputs, tmp_path / "ob", weights=weights), config, kind, t0)
    assert not (tmp_path / "ob").exists()


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("option, name", [("notebook", "nb.ipynb"), ("compile_cache", "cc.bin"),
                                          ("extra_wheel", "x-1.0-py3-none-any.whl")])
def test_a_special_bundle_input_is_named(inputs, tmp_path, special, capsys, option, name, kind):
    """U02, U04, U03: not "does not exist yet", "no such file" or "not a .whl file"; and no OUT_DIR is left
    holding only its lock file."""
    path = special(tmp_path / name, kind)
    t0 = time.perf_counter()
    refused(capsys, bundle(inputs, tmp_path / "ob", **{option: path}), path, kind, t0)
    assert not (tmp_path / "ob").exists()


@pytest.mark.parametrize("args, said", [
    (["--extra-wheel", "nope-1.0-py3-none-any.whl"], "nope-1.0-py3-none-any.whl: no such file"),
    (["--extra-wheel", "d-1.0-py3-none-any.whl"], "d-1.0-py3-none-any.whl: a folder, not a .whl file"),
    (["--kaggle-has", ""], "--kaggle-has '': not a distribution name"),
    (["--kaggle-has", "../x"], "--kaggle-has '../x': not a distribution name"),
    (["--kaggle-has", "a\x1bb"], "--kaggle-has 'a\\x1bb': not a distribution name"),
])
def test_extra_wheels_and_kaggle_has_names_are_said_for_what_they_are(inputs, tmp_path, monkeypatch, capsys, args,
                                                                       said):
    """A missing --extra-wheel (or a folder) was said "not a .whl file"; `--kaggle-has ''` replaced the default list
    and `../x` or an escape was recorded as a distribution the image has."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d-1.0-py3-none-any.whl").mkdir()
    rc = B.main([str(tmp_path / "ob"), "--no-download", "--user", "me", "--weights", str(inputs["export"]),
                 "--notebook", str(inputs["notebook"]), *args])
    line = one_error_line(capsys, rc)
    assert said in line, line
    assert not (tmp_path / "ob").exists()


def test_a_folder_given_as_the_bundles_notebook_is_named_a_folder(inputs, tmp_path, capsys):
    """`--notebook DIR` was said "does not exist yet" (the folder exists; it is no notebook file)."""
    folder = tmp_path / "nbdir"
    folder.mkdir()
    line = one_error_line(capsys, bundle(inputs, tmp_path / "ob", notebook=folder))
    assert f"notebook {folder} is a folder; a notebook file (.ipynb) is expected" in line, line
    assert not (tmp_path / "ob").exists()


@pytest.mark.parametrize("which,kind", [("challenges", "fifo"), ("challenges", "/dev/zero link"),
                                        ("solutions", "fifo"), ("solutions", "/dev/zero link")])
def test_a_special_prefix_file_is_not_called_missing(arc_prefix, tmp_path, special, capsys, which, kind):
    """`--input-file-prefix`: a special challenges file is not "file not found", special solutions are not taken
    for solutions that are simply absent (which the prefix convention allows)."""
    path = special(Path(f"{arc_prefix}_training_{which}.json"), kind)
    t0 = time.perf_counter()
    rc = main(["build-arc", "--input-file-prefix", str(arc_prefix), "--output-dir", str(tmp_path / "o"),
               "--subsets", "training", "evaluation", "--test-set-name", "evaluation", "--no-progress"])
    refused(capsys, rc, path, kind, t0)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("kind", list(KINDS))
def test_special_files_of_hub_snapshots_records_and_caches(tmp_path, special, kind):
    """A downloaded step file or all_config.yaml, a launch record, a packed manifest, a compile cache: each a
    special file is its own line, not "the snapshot has no ...", no record, not packed, or "no such file"."""
    from trm_kaggle.kaggle.packed import packed_manifest
    from trm_kaggle.launch.files import RECORD, read_record
    from trm_kaggle.model.compiling import cache_problem
    from trm_kaggle.model.hub import HubSource, _checkpoint_in

    snap = tmp_path / "snap"
    step = special(snap / "run" / "step_10", kind)
    with pytest.raises(UnreadableFile, match=re.escape(KINDS[kind])):
        _checkpoint_in(snap, HubSource("o/r", None, "run/step_10"))
    step.unlink()
    step.write_bytes(b"state")
    special(snap / "run" / "all_config.yaml", kind)
    with pytest.raises(UnreadableFile, match=re.escape(KINDS[kind])):
        _checkpoint_in(snap, HubSource("o/r", None, "run/step_10"))
    special(tmp_path / "jobs" / RECORD, kind)
    with pytest.raises(UnreadableFile, match=re.escape(KINDS[kind])):
        read_record(tmp_path / "jobs")
    special(tmp_path / "packed" / "manifest.json", kind)
    with pytest.raises(UnreadableFile, match=re.escape(KINDS[kind])):
        packed_manifest(tmp_path / "packed")
    cache = special(tmp_path / "cc" / "compile_cache.bin", kind)
    t0 = time.perf_counter()
    problem, data = cache_problem(cache, "cpu", trusted=True)
    assert data is None and time.perf_counter() - t0 < 15
    assert str(cache) in problem and "must be a regular file" in problem and KINDS[kind] in problem, problem


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_special_sweep_record_or_test_puzzles_file_is_named(tmp_path, special, capsys, kind):
    """compare: a sweep folder's sweep.json; evaluate: an ARC dataset's test_puzzles.json (which decides ARC's
    vote): either as a FIFO or a /dev/zero link is one line, never taken as absent."""
    from conftest import write_run
    from trm_kaggle.evaluate.dataset import is_arc_dataset

    sweep = tmp_path / "sw"
    write_run(sweep / "a", train=[(1, 0.1, 2.0, 0.0, 0.1)])
    path = special(sweep / "sweep.json", kind)
    t0 = time.perf_counter()
    refused(capsys, main(["compare", str(sweep), "--out", str(tmp_path / "cmp")]), path, kind, t0)
    assert not (tmp_path / "cmp").exists()
    puzzles = special(tmp_path / "arc" / "test_puzzles.json", kind)
    with pytest.raises(UnreadableFile, match=re.escape(f"test_puzzles.json must be a regular file, {KINDS[kind]}")):
        is_arc_dataset(puzzles.parent)


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_special_owner_record_is_named_not_called_no_record(tmp_path, special, capsys, kind):
    """A dataset's owner record (`.trm_kaggle_output.json`) that is a FIFO was "no record that this package wrote
    it": the rebuild's refusal now names what stands there."""
    out = tmp_path / "ds"
    args = ["build-sudoku", "--size", "4", "--num-train", "20", "--num-test", "4", "--no-progress",
            "--output-dir", str(out)]
    assert main(args) == 0
    capsys.readouterr()
    record = special(out / ".trm_kaggle_output.json", kind)
    t0 = time.perf_counter()
    assert main(args) == 2
    line = one_error_line(capsys, 2)
    assert f"{record}: owner record must be a regular file, {KINDS[kind]}" in line and time.perf_counter() - t0 < 15


def test_a_special_run_record_is_named_and_no_foreign_state_let_in(tmp_path, special, capsys):
    """run.json a FIFO: `export` took it as no record, and exported a state another run wrote into the folder."""
    data = build_sudoku4(tmp_path / "data")
    run = tmp_path / "run"
    assert main(train_args(data, run, "max_steps=2")) == 0
    capsys.readouterr()
    special(run / "run.json", "fifo")
    assert main(["export", str(run), "--out", str(tmp_path / "e")]) == 2
    assert "run.json: run.json must be a regular file, not a pipe (FIFO)" in one_error_line(capsys, 2)
    assert not (tmp_path / "e").exists()


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="Linux's /proc")
def test_the_bundle_reads_no_kernel_file_in_a_model_card_or_kaggle_json(tmp_path, monkeypatch):
    """An export's MODEL_CARD.md or the client's kaggle.json linked to /proc/kmsg hung `build_bundle.py` for ever:
    both were read on a plain is_file() check. The card is refused in one line (it was copied, whatever it held);
    a kaggle.json that cannot be read names no user."""
    from conftest import IDS
    from trm_kaggle.kaggle.metadata import configured_user
    from trm_kaggle.kaggle.weights_dataset import build_weights

    export = tmp_path / "export"
    shutil.copytree(Path(__file__).resolve().parents[1] / "weights" / "arc2-cpu-tiny", export)
    (export / "MODEL_CARD.md").unlink(missing_ok=True)
    (export / "MODEL_CARD.md").symlink_to("/proc/self/status")
    with pytest.raises(UnreadableFile, match="MODEL_CARD.md must be a regular file, not a file of the kernel's"):
        build_weights(tmp_path / "out", export, ids=IDS, log=lambda _: None)
    assert not (tmp_path / "out").exists()
    config = tmp_path / "kc"
    config.mkdir()
    (config / "kaggle.json").symlink_to("/proc/self/status")
    monkeypatch.setenv("KAGGLE_CONFIG_DIR", str(config))
    monkeypatch.delenv("KAGGLE_USERNAME", raising=False)
    monkeypatch.setattr("trm_kaggle.kaggle.metadata.kaggle_config_dirs", lambda: [config])
    assert configured_user()[0] is None


@pytest.mark.parametrize("name", ["ok-notaversion-py3-none-any.whl", "esc\x1b[31m-1.0-py3-none-any.whl",
                                  "trm_kaggle-0.1-py3-none-any.whl"])
def test_an_extra_wheel_whose_name_no_wheel_has_is_one_line(inputs, tmp_path, capsys, name):
    """packaging's InvalidWheelFilename (an invalid version or project name) was a traceback, exit 1."""
    import zipfile

    path = tmp_path / name
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("ok/__init__.py", "")
    line = one_error_line(capsys, bundle(inputs, tmp_path / "ob", extra_wheel=path))
    said = "the bundle builds its own" if name.startswith("trm_kaggle") else "not a wheel's file name (NAME-VERSION-"
    assert said in line and "\x1b" not in line, line
    assert not (tmp_path / "ob").exists()


def test_a_path_through_a_device_or_a_file_names_that_part(tmp_path, capsys):
    """`evaluate --weights` a link to /dev/zero said "a part of the path is a file": the part, and what it is."""
    (tmp_path / "zl").symlink_to("/dev/zero")
    (tmp_path / "plain").write_text("x")
    data = build_sudoku4(tmp_path / "s4")
    line = one_error_line(capsys, main(["evaluate", "--weights", str(tmp_path / "zl"), "--data", str(data)]))
    assert f"({tmp_path / 'zl'} is a character device, not a folder)" in line, line
    from trm_kaggle.jsonio import UnreadableFile, open_regular

    with pytest.raises(UnreadableFile, match=f"not found \\({re.escape(str(tmp_path / 'plain'))} is a file, not a"):
        open_regular(tmp_path / "plain" / "inner" / "config.json", "config.json")


def test_an_output_in_the_systems_device_tree_is_refused_before_any_work(tmp_path):
    """`submit --output /dev/stdout`, stdout a file, passed every check (a link to that file), made its work folder
    /dev/stdout-ttt, solved every task and ended with status 2 blaming "another process". Refused at once now;
    /dev/null keeps its own words, and /dev/shm (a memory file system) takes outputs."""
    import subprocess
    import sys

    from trm_kaggle.errors import TRMError
    from trm_kaggle.outputs import Output, check_io

    (tmp_path / "c.json").write_text('{"t1": {"train": [], "test": [{"input": [[1]]}]}}')
    with open(tmp_path / "out.txt", "w") as stdout:
        r = subprocess.run([sys.executable, "-m", "trm_kaggle", "submit", "--challenges", str(tmp_path / "c.json"),
                            "--weights", str(Path(__file__).resolve().parents[1] / "weights" / "arc2-cpu-tiny"),
                            "--output", "/dev/stdout", "--no-progress"],
                           stdout=stdout, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: --output /dev/stdout is in /dev, the system's own device and process files, not a place for a file "
        "of this package: choose a path of its own"], r.stderr
    assert not Path("/dev/stdout-ttt").exists() and (tmp_path / "out.txt").read_text() == ""
    with pytest.raises(TRMError, match="/dev/null is a character device, not a file"):
        check_io([], [Output("/dev/null", "--output")])
    if Path("/dev/shm").is_dir() and os.access("/dev/shm", os.W_OK):
        check_io([], [Output(f"/dev/shm/trm-kaggle-test-{os.getpid()}.json", "--output")])


def test_a_link_into_the_systems_device_files_is_refused_as_the_path_itself(tmp_path):
    """`--report lnk` with lnk -> /dev/stdout passed the /dev check: with stdout a file, the report replaced what the
    command had printed; with stdout a pipe, it was said as "the disk of /proc/PID/fd is full". A chain of links
    through /dev, /proc or /sys is refused as that place."""
    from trm_kaggle.errors import TRMError
    from trm_kaggle.outputs import Output, check_io

    (tmp_path / "lnk").symlink_to("/dev/stdout")
    (tmp_path / "hop").symlink_to(tmp_path / "lnk")
    for name in ("lnk", "hop"):
        with pytest.raises(TRMError, match=r"is in /dev, the system's own device and process files"):
            check_io([], [Output(str(tmp_path / name), "--report")])
    # a folder on the way that is such a link (`lnk/r.json`, lnk -> /sys/kernel) was said as "the disk of
    # /sys/kernel is full"
    (tmp_path / "sys").symlink_to("/sys/kernel")
    (tmp_path / "fds").symlink_to("/proc/self/fd")
    (tmp_path / "me").symlink_to("/proc/self")  # said "/proc/NNN is not writable"
    for name, place in (("sys/r.json", "sys"), ("fds/x.json", "proc"), ("me/x.json", "proc")):
        with pytest.raises(TRMError, match=rf"is in /{place}, the system's own device and process files"):
            check_io([], [Output(str(tmp_path / name), "--report")])
    (tmp_path / "fine").symlink_to(tmp_path / "elsewhere.json")  # a link to a plain place is the command's own rule
    (tmp_path / "elsewhere.json").write_text("{}")
    try:
        check_io([], [Output(str(tmp_path / "fine"), "--report")])
    except TRMError as e:
        assert "/dev" not in str(e), e
