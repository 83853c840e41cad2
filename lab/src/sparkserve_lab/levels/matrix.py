"""Level 6, matrix: serving profiles as shipped and their one-variable ablations, each in its own server
with levels 1, 1.5 and 4. A configuration is a profile plus variable overrides, resolved by the
entrypoint's parser and served by the entrypoint itself (sparkserve_lab/server.py), so a matrix can only
express what a user can deploy, and measures what the entrypoint starts.

name: spark
profile: spark                     # default profile of every configuration (profiles/NAME.env or a path)
set: {MODEL: /models/gpt-oss-120b} # harness settings for every configuration (not what is compared)
tokenizer: /models/gpt-oss-120b    # local tokenizer for llama-benchy
hardware: null                     # results/<hardware>/; null = detected
random_weights: false              # true: LOAD_FORMAT=dummy runs (level 1's harmony check is not
                                   #   applicable, llama-benchy goes through bench.relay)
kernel_rules: null                 # default lab/configs/engine-kernels.toml
server: {python: python3, host: 127.0.0.1, port: 8000, ready_timeout_s: 1800, env: {}}
                                   # python runs the entrypoint; host and port are SPARKSERVE_LISTEN and
                                   # SPARKSERVE_PORT; env: engine variables besides the profile
bench: {preset: quick}             # optional overrides: pp, tg, depth, concurrency, runs, timeout_s
configurations:
  - name: spark                    # optional: default <profile>[+VAR=VALUE...]
  - set: {MOE_BACKEND: marlin}     # an ablation of the default profile
  - profile: spark-graph-safe      # another shipped profile

Every configuration is resolved and checked against the kernel rules before the first server starts:
an unknown profile, an unknown variable, an invalid value, or a claim no rule checks stops the matrix.
Each server writes its log, a `<log>.pid` file (the entrypoint's process group) and its launch plan
(`<log>.plan.json`) to the work directory, and keeps its caches and state there unless the profile names
other folders; SIGTERM / SIGINT stop the running server before the matrix exits.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sparkserve import config
from sparkserve.errors import SparkserveError
from sparkserve.gate import smoke
from sparkserve.gate.common import Client, LevelResult
from sparkserve.progress import say
from sparkserve.serving import profiles
from sparkserve.serving.profile import ProfileError
from sparkserve.serving.settings import is_engine_variable
from sparkserve_lab.bench import presets
from sparkserve_lab.levels import benchmark
from sparkserve_lab.server import NotReady, Server, serving
from sparkserve_lab.server import server_for as entrypoint_server
from sparkserve_lab.validate import profile_rules
from sparkserve_lab.validate.kernels import RULES_FILE
from sparkserve_lab.validate.runs import profile_record


@dataclass
class MatrixEntry:
    name: str
    resolved: profiles.Resolved


# A matrix file's schema (sparkserve.config). Variables are written as YAML likes them (8192, true, off)
# and handed to the profile as text.
Scalar = str | int | float | bool


@dataclass(frozen=True)
class ServerSettings:
    python: str = "python3"  # runs the entrypoint
    host: str = "127.0.0.1"  # SPARKSERVE_LISTEN
    port: int = 8000  # SPARKSERVE_PORT
    ready_timeout_s: float = 1800
    env: dict[str, Scalar] = field(default_factory=dict)  # engine variables besides the profile

    def environment(self) -> dict[str, str]:
        return _strs(self.env)


@dataclass(frozen=True)
class BenchSettings:
    preset: str = "quick"
    pp: list[int] | None = None
    tg: list[int] | None = None
    depth: list[int] | None = None
    concurrency: list[int] | None = None
    runs: int | None = None
    timeout_s: float | None = None


@dataclass(frozen=True)
class Configuration:
    name: str | None = None  # default <profile>[+VAR=VALUE...]
    profile: str | None = None  # default the matrix's
    variables: dict[str, Scalar] = field(default_factory=dict, metadata=config.renamed("set"))


@dataclass(frozen=True)
class Matrix:
    profile: str
    tokenizer: str
    configurations: tuple[Configuration, ...]
    name: str | None = None
    variables: dict[str, Scalar] = field(default_factory=dict, metadata=config.renamed("set"))
    hardware: str | None = None  # results/<hardware>/; None: detected
    random_weights: bool = False
    kernel_rules: str | None = None  # default lab/configs/engine-kernels.toml
    server: ServerSettings = ServerSettings()
    bench: BenchSettings = BenchSettings()


def load(path: Path) -> Matrix:
    try:
        import yaml
    except ImportError as exc:
        raise SparkserveError("matrix files need PyYAML: pip install -e lab") from exc
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SparkserveError(f"cannot read the matrix {path}: {exc}") from None
    # Keys of old matrices, refused with what to write instead (not just as unknown keys).
    configurations = data.get("configurations") if isinstance(data, dict) else None
    stale = [k for k in ("model", "args") if isinstance(data, dict) and k in data] + [
        "configurations[].args" for c in configurations or [] if isinstance(c, dict) and "args" in c][:1]
    if stale:
        raise SparkserveError(f"{path}: {', '.join(stale)}: vLLM arguments are not written by hand; name a "
                              "profile and its variables (`profile:`, `set:`)")
    m = config.parse(Matrix, data, str(path))
    if not m.configurations:
        raise SparkserveError(f"{path}: needs a `configurations` list")
    for key in ("profile", "tokenizer"):
        if not getattr(m, key):
            raise SparkserveError(f"{path}: needs `{key}`")
    return m


def _strs(table: dict[str, Scalar]) -> dict[str, str]:
    return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in table.items()}


def common_settings(m: Matrix) -> dict[str, str]:
    """The matrix-wide `set`, plus what the harness itself needs: the server's address and port, and dummy
    weights for random-weight matrices."""
    common = _strs(m.variables)
    common["SPARKSERVE_LISTEN"] = m.server.host
    common["SPARKSERVE_PORT"] = str(m.server.port)
    if m.random_weights:
        common["LOAD_FORMAT"] = "dummy"
    return common


def entries(m: Matrix, root: Path, rules_file: Path) -> list[MatrixEntry]:
    """Every configuration resolved and covered by the kernel rules, or a SparkserveError that names the
    configuration and the profile's own message."""
    common = common_settings(m)
    rules = profile_rules.load(rules_file)
    out: list[MatrixEntry] = []
    for i, c in enumerate(m.configurations):
        name = c.profile or m.profile
        where = f"configuration {c.name or i + 1}"
        try:
            res = profiles.resolve(name, root, common, _strs(c.variables))
        except ProfileError as exc:
            raise SparkserveError(f"{where}: invalid profile: {exc}") from None
        except SparkserveError as exc:
            raise SparkserveError(f"{where}: {exc}") from None
        missing = profile_rules.uncovered(res.profile, rules)
        if missing:
            raise SparkserveError(f"{where} ({res.label}): no kernel rule in {rules_file} checks "
                                  f"{', '.join(missing)}; add one before measuring it")
        out.append(MatrixEntry(c.name or res.label, res))
    names = [e.name for e in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SparkserveError(f"configurations named twice: {', '.join(dupes)}")
    seen: dict[str, str] = {}
    for e in out:
        key = repr((e.resolved.profile, sorted(engine_env(e.resolved.env).items())))
        if key in seen:
            raise SparkserveError(f"{e.name} resolves to the same server as {seen[key]}: measure it once")
        seen[key] = e.name
    return out


def engine_env(env: dict[str, str]) -> dict[str, str]:
    """The engine variables (VLLM_*, TORCHINDUCTOR_*, ...) a server gets besides the profile's own: a
    patch's switch among them makes another server of the same profile."""
    return {k: v for k, v in env.items() if is_engine_variable(k)}


@contextlib.contextmanager
def _stop_on_term() -> Iterator[None]:
    """Turn SIGTERM into SystemExit so `finally` blocks stop the server (e.g. under `timeout`)."""

    def handler(signum: int, frame: object) -> None:
        say(f"level 6: signal {signum}: stopping the server, leaving the matrix")
        raise SystemExit(128 + signum)

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def run(
    path: Path, store: Path, root: Path, only: list[str] | None = None, work: Path | None = None
) -> LevelResult:
    with _stop_on_term():
        return _run(path, store, root, only, work)


def server_for(e: MatrixEntry, srv: ServerSettings, work: Path, root: Path | None = None) -> Server:
    """The configuration's server (not started): the entrypoint, run by `server.python`, in the
    configuration's container environment plus `server.env`."""
    return entrypoint_server(e.resolved, work, e.name, python=srv.python, extra_env=srv.environment(),
                             root=root)


def _run(path: Path, store: Path, root: Path, only: list[str] | None, work: Path | None) -> LevelResult:
    m = load(path)
    rk = m.kernel_rules
    rules_file = (Path(rk) if Path(rk).is_absolute() else root / rk) if rk else root / RULES_FILE
    all_entries = entries(m, root, rules_file)
    known = [e.name for e in all_entries]
    unknown = [n for n in only or [] if n not in known]
    if unknown:
        raise SparkserveError(f"{path}: no configuration {', '.join(unknown)} (known: {', '.join(known)})")
    res = LevelResult("6", f"matrix {m.name or path.stem}")
    start = time.monotonic()
    b = m.bench
    preset = presets.get(b.preset).with_overrides(b.pp, b.tg, b.depth, b.concurrency, b.runs)
    bench_timeout = b.timeout_s or None
    work = work or root / ".work" / "matrix"
    for e in all_entries:
        if only and e.name not in only:
            continue
        say(f"==> matrix: {e.name}")
        server = server_for(e, m.server, work, root)
        try:
            with serving(server, m.server.ready_timeout_s):
                _measure(e, server, m, res, work, store, root, preset, bench_timeout, rules_file)
        except NotReady as exc:
            res.add(f"{e.name}: server starts", False, f"{exc}; log {server.log}")
    res.wall_s = time.monotonic() - start
    return res


def _measure(e: MatrixEntry, server: Server, m: Matrix, res: LevelResult, work: Path, store: Path,
             root: Path, preset: presets.Preset, bench_timeout: float | None, rules_file: Path) -> None:
    """Levels 1, 1.5 and 4 of one configuration on its running server."""
    random_weights = m.random_weights
    l1 = smoke.run(Client(server.base_url), random_weights=random_weights)
    l1_file = work / f"{e.name}-level1.json"
    l1.write(l1_file)
    res.add(f"{e.name}: level 1", l1.ok, l1.summary())
    run_, l4 = benchmark.run(
        benchmark.BenchSpec(
            base_url=server.base_url,
            tokenizer=Path(m.tokenizer),
            preset=preset,
            configuration=e.name,
            store=store,
            root=root,
            hardware=m.hardware,
            engine_log=server.log,
            server_pid=server.pid,
            serve_python=m.server.python,
            attach=(l1_file,),
            kernel_rules=rules_file,
            timeout_s=bench_timeout,
            token_relay=random_weights,
            random_weights=random_weights,
            profile=profile_record(e.resolved.name, e.resolved.env, e.resolved.overrides),
        )
    )
    res.add(f"{e.name}: levels 1.5 + 4", l4.ok, f"{l4.summary()} -> {run_.hardware}/{run_.run_id}")
