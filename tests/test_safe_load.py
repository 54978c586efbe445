"""Foreign pickles are refused without running their code, in one line of ours: torch's own warning about a
pickle protocol it did not write (with its source line) once came before the error line."""

from __future__ import annotations

import pickle
import subprocess
import sys
import warnings

import pytest

from trm_kaggle.errors import DamagedFile
from trm_kaggle.model import load_weights_only
from trm_kaggle.train.checkpoint import load_train_state


class Runs:
    def __reduce__(self):  # unpickling this would create a file
        return (open, ("ran-pickle-code", "w"))


def test_a_plain_pickle_is_one_error_line_and_runs_nothing(tmp_path):
    up = tmp_path / "up"
    up.mkdir()
    (up / "step_5").write_bytes(pickle.dumps({"a": Runs()}, protocol=4))
    (up / "all_config.yaml").write_text("arch:\n  hidden_size: 64\n")
    p = subprocess.run([sys.executable, "-m", "trm_kaggle", "import-upstream", str(up / "step_5"), "--out",
                        str(tmp_path / "out")], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert lines[0].startswith("error: ") and "not a readable PyTorch checkpoint" in lines[0]
    assert not (tmp_path / "ran-pickle-code").exists() and not (tmp_path / "out").exists()


def test_loads_say_no_warning_of_torchs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "state_step_1.pt"
    path.write_bytes(pickle.dumps({"model": Runs()}, protocol=4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning of torch's would raise here
        with pytest.raises(DamagedFile, match="not a readable train state"):
            load_train_state(path)
        with pytest.raises(pickle.UnpicklingError):
            load_weights_only(path)
    assert not (tmp_path / "ran-pickle-code").exists()


def test_a_foreign_file_given_as_a_state_gets_no_advice_to_unpickle_it(tmp_path):
    """torch's message went on to advise `weights_only=False`, which would run the pickle's code."""
    path = tmp_path / "state_step_1.pt"
    path.write_text('{"a JSON file": 1}')  # `export run/config.json`
    with pytest.raises(DamagedFile) as e:
        load_train_state(path)
    assert "weights_only" not in str(e.value) and "UnpicklingError: Weights only load failed" in str(e.value)
