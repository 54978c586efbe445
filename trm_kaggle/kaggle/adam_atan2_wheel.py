"""Kaggle script kernel: build the adam-atan2 wheel on a Kaggle GPU machine and save it as the kernel's output.

adam-atan2 is published as CUDA source only, so an offline kernel can install it only from a wheel built
for the exact Python, torch and CUDA of Kaggle's image. This script is that build: `build_bundle.py
--wheel-kernel` writes it with its kernel-metadata.json (a GPU for nvcc, internet for pip). After it ran:

    kaggle kernels output <user>/<prefix>-adam-atan2-wheel -p adam-atan2/
    python build_bundle.py bundle/ --extra-wheel adam-atan2/wheels/adam_atan2-0.0.3-*.whl

It needs only the standard library. It builds against the image's own torch (`--no-build-isolation`; an
isolated build would download another torch), for every GPU generation Kaggle lends (`ARCH_LIST`: the
build machine's own GPU may differ from the one the submission gets), imports the wheel's extension from a
private directory to prove that it loads beside that torch, and writes manifest.json with the versions it
was built for. TRM_KAGGLE_PIP and KAGGLE_WORKING replace the pip command and the output directory (the
repository's tests run it with a stand-in pip and nvcc).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NoReturn

PACKAGE = "adam-atan2==0.0.3"  # the version upstream's requirements resolve to (see docs/fidelity.md)
EXTENSION = "adam_atan2_backend"  # the compiled module the package provides
# P100, V100, T4, A100, A10, L4, H100 (+ PTX for newer ones); TORCH_CUDA_ARCH_LIST in the environment wins
ARCH_LIST = "6.0;7.0;7.5;8.0;8.6;8.9;9.0+PTX"


def shown(text: str, lines: bool = False) -> str:
    """`text` with its control characters escaped (newlines kept with `lines`): a command line holding
    TRM_KAGGLE_PIP or KAGGLE_WORKING, or pip's output, reached the terminal raw (an escape sequence cleared it).
    This kernel runs alone on Kaggle, without the package: its own copy of the package's rule."""
    return "".join(c if c.isprintable() or (lines and c == "\n") else c.encode("unicode_escape").decode("ascii")
                   for c in text)


def fail(message: str) -> NoReturn:
    """One escaped `error:` line and status 2, as the package's commands end."""
    print(f"error: {shown(message)}", file=sys.stderr, flush=True)
    sys.exit(2)


