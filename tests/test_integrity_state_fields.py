"""A train state whose checksum holds has its fields checked too: the checksum proves the bytes are the ones
written, not that they make a state. `step` as a string or below 0, a missing `model`, a `config` that is no
settings object: one line naming the file and the field, in `train` (resume) and `export`, never a traceback
nor a resume "at step -7"."""

from __future__ import annotations

import pytest
import torch

from cli_helpers import one_error_line
from integrity_helpers import train_args
from trm_kaggle.cli import main
from trm_kaggle.model import content_digest
from trm_kaggle.train import checkpoint as ckpt


def _rewrite(path, change) -> None:
    """The state at `path` changed by `change(state)` and signed again, as a writer with a bug would leave it."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    state.pop("sha256")
    change(state)
    state["sha256"] = content_digest(state)
    torch.save(state, path)


CASES = {
    "step": (lambda s: s.update(step="7"), "'step' is '7'; it must be an integer >= 0"),
    "negative": (lambda s: s.update(step=-7), "'step' is -7; it must be an integer >= 0"),
    "model": (lambda s: s.pop("model"), "'model' is missing"),
    "config": (lambda s: s.update(config="[]"), "'config' is '[]'; it must be the run's settings as a JSON object"),
    "shape": (lambda s: s.update(model_shape={"seq_len": "x"}), "'model_shape' is a dict"),
    "dtype": (lambda s: s.update(forward_dtype="float64"), "'forward_dtype' is 'float64'"),
    # Fields that size or feed what a resume or an export builds: a 2**62-long position table, carries or an
    # optimizer state that torch indexes as the saver's shapes (each once a traceback).
    "seq_len": (lambda s: s["model_shape"].update(seq_len=2**62), "'model_shape' is a dict; it must be seq_len"),
    "carries": (lambda s: s.update(carries=["abc", 5]), "'carries' is a list; it must be a list of each rank's"),
    "optimizer": (lambda s: s.update(optimizer={"state": "abc", "param_groups": 5}),
                  "'optimizer' is a dict; it must be an optimizer's state"),
    "world_size": (lambda s: s.update(world_size=2**62), "'world_size' is 4611686018427387904"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_signed_state_with_a_bad_field_is_one_line_naming_it(data, tmp_path, capsys, case):
    run = tmp_path / "run"
    assert main(train_args(data, run, "max_steps=2")) == 0
    path = ckpt.state_path(run, 2)
    change, said = CASES[case]
    _rewrite(path, change)
    capsys.readouterr()
    with pytest.raises(ckpt.DamagedFile, match="field " + said.replace("(", r"\(").replace("[", r"\[")):
        ckpt.load_train_state(path)
    for argv in (train_args(data, run, "max_steps=4"), ["export", str(run), "--out", str(tmp_path / "exp")]):
        line = one_error_line(capsys, main(argv))
        assert str(path) in line and "field " + said in line, line
    assert not (tmp_path / "exp").exists()


def test_settings_this_version_cannot_take_are_one_line_on_resume(data, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(train_args(data, run, "max_steps=2")) == 0
    _rewrite(ckpt.state_path(run, 2), lambda s: s.update(config='{"lr": "fast"}'))
    capsys.readouterr()
    line = one_error_line(capsys, main(train_args(data, run, "max_steps=4")))
    assert str(ckpt.state_path(run, 2)) in line and "field 'config'" in line and "lr" in line, line


def test_an_optimizer_state_of_another_model_is_one_line_on_resume(data, tmp_path, capsys):
    """Well formed but not this model's (a parameter group too many): refused when restored, naming the field."""
    run = tmp_path / "run"
    assert main(train_args(data, run, "max_steps=2")) == 0
    path = ckpt.state_path(run, 2)
    _rewrite(path, lambda s: s["optimizer"]["param_groups"].append({"params": [], "lr": 0.0}))
    capsys.readouterr()
    line = one_error_line(capsys, main(train_args(data, run, "max_steps=4")))
    assert str(path) in line and "field 'optimizer' does not fit this run" in line, line
