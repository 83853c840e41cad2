"""Entrypoint of the image: print what it is, validate the serving profile, check the device and the
model, exec vLLM.

    python -m sparkserve.serving [extra vLLM args]   # serve
    python -m sparkserve.serving --preflight         # profile + model, print the command; no GPU needed
                                                     # (--print-flags: the same)
    python -m sparkserve.serving --check-device      # profile + the GPU (or the CPU build) only
    python -m sparkserve.serving --download          # download and verify the profile's model
    python -m sparkserve.serving --help              # its usage (the profiles, the modes, the exit
                                                     # codes); nothing is checked, vLLM never starts

The profile is the env file SPARKSERVE_PROFILE names in $SPARKSERVE_ROOT/profiles (outside the image: the
checkout this package runs from), or the path of an env file, under the container's own variables, which
win (serving/profiles.py); a name with no file exits 2 listing the profiles.

Exit codes (preflight.EXIT_CODES): 0 ok; 2 invalid profile or environment; 3 no usable GPU; 4 the model is
not there (offline); 5 the download or its verification failed; 6 a volume it must write (the caches, the
state, the model cache for a download) is not writable by the serving user; 7 the image itself is broken
(internal error); 8 the running server stopped answering /health (the watchdog stopped it). Serving, vLLM
runs as a child in a process group of its own whose output passes through (serving/supervise.py) and whose
exit status is returned; whatever of it dies or hangs, the entrypoint ends and takes the group with it;
at ready a start summary is printed (serving/startwatch.py).
"""

from __future__ import annotations

import os
import shlex
import sys
import textwrap
import time
from pathlib import Path

from sparkserve.errors import SparkserveError
from sparkserve.serving import (
    banner,
    caches,
    checkpoint,
    draft,
    engine,
    environment,
    health,
    overrides,
    preflight,
    profiles,
    supervise,
)
from sparkserve.serving import download as downloadmod
from sparkserve.serving import model as modelmod
from sparkserve.serving.flags import vllm_argv
from sparkserve.serving.moe import startup as moe_startup
from sparkserve.serving.moe import state as moe_state
from sparkserve.serving.profile import Profile, ProfileError, check_extra_args, parse
from sparkserve.serving.startwatch import StartWatch

MODES = ("--preflight", "--print-flags", "--check-device", "--download")
HELP = ("--help", "-h")
# The modes that check the model (the GPU gate runs without it mounted; the download fetches it).
MODEL_MODES = ("serve", "--preflight", "--print-flags")


def _say(msg: str) -> None:
    print(f"sparkserve: {msg}", file=sys.stderr, flush=True)


def _check_device(profile: Profile) -> None:
    if profile.target == "cpu":
        preflight.check_cpu_build()
        return
    for warning in preflight.check_gpu(profile, banner.jit_arch_list()):
        _say(f"warning: {warning}")


def _engine_names() -> frozenset[str] | None:
    try:
        return engine.env_names()
    except engine.Unavailable:
        return None


def usage(root: Path) -> str:
    """The entrypoint's own --help: what it reads (profiles, not options), its modes and exit codes."""
    folder = root / profiles.PROFILES_DIR
    known = ", ".join(profiles.names(folder)) or "none"
    codes = "\n".join(textwrap.fill(meaning, 108, initial_indent=f"  {code}  ", subsequent_indent="     ")
                      for code, meaning in sorted(preflight.EXIT_CODES.items()))
    return f"""usage: python -m sparkserve.serving [MODE] [extra vLLM arguments]
       (the image's entrypoint: docker run IMAGE [MODE] [extra vLLM arguments])

The serving settings are environment variables, not options: SPARKSERVE_PROFILE names a profile, whose
variables the environment's override (without one, the environment alone is the profile). Every variable,
its values and default: docs/PROFILES.md. A profile checked on any host, without Docker or a GPU:
`sparkserve profile check NAME [--set VAR=VALUE ...]` (from a checkout).
profiles ({folder}): {known}

modes (at most one, first):
  (none)          validate the profile, check the GPU and the model, then start vLLM
  --preflight     validate the profile and the model, print the vLLM command; no GPU needed
  --print-flags   the same as --preflight
  --check-device  validate the profile and check the GPU (or the CPU build) only
  --download      download the profile's model (and its Eagle3 draft) and verify it
  --help, -h      this text; nothing is checked and vLLM is not started

Extra arguments are appended to vLLM's command line; one that sets what a profile variable decides is
refused (exit 2). vLLM's own options: `vllm serve --help` (docker run --entrypoint vllm IMAGE serve --help).

exit codes:
  0  ok
{codes}
  otherwise, once vLLM runs, vLLM's own exit status
"""


