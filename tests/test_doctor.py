"""`trm-kaggle doctor`: this machine, and invented ones (hardware facts handed to `diagnose`)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from dataclasses import replace


from trm_kaggle import hardware
from trm_kaggle.cli import main
from trm_kaggle.doctor import diagnose, plan_lines
from trm_kaggle.train.memory import DEFAULT_MEMORY_FRACTION
from trm_kaggle.train.settings import load_train_config

GB = 2**30
LAPTOP = hardware.HardwareFacts(system="Linux", machine="x86_64", cpu_model="Laptop i5", cores=4,
                                isa=["avx2", "fma"], memory_total=16 * GB, memory_available=8 * GB,
                                torch_version="2.13.0", cpu_bf16_speedup=0.004)


def cfg(*overrides, presets=("cpu-smoke",)):
    return load_train_config(None, list(presets), ["progress=False", *overrides])


def test_laptop_without_fast_bf16_trains_in_float32():
    plan = diagnose(cfg("arch.hidden_size=128", "arch.num_heads=4", "arch.forward_dtype=auto"), LAPTOP, baseline=0)
    assert plan.device == "cpu" and plan.dtype == "float32" and "no fast" in plan.dtype_reason
    assert plan.threads == 4 and plan.micro_batch == plan.local_batch and not plan.warnings
    forced = diagnose(cfg("arch.forward_dtype=bfloat16"), LAPTOP, baseline=0)
    assert forced.dtype == "bfloat16" and any("no fast bf16" in w for w in forced.warnings)


def test_a_fast_bf16_cpu_picks_bf16_for_wide_models():
    server = replace(LAPTOP, isa=["avx512_bf16", "amx_bf16"], cpu_bf16_speedup=3.5)
    assert diagnose(cfg("arch.hidden_size=128", "arch.num_heads=4", "arch.forward_dtype=auto"), server,
                    baseline=0).dtype == "bfloat16"
    assert diagnose(cfg("arch.hidden_size=64", "arch.forward_dtype=auto"), server, baseline=0).dtype == "float32"


def test_small_memory_warns_and_auto_batch_picks_a_micro_batch():
    tiny = replace(LAPTOP, memory_available=int(0.5 * GB))
    plain = diagnose(cfg("global_batch_size=256", "arch.forward_dtype=float32"), tiny, baseline=0)
    assert plain.micro_batch == 256 and any("set auto_batch=True" in w for w in plain.warnings)
    auto = diagnose(cfg("global_batch_size=256", "auto_batch=True", "arch.forward_dtype=float32"), tiny, baseline=0)
    assert auto.micro_batch is not None and auto.micro_batch < 256 and 256 % auto.micro_batch == 0
    assert auto.expected_peak <= DEFAULT_MEMORY_FRACTION * tiny.memory_available
    hopeless = diagnose(cfg("arch.forward_dtype=float32"), replace(LAPTOP, memory_available=GB // 64), baseline=0)
    assert hopeless.micro_batch is None and any("even micro_batch_size=1" in w for w in hopeless.warnings)


def test_an_old_gpu_gets_float16_and_is_planned_against_its_own_memory():
    t4 = replace(LAPTOP, gpus=[hardware.GPUInfo("Tesla T4", 15 * GB, (7, 5), free_bytes=14 * GB)])
    arc = ("device=auto", "arch.forward_dtype=auto", "arch.hidden_size=128", "arch.num_heads=4", "arch.L_cycles=4",
           "global_batch_size=768")
    plan = diagnose(cfg(*arc), t4, baseline=0)
    assert plan.device == "cuda" and plan.dtype == "float16" and "7.5" in plan.dtype_reason
    assert plan.available == 14 * GB
    assert any("over 90 %" in w and "retry" in w for w in plan.warnings)  # 768 rows of seq 900 do not fit 14 GB
    h100 = replace(LAPTOP, gpus=[hardware.GPUInfo("H100", 80 * GB, (9, 0), free_bytes=79 * GB)])
    assert diagnose(cfg(*arc), h100, baseline=0).dtype == "bfloat16"


def test_a_dataset_sets_the_shapes_and_the_puzzle_table(tmp_path):
    from trm_kaggle.config import SudokuBuildConfig
    from trm_kaggle.data.puzzles.sudoku import build_sudoku

    data = tmp_path / "sudoku4"
    build_sudoku(SudokuBuildConfig(output_dir=str(data), size=4, num_train=20, num_test=4, progress=False))
    plan = diagnose(cfg("arch.forward_dtype=float32"), LAPTOP, str(data), baseline=0)
    assert (plan.seq_len, plan.vocab_size, plan.puzzle_rows) == (16, 6, 1) and plan.data == str(data)
    missing = diagnose(cfg(f"data_paths=[{tmp_path / 'gone'}]", "arch.forward_dtype=float32"), LAPTOP, baseline=0)
    assert missing.seq_len == 900 and any("is not here" in w for w in missing.warnings)


def test_command_line(capsys, tmp_path):
    assert main(["doctor", "--preset", "cpu-smoke", "arch.forward_dtype=float32"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("CPU: ") and "memory:" in out and "torch " in out
    assert "train --preset cpu-smoke would use:" in out and "expected peak memory" in out
    assert main(["doctor", "--json", "arch.forward_dtype=float32"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["machine"]["cores"] >= 1 and d["plan"]["device"] in ("cpu", "cuda", "mps")
    assert main(["doctor", str(tmp_path / "nope")]) == 2
    assert "nope: dataset directory not found" in capsys.readouterr().err
    (tmp_path / "afile").write_text("x")
    assert main(["doctor", str(tmp_path / "afile")]) == 2
    assert "afile: dataset directory expected, found a file" in capsys.readouterr().err
    # DATA and a typed data_paths: the plan read DATA, the typed one was read by nothing (even a missing folder)
    (tmp_path / "d").mkdir()
    assert main(["doctor", str(tmp_path / "d"), "data_paths=[does_not_exist]"]) == 2
    assert "both name the data: give the dataset once" in capsys.readouterr().err


def test_what_train_refuses_before_its_first_step_is_said_not_planned(capsys, monkeypatch):
    """`global_batch_size=8 micro_batch_size=3` was planned as "would use micro-batch: 3" with status 0 and no
    warning, and `wandb=true` without wandb alike; train refuses both. Each is a warning in train's words."""
    import builtins

    real = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == "wandb":
            raise ImportError("no wandb here")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    plan = diagnose(cfg("global_batch_size=8", "micro_batch_size=3", "wandb=true", "arch.forward_dtype=float32"),
                    LAPTOP, baseline=0)
    assert "micro_batch_size 3 must divide the per-rank batch 8: train refuses to start" in plan.warnings
    assert "wandb=True needs the wandb package (pip install wandb): train refuses to start" in plan.warnings
    assert main(["doctor", "global_batch_size=8", "micro_batch_size=3", "arch.forward_dtype=float32"]) == 0
    out = capsys.readouterr().out
    assert "would refuse to start (see the warnings below)" in out and "must divide the per-rank batch 8" in out
    assert not any("refuses" in w for w in diagnose(cfg("global_batch_size=8", "micro_batch_size=4",
                                                        "arch.forward_dtype=float32"), LAPTOP, baseline=0).warnings)


