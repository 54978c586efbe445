"""Writing a run's metrics: metrics.jsonl (plus TensorBoard / W&B, offline), one record per log interval.

A step's metrics stay on the device until its interval's line is due: `LogWindow` holds them and reads
them all with one host read, replaying the verdicts a `DeviceGuard` decided on the device (a skipped step's
metrics are left out). `trm_kaggle.train.metrics` reads the file back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import torch

from trm_kaggle.atomic import append_line, check_log
from trm_kaggle.config import TrainConfig
from trm_kaggle.errors import TRMError
from trm_kaggle.train.metrics import METRICS_FILE
from trm_kaggle.train.step import METRIC_NAMES
from trm_kaggle.wording import clipped


def logger_problem(cfg: TrainConfig) -> str | None:
    """Why a logger the settings ask for cannot run (its package is not installed), or None."""
    if cfg.tensorboard:
        try:
            from torch.utils.tensorboard import SummaryWriter  # noqa: F401
        except ImportError:
            return "tensorboard=True needs the tensorboard package (pip install tensorboard)"
    if cfg.wandb:
        try:
            import wandb  # noqa: F401
        except ImportError:
            return "wandb=True needs the wandb package (pip install wandb)"
    return None


class MetricLog:
    """metrics.jsonl in the run directory, plus optional TensorBoard / W&B (offline)."""

    def __init__(self, run_dir: Path, cfg: TrainConfig, enabled: bool):
        self.enabled = enabled
        self.path = run_dir / METRICS_FILE
        self.tb = self.wandb = None
        if not enabled:
            return
        self.check(cfg)
        check_log(self.path)  # a planted link is refused before the first step, not at the first line
        if cfg.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(run_dir / "tensorboard"))
        if cfg.wandb:
            import os

            import wandb

            os.environ.setdefault("WANDB_MODE", "offline")
            self.wandb = wandb.init(project=cfg.project_name or "trm_kaggle", name=cfg.run_name,
                                    dir=str(run_dir), config=cfg.model_dump())

    @staticmethod
    def check(cfg: TrainConfig) -> None:
        """TRMError when a logger the settings ask for cannot be imported (checked before the run folder is made)."""
        if problem := logger_problem(cfg):
            raise TRMError(problem)

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        append_line(self.path, json.dumps(record))
        step = record.get("step", 0)
        for k, v in record.items():
            if isinstance(v, (int, float)) and k != "step":
                if self.tb:
                    self.tb.add_scalar(k, v, step)
        if self.wandb:
            self.wandb.log(record, step=step)

    def close(self) -> None:
        if self.tb:
            self.tb.close()
        if self.wandb:
            self.wandb.finish()


class LogWindow:
    """The steps since the last log record: (step index, metrics, device verdict) each, read on the host once."""

    def __init__(self):
        self.pending: list[tuple[int, torch.Tensor, torch.Tensor | None]] = []
        self.sums: dict[str, float] = {}

    @property
    def open(self) -> bool:
        """Whether steps since the last record that closed an interval are held (read or pending)."""
        return bool(self.pending) or self.sums.get("steps_logged", 0) > 0

    def state_dict(self) -> dict[str, float]:
        """The sums of the interval's steps so far, for the train state (its pending steps are `read` first): a
        resume in the middle of an interval puts them back, so that its record averages the steps an unbroken
        run's does."""
        if self.pending:
            raise RuntimeError("the log window's pending steps are read before its state is taken")
        return dict(self.sums)

    def load_state_dict(self, sums: object) -> None:
        """ValueError unless `sums` is what `state_dict` writes: names this window sums, each with a number."""
        known = {"steps_logged", "loss", *METRIC_NAMES}
        if not isinstance(sums, dict):
            raise ValueError(f"a {type(sums).__name__}, not a mapping of the interval's sums")
        for key, value in sums.items():
            if key not in known or not isinstance(value, (int, float)) or isinstance(value, bool):
                raise ValueError(f"its entry {clipped(key)}: {clipped(value)} is no sum this window keeps "
                                 f"({', '.join(sorted(known))}, each a number)")
        if not (isinstance(sums.get("steps_logged", 0), int) and sums.get("steps_logged", 0) >= 0):
            raise ValueError(f"steps_logged {clipped(sums.get('steps_logged'))} is no whole number from 0")
        self.pending, self.sums = [], dict(sums)

    def add(self, at: int, metrics: torch.Tensor, verdict: torch.Tensor | None) -> None:
        self.pending.append((at, metrics, verdict))
        self.sums["steps_logged"] = self.sums.get("steps_logged", 0) + 1

    def read(self, replay: Callable[[bool, int], bool]) -> None:
        """Add the pending steps' metrics to the sums with one host read. A step whose finite check was decided
        on the device carries its verdict: `replay(finite, step)` says (in step order) whether it was skipped,
        and a skipped step's metrics are left out."""
        pending, self.pending = self.pending, []
        if not pending:
            return
        metrics = torch.stack([m for _, m, _ in pending])
        verdicts = [v for _, _, v in pending if v is not None]
        flat = torch.cat([metrics.flatten()] + ([torch.stack(verdicts).to(metrics.dtype)] if verdicts else [])).tolist()
        width = metrics.shape[1]
        decided = iter(flat[len(pending) * width:])
        for i, (at, _, verdict) in enumerate(pending):
            if verdict is not None and replay(next(decided) > 0, at):
                self.sums["steps_logged"] -= 1
                continue
            for key, v in zip(["loss"] + METRIC_NAMES, flat[i * width:(i + 1) * width]):
                self.sums[key] = self.sums.get(key, 0.0) + v

    def record(self, step: int, epoch: float, lr: float, global_batch: int,
               closes: bool = True) -> dict[str, float] | None:
        """The interval's record once its steps are read, None while some are pending or every step read so far
        was skipped (those join the next interval); the sums start again when the record `closes` its interval.
        One that does not (a stop between log steps) leaves them: the state saved at the stop keeps them, and the
        resumed run's record of the interval averages all its steps, as an unbroken run's does."""
        if self.pending or "loss" not in self.sums:
            return None
        record = summarise(self.sums, step, epoch, lr, global_batch)
        if closes:
            self.sums = {}
        return record


def summarise(sums: dict[str, float], step: int, epoch: float, lr: float, global_batch: int) -> dict[str, float]:
    n = sums.get("count", 0.0)  # rows that halted in the interval
    rows = max(1, global_batch) * max(1, sums["steps_logged"])  # every row of every step logged
    record = {"step": step, "epoch": epoch, "lr": lr, "loss": sums["loss"] / rows}
    if n > 0:  # averages over the halted rows (HALTED_ROW_METRICS): with none, no value rather than a false 0
        # the loss's parts are sums over every row, as the loss is (upstream divides them by the batch): divided by
        # the halted rows alone, lm_loss was up to 6x the loss it is part of, and moved with log_interval
        record.update({"lm_loss": sums["lm_loss"] / rows, "q_halt_loss": sums["q_halt_loss"] / rows,
                       "token_accuracy": sums["token_accuracy"] / n, "exact_accuracy": sums["exact_accuracy"] / n,
                       "q_halt_accuracy": sums["q_halt_accuracy"] / n, "act_steps": sums["steps"] / n})
    record["halted_examples"] = int(n)
    return record
