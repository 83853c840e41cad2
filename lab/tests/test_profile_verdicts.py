"""A shipped profile keeps what the stored end-to-end A/Bs of its variables, judged again from their
runs, leave it with."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sparkserve.serving import envfile, flags
from sparkserve.serving.profile import parse
from sparkserve.serving.settings import VARIABLES, default_of

if TYPE_CHECKING:
    from sparkserve_lab.runstore import Run

ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / "lab" / "results"


def read_env(path: Path) -> dict[str, str]:
    return envfile.read(path)


def qcfg(argv: list[str]) -> dict[str, object]:
    import json

    return dict(json.loads(argv[argv.index("--quantization-config") + 1]))


def _newest_ab(profile: str, variable: str) -> Run:
    """The newest stored A/B of `profile` over `variable` (the store lists by hardware)."""
    from sparkserve_lab.runstore import Store

    records = [r for r in Store(STORE).abs() if r.metadata().get("profile") == profile
               and variable in (r.metadata().get("overrides") or {})]
    assert records, f"no stored A/B of {profile} over {variable}"
    return max(records, key=lambda r: str(r.metadata()["created"]))


def _decode_judgement(record: Run) -> tuple[str, set[str]]:
    """A stored A/B's decode verdicts, judged again from its runs (one per concurrency), and their
    decisions."""
    from sparkserve_lab import ab
    from sparkserve_lab.runstore import Store

    verdicts = ab.recompute(record, Store(STORE)).items()
    decode = [v for k, v in verdicts if k == "decode" or k.startswith("decode ")]
    return "; ".join(v["verdict"] for v in decode), {v["decision"] for v in decode}


def _ab_choice(profile: str, variable: str) -> tuple[str, str]:
    """The value of `variable` the newest stored A/B of `profile` over it leaves the profile with, and the
    decode verdict, judged again from its runs: B's value only when B is faster (for an A/B over several
    concurrencies: faster at one and slower at none); when B is slower, or the rounds cannot decide, the
    profile keeps arm A's (what it shipped when the A/B ran; a variable its file leaves out: the
    setting's default, or "" for an engine variable, which is then unset)."""
    from sparkserve_lab import ab
    from sparkserve_lab.runstore import Store

    store = Store(STORE)
    newest = _newest_ab(profile, variable)
    meta = newest.metadata()
    verdict, decisions = _decode_judgement(newest)
    if ab.FASTER in decisions and ab.SLOWER not in decisions:
        return str(meta["overrides"][variable]), verdict
    first_a = store.get(f"{newest.hardware}/{meta['arms']['A']['runs'][0]}")
    env = first_a.metadata()["profile"]["env"]
    if variable in env:
        return str(env[variable]), verdict
    if variable not in VARIABLES:
        return "", verdict  # an engine variable the profile leaves unset
    return str(default_of(variable)), verdict


def test_hopper_profile_ships_what_the_abs_chose() -> None:
    """The hopper-h100 defaults of MXFP4_LAYERS and MOE_BACKEND are what the stored end-to-end A/Bs,
    judged by rounds, leave it with. The MXFP4_LAYERS A/B's 5 rounds all went A's way but are too few for
    the sign test (undecided): the profile keeps the value it shipped, and its comment says that the A/B
    has not decided. MOE_BACKEND: the newest A/B over it decides, its record named in the profile; the
    engine gets vLLM's backend on its command line and a patch's switch in its environment."""
    from sparkserve.serving.settings import parse_mxfp4_layers
    from sparkserve.serving.vllmconfig import MOE_BACKEND_NAMES, engine_environment

    text = (ROOT / "profiles" / "hopper-h100.env").read_text()
    p = parse(read_env(ROOT / "profiles" / "hopper-h100.env"))
    assert p.target == "hopper"
    layers, verdict = _ab_choice("hopper-h100", "MXFP4_LAYERS")
    assert p.mxfp4_layers == parse_mxfp4_layers(layers, True), verdict
    if verdict.startswith("undecided"):
        assert "undecided" in text
    moe = p.moe_backend  # which A/Bs decide it: test_hopper_profile_caps_the_moe_kernels_where_marlin_wins
    argv = flags.vllm_argv(p, python="py")
    assert qcfg(argv) == {"linear": "mxfp4", "lm_head": "mxfp4"}
    assert argv[argv.index("--moe-backend") + 1] == MOE_BACKEND_NAMES[moe]
    assert engine_environment(moe) == ({"VLLM_MXFP4_MOE_GEMV": "1"} if moe == "marlin-gemv" else {})
    assert "--linear-backend" not in argv  # vLLM prefers Humming on sm_90


