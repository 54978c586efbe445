"""Named training presets: upstream's README recipes, a few CPU recipes, and ablations to combine.

A base preset sets a whole recipe (one per run: two are refused); a modifier changes a few fields and is meant to
follow a base (`arc2+T3n6+no-ema`). `trm_kaggle.train.settings.load_train_config`
applies them in the order given, later ones winning, before a config file and
`key=value` overrides.
"""

from __future__ import annotations

import difflib
import json
from typing import Any, Iterable

from trm_kaggle.errors import TRMError
from trm_kaggle.train.overrides import dotted

_ARC_RECIPE: dict = {
    # upstream README "ARC-AGI-1/2" command: arch.L_layers=2 arch.H_cycles=3 arch.L_cycles=4 ema=True,
    # everything else from cfg_pretrain.yaml (spelled out so a base preset fully sets its recipe)
    "arch": {"L_layers": 2, "H_cycles": 3, "L_cycles": 4, "mlp_t": False, "pos_encodings": "rope"},
    "global_batch_size": 768,
    "epochs": 100000,
    "eval_interval": 10000,
    "lr": 1e-4,
    "puzzle_emb_lr": 1e-2,
    "weight_decay": 0.1,
    "puzzle_emb_weight_decay": 0.1,
    "ema": True,
}

_SMALL_DATA_RECIPE: dict = {
    # upstream README Sudoku-Extreme / Maze-Hard commands
    "evaluators": [],
    "global_batch_size": 768,
    "epochs": 50000,
    "eval_interval": 5000,
    "lr": 1e-4,
    "puzzle_emb_lr": 1e-4,
    "weight_decay": 1.0,
    "puzzle_emb_weight_decay": 1.0,
    "ema": True,
}


# RSM: every depth from 1 to halt_max_steps supervision steps (max_warmup None = halt_max_steps - 1)
_RSM: dict = {"enabled": True, "min_warmup": 0, "max_warmup": None}
# CGAR's schedule (arXiv 2511.08653): (H, L) = (1, 2) until 30% of training, (2, 4) until 60%, then (3, 6), i.e.
# a third and two thirds of the full depth, over the whole schedule (epochs 0)
_DEPTH_STAGES: dict = {"epochs": 0, "stages": [{"until": 0.3, "depth": 1 / 3}, {"until": 0.6, "depth": 2 / 3}]}


def _copy(d: dict) -> dict:
    return json.loads(json.dumps(d))


def _with(base: dict, **changes: Any) -> dict:
    """A copy of a nested preset dict with `changes` merged in (`arch` merged key by key)."""
    out = json.loads(json.dumps(base))
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key].update(value)
        else:
            out[key] = value
    return out


def _preset(kind: str, description: str, overrides: dict) -> dict:
    return {"kind": kind, "description": description, "overrides": overrides}


