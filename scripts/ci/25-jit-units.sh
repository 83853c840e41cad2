#!/usr/bin/env bash
# CI phase: compile single units of production-only FlashInfer JIT modules and check their SASS:
# `sparkserve jit unit-check` with docker/jit-unit-checks.toml (flashinfer patch 0002: one N = 8 and one
# N = 16 SwapAB unit of the SM120 CUTLASS fused MoE, built for sm_121a and sm_120f in one compile each).
# The units are compiled for the DGX Spark, whose image uses that module: in the JIT stage of the arm64
# build (22-image-arm64.sh tags it; an amd64 image holding the patched FlashInfer, the nvcc wheels and the
# aarch64 cross compiler), device code by nvcc, host code by aarch64-linux-gnu-g++: the objects are arm64
# ELFs whose fatbins must carry real block-scaled MMA and no trap-only kernel.
# One nvcc process per unit (nvcc --threads=1), as many at once as the machine has cores and 6 GB of
# available memory each (a unit peaks at ~5 GB; lib.sh compile_jobs); times and peak RSS:
# docs/porting/flashinfer-0002-*.md.
#   JIT_UNITS="name ..." compiles only those units of the file.
#   JIT_UNITS_IMAGE / JIT_UNITS_TARGET_ARCH: another image and host arch (e.g. the amd64 CI image, amd64).
source "$(dirname "$0")/lib.sh"
cd "$CI_ROOT"
trap 'stop_docker' EXIT

IMAGE=${JIT_UNITS_IMAGE:-$CI_JIT_ARM64}
TARGET_ARCH=${JIT_UNITS_TARGET_ARCH:-arm64}
ensure_docker
"$DOCKER" image inspect "$IMAGE" >/dev/null 2>&1 \
    || { log "no image $IMAGE: the image phases (scripts/ci/20-image.sh, 22-image-arm64.sh) build it"; exit 1; }
tools=$(ensure_cuda_tools)
out="$CI_WORK/jit-units"
rm -rf "$out" && mkdir -p "$out"

only=()
for u in ${JIT_UNITS:-}; do only+=(--unit "$u"); done

# The image's sparkserve runs the check (the build stages' entry point: the JIT stage has only the patch
# and JIT verbs); the checks file comes from the work tree. Generated sources and objects stay in the
# container (--rm, its workspace in /tmp); the report comes back through $out, written as this user.
timed jit-unit-check "$DOCKER" run --rm --network none --user "$(id -u):$(id -g)" \
    -e FLASHINFER_WORKSPACE_BASE=/tmp/jit-units -e HOME=/tmp \
    -v "$tools:/opt/ci-tools:ro" \
    -v "$CI_ROOT/docker/jit-unit-checks.toml:/opt/ci-checks/jit-unit-checks.toml:ro" \
    -v "$out:/opt/ci-out" \
    --entrypoint python "$IMAGE" -m sparkserve.cli.imagebuild jit unit-check \
    --checks /opt/ci-checks/jit-unit-checks.toml --cuobjdump /opt/ci-tools/nvidia/cu13/bin/cuobjdump \
    --target-arch "$TARGET_ARCH" --cross-link-dir /opt/cross/link \
    --report /opt/ci-out/jit-unit-report.json --jobs "$(compile_jobs 6)" "${only[@]}"
