"""Named test-time recipes: what each sets, combining them, flags winning, unknown names."""

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


def test_list_recipes_and_errors_from_the_command_line(capsys):
    assert main(["submit", "--list-recipes"]) == 0
    assert capsys.readouterr().out.strip() == describe_recipes()
    assert main(["submit", "--recipe", "nope", "--challenges", "c.json", "--weights", "w"]) == 2
    assert "error: unknown recipe 'nope'" in capsys.readouterr().err
    assert main(["submit", "--weights", "w"]) == 2
    assert "error: submit needs --challenges" in capsys.readouterr().err
    assert main(["submit", "--challenges", "c", "--weights", "w", "--embeddings-fraction", "1.5"]) == 2
    assert "--embeddings-fraction" in capsys.readouterr().err
