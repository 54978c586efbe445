"""Training settings: upstream command lines, overrides, config files, round trips (presets: test_presets.py)."""

from __future__ import annotations

import json
import re
import shlex
import textwrap

import pytest
import yaml

from trm_kaggle.config import TrainConfig
from trm_kaggle.errors import TRMError
from trm_kaggle.train.config_layers import valid_keys
from trm_kaggle.train.overrides import parse_override, parse_value, split_cli_args
from trm_kaggle.train.settings import apply_overrides, dump_config, is_upstream_run_config, load_train_config

# ---------------------------------------------------------------------------
# upstream README training commands, as a user pastes them
# ---------------------------------------------------------------------------

README_COMMANDS = {
    "pretrain_mlp_t_sudoku": """python pretrain.py \\
        arch=trm \\
        data_paths="[data/sudoku-extreme-1k-aug-1000]" \\
        evaluators="[]" \\
        epochs=50000 eval_interval=5000 \\
        lr=1e-4 puzzle_emb_lr=1e-4 weight_decay=1.0 puzzle_emb_weight_decay=1.0 \\
        arch.mlp_t=True arch.pos_encodings=none \\
        arch.L_layers=2 \\
        arch.H_cycles=3 arch.L_cycles=6 \\
        +run_name=${run_name} ema=True""",
    "pretrain_att_sudoku": """python pretrain.py \\
        arch=trm \\
        data_paths="[data/sudoku-extreme-1k-aug-1000]" \\
        evaluators="[]" \\
        epochs=50000 eval_interval=5000 \\
        lr=1e-4 puzzle_emb_lr=1e-4 weight_decay=1.0 puzzle_emb_weight_decay=1.0 \\
        arch.L_layers=2 \\
        arch.H_cycles=3 arch.L_cycles=6 \\
        +run_name=${run_name} ema=True""",
    "pretrain_att_maze30x30": """torchrun --nproc-per-node 4 --rdzv_backend=c10d --rdzv_endpoint=localhost:0 \\
        --nnodes=1 pretrain.py \\
        arch=trm \\
        data_paths="[data/maze-30x30-hard-1k]" \\
        evaluators="[]" \\
        epochs=50000 eval_interval=5000 \\
        lr=1e-4 puzzle_emb_lr=1e-4 weight_decay=1.0 puzzle_emb_weight_decay=1.0 \\
        arch.L_layers=2 \\
        arch.H_cycles=3 arch.L_cycles=4 \\
        +run_name=${run_name} ema=True""",
    "pretrain_att_maze30x30_1gpu": """python pretrain.py \\
        arch=trm \\
        data_paths="[data/maze-30x30-hard-1k]" \\
        evaluators="[]" \\
        epochs=50000 eval_interval=5000 \\
        lr=1e-4 puzzle_emb_lr=1e-4 weight_decay=1.0 puzzle_emb_weight_decay=1.0 global_batch_size=128 \\
        arch.L_layers=2 \\
        arch.H_cycles=3 arch.L_cycles=4 \\
        +run_name=${run_name} ema=True""",
    "pretrain_att_arc1concept_4": """torchrun --nproc-per-node 4 --rdzv_backend=c10d --rdzv_endpoint=localhost:0 \\
        --nnodes=1 pretrain.py \\
        arch=trm \\
        data_paths="[data/arc1concept-aug-1000]" \\
        arch.L_layers=2 \\
        arch.H_cycles=3 arch.L_cycles=4 \\
        +run_name=${run_name} ema=True""",
    "pretrain_att_arc2concept_4": """torchrun --nproc-per-node 4 --rdzv_backend=c10d --rdzv_endpoint=localhost:0 \\
        --nnodes=1 pretrain.py \\
        arch=trm \\
        data_paths="[data/arc2concept-aug-1000]" \\
        arch.L_layers=2 \\
        arch.H_cycles=3 arch.L_cycles=4 \\
        +run_name=${run_name} ema=True""",
}

# which preset (combination) reproduces each README command
README_PRESETS = {
    "pretrain_mlp_t_sudoku": ["sudoku-mlp"],
    "pretrain_att_sudoku": ["sudoku-att"],
    "pretrain_att_maze30x30": ["maze"],
    "pretrain_att_maze30x30_1gpu": ["maze+batch128"],
    "pretrain_att_arc1concept_4": ["arc1"],
    "pretrain_att_arc2concept_4": ["arc2"],
}


def readme_overrides(run_name: str, shell: bool = True) -> list[str]:
    """The key=value words after `pretrain.py`, as the shell hands them over (quotes removed, $run_name expanded)."""
    text = README_COMMANDS[run_name].replace("${run_name}", run_name).replace("\\\n", " ")  # line continuations
    words = shlex.split(text) if shell else text.split()
    words = words[words.index("pretrain.py") + 1:]
    flags, overrides = split_cli_args(words)
    assert flags == []
    return overrides


@pytest.mark.parametrize("shell", [True, False], ids=["shell-unquoted", "quotes-kept"])
def test_readme_sudoku_mlp(shell):
    cfg = load_train_config(overrides=readme_overrides("pretrain_mlp_t_sudoku", shell))
    assert cfg.data_paths == ["data/sudoku-extreme-1k-aug-1000"]
    assert cfg.evaluators == []
    assert (cfg.epochs, cfg.eval_interval) == (50000, 5000)
    assert (cfg.lr, cfg.puzzle_emb_lr) == (1e-4, 1e-4)
    assert (cfg.weight_decay, cfg.puzzle_emb_weight_decay) == (1.0, 1.0)
    assert cfg.arch.mlp_t is True and cfg.arch.pos_encodings == "none"
    assert (cfg.arch.L_layers, cfg.arch.H_cycles, cfg.arch.L_cycles) == (2, 3, 6)
    assert cfg.run_name == "pretrain_mlp_t_sudoku"
    assert cfg.ema is True
    assert cfg.global_batch_size == 768  # upstream default, untouched


