"""Publishing a built bundle: validate it, then through the `kaggle` package's Python API create each dataset
the first time (version it afterwards), wait until both are ready, and push the kernel: `push`.

Kaggle's CLI exits 0 on many refusals that its server only reports in the answer (a slug in use, invalid dataset
or competition sources), so the answers are read here and any error stops the push with one `error:` line.
Without the `kaggle` package (and `six`, which kaggle 2.x imports without declaring it) or credentials, the
equivalent commands are printed instead. Bookkeeping files (the owner record of the bundle's directories) are
never uploaded.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from trm_kaggle.atomic import OWNER_RECORD, atomic_write_json
from trm_kaggle.config import WEEK_S, number_argument, path_argument
from trm_kaggle.errors import TRMError, os_error_line
from trm_kaggle.jsonio import open_regular, read_json
from trm_kaggle.kaggle.metadata import (
    DATA_DIR, DATASET_META, DEFAULT_USER, KERNEL_META, MANIFEST, RUN_STATE_DIR, TRAIN_KERNEL_DIR, WHEEL_KERNEL_DIR,
    configured_user, dataset_metadata_problems, id_problem, kaggle_config_dirs, raise_problems,
    train_kernel_metadata_problems,
    validate_bundle, verify_manifest,
)
from trm_kaggle.kaggle.packed import check_packed
from trm_kaggle.wording import clipped, command_line, one_line, type_name

#: Files of the bundle's directories that are ours, not the dataset's: never uploaded.
BOOKKEEPING = [OWNER_RECORD]
DATASET_PARTS = ("wheels", "weights")
#: What each dataset part's manifest must list: a manifest that lost an entry let that file go unchecked (a cut
#: weights file was published). The packed parts (data, run-state) need their archive (`check_packed`).
PART_FILES = {"wheels": ("trm_kaggle-*.whl", "install.sh"), "weights": ("weights.safetensors", "config.json")}
PACKED_PARTS = (DATA_DIR, RUN_STATE_DIR)
READY, FAILED = "ready", ("failed", "deleted")
#: OUT_DIR's record of what was last uploaded: {dataset id: digest of its manifest's files}
PUSHED = ".trm-kaggle-pushed.json"


def kaggle_credentials() -> str | None:
    """Where the kaggle package would find credentials, or None. A credentials file there that this user cannot
    read is TRMError naming it: the client, given it, printed its 36-line login help twice and the push said "the
    kaggle package found no credentials"."""
    if os.environ.get("KAGGLE_USERNAME") and os.environ.get("KAGGLE_KEY"):
        return "KAGGLE_USERNAME/KAGGLE_KEY"
    if os.environ.get("KAGGLE_API_TOKEN"):
        return "KAGGLE_API_TOKEN"
    for d in kaggle_config_dirs():
        for name in ("kaggle.json", "access_token"):
            if (d / name).is_file():
                with open_regular(d / name, "the kaggle client's credentials"):  # UnreadableFile names the cause
                    pass
                return str(d / name)
    return None


def owner(push: bool, say: Callable[[str], None] = print) -> tuple[str, Any]:
    """(the Kaggle user the bundle's ids belong to when --user is not given, the authenticated API or None).

    With `push` (and the `kaggle` package and credentials) the client's own answer: it authenticates as a push
    would (an access token is asked about over the network) and names its user. Otherwise, with no network:
    $KAGGLE_USERNAME, else kaggle.json's username, else the placeholder (said in one line)."""
    if push and missing_client() is None and kaggle_credentials():
        api = kaggle_api()
        user = api.get_config_value("username")
        if isinstance(user, str) and not id_problem(f"{user}/{DEFAULT_USER}"):
            say(f"owner: {user} (the kaggle client's credentials)")
            return user, api
        configured, where = configured_user()
        if configured is None:  # a push under the placeholder owner would publish nothing of the user's
            raise TRMError(f"--push: the kaggle client's credentials name no Kaggle user (it answered "
                           f"{one_line(clipped(user, 40))}), and {where}: pass --user YOU")
        say(f"owner: {configured} (from {where}; the kaggle client named no user)")
        return configured, api
    user, where = configured_user()
    if user is None:
        say(f"owner: {DEFAULT_USER}, a placeholder ({where}); pass --user YOU")
        return DEFAULT_USER, None
    say(f"owner: {user} (from {where})")
    return user, None


def message_argument(version_message: object) -> str | None:
    """`version_message`, None or a str: an int was passed on to Kaggle's API, and into the printed commands."""
    if version_message is not None and not isinstance(version_message, str):
        raise TypeError(f"version_message: expected a str or None, got {type_name(version_message)}")
    return version_message


