"""trm-kaggle compare on hand-made run and sweep directories: table values worked out from the records,
groups over seeds, settings that differ, a sweep still running, valid PNGs, clear errors."""

import csv
import io
import json
import os
import re

import pytest
from conftest import write_run

from trm_kaggle.cli import main
from trm_kaggle.errors import TRMError
from trm_kaggle.experiments.compare import load_runs, write_comparison

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def rows_of(path):
    return {r["run"]: r for r in csv.DictReader(io.StringIO(path.read_text()))}


def assert_png(path):
    mpimg = pytest.importorskip("matplotlib.image")
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and len(data) > 2000
    image = mpimg.imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


@pytest.fixture
def three_runs(tmp_path):
    """ema True (seeds 0 and 1) and ema False (seed 0), batch 8; evaluations at steps 10 and 20."""
    base = ["global_batch_size=8", "eval_interval=1"]
    write_run(tmp_path / "runs" / "ema_s0", [*base, "ema=True", "seed=0"],
              train=[(10, 4.0, 1.2, 0.10, 0.50), (20, 8.0, 0.8, 0.30, 0.70)], evals=[(10, 0.70, 0.9), (20, 0.50, 0.8)])
    write_run(tmp_path / "runs" / "ema_s1", [*base, "ema=True", "seed=1"],
              train=[(10, 6.0, 1.0, 0.20, 0.60), (20, 10.0, 0.6, 0.40, 0.80)], evals=[(10, 0.20, 0.6), (20, 0.70, 0.9)])
    write_run(tmp_path / "runs" / "plain_s0", [*base, "ema=False", "seed=0"],
              train=[(10, 5.0, 1.1, 0.00, 0.40), (20, 10.0, 0.9, 0.10, 0.45)], evals=[(20, 0.10, 0.3)])
    return tmp_path / "runs"


def test_table_values_from_the_records(three_runs, tmp_path):
    paths = write_comparison([three_runs], tmp_path / "out")
    rows = rows_of(paths["csv"])
    assert list(rows) == ["ema_s0", "ema_s1", "plain_s0"]
    r = rows["ema_s0"]
    assert int(r["steps"]) == 20 and float(r["wall_s"]) == 8.0
    assert float(r["examples_per_s"]) == pytest.approx(20 * 8 / 8.0)  # steps x global batch / wall time
    assert float(r["loss"]) == 0.8 and float(r["exact_accuracy"]) == 0.3 and float(r["token_accuracy"]) == 0.7
    assert float(r["eval_exact_accuracy"]) == 0.5 and float(r["best_eval_exact_accuracy"]) == 0.7  # final < best
    assert float(r["eval_token_accuracy"]) == 0.8 and float(r["best_exact_accuracy"]) == 0.3
    assert float(rows["ema_s1"]["best_eval_exact_accuracy"]) == 0.7
    assert float(rows["plain_s0"]["examples_per_s"]) == pytest.approx(16.0)
    # the only setting that differs (seed has its own column; checkpoint_path is bookkeeping)
    assert [k for k in rows["ema_s0"] if k not in ("run", "group", "seed", "state")][-1] == "ema"
    assert "checkpoint_path" not in rows["ema_s0"] and "global_batch_size" not in rows["ema_s0"]
    assert (rows["ema_s0"]["ema"], rows["plain_s0"]["ema"]) == ("True", "False")
    # the two ema runs differ only in their seed: one group; no dataset here, so no parameter count
    assert rows["ema_s0"]["group"] == rows["ema_s1"]["group"] != rows["plain_s0"]["group"]
    assert "parameters" not in rows["ema_s0"]

    md = paths["markdown"].read_text()
    group = next(line for line in md.splitlines() if line.startswith("| ema=True"))
    # final exact (test) of the group: mean of 0.5 and 0.7 = 0.600, sample std = 0.141
    assert "| 0.600 ± 0.141 |" in group and "| 2 |" in group
    assert "| ema_s1 | 1 |" in md
    assert paths["metric"] == "eval_exact_accuracy"
    assert_png(paths["curves"])
    assert_png(paths["bars"])


def test_group_curves_mean_and_spread(three_runs):
    from trm_kaggle.experiments.compare import group_curves

    runs = load_runs([three_runs])
    curves = group_curves(runs, "eval_exact_accuracy")
    ema = curves[runs[0].group]
    # step 10: 0.7 and 0.2 at walls 4 and 6 s; step 20: 0.5 and 0.7 at walls 8 and 10 s
    assert ema == [(10, 5.0, pytest.approx(0.45), 0.2, 0.7), (20, 9.0, pytest.approx(0.6), 0.5, 0.7)]
    assert curves[runs[2].group] == [(20, 10.0, 0.1, 0.1, 0.1)]


