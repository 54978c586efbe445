"""Training on several nodes with torch's elastic launcher, two launchers on 127.0.0.1 standing for two
nodes (CPU, gloo): the same weights as one node, a worker killed and the group restarted, a node that
never joins; and `trm-kaggle torchrun`'s checks."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import free_port
from integrity_helpers import build_sudoku4
from test_train import TINY
from trm_kaggle.cli import main
from trm_kaggle.errors import TRMError
from trm_kaggle.launch import torchrun
from trm_kaggle.train import checkpoint as ckpt
from trm_kaggle.train import peer_lost

# 12 steps, a train state every epoch (5 steps): states at steps 5, 10 and 12
SETTINGS = [*TINY, "max_steps=12", "eval_interval=1", "ema=True", "ema_rate=0.9"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]  # `torchrun`, as this interpreter runs it
OURS = [sys.executable, "-m", "trm_kaggle", "torchrun"]  # `trm-kaggle torchrun`
LIMIT = 240  # seconds a launch may take on a busy 2-core machine before the test gives up


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("data") / "sudoku4"
    return build_sudoku4(out)


def node_command(launcher: list[str], port: int, run: Path, data: Path, *, nodes: int = 2, procs: int = 1,
                 node_rank: int = 0, extra: tuple[str, ...] = ()) -> list[str]:
    return [*launcher, "--nnodes", str(nodes), "--nproc-per-node", str(procs), "--node-rank", str(node_rank),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", run.name, *extra,
            "-m", "trm_kaggle", "train", f"data_paths=[{data}]", f"checkpoint_path={run}", *SETTINGS]


def start(cmd: list[str], log: Path, env: dict | None = None) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.Popen(cmd, stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env, start_new_session=True)


def finish(procs: list[subprocess.Popen], timeout: float = LIMIT) -> list[int]:
    """Wait for every launcher; on a timeout, end the process groups these tests started, then fail."""
    deadline = time.monotonic() + timeout
    try:
        return [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def final_state(run: Path) -> dict:
    return ckpt.load_train_state(ckpt.list_states(run)[-1])


def assert_same_training(a: Path, b: Path) -> None:
    sa, sb = final_state(a), final_state(b)
    assert sa["step"] == sb["step"] == 12
    for part in ("model", "ema"):
        assert sa[part].keys() == sb[part].keys()
        for k in sa[part]:
            assert torch.equal(sa[part][k], sb[part][k]), f"{part}.{k} differs"


def trained_steps(run: Path) -> list[int]:
    return [r["step"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


@pytest.fixture(scope="module")
def two_nodes(data, tmp_path_factory) -> Path:
    """The uninterrupted run on two nodes (two torchrun launchers, one worker each), as the issue's command."""
    run = tmp_path_factory.mktemp("two_nodes") / "run"
    port = free_port()
    procs = [start(node_command(TORCHRUN, port, run, data, node_rank=r), run.parent / f"node{r}.log")
             for r in (0, 1)]
    codes = finish(procs)
    assert codes == [0, 0], (run.parent / "node1.log").read_text()[-3000:]
    return run


# ---------------------------------------------------------------------------
# Two nodes, a killed worker, a node that never joins (slow: real launchers and workers)
# ---------------------------------------------------------------------------


@pytest.mark.slow
def test_two_nodes_train_the_weights_of_one_node(data, two_nodes, tmp_path):
    """World size 2 either way: two launchers of one worker == one launcher of two workers, bit for bit."""
    run = tmp_path / "one_node"
    codes = finish([start(node_command(TORCHRUN, free_port(), run, data, nodes=1, procs=2), tmp_path / "node.log")])
    assert codes == [0], (tmp_path / "node.log").read_text()[-3000:]
    assert_same_training(two_nodes, run)
    assert final_state(two_nodes)["world_size"] == 2
    assert trained_steps(two_nodes) == list(range(1, 13))


