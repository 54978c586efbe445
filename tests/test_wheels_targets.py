"""The wheels dataset serves CPython 3.11 and 3.12 (Kaggle's 2025 and 2026 images): resolved offline per target
with pip itself (`pip install --dry-run --no-index --find-links WHEELS --python-version 3.X --only-binary=:all:
--target TMP trm_kaggle`), with the default --kaggle-has and with a short one (torch numpy only), so that every
dependency wheel shipped (pydantic_core is compiled per Python) is proven for both.

Downloads the dependency wheels from the package index (skipped, with the reason, where it cannot be reached).
The distributions assumed preinstalled on Kaggle stand in as empty wheels of the versions installed here.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trm_kaggle.kaggle import wheels as W
from trm_kaggle.kaggle.metadata import BundleIds

from conftest import make_fake_wheel

pytestmark = pytest.mark.slow  # downloads a few MB of wheels, then runs pip eight times

TARGETS = ("3.11", "3.12")
SHORT = ("torch", "numpy")


def _pip_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")  # no index or find-links from config
    return env


@pytest.fixture(scope="module")
def index_reachable(tmp_path_factory):
    d = tmp_path_factory.mktemp("probe")
    res = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(d), "six"],
                         capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        pytest.skip(f"the package index cannot be reached to download dependency wheels: "
                    f"{(res.stderr.strip().splitlines() or ['?'])[-1]}")


@pytest.fixture(scope="module")
def datasets(index_reachable, tmp_path_factory):
    root = tmp_path_factory.mktemp("wheels_targets")
    out = {}
    for name, has in (("default", W.DEFAULT_KAGGLE_HAS), ("short", SHORT)):
        out[name] = root / name
        W.build_wheels(out[name], ids=BundleIds("tester"), kaggle_has=has, builder="builtin", log=lambda _: None,
                       targets=[W.Target(python_version=v) for v in TARGETS])
    return out


def preinstalled(directory: Path, names) -> Path:
    """Empty wheels of `names` at the versions installed here (they satisfy trm_kaggle's requirements)."""
    for name in names:
        version = md.version(name).split("+")[0]
        make_fake_wheel(directory, name, version)
    return directory


def dry_run(wheels: Path, stand_ins: Path, version: str, tmp_path: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--find-links", str(wheels),
           "--find-links", str(stand_ins), *W.Target(python_version=version).pip_args(), "--target",
           str(tmp_path / f"target{version}"), "trm_kaggle"]
    return subprocess.run(cmd, capture_output=True, text=True, env=_pip_env(), timeout=300)


@pytest.mark.parametrize("has", ["default", "short"])
@pytest.mark.parametrize("version", TARGETS)
def test_the_dataset_resolves_offline_for_each_python(datasets, tmp_path, has, version):
    names = W.DEFAULT_KAGGLE_HAS if has == "default" else SHORT
    stand_ins = preinstalled(tmp_path / "kaggle_image", [n for n in names if _installed(n)])
    res = dry_run(datasets[has], stand_ins, version, tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    would = res.stdout.split("Would install", 1)[-1]
    assert "trm_kaggle" in would.replace("-", "_")
    if has == "short":  # shipped, for this Python: pydantic's compiled core among them
        assert "pydantic-core" in would.replace("_", "-") and "pyyaml" in would.lower().replace("_", "-")


def _installed(name: str) -> bool:
    try:
        md.version(name)
        return True
    except md.PackageNotFoundError:
        return False


def test_both_pythons_get_their_own_compiled_wheels(datasets):
    manifest = (datasets["short"] / "manifest.json").read_text()
    files = {p.name for p in datasets["short"].glob("*.whl")}
    for version in TARGETS:
        tag = "cp" + version.replace(".", "")
        assert any(f.startswith("pydantic_core-") and f"-{tag}-" in f for f in files), files
        assert f'"python_version": "{version}"' in manifest
    assert not any(f.startswith(("torch-", "numpy-")) for f in files)  # preinstalled: never shipped
    default = {p.name for p in datasets["default"].glob("*.whl")}
    assert len(default) == 1 and next(iter(default)).startswith("trm_kaggle-")


def test_without_the_312_core_the_312_resolution_fails(datasets, tmp_path):
    """The check can fail: the same dataset less its cp312 pydantic_core does not resolve for 3.12."""
    copy = tmp_path / "short"
    copy.mkdir()
    for wheel in datasets["short"].glob("*.whl"):
        if not (wheel.name.startswith("pydantic_core-") and "-cp312-" in wheel.name):
            os.link(wheel, copy / wheel.name)
    stand_ins = preinstalled(tmp_path / "kaggle_image", SHORT)
    assert dry_run(copy, stand_ins, "3.11", tmp_path).returncode == 0
    res = dry_run(copy, stand_ins, "3.12", tmp_path)
    assert res.returncode != 0 and "pydantic" in (res.stdout + res.stderr).lower()
