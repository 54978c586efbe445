"""Device, dtype and process setup (trm_kaggle/train/runtime.py)."""

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
