"""evaluate-repair: exact-fix rates per bug type against the copy-input baseline, and code runs with a time limit."""

import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from test_code_repair import module_source
from trm_kaggle.config import CodeRepairBuildConfig, RepairEvalConfig
from trm_kaggle.data.code.repair import build_code_repair, read_repair_meta
from trm_kaggle.data.format import load_split
from trm_kaggle.evaluate.repair import (doctest_command, evaluate_repair, format_repair_report, outcome, repair_table,
                                        run_code)

DOCTESTED = '''

def double(x, y):
    """Twice x, plus y.

    >>> double(2, 1)
    5
    """
    if x < 0:
        return 0
    return x * 2 + y
'''


def test_outcomes():
    assert outcome("a = 1", "a = 2", "a = 2") == "fixed"
    assert outcome("a = 1", "a = 2", "a = 1") == "unchanged"
    assert outcome("a = 1", "a = 2", "a = 3") == "changed_wrongly"


def test_repair_table_against_hand_computed_values():
    types = ["missing_colon", "missing_colon", "missing_colon", "off_by_one", "off_by_one"]
    outcomes = ["fixed", "unchanged", "fixed", "changed_wrongly", "fixed"]
    copy = ["unchanged"] * 5
    acc = np.array([1.0, 0.9, 1.0, 0.5, 1.0])
    copy_acc = np.array([0.9, 0.9, 0.8, 0.7, 0.6])
    t = repair_table(types, outcomes, copy, acc, copy_acc)
    assert t["overall"] == {"pairs": 5, "exact_fix_rate": 3 / 5, "copy_exact_fix_rate": 0.0, "fixed": 3,
                            "unchanged": 1, "changed_wrongly": 1, "token_accuracy": pytest.approx(0.88),
                            "copy_token_accuracy": pytest.approx(0.78)}
    mc, ob = t["per_bug_type"]["missing_colon"], t["per_bug_type"]["off_by_one"]
    assert (mc["pairs"], mc["exact_fix_rate"], mc["unchanged"], mc["changed_wrongly"]) == (3, 2 / 3, 1, 0)
    assert mc["token_accuracy"] == pytest.approx(2.9 / 3) and mc["copy_token_accuracy"] == pytest.approx(2.6 / 3)
    assert (ob["pairs"], ob["exact_fix_rate"], ob["fixed"], ob["changed_wrongly"]) == (2, 0.5, 1, 1)
    # a baseline pair whose sides were equal would count as fixed for the copy baseline
    assert repair_table(["x"], ["fixed"], ["fixed"], np.ones(1), np.ones(1))["overall"]["copy_exact_fix_rate"] == 1.0


# ---------------------------------------------------------------------------
# running code
# ---------------------------------------------------------------------------


def test_run_code_passes_fails_and_stops_a_loop_at_the_time_limit():
    py = f"{sys.executable} {{file}}"
    assert run_code("print('hi')", py, 20).status == "passed"
    r = run_code("raise SystemExit(3)", py, 20)
    assert r.status == "failed"
    t0 = time.perf_counter()
    r = run_code("while True:\n    pass", py, 1.0)
    assert r.status == "timeout" and time.perf_counter() - t0 < 10


def test_a_command_that_prints_without_end_keeps_only_its_output_tail_in_memory():
    """`--test-command yes --time-limit 2` held the command's whole output: 1.7 GB at the limit (3.6 GB for four
    runs). Its output is read as it comes and only its tail kept."""
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    code = "import sys\nwhile True:\n    sys.stdout.write('y' * 65536 + 'END')"
    r = run_code(code, [sys.executable, "{file}"], 2.0)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024  # kB on Linux
    assert r.status == "timeout" and r.output.endswith(("y", "END")) and len(r.output) == 2000
    assert grown_mb < 100, f"{grown_mb:.0f} MB held for the command's output"
    assert run_code("print('hi')", [sys.executable, "{file}"], 20).output == "hi\n"