def publish_arguments(out_dir: object, version_message: object, wait_s: object, poll_s: object,
                      say: object) -> None:
    """A library call's push arguments, each checked before anything is uploaded: they failed only after both
    datasets were created (poll_s=-1 in time.sleep, say=5 when called), and a wait_s of NaN never timed out."""
    path_argument("out_dir", out_dir, "the bundle's folder")
    message_argument(version_message)
    number_argument("wait_s", wait_s, 0, WEEK_S)
    number_argument("poll_s", poll_s, 0, WEEK_S)
    if not callable(say):
        raise TypeError(f"say: expected a function taking one line, got {type_name(say)}")


def push_commands(out_dir: str | os.PathLike, version_message: str | None = None) -> list[list[str]]:
    """The `kaggle` commands that publish the bundle by hand (create the datasets, or version them)."""
    message_argument(version_message)
    out = Path(path_argument("out_dir", out_dir, "the bundle's folder")).absolute()
    cmds = []
    for part in DATASET_PARTS:
        if version_message:
            cmds.append(["kaggle", "datasets", "version", "-p", str(out / part), "-m", version_message])
        else:
            cmds.append(["kaggle", "datasets", "create", "-p", str(out / part)])
    cmds.append(["kaggle", "kernels", "push", "-p", str(out / "kernel")])
    if (out / WHEEL_KERNEL_DIR).is_dir():  # runs on Kaggle when pushed; its output is the adam-atan2 wheel
        cmds.append(["kaggle", "kernels", "push", "-p", str(out / WHEEL_KERNEL_DIR)])
    return cmds


def missing_client() -> str | None:
    """Why the `kaggle` package cannot run here (None when it can)."""
    for module, hint in (("kaggle", "pip install kaggle six"), ("six", "pip install six: kaggle imports it")):
        if importlib.util.find_spec(module) is None:
            return f"the `{module}` package is not installed ({hint}, or pip install 'trm_kaggle[kaggle]')"
    return None


def push_unavailable() -> str | None:
    """Why `--push` cannot publish from here (no `kaggle` package, no credentials), or None: checked before a
    bundle is built, so that a push that cannot happen builds nothing under a placeholder owner."""
    why = [w for w in (missing_client(),) if w]
    if not kaggle_credentials():
        why.append("no Kaggle credentials (~/.kaggle/kaggle.json, KAGGLE_USERNAME and KAGGLE_KEY, or "
                   "KAGGLE_API_TOKEN)")
    return "; ".join(why) or None


def kaggle_api() -> Any:
    """The authenticated `KaggleApi` (importing the `kaggle` package authenticates, from the environment)."""
    try:
        from kaggle.api.kaggle_api_extended import KaggleApi
    except SystemExit:  # kaggle exits when it finds no credentials
        raise TRMError("the kaggle package found no credentials") from None
    api = KaggleApi()
    try:
        api.authenticate()
    except SystemExit:
        raise TRMError("the kaggle package found no credentials") from None
    return api


def _answer_error(answer: Any) -> str | None:
    """The error a Kaggle answer carries (an `error` field, or invalid sources a kernel push reports)."""
    if answer is None:
        return "no answer"
    problems = []
    error = getattr(answer, "error", None)
    if error:
        problems.append(str(error))
    for field, what in (("invalid_dataset_sources", "dataset"), ("invalid_competition_sources", "competition"),
                        ("invalid_kernel_sources", "kernel"), ("invalid_model_sources", "model")):
        invalid = getattr(answer, field, None)
        if invalid:
            problems.append(f"invalid {what} sources: {', '.join(map(str, invalid))}")
    return "; ".join(problems) or None


def _call(what: str, fn: Callable[[], Any]) -> Any:
    """`fn()`, its errors (HTTP, refusals in the answer) turned into one TRMError naming `what`."""
    try:
        answer = fn()
    except TRMError:
        raise
    except Exception as e:  # noqa: BLE001 - requests' HTTPError, ValueError from the client's checks, ...
        raise TRMError(one_line(f"{what}: {_http_reason(e)}")) from None  # Kaggle's words, escaped as printed
    problem = _answer_error(answer)
    if problem:
        raise TRMError(one_line(f"{what}: Kaggle refused it: {problem}"))
    return answer


def _http_reason(e: Exception) -> str:
    response = getattr(e, "response", None)
    if response is not None and getattr(response, "status_code", None):
        body = (getattr(response, "text", "") or "").strip().replace("\n", " ")[:200]
        return f"HTTP {response.status_code}" + (f": {body}" if body else "")
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".rstrip(": ")


