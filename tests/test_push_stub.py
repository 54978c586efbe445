"""`build_bundle.py --push` with the real `kaggle` package against a local stub of Kaggle's API (tests/kaggle_stub.py),
both inside a private network namespace (`unshare -rn`): nothing leaves the machine. Fake credentials come from a
throwaway KAGGLE_CONFIG_DIR. Checks what Kaggle would receive (the kernel's machine shape, sources and internet
setting; the uploaded files) and that a refusal in Kaggle's answer fails the command with one error line."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import make_export

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
STUB = Path(__file__).with_name("kaggle_stub.py")
WHEELS, WEIGHTS, KERNEL = "tester/trm-kaggle-wheels", "tester/trm-kaggle-weights", "tester/trm-kaggle-submission"


@pytest.fixture(scope="module")
def namespace():
    for module in ("kaggle", "six"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"the `{module}` package is not installed (pip install -e '.[dev]')")
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no `unshare` (util-linux): the stub cannot get a private network namespace")
    res = subprocess.run([unshare, "-rn", "true"], capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"`unshare -rn` is not allowed here ({res.stderr.strip()}): no private network namespace")
    return unshare


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    return make_export(tmp_path_factory.mktemp("push_stub") / "export")


def run(namespace, tmp_path, scenario, command) -> tuple[subprocess.CompletedProcess, list[dict]]:
    config = tmp_path / "kaggle_config"
    config.mkdir(exist_ok=True)
    (config / "kaggle.json").write_text(json.dumps({"username": "tester", "key": "not-a-real-key"}))
    (config / "kaggle.json").chmod(0o600)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAGGLE_") and "proxy" not in k.lower()}
    env.update(KAGGLE_CONFIG_DIR=str(config), KAGGLE_API_ENVIRONMENT="LOCALHOST", HOME=str(tmp_path / "home"),
               NO_PROXY="*")
    record = tmp_path / f"requests-{scenario}.json"
    res = subprocess.run([namespace, "-rn", sys.executable, str(STUB), str(record), scenario, "--", *command],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    return res, (json.loads(record.read_text()) if record.is_file() else [])


def push_command(out, export, *extra) -> list[str]:
    return [sys.executable, str(REPO / "build_bundle.py"), str(out), "--no-download", "--user", "tester",
            "--weights", str(export), "--push", "--push-wait", "30", *extra]


def calls(requests, name) -> list[dict]:
    return [r["body"] for r in requests if r["path"].endswith("/" + name)]


def test_first_push_creates_waits_and_sends_the_kernel(namespace, export, tmp_path):
    res, requests = run(namespace, tmp_path, "ok", push_command(tmp_path / "out", export))
    assert res.returncode == 0, res.stdout + res.stderr
    assert requests and all(r["auth"] == "Basic" for r in requests if r["method"] == "POST")  # the fake key
    created = calls(requests, "CreateDataset")
    assert [f"{b['ownerSlug']}/{b['slug']}" for b in created] == [WHEELS, WEIGHTS]
    assert all(b["isPrivate"] is True and b["files"] for b in created)
    uploaded = [b["name"] for b in calls(requests, "StartBlobUpload")]
    assert "weights.safetensors" in uploaded and "manifest.json" in uploaded
    assert any(n.startswith("trm_kaggle-") and n.endswith(".whl") for n in uploaded)
    assert not [n for n in uploaded if n.startswith(".")]  # bookkeeping (.trm_kaggle_output.json) stays home
    (kernel,) = calls(requests, "SaveKernel")
    assert kernel["slug"] == KERNEL and kernel["machineShape"] == "NvidiaL4"
    assert kernel["datasetDataSources"] == [WHEELS, WEIGHTS]
    assert kernel["competitionDataSources"] == ["arc-prize-2026-arc-agi-2"]
    assert kernel["enableInternet"] is False and kernel["enableGpu"] is True
    assert json.loads(kernel["text"])["metadata"]["kaggle"]["accelerator"] == "nvidiaL4"
    # the kernel went only after both datasets said ready
    paths = [r["path"].rsplit("/", 1)[-1] for r in requests]
    statuses = [i for i, p in enumerate(paths) if p == "GetDatasetStatus"]
    assert paths.index("SaveKernel") > statuses[-1] and "ready" in res.stdout
    assert f"kaggle kernels status {KERNEL}" in res.stdout and f"http://localhost/code/{KERNEL}" in res.stdout


def test_later_pushes_version_the_datasets(namespace, export, tmp_path):
    res, requests = run(namespace, tmp_path, "existing", push_command(tmp_path / "out", export, "--version-message",
                                                                      "retrained", "--accelerator", "NvidiaL4X1"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert not calls(requests, "CreateDataset")
    versions = calls(requests, "CreateDatasetVersion")
    assert [f"{b['ownerSlug']}/{b['datasetSlug']}" for b in versions] == [WHEELS, WEIGHTS]
    assert all(b["body"]["versionNotes"] == "retrained" for b in versions)
    assert calls(requests, "SaveKernel")[0]["machineShape"] == "NvidiaL4X1"


@pytest.mark.parametrize("scenario, words", [
    ("kernel-slug-taken", "Notebook slug tester/trm-kaggle-submission is already in use"),
    ("invalid-source", f"invalid dataset sources: {WEIGHTS}"),
    ("dataset-slug-taken", "The requested slug is reserved"),
])
def test_a_refusal_fails_with_one_error_line(namespace, export, tmp_path, scenario, words):
    res, requests = run(namespace, tmp_path, scenario, push_command(tmp_path / "out", export))
    assert res.returncode == 2, res.stdout + res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and words in errors[0] and "Kaggle refused it" in errors[0], res.stderr
    if scenario == "dataset-slug-taken":
        assert not calls(requests, "SaveKernel")  # nothing pushed after a refused dataset


def test_the_cli_alone_exits_0_on_a_refusal(namespace, export, tmp_path):
    """Why the answers are read: `kaggle kernels push` reports the refusal but exits 0."""
    out = tmp_path / "out"
    assert subprocess.run([sys.executable, str(REPO / "build_bundle.py"), str(out), "--no-download", "--user",
                           "tester", "--weights", str(export)], capture_output=True).returncode == 0
    cli = shutil.which("kaggle") or str(Path(sys.executable).with_name("kaggle"))
    res, requests = run(namespace, tmp_path, "kernel-slug-taken", [cli, "kernels", "push", "-p", str(out / "kernel")])
    assert calls(requests, "SaveKernel") and "already in use" in res.stdout + res.stderr
    assert res.returncode == 0
