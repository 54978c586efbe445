"""Named presets: every one validates, upstream's recipes hold their values, combinations apply in order."""

from __future__ import annotations

import pytest

from trm_kaggle.config import TrainConfig
from trm_kaggle.errors import TRMError
from trm_kaggle.train.presets import PRESETS, describe_presets, expand_preset_names
from trm_kaggle.train.settings import load_train_config


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_validates(name):
    entry = PRESETS[name]
    assert entry["kind"] in ("base", "modifier") and entry["description"]
    cfg = load_train_config(presets=[name])
    assert isinstance(cfg, TrainConfig)
    assert cfg.arch.hidden_size % cfg.arch.num_heads == 0
    if entry["kind"] == "modifier":  # a modifier also validates on top of every base
        for base in (n for n, e in PRESETS.items() if e["kind"] == "base"):
            load_train_config(presets=[base, name])


def test_preset_values():
    arc1 = load_train_config(presets=["arc1"])
    assert arc1.data_paths == ["data/arc1concept-aug-1000"] and arc1.ema is True
    assert (arc1.arch.L_layers, arc1.arch.H_cycles, arc1.arch.L_cycles) == (2, 3, 4)
    assert (arc1.global_batch_size, arc1.epochs, arc1.eval_interval, arc1.lr, arc1.puzzle_emb_lr,
            arc1.weight_decay, arc1.puzzle_emb_weight_decay) == (768, 100000, 10000, 1e-4, 1e-2, 0.1, 0.1)
    assert load_train_config(presets=["arc2"]).data_paths == ["data/arc2concept-aug-1000"]
    smlp = load_train_config(presets=["sudoku-mlp"])
    assert smlp.arch.mlp_t is True and smlp.arch.pos_encodings == "none" and smlp.arch.L_cycles == 6
    assert (smlp.epochs, smlp.eval_interval, smlp.puzzle_emb_lr, smlp.weight_decay) == (50000, 5000, 1e-4, 1.0)
    satt = load_train_config(presets=["sudoku-att"])
    assert satt.arch.mlp_t is False and satt.arch.pos_encodings == "rope"
    assert smlp.model_copy(update={"arch": satt.arch}) == satt
    maze = load_train_config(presets=["maze"])
    assert maze.data_paths == ["data/maze-30x30-hard-1k"] and maze.arch.L_cycles == 4 and maze.evaluators == []
    smoke = load_train_config(presets=["cpu-smoke"])
    a = smoke.arch
    assert (a.hidden_size, a.num_heads, a.expansion, a.H_cycles, a.L_cycles, a.halt_max_steps, a.puzzle_emb_len,
            a.forward_dtype) == (64, 4, 2.0, 2, 2, 4, 2, "float32")
    assert (smoke.global_batch_size, smoke.lr, smoke.lr_warmup_steps, smoke.max_steps, smoke.eval_interval,
            smoke.device) == (32, 1e-3, 10, 50, None, "cpu")
    large = load_train_config(presets=["arc2", "large"])
    assert (large.arch.hidden_size, large.arch.num_heads) == (768, 12)
    for name, (t, n) in {"T2n2": (2, 2), "T2n6": (2, 6), "T3n4": (3, 4), "T3n6": (3, 6), "T4n6": (4, 6)}.items():
        cfg = load_train_config(presets=["arc2", name])
        assert (cfg.arch.H_cycles, cfg.arch.L_cycles) == (t, n)
    assert load_train_config(presets=["arc2", "act-8"]).arch.halt_max_steps == 8
    assert load_train_config(presets=["arc2", "act-4"]).arch.halt_max_steps == 4
    for b in (512, 1024, 2048):
        assert load_train_config(presets=["arc2", f"batch{b}"]).global_batch_size == b


def test_preset_combination_order():
    a = load_train_config(presets=["arc2", "T3n6", "no-ema"])
    b = load_train_config(presets=["arc2+T3n6+no-ema"])
    c = load_train_config(presets=["arc2+T3n6", "no-ema"])
    assert a == b == c
    assert (a.arch.H_cycles, a.arch.L_cycles, a.ema) == (3, 6, False)
    # a base recipe after a modifier that it would undo: refused (test_a_modifier_before_its_recipe_is_refused)
    for order in (["T3n6", "arc2"], ["no-ema", "arc2"]):
        with pytest.raises(TRMError, match="comes before the recipe arc2, which would undo it"):
            load_train_config(presets=order)
    assert load_train_config(presets=["sudoku-mlp", "attention"]).arch.mlp_t is False
    assert load_train_config(presets=["sudoku-att", "mlp-t"]) == load_train_config(presets=["sudoku-mlp"])
    # overrides come after presets
    assert load_train_config(presets=["arc2+T3n6"], overrides=["arch.L_cycles=2"]).arch.L_cycles == 2


def test_unknown_preset_lists_valid_names():
    with pytest.raises(TRMError) as info:
        load_train_config(presets=["arc3"])
    msg = str(info.value)
    assert "'arc3'" in msg and "did you mean arc2?" in msg
    for name in PRESETS:
        assert name in msg
    with pytest.raises(TRMError, match="'nope'"):
        expand_preset_names(["arc2+nope"])
    assert expand_preset_names(["ARC2+t3n6"]) == ["arc2", "T3n6"]


@pytest.mark.parametrize("names", [["muon-sic+"], ["+fast"], ["arc2++no-ema"], [""], ["arc2", " "]])
def test_an_empty_preset_name_is_refused_not_dropped(names):
    """`--preset 'muon-sic+'` (a name lost in a shell variable) once ran as plain muon-sic."""
    with pytest.raises(TRMError, match="has an empty name"):
        expand_preset_names(names)


def test_describe_presets():
    text = describe_presets()
    for name, entry in PRESETS.items():
        assert name in text and entry["description"] in text


@pytest.mark.parametrize("names", [["sudoku4-cpu+arc2"], ["arc2", "T3n6", "arc1"], ["cpu-smoke+no-ema+maze"]])
def test_two_recipes_in_one_run_are_refused(names):
    """--list-presets says "Recipes (pick one)"; two were combined silently, the later replacing most of the
    earlier (`sudoku4-cpu+arc2` trained ARC's recipe on Sudoku data)."""
    with pytest.raises(TRMError, match="are both recipes, each setting a whole run: pick one"):
        expand_preset_names(names)
    assert expand_preset_names(["arc2+arc2", "T3n6"]) == ["arc2", "arc2", "T3n6"]  # one recipe, named twice


def test_a_modifier_before_its_recipe_is_refused():
    """`T4n6+sudoku4-cpu`: the recipe, applied after, set the depth back (the run got T2n2, exit 0)."""
    with pytest.raises(TRMError, match=r"preset T4n6 comes before the recipe sudoku4-cpu, which would undo it "
                                       r"\(arch.H_cycles\): name the recipe once, first \(sudoku4-cpu\+T4n6\)"):
        expand_preset_names(["T4n6+sudoku4-cpu"])
    for names in (["sudoku4-cpu+T4n6+sudoku4-cpu"], ["sudoku4-cpu+T4n6", "sudoku4-cpu"]):  # named again after it: the
        with pytest.raises(TRMError, match="preset T4n6 comes before the recipe sudoku4-cpu"):  # run got T2n2 too
            expand_preset_names(names)
    assert expand_preset_names(["no-ema", "T4n6"]) == ["no-ema", "T4n6"]  # modifiers alone: over the defaults
    # a modifier whose fields the recipe leaves alone keeps them (a sweep's command-line preset, the grid's recipe)
    assert not load_train_config(presets=["no-ema", "cpu-smoke"]).ema