def test_a_sweep_still_running(tmp_path):
    """One run done, one running with a half-written last line, one pending without a directory yet."""
    sweep = tmp_path / "sweep"
    write_run(sweep / "a_s0", ["seed=0"], train=[(5, 2.0, 1.0, 0.5, 0.8), (10, 4.0, 0.5, 0.75, 0.9)])
    write_run(sweep / "b_s0", ["seed=0", "lr=0.01"], train=[(5, 3.0, 2.0, 0.25, 0.6)], tail='{"step": 10, "lo')
    (sweep / "b_s0" / "config.json").write_text('{"arch": {"hidden_si')  # unreadable: the sweep's record serves
    records = [{"name": "a_s0", "variant": "a", "seed": 0, "state": "done"},
               {"name": "b_s0", "variant": "b", "seed": 0, "state": "running", "settings": {"lr": 0.02}},
               {"name": "c_s0", "variant": "c", "seed": 0, "state": "pending", "settings": {"lr": 0.5}}]
    (sweep / "sweep.json").write_text(json.dumps({"format": "trm_kaggle.sweep", "version": 1, "runs": records}))
    paths = write_comparison([sweep], tmp_path / "out")
    rows = rows_of(paths["csv"])
    assert [(k, r["state"], r["steps"]) for k, r in rows.items()] == [("a_s0", "done", "10"), ("b_s0", "running", "5"),
                                                                      ("c_s0", "pending", "")]
    assert [r["group"] for r in rows.values()] == ["a", "b", "c"]  # the sweep's variants
    assert rows["c_s0"]["lr"] == "0.5"  # settings of a run not started yet: the sweep's record
    assert rows["b_s0"]["lr"] == "0.02" and rows["a_s0"]["lr"] == "0.0001"
    assert paths["metric"] == "exact_accuracy"  # nothing evaluated: the training batches' accuracy
    assert "(1 done)" in paths["markdown_text"]
    assert_png(paths["curves"])
    assert_png(paths["bars"])


def test_a_sweep_run_recorded_done_without_its_folder_is_shown_missing(tmp_path, caplog):
    """A finished sweep's run folder deleted (or a record no run wrote): "2 runs (2 done)" over one run's data."""
    sweep = tmp_path / "sweep"
    write_run(sweep / "a_s0", ["seed=0"], train=[(5, 2.0, 1.0, 0.5, 0.8)])
    records = [{"name": "a_s0", "variant": "a", "seed": 0, "state": "done"},
               {"name": "b_s0", "variant": "b", "seed": 0, "state": "done", "settings": {"lr": 0.02}},
               {"name": "c_s0", "variant": "c", "seed": 0, "state": "pending", "settings": {"lr": 0.5}}]
    (sweep / "sweep.json").write_text(json.dumps({"format": "trm_kaggle.sweep", "version": 1, "runs": records}))
    with caplog.at_level("WARNING"):
        paths = write_comparison([sweep], tmp_path / "out")
    said = [r.getMessage() for r in caplog.records if "no folder" in r.getMessage()]
    assert said == [f"sweep {sweep}: run b_s0 is recorded done but {sweep / 'b_s0'} is no folder (deleted?): shown "
                    "as missing"], said  # a pending run has no folder yet: not said
    rows = rows_of(paths["csv"])
    assert [(k, r["state"]) for k, r in rows.items()] == [("a_s0", "done"), ("b_s0", "missing"), ("c_s0", "pending")]
    assert "(1 done)" in paths["markdown_text"]


def test_a_sweep_run_recorded_done_without_its_metrics_is_said(tmp_path, caplog):
    """A done run whose metrics.jsonl was deleted was shown done with `-` everywhere, without a word."""
    sweep = tmp_path / "sweep"
    write_run(sweep / "a_s0", ["seed=0"], train=[(5, 2.0, 1.0, 0.5, 0.8)])
    write_run(sweep / "b_s0", ["seed=0", "lr=0.01"], train=[(5, 2.0, 1.0, 0.5, 0.8)])
    write_run(sweep / "c_s0", ["seed=0", "lr=0.02"])
    for name in ("b_s0", "c_s0"):
        (sweep / name / "metrics.jsonl").unlink()
    records = [{"name": "a_s0", "variant": "a", "seed": 0, "state": "done"},
               {"name": "b_s0", "variant": "b", "seed": 0, "state": "done"},
               {"name": "c_s0", "variant": "c", "seed": 0, "state": "running"}]
    (sweep / "sweep.json").write_text(json.dumps({"format": "trm_kaggle.sweep", "version": 1, "runs": records}))
    with caplog.at_level("WARNING"):
        paths = write_comparison([sweep], tmp_path / "out")
    said = [r.getMessage() for r in caplog.records if "metrics.jsonl" in r.getMessage()]
    assert said == [f"sweep {sweep}: run b_s0 is recorded done but has no metrics.jsonl (deleted?): its columns are "
                    "empty"], said  # a running run may have none yet: not said
    assert rows_of(paths["csv"])["b_s0"]["state"] == "done"


