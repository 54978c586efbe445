"""The notebooks in notebooks/: paired (.py percent + .ipynb) and in sync, committed without outputs, one
papermill `parameters` cell with the documented names, and they execute end to end on CPU.

Regenerate a pair after editing either side: `jupytext --sync notebooks/<name>.py` (or `.ipynb`).
"""

from __future__ import annotations

import ast
import json
import shutil
import sys
from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext", reason="notebook tests need jupytext: pip install -e '.[notebooks]'")

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"

#: The documented parameters of every notebook (the names its `parameters` cell assigns).
PARAMETERS = {
    "build_dataset": {"OUTPUT_DIR", "SOURCE", "SUBSETS", "TEST_SET_NAME", "NUM_AUG", "SEED", "MAX_TASKS"},
    "train": {"DATA_DIR", "RUN_DIR", "PRESET", "OVERRIDES", "EXPORT_DIR", "MEAN_EMBEDDING"},
    "evaluate": {"WEIGHTS_DIR", "DATA_DIR", "REPORT_DIR", "BATCH_SIZE", "DEVICE", "TASKS", "N_PICTURES"},
    "kaggle_submission": {"KAGGLE_INPUT", "KAGGLE_WORKING", "WHEELS_DIR", "WEIGHTS_DIR", "CHALLENGES", "COMPETITION",
                          "TIME_BUDGET",
                          "FINETUNE_STEPS", "NUM_AUG", "MAX_TASKS", "WORKERS", "DEVICE", "MODE", "SAVE_MAX_TASKS",
                          "SAVE_TIME_BUDGET", "STRICT", "TRAJECTORIES", "TRAJECTORY_NOISE", "TEST_DEPTH"},
    "kaggle_train": {"KAGGLE_INPUT", "KAGGLE_WORKING", "WHEELS_DIR", "DATA_DIR", "PRESET", "OVERRIDES", "TIME_BUDGET",
                     "SAVE_MARGIN", "SAVE_EVERY_S", "SESSION_STEPS", "UNPACK_DIR", "DEVICE"},
    "analysis": {"DIRS", "OUT_DIR", "METRIC"},
    "code_repair": {"CORPUS", "DATA_DIR", "GRID", "STRIP_DOCSTRINGS", "MAX_FILES", "SEED", "RUN_DIR", "PRESET",
                    "OVERRIDES", "EXPORT_DIR", "DOCTESTS"},
}


def _cells(nb) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(c.cell_type, c.source.strip("\n"), tuple(c.get("metadata", {}).get("tags", ()))) for c in nb.cells]


def pair_differences(py_path: Path, ipynb_path: Path) -> list[str]:
    """How the .py (rendered to a notebook by jupytext) and the .ipynb disagree; empty when in sync."""
    from_py, from_ipynb = _cells(jupytext.read(py_path)), _cells(jupytext.read(ipynb_path))
    problems = []
    if len(from_py) != len(from_ipynb):
        problems.append(f"{py_path.name} has {len(from_py)} cells, {ipynb_path.name} {len(from_ipynb)}")
    for i, (a, b) in enumerate(zip(from_py, from_ipynb)):
        for what, x, y in zip(("type", "source", "tags"), a, b):
            if x != y:
                problems.append(f"cell {i}: {what} differs:\n  {py_path.name}: {x!r:.200}\n  {ipynb_path.name}: {y!r:.200}")
    return problems


