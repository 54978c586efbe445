"""The competition kernel, as Kaggle runs it: offline, in a fresh environment, installing only from the bundle.

Builds a bundle (no downloads) with a tiny model, then runs notebooks/kaggle_submission.ipynb with papermill
in a new network namespace and a fresh virtual environment that sees the preinstalled packages (torch,
numpy) but must install trm_kaggle from the bundle's wheels. The competition folder holds 40 tasks; the model
works on 2 of them (MAX_TASKS), sharded over 2 worker processes spawned from the notebook's kernel, and the
submission must answer all 40.
"""

import json

import numpy as np
import pytest
import torch

from trm_kaggle.config import ArchConfig
from trm_kaggle.kaggle import bundle, sandbox
from trm_kaggle.kaggle.metadata import COMPETITION
from trm_kaggle.model.export import export_inference
from trm_kaggle.model.trm import TinyRecursiveModel

from conftest import random_task

pytest.importorskip("papermill", reason="the notebooks extra (papermill, ipykernel) is needed to run notebooks")

TASKS = 40


@pytest.mark.slow
def test_kernel_answers_every_task_offline_from_the_bundle(tmp_path, capsys):
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
    rng = np.random.default_rng(0)
    tasks = {f"{i:08x}": random_task(rng, n_train=2, n_test=1 + i % 2, max_side=6) for i in range(TASKS)}
    challenges = tmp_path / "arc-agi_evaluation_challenges.json"
    challenges.write_text(json.dumps({k: v[0] for k, v in tasks.items()}))
    (tmp_path / "arc-agi_evaluation_solutions.json").write_text(json.dumps({k: v[1] for k, v in tasks.items()}))
    # as a person types it: build, then run the kernel offline (`build_bundle.py OUT --execute ...`), in the mount
    # layout of 2026's images (competitions/<slug>/, datasets/<owner>/<slug>/)
    rc = bundle.main([str(tmp_path / "bundle"), "--no-download", "--weights", str(tmp_path / "weights"), "--execute",
                      "--challenges", str(challenges), "--max-tasks", "2", "--workers", "2", "--time-budget", "600",
                      "--finetune-steps", "2", "--num-aug", "1", "--device", "cpu", "--mounts", "2026",
                      "--user", "tester"])
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "bundle" / "sandbox" / "execute_report.json").read_text())
    assert rc == 0 and report["ok"], (report["problems"], out)
    assert report["parameters"]["WORKERS"] == 2 and report["parameters"]["MAX_TASKS"] == 2
    # a summary, not the notebook's output: the kernel's phases, then where its whole output is
    lines = out.strip().splitlines()
    assert len(lines) <= 30, out
    assert lines[-3].startswith("executed the kernel offline (2026 mounts) in ") and \
        f"valid against all {TASKS} tasks" in lines[-3]
    assert lines[-1] == f"  whole output: {report['log']}; executed notebook: {report['executed_notebook']}"
    phases = [line for line in lines if line.startswith("  kernel ")]
    assert any("] plan: worker 0 on cpu" in line for line in phases) and "] submission: " in phases[-1], out
    log = (tmp_path / "bundle" / "sandbox" / "papermill.log").read_text()
    assert "Executing Cell" in log and len(log.splitlines()) > 2 * len(lines)
    assert "Executing Cell" not in out and "pip" not in out.replace("pip install --no-index", "")
    assert report["trm_kaggle_in_venv"], report["trm_kaggle_file"]  # installed from the wheels, not the checkout
    # the competition file holds every task, and the submission answers every one of them
    sandbox_input = tmp_path / "bundle" / "sandbox" / "input"
    layout_challenges = sandbox_input / "competitions" / COMPETITION / "arc-agi_test_challenges.json"
    assert sorted(p.name for p in sandbox_input.iterdir()) == ["competitions", "datasets"]
    assert list((sandbox_input / "datasets" / "tester" / "trm-kaggle-wheels").glob("trm_kaggle-*.whl"))
    assert len(json.loads(layout_challenges.read_text())) == report["tasks"] == TASKS
    assert report["submission_valid"] and report["score"]["total"] == sum(1 + i % 2 for i in range(TASKS))
    submission = json.loads((tmp_path / "bundle" / "sandbox" / "working" / "submission.json").read_text())
    assert set(submission) == set(tasks)
    executed = json.loads((tmp_path / "bundle" / "sandbox" / "executed.ipynb").read_text())
    text = "\n".join("".join(o.get("text", "")) for c in executed["cells"] for o in c.get("outputs", []))
    assert "TqdmWarning" not in text and "TqdmWarning" not in log  # text bars without ipywidgets, no warning
    assert f"the model works on 2 of {TASKS} tasks (max_tasks 2)" in text
    assert "[worker 0]" in text and "[worker 1]" in text and "] plan: worker 1 on cpu" in text
    assert "2 tasks answered by the model" in text and "elapsed" in text and "left" in text
    assert f"fallback: {TASKS - 2} tasks (" in text and "keep the fallback answer: beyond max_tasks 2" in text
