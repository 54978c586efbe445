"""export_inference / read_export / load_inference_model called from Python with arguments they cannot take: each is
refused before anything is written or read, in one error naming the argument."""

from __future__ import annotations

import pytest
import torch

from trm_kaggle.errors import TRMError
from trm_kaggle.model.export import (check_export, export_digest, export_inference, load_inference_model,
                                     load_model_for_dataset, read_export)
from trm_kaggle.model.trm import TinyRecursiveModel

from conftest import TINY_ARCH as ARCH

SEQ_LEN, VOCAB, IDS = 8, 5, 3


def tiny_model(**kwargs) -> TinyRecursiveModel:
    torch.manual_seed(0)
    return TinyRecursiveModel(ARCH, SEQ_LEN, VOCAB, IDS, **kwargs)


def export(out, model=None, **given):
    settings = {"arch": ARCH, "seq_len": SEQ_LEN, "vocab_size": VOCAB, **given}
    return export_inference(out, tiny_model() if model is None else model, **settings)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    return export(tmp_path_factory.mktemp("libexport") / "ok")


def test_a_model_on_the_meta_device_is_named_and_nothing_is_written(tmp_path):
    with torch.device("meta"):
        model = tiny_model()
    with pytest.raises(TRMError, match=r"not written: model: tensor \S+ is on the meta device: it holds no weights"):
        export(tmp_path / "meta", model)
    assert not (tmp_path / "meta").exists()


def test_an_arch_given_as_a_dict_is_a_type_error_naming_arch(tmp_path):
    with pytest.raises(TypeError, match=r"^arch: expected an ArchConfig \(ArchConfig.model_validate reads a dict\), "
                                        r"got dict"):
        export(tmp_path / "e", arch=ARCH.model_dump())
    assert not (tmp_path / "e").exists()


@pytest.mark.parametrize("flag", ["no", 1, None])
def test_mean_embedding_is_true_or_false_alone(tmp_path, flag):
    with pytest.raises(ValueError, match=r"^mean_embedding=.*: expected True or False"):
        export(tmp_path / "e", mean_embedding=flag)
    assert not (tmp_path / "e").exists()


def test_a_seq_len_other_than_the_models_names_both(tmp_path):
    """RoPE keeps no tensor per position: no shape shows the other length, and the export was written."""
    with pytest.raises(TRMError, match=r"not written: seq_len=6 given, but the model was built for seq_len 8"):
        export(tmp_path / "e", seq_len=6)
    assert not (tmp_path / "e").exists()


@pytest.mark.parametrize("out", [None, 5])
def test_an_out_dir_that_is_no_path_is_a_type_error_naming_it(out):
    with pytest.raises(TypeError, match=rf"^out_dir: expected an export folder's path .*got {type(out).__name__}"):
        export(out)


@pytest.mark.parametrize("path", [None, 5, b"x"])
def test_the_readers_name_a_path_argument_that_is_no_path(path):
    for call in (read_export, load_inference_model, check_export, export_digest):
        with pytest.raises(TypeError, match=rf"^path: expected an export folder's path .*got {type(path).__name__}"):
            call(path)
    with pytest.raises(TypeError, match=r"^weights: expected an export folder's path"):
        load_model_for_dataset(path, "no-such-dataset")  # named before the dataset is looked for


def test_a_meta_device_is_refused_when_loading(written):
    for device in ("meta", torch.device("meta")):
        with pytest.raises(TRMError, match=r"^device=.*meta.*: a meta device holds no data"):
            load_inference_model(written, device=device)
    model, _ = load_inference_model(written, device="cpu")  # and the export loads where data is held
    assert not any(t.is_meta for t in model.state_dict().values())


def test_good_arguments_still_write_an_export(tmp_path, written):
    config, _ = read_export(written)
    assert config["puzzle_embedding"] == "full" and config["seq_len"] == SEQ_LEN
    mean = export(tmp_path / "mean", mean_embedding=True)
    assert read_export(mean)[0]["puzzle_embedding"] == "mean"
