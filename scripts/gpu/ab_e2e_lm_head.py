# SPDX-License-Identifier: Apache-2.0
"""End-to-end A/B of the online MXFP4 lm_head on random-weight gpt-oss-120b.

A: quantization_config={"linear": "mxfp4", "lm_head": "mxfp4"}  (patched path)
B: quantization_config={"linear": "mxfp4"}                       (lm_head bf16)
Both with linear_backend="marlin"; everything else equal.

Two 120b engines do not fit on one GPU at once and the patch (deliberately)
has no runtime switch for the lm_head, so A and B cannot be interleaved inside
one process. The driver therefore runs one child process per engine, in the
order given by --order (default "AB": build A, measure, tear down, build B,
measure). Inside each child, pp2048 and tg128 samples are interleaved round by
round (--rounds, default 10). Use --order ABBA (or ABAB) for a drift check
when the time budget allows (each engine init is ~3 min).

Timing definitions (batch 1, 2048 random prompt token ids, temperature 0,
ignore_eos):
    pp2048 = 2048 / t(prefill + 1 token)
    tg128  = 128 / (t(129 tokens) - t(1 token))       (same round)

    python3 scripts/gpu/ab_e2e_lm_head.py --out ab.json [--rounds 10] [--order AB]
"""

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The gpt-oss config comes from the project's own dummy-checkpoint writer (src/ need not be installed).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
from sparkserve.testing.gptoss_dummy import EOS_IDS, gpt_oss_config

CONFIGS = {
    "A": {"linear": "mxfp4", "lm_head": "mxfp4"},
    "B": {"linear": "mxfp4"},
}
LOG_PATTERNS = [
    r"lm_head quantized online to MXFP4.*",
    r"lm_head is not quantized online to MXFP4.*",
    r"Using \S+ for MXFP4 GEMM.*",
    r"Quantizing \d+ layers of types.*",
    r"Using \S+ attention backend out of potential backends.*",
    r"FlashInfer attention-sink decode kernel: .*",
    r"artifactory.*",
]


def write_model_dir(path, size):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(gpt_oss_config(size), f, indent=1)
    with open(os.path.join(path, "generation_config.json"), "w") as f:
        json.dump({"do_sample": False, "eos_token_id": EOS_IDS}, f)


def child(args):
    """Build one engine, measure --rounds interleaved pp/tg rounds."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    t0 = time.perf_counter()
    llm = LLM(model=args.model_dir, load_format="dummy", skip_tokenizer_init=True,
              max_model_len=4096, max_num_seqs=1, enable_prefix_caching=False,
              gpu_memory_utilization=args.gpu_mem,
              quantization_config=CONFIGS[args.child], linear_backend="marlin",
              **({"attention_backend": args.attention_backend} if args.attention_backend else {}))
    init_s = time.perf_counter() - t0
    rng = random.Random(0)

    def run(n_out):
        prompt = TokensPrompt(
            prompt_token_ids=[rng.randrange(1000, 199000) for _ in range(2048)])
        sp = SamplingParams(max_tokens=n_out, ignore_eos=True, temperature=0,
                            detokenize=False)
        t = time.perf_counter()
        out = llm.generate([prompt], sp, use_tqdm=False)
        dt = time.perf_counter() - t
        assert len(out[0].outputs[0].token_ids) == n_out
        return dt

    for _ in range(2):  # warm-up
        run(8)
    t1, t129 = [], []
    for _ in range(args.rounds):
        t1.append(run(1))
        t129.append(run(129))
    pp = [2048 / t for t in t1]
    tg = [128 / (b - a) for a, b in zip(t1, t129, strict=True)]
    res = dict(config=args.child, quantization_config=CONFIGS[args.child],
               init_s=round(init_s, 1), t1_s=t1, t129_s=t129,
               pp2048_tps=pp, tg128_tps=tg)
    print("RESULT " + json.dumps(res), flush=True)


def summarize(xs):
    return dict(median=statistics.median(xs), min=min(xs), max=max(xs), n=len(xs))


def driver(args):
    model_dir = args.model_dir or tempfile.mkdtemp(prefix="gptoss-cfg-")
    write_model_dir(model_dir, args.size)
    env = dict(os.environ)
    runs = []
    for i, label in enumerate(args.order):
        log_path = f"{args.out}.{i}{label}.log"
        cmd = [sys.executable, os.path.abspath(__file__), "--child", label,
               "--model-dir", model_dir, "--rounds", str(args.rounds),
               "--gpu-mem", str(args.gpu_mem), "--out", args.out]
        if args.attention_backend:
            cmd += ["--attention-backend", args.attention_backend]
        t = time.perf_counter()
        with open(log_path, "w") as log:
            p = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                               timeout=args.child_timeout)
        with open(log_path) as f:
            text = f.read()
        result = next((json.loads(line[len("RESULT "):])
                       for line in text.splitlines() if line.startswith("RESULT ")),
                      None)
        lines = sorted({m.group(0).strip() for pat in LOG_PATTERNS
                        for m in re.finditer(pat, text)})
        runs.append(dict(label=label, rc=p.returncode, wall_s=time.perf_counter() - t,
                         log=log_path, engine_log_lines=lines, result=result))
        print(json.dumps(runs[-1]["engine_log_lines"]), flush=True)
    out = dict(order=args.order, rounds=args.rounds, size=args.size,
               interleaving=("per-engine processes in --order; pp/tg interleaved "
                             "within each engine (no in-process A/B swap)"),
               runs=runs, summary={})
    for label in sorted(set(args.order)):
        pp = [x for r in runs if r["label"] == label and r["result"]
              for x in r["result"]["pp2048_tps"]]
        tg = [x for r in runs if r["label"] == label and r["result"]
              for x in r["result"]["tg128_tps"]]
        if pp:
            out["summary"][label] = dict(pp2048_tps=summarize(pp),
                                         tg128_tps=summarize(tg),
                                         quantization_config=CONFIGS[label])
    if "A" in out["summary"] and "B" in out["summary"]:
        a, b = out["summary"]["A"], out["summary"]["B"]
        out["summary"]["tg128_A_over_B"] = (a["tg128_tps"]["median"]
                                            / b["tg128_tps"]["median"])
        out["summary"]["pp2048_A_over_B"] = (a["pp2048_tps"]["median"]
                                             / b["pp2048_tps"]["median"])
    print(json.dumps(out["summary"], indent=1))
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    return 0 if all(r["rc"] == 0 for r in runs) else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="ab_e2e_lm_head.json")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--order", default="AB", help="engine order, e.g. AB, ABBA")
    ap.add_argument("--size", default="120b", choices=["120b", "20b"])
    ap.add_argument("--model-dir", default=None)
    ap.add_argument("--gpu-mem", type=float, default=0.88)
    ap.add_argument("--child-timeout", type=int, default=420)
    ap.add_argument("--child", choices=sorted(CONFIGS), default=None)
    ap.add_argument("--attention-backend", default=None, help="e.g. FLASHINFER (default: vLLM's choice)")
    a = ap.parse_args()
    if a.child:
        child(a)
    else:
        sys.exit(driver(a))
