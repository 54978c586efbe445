"""build-code-repair's inputs: a grid past a dataset's seq_len is one line naming --grid; a FIFO or a device in
the corpus is skipped unread, and named; one corpus file is read up to a bound."""

import logging
import os
import subprocess
import sys

import pytest
from pydantic import ValidationError

from trm_kaggle.cli import main
from trm_kaggle.config import CodeRepairBuildConfig
from trm_kaggle.data.code import repair
from trm_kaggle.data.code.repair import build_code_repair

SOURCE = "def f(x):\n    if x:\n        return x + 1\n    return 0\n"


@pytest.mark.parametrize("grid", ["100000x100000", "8x3000000", "1025x1024", "9" * 5000 + "x1"])
def test_grid_past_seq_len_is_one_line_naming_grid(tmp_path, capsys, grid):
    out = tmp_path / "o"  # no corpus: the grid is refused before it is looked for (and never allocated here)
    assert main(["build-code-repair", "--output-dir", str(out), "--corpus", str(tmp_path / "none"), "--grid", grid,
                 "--workers", "1", "--no-progress"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: invalid option: --grid: "), lines
    assert "1,048,576" in lines[0] and "seq_len:" not in lines[0] and len(lines[0]) < 300
    assert not out.exists()


def test_grid_bound_is_the_cells_of_a_sequence():
    assert CodeRepairBuildConfig(output_dir="o", grid="1024x1024").cols == 1024  # exactly at the bound
    with pytest.raises(ValidationError, match="at most 1,048,576 cells"):
        CodeRepairBuildConfig(output_dir="o", grid="1x1048577")


def _limited() -> None:  # should the file be read anyway, it fails at 8 GB instead of filling the machine
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_special_corpus_file_is_skipped_unread_and_named(tmp_path, kind):
    corp = tmp_path / "corp"
    corp.mkdir()
    (corp / "b.py").write_text(SOURCE)
    if kind == "fifo":
        os.mkfifo(corp / "a.py")
        said = "not a pipe (FIFO)"
    else:
        (corp / "a.py").symlink_to("/dev/zero")
        said = "not a character device (it links to /dev/zero)"
    p = subprocess.run([sys.executable, "-m", "trm_kaggle", "build-code-repair", "--output-dir", str(tmp_path / "o"),
                        "--corpus", str(corp), "--grid", "8x32", "--workers", "1", "--lint", "off", "--no-progress",
                        "--val-fraction", "0", "--test-fraction", "0"],
                       capture_output=True, text=True, timeout=30, preexec_fn=_limited)
    assert p.returncode == 0, p.stderr
    warnings = [line for line in p.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1 and f"{corp / 'a.py'}: corpus file must be a regular file, {said}" in warnings[0]
    assert "files skipped: 1 special_file" in p.stdout
    assert (tmp_path / "o" / "train").is_dir()  # b.py's pairs are built: the special file costs itself alone


def test_corpus_file_is_read_up_to_a_bound(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(repair, "MAX_SOURCE_BYTES", 1000)
    corp = tmp_path / "corp"
    corp.mkdir()
    (corp / "b.py").write_text(SOURCE)
    big = corp / "big.py"
    big.write_text(SOURCE.replace("f(", "g(") * 40)
    with caplog.at_level(logging.WARNING):
        s = build_code_repair(CodeRepairBuildConfig(output_dir=str(tmp_path / "o"), corpus=str(corp), grid="8x32",
                                                    workers=1, lint="off", progress=False, val_fraction=0,
                                                    test_fraction=0))
    assert s["skipped_files"] == {"too_large": 1} and s["total_pairs"] > 0
    said = f"skipped {big}: corpus file of {big.stat().st_size:,} bytes is larger than the 1,000 bytes this package"
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [said + " reads"]
