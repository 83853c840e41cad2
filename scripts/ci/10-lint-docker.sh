#!/usr/bin/env bash
# CI phase: lint the Dockerfiles (hadolint) and resolve the compose file for every serving profile
# (`docker compose config`); the resolved environment of each must pass the entrypoint's profile check.
source "$(dirname "$0")/lib.sh"
cd "$CI_ROOT"

ensure_hadolint
ensure_compose
"$HADOLINT" --version
"$HADOLINT" Dockerfile tests/docker/cpu/Dockerfile
echo "hadolint: Dockerfile tests/docker/cpu/Dockerfile clean"

profiles=()
for f in profiles/*.env; do profiles+=("$(basename "$f" .env)"); done
(( ${#profiles[@]} >= 3 )) || { log "expected at least 3 serving profiles, found ${profiles[*]}"; exit 1; }
for name in "${profiles[@]}"; do
    out="$CI_WORK/compose-$name.json"
    SPARKSERVE_PROFILE=$name "$DOCKER" compose -f docker-compose.yml --profile tools config --format json > "$out"
    # What compose hands the container must be a valid profile (same parser as the entrypoint).
    "$CI_VENV/bin/python" - "$out" "$name" <<'PY'
import json, sys
from sparkserve.serving import flags, profile
cfg = json.load(open(sys.argv[1]))
serve = cfg["services"]["serve"]
env = {k: v for k, v in serve["environment"].items() if v is not None}
p = profile.parse(env)
assert p.name == sys.argv[2], (p.name, sys.argv[2])
ports = serve["ports"][0]
assert ports["host_ip"] == "127.0.0.1" and ports["target"] == 8000, ports
assert serve["init"] is True and serve["restart"] == "unless-stopped", serve
assert "sparkserve.serving.health" in " ".join(serve["healthcheck"]["test"]), serve["healthcheck"]
assert any(v["target"] == "/data/huggingface" for v in serve["volumes"]), serve["volumes"]
assert cfg["services"]["preflight"]["command"] == ["--print-flags"]
print(f"compose config {sys.argv[2]}: ok ->", " ".join(flags.vllm_argv(p, python="python")[3:]))
PY
done

# An unknown serving profile must not resolve.
if SPARKSERVE_PROFILE=no-such-profile "$DOCKER" compose -f docker-compose.yml config -q 2>/dev/null; then
    log "compose config accepted a missing profile file"; exit 1
fi
# The CPU test override resolves too (the model folder only has to be named here).
SPARKSERVE_TEST_MODEL_DIR=/nonexistent "$DOCKER" compose -f docker-compose.yml \
    -f tests/docker/cpu/compose.override.yml config -q
echo "compose config: ${#profiles[@]} profiles + CPU override ok"
