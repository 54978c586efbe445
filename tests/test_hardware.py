"""Hardware facts read from the operating system, and the RSS sampler, on this machine and on invented ones."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from trm_kaggle import hardware

MEMINFO = "MemTotal:       16384000 kB\nMemFree:          100000 kB\nMemAvailable:    8192000 kB\nBuffers: 1 kB\n"
CPUINFO_X86 = ("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
               "flags\t\t: fpu sse2 avx2 fma avx512f avx512_bf16 amx_bf16 amx_tile\n\n"
               "processor\t: 1\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t\t: fpu sse2 avx2 fma\n")
CPUINFO_ARM = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes sve\nModel\t: Raspberry Pi 5\n"


def test_meminfo_and_cpuinfo_from_files(tmp_path):
    (tmp_path / "meminfo").write_text(MEMINFO)
    assert hardware.read_meminfo(tmp_path / "meminfo") == (16384000 * 1024, 8192000 * 1024)
    assert hardware.read_meminfo(tmp_path / "missing") == (None, None)
    (tmp_path / "cpuinfo").write_text(CPUINFO_X86)
    model, isa = hardware.read_cpuinfo(tmp_path / "cpuinfo")
    assert model == "Intel(R) Xeon(R) Platinum 8480+"
    assert isa == ["avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"]
    (tmp_path / "arm").write_text(CPUINFO_ARM)
    assert hardware.read_cpuinfo(tmp_path / "arm") == ("Raspberry Pi 5", ["asimd", "sve"])


def test_cgroup_limits_v1_and_v2(tmp_path):
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "memory.max").write_text("4294967296\n")
    (v2 / "memory.current").write_text("1073741824\n")
    assert hardware.cgroup_memory(v2) == (4 * 2**30, 2**30)
    (v2 / "memory.max").write_text("max\n")
    assert hardware.cgroup_memory(v2) == (None, None)
    v1 = tmp_path / "v1" / "memory"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text("2147483648")
    (v1 / "memory.usage_in_bytes").write_text("536870912")
    assert hardware.cgroup_memory(tmp_path / "v1") == (2 * 2**30, 2**29)
    (v1 / "memory.limit_in_bytes").write_text(str(2**63 - 4096))  # v1's "no limit"
    assert hardware.cgroup_memory(tmp_path / "v1") == (None, None)
    assert hardware.cgroup_memory(tmp_path / "none") == (None, None)


def test_this_machine():
    facts = hardware.gather()
    assert facts.cores >= 1 and facts.cpu_model and facts.torch_version
    if facts.system == "Linux":
        assert facts.memory_total > 0 and 0 < facts.memory_available <= facts.memory_total
    assert hardware.current_rss() > 0 and hardware.peak_rss() >= hardware.current_rss() // 2
    assert "torch_version" in facts.as_dict()


def test_rss_sampler_sees_a_peak_and_starts_new_intervals():
    sampler = hardware.RSSSampler(interval_s=0.005)
    try:
        before = sampler.take()
        block = np.ones(300 * 2**20 // 8)  # 300 MB, written
        del block
        peak = sampler.take()  # the interval that held the block
        after = sampler.take()  # a new interval without it
    finally:
        sampler.close()
    assert peak - before > 250 * 2**20
    assert after < peak - 250 * 2**20


def test_peak_rss_of_a_subprocess_is_its_own_not_its_parents():
    """ru_maxrss of a child carries its parent's size over on Linux; peak_rss must not (the memory tests compare
    a child's peak with an estimate, whatever the size of the test process that started it)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the carry-over is a Linux behaviour")
    ballast = bytearray(300 * 2**20)
    ballast[::4096] = b"\x01" * len(ballast[::4096])  # touch every page: 300 MB resident here
    code = "from trm_kaggle import hardware; print(hardware.peak_rss())"
    child = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert child < 250 * 2**20 and hardware.peak_rss() >= 300 * 2**20
    del ballast


def test_usable_cores_follow_the_affinity_mask(monkeypatch):
    if not hasattr(hardware.os, "sched_getaffinity"):
        pytest.skip("no affinity mask on this system")
    monkeypatch.setattr(hardware.os, "sched_getaffinity", lambda pid: {0, 3, 5})
    monkeypatch.setattr(hardware.os, "cpu_count", lambda: 64)
    assert hardware.usable_cores() == 3


@pytest.mark.parametrize("visible, count, expected", [
    (None, 3, ["0", "1", "2"]), ("2,5,7", 3, ["2", "5", "7"]), (" 4, 6 ,", 2, ["4", "6"]), ("1,2,3", 2, ["1", "2"]),
    ("", 2, ["0", "1"]),
])
def test_visible_cuda_ids(monkeypatch, visible, count, expected):
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert hardware.visible_cuda_ids(count) == expected


