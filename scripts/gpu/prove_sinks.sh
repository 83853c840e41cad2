#!/usr/bin/env bash
# Issue 4 kernel proofs on a GPU host (after setup_host.sh): fa2 decode with sinks vs the float32
# reference (bf16 and fp8 KV), then decode kernel times fa2-sinks vs XQA vs FA3 at batch 1, 4096 ctx.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
SPARKSERVE_RESULTS=$OUT python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_fa2_decode_sinks.py \
    > "$OUT/fa2_decode_sinks_pytest.log" 2>&1; echo "pytest rc=$?"; tail -5 "$OUT/fa2_decode_sinks_pytest.log"
python3 scripts/gpu/bench_decode_sinks.py --out "$OUT/decode_sinks_bench.json" > "$OUT/bench.log" 2>&1
echo "bench rc=$?"; tail -15 "$OUT/bench.log"
