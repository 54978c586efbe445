"""`trm-kaggle torchrun ARGS`: torch's elastic launcher, checked before it joins, its failures in one line.

The arguments are torchrun's (torch.distributed.run's own parser) and so is everything that happens:
the rendezvous, the worker processes, the restarts of the worker group (`--max-restarts`). This adds:

* checks before the rendezvous: a backend torch registers; a multi-node launch names its endpoint as HOST:PORT
  (without a port torchrun quietly takes 29400, which the other nodes may not), a host that resolves, and a port
  where nothing listens yet or a rendezvous store answers (`answers_as_store`), `--nnodes N` or `MIN:MAX` with
  1 <= MIN <= MAX, `--nproc-per-node` from 1 to 1024 or one of torchrun's words (auto, cpu, gpu, xpu),
  `--max-restarts` from 0 to 1000 (and 0 with a static rendezvous, whose restarted workers never connect: the
  store it keeps holds the old group's addresses), a positive whole `join_timeout` and `timeout` in `--rdzv-conf`,
  and a static rendezvous's `--node-rank` from 0 to N-1;
* a node of a static rendezvous (`--node-rank` above 0) waits for its master in Python, where a SIGTERM or a
  Ctrl-C ends the wait at once (torch's store client waits inside C++, deaf to both, for up to 900 s), and a
  master that never answers within `--rdzv-conf timeout=SECONDS` (900 s) is one line;
* a rendezvous that times out (a node never started, a different `--rdzv-id`, an endpoint it cannot
  reach) ends with one line naming the endpoint, the nodes expected and the wait, instead of a
  traceback. No worker was started: nothing is written. `--rdzv-conf join_timeout=SECONDS` sets the
  wait (torch's default: 600 s);
* a worker group that failed past `--max-restarts` ends with one line naming the first failure
  (its global rank, exit code or signal); the worker's own output above it says why; a launcher stopped
  by a signal (a scheduler's SIGTERM) says so in one line and exits with 128 + the signal's number;
* under `nohup` (SIGHUP ignored) SIGHUP stays ignored, in the launcher and in its workers: torchrun handles it
  by default, which ended the group when the terminal closed, and gave the workers SIGHUP's default back (an
  ignored signal stays ignored across exec, a handled one does not);
* a stop signal said twice (`timeout` and `srun` pass on a SIGTERM the launcher already had, `scancel` signals
  every process of a job) is taken once: torch's handler raised it again wherever the launcher was (inside its
  "shutting down workers" warning it was printed as a "--- Logging error ---" traceback of some 80 lines:
  logging catches what is raised in it; inside its wait for the workers to stop, it ended that wait); a later
  one ends the launcher by the signal, as a second Ctrl-C ends any command (`trm_kaggle.interrupts`);
* the workers watch their launcher (`lifetime.PARENT_ENV`): torchrun starts each in a session of its own, so a
  SIGKILL of the launcher's process group (a terminal's or a CI job's kill) left them training with nobody to
  stop them; once the launcher is gone they save and stop, as on a SIGTERM;
* TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 unless set: with the store torchrun shares between rounds of
  the rendezvous (its default since torch 2.5), a restarted worker group can read its peers' addresses
  from the round before (each node counts its restarts itself; pytorch/pytorch#135712). Here, on
  torch 2.13 with gloo, every restarted group failed that way; with a fresh store per round (rank 0's
  worker hosts it) every one resumed and finished.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass
from typing import Iterator, Sequence

from trm_kaggle.errors import TRMError
from trm_kaggle.interrupts import TERMINATING, repeated
from trm_kaggle.lifetime import PARENT_ENV
from trm_kaggle.names import ascii_number
from trm_kaggle.wording import clipped, one_line

# a worker's exit status 128 + one of these is a stop the group saved at (train.stops), not a failure
STOP_SIGNALS = (signal.SIGINT, *TERMINATING)
DEFAULT_JOIN_TIMEOUT = 600  # seconds: torch's default for the c10d rendezvous
STATIC_TIMEOUT = 900  # seconds: torch's wait of a static rendezvous for its master (--rdzv-conf timeout=S)
SHARED_STORE_SWITCH = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
MAX_NPROC_PER_NODE = 1024  # workers on one node: far above any machine's devices or cores
MAX_RESTARTS = 1000  # a worker that always fails must end the launch some day
STORE_PROBE_S = 30.0  # seconds a program at the endpoint may take to answer as a store (within join_timeout)
RESOLVE_S = 10.0  # seconds the endpoint's host may take to resolve before the launch goes on without the answer


class GroupFailed(TRMError):
    """The worker group failed and torchrun had no restart left: not bad input, exit status 1."""

    exit_status = 1


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_endpoint(text: str, what: str = "--rdzv-endpoint") -> Endpoint:
    """HOST:PORT (IPv6 as [ADDR]:PORT) -> Endpoint; anything else is one error line naming `what`."""
    text = (text or "").strip()
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:  # a bare IPv6 address: which colon starts the port is anybody's guess
        sep = ""
    if not sep or not host or not port:
        raise TRMError(f"{what} {text!r}: expected HOST:PORT (e.g. node0.cluster:29500); every node must name the "
                       "same host and port")
    number = ascii_number(port)  # str.isdigit() took '²', which int() refuses, and '２', which torch refuses
    if number is None or not 1 <= number <= 65535:
        raise TRMError(f"{what} {text!r}: the port must be a number from 1 to 65535 (ASCII digits)")
    if any(c.isspace() for c in host):
        raise TRMError(f"{what} {text!r}: the host holds white space")
    return Endpoint(host, number)


def parse_nnodes(text: str) -> tuple[int, int]:
    """`N` or `MIN:MAX` -> (min, max), checked."""
    numbers = [ascii_number(p) for p in text.split(":")]
    if len(numbers) not in (1, 2) or None in numbers:
        raise TRMError(f"--nnodes {text!r}: expected N or MIN:MAX (whole numbers, ASCII digits)")
    low, high = numbers[0], numbers[-1]
    if not 1 <= low <= high:
        raise TRMError(f"--nnodes {text!r}: needs 1 <= MIN <= MAX")
    return low, high


def nproc_per_node(text: str) -> None:
    """Refuse what torchrun would only fail on after its start: a count it cannot start, or a word it
    does not know (its own words: auto, cpu, gpu, xpu, or the name of a registered device backend)."""
    import torch

    count = ascii_number(text)  # torchrun's int() also reads '２': refused with the words below, as the package does
    if count is not None:
        # a zero or negative count fails an assertion; a huge one is built worker by worker until memory runs out
        if not 1 <= count <= MAX_NPROC_PER_NODE:
            raise TRMError(f"--nproc-per-node {text}: expected a whole number from 1 to {MAX_NPROC_PER_NODE}, "
                           "or auto, cpu, gpu or xpu")
        return
    if text == "gpu" and not torch.cuda.is_available():
        raise TRMError("--nproc-per-node gpu: no CUDA device is available here (auto takes what there is)")
    if text == "xpu" and not (hasattr(torch, "xpu") and torch.xpu.is_available()):
        raise TRMError("--nproc-per-node xpu: no XPU device is available here (auto takes what there is)")
    if text not in ("auto", "cpu", "gpu", "xpu", torch._C._get_privateuse1_backend_name()):
        raise TRMError(f"--nproc-per-node {text[:80]!r}: expected a whole number from 1 to {MAX_NPROC_PER_NODE}, "
                       "or auto, cpu, gpu or xpu")


def join_timeout(rdzv_conf: str, key: str = "join_timeout", default: float = DEFAULT_JOIN_TIMEOUT) -> float:
    """The rendezvous wait `--rdzv-conf join_timeout=S` asks for (torch's default when absent); with `key`
    "timeout", the static rendezvous's wait for its master."""
    for item in (rdzv_conf or "").split(","):
        name, _, value = item.partition("=")
        if name.strip() == key:
            # torch reads both with int() (`join_timeout=1.5` was its traceback): ASCII digits, as every number
            seconds = ascii_number(value)
            if not seconds:
                what = ("whole number of seconds (ASCII digits)" if key == "timeout"
                        else "number of seconds (whole, ASCII digits)")
                raise TRMError(f"--rdzv-conf {key}={value}: expected a positive {what}")
            return float(seconds)
    return float(default)


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """torchrun's arguments, parsed by torchrun's parser (a bad one is one error line), then checked."""
    from torch.distributed.run import get_args_parser

    parser = get_args_parser()
    parser.prog = "trm-kaggle torchrun"

    def refuse(message: str) -> None:
        raise TRMError(f"torchrun: {message}")

    parser.error = refuse  # argparse's usage-and-exit becomes our one line
    for action in parser._actions:
        if action.type is int:  # --node-rank, --max-restarts, --master-port: int() alone takes '２'
            action.type = _ascii_int
    args = parser.parse_args(list(argv))
    check(args)
    return args


def _ascii_int(text: str) -> int:
    """An int-typed torchrun flag's value: as torchrun's int() reads it, but in ASCII digits only."""
    try:
        if text.isascii():
            return int(text)
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"{text[:80]!r}: expected a whole number (ASCII digits)")


