"""ARC evaluation end to end on a tiny real dataset: random model, oracle model, early exit, reports."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from test_decode import TINY_TASKS, build_tiny_dataset
from trm_kaggle.config import ArchConfig
from trm_kaggle.data.format import load_metadata
from trm_kaggle.errors import DataError, TRMError
from trm_kaggle.evaluate.predict import predict_split
from trm_kaggle.evaluate.pipeline import evaluate
from trm_kaggle.evaluate.report import write_report
from trm_kaggle.evaluate.stats import wilson_interval
from trm_kaggle.model.trm import TinyRecursiveModel

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return build_tiny_dataset(tmp_path_factory.mktemp("evalds"))


def tiny_arch(**kw) -> ArchConfig:
    cfg = dict(hidden_size=32, num_heads=2, expansion=2.0, H_cycles=2, L_cycles=1, L_layers=1, halt_max_steps=2,
               puzzle_emb_len=1, forward_dtype="float32")
    cfg.update(kw)
    return ArchConfig(**cfg)


def make_model(dataset, cls=TinyRecursiveModel, seed=0, **arch_kw):
    torch.manual_seed(seed)
    meta = load_metadata(dataset, "test")
    return cls(tiny_arch(**arch_kw), meta.seq_len, meta.vocab_size, meta.num_puzzle_identifiers)


class Oracle(TinyRecursiveModel):
    """Logits = one-hot labels; q_halt from `halt(batch)`; records the rows of every forward."""

    halt = staticmethod(lambda batch: torch.full(batch["labels"].shape[:1], -3.0))

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.rows_per_call: list[int] = []
        self.depth_per_call: list[list[int]] = []

    def inner(self, z_H, z_L, batch, logits=True):
        labels = batch["labels"].clamp(min=0).long()  # ignored label (-100) = PAD
        q = type(self).halt(batch).to(labels.device).float()
        self.rows_per_call.append(int(labels.shape[0]))
        # z_H counts the steps since the row's (re)start at its first position (a reset row comes back as
        # H_init) and holds the answer at the others, where `decode` reads it
        self.depth_per_call.append((z_H[:, 0, 0] - self.H_init[0]).round().long().tolist())
        z_H = z_H + 1
        z_H[:, self.prefix_len:, :self.vocab_size] = 10.0 * F.one_hot(labels, self.vocab_size).float()
        return z_H, z_L, self.decode(z_H) if logits else None, q, torch.zeros_like(q)

    def decode(self, z_H):
        return z_H[:, self.prefix_len:, :self.vocab_size]


def truths_of(dataset):
    raw = json.loads((dataset / "test_puzzles.json").read_text())
    return {(t, i): np.array(p["output"], dtype=np.uint8) for t, task in raw.items() for i, p in enumerate(task["test"])}


# ---------------------------------------------------------------------------


def test_random_model_end_to_end(dataset):
    model = make_model(dataset)
    model.train()
    result = evaluate(model, dataset, batch_size=16)
    assert model.training, "the caller's mode is restored"
    truths = truths_of(dataset)
    assert sorted(result.candidates) == sorted(truths)
    for s in truths:  # every test input received votes from all 9 augmented copies
        ranked = result.votes.ranked(s)
        assert ranked and sum(c["votes"] for c in ranked) == 9
    assert 0.0 <= result.arc_prize_score <= 1.0
    assert all(0.0 <= v <= 1.0 for v in result.pass_at_k_task_macro.values())
    assert sorted(result.pass_at_k_task_macro) == [1, 2, 5, 10, 100, 1000]
    assert 0.0 <= result.token_accuracy <= 1.0
    assert result.metrics.num_tasks == len(TINY_TASKS)
    p = result.predictions
    assert p.tokens.shape == (45, 900) and p.tokens.dtype == np.uint8
    assert (p.steps == 2).all() and p.forward_rows == 2 * 45
    t = result.timing
    assert t["seconds_model"] > 0 and t["examples_per_second"] > 0 and 0.0 <= t["share_outside_model"] < 1.0
    json.dumps(result.summary())


def test_oracle_scores_one(dataset):
    model = make_model(dataset, Oracle)
    result = evaluate(model, dataset, batch_size=7)
    assert result.arc_prize_score == 1.0
    assert result.pass_at_k_task_macro[1] == 1.0
    assert result.token_accuracy == 1.0
    assert result.well_formed == 1.0
    for s, truth in truths_of(dataset).items():
        best = result.candidates[s][0]
        assert best.shape == truth.shape and np.array_equal(best, truth)
        assert result.votes.ranked(s)[0]["votes"] == 9  # all augmented copies agree once un-augmented


def test_a_wrong_model_scores_zero(dataset):
    """The metric can fail: an oracle shifted by one colour solves nothing."""

    class Shifted(Oracle):
        def decode(self, z_H):
            logits = super().decode(z_H)
            return torch.cat([logits[..., :2], logits[..., 2:].roll(1, dims=-1)], -1)

    result = evaluate(make_model(dataset, Shifted), dataset, batch_size=64)
    assert result.arc_prize_score == 0.0 and result.pass_at_k_task_macro[1000] == 0.0


def test_early_exit_refills_a_fixed_batch_and_keeps_predictions(dataset, monkeypatch):
    model = make_model(dataset, Oracle)
    full = predict_split(model, dataset, batch_size=16)
    # 45 examples in 3 batches of 15 (as many batches as 16 takes, the last one as full as the others)
    assert model.rows_per_call == [15] * 6 and full.forward_rows == 2 * len(full)

    # rows of even puzzle identifiers say "halt" after step 1, odd ones do not
    monkeypatch.setattr(Oracle, "halt", staticmethod(
        lambda batch: torch.where(batch["puzzle_identifiers"] % 2 == 0, 3.0, -3.0)))
    model.rows_per_call.clear()
    model.depth_per_call.clear()
    early = predict_split(model, dataset, batch_size=16, early_exit=True)
    even = full.puzzle_identifier % 2 == 0
    assert 0 < even.sum() < len(full)
    # a halted row takes the next example at once: 15 rows per call while examples wait, then (CPU) the
    # stopped rows leave the batch; every row is forwarded once per step it runs
    rows = model.rows_per_call
    assert rows[0] == 15 and all(a >= b for a, b in zip(rows, rows[1:])) and rows[-1] < 15
    assert early.forward_rows == sum(model.rows_per_call) == len(full) + int((~even).sum())
    # every call runs a row on its example's first or second step: a continuing row was never restarted
    assert set(sum(model.depth_per_call, [])) <= {0, 1} and 1 in sum(model.depth_per_call, [])
    assert np.array_equal(early.steps, np.where(even, 1, 2))
    assert np.array_equal(early.tokens, full.tokens)
    assert np.array_equal(early.q_halt, np.where(even, 3.0, -3.0).astype(np.float32))

    # everybody halts at step 1: one call per batch
    monkeypatch.setattr(Oracle, "halt", staticmethod(lambda batch: torch.full(batch["labels"].shape[:1], 3.0)))
    model.rows_per_call.clear()
    all_halt = predict_split(model, dataset, batch_size=16, early_exit=True)
    assert all_halt.forward_rows == len(full) and (all_halt.steps == 1).all()  # 3 calls of 15 rows
    assert np.array_equal(all_halt.tokens, full.tokens)
    # without early exit the same oracle still runs every step
    model.rows_per_call.clear()
    assert predict_split(model, dataset, batch_size=16).forward_rows == 2 * len(full)
    # ... even when the model itself was built with early_exit=True (its carry marks q_halt > 0 rows halted)
    model.early_exit = True
    model.depth_per_call.clear()
    again = predict_split(model, dataset, batch_size=16)
    assert again.forward_rows == 2 * len(full) and (again.steps == 2).all()
    assert np.array_equal(again.tokens, full.tokens)
    assert all(set(d) == {0} for d in model.depth_per_call[0::2])
    assert all(set(d) == {1} for d in model.depth_per_call[1::2]), "a row was restarted instead of continued"


def test_first_halt_stops_the_trajectories_of_an_arc_evaluation_at_their_first_halt(dataset, monkeypatch):
    """On ARC every trajectory votes; `trajectory_select first_halt` is said to stop them at their first q_halt > 0,
    and did nothing (the same rows, the same votes as q_halt)."""
    from trm_kaggle.config import EvaluateConfig

    monkeypatch.setattr(Oracle, "halt", staticmethod(
        lambda batch: torch.where(batch["puzzle_identifiers"] % 2 == 0, 3.0, -3.0)))
    rows = {}
    for select in ("q_halt", "first_halt"):
        cfg = EvaluateConfig(batch_size=16, trajectories=2, trajectory_noise=0.1, trajectory_select=select)
        result = evaluate(make_model(dataset, Oracle), dataset, cfg)
        rows[select] = result.predictions.forward_rows
        assert result.predictions.trajectories == 2
    assert rows["first_halt"] < rows["q_halt"], rows


def test_early_exit_on_a_real_model_equals_the_full_runs_row_by_row(dataset):
    """Rows leaving after step 1 carry the 1-step prediction, the others the 2-step one."""
    model = make_model(dataset, seed=1, H_cycles=1)
    with torch.no_grad():
        model.q_head.weight.normal_(0.0, 1.0)
    one = predict_split(model, dataset, batch_size=16, max_steps=1)
    with torch.no_grad():  # centre the step-1 q_halt so that about half the rows halt
        model.q_head.bias[0] -= float(np.median(one.q_halt)) + 1e-3
    one = predict_split(model, dataset, batch_size=16, max_steps=1)
    two = predict_split(model, dataset, batch_size=16, max_steps=2)
    early = predict_split(model, dataset, batch_size=16, early_exit=True)
    halts = one.q_halt > 0
    assert 0 < halts.sum() < len(one)
    assert np.array_equal(early.steps, np.where(halts, 1, 2))
    assert early.forward_rows == len(one) + int((~halts).sum())  # each row forwarded once per step it runs
    assert np.array_equal(early.tokens[halts], one.tokens[halts])
    assert np.array_equal(early.tokens[~halts], two.tokens[~halts])
    assert not np.array_equal(one.tokens, two.tokens)  # the second step changes something


def test_pooling_only_on_request(dataset):
    model = make_model(dataset, Oracle)
    r1 = evaluate(model, dataset, batch_size=64)
    r2 = evaluate(model, dataset, batch_size=64)
    s = ("12997ef3", 1)
    assert r2.votes.ranked(s)[0]["votes"] == 9 and not r2.pooled
    pooled = evaluate(model, dataset, batch_size=64, pool_with=r1.table)
    assert pooled.votes.ranked(s)[0]["votes"] == 18 and pooled.pooled
    assert len(r1.table) == 45  # r1's votes are unchanged


def test_test_puzzles_disagreeing_with_the_split_is_an_error(dataset, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(dataset, bad)
    raw = json.loads((bad / "test_puzzles.json").read_text())
    grid = raw["e872b94a"]["test"][0]["input"]
    grid[0][0] = (grid[0][0] + 1) % 10
    (bad / "test_puzzles.json").write_text(json.dumps(raw))
    with pytest.raises(DataError, match="e872b94a"):
        evaluate(make_model(bad, Oracle), bad, batch_size=64)


def test_report_files(dataset, tmp_path):
    result = evaluate(make_model(dataset, Oracle), dataset, batch_size=64)
    paths = write_report(result, tmp_path / "rep", tasks=["12997ef3"])
    report = json.loads(paths["json"].read_text())
    assert report["summary"]["arc_prize_score"] == 1.0
    assert sorted(report["tasks"]) == sorted(TINY_TASKS)
    t = report["tasks"]["12997ef3"]["test"]
    assert [x["test_index"] for x in t] == [0, 1] and all(x["solved"] for x in t)
    assert t[0]["top"][0]["votes"] == 9 and t[0]["top"][0]["correct"] and t[0]["distinct_candidates"] == 1
    md = paths["markdown"].read_text()
    assert "ARC Prize score" in md and "token_accuracy" in md and "12997ef3" in md
    # every output solved: the intervals and the category rows say so
    n = report["summary"]["num_test_outputs"]
    assert report["summary"]["arc_prize_score_ci95"] == pytest.approx(list(wilson_interval(n, n)))
    b = report["summary"]["breakdown"]
    assert b["same shape"]["test_outputs"] + b["reshaped"]["test_outputs"] == n
    assert sum(c["test_outputs"] for k, c in b.items() if k.startswith("largest side")) == n
    assert all(c["solved"] == c["test_outputs"] for c in b.values())
    assert "| same shape |" in md and "95 % CI" in md
    png = tmp_path / "rep" / "pictures" / "12997ef3.png"
    assert png.read_bytes()[:8] == PNG_MAGIC
    assert not (tmp_path / "rep" / "pictures" / "05a7bcf2.png").exists()
    # default: the first N tasks
    paths = write_report(result, tmp_path / "rep2", first_n=2)
    assert len([k for k in paths if k.startswith("picture:")]) == 2
    with pytest.raises(Exception, match="nope"):
        write_report(result, tmp_path / "rep3", tasks=["nope"])


def test_a_report_stopped_midway_leaves_the_old_one_whole(dataset, tmp_path, monkeypatch):
    """Its files were replaced one at a time: a full disk (or a Ctrl-C) after report.json left a report.json of
    the new evaluation beside the old one's report.md. The folder is replaced as one now."""
    import errno

    import trm_kaggle.evaluate.report as R

    result = evaluate(make_model(dataset, Oracle), dataset, batch_size=64)
    write_report(result, tmp_path / "rep", tasks=["12997ef3"])
    before = {p.name: p.read_bytes() for p in (tmp_path / "rep").rglob("*") if p.is_file()}
    real = R.atomic_write_text

    def full(path, text, **kw):
        if Path(path).name == "report.md":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, text, **kw)

    monkeypatch.setattr(R, "atomic_write_text", full)
    with pytest.raises(OSError):
        write_report(result, tmp_path / "rep", first_n=2)  # other pictures: a mix would show
    assert {p.name: p.read_bytes() for p in (tmp_path / "rep").rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep"]  # no partial folder left beside it


def test_command_line_on_an_export(dataset, tmp_path, capsys):
    from trm_kaggle.cli import main
    from trm_kaggle.model.export import export_inference

    model = make_model(dataset, H_cycles=1)
    export_inference(tmp_path / "export", model, arch=model.arch, seq_len=model.seq_len, vocab_size=model.vocab_size)
    rc = main(["evaluate", "--weights", str(tmp_path / "export"), "--data", str(dataset), "--report-dir",
               str(tmp_path / "rep"), "--tasks", "e872b94a,1a2e2828", "--device", "cpu", "--batch-size", "32",
               "--early-exit", "--no-progress"])
    assert rc == 0
    out = capsys.readouterr().out
    assert out.startswith("ARC Prize score (micro-average over ")
    assert "per-task macro pass@K" in out and "pass@2 " in out
    assert "token_accuracy (per token over all augmented copies; NOT a solve rate)" in out
    assert sorted(p.name for p in (tmp_path / "rep" / "pictures").iterdir()) == ["1a2e2828.png", "e872b94a.png"]
    assert main(["evaluate", "--weights", str(tmp_path / "missing"), "--data", str(dataset)]) == 2


def test_a_report_records_its_weights_and_is_never_written_over_another_exports(dataset, tmp_path, capsys):
    """report.json and report.md name the weights (path, digest of the tensors); a --report-dir holding the report
    of other weights is refused before any inference (nothing changes); the same weights update their own."""
    from cli_helpers import one_error_line
    from trm_kaggle.cli import main
    from trm_kaggle.model.export import export_digest, export_inference

    for name, seed in (("a", 0), ("b", 1)):
        model = make_model(dataset, seed=seed)
        export_inference(tmp_path / name, model, arch=model.arch, seq_len=model.seq_len, vocab_size=model.vocab_size)
    digest = export_digest(tmp_path / "a")
    assert digest != export_digest(tmp_path / "b") and len(digest) == 64

    def evaluate_into(weights: str) -> int:
        return main(["evaluate", "--weights", str(tmp_path / weights), "--data", str(dataset), "--report-dir",
                     str(tmp_path / "rep"), "--max-tasks", "1", "--no-pictures", "--device", "cpu", "--no-progress"])

    assert evaluate_into("a") == 0
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert report["weights"] == {"path": str(tmp_path / "a"), "sha256": digest, "from_report": "../a"}
    assert f"Weights: `{tmp_path / 'a'}` (sha256 of the tensors `{digest}`)" in (tmp_path / "rep" / "report.md").read_text()
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "rep").iterdir()}
    capsys.readouterr()
    line = one_error_line(capsys, evaluate_into("b"))
    assert f"holds the report of other weights ({tmp_path / 'a'})" in line and "predict" not in line
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "rep").iterdir()} == before
    shutil.copytree(tmp_path / "a", tmp_path / "copy-of-a")  # the same tensors elsewhere: the same weights
    assert evaluate_into("copy-of-a") == 0 and evaluate_into("a") == 0


