"""`trm-kaggle evaluate-repair`: how often a model writes exactly the fix, per bug type.

Every test pair's predicted grid is read back as text and compared with the reference
fix. Each pair gets one outcome:

    fixed            the prediction is the fix, character for character
    unchanged        the prediction is the buggy input (the model copied it)
    changed_wrongly  anything else

Beside the model stands the baseline that copies its input. Its exact-fix rate is 0 by
construction (the builder keeps only pairs whose sides differ), which is the point: a
model that learnt only to copy scores 0 here, however high its token accuracy (the
share of grid cells equal to the label, reported for both).

Running code (opt-in): `doctests` runs the doctests of the pairs whose reference fix
has some, on the fix and on the prediction; `test_command` runs a command of yours on
both. Either RUNS THE CODE IT IS GIVEN (the model's output included) in a subprocess,
in a fresh temporary directory, killed with its process group after `time_limit`
seconds: that bounds time, it is not a sandbox.
"""

from __future__ import annotations

import collections
import contextlib
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import numpy as np
import torch

from trm_kaggle.atomic import RewrittenFile, atomic_write_json, scratch_folder
from trm_kaggle.config import RepairEvalConfig, number_argument, texts_argument
from trm_kaggle.data import contents_hash, load_repair_tokens, load_split, read_repair_info, read_repair_meta
from trm_kaggle.errors import DataError, TRMError
from trm_kaggle.evaluate.predict import predict_split
from trm_kaggle.hardware import place_model
from trm_kaggle.wording import clipped, type_name

OUTCOMES = ("fixed", "unchanged", "changed_wrongly")


def outcome(buggy: str, fixed: str, predicted: str) -> str:
    if predicted == fixed:
        return "fixed"
    return "unchanged" if predicted == buggy else "changed_wrongly"


def repair_table(bug_types: list[str], outcomes: list[str], copy_outcomes: list[str], token_acc: np.ndarray,
                 copy_token_acc: np.ndarray) -> dict:
    """Rates overall and per bug type, for the model and the copy-input baseline.

    token_acc / copy_token_acc: per pair, the share of grid cells equal to the label.
    """
    def row(idx: np.ndarray) -> dict:
        n = len(idx)
        counts = collections.Counter(outcomes[i] for i in idx)
        copy_fixed = sum(copy_outcomes[i] == "fixed" for i in idx)
        return {"pairs": n, "exact_fix_rate": counts["fixed"] / n if n else float("nan"),
                "copy_exact_fix_rate": copy_fixed / n if n else float("nan"),
                **{k: counts[k] for k in OUTCOMES},
                "token_accuracy": float(np.mean(token_acc[idx])) if n else float("nan"),
                "copy_token_accuracy": float(np.mean(copy_token_acc[idx])) if n else float("nan")}

    types = np.asarray(bug_types, dtype=object)
    return {"overall": row(np.arange(len(types))),
            "per_bug_type": {t: row(np.flatnonzero(types == t)) for t in sorted(set(bug_types))}}


# ---------------------------------------------------------------------------
# Running code in a subprocess
# ---------------------------------------------------------------------------


#: The bytes of a test command's output kept (its tail): the rest is read and dropped as it comes.
OUTPUT_TAIL_BYTES = 8192
#: The longest run of a test command: the bound of the config's time_limit, read from its one place.
MAX_TIME_LIMIT_S = next(m.le for m in RepairEvalConfig.model_fields["time_limit"].metadata
                        if getattr(m, "le", None) is not None)


@dataclass
class RunResult:
    status: str  # "passed", "failed" (non-zero exit) or "timeout"
    seconds: float
    output: str  # the last 2,000 characters of stdout + stderr


