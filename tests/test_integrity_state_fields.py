"""A train state whose checksum holds has its fields checked too: the checksum proves the bytes are the ones
written, not that they make a state. `step` as a string or below 0, a missing `model`, a `config` that is no
settings object: one line naming the file and the field, in `train` (resume) and `export`, never a traceback
nor a resume "at step -7"."""

from __future__ import annotations

import json
import re

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
    "step": (lambda s: s.update(step="7"), "'step' is '7'; it must be a whole number from 0 below 2**63"),
    "negative": (lambda s: s.update(step=-7), "'step' is -7; it must be a whole number from 0 below 2**63"),
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
    # the generator's state and the data position, each once a traceback inside the resume or its first step
    "rng": (lambda s: s.update(rng_torch=torch.zeros(10, dtype=torch.uint8)), "'rng_torch' is a Tensor; it must "
                                                                              "be the CPU generator's state"),
    # the right size, contents the generator refuses ("Invalid mt19937 state" at the resume)
    "rng_zeros": (lambda s: s.update(rng_torch=torch.zeros_like(s["rng_torch"])), "'rng_torch' is a Tensor; it "
                                                                                  "must be the CPU generator's"),
    "epoch": (lambda s: s.update(loader=s["loader"].replace('"epoch": 0', '"epoch": -1')), "'loader' is '{"),
    # resumed, its next state held 2**63 and the resume after refused that one as damaged
    "epoch_end": (lambda s: s.update(loader=s["loader"].replace('"epoch": 0', f'"epoch": {2**63 - 1}')),
                  "'loader' is '{"),
    "batch": (lambda s: s.update(loader=s["loader"].replace('"batch_in_epoch": ', '"batch_in_epoch": NaN, "x": ')),
              "'loader' is '{"),
    "deep": (lambda s: s.update(loader="[" * 100_000), "'loader' is '[[["),
    "repeated": (lambda s: s.update(loader=s["loader"].replace("{", '{"seed": 1, ', 1)), "'loader' is '{"),
    # a per-parameter entry that is neither a tensor nor a number: torch's step would fail on it
    "buffer": (lambda s: next(iter(s["optimizer"]["state"].values())).update(exp_avg=None),
               "'optimizer' is a dict; it must be an optimizer's state"),
    "version": (lambda s: s.update(version=7), "'version' is 7; it must be the writer's version, a string"),
    # no run writes an empty one: it was read as "the dataset changed" and the good older state never tried
    "fingerprint": (lambda s: s.update(dataset_fingerprint=""), "'dataset_fingerprint' is ''; it must be a non-empty"),
    # never written as None (None stands for "none" only where a run writes it so): once a traceback, or a resume
    # that took the world size for changed
    "version_none": (lambda s: s.update(version=None), "'version' is None; it must be the writer's version"),
    "world_size_none": (lambda s: s.update(world_size=None), "'world_size' is None; it must be an integer from 1"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_signed_state_with_a_bad_field_is_one_line_naming_it(data, tmp_path, capsys, case):
    run = tmp_path / "run"
    assert main(train_args(data, run, "max_steps=2")) == 0
    path = ckpt.state_path(run, 2)
    change, said = CASES[case]
    _rewrite(path, change)
    capsys.readouterr()
    with pytest.raises(ckpt.DamagedFile, match="field " + re.escape(said)):
        ckpt.load_train_state(path)
    for argv in (train_args(data, run, "max_steps=4"), ["export", str(run), "--out", str(tmp_path / "exp")]):
        line = one_error_line(capsys, main(argv))
        assert str(path) in line and "field " + said in line, line
    assert not (tmp_path / "exp").exists()


def test_an_export_of_a_state_whose_shape_misfits_its_weights_names_the_file(data, tmp_path, capsys):
    """It said `train state: weights do not match the model config`, naming neither the file nor the fields."""
    run = tmp_path / "run"
    assert main(train_args(data, run, "max_steps=2")) == 0
    path = ckpt.state_path(run, 2)
    _rewrite(path, lambda s: s["model_shape"].update(num_puzzle_identifiers=s["model_shape"]["num_puzzle_identifiers"]
                                                     + 4))
    capsys.readouterr()
    line = one_error_line(capsys, main(["export", str(run), "--out", str(tmp_path / "exp")]))
    assert f"train state {path} (its fields 'config' and 'model_shape'): weights do not match" in line, line
    assert not (tmp_path / "exp").exists()


def test_an_export_says_when_the_runs_config_json_records_another_arch(data, tmp_path, capsys, caplog):
    """The state's settings edited (checksum recomputed) to H_cycles 3 where config.json says 1: the export followed
    the state without a word."""
    run = tmp_path / "run"
    assert main(train_args(data, run, "max_steps=2")) == 0
    path = ckpt.state_path(run, 2)
    recorded = json.loads((run / "config.json").read_text())["arch"]["H_cycles"]

    def other_depth(s):
        c = json.loads(s["config"])
        c["arch"]["H_cycles"] = recorded + 2
        s["config"] = json.dumps(c)

    _rewrite(path, other_depth)
    assert main(["export", str(run), "--out", str(tmp_path / "exp")]) == 0
    err = "\n".join(r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert f"records arch.H_cycles={recorded} where {path.name} was trained with {recorded + 2}: the export follows" \
        in err, err
    assert json.loads((tmp_path / "exp" / "config.json").read_text())["arch"]["H_cycles"] == recorded + 2


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


def _first_moment(s):
    """The first per-parameter tensor of the saved optimizer state (a moment or a momentum buffer)."""
    for st in s["optimizer"]["state"].values():
        for name, t in st.items():
            if isinstance(t, torch.Tensor) and t.dim() > 0:
                return st, name
    raise AssertionError("no per-parameter tensor in the optimizer state")


def _shrunk_moment(s):
    st, name = _first_moment(s)
    st[name] = torch.zeros(2, 2)


def _shrunk_carry(s):
    s["carries"][0][0]["z_H"] = torch.zeros(1, 1)


def _nan_weight(s):
    name = next(k for k, t in s["model"].items() if t.is_floating_point())
    w = s["model"][name].clone()
    w.view(-1)[0] = float("nan")
    s["model"][name] = w


def _other_tensor_shape(s):
    name = next(k for k, t in s["model"].items() if t.is_floating_point() and t.dim() == 2)
    s["model"][name] = torch.zeros(3, 3)


def _resumed_after(data, tmp_path, capsys, change):
    """(the run, its state at step 2 changed by `change` and signed again, the one error line resuming it)."""
    run = tmp_path / "run"
    assert main(train_args(data, run, "max_steps=2")) == 0
    path = ckpt.state_path(run, 2)
    _rewrite(path, change)
    capsys.readouterr()
    return run, path, one_error_line(capsys, main(train_args(data, run, "max_steps=4")))


@pytest.mark.parametrize("change, said", [
    (_other_tensor_shape, "field 'model' does not fit this run: its weights: weights do not match the model config: "
                          "tensor shapes do not match"),
    (_shrunk_moment, "field 'optimizer' does not fit this run: ValueError: its "),
    (_shrunk_carry, "field 'carries' does not fit this run: ValueError: latent states of shape (1, 1)"),
])
def test_tensors_of_other_sizes_are_one_line_on_resume_never_a_traceback_or_a_silent_broadcast(
        data, tmp_path, capsys, change, said):
    """Signed and well formed, but sized for another model: refused when restored (a model tensor once a
    traceback from load_state_dict, a moment one from the first step, a carry broadcast silently)."""
    run, path, line = _resumed_after(data, tmp_path, capsys, change)
    assert str(path) in line and said in line, line
    assert ckpt.list_states(run) == [path]  # nothing trained, nothing written


def test_a_state_holding_nan_weights_is_damaged_and_the_newest_good_one_resumed(data, tmp_path, caplog):
    """A run never saves NaN or inf (its save refuses them), so a state holding them was not written by one:
    resumed, it would fail at the next save with advice about the learning rate."""
    run = tmp_path / "run"
    assert main(train_args(data, run, "max_steps=2")) == 0
    assert main(train_args(data, run, "max_steps=3")) == 0
    bad = ckpt.state_path(run, 3)
    _rewrite(bad, _nan_weight)
    with pytest.raises(ckpt.DamagedFile, match="field 'model' tensor .* holds 1 non-finite value \\(NaN or inf\\)"):
        ckpt.load_train_state(bad)
    assert main(train_args(data, run, "max_steps=4")) == 0
    assert "state_step00000003.pt: not a usable train state" in caplog.text
    assert ckpt.newest_step(run) == 4 and (run / "state_step00000003.pt.corrupt").exists()


def _half_carry(s):
    c = s["carries"][0][0]
    c["z_H"] = c["z_H"].to(torch.float16)


def _short_inputs(s):
    c = s["carries"][0][0]["current_data"]
    c["inputs"] = c["inputs"][:, :3]


def _foreign_token(s):
    c = s["carries"][0][0]["current_data"]
    c["inputs"] = torch.full_like(c["inputs"], 99)


@pytest.mark.parametrize("change, said", [
    (_half_carry, "latent states in torch.float16 and torch.float32, this run computes in torch.float32"),
    (_short_inputs, "data rows whose inputs are not"),
    (_foreign_token, "input tokens outside this model's vocabulary"),
])
def test_a_carry_this_model_cannot_read_is_one_line_on_resume(data, tmp_path, capsys, change, said):
    """Once a traceback inside the first step (a dtype mismatch, a short row, an embedding index)."""
    run, path, line = _resumed_after(data, tmp_path, capsys, change)
    assert str(path) in line and "field 'carries' does not fit this run" in line and said in line, line


def _float_halted(s):
    c = s["carries"][0][0]
    c["halted"] = c["halted"].float()


def _foreign_label(s):
    c = s["carries"][0][0]["current_data"]
    c["labels"] = torch.full_like(c["labels"], 77)


def _huge_step_count(s):
    c = s["carries"][0][0]
    c["steps"] = torch.full_like(c["steps"], 100)  # past this run's halt_max_steps, far below the setting's bound


@pytest.mark.parametrize("change, said", [
    (_float_halted, "halt flags that are not booleans"),
    (_huge_step_count, "step counts that are not whole numbers from 0 to "),
    (_foreign_label, "label tokens that are neither inside this model's vocabulary"),
])
def test_carry_flags_counts_and_labels_no_run_writes_are_one_line(data, tmp_path, capsys, change, said):
    run, path, line = _resumed_after(data, tmp_path, capsys, change)
    assert str(path) in line and said in line, line


def _inf_moment(s):
    st, name = _first_moment(s)
    m = st[name].clone()
    m.view(-1)[0] = float("inf")
    st[name] = m


def _nan_beta(s):
    group = s["optimizer"]["param_groups"][0]
    key = next(k for k, v in group.items() if isinstance(v, (list, tuple)) and v and isinstance(v[0], float))
    group[key] = (float("nan"), *group[key][1:])


def _step_count(value):
    def change(s):
        st = next(st for st in s["optimizer"]["state"].values() if "step" in st)
        st["step"] = torch.tensor(value) if isinstance(st["step"], torch.Tensor) else value
    return change


@pytest.mark.parametrize("change, said", [(_inf_moment, "field 'optimizer' tensor"),
                                          (_nan_beta, "field 'optimizer' setting"),
                                          (_step_count(-5.0), "step is -5.0; a run counts its steps"),
                                          (_step_count(2.5), "step is 2.5; a run counts its steps")])
def test_a_non_finite_optimizer_state_makes_the_state_damaged(data, tmp_path, change, said):
    """Once resumed and then blamed on the learning rate ("the run diverged") at the next save."""
    run = tmp_path / "run"
    assert main(train_args(data, run, "max_steps=2")) == 0
    _rewrite(ckpt.state_path(run, 2), change)
    with pytest.raises(ckpt.DamagedFile, match=said):
        ckpt.load_train_state(ckpt.state_path(run, 2))


def _settings_change(name, value):
    def change(s):
        s["optimizer"]["param_groups"][0][name] = value
    return change


@pytest.mark.parametrize("change, said", [
    (_settings_change("betas", (5.0, 0.95)), "group 0's setting 'betas' is (5.0, 0.95), this run's settings give "
                                             "(0.9, 0.95)"),
    (_settings_change("weight_decay", -1.0), "group 0's setting 'weight_decay' is -1.0"),
    (lambda s: s["optimizer"]["param_groups"][0].pop("betas"), "group 0's setting 'betas' is 'missing'"),
])
def test_optimizer_settings_no_run_of_these_settings_writes_are_one_line(data, tmp_path, capsys, change, said):
    """The config is the run's (checked first), so group settings of other values were not written by it:
    torch's load_state_dict takes them as they are, and the run would go on silently with them."""
    run, path, line = _resumed_after(data, tmp_path, capsys, change)
    assert str(path) in line and "field 'optimizer' does not fit this run: ValueError: " + said in line, line
    assert ckpt.list_states(run) == [path]


def test_a_data_position_of_another_stream_names_the_file_and_the_field(data, tmp_path, capsys):
    def other_seed(s):
        position = json.loads(s["loader"])
        position["seed"] += 7
        s["loader"] = json.dumps(position)
    run, path, line = _resumed_after(data, tmp_path, capsys, other_seed)
    assert f"{path}: field 'loader' does not fit this run: cannot resume the data stream exactly: the saved " \
           "state has seed=" in line and "strict" not in line, line


def _one_moment_lost(s):
    """The first parameter with a moment loses one of them (its exp_avg_sq, or a Muon momentum buffer)."""
    for st in s["optimizer"]["state"].values():
        if len(st) > 1:
            del st[next(k for k in st if k != "step")]
            return
    raise AssertionError("no parameter state with a moment")


def test_a_parameter_state_lacking_what_the_others_hold_is_refused_not_zeroed(data, tmp_path, capsys):
    """torch's load_state_dict takes a parameter whose moment is gone and the step starts it at zero: the
    resumed run silently differed from the uninterrupted one. Now it is one line naming what is missing."""
    run, path, line = _resumed_after(data, tmp_path, capsys, _one_moment_lost)
    assert str(path) in line and "field 'optimizer' does not fit this run" in line, line
    assert "parameters hold different state: some lack" in line, line
    assert ckpt.list_states(run) == [path]


@pytest.mark.parametrize("change, said", [
    (lambda s: s["optimizer"]["state"].pop(max(s["optimizer"]["state"])), "1 of group 0's"),
    (lambda s: s["optimizer"]["state"].clear(), "hold no state, yet the run took 2 optimizer steps"),
])
def test_a_parameter_without_optimizer_state_is_refused_not_started_afresh(data, tmp_path, capsys, change, said):
    """Every parameter gets a gradient at every step: one whose state is gone (or all of them) resumed silently
    inexact, the optimizer starting it afresh. Now one line naming it."""
    run, path, line = _resumed_after(data, tmp_path, capsys, change)
    assert str(path) in line and "field 'optimizer' does not fit this run" in line and said in line, line
    assert "parameters hold no state" in line, line


def _one_step_count_behind(s):
    states = s["optimizer"]["state"]
    first = states[min(states)]
    first["step"] = torch.zeros_like(first["step"]) if isinstance(first["step"], torch.Tensor) else 0


def test_a_parameter_whose_step_count_lags_its_groups_is_refused(data, tmp_path, capsys):
    """One parameter's Adam step count at 0 while the state and every other parameter were at 2: the resume went
    on without a word, that parameter's bias correction restarted, and the losses differed from an unbroken run."""
    run, path, line = _resumed_after(data, tmp_path, capsys, _one_step_count_behind)
    assert str(path) in line and "field 'optimizer' does not fit this run" in line, line
    assert "parameters have taken different numbers of steps (0, 2;" in line, line


def _swapped_parameters(s):
    params = s["optimizer"]["param_groups"][0]["params"]
    params[0], params[-1] = params[-1], params[0]


def test_parameters_listed_in_another_order_are_refused_not_given_each_others_moments(data, tmp_path, capsys):
    """torch pairs a group's parameters by position: two of one shape listed the other way round took each
    other's moments, and the resume was silently inexact."""
    run, path, line = _resumed_after(data, tmp_path, capsys, _swapped_parameters)
    assert str(path) in line and "field 'optimizer' does not fit this run" in line, line
    assert "list the parameters in another order than this run's optimizer numbers them" in line, line


@pytest.mark.parametrize("key, extra", [("sparse_optimizer", ()), ("optimizer", ()), ("ema", ("ema=true",))])
def test_a_part_the_run_keeps_missing_from_its_state_is_refused_not_restarted(data, tmp_path, capsys, key, extra):
    """`sparse_optimizer: None` (the puzzle rows' optimizer) resumed without a word, the optimizer restarted:
    the resume was no longer exact. Only a state that trained with frozen weights lacks the weights' optimizer."""
    run = tmp_path / "run"
    assert main(train_args(data, run, "max_steps=2", *extra)) == 0
    path = ckpt.state_path(run, 2)
    _rewrite(path, lambda s: s.update({key: None}))
    capsys.readouterr()
    line = one_error_line(capsys, main(train_args(data, run, "max_steps=3", *extra)))
    assert str(path) in line and f"field {key!r} does not fit this run: it is missing" in line, line
    assert ckpt.list_states(run) == [path]


def test_a_state_whose_rank_holds_no_carry_is_damaged_and_an_older_one_resumed(data, tmp_path):
    """`carries: [[]]` (a rank with no micro-batch carry) was a traceback (IndexError) inside the first step."""
    run = tmp_path / "run"
    assert main(train_args(data, run, "max_steps=2")) == 0
    assert main(train_args(data, run, "max_steps=3")) == 0
    _rewrite(ckpt.state_path(run, 3), lambda s: s.update(carries=[[]]))
    with pytest.raises(ckpt.DamagedFile, match="field 'carries' is a list; it must be a list of each rank's non-empty"):
        ckpt.load_train_state(ckpt.state_path(run, 3))
    assert main(train_args(data, run, "max_steps=4")) == 0
    assert ckpt.newest_step(run) == 4 and (run / "state_step00000003.pt.corrupt").exists()


def test_a_state_without_carries_resumes_with_a_word_that_it_is_not_exact(data, tmp_path, caplog):
    run = tmp_path / "run"
    assert main(train_args(data, run, "max_steps=2")) == 0
    _rewrite(ckpt.state_path(run, 2), lambda s: s.update(carries=None))
    assert main(train_args(data, run, "max_steps=3")) == 0
    assert "holds no ACT carries: they restart (results differ slightly from an unbroken run)" in caplog.text


def test_a_negative_mean_of_squares_makes_the_state_damaged_and_an_older_one_resumed(data, tmp_path, caplog):
    """An Adam second moment below 0 passed every check, and its square root made the weights NaN at the first
    step: "training diverged, lower lr", at every later resume too, while a good older state stood."""
    run = tmp_path / "run"
    assert main(train_args(data, run, "max_steps=2")) == 0
    assert main(train_args(data, run, "max_steps=3")) == 0

    def negative(s):
        st = next(st for st in s["optimizer"]["state"].values() if "exp_avg_sq" in st)
        st["exp_avg_sq"] = st["exp_avg_sq"].clone()
        st["exp_avg_sq"].view(-1)[0] = -1.0

    _rewrite(ckpt.state_path(run, 3), negative)
    with pytest.raises(ckpt.DamagedFile, match="field 'optimizer' tensor .*exp_avg_sq holds 1 negative value"):
        ckpt.load_train_state(ckpt.state_path(run, 3))
    assert main(train_args(data, run, "max_steps=4")) == 0
    assert ckpt.newest_step(run) == 4 and (run / "state_step00000003.pt.corrupt").exists()


@pytest.mark.parametrize("change, said", [
    (lambda s: s["model"].update({"extra.weight": torch.zeros(3)}), "keys this model does not have extra.weight"),
    (lambda s: s["model"].pop("lm_head.weight"), "missing keys lm_head.weight"),
    (lambda s: s["model"].update({"lm_head.weight": s["model"]["lm_head.weight"].to(torch.int64)}),
     "tensors of another dtype than the model's: lm_head.weight torch.int64"),
])
def test_model_tensors_named_whole_on_resume(data, tmp_path, capsys, change, said):
    """A key too many or too few was one line cut at torch's first ("Error(s) in loading state_dict for
    TinyRecursiveModel:"), and an integer tensor was copied into the weights without a word."""
    run, path, line = _resumed_after(data, tmp_path, capsys, change)
    assert str(path) in line and "field 'model' does not fit this run" in line and said in line, line


def _nan_carry(s):
    z = s["carries"][0][0]["z_L"].clone()
    z.view(-1)[0] = float("nan")
    s["carries"][0][0]["z_L"] = z


def _nan_sparse(s):  # the puzzle embeddings' optimizer is a field of its own: its NaN is not the dense one's
    moment = torch.zeros(3)
    moment[1] = float("nan")
    s["sparse_optimizer"] = {"state": {0: {"step": torch.tensor(2.0), "exp_avg": moment}},
                             "param_groups": (s.get("sparse_optimizer") or {}).get("param_groups") or []}


def _integer_moment(s):  # torch's load_state_dict cast it to the weights' dtype: a silently inexact resume
    st = next(st for st in s["optimizer"]["state"].values() if "exp_avg" in st)
    st["exp_avg"] = st["exp_avg"].to(torch.int64)


def _far_step(s):  # an optimizer steps at most once per training step: another bias correction, silently
    st = next(st for st in s["optimizer"]["state"].values() if "step" in st)
    st["step"] = torch.tensor(1e18)


@pytest.mark.parametrize("change, said", [
    (_nan_carry, "field 'carries' tensor carry 0.z_L holds 1 non-finite value"),
    (_nan_sparse, "field 'sparse_optimizer' tensor 0.exp_avg holds 1 non-finite value"),
    (_integer_moment, "tensor .*exp_avg is torch.int64; a run saves its optimizer's state"),
    (_far_step, "state 0.step is [0-9]{18}, past the state.s own step 2"),
])
def test_values_no_run_saves_make_the_state_damaged(data, tmp_path, change, said):
    run = tmp_path / "run"
    assert main(train_args(data, run, "max_steps=2")) == 0
    _rewrite(ckpt.state_path(run, 2), change)
    with pytest.raises(ckpt.DamagedFile, match=said):
        ckpt.load_train_state(ckpt.state_path(run, 2))


def _int_step(s):
    for st in s["optimizer"]["state"].values():
        st["step"] = 2


def _float64_weight(s):
    s["model"]["lm_head.weight"] = s["model"]["lm_head.weight"].double() + 1e300


def _float64_moment(s):
    st = next(st for st in s["optimizer"]["state"].values() if "exp_avg_sq" in st)
    st["exp_avg_sq"] = st["exp_avg_sq"].double() * 0 + 1e300


def _float8_weight(s):
    s["model"]["lm_head.weight"] = s["model"]["lm_head.weight"].to(torch.float8_e4m3fn)


@pytest.mark.parametrize("change, said", [
    (_int_step, "field 'optimizer' is a dict; it must be an optimizer's state (a mapping with 'state', of tensors"),
    # torch has no isfinite for float8: the check itself was a traceback
    (_float8_weight, "'model' tensor lm_head.weight is torch.float8_e4m3fn; a run saves float32"),
    (_float64_weight, "'model' tensor lm_head.weight is torch.float64; a run saves float32"),
    (_float64_moment, "exp_avg_sq is torch.float64; a run saves float32"),
])
def test_numbers_no_run_saves_make_the_state_damaged_and_an_older_one_resumed(data, tmp_path, change, said):
    """A Python number where a moment goes was a traceback inside the optimizer's first step; a float64 tensor
    of 1e300 turned inf when cast to the run's float32, and the run diverged at every resume."""
    run = tmp_path / "run"
    assert main(train_args(data, run, "max_steps=2")) == 0
    assert main(train_args(data, run, "max_steps=3")) == 0
    _rewrite(ckpt.state_path(run, 3), change)
    with pytest.raises(ckpt.DamagedFile, match=re.escape(said)):
        ckpt.load_train_state(ckpt.state_path(run, 3))
    assert main(train_args(data, run, "max_steps=4")) == 0
    assert ckpt.newest_step(run) == 4 and (run / "state_step00000003.pt.corrupt").exists()


def _bf16_weight(s):
    s["model"]["lm_head.weight"] = s["model"]["lm_head.weight"].bfloat16()


def _bf16_moment(s):
    st = next(st for st in s["optimizer"]["state"].values() if "exp_avg" in st)
    st["exp_avg"] = st["exp_avg"].bfloat16()


@pytest.mark.parametrize("change, said", [
    (_bf16_weight, "field 'model' does not fit this run: its weights: weights do not match the model config: "
                   "tensors of another dtype than the model's: lm_head.weight torch.bfloat16"),
    (_bf16_moment, "field 'optimizer' does not fit this run: ValueError: its 'exp_avg' of parameter"),
])
def test_a_tensor_in_another_dtype_than_the_runs_is_one_line_not_a_rounded_resume(data, tmp_path, capsys, change,
                                                                                 said):
    run, path, line = _resumed_after(data, tmp_path, capsys, change)
    assert str(path) in line and said in line, line


def _ema_int(s):
    s["ema"] = {k: v.to(torch.int64) for k, v in s["ema"].items()}


def _ema_buffer(s):
    s["ema"]["H_init"] = torch.zeros(3)


def _ema_shape(s):
    k = next(iter(s["ema"]))
    s["ema"][k] = torch.zeros(3, 3)


@pytest.mark.parametrize("change, said", [
    (_ema_int, "tensors that are not floating point"),
    (_ema_buffer, "names that are no parameter of the model: H_init"),
    (_ema_shape, "shapes that differ"),
])
def test_averaged_weights_no_run_saves_are_one_line_in_export_and_resume(data, tmp_path, capsys, change, said):
    """`export` copied a state's EMA into the model unchecked: integers cast in without a word, a buffer's name or
    another shape a traceback. Checked by one rule in `export` and in a resume."""
    run = tmp_path / "run"
    assert main(train_args(data, run, "max_steps=2", "ema=true")) == 0
    _rewrite(ckpt.state_path(run, 2), change)
    capsys.readouterr()
    for argv in (["export", str(run), "--out", str(tmp_path / "exp")],
                 train_args(data, run, "max_steps=3", "ema=true")):
        line = one_error_line(capsys, main(argv))
        assert "field 'ema'" in line and said in line, line
    assert not (tmp_path / "exp").exists()


def test_averaged_weights_in_a_run_without_ema_are_refused_by_export(data, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(train_args(data, run, "max_steps=2", "ema=false")) == 0
    _rewrite(ckpt.state_path(run, 2), lambda s: s.update(ema={k: v.clone() for k, v in s["model"].items()
                                                               if k.endswith("weight") and "puzzle" not in k}))
    capsys.readouterr()
    line = one_error_line(capsys, main(["export", str(run), "--out", str(tmp_path / "exp")]))
    assert "field 'ema': averaged weights in a run whose settings say ema=false" in line, line


@pytest.mark.parametrize("version, newer", [("99.0.0", True), ("0.0.1", False), ("9" * 5000, True), ("dev", False)])
def test_a_state_of_a_newer_version_is_read_with_a_warning(data, tmp_path, caplog, version, newer):
    """A state a later package wrote was resumed without a word: its format is ours, its settings may not be."""
    run = tmp_path / "run"
    assert main(train_args(data, run, "max_steps=2")) == 0
    path = ckpt.state_path(run, 2)
    _rewrite(path, lambda s: s.update(version=version))
    caplog.clear()
    assert ckpt.load_train_state(path)["step"] == 2
    assert ("newer than this" in caplog.text) == newer, caplog.text


@pytest.mark.parametrize("kind, said", [("meta", "meta"), ("sparse", "sparse_coo"), ("nested", "nested")])
def test_a_state_holding_a_tensor_without_plain_data_is_damaged_not_a_traceback(data, tmp_path, capsys, kind, said):
    """A meta or sparse tensor (no run saves one) crashed the checksum itself: `train` and `export` ended in a
    traceback. The state is damaged: an older one resumes, and `export` of the file says so in one line."""
    run = tmp_path / "run"
    assert main(train_args(data, run, "max_steps=2")) == 0
    path = ckpt.state_path(run, 2)
    state = torch.load(path, map_location="cpu", weights_only=True)
    name = next(iter(state["model"]))
    weight = state["model"][name]
    state["model"][name] = (weight.to("meta") if kind == "meta" else weight.to_sparse() if kind == "sparse"
                            else torch.nested.nested_tensor([weight, weight]))
    torch.save(state, path)  # its recorded checksum stays: no digest of such a tensor can be made
    with pytest.raises(ckpt.DamagedFile, match=f"not a usable train state: it holds a {said} tensor"):
        ckpt.load_train_state(path)
    capsys.readouterr()
    line = one_error_line(capsys, main(["export", str(path), "--out", str(tmp_path / "exp")]))
    assert f"it holds a {said} tensor" in line and not (tmp_path / "exp").exists()