@pytest.mark.parametrize("dtype, expected", [("auto", torch.float32), ("export", torch.bfloat16),
                                             ("float16", torch.float16)])
def test_evaluation_runs_in_auto_dtype_whatever_the_export_was_trained_in(dataset, tmp_path, monkeypatch, dtype,
                                                                         expected):
    """The default ("auto", the command's too) decides per device: float32 for this narrow model on a CPU, though
    the export was trained in bfloat16; "export" keeps the export's dtype."""
    from trm_kaggle.cli import build_parser
    from trm_kaggle.evaluate.run import evaluate_export
    from trm_kaggle.model.export import export_inference

    model = make_model(dataset, forward_dtype="bfloat16")
    export_inference(tmp_path / "export", model, arch=model.arch, seq_len=model.seq_len, vocab_size=model.vocab_size)

    class Ran(Exception):
        pass

    def evaluate_in(model, *args, **kwargs):
        raise Ran(model.compute_dtype("cpu"))

    monkeypatch.setattr("trm_kaggle.evaluate.run.evaluate", evaluate_in)
    with pytest.raises(Ran) as ran:
        evaluate_export(str(tmp_path / "export"), str(dataset), device="cpu", dtype=dtype, progress=False)
    assert ran.value.args[0] == expected
    assert build_parser().parse_args(["evaluate", "--weights", "w", "--data", "d"]).dtype == "auto"


