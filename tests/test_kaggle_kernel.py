"""The competition kernel, as Kaggle runs it: offline, in a fresh environment, installing only from the bundle.

Builds a bundle (no downloads) with a tiny model, then runs notebooks/kaggle_submission.ipynb with papermill
in a new network namespace and a fresh virtual environment that sees the preinstalled packages (torch,
numpy) but must install trm_kaggle from the bundle's wheels; the submission it writes must be valid.
"""

import pytest
import torch

from trm_kaggle.config import ArchConfig
from trm_kaggle.kaggle import bundle, sandbox
from trm_kaggle.kaggle.metadata import BundleIds
from trm_kaggle.model.trm import TinyRecursiveModel
from trm_kaggle.model.export import export_inference

pytest.importorskip("papermill", reason="the notebooks extra (papermill, ipykernel) is needed to run notebooks")


def test_kernel_runs_offline_from_the_bundle(tmp_path):
    from trm_kaggle.errors import TRMError

    try:
        sandbox.probe_netns()
    except TRMError as e:  # visible as a skip with its reason, never as a pass
        pytest.skip(f"no network namespace on this machine, so the offline run cannot be proven: {e}")
    arch = ArchConfig(hidden_size=32, num_heads=2, expansion=2, H_cycles=1, L_cycles=1, L_layers=1, halt_max_steps=2,
                      puzzle_emb_len=1, forward_dtype="float32")
    torch.manual_seed(0)
    export_inference(tmp_path / "weights", TinyRecursiveModel(arch, 900, 12, 4), arch=arch, seq_len=900,
                     vocab_size=12, mean_embedding=True)
    bundle.build_bundle(tmp_path / "bundle", ids=BundleIds(), weights=tmp_path / "weights", download=False,
                        log=lambda _: None)
    report = sandbox.execute(tmp_path / "bundle", max_tasks=2, time_budget=600, finetune_steps=2, num_aug=1,
                             device="cpu", echo=lambda _: None)
    assert report["ok"], report["problems"]
    assert report["trm_kaggle_in_venv"], report["trm_kaggle_file"]  # installed from the wheels, not the checkout
    assert report["submission_valid"] and "score" in report
