#!/usr/bin/env bash
# Opt-in, not part of CI: the quick lane on the oldest torch that pyproject.toml admits (its `torch>=X`), so
# that the declared floor is one that installs and passes, not a guess.
#
# It builds a virtual environment outside the repository, once, and reuses it:
#   [VENV]  its path (a first argument not starting with "-"), default
#           ${XDG_CACHE_HOME:-$HOME/.cache}/trm_kaggle/torch-floor-venv
# On Linux x86_64 PyPI's torch is the CUDA build: the first run downloads several GB (torch, the nvidia-*
# wheels and the triton that torch pins). Later runs reuse the environment; a changed floor reinstalls torch.
#
#   scripts/check_torch_floor.sh                                   the quick lane (-n auto -m "not slow")
#   scripts/check_torch_floor.sh /tmp/floor -p no:xdist -m "not slow"   there, on one core (any pytest arguments)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="${XDG_CACHE_HOME:-$HOME/.cache}/trm_kaggle/torch-floor-venv"
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then venv="$1"; shift; fi
py="$venv/bin/python"

floor="$(sed -n 's/^ *"torch>=\([0-9][0-9.]*\)".*/\1/p' "$repo/pyproject.toml" | head -n 1)"
[ -n "$floor" ] || { echo "no \"torch>=X\" line in $repo/pyproject.toml" >&2; exit 1; }

if [ ! -x "$py" ]; then
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv"
  "$py" -m pip install -q --upgrade pip
fi

# Everything below is installed against this one torch: pip must not upgrade it to satisfy anything else.
constraint="$(mktemp)"
trap 'rm -f "$constraint"' EXIT
echo "torch==$floor" > "$constraint"

# The project's dependencies and the extras the quick lane imports (dev; arc: matplotlib for the evaluation
# report's pictures; notebooks: papermill), less triton: an older torch's CUDA wheel pins its own triton
# (torch 2.9: triton 3.5), which the dev extra's `triton>=3.8` (the interpreter tests') contradicts. That
# pinned triton is removed again: without Triton its interpreter tests skip; an older Triton's interpreter
# fails them, which says nothing about torch.
requirements="$("$py" - "$repo/pyproject.toml" <<'EOF'
import sys
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    from pip._vendor import tomli as tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
extras = project["optional-dependencies"]
for r in project["dependencies"] + extras["dev"] + extras["arc"] + extras["notebooks"]:
    if not r.replace(" ", "").startswith("triton"):
        print(r)
EOF
)"
echo "torch $floor in $venv" >&2
mapfile -t reqs <<< "$requirements"
"$py" -m pip install -q -c "$constraint" "${reqs[@]}"
"$py" -m pip install -q --no-deps -e "$repo"
"$py" -m pip uninstall -q -y triton 2>/dev/null || true
"$py" -c "import torch; print('torch', torch.__version__)" >&2

cd "$repo"
[ $# -gt 0 ] || set -- -n auto -m "not slow"
exec "$py" -m pytest -q "$@"