# A worker of global rank 1 stops itself (SIGSTOP) once the run has its first train state and says its pid;
# the test then kills it with SIGKILL. Only the first such worker does: the marker file tells the workers of
# the restarted group (where any node may hold rank 1) to leave alone.
STOPPER = '''
import glob, os, signal, threading, time
run, marker = os.environ.get("TRM_TEST_RUN"), os.environ.get("TRM_TEST_MARKER", "")
if run and os.environ.get("RANK") == "1" and not os.path.exists(marker):
    def stop():
        while not glob.glob(os.path.join(run, "state_step*.pt")):
            time.sleep(0.01)
        with open(marker + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(marker + ".tmp", marker)
        os.kill(os.getpid(), signal.SIGSTOP)
    threading.Thread(target=stop, daemon=True).start()
'''


@pytest.mark.slow
def test_a_worker_killed_after_the_first_state_restarts_the_group_and_loses_no_step(data, two_nodes, tmp_path):
    run, marker, hook = tmp_path / "run", tmp_path / "stopped", tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(STOPPER)
    env = {"PYTHONPATH": os.pathsep.join([str(hook), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "TRM_TEST_RUN": str(run), "TRM_TEST_MARKER": str(marker)}
    port = free_port()
    procs = [start(node_command(OURS, port, run, data, node_rank=r, extra=("--max-restarts", "1")),
                   tmp_path / f"node{r}.log", env) for r in (0, 1)]
    try:
        deadline = time.monotonic() + LIMIT
        while not marker.exists():
            assert all(p.poll() is None for p in procs), "a launcher ended before the worker was stopped"
            assert time.monotonic() < deadline, "no train state appeared"
            time.sleep(0.05)
        states_then = [ckpt.list_states(run)]
        os.kill(int(marker.read_text()), signal.SIGKILL)  # a worker of node 1 (global rank 1) dies outright
    finally:
        codes = finish(procs)
    logs = [(tmp_path / f"node{r}.log").read_text() for r in (0, 1)]
    assert codes == [0, 0], logs[1][-3000:]
    assert "exitcode: -9" in "".join(logs)  # torchrun saw the SIGKILL ...
    assert "torchrun restarted this node's worker group (restart 1 of --max-restarts)" in "".join(logs)
    resumed = [json.loads(line)["start_step"] for line in (run / "metrics.jsonl").read_text().splitlines()
               if "loss" in line]
    assert resumed[0] == 0 and resumed[-1] in (5, 10)  # ... and the restarted group resumed from a train state
    assert ckpt.state_path(run, 5) in states_then[0]
    assert trained_steps(run) == list(range(1, 13))  # every step logged once: none lost, none repeated
    assert_same_training(two_nodes, run)  # the weights of the uninterrupted run, bit for bit
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.slow
def test_a_node_that_never_joins_times_out_in_one_line_and_writes_nothing(data, tmp_path):
    run = tmp_path / "run"
    cmd = node_command(OURS, free_port(), run, data, extra=("--rdzv-conf", "join_timeout=3"))
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=LIMIT,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    assert len(errors) == 1 and errors[0] == lines[-1], proc.stderr
    assert "not all 2 nodes (--nnodes) joined within 3 s" in errors[0] and "127.0.0.1" in errors[0]
    assert "Traceback" not in proc.stderr
    assert time.monotonic() - t0 < 60  # the short timeout, not torch's 600 s
    assert not run.exists()  # no worker started: nothing written


@pytest.mark.slow
def test_nodes_started_with_different_settings_are_refused_at_once_not_left_waiting(data, tmp_path):
    """Two nodes started by hand with max_steps 10 and 30 trained until one waited in a collective for the other
    forever: no line, no save, workers that outlived their launchers. Every rank now refuses at the start."""
    run = tmp_path / "run"
    port = free_port()
    procs = [start(node_command(OURS, port, run, data, node_rank=r, extra=()) + [f"max_steps={10 + 20 * r}"],
                   tmp_path / f"node{r}.log") for r in (0, 1)]
    codes = finish(procs)
    out = (tmp_path / "node0.log").read_text()
    assert codes[0] != 0 and codes[1] != 0, out[-3000:]
    assert "the ranks were given different settings (max_steps: 10 on rank 0, 30 on rank 1)" in out, out[-3000:]
    assert not run.exists() or not ckpt.list_states(run)  # refused before any step


def test_the_settings_check_names_what_differs_between_ranks(monkeypatch):
    from trm_kaggle.config import TrainConfig
    from trm_kaggle.train import runtime

    cfg = TrainConfig(data_paths=["d"], max_steps=10)
    other = {"max_steps": 30}  # what rank 1 holds beside this rank's own settings

    def gather(everyone, given):
        everyone[:] = [given, {**given, **other}]

    monkeypatch.setattr(runtime.dist, "all_gather_object", gather)
    with pytest.raises(TRMError, match=r"different settings \(max_steps: 10 on rank 0, 30 on rank 1\)"):
        runtime.check_same_settings(cfg, 0, 2)
    other["max_steps"] = 10
    other["arch.L_cycles"] = cfg.arch.L_cycles + 1  # a nested setting is named as such
    with pytest.raises(TRMError, match=r"different settings \(arch.L_cycles: "):
        runtime.check_same_settings(cfg, 0, 2)
    other["arch.L_cycles"] = cfg.arch.L_cycles  # each node's own mount of the shared folder, its own threads: allowed
    runtime.check_same_settings(cfg.model_copy(update={"threads": 3, "data_paths": ["/mnt/d"]}), 0, 2)


# ---------------------------------------------------------------------------
# `trm-kaggle torchrun`'s checks (fast: nothing is launched)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("text, host, port", [("node0:29500", "node0", 29500), ("10.1.2.3:1", "10.1.2.3", 1),
                                              ("[fe80::1]:29400", "fe80::1", 29400)])
