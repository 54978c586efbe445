"""Publishing the bundle through the kaggle package's API (trm_kaggle.kaggle.push), against a fake API object
that records the calls; nothing is ever sent. tests/test_push_stub.py runs the real package against a local stub
of Kaggle's server."""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from trm_kaggle.atomic import OWNER_RECORD
from trm_kaggle.errors import TRMError
from trm_kaggle.kaggle import bundle as B
from trm_kaggle.kaggle import metadata as M
from trm_kaggle.kaggle import push as P

from conftest import IDS, USER, _edit


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    for var in ("KAGGLE_USERNAME", "KAGGLE_KEY", "KAGGLE_CONFIG_DIR", "KAGGLE_API_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    return home


class NotFound(Exception):
    response = SimpleNamespace(status_code=404, text="Not Found")


class FakeApi:
    """The KaggleApi methods push uses. `existing`: datasets Kaggle already has; `statuses`: what
    dataset_status answers in turn once a dataset exists; `answers`: fields of the answers to creates/pushes."""

    def __init__(self, existing=(), statuses=("pending", "ready"), **answers):
        self.existing, self.statuses, self.answers, self.calls = set(existing), list(statuses), answers, []
        self.seen: dict[str, int] = {}

    def dataset_status(self, ident):
        self.calls.append(("status", ident))
        if ident not in self.existing:
            raise NotFound(ident)
        i = self.seen[ident] = self.seen.get(ident, -1) + 1
        return self.statuses[min(i, len(self.statuses) - 1)]

    def _answer(self, kind, **fields):
        return SimpleNamespace(**{**fields, **self.answers.get(kind, {})})

    def dataset_create_new(self, folder, public, quiet, dir_mode, ignore_patterns):
        ident = M.read_json(f"{folder}/{M.DATASET_META}")["id"]
        self.calls.append(("create", ident, public, tuple(ignore_patterns)))
        self.existing.add(ident)
        return self._answer("create", error=None, url=f"https://kaggle/{ident}")

    def dataset_create_version(self, folder, message, quiet, dir_mode, ignore_patterns):
        ident = M.read_json(f"{folder}/{M.DATASET_META}")["id"]
        self.calls.append(("version", ident, message, tuple(ignore_patterns)))
        return self._answer("version", error=None)

    def kernels_push(self, folder):
        meta = M.read_json(f"{folder}/{M.KERNEL_META}")
        self.calls.append(("push", meta["id"]))
        return self._answer("push", error=None, invalid_dataset_sources=[], invalid_competition_sources=[],
                            url=f"https://www.kaggle.com/code/{meta['id']}", version_number=1)


def _push(bundle, api, **kw):
    lines = []
    rc = P.push(bundle, api=api, poll_s=0, say=lines.append, **kw)
    return rc, lines


def test_push_without_credentials_builds_nothing_and_says_why_in_one_line(inputs, tmp_path, no_credentials,
                                                                           capsys):
    out = tmp_path / "out"
    for user in (["--user", USER], []):  # without --user: never a bundle under the placeholder owner
        rc = B.main([str(out), "--no-download", *user, "--weights", str(inputs["export"]),
                     "--notebook", str(inputs["notebook"]), "--push"])
        assert rc == 2  # the status of every input or setup problem (docs/reliability.md)
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: --push cannot publish from here: ") and "credentials" in err[0]
        assert "nothing was built" in err[0] and not out.exists()
    # the API's own push of a built bundle still gives the commands that publish it by hand
    rc = B.main([str(out), "--no-download", "--user", USER, "--weights", str(inputs["export"]),
                 "--notebook", str(inputs["notebook"])])
    assert rc == 0 and P.push(out) == 2
    cap = capsys.readouterr()
    assert f"kaggle datasets create -p {out.absolute() / 'wheels'}" in cap.out and "credentials" in cap.err


def test_the_push_wait_timeout_names_the_kernel_folder(tmp_path):
    api = FakeApi(existing={IDS.wheels_id}, statuses=("pending",))
    clock = iter(range(10_000)).__next__
    with pytest.raises(TRMError) as e:
        P.wait_until_ready(api, [IDS.wheels_id], timeout_s=5, poll_s=1, say=lambda _: None, clock=clock,
                           sleep=lambda s: None, kernels=[tmp_path / "kernel"])
    assert f"kaggle kernels push -p {tmp_path / 'kernel'}" in str(e.value) and "KERNEL_DIR" not in str(e.value)


def test_first_push_creates_waits_then_pushes(bundle_copy):
    api = FakeApi()
    rc, lines = _push(bundle_copy, api)
    assert rc == 0
    kinds = [c[0] for c in api.calls]
    # each dataset: asked (404), created; then polled until ready; then the kernel
    assert kinds[:4] == ["status", "create", "status", "create"] and kinds[-1] == "push"
    assert kinds.index("push") > max(i for i, k in enumerate(kinds) if k == "status")
    creates = [c for c in api.calls if c[0] == "create"]
    assert [c[1] for c in creates] == [IDS.wheels_id, IDS.weights_id]
    assert all(c[2] is False and OWNER_RECORD in c[3] for c in creates)  # private; bookkeeping not uploaded
    assert f"dataset {IDS.wheels_id}: ready (0 s)" in lines
    assert lines[-2] == f"kernel {IDS.kernel_id} version 1 pushed (machine NvidiaL4): " \
                        f"https://www.kaggle.com/code/{IDS.kernel_id}"
    assert lines[-1] == f"  follow it: kaggle kernels status {IDS.kernel_id}"


def test_later_pushes_version_the_datasets(bundle_copy):
    api = FakeApi(existing={IDS.wheels_id, IDS.weights_id}, statuses=("ready",))
    rc, lines = _push(bundle_copy, api, version_message="new weights")
    assert rc == 0
    assert [c[:3] for c in api.calls if c[0] == "version"] == [("version", IDS.wheels_id, "new weights"),
                                                              ("version", IDS.weights_id, "new weights")]
    assert not [c for c in api.calls if c[0] == "create"]


@pytest.mark.parametrize("answers, words", [
    ({"create": {"error": 'The requested slug "trm-kaggle-wheels" is already in use by a dataset.'}},
     "kaggle datasets create tester/trm-kaggle-wheels: Kaggle refused it: The requested slug"),
    ({"push": {"error": "Notebook slug is already in use"}}, "Kaggle refused it: Notebook slug is already in use"),
    ({"push": {"invalid_dataset_sources": ["tester/trm-kaggle-weights"]}},
     "invalid dataset sources: tester/trm-kaggle-weights"),
    ({"push": {"invalid_competition_sources": ["arc-prize-2026-arc-agi-2"]}},
     "invalid competition sources: arc-prize-2026-arc-agi-2"),
])
def test_refusals_in_the_answer_stop_the_push(bundle_copy, answers, words):
    api = FakeApi(**answers)
    with pytest.raises(TRMError, match="Kaggle refused it") as e:
        _push(bundle_copy, api)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_refusal_is_one_error_line_from_the_command(inputs, tmp_path, monkeypatch, capsys):
    api = FakeApi(push={"error": "Notebook slug is already in use"})
    monkeypatch.setattr(P, "kaggle_api", lambda: api)
    monkeypatch.setattr(P, "missing_client", lambda: None)
    monkeypatch.setenv("KAGGLE_API_TOKEN", "fake")
    monkeypatch.setattr(P.time, "sleep", lambda s: None)
    assert B.main([str(tmp_path / "out"), "--no-download", "--user", USER, "--weights", str(inputs["export"]),
                   "--notebook", str(inputs["notebook"]), "--push"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: kaggle kernels push ") and "already in use" in err, err


@pytest.mark.parametrize("statuses, words", [(("pending", "failed"), "ended in 'failed'"),
                                             (("pending",), "not ready after 5 s")])
def test_datasets_that_never_get_ready_stop_before_the_kernel(statuses, words):
    api = FakeApi(existing={IDS.wheels_id}, statuses=statuses)
    clock = iter(range(10_000)).__next__
    with pytest.raises(TRMError, match=words):
        P.wait_until_ready(api, [IDS.wheels_id], timeout_s=5, poll_s=1, say=lambda _: None, clock=clock,
                           sleep=lambda s: None)


def test_push_refuses_an_invalid_bundle(bundle_copy):
    _edit(bundle_copy / "kernel" / M.KERNEL_META, enable_internet=True)
    with pytest.raises(TRMError, match="enable_internet"):
        P.push(bundle_copy, api=FakeApi())


def test_credentials_are_found(no_credentials, monkeypatch):
    assert P.kaggle_credentials() is None
    (no_credentials / ".kaggle").mkdir()
    (no_credentials / ".kaggle" / "access_token").write_text("token")
    assert P.kaggle_credentials().endswith("access_token")
    monkeypatch.setenv("KAGGLE_API_TOKEN", "x")
    assert P.kaggle_credentials() == "KAGGLE_API_TOKEN"


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
    api = FakeApi()
    with pytest.raises(TRMError, match="weights.safetensors: .*(differs from|missing).*rebuild the bundle"):
        P.push(bundle_copy, api=api)
    assert api.calls == []  # nothing uploaded


def test_created_is_said_after_kaggle_accepted_the_create(bundle_copy):
    """The reproducer: "created (private)" was printed before the create call, also when Kaggle refused it."""
    api = FakeApi(create={"error": "The requested slug is reserved"})
    lines: list[str] = []
    with pytest.raises(TRMError, match="reserved"):
        P.push(bundle_copy, api=api, poll_s=0, say=lines.append)
    assert not [line for line in lines if "created" in line], lines
    rc, lines = _push(bundle_copy, FakeApi())
    assert rc == 0 and f"dataset {IDS.wheels_id}: created (private)" in lines


def test_a_dataset_folder_with_subfolders_is_refused_before_any_upload(bundle_copy):
    """An upload sends a folder's files, not its subfolders: a bundle built before packing would lose them."""
    (bundle_copy / "weights" / "extra").mkdir()
    api = FakeApi()
    with pytest.raises(TRMError, match=r"weights: holds folders \(extra\) that an upload to Kaggle leaves out"):
        P.push(bundle_copy, api=api, poll_s=0, say=lambda _: None)
    assert not [c for c in api.calls if c[0] in ("create", "version")]


def test_the_owner_comes_from_the_credentials(no_credentials, monkeypatch):
    said: list[str] = []
    assert P.owner(push=False, say=said.append) == (M.DEFAULT_USER, None)
    assert "a placeholder" in said[-1] and "--user" in said[-1]
    config = no_credentials / "cfg"
    config.mkdir()
    (config / "kaggle.json").write_text('{"username": "from-json", "key": "k"}')
    monkeypatch.setenv("KAGGLE_CONFIG_DIR", str(config))
    assert P.owner(push=False, say=said.append)[0] == "from-json" and str(config / "kaggle.json") in said[-1]
    monkeypatch.setenv("KAGGLE_USERNAME", "from-env")
    assert P.owner(push=False, say=said.append)[0] == "from-env"
    # with --push, the client's own answer (an access token names its user only when the client asks Kaggle)
    monkeypatch.setattr(P, "missing_client", lambda: None)
    monkeypatch.setattr(P, "kaggle_api", lambda: SimpleNamespace(get_config_value=lambda name: "token-owner"))
    user, api = P.owner(push=True, say=said.append)
    assert user == "token-owner" and api is not None and "the kaggle client's credentials" in said[-1]


@pytest.mark.parametrize("answer", [None, "Bad User!", ""])
def test_a_push_whose_client_names_no_user_is_refused_never_the_placeholder(no_credentials, monkeypatch, answer):
    """An access token the client did not resolve to a user: the bundle was built and pushed as
    your-kaggle-user/..., exit 0, with no owner line."""
    monkeypatch.setattr(P, "missing_client", lambda: None)
    monkeypatch.setattr(P, "kaggle_credentials", lambda: "KAGGLE_API_TOKEN")
    monkeypatch.setattr(P, "kaggle_api", lambda: SimpleNamespace(get_config_value=lambda name: answer))
    with pytest.raises(TRMError, match="the kaggle client's credentials name no Kaggle user .*pass --user YOU"):
        P.owner(push=True, say=lambda _: None)
    monkeypatch.setenv("KAGGLE_USERNAME", "from-env")  # a name the credentials give without asking stands in
    said: list[str] = []
    assert P.owner(push=True, say=said.append)[0] == "from-env" and "named no user" in said[-1]


def test_a_status_from_kaggle_is_shown_escaped(bundle_copy):
    """A dataset status holding an escape sequence and a newline reached the terminal raw in the progress line."""
    rc, lines = _push(bundle_copy, FakeApi(statuses=("pend\x1b[31ming\nfake: line", "ready")))
    assert rc == 0 and not [line for line in lines if "\x1b" in line or "\n" in line], lines
    assert any("pend\\x1b[31ming\\nfake: line" in line for line in lines), lines


def test_push_wait_serves_the_training_push(inputs, tmp_path, monkeypatch, capsys):
    """The reproducer: --push-wait was ignored with --train-kernel (it waited up to 1,800 s)."""
    seen = {}

    def fake_push_training(out, message, **kw):
        seen.update(kw)
        return 0

    monkeypatch.setattr(B, "push_training", fake_push_training)
    monkeypatch.setattr(B, "push_unavailable", lambda: None)  # as with the client and credentials
    assert B.main([str(tmp_path / "out"), "--train-kernel", "--preset", "sudoku4-cpu", "--no-download", "--user", USER,
                   "--push", "--push-wait", "42"]) == 0
    assert seen["wait_s"] == 42 and seen["poll_s"] <= 10


def test_later_pushes_upload_only_the_datasets_that_changed(bundle_copy):
    """The reproducer: every later push uploaded the unchanged datasets again (for a training run's data, all
    of it each session). What the last push from OUT_DIR uploaded is recorded by its manifest's digests."""
    api = FakeApi()
    assert _push(bundle_copy, api)[0] == 0  # the first push creates both (and records them)
    api.calls.clear()
    rc, lines = _push(bundle_copy, api, version_message="again")
    assert rc == 0 and not [c for c in api.calls if c[0] in ("create", "version")], api.calls
    assert f"dataset {IDS.wheels_id}: unchanged since its last push (the same files): not uploaded" in lines
    assert [c[0] for c in api.calls][-1] == "push"  # the kernel is still pushed
    # a changed weights dataset (its files and manifest rebuilt) is uploaded alone
    (bundle_copy / "weights" / "NOTES.txt").write_text("retrained\n")
    old = M.read_json(bundle_copy / "weights" / M.MANIFEST)
    M.write_manifest(bundle_copy / "weights", {k: v for k, v in old.items() if k not in ("files", "trm_kaggle_version")})
    api.calls.clear()
    assert _push(bundle_copy, api, version_message="new weights")[0] == 0
    assert [c[:2] for c in api.calls if c[0] in ("create", "version")] == [("version", IDS.weights_id)]


def _outside_copy(tmp_path, path):
    """A file outside OUT_DIR holding `path`'s bytes (a link to it matches the manifest's sha256)."""
    outside = tmp_path / "outside" / path.name
    outside.parent.mkdir(exist_ok=True)
    outside.write_bytes(path.read_bytes())
    return outside


@pytest.mark.parametrize("stray", ["extra.bin", ".hidden_payload", "fifo", "unlisted link", "listed link"])
def test_push_refuses_a_file_its_manifest_does_not_vouch_for(bundle_copy, tmp_path, stray):
    """The reproducer: a file added after the build (`extra.bin`, a hidden file, a FIFO) or a link to a file
    outside OUT_DIR was uploaded with the weights dataset: the check read only the names the manifest lists."""
    weights = bundle_copy / "weights"
    if stray == "fifo":
        os.mkfifo(weights / "pipe")
    elif stray == "unlisted link":
        (weights / "notes.txt").symlink_to(_outside_copy(tmp_path, weights / "MODEL_CARD.md"))
    elif stray == "listed link":  # the manifest's sha256 matches: the bytes come from outside all the same
        outside = _outside_copy(tmp_path, weights / "config.json")
        (weights / "config.json").unlink()
        (weights / "config.json").symlink_to(outside)
    else:
        (weights / stray).write_text("payload")
    named = {"fifo": "pipe", "unlisted link": "notes.txt", "listed link": "config.json"}.get(stray, stray)
    api = FakeApi()
    with pytest.raises(TRMError) as e:
        P.push(bundle_copy, api=api, poll_s=0, say=lambda _: None)
    assert str(weights / named) in str(e.value) and "\n" not in str(e.value), e.value
    assert ("not listed in" in str(e.value)) == (stray != "listed link") and ("symbolic link" in str(e.value)) == \
        ("link" in stray), e.value
    assert api.calls == []  # nothing uploaded


@pytest.mark.parametrize("part, entry", [("weights", "weights.safetensors"), ("weights", "config.json"),
                                         ("wheels", "install.sh")])
def test_push_refuses_a_manifest_that_lost_an_entry_its_dataset_needs(bundle_copy, part, entry):
    """The reproducer: `weights.safetensors` dropped from the manifest and the file cut to 100 bytes (or
    config.json dropped and replaced by `{}`) was pushed: a file the manifest does not list went unchecked."""
    manifest = M.read_json(bundle_copy / part / M.MANIFEST)
    del manifest["files"][entry]
    M.atomic_write_json(bundle_copy / part / M.MANIFEST, manifest, indent=2)
    (bundle_copy / part / entry).write_bytes((bundle_copy / part / entry).read_bytes()[:100])
    api = FakeApi()
    with pytest.raises(TRMError, match=f"manifest.json: lists no {entry}, which this dataset needs"):
        P.push(bundle_copy, api=api, poll_s=0, say=lambda _: None)
    assert api.calls == []


def _training_out(tmp_path):
    """OUT_DIR with only a packed data dataset (no kernel): what `push_training` publishes of it."""
    from trm_kaggle.kaggle.packed import ARCHIVE_KEY, pack

    source = tmp_path / "source"
    (source / "train").mkdir(parents=True)
    (source / "train" / "all__inputs.npy").write_bytes(bytes(range(256)) * 8)
    (source / "identifiers.json").write_text('["<blank>"]')
    data = tmp_path / "out" / M.DATA_DIR
    data.mkdir(parents=True)
    M.atomic_write_json(data / M.DATASET_META, M.dataset_metadata(f"{USER}/trm-kaggle-data"), indent=2)
    M.write_manifest(data, {ARCHIVE_KEY: pack(source, data, "data.tar")})
    return tmp_path / "out"


@pytest.mark.parametrize("damage", ["none", "archive entry", "files entry"])
def test_push_checks_a_packed_data_dataset_against_its_archive_block(tmp_path, damage):
    """The reproducer: one `archive.files` sha256 edited in data/manifest.json (or data.tar's `files` entry
    dropped and the archive cut) was pushed, and the session then refused the data dataset."""
    out = _training_out(tmp_path)
    path = out / M.DATA_DIR / M.MANIFEST
    manifest = M.read_json(path)
    if damage == "archive entry":
        manifest["archive"]["files"]["identifiers.json"]["sha256"] = "0" * 64
    elif damage == "files entry":
        del manifest["files"]["data.tar"]
        tar = out / M.DATA_DIR / "data.tar"
        tar.write_bytes(tar.read_bytes()[:1000])
    M.atomic_write_json(path, manifest, indent=2)
    api = FakeApi()
    if damage == "none":
        assert P.push_training(out, api=api, poll_s=0, say=lambda _: None) == 0
        assert [c[0] for c in api.calls if c[0] != "status"] == ["create"]
        return
    words = ("identifiers.json differs from its sha256" if damage == "archive entry"
             else "lists no data.tar, which this dataset needs")
    with pytest.raises(TRMError, match=words):
        P.push_training(out, api=api, poll_s=0, say=lambda _: None)
    assert api.calls == []


def test_a_dataset_whose_processing_failed_is_uploaded_again(bundle_copy):
    """The reproducer: the push record named both datasets as uploaded before Kaggle processed them; after a
    processing that failed every later push skipped them as unchanged and stopped at the same failure."""
    api = FakeApi(statuses=("pending", "failed"))
    with pytest.raises(TRMError, match="ended in 'failed'") as failed:
        P.push(bundle_copy, api=api, poll_s=0, say=lambda _: None)
    api2 = FakeApi(existing=api.existing)
    rc, lines = _push(bundle_copy, api2)
    assert rc == 0 and [c[:2] for c in api2.calls if c[0] in ("create", "version")] == \
        [("version", IDS.wheels_id), ("version", IDS.weights_id)], lines
    assert "the next push uploads it again" in str(failed.value)  # the failure line says what to do
    # once ready they are recorded: the next push skips them
    api3 = FakeApi(existing=api.existing, statuses=("ready",))
    assert _push(bundle_copy, api3)[0] == 0 and not [c for c in api3.calls if c[0] in ("create", "version")]


def test_an_upload_that_fails_midway_leaves_no_record_of_the_files_before(bundle_copy):
    """The record named the previous files until the version call returned: a stop or a failed call after Kaggle
    took the new files left it so, and pushing the previous files again was skipped as "unchanged" while Kaggle
    held the new ones. The entry is dropped before the upload starts."""
    import json

    assert _push(bundle_copy, FakeApi(statuses=("ready",)))[0] == 0
    record = bundle_copy / P.PUSHED
    pushed = json.loads(record.read_text())
    assert IDS.weights_id in pushed
    record.write_text(json.dumps({**pushed, IDS.weights_id: "0" * 64}))  # the files of an earlier build

    class Failing(FakeApi):
        def dataset_create_version(self, folder, message, quiet, dir_mode, ignore_patterns):
            raise ConnectionError("HTTP 500 after the upload")

    with pytest.raises(Exception):
        P.push(bundle_copy, api=Failing(existing={IDS.wheels_id, IDS.weights_id}, statuses=("ready",)), poll_s=0,
               say=lambda _: None)
    assert IDS.weights_id not in json.loads(record.read_text())


def test_a_kernel_push_answered_with_nothing_is_not_said_pushed(bundle_copy):
    """Kaggle's SaveKernel answering `{}` (no version, address or reference, no error) was reported "kernel ...
    pushed" with a made-up address."""
    api = FakeApi(push={"url": None, "version_number": None})
    rc, lines = _push(bundle_copy, api)
    said = [line for line in lines if line.startswith("kernel ")]
    assert said and "not known to be saved" in said[-1] and not any(" pushed" in line for line in said), lines


@pytest.mark.parametrize("case", ["env", "json not UTF-8", "json a folder", "json's username"])
def test_a_user_name_that_cannot_be_used_is_said_as_such_never_as_none(no_credentials, tmp_path, monkeypatch, case):
    """$KAGGLE_USERNAME='bad user' was "no $KAGGLE_USERNAME"; a kaggle.json that cannot be read (not UTF-8, a
    folder) was "no kaggle.json with a username": each source is now said as it is."""
    config = tmp_path / "config"
    config.mkdir()
    monkeypatch.setenv("KAGGLE_CONFIG_DIR", str(config))
    if case == "env":
        monkeypatch.setenv("KAGGLE_USERNAME", "bad user")
    elif case == "json not UTF-8":
        (config / "kaggle.json").write_bytes(b'{"username": "\xff"}')
    elif case == "json a folder":
        (config / "kaggle.json").mkdir()
    else:
        (config / "kaggle.json").write_text('{"username": "a/b", "key": "k"}')
    said: list[str] = []
    assert P.owner(push=False, say=said.append)[0] == "your-kaggle-user"
    expected = {"env": "$KAGGLE_USERNAME 'bad user' is no Kaggle user name", "json not UTF-8": "kaggle.json",
                "json a folder": "kaggle.json", "json's username": "its username 'a/b' is no Kaggle user name"}[case]
    assert expected in said[-1] and ("no $KAGGLE_USERNAME" in said[-1]) == (case != "env"), said
    assert (case == "env") == ("no kaggle.json with a username" in said[-1]), said


def test_a_credentials_file_that_cannot_be_read_is_named_before_the_client_runs(no_credentials, tmp_path, monkeypatch):
    """`--push` with a kaggle.json of mode 000: the client printed its 36-line login help twice, then the push said
    "the kaggle package found no credentials", naming no file."""
    import errno

    from trm_kaggle import jsonio as J

    config = tmp_path / "config"
    config.mkdir()
    (config / "kaggle.json").write_text('{"username": "u", "key": "k"}')
    monkeypatch.setenv("KAGGLE_CONFIG_DIR", str(config))
    real = os.open
    monkeypatch.setattr(J.os, "open", lambda path, flags, *a, **kw: (_ for _ in ()).throw(PermissionError(
        errno.EACCES, "Permission denied", str(path))) if Path(path).name == "kaggle.json" else real(path, flags, *a, **kw))
    monkeypatch.setattr(P, "missing_client", lambda: None)
    monkeypatch.setattr(P, "kaggle_api", lambda: pytest.fail("the client was asked"))
    with pytest.raises(TRMError, match=re.escape(f"{config / 'kaggle.json'}: cannot read the kaggle client's "
                                                 "credentials: Permission denied")):
        P.owner(push=True, say=lambda _: None)


@pytest.mark.parametrize("push", [P.push, P.push_training])
@pytest.mark.parametrize("argument, words", [
    ({"wait_s": float("nan")}, "wait_s=nan: expected a number"), ({"wait_s": "x"}, "wait_s='x'"),
    ({"wait_s": -5}, "wait_s=-5"), ({"poll_s": -1}, "poll_s=-1"), ({"poll_s": float("nan")}, "poll_s=nan"),
    ({"say": 5}, "say: expected a function"), ({"version_message": 5}, "version_message: expected a str"),
    ({"out_dir": 5}, "out_dir: expected the bundle's folder")])
def test_push_arguments_are_named_before_any_upload(bundle_copy, push, argument, words):
    """A NaN wait_s waited for ever; wait_s='x', poll_s=-1 or NaN and say=5 failed in Python's words only after
    both datasets were created, and wait_s=-5 uploaded them to say "not ready after -5 s"."""
    api = FakeApi(statuses=("pending",))
    kw = {"wait_s": 5, "poll_s": 0, "say": lambda _: None, **argument}
    with pytest.raises((TypeError, ValueError), match=re.escape(words)):
        push(kw.pop("out_dir", bundle_copy), api=api, **kw)
    assert api.calls == []
    with pytest.raises(TypeError, match="version_message"):
        P.push_commands(bundle_copy, 5)


def test_a_kaggle_answer_is_escaped_in_the_error_raised(bundle_copy):
    """The raised TRMError carried a status's escape sequence and newline raw."""
    with pytest.raises(TRMError) as e:
        P.wait_until_ready(FakeApi(existing={IDS.wheels_id}, statuses=("error\x1b[2J\nforged",)), [IDS.wheels_id],
                           timeout_s=0, poll_s=0, say=lambda _: None, sleep=lambda s: None)
    assert "\x1b" not in str(e.value) and "\n" not in str(e.value) and "error\\x1b[2j\\nforged" in str(e.value)
