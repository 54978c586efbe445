"""Upstream checkpoints: key mapping both ways, safe loading, clear errors, all_config.yaml."""

import re

import pytest
import torch

from trm_kaggle.config import ArchConfig
from trm_kaggle.errors import TRMError
from trm_kaggle.model import TinyRecursiveModel
from trm_kaggle.model.upstream import (
    arch_config_from_upstream_yaml,
    from_upstream_state_dict,
    load_upstream_checkpoint,
    load_upstream_state_dict,
    read_all_config,
    resize_puzzle_embedding,
    to_upstream_state_dict,
)

SEQ, VOCAB, IDS = 10, 8, 5


def tiny(seed, **kw):
    torch.manual_seed(seed)
    base = dict(hidden_size=32, num_heads=4, expansion=2, H_cycles=2, L_cycles=2, L_layers=2, puzzle_emb_len=2)
    base.update(kw)
    model = TinyRecursiveModel(ArchConfig(**base), SEQ, VOCAB, IDS)
    with torch.no_grad():
        model.puzzle_emb.weights.normal_()
        model.q_head.weight.normal_(std=0.1)
    return model.eval()


def batch():
    g = torch.Generator().manual_seed(0)
    return {"inputs": torch.randint(0, VOCAB, (3, SEQ), generator=g),
            "labels": torch.randint(0, VOCAB, (3, SEQ), generator=g),
            "puzzle_identifiers": torch.tensor([0, 4, 2], dtype=torch.int32)}


def logits(model):
    b = batch()
    _, out = model(model.initial_carry(b), b)
    return out["logits"], out["q_halt_logits"]


def test_export_has_upstream_key_layout():
    sd = to_upstream_state_dict(tiny(0, pos_encodings="learned"), compiled=True)
    p = "_orig_mod.model.inner."
    assert all(k.startswith(p) for k in sd)
    names = {k[len(p):]: v for k, v in sd.items()}
    assert names["L_level.layers.1.self_attn.qkv_proj.weight"].shape == (96, 32)
    assert names["L_level.layers.0.mlp.gate_up_proj.weight"].shape == (512, 32)
    assert names["L_level.layers.0.mlp.down_proj.weight"].shape == (32, 256)
    assert names["embed_tokens.embedding_weight"].shape == (VOCAB, 32)
    assert names["embed_pos.embedding_weight"].shape == (SEQ + 2, 32)
    assert names["puzzle_emb.weights"].shape == (IDS, 32)
    assert names["H_init"].dtype == torch.bfloat16 and names["lm_head.weight"].dtype == torch.float32
    assert set(names) >= {"L_init", "q_head.weight", "q_head.bias", "lm_head.weight"}
    mlp_t = to_upstream_state_dict(tiny(0, mlp_t=True, pos_encodings="none"), compiled=False)
    assert "model.inner.L_level.layers.0.mlp_t.gate_up_proj.weight" in mlp_t


def test_bf16_compiled_checkpoint_round_trip(tmp_path):
    src = tiny(0)
    path = tmp_path / "step_123"
    torch.save(to_upstream_state_dict(src, compiled=True, dtype=torch.bfloat16), path)

    dst = tiny(1)
    assert not torch.allclose(logits(dst)[0], logits(src)[0])
    load_upstream_checkpoint(dst, path)
    assert all(v.dtype == torch.float32 for v in dst.state_dict().values())

    # Exact against the source with its weights rounded to bf16 ...
    rounded = tiny(2)
    rounded.load_state_dict({k: v.bfloat16().float() for k, v in src.state_dict().items()})
    torch.testing.assert_close(logits(dst)[0], logits(rounded)[0], rtol=1e-5, atol=1e-5)
    # ... and close to the float32 original.
    ours, ref = logits(dst)[0], logits(src)[0]
    assert (ours - ref).abs().max() <= 0.05 * ref.abs().max()