def test_command_line_pools_saved_votes_like_the_api(dataset, tmp_path, capsys):
    """`evaluate --save-votes` then `--pool-with`: upstream's aggregated pass@K over two checkpoints."""
    from trm_kaggle.cli import main
    from trm_kaggle.evaluate.vote import VoteTable
    from trm_kaggle.model.export import export_inference, load_model_for_dataset

    for name, seed in (("early", 1), ("late", 2)):
        model = make_model(dataset, seed=seed)
        export_inference(tmp_path / name, model, arch=model.arch, seq_len=model.seq_len, vocab_size=model.vocab_size)
    common = ["--data", str(dataset), "--device", "cpu", "--batch-size", "32", "--no-progress"]
    assert main(["evaluate", "--weights", str(tmp_path / "early"), "--save-votes", str(tmp_path / "v1.npz")]
                + common) == 0
    assert main(["evaluate", "--weights", str(tmp_path / "late"), "--pool-with", str(tmp_path / "v1.npz"),
                 "--save-votes", str(tmp_path / "v2.npz")] + common) == 0
    out = capsys.readouterr().out
    assert "POOLED with 1 earlier evaluation" in out
    # the same numbers through the Python API
    early = evaluate(load_model_for_dataset(tmp_path / "early", dataset, "cpu")[0], dataset, batch_size=32)
    late = evaluate(load_model_for_dataset(tmp_path / "late", dataset, "cpu")[0], dataset, batch_size=32,
                    pool_with=early.table)
    assert f"pass@1 {late.pass_at_k_task_macro[1]:.4f}" in out.split("POOLED")[1]
    assert late.votes.ranked(("12997ef3", 1))[0]["votes"] <= 18 and len(late.table) == len(early.table)
    # --save-votes keeps this evaluation's votes only, never the pooled ones
    saved = VoteTable.load(tmp_path / "v2.npz")
    assert len(saved) == len(early.table) and np.array_equal(saved.keys, late.table.keys)
    (tmp_path / "junk.npz").write_text("junk")
    assert main(["evaluate", "--weights", str(tmp_path / "late"), "--pool-with", str(tmp_path / "junk.npz")]
                + common) == 2
    assert "junk.npz: not a votes file" in capsys.readouterr().err
    # votes of another canvas: VoteTable.merge's traceback once came after the whole inference
    VoteTable.from_grids([(("12997ef3", 0), np.ones((2, 2), np.uint8), 0.0)], side=10).save(tmp_path / "v10.npz")
    assert main(["evaluate", "--weights", str(tmp_path / "late"), "--pool-with", str(tmp_path / "v10.npz")]
                + common) == 2
    assert "v10.npz: votes on a 10x10 canvas" in capsys.readouterr().err


@pytest.mark.slow  # inductor's C++ compile, twice
@pytest.mark.skipif(not any(shutil.which(c) for c in ("c++", "g++", "clang++")),
                    reason="torch.compile on CPU needs a C++ compiler")
def test_compiled_model_gives_the_same_evaluation(dataset, tmp_path, capsys):
    """`evaluate --compile` (apply_compile) votes for the same candidates as the eager model."""
    from trm_kaggle.cli import main
    from trm_kaggle.model.compiling import apply_compile
    from trm_kaggle.model.export import export_inference

    torch._dynamo.reset()
    model = make_model(dataset, H_cycles=2)
    eager = evaluate(model, dataset, batch_size=32, device="cpu")
    apply_compile(model, "on", "cpu")
    compiled = evaluate(model, dataset, batch_size=32, device="cpu")
    np.testing.assert_allclose(compiled.predictions.q_halt, eager.predictions.q_halt, atol=1e-4)
    assert (compiled.predictions.tokens != eager.predictions.tokens).mean() < 1e-3  # float32 rounding only
    assert compiled.metrics == eager.metrics
    export_inference(tmp_path / "export", make_model(dataset, H_cycles=2), arch=model.arch, seq_len=model.seq_len,
                     vocab_size=model.vocab_size)
    assert main(["evaluate", "--weights", str(tmp_path / "export"), "--data", str(dataset), "--device", "cpu",
                 "--compile", "--no-progress"]) == 0
    assert capsys.readouterr().out.startswith("ARC Prize score (micro-average over ")


