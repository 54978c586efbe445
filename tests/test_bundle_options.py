"""build_bundle.py never drops an option without a word: every option, given to every kind of build (the
submission bundle, with --execute or --push; the training kernel; the data dataset alone; the combinations the
docs allow), either changes what is built, run or pushed, or is refused in one `error:` line naming it, exit
status 2, nothing built. The builders are stood in for: what each is asked to build is compared."""

from __future__ import annotations

import shutil

import pytest

from trm_kaggle.kaggle import bundle as B
from trm_kaggle.kaggle import train_kernel

from conftest import USER

TRAIN = ["--train-kernel", "--preset", "sudoku4-cpu"]
#: Each kind of build: its options. The walk adds each option to each.
KINDS = {
    "submission": [],
    "submission --execute": ["--execute"],
    "submission --push": ["--push"],
    "training": TRAIN,
    "training --push": [*TRAIN, "--push"],
    "data and training": ["--dataset", "DATA", *TRAIN],
    "data": ["--dataset", "DATA"],
    "data --push": ["--dataset", "DATA", "--push"],
}
EXECUTE = {"challenges", "mounts", "max_tasks", "time_budget", "finetune_steps", "num_aug", "workers", "device",
           "execute_timeout"}
SUBMISSION = {"weights", "notebook", "cpu", "execute", "competition", "docker_image", "compile_cache",
              "wheel_kernel"} | EXECUTE
TRAINING_KERNEL = {"preset", "overrides", "continue_from", "first_session", "train_budget"}
PUSH = {"version_message", "push_wait"}
KERNEL_AND_WHEELS = {"accelerator", "repo", "extra_wheel", "kaggle_has", "no_download", "python_version", "platform",
                     "wheel_builder"}
#: What each kind refuses; every other option it is given changes what it does.
REFUSED = {
    "submission": EXECUTE | TRAINING_KERNEL | PUSH,
    "submission --execute": TRAINING_KERNEL | PUSH | {"dataset", "train_kernel"},  # a training build: no --execute
    "submission --push": EXECUTE | TRAINING_KERNEL,
    "training": SUBMISSION | PUSH,
    "training --push": SUBMISSION,
    "data and training": SUBMISSION | PUSH,
    "data": SUBMISSION | TRAINING_KERNEL | PUSH | KERNEL_AND_WHEELS,
    "data --push": SUBMISSION | TRAINING_KERNEL | KERNEL_AND_WHEELS,
}
#: The parts' builders, the offline run and the pushes: what a build does is what these are asked.
SINKS = ("build_wheels", "build_weights", "build_kernel", "build_wheel_kernel", "validate_bundle", "build_data",
         "fetch_run_state", "build_train_kernel", "execute", "push", "push_training")


class Anything(dict):
    """A report of any shape: every key is there, every number is 0 (the summary lines print it)."""

    def __missing__(self, key):
        return Anything()

    def __format__(self, spec):
        return ""

    def __truediv__(self, other):
        return 0.0

    def __lt__(self, other):
        return False

    __gt__ = __lt__


