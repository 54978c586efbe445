"""`build_bundle.py --push` with the real `kaggle` package against a local stub of Kaggle's API (tests/kaggle_stub.py),
both inside a private network namespace (`unshare -rn`): nothing leaves the machine. Fake credentials come from a
throwaway KAGGLE_CONFIG_DIR. Checks what Kaggle would receive (the kernel's machine shape, sources and internet
setting; the uploaded files) and that a refusal in Kaggle's answer fails the command with one error line; the owner
taken from the credentials; and the training bundle rebuilt from exactly the uploaded bytes, trained on for two
sessions with a SIGKILL in between, the second resuming from the first's newest complete state."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import make_export
from test_kaggle_training import SETTINGS, executed_text
from test_notebooks import kernel_name  # noqa: F401 (the session-scoped Jupyter kernel of this interpreter)
from trm_kaggle.config import SudokuBuildConfig
from trm_kaggle.data.puzzles.sudoku import build_sudoku
from trm_kaggle.errors import TRMError
from trm_kaggle.kaggle.sandbox import netns_wrapper, papermill_command, probe_netns
from trm_kaggle.train import checkpoint as ckpt

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


def run(namespace, tmp_path, scenario, command, token: bool = False) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """COMMAND against the stub; credentials: kaggle.json (user tester), or with `token` an access token alone."""
    config = tmp_path / "kaggle_config"
    config.mkdir(exist_ok=True)
    if not token:
        (config / "kaggle.json").write_text(json.dumps({"username": "tester", "key": "not-a-real-key"}))
        (config / "kaggle.json").chmod(0o600)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAGGLE_") and "proxy" not in k.lower()}
    env.update(KAGGLE_CONFIG_DIR=str(config), KAGGLE_API_ENVIRONMENT="LOCALHOST", HOME=str(tmp_path / "home"),
               NO_PROXY="*", **({"KAGGLE_API_TOKEN": "not-a-real-token"} if token else {}))
    record = tmp_path / f"requests-{scenario}-{len(list(tmp_path.glob('requests-*.json')))}.json"
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


#: Run inside the stub's namespace: build_bundle.py, with the kaggle client's dataset upload cutting the weights
#: file to 1000 bytes just before it reads the folder (a file changed after the check before the upload).
CUT_DURING_UPLOAD = """
import os, sys
sys.path.insert(0, {repo!r})
from kaggle.api.kaggle_api_extended import KaggleApi
real = KaggleApi.dataset_create_new

def cut_then_upload(self, folder, *args, **kwargs):
    if os.path.basename(folder) == "weights":
        with open(os.path.join(folder, "weights.safetensors"), "r+b") as f:
            f.truncate(1000)
    return real(self, folder, *args, **kwargs)

