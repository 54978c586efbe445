"""Inference exports: the one mean-row rule, writing and reading, resizing, and rebuilding from a train state."""

from __future__ import annotations

import json
import re
import shutil

import pytest
import torch

from trm_kaggle.config import TrainConfig
from trm_kaggle.errors import TRMError
from trm_kaggle.model.export import (PUZZLE_EMB_KEY, apply_task_ids, export_inference, export_parameter_count,
                                     load_inference_model, mean_puzzle_row, model_from_train_state, read_export,
                                     resize_puzzle_embedding, task_id_table)
from trm_kaggle.model.trm import TinyRecursiveModel

from conftest import TINY_ARCH as ARCH


# a 3-row table whose row 0 (the blank identifier) is far from the others
TABLE = torch.tensor([[9.0, -3.0], [1.0, 2.0], [3.0, 4.0]])
# by hand, over ALL rows: ((9 + 1 + 3) / 3, (-3 + 2 + 4) / 3)
MEAN_ALL_ROWS = torch.tensor([[13.0 / 3.0, 1.0]])


def model_with_table(num_ids: int = 3) -> TinyRecursiveModel:
    torch.manual_seed(0)
    model = TinyRecursiveModel(ARCH, 8, 5, num_ids)
    with torch.no_grad():
        model.puzzle_emb.weights.copy_(torch.randn(num_ids, model.puzzle_emb.weights.shape[1]))
    return model


def test_mean_row_is_the_mean_of_every_row_including_the_blank_one():
    row = mean_puzzle_row(TABLE)
    assert row.shape == (1, 2)
    torch.testing.assert_close(row, MEAN_ALL_ROWS)
    assert not torch.allclose(row, TABLE[1:].mean(0, keepdim=True))  # dropping row 0 is another rule


def test_resize_fills_every_row_with_the_mean_row():
    assert resize_puzzle_embedding(TABLE, 3) is TABLE
    resized = resize_puzzle_embedding(TABLE, 5)
    torch.testing.assert_close(resized, MEAN_ALL_ROWS.expand(5, -1))


def test_mean_embedding_export_keeps_the_mean_of_all_rows(tmp_path):
    model = model_with_table(4)
    table = model.puzzle_emb.weights.detach().clone()
    export_inference(tmp_path / "e", model, arch=ARCH, seq_len=8, vocab_size=5, mean_embedding=True)
    config, tensors = read_export(tmp_path / "e")
    assert config["puzzle_embedding"] == "mean" and config["num_puzzle_identifiers"] == 4
    by_hand = sum(table[i] for i in range(4)) / 4  # row 0 included
    torch.testing.assert_close(tensors[PUZZLE_EMB_KEY], by_hand.view(1, -1))
    assert not torch.allclose(tensors[PUZZLE_EMB_KEY], table[1:].mean(0, keepdim=True))


def test_full_export_round_trip_and_resized_load(tmp_path):
    model = model_with_table(3)
    export_inference(tmp_path / "e", model, arch=ARCH, seq_len=8, vocab_size=5, info={"note": "x"})
    loaded, config = load_inference_model(tmp_path / "e")
    assert config["info"] == {"note": "x"} and config["puzzle_embedding"] == "full"
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], tensor)
    # more identifiers (unseen puzzles): every row starts from the mean of all saved rows
    bigger, _ = load_inference_model(tmp_path / "e", num_puzzle_identifiers=7)
    torch.testing.assert_close(bigger.puzzle_emb.weights, mean_puzzle_row(model.puzzle_emb.weights).expand(7, -1))
    # a count the table cannot have is one line naming the argument, not torch's error or a 2 PB allocation
    for bad in (-1, 0, 2**40, True, 2.5):
        with pytest.raises(TRMError, match=f"num_puzzle_identifiers={bad!r}: a whole number from 1 to"):
            load_inference_model(tmp_path / "e", num_puzzle_identifiers=bad)
    with pytest.raises(TRMError, match="device='xyz' is not a device"):  # torch's RuntimeError before
        load_inference_model(tmp_path / "e", device="xyz")

    # config.json's count edited after the weights (11 -> 12): every trained row was replaced by the mean row,
    # with a note blaming another dataset; a "mean" claimed of a full table likewise
    for field, value, said in (("num_puzzle_identifiers", 4, "num_puzzle_identifiers 4 with puzzle_embedding "
                                "'full' calls for 4 puzzle-table rows, and weights.safetensors holds 3"),
                               ("puzzle_embedding", "mean", "calls for 1 puzzle-table row, and")):
        edited = tmp_path / f"edited-{field}"
        shutil.copytree(tmp_path / "e", edited)
        config = json.loads((edited / "config.json").read_text())
        (edited / "config.json").write_text(json.dumps({**config, field: value}))
        with pytest.raises(TRMError, match=re.escape(said)):
            load_inference_model(edited)


