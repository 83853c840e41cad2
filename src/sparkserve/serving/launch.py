"""The launch plan: what the entrypoint starts, from the environment of its container, through the
checks of each mode.

`plan()` runs the checks of a mode in the entrypoint's order (profile, extra arguments, capabilities,
API key and exposure, volumes, MoE tactics, device, model, draft, caches) and, for `serve` and `--plan`,
returns the LaunchPlan: vLLM's command line and the whole environment vLLM is started with (the
container's, the MoE tactic variables, offline, the API key, the compile caches). A refusal is an
exception the entrypoint turns into its exit code (serving/__main__.py). `serve` hands the plan to the
supervisor; `--plan` prints it as JSON (`LaunchPlan.public()`).

`container_environment()` is the environment a container of a resolved profile starts with, as compose
makes it: the lab starts the entrypoint in it (lab/src/sparkserve_lab/server.py), so that what the lab
measures is what the entrypoint starts for a user.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkserve.serving import (
    banner,
    caches,
    checkpoint,
    cluster,
    draft,
    health,
    overrides,
    preflight,
    profiles,
    vllmconfig,
)
from sparkserve.serving import download as downloadmod
from sparkserve.serving import model as modelmod
from sparkserve.serving.flags import vllm_argv
from sparkserve.serving.moe import startup as moe_startup
from sparkserve.serving.moe import state as moe_state
from sparkserve.serving.profile import Profile, check_extra_args, parse

SERVE = "serve"
PLAN = "--plan"
MODES = ("--preflight", "--print-flags", "--check-device", "--download", PLAN)
# The modes that check the model (the GPU gate runs without it mounted; the download fetches it).
MODEL_MODES = (SERVE, PLAN, "--preflight", "--print-flags")
# The modes that prepare all a start needs: serve, and --plan, which prints what serve would start.
START_MODES = (SERVE, PLAN)
API_KEY = "VLLM_API_KEY"
# The container's variables the image sets (Dockerfile ENV) that a start outside the image needs too.
IMAGE_VARIABLES = {"PYTHONUNBUFFERED": "1", "LANG": "C.UTF-8"}
# What a start outside a container takes from the environment it is started from: where Python, its
# packages, the GPU and the model cache are. Nothing else of that environment gets in.
HOST_VARIABLES = ("PATH", "HOME", "PYTHONPATH", "VIRTUAL_ENV", "CUDA_VISIBLE_DEVICES", "HF_HOME",
                  "HF_HUB_CACHE")

Show = Callable[[str], None]


@dataclass(frozen=True)
class LaunchPlan:
    """What the entrypoint starts: vLLM's command line, its whole environment, the URL the watchdog
    asks and the state of the compile caches (for the start summary)."""

    argv: list[str]
    env: dict[str, str]
    watchdog_url: str
    caches: str
    nnodes: int = 1     # a cluster's (the entrypoint then watches for a lost rank: serving/rankwatch.py)
    node_rank: int = 0

    @property
    def worker(self) -> bool:
        """A cluster's headless worker: no API server; its watchdog asks the head's rendezvous."""
        return cluster.is_worker(self.nnodes, self.node_rank)

    def public(self) -> dict[str, Any]:
        """The plan as JSON data, the API key's value hidden (the plan is printed and recorded)."""
        env = {k: "(API_KEY_FILE)" if k == API_KEY else v for k, v in sorted(self.env.items())}
        return {"argv": list(self.argv), "env": env, "watchdog_url": self.watchdog_url, "caches": self.caches,
                "nnodes": self.nnodes, "node_rank": self.node_rank}

    @classmethod
    def from_public(cls, data: Mapping[str, Any]) -> LaunchPlan:
        return cls([str(a) for a in data["argv"]], {str(k): str(v) for k, v in data["env"].items()},
                   str(data["watchdog_url"]), str(data["caches"]), int(data["nnodes"]),
                   int(data["node_rank"]))


def check_device(profile: Profile, env: Mapping[str, str], warn: Show) -> None:
    if profile.target == "cpu":
        preflight.check_cpu_build()
        return
    for warning in preflight.check_gpu(profile, banner.jit_arch_list(), env):
        warn(f"warning: {warning}")


