#!/usr/bin/env bash
# Opt-in: the PyTorch/XLA tests on CPU (PJRT_DEVICE=CPU) in an isolated, cached environment.
#
# torch_xla needs the torch it was built for (torch 2.9.0 + torch_xla 2.9.0, a download of several GB),
# so it gets its own virtual environment, built once outside the repository and reused:
#   $TRM_XLA_VENV   default ${XDG_CACHE_HOME:-$HOME/.cache}/trm_kaggle/xla-venv
#   $TRM_XLA_TORCH  torch and torch_xla version to install when building it (default 2.9.0)
#
#   scripts/check_xla.sh                  tests/test_xla.py (about 10 minutes on 2 CPU cores: XLA compiles)
#   scripts/check_xla.sh tests/test_xla.py -k resume    any pytest arguments
#   scripts/check_xla.sh bench [--steps N]              benchmarks/bench_xla_cpu.py
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="${TRM_XLA_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/trm_kaggle/xla-venv}"
version="${TRM_XLA_TORCH:-2.9.0}"
py="$venv/bin/python"

if ! "$py" -c "import torch_xla" >/dev/null 2>&1; then
  echo "building $venv: torch $version + torch_xla $version (several GB)" >&2
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv"
  "$py" -m pip install -q --upgrade pip
  "$py" -m pip install "torch==$version" "torch_xla==$version"
fi

# The package and its test dependencies, with torch pinned to the installed one: pip must not
# replace the torch that torch_xla was built for.
constraint="$(mktemp)"
trap 'rm -f "$constraint"' EXIT
"$py" -c "import torch; print('torch==' + torch.__version__.split('+')[0])" > "$constraint"
"$py" -m pip install -q -c "$constraint" -e "$repo[dev]"

cd "$repo"
export PJRT_DEVICE=CPU
unset CPU_NUM_DEVICES
if [ "${1:-}" = "bench" ]; then
  shift
  exec "$py" benchmarks/bench_xla_cpu.py "$@"
fi
[ $# -gt 0 ] || set -- tests/test_xla.py
exec "$py" -m pytest -q -p no:cacheprovider -rs "$@"
