#!/usr/bin/env bash
# Packs what scripts/gpu_tests.sh needs from a CUDA build into one small folder for the GPU
# machine (the tree that travels there is capped at 64 MiB, tracked files included):
#   scripts/pack_gpu_build.sh [--build] [BUILD_DIR] [DEST]      (defaults: build-cuda, build-gpu-carry)
#     copies test_cuda, test_c_api, qmoe and libqmoe_c.so, strips them and stores them as
#     DEST/pack.tar.xz (xz -9e in one thread: its 64 MiB window spans the four files, whose kernels
#     are alike, so about 17 MiB where -6 in threads gave 45); prints the sizes. --build first
#     builds those targets in BUILD_DIR; without it, binaries older than a source are reported.
#     QMOE_PACK_EXTRA="FILE:NAME ..." adds more binaries to the same pack under NAME, e.g. a variant CLI
#     of scripts/build_variant.sh for an A/B (one pack: xz shares the kernels' bytes between them, so a
#     second CLI cost ~1 MiB there in s50, ~17 MiB as a pack of its own)
#   scripts/pack_gpu_build.sh --unpack [DEST]                   (on the GPU machine)
#     extracts DEST/pack.tar.xz into DEST, after which: scripts/gpu_tests.sh DEST
set -euo pipefail
FILES="test_cuda test_c_api qmoe libqmoe_c.so"
TARGETS="test_cuda test_c_api qmoe_cli qmoe_c"

if [ "${1:-}" = "--unpack" ]; then
  DEST=${2:-build-gpu-carry}
  # tar's xz filter when the xz program is there, else Python's tarfile (lzma is in the stdlib).
  if command -v xz >/dev/null; then
    tar -xJf "$DEST/pack.tar.xz" -C "$DEST"
  else
    python3 -c 'import sys, tarfile
t = tarfile.open(sys.argv[1])
t.extractall(sys.argv[2], **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))' "$DEST/pack.tar.xz" "$DEST"
  fi
  ls -l "$DEST"
  exit 0
fi

BUILD_FIRST=0
if [ "${1:-}" = "--build" ]; then BUILD_FIRST=1; shift; fi
BUILD=${1:-build-cuda}
DEST=${2:-build-gpu-carry}

if [ "$BUILD_FIRST" = 1 ]; then
  cmake --build "$BUILD" -j2 --target $TARGETS
else
  # Any source newer than a binary means that binary is stale (a dry run of ninja cannot tell:
  # it stops at CMake's glob check).
  for f in $FILES; do
    [ -f "$BUILD/$f" ] || continue
    dirs="src include"
    case $f in
      test_cuda) dirs="$dirs tests/cuda tests/common" ;;
      test_c_api) dirs="$dirs tests/c_api tests/common" ;;
      qmoe) dirs="$dirs tools" ;;
    esac
    newer=$(find $dirs -type f -newer "$BUILD/$f" 2>/dev/null | head -3 | tr '\n' ' ')
    if [ -n "$newer" ]; then
      echo "pack: WARNING: $BUILD/$f is older than $newer(cmake --build $BUILD --target $TARGETS, or pass --build)" >&2
    fi
  done
fi

missing=""
for f in $FILES; do [ -f "$BUILD/$f" ] || missing="$missing $f"; done
if [ "$missing" = " test_c_api" ]; then
  echo "pack: $BUILD lacks test_c_api; packing without it (the GPU phase capi will say so)" >&2
elif [ -n "$missing" ]; then
  echo "pack: $BUILD lacks:$missing (cmake --build $BUILD --target $TARGETS)" >&2
  exit 1
fi
# A CPU-only library would make every CUDA Python test skip: refuse it.
if [ "$(nm "$BUILD/libqmoe_c.so" 2>/dev/null | grep -c ' cudaLaunchKernel$')" = 0 ]; then
  echo "pack: $BUILD/libqmoe_c.so has no CUDA runtime in it (not a CUDA build?)" >&2
  exit 1
fi

rm -rf "$DEST"
mkdir -p "$DEST/staging"
present=""
for f in $FILES; do
  [ -f "$BUILD/$f" ] || continue
  cp "$BUILD/$f" "$DEST/staging/$f"
  strip --strip-unneeded "$DEST/staging/$f"  # host symbols only; the fatbins stay
  present="$present $f"
done
for x in ${QMOE_PACK_EXTRA:-}; do
  cp "${x%%:*}" "$DEST/staging/${x##*:}"
  strip --strip-unneeded "$DEST/staging/${x##*:}"
  present="$present ${x##*:}"
done
tar -C "$DEST/staging" -cf - $present | xz -9e > "$DEST/pack.tar.xz"
rm -rf "$DEST/staging"

# (summed over every file: xargs splits the list, so du -c's last total covered only the last batch
# and reported 18 of the 44 MB, thirty-sixth session)
tracked=$(git ls-files -z | xargs -0 stat -c %s 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
packed=$(du -cb "$DEST" | tail -1 | cut -f1)
echo "pack: $DEST/pack.tar.xz holds$present from $BUILD"
echo "pack: $(( packed / 1024 )) KiB packed; with the tracked tree ($(( tracked / 1024 )) KiB)" \
     "$(( (packed + tracked) / 1048576 )) MiB of the 64 MiB that travel"
if [ $(( packed + tracked )) -gt $(( 64 * 1048576 )) ]; then
  echo "pack: WARNING: over the 64 MiB the device call takes; pack fewer files" >&2
fi
