"""torch.compile of the model (trm_kaggle.model.compiling): the auto/on/off setting per device, the regional
compile (one block traced once for every layer) against eager, the eager fallback of a failing compile, the
compile cache's round trip and its guards, and the CUDA-graphs setting.

Most tests compile with dynamo + AOTAutograd and no code generation (`aot_eager`, seconds); the ones that run
inductor (a C++ compile on CPU, minutes on a shared machine) carry the slow marker.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch._functorch.config as functorch_config
from torch._dynamo.backends.common import aot_autograd

from trm_kaggle.cli import main
from trm_kaggle.config import SolveConfig, TrainConfig, compile_setting
from trm_kaggle.model import act_loss
from trm_kaggle.model import compiling
from trm_kaggle.model.compiling import (CACHE_FILE, CACHE_RECORD, apply_compile, cuda_graph_options,
                                        is_compiled, load_compile_cache, resolve_compile, save_compile_cache)
from trm_kaggle.train import setup

sys.path.insert(0, str(Path(__file__).parent))
from integrity_helpers import build_sudoku4, train_args  # noqa: E402
from test_model import make_batch, tiny_model  # noqa: E402

HAS_CXX = any(shutil.which(c) for c in ("c++", "g++", "clang++"))


@pytest.fixture(autouse=True)
def fresh_dynamo(tmp_path, monkeypatch):
    """Each test compiles from nothing and keeps the cache key of its own (never the user's)."""
    torch._dynamo.reset()
    monkeypatch.setenv(compiling.KEY_ENV, str(tmp_path / "key"))
    monkeypatch.setattr(compiling, "_FAILED", {})
    yield
    torch._dynamo.reset()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return build_sudoku4(tmp_path_factory.mktemp("data") / "sudoku4")


def step(model, batch, loss_fn=act_loss):
    carry, out = model(model.initial_carry(batch), batch)
    loss, _ = loss_fn(out, carry.current_data["labels"], carry.halted, carry.steps)
    loss.backward()
    return out["logits"].detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


# ---------------------------------------------------------------------------
# The setting
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("setting, cpu, cuda", [("auto", False, True), ("on", True, True), ("off", False, False),
                                                (True, True, True), (False, False, False), ("True", True, True),
                                                ("false", False, False)])
def test_the_setting_resolves_per_device(setting, cpu, cuda):
    assert resolve_compile(setting, "cpu") is cpu
    assert resolve_compile(setting, torch.device("cuda")) is cuda
    assert resolve_compile(setting, "mps") is (setting not in ("auto", False, "false", "off"))  # auto: CUDA only


def test_the_settings_spellings_and_the_old_values():
    assert TrainConfig().compile == "auto" and SolveConfig(challenges="c", weights="w").compile == "auto"
    assert TrainConfig(compile=True).compile == "on" and TrainConfig(compile=False).compile == "off"
    # a config saved before "auto" existed (compile: false) still loads
    assert TrainConfig.model_validate_json(json.dumps({"compile": False})).compile == "off"
    with pytest.raises(ValueError, match="not a compile setting: auto, on or off"):
        compile_setting("maybe")


def test_the_command_lines_take_the_setting(capsys, monkeypatch):
    assert main(["train", "--print-config", "compile=True"]) == 0
    assert "compile: 'on'" in capsys.readouterr().out
    assert main(["train", "--print-config", "compile=sometimes"]) == 2
    assert "compile" in capsys.readouterr().err
    from trm_kaggle.cli import build_parser as make_parser

    ev = ["evaluate", "--weights", "w", "--data", "d"]
    assert make_parser().parse_args(ev).compile == "auto"
    assert make_parser().parse_args(ev + ["--compile"]).compile == "on"  # the old flag alone
    assert make_parser().parse_args(ev + ["--compile", "off"]).compile == "off"
    sub = ["submit", "--challenges", "c", "--weights", "w"]
    assert make_parser().parse_args(sub).compile is None  # SolveConfig's default: auto
    assert make_parser().parse_args(sub + ["--compile", "off"]).compile == "off"


def test_auto_does_not_compile_training_on_a_cpu(data, tmp_path, monkeypatch):
    seen = []
    real = setup.apply_compile

    def spy(model, *a, **k):
        seen.append(real(model, *a, **k))
        return seen[-1]

    monkeypatch.setattr(setup, "apply_compile", spy)
    assert main(train_args(data, tmp_path / "run", "max_steps=1")) == 0  # compile left at its default
    assert seen == [None]
    assert not (tmp_path / "run" / CACHE_FILE).exists()


def test_cuda_graphs_resolve_to_the_plain_compile_off_cuda(caplog):
    caplog.set_level(logging.INFO)
    assert cuda_graph_options(True, "cuda") == {"mode": "reduce-overhead"}
    assert cuda_graph_options(False, "cuda") == {}
    assert cuda_graph_options(True, "cpu") == {} and "cpu has no CUDA graphs" in caplog.text


def test_the_trainer_compiles_through_apply_compile_with_its_cuda_graphs_setting(data, tmp_path, monkeypatch):
    """The trainer's path is the one spelling: `cuda_graphs=True` reaches apply_compile (whose CUDA-graph steps
    the next test checks), and the loss compiles with the model's regions."""
    seen = []
    real = setup.apply_compile

    def spy(model, setting, device, cuda_graphs=False, **kw):
        seen.append((setting, cuda_graphs))
        return real(model, setting, device, cuda_graphs, backend="eager", **kw)

    monkeypatch.setattr(setup, "apply_compile", spy)
    assert main(train_args(data, tmp_path / "run", "max_steps=1", "compile=on", "cuda_graphs=True")) == 0
    assert seen == [("on", True)]


def test_cuda_graphs_mark_every_step_and_copy_the_carry_out(monkeypatch):
    """cuda_graphs on CUDA (here a CPU model compiled for "cuda", torch.compile recorded and left out): the
    network compiles in reduce-overhead mode, every forward begins a new CUDA-graph step, and the carry holds
    copies of the recursion's latents, not the memory the next replays reuse. Off CUDA, nothing of it."""
    options, marks, latents = {}, [], []

    def record(fn, **kw):
        options[fn.__name__] = kw
        return fn

    monkeypatch.setattr(torch, "compile", record)
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1))
    model = tiny_model().train()
    recurse = model.recurse
    model.recurse = lambda *a: latents.append(recurse(*a)) or latents[-1]
    apply_compile(model, "on", "cuda", cuda_graphs=True)
    net = "regional_net" if hasattr(torch.compiler, "nested_compile_region") else "_run_block"
    assert options[net]["mode"] == "reduce-overhead" and "mode" not in options["act_end"]
    batch = make_batch()
    carry = model.initial_carry(batch)
    for n in (1, 2):
        carry, _ = model(carry, batch)
        assert len(marks) == n
        assert {carry.z_H.data_ptr(), carry.z_L.data_ptr()}.isdisjoint(z.data_ptr() for zs in latents for z in zs)
    plain = tiny_model().train()
    apply_compile(plain, "on", "cpu", cuda_graphs=True)
    plain(plain.initial_carry(batch), batch)
    assert len(marks) == 2


