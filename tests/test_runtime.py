"""Device, dtype and process setup (trm_kaggle/train/runtime.py)."""

import os

import torch

from trm_kaggle.config import ArchConfig, TrainConfig
from trm_kaggle.model import dtype as dtype_mod
from trm_kaggle.train import runtime


def test_every_rank_takes_rank_0s_auto_dtype_on_cpu(monkeypatch):
    """forward_dtype=auto on CPU is a timing: a rank that measured otherwise follows rank 0."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr(runtime.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dtype_mod, "cpu_bf16_speedup", lambda threads: 0.9)  # this rank: bf16 not worth it
    sent = []

    def broadcast(t, src):  # rank 0 measured bf16 as fast
        sent.append(int(t.item()))
        t.fill_(1)

    monkeypatch.setattr(runtime.dist, "broadcast", broadcast)
    # both ranks were given the same settings (`check_same_settings`)
    monkeypatch.setattr(runtime.dist, "all_gather_object", lambda everyone, mine: everyone.__setitem__(
        slice(None), [mine] * len(everyone)))
    threads = torch.get_num_threads()
    try:
        rt = runtime.setup_runtime(TrainConfig(arch=ArchConfig(), device="cpu"))
    finally:
        torch.set_num_threads(threads)
    assert sent == [0]  # this rank's own choice went in
    assert rt.dtype == torch.bfloat16 and "rank 0's choice" in rt.dtype_reason
    # a single process measures for itself and broadcasts nothing
    sent.clear()
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("RANK", "0")
    rt = runtime.setup_runtime(TrainConfig(arch=ArchConfig(), device="cpu"))
    torch.set_num_threads(threads)
    assert sent == [] and rt.dtype == torch.float32


def test_a_rank_waiting_for_its_peers_says_so_and_a_stop_signal_ends_the_wait(monkeypatch, caplog):
    """A plain `train` with a stray TORCHELASTIC_RUN_ID and WORLD_SIZE=2 waited in the env:// rendezvous, inside
    C++, without a word and deaf to SIGTERM. The wait is Python's: said after RDZV_SAY_S, ended by a signal."""
    import signal
    import threading
    import time

    import pytest

    for name, value in {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": "29999", "TORCHELASTIC_RUN_ID": "stray"}.items():
        monkeypatch.setenv(name, value)
    released = threading.Event()
    monkeypatch.setattr(runtime.dist, "init_process_group", lambda **kw: released.wait(30))  # the peers never come
    monkeypatch.setattr(runtime, "RDZV_SAY_S", 0.2)

    def stop(signum, frame):
        raise KeyboardInterrupt("stopped by SIGUSR2")

    previous = signal.signal(signal.SIGUSR2, stop)
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGUSR2))
    started = time.monotonic()
    try:
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            runtime.setup_runtime(TrainConfig(device="cpu", threads=1, data_paths=["d"]))
    finally:
        timer.cancel()
        released.set()
        signal.signal(signal.SIGUSR2, previous)
    assert time.monotonic() - started < 10
    assert "rank 0 of 2: waiting for the other ranks at 127.0.0.1:29999" in caplog.text
