#!/usr/bin/env bash
# Builds a variant `qmoe` CLI for A/B measurements on the GPU machine: the given src/cuda files
# compiled again (with extra nvcc defines, or from the working tree of another commit that was
# checked out or stashed in between) into a copy of BUILD's libqmoe_cuda.a, then the CLI relinked
# against that copy and stripped: BUILD/var/NAME/qmoe. Pack it next to the normal build (xz
# compresses the SASS about 3x), e.g. after scripts/pack_gpu_build.sh:
#   xz -c BUILD/var/NAME/qmoe > build-gpu-carry/qmoe_NAME.xz
# and run the two binaries alternately in one device call.
#   scripts/build_variant.sh [-B BUILD] NAME "DEFINES" file.cu [file.cu ...]
# Example (the sixth session's math-free decode kernel):
#   scripts/build_variant.sh nocompute "-DQMOE_D90_NOCOMPUTE" moe_decode.cu
# Every .cu that includes a changed header must be listed (e.g. all of them after a change to
# device_common.cuh).
set -euo pipefail
BUILD=build-cuda
if [ "${1:-}" = "-B" ]; then BUILD=$2; shift 2; fi
[ $# -ge 3 ] || { sed -n '2,14p' "$0"; exit 2; }
NAME=$1; DEFS=$2; shift 2
cd "$BUILD"
mkdir -p "var/$NAME"
cp libqmoe_cuda.a "var/$NAME/"
pids=()
for f in "$@"; do
  obj=CMakeFiles/qmoe_cuda.dir/src/cuda/$f.o
  cmd=$(ninja -t commands "$obj" | tail -1 | sed -E 's/ -MD -MT [^ ]+ -MF [^ ]+//; s/ -o [^ ]+$//')
  [ -n "$cmd" ] || { echo "build_variant: no compile command for $obj in $BUILD" >&2; exit 1; }
  # shellcheck disable=SC2086
  $cmd $DEFS -o "var/$NAME/$f.o" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
(cd "var/$NAME" && ar r libqmoe_cuda.a $(printf '%s.o ' "$@"))
link=$(ninja -t commands qmoe_cli | tail -1 | sed -E 's/^: && //; s/ && :$//')
link=${link/ libqmoe_cuda.a / var\/$NAME\/libqmoe_cuda.a }
link=$(echo "$link" | sed -E "s# -o qmoe # -o var/$NAME/qmoe #")
eval "$link"
strip "var/$NAME/qmoe"
ls -la "var/$NAME/qmoe"