#: Named presets: name -> {"kind": "base" | "modifier", "description": str, "overrides": nested dict}.
#: A base preset sets a whole recipe; a modifier changes a few fields and is meant to follow a base
#: (`arc2+T3n6+no-ema`). Presets apply in the order given and later ones win.
PRESETS: dict[str, dict] = {
    # --- upstream README recipes ---
    "arc1": _preset("base", "ARC-AGI-1 (upstream README): data/arc1concept-aug-1000, T=3 n=4, EMA",
                    _with(_ARC_RECIPE, data_paths=["data/arc1concept-aug-1000"])),
    "arc2": _preset("base", "ARC-AGI-2 (upstream README): data/arc2concept-aug-1000, T=3 n=4, EMA",
                    _with(_ARC_RECIPE, data_paths=["data/arc2concept-aug-1000"])),
    "sudoku-mlp": _preset("base", "Sudoku-Extreme with the MLP mixer (upstream README, ~87%): T=3 n=6, no positions",
                          _with(_SMALL_DATA_RECIPE, data_paths=["data/sudoku-extreme-1k-aug-1000"],
                                arch={"L_layers": 2, "H_cycles": 3, "L_cycles": 6, "mlp_t": True,
                                      "pos_encodings": "none"})),
    "sudoku-att": _preset("base", "Sudoku-Extreme with attention + RoPE (upstream README, ~75%): T=3 n=6",
                          _with(_SMALL_DATA_RECIPE, data_paths=["data/sudoku-extreme-1k-aug-1000"],
                                arch={"L_layers": 2, "H_cycles": 3, "L_cycles": 6, "mlp_t": False,
                                      "pos_encodings": "rope"})),
    "maze": _preset("base", "Maze-Hard 30x30 (upstream README): data/maze-30x30-hard-1k, attention, T=3 n=4",
                    _with(_SMALL_DATA_RECIPE, data_paths=["data/maze-30x30-hard-1k"],
                          arch={"L_layers": 2, "H_cycles": 3, "L_cycles": 4, "mlp_t": False,
                                "pos_encodings": "rope"})),
    "cpu-smoke": _preset("base", "tiny model for a one-minute laptop CPU run (hidden 64, 50 steps, float32)", {
        "arch": {"hidden_size": 64, "num_heads": 4, "expansion": 2.0, "H_cycles": 2, "L_cycles": 2,
                 "halt_max_steps": 4, "puzzle_emb_len": 2, "forward_dtype": "float32"},
        "global_batch_size": 32,
        "lr": 1e-3,
        "lr_warmup_steps": 10,
        "max_steps": 50,
        "eval_interval": None,
        "device": "cpu",
    }),
    "sudoku4-cpu": _preset("base", "generated 4x4 Sudoku on a CPU: mlp_t, T=2 n=2, reaches >80% held-out in minutes "
                           "(benchmarks/bench_learn_sudoku.py)", {
        "arch": {"hidden_size": 64, "num_heads": 4, "expansion": 4.0, "H_cycles": 2, "L_cycles": 2, "L_layers": 2,
                 "halt_max_steps": 3, "mlp_t": True, "pos_encodings": "none", "puzzle_emb_len": 1,
                 "forward_dtype": "float32"},
        "global_batch_size": 64,
        "lr": 3e-3,
        "lr_warmup_steps": 20,
        "puzzle_emb_lr": 1e-3,
        "epochs": 1000,
        "eval_interval": 2,
        "ema": False,
        "device": "cpu",
    }),
    "arc-cpu": _preset("base", "a small ARC model a CPU trains in minutes (the shipped weights/ and the pipeline; "
                       "far below the paper's model)", {
        "arch": {"hidden_size": 64, "num_heads": 4, "expansion": 2.0, "H_cycles": 2, "L_cycles": 2, "L_layers": 2,
                 "halt_max_steps": 4, "puzzle_emb_len": 2, "forward_dtype": "float32"},
        "global_batch_size": 32,
        "lr": 1e-3,
        "lr_warmup_steps": 20,
        "puzzle_emb_lr": 1e-2,
        "epochs": 1000,
        "eval_interval": None,
        "ema": True,
        "ema_rate": 0.99,
    }),
    # --- ablations: modifiers to combine with a base preset ---
    "no-ema": _preset("modifier", "turn off the EMA of the weights (ema=False)", {"ema": False}),
    **{
        f"T{t}n{n}": _preset("modifier", f"recursion depth T={t} (arch.H_cycles), n={n} (arch.L_cycles)",
                             {"arch": {"H_cycles": t, "L_cycles": n}})
        for t, n in ((2, 2), (2, 6), (3, 4), (3, 6), (4, 6))
    },
    "attention": _preset("modifier", "self-attention with RoPE (arch.mlp_t=False, pos_encodings=rope)",
                         {"arch": {"mlp_t": False, "pos_encodings": "rope"}}),
    "mlp-t": _preset("modifier", "MLP across the sequence instead of attention (arch.mlp_t=True, pos_encodings=none)",
                     {"arch": {"mlp_t": True, "pos_encodings": "none"}}),
    "act-8": _preset("modifier", "fewer supervision steps: arch.halt_max_steps=8", {"arch": {"halt_max_steps": 8}}),
    "act-4": _preset("modifier", "fewer supervision steps: arch.halt_max_steps=4", {"arch": {"halt_max_steps": 4}}),
    **{
        f"batch{b}": _preset("modifier", f"global_batch_size={b}"
                             + (" (upstream README's one-GPU Maze-Hard run)" if b == 128 else ""),
                             {"global_batch_size": b})
        for b in (128, 512, 1024, 2048)
    },
    "lion": _preset("modifier", "the Lion optimizer with its paper's beta2=0.99 (optimizer=lion); lr and weight_decay "
                    "stay the recipe's: Lion usually wants lr 3-10x smaller and weight_decay as much larger",
                    {"optimizer": "lion", "beta2": 0.99}),
    "muon": _preset("modifier", "Muon for the recursive blocks' matrices, AdamATan2 for embeddings, norms and heads "
                    "(optimizer=muon; momentum 0.95, Nesterov, 5 Newton-Schulz steps, update RMS matched to AdamW's "
                    "so lr carries over; torch 2.9+; docs/recipes.md)",
                    {"optimizer": "muon", "muon_lr_ratio": 1.0}),
    "muon-sic": _preset("modifier", "Muon as 'Speed is Confidence' (arXiv 2601.19085) trains TRM: the SwiGLU "
                        "normed before its down projection (arch.swiglu_norm), Muon's own rate 0.02 with Keller "
                        "Jordan's shape scale, momentum 0.6, 3 Newton-Schulz steps, weight decay 0.005 (1e-4 of the "
                        "weights per step at the peak rate); the other weights keep the recipe's (docs/recipes.md)",
                        {"optimizer": "muon", "arch": {"swiglu_norm": True}, "muon_lr": 0.02,
                         "muon_scale": "original", "muon_momentum": 0.6, "muon_ns_steps": 3,
                         "muon_weight_decay": 0.005}),
    # --- faster training recipes (docs/recipes.md; what each saves is measured by benchmarks/bench_recipes.py) ---
    "rsm": _preset("modifier", "RSM's training contract: fresh examples every step, 0 to halt_max_steps - 1 "
                   "supervision steps without gradient (drawn per step), then one with the gradient and the loss "
                   "(rsm.enabled; docs/recipes.md)", {"rsm": _copy(_RSM)}),
    "depth-curriculum": _preset("modifier", "CGAR's progressive depth: H_cycles and L_cycles at 1/3 of the arch's "
                                "for the first 30% of the schedule, 2/3 until 60%, then the arch's "
                                "(curriculum.stages; docs/recipes.md)", {"curriculum": _copy(_DEPTH_STAGES)}),
    "cgar": _preset("modifier", "CGAR whole: the depth curriculum plus its supervision weighting (each later ACT "
                    "step's loss weighs 0.7 of the one before: supervision_decay=0.7)",
                    {"curriculum": _copy(_DEPTH_STAGES), "supervision_decay": 0.7}),
    "large-batch": _preset("modifier", "NVARC's pretraining batch for 8 GPUs: global_batch_size=3072 (384 rows a "
                           "GPU), lr=3e-4 (fewer GPUs: micro_batch_size or auto_batch accumulate it)",
                           {"global_batch_size": 3072, "lr": 3e-4}),
    "fast": _preset("modifier", "the levers that paid on the harness's tasks: the depth curriculum alone (0.40x and "
                    "0.61x upstream's training FLOPs to its plateau on sudoku4 and sudoku6; Muon and RSM cut no "
                    "compute there; docs/recipes.md); set curriculum.epochs for a run shorter than its schedule",
                    {"curriculum": _copy(_DEPTH_STAGES)}),
    "large": _preset("modifier", "larger model: arch.hidden_size=768, num_heads=12 (64 per head)",
                     {"arch": {"hidden_size": 768, "num_heads": 12}}),
    # --- data curricula ---
    "repair-curriculum": _preset("modifier", "five code-repair stages: syntax bugs first, then logic "
                                 "bugs by difficulty, all bugs at half the LR last (needs repair_meta.jsonl)", {
        "stages": [
            {"name": "syntax", "bug_types": ["missing_colon", "unbalanced_bracket", "bad_indent"],
             "max_difficulty": 0.3, "share": 0.15},
            {"name": "syntax+operators", "bug_types": ["missing_colon", "unbalanced_bracket", "bad_indent",
                                                       "flipped_comparison", "wrong_operator"],
             "max_difficulty": 0.45, "share": 0.2},
            {"name": "+returns,off-by-one,lint", "bug_types": ["missing_colon", "unbalanced_bracket", "bad_indent",
                                                               "flipped_comparison", "wrong_operator",
                                                               "removed_return", "off_by_one", "lint"],
             "max_difficulty": 0.6, "share": 0.2},
            {"name": "all types", "max_difficulty": 0.75, "share": 0.2},
            {"name": "all", "lr_scale": 0.5, "share": 0.25},
        ],
    }),
}

