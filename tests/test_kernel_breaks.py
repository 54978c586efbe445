"""The submission kernel never raises and always leaves a valid submission: one break per case, each run as
Kaggle runs the kernel (papermill, offline, a fresh environment installing from the bundle's wheels; see
trm_kaggle.kaggle.rehearsal), each ending with papermill status 0 and a submission.json that answers every task.

One bundle (no downloads, a tiny model) is built for the whole module; each case breaks one thing in a fresh
sandbox: no wheel, an offline install that cannot resolve, a wheel for another Python, a truncated wheel,
pydantic or torch unimportable on the image, weights missing, cut short or from another model, a GPU this torch
build has no kernels for (simulated), and both of Kaggle's mount layouts (2025: input/<slug>/; 2026:
input/competitions/<slug>/, input/datasets/<owner>/<slug>/), the 2025 one with Kaggle's Save Version run, bad
notebook parameters and a sample submission whose ids differ.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from trm_kaggle.errors import TRMError
from trm_kaggle.evaluate.submission import check_submission
from trm_kaggle.kaggle import bundle, offline_install, rehearsal, sandbox

from conftest import make_export, make_fake_wheel, random_task

pytest.importorskip("papermill", reason="the notebooks extra (papermill, ipykernel) is needed to run notebooks")
pytestmark = pytest.mark.slow

TASKS = 3


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    try:
        sandbox.probe_netns()
    except TRMError as e:  # visible as a skip with its reason, never as a pass
        pytest.skip(f"no network namespace on this machine, so the offline run cannot be proven: {e}")
    root = tmp_path_factory.mktemp("kernel_breaks")
    rng = np.random.default_rng(0)
    tasks = {f"{i:08x}": random_task(rng, n_train=2, n_test=1 + i % 2, max_side=5) for i in range(TASKS)}
    challenges = root / "arc-agi_evaluation_challenges.json"
    challenges.write_text(json.dumps({k: v[0] for k, v in tasks.items()}))
    assert bundle.main([str(root / "bundle"), "--no-download", "--weights", str(make_export(root / "export"))]) == 0
    return root / "bundle", challenges


def stub_package(directory: Path, name: str, message: str) -> dict:
    """A package `name` that cannot be imported, shadowing the image's (PYTHONPATH for the kernel)."""
    (directory / name).mkdir(parents=True)
    (directory / name / "__init__.py").write_text(f"raise ImportError({message!r})\n")
    return {"PYTHONPATH": str(directory)}


def run_case(built, alter=None, parameters=None, kernel_env=None, mounts="2025") -> tuple[dict, str]:
    out, challenges = built
    report = rehearsal.execute(out, challenges=challenges, max_tasks=1, time_budget=300, finetune_steps=1, num_aug=1,
                             device="cpu", workers=1, timeout=600, echo=lambda _: None, alter=alter,
                             parameters=parameters, kernel_env=kernel_env, mounts=mounts)
    log = Path(report["log"]).read_text(errors="replace")
    assert report["papermill_rc"] == 0, log[-3000:]  # the notebook did not raise
    assert report["submission_valid"], (report["problems"], log[-3000:])
    check_submission(report["submission"], challenges)  # every task of the file, both attempts, valid grids
    return report, log


def ran_by_the_model(log: str) -> int:
    """Tasks the model predicted, by the solve's summary line: those it answered, plus those whose predictions
    decoded no valid grid (a tiny random model's usual case)."""
    import re

    (line,) = [line for line in log.splitlines() if f"of {TASKS} tasks answered by the model" in line]
    m = re.search(rf"(\d+) of {TASKS} tasks answered by the model(?: \((\d+) more predicted)?", line)
    return int(m[1]) + int(m[2] or 0)


def _remove_wheel(layout):
    for wheel in layout.wheels.glob("trm_kaggle*.whl"):
        wheel.unlink()


def _unresolvable_wheel(layout):  # the only trm_kaggle wheel needs a package nobody ships
    import zipfile

    _remove_wheel(layout)
    wheel = make_fake_wheel(layout.wheels, "trm_kaggle", "99.0", requires=["trm-missing-dependency>=1"])
    with zipfile.ZipFile(wheel, "a") as z:  # installable: it installs (--no-deps), then the check names the need
        z.writestr("trm_kaggle-99.0.dist-info/RECORD", "")
        z.writestr(offline_install.WHEEL_PATH, Path(offline_install.__file__).read_text())  # the kernels' installer


def _wheel_for_another_python(layout):  # the only trm_kaggle wheel is tagged for CPython 3.9
    (wheel,) = layout.wheels.glob("trm_kaggle*.whl")
    wheel.rename(wheel.with_name(wheel.name.replace("py3-none-any", "cp39-cp39-manylinux2014_x86_64")))