def test_endpoints_with_a_port_parse(text, host, port):
    ep = torchrun.parse_endpoint(text)
    assert (ep.host, ep.port) == (host, port)


@pytest.mark.parametrize("text", ["node0", "node0:", ":29500", "node0:http", "node0:70000", "fe80::1", "a b:1"])
def test_endpoints_without_a_usable_port_are_refused(text):
    with pytest.raises(TRMError, match="--rdzv-endpoint"):
        torchrun.parse_endpoint(text)


@pytest.mark.parametrize("args, message", [
    (["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "node0"], "expected HOST:PORT"),
    (["--nnodes", "2", "--rdzv-backend", "c10d"], "expected HOST:PORT"),
    (["--nnodes", "0"], "needs 1 <= MIN <= MAX"),
    (["--nnodes", "3:2"], "needs 1 <= MIN <= MAX"),
    (["--nnodes", "two"], "expected N or MIN:MAX"),
    (["--rdzv-conf", "join_timeout=0"], "positive number of seconds"),
    (["--nnodes", "1", "--bogus-flag", "1"], "torchrun: "),
    (["--nproc-per-node", "1000000000"], "from 1 to 1024"),
    (["--nproc-per-node", "0"], "from 1 to 1024"),
    (["--nproc-per-node", "-3"], "from 1 to 1024"),
    (["--nproc-per-node", "lots"], "or auto, cpu, gpu or xpu"),
    (["--max-restarts", "100000000000000000000"], "from 0 to 1000"),
    (["--max-restarts", "-1"], "from 0 to 1000"),
    (["--max-restarts", "1"], "--max-restarts 1: a static rendezvous (torchrun's default --rdzv-backend) cannot "
                              "restart its workers"),
    (["--nnodes", "2", "--node-rank", "5"], "--node-rank 5: a static rendezvous of 2 node(s) (--nnodes 2) numbers "
                                            "them 0 to 1"),
    (["--nnodes", "2", "--node-rank", "-1"], "numbers them 0 to 1"),
    (["--rdzv-conf", "timeout=2.5"], "timeout=2.5: expected a positive whole number of seconds"),
])
def test_bad_launches_are_one_error_line_before_any_rendezvous(args, message, capsys, tmp_path):
    code = main(["torchrun", *args, "-m", "trm_kaggle", "train", f"checkpoint_path={tmp_path / 'run'}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error:") and message in err[0], err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("words", ["4", "auto", "cpu"])
def test_the_worker_counts_torchrun_takes_pass(words):
    assert torchrun.parse(["--nproc-per-node", words, "--standalone", "--max-restarts", "1000",
                           "script.py"]).nproc_per_node == words


def test_train_settings_are_checked_before_the_rendezvous(capsys):
    code = main(["torchrun", "--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:9",
                 "-m", "trm_kaggle", "train", "--preset", "no-such-preset"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "unknown preset 'no-such-preset'" in err[0]


def test_the_train_arguments_are_found_in_a_torchrun_line():
    args = torchrun.parse(["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1", "-m", "trm_kaggle",
                           "train", "--preset", "arc2", "lr=1e-3"])
    assert torchrun.trained_module_args(args) == ["--preset", "arc2", "lr=1e-3"]
    assert torchrun.trained_module_args(torchrun.parse(["script.py", "x"])) is None


def test_a_static_node_waits_for_its_master_in_python_a_stop_ends_the_wait(data, tmp_path):
    """Node 1 of a static rendezvous whose master is not up: torch's store client waited inside C++ for up to
    900 s, deaf to SIGTERM and Ctrl-C, printing C++ stack frames. The wait is ours: its timeout is one line, and a
    SIGTERM ends it at once with 143."""
    port = free_port()
    cmd = [*OURS, "--nnodes", "2", "--nproc-per-node", "1", "--node-rank", "1", "--master-addr", "127.0.0.1",
           "--master-port", str(port), "-m", "trm_kaggle", "train", f"data_paths=[{data}]",
           f"checkpoint_path={tmp_path / 'run'}"]
    p = subprocess.run([*cmd[:-4], "--rdzv-conf", "timeout=2", *cmd[-4:]], capture_output=True, text=True,
                       timeout=LIMIT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert p.returncode == 2 and p.stderr.strip().splitlines() == [
        f"error: static rendezvous: the master node (--node-rank 0) at 127.0.0.1:{port} did not answer within 2 s: "
        "start it with the same --master-addr and --master-port, and check that this node reaches it; no worker was "
        "started (--rdzv-conf timeout=SECONDS sets the wait)"], p.stderr
    proc = start(cmd, tmp_path / "node.log")
    try:
        time.sleep(6)  # imported, waiting
        assert proc.poll() is None, (tmp_path / "node.log").read_text()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    finally:
        finish([proc])
    out = (tmp_path / "node.log").read_text()
    assert code == 143 and out.strip().splitlines() == ["interrupted: stopped by SIGTERM"], out
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_launcher_stopped_by_sigterm_says_so_in_one_line(data, tmp_path):
    """A scheduler's SIGTERM (a pod evicted, a job out of time) stops the workers; the launcher ends with one
    line and 128 + 15, and a later start resumes from the newest state."""
    run, log = tmp_path / "run", tmp_path / "node.log"
    cmd = node_command(OURS, free_port(), run, data, nodes=1)
    cmd[cmd.index("max_steps=12")] = "max_steps=100000"
    proc = start(cmd, log)
    try:
        deadline = time.monotonic() + LIMIT
        while not (run / "metrics.jsonl").exists():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)  # to the launcher alone, as a scheduler does
    finally:
        code = finish([proc])[0]
    errors = [ln for ln in log.read_text().splitlines() if ln.startswith("error:")]
    assert code == 128 + signal.SIGTERM
    assert errors == ["error: stopped by SIGTERM: the workers were stopped; started again, the run resumes from its "
                      "newest train state"]


def test_sighup_is_kept_out_of_torchruns_signals_only_where_another_remains():
    assert torchrun.without_hangup("SIGTERM,SIGINT,SIGHUP,SIGQUIT") == "SIGTERM,SIGINT,SIGQUIT"
    assert torchrun.without_hangup("SIGTERM, SIGHUP") == "SIGTERM"
    assert torchrun.without_hangup("SIGHUP") == "SIGHUP"  # the user's own choice


@pytest.mark.slow
def test_under_nohup_a_closed_terminal_leaves_the_launch_training(data, tmp_path):
    """torchrun handles SIGHUP by default: under `nohup` a closed terminal's SIGHUP still stopped the launcher and
    the workers (whose SIGHUP torchrun's handler had set back to its default), status 129. An ignored SIGHUP stays
    ignored: the run trains to its end."""
    run, log = tmp_path / "run", tmp_path / "node.log"
    cmd = node_command(OURS, free_port(), run, data, nodes=1)
    cmd[cmd.index("max_steps=12")] = "max_steps=60"
    proc = subprocess.Popen(cmd, stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"},
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))  # as nohup leaves it
    try:
        deadline = time.monotonic() + LIMIT
        while not (run / "metrics.jsonl").exists():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGHUP)  # the terminal closed: every process of the session
    finally:
        code = finish([proc])[0]
    assert code == 0, log.read_text()[-3000:]
    assert trained_steps(run)[-1] == 60


@pytest.mark.slow
def test_a_refusal_by_rank_0_alone_is_no_traceback_on_the_others(data, tmp_path, holder):
    """Rank 0 alone takes the run folder's lock: when another training held it (a second launcher started within
    the first one's start-up), rank 0 refused in one line and rank 1, left in the model's broadcast, printed gloo's
    traceback. Each rank now says one line: the refusal, and the lost group naming the line that says why."""
    run, log = tmp_path / "run", tmp_path / "node.log"
    p = holder(run, "training")
    proc = start([*TORCHRUN, "--nproc-per-node", "2", "--master-port", str(free_port()), "-m", "trm_kaggle", "train",
                  f"data_paths=[{data}]", f"checkpoint_path={run}", *SETTINGS], log)
    finish([proc])
    out = log.read_text()
    workers = out.split("elastic/multiprocessing/api.py")[0]  # plain torchrun's own traceback follows
    assert "Traceback" not in workers, out[-3000:]
    errors = [ln for ln in workers.splitlines() if ln.startswith("error:")]
    assert f"error: {run}: another training is running in this directory: process {p.pid}" in " ".join(errors)
    # rank 1: its one line, unless torchrun's SIGTERM (sent once rank 0 ended) reached it first
    assert all(ln.startswith(("error: rank 1: the group's connection was lost (", f"error: {run}: another training"))
               for ln in errors), out[-3000:]


def test_a_lost_peer_is_said_only_under_torchrun(monkeypatch):
    gloo = RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [1.2.3.4]:5")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert peer_lost(gloo) is None  # one process: no group to lose
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    lost = peer_lost(gloo)
    assert lost.exit_status == 1 and str(lost) == ("rank 1: the group's connection was lost (Connection closed by "
                                                   "peer): another rank ended, and its own line above says why")
    assert peer_lost(RuntimeError("mat1 and mat2 shapes cannot be multiplied")) is None
    assert peer_lost(ValueError("Connection closed by peer")) is None


def running(pid: int) -> bool:
    """The process exists and is no zombie (a reaped or dead worker is not running)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def long_launch(run: Path, data: Path, procs: int = 2) -> list[str]:
    """`trm-kaggle torchrun` of a one-node run that trains until it is stopped."""
    cmd = node_command(OURS, free_port(), run, data, nodes=1, procs=procs)
    cmd[cmd.index("max_steps=12")] = "max_steps=100000"
    return cmd


def training_workers(proc: subprocess.Popen, run: Path, log: Path) -> list[int]:
    """The launcher's workers (their pids), once the run has logged a step."""
    deadline = time.monotonic() + LIMIT
    while not (run / "metrics.jsonl").exists():
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
        time.sleep(0.05)
    return [int(p) for p in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()]


@pytest.mark.slow
def test_workers_whose_launcher_was_killed_save_and_stop(data, tmp_path):
    """torchrun starts each worker in a session of its own: a SIGKILL of the launcher's process group left both
    ranks training, writing the run folder, with nobody to stop them. They watch their launcher: once it is gone,
    they save and stop as on a SIGTERM."""
    run, log = tmp_path / "run", tmp_path / "node.log"
    proc, workers = start(long_launch(run, data), log), []
    try:
        workers = training_workers(proc, run, log)
        assert len(workers) == 2, workers
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher's group: the workers are in sessions of their own
        proc.wait()
        deadline = time.monotonic() + 60
        while any(map(running, workers)) and time.monotonic() < deadline:
            time.sleep(0.2)
        alive = [w for w in workers if running(w)]
    finally:
        for w in workers:
            if running(w):
                os.kill(w, signal.SIGKILL)
    assert not alive, f"ranks {alive} still train with their launcher gone"
    assert "stopped by SIGTERM at step" in log.read_text(), log.read_text()[-3000:]
    assert ckpt.newest_step(run) == trained_steps(run)[-1]  # saved where it stopped


@pytest.mark.slow
def test_a_rank_stopped_by_a_signal_is_said_as_a_stop(data, tmp_path):
    """A SIGTERM to one worker stops the group at one step, saved; the launcher called it "training failed on rank
    1 (exit status 143)" with status 1. It is a stop: said as one, with the signal's status."""
    run, log = tmp_path / "run", tmp_path / "node.log"
    proc, rank = start(long_launch(run, data), log), None
    try:
        worker = max(training_workers(proc, run, log))
        environ = Path(f"/proc/{worker}/environ").read_bytes().split(b"\0")
        rank = next(v.split(b"=", 1)[1].decode() for v in environ if v.startswith(b"RANK="))
        os.kill(worker, signal.SIGTERM)
    finally:
        code = finish([proc])[0]
    errors = [ln for ln in log.read_text().splitlines() if ln.startswith("error:")]
    assert code == 128 + signal.SIGTERM, log.read_text()[-3000:]
    # where both ranks stopped with the signal's status before the launcher looked, which one it was sent to is not
    # known, and not guessed; where the other was still running (a busy machine), the one that stopped is named
    said = re.match(r"error: stopped by SIGTERM \(sent to (a worker|rank \d+)\)", errors[0]) if errors else None
    assert len(errors) == 1 and said and said.group(1) in ("a worker", f"rank {rank}"), (errors, rank)
    assert ckpt.newest_step(run) == trained_steps(run)[-1]


def test_a_run_folder_no_rank_can_write_is_one_line_before_the_launch(data, tmp_path, capsys):
    """Every rank refused it in a line of its own, then the launcher said the group failed (status 1)."""
    (tmp_path / "afile").write_text("x")
    code = main(["torchrun", "--standalone", "--nproc-per-node", "2", "-m", "trm_kaggle", "train",
                 f"data_paths=[{data}]", f"checkpoint_path={tmp_path / 'afile' / 'run'}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: ") and "checkpoint_path" in err[0], err


# The launcher, run with a logging handler that makes the race of a stop said twice certain: `timeout` and `srun`
# pass on a SIGTERM the launcher already had, and the repeat landed inside torch's "shutting down workers" warning.
REPEATED_STOP = r'''
import logging, os, signal, sys, time

class RepeatWhileLogging(logging.StreamHandler):
    def format(self, record):
        if "death signal" in str(record.msg):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # the handler runs here, inside logging's emit
        return super().format(record)

logging.getLogger("torch.distributed.elastic.agent.server.api").addHandler(RepeatWhileLogging(sys.stdout))
from trm_kaggle.cli import main
sys.exit(main(["torchrun", "--standalone", "--nproc-per-node", "1", sys.argv[1], sys.argv[2]]))
'''


def test_a_stop_said_twice_is_one_line_not_a_logging_traceback(tmp_path):
    """A SIGTERM repeated while torch's agent logs that it shuts the workers down was raised inside logging's emit
    and printed as an 80-line "--- Logging error ---" traceback before the stop's line."""
    worker, up, log = tmp_path / "worker.py", tmp_path / "up", tmp_path / "node.log"
    worker.write_text("import pathlib, sys, time\npathlib.Path(sys.argv[1]).write_text('up')\ntime.sleep(120)\n")
    proc = start([sys.executable, "-c", REPEATED_STOP, str(worker), str(up)], log)
    try:
        deadline = time.monotonic() + LIMIT
        while not up.exists():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
    finally:
        code = finish([proc])[0]
    out = log.read_text()
    assert code == 128 + signal.SIGTERM and "Logging error" not in out and "Traceback" not in out, out[-3000:]
    assert [ln for ln in out.splitlines() if ln.startswith("error:")] == [
        "error: stopped by SIGTERM: the workers were stopped; started again, the run resumes from its newest train "
        "state"]


@pytest.mark.parametrize("name", ["SIGUSR1", "SIGUSR2", "SIGTERM"])
def test_a_worker_that_ended_by_a_stop_signals_status_is_a_stop_not_a_failure(monkeypatch, name):
    """A SIGUSR1 (SLURM's warning before a kill) to one worker stops the group as a SIGTERM does, and the workers end
    with 128 + its number: the launcher called 138 "training failed on rank 1" with status 1."""
    import torch.distributed.run as torch_run
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    status = 128 + getattr(signal, name)

    def run(args):
        raise ChildFailedError("trm_kaggle", {r: ProcessFailure(r, 100 + r, status, "/nonexistent") for r in (0, 1)})

    monkeypatch.setattr(torch_run, "run", run)
    with pytest.raises(TRMError) as caught:
        torchrun.launch(torchrun.parse(["--standalone", "--nproc-per-node", "2", "-m", "trm_kaggle", "train"]))
    assert caught.value.exit_status == status and str(caught.value).startswith(f"stopped by {name} (sent to a worker)")


@pytest.mark.parametrize("backend", ["nosuch", "C10D", ""])
def test_a_rendezvous_backend_torch_does_not_register_is_one_line(capsys, backend, tmp_path):
    """torchrun looked the backend up once the launch had begun: a traceback of some 40 lines, status 1."""
    code = main(["torchrun", "--nnodes", "1", "--rdzv-backend", backend, "--rdzv-endpoint", "127.0.0.1:29620",
                 "-m", "trm_kaggle", "train", f"checkpoint_path={tmp_path / 'run'}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith(f"error: --rdzv-backend {backend!r}: torch knows c10d")


def test_an_endpoint_whose_host_does_not_resolve_is_one_line_at_once(data, capsys, tmp_path):
    """torch's store client retried an unknown host for some 110 s whatever join_timeout said, then C++ frames."""
    started = time.monotonic()
    code = main(["torchrun", "--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", "nohost.invalid:29620",
                 "--rdzv-conf", "join_timeout=5", "-m", "trm_kaggle", "train", f"data_paths=[{data}]",
                 f"checkpoint_path={tmp_path / 'run'}", *TINY])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith(
        "error: --rdzv-endpoint nohost.invalid:29620: the host 'nohost.invalid' cannot be resolved"), err
    assert time.monotonic() - started < 15 and not (tmp_path / "run").exists()


def test_an_endpoint_held_by_a_program_that_is_no_store_is_one_line_within_the_wait(capfd):
    """A port another program listens on: torch's store client waited as long as that program kept the connection
    (80 s and more, join_timeout ignored), printed C++ frames, and never said the port was taken."""
    import socket

    with socket.socket() as foreign:
        foreign.bind(("127.0.0.1", 0))
        foreign.listen(5)
        endpoint = torchrun.Endpoint("127.0.0.1", foreign.getsockname()[1])
        started = time.monotonic()
        with pytest.raises(TRMError, match=rf"a program answers at port {endpoint.port} but is no rendezvous store"):
            torchrun.answers_as_store(endpoint, 2.0)
        assert time.monotonic() - started < 10
    assert "frame #" not in capfd.readouterr().err


def test_a_rendezvous_store_at_the_endpoint_is_taken():
    from datetime import timedelta

    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=10))
    torchrun.answers_as_store(torchrun.Endpoint("127.0.0.1", store.port), 5.0)  # no error
    torchrun.answers_as_store(torchrun.Endpoint("127.0.0.1", free_port()), 5.0)  # nothing listens: torch's to host