def _kernel_decisions(profile: str) -> dict[int, tuple[str, str, str, str]]:
    """Per concurrency, the newest stored A/B of `profile` between Marlin's MoE and vllm/0007's kernels
    over Marlin's weights (MOE_BACKEND marlin against marlin-gemv, either arm A), judged again from its runs:
    the kernels' decision there (faster, slower, or neither), its verdict, the record and when it ran."""
    from sparkserve_lab import ab
    from sparkserve_lab.runstore import Store

    store = Store(STORE)
    flip = {ab.FASTER: ab.SLOWER, ab.SLOWER: ab.FASTER}
    newest: dict[int, tuple[str, str, str, str]] = {}
    for record in store.abs():
        meta = record.metadata()
        if meta.get("profile") != profile or "MOE_BACKEND" not in (meta.get("overrides") or {}):
            continue
        first_a = store.get(f"{record.hardware}/{meta['arms']['A']['runs'][0]}")
        a, b = first_a.metadata()["profile"]["env"].get("MOE_BACKEND"), meta["overrides"]["MOE_BACKEND"]
        if {a, b} != {"marlin", "marlin-gemv"}:
            continue
        for key, v in ab.recompute(record, store).items():
            if key != "decode" and not key.startswith("decode "):
                continue
            # "decode pp2048/tg128 c4" over several concurrencies; "decode" over the preset's one
            c = int(key.rsplit(" c", 1)[1]) if " c" in key else int(meta["preset"]["concurrency"][0])
            decision = v["decision"] if b == "marlin-gemv" else flip.get(v["decision"], v["decision"])
            if c not in newest or str(meta["created"]) > newest[c][0]:
                newest[c] = (str(meta["created"]), decision, v["verdict"], record.run_id)
    return {c: (d, verdict, run_id, created) for c, (created, d, verdict, run_id) in newest.items()}


CAP = "VLLM_MXFP4_MOE_GEMV_MAX_TOKENS"
CAP_DEFAULT = "8"  # vllm/0007's, when the variable is unset: every batch its kernels serve


def test_hopper_profile_caps_the_moe_kernels_where_marlin_wins() -> None:
    """MOE_BACKEND=marlin-gemv (vllm/0007's kernels for decode batches, Marlin for the rest) only if the
    stored A/Bs between it and Marlin find the kernels faster at some concurrency below any at which they
    are slower; then VLLM_MXFP4_MOE_GEMV_MAX_TOKENS is the largest concurrency measured below the first
    one where Marlin wins (a decode step of c requests is a batch of c tokens), unset where Marlin wins at
    none. An A/B over the cap itself that ran after them decides it instead (B's value where B is faster
    at one concurrency and slower at none). The profile names every record that decides."""
    from sparkserve_lab import ab

    text = (ROOT / "profiles" / "hopper-h100.env").read_text()
    env = read_env(ROOT / "profiles" / "hopper-h100.env")
    decisions = _kernel_decisions("hopper-h100")
    faster = [c for c, (d, *_) in decisions.items() if d == ab.FASTER]
    slower = sorted(c for c, (d, *_) in decisions.items() if d == ab.SLOWER)
    limit = slower[0] if slower else None
    kernels = any(limit is None or c < limit for c in faster)
    assert parse(env).moe_backend == ("marlin-gemv" if kernels else "marlin"), decisions
    for _, _, run_id, _ in decisions.values():
        assert run_id in text, run_id
    cap_ab = _newest_ab("hopper-h100", CAP)
    if kernels and str(cap_ab.metadata()["created"]) > max(created for *_, created in decisions.values()):
        value, verdict = _ab_choice("hopper-h100", CAP)
        assert env.get(CAP, CAP_DEFAULT) == value, verdict
        assert cap_ab.run_id in text
        return
    cap = max(c for c in decisions if c < limit) if kernels and limit is not None else None
    assert env.get(CAP) == (None if cap is None else str(cap)), decisions