def parameters_cells(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code" and "parameters" in c.get("metadata", {}).get("tags", [])]


def assigned_names(source: str) -> set[str]:
    names = set()
    for node in ast.parse(source).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


# ---------------------------------------------------------------------------
# pairing and sync
# ---------------------------------------------------------------------------


def test_every_notebook_is_a_pair():
    py = {p.stem for p in NOTEBOOKS.glob("*.py")}
    ipynb = {p.stem for p in NOTEBOOKS.glob("*.ipynb")}
    assert py == ipynb, f"unpaired: .py only {sorted(py - ipynb)}, .ipynb only {sorted(ipynb - py)}"
    assert set(PARAMETERS) <= py, f"missing notebooks: {sorted(set(PARAMETERS) - py)}"
    assert 'formats = "ipynb,py:percent"' in (NOTEBOOKS / "jupytext.toml").read_text()


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_pair_in_sync(name):
    problems = pair_differences(NOTEBOOKS / f"{name}.py", NOTEBOOKS / f"{name}.ipynb")
    assert not problems, (f"notebooks/{name}.py and .ipynb are out of sync (run `jupytext --sync "
                          f"notebooks/{name}.py`):\n" + "\n".join(problems))


def test_sync_check_catches_an_edit_of_one_side(tmp_path):
    for side in ("py", "ipynb"):
        d = tmp_path / side
        d.mkdir()
        for ext in ("py", "ipynb"):
            shutil.copy(NOTEBOOKS / f"train.{ext}", d / f"train.{ext}")
        assert pair_differences(d / "train.py", d / "train.ipynb") == []
        if side == "py":  # a changed default in the .py only
            path = d / "train.py"
            text = path.read_text()
            assert 'PRESET = "cpu-smoke"' in text
            path.write_text(text.replace('PRESET = "cpu-smoke"', 'PRESET = "arc2"'))
        else:  # a cell added to the .ipynb only
            path = d / "train.ipynb"
            nb = json.loads(path.read_text())
            nb["cells"].append({"cell_type": "code", "execution_count": None, "id": "added", "metadata": {},
                                "outputs": [], "source": ["print('only in the ipynb')"]})
            path.write_text(json.dumps(nb))
        assert pair_differences(d / "train.py", d / "train.ipynb"), f"an edit of the .{side} side went unnoticed"


# ---------------------------------------------------------------------------
# committed state and parameters
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_committed_without_outputs(name):
    nb = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [], f"{name}.ipynb cell {i} has outputs"
            assert cell.get("execution_count") is None, f"{name}.ipynb cell {i} has an execution count"


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_parameters_cell(name):
    nb = jupytext.read(NOTEBOOKS / f"{name}.ipynb")
    cells = parameters_cells(nb)
    assert len(cells) == 1, f"{name}: {len(cells)} cells tagged 'parameters' (papermill needs exactly one)"
    assert assigned_names(cells[0].source) == PARAMETERS[name]
    assert nb.cells[0].cell_type == "markdown", f"{name}: the first cell should say what the notebook does"
    # paths are parameters: no absolute path literal in the other code cells
    for cell in nb.cells:
        if cell.cell_type == "code" and cell is not cells[0]:
            literals = [n.value for n in ast.walk(ast.parse(cell.source)) if isinstance(n, ast.Constant)]
            assert not [v for v in literals if isinstance(v, str) and v.startswith("/")], cell.source


def papermill_reading(source: str) -> tuple[set[str], list[str]]:
    """(the parameter names papermill finds in a parameters cell, the warnings it logs doing so)."""
    import logging

    import nbformat
    from papermill.translators import PythonTranslator

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("papermill")
    logger.addHandler(handler)
    try:
        found = PythonTranslator.inspect(nbformat.v4.new_code_cell(source))
    finally:
        logger.removeHandler(handler)
    return {p.name for p in found}, [r.getMessage() for r in records if r.levelno >= logging.WARNING]


def every_parameters_cell() -> dict[str, str]:
    """The parameters cell of every notebook (the regression ones too) and of the Kaggle training kernel the bundle
    writes (its PRESET and OVERRIDES set from a command line's settings)."""
    from trm_kaggle.kaggle.train_kernel import set_parameters
    from trm_kaggle.train.overrides import override_mapping

    cells = {p.relative_to(NOTEBOOKS).as_posix(): parameters_cells(jupytext.read(p))[0].source
             for p in sorted(NOTEBOOKS.rglob("*.ipynb")) if parameters_cells(jupytext.read(p))}
    kernel = set_parameters(json.loads((NOTEBOOKS / "kaggle_train.ipynb").read_text()),
                            {"PRESET": "sudoku4-cpu", "OVERRIDES": override_mapping(["max_steps=10", "ema=True",
                                                                                     "eval_interval=null"])})
    cells["the training kernel"] = "".join(next(c for c in kernel["cells"]
                                                if "parameters" in c["metadata"].get("tags", []))["source"])
    return cells


def test_papermill_reads_every_parameter_of_every_notebook():
    """papermill learns a notebook's parameters by parsing its parameters cell; a line holding a second `=` (a
    list of key=value strings, even in a comment) it cannot parse: it warned "Unable to parse line" and then, for
    a value passed to it, "Passed unknown parameter", although the value was applied."""
    cells = every_parameters_cell()
    assert len(cells) >= len(PARAMETERS) + 1
    for name, source in cells.items():
        found, warnings = papermill_reading(source)
        assert not warnings and found == assigned_names(source), (name, warnings, assigned_names(source) - found)
    _, warnings = papermill_reading('OVERRIDES = ["max_steps=10"]  # a list of key=value strings\n')
    assert warnings and "Unable to parse line 1" in warnings[0]  # the check sees the old form


def test_list_and_mapping_values_reach_the_notebooks_without_warnings(tmp_path, caplog):
    """What docs/notebooks.md shows: a mapping and a list through papermill (`-y`, or the API), a JSON text
    through `-p`; papermill injects each without a word, and the notebook reads each as the same overrides."""
    import logging

    import papermill

    from trm_kaggle.train.overrides import override_list

    caplog.set_level(logging.INFO, logger="papermill")
    for name, parameters in (("train", {"OVERRIDES": {"max_steps": 2, "global_batch_size": 8}}),
                             ("train", {"OVERRIDES": '{"max_steps": 2, "global_batch_size": 8}'}),
                             ("build_dataset", {"SUBSETS": ["training2"], "NUM_AUG": 1})):
        out = tmp_path / f"{name}.ipynb"
        papermill.execute_notebook(str(NOTEBOOKS / f"{name}.ipynb"), str(out), parameters=parameters,
                                   prepare_only=True, progress_bar=False)
        injected = next(c for c in json.loads(out.read_text())["cells"]
                        if "injected-parameters" in c["metadata"].get("tags", []))
        assert all(k in "".join(injected["source"]) for k in parameters)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not warnings, warnings
    assert (override_list({"max_steps": 2, "global_batch_size": 8}) == override_list('{"max_steps": 2, '
                                                                                     '"global_batch_size": 8}')
            == ["max_steps=2", "global_batch_size=8"])


def test_overrides_in_every_form_give_the_same_settings():
    from trm_kaggle.train.overrides import override_list, override_mapping
    from trm_kaggle.train.settings import load_train_config

    mapping = {"max_steps": 2, "data_paths": ["data/a b", "x,y"], "ema": True, "eval_interval": None,
               "arch.L_cycles": 4, "lr": 1e-4, "+run_name": "z"}
    cfg = load_train_config(overrides=override_list(mapping))
    assert (cfg.max_steps, cfg.data_paths, cfg.ema, cfg.eval_interval, cfg.arch.L_cycles, cfg.lr, cfg.run_name) == \
        (2, ["data/a b", "x,y"], True, None, 4, 1e-4, "z")
    texts = ["max_steps=10", "eval_interval=null", "~ema", "max_steps=12"]
    assert override_list(override_mapping(texts)) == ["eval_interval=null", "~ema", "max_steps=12"]
    assert override_list(json.dumps(["a=1"])) == ["a=1"] and override_list(None) == []
    with pytest.raises(Exception, match="not a JSON list or mapping"):
        override_list("{max_steps: 2")


def test_kaggle_kernel_parameters_match_the_bundle():
    from trm_kaggle.kaggle.kernel import PARAMETER_NAMES, adapt_notebook
    from trm_kaggle.kaggle.metadata import BundleIds

    assert set(PARAMETER_NAMES) <= PARAMETERS["kaggle_submission"]
    nb = json.loads((NOTEBOOKS / "kaggle_submission.ipynb").read_text())
    _, warnings = adapt_notebook(nb, BundleIds())
    assert warnings == []
    # right after the parameters (papermill inserts its own cell between them), the fallback submission with the
    # standard library alone; then the offline install
    code = standard_library_first("kaggle_submission")
    assert "submission.json" in code[1].source and "os.replace" in code[1].source
    assert "offline_install.py" in code[2].source and 'installer["prepare"]' in code[2].source
    # the kernel prefers the challenges file of the competition its metadata attaches (--competition)
    adapted, _ = adapt_notebook(json.loads((NOTEBOOKS / "kaggle_submission.ipynb").read_text()), BundleIds(),
                                "arc-prize-2025")
    params = "".join(next(c for c in adapted["cells"] if "parameters" in c["metadata"].get("tags", []))["source"])
    assert "\nCOMPETITION = 'arc-prize-2025'  # this kernel's competition" in params


def standard_library_first(name: str) -> list:
    """The notebook's code cells, checked: the parameters first, then a cell importing the standard library alone."""
    code = [c for c in jupytext.read(NOTEBOOKS / f"{name}.ipynb").cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", [])
    imported = {(n.module if isinstance(n, ast.ImportFrom) else a.name).split(".")[0]
                for n in ast.walk(ast.parse(code[1].source)) if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in n.names}
    assert imported and imported <= set(sys.stdlib_module_names), imported
    return code


def test_kaggle_training_notebook_writes_its_report_first_with_the_standard_library():
    """Its first code cell after the parameters imports the standard library alone and writes session.json (so an
    image without pydantic or torch still leaves the reason); every later cell catches what it runs."""
    code = standard_library_first("kaggle_train")
    assert "session.json" in code[1].source and "os.replace" in code[1].source
    for cell in code[2:]:
        tree = ast.parse(cell.source)
        risky = [n for n in tree.body if not isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.Assign,
                                                             ast.If, ast.Try))]
        assert not risky, cell.source
        assert "try:" in cell.source, cell.source