def test_task_id_modes_from_the_command_line(dataset, tmp_path, capsys):
    """`evaluate --task-ids own blank random mean` on an export that kept its trained table."""
    from trm_kaggle.cli import main
    from trm_kaggle.model.export import apply_task_ids, export_inference

    model = make_model(dataset, H_cycles=1)
    with torch.no_grad():  # distinct trained rows, so that which row a puzzle gets matters
        model.puzzle_emb.weights.copy_(torch.randn(model.puzzle_emb.weights.shape, generator=torch.Generator()
                                                   .manual_seed(0)) * 3)
    export_inference(tmp_path / "full", model, arch=model.arch, seq_len=model.seq_len, vocab_size=model.vocab_size)
    common = ["--data", str(dataset), "--device", "cpu", "--batch-size", "64", "--max-steps", "1", "--no-progress"]
    assert main(["evaluate", "--weights", str(tmp_path / "full"), "--task-ids", "own", "blank", "random", "mean"]
                + common) == 0
    out = capsys.readouterr().out
    for mode in ("own", "blank", "random", "mean"):
        assert f"== task ids: {mode}\nARC Prize score" in out
        assert any(line.startswith(f"| {mode} | ") for line in out.splitlines())
    assert "| task ids | ARC Prize score (95 % CI) |" in out
    # the modes change what the model predicts (same weights, other rows)
    own = evaluate(model, dataset, batch_size=64, max_steps=1).predictions.tokens
    apply_task_ids(model, "blank")
    assert (evaluate(model, dataset, batch_size=64, max_steps=1).predictions.tokens != own).any()
    # an export with the mean row alone cannot tell the modes apart, and says so
    export_inference(tmp_path / "mean", model, arch=model.arch, seq_len=model.seq_len, vocab_size=model.vocab_size,
                     mean_embedding=True)
    assert main(["evaluate", "--weights", str(tmp_path / "mean"), "--task-ids", "blank", "mean"] + common) == 0
    printed = capsys.readouterr()
    assert "own, blank, random and mean give the same answers" in printed.err and "evaluating once" in printed.err
    assert printed.out.count("ARC Prize score (micro") == 1 and "== task ids: blank/mean\n" in printed.out
    assert main(["evaluate", "--weights", str(tmp_path / "full"), "--task-ids", "own", "mean", "--report-dir",
                 str(tmp_path / "r")] + common) == 2
    assert "take one --task-ids mode at a time" in capsys.readouterr().err


# ---------------------------------------------------------------------------
# Task ids are data (issue 10): refused before inference when illegal, encoded when they name a file
# ---------------------------------------------------------------------------


def _renamed(dataset, tmp_path, new_id: str):
    """A copy of the dataset whose task 12997ef3 is called `new_id` (in test_puzzles.json and identifiers.json)."""
    copy = tmp_path / "renamed"
    shutil.copytree(dataset, copy)
    for name in ("test_puzzles.json", "identifiers.json"):
        text = (copy / name).read_text()
        (copy / name).write_text(text.replace('"12997ef3', json.dumps(new_id)[:-1]))
    return copy


@pytest.mark.parametrize("bad_id", ["../../outside", "/etc/evil", "nul\x00id", "z" * 300])
def test_illegal_ids_in_test_puzzles_stop_before_inference(dataset, tmp_path, monkeypatch, bad_id):
    import trm_kaggle.evaluate.pipeline as P

    monkeypatch.setattr(P, "predict_split", lambda *a, **k: pytest.fail("inference must not start"))
    with pytest.raises(DataError, match="task id"):
        evaluate(make_model(dataset, Oracle), _renamed(dataset, tmp_path, bad_id), batch_size=64)


def test_pictures_of_odd_ids_stay_in_their_folder(dataset, tmp_path):
    odd = ".hidden %2F-id"
    data = _renamed(dataset, tmp_path, odd)
    result = evaluate(make_model(data, Oracle), data, batch_size=64)
    paths = write_report(result, tmp_path / "rep", tasks=[odd])
    assert [p.name for p in (tmp_path / "rep" / "pictures").iterdir()] == ["%2Ehidden%20%252F-id.png"]
    assert paths[f"picture:{odd}"].read_bytes()[:8] == PNG_MAGIC
    assert json.loads(paths["json"].read_text())["tasks"][odd]["test"][0]["solved"]


def test_max_tasks_predicts_and_scores_the_first_tasks_alone(dataset):
    """--max-tasks: only the first N tasks' examples are predicted; their votes equal the full run's."""
    model = make_model(dataset, seed=3)
    full = evaluate(model, dataset, batch_size=16)
    part = evaluate(model, dataset, batch_size=16, max_tasks=2)
    first_two = list(full.test_set.task_ids)[:2]
    assert part.test_set.task_ids == first_two
    assert sorted(part.candidates) == sorted(s for s in full.candidates if s[0] in first_two)
    kept = np.isin(full.predictions.puzzle_index, part.predictions.puzzle_index)
    assert len(part.predictions) == int(kept.sum()) < len(full.predictions)
    np.testing.assert_array_equal(part.predictions.tokens, full.predictions.tokens[kept])
    for s in part.candidates:
        assert [g.tolist() for g in part.candidates[s]] == [g.tolist() for g in full.candidates[s]]
    assert part.summary()["num_examples"] == len(part.predictions)
    with pytest.raises(Exception, match="max_tasks"):
        evaluate(model, dataset, batch_size=16, max_tasks=0)


def test_predict_split_on_picked_examples_matches_the_whole_split(dataset):
    model = make_model(dataset, seed=4)
    whole = predict_split(model, dataset, batch_size=5)
    picked = np.array([0, 3, 4, 9, len(whole) - 1])
    part = predict_split(model, dataset, batch_size=5, examples=picked, keep_logits=True)
    assert whole.logits is None and part.logits.shape == part.tokens.shape + (model.vocab_size,)
    np.testing.assert_array_equal(part.logits.argmax(-1), part.tokens)  # each example's own row of logits
    np.testing.assert_array_equal(part.tokens, whole.tokens[picked])
    np.testing.assert_array_equal(part.puzzle_index, whole.puzzle_index[picked])
    np.testing.assert_allclose(part.q_halt, whole.q_halt[picked], rtol=1e-5, atol=1e-6)


def test_a_passed_deadline_still_predicts_the_examples_always_asked_for(dataset):
    """A task whose time ran out still votes with its first (un-augmented) copies; nothing else runs."""
    model = make_model(dataset, seed=5)
    whole = predict_split(model, dataset, batch_size=4)
    late = predict_split(model, dataset, batch_size=4, deadline=0.0, always=6, keep_logits=True)
    assert (late.steps[:6] >= 0).all() and (late.steps[8:] == -1).all()  # batches of 4: the second one ends at 8
    assert (late.logits[8:] == 0).all() and (late.logits[:6] != 0).any(axis=(1, 2)).all()  # zero: not predicted
    np.testing.assert_array_equal(late.tokens[:6], whole.tokens[:6])
    assert (predict_split(model, dataset, batch_size=4, deadline=0.0).steps == -1).all()
    # ... until a later limit of their own (a worker's end): thousands of test inputs must not run past it
    assert (predict_split(model, dataset, batch_size=4, deadline=0.0, always=6, always_until=0.0).steps == -1).all()


@pytest.mark.parametrize("entry", ["evaluate", "predict_split"])
def test_a_device_this_machine_lacks_is_refused_in_one_line_before_any_work(dataset, entry):
    """The Python entry points put the model on the device they are given (`hardware.place_model`); one this
    machine lacks is one line, not a device-mismatch error from deep inside a model call."""
    from trm_kaggle.errors import TRMError

    model = make_model(dataset)
    call = {"evaluate": lambda: evaluate(model, dataset, device="cuda:99"),
            "predict_split": lambda: predict_split(model, dataset, device="cuda:99")}[entry]
    with pytest.raises(TRMError, match=r"^device=cuda:99 requested but this machine has \w+ CUDA device\(s\)$"):
        call()
    assert next(model.parameters()).device.type == "cpu"  # left where it was


def test_chosen_tasks_take_an_id_holding_a_comma_whole():
    from trm_kaggle.evaluate import chosen_tasks

    known = {"x,y", "b", "c"}
    assert chosen_tasks(["x,y"], known) == ["x,y"]  # an id of the split, taken whole
    assert chosen_tasks(["b,c"], known) == ["b", "c"]  # not an id: the older comma-separated form
    assert chosen_tasks(["x,y", "b", "b,c,", ""], known) == ["x,y", "b", "c"]
    assert chosen_tasks(["x"], known) == ["x"]  # an unknown id stays, for the caller to name
    assert chosen_tasks("x,y", known) == ["x,y"] and chosen_tasks("ab,c", known) == ["ab", "c"]  # text: not letters


