#!/usr/bin/env bash
# Builds ggml (CPU backend, native ISA) from the llama-cpp-python sdist on PyPI plus the MUL_MAT_ID
# harness, then runs the harness. All arguments go to the harness (see --help); with none, it runs
# the full anchors.md sweep (3 shapes x up/down x q4_0,q4_K,q8_0,mxfp4,bf16 x M = 1..512, skipping
# M > 32 for mixtral down and llama4-scout, as the anchors table does).
#
#   bench/ggml/run.sh                                   # full sweep, JSON in $OUT_DIR
#   bench/ggml/run.sh --shapes qwen3-30b-a3b --projs up --types q4_0 --m 1,8
#
# Env: GGML_WORK (scratch dir, default /work/ggml-build), LCP_VERSION (llama-cpp-python version,
# default 0.3.36), OUT_DIR (default $GGML_WORK/results), JOBS (build parallelism, default 2),
# NO_ANCHOR_LIMITS=1 (do not skip the big M rows).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=${GGML_WORK:-/work/ggml-build}
ver=${LCP_VERSION:-0.3.36}
jobs=${JOBS:-2}
out_dir=${OUT_DIR:-$work/results}
pkg=llama_cpp_python-$ver
src=$work/$pkg/vendor/llama.cpp/ggml
build=$work/build-$ver
bin=$build/ggml_moe_bench
mkdir -p "$work" "$out_dir"

if [ ! -d "$src" ]; then
  if [ ! -f "$work/$pkg.tar.gz" ]; then
    echo "downloading llama-cpp-python==$ver sdist" >&2
    pip download "llama-cpp-python==$ver" --no-binary :all: --no-deps -d "$work" >&2
  fi
  tar xzf "$work/$pkg.tar.gz" -C "$work"
fi
# the sdist leaves out ggml.pc.in, which ggml's standalone CMake configures
[ -f "$src/ggml.pc.in" ] || touch "$src/ggml.pc.in"

if [ ! -f "$build/ggml/src/libggml-cpu.a" ]; then
  # llama.cpp's defaults for a CPU build: native ISA, repack buffers (GGML_CPU_REPACK default ON),
  # OpenMP, llamafile sgemm
  cmake -S "$src" -B "$build/ggml" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_CPU=ON \
    -DGGML_LLAMAFILE=ON -DGGML_OPENMP=ON -DBUILD_SHARED_LIBS=OFF -DGGML_BUILD_TESTS=OFF \
    -DGGML_BUILD_EXAMPLES=OFF >&2
  nice -n 10 cmake --build "$build/ggml" -j"$jobs" >&2
fi

if [ ! -x "$bin" ] || [ "$here/ggml_moe_bench.cpp" -nt "$bin" ]; then
  nice -n 10 g++ -std=c++20 -O2 -march=native -fopenmp -I"$src/include" \
    -DQMOE_GGML_PKG="\"llama-cpp-python $ver (PyPI sdist)\"" \
    "$here/ggml_moe_bench.cpp" -o "$bin" \
    "$build/ggml/src/libggml.a" "$build/ggml/src/libggml-cpu.a" "$build/ggml/src/libggml-base.a" \
    -lpthread -ldl -lm
fi

args=("$@")
if [ ${#args[@]} -eq 0 ]; then
  args=(--shapes qwen3-30b-a3b,mixtral-8x7b,llama4-scout --projs up,down
        --types q4_0,q4_K,q8_0,mxfp4,bf16 --m 1,8,32,128,512)
fi
if [ "${NO_ANCHOR_LIMITS:-0}" != 1 ]; then
  args=(--m-max-for mixtral-8x7b:down=32 --m-max-for llama4-scout=32 "${args[@]}")
fi
if ! printf '%s\n' "${args[@]}" | grep -qx -- '--json'; then
  args+=(--json "$out_dir/ggml_moe_$(date +%Y%m%d_%H%M%S).json")
fi
echo "load: $(cat /proc/loadavg)" >&2
exec "$bin" "${args[@]}"