def test_cores_and_visible_devices_are_read_in_hardware_py_alone():
    """One owner: no other module counts cores or parses CUDA_VISIBLE_DEVICES (setting it for a child is fine)."""
    import re
    from pathlib import Path

    package = Path(hardware.__file__).parent
    reads = re.compile(r"cpu_count\(|sched_getaffinity|environ\.get\(\s*[\"']CUDA_VISIBLE_DEVICES|"
                       r"environ\[[\"']CUDA_VISIBLE_DEVICES[\"']\](?!\s*=)")
    found = [f"{p.relative_to(package)}:{n}" for p in sorted(package.rglob("*.py")) if p.name != "hardware.py"
             for n, line in enumerate(p.read_text().splitlines(), 1) if reads.search(line.split("#")[0])]
    assert found == []


def test_place_model_moves_the_model_or_refuses_in_one_line():
    import torch

    from trm_kaggle.errors import TRMError

    model = torch.nn.Linear(2, 2)
    assert hardware.place_model(model) == torch.device("cpu")  # None: where the weights are
    assert hardware.place_model(torch.nn.ReLU()) == torch.device("cpu")  # no weights at all
    assert hardware.place_model(model, "meta") == torch.device("meta")  # moved, in place
    assert model.weight.device.type == "meta" and hardware.place_model(model).type == "meta"
    with pytest.raises(TRMError, match=r"^cannot move the model from meta to cpu: ") as e:
        hardware.place_model(model, "cpu")  # a meta model has no values to copy
    assert "\n" not in str(e.value)
    for bad, why in (("cuda:99", r"^device=cuda:99 requested but this machine has \w+ CUDA device\(s\)$"),
                     ("gpu", r"^device='gpu' is not a device \(")):
        with pytest.raises(TRMError, match=why) as e:
            hardware.place_model(torch.nn.Linear(2, 2), bad)
        assert "\n" not in str(e.value)


def _waits_in_a_fresh_process(env_extra: dict[str, str], code: str) -> list[str]:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in hardware.WAIT_ENVS} | env_extra
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.splitlines()


def test_openmp_waits_are_shortened_before_torch_loads_unless_the_user_chose():
    show = ("import os\nfrom trm_kaggle.hardware import quiet_openmp_waits\nprint(quiet_openmp_waits())\n"
            "print(os.environ.get('GOMP_SPINCOUNT'), os.environ.get('OMP_WAIT_POLICY'))\n")
    said, env = _waits_in_a_fresh_process({}, show)
    assert said.startswith("GOMP_SPINCOUNT=10000 (trm_kaggle's default") and env == "10000 None"
    said, env = _waits_in_a_fresh_process({"OMP_WAIT_POLICY": "ACTIVE"}, show)
    assert said == "OMP_WAIT_POLICY=ACTIVE (as set)" and env == "None ACTIVE"
    said, env = _waits_in_a_fresh_process({"GOMP_SPINCOUNT": "5"}, show)
    assert said == "GOMP_SPINCOUNT=5 (as set)" and env == "5 None"
    said, env = _waits_in_a_fresh_process({"GOMP_SPINCOUNT": "5\x1b[2J"}, show)  # said escaped: doctor prints it
    assert said == "GOMP_SPINCOUNT=5\\x1b[2J (as set)"
    said, env = _waits_in_a_fresh_process({}, "import torch\n" + show)  # too late: nothing changed, said so
    assert "torch was imported before" in said and env == "None None"


def test_the_command_line_shortens_the_waits_before_any_command_loads_torch():
    (line,) = [x for x in _waits_in_a_fresh_process({}, "import sys\nfrom trm_kaggle.cli import main\n"
                                                        "sys.exit(main(['doctor']))") if x.startswith("OpenMP waits")]
    assert line == "OpenMP waits: GOMP_SPINCOUNT=10000 (trm_kaggle's default: shorter spinning waits)"


@pytest.mark.parametrize("value", ["-3", "nan", "two"])
def test_an_omp_num_threads_no_openmp_takes_is_said_as_ignored(monkeypatch, value):
    import trm_kaggle.hardware as H

    monkeypatch.setattr(H, "free_cores", lambda: (2, 2, 0.5))
    monkeypatch.setattr(H, "_AUTO", {})
    monkeypatch.setenv("OMP_NUM_THREADS", value)
    threads, why = H.choose_threads()
    assert threads == 2 and f"OMP_NUM_THREADS={value} ignored: not a whole number from 1 to 4096" in why


@pytest.mark.parametrize("requested, said", [
    ("xyz", "device='xyz': not a device (auto, cpu, cuda, cuda:N, mps or xla)"),
    ("cuda:999", "device=cuda:999"),  # no CUDA here, or not that many devices: refused either way
    ("", "not a device"),
])
def test_a_device_this_machine_lacks_or_no_device_at_all_is_one_line(requested, said):
    """`estimate --device xyz` and `evaluate --device cuda:1` on a CPU machine ended in torch's traceback (its list
    of every device type it knows): the one rule (`pick_device`) refuses them in one line."""
    from trm_kaggle.errors import TRMError
    from trm_kaggle.hardware import pick_device

    with pytest.raises(TRMError, match=re.escape(said)) as err:
        pick_device(requested)
    assert "\n" not in str(err.value)
    assert pick_device("cpu").type == "cpu"


