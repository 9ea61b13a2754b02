#!/usr/bin/env bash
# Runs every GPU test and the anchor benchmark in one go and writes one log.
#   scripts/gpu_tests.sh [BUILD_DIR] [LOG]     (defaults: build-cuda, $OUT/gpu_tests.log or gpu_tests.log)
# Phases (QMOE_GPU_PHASES, default "info tests capi python bench"): info = device + toolkit facts and the
# cuBLAS ceilings through PyTorch when it is installed; tests = the CUDA gtest suite (every other
# test binary too with the phase "alltests"); bench = the anchor rows through `qmoe bench --backend cuda` when
# the CLI has it, else through the bench-hook test (tests/cuda/test_cuda_bench.cpp).
# capi = test_c_api *CApiCuda*; python = the Python module built for this python3 + pytest python/tests
# (both need libqmoe_c.so in BUILD_DIR; scripts/pack_gpu_build.sh packs a carried BUILD_DIR).
# QMOE_GPU_TEST_FILTER narrows the gtest filter; QMOE_BENCH_SCHEMES picks bench schemes ("012").
set -uo pipefail
BUILD=${1:-build-cuda}
LOG=${2:-${OUT:-.}/gpu_tests.log}
PHASES=${QMOE_GPU_PHASES:-info tests capi python bench}
FILTER=${QMOE_GPU_TEST_FILTER:-*}
status=0
exec > >(tee -a "$LOG") 2>&1
echo "== qmoe GPU tests $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"

# cuBLAS for the bench's ceilings: the toolkit's, or the one PyTorch's wheels carry.
source "$(dirname "${BASH_SOURCE[0]}")/gpu_run_lib.sh"
qmoe_cublas_path

if [[ " $PHASES " == *" info "* ]]; then
  nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit,driver_version --format=csv || true
  python3 - <<'EOF' || true
