"""Data flows one way: tasks -> dataset -> batches -> model -> votes -> submission -> bundle.

Every import of every module of the package (function-level imports included) is read
with `ast` and checked against the layer it may reach: a lower layer never imports a
higher one, and imports are absolute. Inside a layer too the imports go one way: no
module reaches itself through others (no import cycle, function-level imports included).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import trm_kaggle

PACKAGE = Path(trm_kaggle.__file__).parent

# The layer of each top-level module or subpackage.
LAYER_OF = {
    "__init__": "base", "errors": "base", "jsonio": "base", "atomic": "base", "config": "base", "names": "base",
    "lifetime": "base", "hardware": "base", "wording": "base", "progress": "base", "locks": "base", "outputs": "base",
    "yamlio": "base", "faces": "base",
    "xla": "base",  # PyTorch/XLA helpers: the model, optimizers, training and inference all call them
    "stdout": "base",  # results reach standard output or the command fails (the CLI and build_bundle.py)
    "interrupts": "base",  # SIGTERM taken as Ctrl-C, and the one line a stop ends with
    "runner_watch": "base",  # a notebook's runner gone (papermill stopped): the training saves first
    "data": "data",  # tasks -> dataset -> batches
    "model": "model",  # batches -> predictions (and exports of the weights)
    "optim": "optim",
    "train": "train",
    "evaluate": "evaluate",  # predictions -> votes -> submission
    "solve": "solve",  # the Kaggle kernel's job: test-time training + evaluation in a budget
    "experiments": "experiments",  # grids of training runs and their comparison
    "launch": "launch",  # beyond one machine: torchrun checked, Kubernetes and SLURM job files
    "kaggle": "kaggle",  # the bundle
    "cli": "top", "__main__": "top", "console": "top", "pipeline": "top", "doctor": "top", "command_io": "top",
    "kaggle_training": "top",  # a session of the Kaggle training kernel: train, export, the curve
}

# What each layer may import. evaluate/ reads batches and runs the model, but never the training code.
MAY_IMPORT = {
    "base": {"base"},
    "data": {"base", "data"},
    "model": {"base", "data", "model"},
    "optim": {"base", "data", "model", "optim"},
    "train": {"base", "data", "model", "optim", "train"},
    "evaluate": {"base", "data", "model", "evaluate"},
    "solve": {"base", "data", "model", "optim", "train", "evaluate", "solve"},
    "experiments": {"base", "data", "model", "optim", "train", "evaluate", "experiments"},
    "kaggle": {"base", "data", "model", "evaluate", "train", "kaggle"},  # train: the training kernel's settings
    "launch": {"base", "data", "model", "optim", "train", "experiments", "launch"},
    "top": set(LAYER_OF.values()),
}


def layer(module: str) -> str:
    """Layer of a dotted module name inside the package ('trm_kaggle.data.arc.tasks' -> 'data')."""
    parts = module.split(".")
    assert parts[0] == "trm_kaggle", module
    return LAYER_OF[parts[1]] if len(parts) > 1 else "base"


def package_modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    return ".".join(rel.parts)


def imports_of(path: Path) -> list[tuple[int, str, int]]:
    """(line, imported module, relative level) of every import in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, 0) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if base == "trm_kaggle" and node.level == 0:  # `from trm_kaggle import x`: x may be a subpackage
                found += [(node.lineno, f"trm_kaggle.{alias.name}", 0) for alias in node.names]
            else:
                found.append((node.lineno, base, node.level))
    return found


def upward_imports(path: Path, name: str | None = None) -> list[str]:
    """The imports of `path` (module `name`, by default its own) that break the layering, as readable lines."""
    name = name or module_name(path)
    here = layer(name)
    bad = []
    for line, target, level in imports_of(path):
        if level:
            bad.append(f"{name}:{line}: relative import (use `from trm_kaggle... import`)")
            continue
        parts = target.split(".")
        if parts[0] != "trm_kaggle" or len(parts) == 1:
            continue
        if parts[1] not in LAYER_OF:
            if (PACKAGE / parts[1]).with_suffix(".py").exists() or (PACKAGE / parts[1]).is_dir():
                bad.append(f"{name}:{line}: trm_kaggle.{parts[1]} has no layer in LAYER_OF")
            continue  # a name of the package itself, such as `from trm_kaggle import __version__`
        there = layer(target)
        if there not in MAY_IMPORT[here]:
            bad.append(f"{name}:{line}: the {here} layer imports {target} ({there})")
    return bad


