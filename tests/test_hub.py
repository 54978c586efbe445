"""`import-upstream hf://owner/repo[@revision][/path]`: parsing, a local snapshot laid out like the Hugging Face
cache, offline and missing-extra errors. Nothing here touches the network (sockets are blocked)."""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import socket
import sys
from pathlib import Path

import pytest
import torch
import yaml

from trm_kaggle.cli import main
from trm_kaggle.config import ArchConfig
from trm_kaggle.errors import TRMError
from trm_kaggle.model.export import read_export
from trm_kaggle.model.hub import HubSource, parse_hub_source, resolve_checkpoint
from trm_kaggle.model.trm import TinyRecursiveModel
from trm_kaggle.model.upstream import to_upstream_state_dict

hf_constants = pytest.importorskip("huggingface_hub.constants")

COMMIT = "0123456789abcdef0123456789abcdef01234567"
ARCH = dict(hidden_size=16, num_heads=2, expansion=2, H_cycles=1, L_cycles=1, L_layers=1, halt_max_steps=2,
            puzzle_emb_len=1)


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    def refuse(*a, **kw):
        raise AssertionError("a test tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def upstream_files(seed: int) -> tuple[bytes, TinyRecursiveModel]:
    torch.manual_seed(seed)
    model = TinyRecursiveModel(ArchConfig(**ARCH, forward_dtype="float32"), 16, 12, 3)
    buf = io.BytesIO()
    torch.save(to_upstream_state_dict(model, compiled=True, init_dtype=None), buf)
    return buf.getvalue(), model


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """A cache holding owner/trm at COMMIT (refs/main): runs/arc/{step_5, step_12, all_config.yaml}, as
    huggingface_hub lays it out (snapshot entries are symlinks to content-addressed blobs); offline mode on."""
    cache = tmp_path / "hf_cache"
    repo = cache / "models--owner--trm"
    models = {}
    files = {"runs/arc/all_config.yaml": yaml.safe_dump({"arch": {**ARCH, "forward_dtype": "bfloat16"}}).encode()}
    for step, seed in ((5, 0), (12, 1)):
        files[f"runs/arc/step_{step}"], models[step] = upstream_files(seed)
    for rel, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = repo / "snapshots" / COMMIT / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path("../" * (rel.count("/") + 2)) / "blobs" / blob.name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(cache))  # read once, at import
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    return cache, models


def test_which_arguments_mean_the_hub(tmp_path):
    assert parse_hub_source("hf://owner/repo") == HubSource("owner/repo", None, "")
    assert parse_hub_source("hf://owner/repo@v1.0/runs/arc/") == HubSource("owner/repo", "v1.0", "runs/arc")
    src = parse_hub_source("owner/repo@abc/runs/arc/step_7")  # no such local path: the Hub
    assert src == HubSource("owner/repo", "abc", "runs/arc/step_7") and src.step_file
    assert src.folder == "runs/arc" and src.allow_patterns() == ["runs/arc/step_7", "runs/arc/all_config.yaml"]
    assert HubSource("o/r", None, "runs").allow_patterns() == ["runs/step_*", "runs/all_config.yaml"]
    assert HubSource("o/r", None, "step_3").allow_patterns() == ["step_3", "all_config.yaml"]
    assert HubSource("o/r", None, "").allow_patterns() == ["step_*", "all_config.yaml"]
    local = tmp_path / "owner" / "repo"
    local.mkdir(parents=True)
    assert parse_hub_source(local) is None  # an existing local path always wins
    assert parse_hub_source("step_100") is None  # not owner/repo: a local path (that does not exist)
    with pytest.raises(TRMError, match="'.' or '..'"):
        parse_hub_source("hf://owner/repo/../secrets")
    with pytest.raises(TRMError, match="expected hf://owner/repo"):
        parse_hub_source("hf://just-a-name")
    assert str(parse_hub_source("hf://owner/repo@v1/runs")) == "hf://owner/repo@v1/runs"


