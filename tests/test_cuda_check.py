"""A GPU that this torch build has no kernels for (or whose first CUDA operation fails) sends the solve's workers
to the CPU with one warning, instead of failing every task (trm_kaggle.hardware.cuda_problem)."""

from __future__ import annotations

import pytest
import torch

from trm_kaggle.config import SolveConfig
from trm_kaggle import hardware as C


@pytest.mark.parametrize("capability, arch_list, ok", [
    ((8, 9), ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90"], True),  # L4 on a cu12 wheel
    ((7, 5), ["sm_75", "sm_80"], True),  # T4
    ((6, 0), ["sm_75", "sm_80", "sm_90"], False),  # P100 on a wheel that dropped Pascal
    ((12, 0), ["sm_80", "sm_90"], False),  # a newer GPU than the wheel knows
    ((12, 0), ["sm_80", "sm_90", "compute_90"], True),  # ... unless PTX can be compiled for it
    ((8, 0), ["sm_90", "compute_90"], False),  # PTX of a newer architecture does not run on an older GPU
    ((9, 0), ["sm_90a"], True),  # sm_90a: code for exactly 9.0 devices
    ((8, 9), [], True),  # a build that names none: the first operation decides
])
def test_arch_problem(capability, arch_list, ok):
    problem = C.arch_problem(capability, arch_list)
    assert (problem is None) == ok, problem
    if not ok:
        assert f"sm_{capability[0]}{capability[1]}" in problem and "torch build" in problem


def _fake_gpu(monkeypatch, capability=(9, 0), arch_list=("sm_50", "sm_60"), first_op_fails=False):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: list(arch_list))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: "Simulated GPU")
    if first_op_fails:
        real_ones = torch.ones

        def ones(*a, device=None, **k):
            if device is not None and str(device).startswith("cuda"):
                raise RuntimeError("CUDA error: no kernel image is available for execution on the device")
            return real_ones(*a, device=device, **k)

        monkeypatch.setattr(torch, "ones", ones)


@pytest.mark.parametrize("case", ["no kernels", "first op fails"])
def test_workers_fall_back_to_cpu_with_one_warning(monkeypatch, case):
    import trm_kaggle.solve.job as S

    if case == "no kernels":
        _fake_gpu(monkeypatch, capability=(9, 0), arch_list=("sm_50", "sm_60"))
    else:  # the architecture is listed, but the first operation fails all the same
        _fake_gpu(monkeypatch, capability=(8, 9), arch_list=("sm_89",), first_op_fails=True)
    monkeypatch.setattr(S, "cuda_problem", C.probe)  # the child's check, run here where torch is patched
    import trm_kaggle.hardware as H

    monkeypatch.setattr(H, "free_cores", lambda: (4, 4, 0.0))  # an idle 4-core machine
    monkeypatch.setattr(H, "_AUTO", {})
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    said = []
    cfg = SolveConfig(challenges="c.json", weights="w", device="auto")
    device, visible, threads = S.worker_devices(cfg, said.append)
    assert device == "cpu" and visible == [None] and threads == 4
    assert len(said) == 1 and said[0].startswith("warning: GPU 0 (Simulated GPU): ") and "CPU instead" in said[0]
    assert ("sm_90" in said[0]) if case == "no kernels" else ("first CUDA operation failed" in said[0])


def test_usable_gpu_keeps_the_workers_on_it(monkeypatch):
    import trm_kaggle.solve.job as S

    _fake_gpu(monkeypatch, capability=(8, 9), arch_list=("sm_80", "sm_89"))
    monkeypatch.setattr(torch, "ones", lambda *a, **k: torch.zeros(4))  # the first operation works
    monkeypatch.setattr(S, "cuda_problem", C.probe)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    said = []
    assert S.worker_devices(SolveConfig(challenges="c.json", weights="w", device="cuda"), said.append) == \
        ("cuda", ["0", "1"], None)
    assert said == []


def test_the_check_runs_in_a_child_and_answers_on_this_machine():
    problem = C.cuda_problem(timeout=120)
    if torch.cuda.is_available():
        assert problem is None or "GPU" in problem
    else:
        assert problem == "torch sees no usable CUDA device"
