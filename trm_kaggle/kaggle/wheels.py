"""The wheels dataset: the trm_kaggle wheel (built offline), the runtime dependencies' wheels for Kaggle's
interpreter (dependency resolution and `pip download`), install.sh and the manifest: `build_wheels`.

Network use: only `pip download` of the dependency wheels (skipped with `download=False` / `--no-download`).
The trm_kaggle wheel is built offline: `pip wheel --no-deps --no-index --no-build-isolation` with this
interpreter's setuptools when it can (>= 77.0.3, as pyproject.toml asks), else by `build_pure_wheel`, a PEP 427
builder for this pure-Python package (same files and metadata).

Kaggle's image is assumed to already hold `DEFAULT_KAGGLE_HAS` (and their own dependencies): those are never
shipped. The dependency walk stops at them, so the packages *they* need are assumed present too. Override
with `--kaggle-has NAME ...` when the image changes.
"""

from __future__ import annotations

import email.parser
import hashlib
import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

from trm_kaggle import __version__
from trm_kaggle.atomic import atomic_directory, atomic_write_json, atomic_write_text, scratch_folder
from trm_kaggle.errors import TRMError, os_error_line
from trm_kaggle.jsonio import is_regular
from trm_kaggle.wording import clipped
from trm_kaggle.kaggle.metadata import (
    DATASET_META, REPO_ROOT, BundleIds, tail_lines, dataset_metadata, write_manifest,
)

try:  # packaging is everywhere pip is; fall back to pip's vendored copy
    from packaging.markers import Marker
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.specifiers import SpecifierSet
    from packaging.utils import canonicalize_name, canonicalize_version, parse_wheel_filename
except ImportError:  # pragma: no cover
    from pip._vendor.packaging.markers import Marker
    from pip._vendor.packaging.requirements import InvalidRequirement, Requirement
    from pip._vendor.packaging.specifiers import SpecifierSet
    from pip._vendor.packaging.utils import canonicalize_name, canonicalize_version, parse_wheel_filename

# ---------------------------------------------------------------------------
# Constants
# ---------------------------------------------------------------------------

#: Distributions preinstalled on Kaggle's Python image (2025): never shipped, and the dependency walk does not
#: descend into them. pydantic's own dependencies are listed for documentation (the walk never reaches them).
DEFAULT_KAGGLE_HAS: tuple[str, ...] = (
    "torch", "numpy", "pydantic", "pydantic-core", "annotated-types", "typing-extensions",
    "tqdm", "pyyaml", "safetensors",
)
#: A distribution's name as packaging's core metadata spells it (PEP 508).
DISTRIBUTION_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
#: Kaggle's image: CPython 3.11 (2025) or 3.12 (2026) on Ubuntu 22.04 (glibc 2.35), x86_64. The wheels dataset
#: serves both by default; pip picks the wheels of the interpreter it runs under. pip matches --platform tags
#: exactly (only manylinux2014/2010 expand to their older aliases), so every glibc level up to 2.35 is listed.
DEFAULT_PYTHON_VERSION = "3.11"
DEFAULT_PYTHON_VERSIONS: tuple[str, ...] = ("3.11", "3.12")
#: The interpreters trm_kaggle runs on (requires-python >= 3.10) that torch publishes wheels for.
SUPPORTED_PYTHON_VERSIONS: tuple[str, ...] = ("3.10", "3.11", "3.12", "3.13")
DEFAULT_PLATFORMS: tuple[str, ...] = (
    "manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_5_x86_64", "manylinux_2_12_x86_64",
    "manylinux_2_24_x86_64", "manylinux_2_27_x86_64", "manylinux_2_28_x86_64", "manylinux_2_31_x86_64",
    "manylinux_2_34_x86_64", "manylinux_2_35_x86_64",
)


# ---------------------------------------------------------------------------
# Wheels
# ---------------------------------------------------------------------------