def train_state(model: TinyRecursiveModel, ema: dict | None) -> dict:
    cfg = TrainConfig(arch=ARCH, data_paths=["d"], ema=ema is not None)  # a run keeps an average when told
    return {"config": cfg.model_dump_json(), "model": model.state_dict(), "ema": ema,
            "model_shape": {"seq_len": 8, "vocab_size": 5, "num_puzzle_identifiers": 3}}


@pytest.mark.parametrize("use_ema", [True, False])
def test_model_from_train_state_uses_the_ema_weights_when_asked(use_ema):
    live = model_with_table(3)
    shadow = {n: torch.full_like(p, 0.5) for n, p in live.named_parameters()}
    model, cfg, ema = model_from_train_state(train_state(live, shadow), use_ema=use_ema)
    assert cfg.data_paths == ["d"] and ema is use_ema
    expected = shadow["lm_head.weight"] if use_ema else live.lm_head.weight
    torch.testing.assert_close(model.lm_head.weight, expected)
    # no shadow in the state: the live weights, whatever was asked
    model, _, ema = model_from_train_state(train_state(live, None), use_ema=True)
    assert ema is False and torch.equal(model.lm_head.weight, live.lm_head.weight)


def test_export_config_is_plain_json(tmp_path):
    export_inference(tmp_path / "e", model_with_table(), arch=ARCH, seq_len=8, vocab_size=5)
    assert json.loads((tmp_path / "e" / "config.json").read_text())["arch"] == ARCH.model_dump()


def test_an_export_is_the_same_bytes_each_time(tmp_path):
    # safetensors writes its metadata in a hash map's order, new in each map: two exports of one model differed in
    # bytes (a file hash, a Kaggle dataset version), though not in a tensor
    model = model_with_table()
    files = []
    for k in range(4):
        export_inference(tmp_path / f"e{k}", model, arch=ARCH, seq_len=8, vocab_size=5)
        files.append((tmp_path / f"e{k}" / "weights.safetensors").read_bytes())
    assert all(f == files[0] for f in files[1:])
    size = int.from_bytes(files[0][:8], "little")
    header = json.loads(files[0][8:8 + size])
    assert list(header["__metadata__"]) == sorted(header["__metadata__"]) == ["config", "format", "sha256"]
    assert load_inference_model(tmp_path / "e3")[0] is not None  # still an export its reader takes


def test_an_export_of_a_fused_float8_run_loads_where_neither_runs(tmp_path):
    """A run trained with arch.kernels=triton and arch.fp8=nograd exports weights a CPU loads and runs: the export
    records kernels=auto (torch where Triton cannot run) and fp8=off; the tensors are the run's."""
    fused = ARCH.model_copy(update={"kernels": "triton", "fp8": "nograd"})
    model = model_with_table()
    export_inference(tmp_path / "e", model, arch=fused, seq_len=8, vocab_size=5)
    recorded = json.loads((tmp_path / "e" / "config.json").read_text())["arch"]
    assert (recorded["kernels"], recorded["fp8"]) == ("auto", "off")
    assert {k: v for k, v in recorded.items() if k not in ("kernels", "fp8")} == {
        k: v for k, v in ARCH.model_dump().items() if k not in ("kernels", "fp8")}
    loaded = load_inference_model(tmp_path / "e", device="cpu")[0]
    for key, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], tensor), key


# ---------------------------------------------------------------------------
# Task-id modes (`evaluate --task-ids`) and parameter counts
# ---------------------------------------------------------------------------


def test_task_id_modes_replace_every_row_by_their_rule():
    table = torch.arange(12.0).reshape(6, 2)
    assert torch.equal(task_id_table(table, "own"), table)
    assert torch.equal(task_id_table(table, "blank"), table[:1].expand(6, 2))
    assert torch.equal(task_id_table(table, "mean"), mean_puzzle_row(table).expand(6, 2))
    rand = task_id_table(table, "random", seed=1)
    picked = (rand[:, 0] / 2).long()  # row i of the table is (2i, 2i + 1)
    assert torch.equal(rand, table[picked])
    assert (picked >= 1).all() and (picked[1:] != torch.arange(1, 6)).all()  # a trained row, never its own
    assert torch.equal(task_id_table(table, "random", seed=1), rand)  # seeded
    assert any(not torch.equal(task_id_table(table, "random", seed=s), rand) for s in range(2, 6))
    with pytest.raises(TRMError, match="unknown task-id mode"):
        task_id_table(table, "zero")
    with pytest.raises(TRMError, match="at least two trained identifiers"):
        task_id_table(table[:2], "random")