def _status_code(e: Exception) -> int | None:
    response = getattr(e, "response", None)
    return getattr(response, "status_code", None)


def dataset_exists(api: Any, ident: str) -> bool:
    """Whether Kaggle has the dataset `ident` (a 404 says it does not; any other failure stops the push)."""
    try:
        api.dataset_status(ident)
        return True
    except Exception as e:  # noqa: BLE001
        if _status_code(e) == 404:
            return False
        raise TRMError(f"asking Kaggle for the dataset {ident}: {_http_reason(e)}") from None


def content_digest(folder: Path) -> str:
    """The digest of a dataset folder's content: its manifest's files (names, sizes, sha256), nothing else."""
    files = read_json(folder / MANIFEST, MANIFEST).get("files")
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


def _pushed(folder: Path) -> dict:
    path = folder.parent / PUSHED
    try:
        record = read_json(path, "push record") if path.is_file() else {}
    except TRMError:  # a damaged record only costs an upload
        record = {}
    return record if isinstance(record, dict) else {}


def _record(folder: Path, ident: str, digest: str | None) -> None:
    """Set (or with no `digest`, drop) the dataset's entry in the record beside `folder`."""
    record = _pushed(folder)
    if record.get(ident) != digest:
        record = {k: v for k, v in record.items() if k != ident} | ({ident: digest} if digest else {})
        atomic_write_json(folder.parent / PUSHED, record, indent=2)


def check_dataset(folder: Path) -> None:
    """Every file of a dataset part against its manifest before anything is uploaded: the files its kind needs
    listed, nothing unlisted, a packed part's archive against the files inside it."""
    if folder.name in PACKED_PARTS:
        check_packed(folder)
    else:
        verify_manifest(folder, required=PART_FILES.get(folder.name, ()))


def check_uploaded(folder: Path, ident: str, digest: str) -> None:
    """After an upload: the dataset's files against its manifest again (`check_dataset`), and that manifest
    against the one read before the upload (`digest`). The kaggle client opens and reads the files itself, so
    the bytes it sent cannot be hashed as they go; a file cut or rewritten between the check before the upload
    and this one was published as it was then, and is refused here instead of being recorded as pushed (a file
    changed and put back in between goes unseen: it is whole again when both checks read it). TRMError naming
    the dataset; nothing is recorded for it, so the next push uploads it again."""
    try:
        check_dataset(folder)
        changed = None if content_digest(folder) == digest else f"{folder / MANIFEST} was rewritten"
    except TRMError as e:
        changed = str(e)
    except OSError as e:  # a file removed or unreadable mid-check
        changed = os_error_line(e)
    if changed:
        raise TRMError(f"dataset {ident}: its files changed during the upload ({changed}); Kaggle may have "
                       f"received them mid-change, and it is not recorded as pushed: leave {folder} alone while "
                       f"pushing, repair or rebuild the bundle, and push again (the dataset is uploaded again)")


def publish_dataset(api: Any, folder: Path, message: str, say: Callable[[str], None],
                    digest: str | None = None) -> str:
    """Create the dataset in `folder` the first time, else a new version, but only when its content (the
    manifest's digests, or `digest` when the caller read them) differs from what the last push from this
    OUT_DIR uploaded (recorded beside the folder in `PUSHED` once Kaggle has processed it: `publish`); an
    upload is followed by `check_uploaded` against that digest. Returns what was done."""
    ident = read_json(folder / DATASET_META, DATASET_META)["id"]
    digest, record = digest or content_digest(folder), _pushed(folder)
    if dataset_exists(api, ident):
        if record.get(ident) == digest:
            say(f"dataset {ident}: unchanged since its last push (the same files): not uploaded")
            return "unchanged"
        # forgotten before the upload starts: a stop or a failed call after Kaggle took the new files would leave
        # the record naming the old ones, and pushing those again would skip them as "unchanged"
        _record(folder, ident, None)
        _call(f"kaggle datasets version {ident}", lambda: api.dataset_create_version(
            str(folder), message, quiet=True, dir_mode="skip", ignore_patterns=BOOKKEEPING))
        check_uploaded(folder, ident, digest)
        say(f"dataset {ident}: new version uploaded ({message!r})")
        done = "versioned"
    else:
        _record(folder, ident, None)
        _call(f"kaggle datasets create {ident}", lambda: api.dataset_create_new(
            str(folder), public=False, quiet=True, dir_mode="skip", ignore_patterns=BOOKKEEPING))
        check_uploaded(folder, ident, digest)
        say(f"dataset {ident}: created (private)")
        done = "created"
    return done  # recorded by `publish` once Kaggle has processed it: a failed processing is uploaded again


