#!/usr/bin/env bash
# CI phase: the dev container (the Dockerfile's target dev, docker-compose.dev.yml; docs/DEV.md), right
# after the image phase so the production build's layers are in the build cache.
#   1. build `--target dev` on the debootstrapped base: its `stack` step must come from the cache (the
#      production image's wheel layer, no second download or install of the stack);
#   2. fresh trees with `sparkserve dev init` (throwaway, in .work/ci/dev-src: the tests edit them);
#   3. the `dev` service up (tests/docker/dev/compose.ci.yml: no GPU, no network): its entrypoint installs
#      the trees editable, offline, and checks where vllm/flashinfer import from;
#   4. tests/devcontainer inside it: imports from the mounts, a Python edit without reinstall, a .cuh edit
#      that the FlashInfer JIT rebuilds for 12.1a, the round trip through `patches export`;
#   5. the entrypoint refuses to start without trees, saying to run `sparkserve dev init`.
source "$(dirname "$0")/lib.sh"
cd "$CI_ROOT"

DEV_IMAGE=$CI_DEV_IMAGE
TREES="$CI_WORK/dev-src"  # the compose override points SPARKSERVE_DEV_SRC at /workspace/.work/ci/dev-src
COMPOSE=("$DOCKER" compose -p dev-ci -f docker-compose.dev.yml -f tests/docker/dev/compose.ci.yml)
export SPARKSERVE_DEV_IMAGE=$DEV_IMAGE

cleanup() {
    local rc=$?
    if "$DOCKER" info >/dev/null 2>&1; then
        if (( rc != 0 )); then
            log "dev container logs (last 40 lines):"
            "${COMPOSE[@]}" logs --no-color dev 2>&1 | tail -40 >&2 || true
        fi
        "${COMPOSE[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
    fi
    rm -rf "$TREES"
    stop_docker
    exit "$rc"
}
trap cleanup EXIT

ensure_docker
ensure_compose
timed base-trixie ensure_base_image trixie "$CI_BASE_TRIXIE"

echo "-- build the Dockerfile's target dev: the production stack layer comes from the cache"
build_dev() {
    "$DOCKER" build --progress plain --network host --platform linux/amd64 --secret "id=ca,src=$(host_ca)" \
        --build-arg "BASE_IMAGE=$CI_BASE_TRIXIE" --target dev -t "$DEV_IMAGE" . > "$CI_WORK/dev-build.log" 2>&1
}
timed dev-build build_dev || { tail -40 "$CI_WORK/dev-build.log" >&2; exit 1; }
step_cached() {  # step_cached LOG STAGE: was the (first) RUN step of STAGE taken from the cache?
    local n
    n=$(grep -m1 -E "^#[0-9]+ \[$2 [0-9]+/[0-9]+\] RUN" "$1" | cut -d' ' -f1)
    [[ -n "$n" ]] || { log "no RUN step of stage $2 in $1"; exit 1; }
    grep -q "^$n CACHED" "$1"
}
# each step of the stack and dev stages with its outcome (CACHED, or DONE and its time)
awk '/^#[0-9]+ \[(stack|dev) [0-9]+\/[0-9]+\]/ { if (!($1 in name)) order[++k] = $1; name[$1] = substr($0, length($1) + 2, 80) }
     /^#[0-9]+ (DONE|CACHED)/ { state[$1] = $2 " " $3 }
     END { for (i = 1; i <= k; i++) printf "  %-80s %s\n", name[order[i]], state[order[i]] }' "$CI_WORK/dev-build.log"
step_cached "$CI_WORK/dev-build.log" stack \
    || { log "the dev build re-installed the wheels: the production image's stack layer was not reused"; exit 1; }
echo "  [stack] RUN (docker/install-lock.sh): CACHED, reused from the production build"
echo "image $DEV_IMAGE: $(( $("$DOCKER" image inspect -f '{{.Size}}' "$DEV_IMAGE") / 1000000 )) MB"

echo "-- fresh trees (sparkserve dev init)"
rm -rf "$TREES"
timed dev-init "$CI_VENV/bin/sparkserve" dev init --dir "$TREES"

echo "-- the dev service: editable installs from the mounted trees, offline, and the origin check"
"${COMPOSE[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
timed dev-up "${COMPOSE[@]}" up -d --wait dev
"${COMPOSE[@]}" logs --no-color dev | sed 's/^/  /'

echo "-- tests/devcontainer inside the container"
timed dev-tests "${COMPOSE[@]}" exec -T dev python -m pytest -p no:cacheprovider -q -s -rA --durations=0 \
    tests/devcontainer

echo "-- without trees, the entrypoint says to run sparkserve dev init and starts nothing"
refuses_without_trees() {
    local out rc=0
    out=$("${COMPOSE[@]}" run --rm -T -e SPARKSERVE_DEV_SRC=/workspace/.work/ci/no-trees dev true 2>&1) || rc=$?
    echo "$out" | tail -2 | sed 's/^/  /'
    (( rc == 3 )) && grep -q "run \`sparkserve dev init\` in the checkout" <<<"$out" \
        || { log "expected exit 3 telling to run sparkserve dev init, got $rc"; return 1; }
}
timed dev-no-trees refuses_without_trees
echo "dev container ok"