# ---------------------------------------------------------------------------
# What is compiled: regions, the same numbers as eager
# ---------------------------------------------------------------------------


def recording_backend(graphs):
    """aot_eager that keeps every graph dynamo hands it."""
    def backend(gm, example_inputs):
        graphs.append(gm)
        return aot_autograd(fw_compiler=lambda g, _: g.forward, bw_compiler=lambda g, _: g.forward)(gm, example_inputs)
    return backend


@pytest.mark.skipif(not hasattr(torch.compiler, "nested_compile_region"), reason="needs nested_compile_region")
def test_one_block_is_traced_once_for_every_layer():
    graphs = []
    model = tiny_model(L_layers=3).train()
    apply_compile(model, "on", "cpu", backend=recording_backend(graphs))
    step(model, make_batch())
    calls = [n for g in graphs for n in g.graph.nodes if n.op == "call_function" and "invoke_subgraph" in str(n.target)]
    assert len(calls) >= 3  # the network's graph calls the block region once per layer ...
    assert len({c.args[0].target for c in calls if c.args[0].op == "get_attr"}) == 1  # ... and it is one subgraph
    # not the whole model: no graph holds the recursion's H_cycles x (L_cycles + 1) network calls
    assert max(len([n for n in g.graph.nodes if "invoke_subgraph" in str(n.target)]) for g in graphs) <= 3


