#!/usr/bin/env bash
# CUDA compiler launcher (CMakeLists.txt: CUDA_COMPILER_LAUNCHER of qmoe_cuda). Runs the compile
# command it is given, passes its output through, and fails the compile when ptxas reports that it
# serialized wgmma instructions ("(C7514) / (C7512) ... Potential Performance Loss: wgmma.mma_async
# instructions are serialized", whatever the reason code): the build still succeeds without the launcher, but such a Hopper GEMM runs
# 1.3-1.7x slower (measured on the H200 in the eighth session: a loop form in a persistent kernel
# made ptxas serialize every HGMMA, and nothing but a benchmark showed it).
#   scripts/nvcc_guard.sh COMMAND [ARGS...]
set -u
out=$(mktemp)
"$@" >"$out" 2>&1
rc=$?
cat "$out" >&2
if grep -q "wgmma.mma_async instructions are serialized" "$out"; then
  echo "nvcc_guard: ptxas serialized wgmma instructions (C7512 / C7514 ...) in this file; see the lines above" >&2
  rc=1
fi
rm -f "$out"
exit $rc
