"""Shared by the tests/test_integrity_*.py modules: a tiny dataset, tiny training settings, damaged files."""

from __future__ import annotations

import contextlib
import os
import threading
import zipfile
from pathlib import Path
from typing import Iterator

TINY = ["arch.hidden_size=32", "arch.num_heads=2", "arch.expansion=2", "arch.H_cycles=2", "arch.L_cycles=2",
        "arch.L_layers=1", "arch.halt_max_steps=3", "arch.puzzle_emb_len=2", "arch.forward_dtype=float32",
        "global_batch_size=8", "lr=3e-3", "lr_warmup_steps=2", "puzzle_emb_lr=1e-2", "eval_interval=null",
        "log_interval=1", "progress=False", "device=cpu", "threads=1", "deterministic=True", "seed=3"]


def build_sudoku4(out: Path, seed: int = 42) -> Path:
    from trm_kaggle.config import SudokuBuildConfig
    from trm_kaggle.data.puzzles.sudoku import build_sudoku

    build_sudoku(SudokuBuildConfig(output_dir=str(out), size=4, num_train=40, num_test=8, num_aug=1, seed=seed,
                                   progress=False))
    return out


def train_args(data: Path, run: Path, *extra: str) -> list[str]:
    return ["train", f"data_paths=[{data}]", f"checkpoint_path={run}", *TINY, *extra]


def flip_inside_largest_entry(path: Path, count: int = 16) -> None:
    """Flip `count` bytes in the middle of the largest stored entry of a zip (torch.save) file: the file still
    opens, its tensor data is different."""
    with zipfile.ZipFile(path) as z:
        info = max(z.infolist(), key=lambda i: i.file_size)
    data = bytearray(path.read_bytes())
    name_len, extra_len = int.from_bytes(data[info.header_offset + 26:info.header_offset + 28], "little"), \
        int.from_bytes(data[info.header_offset + 28:info.header_offset + 30], "little")
    start = info.header_offset + 30 + name_len + extra_len + info.file_size // 2
    for i in range(start, start + count):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


def flip_safetensors_data(path: Path, count: int = 8) -> None:
    """Flip `count` bytes in the middle of a safetensors file's tensor data (its header stays valid)."""
    data = bytearray(path.read_bytes())
    header = 8 + int.from_bytes(data[:8], "little")
    start = header + (len(data) - header) // 2
    for i in range(start, start + count):
        data[i] ^= 0x01
    path.write_bytes(bytes(data))


@contextlib.contextmanager
def woken_fifos(after_s: float) -> Iterator[list[Path]]:
    """A list to add FIFOs to: `after_s` seconds on, each is opened for writing once, so that a reader blocked in
    open() wakes and its test fails on its time instead of hanging the suite."""
    made: list[Path] = []
    done = threading.Event()

    def watchdog() -> None:
        if done.wait(after_s):
            return
        for path in made:
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass

    threading.Thread(target=watchdog, daemon=True).start()
    try:
        yield made
    finally:
        done.set()
