#!/usr/bin/env bash
# CI phase: compile single units of production-only FlashInfer JIT modules inside the CI image (built by
# 20-image.sh, which holds the patched FlashInfer and the nvcc wheels) and check their SASS:
# `sparkserve jit unit-check` with docker/jit-unit-checks.toml (flashinfer patch 0002: one N = 8 and one
# N = 16 SwapAB unit of the SM120 CUTLASS fused MoE, built for sm_121a and sm_120f in one compile each).
# One nvcc process per unit (nvcc --threads=1), as many at once as the machine has cores: the two units
# fit a 2-core CI machine at ~5 GB each; times and peak RSS: docs/porting/flashinfer-0002-*.md.
#   JIT_UNITS="name ..." compiles only those units of the file.
source "$(dirname "$0")/lib.sh"
cd "$CI_ROOT"
trap 'stop_docker' EXIT

ensure_docker
"$DOCKER" image inspect "$CI_IMAGE" >/dev/null 2>&1 \
    || { log "no image $CI_IMAGE: the image phase (scripts/ci/20-image.sh) builds it"; exit 1; }
tools=$(ensure_cuda_tools)
out="$CI_WORK/jit-units"
rm -rf "$out" && mkdir -p "$out"

only=()
for u in ${JIT_UNITS:-}; do only+=(--unit "$u"); done

# The image's sparkserve runs the check; the checks file comes from the work tree. Generated sources
# and objects stay in the container (--rm); the report comes back through $out, written as this user (the
# image's own, uid 10001, may not write a folder of the CI machine).
timed jit-unit-check "$DOCKER" run --rm --network none --user "$(id -u):$(id -g)" \
    -v "$tools:/opt/ci-tools:ro" \
    -v "$CI_ROOT/docker/jit-unit-checks.toml:/opt/ci-checks/jit-unit-checks.toml:ro" \
    -v "$out:/opt/ci-out" \
    --entrypoint python "$CI_IMAGE" -m sparkserve jit unit-check \
    --checks /opt/ci-checks/jit-unit-checks.toml --cuobjdump /opt/ci-tools/nvidia/cu13/bin/cuobjdump \
    --report /opt/ci-out/jit-unit-report.json --jobs "$(nproc)" "${only[@]}"
