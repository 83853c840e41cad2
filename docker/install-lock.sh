#!/usr/bin/env bash
# The hash-locked wheels of one lock into a new venv at /opt/venv: the single install of the Dockerfile's
# stages `stack` (the image's lock) and `jit-cross-stack` (the build machine's lock). Both RUN this same
# file, so when the two locks are one file the two stages are one cache record.
#   install-lock.sh LOCK [REQUIREMENTS...]
# From the RUN: INDEX_URL (the build argument), the uv cache at /root/.cache/uv, the CA bundle as the
# secret `ca` (a TLS-intercepting proxy; never a layer).
# --require-hashes + --no-deps + --only-binary: exactly the locked wheels, never an sdist build, for the
# platform the lock names (uv installs another arch's wheels as files; nothing of them runs here).
set -euo pipefail
lock=${1:?usage: install-lock.sh LOCK [REQUIREMENTS...]}
requirements=()
for file in "$@"; do requirements+=(-r "$file"); done
if [ -s /run/secrets/ca ]; then export SSL_CERT_FILE=/run/secrets/ca; fi
export UV_LINK_MODE=copy UV_NO_CONFIG=1
# The lock's header names the wheel platform it was resolved for (`sparkserve lock`).
platform=$(sed -n '/(--python-platform /{s/.*(--python-platform \([^)]*\)).*/\1/p;q;}' "$lock")
if [ -z "$platform" ]; then echo "$lock names no --python-platform: regenerate it with sparkserve lock" >&2; exit 1; fi
/opt/build-tools/bin/uv venv -q --python /usr/bin/python3 /opt/venv
/opt/build-tools/bin/uv pip install -q --python /opt/venv/bin/python --python-platform "$platform" \
    --index-url "${INDEX_URL:?the build argument INDEX_URL}" --require-hashes --no-deps --only-binary :all: \
    "${requirements[@]}"
/opt/venv/bin/python -c "import importlib.metadata as m; print('vllm', m.version('vllm'), 'flashinfer', m.version('flashinfer-python'), 'torch', m.version('torch'))"
echo "wheels for $platform"