def test_chosen_tasks_split_one_argument_at_commas_and_white_space():
    """`--tasks "28a6681f, b6f77b65"` (or "a b" in one quoted argument) kept the space: ' b6f77b65' was refused as
    not in the test split, and the refusal listed b6f77b65 among the split's tasks. Split now, as evaluation.md
    says (ids apart by spaces or commas); a refused id is quoted and escaped, so what was typed shows."""
    from trm_kaggle.evaluate import chosen_tasks, tasks_problem

    known = ["a", "b", "c d"]  # in the split's order
    assert chosen_tasks(["a, b"], known) == ["a", "b"] and chosen_tasks([" b"], known) == ["b"]
    assert chosen_tasks(["a b\t", "c d"], known) == ["a", "b", "c d"]  # an id of the split holding a space: whole
    assert tasks_problem(["a, b"], known, "ds", "--tasks") is None
    assert tasks_problem(["a,\x1b[2J"], known, "ds", "--tasks") == (
        "--tasks: '\\x1b[2J' not in the test split of ds (3 tasks, e.g. 'a', 'b', 'c d')")


def test_evaluate_draws_a_task_whose_id_holds_a_comma(tmp_path, capsys):
    """build-arc takes a task id holding a comma; `evaluate --tasks` can choose it (it was split into 'x' and 'y',
    both refused as unknown, while the refusal listed 'x,y' among the split's tasks)."""
    from trm_kaggle.cli import main
    from trm_kaggle.model.export import export_inference

    pair = {"train": [{"input": [[1, 2], [3, 4]], "output": [[4, 3], [2, 1]]}], "test": [{"input": [[1, 2], [3, 4]]}]}
    answer = [[[4, 3], [2, 1]]]
    for subset, ids in (("tr", ["a"]), ("ev", ["x,y", "b"])):
        (tmp_path / f"p_{subset}_challenges.json").write_text(json.dumps({i: pair for i in ids}))
        (tmp_path / f"p_{subset}_solutions.json").write_text(json.dumps({i: answer for i in ids}))
    assert main(["build-arc", "--input-file-prefix", str(tmp_path / "p"), "--subsets", "tr", "ev", "--test-set-name",
                 "ev", "--num-aug", "1", "--workers", "1", "--no-progress", "--output-dir", str(tmp_path / "ds")]) == 0
    model = make_model(tmp_path / "ds", H_cycles=1)
    export_inference(tmp_path / "export", model, arch=model.arch, seq_len=model.seq_len, vocab_size=model.vocab_size)
    common = ["evaluate", "--weights", str(tmp_path / "export"), "--data", str(tmp_path / "ds"), "--device", "cpu",
              "--no-progress"]
    assert main([*common, "--report-dir", str(tmp_path / "rep"), "--tasks", "x,y"]) == 0
    assert len(list((tmp_path / "rep" / "pictures").iterdir())) == 1
    assert main([*common, "--report-dir", str(tmp_path / "rep2"), "--tasks", "x,y", "b"]) == 0
    assert len(list((tmp_path / "rep2" / "pictures").iterdir())) == 2
    capsys.readouterr()
    assert main([*common, "--report-dir", str(tmp_path / "rep3"), "--tasks", "x"]) == 2
    err = capsys.readouterr().err
    assert "--tasks: 'x' not in the test split" in err and not (tmp_path / "rep3").exists()
    assert main([*common, "--report-dir", str(tmp_path / "rep4"), "--tasks", ","]) == 2
    assert "--tasks names no task" in capsys.readouterr().err


def test_a_dataset_of_a_larger_vocabulary_than_the_model_is_refused_before_inference():
    """An export of vocabulary 12 on a code-repair dataset of 97 tokens (the same seq_len) was an IndexError traceback
    from the embedding, exit 1, in `evaluate` and `evaluate-repair`."""
    from types import SimpleNamespace

    from trm_kaggle.errors import TRMError
    from trm_kaggle.evaluate.predict import check_model_fits

    model = SimpleNamespace(num_puzzle_identifiers=10, seq_len=144, vocab_size=12)
    with pytest.raises(TRMError, match="the model was built for a vocabulary of 12 tokens, cr has 97"):
        check_model_fits(model, "cr", SimpleNamespace(num_puzzle_identifiers=1, seq_len=144, vocab_size=97))
    check_model_fits(model, "ds", SimpleNamespace(num_puzzle_identifiers=1, seq_len=144, vocab_size=12))


@pytest.mark.parametrize("arguments, words", [
    (dict(ks=[float("nan")]), "ks[0]=nan: expected a whole number from 1"),  # once numpy's int() after the work
    (dict(ks=[0]), "ks[0]=0: expected a whole number from 1"),  # once "pass@0": 0.0
    (dict(ks=[True]), "ks[0]=True"),
    (dict(ks=[2**63]), "ks[0]="),
    (dict(always=-1), "always=-1: expected a whole number from 0"),
    (dict(deadline=float("nan")), "deadline=nan: expected a finite number of seconds, or None"),
    (dict(always_until=float("inf")), "always_until=inf"),
])
def test_the_library_calls_arguments_are_checked_before_any_work(dataset, monkeypatch, arguments, words):
    model = make_model(dataset)
    monkeypatch.setattr("trm_kaggle.evaluate.pipeline.predict_split", lambda *a, **k: pytest.fail("predicted"))
    with pytest.raises(ValueError, match=re.escape(words)):
        evaluate(model, dataset, batch_size=16, **arguments)


@pytest.mark.parametrize("arguments, words", [
    (dict(max_steps=2**31), "max_steps=2147483648: expected a whole number from 1 to 4,096"),  # wrapped round to 1
    (dict(max_steps=float("nan")), "max_steps=nan"), (dict(max_steps=1.5), "max_steps=1.5"),
    (dict(deadline=float("nan")), "deadline=nan: expected a finite number of seconds"),  # predicted nothing
    (dict(always=2, always_until=float("nan")), "always_until=nan"), (dict(always=float("nan")), "always=nan"),
    (dict(batch_size=float("nan")), "batch_size=nan"), (dict(batch_size=2**63), "batch_size="),
    (dict(trajectories=-1, noise=0.1), "trajectories=-1"), (dict(trajectories=1.5), "trajectories=1.5"),
    (dict(noise=float("inf")), "noise=inf: expected a number from 0 to 1"), (dict(seed=-1), "seed=-1"),
    (dict(prefetch=float("nan")), "prefetch=nan"), (dict(prefetch=-1), "prefetch=-1"),
])
def test_predict_splits_counts_and_times_are_checked_before_any_work(dataset, monkeypatch, arguments, words):
    """`predict_split(max_steps=2**31)` ran one ACT step (a fixed-width count wrapped round), `deadline=nan` and
    `always_until=nan` predicted nothing, and the other counts failed in numpy's or Python's words."""
    model = make_model(dataset)
    monkeypatch.setattr("trm_kaggle.evaluate.predict.PuzzleLoader", lambda *a, **k: pytest.fail("loaded"))
    with pytest.raises(ValueError, match=re.escape(words)):
        predict_split(model, dataset, **arguments)


@pytest.mark.parametrize("count", [0, -1, float("nan"), 1.5, True])
def test_demo_accuracys_count_is_checked_before_any_work(dataset, count):
    """`demo_accuracy(max_examples=-1)` was numpy's "Number of samples, -1, must be non-negative", 0 blamed
    "slots", NaN a TypeError."""
    from trm_kaggle.solve import demo_accuracy

    with pytest.raises(ValueError, match=r"^max_examples=.*: expected a whole number from 1"):
        demo_accuracy(make_model(dataset), Path(dataset), torch.device("cpu"), max_examples=count)


