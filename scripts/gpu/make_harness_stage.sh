#!/usr/bin/env bash
# Build .stage/harness: what `sparkserve level 6` needs on a lent GPU host beyond the pinned-stack bundle
# (../shared/gpu-host/: vllm-0.33.0 lock minus skip.txt, on top of host-packages.txt) and /tmp/pylib.
#
#   llama_benchy/ (+ dist-info)        llama-benchy 0.4.0, pure Python, installed --no-deps: everything it
#                                      imports is already there (aiohttp, numpy, requests, tabulate,
#                                      tokenizers: host; pydantic: bundle). Its PyPI dependency `asyncio`
#                                      is the 2015 backport and must NOT be installed: on PYTHONPATH it
#                                      would shadow the standard library's asyncio.
#   o200k_harmony-tokenizer.json.gz    the gpt-oss tokenizer, rebuilt from oss-harmony's embedded o200k
#                                      vocabulary and checked against it (sparkserve gptoss-dummy)
#   MANIFEST                           versions and sha256 sums
#
# sparkserve itself runs from src/ (PYTHONPATH); PyYAML comes from the host (host-packages.txt).
# Needs a Python with pip, and one with tokenizers + oss-harmony for the tokenizer (the CPU venv has both).
# Then, with a CPython 3.12 (pyenv) when there is one, checks the imports the way the host will see them.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DEST=${1:-$ROOT/.stage/harness}
TOKPY=${SPARKSERVE_TOKENIZER_PYTHON:-$ROOT/.work/cpu-venv/bin/python}
PY312=${PY312:-}
if [[ -z "$PY312" ]]; then   # a real 3.12 (pyenv's shim exits non-zero when 3.12 is not the selected version)
    for c in "$HOME"/.pyenv/versions/3.12*/bin/python3.12 /usr/local/bin/python3.12 /usr/bin/python3.12; do
        if [[ -x "$c" ]] && "$c" -V > /dev/null 2>&1; then PY312=$c; break; fi
    done
fi
rm -rf "$DEST"; mkdir -p "$DEST"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 -d "$tmp/w" llama-benchy==0.4.0
python3 -m pip install -q --no-deps --no-compile --target "$DEST" "$tmp"/w/llama_benchy-0.4.0-*.whl
rm -rf "$DEST/bin"   # its console script names this machine's interpreter; sparkserve runs python -m llama_benchy

PYTHONPATH="$ROOT/src" "$TOKPY" -m sparkserve.testing gptoss-dummy --out "$tmp/ckpt" --size 120b \
    --save-tokenizer "$DEST/o200k_harmony-tokenizer.json.gz" > /dev/null

{
    echo "made $(date -u +%FT%TZ) by scripts/gpu/make_harness_stage.sh"
    echo "llama-benchy==0.4.0 (--no-deps; wheel sha256 $(sha256sum "$tmp"/w/*.whl | cut -d' ' -f1))"
    echo "o200k_harmony-tokenizer.json.gz sha256 $(sha256sum "$DEST/o200k_harmony-tokenizer.json.gz" | cut -d' ' -f1)"
    echo "tokenizer built with: $("$TOKPY" -c 'import importlib.metadata as m; print("oss-harmony", m.version("oss-harmony"), "tokenizers", m.version("tokenizers"))')"
} > "$DEST/MANIFEST"

if [[ -n "$PY312" && -x "$PY312" ]]; then
    # The host's view: CPython 3.12, sparkserve from src, the harness on PYTHONPATH, no llama-benchy elsewhere.
    # (Its other imports come from the host/bundle and /tmp/pylib (unidiff); here from a throwaway venv.)
    "$PY312" -m venv "$tmp/v312"
    "$tmp/v312/bin/pip" install -q aiohttp numpy requests tabulate tokenizers pydantic pyyaml oss-harmony unidiff 2>&1 \
        | grep -v "^WARNING" || true
    PYTHONPATH="$ROOT/src:$DEST" "$tmp/v312/bin/python" - "$DEST" <<'EOF'
import sys, importlib.util
from pathlib import Path
import asyncio, llama_benchy, yaml
assert Path(llama_benchy.__file__).is_relative_to(sys.argv[1]), llama_benchy.__file__
assert "site-packages" in asyncio.__file__ or "/lib/python3.12/" in asyncio.__file__, asyncio.__file__
from llama_benchy import __main__, client, corpus, runner, results, config  # noqa: F401
from sparkserve.harness.bench.driver import benchy_command
from sparkserve import harness_cli  # noqa: F401
from sparkserve.testing import gptoss_dummy
from sparkserve.harness.levels import matrix, smoke, benchmark  # noqa: F401
cmd = benchy_command()
assert cmd[1:] == ["-m", "llama_benchy"], cmd
print("harness imports OK on", sys.version.split()[0], "->", " ".join(cmd))
EOF
    PYTHONPATH="$ROOT/src:$DEST" "$tmp/v312/bin/python" -m llama_benchy --version
    PYTHONPATH="$ROOT/src:$DEST" "$tmp/v312/bin/python" -m sparkserve.testing gptoss-dummy --out "$tmp/ckpt312" \
        --tokenizer-json "$DEST/o200k_harmony-tokenizer.json.gz" > /dev/null && echo "tokenizer checks OK on 3.12"
else
    echo "no CPython 3.12 here: host-view import check skipped" >&2
fi
du -sh "$DEST"; cat "$DEST/MANIFEST"