def test_apply_task_ids_changes_the_model_or_says_why_it_cannot():
    model = model_with_table(5)
    before = model.puzzle_emb.weights.clone()
    assert apply_task_ids(model, "blank") is None
    assert torch.equal(model.puzzle_emb.weights, before[:1].expand(5, -1))
    mean_export = model_with_table(5)
    with torch.no_grad():
        mean_export.puzzle_emb.weights.copy_(resize_puzzle_embedding(mean_export.puzzle_emb.weights[:1], 5))
    assert "same answers" in apply_task_ids(mean_export, "random")
    with pytest.raises(TRMError):
        apply_task_ids(model, "nope")


def test_parameter_counts_with_and_without_the_puzzle_table(tmp_path):
    model = model_with_table(7)
    count = model.parameter_count()
    assert count.weights == model.num_parameters() == sum(p.numel() for p in model.parameters())
    assert (count.puzzle_rows, count.puzzle_dim) == (7, ARCH.hidden_size)
    assert count.total == count.weights + 7 * ARCH.hidden_size
    assert str(count) == (f"{count.weights:,} parameters without the puzzle-embedding table, {count.total:,} with it "
                          f"(7 rows x {ARCH.hidden_size})")
    # an export keeping only the mean row still reports the table it was trained with
    export_inference(tmp_path / "e", model, arch=ARCH, seq_len=8, vocab_size=5, mean_embedding=True)
    config, tensors = read_export(tmp_path / "e")
    assert tensors[PUZZLE_EMB_KEY].shape[0] == 1
    assert export_parameter_count(config) == count


# A config.json that does not describe its weights (issue 10): one line, never silently wrong outputs
# ---------------------------------------------------------------------------


def _set(cfg: dict, dotted: str, value) -> None:
    *path, last = dotted.split(".")
    for k in path:
        cfg = cfg[k]
    if value is KeyError:
        del cfg[last]
    else:
        cfg[last] = value


CONFIG_EDITS = [
    ("arch.num_heads", 4, "num_heads: 2 in the weights, 4 in config.json"),  # no tensor shape changes
    ("arch.puzzle_emb_len", 2, "puzzle_emb_len: 1 in the weights, 2 in config.json"),
    ("arch.H_cycles", 3, "H_cycles"),
    ("seq_len", 9, "seq_len: 8 in the weights"),
    ("surprise", 1, "surprise: Extra inputs are not permitted"),
    ("arch.surprise", 1, "arch.surprise: Extra inputs are not permitted"),
    ("seq_len", KeyError, "seq_len: Field required"),
    ("arch", KeyError, "arch: Field required"),
    ("arch.hidden_size", "big", "arch.hidden_size: Input should be a valid integer"),
    ("arch.num_heads", 0, "arch.num_heads: Input should be greater than or equal to 1"),
    ("arch.halt_max_steps", 0, "arch.halt_max_steps: Input should be greater than or equal to 1"),
    ("arch.num_heads", 3, "not divisible by num_heads"),
    ("arch.expansion", -1, "arch.expansion: Input should be greater than 0"),
    ("vocab_size", None, "vocab_size: Input should be a valid integer"),
    ("puzzle_embedding", "half", "puzzle_embedding: Input should be 'full' or 'mean'"),
    ("arch", [], "arch: Input should be a valid dictionary"),
    # read strictly: pydantic's lax mode took "16" as 16 and "yes" or 1 as True (a bundle's model card showed "16")
    ("arch.hidden_size", "16", "arch.hidden_size: Input should be a valid integer (given a string, '16')"),
    ("vocab_size", "5", "vocab_size: Input should be a valid integer (given a string, '5')"),
    ("arch.no_ACT_continue", "yes", "arch.no_ACT_continue: Input should be a valid boolean (given a string, 'yes')"),
    ("arch.no_ACT_continue", 1, "arch.no_ACT_continue: Input should be a valid boolean (given a number, 1)"),
    ("arch.expansion", "2", "arch.expansion: Input should be a valid number (given a string, '2')"),
    ("arch.hidden_size", 16.0, "arch.hidden_size: Input should be a valid integer (given a decimal number, 16.0)"),
    ("trm_kaggle_version", 1, "trm_kaggle_version: Input should be a valid string (given a number, 1)"),
]