@pytest.fixture
def walk(inputs, tmp_path, monkeypatch):
    """Runs build_bundle.py with the builders stood in for: (status, error text, what the sinks were asked)."""
    calls: list = []

    def sink(name):
        def record(*args, **kwargs):
            calls.append((name, repr(args), repr(sorted(kwargs.items()))))
            return 0 if name.startswith("push") else Anything(ok=True)  # a push's status; a report
        return record

    for name in SINKS:
        monkeypatch.setattr(B, name, sink(name))
    monkeypatch.setattr(B, "default_weights", lambda repo: inputs["export"])  # the repo's own weights/ may be empty
    monkeypatch.setattr(B, "push_unavailable", lambda: None)
    monkeypatch.setattr(B, "owner", lambda push: (USER, None))
    monkeypatch.setattr(B, "check_continue_from", lambda kernel, **kw: None)  # no kaggle command asked
    monkeypatch.setattr(B, "check_compile_cache", lambda path: {"target": {"device": "cuda"}})
    monkeypatch.setattr(train_kernel, "check_batch_fills", lambda *a, **kw: None)
    (tmp_path / "data").mkdir()
    repo = tmp_path / "repo"  # a repo whose default notebook is there
    (repo / "notebooks").mkdir(parents=True)
    shutil.copy(inputs["notebook"], repo / "notebooks")
    cache = tmp_path / "compile_cache.bin"
    cache.write_bytes(b"cache")
    challenges = tmp_path / "challenges.json"
    challenges.write_text('{"t": {"train": [], "test": [{"input": [[1]]}]}}')
    paths = {"DATA": str(tmp_path / "data"), "EXPORT": str(shutil.copytree(inputs["export"], tmp_path / "export")),
             "NOTEBOOK": str(inputs["notebook"]), "REPO": str(repo), "EXTRA": str(inputs["extra"]),
             "CACHE": str(cache), "CHALLENGES": str(challenges)}
    out = tmp_path / "out"

    def run(args, capsys):
        calls.clear()
        rc = B.main([str(out), *(paths.get(a, a) for a in args)])
        assert rc == 2 or not out.exists()  # the stand-ins write nothing: OUT_DIR's lock goes with the folder made
        return rc, capsys.readouterr().err, list(calls)
    return run


#: A value for each option that is valid, and differs from its default in every kind.
HARMLESS = {
    "user": ["--user", "someone"], "slug_prefix": ["--slug-prefix", "other"], "weights": ["--weights", "EXPORT"],
    "notebook": ["--notebook", "NOTEBOOK"], "repo": ["--repo", "REPO"], "extra_wheel": ["--extra-wheel", "EXTRA"],
    "kaggle_has": ["--kaggle-has", "torch"], "no_download": ["--no-download"],
    "python_version": ["--python-version", "3.12"], "platform": ["--platform", "manylinux_2_17_x86_64"],
    "wheel_builder": ["--wheel-builder", "builtin"], "competition": ["--competition", "arc-prize-2025"],
    "cpu": ["--cpu"], "accelerator": ["--accelerator", "NvidiaH100"],
    "docker_image": ["--docker-image", "gcr.io/kaggle-gpu-images/python:v160"],
    "compile_cache": ["--compile-cache", "CACHE"], "wheel_kernel": ["--wheel-kernel"],
    "dataset": ["--dataset", "DATA"], "train_kernel": TRAIN, "preset": ["--preset", "sudoku4-cpu"],
    "overrides": ["lr=1e-3"], "continue_from": ["--continue-from", "someone/other-train"],
    "first_session": ["--first-session"], "train_budget": ["--train-budget", "5000"], "push": ["--push"],
    "version_message": ["--version-message", "v2"], "push_wait": ["--push-wait", "60"], "execute": ["--execute"],
    "challenges": ["--challenges", "CHALLENGES"], "mounts": ["--mounts", "2026"], "max_tasks": ["--max-tasks", "5"],
    "time_budget": ["--time-budget", "100"], "finetune_steps": ["--finetune-steps", "5"],
    "num_aug": ["--num-aug", "3"], "workers": ["--workers", "2"], "device": ["--device", "auto"],
    "execute_timeout": ["--execute-timeout", "100"],
}


def options() -> list[str]:
    return [a.dest for a in B.make_parser()._actions if a.dest not in ("help", "out_dir")]


def test_every_option_has_a_value_to_try_and_a_build_that_reads_it():
    """A new option needs a line in HARMLESS and REFUSED: the walk below then proves what each build does with it."""
    assert sorted(set(options()) - set(HARMLESS)) == []
    assert [o for o in options() if all(o in REFUSED[kind] for kind in KINDS)] == []


@pytest.mark.parametrize("kind", KINDS)
def test_each_option_changes_the_build_or_is_refused(walk, capsys, kind):
    base = KINDS[kind]
    rc, err, baseline = walk(base, capsys)
    assert rc == 0 and err == "" and baseline, (kind, err)
    refused, used = set(), set()
    for dest in options():
        given = HARMLESS[dest]
        if given[0] in base:  # the option is part of this kind
            continue
        rc, err, calls = walk([*base, *given], capsys)
        if rc == 2:
            assert err.startswith("error: ") and err.count("\n") == 1, (kind, dest, err)
            assert given[0] in err or any(f in err for f in base if f.startswith("--")), (kind, dest, err)
            refused.add(dest)
        else:
            assert rc == 0 and calls != baseline, f"{kind}: {' '.join(given)} was read by nothing ({err})"
            used.add(dest)
    assert sorted(refused) == sorted(REFUSED[kind] - {d for d in options() if HARMLESS[d][0] in base})


