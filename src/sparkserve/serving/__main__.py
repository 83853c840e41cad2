"""Entrypoint of the image: print what it is, validate the serving profile, check the GPU, exec vLLM.

    python -m sparkserve.serving [extra vLLM args]    # serve
    python -m sparkserve.serving --print-flags         # validate the profile and print the command only
"""

from __future__ import annotations

import os
import shlex
import sys

from sparkserve.errors import SparkserveError
from sparkserve.serving import banner, preflight
from sparkserve.serving.flags import vllm_argv
from sparkserve.serving.moe import startup as moe_startup
from sparkserve.serving.profile import ProfileError, parse


def _say(msg: str) -> None:
    print(f"sparkserve: {msg}", file=sys.stderr, flush=True)


def main(args: list[str]) -> int:
    print_only = bool(args) and args[0] == "--print-flags"
    extra = args[1:] if print_only else args
    for line in banner.lines():
        print(line, flush=True)
    site = banner.site_packages()
    try:
        profile = parse(os.environ)
        preflight.check_capabilities(profile, site)
        key = preflight.read_api_key(profile)
    except ProfileError as exc:
        _say(f"invalid serving profile: {exc}")
        return preflight.EXIT_PROFILE
    arch_list = str(banner.build_info().get("flashinfer_cuda_arch_list")
                    or os.environ.get("FLASHINFER_CUDA_ARCH_LIST", ""))
    if not print_only:
        try:
            if profile.target == "cpu":
                preflight.check_cpu_build()
            else:
                for warning in preflight.check_gpu(profile, arch_list):
                    _say(f"warning: {warning}")
        except ProfileError as exc:
            _say(f"invalid serving profile: {exc}")
            return preflight.EXIT_PROFILE
        except SparkserveError as exc:
            _say(f"refusing to start: {exc}")
            return preflight.EXIT_GPU
    try:
        moe = moe_startup.prepare(profile, site, arch_list, probe_gpu=not print_only)
    except ProfileError as exc:
        _say(f"invalid serving profile: {exc}")
        return preflight.EXIT_PROFILE
    for warning in moe.warnings:
        _say(f"warning: {warning}")
    profile = moe.profile
    argv = vllm_argv(profile) + extra
    print(f"  profile: {profile.name} (target {profile.target}, MXFP4 layers: "
          f"{','.join(sorted(profile.mxfp4_layers)) or 'none'})", flush=True)
    for line in moe.lines:
        print(line, flush=True)
    print("  command: " + shlex.join(argv), flush=True)
    if print_only:
        return 0
    os.environ.update(moe.env)
    if key is not None:
        os.environ["VLLM_API_KEY"] = key  # in the environment, not on the command line
    else:
        _say("warning: no API_KEY_FILE: the API is unauthenticated (compose binds it to 127.0.0.1)")
    sys.stdout.flush()
    os.execv(argv[0], argv)
    return 0  # not reached

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