@pytest.mark.filterwarnings("ignore:Data has no positive values")  # the loss curve's log scale
def test_a_text_cell_a_spreadsheet_reads_as_a_formula_is_neutralised_in_the_csv(tmp_path):
    """Run folders named `=HYPERLINK(1)` and `+x-y` were written to table.csv as they are: a spreadsheet opening it
    ran them as formulas. A number (a loss of -0.5) stays a number."""
    runs = tmp_path / "runs"
    names = ["=HYPERLINK(1)", "+x-y", "-a", "@b", "ok"]
    for name in names:
        write_run(runs / name, ["global_batch_size=8", "seed=0"], train=[(10, 4.0, -0.5, 0.10, 0.50)])
    paths = write_comparison([runs], tmp_path / "cmp", metric="loss")
    rows = list(csv.reader(io.StringIO(paths["csv"].read_text())))
    header, body = rows[0], rows[1:]
    cells = {r[0]: dict(zip(header, r)) for r in body}
    assert sorted(cells) == sorted("'" + n if n[0] in "=+-@" else n for n in names)
    for row in cells.values():
        assert row["loss"] == "-0.5"
        assert not any(c.startswith(("=", "+", "@", "\t", "\r")) for c in row.values())
        assert not any(c.startswith("-") for k, c in row.items() if k not in ("loss", "state"))
        assert row["state"] == "-"  # the tables' own placeholder: no text read from a file
    assert "| =HYPERLINK(1) |" in paths["markdown_text"]  # Markdown is no spreadsheet: shown as named


def test_a_sweep_runs_bad_config_says_its_settings_come_from_the_record(tmp_path, caplog):
    """The warning said the settings columns were left empty while lr was filled from sweep.json."""
    sweep = tmp_path / "sweep"
    write_run(sweep / "b_s0", ["seed=0"], train=[(5, 3.0, 2.0, 0.25, 0.6)])
    (sweep / "b_s0" / "config.json").write_text('{"arch": [1, 2]}')
    records = [{"name": "b_s0", "variant": "b", "seed": 0, "state": "done", "settings": {"lr": 0.02}}]
    (sweep / "sweep.json").write_text(json.dumps({"format": "trm_kaggle.sweep", "version": 1, "runs": records}))
    with caplog.at_level("WARNING"):
        (loaded,) = load_runs([sweep])
    said = [r.getMessage() for r in caplog.records if "not settings this trm_kaggle can read" in r.getMessage()]
    assert len(said) == 1 and said[0].endswith(": its settings are taken from the sweep's record"), said
    assert loaded.settings["lr"] == 0.02


def test_peak_memory_is_the_largest_logged_interval_peak(tmp_path):
    run = write_run(tmp_path / "r", train=[(1, 1.0, 2.0, 0.0, 0.1), (2, 2.0, 1.0, 0.0, 0.2)])
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for record, gb in zip(lines, (0.75, 0.5)):
        record.update(peak_rss_gb=gb, max_rss_gb=0.9)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    from trm_kaggle.experiments.compare import summarise

    (loaded,) = load_runs([run])
    assert summarise(loaded)["peak_memory_gb"] == 0.75


def test_a_record_no_run_writes_is_skipped_and_no_file_ships_a_non_finite_number(tmp_path):
    """A `"loss": Infinity` was written to table.csv as `inf`; a record at step -2 counted -2 steps and a
    negative examples/s. The record of a negative step is skipped (no run writes one); a non-finite value is no
    data: `-` in table.md, an empty cell in table.csv."""
    run = write_run(tmp_path / "r", train=[(1, 1.0, 2.0, 0.0, 0.1), (2, 2.0, 1.0, 0.0, 0.2)])
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    lines[-1]["loss"] = float("inf")
    lines.append({**lines[0], "step": -2})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    paths = write_comparison([run], tmp_path / "out")
    row = rows_of(paths["csv"])["r"]
    assert row["steps"] == "2" and row["loss"] == "" and float(row["examples_per_s"]) > 0
    assert "inf" not in paths["csv"].read_text().lower() and "nan" not in paths["csv"].read_text().lower()
    # a value that is no number: text or a list was a TypeError traceback, `true` a final loss of 1.0000
    for bad in ("abc", [1], True):
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines[:-1])
                                           + json.dumps({**lines[0], "step": 3, "loss": bad}) + "\n")
        row = rows_of(write_comparison([run], tmp_path / "out")["csv"])["r"]
        assert row["steps"] == "2" and row["loss"] == "", (bad, row)


@pytest.mark.parametrize("field, value, why", [
    ("elapsed_s", -0.1, "elapsed_s -0.1 is not a value from 0 to 3.2e+08"),
    ("elapsed_s", float("inf"), "elapsed_s inf is not a value from 0 to 3.2e+08"),
    ("peak_rss_gb", 1e308, "peak_rss_gb 1e+308 is not a value from 0 to 1e+06"),
    ("cuda_max_allocated_gb", -1.0, "cuda_max_allocated_gb -1 is not a value from 0 to 1e+06"),
    ("token_accuracy", float("inf"), "token_accuracy inf is not a value from 0 to 1"),
])
def test_a_record_with_an_impossible_number_is_skipped_naming_its_line(tmp_path, caplog, field, value, why):
    """A last record with a negative elapsed_s was summed into the wall time (0.31 - 0.11 s) and examples/s, and a
    peak memory of 1e308 was printed in 309 digits, without a word: such a record is skipped where it is read,
    one warning naming the file and the line."""
    run = write_run(tmp_path / "r", ["global_batch_size=8"], train=[(1, 1.0, 2.0, 0.1, 0.5), (2, 2.0, 1.0, 0.2, 0.6)])
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for record in lines:
        record["peak_rss_gb"] = 0.5
    lines.append({**lines[-1], "step": 3, "elapsed_s": 3.0, field: value})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    with caplog.at_level("WARNING"):
        paths = write_comparison([run], tmp_path / "out")
    row = rows_of(paths["csv"])["r"]
    assert row["steps"] == "2" and float(row["wall_s"]) == 2.0 and float(row["peak_memory_gb"]) == 0.5
    assert float(row["examples_per_s"]) == pytest.approx(2 * 8 / 2.0)
    assert [r.getMessage() for r in caplog.records if r.levelno >= 30] == [
        f"{run / 'metrics.jsonl'}: skipped 1 record(s) no run writes (first: line 3: {why})"]