def check_python_version(version: str) -> str:
    """`version` ("3.12") when the wheels dataset can serve it; TRMError naming the ones it can."""
    if not isinstance(version, str) or version.strip() not in SUPPORTED_PYTHON_VERSIONS:
        raise TRMError(f"--python-version {version!r}: the wheels can target CPython "
                       f"{', '.join(SUPPORTED_PYTHON_VERSIONS)} (trm_kaggle needs Python >= 3.10)")
    return version.strip()


#: a wheel's platform tag (PEP 425): lower-case letters, digits and underscores, e.g. manylinux_2_17_x86_64
_PLATFORM_TAG = re.compile(r"[a-z0-9_]{1,100}")


def check_platform_tags(tags: list[str] | None) -> tuple[str, ...]:
    """The distinct `--platform` tags in order (Kaggle's by default); TRMError for one that is no wheel tag."""
    if not tags:
        return DEFAULT_PLATFORMS
    for tag in tags:
        if not isinstance(tag, str) or not _PLATFORM_TAG.fullmatch(tag):
            raise TRMError(f"--platform {tag!r}: a wheel platform tag is lower-case letters, digits and underscores "
                           f"(e.g. {DEFAULT_PLATFORMS[0]})")
    return tuple(dict.fromkeys(tags))


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
        try:  # a hand-made wheel's line ("bad req ((", a byte that is not UTF-8) was packaging's traceback
            req = Requirement(str(line))
        except (InvalidRequirement, TypeError, ValueError):
            raise TRMError(f"{path}: its METADATA's Requires-Dist {clipped(str(line), 60)} is no requirement pip "
                           "reads (a damaged or hand-made wheel?)") from None
        if req.marker is None or any(req.marker.evaluate({**env, "extra": e}) for e in ["", *extras]):
            out.append(req)
    return out


def wheel_name_version(path: Path) -> tuple[str, str]:
    """(project name, version) read from a wheel's file name, or one TRMError for a name no wheel has."""
    try:
        name, version, _, _ = parse_wheel_filename(Path(path).name)
    except ValueError as e:  # packaging's InvalidWheelFilename or InvalidVersion
        raise TRMError(f"{path}: not a wheel's file name (NAME-VERSION-TAGS.whl): {e}") from None
    return str(name), str(version)


def check_wheel_identity(path: Path) -> None:
    """One TRMError when the distribution and version a wheel's file name gives are not its METADATA's: pip
    installs by the METADATA's, so `mism-1.0-*.whl` holding `other` 2.0 was shipped and the kernel's offline
    `pip install ... mism` found no distribution of that name on Kaggle."""
    name, version = wheel_name_version(path)
    meta = wheel_metadata(path)
    said_name, said_version = str(meta.get("Name") or ""), str(meta.get("Version") or "")
    if (canonicalize_name(said_name) != canonicalize_name(name)
            or canonicalize_version(said_version) != canonicalize_version(version)):
        raise TRMError(f"--extra-wheel {path}: its file name says {name} {version} but its METADATA says "
                       f"{clipped(said_name, 60)} {clipped(said_version, 40)} (a renamed or foreign wheel; pip "
                       "installs it by its METADATA's name)")