@pytest.mark.parametrize("key, value, words", CONFIG_EDITS)
def test_an_edited_config_is_refused_with_one_line(tmp_path, key, value, words):
    from trm_kaggle.errors import TRMError

    export_inference(tmp_path / "exp", model_with_table(), arch=ARCH, seq_len=8, vocab_size=5)
    cfg = json.loads((tmp_path / "exp" / "config.json").read_text())
    _set(cfg, key, value)
    (tmp_path / "exp" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(TRMError) as e:
        load_inference_model(tmp_path / "exp")
    assert words in str(e.value) and "config.json" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("full", [True, False], ids=["full", "mean"])
@pytest.mark.parametrize("edit, said", [
    (lambda t: t.long(), "is a 2-D torch.int64 tensor of shape (R, 16)"),
    (lambda t: t.unsqueeze(-1), "is a 3-D torch.float32 tensor of shape (R, 16, 1)"),
    (lambda t: t.reshape(-1), "is a 1-D torch.float32 tensor of shape (16R,)"),
], ids=["int64", "3-D", "flat"])
def test_a_puzzle_table_that_is_no_2d_float_table_names_the_weights_file_and_the_tensor(tmp_path, edit, said, full):
    """An integer or 3-D table was refused as "table: a puzzle-embedding table is ..." (an argument's name, no file);
    a flattened one had its values counted as rows and config.json blamed for the difference."""
    from safetensors.torch import save_file

    from trm_kaggle.model.export import check_export

    export_inference(tmp_path / "exp", model_with_table(), arch=ARCH, seq_len=8, vocab_size=5,
                     mean_embedding=not full)
    _, tensors = read_export(tmp_path / "exp")
    tensors[PUZZLE_EMB_KEY] = edit(tensors[PUZZLE_EMB_KEY])
    save_file(tensors, str(tmp_path / "exp" / "weights.safetensors"))  # safetensors' own writer: no record
    rows = 3 if full else 1
    expected = (f"{tmp_path / 'exp' / 'weights.safetensors'}: tensor {PUZZLE_EMB_KEY} "
                + said.replace("16R", str(16 * rows)).replace("R", str(rows)))
    for read in (load_inference_model, check_export, lambda p: load_inference_model(p, num_puzzle_identifiers=9)):
        with pytest.raises(TRMError) as e:
            read(tmp_path / "exp")
        assert str(e.value).startswith(expected) and "2-D floating-point table (rows x width)" in str(e.value)
        assert "config.json" not in str(e.value) and "\n" not in str(e.value)


def test_weights_of_another_shape_name_the_tensor_and_both_shapes(tmp_path):
    from safetensors.torch import save_file

    from trm_kaggle.errors import TRMError

    export_inference(tmp_path / "exp", model_with_table(), arch=ARCH, seq_len=8, vocab_size=5)
    _, tensors = read_export(tmp_path / "exp")
    tensors["lm_head.weight"] = torch.zeros(7, 16)
    del tensors["q_head.bias"]
    tensors["extra.weight"] = torch.zeros(1)
    save_file(tensors, str(tmp_path / "exp" / "weights.safetensors"))  # no recorded config: an older export
    with pytest.raises(TRMError) as e:
        load_inference_model(tmp_path / "exp")
    msg = str(e.value)
    assert "lm_head.weight (7, 16) in the file, (5, 16) in the model" in msg
    assert "missing keys q_head.bias" in msg and "keys this model does not have extra.weight" in msg


def test_a_state_or_run_that_does_not_exist_is_said_missing(tmp_path):
    """`export runs/typo/state_step00000009.pt` said "no train state (state_step*.pt)", as of a run without
    states: the path is missing, and the line says so; an empty run folder still says it holds no state."""
    from trm_kaggle.train import checkpoint as ckpt

    for missing in (tmp_path / "typo" / "state_step00000009.pt", tmp_path / "typo"):
        with pytest.raises(TRMError, match=f"^{re.escape(str(missing))}: no such file or folder$"):
            ckpt.export_run(missing, tmp_path / "e")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TRMError, match=r"empty: no train state \(state_step\*\.pt\)$"):
        ckpt.export_run(tmp_path / "empty", tmp_path / "e")
    assert not (tmp_path / "e").exists()


