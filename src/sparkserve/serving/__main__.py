"""Entrypoint of the image: print what it is, validate the serving profile, check the device and the
model, exec vLLM.

    python -m sparkserve.serving [extra vLLM args]   # serve
    python -m sparkserve.serving --preflight         # profile + model, print the command; no GPU needed
                                                     # (--print-flags: the same)
    python -m sparkserve.serving --check-device      # profile + the GPU (or the CPU build) only
    python -m sparkserve.serving --download          # download and verify the profile's model
    python -m sparkserve.serving --plan              # every check of a start, then the launch plan (vLLM's
                                                     # command line and environment) as JSON on stdout
    python -m sparkserve.serving --help              # its usage (the profiles, the modes, the exit
                                                     # codes); nothing is checked, vLLM never starts

The profile is the env file SPARKSERVE_PROFILE names in $SPARKSERVE_ROOT/profiles (outside the image: the
checkout this package runs from), or the path of an env file, under the container's own variables, which
win (serving/profiles.py); a name with no file exits 2 listing the profiles.

Exit codes (preflight.EXIT_CODES): 0 ok; 2 invalid profile or environment; 3 no usable GPU; 4 the model is
not there (offline); 5 the download or its verification failed; 6 a volume it must write (the caches, the
state, the model cache for a download) is not writable by the serving user; 7 the image itself is broken
(internal error); 8 the running server stopped answering /health (the watchdog stopped it); 9 a node of
the cluster was lost (serving/rankwatch.py: the head read it in vLLM's output, or a worker's head stopped
answering at its rendezvous). Serving, vLLM
runs as a child in a process group of its own whose output passes through (serving/supervise.py) and whose
exit status is returned; whatever of it dies or hangs, the entrypoint ends and takes the group with it;
at ready a start summary is printed (serving/startwatch.py). The checks and the launch plan are
serving/launch.py's; this module prints, maps refusals to exit codes and hands the plan to the supervisor.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path
from typing import TextIO

from sparkserve.errors import SparkserveError
from sparkserve.serving import (
    banner,
    caches,
    engine,
    environment,
    launch,
    preflight,
    profiles,
    rankwatch,
    supervise,
)
from sparkserve.serving import download as downloadmod
from sparkserve.serving import model as modelmod
from sparkserve.serving.profile import ProfileError
from sparkserve.serving.startwatch import StartWatch

MODES = launch.MODES
HELP = ("--help", "-h")


def _say(msg: str) -> None:
    print(f"sparkserve: {msg}", file=sys.stderr, flush=True)


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
  --plan          every check of a start, then print the launch plan (vLLM's command line and
                  environment, the API key hidden) as JSON on stdout; vLLM is not started
  --help, -h      this text; nothing is checked and vLLM is not started

Extra arguments are appended to vLLM's command line; one that sets what a profile variable decides is
refused (exit 2). vLLM's own options: `vllm serve --help` (docker run --entrypoint vllm IMAGE serve --help).

exit codes:
  0  ok
{codes}
  otherwise, once vLLM runs, vLLM's own exit status
"""


def _plan(mode: str, extra: list[str], out: TextIO) -> launch.LaunchPlan | None:
    """The banner, the profile the container's environment names, and the checks of the mode."""

    def show(line: str) -> None:
        print(line, file=out, flush=True)

    for line in banner.lines():
        show(line)
    root = profiles.entrypoint_root(os.environ)
    resolved = profiles.container_env(os.environ, root)
    env = resolved.env
    # The profile file's variables join this process's environment too: vLLM's parser (the override
    # guard) and the device checks read engine variables from there.
    os.environ.update({k: v for k, v in env.items() if k not in os.environ})
    for warning in resolved.warnings + environment.check(env, _engine_names()):
        _say(f"warning: {warning}")
    return launch.plan(mode, extra, env, show, _say)


def main(args: list[str]) -> int:
    if any(arg in HELP for arg in args):
        # vLLM's parser would answer --help only after the checks, and the container command is ours
        print(usage(profiles.entrypoint_root(os.environ)), end="", flush=True)
        return 0
    t0 = time.monotonic()
    mode = args[0] if args and args[0] in MODES else launch.SERVE
    extra = args[1:] if mode != launch.SERVE else args
    try:
        # --plan's stdout is the plan alone: what it says on the way goes to stderr
        plan = _plan(mode, extra, sys.stderr if mode == launch.PLAN else sys.stdout)
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
    if plan is None:
        return 0
    if mode == launch.PLAN:
        print(json.dumps(plan.public(), indent=1), flush=True)
        return 0
    sys.stdout.flush()
    watch = StartWatch(t0)

    def on_line(line: str, now: float) -> list[str]:
        summary = watch.feed(line, now)
        return [*summary, f"  caches: {plan.caches}"] if summary else []

    if plan.worker:
        dog = rankwatch.worker_watchdog(plan.watchdog_url)
    else:
        dog = supervise.Watchdog(plan.watchdog_url)
    judge = rankwatch.RankWatch(plan.nnodes, plan.node_rank).judge if plan.nnodes > 1 else None
    return supervise.run(plan.argv, on_line, dog, env=plan.env, judge=judge)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
