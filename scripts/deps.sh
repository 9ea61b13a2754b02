#!/usr/bin/env bash
# Installs what building and testing qmoe needs, only when it is missing: Debian packages with
# apt-get, Python packages with pip. Safe to run repeatedly; does nothing when all is present.
set -euo pipefail
need_apt=()
have_hdr() { [ -e "$1" ]; }
command -v cmake >/dev/null || need_apt+=(cmake)
command -v g++ >/dev/null || need_apt+=(g++)
command -v ninja >/dev/null || need_apt+=(ninja-build)
have_hdr /usr/include/nlohmann/json.hpp || need_apt+=(nlohmann-json3-dev)
have_hdr /usr/include/CLI/CLI.hpp || need_apt+=(libcli11-dev)
have_hdr /usr/include/gtest/gtest.h || need_apt+=(libgtest-dev)
have_hdr /usr/include/benchmark/benchmark.h || need_apt+=(libbenchmark-dev)
command -v python3 >/dev/null || need_apt+=(python3 python3-pip)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "deps: apt-get install ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi
py_need=()
for mod in numpy ml_dtypes safetensors pytest nanobind; do
  python3 -c "import $mod" 2>/dev/null || py_need+=("$mod")
done
if [ ${#py_need[@]} -gt 0 ]; then
  echo "deps: pip install ${py_need[*]}"
  python3 -m pip install -q "${py_need[@]}" || python3 -m pip install -q --break-system-packages "${py_need[@]}"
fi