# ---------------------------------------------------------------------------
# what a notebook refuses before its work, its cells run in this process (no kernel)
# ---------------------------------------------------------------------------


def run_cells_until(name: str, stop_at: str, monkeypatch, where: Path, **parameters) -> dict:
    """The notebook's code cells run here, in `where`, with `parameters` set after its parameters cell as papermill
    sets them, up to the cell holding `stop_at` (the work its checks come before), which is not run; its
    process-wide settings (the warnings' handler, OpenMP's environment) are left as they are."""
    import trm_kaggle.hardware
    import trm_kaggle.wording

    monkeypatch.setattr(trm_kaggle.wording, "log_one_line_each", lambda *a, **k: None)
    monkeypatch.setattr(trm_kaggle.hardware, "quiet_openmp_waits", lambda *a, **k: None)
    monkeypatch.chdir(where)
    space: dict = {}
    for cell in jupytext.read(NOTEBOOKS / f"{name}.py").cells:
        if cell.cell_type != "code":
            continue
        if stop_at in cell.source:
            return space
        exec(compile(cell.source, f"{name}.py", "exec"), space)
        if "parameters" in cell.metadata.get("tags", []):
            space.update(parameters)
    raise AssertionError(f"no cell of {name} holds {stop_at!r}")


@pytest.mark.parametrize("case", ["MEAN_EMBEDDING no", "EXPORT_DIR the run", "EXPORT_DIR the dataset",
                                  "EXPORT_DIR no export"])