@pytest.mark.parametrize("call, said", [
    (lambda: hardware.choose_threads(-1), "threads=-1: expected a whole number from 0 to 4,096"),
    (lambda: hardware.choose_threads(float("nan")), "threads=nan"),
    (lambda: hardware.choose_threads(True), "threads=True"),
    (lambda: hardware.choose_threads(2**70), "threads=1180591620717411303424"),
    (lambda: hardware.choose_threads(None, share=-2), "share=-2"),
    (lambda: hardware.visible_cuda_ids(2**70), "count=1180591620717411303424"),
    (lambda: hardware.cuda_problem(float("nan")), "timeout=nan"),
    (lambda: hardware.cuda_problem(-1), "timeout=-1"),
])
def test_the_helpers_counts_and_times_are_named_when_out_of_bounds(call, said):
    """-1 threads reached torch's own error; a count of 2**70 devices built a list until memory ran out; a NaN
    probe time reached the child's clock."""
    with pytest.raises(ValueError, match=re.escape(said)):
        call()


def test_the_helpers_take_numpy_counts(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(hardware, "usable_cores", lambda: 4)  # a test worker may keep to one core
    assert hardware.choose_threads(np.int64(2))[0] == 2 and hardware.visible_cuda_ids(np.int64(2)) == ["0", "1"]


def test_cgroup_figures_this_process_could_not_live_under_are_not_taken(tmp_path):
    """A memory.max of 0 or 1 byte (this process alive within it) or a memory.current above memory.max made doctor
    say "-0.28 GB available", and train's memory check would refuse on it. A limit below this process's own
    resident memory is not its limit; a group over its limit has nothing free, never less."""
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "memory.current").write_text("300000000\n")
    for odd in ("0", "1", "4096"):
        (v2 / "memory.max").write_text(odd + "\n")
        assert hardware.cgroup_memory(v2) == (None, None), odd
    (v2 / "memory.max").write_text(f"{hardware.current_rss() + 2**30}\n")
    (v2 / "memory.current").write_text(f"{hardware.current_rss() + 2**31}\n")
    limit, usage = hardware.cgroup_memory(v2)
    assert limit > 2**30 and usage == limit  # clamped: nothing free


def test_a_cpu_model_name_reaches_no_terminal_raw(tmp_path):
    (tmp_path / "cpuinfo").write_text("model name\t: \x1b[31mEVIL\x07\nflags\t\t: avx2\n")
    model, isa = hardware.read_cpuinfo(tmp_path / "cpuinfo")
    assert model == "\\x1b[31mEVIL\\x07" and isa == ["avx2"]


@pytest.mark.parametrize("world, local, said", [
    ("", "5000", None),  # alone: ignored, said
    ("2", "5000", "LOCAL_WORLD_SIZE='5000' in the environment is not a count from 1 to 2"),
    ("8", "0", "LOCAL_WORLD_SIZE='0' in the environment is not a count from 1 to 8"),
    ("0", "", "WORLD_SIZE='0' in the environment is not a count from 1 to 999,999,999"),
])
def test_local_processes_follow_torchrun_and_ignore_a_stray_local_world_size(monkeypatch, world, local, said):
    """LOCAL_WORLD_SIZE=5000 in a plain `train` reached choose_threads' share check as a traceback, and 4096 split
    the memory 4096 ways (auto_batch blamed the machine) while doctor ignored it: one rule for both."""
    from trm_kaggle.errors import TRMError

    monkeypatch.setenv("WORLD_SIZE", world)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", local)
    if said is None:
        assert hardware.local_processes() == (1, "LOCAL_WORLD_SIZE=5000 ignored: WORLD_SIZE is unset, so this is "
                                                 "one process")
    else:
        with pytest.raises(TRMError, match=re.escape(said)):
            hardware.local_processes()
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert hardware.local_processes() == (2, "")


@pytest.mark.parametrize("interval", [0, -1, float("nan"), float("inf"), "x", None])
def test_an_rss_sampler_interval_is_checked_when_given(interval):
    """0, -1 and NaN started a thread that never waited; 'x' and inf ended the thread in a traceback on stderr
    while the constructor returned and sampling had silently stopped."""
    with pytest.raises(ValueError, match="interval_s="):
        hardware.RSSSampler(interval)


def test_odd_memory_files_are_unreadable_not_misread(tmp_path):
    """Fullwidth digits in memory.current were read by int() (the limit goes through ascii_number); a meminfo
    file that is no UTF-8 raised UnicodeDecodeError."""
    (tmp_path / "meminfo").write_bytes(b"MemTotal: \xff\xfe 100 kB\n")
    assert hardware.read_meminfo(tmp_path / "meminfo") == (None, None)
    (tmp_path / "memory.max").write_text(f"{hardware.current_rss() + 2**30}\n")
    (tmp_path / "memory.current").write_text("５０\n")
    assert hardware.cgroup_memory(tmp_path)[1] is None
