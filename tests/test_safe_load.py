"""Foreign pickles are refused without running their code, in one line of ours: torch's own warning about a
pickle protocol it did not write (with its source line) once came before the error line."""

from __future__ import annotations

import pickle
import subprocess
import sys
import warnings

import pytest
import torch

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
    assert "weights_only" not in str(e.value) and str(e.value).endswith("not a readable train state: it is a text file")
    path.write_bytes(b"\x00\x01binary")  # bytes that tell nothing: torch's first sentence alone
    with pytest.raises(DamagedFile) as e:
        load_train_state(path)
    assert "weights_only" not in str(e.value) and "UnpicklingError: Weights only load failed" in str(e.value)


@pytest.mark.parametrize("content, said", [
    (b"hello world\n", "it is a text file"),
    (b"{}\n", "it is a text file"),
    (b"", "it is an empty file"),
    (b"\x93NUMPY\x01\x00", "it is a numpy .npy array"),
    ("zip", r"it is a zip archive but not a torch file \(no data.pkl inside\)"),
])
def test_a_file_torch_cannot_load_is_said_as_what_it_is(tmp_path, content, said):
    """A text file was "KeyError: 101" (torch's pickle reading its first byte); what the bytes are is said instead."""
    from trm_kaggle.model.upstream import read_checkpoint
    from trm_kaggle.train.checkpoint import read_torch_file

    if content == "zip":  # torch's words were its C++ "[enforce fail at inline_container.cc:180]"
        import zipfile
        with zipfile.ZipFile(tmp_path / "f", "w") as z:
            z.writestr("notes/readme.txt", "not a checkpoint")
    else:
        (tmp_path / "f").write_bytes(content)
    with pytest.raises(DamagedFile, match=f"f: not a readable PyTorch checkpoint: {said}$"):
        read_checkpoint(tmp_path / "f")
    with pytest.raises(DamagedFile, match=f"f: not a readable train state: {said}$"):
        read_torch_file(tmp_path / "f")


def test_an_exports_weights_given_as_a_checkpoint_are_said_to_be_an_export(tmp_path, capsys):
    """`import-upstream exp/weights.safetensors` was "UnpicklingError: Weights only load failed"; a safetensors file
    in no export is said as one."""
    from safetensors.torch import save_file

    from trm_kaggle.cli import main

    exp = tmp_path / "exp"
    exp.mkdir()
    save_file({"a": torch.zeros(2)}, str(exp / "weights.safetensors"))
    (exp / "config.json").write_text("{}")
    save_file({"a": torch.zeros(2)}, str(tmp_path / "w.safetensors"))
    assert main(["import-upstream", str(exp / "weights.safetensors"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"it is the weights.safetensors of the export {exp}, an export already" in err
    assert main(["import-upstream", str(tmp_path / "w.safetensors"), "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.endswith("not a readable PyTorch checkpoint: it is a safetensors file\n")
    assert not (tmp_path / "o").exists()
