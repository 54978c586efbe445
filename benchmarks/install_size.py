"""What the README's install line downloads, per platform: the wheels pip picks from an index, and their sizes.

    python benchmarks/install_size.py                      # torch 2.13.0 and .[arc] against PyPI
    python benchmarks/install_size.py --torch 2.13.0 --extras arc --index-url https://pypi.org/simple

Linux x86_64: pip's own resolution of `pip install "torch==X" -e ".[EXTRAS]"` (`--dry-run --report`, every
dependency). macOS arm64 and Windows: pip resolves the torch wheel for that platform (`--platform`, `--no-deps`:
pip evaluates environment markers for the machine it runs on, so it cannot resolve another platform's
dependencies); the script prints which of torch's requirements apply there (their markers evaluated for that
platform). Sizes are each wheel's Content-Length (one HEAD request per wheel; nothing is downloaded). Needs the
network; pip runs with `--isolated`, so local indexes and find-links of this machine's configuration are left out.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: benchmarks.entry
from benchmarks.entry import loading  # noqa: E402

with loading(__name__):  # a stop while these load: one line and status, as in main
    from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
OTHER_PLATFORMS = {"macOS arm64": ("macosx_14_0_arm64", {"platform_system": "Darwin", "sys_platform": "darwin"}),
                   "Windows x86_64": ("win_amd64", {"platform_system": "Windows", "sys_platform": "win32"})}
GPU_PREFIXES = ("nvidia", "cuda", "triton")


def report(args: list[str], index_url: str) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--isolated", "--dry-run", "--ignore-installed", "-q",
               "--report", str(out), "--index-url", index_url, *args]
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
        if done.returncode != 0:
            from benchmarks.entry import child_failed

            raise child_failed("pip", done.returncode, done.stderr)
        return json.loads(out.read_text())["install"]


def size(url: str) -> int:
    with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=60) as r:
        return int(r.headers["Content-Length"])


def megabytes(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def main() -> None:
    from trm_kaggle.wording import OneLineParser  # an error line quotes what was typed escaped
    p = OneLineParser(description=__doc__.split("\n")[0])
    p.add_argument("--torch", default="2.13.0")
    p.add_argument("--extras", default="arc")
    p.add_argument("--index-url", default="https://pypi.org/simple")
    a = p.parse_args()

    items = report([f"torch=={a.torch}", "-e", f".[{a.extras}]"], a.index_url)
    wheels = [(i["metadata"]["name"], i["download_info"]["url"]) for i in items
              if not i["download_info"]["url"].startswith("file:")]  # the project itself is local
    sizes = {name: size(url) for name, url in wheels}
    torch_reqs = map(Requirement, next(i for i in items if i["metadata"]["name"] == "torch")["metadata"].get(
        "requires_dist", []))
    torch_deps = {r.name.lower() for r in torch_reqs if r.marker is None or r.marker.evaluate({"extra": ""})}
    gpu = {n: s for n, s in sizes.items() if n.lower().startswith(GPU_PREFIXES)}
    print(f"Linux x86_64, pip install \"torch=={a.torch}\" -e \".[{a.extras}]\" from {a.index_url}: "
          f"{len(sizes)} wheels, {megabytes(sum(sizes.values()))}")
    print(f"  torch: {megabytes(sizes['torch'])} ({next(u for n, u in wheels if n == 'torch').rsplit('/', 1)[-1]})")
    print(f"  {len(gpu)} nvidia-*/cuda-*/triton wheels: {megabytes(sum(gpu.values()))}")
    for name, s in sorted(gpu.items(), key=lambda kv: -kv[1]):
        print(f"    {megabytes(s):>10}  {name}")
    rest = {n: s for n, s in sizes.items() if n not in gpu and n != "torch"}
    print(f"  the other {len(rest)} wheels (torch's pure-Python dependencies and the package's): "
          f"{megabytes(sum(rest.values()))}")
    print(f"  torch's requirements: {', '.join(sorted(torch_deps))}")

    for label, (platform, env) in OTHER_PLATFORMS.items():
        with tempfile.TemporaryDirectory() as target:  # pip's --target, never written (--dry-run): removed
            found = report(["--no-deps", "--platform", platform, "--python-version",
                            f"{sys.version_info.major}.{sys.version_info.minor}", "--only-binary=:all:", "--target",
                            target, f"torch=={a.torch}"], a.index_url)[0]
        url = found["download_info"]["url"]
        reqs = [Requirement(r) for r in found["metadata"].get("requires_dist", [])]
        applies = [r.name for r in reqs if r.marker is None or r.marker.evaluate({**env, "extra": ""})]
        print(f"{label}: torch {megabytes(size(url))} ({url.rsplit('/', 1)[-1]}); its requirements there: "
              f"{', '.join(sorted(applies))}")


if __name__ == "__main__":
    # a refusal, a stop: one line and the status of the package's commands
    from benchmarks.entry import command

    sys.exit(command(main))
