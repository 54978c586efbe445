"""An export's config.json is bound to its weights: the weights file records the architecture it was saved with
(and a checksum of its tensors), and a config.json that disagrees is refused naming what differs. The shipped
weights carry that record; exports without it (older ones) load as before."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from trm_kaggle.cli import main
from trm_kaggle.errors import TRMError
from trm_kaggle.model.digest import content_digest
from trm_kaggle.model.export import read_export

SHIPPED = Path(__file__).resolve().parents[1] / "weights" / "arc2-cpu-tiny"
# sha256 of the tensor bytes of the shipped weights as trained (before their file recorded its config): the
# re-written file must hold the very same bytes
SHIPPED_TENSOR_BYTES = "64ed3bffb0004feb5b9d03ac4989193f0495cccffcd07c4631412171999a053c"


def tensor_bytes(path: Path) -> bytes:
    raw = path.read_bytes()
    return raw[8 + int.from_bytes(raw[:8], "little"):]


def test_the_shipped_weights_record_their_config_and_checksum_and_kept_their_tensors():
    path = SHIPPED / "weights.safetensors"
    assert hashlib.sha256(tensor_bytes(path)).hexdigest() == SHIPPED_TENSOR_BYTES
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
    recorded = json.loads(meta["config"])
    config = json.loads((SHIPPED / "config.json").read_text())
    assert recorded["arch"]["num_heads"] == config["arch"]["num_heads"] == 4
    assert recorded["arch"]["H_cycles"] == config["arch"]["H_cycles"] == 2
    assert (recorded["seq_len"], recorded["vocab_size"]) == (config["seq_len"], config["vocab_size"])
    assert meta["sha256"] == content_digest(load_file(path))
    read_export(SHIPPED)


EDITS = [
    ("num_heads", 2, "num_heads: 4 in the weights, 2 in config.json"),
    ("num_heads", 8, "num_heads: 4 in the weights, 8 in config.json"),
    ("H_cycles", 3, "H_cycles: 2 in the weights, 3 in config.json"),
    ("L_cycles", 4, "L_cycles: 2 in the weights, 4 in config.json"),
    ("halt_max_steps", 16, "halt_max_steps: 4 in the weights, 16 in config.json"),
    ("pos_encodings", "learned", "pos_encodings: 'rope' in the weights, 'learned' in config.json"),
    ("rope_theta", 500.0, "rope_theta: 10000.0 in the weights, 500.0 in config.json"),
    # a field added after the shipped weights were written: their record lacks it, which means its default
    ("swiglu_norm", True, "swiglu_norm: False in the weights, True in config.json"),
]


def edited_copy(tmp_path: Path, key: str, value) -> Path:
    out = tmp_path / "edited"
    shutil.copytree(SHIPPED, out)
    config = json.loads((out / "config.json").read_text())
    config["arch"][key] = value
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out


@pytest.mark.parametrize("key, value, words", EDITS)
def test_an_edited_config_of_the_shipped_weights_is_refused_naming_the_difference(tmp_path, capsys, key, value,
                                                                                  words):
    edited = edited_copy(tmp_path, key, value)
    with pytest.raises(TRMError, match="differs from the config the weights were saved with"):
        read_export(edited)
    assert main(["bundle", str(tmp_path / "bundle"), "--weights", str(edited), "--no-download"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and words in err[0], err
    assert not (tmp_path / "bundle").exists()


def test_submit_with_an_edited_config_says_what_differs_and_keeps_the_fallback(tmp_path, capsys):
    edited = edited_copy(tmp_path, "num_heads", 2)
    challenges = tmp_path / "c.json"
    challenges.write_text(json.dumps({"00000001": {"train": [{"input": [[1, 2]], "output": [[2, 1]]}],
                                                   "test": [{"input": [[3, 4]]}]}}))
    main(["submit", "--challenges", str(challenges), "--weights", str(edited), "--output", str(tmp_path / "s.json"),
          "--work-dir", str(tmp_path / "work"), "--num-aug", "1", "--finetune-steps", "0", "--device", "cpu",
          "--no-progress"])
    out, err = capsys.readouterr()
    assert "num_heads: 4 in the weights, 2 in config.json" in err and "0 answered by the model" in out
    assert json.loads((tmp_path / "s.json").read_text())["00000001"][0]["attempt_1"] == [[3, 4]]


def test_exports_without_the_record_load_as_before(tmp_path):
    """An export written before the weights recorded their config (or by another tool): nothing to compare, so
    it loads, and so does an edit of its config.json (the behaviour it always had)."""
    old = tmp_path / "old"
    shutil.copytree(SHIPPED, old)
    save_file(load_file(old / "weights.safetensors"), str(old / "weights.safetensors"),
              metadata={"format": "trm_kaggle.inference"})
    config, tensors = read_export(old)
    assert config["arch"]["num_heads"] == 4 and len(tensors) == 15
    edited = json.loads((old / "config.json").read_text())
    edited["arch"]["H_cycles"] = 3
    (old / "config.json").write_text(json.dumps(edited))
    assert read_export(old)[0]["arch"]["H_cycles"] == 3


def test_an_export_records_its_config_and_a_reexport_is_bound_again(tmp_path, capsys):
    """`trm-kaggle export` of a run writes the record; the test-time recursion flags stay the way to change
    H_cycles without new weights."""
    from integrity_helpers import build_sudoku4, train_args

    data = build_sudoku4(tmp_path / "sudoku4")
    assert main(train_args(data, tmp_path / "run", "max_steps=1")) == 0
    assert main(["export", str(tmp_path / "run"), "--out", str(tmp_path / "w")]) == 0
    # what it writes is what its help says (it promised a model card, which only the Kaggle bundle writes)
    from trm_kaggle.cli import build_parser

    help_text = " ".join(next(a for a in build_parser()._actions if a.dest == "command").choices["export"]
                         .format_help().split())
    written = sorted(p.name for p in (tmp_path / "w").iterdir() if not p.name.startswith("."))
    assert written == ["config.json", "weights.safetensors"], written
    assert "(weights.safetensors + config.json)" in help_text and "+ model card" not in help_text
    with safe_open(str(tmp_path / "w" / "weights.safetensors"), framework="pt") as f:
        assert json.loads(f.metadata()["config"])["arch"]["H_cycles"] == 2
    config = json.loads((tmp_path / "w" / "config.json").read_text())
    config["arch"]["H_cycles"] = 5
    (tmp_path / "w" / "config.json").write_text(json.dumps(config))
    with pytest.raises(TRMError, match="H_cycles: 2 in the weights, 5 in config.json"):
        read_export(tmp_path / "w")


def test_no_ema_of_a_run_without_an_average_is_refused_and_of_one_with_it_exports_the_live_weights(tmp_path,
                                                                                                  capsys):
    """`export --no-ema` chooses the live weights over the EMA average: of a run that kept none it changed
    nothing (the export was the plain one), so it is refused, before anything is written."""
    import torch
    from integrity_helpers import build_sudoku4, train_args

    data = build_sudoku4(tmp_path / "sudoku4")
    assert main(train_args(data, tmp_path / "plain", "max_steps=2", "ema=false")) == 0
    assert main(["export", str(tmp_path / "plain"), "--out", str(tmp_path / "p"), "--no-ema"]) == 2
    assert "--no-ema: " in capsys.readouterr().err and not (tmp_path / "p").exists()
    assert main(train_args(data, tmp_path / "avg", "max_steps=2", "ema=true", "ema_rate=0.5")) == 0
    assert main(["export", str(tmp_path / "avg"), "--out", str(tmp_path / "live"), "--no-ema"]) == 0
    assert main(["export", str(tmp_path / "avg"), "--out", str(tmp_path / "ema")]) == 0
    live, ema = (load_file(tmp_path / name / "weights.safetensors") for name in ("live", "ema"))
    assert any(not torch.equal(live[k], ema[k]) for k in live)


def resigned_copy(tmp_path: Path, name: str, edit) -> Path:
    """A copy of the shipped export whose tensors `edit(tensors)` changed and whose checksum was written again, as
    a writer with a bug would leave it: the checksum holds, the tensors are not what a run saves."""
    edited = tmp_path / name
    shutil.copytree(SHIPPED, edited)
    path = edited / "weights.safetensors"
    with safe_open(str(path), framework="pt") as f:
        meta = dict(f.metadata())
    tensors = load_file(path)
    edit(tensors)
    meta["sha256"] = content_digest(tensors)
    save_file(tensors, str(path), metadata=meta)
    return edited


def test_an_export_with_an_integer_tensor_signed_again_is_refused_when_loaded(tmp_path, capsys):
    """No writer saves integer weights; loaded, they were copied into the model's floats and evaluated silently
    (another accuracy). Now the one load check names them."""
    import torch

    from trm_kaggle.model import load_inference_model

    edited = resigned_copy(tmp_path, "int", lambda t: t.update({"embed_tokens.weight":
                                                                 t["embed_tokens.weight"].to(torch.int64)}))
    with pytest.raises(TRMError, match="tensors that are not floating point: embed_tokens.weight torch.int64"):
        load_inference_model(edited)


def test_an_export_with_a_float64_tensor_past_float32s_range_is_refused(tmp_path):
    """1e300 in a float64 tensor passed the finiteness check and loaded as inf in the model's float32."""
    edited = resigned_copy(tmp_path, "wide", lambda t: t.update({"lm_head.weight":
                                                                  t["lm_head.weight"].double() + 1e300}))
    with pytest.raises(TRMError, match="tensor lm_head.weight is torch.float64; an export holds float32"):
        read_export(edited)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float8_e4m3fn"])  # float8: no isfinite in torch
