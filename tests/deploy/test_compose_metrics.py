"""The metrics profile of docker-compose.yml through `docker compose config` (and, marked engine, `up`
against the CPU stand-in's engine): pinned upstream images, loopback ports, no default Grafana password,
bounded retention, serve's API key on the scrape, provisioning that matches the mounts, and a stack that
never changes what serve does. docs/METRICS.md."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkserve.serving import environment, profile
from tests.deploy.conftest import CPU_OVERRIDE, ROOT, config
from tests.deploy.test_compose_up import Project, need

METRICS = ("prometheus", "node-exporter", "grafana", "grafana-check", "metrics-check")
UPSTREAM = ("prometheus", "node-exporter", "grafana", "grafana-check")  # pulled from their registries
SERVING = ("serve", "preflight", "gpu-check")
METRICS_OVERRIDE = "tests/docker/metrics/compose.override.yml"
SERVE_CPU_METRICS = "tests/docker/metrics/compose.serve-cpu.yml"
DIGEST = re.compile(r"^[a-z0-9./-]+:[A-Za-z0-9._-]+@sha256:[0-9a-f]{64}$")


def metrics_config(env: dict[str, str] | None = None) -> dict[str, Any]:
    return dict(config("docker-compose.yml", profile="metrics", env=env)["services"])


def env_of(service: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in (service.get("environment") or {}).items() if v is not None}


def test_the_profile_adds_its_services_and_only_with_the_profile() -> None:
    services = metrics_config()
    for name in METRICS:
        assert services[name]["profiles"] == ["metrics"], name
    assert not set(METRICS) & set(config("docker-compose.yml")["services"])


def test_upstream_images_are_pinned_by_digest() -> None:
    services = metrics_config()
    for name in UPSTREAM:
        assert DIGEST.match(services[name]["image"]), services[name]["image"]
    assert services["grafana"]["image"] == services["grafana-check"]["image"]
    # the one check of ours runs the image serve runs, and is never built or pulled for it
    assert services["metrics-check"]["image"] == services["serve"]["image"]
    assert services["metrics-check"]["pull_policy"] == "never" and "build" not in services["metrics-check"]


def test_ports_are_on_loopback_unless_told_otherwise() -> None:
    for env, want in (({}, "127.0.0.1"), ({"SPARKSERVE_METRICS_BIND": "0.0.0.0"}, "0.0.0.0")):
        services = metrics_config(env)
        published = {name: s.get("ports") or [] for name, s in services.items() if name in METRICS}
        assert {p["target"] for p in published["prometheus"]} == {9090}
        assert {p["target"] for p in published["grafana"]} == {3000}
        for name in ("node-exporter", "grafana-check", "metrics-check"):
            assert not published[name], name
        for ports in published.values():
            assert all(p["host_ip"] == want for p in ports), ports
    # serve's bind is its own knob: the metrics bind does not move it
    serve = metrics_config({"SPARKSERVE_METRICS_BIND": "0.0.0.0"})["serve"]
    assert serve["ports"][0]["host_ip"] == "127.0.0.1"


def test_retention_is_bounded_in_time_and_size() -> None:
    command = metrics_config()["prometheus"]["command"]
    assert "--storage.tsdb.retention.time=15d" in command and "--storage.tsdb.retention.size=2GB" in command
    command = metrics_config({"SPARKSERVE_METRICS_RETENTION": "3d",
                              "SPARKSERVE_METRICS_RETENTION_SIZE": "500MB"})["prometheus"]["command"]
    assert "--storage.tsdb.retention.time=3d" in command and "--storage.tsdb.retention.size=500MB" in command


def _secret_target(service: dict[str, Any], name: str) -> str:
    (secret,) = [s for s in service.get("secrets") or [] if s["source"] == name]
    return str(secret["target"])


def test_the_scrape_sends_serves_api_key_from_the_same_secret(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text("k\n")
    cfg = config("docker-compose.yml", profile="metrics", env={"SPARKSERVE_API_KEY_FILE": str(key)})
    assert cfg["secrets"]["api_key"]["file"] == str(key)
    services = cfg["services"]
    assert _secret_target(services["prometheus"], "api_key") == _secret_target(services["serve"], "api_key")
    prometheus = yaml.safe_load((ROOT / "metrics/prometheus.yml").read_text())
    (serve,) = [j for j in prometheus["scrape_configs"] if j["job_name"] == "serve"]
    assert serve["authorization"]["credentials_file"] == _secret_target(services["prometheus"], "api_key")
    assert serve["static_configs"][0]["targets"] == ["serve:8000"]
    # what Prometheus reads, from where compose mounts it
    mounts = {v["target"]: v for v in services["prometheus"]["volumes"]}
    config_file = next(a.split("=", 1)[1] for a in services["prometheus"]["command"]
                       if a.startswith("--config.file="))
    assert mounts[config_file]["source"] == str(ROOT / "metrics/prometheus.yml")
    assert mounts[config_file]["read_only"]


def test_there_is_no_default_grafana_password() -> None:
    services = metrics_config()
    grafana = services["grafana"]
    env = env_of(grafana)
    assert "GF_SECURITY_ADMIN_PASSWORD" not in env
    assert env["GF_SECURITY_ADMIN_PASSWORD__FILE"] == _secret_target(grafana, "grafana_admin_password")
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "false" and env["GF_USERS_ALLOW_SIGN_UP"] == "false"
    # Grafana starts only after its gate passed
    assert grafana["depends_on"]["grafana-check"]["condition"] == "service_completed_successfully"
    assert config("docker-compose.yml", profile="metrics")["secrets"]["grafana_admin_password"]["file"] == \
        "/dev/null"


def _gate(password: Path | None, as_nobody: bool = False) -> subprocess.CompletedProcess[str]:
    """grafana-check's own script (from the resolved configuration), run here by sh on a password file
    (as_nobody: as uid 65534, when this runs as root, who reads any file)."""
    check = metrics_config()["grafana-check"]
    assert check["entrypoint"][:2] == ["/bin/sh", "-c"] and check["network_mode"] == "none"
    script = check["entrypoint"][2].replace("$$", "$")  # compose's escape, as the container gets it
    target = env_of(check)["GF_SECURITY_ADMIN_PASSWORD__FILE"]
    assert target == _secret_target(check, "grafana_admin_password")
    env = {"PATH": os.environ["PATH"], "GF_SECURITY_ADMIN_PASSWORD__FILE": str(password or "/dev/null")}
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    user = nobody if as_nobody and os.geteuid() == 0 else []
    return subprocess.run([*user, "sh", "-c", script], capture_output=True, text=True, env=env, check=False)


def test_grafana_check_refuses_no_password_and_an_empty_one(tmp_path: Path) -> None:
    for password in (None, tmp_path / "empty"):
        if password:
            password.write_text("")
        r = _gate(password)
        assert r.returncode == 2 and "no Grafana admin password" in r.stderr, (r.returncode, r.stderr)
        assert "SPARKSERVE_GRAFANA_PASSWORD_FILE" in r.stderr
    given = tmp_path / "password"
    given.write_text("s3cret\n")
    r = _gate(given)
    assert r.returncode == 0, r.stderr


def test_grafana_check_refuses_a_password_file_it_cannot_read(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.write_text("s3cret\n")
    locked.chmod(0)
    r = _gate(locked, as_nobody=True)
    assert r.returncode == 2 and "cannot read the admin password file" in r.stderr, r.stderr


def test_grafana_provisioning_matches_the_mounts_and_the_dashboards() -> None:
    grafana = metrics_config()["grafana"]
    mounts = {v["target"]: v for v in grafana["volumes"]}
    prov = ROOT / "metrics/grafana/provisioning"
    for sub in ("datasources", "dashboards"):
        m = mounts[f"/etc/grafana/provisioning/{sub}"]
        assert m["source"] == str(prov / sub) and m["read_only"], m
    (provider,) = yaml.safe_load((prov / "dashboards/sparkserve.yml").read_text())["providers"]
    folder = mounts[provider["options"]["path"]]
    assert folder["source"] == str(ROOT / "metrics/grafana/dashboards") and folder["read_only"]
    (ds,) = yaml.safe_load((prov / "datasources/prometheus.yml").read_text())["datasources"]
    assert ds["url"] == "http://prometheus:9090"
    home = env_of(grafana)["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home.startswith(provider["options"]["path"] + "/")
    assert (ROOT / "metrics/grafana/dashboards" / Path(home).name).is_file(), home
    uids = {json.loads(p.read_text())["uid"] for p in (ROOT / "metrics/grafana/dashboards").glob("*.json")}
    assert uids, "no dashboard"


def test_the_metrics_stack_never_changes_serve(tmp_path: Path) -> None:
    """serve is the same with the profile as without it; no metrics service depends on serve or its gates,
    joins its namespaces, or mounts one of its volumes."""
    env = {"SPARKSERVE_MODEL_DIR": str(tmp_path)}
    plain = config("docker-compose.yml", env=env)["services"]
    with_metrics = config("docker-compose.yml", profile="metrics", env=env)["services"]
    for name in SERVING:
        assert plain[name] == with_metrics[name], name
    serving_volumes = {v.get("source") for name in SERVING for v in plain[name].get("volumes") or []}
    for name in METRICS:
        s = with_metrics[name]
        assert not set(s.get("depends_on") or {}) & set(SERVING), name
        for key in ("network_mode", "pid", "ipc"):
            assert not str(s.get(key, "")).startswith(("service:", "container:")), (name, key)
        assert "volumes_from" not in s, name
        assert not {v.get("source") for v in s.get("volumes") or []} & serving_volumes, name
        # least privilege, as the serving services
        assert s["cap_drop"] == ["ALL"] and s["security_opt"] == ["no-new-privileges:true"], name
        assert s["read_only"] is True and "privileged" not in s, name


def test_the_ci_overrides_resolve(tmp_path: Path) -> None:
    """CI's stand-ins: Debian's Prometheus with the production command line; beside the CPU serve, in its
    network namespace with a generated configuration and no published port."""
    ci = tmp_path / "prometheus.yml"
    ci.write_text("")
    base = config("docker-compose.yml", profile="metrics")["services"]
    alone = config("docker-compose.yml", METRICS_OVERRIDE, profile="metrics")["services"]
    for name in ("prometheus", "node-exporter"):
        assert alone[name]["image"] == "sparkserve/prometheus:ci"
        assert alone[name]["command"] == base[name]["command"]
        assert alone[name]["volumes"] == base[name]["volumes"]
    assert alone["prometheus"]["secrets"] == base["prometheus"]["secrets"]
    env = {"SPARKSERVE_CI_PROMETHEUS_CONFIG": str(ci), "SPARKSERVE_MODEL_DIR": str(tmp_path)}
    beside = config("docker-compose.yml", CPU_OVERRIDE, METRICS_OVERRIDE, SERVE_CPU_METRICS,
                    profile="metrics", env=env)
    services = beside["services"]
    for name in ("prometheus", "node-exporter", "metrics-check"):
        assert services[name]["network_mode"] == "service:serve", name
    assert not services["prometheus"].get("ports")
    mounts = {v["target"]: v["source"] for v in services["prometheus"]["volumes"]}
    assert mounts["/etc/prometheus/sparkserve.yml"] == str(ci)


@pytest.mark.engine
def test_metrics_without_serve_say_serve_is_not_running(tmp_path: Path) -> None:
    """The profile's Prometheus up in a project without serve: serve's target is down because its name
    does not resolve, metrics-check exits 1 saying serve is not running and how to start it, the host is
    scraped, and nothing started serve."""
    env = {"SPARKSERVE_IMAGE": need("SPARKSERVE_IMAGE"), "SPARKSERVE_MODEL_DIR": need("SPARKSERVE_MODEL_DIR")}
    project = Project(("docker-compose.yml", METRICS_OVERRIDE), env)
    try:
        r = project("--profile", "metrics", "up", "-d", "prometheus", "node-exporter")
        assert r.returncode == 0, r.stderr
        # (the wait covers node-exporter's first scrape: its interval is 15 s)
        r = project("--profile", "metrics", "run", "--rm", "metrics-check", "metrics", "check",
                    "--prometheus", "http://prometheus:9090", "--wait", "25")
        out = r.stdout + r.stderr
        assert r.returncode == 1, out
        assert "serve (http://serve:8000/metrics): down: serve is not running in this compose project" in out
        assert "docker compose up -d serve" in out
        assert "node (http://node-exporter:9100/metrics): up" in out
        assert project("ps", "-a", "-q", "serve").stdout.strip() == ""
    finally:
        project("--profile", "metrics", "down", "-v", "--remove-orphans", "-t", "1")


def test_every_metrics_file_compose_mounts_exists_and_the_folder_can_move(tmp_path: Path) -> None:
    """What compose mounts exists in the checkout (a renamed file would be an empty directory mount), and
    SPARKSERVE_METRICS_DIR moves all of it (Ansible keeps these files outside the releases)."""
    services = metrics_config()
    binds = [v["source"] for name in ("prometheus", "grafana") for v in services[name]["volumes"]
             if v["type"] == "bind"]
    assert len(binds) == 4 and all(b.startswith(str(ROOT / "metrics") + "/") for b in binds), binds
    assert all(Path(b).exists() for b in binds), binds
    moved = metrics_config({"SPARKSERVE_METRICS_DIR": str(tmp_path)})
    moved_binds = [v["source"] for name in ("prometheus", "grafana") for v in moved[name]["volumes"]
                   if v["type"] == "bind"]
    assert sorted(moved_binds) == sorted(b.replace(str(ROOT / "metrics"), str(tmp_path)) for b in binds)



def test_a_metrics_knob_in_the_containers_env_file_is_named_as_compose_s(tmp_path: Path) -> None:
    """Every ${SPARKSERVE_*} the metrics services read is a host knob: put in local.env (which only the
    containers read) it is refused by name, not run as an unknown variable."""
    text = (ROOT / "docker-compose.yml").read_text()
    start = text.index("\n  prometheus:\n")
    knobs = set(re.findall(r"\$\{(SPARKSERVE_[A-Z0-9_]+)", text[start:])) - {"SPARKSERVE_IMAGE",
                                                                          "SPARKSERVE_API_KEY_FILE"}
    assert {"SPARKSERVE_METRICS_BIND", "SPARKSERVE_GRAFANA_PASSWORD_FILE"} <= knobs
    for knob in sorted(knobs):
        with pytest.raises(profile.ProfileError, match="read by docker compose on the host"):
            environment.check({knob: "x"})