KaggleApi.dataset_create_new = cut_then_upload
from trm_kaggle.console import run
sys.argv = ["build_bundle.py", *sys.argv[1:]]
sys.exit(run("build_bundle.py"))
"""


def test_a_file_changed_during_its_upload_is_refused_and_uploaded_again(namespace, export, tmp_path):
    """The reproducer: the weights file cut after the check before the upload was published, the push exited 0 and
    recorded the weights dataset with its manifest's digest, so every push of the repaired bundle skipped it as
    unchanged. The files are checked again once the upload returns: the push stops in one line, records nothing
    for that dataset, and the next push uploads it again."""
    out, driver = tmp_path / "out", tmp_path / "cut_during_upload.py"
    driver.write_text(CUT_DURING_UPLOAD.format(repo=str(REPO)))
    res, requests = run(namespace, tmp_path, "ok", [sys.executable, str(driver), *push_command(out, export)[2:]])
    assert res.returncode == 2, res.stdout + res.stderr
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"dataset {WEIGHTS}: its files changed during the upload" in errors[0], res.stderr
    assert "Traceback" not in res.stderr and not calls(requests, "SaveKernel")
    assert (out / "weights" / "weights.safetensors").stat().st_size == 1000  # what the client sent
    record = out / ".trm-kaggle-pushed.json"
    assert WEIGHTS not in (json.loads(record.read_text()) if record.is_file() else {})

    # the bundle rebuilt (the weights whole again) and pushed to a Kaggle that has both datasets: uploaded again
    res, requests = run(namespace, tmp_path, "existing", push_command(out, export))
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"dataset {WEIGHTS}: unchanged" not in res.stdout
    assert [f"{b['ownerSlug']}/{b['datasetSlug']}" for b in calls(requests, "CreateDatasetVersion")] == [WHEELS,
                                                                                                          WEIGHTS]
    blobs = Path(str(max(tmp_path.glob("requests-existing-*.json"))) + ".blobs")
    got = received(requests, blobs, WEIGHTS, tmp_path / "received")
    assert (got / "weights.safetensors").read_bytes() == (export / "weights.safetensors").read_bytes()
    assert WEIGHTS in json.loads(record.read_text())


def test_the_cli_alone_exits_0_on_a_refusal(namespace, export, tmp_path):
    """Why the answers are read: `kaggle kernels push` reports the refusal but exits 0."""
    out = tmp_path / "out"
    assert subprocess.run([sys.executable, str(REPO / "build_bundle.py"), str(out), "--no-download", "--user",
                           "tester", "--weights", str(export)], capture_output=True).returncode == 0
    cli = shutil.which("kaggle") or str(Path(sys.executable).with_name("kaggle"))
    res, requests = run(namespace, tmp_path, "kernel-slug-taken", [cli, "kernels", "push", "-p", str(out / "kernel")])
    assert calls(requests, "SaveKernel") and "already in use" in res.stdout + res.stderr
    assert res.returncode == 0


def test_without_user_the_owner_is_the_access_tokens(namespace, export, tmp_path):
    """The reproducer: without --user or $KAGGLE_USERNAME pushes went to `your-kaggle-user` though the credentials
    named the account. An access token names its user when the client asks Kaggle (IntrospectToken)."""
    cmd = [c for c in push_command(tmp_path / "out", export) if c not in ("--user", "tester")]
    res, requests = run(namespace, tmp_path, "ok", cmd, token=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert calls(requests, "IntrospectToken") and "owner: tokenowner (the kaggle client's credentials)" in res.stdout
    assert [b["ownerSlug"] for b in calls(requests, "CreateDataset")] == ["tokenowner", "tokenowner"]
    (kernel,) = calls(requests, "SaveKernel")
    assert kernel["slug"] == "tokenowner/trm-kaggle-submission"
    assert kernel["datasetDataSources"] == ["tokenowner/trm-kaggle-wheels", "tokenowner/trm-kaggle-weights"]


def received(requests: list[dict], blobs: Path, ident: str, dest: Path) -> Path:
    """The dataset `ident` as Kaggle received it: every file its create or version call names, each from the bytes
    uploaded for its token (nothing else: what the upload left out is not there)."""
    names = {f"blob-{i}": b["name"] for i, b in enumerate(calls(requests, "StartBlobUpload"), 1)}
    owner, slug = ident.split("/")
    made = [b for b in calls(requests, "CreateDataset") if (b["ownerSlug"], b["slug"]) == (owner, slug)]
    made += [b["body"] for b in calls(requests, "CreateDatasetVersion") if (b["ownerSlug"], b["datasetSlug"]) ==
             (owner, slug)]
    assert len(made) == 1, (ident, made)
    dest.mkdir(parents=True)
    for f in made[0]["files"]:
        shutil.copyfile(blobs / f["token"].split("-")[1], dest / names[f["token"]])
    return dest


def descendants(pid: int) -> list[int]:
    """The processes below `pid` (its children, theirs, ...), read from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def session_command(notebook: Path, tmp: Path, input_root: Path, kernel: str, **parameters) -> list[str]:
    working = tmp / "working"
    working.mkdir(parents=True)
    params = {"KAGGLE_INPUT": str(input_root), "KAGGLE_WORKING": str(working), "TIME_BUDGET": None,
              "UNPACK_DIR": str(tmp / "scratch"), **parameters}
    cmd = papermill_command(notebook, tmp / "executed.ipynb", kernel=kernel, cwd=working, parameters=params)
    try:
        return netns_wrapper(probe_netns(), cmd)
    except TRMError:
        return cmd  # no network namespace here: the notebook reaches for no network either way