def test_an_export_with_a_half_precision_tensor_is_refused(tmp_path, dtype):
    """Every export is written in float32; a half-precision tensor (no export of ours) was cast without a word."""
    import torch

    edited = resigned_copy(tmp_path, dtype, lambda t: t.update({"lm_head.weight":
                                                                 t["lm_head.weight"].to(getattr(torch, dtype))}))
    with pytest.raises(TRMError, match=f"tensor lm_head.weight is torch.{dtype}; an export holds float32"):
        read_export(edited)


def test_an_export_whose_puzzle_table_has_no_rows_is_refused_not_read_as_nan(tmp_path):
    """Resized for the puzzles, a table of 0 rows became their mean, NaN: evaluate scored 0.0000 with exit 0."""
    from trm_kaggle.errors import DamagedFile

    edited = resigned_copy(tmp_path, "empty", lambda t: t.update({"puzzle_emb.weights":
                                                                   t["puzzle_emb.weights"][:0]}))
    with pytest.raises(DamagedFile, match="tensor puzzle_emb.weights has no rows"):
        read_export(edited)


def test_weights_whose_metadata_names_another_format_are_refused(tmp_path):
    """Another program's safetensors file beside our config.json was read as ours without a word."""
    from trm_kaggle.model.export import read_export

    edited = resigned_copy(tmp_path, "foreign", lambda t: None)
    path = edited / "weights.safetensors"
    with safe_open(str(path), framework="pt") as f:
        meta = dict(f.metadata())
    save_file(load_file(path), str(path), metadata={**meta, "format": "something.else"})
    with pytest.raises(TRMError, match="its metadata says format 'something.else', not 'trm_kaggle.inference'"):
        read_export(edited)
    read_export(resigned_copy(tmp_path, "ours", lambda t: None))  # the shipped tag is read as before
    save_file(load_file(path), str(path), metadata={**meta, "format": "pt"})  # safetensors' own tag for torch
    read_export(edited)


@pytest.mark.parametrize("name", ["config.json", "weights.safetensors"])
def test_an_export_named_by_one_of_its_files_is_said_so(tmp_path, capsys, name):
    """`estimate --weights exp/config.json` named `exp/config.json/config.json` as not found."""
    given = SHIPPED / name
    with pytest.raises(TRMError, match=f"^{given}: a file, not an export folder"):
        read_export(given)
    assert main(["estimate", "--weights", str(given)]) == 2
    err = capsys.readouterr().err
    assert f"{given}: a file, not an export folder" in err and f"{name}/config.json" not in err, err