def test_a_huge_number_is_shown_in_a_few_digits(tmp_path):
    """A diverged loss of 1e200 (a number a run may log) was printed with its 201 digits in table.md."""
    run = write_run(tmp_path / "r", train=[(1, 1.0, 2.0, 0.1, 0.5), (2, 2.0, 1e200, 0.2, 0.6)])
    md = write_comparison([run], tmp_path / "out")["markdown_text"]
    assert "| 1e+200 |" in md and "0" * 20 not in md


def test_several_sweeps_keep_their_names_apart(tmp_path):
    for name in ("s1", "s2"):
        write_run(tmp_path / name / "a_s0", ["seed=0"], train=[(5, 2.0, 1.0, 0.5, 0.8)])
        (tmp_path / name / "sweep.json").write_text(json.dumps(
            {"format": "trm_kaggle.sweep", "runs": [{"name": "a_s0", "variant": "a", "seed": 0, "state": "done"}]}))
    runs = load_runs([tmp_path / "s1", tmp_path / "s2"])
    assert [(r.label, r.group) for r in runs] == [("s1/a_s0", "s1/a"), ("s2/a_s0", "s2/a")]


def test_parameter_counts_from_the_dataset(tmp_path):
    import torch

    from trm_kaggle.config import SudokuBuildConfig
    from trm_kaggle.data.puzzles.sudoku import build_sudoku
    from trm_kaggle.model.trm import TinyRecursiveModel
    from trm_kaggle.train.settings import load_train_config

    data = tmp_path / "sudoku4"
    build_sudoku(SudokuBuildConfig(output_dir=str(data), size=4, num_train=6, num_test=2, progress=False))
    arch = ["arch.hidden_size=32", "arch.num_heads=2", "arch.puzzle_emb_len=2", "arch.L_layers=1"]
    write_run(tmp_path / "r", [f"data_paths=[{data}]", *arch], train=[(1, 1.0, 1.0, 0.0, 0.0)])
    (runs,) = load_runs([tmp_path / "r"])
    cfg = load_train_config(overrides=arch)
    n_ids = json.loads((data / "train" / "dataset.json").read_text())["num_puzzle_identifiers"]
    torch.manual_seed(0)
    weights = TinyRecursiveModel(cfg.arch, 16, 6, n_ids).num_parameters()  # 4x4 Sudoku: 16 cells, 6 tokens
    assert runs.parameters == (weights, weights + n_ids * 32)  # the puzzle table: one 32-wide row per identifier


def test_errors(three_runs, tmp_path, capsys):
    with pytest.raises(TRMError, match="--metric no_such: no run logged it; logged metrics: .*eval_exact_accuracy"):
        write_comparison([three_runs], tmp_path / "out", metric="no_such")
    for empty in ("", "  "):  # an unset shell variable was taken as the default metric without a word
        with pytest.raises(TRMError, match="--metric is empty"):
            write_comparison([three_runs], tmp_path / "out", metric=empty)
    assert not (tmp_path / "out").exists()
    # an empty output replaced the current folder with the report (the analysis notebook's OUT_DIR ''), and
    # `compare ''` read the current folder and wrote /compare at the file system's root
    for dirs, out in (([three_runs], ""), ([three_runs, ""], tmp_path / "out")):
        with pytest.raises(TRMError, match="is empty: name a folder|holds an empty name"):
            write_comparison(dirs, out)
    from trm_kaggle.cli import main

    for argv, said in ((["compare", ""], "run folder is empty"),
                       (["compare", str(three_runs), "--out", ""], "--out is empty")):
        assert main(argv) == 2 and said in capsys.readouterr().err
    assert not os.path.exists("/compare") and not (tmp_path / "out").exists()
    (tmp_path / "empty").mkdir()
    assert main(["compare", str(tmp_path / "empty")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"error: {tmp_path / 'empty'}: no runs here (a run "
                                                            "directory has config.json or metrics.jsonl, a sweep "
                                                            "directory sweep.json)"]
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "sweep.json").write_text(json.dumps({"format": "trm_kaggle.sweep", "runs": [{"name": "../../etc"}]}))
    assert main(["compare", str(bad)]) == 2
    assert "a run record without a plain directory name" in capsys.readouterr().err
    assert not (bad / "compare").exists()  # nothing written
    with pytest.raises(TRMError, match=r"compare needs run, sweep or parent directories, got \[\]"):
        write_comparison([], tmp_path / "none")  # was a bare IndexError
    assert not (tmp_path / "none").exists()
    # one folder given as a str is that folder, not its letters ('r: no such directory')
    assert write_comparison(str(three_runs), tmp_path / "one")["metric"] == "eval_exact_accuracy"