# code repair on a CPU: arc-cpu's small model without a puzzle embedding (every pair is its own puzzle)
PRESETS["repair-cpu"] = _preset(
    "base", "code repair on a CPU: the arc-cpu model without a puzzle embedding, for short snippets "
    "(build-code-repair --grid 8x32 --strip-docstrings), no EMA",
    _with(PRESETS["arc-cpu"]["overrides"], arch={"puzzle_emb_ndim": 0}, lr_warmup_steps=50, epochs=20, ema=False,
          device="cpu"))

_PRESET_LOOKUP = {name.lower(): name for name in PRESETS}


def expand_preset_names(names: Iterable[str] | str) -> list[str]:
    """`["arc2+T3n6", "no-ema"]` -> `["arc2", "T3n6", "no-ema"]`, checked against PRESETS (case-insensitive)."""
    if isinstance(names, str):
        names = [names]
    out: list[str] = []
    for item in names:
        for part in str(item).split("+"):
            part = part.strip()
            if not part:  # `muon-sic+`, `a++b`, an empty --preset: a name was lost on the way
                raise TRMError(f"preset {str(item)!r} has an empty name (a '+' with nothing on one side, or an "
                               f"empty --preset); valid presets: {', '.join(PRESETS)}")
            name = _PRESET_LOOKUP.get(part.lower())
            if name is None:
                close = difflib.get_close_matches(part.lower(), list(_PRESET_LOOKUP), n=1)
                hint = f" (did you mean {_PRESET_LOOKUP[close[0]]}?)" if close else ""
                raise TRMError(f"unknown preset {part!r}{hint}; valid presets: {', '.join(PRESETS)}")
            out.append(name)
    bases = [n for n in dict.fromkeys(out) if PRESETS[n]["kind"] == "base"]
    if len(bases) > 1:  # each sets a whole run: the later would silently replace most of the earlier
        raise TRMError(f"presets {' and '.join(bases)} are both recipes, each setting a whole run: pick one, and "
                       "add modifiers after it (--list-presets)")
    if bases:  # a modifier before its recipe: the recipe, applied after, would set its fields back (T4n6+sudoku4-cpu
        recipe = dotted(PRESETS[bases[0]]["overrides"])  # ran T2n2); one whose fields the recipe leaves alone stays
        last = len(out) - 1 - out[::-1].index(bases[0])  # named again after a modifier, it undoes that one too
        for name in out[:last]:
            undone = [k for k, v in dotted(PRESETS[name]["overrides"]).items() if k in recipe and recipe[k] != v]
            if undone:
                raise TRMError(f"preset {name} comes before the recipe {bases[0]}, which would undo it ({undone[0]}): "
                               f"name the recipe once, first ({bases[0]}+{name})")
    return out


def describe_presets() -> str:
    """One line per preset, base recipes first (for `--list-presets`)."""
    width = max(map(len, PRESETS))
    lines = []
    titles = (("base", "Recipes (pick one):"), ("modifier", "Modifiers (combine after a recipe, later wins):"))
    for kind, title in titles:
        lines.append(title)
        for name, entry in PRESETS.items():
            if entry["kind"] == kind:
                lines.append(f"  {name:<{width}}  {entry['description']}")
    lines.append("Combine with --preset A --preset B or --preset A+B; key=value overrides apply last.")
    return "\n".join(lines)