def refuse_subfolders(folder: Path) -> None:
    """An upload sends a folder's files, not its subfolders: a dataset folder holding one would arrive without
    it (the bundle packs its datasets with folders into one archive)."""
    nested = sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    if nested:
        raise TRMError(f"{folder}: holds folders ({', '.join(nested[:3])}) that an upload to Kaggle leaves out; "
                       "rebuild the bundle (its datasets with folders are packed into one archive)")


def wait_until_ready(api: Any, idents: list[str], *, timeout_s: float, poll_s: float,
                     say: Callable[[str], None], clock: Callable[[], float] = time.monotonic,
                     sleep: Callable[[float], None] = time.sleep, kernels: Sequence[Path] = (),
                     on_ready: Callable[[str], None] = lambda ident: None,
                     on_failed: Callable[[str], None] = lambda ident: None) -> None:
    """Poll each dataset's status until all are ready (a line each time one changes; `on_ready` of each when it
    is); TRMError when one fails (after its `on_failed`) or `timeout_s` passes: a kernel pushed before its
    datasets are processed runs without them. The timeout's line gives the push of each of `kernels` to run
    later, with its own folder."""
    start, waiting, last = clock(), list(idents), {}
    while waiting:
        for ident in list(waiting):
            status = str(_call(f"kaggle datasets status {ident}", lambda: api.dataset_status(ident))).lower()
            if status != last.get(ident):
                say(f"dataset {ident}: {status} ({clock() - start:.0f} s)")
                last[ident] = status
            if status == READY:
                waiting.remove(ident)
                on_ready(ident)
            elif status in FAILED:
                on_failed(ident)
                raise TRMError(f"dataset {ident}: Kaggle's processing ended in {status!r}; see its page on Kaggle "
                               f"(it is not recorded as pushed: the next push uploads it again)")
        if waiting:
            if clock() - start >= timeout_s:
                later = " and ".join(f"`{command_line('kaggle', 'kernels', 'push', '-p', Path(k).absolute())}`"
                                     for k in kernels) or "`kaggle kernels push -p` and the kernel's folder"
                # the statuses are Kaggle's text: escaped here as in the lines printed above
                raise TRMError(one_line(f"datasets not ready after {timeout_s:.0f} s: {', '.join(waiting)} "
                                        f"({', '.join(last[i] for i in waiting)}); push the kernel later with "
                                        f"{later}"))
            sleep(poll_s)


def push_kernel(api: Any, folder: Path, say: Callable[[str], None]) -> Any:
    meta = read_json(folder / KERNEL_META, KERNEL_META)
    answer = _call(f"kaggle kernels push {meta['id']}", lambda: api.kernels_push(str(folder)))
    url = getattr(answer, "url", None) or f"https://www.kaggle.com/code/{meta['id']}"
    version = getattr(answer, "version_number", None)
    if not version and not getattr(answer, "url", None) and not getattr(answer, "ref", None):
        # an answer naming no version, address or reference (`{}`) is no proof that Kaggle saved the kernel
        say(f"kernel {meta['id']}: Kaggle's answer named no version, address or reference, so it is not known to "
            f"be saved; check with `kaggle kernels status {meta['id']}` and push again if it is not there")
        return answer
    say(f"kernel {meta['id']}" + (f" version {version}" if version else "") + " pushed"
        + (f" (machine {meta['machine_shape']})" if meta.get("machine_shape") else "") + f": {url}")
    say(f"  follow it: kaggle kernels status {meta['id']}")
    return answer


def push(out_dir: str | os.PathLike, version_message: str | None = None, *, api: Any = None,
         wait_s: float = 1800.0, poll_s: float = 10.0, say: Callable[[str], None] = print) -> int:
    """Validate (metadata, and every shipped file against its manifest's sha256), then publish: datasets
    (created the first time, versioned afterwards), a bounded wait until both are ready, the kernel(s). Without
    the `kaggle` package or credentials: print the commands and return 2, the status of every input or setup
    problem (one `error:` line on stderr); a refusal from Kaggle raises TRMError (one line, status 2 too)."""
    publish_arguments(out_dir, version_message, wait_s, poll_s, say)
    out = Path(out_dir)
    validate_bundle(out)
    for part in DATASET_PARTS:
        check_dataset(out / part)
    kernels = [out / "kernel"] + ([out / WHEEL_KERNEL_DIR] if (out / WHEEL_KERNEL_DIR).is_dir() else [])
    return publish([out / part for part in DATASET_PARTS], kernels, push_commands(out, version_message),
                   version_message or "a new build of the trm_kaggle bundle", api=api, wait_s=wait_s,
                   poll_s=poll_s, say=say)