def test_regions_give_eagers_outputs_and_gradients():
    """dynamo + AOTAutograd over the regions (net with block regions, ACT begin/end, the loss): eager's
    logits and gradients to float32 rounding."""
    eager, compiled = tiny_model().train(), tiny_model().train()
    regions = apply_compile(compiled, "on", "cpu", backend="aot_eager")
    assert is_compiled(compiled) and not is_compiled(eager)
    batch = make_batch()
    l_e, g_e = step(eager, batch)
    l_c, g_c = step(compiled, batch, regions.region(act_loss))
    assert torch.allclose(l_e, l_c, atol=1e-5, rtol=1e-5)
    for n, g in g_e.items():
        assert (g - g_c[n]).norm() <= 1e-4 * g.norm() + 1e-8, n


@torch.no_grad()
def test_batches_of_new_sizes_compile_at_most_once_more():
    """The solve predicts each task in a batch of its own size: the second size compiles the regions again with
    a symbolic batch, and every later size reuses those graphs (with static shapes, each size compiled anew)."""
    graphs = []
    model = tiny_model().eval()
    apply_compile(model, "on", "cpu", backend=recording_backend(graphs))
    counts = []
    for rows in (4, 6, 9, 13, 3):
        batch = make_batch(rows)
        carry, out = model(model.initial_carry(batch), batch)
        assert out["logits"].shape[0] == rows
        counts.append(len(graphs))
    assert counts[0] < counts[1] == counts[-1], counts


def test_dynamos_eager_backend_compiles_each_block_and_trains():
    """backend="eager" cannot run a nested region's backward: each block compiles on its own there."""
    eager, compiled = tiny_model().train(), tiny_model().train()
    apply_compile(compiled, "on", "cpu", backend="eager")
    l_e, g_e = step(eager, make_batch())
    l_c, g_c = step(compiled, make_batch())
    assert torch.allclose(l_e, l_c, atol=1e-5) and all(torch.allclose(g, g_c[n], atol=1e-5) for n, g in g_e.items())


@pytest.mark.slow
@pytest.mark.skipif(not HAS_CXX, reason="torch.compile on CPU needs a C++ compiler")
def test_inductor_regions_give_eagers_outputs_and_gradients_over_act_steps():
    """Inductor on the CPU's plain path (the one CUDA takes) and on its fast path, three ACT steps with carries."""
    from trm_kaggle.model import layers

    for plain in (True, False):
        torch._dynamo.reset()
        original = layers.cpu_fast_path
        if plain:
            layers.cpu_fast_path = lambda x: False
        try:
            eager, compiled = tiny_model().train(), tiny_model().train()
            regions = apply_compile(compiled, "on", "cpu")
            batch = make_batch()
            c_e, c_c = eager.initial_carry(batch), compiled.initial_carry(batch)
            loss_c = regions.region(act_loss)
            for _ in range(3):
                c_e, o_e = eager(c_e, batch)
                c_c, o_c = compiled(c_c, batch)
                act_loss(o_e, c_e.current_data["labels"], c_e.halted, c_e.steps)[0].backward()
                loss_c(o_c, c_c.current_data["labels"], c_c.halted, c_c.steps)[0].backward()
                assert torch.allclose(o_e["logits"], o_c["logits"], atol=1e-4, rtol=1e-4)
                assert torch.equal(c_e.halted, c_c.halted)
            for (n, p), q in zip(eager.named_parameters(), compiled.parameters()):
                assert (p.grad - q.grad).norm() <= 3e-4 * p.grad.norm() + 1e-8, (plain, n)
        finally:
            layers.cpu_fast_path = original