def run_code(code: str, command: str | list[str], time_limit: float) -> RunResult:
    """Write `code` to snippet.py in a new temporary directory and run `command` there.

    A string command is split like a shell line, after "{file}" becomes the file's path;
    nothing goes through a shell. The command runs in its own process group, which is
    killed when `time_limit` seconds have passed. The directory is removed afterwards.

    Each argument is checked before anything runs, a wrong one named in a TypeError or ValueError: a NaN limit
    compared false with the clock and ran with no limit at all; "5", [] or bytes code were Python's errors.
    """
    if not isinstance(code, str):
        raise TypeError(f"code: expected the snippet as a str, got {type_name(code)}")
    template = command if isinstance(command, str) else texts_argument("command", command, "a program's argument")
    time_limit = number_argument("time_limit", time_limit, 0.0, MAX_TIME_LIMIT_S)
    with scratch_folder("trm-repair-run-") as tmp:
        path = os.path.join(tmp, "snippet.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(code + "\n")
        argv = (shlex.split(template.replace("{file}", shlex.quote(path))) if isinstance(template, str)
                else [a.replace("{file}", path) for a in template])
        if not argv:  # "" or []: an IndexError below
            raise ValueError(f"command={clipped(command, 40)}: names no program to run")
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        t0 = time.perf_counter()
        try:
            proc = subprocess.Popen(argv, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as e:
            raise TRMError(f"cannot run the test command {argv[0]!r}: {e.strerror}") from None
        # its output read as it comes, its tail alone kept: `yes` within a 2 s limit once held 1.7 GB
        tail = bytearray()

        def drain() -> None:
            for chunk in iter(lambda: proc.stdout.read(1 << 16), b""):
                tail.extend(chunk)
                del tail[:-OUTPUT_TAIL_BYTES]

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        try:
            proc.wait(timeout=time_limit)
            status = "passed" if proc.returncode == 0 else "failed"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the whole group: children of the command too
            proc.wait()
            status = "timeout"
        except BaseException:  # Ctrl-C reaches us alone (its own session): the command never outlives the caller
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        finally:
            reader.join(timeout=5)  # the pipe ends with the group; a child outside it never holds the call
            if not reader.is_alive():
                proc.stdout.close()
        text = bytes(tail).decode("utf-8", errors="replace")
        return RunResult(status, time.perf_counter() - t0, text[-2000:])


def doctest_command() -> list[str]:
    """This interpreter in isolated mode, running the doctests of snippet.py."""
    return [sys.executable, "-I", "-m", "doctest", "{file}"]


# ---------------------------------------------------------------------------
# The evaluation
# ---------------------------------------------------------------------------


@dataclass
class RepairEvaluation:
    table: dict
    examples: list[dict]  # per test pair: bug type, source, line, outcome, and runs when asked
    runs: dict  # doctest / test-command totals (empty when none was asked for)
    seconds: float

    def summary(self) -> dict:
        return {"table": self.table, "runs": self.runs, "seconds": self.seconds}


def evaluate_repair(model: torch.nn.Module, cfg: RepairEvalConfig, device: torch.device | str | None = None
                    ) -> RepairEvaluation:
    """Predict the test split of cfg.data with `model`, score every pair, run code when asked. `device`: where
    to run (default: where the model's weights are); the model is moved there (`hardware.place_model`)."""
    if not isinstance(cfg, RepairEvalConfig):  # a dict was "'dict' object has no attribute 'report'"
        raise TypeError(f"cfg: expected a RepairEvalConfig (RepairEvalConfig(**values) makes one from a dict), got "
                        f"{type_name(cfg)}")
    t0 = time.perf_counter()
    # what stands at the report now: another command's report written there during this one's work is kept, and
    # this one ends with one line (two at once both said "report: ...", the later silently replacing the other)
    report_file = RewrittenFile(cfg.report) if cfg.report else None
    device = place_model(model, device)
    contents_hash(cfg.data)  # a dataset changed after its build is refused here, as training and verify refuse it
    tokens = load_repair_tokens(cfg.data)
    rows, cols = read_repair_info(cfg.data)["grid_shape"]
    split = load_split(cfg.data, "test")
    meta = read_repair_meta(cfg.data, "test")
    if split.num_examples == 0:
        raise DataError(f"{cfg.data}: the test split holds no pairs (build with a larger --test-fraction)")
    if len(meta) != split.num_examples:
        raise DataError(f"{cfg.data}/test/repair_meta.jsonl: {len(meta)} records for {split.num_examples} examples")
    vocab_model = getattr(model, "vocab_size", None)
    if isinstance(vocab_model, int) and vocab_model != split.metadata.vocab_size:  # a BPE model on characters
        # answered tokens the dataset's tokenizer has no text for: "text grid tokens must be in 0..96", unnamed
        raise TRMError(f"the model was built for a vocabulary of {vocab_model} tokens, {cfg.data} has "
                       f"{split.metadata.vocab_size}: another tokenizer's data (evaluate it with a model trained on "
                       "it)")
    n = split.num_examples if cfg.max_examples is None else min(cfg.max_examples, split.num_examples)
    preds = predict_split(model, cfg.data, batch_size=cfg.batch_size, device=device, progress=cfg.progress,
                          examples=None if n == split.num_examples else np.arange(n))

    labels = np.asarray(split.labels[:n])
    inputs = np.asarray(split.inputs[:n])
    token_acc = (preds.tokens.astype(np.int64) == labels).mean(axis=1)
    copy_acc = (inputs == labels).mean(axis=1)
    examples, outcomes, copy_outcomes = [], [], []
    for i in range(n):
        buggy = tokens.text(inputs[i].reshape(rows, cols))
        fixed = tokens.text(labels[i].reshape(rows, cols))
        predicted = tokens.text(preds.tokens[i].reshape(rows, cols))
        outcomes.append(outcome(buggy, fixed, predicted))
        copy_outcomes.append(outcome(buggy, fixed, buggy))
        examples.append({"example": i, "bug_type": meta.bug_type[i], "source": meta.source[i],
                         "line": int(meta.line[i]), "outcome": outcomes[-1], "buggy": buggy, "fixed": fixed,
                         "predicted": predicted})
    table = repair_table(list(meta.bug_type[:n]), outcomes, copy_outcomes, token_acc, copy_acc)
    runs = {}
    if cfg.doctests:
        runs["doctests"] = _run_all(examples, doctest_command(), cfg, only_with_doctests=True)
    if cfg.test_command:
        runs["test_command"] = _run_all(examples, cfg.test_command, cfg, only_with_doctests=False)
    result = RepairEvaluation(table, examples, runs, time.perf_counter() - t0)
    if report_file is not None:
        report_file.write(lambda: atomic_write_json(cfg.report, {**result.summary(), "examples": examples}, indent=1,
                                                    through_link=True))
    return result


def _run_all(examples: list[dict], command: str | list[str], cfg: RepairEvalConfig, only_with_doctests: bool) -> dict:
    """Run `command` on the reference fix and on the prediction of each chosen pair; totals by status."""
    chosen = [e for e in examples if ">>>" in e["fixed"]] if only_with_doctests else examples
    if cfg.max_runs is not None:
        chosen = chosen[:cfg.max_runs]
    reference, predicted = collections.Counter(), collections.Counter()
    key = "doctests" if only_with_doctests else "test_command"
    for e in chosen:
        ref = run_code(e["fixed"], command, cfg.time_limit)
        pred = ref if e["predicted"] == e["fixed"] else run_code(e["predicted"], command, cfg.time_limit)
        e[key] = {"reference": ref.status, "predicted": pred.status}
        reference[ref.status] += 1
        predicted[pred.status] += 1
    return {"pairs": len(chosen), "reference": dict(reference), "predicted": dict(predicted)}


def format_repair_report(ev: RepairEvaluation) -> str:
    """The table `trm-kaggle evaluate-repair` prints."""
    head = (f"{'bug type':<20}{'pairs':>7}{'exact fix':>11}{'copy input':>12}{'fixed':>7}{'unchanged':>11}"
            f"{'changed wrongly':>17}{'token acc':>11}{'copy tok':>10}")
    lines = ["exact-fix rate: the prediction read back as text equals the fix (copy input: the baseline that "
             "returns the buggy code)", head]

    def line(name: str, r: dict) -> str:
        return (f"{name:<20}{r['pairs']:>7}{r['exact_fix_rate']:>11.3f}{r['copy_exact_fix_rate']:>12.3f}"
                f"{r['fixed']:>7}{r['unchanged']:>11}{r['changed_wrongly']:>17}{r['token_accuracy']:>11.4f}"
                f"{r['copy_token_accuracy']:>10.4f}")

    for name, r in ev.table["per_bug_type"].items():
        lines.append(line(name, r))
    lines.append(line("overall", ev.table["overall"]))
    for key, r in ev.runs.items():
        lines.append(f"{key}: {r['pairs']} pairs run; reference fix {_statuses(r['reference'])}; "
                     f"model output {_statuses(r['predicted'])}")
    return "\n".join(lines)


def _statuses(counts: dict) -> str:
    return ", ".join(f"{counts.get(s, 0)} {s}" for s in ("passed", "failed", "timeout"))