def test_demo_accuracy_on_a_dataset_of_another_length_is_one_line(dataset, tmp_path):
    """A model for 900 cells on a 4x4 Sudoku: torch's "The size of tensor a (902) must match ..." """
    from trm_kaggle.config import SudokuBuildConfig
    from trm_kaggle.data import build_sudoku
    from trm_kaggle.solve import demo_accuracy

    build_sudoku(SudokuBuildConfig(output_dir=str(tmp_path / "s4"), size=4, num_train=4, num_test=2, progress=False))
    with pytest.raises(TRMError, match=r"the model was built for seq_len \d+, .*s4 has 16"):
        demo_accuracy(make_model(dataset), tmp_path / "s4", torch.device("cpu"))


@pytest.mark.parametrize("where", ["/dev/trm-votes-probe.npz", "{tmp}/f/v.npz", "{tmp}/f/rep"])
def test_evaluate_exports_outputs_are_checked_before_any_inference(dataset, tmp_path, monkeypatch, where):
    """`evaluate_export(save_votes="/dev/x.npz")` wrote its votes into /dev; under a file it was a raw
    FileExistsError after the whole inference."""
    from trm_kaggle.evaluate import evaluate_export
    from trm_kaggle.model.export import export_inference

    model = make_model(dataset, H_cycles=1)
    export_inference(tmp_path / "export", model, arch=model.arch, seq_len=model.seq_len, vocab_size=model.vocab_size)
    (tmp_path / "f").write_text("a file")
    monkeypatch.setattr("trm_kaggle.evaluate.run.load_model_for_dataset", lambda *a, **k: pytest.fail("loaded"))
    path = where.format(tmp=tmp_path)
    given = dict(report_dir=path) if path.endswith("rep") else dict(save_votes=path)
    with pytest.raises(TRMError, match=f"^{next(iter(given))} "):
        evaluate_export(str(tmp_path / "export"), str(dataset), device="cpu", out=lambda _: None, **given)
    assert not os.path.lexists("/dev/trm-votes-probe.npz")


def test_a_dataset_path_holding_a_nul_byte_is_named(dataset):
    """`evaluate(model, "a\\x00b")` was Python's bare "embedded null byte", naming no path."""
    with pytest.raises(TRMError, match="path holds a NUL byte"):
        evaluate(make_model(dataset), "a\x00b")


@pytest.mark.parametrize("arguments, words", [(dict(attempts=-1), "attempts=-1"), (dict(attempts=0), "attempts=0"),
                                              (dict(attempts=True), "attempts=True"), (dict(first_n=-1), "first_n=-1"),
                                              (dict(top=0), "top=0"), (dict(first_n=float("nan")), "first_n=nan")])
def test_a_reports_counts_are_checked_before_anything_is_written(dataset, tmp_path, arguments, words):
    """`write_report(result, out, attempts=-1)` was an IndexError while drawing the first picture."""
    result = evaluate(make_model(dataset, Oracle), dataset, batch_size=64)
    with pytest.raises(ValueError, match=re.escape(words)):
        write_report(result, tmp_path / "rep", **arguments)
    assert not (tmp_path / "rep").exists()


def test_votes_below_a_dangling_link_are_refused_before_any_inference(dataset, tmp_path, monkeypatch):
    """`evaluate_export(save_votes="dang/v.npz")`, dang a link to nothing: the whole evaluation ran, then a raw
    FileExistsError, the votes lost."""
    from trm_kaggle.evaluate import evaluate_export
    from trm_kaggle.model.export import export_inference

    model = make_model(dataset, H_cycles=1)
    export_inference(tmp_path / "export", model, arch=model.arch, seq_len=model.seq_len, vocab_size=model.vocab_size)
    (tmp_path / "dang").symlink_to(tmp_path / "nowhere")
    monkeypatch.setattr("trm_kaggle.evaluate.run.load_model_for_dataset", lambda *a, **k: pytest.fail("loaded"))
    with pytest.raises(TRMError, match=f"save_votes .*: the folder {tmp_path / 'dang'} is a symbolic link to "):
        evaluate_export(str(tmp_path / "export"), str(dataset), save_votes=str(tmp_path / "dang" / "v.npz"),
                        device="cpu", out=lambda _: None)


def _tiny_export(dataset, tmp_path, monkeypatch):
    """An export of a tiny model, and no inference allowed: a refusal must come before the model is loaded."""
    from trm_kaggle.model.export import export_inference

    model = make_model(dataset, H_cycles=1)
    export_inference(tmp_path / "export", model, arch=model.arch, seq_len=model.seq_len, vocab_size=model.vocab_size)
    monkeypatch.setattr("trm_kaggle.evaluate.run.load_model_for_dataset", lambda *a, **k: pytest.fail("loaded"))
    return str(tmp_path / "export")


@pytest.mark.parametrize("report", [True, False])
@pytest.mark.parametrize("given, error, words", [
    (dict(first=-1), ValueError, "first=-1: expected a whole number from 0 to 10,000"),
    (dict(first=10**21), ValueError, "first=1000000000000000000000: expected a whole number from 0 to 10,000"),
    (dict(first=float("nan")), ValueError, "first=nan"),
    (dict(tasks=["nope"]), TRMError, "tasks: 'nope' not in the test split of "),
    (dict(tasks=["e872b94a", "nope,nix"]), TRMError, "tasks: 'nope', 'nix' not in the test split of "),
    (dict(tasks=[","]), TRMError, "tasks names no task"),
])
def test_evaluate_exports_first_and_tasks_are_checked_before_any_inference(dataset, tmp_path, monkeypatch, report,
                                                                            given, error, words):
    """`evaluate_export(first=-1)` (or `tasks=['nope']`) predicted the whole test set, then failed in write_report
    naming its `first_n`; without a report the values passed silently. Checked first now, with the bound and the
    words of `evaluate --first/--tasks`, whether a report is asked for or not."""
    from trm_kaggle.evaluate import evaluate_export

    weights = _tiny_export(dataset, tmp_path, monkeypatch)
    where = dict(report_dir=str(tmp_path / "rep")) if report else {}
    with pytest.raises(error, match="^" + re.escape(words)):
        evaluate_export(weights, str(dataset), device="cpu", out=lambda _: None, **where, **given)
    assert not (tmp_path / "rep").exists()


def test_evaluate_exports_first_has_the_commands_bound(dataset, tmp_path, capsys):
    """One bound for `evaluate --first` and the library's `first`/`first_n`: 10,000 was the command's, 1,000,000
    the library's."""
    from cli_helpers import one_error_line
    from trm_kaggle.cli import main
    from trm_kaggle.evaluate import MAX_DRAWN

    rc = main(["evaluate", "--weights", "w", "--data", str(dataset), "--report-dir", str(tmp_path / "rep"),
               "--first", str(MAX_DRAWN + 1)])
    assert f"--first {MAX_DRAWN + 1}: must be from 0 to {MAX_DRAWN}" in one_error_line(capsys, rc)
    result = evaluate(make_model(dataset, Oracle), dataset, batch_size=64)
    with pytest.raises(ValueError, match=f"first_n={MAX_DRAWN + 1}: expected a whole number from 0 to 10,000"):
        write_report(result, tmp_path / "rep", first_n=MAX_DRAWN + 1)


