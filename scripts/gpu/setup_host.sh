#!/usr/bin/env bash
# On the lent GPU host: install the staged pinned stack into /tmp/site and apply the patch
# series to it with `sparkserve patches apply --site` (the same step the image runs).
# Chunks: /tmp/stage (see ../shared/gpu-host/README.md); unidiff for sparkserve: /tmp/pylib.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash /tmp/stage/install_bundle.sh /tmp/stage /tmp/site
export PYTHONPATH=$PWD/src:/tmp/pylib
python3 -m sparkserve patches apply --site /tmp/site
python3 -m sparkserve patches apply --site /tmp/site   # second call: a no-op from the manifest
if [[ -n "${OUT:-}" ]]; then cp /tmp/site/sparkserve_patch_manifest.json "$OUT/"; fi