def test_every_module_has_a_layer():
    for path in package_modules():
        top = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        assert top in LAYER_OF, f"{path}: add its layer to LAYER_OF"


@pytest.mark.parametrize("path", package_modules(), ids=lambda p: module_name(p))
def test_imports_follow_the_data_flow(path):
    assert upward_imports(path) == []


def test_an_upward_import_is_caught(tmp_path):
    """The check itself: an upward import (at module level or in a function) or a relative one fails."""
    for name, source in (("trm_kaggle.data.x", "from trm_kaggle.model.trm import TinyRecursiveModel\n"),
                         ("trm_kaggle.evaluate.x", "def f():\n    from trm_kaggle.train import loop\n"),
                         ("trm_kaggle.model.x", "from trm_kaggle import train\n"),
                         ("trm_kaggle.model.y", "import trm_kaggle.solve.job\n"),
                         ("trm_kaggle.model.z", "from .trm import TinyRecursiveModel\n")):
        path = tmp_path / "x.py"
        path.write_text(source)
        assert upward_imports(path, name), name
    path.write_text("from trm_kaggle.data.loader import PuzzleLoader\nfrom trm_kaggle import __version__\n")
    assert upward_imports(path, "trm_kaggle.evaluate.x") == []


def test_the_package_docstring_states_the_data_flow():
    assert "tasks -> dataset -> batches -> model -> votes -> submission -> bundle" in " ".join(
        trm_kaggle.__doc__.split())


# ---------------------------------------------------------------------------
# No import cycles between modules
# ---------------------------------------------------------------------------


def module_of(target: str, modules: set[str]) -> str | None:
    """The package module an import names: `trm_kaggle.a.b` itself, or for `from trm_kaggle.a import b` read as
    `trm_kaggle.a.b`, the deepest prefix that is a module (a name imported from a module is that module)."""
    parts = target.split(".")
    for end in range(len(parts), 1, -1):
        name = ".".join(parts[:end])
        if name in modules:
            return name
    return None


def face_target(target: str) -> str:
    """`trm_kaggle.<package>.<name>` read through the package's face: the module that defines the name."""
    parts = target.split(".")
    if len(parts) == 3 and parts[0] == "trm_kaggle" and (PACKAGE / parts[1] / "__init__.py").is_file():
        return face(parts[1])[0].get(parts[2], target)
    return target


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """{module: the package modules it imports} from {module name: its source}."""
    modules = set(sources)
    graph: dict[str, set[str]] = {}
    for name, source in sources.items():
        edges = set()
        for node in ast.walk(ast.parse(source, name)):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [f"{node.module}.{alias.name}" for alias in node.names]
            targets = [face_target(t) for t in targets]  # a name imported through a face: its module
            edges |= {m for m in (module_of(t, modules) for t in targets) if m is not None and m != name}
        graph[name] = edges
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (each holds at least one cycle), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan; the package is small enough for recursion
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(groups)


def package_sources() -> dict[str, str]:
    return {module_name(p).removesuffix(".__init__"): p.read_text() for p in package_modules()}


def test_no_module_imports_itself_through_others():
    assert import_cycles(import_graph(package_sources())) == []


def test_a_planted_cycle_is_caught():
    """The check itself: a cycle through a function-level import and `from package import module` is found."""
    sources = package_sources()
    sources["trm_kaggle.solve.workdir"] += "\ndef planted():\n    from trm_kaggle.solve import solve\n"
    cycles = import_cycles(import_graph(sources))
    assert len(cycles) == 1 and {"trm_kaggle.solve.workdir", "trm_kaggle.solve.job"} <= set(cycles[0])
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_each_cli_room_stays_small():
    """The command line is one room per family of commands (trm_kaggle/cli/): none grows past 300 lines."""
    rooms = {p.name: len(p.read_text().splitlines()) for p in (PACKAGE / "cli").glob("*.py")}
    assert len(rooms) >= 8 and {name for name, lines in rooms.items() if lines >= 300} == set(), rooms


# ---------------------------------------------------------------------------
# One public face per package: other layers and benchmarks/ import through it
# ---------------------------------------------------------------------------

REPO = PACKAGE.parent
#: Files outside the package held to the faces: the benchmarks, the bundle builder, the notebooks' sources.
OUTSIDE = sorted([*(REPO / "benchmarks").rglob("*.py"), REPO / "build_bundle.py", *(REPO / "notebooks").rglob("*.py")])


def subpackages() -> list[str]:
    return sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())