def test_hopper_profile_performance_mode_is_what_its_ab_chose() -> None:
    """PERFORMANCE_MODE=interactivity (every CUDA-graph size up to 32) against the shipped balanced mode at
    c=4,5,8,10 with Marlin's MoE: the profile keeps what the stored A/B, judged by rounds, leaves it with."""
    mode, verdict = _ab_choice("hopper-h100", "PERFORMANCE_MODE")
    assert parse(read_env(ROOT / "profiles" / "hopper-h100.env")).performance_mode == mode, verdict


def test_hopper_profile_attention_is_what_its_ab_chose() -> None:
    """FlashInfer with XQA's sink decode against the shipped FA3: the profile keeps what the stored A/B,
    judged by rounds, leaves it with, and says so where it sets the backend."""
    env = read_env(ROOT / "profiles" / "hopper-h100.env")
    backend, verdict = _ab_choice("hopper-h100", "ATTENTION_BACKEND")
    assert parse(env).attention_backend == backend, verdict
    assert env.get("VLLM_FLASHINFER_SINK_DECODE", "auto") == "auto" or backend == "flashinfer"


def test_hopper_profile_sets_inductor_pdl_as_its_ab_chose() -> None:
    """TORCHINDUCTOR_ENABLE_PDL=1 against the profile without it: set only if its stored A/B left it set."""
    value, verdict = _ab_choice("hopper-h100", "TORCHINDUCTOR_ENABLE_PDL")
    env = read_env(ROOT / "profiles" / "hopper-h100.env")
    assert env.get("TORCHINDUCTOR_ENABLE_PDL", "") == value, verdict


def _switch_helps(profile: str, variable: str) -> tuple[bool, str]:
    """Whether a patch's switch earns its place, judged again from the newest stored A/B over it: on only
    where that A/B shows it faster (B switched on: faster at one concurrency and slower at none; B switched
    off: slower at one and faster at none). A switch the rounds cannot tell from off stays off: the patch
    adds code to the step and must pay for it."""
    from sparkserve_lab import ab

    newest = _newest_ab(profile, variable)
    verdict, decisions = _decode_judgement(newest)
    b_on = str(newest.metadata()["overrides"][variable]) not in ("", "0")
    gain, loss = (ab.FASTER, ab.SLOWER) if b_on else (ab.SLOWER, ab.FASTER)
    return gain in decisions and loss not in decisions, verdict


def test_hopper_profile_sets_the_step_switches_as_their_ab_chose() -> None:
    """vllm/0005's and vllm/0006's switches (an A/B of both together, then one of each alone switched off)
    and vllm/0009's: each 1 only where the newest stored A/B over it shows it faster, 0 or unset otherwise;
    either way the profile names that record."""
    text = (ROOT / "profiles" / "hopper-h100.env").read_text()
    env = read_env(ROOT / "profiles" / "hopper-h100.env")
    for variable in ("VLLM_FLASH_ATTN_GROUP_AOT", "VLLM_ROUTER_BIAS_GEMV", "VLLM_MXFP4_MOE_GEMV_MMA"):
        helps, verdict = _switch_helps("hopper-h100", variable)
        assert env.get(variable, "0") == ("1" if helps else "0"), f"{variable}: {verdict}"
        assert _newest_ab("hopper-h100", variable).run_id in text, variable