def test_cli_wrote_line_escapes_the_out_it_echoes(three_runs, tmp_path, capsys):
    """`compare --out $'c\x1b[31mo'` echoed the escape sequence raw in its `wrote ...` line (the terminal turned
    red): escaped, as the package's other success lines echo a path."""
    assert main(["compare", str(three_runs), "--out", str(tmp_path / "c\x1b[31mo")]) == 0
    wrote = capsys.readouterr().out.strip().splitlines()[-1]
    assert wrote.startswith("wrote ") and "\x1b" not in wrote and "c\\x1b[31mo/table.md" in wrote, wrote
    assert (tmp_path / "c\x1b[31mo" / "table.md").is_file()


def test_cli_prints_the_table_and_writes_beside_the_dir(three_runs, capsys):
    assert main(["compare", str(three_runs), "--metric", "loss"]) == 0
    out = capsys.readouterr().out
    assert "Metric of the plots: `loss`" in out and "| ema_s0 | 0 |" in out
    assert {p.name for p in (three_runs / "compare").iterdir()} == {"table.md", "table.csv", "curves.png", "final.png",
                                                                     ".trm_kaggle_output.json"}  # replaced as one


def test_an_interval_without_halted_rows_is_a_gap_not_a_zero(tmp_path):
    """Intervals in which no row halted carry no accuracy (this version) or 0.0 with halted_examples 0 (older
    files): either way the curve breaks there, the finals skip it, and a group without any value is "no data"."""
    import math

    from trm_kaggle.experiments.compare import group_curves, plot_curves, plot_final

    runs = tmp_path / "runs"
    mixed = write_run(runs / "mixed", ["seed=0"])
    lines = [{"step": 5, "loss": 2.0, "halted_examples": 0, "elapsed_s": 1.0},
             {"step": 10, "loss": 1.5, "exact_accuracy": 0.25, "token_accuracy": 0.5, "halted_examples": 8,
              "elapsed_s": 2.0},
             {"step": 15, "loss": 1.2, "exact_accuracy": 0.0, "token_accuracy": 0.0, "halted_examples": 0,
              "elapsed_s": 3.0}]  # an older version's invented zeros
    (mixed / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    never = write_run(runs / "never", ["seed=0", "lr=1e-3"])
    (never / "metrics.jsonl").write_text(json.dumps({"step": 5, "loss": 2.0, "halted_examples": 0,
                                                     "elapsed_s": 1.0}) + "\n")
    loaded = load_runs([runs])
    curves = group_curves(loaded, "token_accuracy")
    assert list(curves) == [loaded[0].group]  # the run without any value draws no curve
    (s5, _, v5, _, _), (s10, _, v10, lo, hi), (s15, _, v15, _, _) = curves[loaded[0].group]
    assert (s5, s10, s15) == (5, 10, 15) and math.isnan(v5) and math.isnan(v15) and v10 == lo == hi == 0.5
    paths = write_comparison([runs], tmp_path / "out", metric="token_accuracy")
    by_run = {line.split("|")[1].strip(): line for line in paths["markdown_text"].splitlines()
              if line.startswith(("| mixed", "| never"))}
    assert "| no data |" in by_run["mixed"] and "| 0.250 |" in by_run["mixed"]  # final: no data; best: 0.25
    assert by_run["never"].count("| no data ") == 3
    csv_rows = rows_of(paths["csv"])
    assert csv_rows["mixed"]["token_accuracy"] == "" and csv_rows["never"]["best_exact_accuracy"] == ""
    assert_png(paths["curves"])
    assert_png(paths["bars"])
    plot_curves(loaded, "exact_accuracy")  # no group has a value at the last step: still drawn, nothing at 0
    plot_final(loaded, "exact_accuracy")


def test_a_config_that_is_json_but_not_settings_is_said(tmp_path, caplog):
    """A run's config.json holding a list (or null) leaves its settings columns empty with one warning, as an
    unreadable one does; never silently."""
    run = write_run(tmp_path / "r", train=[(1, 0.1, 2.0, 0.0, 0.1)])
    (run / "config.json").write_text("[1, 2]")
    with caplog.at_level("WARNING"):
        (loaded,) = load_runs([run])
    assert [r.getMessage() for r in caplog.records if "not a run config" in r.getMessage()] == [
        f"{run / 'config.json'}: not a run config (a JSON object expected, found list): its settings columns are "
        "left empty"]
    assert loaded.seed is None


def test_a_config_with_values_no_run_writes_is_said_and_never_tabled(tmp_path, caplog):
    """`lr: Infinity`, `weight_decay: 1e400` and `seed: {"x": 1}` in a damaged config.json reached table.csv as
    `inf` and a `seed.x` column, with status 0 and no word."""
    run = write_run(tmp_path / "r", train=[(1, 0.1, 2.0, 0.0, 0.1)])
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**config, "lr": float("inf"), "seed": {"x": 1}}))
    with caplog.at_level("WARNING"):
        paths = write_comparison([run], tmp_path / "out")
    said = [r.getMessage() for r in caplog.records if "not settings this trm_kaggle can read" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(f"{run / 'config.json'}: not settings") and "lr" in said[0], said
    text = paths["csv"].read_text()
    assert "inf" not in text.lower() and "seed.x" not in text and "{'x': 1}" not in paths["markdown"].read_text()


def test_settings_a_run_has_not_are_empty_in_both_tables(tmp_path, caplog):
    """The warning said a run's settings columns were left empty; table.md wrote `None` in each (a value some
    settings take: max_steps, eval_interval), settings the run never had."""
    good = write_run(tmp_path / "good", train=[(1, 0.1, 2.0, 0.0, 0.1)])
    bad = write_run(tmp_path / "bad", train=[(1, 0.1, 2.0, 0.0, 0.1)])
    config = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**config, "lr": float("inf")}))
    with caplog.at_level("WARNING"):
        paths = write_comparison([good, bad], tmp_path / "out")
    assert any("its settings columns are left empty" in r.getMessage() for r in caplog.records)
    md = paths["markdown"].read_text()
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in md.splitlines() if line.startswith("| bad") or line.startswith("| good")}
    assert set(rows) == {"bad", "good"} and "None" not in rows["bad"], rows
    head = next(line for line in md.split("## By run")[1].splitlines() if line.startswith("| run"))
    lr = [c.strip() for c in head.split("|")[1:-1]].index("lr")
    assert rows["bad"][lr - 1] == "" and rows["good"][lr - 1] == str(config["lr"])
    assert rows_of(paths["csv"])["bad"]["lr"] == ""