@pytest.mark.parametrize("shell", [True, False], ids=["shell-unquoted", "quotes-kept"])
def test_readme_sudoku_attention_and_maze(shell):
    att = load_train_config(overrides=readme_overrides("pretrain_att_sudoku", shell))
    assert att.arch.mlp_t is False and att.arch.pos_encodings == "rope"
    assert (att.arch.H_cycles, att.arch.L_cycles) == (3, 6)
    maze = load_train_config(overrides=readme_overrides("pretrain_att_maze30x30", shell))
    assert maze.data_paths == ["data/maze-30x30-hard-1k"]
    assert (maze.arch.H_cycles, maze.arch.L_cycles, maze.global_batch_size) == (3, 4, 768)
    maze1 = load_train_config(overrides=readme_overrides("pretrain_att_maze30x30_1gpu", shell))
    assert maze1.global_batch_size == 128
    assert maze1.model_copy(update={"global_batch_size": 768, "run_name": maze.run_name}) == maze


@pytest.mark.parametrize("shell", [True, False], ids=["shell-unquoted", "quotes-kept"])
def test_readme_arc(shell):
    for name, path in (("pretrain_att_arc1concept_4", "data/arc1concept-aug-1000"),
                       ("pretrain_att_arc2concept_4", "data/arc2concept-aug-1000")):
        cfg = load_train_config(overrides=readme_overrides(name, shell))
        assert cfg.data_paths == [path]
        assert (cfg.arch.L_layers, cfg.arch.H_cycles, cfg.arch.L_cycles) == (2, 3, 4)
        assert cfg.ema is True and cfg.run_name == name
        # cfg_pretrain.yaml defaults
        assert (cfg.global_batch_size, cfg.epochs, cfg.eval_interval) == (768, 100000, 10000)
        assert (cfg.lr, cfg.puzzle_emb_lr, cfg.weight_decay, cfg.puzzle_emb_weight_decay) == (1e-4, 1e-2, 0.1, 0.1)


@pytest.mark.parametrize("run_name", list(README_COMMANDS))
def test_presets_reproduce_readme_commands(run_name):
    from_readme = load_train_config(overrides=readme_overrides(run_name))
    from_preset = load_train_config(presets=README_PRESETS[run_name], overrides=[f"+run_name={run_name}"])
    assert from_preset == from_readme


def test_torchrun_flags_are_split_from_overrides():
    words = shlex.split(README_COMMANDS["pretrain_att_arc2concept_4"].replace("${run_name}", "x").replace("\\\n", " "))
    flags, overrides = split_cli_args(words)
    assert flags == ["torchrun", "--nproc-per-node", "4", "--rdzv_backend=c10d", "--rdzv_endpoint=localhost:0",
                     "--nnodes=1", "pretrain.py"]
    assert overrides[0] == "arch=trm" and overrides[-1] == "ema=True"


# ---------------------------------------------------------------------------
# override syntax
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["", "+", "++"])
def test_plus_prefixes(prefix):
    cfg = load_train_config(overrides=[f"{prefix}run_name=foo", f"{prefix}arch.L_cycles=4"])
    assert cfg.run_name == "foo" and cfg.arch.L_cycles == 4


@pytest.mark.parametrize("text,expected", [
    ('data_paths="[data/arc2concept-aug-1000]"', ["data/arc2concept-aug-1000"]),
    ("data_paths=[data/arc2concept-aug-1000]", ["data/arc2concept-aug-1000"]),
    ("data_paths=[data/a,data/b]", ["data/a", "data/b"]),
    ("data_paths='[data/a, data/b]'", ["data/a", "data/b"]),
    ("data_paths=['data/a','data/b']", ["data/a", "data/b"]),
    ("data_paths=[]", []),
    ('data_paths="[]"', []),
    ("data_paths=data/a", ["data/a"]),
    ("data_paths=data/a,data/b", ["data/a", "data/b"]),
])
def test_list_syntax(text, expected):
    assert load_train_config(overrides=[text]).data_paths == expected


def test_evaluators():
    assert load_train_config(overrides=['evaluators="[]"']).evaluators == []
    assert load_train_config(overrides=["evaluators=[{name: arc@ARC}]"]).evaluators == [{"name": "arc@ARC"}]


@pytest.mark.parametrize("word,value", [("True", True), ("true", True), ("TRUE", True),
                                        ("False", False), ("false", False)])
def test_booleans_in_both_cases(word, value):
    cfg = load_train_config(overrides=[f"ema={word}", f"arch.mlp_t={word}"])
    assert cfg.ema is value and cfg.arch.mlp_t is value


def test_scalars():
    cfg = load_train_config(overrides=["lr=1e-4", "puzzle_emb_lr=2E-3", "weight_decay=1", "global_batch_size=768",
                                       "beta2=.99", "arch.expansion=2.5", "checkpoint_path=null",
                                       "load_checkpoint=None", "eval_interval=null", "lr_min_ratio=1.0"])
    assert cfg.lr == 1e-4 and isinstance(cfg.lr, float)
    assert cfg.puzzle_emb_lr == 2e-3 and cfg.weight_decay == 1.0 and cfg.beta2 == 0.99
    assert cfg.global_batch_size == 768 and cfg.arch.expansion == 2.5
    assert cfg.checkpoint_path is None and cfg.load_checkpoint is None and cfg.eval_interval is None


def test_string_fields_keep_what_was_typed():
    cfg = load_train_config(overrides=["+run_name=123", "project_name=1e-4", "checkpoint_path=runs/True"])
    assert (cfg.run_name, cfg.project_name, cfg.checkpoint_path) == ("123", "1e-4", "runs/True")
    assert load_train_config(overrides=["arch.pos_encodings=none"]).arch.pos_encodings == "none"
    assert load_train_config(overrides=["arch.forward_dtype=bfloat16"]).arch.forward_dtype == "bfloat16"


def test_parse_value_and_override():
    assert parse_value("1e-4") == 1e-4
    assert parse_value("null") is None and parse_value("None") is None
    assert parse_value("none") == "none"
    assert parse_value("[1, 2.5, x, 'y z']") == [1, 2.5, "x", "y z"]
    assert parse_override("++arch.L_cycles=4") == ("arch.L_cycles", 4)
    with pytest.raises(TRMError, match="key=value"):
        parse_override("arch.L_cycles")
    with pytest.raises(TRMError, match="cannot parse"):
        parse_override("data_paths=[a,b")


@pytest.mark.parametrize("text, close", [("lr=[", "]"), ("lr={", "}"), ("lr=[1,", "]"), ("lr=[[", "]"),
                                         ("lr={a:", "}"), ("lr={a", "}"), ("lr={'a': [1]", "}")])