def test_run_code_kills_the_children_of_the_command_too(tmp_path):
    marker = tmp_path / "still-running"
    child = f"import time, pathlib; time.sleep(3); pathlib.Path({str(marker)!r}).write_text('x')"
    code = f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {child!r}])\nwhile True:\n    pass"
    assert run_code(code, [sys.executable, "{file}"], 1.0).status == "timeout"
    time.sleep(3.5)
    assert not marker.exists(), "a grandchild survived the time limit"


def test_an_interrupted_run_code_stops_the_command(tmp_path):
    """The command runs in its own session, out of reach of the terminal's Ctrl-C: an interrupt of the caller ran
    on past it, leaving the command (a snippet's endless loop) running."""
    import os
    import signal
    import threading

    pid_file = tmp_path / "pid"
    code = f"import os, pathlib\npathlib.Path({str(pid_file)!r}).write_text(str(os.getpid()))\nwhile True:\n    pass"

    def interrupt_once_started():
        while not (pid_file.is_file() and pid_file.read_text()):
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_once_started, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        run_code(code, [sys.executable, "{file}"], 60.0)
    pid = int(pid_file.read_text())
    alive = os.path.exists(f"/proc/{pid}") if os.path.isdir("/proc") else False
    if alive:
        os.kill(pid, signal.SIGKILL)
    assert not alive, "the command outlived the interrupted caller"


def test_run_code_works_in_a_temporary_directory():
    r = run_code("import os\nprint(os.listdir('.'))", f"{sys.executable} {{file}}", 20)
    assert r.status == "passed" and "['snippet.py']" in r.output


def test_doctests_in_a_subprocess():
    good = DOCTESTED.strip()
    assert run_code(good, doctest_command(), 30).status == "passed"
    assert run_code(good.replace("x * 2 + y", "x * 2 - y"), doctest_command(), 30).status == "failed"


# ---------------------------------------------------------------------------
# the evaluation, with stand-in models whose answers are known
# ---------------------------------------------------------------------------


@dataclass
class _Carry:
    z_H: torch.Tensor
    steps: torch.Tensor
    halted: torch.Tensor
    current_data: dict


class AnswerModel(torch.nn.Module):
    """Predicts `answer(inputs)` in one ACT step (an oracle or a copier): enough for predict_split."""

    def __init__(self, vocab_size: int, seq_len: int, answer):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.arch = SimpleNamespace(halt_max_steps=1)
        self.vocab_size, self.seq_len, self.answer = vocab_size, seq_len, answer

    def initial_carry(self, batch):
        n = len(batch["inputs"])
        return _Carry(torch.zeros(n, 0), torch.zeros(n, dtype=torch.int32), torch.ones(n, dtype=torch.bool), {})

    def forward(self, carry, batch, logits=True):
        z_H = torch.nn.functional.one_hot(self.answer(batch["inputs"]).long(), self.vocab_size).float()
        out = {"q_halt_logits": torch.zeros(len(z_H))}
        if logits:
            out["logits"] = self.decode(z_H)
        return _Carry(z_H, torch.ones(len(z_H), dtype=torch.int32), carry.halted, dict(batch)), out

    def decode(self, z_H):
        return z_H  # the answer's one-hot rows


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    for k in range(1, 7):
        (root / f"mod{k}.py").write_text(module_source(k) + DOCTESTED.replace("double", f"double_{k}"))
    out = root.parent / "repair-ds"
    build_code_repair(CodeRepairBuildConfig(output_dir=str(out), corpus=str(root), grid="12x48", workers=1,
                                            lint="off", progress=False, test_fraction=0.34, val_fraction=0.0))
    return out


def oracle_for(data: Path):
    """Looks each input row up among the test split's pairs."""
    s = load_split(data, "test")
    table = {bytes(np.asarray(x, dtype=np.int64)): np.asarray(y) for x, y in zip(s.inputs, s.labels)}
    return lambda inputs: torch.as_tensor(np.stack([table[bytes(x.numpy().astype(np.int64))] for x in inputs]))