def write_new(path: Path, text: str) -> None:
    """`text` into `path` whole: written to a file made new beside it, then moved in its place (a link there is
    replaced, never written through; a stop leaves the old file or none)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def run(cmd: list[str], what: str) -> str:
    print(shown("$ " + " ".join(shlex.quote(c) for c in cmd)), flush=True)
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8", errors="replace")
    except OSError as e:  # a program that is not there (TRM_KAGGLE_PIP naming none)
        fail(f"{what} could not start {cmd[0]!r}: {e.strerror or e}")
    print(shown(res.stdout[-4000:], lines=True), shown(res.stderr[-4000:], lines=True), sep="\n", flush=True)
    if res.returncode != 0:
        fail(f"{what} failed with status {res.returncode} (output above)")
    return res.stdout


def versions() -> dict:
    """Python, torch and CUDA of this image: the wheel works only where all three are the same."""
    probe = ("import json, torch; print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda, "
             "'gpu': torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}))")
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, encoding="utf-8", errors="replace")
    found = json.loads(res.stdout) if res.returncode == 0 else {"torch": None, "cuda": None, "gpu": None}
    return {"python": platform.python_version(), "platform": platform.machine(), **found}


def prepared_output(out: Path) -> tuple[Path, Path]:
    """(the wheels folder, a private import-check folder made new) in `out`, or one `error:` line: everything
    the kernel will write is checked before the build, which takes minutes (a manifest.json that is a folder, or a
    folder that takes no new entries, ended the kernel in a traceback after it)."""
    wheels = out / "wheels"
    try:
        if wheels.is_symlink():  # pip would write where it points, outside the output folder
            fail(f"{wheels} is a symbolic link: the kernel writes its wheel inside {out}, never through a link")
        wheels.mkdir(parents=True, exist_ok=True)
        if older := sorted(p.name for p in wheels.glob("adam_atan2-*.whl")):
            fail(f"{wheels} already holds {older}: the kernel writes one wheel into a folder without one "
                 "(move them away, or set KAGGLE_WORKING to another folder)")
        manifest = out / "manifest.json"
        if manifest.is_dir() and not manifest.is_symlink():
            fail(f"{manifest} is a folder: the kernel writes its manifest there (move it away)")
        # a private target of its own, made new (never a folder of the user's, never a link): the image's
        # site-packages stay as they were, and only what the kernel made is removed
        check = Path(tempfile.mkdtemp(prefix="import-check-", dir=out))
    except OSError as e:  # KAGGLE_WORKING a file, a place that cannot be made, a folder that takes nothing new
        fail(f"KAGGLE_WORKING {out}: cannot hold the kernel's output ({e.strerror or e})")
    return wheels, check


def main() -> None:
    working = os.environ.get("KAGGLE_WORKING", "/kaggle/working")
    if not working.strip():  # Path("") is the current folder: the wheel went to ./wheels, said as "found []"
        fail("KAGGLE_WORKING is empty: unset it (/kaggle/working is used) or name the output folder")
    out = Path(working)
    try:
        pip = shlex.split(os.environ.get("TRM_KAGGLE_PIP", f"{shlex.quote(sys.executable)} -m pip"))
    except ValueError as e:  # an unbalanced quote
        fail(f"TRM_KAGGLE_PIP cannot be read as a command line: {e}")
    if not pip:
        fail("TRM_KAGGLE_PIP is empty: unset it (the image's pip is used) or name a pip command")
    cuda_home = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    nvcc = shutil.which("nvcc") or (str(cuda_home / "bin" / "nvcc") if (cuda_home / "bin" / "nvcc").is_file() else None)
    if nvcc is None:
        fail("no nvcc (on PATH or in $CUDA_HOME/bin): run this kernel with a GPU accelerator "
                 "(Kaggle's GPU images ship the CUDA toolkit)")
    facts = versions()
    print(json.dumps(facts), flush=True)
    if facts["torch"] is None:
        fail("torch does not import here: run this kernel on Kaggle's GPU image")
    os.environ["PATH"] = f"{Path(nvcc).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", ARCH_LIST)
    facts.update(nvcc=run([nvcc, "--version"], "nvcc --version").strip().splitlines()[-1],
                 arch_list=os.environ["TORCH_CUDA_ARCH_LIST"])

    wheels, check = prepared_output(out)
    try:
        run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(wheels), PACKAGE],
            f"building {PACKAGE}")
        built = sorted(wheels.glob("adam_atan2-*.whl"))
        if len(built) != 1:
            fail(f"expected one adam_atan2 wheel in {wheels}, found {[p.name for p in built]}")
        wheel = built[0]
        run([*pip, "install", "--no-deps", "--no-index", "--target", str(check), str(wheel)], "installing the wheel")
        run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(check)!r}); import torch, {EXTENSION}; "
                                   f"print('{EXTENSION} loads beside torch', torch.__version__)"], "importing the wheel")
    finally:
        shutil.rmtree(check, ignore_errors=True)

    manifest = {"package": PACKAGE, "wheel": wheel.name, "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
                "size": wheel.stat().st_size, "built_on": facts}
    try:
        write_new(out / "manifest.json", json.dumps(manifest, indent=2) + "\n")
    except OSError as e:  # the folder changed during the build
        fail(f"KAGGLE_WORKING {out}: cannot write manifest.json ({e.strerror or e})")
    print(f"built {wheel} for Python {facts['python']}, torch {facts['torch']}, CUDA {facts['cuda']}: download "
          f"this kernel's output and pass the wheel to build_bundle.py --extra-wheel", flush=True)


if __name__ == "__main__":
    main()