def publish(datasets: list[Path], kernels: list[Path], commands: list[list[str]], message: str, *,
            api: Any = None, wait_s: float = 1800.0, poll_s: float = 10.0,
            say: Callable[[str], None] = print) -> int:
    """Publish checked folders: each dataset created or versioned, a bounded wait until all are ready, then
    each kernel. Without the `kaggle` package or credentials: print `commands` (what does it by hand), return 2."""
    said = say  # Kaggle's answers (a dataset's status) are shown as text on one line, never sent to the terminal
    say = lambda line: said(one_line(line))  # noqa: E731 (its newline faked a line of ours)
    if api is None:
        why = push_unavailable()
        if why:
            say("Run these commands to publish (datasets first; wait until `kaggle datasets status` says ready "
                "before pushing the kernel):")
            for c in commands:
                say("  " + command_line(*c))
            print(f"error: not pushed: {why}", file=sys.stderr)
            return 2
        api = kaggle_api()
    for folder in datasets:  # every refusal before the first upload
        refuse_subfolders(folder)
    folders = {}  # dataset id -> (its folder, the digest of what was uploaded or found unchanged)
    for folder in datasets:
        digest = content_digest(folder)  # what is recorded is what `publish_dataset` checked after the upload
        publish_dataset(api, folder, message, say, digest)
        folders[read_json(folder / DATASET_META, DATASET_META)["id"]] = (folder, digest)
    # Recorded only once Kaggle has processed it: a dataset whose processing failed was skipped as unchanged by
    # every later push, which then stopped at the same failure
    wait_until_ready(api, list(folders), timeout_s=wait_s, poll_s=poll_s, say=say, kernels=kernels,
                     on_ready=lambda ident: _record(folders[ident][0], ident, folders[ident][1]),
                     on_failed=lambda ident: _record(folders[ident][0], ident, None))
    for folder in kernels:
        push_kernel(api, folder, say)
    return 0


def training_push_commands(out_dir: str | os.PathLike, version_message: str | None = None) -> list[list[str]]:
    """The data, wheels and run-state datasets that are there, then the training kernel, by hand."""
    message_argument(version_message)
    out = Path(path_argument("out_dir", out_dir, "the bundle's folder")).absolute()
    cmds = []
    for part in (DATA_DIR, "wheels", RUN_STATE_DIR):
        if (out / part).is_dir():
            cmds.append(["kaggle", "datasets", "version", "-p", str(out / part), "-m", version_message]
                        if version_message else ["kaggle", "datasets", "create", "-p", str(out / part)])
    if (out / TRAIN_KERNEL_DIR).is_dir():
        cmds.append(["kaggle", "kernels", "push", "-p", str(out / TRAIN_KERNEL_DIR)])
    return cmds


def push_training(out_dir: str | os.PathLike, version_message: str | None = None, *, api: Any = None,
                  wait_s: float = 1800.0, poll_s: float = 10.0, say: Callable[[str], None] = print) -> int:
    """`push` for training on Kaggle: check the data, wheels and run-state datasets (their metadata, and every
    shipped file against its manifest) and the training kernel's metadata (its dataset sources among those
    datasets), then publish the datasets that are there and the training kernel (each push starts a new
    session)."""
    publish_arguments(out_dir, version_message, wait_s, poll_s, say)
    out = Path(out_dir)
    datasets = [out / part for part in (DATA_DIR, "wheels", RUN_STATE_DIR) if (out / part).is_dir()]
    ids = []
    for folder in datasets:  # as `push` checks the submission bundle's: a damaged wheel was uploaded
        meta = read_json(folder / DATASET_META, DATASET_META, hint="build the bundle first")
        raise_problems(folder / DATASET_META, dataset_metadata_problems(meta))
        ids.append(meta["id"])
        check_dataset(folder)
    meta_path = out / TRAIN_KERNEL_DIR / KERNEL_META
    if meta_path.is_file():
        meta = read_json(meta_path, KERNEL_META)
        raise_problems(meta_path, train_kernel_metadata_problems(meta, meta_path.parent, ids))
    kernels = [out / TRAIN_KERNEL_DIR] if meta_path.is_file() else []
    return publish(datasets, kernels, training_push_commands(out, version_message),
                   version_message or "a new build of the trm_kaggle training bundle", api=api, wait_s=wait_s,
                   poll_s=poll_s, say=say)