def test_import_from_a_cached_snapshot_takes_the_newest_step(hub_cache, tmp_path, capsys):
    _, models = hub_cache
    assert main(["import-upstream", "hf://owner/trm/runs/arc", "--out", str(tmp_path / "w"), "--seq-len", "16"]) == 0
    out = capsys.readouterr().out
    assert "hf://owner/trm/runs/arc (its newest step, step_12), " in out
    assert "parameters without the puzzle-embedding table" in out
    config, tensors = read_export(tmp_path / "w")  # the step taken is recorded, not the folder alone
    assert config["info"]["source"] == "hf://owner/trm/runs/arc/step_12" and config["info"]["hub_commit"] == COMMIT
    assert torch.equal(tensors["lm_head.weight"], models[12].lm_head.weight.detach())  # step_12, not step_5


@pytest.mark.parametrize("kind, said", [("dangling", "a link to a missing file (not downloaded completely"),
                                        ("fifo", "a pipe (FIFO)"), ("folder", "a folder")])
def test_a_newest_step_that_is_no_file_is_refused_not_passed_over(hub_cache, tmp_path, capsys, kind, said):
    """step_50 a link to a blob that is missing (an interrupted download), a FIFO or a folder: step_12 was imported
    in its place without a word."""
    cache, _ = hub_cache
    step = cache / "models--owner--trm" / "snapshots" / COMMIT / "runs" / "arc" / "step_50"
    {"dangling": lambda: step.symlink_to("../../../../blobs/missing"), "fifo": lambda: os.mkfifo(step),
     "folder": step.mkdir}[kind]()
    assert main(["import-upstream", "hf://owner/trm/runs/arc", "--out", str(tmp_path / "w"), "--seq-len", "16"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "its newest step, step_50, is " + said in err, err
    assert "name the step to import, e.g. hf://owner/trm/runs/arc/step_12" in err
    assert not (tmp_path / "w").exists()


def test_a_plain_repo_id_with_revision_and_step_file(hub_cache, tmp_path):
    _, models = hub_cache
    assert main(["import-upstream", "owner/trm@main/runs/arc/step_5", "--out", str(tmp_path / "w"),
                 "--seq-len", "16"]) == 0
    _, tensors = read_export(tmp_path / "w")
    assert torch.equal(tensors["lm_head.weight"], models[5].lm_head.weight.detach())
    path, source = resolve_checkpoint(f"owner/trm@{COMMIT}/runs/arc/step_12")  # a commit as the revision
    assert path.name == "step_12" and path.is_file() and source.revision == COMMIT


@pytest.mark.parametrize("source, message", [
    ("hf://owner/other", "not in the Hugging Face cache .*offline mode is on \\(HF_HUB_OFFLINE=1\\).*pass the local "
                         "step_<N> path"),
    ("hf://owner/trm@v2/runs/arc", "not in the Hugging Face cache"),
    ("hf://owner/trm/runs/arc/step_99", "the snapshot has no runs/arc/step_99"),
    ("hf://owner/trm/runs", "no step_<N> checkpoint in this folder"),
    ("owner/other/step_3", "no such local file; read as a Hugging Face source: .*not in the Hugging Face cache"),
])
def test_offline_misses_are_one_clear_line(hub_cache, tmp_path, capsys, source, message):
    assert main(["import-upstream", source, "--out", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert re.search(message, err), err
    assert not (tmp_path / "w").exists()


def test_a_snapshot_without_all_config_is_refused(hub_cache, tmp_path, capsys):
    cache, _ = hub_cache
    (cache / "models--owner--trm" / "snapshots" / COMMIT / "runs" / "arc" / "all_config.yaml").unlink()
    assert main(["import-upstream", "hf://owner/trm/runs/arc", "--out", str(tmp_path / "w")]) == 2
    assert "no all_config.yaml beside step_12" in capsys.readouterr().err


def test_without_the_extra_it_says_what_to_install(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # as if not installed
    assert main(["import-upstream", "hf://owner/trm", "--out", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert 'pip install "trm_kaggle[hub]"' in err and "pass the local step_<N> path" in err


@pytest.mark.parametrize("planted", ["path", "link"])
def test_a_ref_leading_out_of_the_cache_is_refused(hub_cache, tmp_path, capsys, planted):
    """Offline, huggingface_hub joins refs/main's text to snapshots/ unchecked: `../../../outside` imported a folder
    outside the cache (recording `..` as its commit); so did a commit-named snapshot that is a link out of it."""
    cache, _ = hub_cache
    repo = cache / "models--owner--trm"
    outside = tmp_path / "outside"
    shutil.copytree(repo / "snapshots" / COMMIT, outside)  # a whole run (its files, not links), all_config.yaml too
    shutil.rmtree(repo / "snapshots" / COMMIT)
    if planted == "path":
        (repo / "refs" / "main").write_text("../../../outside")
    else:
        (repo / "snapshots" / COMMIT).symlink_to(outside)
    assert main(["import-upstream", "hf://owner/trm/runs/arc", "--out", str(tmp_path / "w"), "--seq-len", "16"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: hf://owner/trm/runs/arc: the Hugging Face cache's ref "
                                                   f"{repo / 'refs' / 'main'} leads to "), err
    assert not (tmp_path / "w").exists()


def test_a_ref_leading_nowhere_is_said_as_an_edited_cache(hub_cache, tmp_path, capsys):
    """`../../../../outside` as refs/main: huggingface_hub finds no folder there and says "not cached", which sent
    the user to the network; the ref is what was edited."""
    cache, _ = hub_cache
    ref = cache / "models--owner--trm" / "refs" / "main"
    ref.write_text("../../../../outside")
    assert main(["import-upstream", "hf://owner/trm/runs/arc", "--out", str(tmp_path / "w"), "--seq-len", "16"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"the Hugging Face cache's ref {ref} reads '../../../../outside', not a commit id" in err
    assert "the cache was edited" in err and "not in the Hugging Face cache" not in err
    assert not (tmp_path / "w").exists()


def test_a_snapshot_folder_linked_out_of_the_cache_is_refused(hub_cache, tmp_path, capsys):
    """The rule of a linked commit folder holds for the folders inside it: runs/arc a link to a folder elsewhere
    was imported."""
    cache, _ = hub_cache
    arc = cache / "models--owner--trm" / "snapshots" / COMMIT / "runs" / "arc"
    outside = tmp_path / "outside"
    shutil.copytree(arc, outside)  # the files themselves, not links
    shutil.rmtree(arc)
    arc.symlink_to(outside)
    assert main(["import-upstream", "hf://owner/trm/runs/arc", "--out", str(tmp_path / "w"), "--seq-len", "16"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"is a link leading to {outside.resolve()}, outside the snapshot" in err, err
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("name", ["step_50", "all_config.yaml"])
def test_a_snapshot_file_linked_out_of_the_cache_is_refused(hub_cache, tmp_path, capsys, name):
    """A step file (or its all_config.yaml) that is a link to a file outside the repository's folder in the cache
    was imported, and the export recorded those bytes as the snapshot commit's step."""
    cache, _ = hub_cache
    arc = cache / "models--owner--trm" / "snapshots" / COMMIT / "runs" / "arc"
    newest = max((p for p in arc.glob("step_*")), key=lambda p: int(p.name.split("_")[1]))
    outside = tmp_path / "outside_file"
    shutil.copyfile(newest if name.startswith("step_") else arc / name, outside)
    target = arc / name
    if name.startswith("step_"):
        target = arc / "step_99999"  # the newest step, linked out
    elif target.exists() or target.is_symlink():
        target.unlink()
    target.symlink_to(outside)
    assert main(["import-upstream", "hf://owner/trm/runs/arc", "--out", str(tmp_path / "w"), "--seq-len", "16"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"is a link leading to {outside.resolve()}, outside the repository's" in err, err
    assert not (tmp_path / "w").exists()