def rdzv_backend(name: str) -> None:
    """A backend torch registers (c10d, etcd, etcd-v2, static): torchrun looked an unknown one up only once the
    launch had begun, a traceback of some 40 lines ending in "is not registered"."""
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry as registry

    known = sorted(getattr(registry, "_registry", {}))  # torch's registry keeps its names there (torch 2.13)
    if known and name not in known:
        raise TRMError(f"--rdzv-backend {clipped(name)}: torch knows {', '.join(known)}")


def resolvable(endpoint: Endpoint, seconds: float = RESOLVE_S) -> None:
    """Refuse an endpoint whose host does not resolve here: torch's store client retried it for some 110 s,
    whatever join_timeout said, and ended with C++ frames and "See inner exception" without showing it. The
    lookup is bounded (a thread: getaddrinfo takes no timeout); one that is slow to answer is left to torch."""
    import threading

    failed: list[str] = []

    def look_up() -> None:
        try:
            socket.getaddrinfo(endpoint.host, endpoint.port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as err:
            failed.append(getattr(err, "strerror", None) or str(err))

    lookup = threading.Thread(target=look_up, daemon=True)
    lookup.start()
    lookup.join(seconds)
    if failed:
        raise TRMError(f"--rdzv-endpoint {one_line(str(endpoint))}: the host {clipped(endpoint.host)} cannot be "
                       f"resolved here ({one_line(failed[0])}); name a host every node can reach")


def answers_as_store(endpoint: Endpoint, seconds: float) -> None:
    """Refuse an endpoint where a program that is no rendezvous store listens (a port another service holds): torch's
    store client waited inside C++ for as long as that program kept the connection open (80 s and more, deaf to
    join_timeout and read_timeout), printed C++ frames, and ended with "See inner exception". Nothing listening is
    left to torch (this node may host the store, or the host has not started yet); a store that answers is taken.
    The probe runs in a thread, bounded by `seconds`, its C++ log kept off the terminal."""
    import threading
    from datetime import timedelta

    from torch.distributed import TCPStore

    try:
        socket.create_connection((endpoint.host, endpoint.port), timeout=min(seconds, 5.0)).close()
    except OSError:
        return
    outcome: list[BaseException | None] = []

    def connect() -> None:
        try:
            TCPStore(endpoint.host, endpoint.port, is_master=False, timeout=timedelta(seconds=seconds))
            outcome.append(None)
        except Exception as err:  # torch's DistNetworkError, RuntimeError, TimeoutError alike
            outcome.append(err)

    probe = threading.Thread(target=connect, daemon=True)  # abandoned if it outlasts the wait: the launch ends
    with cpp_log_silenced():
        probe.start()
        probe.join(seconds)
    if outcome and outcome[0] is None:
        return
    how = "did not reply" if not outcome else "replied as none does"
    raise TRMError(f"--rdzv-endpoint {endpoint}: a program answers at port {endpoint.port} but is no rendezvous "
                   f"store (it {how} within {seconds:g} s): another program holds the port; choose a free port "
                   "for every node (no worker was started)")


@contextlib.contextmanager
def cpp_log_silenced() -> Iterator[None]:
    """Standard error's descriptor on /dev/null for a while: torch's C++ store client logs each failed try with
    its C++ frames there (TORCH_CPP_LOG_LEVEL is read once, when torch loads)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def check(args: argparse.Namespace) -> None:
    """What torchrun accepts but a multi-node run cannot live with (see the module's docstring)."""
    _, high = parse_nnodes(args.nnodes)
    rdzv_backend(args.rdzv_backend)
    join_timeout(args.rdzv_conf)
    if args.rdzv_backend == "static":  # its wait for the master (the other backends read `timeout` their way)
        join_timeout(args.rdzv_conf, "timeout", STATIC_TIMEOUT)
    if args.rdzv_backend == "static" and not args.standalone and not 0 <= args.node_rank < high:
        raise TRMError(f"--node-rank {args.node_rank}: a static rendezvous of {high} node(s) (--nnodes "
                       f"{args.nnodes}) numbers them 0 to {high - 1}")
    nproc_per_node(args.nproc_per_node)
    if not 0 <= args.max_restarts <= MAX_RESTARTS:
        raise TRMError(f"--max-restarts {args.max_restarts}: must be a whole number from 0 to {MAX_RESTARTS}")
    if args.max_restarts and args.rdzv_backend == "static" and not args.standalone:
        raise TRMError(f"--max-restarts {args.max_restarts}: a static rendezvous (torchrun's default --rdzv-backend) "
                       "cannot restart its workers: the new group reads its peers' old addresses from the one store "
                       "it keeps and never connects; add --rdzv-backend c10d --rdzv-endpoint HOST:PORT (or "
                       "--standalone on one machine)")
    if args.standalone:
        return
    if args.rdzv_endpoint or (high > 1 and args.rdzv_backend != "static"):  # static: --master-addr/--master-port
        parse_endpoint(args.rdzv_endpoint)


def trained_module_args(args: argparse.Namespace) -> list[str] | None:
    """The `train` arguments when the workers run `-m trm_kaggle train ...`, else None."""
    if args.module and args.training_script == "trm_kaggle" and args.training_script_args[:1] == ["train"]:
        return list(args.training_script_args[1:])
    return None


def launch(args: argparse.Namespace) -> None:
    """Run torchrun's launch; its rendezvous and worker failures become one TRMError line."""
    from torch.distributed.elastic.multiprocessing import api as processes
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous.api import RendezvousClosedError, RendezvousError, RendezvousTimeoutError
    from torch.distributed.run import run

    where = f"rendezvous {args.rdzv_backend} at {args.rdzv_endpoint or 'localhost'} (id {args.rdzv_id})"
    os.environ.setdefault(SHARED_STORE_SWITCH, "1")  # a fresh store per round: restarts work (module docstring)
    os.environ[PARENT_ENV] = str(os.getpid())  # the workers stop once this launcher is gone (module docstring)
    if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN and hasattr(args, "signals_to_handle"):
        args.signals_to_handle = without_hangup(args.signals_to_handle)  # nohup's choice holds (module docstring)
    if args.rdzv_endpoint and not args.standalone:  # checked here, not in check(): a lookup is no parse
        resolvable(parse_endpoint(args.rdzv_endpoint))
        if args.rdzv_backend == "c10d":  # the backend whose store torch's client reads there
            answers_as_store(parse_endpoint(args.rdzv_endpoint), min(join_timeout(args.rdzv_conf), STORE_PROBE_S))
    if args.rdzv_backend == "static" and not args.standalone and args.node_rank > 0:
        wait_for_master(args)
    # torch installs this handler (by its name in that module) at every start of the worker group; a repeated stop
    # is taken once (module docstring)
    torch_handler = getattr(processes, "_terminate_process_handler", None)
    if torch_handler is not None:
        processes._terminate_process_handler = stop_once(torch_handler)
    try:
        run(args)
    except RendezvousTimeoutError:
        raise TRMError(f"{where}: not all {args.nnodes} nodes (--nnodes) joined within "
                       f"{join_timeout(args.rdzv_conf):g} s: start the same command on every node, with the same "
                       "--rdzv-endpoint and --rdzv-id, and check that each reaches the endpoint; no worker was "
                       "started (--rdzv-conf join_timeout=SECONDS sets the wait)") from None
    except RendezvousClosedError:
        raise TRMError(f"{where}: the rendezvous was closed (another node's launcher gave up or finished); "
                       "start every node again") from None
    except RendezvousError as err:
        raise TRMError(f"{where}: {type(err).__name__}: {_first_line(err)}") from None
    except SignalException as err:  # a scheduler's SIGTERM (a pod evicted, a job out of time), a Ctrl-C
        stopped = GroupFailed(f"stopped by {err.sigval.name}: the workers were stopped; started again, the run "
                              "resumes from its newest train state")
        stopped.exit_status = 128 + int(err.sigval)
        raise stopped from None
    except ChildFailedError as err:
        rank, failure = err.get_first_failure()
        stop = {128 + int(s): s.name for s in STOP_SIGNALS}.get(failure.exitcode)
        if stop is not None:  # a rank stopped by a signal: the group saved and stopped with it, as on a launcher's
            # every rank that stopped with it ends with the same status: the first of them (rank 0) was named
            # as the one the signal was sent to, whichever it was
            alike = [r for r, f in err.failures.items() if f.exitcode == failure.exitcode]
            to = f"rank {rank}" if len(alike) == 1 else "a worker"
            stopped = GroupFailed(f"stopped by {stop} (sent to {to}): the workers were stopped; started "
                                  "again, the run resumes from its newest train state")
            stopped.exit_status = failure.exitcode
            raise stopped from None
        how = (f"signal {failure.signal_name()}" if failure.exitcode < 0 else f"exit status {failure.exitcode}")
        raise GroupFailed(f"training failed on rank {rank} ({how}) with no restart left (--max-restarts "
                          f"{args.max_restarts}); the worker's own lines above say why") from None
    finally:
        if torch_handler is not None:
            processes._terminate_process_handler = torch_handler


def stop_once(torch_handler):
    """torch's stop-signal handler (it raises SignalException where the launcher is, which then stops its workers)
    for the first stop signal only: a repeat within `interrupts.REPEAT_S` is dropped, a later one ends the launcher
    by the signal (its workers stop themselves once it is gone)."""
    first_at: list[float | None] = [None]

    def handler(signum, frame) -> None:
        if first_at[0] is None:
            first_at[0] = time.monotonic()
            torch_handler(signum, frame)
        elif not repeated(first_at[0]):
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    return handler


def without_hangup(signals: str) -> str:
    """torchrun's `--signals-to-handle` list without SIGHUP (kept whole when SIGHUP is all it names: the user's
    own choice)."""
    kept = [name for name in signals.split(",") if name.strip() != "SIGHUP"]
    return ",".join(kept) if kept else signals


def wait_for_master(args: argparse.Namespace) -> None:
    """Until the master node (rank 0 of a static rendezvous) accepts connections: a TRMError line when it has not
    within the rendezvous's timeout. torch's store client waits for it inside C++, where no signal reaches
    Python: a scheduler's SIGTERM or a Ctrl-C went unanswered for up to 900 s. Here the wait is Python's, and a
    stop ends it at once."""
    endpoint = (parse_endpoint(args.rdzv_endpoint) if args.rdzv_endpoint else
                parse_endpoint(f"{args.master_addr}:{args.master_port}", "--master-addr:--master-port"))
    seconds = join_timeout(args.rdzv_conf, "timeout", STATIC_TIMEOUT)
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection((endpoint.host, endpoint.port), timeout=2.0).close()
            return
        except OSError:
            if time.monotonic() >= deadline:
                raise TRMError(f"static rendezvous: the master node (--node-rank 0) at {endpoint} did not answer "
                               f"within {seconds:g} s: start it with the same --master-addr and --master-port, "
                               "and check that this node reaches it; no worker was started (--rdzv-conf "
                               "timeout=SECONDS sets the wait)") from None
            time.sleep(1.0)


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [""])[0][:300]