def test_the_train_notebook_refuses_its_export_before_training(tmp_path, monkeypatch, case):
    """The reproducer: each was refused by the export cell, once the whole training had run (MEAN_EMBEDDING='no'
    named as the library's mean_embedding)."""
    from trm_kaggle.errors import TRMError

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "dataset.json").write_text("{}")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    export, error, said = {"MEAN_EMBEDDING no": ("weights", ValueError, r"^MEAN_EMBEDDING='no': expected True or False"),
                           "EXPORT_DIR the run": ("run", TRMError, r"EXPORT_DIR"),
                           "EXPORT_DIR the dataset": ("data", TRMError, r"EXPORT_DIR"),
                           "EXPORT_DIR no export": ("other", TRMError, r"other")}[case]
    with pytest.raises(error, match=said):
        run_cells_until("train", "train(cfg, signals=True)", monkeypatch, tmp_path, DATA_DIR="data", RUN_DIR="run",
                        EXPORT_DIR=export, MEAN_EMBEDDING="no" if case == "MEAN_EMBEDDING no" else False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "other"]  # nothing made
    space = run_cells_until("train", "train(cfg, signals=True)", monkeypatch, tmp_path, DATA_DIR="data",
                            RUN_DIR="run", EXPORT_DIR="weights")
    assert space["MEAN_EMBEDDING"] is False and space["cfg"].checkpoint_path == "run"


@pytest.mark.parametrize("case", ["REPORT_DIR of other weights", "TASKS unknown"])
def test_the_evaluate_notebook_refuses_its_report_before_any_inference(tmp_path, monkeypatch, case):
    """The reproducer: a REPORT_DIR holding the report of other weights, and a TASKS id the test split lacks, were
    refused by write_report once the whole evaluation had run (minutes on a 100-task dataset)."""
    import numpy as np

    from conftest import random_task, write_prefix_subset
    from trm_kaggle.config import ArcBuildConfig
    from trm_kaggle.data.arc.build import build_arc
    from trm_kaggle.errors import TRMError

    prefix = tmp_path / "src" / "arc-agi"
    prefix.parent.mkdir()
    write_prefix_subset(prefix, "evaluation", {"ev0": random_task(np.random.default_rng(2), n_train=2, max_side=4)})
    build_arc(ArcBuildConfig(output_dir=str(tmp_path / "data"), input_file_prefix=str(prefix),
                             subsets=["evaluation"], test_set_name="evaluation", num_aug=0, workers=1,
                             progress=False))
    (tmp_path / "ev1").mkdir()
    (tmp_path / "ev1" / "report.json").write_text(json.dumps({"weights": {"path": "/elsewhere/w",
                                                                         "sha256": "0" * 64}}))
    weights = str(NOTEBOOKS.parent / "weights" / "arc2-cpu-tiny")
    report, tasks, said = {
        "REPORT_DIR of other weights": ("ev1", None, r"^REPORT_DIR ev1: holds the report of other weights"),
        "TASKS unknown": ("ev2", "ab\x1b[31mc\x07", r"^TASKS: 'ab\\x1b\[31mc\\x07' not in the test split"),
    }[case]
    with pytest.raises(TRMError, match=said):
        run_cells_until("evaluate", "load_inference_model(", monkeypatch, tmp_path, WEIGHTS_DIR=weights,
                        DATA_DIR="data", REPORT_DIR=report, DEVICE="cpu", TASKS=tasks)
    space = run_cells_until("evaluate", "load_inference_model(", monkeypatch, tmp_path, WEIGHTS_DIR=weights,
                            DATA_DIR="data", REPORT_DIR="ev2", DEVICE="cpu", TASKS="ev0")
    assert space["WEIGHTS"]["path"] == weights and space["TASKS"] == ["ev0"]


