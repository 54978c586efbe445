"""Named test-time recipes: `trm-kaggle submit --recipe NAME` (and `estimate --recipe NAME`).

A recipe sets a few `SolveConfig` fields: what fine-tuning trains, how deep the model recurses, how many ACT
steps and augmentations it uses. Recipes that set different things combine with `+` (`nvarc+trelis`; two that
set one field to different values are refused) and flags given on the command line win over them. Each records
where its settings come from; docs/test-time-training.md cites the same.
"""

from __future__ import annotations

import difflib
from typing import Any

from trm_kaggle.config import SolveConfig
from trm_kaggle.errors import TRMError
from trm_kaggle.wording import clipped, type_name

#: name -> {"settings": SolveConfig fields, "source": where they come from}
RECIPES: dict[str, dict[str, Any]] = {
    "trelis": {
        "settings": {"finetune": "all"},
        "source": "Trelis (arXiv 2511.02886): on unseen ARC tasks, fine-tuning the puzzle embeddings alone scored "
                  "near zero; full fine-tuning, or embeddings first and then all weights, did best (their Kaggle "
                  "run: 6.67 % semi-private)",
    },
    "trelis-staged": {
        "settings": {"finetune": "embeddings-then-all", "embeddings_fraction": 0.5},
        "source": "Trelis (arXiv 2511.02886): embeddings first, then all weights; the split (half the steps on "
                  "the rows) is ours, the paper's fraction is not restated here",
    },
    "nvarc": {
        "settings": {"H_cycles": 4, "halt_max_steps": 10, "num_aug": 128},
        "source": "NVARC's TRM component: H_cycles 4, halt_max_steps 10 and 128 augmentations at test time "
                  "(about 10 % on the public leaderboard); it leaves the fine-tuning mode to the default or to "
                  "another recipe (nvarc+trelis)",
    },
    "embeddings-only": {
        "settings": {"finetune": "embeddings"},
        "source": "this package's default before the evidence above: only the new puzzle rows train; kept to "
                  "compare against",
    },
}


_RECIPE_LOOKUP = {name.lower(): name for name in RECIPES}


def recipe_settings(names: str | None) -> dict[str, Any]:
    """The SolveConfig fields of `names` ('a' or 'a+b', which must not set one field differently); {} for None."""
    if names is not None and not isinstance(names, str):  # `solve_config(5, ...)`: "'int' has no attribute 'split'"
        raise TypeError(f"recipe: expected a recipe's name ('a' or 'a+b'), or None, got a {type_name(names)}")
    settings: dict[str, Any] = {}
    set_by: dict[str, str] = {}  # field -> the recipe that set it
    for name in ([] if names is None else names.split("+")):  # `--recipe ''` is a name lost, not no recipe
        if not name.strip():
            raise TRMError(f"recipe {clipped(names)} has an empty name (a '+' with nothing on one side); recipes: "
                           f"{', '.join(RECIPES)}")
        name = _RECIPE_LOOKUP.get(name.lower(), name)  # as preset names are: `NVARC` is nvarc
        if name not in RECIPES:
            # a pasted text may be megabytes: its repr is clipped, and difflib's comparisons skipped
            close = difflib.get_close_matches(name, RECIPES, n=1) if len(name) <= 100 else []
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise TRMError(f"unknown recipe {clipped(name)}{hint}; recipes: {', '.join(RECIPES)}")
        for key, value in RECIPES[name]["settings"].items():
            if key in settings and settings[key] != value:  # one would silently undo the other's choice
                raise TRMError(f"recipes {set_by[key]} and {name} both set {key} ({settings[key]}, then {value}): "
                               "combine recipes that set different things, or give the setting as a flag")
            settings[key], set_by[key] = value, name
    return settings


#: fine-tuning settings -> the `finetune` modes that read them (the others ignore them)
READ_BY: dict[str, tuple[str, ...]] = {
    "finetune_steps": ("embeddings-then-all", "all", "embeddings"),
    "embeddings_fraction": ("embeddings-then-all",),
    "lr": ("embeddings-then-all", "all"),  # the weights' rate: embeddings trains the puzzle rows alone
    "global_batch_size": ("embeddings-then-all", "all", "embeddings"),  # the fine-tuning batch (--batch-size)
}
FLAGS = {"global_batch_size": "--batch-size"}  # a field whose flag is not its name with dashes


def unread_setting(fields: dict[str, Any], cfg: SolveConfig) -> str | None:
    """Why one of the explicitly given `fields` would be ignored by `cfg`'s fine-tuning mode, or None.

    A user who types `--finetune none --finetune-steps 100` means one of the two; running it silently without
    fine-tuning hides the choice. A value that changes nothing (0 steps) is no conflict."""
    for name, modes in READ_BY.items():
        if name in fields and cfg.finetune not in modes and not (name == "finetune_steps" and fields[name] == 0):
            readers = ", ".join(modes)
            flag = FLAGS.get(name, f"--{name.replace('_', '-')}")
            return (f"{flag} {fields[name]} has no effect with finetune {cfg.finetune} (it is "
                    f"read by finetune {readers}): drop it or choose one of those modes")
    if cfg.finetune_steps == 0:  # zero steps fine-tune nothing, whatever the mode: its settings are read by nothing
        for name in ("finetune", *READ_BY):
            if name in fields and name != "finetune_steps" and not (name == "finetune" and fields[name] == "none"):
                flag = FLAGS.get(name, f"--{name.replace('_', '-')}")
                return (f"{flag} {fields[name]} has no effect with --finetune-steps 0 (no fine-tuning): drop it or "
                        "give fine-tuning steps")
    tunes = cfg.finetune != "none" and cfg.finetune_steps != 0
    if "halt_max_steps" in fields and not tunes and cfg.test_depth is not None:
        return (f"--halt-max-steps {fields['halt_max_steps']} has no effect without fine-tuning and with "
                f"--test-depth {cfg.test_depth} (it sets fine-tuning's ACT steps, and prediction's where --test-depth "
                "is unset): drop one of them")
    if "seed" in fields and cfg.num_aug == 0 and not tunes and cfg.trajectories == 1:
        return (f"--seed {fields['seed']} has no effect with --num-aug 0, no fine-tuning and one trajectory (it draws "
                "the augmentations, the fine-tuning's batches and the trajectories' noise): drop it")
    # the margins share out a time budget: without one (or, for the plan's, without an `auto` count) no one reads them
    if "safety_margin" in fields and cfg.time_budget is None:
        return (f"--safety-margin {fields['safety_margin']:g} has no effect without --time-budget (it is kept free at "
                "the end of the budget): give a budget or drop it")
    if "plan_margin" in fields and "auto" not in (cfg.num_aug, cfg.finetune_steps):
        return (f"--plan-margin {fields['plan_margin']:g} has no effect without an auto count (it is the share of a "
                "worker's time that --num-aug auto or --finetune-steps auto leaves unplanned): give one or drop it")
    return None


def solve_config(recipe: str | None = None, **fields: Any) -> SolveConfig:
    """A SolveConfig from a recipe and explicit fields (the fields win); an explicit field the chosen fine-tuning
    mode ignores is refused (`unread_setting`)."""
    cfg = SolveConfig(**{**recipe_settings(recipe), **fields})
    problem = unread_setting(fields, cfg)
    if problem:
        raise TRMError(problem)
    return cfg


def describe_recipes() -> str:
    lines = []
    for name, r in RECIPES.items():
        settings = " ".join(f"{k}={v}" for k, v in r["settings"].items())
        lines += [f"{name:<16} {settings}", f"{'':<16} {r['source']}"]
    return "\n".join(lines)