def copy_project_sources(repo: Path, dest: Path) -> Path:
    """The files a wheel build of `repo` needs, copied to `dest` (so building never writes into the repo)."""
    repo = Path(repo)
    if not (repo / "pyproject.toml").is_file():
        raise TRMError(f"{repo}: no pyproject.toml (pass the repository root)")
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("pyproject.toml", "setup.py", "setup.cfg", "MANIFEST.in", "README.md", "LICENSE", "LICENSE.txt"):
        if (repo / name).is_file():
            shutil.copy2(repo / name, dest / name)
    try:
        shutil.copytree(repo / "trm_kaggle", dest / "trm_kaggle",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.partial-*"))
    except shutil.Error as e:  # its message is the list of every file that failed, as Python tuples
        failed = e.args[0] if e.args and isinstance(e.args[0], list) else []
        cause = _system_error(" ".join(str(why) for *_, why in failed), dest) if failed else None
        raise TRMError(f"building the trm_kaggle wheel failed: {len(failed)} source files could not be copied to "
                       + (os_error_line(cause) if cause else f"{dest} ({str(e)[:200]})")) from None
    return dest


def _system_error(text: str, folder: Path) -> OSError | None:
    """The last system error a tool's text reports (`[Errno 27] File too large`), as an OSError of `folder`, or
    None: said in one line with what it needs (a file size limit says `ulimit -f`), not as the tool's output."""
    found = re.findall(r"\[Errno (\d+)\] ([^:\n'\"]+)", text)
    return OSError(int(found[-1][0]), found[-1][1].strip(), str(folder)) if found else None


#: The oldest setuptools that builds this project (pyproject.toml's build-system says the same).
SETUPTOOLS_MIN = (77, 0, 3)


def can_build_without_isolation() -> str | None:
    """Why `pip wheel --no-build-isolation` cannot work in this interpreter (None when it can): it needs the
    setuptools pyproject.toml's build-system asks for, 77.0.3 or newer (older ones reject `project.license` as
    an SPDX string; they also lack bdist_wheel before 70.1)."""
    import importlib.metadata as md

    try:
        version = md.version("setuptools")
    except md.PackageNotFoundError:
        return "setuptools is not installed"
    nums = tuple(int(x) for x in re.findall(r"\d+", version)[:3])
    if nums < SETUPTOOLS_MIN:
        return f"setuptools {version} is older than {'.'.join(map(str, SETUPTOOLS_MIN))}"
    return None


#: 1980-01-01 00:00 UTC, the zip format's first date: every entry of the trm_kaggle wheel carries it.
REPRODUCIBLE_EPOCH = 315532800


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
    with scratch_folder("trm_wheel_") as tmp:
        src = copy_project_sources(repo, Path(tmp) / "src")
        out = Path(tmp) / "dist"
        if builder == "builtin":
            built = build_pure_wheel(src, out)
        elif builder == "pip":
            cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index", "--no-build-isolation",
                   "--disable-pip-version-check", "-q", "-w", str(out), str(src)]
            # every entry dated as the built-in builder dates them (bdist_wheel reads SOURCE_DATE_EPOCH): a wheel
            # of the same sources is the same bytes, so a later push finds the wheels dataset unchanged (the
            # dist-info files, dated at the build, once made every push upload it again)
            env = {**os.environ, "SOURCE_DATE_EPOCH": str(REPRODUCIBLE_EPOCH), **_pip_temp(Path(tmp))}
            res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, encoding="utf-8", errors="replace",
                                 env=env)
            wheels = sorted(out.glob("*.whl"))
            if res.returncode != 0 or len(wheels) != 1:
                if cause := _system_error(res.stdout + res.stderr, Path(tmp)):  # a full disk, a size limit
                    raise TRMError(f"building the trm_kaggle wheel with pip failed: {os_error_line(cause)}")
                raise TRMError(f"building the trm_kaggle wheel failed ({' '.join(cmd)}):\n"
                               f"{tail_lines(res.stdout + res.stderr)}")
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
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise TRMError(f"{path}: unreadable: {e}") from None


def _with_extra(req: str, extra: str) -> str:
    r = Requirement(req)
    # through packaging's Marker, as setuptools writes it (`a and extra == "x"`: no parentheses around one clause)
    r.marker = Marker(f'extra == "{extra}"' if r.marker is None else f'({r.marker}) and extra == "{extra}"')
    return str(r)


def wheel_core_metadata(project: dict, readme: str | None) -> str:
    """METADATA for a `[project]` table: core metadata 2.4 (where License-Expression is defined) for an SPDX
    `license` string, as setuptools writes it, else 2.1."""
    lic = project.get("license")
    version = "2.4" if isinstance(lic, str) else "2.1"
    lines = [f"Metadata-Version: {version}", f"Name: {project['name']}", f"Version: {project['version']}"]
    if project.get("description"):
        lines.append(f"Summary: {project['description']}")
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
    readme_path = src / readme_name if isinstance(readme_name, str) else None
    readme = readme_path.read_text(encoding="utf-8") if readme_path is not None and readme_path.is_file() else None
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
            info = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))  # REPRODUCIBLE_EPOCH
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return wheel


