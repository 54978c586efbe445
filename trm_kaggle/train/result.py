"""What a training call returns, and the sentence a person reads when it ends."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from trm_kaggle.model import ParameterCount
from trm_kaggle.train.metrics import shown


@dataclass
class TrainResult:
    run_dir: Path
    step: int
    epoch: float
    metrics: dict[str, float] = field(default_factory=dict)
    eval_metrics: dict[str, float] = field(default_factory=dict)
    examples_per_second: float = 0.0
    parameters: ParameterCount | None = None
    is_main: bool = True  # rank 0 (the replica that logs and saves)
    start_step: int = 0  # the step this call began at (> 0: it resumed the run)
    stopped_by: str = ""  # why training ended before its last step ("the time limit", ...); "" when it got there
    already_done: str = ""  # the run had reached its last step before this call: what that step is (nothing trained)
    not_evaluated: str = ""  # why this call evaluated nothing when it was known at its start (a max_steps stop)

    @property
    def new_steps(self) -> int:
        """Optimizer steps this call took."""
        return self.step - self.start_step

    def summary(self) -> str:
        """What a person wants to read when training ends (metrics under their exact names), each line escaped
        (`one_line`): the run directory may come from a config file, and a newline or an escape sequence in its
        name reached the terminal raw."""
        from trm_kaggle.wording import one_line

        return "\n".join(one_line(line) for line in self.summary_lines())

    def summary_lines(self) -> list[str]:
        """The summary's lines, each whole: the run directory in one may hold a newline of its own."""
        m = self.metrics
        lines = [f"model: {self.parameters}"] if self.parameters else []
        # no loss when no step was logged (a time limit that no step fits): said, not shown as nan
        last = (f"last loss {m['loss']:.4f}, exact accuracy (train batches, halted rows) "
                f"{shown(m.get('exact_accuracy'))}" if "loss" in m else "no step logged: no loss, no accuracy")
        if self.already_done:
            lines.append(f"already done at step {self.step} ({self.epoch:.2f} epochs): {self.already_done}; "
                         f"nothing trained, metrics.jsonl unchanged; {last.replace('last loss', 'last logged loss')}; "
                         f"run directory {self.run_dir}")
        else:
            steps = (f"{self.step} steps" if not self.start_step else
                     f"{self.new_steps} new steps, resuming at step {self.start_step}, to step {self.step}")
            # no step in this process: no rate was measured (0.0 was shown as one)
            rate = f" at {self.examples_per_second:.1f} examples/s" if self.new_steps else ", no rate measured"
            lines.append(f"trained {steps} ({self.epoch:.2f} epochs){rate}"
                         + (f", stopped by {self.stopped_by}" if self.stopped_by else "")
                         + f"; {last}; run directory {self.run_dir}")
        if self.eval_metrics and not self.eval_metrics.get("eval_examples"):
            lines.append("test split: no test examples, no accuracy")
        elif self.eval_metrics:
            lines.append(f"test split: exact accuracy {self.eval_metrics['eval_exact_accuracy']:.3f} over "
                         f"{self.eval_metrics['eval_examples']} examples (per augmented example; not the ARC Prize "
                         "score)")
        elif self.not_evaluated:
            lines.append(f"test split: {self.not_evaluated}")
        return lines
