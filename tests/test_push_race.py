"""A dataset whose files change while the kaggle client uploads them (trm_kaggle.kaggle.push), against the fake
API of tests/test_push.py: the files are checked again once the upload returns, and a dataset that changed is
refused and never recorded as pushed. tests/test_push_stub.py runs the same case through the real client."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from conftest import IDS
from test_push import FakeApi, _push

from trm_kaggle.errors import TRMError
from trm_kaggle.kaggle import push as P


class CutDuringUpload(FakeApi):
    """Uploads as FakeApi does, after `change` (of the weights folder) runs: the moment the client reads it."""

    def __init__(self, change, **kw):
        super().__init__(**kw)
        self.change = change

    def dataset_create_version(self, folder, message, quiet, dir_mode, ignore_patterns):
        if folder.endswith("weights"):
            self.change(Path(folder))
        return super().dataset_create_version(folder, message, quiet, dir_mode, ignore_patterns)


def _cut(folder):
    with open(folder / "weights.safetensors", "r+b") as f:
        f.truncate(1000)


def _rewrite_manifest(folder):
    """The weights and the manifest replaced together (a rebuild into the same folder): each agrees with the
    other, but not with the digest read before the upload."""
    path = folder / "weights.safetensors"
    path.write_bytes(path.read_bytes() + b"\0")
    manifest = json.loads((folder / P.MANIFEST).read_text())
    entry = manifest["files"]["weights.safetensors"]
    entry["size"], entry["sha256"] = path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest()
    (folder / P.MANIFEST).write_text(json.dumps(manifest))


@pytest.mark.parametrize("change, words", [(_cut, "differs from manifest.json"),
                                           (_rewrite_manifest, "manifest.json was rewritten")])
def test_a_dataset_changed_during_its_upload_is_refused_and_not_recorded(bundle_copy, change, words):
    existing = {IDS.wheels_id, IDS.weights_id}
    assert _push(bundle_copy, FakeApi(existing=existing, statuses=("ready",)))[0] == 0
    before = (bundle_copy / "weights" / "weights.safetensors").read_bytes()
    record = bundle_copy / P.PUSHED
    record.write_text(json.dumps({**json.loads(record.read_text()), IDS.weights_id: "0" * 64}))  # an older build

    api = CutDuringUpload(change, existing=existing, statuses=("ready",))
    with pytest.raises(TRMError) as refused:
        P.push(bundle_copy, api=api, poll_s=0, say=lambda _: None)
    assert f"dataset {IDS.weights_id}: its files changed during the upload" in str(refused.value)
    assert words in str(refused.value) and "\n" not in str(refused.value)
    assert IDS.weights_id not in json.loads(record.read_text())  # nothing recorded: the next push uploads it
    assert not [c for c in api.calls if c[0] == "push"]  # no kernel after a refused dataset

    if change is _cut:  # repaired, it is uploaded again, not skipped as unchanged
        (bundle_copy / "weights" / "weights.safetensors").write_bytes(before)
        again = FakeApi(existing=existing, statuses=("ready",))
        rc, lines = _push(bundle_copy, again)
        assert rc == 0 and ("version", IDS.weights_id) in [c[:2] for c in again.calls], lines
        assert not [line for line in lines if IDS.weights_id in line and "unchanged" in line], lines
        assert IDS.weights_id in json.loads(record.read_text())
