"""The kernels: kernel-metadata.json and the notebook pointed at the bundle's datasets, the competition and a GPU
(or --cpu); the adam-atan2 wheel kernel and its own metadata rules (trm_kaggle.kaggle.kernel)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from trm_kaggle.errors import TRMError
from trm_kaggle.kaggle import adam_atan2_wheel
from trm_kaggle.kaggle import bundle as B
from trm_kaggle.kaggle import kernel as K
from trm_kaggle.kaggle import metadata as M
from trm_kaggle.kaggle import push as P

from conftest import USER, _edit


def test_kernel_metadata(built, inputs):
    k = built / "kernel"
    meta = json.loads((k / M.KERNEL_META).read_text())
    assert meta["id"] == f"{USER}/trm-kaggle-submission" and meta["title"] == "trm-kaggle-submission"
    assert meta["code_file"] == "kaggle_submission.ipynb" and (k / meta["code_file"]).is_file()
    assert meta["enable_internet"] is False and meta["is_private"] is True
    assert meta["enable_gpu"] is True  # the competition kernel asks for a GPU unless --cpu
    assert meta["language"] == "python" and meta["kernel_type"] == "notebook"
    assert meta["competition_sources"] == [M.COMPETITION] == ["arc-prize-2026-arc-agi-2"]
    assert meta["dataset_sources"] == [f"{USER}/trm-kaggle-wheels", f"{USER}/trm-kaggle-weights"]
    assert meta["kernel_sources"] == [] and meta["model_sources"] == []
    assert M.validate_bundle(built) == {"wheels": f"{USER}/trm-kaggle-wheels", "weights": f"{USER}/trm-kaggle-weights",
                                        "kernel": f"{USER}/trm-kaggle-submission"}


def test_slug_prefix_shapes_ids_and_notebook_paths(inputs, tmp_path):
    ids = M.BundleIds("someone", "arc-trm")
    K.build_kernel(tmp_path / "kernel", inputs["notebook"], ids=ids, enable_gpu=False, log=lambda _: None)
    meta = json.loads((tmp_path / "kernel" / M.KERNEL_META).read_text())
    assert meta["id"] == "someone/arc-trm-submission" and meta["enable_gpu"] is False
    assert meta["dataset_sources"] == ["someone/arc-trm-wheels", "someone/arc-trm-weights"]
    nb = json.loads((tmp_path / "kernel" / "kaggle_submission.ipynb").read_text())
    params = "".join(nb["cells"][0]["source"])
    assert '"/arc-trm-wheels"' in params and '"/arc-trm-weights"' in params and "trm-kaggle-w" not in params


def test_cpu_and_competition_options(inputs, tmp_path, capsys):
    out = tmp_path / "out"
    assert B.main([str(out), "--no-download", "--user", USER, "--weights", str(inputs["export"]),
                   "--notebook", str(inputs["notebook"]), "--cpu", "--competition", "arc-prize-2025"]) == 0
    meta = json.loads((out / "kernel" / M.KERNEL_META).read_text())
    assert meta["enable_gpu"] is False and meta["competition_sources"] == ["arc-prize-2025"]
    assert "competition arc-prize-2025, CPU only" in capsys.readouterr().out
    assert B.main([str(tmp_path / "bad"), "--no-download", "--weights", str(inputs["export"]),
                   "--notebook", str(inputs["notebook"]), "--competition", "ARC Prize"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --competition:") and "lowercase" in err and not (tmp_path / "bad").exists()


def test_wheel_kernel_is_a_validated_gpu_script_with_internet(inputs, tmp_path, capsys):
    out = tmp_path / "out"
    assert B.main([str(out), "--no-download", "--user", USER, "--weights", str(inputs["export"]),
                   "--notebook", str(inputs["notebook"]), "--wheel-kernel"]) == 0
    k = out / M.WHEEL_KERNEL_DIR
    meta = json.loads((k / M.KERNEL_META).read_text())
    assert meta["id"] == f"{USER}/trm-kaggle-adam-atan2-wheel" and meta["title"] == "trm-kaggle-adam-atan2-wheel"
    assert meta["kernel_type"] == "script" and meta["enable_gpu"] is True and meta["enable_internet"] is True
    assert meta["code_file"] == K.WHEEL_SCRIPT
    assert (k / K.WHEEL_SCRIPT).read_text() == Path(adam_atan2_wheel.__file__).read_text()
    assert meta["competition_sources"] == [] and meta["dataset_sources"] == []
    assert M.validate_bundle(out)["wheel_kernel"] == meta["id"]
    assert "adam-atan2-wheel" in capsys.readouterr().out
    # validated like the submission kernel's, with its own rules
    for changes, field in (({"enable_internet": False}, "enable_internet"), ({"enable_gpu": False}, "enable_gpu"),
                           ({"title": "Other"}, "title"), ({"code_file": "gone.py"}, "code_file")):
        _edit(k / M.KERNEL_META, **{**meta, **changes})
        with pytest.raises(TRMError, match=f"field '{field}'"):
            M.validate_bundle(out)
    _edit(k / M.KERNEL_META, **meta)
    assert [c[-1] for c in P.push_commands(out)][-2:] == [str((out / "kernel").absolute()), str(k.absolute())]


@pytest.mark.parametrize("change, said", [("nbformat", "its nbformat is 99, not 4"),
                                          ("tags", "cells/0/metadata/tags: 'parameters' is not of type 'array'")])
def test_a_notebook_nbformat_refuses_is_refused_before_the_bundle(tmp_path, change, said):
    """A notebook of `"nbformat": 99`, or whose parameters tag is the string "parameters" (found by a substring
    test), was shipped (status 0): nbformat refused the shipped file, found only on Kaggle after the push."""
    from conftest import make_notebook
    from trm_kaggle.kaggle.kernel import read_kernel_notebook

    path = make_notebook(tmp_path / "nb.ipynb")
    nb = json.loads(path.read_text())
    if change == "nbformat":
        nb["nbformat"] = 99
    else:
        nb["cells"][0]["metadata"]["tags"] = "parameters"
    path.write_text(json.dumps(nb))
    with pytest.raises(TRMError, match=re.escape(f"{path}: not a submission kernel this package can run: {said}")):
        read_kernel_notebook(path)