def test_a_value_ending_inside_brackets_is_one_line(text, close, capsys):
    """`lr=[` was an IndexError traceback (exit 1) in train, doctor, sweep and build_bundle.py: the end of the text
    was taken for a quote, since "" is in every string."""
    from trm_kaggle.cli import main

    with pytest.raises(TRMError, match=re.escape(f"the text ends before the closing '{close}'")):
        parse_override(text)
    assert main(["train", "--print-config", text]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"the text ends before the closing '{close}'" in err[0], err


def test_arch_selection():
    assert load_train_config(overrides=["arch=trm"]) == TrainConfig()
    with pytest.raises(TRMError, match="arch=hrm.*TRM only"):
        load_train_config(overrides=["arch=hrm"])
    ok = ["arch.name=recursive_reasoning.trm@TinyRecursiveReasoningModel_ACTV1", "arch.loss.name=losses@ACTLossHead"]
    assert load_train_config(overrides=ok) == TrainConfig()
    with pytest.raises(TRMError, match="arch.name"):
        load_train_config(overrides=["arch.name=hrm.hrm_act_v1@HierarchicalReasoningModel_ACTV1"])
    with pytest.raises(TRMError, match="arch.loss.name"):
        load_train_config(overrides=["arch.loss.name=losses@SomeOtherHead"])


def test_loss_type_mapping():
    cfg = load_train_config(overrides=["arch.loss.loss_type=softmax_cross_entropy"])
    assert cfg.arch.loss_type == "softmax_cross_entropy"
    with pytest.raises(TRMError, match="arch.loss_type"):
        load_train_config(overrides=["arch.loss.loss_type=hinge"])


def test_interpolation():
    cfg = load_train_config(overrides=["arch.puzzle_emb_ndim=${.hidden_size}", "arch.hidden_size=256"])
    assert cfg.arch.puzzle_emb_ndim is None and cfg.arch.emb_ndim == 256
    cfg = load_train_config(overrides=["+run_name=r", "project_name=p_${run_name}", "arch.L_cycles=${.H_cycles}"])
    assert cfg.project_name == "p_r" and cfg.arch.L_cycles == cfg.arch.H_cycles
    with pytest.raises(TRMError, match="cannot resolve"):
        load_train_config(overrides=["project_name=${nothing}"])


@pytest.mark.parametrize("text,suggestion", [
    ("arch.L_cycle=4", "arch.L_cycles"),
    ("L_cycles=4", "arch.L_cycles"),
    ("global_batchsize=64", "global_batch_size"),
    ("arch.hiden_size=64", "arch.hidden_size"),
    ("curriculum.start_L_cycle=2", "curriculum.start_L_cycles"),
    ("ema_rat=0.9", "ema_rate"),
])
def test_unknown_key_suggestion(text, suggestion):
    key = text.split("=")[0]
    with pytest.raises(TRMError) as info:
        load_train_config(overrides=[text])
    assert repr(key) in str(info.value)
    assert f"did you mean {suggestion}?" in str(info.value)


@pytest.mark.parametrize("text,key", [
    ("global_batch_size=abc", "global_batch_size"),
    ("arch.L_cycles=many", "arch.L_cycles"),
    ("lr=fast", "lr"),
    ("ema=maybe", "ema"),
    ("arch.pos_encodings=alibi", "arch.pos_encodings"),
    ("global_batch_size=0", "global_batch_size"),
    ("data_paths=[[a]]", "data_paths"),
])
def test_type_errors_name_the_key(text, key):
    with pytest.raises(TRMError) as info:
        load_train_config(overrides=[text])
    assert f"{key}:" in str(info.value)
    assert text in str(info.value)  # where it came from


def test_nested_groups():
    cfg = load_train_config(overrides=["curriculum.start_L_cycles=2", "curriculum.epochs=1000",
                                       "halt_schedule.start_prob=0.5", "halt_schedule.end_prob=0.0",
                                       "halt_schedule.epochs=200"])
    assert (cfg.curriculum.start_L_cycles, cfg.curriculum.epochs) == (2, 1000)
    assert (cfg.halt_schedule.start_prob, cfg.halt_schedule.end_prob, cfg.halt_schedule.epochs) == (0.5, 0.0, 200)
    with pytest.raises(TRMError, match="group of settings"):
        load_train_config(overrides=["curriculum=3"])


def test_later_override_wins_and_reset():
    cfg = load_train_config(presets=["arc2"], overrides=["arch.L_cycles=5", "arch.L_cycles=7", "~ema"])
    assert cfg.arch.L_cycles == 7 and cfg.ema is False  # ~key: back to the default


def test_a_whole_group_or_a_name_deleted_is_back_to_the_default_never_a_placeholder():
    """`~arch` was "arch=<object object at 0x...> is not supported: this package trains TRM only": the deleted
    value's placeholder taken for an architecture's name. `~arch` is the group back to the default, as `~ema`
    is for one setting; a name that is only checked (`~arch.name`) changes nothing."""
    default = load_train_config().arch
    cfg = load_train_config(overrides=["arch.hidden_size=48", "arch.L_cycles=5", "~arch"])
    assert cfg.arch == default
    for name in ("~arch.name", "~arch.loss.name"):
        assert load_train_config(overrides=["arch.hidden_size=48", name]).arch.hidden_size == 48


@pytest.mark.parametrize("text, said", [("~lr=0.1", "~lr takes no value"), ("+~lr=5", "one prefix at most"),
                                         ("~~lr", "one prefix at most"), ("~+lr", "one prefix at most"),
                                         ("+++lr=1", "one prefix at most")])
def test_a_deletion_with_a_value_or_prefixes_stacked_are_refused(text, said):
    """`~lr=0.1` (hydra deletes only where the value matches) reset lr whatever it held, its value unread; `+~lr=5`
    set lr and `~~lr` deleted it: one prefix at most, and a deletion takes no value."""
    with pytest.raises(TRMError, match=re.escape(f"override {text!r}: {said}")):
        load_train_config(overrides=[text])
    assert load_train_config(overrides=["lr=0.5", "~lr"]).lr == load_train_config().lr


def test_apply_overrides_to_existing_config():
    base = load_train_config(presets=["cpu-smoke"])
    cfg = apply_overrides(base, ["lr=3e-4", "+run_name=x"])
    assert cfg.lr == 3e-4 and cfg.run_name == "x" and cfg.arch.hidden_size == 64
    assert base.lr == 1e-3
    # presets on top of a config (a sweep's variant on its base): they beat the base's overrides
    tuned = load_train_config(presets=["cpu-smoke"], overrides=["ema=True", "arch.halt_max_steps=16"])
    cfg = apply_overrides(tuned, ["lr=5e-4"], presets=["no-ema+act-8"])
    assert (cfg.ema, cfg.arch.halt_max_steps, cfg.lr, cfg.arch.hidden_size) == (False, 8, 5e-4, 64)


def test_heads_must_divide_hidden():
    with pytest.raises(TRMError, match="divisible"):
        load_train_config(overrides=["arch.hidden_size=100", "arch.num_heads=8"])
    # the MLP mixer has no heads
    assert load_train_config(overrides=["arch.hidden_size=100", "arch.mlp_t=True"]).arch.hidden_size == 100


def test_valid_keys():
    keys = valid_keys()
    assert "arch.L_cycles" in keys and "curriculum.start_L_cycles" in keys and "halt_schedule.end_prob" in keys
    assert "arch" not in keys and "lr" in keys


# ---------------------------------------------------------------------------
# config files
# ---------------------------------------------------------------------------

UPSTREAM_ALL_CONFIG = textwrap.dedent("""\
    arch:
      H_cycles: 3
      H_layers: 0
      L_cycles: 4
      L_layers: 2
      expansion: 4
      forward_dtype: bfloat16
      halt_exploration_prob: 0.1
      halt_max_steps: 16
      hidden_size: 512
      loss:
        loss_type: stablemax_cross_entropy
        name: losses@ACTLossHead
      mlp_t: false
      name: recursive_reasoning.trm@TinyRecursiveReasoningModel_ACTV1
      no_ACT_continue: true
      num_heads: 8
      pos_encodings: rope
      puzzle_emb_len: 16
      puzzle_emb_ndim: 512
    beta1: 0.9
    beta2: 0.95
    checkpoint_every_eval: true
    checkpoint_path: checkpoints/Arc2concept-aug-1000-ACT-torch/pretrain_att_arc2concept_4
    data_paths:
    - data/arc2concept-aug-1000
    data_paths_test: []
    ema: true
    ema_rate: 0.999
    epochs: 100000
    eval_interval: 10000
    eval_save_outputs: []
    evaluators:
    - name: arc@ARC
    freeze_weights: false
    global_batch_size: 768
    load_checkpoint: null
    lr: 0.0001
    lr_min_ratio: 1.0
    lr_warmup_steps: 2000
    min_eval_interval: 0
    project_name: Arc2concept-aug-1000-ACT-torch
    puzzle_emb_lr: 0.01
    puzzle_emb_weight_decay: 0.1
    run_name: pretrain_att_arc2concept_4
    seed: 0
    weight_decay: 0.1
    """)


def test_upstream_all_config(tmp_path):
    path = tmp_path / "all_config.yaml"
    path.write_text(UPSTREAM_ALL_CONFIG)
    assert is_upstream_run_config(yaml.safe_load(UPSTREAM_ALL_CONFIG))
    notes: list[str] = []
    cfg = load_train_config(config_file=path, notes=notes)
    a = cfg.arch
    assert (a.H_cycles, a.L_cycles, a.L_layers, a.H_layers, a.hidden_size, a.num_heads) == (3, 4, 2, 0, 512, 8)
    # upstream's bfloat16 (it only ran on CUDA) becomes auto: bf16 on capable GPUs and fast-bf16 CPUs
    assert a.forward_dtype == "auto" and a.loss_type == "stablemax_cross_entropy"
    assert a.puzzle_emb_ndim == 512 and a.puzzle_emb_len == 16 and a.mlp_t is False and a.no_ACT_continue is True
    assert cfg.data_paths == ["data/arc2concept-aug-1000"] and cfg.evaluators == [{"name": "arc@ARC"}]
    assert cfg.ema is True and cfg.run_name == "pretrain_att_arc2concept_4"
    assert cfg.project_name == "Arc2concept-aug-1000-ACT-torch"
    assert cfg.checkpoint_path == "checkpoints/Arc2concept-aug-1000-ACT-torch/pretrain_att_arc2concept_4"
    assert (cfg.lr, cfg.puzzle_emb_lr, cfg.lr_warmup_steps, cfg.global_batch_size) == (1e-4, 1e-2, 2000, 768)
    assert any("eval_save_outputs" in n for n in notes)
    # the checkpoint directory works too, and overrides still apply last
    cfg2 = load_train_config(config_file=tmp_path, overrides=["arch.L_cycles=6"])
    assert cfg2.arch.L_cycles == 6 and cfg2.model_copy(update={"arch": cfg.arch}) == cfg
    # and it matches the README command + preset it came from (bar names, dtype and the ARC evaluator)
    preset = load_train_config(presets=["arc2"], overrides=[
        "+run_name=pretrain_att_arc2concept_4", "project_name=Arc2concept-aug-1000-ACT-torch",
        "checkpoint_path=checkpoints/Arc2concept-aug-1000-ACT-torch/pretrain_att_arc2concept_4",
        "arch.puzzle_emb_ndim=512", "evaluators=[{name: arc@ARC}]"])
    assert preset == cfg


def test_upstream_file_misspelled_key_is_an_error(tmp_path):
    path = tmp_path / "all_config.yaml"
    path.write_text(UPSTREAM_ALL_CONFIG.replace("ema_rate:", "ema_rat:"))
    with pytest.raises(TRMError, match="'ema_rat'.*did you mean ema_rate"):
        load_train_config(config_file=path)
    path.write_text(UPSTREAM_ALL_CONFIG.replace("  L_cycles: 4", "  L_cycle: 4"))
    with pytest.raises(TRMError, match="arch.L_cycle'.*did you mean arch.L_cycles"):
        load_train_config(config_file=path)
    path.write_text(UPSTREAM_ALL_CONFIG.replace("recursive_reasoning.trm@TinyRecursiveReasoningModel_ACTV1",
                                                "hrm.hrm_act_v1@HierarchicalReasoningModel_ACTV1"))
    with pytest.raises(TRMError, match="TRM only"):
        load_train_config(config_file=path)


def test_upstream_arch_file_with_interpolation(tmp_path):
    path = tmp_path / "trm.yaml"
    path.write_text(textwrap.dedent("""\
        name: recursive_reasoning.trm@TinyRecursiveReasoningModel_ACTV1
        loss:
          name: losses@ACTLossHead
          loss_type: stablemax_cross_entropy
        halt_exploration_prob: 0.1
        halt_max_steps: 16
        H_cycles: 3
        L_cycles: 6
        H_layers: 0
        L_layers: 2
        hidden_size: 512
        num_heads: 8
        expansion: 4
        puzzle_emb_ndim: ${.hidden_size}
        pos_encodings: rope
        forward_dtype: bfloat16
        mlp_t: False
        puzzle_emb_len: 16
        no_ACT_continue: True
        """))
    cfg = load_train_config(config_file=path)
    assert cfg == TrainConfig(arch={"forward_dtype": "auto"})


def test_own_yaml_round_trip(tmp_path):
    cfg = load_train_config(presets=["sudoku-mlp", "T2n6", "large"], overrides=[
        "+run_name=rt", "curriculum.start_L_cycles=2", "curriculum.epochs=100", "halt_schedule.start_prob=0.3",
        "halt_schedule.epochs=50",
        "lr=3.3e-5", "arch.rms_norm_eps=1e-6", "evaluators=[{name: arc@ARC, submission_K: 2}]",
        "data_paths_test=[data/t]", "max_steps=7", "arch.puzzle_emb_ndim=128"])
    text = dump_config(cfg)
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    back = load_train_config(config_file=path)
    assert back == cfg
    assert dump_config(back) == text
    # presets given with a full file are overwritten by it (the file comes later)
    assert load_train_config(config_file=path, presets=["arc1"]) == cfg
    # defaults round-trip too
    path.write_text(dump_config(TrainConfig()))
    assert load_train_config(config_file=path) == TrainConfig()


def test_own_json_and_partial_files(tmp_path):
    cfg = load_train_config(presets=["maze"])
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(cfg.model_dump(mode="json")))
    assert load_train_config(config_file=path) == cfg
    partial = tmp_path / "partial.yaml"
    partial.write_text("arch:\n  L_cycles: 2\nlr: 2.0e-4\nrun_name: 2024\n")
    p = load_train_config(config_file=partial, presets=["arc1"])
    assert p.arch.L_cycles == 2 and p.lr == 2e-4 and p.run_name == "2024"
    assert p.data_paths == ["data/arc1concept-aug-1000"]
    partial.write_text("arch:\n  L_cycls: 2\n")
    with pytest.raises(TRMError, match="did you mean arch.L_cycles"):
        load_train_config(config_file=partial)
    partial.write_text("global_batch_size: lots\n")
    with pytest.raises(TRMError, match="global_batch_size:.*partial.yaml"):
        load_train_config(config_file=partial)