def test_an_export_folder_that_is_a_loop_of_links_is_named_as_one(tmp_path):
    """From Python, weights `a -> b -> a` said "export folder not found (Too many levels of symbolic links)"."""
    from trm_kaggle.model.export import export_digest

    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    for read in (read_export, export_digest):
        with pytest.raises(TRMError) as e:
            read(tmp_path / "a")
        assert str(e.value) == f"{tmp_path / 'a'}: export folder is a loop of symbolic links (a dangling link): " \
                               "remove the link", str(e.value)


def test_export_inference_refuses_weights_its_readers_would_refuse(tmp_path):
    """A model whose tensors are not those of the arch/vocab_size it records (or no TRM model at all) was written
    and said done; `check_export` (submit, the Kaggle kernel) refused it later."""
    import torch.nn as nn

    from trm_kaggle.config import ArchConfig
    from trm_kaggle.errors import DataError

    model = model_with_table()
    wider = ArchConfig(**{**ARCH.model_dump(), "hidden_size": 2 * ARCH.hidden_size})
    for out, module, kw, said in [
        ("arch", model, dict(arch=wider, seq_len=8, vocab_size=5), "tensor shapes do not match: H_init"),
        ("vocab", model, dict(arch=ARCH, seq_len=8, vocab_size=3), "embed_tokens.weight (5, "),
        ("linear", nn.Linear(2, 2), dict(arch=ARCH, seq_len=8, vocab_size=5), "a Linear, not a TinyRecursiveModel"),
    ]:
        with pytest.raises(DataError, match=f"^{re.escape(str(tmp_path / out))}: not written") as caught:
            export_inference(tmp_path / out, module, **kw)
        assert said in str(caught.value) and not (tmp_path / out).exists()


def test_export_inference_takes_numpy_sizes(tmp_path):
    """np.int64 sizes were json's TypeError ("Object of type int64 is not JSON serializable")."""
    import numpy as np

    export_inference(tmp_path / "e", model_with_table(), arch=ARCH, seq_len=np.int64(8), vocab_size=np.int64(5))
    config = json.loads((tmp_path / "e" / "config.json").read_text())
    assert (config["seq_len"], config["vocab_size"]) == (8, 5)


@pytest.mark.parametrize("name", ["seq_len", "vocab_size"])
def test_export_inference_refuses_numpy_s_bool_as_python_s(tmp_path, name):
    """np.True_ was json's TypeError ("Object of type bool is not JSON serializable"), naming neither the argument
    nor the export."""
    import numpy as np

    from trm_kaggle.errors import DataError

    for value in (True, np.bool_(True)):
        sizes = {"seq_len": 8, "vocab_size": 5, name: value}
        with pytest.raises(DataError, match=rf"^{re.escape(str(tmp_path / 'e'))}: not written, its config.json would "
                                            rf"be refused: {name}: True is a boolean, not a number$"):
            export_inference(tmp_path / "e", model_with_table(), arch=ARCH, **sizes)
        assert not (tmp_path / "e").exists()


@pytest.mark.parametrize("info, where", [({"x": float("nan")}, "info['x']"),
                                         ({"a": [1, {"b": float("-inf")}]}, "info['a'][1]['b']")], ids=["nan", "inf"])
def test_export_inference_writes_strict_json_only(tmp_path, info, where):
    """info={"x": nan} was written as `"x": NaN` into config.json, which strict JSON readers refuse."""
    from trm_kaggle.errors import DataError

    with pytest.raises(DataError, match=rf"^{re.escape(str(tmp_path / 'e'))}: not written: {re.escape(where)} is not "
                                        r"a finite number \(strict JSON has no NaN or infinity\)$"):
        export_inference(tmp_path / "e", model_with_table(), arch=ARCH, seq_len=8, vocab_size=5, info=info)
    assert not (tmp_path / "e").exists()
    with pytest.raises(DataError, match=r"not written: info is not a record strict JSON can hold \(Object of type set"):
        export_inference(tmp_path / "e", model_with_table(), arch=ARCH, seq_len=8, vocab_size=5, info={"s": {1}})


