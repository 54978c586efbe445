"""Small input, small cost: a YAML alias bomb, a repeated key or a huge number is refused quickly in one short line.

Every YAML file goes through one reader (`trm_kaggle.yamlio`): the document is measured with its aliases
expanded before a value is built, a key repeated in one mapping is refused (as the JSON reader refuses
it), tags build no Python object, and the file is at most 1 MiB. A value echoed in an error is cut
(`trm_kaggle.wording.clipped`, built bounded: never the whole text first). Every number that sizes memory
or a file is bounded where it is read: the first puzzle identifier and the augmentations of a build, the
counts of the generators, the identifiers and shapes a dataset.json or an export's config.json declare.
"""

from __future__ import annotations

import json
import shutil
import time
import tracemalloc
from pathlib import Path

import pytest

from cli_helpers import one_error_line
from integrity_helpers import TINY
from trm_kaggle.cli import main
from trm_kaggle.errors import DataError
from trm_kaggle.wording import clipped
from trm_kaggle.yamlio import parse_yaml

from conftest import make_export


def bomb(levels: int = 9, width: int = 9, key: str = "data_paths") -> str:
    """A 'billion laughs' document under one config key: `width ** levels` strings from ~450 bytes."""
    parts = ['&a0 ["' + '","'.join(["lol"] * width) + '"]']
    parts += [f"&a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return f"{key}: [" + ", ".join(parts) + "]\n"


def quick_line(capsys, args: list[str], seconds: float = 10) -> str:
    t0 = time.perf_counter()
    line = one_error_line(capsys, main(args))
    assert time.perf_counter() - t0 < seconds, line
    assert len(line) < 400, line[:1000]
    return line


# ---------------------------------------------------------------------------
# YAML
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("text", [bomb(), bomb(key="lr"), bomb(levels=6, width=20, key="project_name"),
                                  "a: &a [x, x, x, x]\n" + "".join(f"b{i}: &b{i} [*{'a' if i == 0 else f'b{i - 1}'}"
                                                                     f", *{'a' if i == 0 else f'b{i - 1}'}]\n"
                                                                     for i in range(40))])
def test_an_alias_bomb_in_a_config_is_refused_quickly(tmp_path, capsys, text):
    assert len(text) < 2000
    (tmp_path / "c.yaml").write_text(text)
    line = quick_line(capsys, ["train", "--config", str(tmp_path / "c.yaml"), "--print-config"])
    assert "c.yaml" in line and "expands to more than" in line, line


def test_a_bomb_costs_no_memory(tmp_path):
    tracemalloc.start()
    try:
        with pytest.raises(DataError, match="expands"):
            parse_yaml(bomb(levels=12), "x.yaml", "config file")
        assert tracemalloc.get_traced_memory()[1] < 20 << 20  # peak, bytes
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("text, words", [
    ("lr: 0.001\nlr: 0.5\n", "the key 'lr' appears twice"),
    ("arch:\n  hidden_size: 64\n  hidden_size: 32\n", "the key 'hidden_size' appears twice"),
    ("a: &a [*a]\n", "loop"),
    ("lr: !!python/object/apply:os.system ['touch {tmp}/pwned']\n", "could not determine a constructor"),
    ("lr: !!python/name:os.system\n", "could not determine a constructor"),
    ("lr: [" * 3000 + "]" * 3000 + "\n", "nested too deeply"),
    ("lr: *nowhere\n", "found undefined alias"),
    ("--- {lr: 1}\n--- {lr: 2}\n", "expected a single document"),
    ("lr: '" + "x" * 300_000 + "\n", "not valid YAML"),
    ("lr: 1e-3\x00\n", "unacceptable character #x0000"),  # read as the loader is made: once a traceback
    ("lr: 1e-3\x07\n", "unacceptable character #x0007"),
    # YAML 1.1's numbers that read as another value in every other format: once taken silently
    ("seed: 1:20\n", "the integer '1:20' is base 60 in YAML 1.1"),  # was seed 80
    ("seed: 010\n", "the integer '010' is octal in YAML 1.1"),  # was seed 8
    ("lr: 1:0.5\n", "the number '1:0.5' is base 60"),
])
def test_yaml_tricks_are_one_short_line(tmp_path, capsys, text, words):
    (tmp_path / "c.yaml").write_text(text.replace("{tmp}", str(tmp_path)))
    line = quick_line(capsys, ["train", "--config", str(tmp_path / "c.yaml"), "--print-config"])
    assert words in line, line
    assert not (tmp_path / "pwned").exists()


def test_a_repeated_key_in_json_and_yaml_alike(tmp_path, capsys):
    (tmp_path / "c.json").write_text('{"lr": 0.001, "lr": 0.5}')
    assert "appears twice" in quick_line(capsys, ["train", "--config", str(tmp_path / "c.json"), "--print-config"])


def test_merge_keys_are_no_repeat(tmp_path, capsys):
    (tmp_path / "c.yaml").write_text("<<: {lr: 0.001, seed: 3}\nlr: 0.002\n")
    assert main(["train", "--config", str(tmp_path / "c.yaml"), "--print-config"]) == 0
    out = capsys.readouterr().out
    assert "lr: 0.002" in out and "seed: 3" in out


def test_a_config_file_larger_than_the_reader_reads(tmp_path, capsys):
    (tmp_path / "c.yaml").write_text("lr: 0.001\n" + "#" * (2 << 20) + "\n")
    line = quick_line(capsys, ["train", "--config", str(tmp_path / "c.yaml"), "--print-config"])
    assert "larger than the 1,048,576 bytes" in line


def test_a_sweep_grid_and_an_upstream_config_use_the_same_reader(tmp_path, capsys):
    (tmp_path / "grid.yaml").write_text("name: g\naxes:\n  - [baseline]\naxes:\n  - [lr=1e-3]\n")
    line = quick_line(capsys, ["sweep", str(tmp_path / "grid.yaml"), "--sweep-dir", str(tmp_path / "s")])
    assert "the key 'axes' appears twice" in line
    (tmp_path / "grid.yaml").write_text(bomb(key="axes"))
    assert "expands" in quick_line(capsys, ["sweep", str(tmp_path / "grid.yaml"), "--sweep-dir", str(tmp_path / "s")])
    (tmp_path / "ck").mkdir()
    import torch  # a step file upstream could have written: its kind is read before its config

    torch.save({"_orig_mod.model.inner.H_init": torch.zeros(4)}, tmp_path / "ck" / "step_1")
    (tmp_path / "ck" / "all_config.yaml").write_text(bomb(key="arch"))
    line = quick_line(capsys, ["import-upstream", str(tmp_path / "ck" / "step_1"), "--out", str(tmp_path / "e")])
    assert "all_config.yaml" in line and "expands" in line


def test_a_huge_override_is_echoed_cut(data, tmp_path, capsys):
    line = quick_line(capsys, ["train", f"data_paths=[{data}]", *TINY, "lr=" + "9" * 100_000 + "x",
                               f"checkpoint_path={tmp_path / 'run'}"])
    assert "lr" in line and "..." in line
    assert not (tmp_path / "run").exists()


def test_clipped_builds_no_huge_text():
    nested = ["lol"] * 9
    for _ in range(9):
        nested = [nested] * 9  # 9 ** 10 strings when printed whole
    t0 = time.perf_counter()
    assert len(clipped(nested)) <= 90 and len(clipped("x" * 10**7)) < 120
    assert time.perf_counter() - t0 < 1


# ---------------------------------------------------------------------------
# Numbers that size memory or a file
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("flag, value", [("--puzzle-identifiers-start", "10000000"),
                                         ("--puzzle-identifiers-start", "2147483647"),
                                         ("--puzzle-identifiers-start", str(2**70)),
                                         ("--num-aug", "1000000000")])
def test_build_arc_numbers_are_bounded_where_read(tmp_path, capsys, arc_prefix, flag, value):
    args = ["build-arc", "--input-file-prefix", str(arc_prefix), "--subsets", "training", "evaluation",
            "--test-set-name", "evaluation", "--num-aug", "0", "--workers", "1", "--no-progress",
            "--output-dir", str(tmp_path / "ds"), flag, value]
    line = quick_line(capsys, args)
    assert flag in line, line
    assert not (tmp_path / "ds").exists()


def test_identifiers_past_the_table_bound_are_refused_before_they_are_laid_out(tmp_path, capsys, arc_prefix,
                                                                              monkeypatch):
    import trm_kaggle.data.arc.build as build

    monkeypatch.setattr(build, "MAX_PUZZLE_IDENTIFIERS", 20)  # the real bound needs millions of puzzles
    line = quick_line(capsys, ["build-arc", "--input-file-prefix", str(arc_prefix), "--subsets", "training",
                               "evaluation", "--test-set-name", "evaluation", "--num-aug", "3", "--workers", "1",
                               "--no-progress", "--output-dir", str(tmp_path / "ds"),
                               "--puzzle-identifiers-start", "10"])
    assert "puzzle identifiers are more than the 20" in line
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize("args", [["build-sudoku", "--num-train", str(10**12)], ["build-sudoku", "--num-aug", str(10**9)],
                                  ["build-maze", "--num-test", str(10**12)]])
def test_generator_counts_are_bounded(tmp_path, capsys, args):
    line = quick_line(capsys, [*args, "--output-dir", str(tmp_path / "ds"), "--no-progress"])
    assert "less than or equal" in line, line
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize("field, value", [("num_puzzle_identifiers", 10**12), ("seq_len", 2**40),
                                          ("vocab_size", 10**9), ("total_puzzles", -1)])
@pytest.mark.parametrize("command", ["train", "verify"])
def test_a_dataset_json_that_declares_a_huge_model(data, tmp_path, capsys, field, value, command):
    ds = Path(shutil.copytree(data, tmp_path / "ds"))
    (ds / "contents.json").unlink()  # the record would catch the edit first
    meta = json.loads((ds / "train" / "dataset.json").read_text())
    meta[field] = value
    (ds / "train" / "dataset.json").write_text(json.dumps(meta))
    args = ["train", f"data_paths=[{ds}]", *TINY, "max_steps=1", f"checkpoint_path={tmp_path / 'run'}"] \
        if command == "train" else ["verify", str(ds)]
    line = quick_line(capsys, args, seconds=30)
    assert "dataset.json" in line and field in line, line


def test_an_export_that_declares_a_huge_table(tmp_path, capsys):
    make_export(tmp_path / "exp")
    cfg = json.loads((tmp_path / "exp" / "config.json").read_text())
    cfg["num_puzzle_identifiers"] = 10**12
    (tmp_path / "exp" / "config.json").write_text(json.dumps(cfg))
    from trm_kaggle.model.export import read_export

    with pytest.raises(Exception, match="num_puzzle_identifiers"):
        read_export(tmp_path / "exp")


# ---------------------------------------------------------------------------
# Found by the second round
# ---------------------------------------------------------------------------


def test_a_deeply_nested_override_is_one_line(capsys):
    line = quick_line(capsys, ["train", "data_paths=" + "[" * 5000 + "]" * 5000, "--print-config"])
    assert "nested too deeply" in line


def test_merge_keys_cannot_hide_a_bomb(tmp_path, capsys):
    text = "data_paths: [&a {x: 1, y: 2}, &b {<<: [*a, *a, *a, *a]}"
    names = ["b"]
    for i in range(12):
        text += f", &m{i} [" + ", ".join([f"*{names[-1]}"] * 8) + "]"
        names.append(f"m{i}")
    (tmp_path / "c.yaml").write_text(text + "]\n")
    assert "expands to more than" in quick_line(capsys, ["train", "--config", str(tmp_path / "c.yaml"),
                                                         "--print-config"])


def test_submit_num_aug_is_bounded_before_any_task(tmp_path, capsys):
    (tmp_path / "c.json").write_text(json.dumps({"t": {"train": [{"input": [[1]], "output": [[1]]}],
                                                        "test": [{"input": [[1]]}]}}))
    make_export(tmp_path / "exp")
    line = quick_line(capsys, ["submit", "--challenges", str(tmp_path / "c.json"), "--weights", str(tmp_path / "exp"),
                               "--output", str(tmp_path / "s.json"), "--work-dir", str(tmp_path / "w"),
                               "--num-aug", str(10**9), "--no-progress"])
    assert "--num-aug" in line and "at most 100,000" in line
    assert not (tmp_path / "s.json").exists()


def test_a_library_error_caught_to_keep_going_is_one_bounded_line():
    import pydantic

    from trm_kaggle.config import ArcBuildConfig
    from trm_kaggle.errors import describe

    with pytest.raises(pydantic.ValidationError) as e:
        ArcBuildConfig(output_dir="x", num_aug=10**9)
    line = describe(e.value)
    assert "\n" not in line and "num_aug" in line
    assert len(describe(RuntimeError("x" * 100_000))) < 600