# ---------------------------------------------------------------------------
# A failing compile runs eagerly, with one warning
# ---------------------------------------------------------------------------


def failing_backend(calls):
    def backend(gm, example_inputs):
        calls.append(1)
        raise RuntimeError("planted: this backend cannot compile")
    return backend


def test_a_failing_compile_falls_back_to_eager_with_one_warning(caplog):
    caplog.set_level(logging.WARNING)
    calls = []
    bad = failing_backend(calls)
    eager, model = tiny_model().train(), tiny_model().train()
    regions = apply_compile(model, "on", "cpu", backend=bad)
    batch = make_batch()
    l_e, g_e = step(eager, batch)
    l_c, g_c = step(model, batch, regions.region(act_loss))
    assert torch.equal(l_e, l_c) and all(torch.equal(g, g_c[n]) for n, g in g_e.items())  # eager's very numbers
    assert caplog.text.count("torch.compile failed") == 1 and "planted: this backend cannot compile" in caplog.text
    tried = len(calls)
    again = tiny_model().train()
    apply_compile(again, "on", "cpu", backend=bad)
    step(again, batch)
    assert len(calls) == tried and caplog.text.count("torch.compile failed") == 1  # not tried again, not said again


@pytest.mark.skipif(not hasattr(functorch_config, "force_non_lazy_backward_lowering"),
                    reason="a backward compiled with its forward needs torch >= 2.10")
def test_a_backward_that_fails_to_compile_falls_back_at_the_forward(caplog):
    """The backward compiles with the forward, so that its failure is caught where the fallback can still act."""
    caplog.set_level(logging.WARNING)

    def bad_backward(g, _):
        raise RuntimeError("planted: no backward")

    backend = aot_autograd(fw_compiler=lambda g, _: g.forward, bw_compiler=bad_backward)
    eager, model = tiny_model().train(), tiny_model().train()
    apply_compile(model, "on", "cpu", backend=backend)
    batch = make_batch()
    l_e, g_e = step(eager, batch)
    l_c, g_c = step(model, batch)  # (the no-grad calls before it ran compiled: equal to float32 rounding)
    assert torch.allclose(l_e, l_c, atol=1e-5) and all(torch.allclose(g, g_c[n], atol=1e-5) for n, g in g_e.items())
    assert caplog.text.count("torch.compile failed") == 1 and "planted: no backward" in caplog.text


def test_training_with_a_failing_compile_trains_as_eager(data, tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.WARNING)
    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: real(fn, **{**kw, "backend": failing_backend([])}))
    assert main(train_args(data, tmp_path / "c", "max_steps=3", "compile=on", "cuda_graphs=True")) == 0
    monkeypatch.setattr(torch, "compile", real)
    assert main(train_args(data, tmp_path / "e", "max_steps=3", "compile=off")) == 0
    losses = [[r["loss"] for r in map(json.loads, (tmp_path / d / "metrics.jsonl").read_text().splitlines())]
              for d in ("c", "e")]
    assert losses[0] == losses[1] and len(losses[0]) == 3
    assert caplog.text.count("torch.compile failed") == 1


def test_training_compiles_its_regions_when_on(data, tmp_path, monkeypatch):
    """compile=on: the network, the ACT step and the loss run compiled (aot_eager here), the same losses as
    eager to float32 rounding."""
    real, compiled = torch.compile, []

    def record(fn, **kw):
        compiled.append(getattr(fn, "__name__", str(fn)))
        return real(fn, **{**kw, "backend": "aot_eager"})

    monkeypatch.setattr(torch, "compile", record)
    assert main(train_args(data, tmp_path / "c", "max_steps=3", "compile=on")) == 0
    monkeypatch.setattr(torch, "compile", real)
    assert main(train_args(data, tmp_path / "e", "max_steps=3")) == 0
    net = "regional_net" if hasattr(torch.compiler, "nested_compile_region") else "_run_block"
    assert {net, "act_begin", "act_end", "act_loss"} <= set(compiled), compiled
    losses = [[r["loss"] for r in map(json.loads, (tmp_path / d / "metrics.jsonl").read_text().splitlines())]
              for d in ("c", "e")]
    assert losses[0] == pytest.approx(losses[1], rel=1e-4)


