#!/usr/bin/env bash
# Create ./.venv, install secure-auc with everything it needs, and (unless
# --no-run) run the main job on the built-in dataset.
#
# torch: the CPU build.  On this kind of machine a CPU wheel of torch 2.13.0 lies
# in the local wheel store (pip's find-links); elsewhere we take the CPU build
# from PyTorch's own index.  Never plain `pip install torch`, which pulls several
# GB of CUDA packages.
# CrypTen: installed with --no-deps, because its metadata requires the broken
# `sklearn` package, torchvision and a CUDA torch; pyproject.toml declares what
# it really needs (numpy, scipy, omegaconf, onnx, pyyaml).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
run_job=1
[ "${1:-}" = "--no-run" ] && run_job=0

[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PIP=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)

if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  echo "setup: installing the CPU build of torch" >&2
  "${PIP[@]}" "torch==2.13.0+cpu" 2>/dev/null \
    || "${PIP[@]}" --index-url https://download.pytorch.org/whl/cpu "torch==2.13.0"
fi
"${PIP[@]}" -e ".[test,plots,parquet]"
# last, so that pip's resolver does not complain about CrypTen's declared extras
"${PIP[@]}" --no-deps "crypten==0.4.1" 2>&1 | grep -v -e "dependency resolver" -e "^crypten .* requires" >&2 || true
.venv/bin/python -c "import importlib.util as u, sys; sys.exit(u.find_spec('crypten') is None)"
if .venv/bin/python -m pip list 2>/dev/null | grep -qi '^nvidia-'; then
  echo "setup: error: CUDA packages were installed; remove .venv and report this" >&2
  exit 1
fi
echo "setup: done ($(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'))" >&2
if [ "$run_job" = 1 ]; then
  .venv/bin/secure-auc evaluate
fi