@pytest.mark.parametrize("name,parameter,stop_at", [
    ("build_dataset", "OUTPUT_DIR", "ArcBuildConfig(output_dir"), ("analysis", "OUT_DIR", "write_comparison(DIRS"),
    ("evaluate", "REPORT_DIR", "load_inference_model("), ("train", "RUN_DIR", "train(cfg, signals=True)"),
    ("train", "EXPORT_DIR", "train(cfg, signals=True)"), ("code_repair", "DATA_DIR", "build_code_repair("),
    ("code_repair", "RUN_DIR", "build_code_repair("), ("code_repair", "EXPORT_DIR", "build_code_repair("),
])
def test_a_notebook_never_writes_into_the_notebooks_folder(tmp_path, monkeypatch, name, parameter, stop_at):
    """The reproducer: build_dataset's OUTPUT_DIR and analysis's OUT_DIR in notebooks/ wrote a whole dataset and a
    comparison there; every output parameter is refused in one line naming it, before any work."""
    from trm_kaggle.errors import TRMError

    before = sorted(p.name for p in NOTEBOOKS.iterdir())
    weights = str(NOTEBOOKS.parent / "weights" / "arc2-cpu-tiny")
    with pytest.raises(TRMError, match=rf"^{parameter} .*: lies in the notebooks folder "):
        run_cells_until(name, stop_at, monkeypatch, tmp_path,
                        **{"WEIGHTS_DIR": weights, "DATA_DIR": "data", parameter: str(NOTEBOOKS / "made-here")})
    assert sorted(p.name for p in NOTEBOOKS.iterdir()) == before and not list(tmp_path.iterdir())


@pytest.mark.parametrize("name,parameters,said,stop_at", [
    ("build_dataset", {"OUTPUT_DIR": ""}, r"^OUTPUT_DIR is empty", "ArcBuildConfig(output_dir"),
    ("train", {"RUN_DIR": " "}, r"^RUN_DIR is empty", "train(cfg, signals=True)"),
    ("build_dataset", {"MAX_TASKS": -3}, r"^MAX_TASKS: [^\n]*$", "verify_dataset(OUTPUT_DIR)"),
    ("build_dataset", {"SUBSETS": "training2"}, r"^SUBSETS: [^\n]*$", "verify_dataset(OUTPUT_DIR)"),
    ("code_repair", {"MAX_FILES": 0}, r"^MAX_FILES: [^\n]*$", "load_repair_tokens("),
    ("code_repair", {"GRID": "0x-5"}, r"^GRID: [^\n]*$", "load_repair_tokens("),
])
def test_a_notebook_says_a_bad_setting_in_one_line_by_its_parameter(tmp_path, monkeypatch, name, parameters, said,
                                                                    stop_at):
    """An empty output path became the default without a word (None is the default); build_dataset's and
    code_repair's settings were refused as pydantic's many-line ValidationError, in the config's field names."""
    from trm_kaggle.errors import TRMError

    with pytest.raises(TRMError, match=said):
        run_cells_until(name, stop_at, monkeypatch, tmp_path, **parameters)
    assert not list(tmp_path.iterdir())


# ---------------------------------------------------------------------------
# execution
# ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def kernel_name(tmp_path_factory):
    """A Jupyter kernel spec running this interpreter, in a private JUPYTER_PATH (the user's are left alone)."""
    pytest.importorskip("papermill", reason="executing notebooks needs papermill: pip install -e '.[notebooks]'")
    pytest.importorskip("ipykernel", reason="executing notebooks needs ipykernel: pip install -e '.[notebooks]'")
    from ipykernel.kernelspec import install

    prefix = tmp_path_factory.mktemp("jupyter")
    name = "trm-kaggle-test-python3"
    install(kernel_name=name, display_name=f"Python {sys.version_info.major}.{sys.version_info.minor} (tests)",
            prefix=str(prefix))
    spec = json.loads((prefix / "share" / "jupyter" / "kernels" / name / "kernel.json").read_text())
    assert spec["argv"][0] == sys.executable
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_PATH", str(prefix / "share" / "jupyter"))
        yield name


def run_notebook(name: str, out_dir: Path, kernel: str, **parameters):
    import papermill

    executed = out_dir / f"{name}.executed.ipynb"
    papermill.execute_notebook(str(NOTEBOOKS / f"{name}.ipynb"), str(executed), parameters=parameters,
                               kernel_name=kernel, cwd=str(out_dir), progress_bar=False)
    nb = json.loads(executed.read_text())
    # a kernel without ipywidgets gets text bars, without tqdm.auto's warning about the missing widget
    assert "TqdmWarning" not in text_outputs(nb) and "IProgress not found" not in text_outputs(nb)
    return nb


