"""`trm-kaggle train`, `doctor`, `export` and `import-upstream`: a training run on this machine, what it
would choose here, and the inference exports made from a run or from upstream's checkpoints."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from trm_kaggle.cli.common import command_parser, common_flags, say_defaults
from trm_kaggle.config import MAX_GRID_CELLS, bounded_number
from trm_kaggle.errors import TRMError
from trm_kaggle.wording import command_line, one_line


def add_train(sub) -> None:
    p = sub.add_parser("train", help="train a TRM (single device or under torchrun)",
                       description="Train a TRM. Settings: --preset NAME (repeatable, or NAME+NAME), --config FILE "
                                   "(ours or upstream's all_config.yaml), then upstream-style overrides "
                                   "such as arch.L_cycles=4 ema=True +run_name=x data_paths=[data/arc2]. "
                                   "--list-settings prints every setting with its default, bounds and meaning. "
                                   "Running the same command again resumes from the run's newest state.")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="dotted overrides, upstream style")
    p.add_argument("--config", default=None, help="YAML/JSON config file: ours, or upstream's all_config.yaml "
                                                   "(default: none)")
    p.add_argument("--preset", action="append", default=[], help="named preset, repeatable (see --list-presets) "
                                                                 "(default: none, upstream's defaults)")
    p.add_argument("--list-presets", action="store_true", help="print the presets and exit")
    p.add_argument("--list-settings", action="store_true",
                   help="print every setting (key, default, bounds, meaning) and exit")
    p.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    p.add_argument("--export", default=None, metavar="DIR",
                   help="export inference weights here when done (default: no export)")
    p.add_argument("--mean-embedding", action="store_true", help="with --export: keep only the mean puzzle row")
    p.add_argument("--xla-launch", action="store_true",
                   help="run a replica on every TPU chip of this host with torch_xla's launcher; implies device=xla "
                        "(on a CPU host start replicas with torchrun instead)")
    common_flags(p)
    p.set_defaults(func=cmd_train)


def cmd_train(args: argparse.Namespace) -> int:
    from trm_kaggle.train import describe_presets, dump_config, load_train_config

    listing = "--list-presets" if args.list_presets else "--list-settings" if args.list_settings else None
    if listing and (given := [*args.overrides[:1], *(["--config"] if args.config else []),
                              *(["--preset"] if args.preset else [])]):
        # printed without them, a typo among them (an unknown key, a config that does not load) went unnoticed
        raise TRMError(f"{listing} prints the defaults and reads no settings, but {', '.join(given)} was given: "
                       f"drop them, or use --print-config to see the settings they resolve to")
    if args.list_presets:
        print(describe_presets())
        return 0
    if args.list_settings:
        from trm_kaggle.train import describe_settings

        print(describe_settings())
        return 0
    if args.mean_embedding and not args.export:  # it shapes the export: without one it is read by nothing
        raise TRMError("--mean-embedding shapes the export of --export DIR, and there is none: add --export DIR, "
                       "or drop it (trm-kaggle export --mean-embedding exports a run later)")
    overrides = list(args.overrides) + ([] if args.progress else ["progress=False"])
    cfg = load_train_config(args.config, args.preset, overrides)
    if args.print_config:
        print(dump_config(cfg))
        return 0
    if args.xla_launch:
        from trm_kaggle import xla

        if cfg.device not in ("xla", "auto"):
            raise TRMError(f"--xla-launch starts XLA replicas, but the config says device={cfg.device}")
        cfg = cfg.model_copy(update={"device": "xla"})
        xla.launch(_train_replica, cfg, args.export, args.mean_embedding)
        return 0
    from trm_kaggle.lifetime import stop_with_parent

    stop_with_parent()  # a sweep's training: SIGTERM (save, stop) once the sweep is gone, however it ended
    _train_replica(cfg, args.export, args.mean_embedding)
    return 0


def _train_replica(cfg, export: str | None, mean_embedding: bool) -> None:
    """Train; the first replica prints the summary and exports (every process under torchrun)."""
    from trm_kaggle.train import export_run, train

    try:
        result = train(cfg, signals=True)  # SIGINT/SIGTERM: a state saved, then TrainingInterrupted
    except (MemoryError, RuntimeError) as e:  # out of memory outside a step (the step says it itself)
        from trm_kaggle.train import is_out_of_memory, out_of_memory_error, peer_lost

        if not is_out_of_memory(e):
            lost = peer_lost(e)  # under torchrun: another rank ended first (its line says why)
            if lost is None:
                raise
            raise lost from None
        raise out_of_memory_error(cfg, cfg.micro_batch_size or cfg.global_batch_size, cfg.device,
                                  "setting up, evaluating or saving the run") from None
    if not result.is_main:
        return
    print(result.summary(), flush=True)
    if export:
        t, written = time.perf_counter(), {}
        export_run(result.run_dir, export, mean_embedding=mean_embedding, written=written)
        print(_exported_line(export, written, time.perf_counter() - t))


def train_settings(argv: list[str]):
    """The TrainConfig that `trm-kaggle train ARGV` would train with (raises on settings that do not resolve)."""
    from trm_kaggle.train import load_train_config

    parser, sub = command_parser()  # `trm-kaggle` with `train` alone: the same parse, the same error lines
    add_train(sub)
    say_defaults(sub.choices["train"])
    args = parser.parse_args(["train", *argv])
    return load_train_config(args.config, args.preset, list(args.overrides))


def add_doctor(sub) -> None:
    p = sub.add_parser("doctor", help="what this machine is, and what train would choose on it",
                       description="Print the CPU, memory, accelerators and torch build, then what `train` would "
                                   "choose for a preset and dataset: device, dtype (and why), threads, micro-batch, "
                                   "expected peak memory, and warnings for choices that will not fit.")
    p.add_argument("data", nargs="?", default=None, metavar="DATA", help="a dataset directory (default: ARC shapes)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="train overrides, upstream style")
    p.add_argument("--preset", action="append", default=[],
                   help="named preset, repeatable (see train --list-presets) (default: none)")
    p.add_argument("--json", action="store_true", help="print everything as JSON")
    common_flags(p)
    p.set_defaults(func=cmd_doctor)


def cmd_doctor(args: argparse.Namespace) -> int:
    from trm_kaggle.doctor import run_doctor

    data, overrides = args.data, list(args.overrides)
    if data is not None and "=" in data:  # `doctor key=value` without a dataset
        data, overrides = None, [data] + overrides
    print(run_doctor(args.preset, data, overrides, args.json))
    return 0


def add_export(sub) -> None:
    p = sub.add_parser("export", help="safetensors + config.json from a run (for inference and Kaggle)",
                       description="Write an inference export (weights.safetensors + config.json) from a run's "
                                   "newest train state or a given state file; EMA weights when the run kept them. "
                                   "evaluate, submit and the Kaggle bundle read exports (the bundle adds a model "
                                   "card).")
    p.add_argument("run", help="run directory (newest state) or a state_step*.pt file")
    p.add_argument("--out", required=True, help="export directory to create")
    p.add_argument("--mean-embedding", action="store_true",
                   help="replace the per-puzzle table by its mean row (unseen tasks need only that; ~30 MB)")
    p.add_argument("--no-ema", action="store_true", help="export the live weights instead of the EMA average")
    common_flags(p)
    p.set_defaults(func=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    from trm_kaggle.train import export_run

    t, written = time.perf_counter(), {}
    export_run(args.run, args.out, args.mean_embedding, use_ema=not args.no_ema, written=written)
    print(_exported_line(args.out, written, time.perf_counter() - t))
    return 0


def _exported_line(export_dir, config: dict, seconds: float, verb: str = "exported") -> str:
    """What export and train --export print: the export, its source and its parameter counts (without and with the
    table it was trained with), in the build commands' shape. `config` is the config.json this command wrote
    (`export_run`'s `written`): read back from the folder, it was once another command's export."""
    from trm_kaggle.model import export_parameter_count

    info = config.get("info") or {}
    source = f"step {info['step']} of {info['source']}, " if "step" in info and "source" in info else ""
    kept = " (the export keeps only its mean row)" if config.get("puzzle_embedding") == "mean" else ""
    # escaped as the error lines are: the folder is as typed, its source as config.json says it
    return one_line(f"{verb} {export_dir}: {source}{export_parameter_count(config)}{kept} in {seconds:.1f} s")


def add_import_upstream(sub) -> None:
    p = sub.add_parser("import-upstream", help="convert an upstream step_<N> checkpoint to our export format",
                       description="Convert an upstream step_<N> checkpoint, local or on the Hugging Face Hub, to an "
                                   "export. A Hub source is hf://owner/repo[@revision][/path] (path: the folder "
                                   "with step_<N> files and all_config.yaml, or one step_<N> file); a plain "
                                   "owner/repo[...] is read as one only when no local path of that name exists. "
                                   "Hub downloads need: pip install \"trm_kaggle[hub]\".")
    p.add_argument("checkpoint", help="upstream step_<N> file (with or without _orig_mod. prefix; bf16, fp16 or fp32), or "
                                      "hf://owner/repo[@revision][/path]")
    p.add_argument("--config", default=None, help="the run's all_config.yaml (default: beside the checkpoint)")
    p.add_argument("--out", required=True, help="export directory to create")
    p.add_argument("--seq-len", type=bounded_number("--seq-len", 1, MAX_GRID_CELLS), default=None,
                   help="sequence length (default: from the run's dataset, else 900 for ARC/Maze vocabularies, 81 for "
                        "Sudoku)")
    p.add_argument("--mean-embedding", action="store_true", help="keep only the mean puzzle-embedding row")
    common_flags(p)
    p.set_defaults(func=cmd_import_upstream)


def _upstream_contents(checkpoint: str) -> Any:
    """What the local file `checkpoint` holds (None where no regular file is: `import_upstream` says that, or reads
    a Hub source), read here to tell its kind first: one of our train states was refused for the all_config.yaml
    missing beside it. The model layer that imports cannot know a train state; this one can (`holds_train_state`)."""
    from trm_kaggle.train.checkpoint import holds_train_state, read_torch_file

    if not Path(checkpoint).is_file():  # a local file is never read as a Hub source (`model.hub`'s rule)
        return None
    loaded = read_torch_file(Path(checkpoint), "checkpoint file")  # a text file: "not a readable PyTorch checkpoint"
    if holds_train_state(loaded):
        raise TRMError(f"{checkpoint}: a trm-kaggle train state, not an upstream checkpoint: `"
                       f"{command_line('trm-kaggle', 'export', Path(checkpoint), '--out', 'DIR')}` makes an export")
    return loaded


def _step_taken(args: argparse.Namespace) -> str:
    """" (its newest step, step_12)" when a Hub folder was named: the step file its export records as the source."""
    from trm_kaggle.jsonio import read_json
    from trm_kaggle.model import HF_PREFIX

    taken = str((read_json(Path(args.out) / "config.json", "export config").get("info") or {}).get("source", ""))
    step = taken.rsplit("/", 1)[-1]
    return f" (its newest step, {step})" if taken.startswith(HF_PREFIX) and not \
        args.checkpoint.rstrip("/").endswith("/" + step) else ""


def cmd_import_upstream(args: argparse.Namespace) -> int:
    from trm_kaggle.model import import_upstream

    t = time.perf_counter()
    model = import_upstream(args.checkpoint, args.out, config=args.config, seq_len=args.seq_len,
                            mean_embedding=args.mean_embedding, contents=_upstream_contents(args.checkpoint))
    print(one_line(f"imported {args.out}: {args.checkpoint}{_step_taken(args)}, {model.parameter_count()}"  # as typed
                   + (" (the export keeps only its mean row)" if args.mean_embedding else "")
                   + f", sequence length {model.seq_len}"  # a length guessed wrong is found only at evaluate
                   + ("" if args.seq_len is not None else " (from the run's dataset, else its vocabulary's task; "
                                                          "--seq-len sets it)")
                   + f" in {time.perf_counter() - t:.1f} s"))
    return 0
