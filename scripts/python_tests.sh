#!/usr/bin/env bash
# Runs the Python tests (python/tests, pytest with NumPy on the CPU; the torch-CUDA tests skip and
# say why when torch or a GPU is missing).
#   scripts/python_tests.sh [BUILD_DIR]
# The extension qmoe._qmoe is built by CMake into BUILD_DIR/python/qmoe (target _qmoe, on by default
# when nanobind is installed; scripts/deps.sh installs it) and imported from the source tree through
# QMOE_BUILD_DIR: the C++ is compiled once, by the build `make test` already ran, not again by pip.
set -euo pipefail
BUILD=${1:-build}
if ! ls python/tests/test_*.py >/dev/null 2>&1; then
  echo "python tests: none yet"
  exit 0
fi
if ! cmake --build "$BUILD" --target _qmoe qmoe_cli; then
  echo "python tests: cannot build the extension (target _qmoe) in $BUILD; is nanobind installed" \
       "(python3 -m pip install nanobind) and was $BUILD configured after that?" >&2
  exit 1
fi
QMOE_BUILD_DIR="$BUILD" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" python3 -m pytest -q -rs python/tests