def text_outputs(nb: dict) -> str:
    out = []
    for cell in nb["cells"]:
        for o in cell.get("outputs", []):
            out.append("".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", "")))
    return "\n".join(out)


@pytest.mark.slow
def test_build_dataset_notebook_executes(tmp_path, kernel_name):
    import numpy as np

    from conftest import random_task, write_prefix_subset
    from trm_kaggle.data.verify import verify_dataset

    rng = np.random.default_rng(0)
    prefix = tmp_path / "src" / "arc-agi"
    prefix.parent.mkdir()
    write_prefix_subset(prefix, "training", {f"tr{i}": random_task(rng, max_side=5) for i in range(2)})
    write_prefix_subset(prefix, "evaluation", {"ev0": random_task(rng, n_test=2, max_side=5)})

    nb = run_notebook("build_dataset", tmp_path, kernel_name, SOURCE=str(prefix), SUBSETS=["training", "evaluation"],
                      TEST_SET_NAME="evaluation", NUM_AUG=1, SEED=3, MAX_TASKS=None)

    # named by its settings (the folder once said aug-8 whatever NUM_AUG was), relative to the kernel's folder
    out = tmp_path / "runs" / "notebooks" / "data" / "arc-agi-aug-1"
    assert [p.name for p in (tmp_path / "runs" / "notebooks" / "data").iterdir()] == [out.name]
    summary = verify_dataset(out)
    assert summary["test_tasks"] == 1
    assert summary["splits"]["test"]["examples"] == 2 * 2  # 2 test inputs x (original + 1 augmentation)
    text = text_outputs(nb)
    assert "built " in text and "3 tasks" in text
    assert "dataset runs/notebooks/data/arc-agi-aug-1: OK" in text
    assert json.loads((out / "build_info.json").read_text())["config"]["num_aug"] == 1


@pytest.mark.slow
def test_train_and_evaluate_notebooks_execute(tmp_path, kernel_name):
    """The smoke chain on a 3-task dataset: train 1 step, export, evaluate, report with pictures."""
    import numpy as np

    from conftest import random_task, write_prefix_subset
    from trm_kaggle.config import ArcBuildConfig
    from trm_kaggle.data.arc.build import build_arc

    rng = np.random.default_rng(1)
    prefix = tmp_path / "src" / "arc-agi"
    prefix.parent.mkdir()
    write_prefix_subset(prefix, "training", {f"tr{i}": random_task(rng, n_train=2, max_side=4) for i in range(2)})
    write_prefix_subset(prefix, "evaluation", {"ev0": random_task(rng, n_train=2, max_side=4)})
    build_arc(ArcBuildConfig(output_dir=str(tmp_path / "data"), input_file_prefix=str(prefix),
                             subsets=["training", "evaluation"], test_set_name="evaluation",
                             test_set_name2="evaluation", num_aug=1, workers=1, progress=False))

    nb = run_notebook("train", tmp_path, kernel_name, DATA_DIR="data", RUN_DIR="run", EXPORT_DIR="weights",
                      OVERRIDES={"max_steps": 1, "global_batch_size": 2, "progress": False})
    assert (tmp_path / "weights" / "weights.safetensors").is_file()
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 1
    assert any("image/png" in o.get("data", {}) for c in nb["cells"] for o in c.get("outputs", [])), "no curve"
    assert "trained 1 steps" in text_outputs(nb)

    nb = run_notebook("evaluate", tmp_path, kernel_name, WEIGHTS_DIR="weights", DATA_DIR="data", BATCH_SIZE=2,
                      DEVICE="cpu", TASKS="ev0")  # one id as text (`-p TASKS ev0`): its letters were taken as ids
    text = text_outputs(nb)
    assert "ARC Prize score (micro over 1 test outputs" in text
    assert "pass@K, task macro" in text and "token accuracy (per token" in text
    # under the weights' own name (and the dataset's), recording which weights it evaluated
    from trm_kaggle.model.export import export_digest

    report_dir = tmp_path / "runs" / "notebooks" / "eval" / "weights" / "data"
    report = json.loads((report_dir / "report.json").read_text())
    assert list(report["tasks"]) == ["ev0"]
    assert report["weights"] == {"path": "weights", "sha256": export_digest(tmp_path / "weights"),
                                 "from_report": "../../../../../weights"}
    assert f"`{export_digest(tmp_path / 'weights')}`" in (report_dir / "report.md").read_text()
    assert (report_dir / "pictures" / "ev0.png").is_file()
    import papermill

    with pytest.raises(papermill.PapermillExecutionError, match=r"N_PICTURES=-1: expected a whole number"):
        run_notebook("evaluate", tmp_path, kernel_name, WEIGHTS_DIR="weights", DATA_DIR="data", N_PICTURES=-1,
                     REPORT_DIR="never")  # named as the notebook's parameter (it was write_report's `first_n`)
    assert not (tmp_path / "never").exists()
    assert sum("image/png" in o.get("data", {}) for c in nb["cells"] for o in c.get("outputs", [])) == 1


@pytest.mark.slow
def test_analysis_notebook_executes_on_a_hand_made_sweep(tmp_path, kernel_name):
    """Two variants x two seeds, one run still running: the table and both plots appear inline. The sweep's
    folder name holds an escape sequence: the package's warning about a record no run writes names it escaped
    (it reached the terminal raw under papermill --log-output)."""
    from conftest import write_run

    sweep = tmp_path / "sw\x1b[31meep\x07"
    records = []
    for variant, lr in (("a", "0.001"), ("b", "0.01")):
        for seed in (0, 1):
            name = f"{variant}_s{seed}"
            last = [] if name == "b_s1" else [(20, 8.0 + seed, 0.5, 0.5 + seed / 10, 0.9)]
            write_run(sweep / name, [f"lr={lr}", f"seed={seed}", "eval_interval=1"],
                      train=[(10, 4.0 + seed, 1.0, 0.25, 0.7)] + last, evals=[(10, 0.25 * seed, 0.5)])
            records.append({"name": name, "variant": variant, "seed": seed,
                            "state": "running" if name == "b_s1" else "done"})
    (sweep / "sweep.json").write_text(json.dumps({"format": "trm_kaggle.sweep", "version": 1, "runs": records}))
    with open(sweep / "a_s0" / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"step": -5, "loss": 2.0}) + "\n")  # no run writes a step below 0: a warning

    nb = run_notebook("analysis", tmp_path, kernel_name, DIRS=[sweep.name], OUT_DIR="cmp", METRIC=None)
    warned = "".join("".join(o.get("text", "")) for c in nb["cells"] for o in c.get("outputs", [])
                     if o.get("name") == "stderr")
    assert "skipped 1 record(s) no run writes" in warned and "sw\\x1b[31meep\\x07" in warned, warned
    assert "\x1b" not in warned and "\x07" not in warned, warned
    text = "\n".join("".join(o.get("data", {}).get("text/markdown", "")) for c in nb["cells"]
                      for o in c.get("outputs", []))
    assert "# Comparison of 4 runs (3 done)" in text and "| a | 2 | 2 done |" in text and "| b_s1 | 1 | running |" in text
    assert "Metric of the plots: `eval_exact_accuracy`" in text
    assert sum("image/png" in o.get("data", {}) for c in nb["cells"] for o in c.get("outputs", [])) == 2
    assert {p.name for p in (tmp_path / "cmp").iterdir()} == {"table.md", "table.csv", "curves.png", "final.png",
                                                              ".trm_kaggle_output.json"}  # replaced as one folder