# ---------------------------------------------------------------------------
# The compile cache
# ---------------------------------------------------------------------------


@pytest.fixture
def fake_artifacts(monkeypatch):
    """torch's save/load of cache artifacts replaced by a recorder (the guards are ours to test)."""
    state = {"saved": b"artifacts of a compile \x00\x01", "loaded": []}
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: (state["saved"], None))
    monkeypatch.setattr(torch.compiler, "load_cache_artifacts", lambda data: state["loaded"].append(data) or {})
    return state


def test_the_cache_round_trips_through_a_folder(tmp_path, fake_artifacts):
    path = save_compile_cache(tmp_path / "run", "cpu")
    assert path == tmp_path / "run" / CACHE_FILE and path.read_bytes() == fake_artifacts["saved"]
    record = json.loads((tmp_path / "run" / CACHE_RECORD).read_text())
    assert record["target"]["torch"] == torch.__version__ and record["target"]["device"] == "cpu"
    lines = []
    assert load_compile_cache(tmp_path / "run", "cpu", say=lines.append)
    assert fake_artifacts["loaded"] == [fake_artifacts["saved"]] and lines == [f"compile cache loaded: {path}"]
    assert not load_compile_cache(tmp_path / "nothing here", "cpu", say=lines.append) and len(lines) == 1  # silent
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [CACHE_FILE, CACHE_RECORD]  # no temporaries


def _refused(folder, lines, **kw) -> str:
    assert not load_compile_cache(folder, "cpu", say=lines.append, **kw)
    return lines[-1]


def test_a_cache_is_loaded_only_when_it_is_ours_intact_and_for_this_torch(tmp_path, fake_artifacts, monkeypatch):
    run, lines = tmp_path / "run", []
    save_compile_cache(run, "cpu")
    # damaged or replaced: the digest differs
    (run / CACHE_FILE).write_bytes(b"code someone else wrote")
    assert "sha256 differs" in _refused(run, lines)
    # written elsewhere (or by someone else): a digest that matches, an HMAC under another key
    save_compile_cache(run, "cpu")
    monkeypatch.setenv(compiling.KEY_ENV, str(tmp_path / "another key"))
    assert "not written by this user on this machine" in _refused(run, lines)
    assert load_compile_cache(run, "cpu", trusted=True, say=lines.append)  # unless the caller vouches for it
    monkeypatch.setenv(compiling.KEY_ENV, str(tmp_path / "key"))
    # made by another torch
    record = json.loads((run / CACHE_RECORD).read_text())
    record["target"]["torch"] = "1.0.0"
    (run / CACHE_RECORD).write_text(json.dumps(record))
    assert "made for torch 1.0.0; here torch " + torch.__version__ in _refused(run, lines, trusted=True)
    # not a record at all
    (run / CACHE_RECORD).write_text("[]")
    assert "not a compile cache record" in _refused(run, lines, trusted=True)
    assert fake_artifacts["loaded"] == [fake_artifacts["saved"]]  # only the trusted, intact one reached torch


def test_the_key_stays_out_of_the_run_folder_and_private(tmp_path, fake_artifacts):
    save_compile_cache(tmp_path / "run", "cpu")
    key = tmp_path / "key" / "compile-cache.key"
    assert key.is_file() and (key.stat().st_mode & 0o077) == 0 and len(key.read_bytes()) == 32
    assert "key" not in {p.name for p in (tmp_path / "run").iterdir()}


def test_a_bundle_ships_a_checked_cache_beside_the_weights(tmp_path, fake_artifacts):
    from trm_kaggle.errors import TRMError
    from trm_kaggle.kaggle.weights_dataset import check_compile_cache

    save_compile_cache(tmp_path / "made", "cpu")
    assert check_compile_cache(tmp_path / "made" / CACHE_FILE)["target"]["device"] == "cpu"
    (tmp_path / "made" / CACHE_FILE).write_bytes(b"changed")
    with pytest.raises(TRMError, match="sha256 differs"):
        check_compile_cache(tmp_path / "made" / CACHE_FILE)
    with pytest.raises(TRMError, match="no such file"):
        check_compile_cache(tmp_path / "none.bin")