def test_the_training_bundle_arrives_whole_and_a_killed_session_is_resumed(namespace, tmp_path, kernel_name):
    """The reproducer: the data and run-state datasets were uploaded without their folders (train/, test/, run/),
    so the kernel found no dataset, and a killed session without an evaluation kept nothing. Here the bundle is
    pushed to the stub (owner from kaggle.json: no --user), both datasets are rebuilt from exactly the bytes it
    received, and the kernel it received trains on them: the first session killed outright at a random moment,
    the second resuming from the first's newest complete state."""
    data = tmp_path / "sudoku4"
    build_sudoku(SudokuBuildConfig(output_dir=str(data), size=4, num_train=40, num_test=8, num_aug=1, progress=False))
    settings = [o for o in SETTINGS if not o.startswith("max_steps")] + ["max_steps=100000"]
    res, requests = run(namespace, tmp_path, "ok", [
        sys.executable, str(REPO / "build_bundle.py"), str(tmp_path / "bundle"), "--dataset", str(data),
        "--train-kernel", "--preset", "sudoku4-cpu", *settings, "--no-download", "--push", "--push-wait", "30"])
    assert res.returncode == 0, res.stdout + res.stderr
    assert "owner: tester (the kaggle client's credentials)" in res.stdout  # kaggle.json's user, no --user given
    blobs = Path(str(next(tmp_path.glob("requests-ok-*.json"))) + ".blobs")

    # /kaggle/input as the session would see it: the datasets as received, read-only
    inputs = tmp_path / "input"
    got = received(requests, blobs, "tester/trm-kaggle-data", inputs / "datasets" / "tester" / "trm-kaggle-data")
    received(requests, blobs, "tester/trm-kaggle-wheels", inputs / "datasets" / "tester" / "trm-kaggle-wheels")
    assert sorted(p.name for p in got.iterdir()) == ["data.tar", "manifest.json"]  # all of it: nothing was left out
    for p in [*inputs.rglob("*"), inputs]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    (kernel,) = calls(requests, "SaveKernel")
    assert kernel["slug"] == "tester/trm-kaggle-train" and kernel["datasetDataSources"] == [
        "tester/trm-kaggle-wheels", "tester/trm-kaggle-data"] and kernel["kernelDataSources"] == [kernel["slug"]]
    notebook = tmp_path / "kaggle_train.ipynb"
    notebook.write_text(kernel["text"])  # the notebook Kaggle received

    # session 1: a train state every 0.5 s, killed outright (the whole process tree) at a random moment
    one = tmp_path / "one"
    proc = subprocess.Popen(session_command(notebook, one, inputs, kernel_name, SAVE_EVERY_S=0.5),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "MPLBACKEND": "Agg"})
    run_dir = one / "working" / "run"
    try:
        deadline = time.monotonic() + 240
        while not ckpt.list_states(run_dir):
            assert proc.poll() is None and time.monotonic() < deadline, "session 1 ended or saved nothing"
            time.sleep(0.05)
        time.sleep(random.Random(int(os.environ.get("TRM_TEST_SEED", "39"))).uniform(0.0, 2.0))
        assert proc.poll() is None, "session 1 ended before the kill"
    finally:
        for pid in [*descendants(proc.pid), proc.pid]:
            os.kill(pid, signal.SIGKILL)
        proc.wait()
    newest = ckpt.newest_step(run_dir)  # the newest state that loads (a write cut off leaves only a temporary)
    assert newest >= 1
    report = json.loads((one / "working" / "session.json").read_text())
    assert report["ok"] is False and report["status"] == "started"  # it says it did not finish

    # session 2: the first one's output attached as the previous version's (kernel_sources), read-only
    previous = tmp_path / "input2"
    shutil.copytree(inputs / "datasets", previous / "datasets", symlinks=True)
    shutil.copytree(one / "working", previous / "trm-kaggle-train", ignore=shutil.ignore_patterns(".*"))
    for p in [*previous.rglob("*"), previous]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    two = tmp_path / "two"
    res = subprocess.run(session_command(notebook, two, previous, kernel_name, SESSION_STEPS=2), capture_output=True,
                         text=True, env={**os.environ, "MPLBACKEND": "Agg"})
    assert res.returncode == 0, res.stderr[-3000:]  # the notebook never raises
    log = executed_text(two / "executed.ipynb")
    report = json.loads((two / "working" / "session.json").read_text())
    assert report["ok"] and (report["start_step"], report["step"]) == (newest, newest + 2), log[-3000:]
    assert report["resumed_from"].endswith(f"state_step{newest:08d}.pt")
    assert "data.tar checked and unpacked in" in log and "a train state every 300 s" in log
