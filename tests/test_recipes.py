"""Named test-time recipes: what each sets, combining them, flags winning, unknown names."""

import re

import pytest

from trm_kaggle.cli import main
from trm_kaggle.errors import TRMError
from trm_kaggle.solve.recipes import RECIPES, describe_recipes, recipe_settings, solve_config


def test_recipes_carry_the_published_settings_and_their_sources():
    assert recipe_settings("nvarc") == {"H_cycles": 4, "halt_max_steps": 10, "num_aug": 128}
    assert recipe_settings("trelis") == {"finetune": "all"}
    assert recipe_settings("trelis-staged")["finetune"] == "embeddings-then-all"
    assert recipe_settings("embeddings-only") == {"finetune": "embeddings"}
    assert "2511.02886" in RECIPES["trelis"]["source"] and "NVARC" in RECIPES["nvarc"]["source"]
    for r in RECIPES.values():  # every recipe is a valid config
        solve_config(None, challenges="c", weights="w", **r["settings"])


def test_recipes_combine_and_explicit_fields_win():
    c = solve_config("nvarc+trelis", challenges="c", weights="w", num_aug=8)
    assert (c.finetune, c.H_cycles, c.halt_max_steps, c.num_aug) == ("all", 4, 10, 8)
    assert c.recursion() == {"H_cycles": 4, "halt_max_steps": 10}
    assert solve_config(None, challenges="c", weights="w").recursion() == {}


def test_unknown_recipe_names_the_close_one():
    with pytest.raises(TRMError, match="unknown recipe 'nvark' \\(did you mean nvarc\\?\\)"):
        recipe_settings("nvark")
    for names in ("nvarc+", "+trelis", "nvarc++trelis", ""):
        with pytest.raises(TRMError, match="has an empty name"):
            recipe_settings(names)
    assert recipe_settings(None) == {}
    assert recipe_settings("NVARC+Trelis") == recipe_settings("nvarc+trelis")  # case-insensitive, as presets
    for names in ("x" * 100_000, "nvarc+" + "x" * 100_000, "+" + "x" * 100_000):  # a pasted text: one short line
        with pytest.raises(TRMError) as e:
            recipe_settings(names)
        assert len(str(e.value)) < 300, len(str(e.value))


def test_list_recipes_and_errors_from_the_command_line(capsys):
    assert main(["submit", "--list-recipes"]) == 0
    assert capsys.readouterr().out.strip() == describe_recipes()
    assert main(["submit", "--recipe", "nope", "--challenges", "c.json", "--weights", "w"]) == 2
    assert "error: unknown recipe 'nope'" in capsys.readouterr().err
    assert main(["submit", "--weights", "w"]) == 2
    assert "error: submit needs --challenges" in capsys.readouterr().err
    assert main(["submit", "--challenges", "c", "--weights", "w", "--embeddings-fraction", "1.5"]) == 2
    assert "--embeddings-fraction" in capsys.readouterr().err


