#!/usr/bin/env bash
# Run on the amd64 image that 20-image.sh built, by 22-image-arm64.sh beside its emulated checks (by
# 20-image.sh when the arm64 phase is skipped); no phase of its own. Alone: `scripts/ci/image-evidence.sh
# <pytest lib>`. Two proofs of the patch series, in
# throwaway containers of that image (no GPU, no network), the checkout mounted at /w:
#   - the hunk-mutation table of the patches whose Proof tests run on a CPU (tests/image): every hunk
#     reverted alone must make some test fail (`sparkserve-lab mutate --fork`);
#   - vLLM's own tests of the changed modules, CPU subset, unpatched then patched: no outcome may change
#     (`sparkserve-lab proof upstream-tests --subset cpu`).
# Both are lab verbs: the image carries the product only, so the checkout's lab/src (mounted with it at
# /w) goes on PYTHONPATH; its other needs (PyYAML) are in the image's stack.
# The runtime image has no git; both verbs apply diffs with it, so the host's git is lent read-only.
# PYLIB: pytest and what vLLM's test conftest imports, installed by the calling phase.
source "$(dirname "$0")/lib.sh"
cd "$CI_ROOT"
PYLIB=${1:?usage: image-evidence.sh PYTEST_LIB}
CACHE="${SPARKSERVE_CACHE:-$HOME/.cache/sparkserve}"
SITE=/opt/venv/lib/python3.13/site-packages
# The patches whose Proof header names tests under tests/image (vllm/0001's test needs a GPU; FlashInfer's
# are GPU numerics and compile proofs).
MUTATE_PATCHES=(vllm/0002 vllm/0003 vllm/0004 vllm/0005 vllm/0006 vllm/0007 vllm/0008 vllm/0009 vllm/0010)

lab_in_image() {  # lab_in_image ARGS... : sparkserve-lab ARGS in a throwaway root container (it edits the site)
    "$DOCKER" run --rm --network none --user 0 -v "$(command -v git):/usr/local/bin/git:ro" \
        -v "$PYLIB:/opt/ci-pytest:ro" -v "$CI_ROOT:/w:ro" -v "$CACHE:/opt/ci-cache:ro" -w /w \
        -e SPARKSERVE_ROOT=/w -e SPARKSERVE_CACHE=/opt/ci-cache -e PYTHONPATH=/opt/ci-pytest:/w/src:/w/lab/src \
        --entrypoint python "$CI_IMAGE" -m sparkserve_lab "$@"
}

# Both run at once: each is one Python process at a time, and the machine has two cores.
echo "-- vLLM's own tests of the changed modules (subset cpu), unpatched then patched: no outcome may change"
echo "   (in the background; its output follows the mutation table)"
upstream_log="$CI_WORK/upstream-tests-cpu.log"
beside "$upstream_log" upstream-tests-cpu lab_in_image proof upstream-tests --upstream vllm --site "$SITE" --subset cpu
upstream_pid=$BESIDE_PID

echo "-- the hunk-mutation table of the CPU-tested patches (${MUTATE_PATCHES[*]}): no hunk may survive"
mutate_rc=0
timed mutate-cpu lab_in_image mutate "${MUTATE_PATCHES[@]}" --site "$SITE" --tests-under tests/image \
    --fork || mutate_rc=$?

upstream_rc=0
joined "$upstream_pid" "$upstream_log" "vLLM's own tests (subset cpu):" || upstream_rc=$?
(( mutate_rc == 0 )) || { log "a hunk survived its reversal, or the mutation run failed (exit $mutate_rc)"; exit 1; }
(( upstream_rc == 0 )) || { log "vLLM's own tests changed outcome, or did not run (exit $upstream_rc)"; exit 1; }