def evaluate_with(data: Path, answer, **kw):
    meta = load_split(data, "test").metadata
    model = AnswerModel(meta.vocab_size, meta.seq_len, answer)
    return evaluate_repair(model, RepairEvalConfig(weights="-", data=str(data), batch_size=7, progress=False, **kw))


def test_edited_repair_metadata_is_refused_never_shown_raw(dataset, tmp_path):
    """A bug_type holding an escape sequence reached the terminal raw in the table, and a repair_meta.jsonl changed
    after the build was scored (verify refuses it): the changed file is named; without a contents record (an
    older build), the name itself is refused."""
    from trm_kaggle.data.contents import CONTENTS_FILE
    from trm_kaggle.errors import DataError

    data = tmp_path / "ds"
    shutil.copytree(dataset, data)
    meta = data / "test" / "repair_meta.jsonl"
    records = [json.loads(line) for line in meta.read_text().splitlines()]
    records[0]["bug_type"] = "\x1b[31mRED\x1b[0m"
    meta.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(DataError, match="repair_meta.jsonl: differs from the contents its builder recorded"):
        evaluate_with(data, lambda inputs: inputs)
    (data / CONTENTS_FILE).unlink()
    with pytest.raises(DataError, match=r"repair_meta.jsonl:1: .*its bug_type '\\x1b\[31mRED.* is not a name"):
        evaluate_with(data, lambda inputs: inputs)


def test_copy_model_scores_like_the_baseline(dataset):
    ev = evaluate_with(dataset, lambda inputs: inputs)
    o = ev.table["overall"]
    n = load_split(dataset, "test").num_examples
    assert o["pairs"] == n > 0
    assert (o["exact_fix_rate"], o["copy_exact_fix_rate"], o["unchanged"], o["fixed"]) == (0.0, 0.0, n, 0)
    assert o["token_accuracy"] == pytest.approx(o["copy_token_accuracy"]) and o["token_accuracy"] < 1


def test_oracle_fixes_everything_and_half_an_oracle_half(dataset):
    oracle = oracle_for(dataset)
    ev = evaluate_with(dataset, oracle)
    assert ev.table["overall"]["exact_fix_rate"] == 1.0 and ev.table["overall"]["token_accuracy"] == 1.0
    assert all(r["exact_fix_rate"] == 1.0 for r in ev.table["per_bug_type"].values())

    # fix the even examples, answer the odd ones with an empty grid: hand-count per bug type
    seen = {"n": 0}

    def half(inputs):
        out = oracle(inputs).clone()
        for j in range(len(out)):
            if (seen["n"] + j) % 2:
                out[j] = 0
        seen["n"] += len(out)
        return out

    ev = evaluate_with(dataset, half)
    types = read_repair_meta(dataset, "test").bug_type
    for t, r in ev.table["per_bug_type"].items():
        idx = np.flatnonzero(types == t)
        assert r["fixed"] == int(np.sum(idx % 2 == 0)) and r["changed_wrongly"] == int(np.sum(idx % 2 == 1)), t
    text = format_repair_report(ev)
    assert "overall" in text and "copy input" in text


def test_doctests_run_on_fix_and_prediction(dataset, tmp_path):
    report = tmp_path / "report.json"
    ev = evaluate_with(dataset, lambda inputs: inputs, doctests=True, time_limit=30, report=str(report))
    runs = ev.runs["doctests"]
    assert runs["pairs"] > 0 and runs["reference"] == {"passed": runs["pairs"]}
    assert sum(runs["predicted"].values()) == runs["pairs"]
    # copying the buggy code: some doctests fail (the flipped sign, the removed return, ...)
    assert runs["predicted"].get("failed", 0) > 0
    saved = json.loads(report.read_text())
    assert saved["table"]["overall"]["pairs"] == len(saved["examples"])
    assert sum("doctests" in e for e in saved["examples"]) == runs["pairs"]


