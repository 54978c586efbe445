"""The kernels' offline install of trm_kaggle: standard library only, run before the package can be imported.

The two Kaggle notebooks read this file's source out of the trm_kaggle wheel in the attached wheels dataset (a
wheel is a zip) and execute it on its own, so one copy serves both: nothing here may import trm_kaggle or
anything outside the standard library (pip's vendored `packaging` is used where it is there).

`prepare(wheels, warn)`: when trm_kaggle is not importable, `pip install --no-index --no-deps --find-links
WHEELS trm_kaggle ...`, naming trm_kaggle and each other distribution of the wheels dataset that the image lacks
(the dataset carries every dependency Kaggle's image lacks, for each Python it may run: pip picks the running
one's wheels). `--no-deps`: what the image already has is never re-resolved, so one unmet requirement of the
image's own packages (say torch's setuptools) cannot fail the install. Then every requirement of trm_kaggle is
checked by name, and what neither the image nor the dataset has is named in one RuntimeError.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from typing import Callable

#: Where this file lies inside the trm_kaggle wheel (the notebooks read it from there).
WHEEL_PATH = "trm_kaggle/kaggle/offline_install.py"


def installed(dist: str) -> bool:
    try:
        importlib.metadata.version(dist)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def one_line(text: object) -> str:
    """`text` with its control characters escaped, as `trm_kaggle.wording.one_line` does (which this file cannot
    import): a wheels folder's name found below KAGGLE_INPUT, or pip's output, may hold an escape sequence or a
    newline that would clear the kernel's log or forge a line in it."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text))


#: A wheel's file name: {distribution}-{version}(-{build})?-{python}-{abi}-{platform}.whl (the binary
#: distribution format); the distribution starts with a letter or digit.
WHEEL_NAME = re.compile(r"(?P<dist>[A-Za-z0-9][A-Za-z0-9_.]*)-[A-Za-z0-9_.+!]+(-[0-9][A-Za-z0-9_.]*)?"
                        r"(-[A-Za-z0-9_.]+){3}\.whl")


def wheel_distributions(wheels: str | Path) -> set[str]:
    """The distributions whose wheels lie in `wheels`: only files named as wheels are (a stray `notes.whl` named
    to pip failed the whole install, and `.-1.0-py3-none-any.whl` asked pip to install the current folder); pip's
    own --find-links scan skips the others too."""
    return {m.group("dist") for p in Path(wheels).glob("*.whl") if (m := WHEEL_NAME.fullmatch(p.name))}


def install_offline(wheels: str | Path) -> str:
    """pip install --no-index --no-deps: trm_kaggle and every other distribution whose wheel lies in `wheels`
    and which the image does not have; returns pip's output. RuntimeError with pip's own reason."""
    names = wheel_distributions(wheels)
    extra = sorted(n for n in names if n.lower() != "trm_kaggle" and not installed(n))
    cmd = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--find-links", str(wheels),
           "--disable-pip-version-check", "--no-color", "trm_kaggle", *extra]
    pip = subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8", errors="replace")
    if pip.returncode != 0:
        said = [line.strip() for line in pip.stderr.splitlines() if line.strip()] or ["(no message)"]
        last = ([line for line in said if line.startswith("ERROR")] or said)[-1]  # pip's own reason
        if last.endswith(":") and said[-1] != last:  # a crash: "ERROR: Exception:", then the traceback
            last = f"{last} {said[-1]}"  # whose last line says what was raised
        raise RuntimeError(f"pip install --no-index --no-deps --find-links {one_line(wheels)} trm_kaggle failed "
                           f"(status {pip.returncode}): {one_line(last)}")
    importlib.invalidate_caches()
    return pip.stdout


def missing_requirements(dist: str = "trm_kaggle", warn: Callable[[str], None] = print) -> list[str]:
    """The requirements of `dist` (its extras aside) that no installed distribution meets by name: what the image
    lacks and the wheels dataset did not carry. A version outside a requirement's range is only a warning (the
    image's own version is the one its other packages were built with)."""
    try:
        from pip._vendor.packaging.requirements import Requirement  # pip's copy: the standard library has none
    except ImportError:
        Requirement = None
    try:
        reqs = importlib.metadata.requires(dist) or []
    except importlib.metadata.PackageNotFoundError:
        return []  # importable without metadata (a path on sys.path): nothing to compare
    missing = []
    for text in reqs:
        req = Requirement(text) if Requirement else None
        if req is not None and req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue  # an extra's requirement, or one for another platform
        if req is None and ";" in text:
            continue
        name = req.name if req else re.match(r"[A-Za-z0-9._-]+", text.strip()).group(0)
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(text.split(";")[0].strip())
            continue
        if req is not None and req.specifier and not req.specifier.contains(version, prereleases=True):
            warn(f"{dist} asks for {req.name}{req.specifier}; this image has {version} (kept: installed as it is)")
    return missing


def prepare(wheels: str | Path | None, warn: Callable[[str], None] = print) -> None:
    """trm_kaggle importable with every requirement met by name, or RuntimeError naming what is missing (one
    line). `wheels`: the wheels dataset's folder (only read when trm_kaggle is not importable yet)."""
    if importlib.util.find_spec("trm_kaggle") is None:
        if wheels is None:
            raise RuntimeError("trm_kaggle is not installed and no wheels folder was found: attach the wheels "
                               "dataset or set WHEELS_DIR")
        print(f"wheels: {one_line(wheels)}")
        for line in install_offline(wheels).splitlines():  # pip's lines as they are, each escaped
            print(one_line(line))
    else:
        print("trm_kaggle is already importable: nothing installed")
    missing = missing_requirements(warn=warn)
    if missing:
        raise RuntimeError(f"trm_kaggle needs {', '.join(missing)}, which neither this image nor the wheels "
                           f"dataset has (build the wheels dataset without --kaggle-has for them)")
