"""The weights dataset: the export, its model card and manifest (trm_kaggle.kaggle.weights_dataset)."""

from __future__ import annotations

import json
import shutil

from trm_kaggle.kaggle import metadata as M
from trm_kaggle.kaggle import weights_dataset as WD

from conftest import IDS, USER


def test_weights_dataset(built, inputs):
    w = built / "weights"
    for name in ("weights.safetensors", "config.json"):
        assert (w / name).read_bytes() == (inputs["export"] / name).read_bytes()
    card = (w / M.MODEL_CARD).read_text()
    assert "data/arc-tiny" in card and "trm-kaggle train x" in card and "exact_accuracy" in card
    assert "arch.hidden_size: `16`" in card
    from trm_kaggle.model.export import export_parameter_count

    count = export_parameter_count(json.loads((w / "config.json").read_text()))
    assert count.puzzle_rows == 3 and count.total == count.weights + 3 * 16
    assert (f"- parameters: {count.weights:,} parameters without the puzzle-embedding table, {count.total:,} with it "
            "(3 rows x 16); the export ships the mean row alone") in card
    assert json.loads((w / M.DATASET_META).read_text())["id"] == f"{USER}/trm-kaggle-weights"
    from trm_kaggle.model.export import load_inference_model

    model, config = load_inference_model(w)  # the shipped export loads
    assert config["arch"]["hidden_size"] == 16


def test_weights_model_card_is_copied_when_the_export_has_one(inputs, tmp_path):
    export = tmp_path / "export"
    shutil.copytree(inputs["export"], export)
    (export / M.MODEL_CARD).write_text("# my own card\n")
    WD.build_weights(tmp_path / "weights", export, ids=IDS, log=lambda _: None)
    assert (tmp_path / "weights" / M.MODEL_CARD).read_text() == "# my own card\n"


def test_default_weights_finds_an_export_in_weights_dir(inputs, tmp_path):
    assert WD.default_weights(tmp_path) is None
    shutil.copytree(inputs["export"], tmp_path / "weights" / "arc2")
    assert WD.default_weights(tmp_path) == tmp_path / "weights" / "arc2"


def test_the_weights_dataset_names_its_export_without_the_builders_path(inputs, tmp_path):
    """A published dataset carries the export's folder name, never where the builder kept it."""
    export = tmp_path / "private" / "place" / "my-export"
    shutil.copytree(inputs["export"], export)
    result = WD.build_weights(tmp_path / "weights", export, ids=IDS, log=lambda _: None)
    manifest = json.loads((tmp_path / "weights" / M.MANIFEST).read_text())
    card = (tmp_path / "weights" / M.MODEL_CARD).read_text()
    assert manifest["export"] == "my-export" and "Source export: `my-export`." in card
    assert str(tmp_path) not in json.dumps(manifest) + card
    assert result["export"] == str(export)  # the builder's own log keeps the full path


def test_the_shipped_model_card_states_the_step_its_config_records():
    from pathlib import Path

    shipped = Path(__file__).resolve().parents[1] / "weights" / "arc2-cpu-tiny"
    step = json.loads((shipped / "config.json").read_text())["info"]["step"]
    batch = json.loads((shipped / "config.json").read_text())["info"]["train_config"]["global_batch_size"]
    assert f"{step} steps of batch {batch}" in (shipped / M.MODEL_CARD).read_text()


def test_the_model_card_escapes_what_the_exports_config_holds():
    """An export's config.json with `trm_kaggle_version` "99.0.0\\x1b[31m" (or a newline in a value) put the raw
    escape byte into the published MODEL_CARD.md; the JSON blocks stay JSON."""
    from pathlib import Path

    from trm_kaggle.kaggle.weights_dataset import model_card

    card = model_card({"trm_kaggle_version": "99.0.0\x1b[31m", "arch": {"hidden_size": "3\n# forged"},
                       "info": {"command": "train\rx", "note": "a\x1bb"}}, Path("exp\x07"), M.BundleIds("you"))
    assert not any(c in card for c in "\x1b\r\x07"), card
    assert "trm_kaggle 99.0.0\\x1b[31m" in card and "\n# forged" not in card
    assert json.loads(card.split("```json\n", 1)[1].split("\n```", 1)[0]) == {"note": "a\x1bb"}
