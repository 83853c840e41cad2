"""Kernel rules that follow from the profiles: every shipped profile and every matrix configuration is
covered, a run that selected what its profile says is valid, and each forbidden selection (the
must_not rules) makes a run invalid. The negative cases are listed here, not read from the rules file,
so deleting a must_not rule fails this test."""

from __future__ import annotations

from pathlib import Path

import pytest
from sparkserve_lab.runstore import Run
from sparkserve_lab.validate import kernels, profile_rules
from synthetic_logs import Selection

from sparkserve.errors import SparkserveError
from sparkserve.serving import profiles, speculative
from sparkserve.serving.kinds import ProfileError
from sparkserve.serving.profile import Profile

ROOT = Path(__file__).resolve().parents[2]
RULES_FILE = ROOT / "lab" / "configs" / "engine-kernels.toml"
RULES = profile_rules.load(RULES_FILE)
SHIPPED = sorted(p.stem for p in (ROOT / "profiles").glob("*.env"))
CPU_PROFILE = "tests/docker/cpu/cpu.env"


def resolve(name: str, **overrides: str) -> Profile:
    return profiles.resolve(name, ROOT, overrides=overrides).profile


def validate(p: Profile, sel: Selection) -> kernels.Validation:
    return kernels.check(profile_rules.rules_for(p, RULES, "t"), sel.text())


# vllm/0007's line at load (the engine log of a stored A/B's arm B)
GEMV_LINE = ("MXFP4 MoE GEMV: decode batches of up to 8 tokens run two Triton kernels over Marlin's weights "
             "(VLLM_MXFP4_MOE_GEMV)")


# The step patches' switches are engine variables, not profile settings: a rule keyed on `env.NAME` must
# ask for the patch's log line exactly when the configuration sets the variable.
STEP_SWITCHES = [
    ("VLLM_FLASH_ATTN_GROUP_AOT", "fa3-group-aot",
     "FlashAttention AOT schedule on for a KV cache group of 18 layer(s), window (127, 0)"),
    ("VLLM_ROUTER_BIAS_GEMV", "router-bias-gemv",
     "Router GEMM: a Triton GEMV with the bias for up to 4 tokens (VLLM_ROUTER_BIAS_GEMV)"),
    ("VLLM_MXFP4_MOE_GEMV_MMA", "moe-gemv-mma",
     "MXFP4 MoE GEMV: the K loop on tensor cores, mma.sync from Gluon kernels (VLLM_MXFP4_MOE_GEMV_MMA)"),
]


def expected(p: Profile, env: dict[str, str] | None = None) -> Selection:
    """What vLLM selects for this profile, as the rules and the recorded logs say; with the resolved
    environment `env`, the log lines of the step switches it sets too."""
    sm90 = p.target == "hopper"
    kernel = "HummingMxFp4LinearKernel" if sm90 else "MarlinMxFp4LinearKernel"
    moe = {"cutlass-mxfp8": "FLASHINFER_CUTLASS_MXFP4_MXFP8", "marlin": "MARLIN", "marlin-gemv": "MARLIN",
           "triton": "TRITON", "auto": "TRITON" if sm90 else "MARLIN"}[p.moe_backend]
    attention = {"flashinfer": "FLASHINFER", "flash_attn": "FLASH_ATTN", "triton": "TRITON_ATTN",
                 "auto": "FLASH_ATTN"}[p.attention_backend]
    quantized = tuple(f"attn.{x}_proj" for x in ("qkv", "o") if x in p.mxfp4_layers)
    mxfp4_dense = quantized or "lm_head" in p.mxfp4_layers  # the lm_head's kernel logs the GEMM line too
    sel = Selection(moe=moe, attention=attention, linear=kernel if mxfp4_dense else None, quantized=quantized,
                    lm_head=kernel if "lm_head" in p.mxfp4_layers else None,
                    sink_decode=("xqa" if p.sink_decode == "auto" else p.sink_decode)
                    if attention == "FLASHINFER" else None,
                    fa_version=(3 if sm90 else 2) if attention == "FLASH_ATTN" else None)
    if p.moe_backend == "marlin-gemv":
        cap = (env or {}).get("VLLM_MXFP4_MOE_GEMV_MAX_TOKENS", "8")
        sel.extra += (GEMV_LINE.replace("up to 8 tokens", f"up to {cap} tokens"),)
    sel.extra += tuple(line for var, _, line in STEP_SWITCHES if (env or {}).get(var) == "1")
    if p.moe_backend == "cutlass-mxfp8":
        # decode sizes on SwapAB tactics (ids of the SM12x list: 4/16 and 5/17), prefill on the default
        sel.moe_tactics = ((1, 4, 16), (64, 5, 17), (8192, 0, 9))
        sel.moe_tactic_source = "table /var/lib/sparkserve/moe-tactics.json, bucket 1" \
            if p.moe_tactics == "table" else "autotuner"
    sel.engine.update(kv_cache_dtype="fp8_e4m3" if p.kv_cache_dtype.startswith("fp8") else p.kv_cache_dtype,
                      enforce_eager=str(not p.cuda_graphs), enable_prefix_caching=str(p.prefix_caching))
    return sel