Downloader = Callable[[str, Target, Path], Path]


def _pip_temp(scratch: Path) -> dict[str, str]:
    """The environment that puts pip's temporary folders inside `scratch`, one of ours: a pip stopped by a signal
    (the build's SIGTERM reaches its process group) leaves its own behind, and they go with ours."""
    folder = scratch / "pip-tmp"
    folder.mkdir(exist_ok=True)
    return {name: str(folder) for name in ("TMPDIR", "TEMP", "TMP")}


def pip_download(spec: str, target: Target, dest: Path) -> Path:
    """Download the one wheel pip picks for requirement `spec` on `target` (no dependencies) into `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q",
           *target.pip_args(), "-d", str(dest), spec]
    with scratch_folder("trm_pip_") as scratch:
        res = subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8", errors="replace",
                             env={**os.environ, **_pip_temp(scratch)})
    wheels = sorted(dest.glob("*.whl"))
    if res.returncode != 0 or not wheels:
        # pip's warnings (an index location it skips, a cache it cannot write) would hide its error
        said = "\n".join(x for x in (res.stderr or res.stdout).splitlines() if not x.startswith("WARNING: "))
        raise TRMError(f"no wheel of {spec!r} for CPython {target.python_version} {target.platforms[0]}: "
                       f"{tail_lines(said, 6)}\n(give a prebuilt one with --extra-wheel, or mark "
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
    """The offline install in a kernel's shell, whichever mount layout Kaggle uses: the wheels dataset is found by
    its slug (`<root>/<slug>/` in 2025's layout, `<root>/datasets/<owner>/<slug>/` in 2026's). `--no-deps` with
    every shipped distribution named: what the image has is never re-resolved (one unmet requirement of the
    image's own packages would fail the whole install)."""
    return (f'pip install --no-index --no-deps --find-links "$(find {root} -maxdepth 3 -type d -name {slug} -print '
            f'-quit)" {" ".join(names)}')


def build_wheels(out_dir: str | os.PathLike, *, ids: BundleIds, repo: Path = REPO_ROOT,
                 extra_wheels: Sequence[str | os.PathLike] = (), kaggle_has: Iterable[str] = DEFAULT_KAGGLE_HAS,
                 download: bool = True, target: Target | None = None, downloader: Downloader = pip_download,
                 builder: str = "auto", log: Callable[[str], None] = print,
                 targets: Sequence[Target] | None = None, host: str = "Kaggle") -> dict:
    """The wheels dataset in `out_dir` (replaced atomically), with the dependency wheels of every target
    interpreter (`targets`, or the one `target`; default CPython 3.11 and 3.12). Returns a report (also in
    manifest.json)."""
    targets = tuple(targets) if targets else (target,) if target else tuple(
        Target(python_version=v) for v in DEFAULT_PYTHON_VERSIONS)
    for name in kaggle_has:  # a name pip could never match ('', '../x', an escape) was recorded as one
        if not isinstance(name, str) or not DISTRIBUTION_NAME.fullmatch(name):
            raise TRMError(f"--kaggle-has {clipped(name, 60)}: not a distribution name (letters, digits, '.', '_' "
                           "and '-', a letter or digit at each end)")
    kaggle_has = sorted({canonicalize_name(n) for n in kaggle_has})
    extras = [Path(p) for p in extra_wheels]
    for p in extras:
        if not is_regular(p, "--extra-wheel") or p.suffix != ".whl":  # a FIFO is named as one, not "not a .whl"
            what = ("no such file" if not os.path.lexists(p) else "a folder, not a .whl file" if p.is_dir()
                    else "not a .whl file")
            raise TRMError(f"--extra-wheel {p}: {what}")
    extra_names = [canonicalize_name(wheel_name_version(p)[0]) for p in extras]
    if "trm-kaggle" in extra_names:  # one of the two would replace the other in the dataset, unsaid
        raise TRMError(f"--extra-wheel {extras[extra_names.index('trm-kaggle')]}: a trm_kaggle wheel; the bundle "
                       "builds its own from this checkout (leave it out)")
    for i, name in enumerate(extra_names):  # the second of one file name replaced the first in the dataset, unsaid
        if name in extra_names[:i]:
            raise TRMError(f"--extra-wheel {extras[extra_names.index(name)]} and {extras[i]}: two wheels of the "
                           f"distribution {name!r}; pip installs one of a name, so give one")
    for p in extras:  # their names and requirements read before anything is built
        check_wheel_identity(p)
        wheel_requirements(p, targets[0].marker_environment())
    with atomic_directory(out_dir, kind="kaggle wheels dataset") as tmp:
        log(f"building the trm_kaggle wheel from {repo}")
        own = build_project_wheel(tmp, repo, builder=builder, log=log)

        def roots_for(t: Target) -> list[Requirement]:
            roots = wheel_requirements(own, t.marker_environment())
            for p in extras:  # an extra wheel's own dependencies must be there too
                roots += wheel_requirements(p, t.marker_environment())
            return roots

        roots = [r for t in targets for r in roots_for(t)]
        shipped: dict[str, list[str]] = {}
        missing: list[str] = []
        preinstalled: list[str] = sorted({canonicalize_name(r.name) for r in roots} & set(kaggle_has))
        if download:
            found: set[str] = set()
            with scratch_folder("trm_dl_") as dl:
                for i, t in enumerate(targets):  # a pure wheel serves every target; a cp3XY one its own
                    log(f"resolving runtime dependencies for CPython {t.python_version} (preinstalled on {host}: "
                        f"{', '.join(kaggle_has) or 'none'})")
                    res = resolve_dependencies(roots_for(t), target=t, kaggle_has=kaggle_has,
                                               workdir=Path(dl) / f"py{t.python_version}", downloader=downloader,
                                               provided=extra_names)
                    for name, path in sorted(res.wheels.items()):
                        if path.name not in shipped.get(name, []):
                            shutil.copy2(path, tmp / path.name)
                            shipped.setdefault(name, []).append(path.name)
                    found |= res.preinstalled
                preinstalled = sorted(found)
        else:
            missing = sorted({canonicalize_name(r.name) for r in roots} - set(kaggle_has) - set(extra_names))
            if missing:
                log(f"warning: --no-download: not shipping {', '.join(missing)} (not preinstalled on {host}); "
                    f"the offline install will fail without them")
        for p, name in zip(extras, extra_names):
            shutil.copy2(p, tmp / p.name)
            shipped[name] = [p.name]
        names = ["trm_kaggle", *sorted(set(shipped) - set(extra_names)), *extra_names]  # --no-deps: each named
        line = install_line(ids.wheels_slug, names)
        atomic_write_text(tmp / "install.sh", (
            "#!/bin/sh\n"
            f"# Offline install of trm_kaggle from the Kaggle dataset {ids.wheels_id}: the wheels lie beside this\n"
            f"# script, wherever Kaggle mounts the dataset (/kaggle/input/{ids.wheels_slug} in 2025's layout,\n"
            f"# /kaggle/input/datasets/{ids.user}/{ids.wheels_slug} in 2026's); pass another directory as $1.\n"
            "set -e\n"
            'WHEELS="${1:-$(dirname "$0")}"\n'
            f'pip install --no-index --no-deps --find-links "$WHEELS" {" ".join(names)}\n'))
        atomic_write_json(tmp / DATASET_META, dataset_metadata(ids.wheels_id), indent=2)
        report = {"id": ids.wheels_id, "install": line, "trm_kaggle_wheel": own.name, "shipped": shipped,
                  "assumed_preinstalled": preinstalled, "kaggle_has": kaggle_has, "downloaded": download,
                  "not_shipped": missing,
                  "targets": [{"python_version": t.python_version, "implementation": t.implementation,
                               "platforms": list(t.platforms)} for t in targets]}
        manifest = write_manifest(tmp, report)
    report["total_bytes"] = sum(f["size"] for n, f in manifest["files"].items() if n.endswith(".whl"))
    return report