def test_a_run_named_twice_is_refused_not_counted_as_a_second_seed(three_runs, tmp_path, capsys):
    run = three_runs / "ema_s0"
    (tmp_path / "link").symlink_to(run)
    for again in (run, tmp_path / "link", three_runs):  # itself, through a link, inside a folder named too
        assert main(["compare", str(run), str(again), "--out", str(tmp_path / "cmp")]) == 2
        assert "is named twice" in capsys.readouterr().err
    assert not (tmp_path / "cmp").exists()


def test_a_metric_name_with_control_characters_is_escaped_in_its_one_line(three_runs, tmp_path, capsys):
    assert main(["compare", str(three_runs), "--metric", "\x1b[31mred\nline", "--out", str(tmp_path / "cmp")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err and "\\x1b[31mred\\nline" in err, err


def test_a_dir_that_is_no_directory_is_named_as_what_it_is(tmp_path):
    """`compare FIFO --out X`, a file or a link loop were all "no such directory"."""
    from trm_kaggle.experiments.compare import find_runs

    os.mkfifo(tmp_path / "ff")
    (tmp_path / "f.json").write_text("{}")
    (tmp_path / "la").symlink_to(tmp_path / "lb")
    (tmp_path / "lb").symlink_to(tmp_path / "la")
    for name, said in (("ff", "not a directory (a pipe (FIFO))"), ("f.json", "not a directory (a file)"),
                       ("la", "not a directory (too many levels of symbolic links)"), ("gone", "no such directory")):
        with pytest.raises(TRMError, match=re.escape(f"{tmp_path / name}: {said}; compare reads")):
            find_runs([tmp_path / name])


def test_a_run_folder_name_holding_an_escape_sequence_is_shown_escaped(tmp_path, capsys):
    """A folder named `e<ESC>[31mx` reached the terminal and table.md raw (names read from the disk)."""
    runs = tmp_path / "runs"
    for name in ("ok", "e\x1b[31mx"):
        write_run(runs / name, ["global_batch_size=8", "seed=0"], train=[(10, 4.0, 1.2, 0.10, 0.50)])
    assert main(["compare", str(runs), "--out", str(tmp_path / "cmp"), "--metric", "loss"]) == 0
    out = capsys.readouterr()
    md = (tmp_path / "cmp" / "table.md").read_text() + (tmp_path / "cmp" / "table.csv").read_text()
    assert "\x1b" not in out.out + out.err + md and "e\\x1b[31mx" in out.out and "e\\x1b[31mx" in md


def test_an_export_is_no_run_alone_or_among_runs(tmp_path, capsys):
    """`compare EXPORT` warned its config.json was "not settings", then tabled "1 runs", exit 0; a pipeline's work
    folder counted its weights/ as a run beside train/."""
    from conftest import make_export

    make_export(tmp_path / "exp")
    assert main(["compare", str(tmp_path / "exp"), "--out", str(tmp_path / "c1")]) == 2
    assert "an export (config.json beside weights.safetensors), not a training run" in capsys.readouterr().err
    write_run(tmp_path / "work" / "train", ["global_batch_size=8", "seed=0"], train=[(10, 4.0, 1.2, 0.10, 0.50)])
    make_export(tmp_path / "work" / "weights")
    assert [r.label for r in load_runs([tmp_path / "work"])] == ["train"]


def test_a_non_finite_metric_in_a_seed_group_is_no_data_not_a_traceback(tmp_path, capsys):
    """`exact_accuracy: NaN` in one of two seeds' last record: statistics.stdev raised AttributeError, exit 1 (one
    run alone showed it as no data)."""
    runs = tmp_path / "runs"
    for seed, tail in ((0, '{"step": 20, "exact_accuracy": NaN, "loss": 0.5}\n'), (1, "")):
        write_run(runs / f"s{seed}", ["global_batch_size=8", f"seed={seed}"], train=[(10, 4.0, 1.2, 0.25, 0.5)],
                  tail=tail)
    assert main(["compare", str(runs), "--out", str(tmp_path / "cmp")]) == 0, capsys.readouterr().err
    assert "Traceback" not in capsys.readouterr().err
    group = (tmp_path / "cmp" / "table.md").read_text().split("## By run")[0]
    assert "| 2 |" in group and "nan" not in group.lower()


def test_a_sweep_record_of_settings_no_sweep_wrote_is_never_shown(tmp_path, caplog, capsys):
    """sweep.json's `settings` of a pending run were shown unchecked: an escape sequence as `lr` reached the
    terminal, table.md and table.csv raw (and its newline split the table's rows)."""
    sweep = tmp_path / "sweep"
    records = [{"name": f"v{i}_s0", "variant": f"v{i}", "seed": 0, "state": "pending",
                "settings": {"lr": f"\x1b[2J\r\nlr{i}"}} for i in range(2)]
    sweep.mkdir()
    (sweep / "sweep.json").write_text(json.dumps({"format": "trm_kaggle.sweep", "version": 1, "runs": records}))
    with caplog.at_level("WARNING"):
        main(["compare", str(sweep), "--out", str(tmp_path / "cmp")])
    said = [r.getMessage() for r in caplog.records if "the sweep's record of its settings" in r.getMessage()]
    assert len(said) == 2 and all("\x1b" not in s for s in said), said
    out = capsys.readouterr()
    files = "".join(p.read_text() for p in (tmp_path / "cmp").glob("table.*")) if (tmp_path / "cmp").exists() else ""
    assert "\x1b" not in out.out + out.err + files and "\r" not in out.out + files



@pytest.mark.parametrize("settings", ["abc", [1, 2], None, 7])
def test_a_sweep_record_whose_settings_are_no_object_costs_its_columns_alone(tmp_path, settings):
    """`"settings": "abc"` (or a list) in sweep.json was an AttributeError traceback from `dotted`, exit 1."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    records = [{"name": "v_s0", "variant": "v", "seed": 0, "state": "pending", "settings": settings}]
    (sweep / "sweep.json").write_text(json.dumps({"format": "trm_kaggle.sweep", "version": 1, "runs": records}))
    assert main(["compare", str(sweep), "--out", str(tmp_path / "cmp")]) == 0
    assert rows_of(tmp_path / "cmp" / "table.csv")["v_s0"]["state"] == "pending"


BIG = 10 ** 400  # a whole number too large for a float: JSON holds it, float() of it raises OverflowError


@pytest.mark.parametrize("field", ["step", "exact_accuracy", "loss", "epoch", "lr", "eval_exact_accuracy"])
def test_a_number_too_large_for_a_float_is_no_data_not_a_traceback(tmp_path, caplog, field):
    """A record whose `step` (or `exact_accuracy`) was 10**400 ended compare in OverflowError (matplotlib's
    isfinite, `summarise`'s examples/s, `_fmt`): the record is skipped as one no run writes, the run compared."""
    runs = tmp_path / "runs"
    run = write_run(runs / "r", ["global_batch_size=8"], train=[(1, 1.0, 2.0, 0.1, 0.5), (2, 2.0, 1.0, 0.2, 0.6)],
                    evals=[(2, 0.3, 0.7)])
    write_run(runs / "s", ["global_batch_size=8", "seed=1"], train=[(1, 1.0, 2.0, 0.1, 0.5)])
    bad = ({"step": 3, "eval_examples": 8, "eval_exact_accuracy": BIG} if field.startswith("eval_") else
           {"step": 3, "epoch": 0.3, "lr": 1e-3, "loss": 0.5, "exact_accuracy": 0.4, "elapsed_s": 3.0, field: BIG})
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps(bad) + "\n")
    with caplog.at_level("WARNING"):
        paths = write_comparison([runs], tmp_path / "out")
    row = rows_of(paths["csv"])["r"]
    assert row["steps"] == "2" and float(row["exact_accuracy"]) == 0.2 and float(row["eval_exact_accuracy"]) == 0.3
    assert float(row["examples_per_s"]) == pytest.approx(2 * 8 / 2.0)
    assert any(f"skipped 1 record(s) no run writes (first: line 4: {field} is "
               "a number too large for a float)" in r.getMessage() for r in caplog.records)


def test_a_number_too_large_for_a_float_on_the_command_line(tmp_path, capsys, caplog):
    """The CLI: a 400-digit step is skipped (exit 0); so is a record of a 400-digit elapsed_s (it left its whole
    run out, said as the run's), one warning naming its line, never a traceback."""
    runs = tmp_path / "runs"
    (runs / "r").mkdir(parents=True)
    (runs / "r" / "config.json").write_text("{}")
    metrics = runs / "r" / "metrics.jsonl"
    metrics.write_text(json.dumps({"step": BIG, "loss": 1.0, "elapsed_s": 1.0}) + "\n"
                       + json.dumps({"step": 1, "loss": 1.0, "elapsed_s": 1.0}) + "\n")
    assert main(["compare", str(runs / "r"), "--out", str(tmp_path / "c1")]) == 0
    assert "Traceback" not in capsys.readouterr().err and rows_of(tmp_path / "c1" / "table.csv")["r"]["steps"] == "1"
    metrics.write_text(json.dumps({"step": 1, "loss": 1.0, "elapsed_s": 2.0}) + "\n"
                       + json.dumps({"step": 2, "loss": 1.0, "elapsed_s": BIG}) + "\n")
    with caplog.at_level("WARNING"):
        assert main(["compare", str(runs / "r"), "--out", str(tmp_path / "c2")]) == 0
    assert "Traceback" not in capsys.readouterr().err
    assert any("line 2: elapsed_s is a number too large for a float" in r.getMessage() for r in caplog.records)
    assert rows_of(tmp_path / "c2" / "table.csv")["r"]["steps"] == "1"
    write_run(runs / "s", ["seed=1"], train=[(1, 1.0, 2.0, 0.1, 0.5)])
    assert main(["compare", str(runs), "--out", str(tmp_path / "c3")]) == 0
    assert list(rows_of(tmp_path / "c3" / "table.csv")) == ["r", "s"]  # r: its one good record


def test_the_default_out_of_a_live_sweep_is_compares_own(tmp_path, capsys):
    """`compare SWEEP` while the sweep runs, as documented: its default --out SWEEP/compare is the comparison's own
    folder (a name no run of a sweep has), built beside and renamed into place; any other place in the live sweep
    stays refused. It was refused as lying inside a folder a live command holds."""
    import subprocess
    import sys

    sweep = tmp_path / "sweep"
    write_run(sweep / "a_s0", ["seed=0"], train=[(5, 2.0, 1.0, 0.5, 0.8)])
    (sweep / "sweep.json").write_text(json.dumps({"format": "trm_kaggle.sweep", "version": 1, "runs": [
        {"name": "a_s0", "variant": "a", "seed": 0, "state": "running"}]}))
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom trm_kaggle.locks import directory_lock\n"
                               "with directory_lock(sys.argv[1], 'sweep'):\n    print('held', flush=True)\n"
                               "    time.sleep(60)\n", str(sweep)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        assert main(["compare", str(sweep)]) == 0
        assert (sweep / "compare" / "table.md").is_file()
        assert main(["compare", str(sweep), "--out", str(sweep / "other")]) == 2
        assert "lies inside a folder a live command holds" in capsys.readouterr().err
        assert sorted(p.name for p in sweep.iterdir()) == [".trm_kaggle.lock", "a_s0", "compare", "sweep.json"]
    finally:
        holder.kill()
        holder.wait()


def test_a_file_given_without_out_is_named_as_the_input(tmp_path, capsys):
    """compare FILE blamed the --out nobody typed (FILE/compare); the input is named, as with --out given."""
    grid = tmp_path / "g1.yaml"
    grid.write_text("name: g1\n")
    for extra in ([], ["--out", str(tmp_path / "cg")]):
        assert main(["compare", str(grid), *extra]) == 2
        assert capsys.readouterr().err == (f"error: {grid}: not a directory (a file); compare reads run, sweep or "
                                           "parent directories\n")
    assert main(["compare", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err.startswith(f"error: {tmp_path / 'missing'}: no such directory")


def test_the_placeholder_state_is_written_bare_and_a_run_named_dash_keeps_its_quote(tmp_path):
    """table.csv wrote a plain run's state, the tables' `-` (no sweep records it), as `'-`: a quote where no data
    is. A run folder named `-` is text read from the disk: it keeps its `'`."""
    for name in ("-", "ok"):
        write_run(tmp_path / "runs" / name, ["global_batch_size=8", "seed=0"], train=[(10, 4.0, 1.0, 0.1, 0.5)])
    paths = write_comparison([tmp_path / "runs"], tmp_path / "cmp", metric="loss")
    assert {r["run"]: r["state"] for r in rows_of(paths["csv"]).values()} == {"'-": "-", "ok": "-"}


def test_many_groups_plot_without_a_layout_warning(tmp_path):
    """`compare` of 40 groups printed matplotlib's "constrained_layout not applied" twice, with its file:line: a
    legend of 40 lines in one column stood taller than the plot. So did group names too long for any layout."""
    import warnings

    pytest.importorskip("matplotlib")
    for i in range(40):
        write_run(tmp_path / "runs" / f"r{i}{'x' * (150 if i < 3 else 0)}_s0",
                  ["global_batch_size=8", "seed=0", f"lr={i + 1}e-4"], train=[(10, 4.0, 1.0, 0.1, 0.5)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        paths = write_comparison([tmp_path / "runs"], tmp_path / "cmp", metric="loss")
    assert [str(w.message) for w in caught if "layout" in str(w.message)] == []
    assert_png(paths["curves"])
