"""What the solve's plan makes of other budgets, from the rates a real `submit` measured.

    python benchmarks/bench_solve_plan.py --work-dir runs/s420/submission-ttt \
        --challenges arc-agi_test_challenges.json --budgets 420 4200 41400

A `submit` with `--num-aug auto --finetune-steps auto` times its steps on the device, plans, and records both
in WORK_DIR/workers/w<N>.plan.json. This reads worker 0's measured rates and prices the same tasks for each
budget with the solve's own `make_plan` (the margins `submit` keeps: its safety margin and the timing it has
spent are taken off first), printing the plan each budget gets: augmentations, fine-tuning steps per task,
the seconds it expects and whether it fits. Nothing is trained or predicted: a budget of hours is answered in
a second, from the seconds the short run measured.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    from trm_kaggle.wording import OneLineParser  # an error line quotes what was typed escaped
    ap = OneLineParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work-dir", required=True, help="a submit's work folder (holding workers/w0.plan.json)")
    ap.add_argument("--challenges", required=True, help="the challenges file that submit ran on")
    ap.add_argument("--budgets", type=float, nargs="+", default=[420, 4200, 41400], help="seconds (--time-budget)")
    ap.add_argument("--safety-margin", type=float, default=60.0, help="submit's --safety-margin (default 60)")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from benchmarks.entry import check_options
    from trm_kaggle.errors import TRMError

    # before the plan's reads: a budget nan was refused after them, as `time_budget`, a setting nobody typed
    from trm_kaggle.config import SolveConfig

    def most(field: str) -> float:  # submit's own bound: one owner
        return next(m.le for m in SolveConfig.model_fields[field].metadata if hasattr(m, "le"))

    check_options(positive={"--budgets": next((b for b in args.budgets if not (math.isfinite(b) and b > 0)), None)})
    if (high := next((b for b in args.budgets if b > most("time_budget")), None)) is not None:
        raise TRMError(f"--budgets {high}: at most {most('time_budget'):,} seconds, as submit's --time-budget")
    if not (math.isfinite(args.safety_margin) and 0 <= args.safety_margin <= most("safety_margin")):
        raise TRMError(f"--safety-margin {args.safety_margin}: seconds from 0 to {most('safety_margin'):,}, as "
                       "submit's")
    from trm_kaggle.data import read_challenges
    from trm_kaggle.evaluate import count_test_inputs, require_tasks
    from trm_kaggle.jsonio import read_json
    from trm_kaggle.solve import Rates, make_plan
    from trm_kaggle.wording import one_line, shown

    plan_file = Path(args.work_dir) / "workers" / "w0.plan.json"
    try:
        saved = read_json(plan_file, "a worker's plan")
        measured = saved["rates"]
        known = {f.name for f in dataclasses.fields(Rates)}
        if missing := [f.name for f in dataclasses.fields(Rates) if f.name not in measured
                       and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]:
            raise ValueError(f"no {', '.join(missing)}")
        rates = Rates(**{k: tuple(v) if isinstance(v, list) else v for k, v in measured.items() if k in known})
        if not isinstance(rates.device, str):
            raise ValueError(f"device {rates.device!r} is no device name")
    except TRMError as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2  # bad input: the status of the package's commands
    except (TypeError, AttributeError, KeyError, ValueError) as e:  # ValueError: a rate Rates refuses
        print(f"error: {one_line(plan_file)}: not a worker's plan with its measured rates ({one_line(e)})",
              file=sys.stderr)
        return 2
    try:  # as submit reads them: `{}` (or no test input at all) is refused, never a plan for nothing
        tasks = read_challenges(args.challenges, set())
        require_tasks(count_test_inputs(tasks), args.challenges, "there is nothing to plan")
        units = [(len(t["test"]), len(t["train"])) for t in tasks.values()]
    except TRMError as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        return 2
    except (TypeError, AttributeError, KeyError) as e:  # a submission or any other JSON named as the challenges
        print(f"error: {one_line(args.challenges)}: not a challenges file of tasks with train and test pairs "
              f"({one_line(e)})", file=sys.stderr)
        return 2
    spent = float(measured.get("timing_s", 0.0)) + float(measured.get("sizing_s", 0.0))
    print(f"{len(units)} tasks, {sum(t for t, _ in units)} test inputs; measured on {shown(rates.device)}: a step "
          f"{rates.step_s:.2f} s, a row's prediction step {rates.row_step_s:.3f} s (timing took {spent:.0f} s)")
    for budget in args.budgets:
        cfg = SolveConfig(challenges="-", weights="-", num_aug="auto", finetune_steps="auto", time_budget=budget,
                          safety_margin=args.safety_margin)
        plan = make_plan(cfg, units, rates, max(0.0, budget - args.safety_margin - spent))
        print(f"  --time-budget {budget:>8.0f} s: num_aug {plan.num_aug}, {plan.finetune_steps} fine-tuning steps "
              f"a task, expects {plan.total_s:.0f} s, {'fits' if plan.fits else 'does not fit: the smallest plan'}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: benchmarks.entry
    # a refusal, a stop: one line and the status of the package's commands
    from benchmarks.entry import command

    sys.exit(command(main))