# One-variable ablations of every shipped profile (what the level-6 matrices are made of).
ABLATIONS = [
    {"MOE_BACKEND": "marlin"}, {"MOE_BACKEND": "triton"}, {"ATTENTION_BACKEND": "flash_attn"},
    {"ATTENTION_BACKEND": "triton"}, {"KV_CACHE_DTYPE": "auto"}, {"CUDA_GRAPHS": "off"},
    {"MXFP4_LAYERS": "moe"}, {"MXFP4_LAYERS": "moe,lm_head"}, {"MXFP4_LAYERS": "moe,qkv,o"},
    {"MXFP4_LAYERS": "moe,qkv,o,lm_head"}, {"VLLM_FLASHINFER_SINK_DECODE": "fa2"}, {"PREFIX_CACHING": "off"},
]
# MOE_TACTICS=table applies to FlashInfer's CUTLASS MoE only (other backends refuse it).
CUTLASS_MOE_PROFILES = ["desktop-sm120", "spark"]


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profiles_are_covered_and_validate(name: str) -> None:
    p = resolve(name)
    assert profile_rules.uncovered(p, RULES) == []
    v = validate(p, expected(p))
    assert v.valid, [c.to_dict() for c in v.failures()]


@pytest.mark.parametrize("name", CUTLASS_MOE_PROFILES)
def test_the_tactic_table_ablation_is_covered(name: str) -> None:
    p = resolve(name, MOE_TACTICS="table")
    assert profile_rules.uncovered(p, RULES) == []
    v = validate(p, expected(p))
    assert v.valid, [c.to_dict() for c in v.failures()]