_ROUND_TRIP = textwrap.dedent("""
    import sys, time, torch
    sys.path.insert(0, {tests!r})
    from test_model import tiny_model, make_batch
    from trm_kaggle.model import act_loss
    from trm_kaggle.model.compiling import apply_compile, load_compile_cache, save_compile_cache
    from torch._dynamo.utils import counters
    if sys.argv[1] == "load":
        assert load_compile_cache(sys.argv[2], "cpu", say=print)
    m = tiny_model().train()
    apply_compile(m, "on", "cpu")
    b = make_batch()
    carry, out = m(m.initial_carry(b), b)
    act_loss(out, carry.current_data["labels"], carry.halted, carry.steps)[0].backward()
    if sys.argv[1] == "save":
        print("saved", save_compile_cache(sys.argv[2], "cpu"))
    print("hits", counters["inductor"]["fxgraph_cache_hit"], "misses", counters["inductor"]["fxgraph_cache_miss"])
""")


@pytest.mark.slow
@pytest.mark.skipif(not HAS_CXX, reason="torch.compile on CPU needs a C++ compiler")
def test_a_fresh_process_compiles_from_the_saved_cache(tmp_path):
    """Two processes, each with an inductor cache of its own: the second one's compile comes from the file the
    first one saved (every graph a cache hit, none compiled anew). The second cache folder is a copy of the
    first without its graph caches (fxgraph/, aotautograd/), so only the saved file can give it the graphs;
    what the copy keeps are the C++ kernels' builds, which the saved file does not hold on the CPU (they would
    be rebuilt, 18 of the second process's 25 s, and prove nothing about the file)."""
    script = tmp_path / "round_trip.py"
    script.write_text(_ROUND_TRIP.format(tests=str(Path(__file__).parent)))

    def run(mode, inductor_dir):
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / inductor_dir),
               compiling.KEY_ENV: str(tmp_path / "key"), "OMP_NUM_THREADS": "1"}
        done = subprocess.run([sys.executable, str(script), mode, str(tmp_path / "run")], capture_output=True,
                              text=True, env=env, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    first = run("save", "inductor-a")
    assert "saved" in first and (tmp_path / "run" / CACHE_FILE).is_file() and "misses 0" not in first
    shutil.copytree(tmp_path / "inductor-a", tmp_path / "inductor-b",
                    ignore=shutil.ignore_patterns("fxgraph", "aotautograd", "locks"))
    second = run("load", "inductor-b")
    assert "compile cache loaded" in second and "misses 0" in second and "hits 0" not in second, second


# ---------------------------------------------------------------------------
# CUDA
# ---------------------------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_cuda_regions_and_cuda_graphs_give_eagers_steps(cuda_graphs):
    eager, compiled = tiny_model().cuda().train(), tiny_model().cuda().train()
    apply_compile(compiled, "on", "cuda", cuda_graphs=cuda_graphs)
    batch = {k: v.cuda() for k, v in make_batch().items()}
    c_e, c_c = eager.initial_carry(batch), compiled.initial_carry(batch)
    for _ in range(3):
        c_e, o_e = eager(c_e, batch)
        c_c, o_c = compiled(c_c, batch)
        act_loss(o_e, c_e.current_data["labels"], c_e.halted, c_e.steps)[0].backward()
        act_loss(o_c, c_c.current_data["labels"], c_c.halted, c_c.steps)[0].backward()
        # bf16 on CUDA: rounding grows through the recursion; a wrong graph is off by far more
        assert (o_e["logits"].float() - o_c["logits"].float()).abs().max() <= 0.1 * o_e["logits"].float().abs().max()
        assert torch.equal(c_e.steps, c_c.steps)
