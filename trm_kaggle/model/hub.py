"""Upstream checkpoints on the Hugging Face Hub: `trm-kaggle import-upstream hf://owner/repo[@revision][/path]`.

A source names a repository, optionally a revision (branch, tag or commit) after `@`, and optionally a path
inside the repository: the folder that holds upstream's `step_<N>` files and their `all_config.yaml` (the newest
step is taken, and named as the source; a newest step that is no readable file is refused, never passed over for
an older one), or one `step_<N>` file. `huggingface_hub` (optional: `pip install "trm_kaggle[hub]"`) downloads
`all_config.yaml` and the step file(s) of that folder, nothing else, into the user's Hugging Face cache
(`HF_HUB_CACHE`, by default ~/.cache/huggingface/hub); the import then reads them from there like a local
checkpoint. Naming the step file fetches that one file alone: an ARC checkpoint with its full puzzle-embedding
table is gigabytes.

Which argument means the Hub: one that starts with `hf://` always; a plain `owner/repo[@revision][/path]` only
when no local file or directory of that name exists (a local path always wins).

Offline (`HF_HUB_OFFLINE=1`, or no network) a source is found only if an earlier download left it in the
cache; otherwise the error says where to put the files instead.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, replace
from pathlib import Path

from trm_kaggle.errors import TRMError
from trm_kaggle.jsonio import is_regular, not_regular
from trm_kaggle.wording import one_line

HF_PREFIX = "hf://"
CONFIG_NAME = "all_config.yaml"
_SOURCE = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<revision>[^/@]+))?(?:/(?P<path>.*))?$",
                     re.ASCII)  # repository names are ASCII: \w alone takes any script's letters
_STEP = re.compile(r"^step_([0-9]+)\Z")
_COMMIT = re.compile(r"^[0-9a-f]{40,64}\Z")  # a git commit id (sha1, or sha256), the name of its snapshot folder
_INSTALL = ('pip install "trm_kaggle[hub]" (or huggingface_hub), or download step_<N> and all_config.yaml '
            "into one directory and pass the local step_<N> path")


@dataclass(frozen=True)
class HubSource:
    repo_id: str
    revision: str | None  # None: the default branch
    path: str  # inside the repository, "" = its root

    def __str__(self) -> str:
        return HF_PREFIX + self.repo_id + (f"@{self.revision}" if self.revision else "") + \
            (f"/{self.path}" if self.path else "")

    @property
    def step_file(self) -> bool:
        """True when the path names one step_<N> file rather than a folder."""
        return bool(self.path) and _STEP.match(self.path.rsplit("/", 1)[-1]) is not None

    @property
    def folder(self) -> str:
        """The folder that holds the step file(s) and all_config.yaml."""
        if not self.step_file:
            return self.path
        return self.path.rsplit("/", 1)[0] if "/" in self.path else ""

    def allow_patterns(self) -> list[str]:
        """What to download: the step file (or every step file of the folder) and the folder's all_config.yaml."""
        prefix = f"{self.folder}/" if self.folder else ""
        return [self.path if self.step_file else f"{prefix}step_*", f"{prefix}{CONFIG_NAME}"]


