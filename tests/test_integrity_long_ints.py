"""An integer longer than 4,300 digits (Python's limit on turning text into an int) is one line naming the
file in every reader: the JSON reader and the YAML reader refuse it once, for every command (challenges,
submissions, solutions, dataset.json, an export's config.json, `--config`, `verify`), never a ValueError
traceback. 0x and 0b integers in YAML, which Python converts without limit, are held to the same length."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cli_helpers import one_error_line
from trm_kaggle.cli import main
from trm_kaggle.errors import DataError
from trm_kaggle.jsonio import parse_json
from trm_kaggle.yamlio import parse_yaml

HUGE = "9" * 5000


@pytest.mark.parametrize("text", [HUGE, "-" + HUGE], ids=["positive", "negative"])
def test_the_readers_refuse_a_long_integer_in_one_line(text):
    with pytest.raises(DataError, match=r"^f\.json: .*an integer of 5,000 digits"):
        parse_json(f'{{"a": [{text}]}}', "f.json")
    with pytest.raises(DataError, match=r"^f\.yaml: .*an integer longer than 4,300 digits"):
        parse_yaml(f"a: {text}", "f.yaml")
    with pytest.raises(DataError, match="an integer longer than 4,300 digits"):
        parse_yaml("a: 0x" + "f" * 4000, "f.yaml")
    assert parse_json('{"a": 123}', "f.json") == {"a": 123} and parse_yaml("a: 1_000", "f.yaml") == {"a": 1000}


def test_every_command_that_reads_one_says_one_line(tmp_path, capsys, data):
    good = {"t1": {"train": [], "test": [{"input": [[1]]}]}}
    challenges = tmp_path / "challenges.json"
    challenges.write_text(json.dumps(good))
    bad = tmp_path / "bad.json"
    bad.write_text('{"t1": [{"attempt_1": [[%s]], "attempt_2": [[1]]}]}' % HUGE)
    cases = [["validate-submission", str(bad), "--challenges", str(challenges)],
             ["validate-submission", str(challenges), "--challenges", str(bad)],
             ["score", str(challenges), "--solutions", str(bad)]]
    config = tmp_path / "run.yaml"
    config.write_text(f"max_steps: {HUGE}\n")
    cases.append(["train", "--config", str(config), f"data_paths=[{data}]", f"checkpoint_path={tmp_path / 'run'}"])
    ds = tmp_path / "ds"
    shutil.copytree(data, ds)
    meta = json.loads((ds / "train" / "dataset.json").read_text())
    (ds / "train" / "dataset.json").write_text(json.dumps(meta).replace(f'"seq_len": {meta["seq_len"]}',
                                                                        f'"seq_len": {HUGE}'))
    cases.append(["verify", str(ds)])
    for argv in cases:
        line = one_error_line(capsys, main(argv))
        assert "an integer" in line and "4,300" in line, (argv[0], line)
    assert not (tmp_path / "run").exists()


def test_an_exports_config_json_with_one_is_one_line(tmp_path):
    from trm_kaggle.model import read_export

    export = tmp_path / "export"
    shutil.copytree(Path(__file__).parent.parent / "weights" / "arc2-cpu-tiny", export)
    text = (export / "config.json").read_text()
    (export / "config.json").write_text(text.replace('"seq_len": ', f'"seq_len": {HUGE}, "was": ', 1))
    with pytest.raises(DataError, match="config.json: .*an integer of 5,000 digits"):
        read_export(export)


LONG = "1" + "0" * 400  # within Python's 4,300 digits, past a float's range


def test_a_bounded_flag_refuses_an_integer_past_a_float_in_one_line(tmp_path, capsys):
    from trm_kaggle.config import bounded_number

    with pytest.raises(Exception, match=r"^--tasks 1000000000000000000000000000000000000000\.\.\.: must be from 1 to"):
        bounded_number("--tasks", 1, 10**6)(LONG)  # math.isfinite(10**400) raised OverflowError
    assert bounded_number("--tasks", 1, 10**6)(" 7") == 7
    weights = Path(__file__).parent.parent / "weights" / "arc2-cpu-tiny"
    for argv in (["estimate", "--weights", str(weights), "--tasks", LONG],
                 ["estimate", "--weights", str(weights), "--devices", LONG],
                 ["import-upstream", str(tmp_path / "none"), "--out", str(tmp_path / "o"), "--seq-len", LONG]):
        line = one_error_line(capsys, main(argv))
        assert "must be from" in line and len(line) < 200, (argv, line)
    assert not (tmp_path / "o").exists()


def test_a_settings_integer_past_64_bits_is_said_short(tmp_path, capsys, data):
    line = one_error_line(capsys, main(["train", f"data_paths=[{data}]", f"checkpoint_path={tmp_path / 'run'}",
                                        f"max_steps={LONG}"]))
    assert "out of range (a 64-bit integer)" in line and LONG not in line and len(line) < 300, line