def test_export_inference_writes_the_sizes_as_its_readers_take_them(tmp_path):
    """seq_len=8.0 was written as `"seq_len": 8.0`; an arch built around its validators (`model_construct`) wrote
    its "yes" as given, which every reader (config.json is read strictly) refused."""
    from trm_kaggle.config import ArchConfig

    loose = ArchConfig.model_construct(**{**ARCH.model_dump(), "no_ACT_continue": "yes", "expansion": 2})
    export_inference(tmp_path / "e", model_with_table(), arch=loose, seq_len=8.0, vocab_size=5.0)
    config = json.loads((tmp_path / "e" / "config.json").read_text())
    assert [type(config[k]).__name__ for k in ("seq_len", "vocab_size")] == ["int", "int"]
    assert config["arch"]["no_ACT_continue"] is True and config["arch"]["expansion"] == 2.0
    assert read_export(tmp_path / "e")[0]["seq_len"] == 8


def test_load_inference_model_takes_numpy_rows(tmp_path):
    """np.int64(5) was refused as "a whole number from 1 to 16,777,216"."""
    import numpy as np

    export_inference(tmp_path / "e", model_with_table(), arch=ARCH, seq_len=8, vocab_size=5)
    model, _ = load_inference_model(tmp_path / "e", num_puzzle_identifiers=np.int64(5))
    assert model.puzzle_emb.weights.shape[0] == 5


@pytest.mark.parametrize("table, said", [
    (torch.zeros(0, 4), "has no rows"),
    (torch.tensor([[1.0, float("nan")], [2.0, 3.0]]), "mean row is not finite"),
    (torch.tensor([[1.0, float("inf")], [2.0, 3.0]]), "mean row is not finite"),
    (torch.zeros(4), "2-D floating-point tensor (rows x width), got a 1-D"),
    (torch.zeros(2, 2, 2), "got a 3-D"),
], ids=["no-rows", "nan", "inf", "1-D", "3-D"])
def test_resize_refuses_a_table_without_a_finite_mean_row(table, said):
    """A 0-row or NaN table became a table of NaN rows; a 1-D one a (N, 1) table."""
    from trm_kaggle.errors import DataError

    with pytest.raises(DataError, match=re.escape(said)):
        resize_puzzle_embedding(table, 5)


def test_export_digest_names_a_fifo_instead_of_waiting_on_it(tmp_path):
    """`evaluate --report-dir` hung on an export whose weights file is a FIFO: the digest it records opened the
    file without the regular-file check every other reader of an export makes."""
    import os
    import subprocess
    import sys

    (tmp_path / "e").mkdir()
    os.mkfifo(tmp_path / "e" / "weights.safetensors")
    code = ("import sys\nfrom trm_kaggle.model import export_digest\nfrom trm_kaggle.errors import TRMError\n"
            "try:\n    export_digest(sys.argv[1])\nexcept TRMError as e:\n    print(e)\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "e")], capture_output=True, text=True,
                          timeout=30)
    assert "weights.safetensors: weights must be a regular file, not a pipe (FIFO)" in done.stdout, \
        (done.stdout, done.stderr)


def test_a_missing_export_folder_is_said_as_such(tmp_path):
    """`estimate --weights nonexist` and `load_inference_model("nonexist")` said "nonexist/config.json: config.json
    not found", as if the folder were there without its config."""
    from trm_kaggle.errors import TRMError
    from trm_kaggle.model.export import load_inference_model

    with pytest.raises(TRMError, match=r"nonexist: no such export folder"):
        load_inference_model(tmp_path / "nonexist")


@pytest.mark.parametrize("call", ["export_run(mean_embedding='yes')", "export_run(use_ema='no')",
                                  "load_newest_state(quarantine='no')"])
def test_a_flag_given_text_is_refused_naming_it(tmp_path, call):
    """`export_run(..., mean_embedding="yes")` exported the mean row alone and `load_newest_state(...,
    quarantine="no")` renamed damaged states: any truthy value was taken as yes."""
    from trm_kaggle.train import checkpoint as ckpt

    name, value = call.split("(", 1)[1].rstrip(")").split("=")
    args = (tmp_path / "run", tmp_path / "out") if call.startswith("export_run") else (tmp_path / "run",)
    with pytest.raises(ValueError, match=rf"^{name}={value}: expected True or False$"):
        getattr(ckpt, call.split("(")[0])(*args, **{name: value.strip("'")})
    assert not (tmp_path / "out").exists()


