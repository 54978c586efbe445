"""Ids, file names and metadata of the Kaggle bundle: slugs and `BundleIds`, the dataset-metadata.json and
kernel-metadata.json dicts and their validation (`validate_bundle`), manifest.json.

The bottom layer of the bundle modules (wheels, weights_dataset, kernel, push, sandbox, bundle): it imports
none of them.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from trm_kaggle import __version__
from trm_kaggle.atomic import OWNER_RECORD, atomic_write_json
from trm_kaggle.errors import TRMError
from trm_kaggle.jsonio import read_json
from trm_kaggle.wording import clipped

# ---------------------------------------------------------------------------
# Constants
# ---------------------------------------------------------------------------

#: The current ARC-AGI-2 competition, the kernel's default source (`build_bundle.py --competition` for another).
#: Its slug is the one public kernels of ARC Prize 2026's ARC-AGI-2 track name in their metadata;
#: ARC Prize 2025 was "arc-prize-2025". The kernel finds the challenges file whatever the folder is called.
COMPETITION = "arc-prize-2026-arc-agi-2"
DEFAULT_USER = "your-kaggle-user"
DEFAULT_PREFIX = "trm-kaggle"
LICENSE = "apache-2.0"

DATASET_META = "dataset-metadata.json"
KERNEL_META = "kernel-metadata.json"
WHEEL_KERNEL_DIR = "adam-atan2-kernel"  # the bundle's optional second kernel (`build_bundle.py --wheel-kernel`)
MANIFEST = "manifest.json"
MODEL_CARD = "MODEL_CARD.md"

#: Kaggle's accelerators (`machine_shape` in kernel-metadata.json, `kaggle kernels push --accelerator`) as offered
#: in 2026. ARC Prize 2026's ARC-AGI-2 kernels run on NvidiaL4 (four L4s); some shapes are offered only inside
#: particular competitions.
MACHINE_SHAPES: dict[str, str] = {
    "NvidiaL4": "L4 x 4", "NvidiaL4X1": "one L4", "NvidiaTeslaT4": "T4 x 2", "NvidiaTeslaT4Highmem": "T4 x 2, more RAM",
    "NvidiaTeslaA100": "A100", "NvidiaH100": "H100", "NvidiaRtxPro6000": "RTX Pro 6000", "TpuV5E8": "TPU v5e-8",
    "TpuV6E8": "TPU v6e-8",
}
#: Retired shapes and what replaces each: the CLI only warns about them and the session gets Kaggle's default.
RETIRED_SHAPES: dict[str, str] = {"NvidiaTeslaP100": "NvidiaTeslaT4", "TpuV38": "TpuV5E8", "Tpu1VmV38": "TpuV5E8"}
DEFAULT_MACHINE_SHAPE = "NvidiaL4"

_SLUG_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\Z")  # \Z: `$` also matches before a final newline
_USER_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*\Z")


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
        return f"{clipped(slug)} must have 6 to 50 characters (has {len(slug)})"
    if not _SLUG_RE.match(slug):
        return f"{clipped(slug)} may hold only lowercase letters, digits and hyphens (not at either end)"
    if "--" in slug:  # `--slug-prefix abc-`: the title 'abc--submission' gives the slug 'abc-submission' on Kaggle,
        # and the check of the written metadata refused it only after the whole build had replaced the old bundle
        return f"{clipped(slug)} holds two hyphens in a row (Kaggle's slug of its title would have one)"
    return None


def id_problem(ident: Any) -> str | None:
    """Why `ident` is not "<user>/<slug>", or None. The id is quoted escaped and clipped: one short line whatever
    it holds (a newline, an escape sequence, megabytes)."""
    if not isinstance(ident, str) or ident.count("/") != 1:
        return f"{clipped(ident)} must look like '<user>/<slug>'"
    user, slug = ident.split("/")
    if not _USER_RE.match(user):
        return f"{clipped(ident)}: user {clipped(user)} is not a Kaggle user name"
    problem = slug_problem(slug)
    return f"{clipped(ident)}: slug {problem}" if problem else None


@dataclass(frozen=True)
class BundleIds:
    """`<user>/<prefix>-wheels`, `<user>/<prefix>-weights`, `<user>/<prefix>-submission`."""

    user: str = DEFAULT_USER
    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        """A user and a prefix checked as --user and --slug-prefix are: strings (`user=None` made the ids
        `None/<prefix>-wheels`, a number was taken as a prefix), forming a valid wheels dataset id, which every
        build makes (the ids only some builds make are checked by those, `check`)."""
        for name, value, what in (("user", self.user, "a Kaggle user name"),
                                  ("prefix", self.prefix, f"the slugs' prefix, e.g. {DEFAULT_PREFIX!r}")):
            if not isinstance(value, str):
                raise TRMError(f"BundleIds {name}={clipped(value)}: must be a string ({what})")
        if problem := id_problem(self.wheels_id):
            raise TRMError(f"--user/--slug-prefix give an invalid Kaggle id: {problem}")  # as the command says it

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

    @property
    def wheel_kernel_slug(self) -> str:
        return f"{self.prefix}-adam-atan2-wheel"

    @property
    def wheel_kernel_id(self) -> str:
        return f"{self.user}/{self.wheel_kernel_slug}"

    def check(self, *idents: str) -> "BundleIds":
        """Refuse `idents` (default: the submission bundle's wheels, weights and kernel ids) if one is no valid
        Kaggle id. Only the ids a build makes are checked: a long prefix that fits them is not refused for a
        kernel another build would make."""
        for ident in idents or (self.wheels_id, self.weights_id, self.kernel_id):
            problem = id_problem(ident)
            if problem:
                raise TRMError(f"--user/--slug-prefix give an invalid Kaggle id: {problem}")
        return self


def kaggle_config_dirs() -> list[Path]:
    """Where the `kaggle` client looks for kaggle.json and access_token: $KAGGLE_CONFIG_DIR, ~/.kaggle,
    $XDG_CONFIG_HOME/kaggle."""
    dirs = [os.environ.get("KAGGLE_CONFIG_DIR"), Path.home() / ".kaggle",
            Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "kaggle"]
    return [Path(d) for d in dirs if d]


def configured_user() -> tuple[str | None, str]:
    """The Kaggle user the credentials name without asking Kaggle, and where it was found: $KAGGLE_USERNAME, else
    the `username` of the client's kaggle.json. (None, why) when neither names one: an access token
    (KAGGLE_API_TOKEN, access_token) names its user only when the client asks Kaggle, which a push does."""
    from trm_kaggle.wording import clipped, one_line

    raw = os.environ.get("KAGGLE_USERNAME", "")
    env = raw.strip()
    if env and _USER_RE.match(env):
        return env, "$KAGGLE_USERNAME"
    # why none was found, each source said as it is: one set but unusable was "no $KAGGLE_USERNAME"
    why = [f"$KAGGLE_USERNAME {one_line(clipped(raw, 40))} is no Kaggle user name" if env else "no $KAGGLE_USERNAME"]
    for d in kaggle_config_dirs():
        path = d / "kaggle.json"
        if not os.path.lexists(path):
            continue
        try:  # through the one reader: a /proc file or a FIFO in its place is never read (it may never end)
            found = read_json(path, "kaggle.json")
        except TRMError as e:  # unreadable or not JSON: not a file that names the user, and said as such
            why.append(f"{one_line(e)}")
            continue
        user = found.get("username") if isinstance(found, dict) else None
        if isinstance(user, str) and _USER_RE.match(user):
            return user, str(path)
        why.append(f"{path}: " + (f"its username {one_line(clipped(user, 40))} is no Kaggle user name"
                                   if isinstance(user, str) and user else "no username in it"))
    if len(why) == 1:
        why.append("no kaggle.json with a username")
    return None, "; ".join(why)


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
    """`manifest.json`: sha256 and size of every other file in `directory` (recursively; the owner
    record `atomic_directory` adds afterwards is bookkeeping, not content). `directory` must be a folder already:
    a missing one would be made to hold a manifest of no files."""
    directory = Path(directory)
    if not directory.is_dir():
        state = "is not a folder" if os.path.lexists(directory) else "does not exist"
        raise TRMError(f"write_manifest: {directory} {state}; a manifest lists the files of a dataset folder "
                       f"already built: build the folder first")
    files = {}
    for p in sorted(directory.rglob("*")):
        if p.is_file() and p.name not in (MANIFEST, OWNER_RECORD):
            rel = p.relative_to(directory).as_posix()
            files[rel] = {"sha256": sha256_file(p), "size": p.stat().st_size}
    manifest = {"trm_kaggle_version": __version__, **(extra or {}), "files": files}
    atomic_write_json(directory / MANIFEST, manifest, indent=2)
    publishable_modes(directory)
    return manifest


def verify_manifest(directory: Path, required: Iterable[str] = ()) -> int:
    """Check a dataset folder against `manifest.json` before it is uploaded: every file it lists is there with
    its size and sha256, it lists each of `required` (names or patterns such as `trm_kaggle-*.whl`: what a part
    of its kind cannot do without), and the folder holds nothing else (an upload sends every file of the folder:
    one added after the build, or a link to a file outside it, would be published unchecked). Its subfolders
    are left to the caller (an upload leaves them out). TRMError naming the first file that is missing,
    differs, is not listed, or is a link or a special file. Returns the count."""
    directory = Path(directory)
    manifest = read_json(directory / MANIFEST, MANIFEST, hint="build the bundle first")
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or not files:
        raise TRMError(f"{directory / MANIFEST}: no 'files' to check")
    for want in required:  # an entry removed from the manifest would let that file go unchecked
        if not any(fnmatch.fnmatchcase(rel, want) for rel in files):
            raise TRMError(f"{directory / MANIFEST}: lists no {want}, which this dataset needs; rebuild the bundle")
    for rel, entry in files.items():
        path = directory / rel
        if Path(rel).is_absolute() or ".." in Path(rel).parts:  # a name read from a file: never a path outside
            raise TRMError(f"{directory / MANIFEST}: entry {rel!r} is not a path inside {directory}")
        if not isinstance(entry, dict) or not (path.is_symlink() or path.exists()):
            raise TRMError(f"{path}: listed in {MANIFEST} but missing; rebuild the bundle")
        _refuse_unplain(path)
        if path.stat().st_size != entry.get("size") or sha256_file(path) != entry.get("sha256"):
            raise TRMError(f"{path}: differs from {MANIFEST} (size {path.stat().st_size:,} bytes, manifest "
                           f"{entry.get('size')}); it changed after the build: rebuild the bundle")
    listed = {Path(rel).parts[0] for rel in files}
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        if entry.name in (MANIFEST, OWNER_RECORD) or entry.name in listed:
            continue
        if entry.is_dir(follow_symlinks=False):  # an upload leaves folders out (the caller refuses them)
            continue
        link = f" (a symbolic link to {os.readlink(entry.path)})" if entry.is_symlink() else ""
        raise TRMError(f"{Path(entry.path)}{link}: not listed in {directory / MANIFEST}, so it is not checked, yet an "
                       f"upload would publish it; remove it or rebuild the bundle")
    return len(files)


def _refuse_unplain(path: Path) -> None:
    """TRMError unless `path` is a regular file itself, not reached through a link: a link's bytes come from
    elsewhere (outside OUT_DIR), a FIFO or a device may never end."""
    mode = os.lstat(path).st_mode
    if stat.S_ISLNK(mode):
        raise TRMError(f"{path}: a symbolic link (to {os.readlink(path)}) in a dataset folder: an upload would publish "
                       f"the file it points to; rebuild the bundle")
    if not stat.S_ISREG(mode):
        raise TRMError(f"{path}: not a regular file (a folder, FIFO, device or socket) where {MANIFEST} lists a file; "
                       f"it is not read; rebuild the bundle")


def publishable_modes(directory: Path) -> None:
    """Files 0644 (scripts 0755) and directories 0755: temporary files are created 0600."""
    for p in [directory, *directory.rglob("*")]:
        if p.is_dir():
            p.chmod(0o755)
        elif p.is_file():
            p.chmod(0o755 if p.suffix == ".sh" else 0o644)


def dataset_metadata(ident: str, title: str | None = None) -> dict:
    """dataset-metadata.json's dict for the dataset `ident` ("<user>/<slug>"), checked as
    `validate_dataset_metadata` checks the file: an id without its '/' once raised IndexError."""
    if problem := id_problem(ident):  # before the title is taken from it
        raise_problems(DATASET_META, [("id", problem)])
    meta = {"title": title or ident.split("/", 1)[1], "id": ident, "licenses": [{"name": LICENSE}]}
    validate_dataset_metadata(meta)  # a title given
    return meta


def tail_lines(text: str, lines: int = 25) -> str:
    """The last `lines` lines of a command's output, for error messages."""
    return "\n".join(text.strip().splitlines()[-lines:])


def client_error(text: str) -> str:
    """A failed client's output for a one-line message: its first lines say the cause ("Authentication required
    ..."), its last ones what to do; the middle is left out."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    shown = lines if len(lines) <= 5 else [*lines[:2], "...", *lines[-2:]]
    return " / ".join(shown)


# ---------------------------------------------------------------------------
# Kernel metadata
# ---------------------------------------------------------------------------


def check_machine_shape(shape: Any) -> str:
    """`shape` when Kaggle offers it (its exact spelling returned for any letter case); TRMError naming the
    replacement of a retired shape, or the offered ones for an unknown name. Any kernel's metadata uses it."""
    if not isinstance(shape, str) or not shape.strip():
        raise TRMError(f"accelerator {shape!r}: give one of {', '.join(MACHINE_SHAPES)}")
    by_case = {k.lower(): k for k in (*MACHINE_SHAPES, *RETIRED_SHAPES)}
    name = by_case.get(shape.strip().lower())
    if name in RETIRED_SHAPES:
        raise TRMError(f"accelerator {name} is retired on Kaggle (a push asking for it runs on the default "
                       f"instead): use {RETIRED_SHAPES[name]}")
    if name is None:
        raise TRMError(f"accelerator {shape!r} is not one Kaggle offers: {', '.join(MACHINE_SHAPES)}")
    return name


def is_tpu(machine_shape: str | None) -> bool:
    return bool(machine_shape) and machine_shape.startswith("Tpu")


def notebook_kaggle_block(machine_shape: str | None, sources: Iterable[str] = ()) -> dict:
    """The `metadata.kaggle` block Kaggle's web UI writes into a notebook (the CLI reads kernel-metadata.json
    instead): the accelerator (first letter lower-cased, "none" on CPU), GPU on or off, internet off."""
    accelerator = machine_shape[0].lower() + machine_shape[1:] if machine_shape else "none"
    return {"accelerator": accelerator, "dataSources": [{"sourceType": "datasetVersion", "sourceId": s}
                                                        for s in sources],
            "isGpuEnabled": bool(machine_shape) and machine_shape.startswith("Nvidia"),
            "isInternetEnabled": False, "language": "python", "sourceType": "notebook"}


def machine_fields(machine_shape: str | None, docker_image: str | None = None) -> dict:
    """kernel-metadata.json's accelerator and image fields: `machine_shape` (checked) and `docker_image` with
    its pinning (`original`: the run uses exactly that image)."""
    fields: dict[str, Any] = {}
    if machine_shape:
        fields["machine_shape"] = check_machine_shape(machine_shape)
        if is_tpu(fields["machine_shape"]):  # a TPU machine has no GPU: ask for what it has
            fields.update(enable_gpu=False, enable_tpu=True)
    if docker_image:
        if not isinstance(docker_image, str) or any(c.isspace() for c in docker_image):
            raise TRMError(f"--docker-image {docker_image!r}: give an image name such as "
                           f"gcr.io/kaggle-gpu-images/python:<tag>")
        fields.update(docker_image=docker_image, docker_image_pinning_type="original")
    return fields


def kernel_metadata(ids: BundleIds, code_file: str, *, enable_gpu: bool = True,
                    competition: str = COMPETITION, machine_shape: str | None = None,
                    docker_image: str | None = None) -> dict:
    """The submission kernel's metadata: a notebook, internet off, the bundle's datasets and the competition;
    `machine_shape` (a GPU kernel only) asks for that accelerator instead of Kaggle's default."""
    return {"id": ids.kernel_id, "title": ids.kernel_slug, "code_file": code_file, "language": "python",
            "kernel_type": "notebook", "is_private": True, "enable_gpu": bool(enable_gpu), "enable_internet": False,
            "dataset_sources": [ids.wheels_id, ids.weights_id], "competition_sources": [competition],
            "kernel_sources": [], "model_sources": [],
            **machine_fields(machine_shape if enable_gpu else None, docker_image)}


def wheel_kernel_metadata(ids: BundleIds, code_file: str, *, machine_shape: str | None = None,
                          docker_image: str | None = None) -> dict:
    """The adam-atan2 wheel kernel's metadata: a script on a GPU (nvcc) with internet (pip downloads), on the
    submission kernel's accelerator and image so that the wheel matches them."""
    if is_tpu(machine_shape):
        raise TRMError(f"--wheel-kernel builds a CUDA extension, which needs a GPU: --accelerator {machine_shape} is "
                       f"a TPU machine")
    return {"id": ids.wheel_kernel_id, "title": ids.wheel_kernel_slug, "code_file": code_file, "language": "python",
            "kernel_type": "script", "is_private": True, "enable_gpu": True, "enable_internet": True,
            "dataset_sources": [], "competition_sources": [], "kernel_sources": [], "model_sources": [],
            **machine_fields(machine_shape, docker_image)}


# ---------------------------------------------------------------------------
# Validation
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


def raise_problems(path: str | os.PathLike, problems: list[tuple[str, str]]) -> None:
    """One error naming the file and every (field, problem) found in it; nothing when there are none."""
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
    raise_problems(path, dataset_metadata_problems(meta))


def kernel_metadata_problems(meta: Any, kernel_dir: Path | None, bundle_datasets: Iterable[str],
                              submission: bool = True) -> list:
    """Problems of a kernel's metadata: the submission kernel's (`submission`: internet off, a competition
    source) or the adam-atan2 wheel kernel's (a GPU script with internet, no sources)."""
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
    if submission and meta.get("enable_internet") is not False and "enable_internet" in meta:
        problems.append(("enable_internet", "must be false: ARC Prize submissions run without internet"))
    if not submission:
        for name, want, why in (("enable_gpu", True, "building adam-atan2 needs nvcc, on Kaggle's GPU images"),
                                ("enable_internet", True, "pip downloads adam-atan2's source"),
                                ("kernel_type", "script", "it runs as `python <code_file>`")):
            if name in meta and meta[name] != want:
                problems.append((name, f"must be {json.dumps(want)}: {why}"))
    if "machine_shape" in meta:
        try:
            spelled = check_machine_shape(meta["machine_shape"])
            if spelled != meta["machine_shape"]:  # a file is pushed as it is: Kaggle reads its own spelling only
                problems.append(("machine_shape", f"{meta['machine_shape']!r} must be written {spelled!r}"))
        except TRMError as e:
            problems.append(("machine_shape", str(e)))
    code = meta.get("code_file")
    if isinstance(code, str) and code and Path(code).name != code:  # a name read from a file: never a path
        problems.append(("code_file", f"{code!r} must be a file name in the kernel folder, not a path"))
    elif isinstance(code, str) and code and kernel_dir is not None and not (Path(kernel_dir) / code).is_file():
        problems.append(("code_file", f"{code!r} does not exist in {kernel_dir}"))
    known = set(bundle_datasets)
    for src in meta.get("dataset_sources") or []:
        if src not in known:
            problems.append(("dataset_sources", f"{src!r} is not a dataset of this bundle "
                                                f"({', '.join(sorted(known)) or 'none'})"))
    comp = meta.get("competition_sources")
    if submission and isinstance(comp, list):
        if not comp:
            problems.append(("competition_sources", f"must name the competition (e.g. {COMPETITION!r})"))
        for slug in comp:
            if (p := slug_problem(slug)):
                problems.append(("competition_sources", f"competition slug {p}"))
    return problems


def validate_kernel_metadata(meta: Any, kernel_dir: Path | None, bundle_datasets: Iterable[str],
                             path: str | os.PathLike = KERNEL_META, submission: bool = True) -> None:
    raise_problems(path, kernel_metadata_problems(meta, kernel_dir, bundle_datasets, submission))


def _load_meta(path: Path) -> Any:
    return read_json(path, "metadata file", hint="build the bundle first")


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
    wheel_path = out / WHEEL_KERNEL_DIR / KERNEL_META
    wheel_meta = _load_meta(wheel_path) if wheel_path.parent.is_dir() else None
    if wheel_meta is not None:
        problems += [f"{wheel_path}: field '{f}': {m}" for f, m in
                     kernel_metadata_problems(wheel_meta, wheel_path.parent, [], submission=False)]
    if problems:
        raise TRMError(problems[0] if len(problems) == 1 else
                       f"{len(problems)} metadata problems:\n  " + "\n  ".join(problems))
    ids["kernel"] = meta["id"]
    if wheel_meta is not None:
        ids["wheel_kernel"] = wheel_meta["id"]
    return ids


# ---------------------------------------------------------------------------
# The training kernel and the data dataset (build_bundle.py --train-kernel, --dataset)
# ---------------------------------------------------------------------------

TRAIN_KERNEL_DIR = "train-kernel"
DATA_DIR = "data"
RUN_STATE_DIR = "run-state"  # --continue-from: a kernel's output as a dataset
#: The training kernel's accelerator: T4 x 2, the GPUs every Kaggle user gets (float16 there, see model/dtype.py).
TRAIN_MACHINE_SHAPE = "NvidiaTeslaT4"


def data_id(ids: BundleIds) -> str:
    """`<user>/<prefix>-data`: the training data as a Kaggle dataset."""
    return f"{ids.user}/{ids.prefix}-data"


def run_state_id(ids: BundleIds) -> str:
    """`<user>/<prefix>-run-state`: a training kernel's output, downloaded and published as a dataset."""
    return f"{ids.user}/{ids.prefix}-run-state"


def train_kernel_id(ids: BundleIds) -> str:
    """`<user>/<prefix>-train`: the training kernel."""
    return f"{ids.user}/{ids.prefix}-train"


def train_kernel_metadata(ids: BundleIds, code_file: str, *, machine_shape: str = TRAIN_MACHINE_SHAPE,
                          previous: str | None = None, run_state: bool = False) -> dict:
    """The training kernel's metadata: a notebook on a GPU, internet off (everything comes from the datasets),
    the wheels and data datasets, and as `kernel_sources` the output of `previous` (default: the kernel itself,
    so each new version starts from the last version's output; "" for none: the first push of a new kernel,
    which cannot name itself before it exists). With `run_state` the previous output comes as the run-state
    dataset instead (`build_bundle.py --continue-from`), and no kernel is attached."""
    kid = train_kernel_id(ids)
    datasets = [ids.wheels_id, data_id(ids)] + ([run_state_id(ids)] if run_state else [])
    previous = "" if run_state else previous
    return {"id": kid, "title": kid.split("/", 1)[1], "code_file": code_file, "language": "python",
            "kernel_type": "notebook", "is_private": True, "enable_gpu": True, "enable_internet": False,
            **machine_fields(machine_shape), "dataset_sources": datasets,
            "competition_sources": [], "kernel_sources": [] if previous == "" else [previous or kid],
            "model_sources": []}


def train_kernel_metadata_problems(meta: Any, kernel_dir: Path | None, datasets: Iterable[str]) -> list:
    """The common kernel checks, then the training kernel's own: a GPU, a machine shape, a previous output."""
    problems = [p for p in kernel_metadata_problems(meta, kernel_dir, datasets, submission=False)
                if p[0] not in ("enable_internet", "kernel_type")]
    if problems and problems[0][0] == "(file)":
        return problems
    if meta.get("kernel_type") != "notebook":
        problems.append(("kernel_type", "must be 'notebook': the training kernel is a notebook"))
    if not isinstance(meta.get("machine_shape"), str) or not meta.get("machine_shape"):
        problems.append(("machine_shape", f"must name the accelerator, e.g. {TRAIN_MACHINE_SHAPE!r}"))
    sources = meta.get("kernel_sources")
    if not isinstance(sources, list) or len(sources) > 1 or any(id_problem(s) for s in sources):
        problems.append(("kernel_sources", "must list the one kernel whose output the session resumes from "
                                           "(or none, for the first session)"))
    return problems