@pytest.mark.slow
def test_code_repair_notebook_executes(tmp_path, kernel_name):
    """Build from a five-file corpus, train 2 steps, evaluate (doctests included) on the held-out file."""
    from test_code_repair import module_source

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for k in range(1, 6):
        (corpus / f"mod{k}.py").write_text(module_source(k))
    nb = run_notebook("code_repair", tmp_path, kernel_name, CORPUS=str(corpus), DATA_DIR="data", GRID="12x48",
                      STRIP_DOCSTRINGS=False, MAX_FILES=None, SEED=1, RUN_DIR="run", PRESET="repair-cpu",
                      OVERRIDES=["max_steps=2", "global_batch_size=4", "arch.hidden_size=16", "arch.H_cycles=1",
                                 "arch.L_cycles=1", "arch.halt_max_steps=1", "progress=False"],
                      EXPORT_DIR="weights", DOCTESTS=True)
    text = text_outputs(nb)
    assert "built data:" in text and "trained 2 steps" in text
    assert "exact-fix rate" in text and "overall" in text and "doctests:" in text
    assert (tmp_path / "weights" / "weights.safetensors").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("signum", ["SIGINT", "SIGTERM"])
def test_a_stopped_train_notebook_saves_its_state_and_its_rerun_resumes(tmp_path, kernel_name, signum):
    """Jupyter's "interrupt kernel" (SIGINT to the kernel) or a SIGTERM while the train cell trains: the state of the
    step under way is saved, as `trm-kaggle train` saves it, and the cell ends naming it; running the notebook again
    resumes there (the stop once lost every step since the start)."""
    import os
    import signal
    import threading
    import time

    from integrity_helpers import build_sudoku4
    from papermill.exceptions import PapermillExecutionError
    from trm_kaggle.locks import LOCK_FILE
    from trm_kaggle.train import checkpoint as ckpt

    build_sudoku4(tmp_path / "data")
    run = tmp_path / "run"
    tiny = {"arch.hidden_size": 16, "arch.num_heads": 2, "arch.H_cycles": 1, "arch.L_cycles": 1,
            "arch.halt_max_steps": 2, "global_batch_size": 8, "log_interval": 1, "progress": False, "threads": 1}
    ended = []

    def endless():
        try:
            run_notebook("train", tmp_path, kernel_name, DATA_DIR="data", RUN_DIR="run", EXPORT_DIR="weights",
                         OVERRIDES={**tiny, "max_steps": 10**6, "epochs": 10**6})
        except BaseException as e:  # noqa: BLE001 - the stop's error, checked below
            ended.append(e)

    worker = threading.Thread(target=endless, daemon=True)
    worker.start()
    deadline = time.monotonic() + 120
    while not ((run / "metrics.jsonl").is_file() and len((run / "metrics.jsonl").read_text().splitlines()) >= 3):
        assert worker.is_alive() and time.monotonic() < deadline, ended
        time.sleep(0.05)
    kernel = int((run / LOCK_FILE).read_text().split(" ", 1)[0])  # the lock names its holder: the kernel
    os.kill(kernel, getattr(signal, signum))
    worker.join(60)
    assert not worker.is_alive() and len(ended) == 1 and isinstance(ended[0], PapermillExecutionError), ended
    assert ended[0].ename == "TrainingInterrupted" and "train state saved to" in ended[0].evalue, ended[0].evalue
    states = ckpt.list_states(run)
    assert len(states) == 1, states
    step = int(ckpt.load_train_state(states[0])["step"])
    assert step >= 3 and f"stopped by {signum} at step {step}" in ended[0].evalue

    nb = run_notebook("train", tmp_path, kernel_name, DATA_DIR="data", RUN_DIR="run", EXPORT_DIR="weights",
                      OVERRIDES={**tiny, "max_steps": step + 1, "epochs": 10**6})
    assert f"1 new steps, resuming at step {step}, to step {step + 1}" in text_outputs(nb)


