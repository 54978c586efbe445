"""--execute (trm_kaggle.kaggle.sandbox): command construction and sandbox layout only.

The run itself is slow; tests/test_kaggle_kernel.py runs it.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from trm_kaggle.errors import TRMError
from trm_kaggle.kaggle import kernel as K
from trm_kaggle.kaggle import metadata as M
from trm_kaggle.kaggle import rehearsal as R
from trm_kaggle.kaggle import sandbox as S

from conftest import IDS


def test_papermill_command_passes_every_parameter(tmp_path):
    layout = S.SandboxLayout(tmp_path / "sandbox", IDS)
    params = S.papermill_parameters(layout, time_budget=None, finetune_steps=5, num_aug="auto", device="cpu",
                                    max_tasks=2, workers=None)
    assert tuple(params) == K.PARAMETER_NAMES
    assert params["WHEELS_DIR"] is None and params["WEIGHTS_DIR"] is None  # the kernel searches, as on Kaggle
    assert params["KAGGLE_INPUT"] == str(tmp_path / "sandbox" / "input")
    assert params["KAGGLE_WORKING"] == str(tmp_path / "sandbox" / "working")
    cmd = S.papermill_command(Path("nb.ipynb"), Path("out.ipynb"), kernel=S.KERNEL_NAME, cwd=layout.working,
                              parameters=params, python="/py", execution_timeout=60)
    assert cmd[:5] == ["/py", "-m", "papermill", "nb.ipynb", "out.ipynb"]
    assert cmd[cmd.index("-k") + 1] == S.KERNEL_NAME and cmd[cmd.index("--cwd") + 1] == str(layout.working)
    passed = {cmd[i + 1]: cmd[i + 2] for i, a in enumerate(cmd) if a == "-p"}
    assert passed == {"KAGGLE_INPUT": params["KAGGLE_INPUT"], "KAGGLE_WORKING": params["KAGGLE_WORKING"],
                      "TIME_BUDGET": "None", "FINETUNE_STEPS": "5", "NUM_AUG": "auto", "MAX_TASKS": "2",
                      "WORKERS": "None", "DEVICE": "cpu", "WHEELS_DIR": "None", "WEIGHTS_DIR": "None"}
    assert cmd[cmd.index("--execution-timeout") + 1] == "60"


def test_netns_wrapper_and_probe():
    inner = ["/py", "-m", "papermill", "a", "b"]
    cmd = S.netns_wrapper(("--net",), inner, unshare="/usr/bin/unshare", python="/py")
    assert cmd[:3] == ["/usr/bin/unshare", "--net", "--"]
    assert cmd[3:5] == ["/py", "-c"] and "if_nameindex" in cmd[5] and cmd[6:] == inner
    tried = []

    def runner(cmd, **kw):
        tried.append(cmd[1:cmd.index("--")])
        return subprocess.CompletedProcess(cmd, 0 if "--map-root-user" in cmd else 1, "", "unshare: denied")

    assert S.probe_netns(unshare="/usr/bin/unshare", runner=runner) == ("--net", "--map-root-user")
    assert tried == [["--net"], ["--net", "--map-root-user"]]
    with pytest.raises(TRMError, match="refusing to run the kernel with network"):
        S.probe_netns(unshare="/usr/bin/unshare",
                      runner=lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", "unshare: denied"))
    # the bootstrap refuses to exec when the namespace has more than loopback
    assert 'names != ["lo"]' in S.NETNS_BOOTSTRAP and "os.execvp" in S.NETNS_BOOTSTRAP


def test_shadow_site_hides_the_repos_own_install(tmp_path):
    site = tmp_path / "site-packages"
    for d in ("torch", "numpy", "ipykernel", "trm_kaggle", "trm_kaggle-0.1.0.dist-info", "trm_kaggle_extras"):
        (site / d).mkdir(parents=True)
    (site / "__editable___trm_kaggle_0_1_0_finder.py").write_text("MAPPING = {}\n")
    (site / "__editable__.trm_kaggle-0.1.0.pth").write_text("import __editable___trm_kaggle_0_1_0_finder\n")
    (site / "easy-install.pth").write_text("/opt/other\n/work/repo\n")
    (site / "distutils-precedence.pth").write_text("import os\n")
    made = S.build_shadow_site([site, tmp_path / "absent"], tmp_path / "shadow", repo=Path("/work/repo"))
    assert len(made) == 1
    names = sorted(p.name for p in made[0].iterdir())
    assert names == ["distutils-precedence.pth", "easy-install.pth", "ipykernel", "numpy", "torch",
                     "trm_kaggle_extras"]
    assert (made[0] / "torch").is_symlink() and (made[0] / "torch").resolve() == (site / "torch").resolve()
    assert (made[0] / "easy-install.pth").read_text() == "/opt/other\n"


def test_sandbox_env_isolates(tmp_path):
    layout = S.SandboxLayout(tmp_path / "sb", IDS)
    env = S.sandbox_env(layout, {"PATH": "/usr/bin", "PYTHONPATH": "/work/main", "PIP_INDEX_URL": "http://x"})
    assert "PYTHONPATH" not in env and "PIP_INDEX_URL" not in env
    assert env["PATH"].split(":")[0] == str(layout.venv / "bin") and env["VIRTUAL_ENV"] == str(layout.venv)
    assert env["JUPYTER_PATH"] == str(layout.jupyter)


def test_prepare_sandbox_layout(bundle_copy, tmp_path):
    challenges = tmp_path / "arc-agi_evaluation_challenges.json"
    tasks = {f"t{i}": {"train": [{"input": [[1]], "output": [[2]]}], "test": [{"input": [[1]]}]} for i in range(3)}
    challenges.write_text(json.dumps(tasks))
    (tmp_path / "arc-agi_evaluation_solutions.json").write_text(json.dumps({k: [[[2]]] for k in tasks}))
    layout = S.prepare_sandbox(bundle_copy, IDS, challenges, competition="arc-prize-2099")
    assert layout.root == bundle_copy.absolute() / "sandbox"
    assert (layout.wheels / M.DATASET_META).is_file() and (layout.weights / "weights.safetensors").is_file()
    assert layout.challenges == layout.root / "input" / "arc-prize-2099" / "arc-agi_test_challenges.json"
    # every task: MAX_TASKS limits the model's work inside the kernel, never the file it must answer
    assert list(json.loads(layout.challenges.read_text())) == ["t0", "t1", "t2"]
    assert json.loads(layout.solutions.read_text()) == {k: [[[2]]] for k in tasks}
    assert not str(layout.solutions).startswith(str(layout.input))  # the kernel cannot see the solutions
    assert layout.working.is_dir()
    again = S.prepare_sandbox(bundle_copy, IDS, challenges)  # a second run replaces the first
    assert again.challenges.parent.name == M.COMPETITION and not layout.challenges.exists()
    assert callable(R.execute)


def test_a_challenges_file_with_an_id_written_twice_reaches_the_sandbox_as_it_is(bundle_copy, tmp_path):
    """The up-front check took such a file (the kernel answers the id by its last copy), then the sandbox's own read
    refused it after the bundle was built; and a re-written copy would not be the file the kernel meets on Kaggle."""
    task = json.dumps({"train": [{"input": [[1]], "output": [[2]]}], "test": [{"input": [[1]]}]})
    challenges = tmp_path / "arc-agi_test_challenges.json"
    challenges.write_bytes(b'{"a0000001": %s,\n "a0000001": %s}' % (task.encode(), task.encode()))
    S.check_challenges(challenges)
    layout = S.prepare_sandbox(bundle_copy, IDS, challenges)
    assert layout.challenges.read_bytes() == challenges.read_bytes()


def test_the_rehearsal_checks_the_kernels_own_search_for_its_datasets(tmp_path):
    layout = S.SandboxLayout(tmp_path / "sandbox", IDS, mounts="2026")
    right = f"wheels: {layout.wheels}\nweights: {layout.weights}\nchallenges: x\n"
    assert R.search_problems(right, layout, {"WHEELS_DIR": None, "WEIGHTS_DIR": None}) == []
    wrong = f"wheels: {layout.wheels}\nweights: {layout.input / 'other' / 'weights-not-found'}\n"
    (problem,) = R.search_problems(wrong, layout, {"WHEELS_DIR": None, "WEIGHTS_DIR": None})
    assert problem.startswith("the kernel's search for its weights dataset found ") and str(layout.weights) in problem
    assert R.search_problems(wrong, layout, {"WEIGHTS_DIR": "/set/by/hand"}) == []  # a folder named: no search


def test_the_kernels_warnings_reach_the_console_and_the_report():
    """A bad notebook parameter replaced by its default was said only in papermill.log: the rehearsal's progress
    lines and its report (`ok: True`, no problems) did not mention it."""
    log = ("[IPKernelApp] WARNING | Kernel is running over TCP without encryption.\n"
           "WARNING: TIME_BUDGET=nan is not \"auto\": using 'auto'\n"
           "[elapsed 0m01s, left 14m59s] plan: sizing\n"
           "[elapsed 0m02s, left 14m58s] plan: worker 0: 2 tasks\n")
    assert R.kernel_warnings(log) == ["WARNING: TIME_BUDGET=nan is not \"auto\": using 'auto'"]
    shown: list[str] = []
    take = R.kernel_progress(shown.append)
    for line in log.splitlines(keepends=True):
        take(line)
    assert shown == ["  kernel WARNING: TIME_BUDGET=nan is not \"auto\": using 'auto'",
                     "  kernel [elapsed 0m02s, left 14m58s] plan: worker 0: 2 tasks"]


def test_a_parameter_the_kernel_lacks_or_the_rehearsal_sets_is_refused_before_the_sandbox(bundle_copy):
    """`execute(parameters={"TIME_BUGDET": 60})` ran with the default budget, ok True, only papermill.log saying
    "Passed unknown parameter"; `parameters={"KAGGLE_WORKING": D}` had the kernel write D/submission.json while the
    rehearsal checked its own working/ and said "not written". Both are refused before the sandbox is made."""
    for parameters, said in (({"TIME_BUGDET": 60}, "parameters: 'TIME_BUGDET' is no parameter of the kernel notebook"),
                             ({"KAGGLE_WORKING": "/tmp/w"}, "parameters: KAGGLE_WORKING is set by the rehearsal")):
        with pytest.raises(TRMError, match=re.escape(said)):
            R.execute(bundle_copy, parameters=parameters, echo=lambda line: None)
        assert not (bundle_copy / "sandbox").exists()
    shipped = Path(__file__).resolve().parents[1] / "notebooks" / "kaggle_submission.ipynb"
    assert R.parameter_problem({"TIME_BUDGET": 60, "TRAJECTORIES": 2, "STRICT": True}, shipped) is None


def test_a_stopped_rehearsal_closes_its_log_without_a_threads_traceback(tmp_path, monkeypatch):
    """A SIGTERM to `build_bundle.py --execute` printed `interrupted`, then the log pump thread's traceback
    ("ValueError: I/O operation on closed file"): the log closed while the stopped group's last lines were still
    being written to it."""
    import os
    import signal
    import sys
    import threading
    import time

    from trm_kaggle.kaggle import rehearsal

    errors = []
    hook, threading.excepthook = threading.excepthook, lambda a: errors.append(a.exc_value)  # pytest's own is set
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # a test worker may ignore SIGINT
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    with pytest.raises(KeyboardInterrupt):
        rehearsal._run_logged([sys.executable, "-c", "for i in range(10**7):\n print(i, flush=True)\n"],
                              env=dict(os.environ), cwd=tmp_path, log_path=tmp_path / "log", timeout=None,
                              echo=lambda line: None)
    signal.signal(signal.SIGINT, previous)
    time.sleep(0.5)
    threading.excepthook = hook
    assert errors == []