def test_doctor_reports_the_threads_train_would_take(monkeypatch, capsys):
    """The one thread rule of train (`hardware.choose_threads`): OMP_NUM_THREADS as the user set it, and said so;
    the threads setting over it."""
    import torch

    from trm_kaggle import hardware

    before = torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(hardware, "usable_cores", lambda: 4)  # a test worker may keep to one core
    try:
        assert main(["doctor", "--preset", "cpu-smoke"]) == 0
        assert "; 1 threads (OMP_NUM_THREADS=1)" in capsys.readouterr().out
        assert main(["doctor", "--preset", "cpu-smoke", "threads=2"]) == 0
        assert "; 2 threads (threads=2, over OMP_NUM_THREADS=1)" in capsys.readouterr().out
    finally:
        torch.set_num_threads(before)


def test_overrides_on_either_side_of_an_option_are_read(capsys, tmp_path):
    """`doctor DATA --preset P key=value` (the order its usage line shows) was "unrecognized arguments", and
    `train a=1 --preset P b=2` alike: argparse takes positionals in one run. The overrides are split off first."""
    (tmp_path / "d").mkdir()
    assert main(["doctor", "--json", "arch.forward_dtype=float32", "--preset", "cpu-smoke", "global_batch_size=8"]) == 0
    assert json.loads(capsys.readouterr().out)["plan"]["local_batch"] == 8
    assert main(["train", "global_batch_size=8", "--preset", "cpu-smoke", "ema=false", "--print-config"]) == 0
    out = capsys.readouterr().out
    assert "global_batch_size: 8" in out and "\nema: false" in out


def test_a_device_this_machine_lacks_is_a_refusal_not_a_plan(monkeypatch):
    """`doctor device=xla` (no torch_xla) or `device=cuda` (no GPU) said "train would use: device xla" with no
    warning, and train refused both."""
    from trm_kaggle import xla

    monkeypatch.setattr(xla, "installed", lambda: False)
    for device, problem in [("xla", "device=xla needs torch_xla, which is not installed here"),
                            ("cuda", "device=cuda requested but this machine has no CUDA device(s)"),
                            ("mps", "device=mps requested but MPS is not available")]:
        plan = diagnose(cfg(f"device={device}", "arch.forward_dtype=float32"), LAPTOP, baseline=0)
        assert f"{problem}: train refuses to start" in plan.warnings, plan.warnings
        assert plan_lines(plan, "p")[0] == "train --preset p would refuse to start (see the warnings below); " \
                                           "past that it would use:"
    # the forward dtype left to the device: its kind was asked of torch_xla (ModuleNotFoundError, a traceback)
    plan = diagnose(cfg("device=xla", "arch.forward_dtype=auto"), LAPTOP, baseline=0)
    assert "device=xla needs torch_xla, which is not installed here: train refuses to start" in plan.warnings
    server = replace(LAPTOP, gpus=[hardware.GPUInfo("H100", 80 * GB, (9, 0), free_bytes=79 * GB)], mps=True)
    for device in ("cuda", "mps", "cpu"):
        assert not any("refuses" in w for w in diagnose(cfg(f"device={device}", "arch.forward_dtype=float32"),
                                                        server, baseline=0).warnings)