@pytest.mark.slow
@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT"])
def test_a_stop_of_papermill_saves_the_train_notebooks_state(tmp_path, kernel_name, signum):
    """papermill stopped while the train cell trains (Kaggle's or a scheduler's SIGTERM to the runner): the kernel, in
    a session of its own, is not signalled, and ipykernel ended it at once as papermill went: no state was saved and
    the rerun started at step 1. The runner's end is a SIGTERM to the kernel now: the state is saved, the kernel says
    so on its stderr (papermill's) and exits. Ctrl-C (SIGINT) to papermill interrupts the kernel and shuts it down:
    the state is saved and said the same way, without ipykernel's traceback of its reply to the closed sockets
    (papermill's own "Aborted!" and status 1 follow)."""
    import os
    import signal
    import subprocess
    import time

    from integrity_helpers import build_sudoku4
    from test_kaggle_runner_stop import _alive, wait_for_exit
    from trm_kaggle.locks import LOCK_FILE
    from trm_kaggle.train import checkpoint as ckpt

    build_sudoku4(tmp_path / "data")
    run = tmp_path / "run"
    (tmp_path / "parameters.yaml").write_text(json.dumps({  # JSON is YAML
        "DATA_DIR": "data", "RUN_DIR": "run", "EXPORT_DIR": "weights",
        "OVERRIDES": {"arch.hidden_size": 16, "arch.num_heads": 2, "arch.H_cycles": 1, "arch.L_cycles": 1,
                      "arch.halt_max_steps": 2, "global_batch_size": 8, "log_interval": 1, "progress": False,
                      "threads": 1, "max_steps": 10**6, "epochs": 10**6}}))
    with open(tmp_path / "papermill.log", "wb") as log:  # the kernel writes to papermill's stderr too
        runner = subprocess.Popen([sys.executable, "-m", "papermill", str(NOTEBOOKS / "train.ipynb"),
                                   str(tmp_path / "train.executed.ipynb"), "-f", str(tmp_path / "parameters.yaml"),
                                   "-k", kernel_name, "--cwd", str(tmp_path), "--no-progress-bar"],
                                  stdout=log, stderr=subprocess.STDOUT)
    kernel = None
    try:
        deadline = time.monotonic() + 120
        while not ((run / "metrics.jsonl").is_file() and len((run / "metrics.jsonl").read_text().splitlines()) >= 3):
            assert runner.poll() is None and time.monotonic() < deadline, (tmp_path / "papermill.log").read_text()
            time.sleep(0.05)
        kernel = int((run / LOCK_FILE).read_text().split(" ", 1)[0])  # the lock names its holder: the kernel
        runner.send_signal(getattr(signal, signum))
        runner.wait(60)
        wait_for_exit(kernel, deadline, "the kernel outlived its runner")
    finally:
        runner.kill()
        if kernel is not None and _alive(kernel):
            os.kill(kernel, signal.SIGKILL)
    said = (tmp_path / "papermill.log").read_text()
    states = ckpt.list_states(run)
    assert len(states) == 1, (states, said)
    step = int(ckpt.load_train_state(states[0])["step"])
    assert step >= 3 and f"TrainingInterrupted: stopped by {signum} at step {step}: train state saved to" in said, said
    assert "Traceback" not in said and "ZMQError" not in said, said