def test_weights_that_record_no_config_are_read_with_a_note_saying_config_json_is_unchecked(tmp_path, caplog):
    """Weights re-saved by safetensors' own `save_file` record no config: a config.json edited to other cycles or
    heads (no tensor shows them) then evaluated without a word, while docs/weights.md promised a refusal."""
    from safetensors.torch import save_file

    from trm_kaggle.model.export import check_export, unchecked_config_note

    export_inference(tmp_path / "exp", model_with_table(), arch=ARCH, seq_len=8, vocab_size=5)
    assert unchecked_config_note(tmp_path / "exp") is None
    check_export(tmp_path / "exp")
    assert "records no config" not in caplog.text
    _, tensors = read_export(tmp_path / "exp")
    save_file(tensors, str(tmp_path / "exp" / "weights.safetensors"))
    note = unchecked_config_note(tmp_path / "exp")
    assert "weights.safetensors records no config" in note and "unchecked" in note
    with caplog.at_level("WARNING"):
        check_export(tmp_path / "exp")
    assert "records no config" in caplog.text


@pytest.mark.parametrize("recorded", [True, False], ids=["recorded", "no-record"])
@pytest.mark.parametrize("field", ["halt_max_steps", "num_heads", "L_cycles", "hidden_size"])
def test_an_arch_field_missing_from_config_json_is_refused_not_filled_with_its_default(tmp_path, field, recorded):
    """ArchConfig's defaults filled a missing halt_max_steps, num_heads or L_cycles: without a recorded config the
    export ran 16 ACT steps instead of its 4; with one, the refusal blamed config.json for a value it never held."""
    from safetensors.torch import save_file

    export_inference(tmp_path / "exp", model_with_table(), arch=ARCH, seq_len=8, vocab_size=5)
    if not recorded:  # re-saved by another program: nothing to compare config.json with
        save_file(read_export(tmp_path / "exp")[1], str(tmp_path / "exp" / "weights.safetensors"))
    cfg = json.loads((tmp_path / "exp" / "config.json").read_text())
    del cfg["arch"][field]
    (tmp_path / "exp" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(TRMError, match=rf"config\.json: invalid export config: arch\.{field}: Field required") as e:
        load_inference_model(tmp_path / "exp")
    assert "\n" not in str(e.value) and "in the weights" not in str(e.value)


def test_an_export_older_than_an_arch_field_is_read_with_that_field_s_default(tmp_path):
    """The fields added after exports were first written (weights/arc2-cpu-tiny lacks them) are what older versions
    computed: their defaults, read without a word."""
    from trm_kaggle.model.export import LATER_ARCH_FIELDS

    export_inference(tmp_path / "exp", model_with_table(), arch=ARCH, seq_len=8, vocab_size=5)
    cfg = json.loads((tmp_path / "exp" / "config.json").read_text())
    for field in LATER_ARCH_FIELDS:
        del cfg["arch"][field]
    (tmp_path / "exp" / "config.json").write_text(json.dumps(cfg))
    config, _ = read_export(tmp_path / "exp")
    assert (config["arch"]["swiglu_norm"], config["arch"]["kernels"], config["arch"]["fp8"]) == (False, "torch", "off")
    from pathlib import Path

    from trm_kaggle.config import ArchConfig

    shipped = json.loads((Path(__file__).parents[1] / "weights/arc2-cpu-tiny/config.json").read_text())["arch"]
    assert set(ArchConfig.model_fields) - set(shipped) <= set(LATER_ARCH_FIELDS)


def test_the_exported_line_escapes_the_folder_typed_and_the_source_config_json_names(tmp_path):
    """`exported octl<ESC>[31mX<BEL>: ...` reached the terminal raw, while the error lines escape the same path."""
    from trm_kaggle.cli.train import _exported_line

    out = tmp_path / "e\x1b[31mX\x07"
    written = {}
    export_inference(out, model_with_table(), arch=ARCH, seq_len=8, vocab_size=5,
                     info={"source": "run\x1b[2J/state", "step": 3}, written=written)
    line = _exported_line(out, written, 0.5)
    assert "e\\x1b[31mX\\x07: step 3 of run\\x1b[2J/state, " in line
    assert not any(c in line for c in "\x1b\x07\n")


@pytest.mark.parametrize("umask", [0o077, 0o022, 0o000])
def test_every_file_of_an_export_has_the_mode_the_umask_leaves(tmp_path, monkeypatch, umask):
    """weights.safetensors was made 0644 whatever the umask: world-readable under 0077, where the rest was 0600."""
    from conftest import make_export

    monkeypatch.setattr("trm_kaggle.atomic._UMASK", umask)  # the process's umask, read once at import
    out = make_export(tmp_path / "export")
    modes = {p.name: p.stat().st_mode & 0o777 for p in out.iterdir() if p.is_file()}
    assert "weights.safetensors" in modes and modes == dict.fromkeys(modes, 0o666 & ~umask), modes


def test_a_run_whose_only_state_is_damaged_is_refused_in_export_s_words(tmp_path):
    """A truncated only state was refused with resume's words ("no good state to resume from; move them away to
    start afresh") in an export."""
    import io

    from trm_kaggle.train import checkpoint as ckpt

    buf = io.BytesIO()
    torch.save({"w": torch.zeros(1000)}, buf)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "state_step00000009.pt").write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    with pytest.raises(TRMError) as e:
        ckpt.export_run(tmp_path / "run", tmp_path / "e")
    assert str(e.value).endswith("(left in place: no good state to export)") and "resume" not in str(e.value)
    assert not (tmp_path / "e").exists()