@pytest.mark.parametrize("args, words", [
    # the training kernel ran on Kaggle's current image, unpinned; no wheel kernel, no cache, not a word
    ([*TRAIN, "--docker-image", "gcr.io/kaggle-gpu-images/python:v150"],
     "--docker-image: the submission bundle's, not the training's"),
    ([*TRAIN, "--wheel-kernel", "--compile-cache", "nonexistent.bin"],
     "--compile-cache, --wheel-kernel: the submission bundle's, not the training's"),
    # --dataset alone builds data/ only: the kernels' and the wheels' options vanished
    (["--dataset", "DATA", "--accelerator", "NvidiaH100"],
     "--accelerator: options of the training kernel and its wheels, and --dataset alone builds only data/; add "
     "--train-kernel, or leave them out"),
    (["--dataset", "DATA", "--extra-wheel", "w-1.0-py3-none-any.whl", "--docker-image", "x", "--wheel-kernel"],
     "--docker-image, --wheel-kernel: the submission bundle's, not the training's (--dataset, --train-kernel); build "
     "the two with two commands; --extra-wheel: options of the training kernel and its wheels"),
])
def test_a_training_build_refuses_what_it_would_drop(tmp_path, capsys, args, words):
    """The real command, nothing stood in for: one line, status 2, nothing built."""
    (tmp_path / "d").mkdir()
    out = tmp_path / "out"
    argv = [str(tmp_path / "d") if a == "DATA" else a for a in args]
    assert B.main([str(out), "--no-download", "--user", USER, *argv]
                  if "--dataset" not in args else [str(out), "--user", USER, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and words in err and err.count("\n") == 1, err
    assert not out.exists()


def test_a_key_set_twice_is_said_once_per_build(tmp_path, monkeypatch, caplog):
    """The build checked the kernel's settings, then the kernel's builder checked them again: `seed=5 seed=6`
    was said twice for one build. The wheels are stood in for; the training kernel is built."""
    monkeypatch.setattr(B, "build_wheels", lambda *a, **kw: Anything(ok=True))
    out = tmp_path / "out"
    assert B.main([str(out), "--train-kernel", "--preset", "cpu-smoke", "--no-download", "--user", USER, "seed=5",
                   "arch={hidden_size: 48}", "seed=6", "arch.hidden_size=32"]) == 0
    said = [r.getMessage() for r in caplog.records if "set twice" in r.getMessage()]
    assert len(said) == 2 and said[0].startswith("seed is set twice on one line ('seed=5', then 'seed=6')"), said
    assert said[1].startswith("arch.hidden_size is set twice on one line ('arch={hidden_size: 48}', then"), said
    assert (out / B.TRAIN_KERNEL_DIR / "kaggle_train.ipynb").is_file()


def test_trm_kaggle_bundle_takes_settings_after_its_options_as_build_bundle_does(tmp_path, monkeypatch, caplog):
    """`trm-kaggle bundle OUT --train-kernel --preset P seed=5` was "unrecognized arguments: seed=5" (argparse reads
    positionals in one run), though the docs give it build_bundle.py's options; a twice-set key is said once."""
    from trm_kaggle import cli

    monkeypatch.setattr(B, "build_wheels", lambda *a, **kw: Anything(ok=True))
    out = tmp_path / "out"
    assert cli.main(["bundle", str(out), "--train-kernel", "--preset", "cpu-smoke", "--no-download", "--user", USER,
                     "seed=5", "--slug-prefix", "trm-x", "seed=6"]) == 0
    said = [r.getMessage() for r in caplog.records if "set twice" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("seed is set twice on one line ('seed=5', then 'seed=6')"), said
    assert "OVERRIDES = {'seed': '6'}" in (out / B.TRAIN_KERNEL_DIR / "kaggle_train.ipynb").read_text()