def test_bad_files(tmp_path):
    with pytest.raises(TRMError, match="not found"):
        load_train_config(config_file=tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("arch: [unclosed\n")
    with pytest.raises(TRMError, match="not valid YAML"):
        load_train_config(config_file=bad)
    bad.write_text("- a\n- b\n")
    with pytest.raises(TRMError, match="mapping"):
        load_train_config(config_file=bad)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(TRMError, match="holds no settings"):  # as an empty JSON file is refused
        load_train_config(config_file=empty)


# ---------------------------------------------------------------------------
# split_cli_args
# ---------------------------------------------------------------------------


def test_split_cli_args():
    argv = ["--preset", "arc2", "arch.L_cycles=4", "+run_name=x", "ema=True", "--preset=T3n6",
            "--subsets", "a", "b", "++seed=1", "~ema", "--no-progress", 'data_paths="[data/a]"']
    flags, overrides = split_cli_args(argv)
    assert flags == ["--preset", "arc2", "--preset=T3n6", "--subsets", "a", "b", "--no-progress"]
    assert overrides == ["arch.L_cycles=4", "+run_name=x", "ema=True", "++seed=1", "~ema", 'data_paths="[data/a]"']


def test_split_cli_args_value_flags_and_separator():
    flags, overrides = split_cli_args(["--config", "odd=name.yaml", "lr=1e-3"], value_flags=["--config"])
    assert flags == ["--config", "odd=name.yaml"] and overrides == ["lr=1e-3"]
    flags, overrides = split_cli_args(["--preset", "arc2", "--", "weird/path=1"])
    assert flags == ["--preset", "arc2"] and overrides == ["weird/path=1"]
    assert split_cli_args([]) == ([], [])


def test_split_then_load():
    argv = shlex.split("--preset arc2 arch.L_cycles=4 +run_name=x ema=True --preset no-ema")
    flags, overrides = split_cli_args(argv)
    presets = [flags[i + 1] for i, f in enumerate(flags) if f == "--preset"]
    cfg = load_train_config(presets=presets, overrides=overrides)
    assert cfg.ema is True  # overrides come after every preset
    assert cfg.arch.L_cycles == 4 and cfg.run_name == "x" and cfg.data_paths == ["data/arc2concept-aug-1000"]


def test_submit_predicts_under_the_settings_of_an_evaluation():
    """One shape for an evaluation's settings: EvaluateConfig (trm-kaggle evaluate), and the solve's by its names."""
    from trm_kaggle.config import EvaluateConfig, SolveConfig

    solve = SolveConfig(challenges="c.json", weights="w", eval_batch_size=32, early_exit=True, forward_dtype="float32",
                        compile="off", device="cpu")
    assert solve.evaluation() == EvaluateConfig(batch_size=32, early_exit=True, dtype="float32", compile="off",
                                                device="cpu")
    assert EvaluateConfig().updated(batch_size=8, compile=True) == EvaluateConfig(batch_size=8, compile="on")
    for bad in ({"batch_size": 1 << 40}, {"max_steps": 0}, {"device": "gpu"}, {"no_such_setting": 1}):
        with pytest.raises(TRMError, match=f"^EvaluateConfig: {next(iter(bad))}: "):  # one line naming it
            EvaluateConfig().updated(**bad)


def test_a_submission_path_of_the_wrong_type_is_the_output_fields_own_error():
    """The work folder is put beside `output` before the fields are checked: output=5 was pathlib's TypeError
    there, naming nothing; a bytes output is read as the field reads it."""
    from pydantic import ValidationError

    from trm_kaggle.config import SolveConfig

    for bad in (5, None, b"\xff"):
        with pytest.raises(ValidationError, match=r"(?s)^1 validation error for SolveConfig\noutput\n"):
            SolveConfig(challenges="c.json", weights="w", output=bad)
    assert SolveConfig(challenges="c.json", weights="w", output=b"o/s.json").work_dir == "o/s-ttt"
    with pytest.raises(ValidationError, match="output\n  Value error, is empty: name a folder or a file"):
        SolveConfig(challenges="c.json", weights="w", output="")  # the blank-path rule's words, not min_length's


def test_a_key_set_twice_on_one_line_is_said_and_the_later_used(capsys, caplog):
    """`seed=5 seed=6` kept 6 without a word; the later still wins (a script's base settings and its one change),
    with a warning naming both."""
    from trm_kaggle.cli import main
    from trm_kaggle.train import warn_repeated

    assert warn_repeated(["seed=5", "arch.L_cycles=2", "arch=default"]) == []  # distinct keys
    for twice in (["seed=5", "seed=6"], ["seed=5", "+seed=6"], ["seed=5", "~seed"]):
        assert warn_repeated(twice)[0].startswith("seed is set twice on one line ('seed=5', then")
    assert main(["train", "--print-config", "seed=5", "seed=6"]) == 0
    assert "seed: 6" in capsys.readouterr().out
    assert "seed is set twice on one line ('seed=5', then 'seed=6'): the later is used" in caplog.text
    caplog.clear()
    assert main(["train", "--print-config", "--preset", "sudoku4-cpu", "seed=5"]) == 0  # over the preset's: a layer
    assert "seed: 5" in capsys.readouterr().out and "twice" not in caplog.text


def test_one_setting_under_two_spellings_or_in_two_forms_of_one_file_is_said(tmp_path, capsys, caplog):
    """Upstream's `arch.loss.loss_type` and ours set one setting, and a file's `arch: {hidden_size: 32}` and
    `arch.hidden_size: 48` too: each pair was resolved silently (which one won depended on the order)."""
    from trm_kaggle.cli import main
    from trm_kaggle.train import warn_repeated

    said = warn_repeated(["arch.loss_type=stablemax_cross_entropy", "arch.loss.loss_type=softmax_cross_entropy"])
    assert said and said[0].startswith("arch.loss_type is set twice on one line")
    (tmp_path / "c.yaml").write_text("arch: {hidden_size: 32}\narch.hidden_size: 48\n")
    assert main(["train", "--print-config", "--config", str(tmp_path / "c.yaml")]) == 0
    assert "hidden_size: 48" in capsys.readouterr().out
    assert "c.yaml: arch.hidden_size is set twice in it (32, then 48): the later is used" in caplog.text
    caplog.clear()
    (tmp_path / "d.yaml").write_text("arch: {hidden_size: 32, L_cycles: 2}\narch.H_cycles: 2\nseed: 1\n")
    assert main(["train", "--print-config", "--config", str(tmp_path / "d.yaml"), "--preset", "sudoku4-cpu"]) == 0
    assert "twice" not in caplog.text  # distinct settings, and a file over a preset: layers


def test_a_key_set_by_a_groups_mapping_and_again_on_one_line_is_said(capsys, caplog):
    """`'arch={hidden_size: 48}' arch.hidden_size=32` (either order, any prefix, a mapping of a deeper group, a
    mapping's key under its other spelling) dropped the earlier value without a word: a mapping sets its keys one by
    one, and each is one of the line's settings."""
    from trm_kaggle.cli import main
    from trm_kaggle.train import repeated_keys

    said = [key for key, _, _ in repeated_keys(["arch={hidden_size: 48, loss: {loss_type: softmax_cross_entropy}}",
                                               "+arch.hidden_size=32", "++arch.loss_type=stablemax_cross_entropy"])]
    assert said == ["arch.hidden_size", "arch.loss_type"]
    assert repeated_keys(["arch={hidden_size: 48}", "arch.L_cycles=2", "arch={}", "arch.loss={}"]) == []  # distinct
    for line, kept in ((["arch={hidden_size: 48}", "arch.hidden_size=32"], "hidden_size: 32"),
                       (["arch.hidden_size=32", "arch={hidden_size: 48}"], "hidden_size: 48")):
        caplog.clear()
        assert main(["train", "--preset", "cpu-smoke", "--print-config", *line]) == 0
        assert kept in capsys.readouterr().out
        assert f"arch.hidden_size is set twice on one line ({line[0]!r}, then {line[1]!r}): the later is used" \
            in caplog.text
    caplog.clear()
    assert main(["doctor", "--preset", "cpu-smoke", "arch.loss={loss_type: softmax_cross_entropy}",
                 "arch.loss_type=stablemax_cross_entropy"]) == 0
    capsys.readouterr()
    assert "arch.loss_type is set twice on one line ('arch.loss={loss_type: softmax_cross_entropy}', then" \
        in caplog.text


def test_a_key_written_twice_in_one_overrides_mapping_is_refused_as_in_a_config_file(capsys):
    """`'arch={hidden_size: 48, hidden_size: 32}'` kept 32 without a word, while a --config file holding the same
    is refused: the rule is the YAML reader's, said in its words, naming the override."""
    from trm_kaggle.cli import main

    for text, key in (("arch={hidden_size: 48, hidden_size: 32}", "hidden_size"),
                      ("arch={loss: {loss_type: a, 'loss_type': b}}", "loss_type")):
        with pytest.raises(TRMError, match=f"^override {re.escape(repr(text))}: cannot parse the value: the key "
                                           f"'{key}' appears twice in one mapping"):
            parse_override(text)
    assert parse_override("arch={hidden_size: 48, L_cycles: 2}") == ("arch", {"hidden_size": 48, "L_cycles": 2})
    assert main(["train", "--preset", "cpu-smoke", "--print-config", "arch={hidden_size: 48, hidden_size: 32}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: override 'arch={hidden_size: 48, hidden_size: 32}': cannot parse the value: the "
                          "key 'hidden_size' appears twice in one mapping") and err.count("\n") == 1, err


def test_a_check_across_fields_is_said_in_the_flags_words_without_pydantics(capsys):
    """`evaluate --test-depth 1 --max-steps 5` once read `invalid option: value: Value error, ...`: a field no
    flag has, and pydantic's prefix."""
    from trm_kaggle.cli import main

    assert main(["evaluate", "--weights", "w", "--data", "d", "--test-depth", "1", "--max-steps", "5"]) == 2
    err = capsys.readouterr().err
    assert err == "error: invalid option: --max-steps 5 and --test-depth 1 disagree: give one\n", err


def test_every_numeric_setting_lists_its_bounds():
    """`train --list-settings` prints the bounds a setting is checked against: a bound enforced in a validator
    but not declared on the field printed none (global_batch_size's lower bound, every bound of epochs)."""
    import re

    from trm_kaggle.train.settings import describe_settings

    rows = [line for line in describe_settings().splitlines() if re.match(r"^  \S+ = ", line)]
    numeric = [line for line in rows if re.search(r"\[(int|float)( or None)?[;\]]", line)]
    assert numeric and len(numeric) > 20
    unbounded = [line.split(" = ")[0].strip() for line in numeric if not re.search(r"\[(int|float)( or None)?; ", line)]
    assert unbounded == [], unbounded


def test_an_override_nothing_reads_is_refused_but_a_presets_or_a_saved_configs_value_is_not(tmp_path):
    """`ema_rate=0.9` on a run with ema=false was recorded in config.json and read by nothing. Only what the user
    typed is refused: a preset's rate under the no-ema modifier, or a saved config's, stays as it was."""
    from trm_kaggle.train.settings import apply_overrides, dump_config, load_train_config

    with pytest.raises(TRMError, match="ema_rate=0.9: read by nothing, ema=false here"):
        load_train_config(presets=["sudoku4-cpu"], overrides=["ema_rate=0.9"])
    with pytest.raises(TRMError, match="ema_rate=0.5: read by nothing"):  # a sweep variant's, on a no-ema base
        apply_overrides(load_train_config(presets=["sudoku4-cpu"]), ["ema_rate=0.5"])
    assert load_train_config(presets=["sudoku4-cpu"], overrides=["ema=true", "ema_rate=0.9"]).ema_rate == 0.9
    with pytest.raises(TRMError, match="ema_rate=0.9: read by nothing"):  # the switch typed off: no layering
        load_train_config(presets=["sudoku4-cpu"], overrides=["ema_rate=0.9", "ema=false"])
    # the other switches: no rope, no puzzle table, no evaluation before the end
    for typed, said in ((["arch.pos_encodings=none", "arch.rope_theta=5"], "arch.pos_encodings is not rope"),
                        (["arch.puzzle_emb_ndim=0", "puzzle_emb_lr=0.5"], "no puzzle table"),
                        (["eval_interval=null", "min_eval_interval=3"], "only the end evaluates"),
                        # the end's save follows the end's evaluation whatever it says (accepted, with no effect)
                        (["eval_interval=null", "checkpoint_every_eval=false"], "only the end evaluates"),
                        (["arch.mlp_t=true", "arch.num_heads=4"], "arch.mlp_t=true (no attention)"),
                        (["arch.puzzle_emb_ndim=0", "arch.puzzle_emb_len=4"], "no puzzle table"),
                        (["freeze_weights=true", "lr=0.5"], "no optimizer for the weights"),
                        (["freeze_weights=true", "optimizer=lion"], "no optimizer for the weights"),
                        (["arch.mlp_t=true", "arch.rope_theta=5"], "arch.mlp_t=true (no attention)")):
        with pytest.raises(TRMError, match=f"{typed[1]}: read by nothing, .*{re.escape(said)}"):
            load_train_config(overrides=typed)
    assert load_train_config(overrides=["arch.pos_encodings=rope", "arch.rope_theta=5"]).arch.rope_theta == 5
    with pytest.raises(TRMError, match="arch.num_heads=2: read by nothing"):  # the MLP mixer by a preset
        load_train_config(presets=["sudoku4-cpu"], overrides=["arch.num_heads=2"])
    assert load_train_config(presets=["sudoku4-cpu", "attention"], overrides=["arch.num_heads=2"]).arch.num_heads == 2
    tiny = next(n for n, p in __import__("trm_kaggle.train.presets", fromlist=["PRESETS"]).PRESETS.items()
                if p["overrides"].get("ema_rate") is not None)
    cfg = load_train_config(presets=[tiny, "no-ema"])
    assert not cfg.ema and cfg.ema_rate != TrainConfig().ema_rate  # the preset's rate, unread but not typed
    (tmp_path / "c.yaml").write_text(dump_config(cfg))
    assert load_train_config(tmp_path / "c.yaml").ema_rate == cfg.ema_rate


def test_a_config_files_unread_settings_are_said_and_a_whole_runs_record_is_not(tmp_path, caplog):
    """`--config` a file with `ema: false` and `ema_rate: 0.5` trained, exit 0, with the rate in config.json as if
    used (typed, it is refused). A partial file's unread settings are said; a record of a whole run (our dump,
    upstream's all_config.yaml) holds every setting, read or not, and says nothing."""
    import logging

    from trm_kaggle.train.settings import dump_config, load_train_config

    (tmp_path / "c.yaml").write_text("ema: false\nema_rate: 0.5\narch:\n  rope_theta: 5000\n")
    notes: list[str] = []
    with caplog.at_level(logging.WARNING):
        cfg = load_train_config(tmp_path / "c.yaml", presets=["sudoku4-cpu"], notes=notes)
    assert cfg.ema_rate == 0.5 and len(notes) == 2, notes
    assert notes[0] == f"{tmp_path / 'c.yaml'}: ema_rate=0.5 is read by nothing (ema=false here): it changes nothing " \
                       "in this run" and "arch.rope_theta=5000.0 is read by nothing" in notes[1]
    assert notes[0] in caplog.text
    (tmp_path / "d.yaml").write_text("ema: false\nema_rate: 0.999\n")  # the default: nothing to say
    notes = []
    load_train_config(tmp_path / "d.yaml", notes=notes)
    assert notes == []
    (tmp_path / "whole.yaml").write_text(dump_config(load_train_config(presets=["repair-cpu"])))
    notes = []
    load_train_config(tmp_path / "whole.yaml", notes=notes)
    assert notes == []


def test_an_empty_path_or_name_is_not_given_and_a_blank_name_refused():
    """`+run_name=` trained in the default folder but recorded run_name '', so the same command without it was
    refused as a run with another config; `run_name: "  "` would have named a folder of blanks."""
    cfg = load_train_config(overrides=["+run_name=", "checkpoint_path=", "project_name="])
    assert (cfg.run_name, cfg.checkpoint_path, cfg.project_name) == (None, None, None)
    assert cfg == load_train_config()  # recorded as the run without them
    with pytest.raises(ValueError, match="a name of blanks: a run name is one folder name inside runs/"):
        TrainConfig(run_name="  ")


@pytest.mark.parametrize("text, said", [
    ("device=nan", "device: Input should be 'auto', 'cpu', 'cuda', 'mps' or 'xla' (got nan)"),
    ("optimizer=inf", "optimizer: Input should be 'adam_atan2', 'adamw', 'lion' or 'muon' (got inf)"),
    ("arch.forward_dtype=nan", "arch.forward_dtype: Input should be 'auto', 'float32', 'bfloat16' or 'float16'"),
    ("lr=nan", "lr: must be a finite number (got nan)"),  # a number field: its finiteness comes first
])
def test_a_nan_for_a_setting_of_choices_is_told_its_choices(text, said):
    """`device=nan` (read as a float) was refused as "must be a finite number", though device takes no number."""
    with pytest.raises(TRMError, match=re.escape(said)):
        load_train_config(None, ["sudoku4-cpu"], [text])


@pytest.mark.parametrize("where", ["override", "file"])
def test_an_empty_load_checkpoint_is_refused_not_a_fresh_start(tmp_path, where):
    """`load_checkpoint=$CKPT` with CKPT unset (or `load_checkpoint: ""` in a file) trained from fresh weights,
    exit 0, without a word: a fine-tune whose checkpoint was lost. Leaving it out, or null, starts fresh."""
    if where == "override":
        with pytest.raises(TRMError, match="load_checkpoint: is empty: name a train state"):
            load_train_config(overrides=["load_checkpoint="])
    else:
        (tmp_path / "c.yaml").write_text('load_checkpoint: ""\n')
        with pytest.raises(TRMError, match="load_checkpoint: is empty"):
            load_train_config(tmp_path / "c.yaml")
    assert load_train_config(overrides=["load_checkpoint=null"]).load_checkpoint is None


@pytest.mark.parametrize("text", ["", "\ufeff", "null\n", "# only a comment\n"])
def test_a_config_file_of_no_settings_is_refused_as_an_empty_json_one_is(tmp_path, text):
    """An empty (or BOM-only, or null) YAML config ran on the defaults without a word, where an empty JSON config
    is refused; `--config ''` was read as the current folder (".: config file expected, found a directory")."""
    (tmp_path / "c.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(TRMError, match="the config file holds no settings"):
        load_train_config(tmp_path / "c.yaml")
    with pytest.raises(TRMError, match="^--config is empty: name a YAML or JSON config file"):
        load_train_config("")


@pytest.mark.parametrize("call, said", [
    (lambda: load_train_config(presets=5), "presets: expected a preset's name or a list of them, got int"),
    (lambda: load_train_config(presets=["cpu-smoke", None]), "presets[1]: expected a str (a preset's name), got "
                                                              "NoneType"),
    (lambda: load_train_config(values=[1, 2]), "values: expected a mapping of settings"),
    (lambda: load_train_config(overrides=[5]), "overrides[0]: expected a str (a key=value override), got int"),
    (lambda: load_train_config(overrides=b"max_steps=5"), "overrides: expected a key=value override or a list of "
                                                          "them, got bytes"),
    (lambda: load_train_config(overrides={"max_steps": 5}), "(values= takes a mapping of settings), got dict"),
    (lambda: load_train_config(5), "config_file: expected a config file's path (a str or os.PathLike) or None"),
])
def test_an_argument_of_the_wrong_type_is_named(call, said):
    """presets=5 was "'int' object is not iterable", values=[1, 2] and overrides=[5] AttributeErrors from deep in
    the layers, naming no argument."""
    with pytest.raises(TypeError) as e:
        call()
    assert said in str(e.value), str(e.value)


def test_one_override_or_preset_alone_is_one():
    cfg = load_train_config(presets="cpu-smoke", overrides="max_steps=5")
    assert cfg.max_steps == 5 and cfg == load_train_config(presets=["cpu-smoke"], overrides=("max_steps=5",))


@pytest.mark.parametrize("override", ["time_limit=1e308", "time_limit=3.2e7"])
def test_a_time_limit_beyond_a_year_is_refused(override):
    """time_limit=1e308 was taken, and the progress bar showed a 309-digit budget; a year is the bound (and the
    pipeline's train_seconds shares it)."""
    from trm_kaggle.config import PipelineConfig

    with pytest.raises(TRMError, match="time_limit"):
        load_train_config(presets="cpu-smoke", overrides=override)
    assert load_train_config(presets="cpu-smoke", overrides="time_limit=3.1e7").time_limit == 3.1e7
    with pytest.raises(ValueError, match="train_seconds"):
        PipelineConfig(train_seconds=float(override.split("=")[1]))


def test_a_rope_base_float32_cannot_hold_is_refused_by_name():
    """`arch.rope_theta=1e-308` passed the bound (above 0, finite), became 0 in the float32 tables: NaN angles, and
    the training diverged blaming lr."""
    from trm_kaggle.train.settings import load_train_config

    for bad in ("1e-308", "0.5"):
        with pytest.raises(TRMError, match=rf"arch.rope_theta: .*greater than or equal to 1 \(got {bad}\)"):
            load_train_config(overrides=[f"arch.rope_theta={bad}"])
    assert load_train_config(overrides=["arch.rope_theta=1"]).arch.rope_theta == 1


def test_attention_over_a_presets_missing_positions_is_said(caplog):
    """`--preset sudoku4-cpu arch.mlp_t=False` kept the preset's pos_encodings none: attention without positions,
    without a word. A preset's value is not refused: it is said; chosen by the user, nothing is."""
    import logging

    from trm_kaggle.train.settings import load_train_config

    notes: list[str] = []
    with caplog.at_level(logging.WARNING):
        cfg = load_train_config(presets=["sudoku4-cpu"], overrides=["arch.mlp_t=False"], notes=notes)
    assert cfg.arch.pos_encodings == "none" and len(notes) == 1, notes
    assert "arch.mlp_t=False" in notes[0] and "preset sudoku4-cpu's arch.pos_encodings=none" in notes[0]
    assert "arch.pos_encodings=rope" in notes[0] and notes[0] in caplog.text
    for presets, overrides in ((["sudoku4-cpu", "attention"], []),
                               (["sudoku4-cpu"], ["arch.mlp_t=False", "arch.pos_encodings=none"]),
                               ([], ["arch.pos_encodings=none"])):
        notes = []
        load_train_config(presets=presets, overrides=overrides, notes=notes)
        assert notes == [], (presets, overrides, notes)