def main(args: list[str]) -> int:
    if any(arg in HELP for arg in args):
        # vLLM's parser would answer --help only after the checks, and the container command is ours
        print(usage(profiles.entrypoint_root(os.environ)), end="", flush=True)
        return 0
    t0 = time.monotonic()
    mode = args[0] if args and args[0] in MODES else "serve"
    extra = args[1:] if mode != "serve" else args
    try:
        for line in banner.lines():
            print(line, flush=True)
        site = banner.site_packages()
        # The profile file's variables join the environment (vLLM reads its own from there).
        root = profiles.entrypoint_root(os.environ)
        resolved = profiles.container_env(os.environ, root)
        env = resolved.env
        os.environ.update({k: v for k, v in env.items() if k not in os.environ})
        for warning in resolved.warnings + environment.check(env, _engine_names()):
            _say(f"warning: {warning}")
        if mode in MODEL_MODES:
            modelmod.check_folder(env)  # before parse(), which reads the model's config.json
        profile = parse(env)
        check_extra_args(extra, "the container's command", profile)
        if extra or profile.extra_args:
            print(f"  override check: {overrides.guard().describe()}", flush=True)
        if mode == "--download":
            # The hub client writes into the cache as it goes: an unwritable volume fails here, not mid-way.
            caches.require_writable(checkpoint.hub_cache(os.environ), "hf-cache", removable=False)
            for repo, snapshot in downloadmod.run_all(profile, os.environ, downloadmod.HuggingFaceHub()):
                what = "model" if repo == profile.model else "draft"
                print(f"  {what}: {repo} downloaded and verified: {snapshot}", flush=True)
            speculation = draft.check(profile, os.environ)  # a draft that does not fit: exit 2 now
            if speculation:
                print(f"  speculative: {speculation}", flush=True)
            return 0
        preflight.check_capabilities(profile, site)
        key = preflight.read_api_key(profile)
        preflight.check_exposure(profile, key)
        if mode == "--check-device":
            _check_device(profile)
            print(f"  device: ok for target {profile.target}", flush=True)
            return 0
        if mode == "--preflight":
            # The volumes serve writes, as the serving user sees them (mounted read-only here): a volume
            # left owned by root by an older image stops `up` in this gate instead of a restart loop.
            caches.check_owner(Path(profile.cache_dir), "sparkserve-cache")
            caches.check_owner(Path(profile.state_dir), "sparkserve-state", removable=False)
        # Where the MoE tactics come from (a table is checked against the GPU only when serving).
        moe = moe_startup.prepare(profile, site, banner.jit_arch_list(), probe_gpu=mode == "serve")
        for warning in moe.warnings:
            _say(f"warning: {warning}")
        profile = moe.profile
        argv = vllm_argv(profile) + extra
        print(f"  profile: {profile.name} (target {profile.target}, MXFP4 layers: "
              f"{','.join(sorted(profile.mxfp4_layers)) or 'none'})", flush=True)
        for line in moe.lines:
            print(line, flush=True)
        print("  command: " + shlex.join(argv), flush=True)
        if mode == "serve":
            _check_device(profile)
        print(f"  model: {modelmod.check(profile, os.environ)}", flush=True)
        speculation = draft.check(profile, os.environ)
        if speculation:
            print(f"  speculative: {speculation}", flush=True)
        if mode == "serve":
            plan = caches.prepare(Path(profile.cache_dir), moe_state.build_id(site, banner.jit_arch_list()),
                                  os.environ)
            for line in plan.lines:
                print(line, flush=True)
            # FlashInfer's autotune store and the tactic table's folder (serving/moe/state.py)
            caches.require_writable(Path(profile.state_dir), "sparkserve-state", removable=False)
            prebuilt = caches.prebuilt_line(banner.site_packages("flashinfer"))
            if prebuilt:
                print(prebuilt, flush=True)
    except caches.CacheError as exc:
        _say(f"refusing to start: {exc}")
        return preflight.EXIT_CACHE
    except ProfileError as exc:
        _say(f"invalid serving profile: {exc}")
        return preflight.EXIT_PROFILE
    except preflight.GpuRefusal as exc:
        _say(f"refusing to start: {exc}")
        return preflight.EXIT_GPU
    except modelmod.ModelMissing as exc:
        _say(f"model not available: {exc}")
        return preflight.EXIT_MODEL
    except downloadmod.DownloadError as exc:
        _say(f"download failed: {exc}")
        return preflight.EXIT_DOWNLOAD
    except SparkserveError as exc:
        _say(f"refusing to start, the image itself is broken: {exc}")
        return preflight.EXIT_INTERNAL
    if mode != "serve":
        return 0
    os.environ.update(moe.env)
    if profile.offline:
        # The hub is never asked: vLLM, transformers and huggingface_hub read these.
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    if key is not None:
        os.environ["VLLM_API_KEY"] = key  # in the environment, not on the command line
    else:
        where = (f"reachable from other machines ({profile.publish_address}, "
                 "SPARKSERVE_ALLOW_UNAUTHENTICATED=1)" if preflight.exposed(profile) else
                 f"on {profile.publish_address} only")
        _say(f"warning: no API key (SPARKSERVE_API_KEY_FILE): the API is unauthenticated, {where}")
    os.environ.update(plan.env)
    sys.stdout.flush()
    watch = StartWatch(t0)

    def on_line(line: str, now: float) -> list[str]:
        summary = watch.feed(line, now)
        return [*summary, f"  caches: {plan.state} ({plan.folder})"] if summary else []

    return supervise.run(argv, on_line, supervise.Watchdog(health.url(env)))

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