def test_a_tensor_the_model_lacks_is_refused_from_the_header_before_any_tensor_is_read(tmp_path):
    """Every tensor was read before its name was checked: a file declaring a tensor of gigabytes beside the model's
    cost that memory, then ended in a checksum line (or an out-of-memory line blaming the limit)."""
    export_inference(tmp_path / "exp", model_with_table(), arch=ARCH, seq_len=8, vocab_size=5)
    w_path = tmp_path / "exp" / "weights.safetensors"
    raw = w_path.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header, data = json.loads(raw[8:8 + size]), raw[8 + size:]
    junk = 1 << 26  # 256 MiB of float32, never on disk: a sparse file
    header["junk"] = {"dtype": "F32", "shape": [junk], "data_offsets": [len(data), len(data) + 4 * junk]}
    text = json.dumps(header).encode()
    with open(w_path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + data)
        f.truncate(8 + len(text) + len(data) + 4 * junk)
    with pytest.raises(TRMError) as e:
        read_export(tmp_path / "exp")
    assert str(e.value) == (f"{w_path}: weights do not match the model config: keys this model does not have junk")


def _exporting(tmp_path, monkeypatch, meanwhile):
    """Two state files, a/ and b/, each read as a tiny train state; `meanwhile()` runs while the first is read."""
    from trm_kaggle.train import checkpoint as ckpt

    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "state_step00000005.pt").write_bytes(b"a train state")
    calls = []

    def load(path):
        calls.append(path)
        if len(calls) == 1:
            meanwhile()
        return {**train_state(model_with_table(), None), "step": 5}

    monkeypatch.setattr(ckpt, "load_train_state", load)
    return [str(tmp_path / name / "state_step00000005.pt") for name in ("a", "b")]


def test_two_exports_into_one_out_at_once_one_is_refused_and_the_other_stands(tmp_path, monkeypatch, capsys):
    """Two `export ... --out X` at once both exited 0, the first to finish silently replaced by the second."""
    from cli_helpers import one_error_line

    from trm_kaggle.cli import main

    out, other = tmp_path / "x", []
    a, b = _exporting(tmp_path, monkeypatch, lambda: other.append(main(["export", b, "--out", str(out)])))
    rc = main(["export", a, "--out", str(out)])
    assert other == [0]
    line = one_error_line(capsys, rc)
    assert line == (f"error: {out}: another command wrote this export while this one was built; that one stands and "
                    "this one is discarded (run the command again to replace it)")
    assert json.loads((out / "config.json").read_text())["info"]["source"] == b
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "x"]


def test_the_exported_line_describes_the_export_this_command_wrote(tmp_path, monkeypatch, capsys):
    """The success line read config.json back from the folder: one described another command's export."""
    import trm_kaggle.cli.train as T
    from trm_kaggle.cli import main

    out = tmp_path / "x"
    a, b = _exporting(tmp_path, monkeypatch, lambda: None)
    real = T._exported_line

    def replaced_first(*args, **kwargs):  # another command replaces the export the moment this one is done
        export_inference(out, model_with_table(), arch=ARCH, seq_len=8, vocab_size=5, mean_embedding=True,
                         info={"source": b, "step": 7})
        return real(*args, **kwargs)

    monkeypatch.setattr(T, "_exported_line", replaced_first)
    assert main(["export", a, "--out", str(out)]) == 0
    line = capsys.readouterr().out
    assert f"exported {out}: step 5 of {a}, " in line and "mean row" not in line and b not in line
