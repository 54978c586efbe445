"""The kernel: kernel-metadata.json and the notebook pointed at the bundle's datasets (trm_kaggle.kaggle.kernel)."""

from __future__ import annotations

import json

from trm_kaggle.kaggle import kernel as K
from trm_kaggle.kaggle import metadata as M

from conftest import USER


def test_kernel_metadata(built, inputs):
    k = built / "kernel"
    meta = json.loads((k / M.KERNEL_META).read_text())
    assert meta["id"] == f"{USER}/trm-kaggle-submission" and meta["title"] == "trm-kaggle-submission"
    assert meta["code_file"] == "kaggle_submission.ipynb" and (k / meta["code_file"]).is_file()
    assert meta["enable_internet"] is False and meta["is_private"] is True and meta["enable_gpu"] is False
    assert meta["language"] == "python" and meta["kernel_type"] == "notebook"
    assert meta["competition_sources"] == ["arc-prize-2025"]
    assert meta["dataset_sources"] == [f"{USER}/trm-kaggle-wheels", f"{USER}/trm-kaggle-weights"]
    assert meta["kernel_sources"] == [] and meta["model_sources"] == []
    assert M.validate_bundle(built) == {"wheels": f"{USER}/trm-kaggle-wheels", "weights": f"{USER}/trm-kaggle-weights",
                                        "kernel": f"{USER}/trm-kaggle-submission"}


def test_slug_prefix_shapes_ids_and_notebook_paths(inputs, tmp_path):
    ids = M.BundleIds("someone", "arc-trm")
    K.build_kernel(tmp_path / "kernel", inputs["notebook"], ids=ids, enable_gpu=True, log=lambda _: None)
    meta = json.loads((tmp_path / "kernel" / M.KERNEL_META).read_text())
    assert meta["id"] == "someone/arc-trm-submission" and meta["enable_gpu"] is True
    assert meta["dataset_sources"] == ["someone/arc-trm-wheels", "someone/arc-trm-weights"]
    nb = json.loads((tmp_path / "kernel" / "kaggle_submission.ipynb").read_text())
    params = "".join(nb["cells"][0]["source"])
    assert '"/arc-trm-wheels"' in params and '"/arc-trm-weights"' in params and "trm-kaggle-w" not in params