@pytest.mark.parametrize("given, mode_from, wording", [
    ({"finetune": "none", "finetune_steps": 100}, None, "--finetune-steps 100 has no effect with finetune none"),
    ({"embeddings_fraction": 0.3}, "embeddings-only", "--embeddings-fraction 0.3 has no effect with finetune "
                                                      "embeddings"),
    ({"finetune": "all", "embeddings_fraction": 0.3}, None, "read by finetune embeddings-then-all"),
    ({"finetune": "embeddings", "lr": 1e-3}, None, "--lr 0.001 has no effect with finetune embeddings"),
    ({"finetune": "none", "global_batch_size": 8}, None, "--batch-size 8 has no effect with finetune none"),
    ({"safety_margin": 500}, None, "--safety-margin 500 has no effect without --time-budget"),
    ({"plan_margin": 0.9, "time_budget": 600}, None, "--plan-margin 0.9 has no effect without an auto count"),
    # fine-tuning's ACT steps, and prediction's where --test-depth is unset: with neither, read by nothing
    ({"finetune": "none", "test_depth": 8, "halt_max_steps": 2}, None, "--halt-max-steps 2 has no effect without "
                                                                       "fine-tuning and with --test-depth 8"),
    # zero steps fine-tune nothing, whatever the mode: the mode and its settings are read by nothing
    ({"finetune_steps": 0, "embeddings_fraction": 0.9}, None, "--embeddings-fraction 0.9 has no effect with "
                                                              "--finetune-steps 0"),
    ({"finetune_steps": 0, "global_batch_size": 3}, None, "--batch-size 3 has no effect with --finetune-steps 0"),
    ({"finetune_steps": 0, "finetune": "all"}, None, "--finetune all has no effect with --finetune-steps 0"),
    ({"finetune_steps": 0, "test_depth": 8, "halt_max_steps": 2}, None, "--halt-max-steps 2 has no effect without "
                                                                        "fine-tuning"),
    # no augmentation to draw, no fine-tuning, no noise: the answers were the same bytes for any seed
    ({"num_aug": 0, "finetune": "none", "seed": 12345}, None, "--seed 12345 has no effect with --num-aug 0, no "
                                                              "fine-tuning and one trajectory"),
])
def test_an_explicit_setting_the_fine_tuning_mode_ignores_is_refused(given, mode_from, wording):
    with pytest.raises(TRMError, match=wording):
        solve_config(mode_from, challenges="c", weights="w", **given)


def test_settings_the_mode_reads_or_that_change_nothing_pass():
    assert solve_config(None, challenges="c", weights="w", finetune="none", finetune_steps=0).finetune == "none"
    # a recipe's own setting that a flag's mode ignores is the recipe's, not a choice the user typed
    assert solve_config("trelis-staged", challenges="c", weights="w", finetune="all").finetune == "all"
    assert solve_config(None, challenges="c", weights="w", finetune="embeddings-then-all",
                        embeddings_fraction=0.25, lr=1e-3, finetune_steps=8).embeddings_fraction == 0.25
    assert solve_config(None, challenges="c", weights="w", time_budget=600, safety_margin=30, plan_margin=0.3,
                        num_aug="auto").plan_margin == 0.3
    for reader in ({"num_aug": 1}, {"finetune": "all"}, {"trajectories": 2, "trajectory_noise": 0.1}):
        assert solve_config(None, challenges="c", weights="w", seed=5, **{"num_aug": 0, "finetune": "none",
                                                                          **reader}).seed == 5


def test_submit_refuses_steps_without_fine_tuning_before_reading_anything(tmp_path, capsys):
    out = tmp_path / "s.json"
    assert main(["submit", "--challenges", str(tmp_path / "missing.json"), "--weights", "w", "--output", str(out),
                 "--finetune", "none", "--finetune-steps", "100"]) == 2
    assert "error: --finetune-steps 100 has no effect with finetune none" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "s-ttt").exists()


def test_estimate_refuses_a_batch_size_nothing_fine_tunes_with(capsys):
    """`estimate --finetune none --batch-size 8` priced the plan as if the flag were read (submit refuses it)."""
    assert main(["estimate", "--preset", "arc2", "--finetune", "none", "--batch-size", "8"]) == 2
    assert "error: --batch-size 8 has no effect with finetune none" in capsys.readouterr().err


@pytest.mark.parametrize("names, said", [("trelis+embeddings-only", "recipes trelis and embeddings-only both set "
                                                                     "finetune (all, then embeddings)"),
                                          ("nvarc+trelis-staged+trelis", "recipes trelis-staged and trelis")])
def test_recipes_that_set_one_field_differently_are_refused(names, said):
    with pytest.raises(TRMError, match=re.escape(said)):
        recipe_settings(names)
    assert recipe_settings("trelis+trelis") == {"finetune": "all"}  # the same value twice undoes nothing