def test_a_votes_file_pooled_twice_is_refused_before_any_inference(dataset, tmp_path, monkeypatch, capsys):
    """`evaluate_export(pool_with=['v.npz', 'v.npz'])` and `evaluate --pool-with v.npz v.npz` counted the same
    votes twice ("POOLED with 2 earlier evaluations"); `./v.npz`, a link to it, or a hard link is the same file."""
    from cli_helpers import one_error_line
    from trm_kaggle.cli import main
    from trm_kaggle.evaluate import evaluate_export
    from trm_kaggle.evaluate.vote import VoteTable

    weights = _tiny_export(dataset, tmp_path, monkeypatch)
    side = int(np.sqrt(load_metadata(dataset, "test").seq_len))
    VoteTable.from_grids([(("12997ef3", 0), np.ones((2, 2), np.uint8), 0.0)], side=side).save(tmp_path / "v.npz")
    (tmp_path / "link.npz").symlink_to(tmp_path / "v.npz")
    os.link(tmp_path / "v.npz", tmp_path / "hard.npz")  # no path in common with v.npz: its inode is
    monkeypatch.chdir(tmp_path)
    for pool, shown in ((["v.npz", "v.npz"], "v.npz is named twice: "), (["v.npz", "./v.npz"], "./v.npz is named "
                        "twice (as v.npz)"), (["v.npz", "link.npz"], "link.npz is named twice (as v.npz)"),
                        (["v.npz", "hard.npz"], "hard.npz is named twice (as v.npz)")):
        with pytest.raises(TRMError, match="^" + re.escape(f"pool_with: {shown}")):
            evaluate_export(weights, str(dataset), device="cpu", pool_with=pool, out=lambda _: None)
        rc = main(["evaluate", "--weights", weights, "--data", str(dataset), "--device", "cpu", "--pool-with", *pool])
        assert one_error_line(capsys, rc).startswith(f"error: --pool-with: {shown}")
    with pytest.raises(TRMError, match=re.escape("pool_with='v.npz': expected a list of votes files")):
        evaluate_export(weights, str(dataset), device="cpu", pool_with="v.npz", out=lambda _: None)  # 'v', '.', ...
    (tmp_path / "w.npz").write_bytes((tmp_path / "v.npz").read_bytes())  # another file of the same votes: taken
    monkeypatch.setattr("trm_kaggle.evaluate.run.pick_device", lambda *a, **k: pytest.fail("passed the checks"))
    with pytest.raises(pytest.fail.Exception, match="passed the checks"):
        evaluate_export(weights, str(dataset), device="cpu", pool_with=["v.npz", "w.npz"], out=lambda _: None)


def test_a_report_folder_named_another_way_still_holds_the_same_weights_report(tmp_path, monkeypatch):
    """report.json named its weights as typed: the same folders reached by their absolute path, from inside, or
    moved together, were "the report of other weights" once the weights were retrained. The place of the weights
    seen from the report's folder is recorded and compared; other weights elsewhere are still refused."""
    import shutil

    from trm_kaggle.errors import TRMError
    from trm_kaggle.evaluate.report import check_report_dir, write_dataset_report

    (tmp_path / "w").mkdir()
    monkeypatch.chdir(tmp_path)
    summary = {"dataset": "d", "examples": 1, "exact_accuracy": 1.0, "exact_accuracy_ci95": [0.2, 1.0],
               "token_accuracy": 1.0, "token_accuracy_ci95": [1.0, 1.0], "mean_steps": 1.0, "max_steps": 1,
               "early_exit": False, "trajectories": 1, "settled": None,
               "timing": {"seconds_total": 1.0, "examples_per_second": 1.0}}
    write_dataset_report(summary, "w/report", {"path": "w/weights", "sha256": "a" * 64})
    retrained = {"path": str(tmp_path / "w" / "weights"), "sha256": "b" * 64}
    check_report_dir(tmp_path / "w" / "report", retrained)
    shutil.move(tmp_path / "w", tmp_path / "moved")
    monkeypatch.chdir(tmp_path / "moved")
    check_report_dir("report", {"path": "weights", "sha256": "b" * 64})
    with pytest.raises(TRMError, match="holds the report of other weights"):
        check_report_dir("report", {"path": "other", "sha256": "b" * 64})


@pytest.mark.parametrize("settings, said", [({"bogus": 1}, "bogus: Extra inputs are not permitted"),
                                            ({"batch_size": 0}, "batch_size: Input should be greater than or equal")])
def test_an_evaluation_setting_given_by_keyword_is_one_line_naming_it(settings, said):
    """`evaluate(model, data, bogus=1)` raised pydantic's text of several lines and a link; a config copied around
    its checks (`model_copy`) was used unchecked. Both are one TRMError line naming the setting."""
    from trm_kaggle.config import EvaluateConfig

    with pytest.raises(TRMError) as e:
        EvaluateConfig().updated(**settings)
    assert str(e.value) == f"EvaluateConfig: {said}" or str(e.value).startswith(f"EvaluateConfig: {said}")
    assert "\n" not in str(e.value)
    with pytest.raises(TRMError, match="EvaluateConfig: batch_size"):
        EvaluateConfig().model_copy(update={"batch_size": -3}).updated()


