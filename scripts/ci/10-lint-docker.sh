#!/usr/bin/env bash
# CI phase: lint the Dockerfiles (hadolint; the production one holds the dev target too) and resolve the
# compose files (`docker compose config`, tests/deploy): every serving profile, whose resolved environment
# must pass the entrypoint's profile check, and the dev container's services.
source "$(dirname "$0")/lib.sh"
cd "$CI_ROOT"

ensure_hadolint
ensure_compose
"$HADOLINT" --version
"$HADOLINT" Dockerfile tests/docker/cpu/Dockerfile
echo "hadolint: Dockerfile tests/docker/cpu/Dockerfile clean"

# Every serving profile through `docker compose config`, checked by the entrypoint's own parser.
DOCKER="$DOCKER" "$CI_VENV/bin/pytest" -q -p no:cacheprovider -m "not engine" tests/deploy
