"""The config a weights file records (its metadata's "config") is read by the one JSON reader and checked for
its shape: valid JSON that is not an object (a list, null), an `arch` that is not an object, nesting too deep or
an integer too long is one line naming the weights file, in `read_export` and every command that loads an export
(the bundle here, `evaluate`, `submit`), never a traceback."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from cli_helpers import one_error_line
from trm_kaggle.cli import main
from trm_kaggle.errors import DataError
from trm_kaggle.model.export import read_export

SHIPPED = Path(__file__).resolve().parents[1] / "weights" / "arc2-cpu-tiny"

RECORDS = {
    "list": ("[1, 2]", "not a JSON object but a list"),
    "null": ("null", "not a JSON object but null"),
    "arch_string": ('{"arch": "tiny", "seq_len": 900, "vocab_size": 12}', "'arch' is a string, not an object"),
    "deep": ("[" * 5000 + "]" * 5000, "nested too deeply"),
    "long_int": ('{"arch": {}, "seq_len": ' + "9" * 5000 + "}", "an integer of 5,000 digits"),
}


@pytest.mark.parametrize("case", sorted(RECORDS))
def test_a_recorded_config_of_the_wrong_shape_is_one_line(tmp_path, capsys, case):
    export = tmp_path / "export"
    shutil.copytree(SHIPPED, export)
    w = export / "weights.safetensors"
    with safe_open(str(w), framework="pt") as f:
        meta = dict(f.metadata())
    record, said = RECORDS[case]
    save_file(load_file(w), str(w), metadata={**meta, "config": record})  # the tensors and their checksum intact
    with pytest.raises(DataError, match="its recorded config"):
        read_export(export)
    line = one_error_line(capsys, main(["bundle", str(tmp_path / "bundle"), "--weights", str(export),
                                        "--no-download"]))
    assert str(w) in line and said in line, line
    assert not (tmp_path / "bundle").exists()
