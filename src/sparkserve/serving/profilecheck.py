"""A serving profile checked on a host without Docker, a GPU or the patched vLLM (`sparkserve profile
check`): what the entrypoint's preflight would say of it, as far as this host can tell, the vLLM command
it would run, and each thing only the image's gates can check, with why.

Checked here: every variable's name and value and the rules between them (the entrypoint's own parser),
VLLM_EXTRA_ARGS against the flags the profile owns, an API served to other machines without a key, and what
of the model (and an Eagle3 draft) is on this host. Not checked here, and said so: the GPU, the model files
where they are not on this host, the patch series where this host's vLLM lacks it, an installed MoE tactic
table, the API key file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sparkserve.serving import banner, checkpoint, draft, flags, model, preflight, profiles, switches
from sparkserve.serving.profile import Profile, ProfileError, check_known, parse
from sparkserve.serving.settings import TACTIC_MOE_BACKENDS
from sparkserve.supply.patches import manifest

# The image's interpreter (Dockerfile ENTRYPOINT): the command as the container runs it.
IMAGE_PYTHON = "/opt/venv/bin/python"


@dataclass
class HostCheck:
    """A profile valid as far as this host can tell: its command, what was found, what was not checked."""

    profile: Profile
    command: list[str]
    found: list[str] = field(default_factory=list)  # `model: ...`, `speculative: ...`
    unchecked: list[str] = field(default_factory=list)  # each: what, why not here, and where it is checked


def profile_file(name: str, root: Path) -> Path:
    """An env file given by its path (from here), or a profile of the checkout by its name."""
    given = Path(name)
    if name.endswith(".env") and given.is_file():
        return given
    return profiles.profile_path(name, root)


def check(name: str, root: Path, overrides: Mapping[str, str],
          host_env: Mapping[str, str] | None = None) -> HostCheck:
    """The profile `name` (root's profiles/, or a path) with `overrides` (profile or engine variables, as
    `--set` gives them), or a ProfileError naming the first bad variable. `host_env` is where this host's
    Hugging Face cache is (default: this process's environment)."""
    host = os.environ if host_env is None else host_env
    check_known(list(overrides), "overrides", engine=True)
    env = {**profiles.read_env_file(profile_file(name, root)), **overrides}
    p, judged = _parse_here(env, host)
    out = HostCheck(p, flags.vllm_argv(p, python=IMAGE_PYTHON))
    preflight.check_exposure(p, "a key file" if p.api_key_file else None)
    out.unchecked.append(_gpu(p, env))
    if judged:
        out.unchecked.append(f"whether MODEL is gpt-oss: its config.json is not on this host, so its name "
                             f"decided ({'gpt-oss' if p.gpt_oss else 'not gpt-oss'}), as the image does "
                             "when it has none; where the model is, its config.json decides")
    _patches(p, banner.site_packages("vllm"), out)
    _model(p, host, out)
    if p.moe_tactics == "table" and "moe" in p.mxfp4_layers and p.moe_backend in TACTIC_MOE_BACKENDS:
        out.unchecked.append("the MoE tactic table (MOE_TACTICS=table): it is in the state volume and is "
                             "checked at start against the image, the GPU and the model")
    if p.api_key_file:
        out.unchecked.append(f"the API key file (API_KEY_FILE={p.api_key_file}): a file in the container, "
                             "read at start")
    return out


def _parse_here(env: Mapping[str, str], host: Mapping[str, str]) -> tuple[Profile, bool]:
    """parse() with MODEL's config.json as this host has it; True when it has none and the name decided
    whether the model is gpt-oss (as the image does without one): a refusal that follows from it says so."""
    judged: list[str] = []

    def gpt_oss(model_name: str) -> bool:
        cfg = checkpoint.config(model_name, host)
        if cfg is not None:
            return cfg.get("model_type") == checkpoint.GPT_OSS_MODEL_TYPE
        judged.append(model_name)
        return checkpoint.name_says_gpt_oss(model_name)

    try:
        return parse(env, gpt_oss), bool(judged)
    except ProfileError as exc:
        if not judged or "gpt-oss" not in exc.why:
            raise
        raise ProfileError(exc.variable, exc.value,
                           f"{exc.why}; MODEL's config.json is not on this host, so its name decided whether "
                           "it is gpt-oss (where the model is, `docker compose run --rm preflight` reads "
                           "it)") from None


def _gpu(p: Profile, env: Mapping[str, str]) -> str:
    if p.target == "cpu":
        return "the CPU build of vLLM (SPARKSERVE_TARGET=cpu: the CPU test image only): checked at start"
    cc = preflight.EXPECTED_CC[p.target]
    asks = ", ".join(f"{var}={value}" for var, value, *_ in switches.kernel_requests(env))
    kernels = (f"; the patch series' own kernels it turns on ({asks}) run only on compute capability "
               f"{switches.BUILT_FOR}") if asks else ""
    return (f"the GPU: SPARKSERVE_TARGET={p.target} needs compute capability {cc[0]}.{cc[1]} and an image "
            f"built for it{kernels}; the gpu-check gate checks it (`sparkserve doctor` checks the host)")


def _patches(p: Profile, site: Path | None, out: HostCheck) -> None:
    """The series' own checks where this host's vLLM carries it (a dev container); else say so."""
    if site is not None and (site / manifest.SITE_MANIFEST).is_file():
        preflight.check_capabilities(p, site)
        return
    why = "vLLM is not installed here" if site is None else f"this host's vLLM ({site}) is not patched"
    needs = (f"; MXFP4 lm_head needs its patch {preflight.LM_HEAD_PATCH}" if "lm_head" in p.mxfp4_layers
             else "")
    out.unchecked.append(f"the patch series: {why}{needs}; the image carries the series and its preflight "
                         "gate checks it")


def _model(p: Profile, host: Mapping[str, str], out: HostCheck) -> None:
    """The model (and an Eagle3 draft) where this host has them: a folder here, or this host's Hugging Face
    cache; otherwise the preflight gate checks them where the image runs."""
    try:
        out.found.append(f"model: {model.check(p, host)}")
    except model.ModelMissing as exc:
        out.unchecked.append(f"the model files (MODEL={p.model}): {_not_here(p.model, host, exc)}; the "
                             "preflight gate checks them where the image runs")
        return
    try:
        speculation = draft.check(p, host)
    except model.ModelMissing as exc:
        out.unchecked.append(f"the Eagle3 draft (SPECULATIVE_DRAFT={p.speculative_draft}): "
                             f"{_not_here(p.speculative_draft, host, exc)}; the preflight gate checks it "
                             "where the image runs")
        return
    if speculation:
        out.found.append(f"speculative: {speculation}")


def _not_here(name: str, host: Mapping[str, str], exc: model.ModelMissing) -> str:
    if not checkpoint.is_path(name):
        return f"not in this host's Hugging Face cache ({checkpoint.hub_cache(host)})"
    return "no such folder on this host" if not Path(name).expanduser().is_dir() else f"on this host: {exc}"