@pytest.mark.parametrize("name", SHIPPED)
@pytest.mark.parametrize("overrides", ABLATIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_every_valid_ablation_is_covered(name: str, overrides: dict[str, str]) -> None:
    p = resolve(name, **overrides)
    assert profile_rules.uncovered(p, RULES) == [], overrides
    v = validate(p, expected(p))
    assert v.valid, [c.to_dict() for c in v.failures()]


def test_the_cpu_profile_is_covered() -> None:
    p = resolve(CPU_PROFILE)
    assert profile_rules.uncovered(p, RULES) == []


def test_uncovered_names_the_claim() -> None:
    only_base = [r for r in RULES if r.name in ("gpt-oss on CUDA", "CUDA_GRAPHS=on")]
    missing = profile_rules.uncovered(resolve("spark"), only_base)
    assert "MOE_BACKEND=cutlass-mxfp8" in missing and "MXFP4 lm_head" in missing


# (profile, overrides, what goes wrong in the log, the must_not that must catch it)
NEGATIVE = [
    ("spark", {}, dict(moe="MARLIN"), "moe must not match /MARLIN/"),
    ("spark", {}, dict(moe="FLASHINFER_CUTLASS_MXFP4_BF16"), "moe must not match /_BF16$/"),
    ("spark", {}, dict(moe="TRITON"), "moe must not match /TRITON/"),
    ("spark", {}, dict(extra=("No Mxfp4 MoE backend supports activation mxfp8",)),
     "log must not match /No Mxfp4 MoE backend supports activation/"),
    ("spark", {}, dict(moe_tactics=((1, 4, 16), (16, 0, 6))),
     "moe_tactic must not match /^tokens=([1-9]|[1-5][0-9]|6[0-4]) .*(no_swap|unknown#)/"),
    ("spark", {"MOE_TACTICS": "table"}, dict(moe_tactic_source="autotuner"),
     "moe_tactic must not match /source=autotuner/"),
    ("spark-graph-safe", {}, dict(moe="FLASHINFER_CUTLASS_MXFP4_MXFP8"), "moe must not match /CUTLASS/"),
    ("spark-graph-safe", {}, dict(moe="TRITON"), "moe must not match /TRITON/"),
    ("hopper-h100", {"MOE_BACKEND": "triton"}, dict(moe="MARLIN"), "moe must not match /MARLIN/"),
    ("hopper-h100", {}, dict(moe="TRITON"), "moe must not match /TRITON/"),
    ("hopper-h100", {}, dict(moe="CUTLASS_MXFP4"), "moe must not match /CUTLASS/"),
    ("spark", {}, dict(attention="FLASH_ATTN", fa_version=2), "attention must not match /^FLASH_ATTN$/"),
    ("spark", {}, dict(attention="TRITON_ATTN"), "attention must not match /TRITON_ATTN/"),
    ("spark", {}, dict(fa_version=2), "log must not match /Using FlashAttention version/"),
    ("hopper-h100", {}, dict(attention="FLASHINFER", fa_version=None),
     "attention must not match /FLASHINFER/"),
    ("hopper-h100", {}, dict(sink_decode="xqa"), "sink_decode must not match /.+/"),
    ("hopper-h100", {}, dict(attention="TRITON_ATTN"), "attention must not match /TRITON_ATTN/"),
    ("hopper-h100", {"ATTENTION_BACKEND": "triton"}, dict(attention="FLASH_ATTN", fa_version=None),
     "attention must not match /^FLASH_ATTN$/"),
    ("spark", {"MXFP4_LAYERS": "moe,lm_head"}, dict(quantized=("attn.qkv_proj",)),
     "log must not match /attn\\.qkv_proj: \\d+/"),
    ("spark", {"MXFP4_LAYERS": "moe,lm_head"}, dict(quantized=("attn.o_proj",)),
     "log must not match /attn\\.o_proj: \\d+/"),
    ("hopper-h100", {"MXFP4_LAYERS": "moe"}, dict(linear="MarlinMxFp4LinearKernel"),
     "linear must not match /(?i)mxfp4/"),
    ("hopper-h100", {"MXFP4_LAYERS": "moe,lm_head"}, dict(quantized=("attn.qkv_proj",)),
     "log must not match /attn\\.qkv_proj: \\d+/"),
    ("hopper-h100", {}, dict(extra=("lm_head is not quantized online to MXFP4: tied embeddings.",)),
     "log must not match /lm_head is not quantized online to MXFP4/"),
    ("hopper-h100", {"MXFP4_LAYERS": "moe"}, dict(lm_head="HummingMxFp4LinearKernel"),
     "lm_head must not match /.+/"),
]


@pytest.mark.parametrize("name,overrides,wrong,rule", NEGATIVE, ids=[n[3] for n in NEGATIVE])
def test_each_forbidden_selection_invalidates_the_run(name: str, overrides: dict[str, str],
                                                      wrong: dict[str, object], rule: str) -> None:
    p = resolve(name, **overrides)
    sel = expected(p)
    for key, value in wrong.items():
        setattr(sel, key, value)
    v = validate(p, sel)
    assert not v.valid
    assert rule in [c.name for c in v.failures()], [c.name for c in v.failures()]


def test_cpu_must_not_rules() -> None:
    p = resolve(CPU_PROFILE)
    cpu_engine = {"device_config": "cpu", "quantization": "None", "kv_cache_dtype": "auto",
                  "enforce_eager": "True", "enable_prefix_caching": "True"}
    sel = Selection(moe="MARLIN", attention="CPU_ATTN", fa_version=None, engine=cpu_engine)
    assert "moe must not match /.+/" in [c.name for c in validate(p, sel).failures()]
    sel = Selection(moe="", attention="CPU_ATTN", fa_version=None, linear="MarlinMxFp4LinearKernel",
                    engine=cpu_engine)
    sel.moe = "X"
    fails = [c.name for c in validate(p, sel).failures()]
    assert "linear must not match /MxFp4|Mxfp4|NvFp4/" in fails


# --- SPECULATIVE: the engine line names the method, an Eagle3 draft says it was loaded ------------------

# vLLM 0.33.0's V2 model runner (an H200 engine log of 2026-11-26); its V1 runner logs the lm_head choice
EAGLE_LOADED = ("(EngineCore pid=5446) INFO 11-26 17:41:06 [eagle3_utils.py:39] Using Eagle3 auxiliary "
                "layers from model: (2, 18, 33)")
EAGLE_LOADED_V1 = ("Detected EAGLE model with distinct lm_head weights. Keeping separate lm_head weights "
                   "from the target model.")


@pytest.mark.parametrize("method", speculative.METHODS[1:])  # every method a profile may set
def test_speculation_is_covered_and_validates(method: str) -> None:
    p = resolve("hopper-h100", SPECULATIVE=method, MXFP4_LAYERS="moe")
    assert profile_rules.uncovered(p, RULES) == []
    sel = expected(p)
    sel.engine["speculative_config"] = f"SpeculativeConfig(method='{method}', model=None, num_spec_tokens=3)"
    base = sel.extra
    for loaded in (EAGLE_LOADED, EAGLE_LOADED_V1):
        sel.extra = base + ((loaded,) if method == "eagle3" else ())
        v = validate(p, sel)
        assert v.valid, [c.to_dict() for c in v.failures()]


def test_a_run_that_did_not_speculate_is_invalid() -> None:
    p = resolve("hopper-h100", SPECULATIVE="eagle3", MXFP4_LAYERS="moe")
    sel = expected(p)
    base = sel.extra
    sel.engine["speculative_config"] = "None"
    sel.extra = (*base, EAGLE_LOADED)
    assert not validate(p, sel).valid
    sel.engine["speculative_config"] = "SpeculativeConfig(method='eagle3', model='/d', num_spec_tokens=3)"
    sel.extra = base  # no draft loaded
    failures = [c.to_dict() for c in validate(p, sel).failures()]
    assert failures and "EAGLE" in str(failures)


def test_speculation_without_its_rules_is_uncovered() -> None:
    others = [r for r in RULES if not r.name.startswith("SPECULATIVE")]
    speculating = resolve("hopper-h100", SPECULATIVE="eagle3", MXFP4_LAYERS="moe")
    missing = profile_rules.uncovered(speculating, others)
    assert "SPECULATIVE=eagle3" in missing and "an Eagle3 draft loaded next to the target" in missing


def test_a_configuration_naming_a_profile_has_that_profiles_rules() -> None:
    """One truth per profile: a configuration of the rules file that says it is a shipped profile gets
    exactly the rules the profile_rule tables give that profile."""
    import tomllib

    tables = tomllib.loads(RULES_FILE.read_text())["configurations"]
    named = {n: str(t["profile"]) for n, t in tables.items() if "profile" in t}
    assert named, "the rules file names at least one shipped profile"
    loaded = kernels.load_kernel_rules(RULES_FILE)
    for name, profile in named.items():
        res = profiles.resolve(profile, ROOT)
        derived = profile_rules.rules_for(res.profile, RULES, name, res.env)
        got = loaded[name]
        assert (got.must, got.must_not, got.engine) == (derived.must, derived.must_not, derived.engine), name


def test_the_shipped_hopper_profile_passes_its_configuration_and_its_ablations_do_not() -> None:
    """Engine logs of stored A/Bs: vllm/0009's A/B's arm B served hopper-h100 as shipped (Marlin's MoE with
    vllm/0007's kernels for up to 8 tokens, their K loop on tensor cores, vllm/0006's switch on, vllm/0005's
    off); vllm/0005's A/B's arm B the same with the CUDA-core loop; the step switches' A/B's arm B had both
    step switches on, its arm A neither; the MoE GEMV A/B's arm A Marlin alone; the Marlin A/B's arm A
    Triton's MoE; an earlier A/B's arm B had no MXFP4 qkv/o. The configuration that is the shipped profile
    accepts the first and refuses the others, each for what differs (every one of them also lacks the
    tensor-core line, checked once)."""
    rules = kernels.load_kernel_rules(RULES_FILE)["hopper-profile-sm90"]
    def check(hardware: str, run: str) -> kernels.Validation:
        log = Run(ROOT / "lab" / "results" / hardware / run).engine_log()
        assert log is not None
        return kernels.validate_log(rules, RULES_FILE, log)

    def failing(v: kernels.Validation) -> list[str]:
        return [c.line() for c in v.failures() if "the K loop on tensor cores" not in c.line()]

    shipped = check("nvidia-h200", "20261204T164211Z-hopper-h100-vllm_mxfp4_moe_gemv_max_tokens-8-"
                                   "vllm_mxfp4_moe_gemv_mma-1-load-ec16")
    cuda_cores = check("nvidia-h200", "20261203T165229Z-hopper-h100-vllm_flash_attn_group_aot-0-load-1d2e")
    both_on = check("nvidia-h200", "20261202T150813Z-hopper-h100-vllm_flash_attn_group_aot-1-"
                                   "vllm_router_bias_gemv-1-load-3ce9")
    both_off = check("nvidia-h200", "20261202T150801Z-hopper-h100-load-65fb")
    marlin = check("nvidia-h200", "20261202T113751Z-hopper-h100-load-08eb")
    triton = check("nvidia-h200-x4", "20261127T033920Z-hopper-h100-ab-e3ed")
    bf16 = check("nvidia-h100-80gb-hbm3", "20261125T082438Z-hopper-h100-mxfp4_layers-moe-lm_head-ab-b9ef")
    assert shipped.valid, [c.line() for c in shipped.failures()]
    (mma,) = [c.line() for c in cuda_cores.failures()]
    assert "the K loop on tensor cores" in mma
    (on,) = failing(both_on)
    assert "FlashAttention AOT" in on
    (off,) = failing(both_off)
    assert "Router GEMM" in off
    assert any("MXFP4 MoE GEMV" in line for line in failing(marlin))
    assert not triton.valid and any("moe must" in line for line in failing(triton))
    assert not bf16.valid and any("qkv_proj" in line for line in failing(bf16))


def test_a_configuration_naming_a_profile_may_not_carry_rules_of_its_own(tmp_path: Path) -> None:
    (tmp_path / "configs").mkdir()
    (tmp_path / "profiles").mkdir()
    env = (ROOT / "profiles" / "hopper-h100.env").read_text()
    (tmp_path / "profiles" / "hopper-h100.env").write_text(env)
    text = RULES_FILE.read_text().replace('profile = "hopper-h100"\n',
                                          'profile = "hopper-h100"\nmust = { linear = ["^Marlin"] }\n')
    (tmp_path / "configs" / "engine-kernels.toml").write_text(text)
    with pytest.raises(kernels.SparkserveError, match="rules of its own"):
        kernels.load_kernel_rules(tmp_path / "configs" / "engine-kernels.toml")


@pytest.mark.parametrize("var,rule,line", STEP_SWITCHES, ids=[s[1] for s in STEP_SWITCHES])
def test_an_engine_switch_needs_its_log_line(var: str, rule: str, line: str) -> None:
    others_off = {s[0]: "0" for s in STEP_SWITCHES}  # the shipped profile sets them all
    res = profiles.resolve("hopper-h100", ROOT, overrides={**others_off, var: "1"})
    rules = profile_rules.rules_for(res.profile, RULES, "t", res.env)
    assert rule in rules.description
    cap = {k: v for k, v in res.env.items() if k == "VLLM_MXFP4_MOE_GEMV_MAX_TOKENS"}  # not a step switch
    text = expected(res.profile, cap).text()
    missing = kernels.check(rules, text)
    assert not missing.valid
    with_line = text + f"(EngineCore pid=1) INFO 11-27 12:00:00 [x.py:1] {line}\n"
    assert kernels.check(rules, with_line).valid
    unset = profiles.resolve("hopper-h100", ROOT, overrides=others_off)
    off_rules = profile_rules.rules_for(unset.profile, RULES, "t", unset.env)
    assert f"{rule}," not in f"{off_rules.description}," and f"{rule}-off" in off_rules.description
    assert kernels.check(off_rules, text).valid  # at 0 the patch's line must be absent
    assert not kernels.check(off_rules, with_line).valid
    assert f"{rule}," not in f"{profile_rules.rules_for(res.profile, RULES, 't').description},"  # no env


def test_an_env_key_must_name_a_variable(tmp_path: Path) -> None:
    bad = tmp_path / "rules.toml"
    bad.write_text('[[profile_rule]]\nname = "x"\nwhen = { "env.lower-case" = "1" }\n')
    with pytest.raises(Exception, match="unknown `when` key"):
        profile_rules.load(bad)


@pytest.mark.parametrize(("text", "message"), [
    # `when` takes a value or a list of values, as text
    ('[[profile_rule]]\nname = "x"\nwhen = { target = 1 }\n',
     "profile_rule[1].when.target: expected a string or a list of strings, got 1"),
    ('[[profile_rule]]\nname = "x"\nwhen = { target = ["cpu", 1] }\n',
     "profile_rule[1].when.target[2]: expected a string, got 1"),
    ('[[profile_rule]]\nname = "x"\nwhen = { target = "cpu" }\nmust = { moe = "MARLIN" }\n',
     "profile_rule[1].must.moe: expected a list of strings, got 'MARLIN'"),
    # a misspelt key would otherwise drop its patterns without a word
    ('[[profile_rule]]\nname = "x"\nwhen = { target = "cpu" }\nmust_nt = { moe = [".+"] }\n',
     "profile_rule[1].must_nt: unknown key (known: engine, must, must_not, name, source, when)"),
])
def test_the_rules_file_types_are_read_by_its_schema(tmp_path: Path, text: str, message: str) -> None:
    bad = tmp_path / "rules.toml"
    bad.write_text(text)
    with pytest.raises(SparkserveError) as info:
        profile_rules.load(bad)
    assert str(info.value) == f"{bad}: {message}"


# vllm/0008's line at load: its switch is a token count, so its rule matches the value by a pattern.
GEMM_VAR = "VLLM_MXFP4_MOE_GEMM_MIN_TOKENS"
GEMM_LINE = ("MXFP4 MoE GEMM: batches of 1024 tokens or more run two Triton grouped GEMMs over Marlin's "
             f"weights ({GEMM_VAR})")


@pytest.mark.parametrize("value", ["-5", "1e3"])
def test_a_token_count_the_patched_vllm_cannot_parse_never_reaches_the_rules(value: str) -> None:
    with pytest.raises(ProfileError, match=GEMM_VAR):
        profiles.resolve("hopper-h100", ROOT, overrides={GEMM_VAR: value})


@pytest.mark.parametrize("value,on", [("1024", True), ("8", True), ("0", False), (None, False),
                                      ("01", False)])
def test_a_token_count_switch_needs_its_log_line_when_positive(value: str | None, on: bool) -> None:
    res = profiles.resolve("hopper-h100", ROOT, overrides={} if value is None else {GEMM_VAR: value})
    rules = profile_rules.rules_for(res.profile, RULES, "t", res.env)
    off = value in (None, "0")  # any other value: no rule of either kind applies
    names = f"{rules.description},"
    assert ("moe-gemm," in names) is on and ("moe-gemm-off," in names) is off
    text = expected(res.profile, res.env).text()
    with_line = text + f"(EngineCore pid=1) INFO 12-02 12:00:00 [x.py:1] {GEMM_LINE}\n"
    assert kernels.check(rules, text).valid is not on
    assert kernels.check(rules, with_line).valid is not off