def face(package: str) -> tuple[dict[str, str], set[str]]:
    """(public name -> defining module, public submodules) of `trm_kaggle.<package>`: its `_EXPORTS` and
    `_MODULES`, or for a package that imports its names eagerly (config) the names its `__init__` imports."""
    tree = ast.parse((PACKAGE / package / "__init__.py").read_text())
    exports, modules = {}, set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id == "_EXPORTS":
                exports = {k: f"trm_kaggle.{package}.{v}" for k, v in ast.literal_eval(node.value).items()}
            elif node.targets[0].id == "_MODULES":
                modules = set(ast.literal_eval(node.value))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(f"trm_kaggle.{package}."):
            exports.update({a.asname or a.name: node.module for a in node.names})
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
            exports[node.name] = f"trm_kaggle.{package}"  # defined by the face itself (the CLI's main)
    return exports, modules


def face_problems(path: Path, name: str) -> list[str]:
    """Imports of `path` (module `name`) that reach into another subpackage instead of through its face."""
    home = name.split(".")[1] if name.startswith("trm_kaggle.") else None
    packages = set(subpackages())
    bad = []
    for line, target, level in imports_of(path):
        parts = target.split(".")
        if level or parts[0] != "trm_kaggle" or len(parts) < 2 or parts[1] not in packages or parts[1] == home:
            continue
        if len(parts) > 2 and not (len(parts) == 3 and parts[2] in face(parts[1])[1]):
            bad.append(f"{name}:{line}: imports {target}: import what it needs from trm_kaggle.{parts[1]}")
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.count(".") == 1:
            package = node.module.split(".")[1]
            if node.module.startswith("trm_kaggle.") and package in packages and package != home:
                exports, modules = face(package)
                bad += [f"{name}:{node.lineno}: {a.name} is not public in trm_kaggle.{package} (its __init__)"
                        for a in node.names if a.name not in exports and a.name not in modules]
    return bad


def outside_name(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts)


@pytest.mark.parametrize("path", package_modules() + OUTSIDE,
                         ids=lambda p: module_name(p) if PACKAGE in p.parents else outside_name(p))
def test_other_layers_import_through_each_packages_face(path):
    name = module_name(path) if PACKAGE in path.parents else outside_name(path)
    assert face_problems(path, name) == []


def test_each_face_lists_names_its_modules_define():
    """Every public name resolves to an object of the module the face names (imported: a typo is caught)."""
    import importlib

    for package in subpackages():
        exports, modules = face(package)
        if package != "cli":
            assert exports, f"trm_kaggle.{package}: its __init__ lists no public name"
        for public, module in exports.items():
            assert hasattr(importlib.import_module(module), public), f"{module} has no {public}"
            assert not (PACKAGE / package / f"{public}.py").exists(), f"{package}.{public} is a name and a module"
        for module in modules:
            assert (PACKAGE / package / f"{module}.py").exists() or (PACKAGE / package / module).is_dir()


def test_a_reach_past_a_face_is_caught(tmp_path):
    path = tmp_path / "x.py"
    path.write_text("from trm_kaggle.model.trm import TinyRecursiveModel\n")
    assert face_problems(path, "trm_kaggle.evaluate.x") and face_problems(path, "benchmarks.x")
    assert face_problems(path, "trm_kaggle.model.x") == []  # inside its own package
    path.write_text("from trm_kaggle.model import not_public_anywhere\n")
    assert face_problems(path, "benchmarks.x")
    path.write_text("from trm_kaggle.model import TinyRecursiveModel\n")
    assert face_problems(path, "benchmarks.x") == []


def test_no_benchmark_imports_itself_through_others():
    sources = package_sources() | {outside_name(p): p.read_text() for p in OUTSIDE}
    assert import_cycles(import_graph(sources)) == []


def test_every_module_imports():
    """An import line naming what its module no longer holds (a name removed as unused where another module took it
    from there) fails only when that module is first imported, which a run of one command may never do: every
    module of the package is imported here (`__main__` modules run the CLI, so not those)."""
    import importlib
    import pkgutil

    failed = {}
    for info in pkgutil.walk_packages(trm_kaggle.__path__, "trm_kaggle."):
        if info.name.rpartition(".")[2] == "__main__":
            continue
        try:
            importlib.import_module(info.name)
        except Exception as e:  # noqa: BLE001 - every failure is reported, whatever its kind
            failed[info.name] = f"{type(e).__name__}: {e}"
    assert not failed, failed
