"""The accelerator and image a bundle's kernels ask Kaggle for (machine_shape, docker_image, the notebook's own
metadata.kaggle block), and bad input to build_bundle.py: one `error:` line, status 2, nothing written."""

from __future__ import annotations

import json
import os

import pytest

from trm_kaggle.errors import TRMError
from trm_kaggle.kaggle import bundle as B
from trm_kaggle.kaggle import metadata as M

from conftest import IDS, USER


def _build(inputs, out, *extra) -> int:
    user = [] if "--user" in extra else ["--user", USER]  # an option is given once: a case may set its own
    return B.main([str(out), "--no-download", *user, "--weights", str(inputs["export"]),
                   "--notebook", str(inputs["notebook"]), *extra])


def _meta(out, part="kernel") -> dict:
    return json.loads((out / part / M.KERNEL_META).read_text())


def _nb_kaggle(out) -> dict:
    return json.loads((out / "kernel" / "kaggle_submission.ipynb").read_text())["metadata"]["kaggle"]


def test_default_is_four_l4s_for_both_kernels(built, inputs, tmp_path, capsys):
    assert _meta(built)["machine_shape"] == "NvidiaL4" and "docker_image" not in _meta(built)
    block = _nb_kaggle(built)
    assert block["accelerator"] == "nvidiaL4" and block["isGpuEnabled"] is True
    assert block["isInternetEnabled"] is False and block["language"] == "python"
    out = tmp_path / "out"
    assert _build(inputs, out, "--wheel-kernel") == 0
    assert _meta(out, M.WHEEL_KERNEL_DIR)["machine_shape"] == "NvidiaL4"  # the wheel matches the kernel's machine
    assert "competition arc-prize-2026-arc-agi-2, NvidiaL4)" in capsys.readouterr().out


def test_accelerator_image_and_cpu(inputs, tmp_path):
    out = tmp_path / "t4"
    assert _build(inputs, out, "--accelerator", "nvidiateslat4", "--docker-image",
                  "gcr.io/kaggle-gpu-images/python:v160") == 0
    meta = _meta(out)
    assert meta["machine_shape"] == "NvidiaTeslaT4"  # Kaggle's spelling, whatever the letter case given
    assert meta["docker_image"] == "gcr.io/kaggle-gpu-images/python:v160"
    assert meta["docker_image_pinning_type"] == "original"
    assert _nb_kaggle(out)["accelerator"] == "nvidiaTeslaT4"
    out = tmp_path / "tpu"
    assert _build(inputs, out, "--accelerator", "TpuV5E8") == 0
    assert (_meta(out)["machine_shape"], _meta(out)["enable_gpu"], _meta(out)["enable_tpu"]) == ("TpuV5E8", False, True)
    assert _nb_kaggle(out)["accelerator"] == "tpuV5E8" and _nb_kaggle(out)["isGpuEnabled"] is False
    out = tmp_path / "cpu"
    assert _build(inputs, out, "--cpu") == 0
    assert "machine_shape" not in _meta(out) and _meta(out)["enable_gpu"] is False
    assert _nb_kaggle(out)["accelerator"] == "none" and _nb_kaggle(out)["isGpuEnabled"] is False
    M.validate_bundle(out)