def parse_hub_source(text: str | os.PathLike) -> HubSource | None:
    """The Hub source `text` names, or None when it is a local path (rule in the module docstring)."""
    text = os.fspath(text)
    explicit = text.startswith(HF_PREFIX)
    if not explicit and Path(text).exists():
        return None
    m = _SOURCE.match(text[len(HF_PREFIX):] if explicit else text)
    if m is None:
        if explicit:
            raise TRMError(f"{text}: not a Hugging Face source; expected hf://owner/repo[@revision][/path]")
        return None
    parts = [p for p in (m["path"] or "").split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise TRMError(f"{text}: the path inside the repository may not contain '.' or '..'")
    return HubSource(m["repo"], m["revision"], "/".join(parts))


def download_checkpoint(source: HubSource, cache_dir: str | os.PathLike | None = None) -> Path:
    """The local path of the step file `source` names, downloaded into the Hugging Face cache (or found there).

    With a folder, the newest step_<N> in it. Raises TRMError with one line saying what to install, or where to
    place the files, when it cannot."""
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import (HFValidationError, LocalEntryNotFoundError, RepositoryNotFoundError,
                                            RevisionNotFoundError)
    except ImportError:
        raise TRMError(f"{source}: reading checkpoints from the Hugging Face Hub needs huggingface_hub: "
                       f"{_INSTALL}") from None
    try:
        root = Path(snapshot_download(source.repo_id, revision=source.revision, cache_dir=cache_dir,
                                      allow_patterns=source.allow_patterns()))
    except LocalEntryNotFoundError:
        if problem := _ref_problem(source, cache_dir):  # a ref reading '../..' led nowhere: said as the edit it is
            raise TRMError(problem) from None
        raise TRMError(f"{source}: not in the Hugging Face cache{_offline_note()} and the Hub cannot be reached: "
                       f"run once with network access, or download step_<N> and {CONFIG_NAME} into one directory "
                       "and pass the local step_<N> path") from None
    except RevisionNotFoundError:
        raise TRMError(f"{source}: the repository has no revision {source.revision!r}") from None
    except RepositoryNotFoundError:
        raise TRMError(f"{source}: no such model repository on the Hugging Face Hub (or it is private or gated: "
                       "log in with `hf auth login`)") from None
    except (HFValidationError, OSError, ValueError) as e:
        detail = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise TRMError(f"{source}: download failed: {detail}") from None
    _check_snapshot(root, source, cache_dir)
    return _checkpoint_in(root, source)


def _check_snapshot(root: Path, source: HubSource, cache_dir: str | os.PathLike | None) -> None:
    """Refuse a snapshot folder that is not one commit's folder inside the cache's `snapshots/`. Offline,
    huggingface_hub joins the text of the ref file (`refs/main`) to `snapshots/` unchecked, so a ref reading
    `../../../elsewhere` imported a folder outside the cache and recorded `..` as the commit."""
    inside = (root.parent.name == "snapshots" and ".." not in root.parts and _COMMIT.match(root.name) is not None
              and os.path.dirname(os.path.realpath(root)) == os.path.realpath(root.parent))
    if inside:
        return
    raise TRMError(_ref_problem(source, cache_dir, root))  # with where it leads, always a line


def _ref_problem(source: HubSource, cache_dir: str | os.PathLike | None, leads_to: Path | None = None) -> str | None:
    """The line for a ref file of the cache (`refs/main`) that holds no commit id, as after an edit, or None (no
    such ref: `source.revision` is a commit, or nothing is cached). With `leads_to`, the snapshot folder the ref
    led to that is no commit's folder: always the line."""
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name

    repo = Path(cache_dir or constants.HF_HUB_CACHE) / repo_folder_name(repo_id=source.repo_id, repo_type="model")
    ref = repo / "refs" / (source.revision or "main")
    try:
        text = ref.read_text(encoding="utf-8", errors="replace")[:200].strip() if ref.is_file() else None
    except OSError:
        text = None
    if leads_to is None and (text is None or _COMMIT.match(text)):
        return None
    what = (f"leads to {leads_to}, not to a commit's folder in {repo / 'snapshots'} (a ref holds a commit id"
            if leads_to is not None else f"reads {text!r}, not a commit id (a ref holds one")
    return one_line(f"{source}: the Hugging Face cache's ref {ref} {what}: hexadecimal, no '/' or '..'); the cache "
                    "was edited: remove the ref, or the repository's folder in the cache, and download again")


def _offline_note() -> str:
    try:
        from huggingface_hub import constants

        cache = f" ({constants.HF_HUB_CACHE})"
        return cache + (", offline mode is on (HF_HUB_OFFLINE=1)" if constants.HF_HUB_OFFLINE else "")
    except ImportError:  # pragma: no cover - only called after a successful import
        return ""


def _checkpoint_in(root: Path, source: HubSource) -> Path:
    """The step file inside the downloaded snapshot `root`, with its all_config.yaml beside it."""
    folder = root.joinpath(*source.folder.split("/")) if source.folder else root
    where = f"{source} (cached in {folder})"
    # the commit folder's rule for the folders inside it: a link leading out of the snapshot is an edited cache
    real, real_root = os.path.realpath(folder), os.path.realpath(root)
    if os.path.commonpath([real, real_root]) != real_root:
        raise TRMError(one_line(f"{where}: this folder of the snapshot is a link leading to {real}, outside the "
                                f"snapshot {real_root}; the cache was edited: remove the repository's folder in the "
                                "cache, and download again"))
    if source.step_file:
        path = root.joinpath(*source.path.split("/"))
        if not is_regular(path, "checkpoint"):
            raise TRMError(f"{where}: the snapshot has no {source.path} (a typo, or not downloaded yet while offline)")
    else:  # every step_<N> entry, whatever it is: the newest one unreadable is refused, not passed over
        steps = sorted((int(m.group(1)), p) for p in folder.glob("step_*") if (m := _STEP.match(p.name)))
        if not steps:
            raise TRMError(f"{where}: no step_<N> checkpoint in this folder of the repository; name the folder that "
                           "holds them, e.g. hf://owner/repo/path/to/run")
        path = steps[-1][1]
        if kind := _not_a_step_file(path):
            older = next((p.name for _, p in reversed(steps[:-1]) if _not_a_step_file(p) is None), "step_<N>")
            raise TRMError(one_line(f"{where}: its newest step, {path.name}, is {kind}; an older step is not taken "
                                    f"in its place without a word: name the step to import, e.g. "
                                    f"{replace(source, path='/'.join(filter(None, (source.folder, older))))}"))
    if not is_regular(path.parent / CONFIG_NAME, CONFIG_NAME):
        raise TRMError(f"{where}: no {CONFIG_NAME} beside {path.name}; upstream writes it with its checkpoints")
    # a snapshot's files are links to the repository's blobs/: one leading out of the repository's folder in the
    # cache is bytes from elsewhere, which the export would record as this commit's
    repo = os.path.realpath(root.parent.parent)
    for entry in (path, path.parent / CONFIG_NAME):
        real = os.path.realpath(entry)
        if os.path.commonpath([real, repo]) != repo:
            raise TRMError(one_line(f"{where}: {entry.name} is a link leading to {real}, outside the repository's "
                                    f"folder in the cache {repo}; the cache was edited: remove the repository's "
                                    "folder in the cache, and download again"))
    return path


def _not_a_step_file(path: Path) -> str | None:
    """What the snapshot's entry `path` is when it is not a regular file (through its link), or None."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return ("a link to a missing file (not downloaded completely, or its blob was removed from the cache)"
                if os.path.islink(path) else "gone")
    except OSError as e:
        return f"unreadable ({e.strerror or type(e).__name__})"
    return "a folder" if stat.S_ISDIR(mode) else not_regular(mode)


def snapshot_commit(path: Path) -> str | None:
    """The commit of the cached snapshot a downloaded file lies in (`.../snapshots/<commit>/...`), if any."""
    parts = Path(path).parts
    return parts[parts.index("snapshots") + 1] if "snapshots" in parts[:-1] else None


def resolve_checkpoint(checkpoint: str | os.PathLike) -> tuple[Path, HubSource | None]:
    """(local path of the checkpoint, the Hub source it came from or None) for a path or a Hub source. A Hub
    folder's source comes back naming the step file taken in it (hf://owner/repo/run/step_12)."""
    source = parse_hub_source(checkpoint)
    if source is None:
        return Path(checkpoint), None
    try:
        path = download_checkpoint(source)
    except TRMError as e:
        if os.fspath(checkpoint).startswith(HF_PREFIX):
            raise
        raise TRMError(f"{os.fspath(checkpoint)}: no such local file; read as a Hugging Face source: {e}") from None
    # a folder stands for its newest step: the source recorded names the step file imported
    return path, source if source.step_file else replace(source, path="/".join(filter(None, (source.path, path.name))))