def test_float32_uncompiled_round_trip_is_exact():
    src = tiny(0, pos_encodings="learned")
    dst = tiny(1, pos_encodings="learned")
    load_upstream_state_dict(dst, to_upstream_state_dict(src, compiled=False, init_dtype=None))
    for a, b in zip(logits(src), logits(dst)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_truncated_file_gives_trm_error(tmp_path):
    path = tmp_path / "step_7"
    torch.save(to_upstream_state_dict(tiny(0)), path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TRMError, match="step_7.*not a readable PyTorch checkpoint"):
        load_upstream_checkpoint(tiny(1), path)


def test_foreign_and_missing_files_give_trm_error(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(TRMError, match="notes.txt"):
        load_upstream_checkpoint(tiny(1), text)
    with pytest.raises(TRMError, match="not found"):
        load_upstream_checkpoint(tiny(1), tmp_path / "nope")
    tensor_file = tmp_path / "tensor.pt"
    torch.save(torch.zeros(3), tensor_file)
    with pytest.raises(TRMError, match="expected a state dict"):
        load_upstream_checkpoint(tiny(1), tensor_file)


def test_missing_key_gives_trm_error_naming_it(tmp_path):
    sd = to_upstream_state_dict(tiny(0))
    del sd["_orig_mod.model.inner.L_level.layers.1.mlp.down_proj.weight"]
    path = tmp_path / "step_1"
    torch.save(sd, path)
    with pytest.raises(TRMError, match=r"step_1.*missing keys L_level\.layers\.1\.mlp\.down_proj\.weight"):
        load_upstream_checkpoint(tiny(1), path)


def test_an_arch_value_out_of_bounds_is_one_line():
    """`hidden_size: -3` put pydantic's whole text (several lines and its URL) into the one error line."""
    from trm_kaggle.model.upstream import arch_config_from_upstream_yaml

    with pytest.raises(TRMError) as caught:
        arch_config_from_upstream_yaml({"arch": {"hidden_size": -3}})
    assert "\n" not in str(caught.value) and "hidden_size: " in str(caught.value) and "pydantic" not in str(caught.value)


def test_an_arch_section_that_is_no_mapping_is_said_as_it_is():
    """`arch: [1, 2]` or `arch: trm` was refused as "no `arch:` section", though the file has one."""
    from trm_kaggle.model.upstream import arch_config_from_upstream_yaml

    for value, kind in (([1, 2], "list"), ("trm", "str"), (None, "empty")):
        with pytest.raises(TRMError, match=f"its `arch:` section is {kind}, not a mapping of settings"):
            arch_config_from_upstream_yaml({"arch": value})
    with pytest.raises(TRMError, match="no `arch:` section"):
        arch_config_from_upstream_yaml([1])
    # a whole all_config.yaml without its `arch:` is read as the section itself: the missing section is named,
    # not only "arch fields this package does not know: data_paths"
    with pytest.raises(TRMError, match=r"no `arch:` section \(read as one itself, it holds arch fields this package "
                                       r"does not know: data_paths, lr\)"):
        arch_config_from_upstream_yaml({"data_paths": ["d"], "lr": 1e-4, "hidden_size": 64})


def test_one_weight_given_twice_is_refused_not_overwritten():
    """With and without `_orig_mod.`, other values: the later one replaced the first without a word."""
    sd = to_upstream_state_dict(tiny(0))
    key = "_orig_mod.model.inner.lm_head.weight"
    sd[key[len("_orig_mod."):]] = torch.zeros_like(sd[key])
    with pytest.raises(TRMError, match="the weight lm_head.weight is given twice"):
        from_upstream_state_dict(sd)


def test_foreign_keys_and_wrong_shapes_give_trm_error():
    sd = to_upstream_state_dict(tiny(0))
    sd["_orig_mod.model.inner.H_level.layers.0.self_attn.qkv_proj.weight"] = torch.zeros(3)  # an HRM checkpoint
    with pytest.raises(TRMError, match="unexpected keys .*H_level"):
        from_upstream_state_dict(sd)
    wide = to_upstream_state_dict(tiny(0, hidden_size=64, num_heads=4))
    with pytest.raises(TRMError, match="shapes do not match"):
        load_upstream_state_dict(tiny(1), wide)
    mlp_t = to_upstream_state_dict(tiny(0, mlp_t=True, pos_encodings="none"))
    with pytest.raises(TRMError, match="do not match the model config"):
        load_upstream_state_dict(tiny(1), mlp_t)


def test_puzzle_table_resized_to_mean_of_saved_rows():
    src = tiny(0)
    sd = to_upstream_state_dict(src, compiled=False)
    saved = sd["model.inner.puzzle_emb.weights"][:3].clone()
    sd["model.inner.puzzle_emb.weights"] = saved  # a checkpoint trained with 3 identifiers
    dst = tiny(1)
    load_upstream_state_dict(dst, sd)
    table = dst.puzzle_emb.weights
    assert table.shape == (IDS, 32)
    torch.testing.assert_close(table, saved.mean(0, keepdim=True).expand(IDS, -1))
    assert resize_puzzle_embedding(saved, 3) is saved


UPSTREAM_YAML = {
    "arch": {
        "name": "recursive_reasoning.trm@TinyRecursiveReasoningModel_ACTV1",
        "loss": {"name": "losses@ACTLossHead", "loss_type": "softmax_cross_entropy"},
        "halt_exploration_prob": 0.1, "halt_max_steps": 16, "H_cycles": 3, "L_cycles": 4,
        "H_layers": 0, "L_layers": 2, "hidden_size": 512, "num_heads": 8, "expansion": 4,
        "puzzle_emb_ndim": 512, "pos_encodings": "rope", "forward_dtype": "bfloat16",
        "mlp_t": False, "puzzle_emb_len": 16, "no_ACT_continue": True,
    },
    "data_paths": ["data/arc2concept-aug-1000"], "global_batch_size": 768, "lr": 1e-4,
}


def test_arch_config_from_upstream_yaml(tmp_path):
    arch = arch_config_from_upstream_yaml(UPSTREAM_YAML)
    assert arch.L_cycles == 4 and arch.H_cycles == 3 and arch.hidden_size == 512
    assert arch.loss_type == "softmax_cross_entropy"
    assert arch.forward_dtype == "auto"  # bf16 on CUDA, on CPUs only where measured fast
    assert arch.emb_ndim == 512 and arch.puzzle_emb_len == 16 and arch.no_ACT_continue
    assert arch_config_from_upstream_yaml(UPSTREAM_YAML, keep_forward_dtype=True).forward_dtype == "bfloat16"
    assert arch_config_from_upstream_yaml(UPSTREAM_YAML["arch"]).L_cycles == 4  # the section alone

    import yaml
    (tmp_path / "all_config.yaml").write_text(yaml.safe_dump(UPSTREAM_YAML))
    assert arch_config_from_upstream_yaml(read_all_config(tmp_path)) == arch


def test_arch_config_from_upstream_yaml_errors():
    odd = {"arch": dict(UPSTREAM_YAML["arch"], H_deep=3)}
    with pytest.raises(TRMError, match="H_deep"):
        arch_config_from_upstream_yaml(odd)
    assert arch_config_from_upstream_yaml(odd, strict=False).hidden_size == 512
    with pytest.raises(TRMError, match="invalid arch"):
        arch_config_from_upstream_yaml({"arch": dict(UPSTREAM_YAML["arch"], pos_encodings="alibi")})
    with pytest.raises(TRMError, match="all_config.yaml"):
        read_all_config("/nonexistent/dir/all_config.yaml")


def test_import_upstream_names_the_config_file_it_was_given(tmp_path, capsys):
    """`import-upstream --config cfg/run.yaml` whose arch section is refused: the error named the all_config.yaml
    beside the checkpoint (a good file) instead of the one given."""
    import yaml

    from trm_kaggle.cli import main

    up, cfg = tmp_path / "up", tmp_path / "cfg"
    up.mkdir()
    cfg.mkdir()
    arch = {**UPSTREAM_YAML["arch"], "hidden_size": 32, "num_heads": 4, "puzzle_emb_ndim": 32, "puzzle_emb_len": 2}
    torch.save(to_upstream_state_dict(tiny(0), compiled=True), up / "step_10")
    (up / "all_config.yaml").write_text(yaml.safe_dump({"arch": arch}))
    for name, bad in (("unknown.yaml", {"bogus_key": 5}), ("nan.yaml", {"rope_theta": float("nan")})):
        (cfg / name).write_text(yaml.safe_dump({"arch": {**arch, **bad}}))
        rc = main(["import-upstream", str(up / "step_10"), "--config", str(cfg / name), "--out",
                   str(tmp_path / "e"), "--seq-len", str(SEQ)])
        err = capsys.readouterr().err
        assert rc == 2 and err.startswith(f"error: {cfg / name}: "), err
        assert "all_config.yaml" not in err and not (tmp_path / "e").exists()


@pytest.mark.parametrize("seq_len", [float("nan"), 2**63, 0, 1.5, True])
def test_import_upstreams_sequence_length_is_checked_before_the_model_is_built(tmp_path, seq_len):
    """`import_upstream(seq_len=nan)` failed inside torch ("unsupported range: 0 -> nan"), 2**63 as "an int that
    cannot be represented as a SymInt": the library's count is checked where it is given, as the CLI's is."""
    from trm_kaggle.model import import_upstream

    torch.save(to_upstream_state_dict(tiny(0), compiled=True), tmp_path / "step_10")
    with pytest.raises(ValueError, match=r"^seq_len=.*: expected a whole number from 1 to 1,048,576$"):
        import_upstream(tmp_path / "step_10", tmp_path / "e", seq_len=seq_len)
    assert not (tmp_path / "e").exists()


@pytest.mark.parametrize("args, said", [
    ((5, "e"), r"^checkpoint: expected an upstream step_<N> file's path .*got int$"),
    ((None, "e"), r"^checkpoint: expected .*got NoneType$"),
    (("step_10", "e", 5), r"^config: expected the run's all_config.yaml path .* or None, got int$"),
    (("step_10", 5), r"^out: expected an export folder's path .*got int$"),
])
def test_import_upstream_names_a_path_argument_of_the_wrong_type(tmp_path, monkeypatch, args, said):
    """5 as the checkpoint or the config was pathlib's "expected str, bytes or os.PathLike object", naming neither."""
    from trm_kaggle.model import import_upstream

    monkeypatch.chdir(tmp_path)
    torch.save(to_upstream_state_dict(tiny(0), compiled=True), tmp_path / "step_10")
    with pytest.raises(TypeError, match=said):
        import_upstream(*args, seq_len=SEQ)
    assert not (tmp_path / "e").exists()


def test_import_upstream_refuses_an_empty_checkpoint_or_config_name(tmp_path):
    """'' was the current folder ("checkpoint file not found (it is a directory ...)"), an empty config the
    all_config.yaml beside the checkpoint."""
    from trm_kaggle.model import import_upstream

    with pytest.raises(TRMError, match=r"^checkpoint is empty"):
        import_upstream("", tmp_path / "e")
    with pytest.raises(TRMError, match=r"^config is empty"):
        import_upstream(tmp_path / "step_10", tmp_path / "e", config="")


# ---------------------------------------------------------------------------
# A checkpoint's tensors are checked before any model is built
# ---------------------------------------------------------------------------

SMALL = dict(hidden_size=32, num_heads=2, L_layers=1)
EMBED = "_orig_mod.model.inner.embed_tokens.embedding_weight"
HEAD = "_orig_mod.model.inner.lm_head.weight"
TABLE = "_orig_mod.model.inner.puzzle_emb.weights"


def upstream_run(tmp_path, edit, **arch_changes):
    """tmp_path/up/step_1 (a tiny model's upstream state dict, passed through `edit`) and its all_config.yaml
    (the model's arch with `arch_changes`)."""
    import yaml

    arch = ArchConfig(**SMALL)
    torch.manual_seed(0)
    up = tmp_path / "up"
    up.mkdir()
    torch.save(edit(to_upstream_state_dict(TinyRecursiveModel(arch, 16, 6, 1))), up / "step_1")
    (up / "all_config.yaml").write_text(yaml.safe_dump({"arch": {**arch.model_dump(), **arch_changes}}))
    return up / "step_1"


def refused_import(tmp_path, capsys, step) -> str:
    from trm_kaggle.cli import main

    rc = main(["import-upstream", str(step), "--out", str(tmp_path / "out"), "--seq-len", "16"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith(f"error: {step}") and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()
    return err


@pytest.fixture
def no_large_model(monkeypatch):
    """A TinyRecursiveModel built off the meta device by import_upstream holds at most 100,000 numbers: a tiny file
    that declares a huge model is refused before its memory is taken (and never takes it here)."""
    from trm_kaggle.model import upstream

    real = upstream.TinyRecursiveModel

    def guarded(arch, seq_len, vocab_size, num_ids):
        if torch.empty(()).device.type != "meta":
            with torch.device("meta"):
                described = real(arch, seq_len, vocab_size, num_ids)
                size = sum(t.numel() for t in described.state_dict().values())  # the puzzle table is a buffer
            assert size <= 100_000, f"a model of {size:,} numbers was built for a checkpoint of kilobytes"
        return real(arch, seq_len, vocab_size, num_ids)

    monkeypatch.setattr(upstream, "TinyRecursiveModel", guarded)


@pytest.mark.parametrize("edit, said", [
    (lambda sd: {k: v for k, v in sd.items() if k != EMBED}, "missing keys embed_tokens.weight"),
    (lambda sd: {**sd, EMBED: torch.tensor(1.0)}, f"entry '{EMBED}' has 0 dimensions (); the model's "
                                                  "embed_tokens.weight has 2"),
], ids=["missing", "scalar"])
def test_import_upstream_names_a_missing_or_scalar_token_embedding(tmp_path, capsys, edit, said):
    """Without embed_tokens (or with a 0-D one) import-upstream was a KeyError / IndexError traceback."""
    assert said in refused_import(tmp_path, capsys, upstream_run(tmp_path, edit))


@pytest.mark.parametrize("layout, kind", [(lambda t: t.to("meta"), "meta"), (lambda t: t.to_sparse(), "sparse_coo")],
                         ids=["meta", "sparse"])
def test_import_upstream_refuses_a_tensor_without_plain_data_in_one_line(tmp_path, capsys, layout, kind):
    """A meta or sparse lm_head was torch's traceback from load_state_dict ("Cannot copy out of meta tensor")."""
    step = upstream_run(tmp_path, lambda sd: {**sd, HEAD: layout(sd[HEAD])})
    assert f"entry '{HEAD}' holds a {kind} tensor (no plain data to load)" in refused_import(tmp_path, capsys, step)


@pytest.mark.parametrize("entry, layout, kind", [
    (HEAD, lambda t: t.to_sparse(), "sparse_coo"),
    ("_orig_mod.model.inner.H_init", lambda t: t.to_sparse(), "sparse_coo"),
    (HEAD, lambda t: t.to_sparse_csr(), "sparse_csr"),
    (HEAD, lambda t: t.to("meta"), "meta"),
], ids=["coo", "coo-H_init", "csr", "meta"])
def test_load_checkpoint_refuses_a_tensor_without_plain_data_as_import_upstream_does(tmp_path, capsys, entry,
                                                                                     layout, kind):
    """`train load_checkpoint=<step file>` holding a sparse or meta tensor was torch's traceback from the NaN check
    (NotImplementedError 'aten::ne.Scalar' ... 'SparseCPU', 'unsupported tensor layout: SparseCsr', 'Tensor.item()
    cannot be called on meta tensors'): it is import-upstream's line for the very same file."""
    from trm_kaggle.train.state import load_initial_weights

    step = upstream_run(tmp_path, lambda sd: {**sd, entry: layout(sd[entry])})
    said = f"{step}: not a usable checkpoint: entry {entry!r} holds a {kind} tensor (no plain data to load)"
    with pytest.raises(TRMError) as refused:
        load_initial_weights(TinyRecursiveModel(ArchConfig(**SMALL), 16, 6, 1), str(step))
    assert str(refused.value) == said
    assert refused_import(tmp_path, capsys, step) == f"error: {said}\n"


@pytest.mark.parametrize("layout, kind", [(lambda t: t.to_sparse(), "sparse_coo"),
                                          (lambda t: t.to_sparse_csr(), "sparse_csr"),
                                          (lambda t: t.to("meta"), "meta")], ids=["coo", "csr", "meta"])
def test_the_nan_check_names_a_tensor_without_plain_data_rather_than_failing_on_it(layout, kind):
    from trm_kaggle.model.finite import check_finite, first_nonfinite

    tensors = {"a": torch.ones(2, 2), "b": layout(torch.ones(2, 2))}
    assert first_nonfinite(tensors) is None  # no values of its own to count
    with pytest.raises(TRMError, match=re.escape(f"f: entry 'b' holds a {kind} tensor (no plain data to load)")):
        check_finite(tensors, "f")


@pytest.mark.parametrize("edit, arch, said", [
    (lambda sd: {**sd, EMBED: sd[EMBED][:1].expand(2**27, -1), HEAD: sd[HEAD][:1].expand(2**27, -1)}, {},
     "embed_tokens.weight holds 134,217,728 token rows; a vocabulary has 2 to 1,048,576"),
    (lambda sd: {**sd, TABLE: sd[TABLE][:1].expand(2**25, -1)}, {},
     f"entry '{TABLE}' holds 33,554,432 puzzle-embedding rows; a table holds 1 to 16,777,216"),
    (lambda sd: sd, dict(hidden_size=16384, L_layers=4, expansion=8.0),
     "weights do not match the model config: missing keys layers.1."),
], ids=["vocab-2**27", "puzzles-2**25", "arch-100GB"])
def test_import_upstream_checks_declared_sizes_before_building_the_model(tmp_path, capsys, no_large_model, edit,
                                                                         arch, said):
    """Stride-0 tensors (a file of kilobytes declaring 2**27 tokens or 2**25 puzzles), or an all_config.yaml of a
    ~100 GB model beside a small checkpoint: the model was built first, allocating gigabytes (a traceback)."""
    step = upstream_run(tmp_path, edit, **arch)
    assert step.stat().st_size < 200_000
    assert said in refused_import(tmp_path, capsys, step)


def test_import_upstream_blames_an_empty_puzzle_table_on_the_checkpoint(tmp_path, capsys):
    """0 rows were refused as the output's config ("out: not written, its config.json would be refused")."""
    err = refused_import(tmp_path, capsys, upstream_run(tmp_path, lambda sd: {**sd, TABLE: sd[TABLE][:0]}))
    assert f"entry '{TABLE}', the puzzle-embedding table, has no rows" in err and "config.json" not in err


def test_a_dataset_of_another_vocabulary_gives_no_sequence_length(tmp_path):
    """all_config.yaml's data_paths naming a dataset of 6 tokens beside an 8-token checkpoint: its sequence length
    was taken without a word (a wrong data_paths, a model imported at the wrong length)."""
    import yaml

    from integrity_helpers import build_sudoku4
    from trm_kaggle.data import load_metadata
    from trm_kaggle.model import import_upstream

    data = build_sudoku4(tmp_path / "sudoku4")
    assert load_metadata(data, "train").vocab_size != VOCAB
    arch = {**UPSTREAM_YAML["arch"], "hidden_size": 32, "num_heads": 4, "expansion": 2, "H_cycles": 2,
            "L_cycles": 2, "L_layers": 2, "puzzle_emb_ndim": 32, "puzzle_emb_len": 2}
    torch.save(to_upstream_state_dict(tiny(0), compiled=True), tmp_path / "step_10")
    (tmp_path / "all_config.yaml").write_text(yaml.safe_dump({"arch": arch, "data_paths": [str(data)]}))
    with pytest.raises(TRMError, match="not the dataset the checkpoint was trained on.*pass --seq-len"):
        import_upstream(tmp_path / "step_10", tmp_path / "e")
    assert not (tmp_path / "e").exists()
    import_upstream(tmp_path / "step_10", tmp_path / "e", seq_len=SEQ)  # the length given: imported


def _one_value(sd, value, dtype):
    head = sd[HEAD].to(dtype).clone()
    head.view(-1)[0] = value
    return {**sd, HEAD: head}


@pytest.mark.parametrize("value, dtype, said", [
    (1e300, torch.float64, "is torch.float64 and holds 1 value past float32's range"),
    (float("nan"), torch.float32, "holds 1 non-finite value"),
    (float("inf"), torch.bfloat16, "holds 1 non-finite value"),
], ids=["float64-huge", "nan", "bf16-inf"])
def test_import_upstream_blames_a_number_on_the_checkpoint_that_holds_it(tmp_path, capsys, value, dtype, said):
    """A NaN in the checkpoint, or a float64 1e300 (inf once cast to float32), was blamed on the export being written
    (`OUT/weights.safetensors (not written)`): the checkpoint holding it was never named."""
    step = upstream_run(tmp_path, lambda sd: _one_value(sd, value, dtype))
    err = refused_import(tmp_path, capsys, step)
    assert "tensor lm_head.weight " in err and said in err and "not written" not in err, err


@pytest.mark.parametrize("where", ["model.inner.lm_head.weight", "model.inner.puzzle_emb.weights"])
def test_a_step_file_holding_nan_given_as_load_checkpoint_is_refused_naming_it(tmp_path, where):
    """`train load_checkpoint=<step file>` with a NaN in it trained 20 non-finite steps, then blamed lr, naming no
    file; with an inf in its puzzle table it was "table: the puzzle-embedding table's mean row is not finite".
    The file is refused as import-upstream refuses it: its path and the tensor."""
    from trm_kaggle.model import load_upstream_checkpoint

    sd = to_upstream_state_dict(tiny(0), compiled=False)
    sd[where] = sd[where].clone()
    sd[where].view(-1)[0] = float("nan")
    path = tmp_path / "step_9"
    torch.save(sd, path)
    with pytest.raises(TRMError, match=re.escape(f"{path}: tensor {where} holds 1 non-finite value (NaN or inf)")):
        load_upstream_checkpoint(tiny(1), path)


def test_import_upstream_says_the_sequence_length_it_chose(tmp_path, capsys):
    """Without --seq-len the length came from the vocabulary's task (900 for a vocabulary of 6) without a word; a
    wrong one was found only when the export met a dataset."""
    import yaml

    from trm_kaggle.cli import main

    up = tmp_path / "up"
    up.mkdir()
    arch = {**UPSTREAM_YAML["arch"], "hidden_size": 32, "num_heads": 4, "puzzle_emb_ndim": 32, "puzzle_emb_len": 2,
            "H_cycles": 2, "L_cycles": 2, "L_layers": 2, "expansion": 2, "loss": {"loss_type": "stablemax_cross_entropy"}}
    torch.save(to_upstream_state_dict(tiny(0), compiled=True), up / "step_10")
    (up / "all_config.yaml").write_text(yaml.safe_dump({"arch": arch}))
    assert main(["import-upstream", str(up / "step_10"), "--out", str(tmp_path / "a"), "--seq-len", str(SEQ)]) == 0
    assert f", sequence length {SEQ} in " in capsys.readouterr().out


def test_import_upstream_tells_the_files_kind_before_asking_for_its_config(tmp_path, capsys):
    """A train state of ours (any name) and a text file were both refused for the all_config.yaml missing beside
    them (for a bare file name: ./all_config.yaml); the state now points to `export`, the text file is named as
    no PyTorch checkpoint. An upstream step file without its yaml still gets the all_config.yaml line."""
    from trm_kaggle.cli import main
    from trm_kaggle.train.checkpoint import STATE_FORMAT

    state = tmp_path / "my run" / "kept.pt"
    state.parent.mkdir()
    torch.save({"format": STATE_FORMAT, "version": "0", "step": 3, "model": {}}, state)
    log = tmp_path / "pipe.log"
    log.write_text("[1/5] build and verify a dataset ...\n")
    torch.save(to_upstream_state_dict(tiny(0), compiled=True), tmp_path / "step_10")
    said = {}
    for path in (state, log, tmp_path / "step_10"):
        assert main(["import-upstream", str(path), "--out", str(tmp_path / "out")]) == 2
        said[path] = capsys.readouterr().err
        assert said[path].count("\n") == 1 and not (tmp_path / "out").exists(), said[path]
    assert said[state] == (f"error: {state}: a trm-kaggle train state, not an upstream checkpoint: `trm-kaggle export "
                           f"'{state}' --out DIR` makes an export\n")
    assert said[log].startswith(f"error: {log}: not a readable PyTorch checkpoint") and "all_config" not in said[log]
    assert said[tmp_path / "step_10"].startswith(f"error: {tmp_path / 'all_config.yaml'}: run config not found")


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_a_float8_checkpoint_is_refused_naming_the_tensor(tmp_path, capsys, dtype):
    """A float8 step file was imported (and taken by `train load_checkpoint=`) without a word: cast to float32
    without the scales its quantisation needs. import-upstream and load_checkpoint share the one tensor check."""
    from trm_kaggle.model.upstream import load_upstream_checkpoint

    step = upstream_run(tmp_path, lambda sd: {k: v.to(dtype) if v.is_floating_point() else v for k, v in sd.items()})
    err = refused_import(tmp_path, capsys, step)
    assert f"is {dtype}; upstream's weights are float32, bfloat16 or float16" in err
    with pytest.raises(TRMError, match=f"step_1: entry .* is {dtype}"):
        load_upstream_checkpoint(TinyRecursiveModel(ArchConfig(**SMALL), 16, 6, 1), step)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_the_float_types_upstream_writes_are_still_imported(tmp_path, dtype):
    from trm_kaggle.model import import_upstream

    step = upstream_run(tmp_path, lambda sd: {k: v.to(dtype) if v.is_floating_point() else v for k, v in sd.items()})
    import_upstream(step, tmp_path / "out", seq_len=16)
    assert (tmp_path / "out" / "weights.safetensors").is_file()


def test_arch_fields_missing_from_all_config_yaml_are_said_taken_from_the_defaults(tmp_path, caplog):
    """An all_config.yaml without num_heads and L_cycles was imported with the package's 8 and 6 (the run's were 2
    and 2, which no tensor shows) without a word."""
    import yaml

    from trm_kaggle.model import import_upstream

    step = upstream_run(tmp_path, lambda sd: sd)
    cfg = yaml.safe_load((step.parent / "all_config.yaml").read_text())
    del cfg["arch"]["num_heads"], cfg["arch"]["L_cycles"]
    (step.parent / "all_config.yaml").write_text(yaml.safe_dump(cfg))
    with caplog.at_level("WARNING"):
        import_upstream(step, tmp_path / "out", seq_len=16)
    said = [r.getMessage() for r in caplog.records if "defaults" in r.getMessage()]
    assert len(said) == 1 and "all_config.yaml: its arch section lacks num_heads, L_cycles" in said[0], said
    assert "(num_heads=8, L_cycles=6)" in said[0]
    caplog.clear()
    (tmp_path / "whole").mkdir()
    with caplog.at_level("WARNING"):  # a whole arch section: nothing to say
        import_upstream(upstream_run(tmp_path / "whole", lambda sd: sd), tmp_path / "out2", seq_len=16)
    assert "defaults" not in caplog.text


def test_import_upstream_s_success_line_escapes_the_paths_typed(tmp_path, capsys, monkeypatch):
    """`imported octl<ESC>[31mX<BEL>: ...` reached the terminal raw, while the error lines escape the same path."""
    from trm_kaggle.cli import main

    step = upstream_run(tmp_path, lambda sd: sd)
    monkeypatch.chdir(tmp_path)
    assert main(["import-upstream", str(step), "--out", "o\x1b[31mX\x07", "--seq-len", "16"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("imported o\\x1b[31mX\\x07: ") and "\x1b" not in out and "\x07" not in out


def test_a_loss_that_is_no_mapping_is_named_as_ignored(caplog):
    """`loss: 5` in the arch section was passed over without a word (upstream writes a mapping naming loss_type)."""
    with caplog.at_level("WARNING"):
        arch = arch_config_from_upstream_yaml({"arch": {"hidden_size": 16, "num_heads": 2, "loss": 5}}, where="a.yaml")
    said = [r.getMessage() for r in caplog.records]
    assert said == [f"a.yaml: arch.loss is 5, not a mapping (upstream writes `loss: {{name: ..., loss_type: ...}}`): "
                    f"ignored; loss_type is {arch.loss_type}"]
    caplog.clear()
    with caplog.at_level("WARNING"):  # upstream's own mapping: nothing to say
        arch_config_from_upstream_yaml({"arch": {"hidden_size": 16, "num_heads": 2,
                                                 "loss": {"name": "x", "loss_type": "softmax_cross_entropy"}}})
    assert not caplog.records
