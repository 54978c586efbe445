"""Publishing the bundle with the kaggle CLI (trm_kaggle.kaggle.push); nothing is ever sent."""

from __future__ import annotations

import subprocess

import pytest

from trm_kaggle.errors import TRMError
from trm_kaggle.kaggle import bundle as B
from trm_kaggle.kaggle import metadata as M
from trm_kaggle.kaggle import push as P

from conftest import USER, _edit


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
    assert rc == 2  # the status of every input or setup problem (docs/reliability.md)
    cap = capsys.readouterr()
    assert [line for line in cap.err.splitlines() if line.startswith("error:")] == cap.err.strip().splitlines()[-1:]
    assert f"kaggle datasets create -p {out.absolute() / 'wheels'}" in cap.out
    assert f"kaggle datasets create -p {out.absolute() / 'weights'}" in cap.out
    assert f"kaggle kernels push -p {out.absolute() / 'kernel'}" in cap.out
    assert "credentials" in cap.err or "kaggle` command" in cap.err
    assert (out / "kernel" / M.KERNEL_META).is_file()  # the bundle itself was built


def test_push_with_credentials_runs_versions_in_order(bundle_copy, monkeypatch, no_credentials):
    monkeypatch.setenv("KAGGLE_USERNAME", USER)
    monkeypatch.setenv("KAGGLE_KEY", "not-a-real-key")
    monkeypatch.setattr(P.shutil, "which", lambda name: f"/usr/bin/{name}")
    ran = []

    def runner(cmd, **kw):
        ran.append(cmd)
        return subprocess.CompletedProcess(cmd, 0)

    assert P.push(bundle_copy, "new weights", runner=runner) == 0
    assert [c[:3] for c in ran] == [["kaggle", "datasets", "version"]] * 2 + [["kaggle", "kernels", "push"]]
    assert ran[0][-2:] == ["-m", "new weights"]


def test_push_refuses_an_invalid_bundle(bundle_copy, monkeypatch):
    _edit(bundle_copy / "kernel" / M.KERNEL_META, enable_internet=True)
    with pytest.raises(TRMError, match="enable_internet"):
        P.push(bundle_copy, runner=lambda *a, **k: pytest.fail("must not run"))


def test_credentials_file_is_found(no_credentials, monkeypatch):
    assert P.kaggle_credentials() is None
    (no_credentials / ".kaggle").mkdir()
    (no_credentials / ".kaggle" / "kaggle.json").write_text("{}")
    assert P.kaggle_credentials().endswith("kaggle.json")


@pytest.mark.parametrize("damage", ["changed", "truncated", "removed"])
def test_push_checks_every_file_against_the_manifest_first(bundle_copy, damage):
    weights = bundle_copy / "weights" / "weights.safetensors"
    data = weights.read_bytes()
    if damage == "changed":
        weights.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    elif damage == "truncated":
        weights.write_bytes(data[: len(data) // 2])
    else:
        weights.unlink()
    with pytest.raises(TRMError, match="weights.safetensors: .*(differs from|missing).*rebuild the bundle"):
        P.push(bundle_copy, runner=lambda *a, **k: pytest.fail("must not upload"))
