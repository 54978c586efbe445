"""Ids, slugs, manifests and metadata validation of the Kaggle bundle (trm_kaggle.kaggle.metadata)."""

from __future__ import annotations

import hashlib
import json

import pytest

from trm_kaggle.atomic import OWNER_RECORD
from trm_kaggle.errors import TRMError
from trm_kaggle.kaggle import metadata as M

from conftest import IDS, USER, _edit


@pytest.mark.parametrize("part", ["wheels", "weights"])
def test_manifest_sha256_matches_files(built, part):
    d = built / part
    manifest = json.loads((d / M.MANIFEST).read_text())
    on_disk = {p.relative_to(d).as_posix() for p in d.rglob("*")
               if p.is_file() and p.name not in (M.MANIFEST, OWNER_RECORD)}
    assert set(manifest["files"]) == on_disk
    for rel, entry in manifest["files"].items():
        data = (d / rel).read_bytes()
        assert entry["sha256"] == hashlib.sha256(data).hexdigest(), rel
        assert entry["size"] == len(data)


# ---------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("changes, field, words", [
    ({"id": f"{USER}/TRM-Kaggle-Submission", "title": "TRM-Kaggle-Submission"}, "id", "lowercase"),
    ({"id": f"{USER}/trm", "title": "trm"}, "id", "6 to 50"),
    ({"id": f"{USER}/" + "x" * 51, "title": "x" * 51}, "id", "6 to 50"),
    ({"title": "Another Title"}, "title", "slug"),
    ({"code_file": "missing.ipynb"}, "code_file", "does not exist"),
    ({"dataset_sources": [f"{USER}/trm-kaggle-wheels", "someone/other-dataset"]}, "dataset_sources",
     "not a dataset of this bundle"),
    ({"enable_internet": True}, "enable_internet", "must be false"),
    ({"competition_sources": []}, "competition_sources", "must name the competition"),
    ({"competition_sources": ["ARC Prize"]}, "competition_sources", "lowercase"),
    ({"language": KeyError}, "language", "required"),
    ({"is_private": "yes"}, "is_private", "must be bool"),
])
def test_validation_rejects_bad_kernel_metadata(bundle_copy, changes, field, words):
    path = bundle_copy / "kernel" / M.KERNEL_META
    _edit(path, **changes)
    with pytest.raises(TRMError) as e:
        M.validate_bundle(bundle_copy)
    msg = str(e.value)
    assert str(path) in msg and f"field '{field}'" in msg and words in msg


@pytest.mark.parametrize("changes, field", [
    ({"id": "no-user-here"}, "id"),
    ({"id": f"{USER}/Wheels_Dataset"}, "id"),
    ({"licenses": []}, "licenses"),
    ({"title": KeyError}, "title"),
])
def test_validation_rejects_bad_dataset_metadata(bundle_copy, changes, field):
    path = bundle_copy / "wheels" / M.DATASET_META
    _edit(path, **changes)
    with pytest.raises(TRMError) as e:
        M.validate_bundle(bundle_copy)
    assert str(path) in str(e.value) and f"field '{field}'" in str(e.value)


def test_validation_functions_on_dicts(tmp_path):
    meta = M.kernel_metadata(IDS, "nb.ipynb")
    (tmp_path / "nb.ipynb").write_text("{}")
    M.validate_kernel_metadata(meta, tmp_path, [IDS.wheels_id, IDS.weights_id])  # fine
    with pytest.raises(TRMError, match="dataset_sources"):
        M.validate_kernel_metadata(meta, tmp_path, [IDS.wheels_id])
    M.validate_dataset_metadata(M.dataset_metadata(IDS.weights_id))
    with pytest.raises(TRMError, match="field 'id'"):
        M.validate_dataset_metadata(M.dataset_metadata("u/Bad"))


def test_slug_rules():
    assert M.title_to_slug("TRM Kaggle: Submission!") == "trm-kaggle-submission"
    assert M.slug_problem("trm-kaggle-wheels") is None
    assert M.slug_problem("abc12") and M.slug_problem("x" * 51) and M.slug_problem("Upper-case")
    assert M.slug_problem("-leading") and M.slug_problem("under_score")
    with pytest.raises(TRMError, match="--slug-prefix"):
        M.BundleIds("u", "Bad").check()
    with pytest.raises(TRMError):
        M.BundleIds("bad user", "trm-kaggle").check()
    # only the ids a build makes: a 34-character prefix fits the submission bundle's three, not the wheel kernel's
    long = M.BundleIds("bob", "p" * 34)
    assert long.check() is long
    with pytest.raises(TRMError, match="adam-atan2-wheel"):
        long.check(long.wheel_kernel_id)
