#!/usr/bin/env bash
# Runs the Python tests when there are any (the python/ module's pytest suite).
set -euo pipefail
BUILD=${1:-build}
if ls python/tests/test_*.py >/dev/null 2>&1; then
  QMOE_BUILD_DIR="$BUILD" python3 -m pytest -q python/tests
else
  echo "python tests: none yet"
fi