def test_grad_checkpointing_is_counted_in_the_plan():
    """doctor printed the same expected peak with grad_checkpointing on and off (1.72 GB either way, measured
    1.30 and 1.93): the plan counts what a checkpointed cycle keeps, says so, and auto_batch picks more rows."""
    machine = replace(LAPTOP, memory_available=2 * GB)
    model = ("global_batch_size=256", "arch.forward_dtype=float32", "arch.hidden_size=128", "arch.num_heads=4")
    plain = diagnose(cfg(*model, "auto_batch=True"), machine, baseline=0)
    saved = diagnose(cfg(*model, "auto_batch=True", "grad_checkpointing=True"), machine, baseline=0)
    assert saved.micro_batch > plain.micro_batch, (plain.micro_batch, saved.micro_batch)
    same_rows = diagnose(cfg(*model, f"micro_batch_size={plain.micro_batch}", "grad_checkpointing=True"), machine, baseline=0)
    assert same_rows.expected_peak < plain.expected_peak
    parts = next(line for line in plan_lines(saved, "cpu-smoke") if "memory by part" in line)
    assert "grad_checkpointing" in parts and "rebuilt in backward" in parts, parts
    assert "grad_checkpointing" not in next(line for line in plan_lines(plain, "cpu-smoke") if "memory by part" in line)


def test_diagnose_names_a_wrong_argument():
    """threads=(-3, 'x') planned -3 threads, a negative baseline a negative peak; a dict as cfg or None as facts
    were AttributeErrors."""
    import pytest

    c = cfg()
    for call, kind, said in [
        (lambda: diagnose({}, LAPTOP), TypeError, "cfg: expected a TrainConfig, got dict"),
        (lambda: diagnose(c, None), TypeError, "facts: expected a hardware.HardwareFacts, got NoneType"),
        (lambda: diagnose(c, LAPTOP, threads=(-3, "x")), ValueError, "threads[0]=-3"),
        (lambda: diagnose(c, LAPTOP, threads=5), TypeError, "threads: expected a list of (count, why)"),
        (lambda: diagnose(c, LAPTOP, baseline=-10**12), ValueError, "baseline=-1000000000000"),
        (lambda: diagnose(c, LAPTOP, processes=0), ValueError, "processes=0"),
    ]:
        with pytest.raises(kind, match=re.escape(said)):
            call()


def test_run_doctor_takes_one_str_as_one_preset_or_override():
    """'cpu-smoke' was the presets c+p+u+-+s+m+o+k+e, and 'lr=1' the override 'l'."""
    import pytest

    from trm_kaggle.doctor import run_doctor

    assert "train --preset cpu-smoke would" in run_doctor("cpu-smoke", None, "lr=0.001", False)
    with pytest.raises(TypeError, match=re.escape("overrides[0]: expected a str")):
        run_doctor([], None, [5], False)


def test_doctor_and_train_ignore_a_stray_local_world_size_alike(monkeypatch, capsys):
    """Alone (WORLD_SIZE unset), LOCAL_WORLD_SIZE=4096 split train's memory 4096 ways while doctor ignored it."""
    from trm_kaggle.train.memory import memory_aware_micro_batch

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4096")
    monkeypatch.setattr(hardware, "memory", lambda: (8 * GB, 8 * GB))
    assert main(["doctor", "--preset", "cpu-smoke", "global_batch_size=8"]) == 0
    out = capsys.readouterr().out
    assert "LOCAL_WORLD_SIZE=4096 ignored: WORLD_SIZE is unset" in out and "micro-batch: 8 of" in out
    c = cfg("global_batch_size=8", "auto_batch=True")
    import torch
    assert memory_aware_micro_batch(c, seq_len=16, vocab_size=12, num_puzzle_identifiers=1, num_puzzles=1,
                                    device=torch.device("cpu"), dtype=torch.float32, local_batch=8) == 8


def test_a_model_far_larger_than_memory_is_planned_from_its_shapes_without_allocating_it(tmp_path):
    """50 GB of parameters: the plan comes back at once under a 4 GB address-space limit, with the warning (the
    activation probe allocated the model, and ran the machine out of memory before a word)."""
    import resource
    import subprocess
    import sys

    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
            "from trm_kaggle.doctor import diagnose; from test_doctor import LAPTOP, cfg\n"
            "plan = diagnose(cfg('arch.hidden_size=4096', 'arch.L_layers=64'), LAPTOP, baseline=0)\n"
            "print(plan.micro_batch, plan.parameters, plan.warnings)")

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (4 * GB, 4 * GB))

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, preexec_fn=limit,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    micro, parameters, warnings = out.stdout.split(" ", 2)
    assert micro == "None" and int(parameters) > 8 * 10**9 and "even micro_batch_size=1 needs over" in warnings