def _truncate_wheel(layout):
    (wheel,) = layout.wheels.glob("trm_kaggle*.whl")
    wheel.write_bytes(wheel.read_bytes()[: wheel.stat().st_size // 2])


def _remove_weights(layout):
    (layout.weights / "weights.safetensors").unlink()


def _truncate_weights(layout):
    path = layout.weights / "weights.safetensors"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _foreign_config(layout):
    path = layout.weights / "config.json"
    config = json.loads(path.read_text())
    config["arch"].update(hidden_size=64, num_heads=4)
    path.write_text(json.dumps(config))


FAKE_GPU = '''
# A GPU whose compute capability this torch build has no kernels for: torch.cuda is patched right after torch
# is imported (only in the processes that import it: pip and papermill never pay for torch).
import importlib.abc
import sys


def _patch(torch):
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 1
    torch.cuda.get_arch_list = lambda: ["sm_50"]
    torch.cuda.get_device_capability = lambda i=None: (8, 9)
    torch.cuda.get_device_name = lambda i=None: "Simulated L4"


class _AfterTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        from importlib.util import find_spec
        spec = find_spec("torch")
        if spec is None:
            return None
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _AfterTorch())
'''


@pytest.mark.parametrize("case", ["no wheel", "pip fails", "wheel for another Python", "truncated wheel",
                                  "pydantic unimportable", "torch unimportable"])
def test_install_or_import_fails_the_fallback_stands(built, tmp_path, case):
    params, env, alter = {}, None, None
    if case == "no wheel":
        alter, params = _remove_wheel, {"WHEELS_DIR": None}
        words = "installing trm_kaggle failed (trm_kaggle is not installed and no trm_kaggle*.whl is under "
    elif case == "pip fails":
        alter, words = _unresolvable_wheel, "trm_kaggle needs trm-missing-dependency>=1, which neither this image"
    elif case == "wheel for another Python":
        alter, words = _wheel_for_another_python, "No matching distribution found for trm_kaggle"
    elif case == "truncated wheel":
        alter, words = _truncate_wheel, "is not a readable wheel ("
    elif case == "pydantic unimportable":
        env = stub_package(tmp_path / "broken", "pydantic", "simulated: pydantic is not importable")
        words = "importing trm_kaggle failed (ImportError: simulated: pydantic is not importable)"
    else:
        env = stub_package(tmp_path / "broken", "torch", "simulated: torch is not importable")
        words = "importing trm_kaggle failed (ImportError: simulated: torch is not importable)"
    report, log = run_case(built, alter=alter, parameters=params, kernel_env=env)
    lines = [line for line in log.splitlines() if "the fallback submission.json stands" in line]
    assert len(lines) == 1 and words in lines[0], log[-3000:]
    assert "the fallback answers (the model did not run)" in log
    assert "Traceback" not in log


@pytest.mark.parametrize("case", ["weights missing", "weights truncated", "config from another model"])
def test_unusable_weights_keep_the_fallback(built, case):
    alter = {"weights missing": _remove_weights, "weights truncated": _truncate_weights,
             "config from another model": _foreign_config}[case]
    report, log = run_case(built, alter=alter)
    assert report["trm_kaggle_in_venv"]  # installed and imported: the model path itself failed
    assert f"0 of {TASKS} tasks answered by the model" in log and "keep the fallback" in log, log[-3000:]


def test_gpu_without_kernels_falls_back_to_cpu(built, tmp_path):
    (tmp_path / "fake_gpu").mkdir()
    (tmp_path / "fake_gpu" / "sitecustomize.py").write_text(FAKE_GPU)
    report, log = run_case(built, parameters={"DEVICE": "auto"}, kernel_env={"PYTHONPATH": str(tmp_path / "fake_gpu")})
    warnings = [line for line in log.splitlines() if "the workers run on the CPU instead" in line]
    assert len(warnings) == 1 and "GPU 0 (Simulated L4)" in warnings[0] and "sm_89" in warnings[0], log[-3000:]
    assert ran_by_the_model(log) == 1, log[-3000:]


def test_2026_mounts(built):
    report, log = run_case(built, mounts="2026")
    assert report["ok"], report["problems"]
    layout = Path(report["sandbox"]) / "input"
    assert (layout / "competitions" / "arc-prize-2026-arc-agi-2" / "arc-agi_test_challenges.json").is_file()
    assert list((layout / "datasets").glob("*/trm-kaggle-wheels/trm_kaggle*.whl"))
    assert ran_by_the_model(log) == 1, log[-3000:]


def test_2025_mounts_save_run_bad_parameters_and_sample_submission(built):
    def sample_differs(layout):
        ids = sorted(json.loads(layout.challenges.read_text()))
        (layout.competition / "sample_submission.json").write_text(json.dumps(
            {k: [{"attempt_1": [[0]], "attempt_2": [[0]]}] for k in [*ids[1:], "ffffffff"]}))

    report, log = run_case(built, alter=sample_differs, kernel_env={"KAGGLE_KERNEL_RUN_TYPE": "Interactive"},
                           parameters={"TIME_BUDGET": "abc", "MAX_TASKS": "auto", "SAVE_MAX_TASKS": 1,
                                       "SAVE_TIME_BUDGET": 300, "WORKERS": -2})
    assert report["ok"], report["problems"]
    assert "mode: save (Kaggle's interactive Save Version run" in log and "the first 1 tasks within 300 s" in log
    assert "WARNING: TIME_BUDGET='abc' is not" in log and "WARNING: WORKERS=-2 is not" in log
    ids = sorted(json.loads(Path(report["submission"]).read_text()))
    assert "WARNING: task ids differ from" in log and f"1 only there (ffffffff), 1 only in the challenges file " \
                                                      f"({ids[0]})" in log, log[-3000:]
    assert ran_by_the_model(log) == 1, log[-3000:]