@pytest.mark.parametrize("args, words", [
    (["--accelerator", "NvidiaTeslaP100"], "accelerator NvidiaTeslaP100 is retired on Kaggle"),
    (["--accelerator", "TpuV38"], "use TpuV5E8"),
    (["--accelerator", "NvidiaV100"], "'NvidiaV100' is not one Kaggle offers: NvidiaL4, NvidiaL4X1,"),
    (["--accelerator", ""], "give one of NvidiaL4"),
    (["--python-version", "3.9"], "--python-version '3.9': the wheels can target CPython 3.10, 3.11, 3.12, 3.13"),
    (["--python-version", "3.12", "--python-version", "three"], "--python-version 'three'"),
    (["--push-wait", "-1"], "--push-wait -1: must be from 1 to 86400"),  # checked even where it is not used
    (["--execute-timeout", "nan"], "--execute-timeout nan: must be from 1 to 604800"),
    (["--time-budget", "inf"], "--time-budget inf: must be from 1 to 604800"),
    (["--workers", "0"], "--workers 0: must be from 1 to 1024"),
    (["--num-aug=-1"], "--num-aug -1: must be from 0 to 100000"),  # the kernel's SolveConfig bounds, while parsing
    (["--num-aug", "1000000000"], "--num-aug 1000000000: must be from 0 to 100000"),
    (["--finetune-steps=-1"], "--finetune-steps -1: must be from 0 to"),
    (["--finetune-steps", "1" + "0" * 23], "--finetune-steps 1" + "0" * 23 + ": must be from 0 to"),
    (["--device", "cuda;rm"], "--device 'cuda;rm': expected one of auto, cpu, cuda, mps, xla"),
    (["--max-tasks", "ten"], "--max-tasks 'ten': expected an integer"),
    (["--workers", "\uff12"], "--workers '\uff12': expected an integer"),  # a fullwidth 2: int() reads it
    (["--platform", "../../x"], "--platform '../../x': a wheel platform tag is lower-case letters"),
    (["--platform", "manylinux_2_17_x86_64", "--platform", "Linux x86"], "--platform 'Linux x86'"),
    (["--slug-prefix", "TRM Kaggle!"], "--user/--slug-prefix give an invalid Kaggle id"),
    (["--user", "me/you"], "--user/--slug-prefix give an invalid Kaggle id"),
    (["--docker-image", "an image"], "--docker-image 'an image'"),
    (["--accelerator", "TpuV5E8", "--wheel-kernel"], "--wheel-kernel builds a CUDA extension, which needs a GPU"),
    # a training build once dropped the submission bundle's options without a word (--cpu kept the GPU)
    (["--train-kernel", "--preset", "sudoku4-cpu", "--cpu", "--execute"],
     "--weights, --notebook, --cpu, --execute: the submission bundle's, not the training's"),
    # the offline run's options without --execute were dropped without a word (the kernel kept TIME_BUDGET auto)
    (["--time-budget", "60", "--max-tasks", "2", "--challenges", "/nonexistent.json"],
     "--challenges, --max-tasks, --time-budget: options of the offline run; add --execute, or leave them out"),
    (["--mounts", "2026"], "--mounts: options of the offline run"),
    # typed with their default values they were taken for not typed, and accepted though read by nothing
    (["--mounts", "2025", "--max-tasks", "3"], "--mounts, --max-tasks: options of the offline run"),
    (["--push-wait", "1800"], "--push-wait: options of --push; add it"),
    (["--cpu", "--accelerator", "NvidiaL4"], "--cpu and --accelerator NvidiaL4: a CPU kernel asks Kaggle for no"),
    # the training kernel's and --push's options, given to a build that reads none of them: once dropped unsaid
    (["--preset", "arc2", "--train-budget", "1000"], "--preset, --train-budget: options of the training kernel"),
    (["--continue-from", "bob/x", "--first-session"], "--continue-from, --first-session: options of the training"),
    (["--push-wait", "5", "--version-message", "hi"], "--version-message, --push-wait: options of --push; add it"),
    # a budget inside the kernel's safety margin was found out only after the whole build and rehearsal
    (["--execute", "--time-budget", "69.5"], "--time-budget 69.5: the kernel keeps 60 s of its budget as a safety "
                                              "margin, its start (loading the package"),
    # 70, the least it once asked for, could never run the model: solve's start (3 s on a 2-core CPU) is inside
    (["--execute", "--time-budget", "70"], "worker needs 10 s more to plan, so the model could not run; give at "
                                           "least 85"),
])
def test_bad_input_one_line_nothing_written(inputs, tmp_path, capsys, args, words):
    out = tmp_path / "out"
    assert _build(inputs, out, *args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and words in err and err.count("\n") == 1, err
    assert not out.exists()


@pytest.mark.parametrize("text, words", [("{broken", "sample submission"), ("[1]", "not a JSON object")])
def test_unreadable_sample_submission_stops_before_the_build(inputs, tmp_path, capsys, text, words):
    comp = tmp_path / "comp"
    comp.mkdir()
    (comp / "arc-agi_test_challenges.json").write_text('{"t": {"train": [], "test": [{"input": [[1]]}]}}')
    (comp / "sample_submission.json").write_text(text)
    out = tmp_path / "out"
    assert _build(inputs, out, "--execute", "--challenges", str(comp / "arc-agi_test_challenges.json")) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and words in err and "sample_submission.json" in err and err.count("\n") == 1
    assert not out.exists()


@pytest.mark.parametrize("kind, words", [("empty", "the file is empty"), ("truncated", "truncated?"),
                                         ("list", "expected an object mapping task ids"), ("fifo", "FIFO"),
                                         ("folder", "found a directory"),
                                         ("no task", "holds no task, so the kernel would have nothing to answer"),
                                         ("solutions", "none of its 1 task has a test input")])
def test_unreadable_challenges_stop_before_the_build(inputs, tmp_path, capsys, kind, words):
    # such a file was refused only once the whole bundle had been built (a wasted build, an OUT_DIR left behind)
    path = tmp_path / "arc-agi_test_challenges.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:
        path.write_text({"empty": "", "truncated": '{"a": {"train": [', "list": "[]", "no task": "{}",
                         "solutions": '{"a": [[[1]]]}'}[kind])
    out = tmp_path / "out"
    assert _build(inputs, out, "--execute", "--challenges", str(path)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and words in err and path.name in err and err.count("\n") == 1, err
    assert not out.exists()


@pytest.mark.parametrize("shape, ok", [("NvidiaL4X1", True), ("NvidiaH100", True), ("TpuV6E8", True),
                                       ("NvidiaTeslaP100", False), ("Tpu1VmV38", False), (4, False)])
def test_kernel_metadata_validation_checks_the_shape(tmp_path, shape, ok):
    (tmp_path / "nb.ipynb").write_text("{}")
    meta = M.kernel_metadata(IDS, "nb.ipynb")
    meta["machine_shape"] = shape
    if ok:
        M.validate_kernel_metadata(meta, tmp_path, [IDS.wheels_id, IDS.weights_id])
    else:
        with pytest.raises(TRMError, match="machine_shape"):
            M.validate_kernel_metadata(meta, tmp_path, [IDS.wheels_id, IDS.weights_id])


def test_check_machine_shape_names_every_offered_shape():
    for shape in M.MACHINE_SHAPES:
        assert M.check_machine_shape(shape.upper()) == shape
    for retired, replacement in M.RETIRED_SHAPES.items():
        with pytest.raises(TRMError, match=f"use {replacement}"):
            M.check_machine_shape(retired)


def test_the_committed_notebook_carries_kaggles_block_for_web_uploads():
    nb = json.loads((M.REPO_ROOT / "notebooks" / "kaggle_submission.ipynb").read_text())
    assert nb["metadata"]["kaggle"] == M.notebook_kaggle_block(M.DEFAULT_MACHINE_SHAPE, [])
    assert nb["metadata"]["kaggle"]["isInternetEnabled"] is False


def test_trm_kaggle_bundle_refuses_a_default_valued_option_read_by_nothing(inputs, tmp_path, capsys):
    from trm_kaggle.cli import main

    out = tmp_path / "out"
    assert main(["bundle", str(out), "--no-download", "--user", USER, "--weights", str(inputs["export"]),
                 "--max-tasks", "3"]) == 2
    err = capsys.readouterr().err
    assert "--max-tasks: options of the offline run" in err and not out.exists(), err


def test_challenges_with_an_id_written_twice_are_rehearsed_as_the_kernel_answers_them(tmp_path):
    """`--execute --challenges F` with a task id written twice was refused ("unreadable challenges file: the key 'a'
    appears twice") while submit, validate-submission and the kernel answer such an id by its last copy."""
    import json

    from trm_kaggle.kaggle.sandbox import check_challenges

    task = json.dumps({"train": [{"input": [[1]], "output": [[2]]}], "test": [{"input": [[1]]}]})
    path = tmp_path / "arc-agi_test_challenges.json"
    path.write_text('{"a": %s, "a": %s}' % (task, task))
    check_challenges(path)  # no error: rehearsed as the kernel will run it