def test_bpe_vocabularies_wider_than_a_byte_are_predicted_whole(tmp_path):
    pytest.importorskip("tokenizers")
    root = tmp_path / "corpus"
    root.mkdir()
    for k in range(1, 5):
        (root / f"mod{k}.py").write_text(module_source(k))
    out = tmp_path / "bpe"
    build_code_repair(CodeRepairBuildConfig(output_dir=str(out), corpus=str(root), grid="12x32", tokens="bpe",
                                            bpe_vocab_size=400, workers=1, lint="off", progress=False,
                                            test_fraction=0.5, val_fraction=0.0))
    assert load_split(out, "test").metadata.vocab_size > 256
    ev = evaluate_with(out, oracle_for(out))
    assert ev.table["overall"]["exact_fix_rate"] == 1.0


def test_cli_with_a_trained_export(dataset, tmp_path):
    from trm_kaggle.cli import main

    run, weights = tmp_path / "run", tmp_path / "weights"
    assert main(["train", "--preset", "repair-cpu", f"data_paths=[{dataset}]", f"checkpoint_path={run}", "max_steps=1",
                 "arch.hidden_size=16", "arch.H_cycles=1", "arch.L_cycles=1", "arch.halt_max_steps=1",
                 "global_batch_size=4", "progress=False", "--export", str(weights)]) == 0
    p = subprocess.run([sys.executable, "-m", "trm_kaggle", "evaluate-repair", "--weights", str(weights), "--data",
                        str(dataset), "--device", "cpu", "--no-progress", "--report", str(tmp_path / "r.json")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "exact-fix rate" in p.stdout and "overall" in p.stdout
    assert json.loads((tmp_path / "r.json").read_text())["table"]["overall"]["pairs"] > 0
    bad = subprocess.run([sys.executable, "-m", "trm_kaggle", "evaluate-repair", "--weights", str(weights), "--data",
                          str(tmp_path), "--no-progress"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and "Traceback" not in bad.stderr
    broken = tmp_path / "broken"  # a code-repair dataset whose metadata was damaged
    shutil.copytree(dataset, broken)
    (broken / "test" / "repair_meta.jsonl").write_text("{not json\n")
    (broken / "contents.json").unlink()  # built before contents records: the damage is found by the reader
    bad = subprocess.run([sys.executable, "-m", "trm_kaggle", "evaluate-repair", "--weights", str(weights), "--data",
                          str(broken), "--no-progress"], capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip() == bad.stderr.strip().splitlines()[-1]  # one line
    assert "repair_meta.jsonl:1: unreadable repair metadata record" in bad.stderr


def test_max_examples_evaluates_the_first_pairs_alone(dataset):
    n = load_split(dataset, "test").num_examples
    assert n > 2
    full = evaluate_with(dataset, lambda inputs: inputs)
    part = evaluate_with(dataset, lambda inputs: inputs, max_examples=2)
    assert part.table["overall"]["pairs"] == 2 and [e["example"] for e in part.examples] == [0, 1]
    assert part.examples == full.examples[:2]


def test_a_device_this_machine_lacks_is_refused_in_one_line(dataset):
    from trm_kaggle.errors import TRMError

    meta = load_split(dataset, "test").metadata
    model = AnswerModel(meta.vocab_size, meta.seq_len, lambda inputs: inputs)
    with pytest.raises(TRMError, match=r"^device=cuda:99 requested but this machine has \w+ CUDA device\(s\)$"):
        evaluate_repair(model, RepairEvalConfig(weights="-", data=str(dataset), progress=False), "cuda:99")


@pytest.mark.parametrize("command, words", [("python 'unclosed", "is no command line: No closing quotation"),
                                            ("   ", "is empty")])
def test_a_test_command_that_is_no_command_line_is_refused_before_any_pair_runs(command, words):
    with pytest.raises(ValueError, match=words):
        RepairEvalConfig(weights="-", data="-", test_command=command)
    assert RepairEvalConfig(weights="-", data="-", test_command="python snippet.py").test_command  # no {file}: fine


@pytest.mark.parametrize("kw", [{"max_runs": 5}, {"time_limit": 5.0}, {"max_runs": 1, "time_limit": 10.0}])
def test_run_bounds_without_code_to_run_are_refused(kw):
    """`--max-runs 5` or `--time-limit 5` with neither --doctests nor --test-command bound nothing: the run was the
    plain one, exit 0, no word."""
    with pytest.raises(ValueError, match="bound the code runs, and none is asked for: add doctests or a test_command"):
        RepairEvalConfig(weights="-", data="-", **kw)
    assert RepairEvalConfig(weights="-", data="-", doctests=True, **kw).doctests
    assert RepairEvalConfig(weights="-", data="-", test_command="python {file}", **kw).test_command


def test_a_report_another_command_wrote_meanwhile_stands(dataset, tmp_path):
    """Two `evaluate-repair --report F` at once both ended "report: F", the later silently replacing the other's
    report: the second to finish now keeps the first's and ends with one line."""
    from trm_kaggle.atomic import OutputTaken

    report = tmp_path / "same.json"
    others = {"written by": "another evaluate-repair"}

    def answer_then_another_writes(inputs):  # the other command finishes during this one's predictions
        if not report.exists():
            report.write_text(json.dumps(others))
        return inputs

    with pytest.raises(OutputTaken, match=r"same.json: another process wrote this file while this command ran"):
        evaluate_with(dataset, answer_then_another_writes, report=str(report))
    assert json.loads(report.read_text()) == others
    ev = evaluate_with(dataset, lambda inputs: inputs, report=str(report))  # run again: replaced
    assert json.loads(report.read_text())["examples"] and ev.table


def test_a_model_of_another_tokenizers_vocabulary_is_named_before_predicting(dataset):
    """A BPE model (302 tokens) on a character dataset (97) predicted, then failed with "text grid tokens must be in
    0..96", naming neither; the other way round was refused by its vocabulary. Both are refused before any work."""
    from trm_kaggle.errors import TRMError

    meta = load_split(dataset, "test").metadata
    calls = []
    model = AnswerModel(meta.vocab_size + 205, meta.seq_len, lambda inputs: calls.append(1) or inputs)
    with pytest.raises(TRMError, match=rf"a vocabulary of {meta.vocab_size + 205} tokens, .* has {meta.vocab_size}: "
                                       "another tokenizer's data"):
        evaluate_repair(model, RepairEvalConfig(weights="-", data=str(dataset), batch_size=7, progress=False))
    assert not calls


@pytest.mark.parametrize("code, command, limit, error, words", [
    # a NaN limit compared false with the clock: the command ran with no limit at all ("passed" after 8 s)
    ("import time; time.sleep(30)", [sys.executable, "{file}"], float("nan"), ValueError,
     "time_limit=nan: expected a number from 0 to 86400"),
    ("pass", [sys.executable, "{file}"], "5", ValueError, "time_limit='5': expected a number"),  # float + str
    ("pass", [], 5, ValueError, "command=[]: names no program to run"),  # an IndexError
    ("pass", "", 5, ValueError, "command='': names no program to run"),
    ("pass", [sys.executable, 5], 5, TypeError, "command[1]: expected a str"),
    (b"pass", [sys.executable, "{file}"], 5, TypeError, "code: expected the snippet as a str, got bytes"),
])
def test_run_code_names_an_argument_it_cannot_take(code, command, limit, error, words):
    started = time.monotonic()
    with pytest.raises(error, match="^" + re.escape(words)):
        run_code(code, command, limit)
    assert time.monotonic() - started < 5  # refused before anything ran


def test_evaluate_repair_names_a_config_of_the_wrong_type():
    with pytest.raises(TypeError, match="^cfg: expected a RepairEvalConfig .*got dict$"):
        evaluate_repair(torch.nn.Linear(1, 1), {"weights": "w", "data": "d"})  # "'dict' has no attribute 'report'"