def plan(mode: str, extra: Sequence[str], env: Mapping[str, str], show: Show,
         warn: Show) -> LaunchPlan | None:
    """The checks of `mode` for the container environment `env` (the profile file's variables under the
    container's own); `show` gets the start lines, `warn` the warnings. Returns the launch plan for serve
    and --plan, None for the modes that end after their checks. Raises what the checks refuse with
    (ProfileError, GpuRefusal, ModelMissing, DownloadError, CacheError, SparkserveError)."""
    site = banner.site_packages()
    if mode in MODEL_MODES:
        modelmod.check_folder(env)  # before parse(), which reads the model's config.json
    profile = parse(env)
    check_extra_args(extra, "the container's command", profile)
    if extra or profile.extra_args:
        show(f"  override check: {overrides.guard().describe()}")
    if mode == "--download":
        _download(profile, env, show)
        return None
    preflight.check_capabilities(profile, site)
    # A cluster's worker runs no API server: no key to read (its secret need not be mounted there) and
    # nothing exposed.
    key = None if profile.worker else preflight.read_api_key(profile)
    if not profile.worker:
        preflight.check_exposure(profile, key)
    if mode == "--check-device":
        check_device(profile, env, warn)
        show(f"  device: ok for target {profile.target}")
        return None
    if mode == "--preflight":
        # The volumes serve writes, as the serving user sees them (mounted read-only here): a volume
        # left owned by root by an older image stops `up` in this gate instead of a restart loop.
        caches.check_owner(Path(profile.cache_dir), "sparkserve-cache")
        caches.check_owner(Path(profile.state_dir), "sparkserve-state", removable=False)
    starting = mode in START_MODES
    # Where the MoE tactics come from (a table is checked against the GPU only when starting).
    moe = moe_startup.prepare(profile, site, banner.jit_arch_list(), probe_gpu=starting)
    for warning in moe.warnings:
        warn(f"warning: {warning}")
    profile = moe.profile
    argv = vllm_argv(profile) + list(extra)
    show(f"  profile: {profile.name} (target {profile.target}, MXFP4 layers: "
         f"{','.join(sorted(profile.mxfp4_layers)) or 'none'})")
    for line in moe.lines:
        show(line)
    show("  command: " + shlex.join(argv))
    if profile.nnodes > 1:
        show("  cluster: " + cluster.describe(profile.nnodes, profile.node_rank, profile.master_addr,
                                              profile.master_port))
    if starting:
        check_device(profile, env, warn)
    show(f"  model: {modelmod.check(profile, env)}")
    speculation = draft.check(profile, env)
    if speculation:
        show(f"  speculative: {speculation}")
    if not starting:
        return None
    cache = caches.prepare(Path(profile.cache_dir), moe_state.build_id(site, banner.jit_arch_list()), env)
    for line in cache.lines:
        show(line)
    # FlashInfer's autotune store and the tactic table's folder (serving/moe/state.py)
    caches.require_writable(Path(profile.state_dir), "sparkserve-state", removable=False)
    prebuilt = caches.prebuilt_line(banner.site_packages("flashinfer"))
    if prebuilt:
        show(prebuilt)
    # a worker has no /health: its watchdog asks whether the head's rendezvous still answers
    watched = (cluster.rendezvous_url(profile.master_addr, profile.master_port) if profile.worker
               else health.url(env))
    return LaunchPlan(argv, _server_env(profile, env, moe.env, key, cache.env, warn), watched,
                      f"{cache.state} ({cache.folder})", profile.nnodes, profile.node_rank)


def _download(profile: Profile, env: Mapping[str, str], show: Show) -> None:
    # The hub client writes into the cache as it goes: an unwritable volume fails here, not mid-way.
    caches.require_writable(checkpoint.hub_cache(env), "hf-cache", removable=False)
    for repo, snapshot in downloadmod.run_all(profile, env, downloadmod.HuggingFaceHub()):
        what = "model" if repo == profile.model else "draft"
        show(f"  {what}: {repo} downloaded and verified: {snapshot}")
    speculation = draft.check(profile, env)  # a draft that does not fit: exit 2 now
    if speculation:
        show(f"  speculative: {speculation}")


def _server_env(profile: Profile, env: Mapping[str, str], moe: Mapping[str, str], key: str | None,
                cache: Mapping[str, str], warn: Show) -> dict[str, str]:
    """vLLM's environment: the container's, the engine variables of the profile's values, the MoE tactic
    variables, offline, the key, the caches."""
    out = {**env, **vllmconfig.engine_environment(profile.moe_backend), **moe}
    if profile.offline:
        # The hub is never asked: vLLM, transformers and huggingface_hub read these.
        out["HF_HUB_OFFLINE"] = "1"
        out.setdefault("TRANSFORMERS_OFFLINE", "1")
    if key is not None:
        out[API_KEY] = key  # in the environment, not on the command line
    elif not profile.worker:
        where = (f"reachable from other machines ({profile.publish_address}, "
                 "SPARKSERVE_ALLOW_UNAUTHENTICATED=1)" if preflight.exposed(profile) else
                 f"on {profile.publish_address} only")
        warn(f"warning: no API key (SPARKSERVE_API_KEY_FILE): the API is unauthenticated, {where}")
    return {**out, **cache}


def container_environment(res: profiles.Resolved, root: Path, host: Mapping[str, str],
                          extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a container of the resolved profile starts with, as compose makes it: the image's
    variables, where Python, the GPU and the model cache are on `host`, the profile's variables (its file,
    then the harness settings and overrides: `res.env`), `extra` (engine variables of the harness, e.g.
    an arm's CUDA_VISIBLE_DEVICES), and compose's marker that the environment is the profile, so the
    entrypoint does not read the file again over the overrides."""
    env = {**IMAGE_VARIABLES, "SPARKSERVE_ROOT": str(root)}
    env.update({k: host[k] for k in HOST_VARIABLES if host.get(k)})
    env.update(res.env)
    env.update(extra or {})
    if env.get("SPARKSERVE_PROFILE", "").strip():
        env[profiles.COMPOSE_PROFILE_FILE] = res.name
    return env


def entrypoint_command(python: str = sys.executable) -> list[str]:
    """The image's entrypoint, run by `python`."""
    return [python, "-m", "sparkserve.serving"]