def test_votes_of_test_inputs_the_dataset_lacks_and_empty_vote_options_are_refused(dataset, tmp_path, capsys):
    """Votes of another dataset (ids it lacks, a test index past its tests) were dropped while the scores said
    "POOLED with 1 earlier evaluation"; `--report-dir ''` and `--save-votes ''` evaluated and wrote nothing without a
    word, and `--pool-with ''` said ": no such votes file". Each is one line, before any inference."""
    from trm_kaggle.cli import main
    from trm_kaggle.evaluate.vote import VoteTable
    from trm_kaggle.model.export import export_inference

    model = make_model(dataset, seed=1)
    export_inference(tmp_path / "w", model, arch=model.arch, seq_len=model.seq_len, vocab_size=model.vocab_size)
    side = math.isqrt(model.seq_len)
    common = ["evaluate", "--weights", str(tmp_path / "w"), "--data", str(dataset), "--device", "cpu", "--no-progress"]
    for name, slot in (("ids.npz", ("zzzz", 0)), ("index.npz", ("12997ef3", 99))):
        VoteTable.from_grids([(slot, np.ones((2, 2), np.uint8), 0.0)], side=side).save(tmp_path / name)
        assert main([*common, "--pool-with", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert f"{name}: votes for 1 test input {dataset} does not have (first: task {slot[0]} test {slot[1]})" in err
        with pytest.raises(DataError, match="^pool_with: votes for 1 test input"):  # the library's own check
            evaluate(model, dataset, batch_size=32, pool_with=VoteTable.load(tmp_path / name))
    for option, said in (("--report-dir", "--report-dir is empty"), ("--save-votes", "--save-votes is empty"),
                         ("--pool-with", "--pool-with holds an empty name")):
        assert main([*common, option, ""]) == 2
        out, err = capsys.readouterr()
        assert said in err and err.count("\n") == 1 and "ARC Prize score" not in out, (out, err)


def _renamed_puzzle(dataset, tmp_path, old: str, new: str) -> Path:
    """A copy of the dataset whose puzzle `old` is named `new` in identifiers.json."""
    copy = tmp_path / "renamed-puzzle"
    shutil.copytree(dataset, copy)
    ids = json.loads((copy / "identifiers.json").read_text())
    ids[ids.index(old)] = new
    (copy / "identifiers.json").write_text(json.dumps(ids))
    return copy


@pytest.mark.parametrize("new, said", [
    ("12997ef3|||t9|||0487695132", r"test split puzzle 1: not an augmented puzzle name: '12997ef3\|\|\|t9"),
    ("12997ef3|||t0|||0487695132", r"test split puzzle 1 \(12997ef3\|\|\|t0\|\|\|0487695132\) does not un-augment to "
                                   r"test input 0 of task 12997ef3 in test_puzzles.json \(2 such examples\)"),
    ("05a7bcf2|||t4|||0487695132", r"test split puzzle 1 \(05a7bcf2\|\|\|t4\|\|\|0487695132\) example 1 has no test "
                                   r"input: its task 05a7bcf2 has only 1 test input"),
    ("\x1b[2J12997ef3|||t4|||0487695132", r"test split puzzle 1 \(\\x1b\[2J12997ef3\|\|\|t4\|\|\|0487695132\) is of "
                                          r"task \\x1b\[2J12997ef3, which test_puzzles.json does not hold \(1 such task\)"),
])
def test_the_test_splits_rules_run_without_a_model_and_before_any_inference(dataset, tmp_path, monkeypatch, new,
                                                                             said):
    """`check_test_split` (which verify calls) refuses what evaluate refuses, in the same line naming the dataset and
    the first bad puzzle, escaped; evaluate refuses it before the inference (a puzzle of another task, or under
    another transform, was refused after the whole prediction)."""
    import trm_kaggle.evaluate.pipeline as P

    copy = _renamed_puzzle(dataset, tmp_path, "12997ef3|||t4|||0487695132", new)
    with pytest.raises(DataError, match=f"^{re.escape(str(copy))}: {said}") as checked:
        P.check_test_split(copy)
    with pytest.raises(DataError) as chunked:
        P.check_test_split(copy, chunk=1)  # a chunk of one example at a time finds and counts the same
    monkeypatch.setattr(P, "predict_split", lambda *a, **k: pytest.fail("inference must not start"))
    with pytest.raises(DataError) as evaluated:
        evaluate(make_model(copy, Oracle), copy, batch_size=64)
    assert str(checked.value) == str(chunked.value) == str(evaluated.value) and "\x1b" not in str(checked.value)


def test_the_test_splits_rules_pass_a_good_dataset_and_skip_one_without_test_puzzles(dataset, tmp_path):
    from trm_kaggle.evaluate import check_test_split

    check_test_split(dataset)
    check_test_split(dataset, chunk=3)
    copy = tmp_path / "no-test-puzzles"
    shutil.copytree(dataset, copy)
    (copy / "test_puzzles.json").unlink()
    check_test_split(copy)  # scored per example (Sudoku, Maze): none of these rules


def test_a_test_split_identifier_outside_the_table_and_a_colour_past_a_byte_are_one_line(dataset, tmp_path):
    """A puzzle identifier -1 named the table's last puzzle (evaluated as another task's copy), and a colour 300 in
    test_puzzles.json was numpy's OverflowError, a traceback."""
    from trm_kaggle.evaluate import check_test_split

    copy = tmp_path / "copy"
    shutil.copytree(dataset, copy)
    pid = np.load(copy / "test/all__puzzle_identifiers.npy")
    pid[2] = -1
    np.save(copy / "test/all__puzzle_identifiers.npy", pid)
    with pytest.raises(DataError, match=r"test split puzzle 2: identifier -1 is outside identifiers.json's 37"):
        check_test_split(copy)
    shutil.rmtree(copy)
    shutil.copytree(dataset, copy)
    raw = json.loads((copy / "test_puzzles.json").read_text())
    raw["05a7bcf2"]["test"][0]["output"][0][0] = 300
    (copy / "test_puzzles.json").write_text(json.dumps(raw))
    with pytest.raises(DataError, match=r"task 05a7bcf2 test pair 0 output: value 300 at row 0, column 0 is not an integer 0..9"):
        check_test_split(copy)


@pytest.mark.parametrize("damage, words", [("missing", r"test_puzzles.json: not found, but the test split holds ARC's"),
                                           ("extra", r"test_puzzles.json: task zz_extra has no puzzle in the test "
                                                     r"split")])
def test_evaluate_export_refuses_the_test_puzzles_verify_and_train_refuse(dataset, tmp_path, monkeypatch, damage,
                                                                           words):
    """An upstream-format ARC dataset (no contents.json) without test_puzzles.json was scored per example, exit 0;
    one whose test_puzzles.json names a task its test split lacks counted that task as failed. verify and train
    refuse both (`check_metadata`): evaluate refuses them in the same words, before loading the model."""
    from trm_kaggle.data import check_metadata
    from trm_kaggle.evaluate import evaluate_export
    from trm_kaggle.model.export import export_inference

    model = make_model(dataset, H_cycles=1)
    export_inference(tmp_path / "export", model, arch=model.arch, seq_len=model.seq_len, vocab_size=model.vocab_size)
    copy = tmp_path / "ds"
    shutil.copytree(dataset, copy)
    (copy / "contents.json").unlink(missing_ok=True)
    tp = copy / "test_puzzles.json"
    if damage == "missing":
        tp.unlink()
    else:
        tasks = json.loads(tp.read_text())
        tasks["zz_extra"] = next(iter(tasks.values()))
        tp.write_text(json.dumps(tasks))
    with pytest.raises(DataError, match=words) as said:
        check_metadata(copy)
    monkeypatch.setattr("trm_kaggle.evaluate.run.load_model_for_dataset", lambda *a, **k: pytest.fail("loaded"))
    with pytest.raises(DataError) as err:
        evaluate_export(str(tmp_path / "export"), str(copy), device="cpu", out=lambda _: None)
    assert str(err.value) == str(said.value)


def test_the_printed_arc_summary_says_the_dtype_that_ran(dataset, tmp_path, capsys):
    """report.json records the dtype that ran (`auto` resolved); the printed summary, which names the run's other
    settings (trajectories, steps), says it too."""
    from trm_kaggle.cli import main
    from trm_kaggle.model.export import export_inference

    model = make_model(dataset, H_cycles=1)
    export_inference(tmp_path / "export", model, arch=model.arch, seq_len=model.seq_len, vocab_size=model.vocab_size)
    assert main(["evaluate", "--weights", str(tmp_path / "export"), "--data", str(dataset), "--device", "cpu",
                 "--dtype", "bfloat16", "--max-tasks", "2", "--no-progress", "--report-dir", str(tmp_path / "rep")]) == 0
    assert "% of the time outside the model, activations in bfloat16\n" in capsys.readouterr().out
    assert json.loads((tmp_path / "rep" / "report.json").read_text())["summary"]["dtype"] == "bfloat16"


@pytest.mark.parametrize("damage", ["truncated", "reindented"])
def test_a_damaged_dataset_json_is_said_in_verifys_and_trainings_words(dataset, tmp_path, capsys, damage):
    """A dataset.json cut short was "unreadable dataset.json: ... (the file ends early: truncated?)" to verify and
    train (`check_metadata`, first) but "differs from the contents its builder recorded" to evaluate, which read
    contents.json first. Evaluate now checks in their order: the same line from all three. A dataset.json still
    valid but changed is the contents line from each."""
    from trm_kaggle.cli import main
    from trm_kaggle.data import check_metadata
    from trm_kaggle.model.export import export_inference

    model = make_model(dataset, H_cycles=1)
    export_inference(tmp_path / "export", model, arch=model.arch, seq_len=model.seq_len, vocab_size=model.vocab_size)
    copy = tmp_path / "ds"
    shutil.copytree(dataset, copy)
    assert (copy / "contents.json").is_file()
    meta = copy / "train" / "dataset.json"
    text = meta.read_text()
    meta.write_text(text[:text.index(":") + 1] if damage == "truncated" else json.dumps(json.loads(text), indent=7))
    words = "unreadable dataset.json: " if damage == "truncated" else "differs from the contents its builder recorded"
    if damage == "truncated":  # training's check, before its run folder
        with pytest.raises(DataError, match=words):
            check_metadata(copy)
    said = []
    for argv in (["verify", str(copy)],
                 ["evaluate", "--weights", str(tmp_path / "export"), "--data", str(copy), "--device", "cpu",
                  "--no-progress", "--report-dir", str(tmp_path / "rep")]):
        assert main(argv) == 2
        said.append(capsys.readouterr().err.strip().splitlines()[-1])
    assert words in said[0] and said[1] == said[0], said
    assert not (tmp_path / "rep").exists()