import torch, time
def rate(fn, flops, it=10):
    for _ in range(3): fn()
    torch.cuda.synchronize(); s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(it):
        s.record(); fn(); e.record(); e.synchronize(); ts.append(s.elapsed_time(e))
    ts.sort(); return flops / (ts[len(ts) // 2] * 1e-3) / 1e12
n = 8192
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16); b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
print(f"torch bf16 matmul {n}^3: {rate(lambda: a @ b, 2 * n**3):.0f} TFLOP/s")
a8 = a.to(torch.float8_e4m3fn); b8 = b.t().contiguous().to(torch.float8_e4m3fn).t(); one = torch.ones((), device="cuda")
print(f"torch fp8 _scaled_mm {n}^3: {rate(lambda: torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16), 2 * n**3):.0f} TFLOP/s")
EOF
fi

if [[ " $PHASES " == *" tests "* ]]; then
  tests="$BUILD/test_cuda"
  if [[ " $PHASES " == *" alltests "* ]]; then tests=$(ls "$BUILD"/test_* 2>/dev/null); fi
  for t in $tests; do
    [ -x "$t" ] || continue
    echo "== $t"
    start=$(date +%s)
    "$t" --gtest_filter="$FILTER" --gtest_brief=1
    rc=$?
    [ "$rc" = 0 ] || status=1
    echo "== $t: rc $rc in $(( $(date +%s) - start )) s"
  done
fi

# ---- phases capi and python (C ABI and Python module on the device) --------------------------
# capi = the C ABI's CUDA tests (test_c_api --gtest_filter='*CApiCuda*': the leading * takes the
# parameterized suite Schemes/CApiCuda too). python = qmoe's Python module for this machine's
# python3: only the nanobind extension is compiled here (python/standalone, seconds), linked
# against $BUILD/libqmoe_c.so, then pytest python/tests (NumPy on the CPU + torch CUDA).
# A skipped CUDA test counts as a failure in both: a GPU is expected here.
ABSBUILD=$(cd "$BUILD" 2>/dev/null && pwd || echo "$BUILD")
if [[ " $PHASES " == *" capi "* ]]; then
  if [ -x "$BUILD/test_c_api" ]; then
    echo "== $BUILD/test_c_api --gtest_filter='*CApiCuda*'"
    start=$(date +%s)
    capilog=$(mktemp)
    # Its RPATH names the build folder it was linked in; here libqmoe_c.so sits in $BUILD.
    LD_LIBRARY_PATH="$ABSBUILD:${LD_LIBRARY_PATH:-}" "$BUILD/test_c_api" --gtest_filter='*CApiCuda*' \
      --gtest_brief=1 2>&1 | tee "$capilog"
    rc=${PIPESTATUS[0]}
    if grep -aq '^\[  SKIPPED \]' "$capilog"; then echo "== capi: tests SKIPPED on a GPU machine"; rc=1; fi
    [ "$rc" = 0 ] || status=1
    echo "== test_c_api: rc $rc in $(( $(date +%s) - start )) s"
    rm -f "$capilog"
  else
    echo "== capi: $BUILD/test_c_api not built; phase skipped"
  fi
fi
if [[ " $PHASES " == *" python "* ]]; then
  echo "== python: qmoe._qmoe for $(command -v python3) against $ABSBUILD/libqmoe_c.so"
  start=$(date +%s)
  rc=0
  pyb=$(mktemp -d)
  genflag=""; command -v ninja >/dev/null && genflag="-GNinja"
  if [ ! -f "$BUILD/libqmoe_c.so" ]; then
    echo "== python: $BUILD/libqmoe_c.so is missing"; rc=1
  elif ! nbdir=$(python3 -m nanobind --cmake_dir); then
    echo "== python: nanobind is not installed for python3"; rc=1
  elif ! cmake -S python/standalone -B "$pyb" $genflag -DQMOE_PREBUILT_LIB="$ABSBUILD/libqmoe_c.so" \
         -DQMOE_PYTHON_OUT="$ABSBUILD/python/qmoe" -DPython_EXECUTABLE="$(command -v python3)" \
         -Dnanobind_ROOT="$nbdir" >"$pyb/configure.log" 2>&1; then
    cat "$pyb/configure.log"; echo "== python: configuring python/standalone failed"; rc=1
  elif ! cmake --build "$pyb" -j "$(nproc)"; then
    echo "== python: building the extension failed"; rc=1
  else
    echo "== python: extension built in $(( $(date +%s) - start )) s; pytest python/tests"
    # QMOE_BUILD_DIR: qmoe/__init__.py takes _qmoe from $BUILD/python/qmoe, conftest.py the qmoe CLI.
    QMOE_BUILD_DIR="$ABSBUILD" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 \
      timeout 300 python3 -m pytest -q -rs -p no:cacheprovider python/tests 2>&1 | tee "$pyb/pytest.log"
    rc=${PIPESTATUS[0]}
    if grep -aq '^SKIPPED.*test_torch_cuda' "$pyb/pytest.log"; then
      echo "== python: torch CUDA tests SKIPPED on a GPU machine"; rc=1
    fi
  fi
  [ "$rc" = 0 ] || status=1
  echo "== python: rc $rc in $(( $(date +%s) - start )) s"
  rm -rf "$pyb"
fi

if [[ " $PHASES " == *" bench "* ]]; then
  # One process for every row up to M = 1024, then one process per (shape, scheme) at M = 4096:
  # on the H200 a process that had already run a shape's smaller rows died at deepseek-v3 M = 4096
  # ("illegal instruction"), while the same row alone (and under compute-sanitizer) ran clean.
  SHAPES="llama4-scout mixtral-8x7b qwen3-30b-a3b deepseek-v3 gpt-oss-120b"
  BOUT="${OUT:-.}"
  if "$BUILD"/qmoe bench --help 2>/dev/null | grep -q -- "--backend"; then
    echo "== qmoe bench --backend cuda"
    "$BUILD"/qmoe bench --backend cuda --shape all --m 1,16,64,256,1024 --scheme bf16,fp8,int4 \
      --json "$BOUT/bench_small.json" || status=1
    for sh in $SHAPES; do for sc in bf16 fp8 int4; do
      "$BUILD"/qmoe bench --backend cuda --shape $sh --m 4096 --scheme $sc --json "$BOUT/b4096_${sh}_$sc.json" || status=1
    done; done
    python3 - "$BOUT" <<'PYEOF' || true
import json, glob, sys
rows = []
for f in sorted(glob.glob(sys.argv[1] + "/bench_small.json")) + sorted(glob.glob(sys.argv[1] + "/b4096_*.json")):
    try:
        d = json.load(open(f))
    except Exception as e:
        print("unreadable", f, e); continue
    rows += d if isinstance(d, list) else d.get("rows", [d])
json.dump(rows, open(sys.argv[1] + "/bench_all.json", "w"), indent=1)
print("bench rows:", len(rows))
PYEOF
    rm -f "$BOUT"/b4096_*.json
  else
    echo "== bench through the bench hooks (qmoe bench not available in this build)"
    rm -f "$BOUT/bench.jsonl"
    QMOE_GPU_BENCH=1 QMOE_BENCH_OUT="$BOUT/bench.jsonl" QMOE_BENCH_MS=",1,16,64,256,1024," \
      "$BUILD"/test_cuda --gtest_filter='CudaBench.AnchorRows' | tee "$BOUT/bench_small.log" || status=1
    ceil=$(grep -a -o 'read [0-9.]* TB/s, copy [0-9.]* TB/s, bf16 [0-9.]* TFLOP/s, fp8 [0-9.]*' "$BOUT/bench_small.log" |
           awk '{print $2","$8","$11}')
    for sh in $SHAPES; do for sc in 0 1 2; do
      QMOE_GPU_BENCH=1 QMOE_BENCH_OUT="$BOUT/bench.jsonl" QMOE_BENCH_MS=",4096," QMOE_BENCH_SHAPES=$sh \
        QMOE_BENCH_SCHEMES=$sc QMOE_BENCH_CEIL="$ceil" "$BUILD"/test_cuda --gtest_filter='CudaBench.AnchorRows' |
        grep -a "^| $sh" || status=1
    done; done
  fi
fi
echo "== done, status $status"
exit $status
