"""The serve role's own logic on this machine, without a target host or Docker: its tasks run by
ansible-playbook against localhost (a `docker` stand-in on PATH answers what the tasks ask), its modules'
pure parts called directly. Needs ansible-playbook beside this Python (the ansible venv of
scripts/ci/50-ansible.sh)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE = ROOT / "ansible"
LIBRARY = ANSIBLE / "roles/serve/library"
PLAYBOOK_BIN = Path(sys.executable).parent / "ansible-playbook"
# What the serving container's log ends with when vLLM's engine fails at start.
ENGINE_FAILURE = """\
(EngineCore_DP0 pid=212) Traceback (most recent call last):
(EngineCore_DP0 pid=212)   File "/opt/venv/lib/python3.13/site-packages/vllm/v1/engine/core.py", line 700
(EngineCore_DP0 pid=212) ValueError: max_model_len 200000 exceeds the model's 131072
(APIServer pid=1) Traceback (most recent call last):
(APIServer pid=1)   File "/opt/venv/lib/python3.13/site-packages/vllm/v1/engine/utils.py", line 90
(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s)
"""


def module(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, LIBRARY / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def fake_docker(tmp: Path, answers: dict[str, str]) -> Path:
    """A `docker` whose output for `docker <verb> ...` is answers[verb] (`logs`: a file's text)."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    (tmp / "answers.json").write_text(json.dumps(answers))
    script = bin_dir / "docker"
    script.write_text(f"#!{sys.executable}\nimport json, sys\n"
                      f"answers = json.load(open({str(tmp / 'answers.json')!r}))\n"
                      "verb = sys.argv[1]\n"
                      "if verb not in answers:\n    sys.exit(f'docker {verb}: not answered here')\n"
                      "print(answers[verb], end='')\n")
    script.chmod(0o755)
    return bin_dir


def play(tmp: Path, tasks: list[dict[str, Any]], extra: dict[str, Any], *flags: str,
         path: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`tasks` on localhost with the repository's ansible.cfg, roles and filters."""
    book = tmp / "play.yml"
    book.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    (tmp / "extra.json").write_text(json.dumps(extra))
    env = {**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_LOCAL_TEMP": str(tmp / "ansible-tmp"), "ANSIBLE_LIBRARY": str(LIBRARY)}
    if path is not None:
        env["PATH"] = f"{path}:{env['PATH']}"
    argv = [str(PLAYBOOK_BIN), "-i", "localhost,", "-c", "local", str(book), "-e", f"@{tmp / 'extra.json'}",
            "-e", f"ansible_python_interpreter={sys.executable}", *flags]
    return subprocess.run(argv, cwd=ANSIBLE, env=env, capture_output=True, text=True, timeout=300,
                          check=False)


def role(tasks_from: str) -> dict[str, Any]:
    return {"ansible.builtin.include_role": {"name": "serve", "tasks_from": tasks_from}}


def test_a_port_out_of_range_is_refused_before_anything_changes(tmp_path: Path) -> None:
    """serve_host_port=70000 used to reach Docker, which called it `taken on the host by something else`."""
    r = play(tmp_path, [role("profile")], {"serve_host_port": 70000})
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "serve_host_port 70000 is not a TCP port (1-65535)" in out and "changed=0" in out
    assert play(tmp_path, [role("profile")], {"serve_host_port": 65535}).returncode == 0


def test_a_start_that_fails_says_why_in_one_line_and_keeps_the_log(tmp_path: Path) -> None:
    """It used to be `did not turn healthy` with ~1,300 characters of joined traceback lines."""
    release = tmp_path / "releases/abc123"
    release.mkdir(parents=True)
    docker = {"ps": "c0ffee\n", "inspect": "starting 1 running\n", "logs": ENGINE_FAILURE}
    r = play(tmp_path, [role("health")],
             {"serve_root": str(tmp_path), "serve_release_id": "abc123", "serve_project_name": "p",
              "serve_health_interval_s": 1, "serve_health_timeout_s": 3},
             path=fake_docker(tmp_path, docker))
    out = r.stdout + r.stderr
    assert r.returncode != 0
    msg = next(line for line in out.splitlines() if "release abc123 exited at start: " in line)
    assert "exited at start: ValueError: max_model_len 200000 exceeds the model's 131072 (" in msg
    assert f"the full log: {release / 'FAILED.log'})" in msg and "Traceback" not in msg
    assert (release / "FAILED.log").read_text() == ENGINE_FAILURE
    # running and unhealthy (a server that hangs) is no exit: said as before, with the log kept too
    docker.update(inspect="unhealthy 0 running\n", logs="INFO loading\nWARNING slow\n")
    r = play(tmp_path, [role("health")],
             {"serve_root": str(tmp_path), "serve_release_id": "abc123", "serve_project_name": "p"},
             path=fake_docker(tmp_path, docker))
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert ("release abc123 did not turn healthy (health, restarts, state: unhealthy 0 running); last log "
            "lines: INFO loading / WARNING slow (the full log: ") in " ".join(out.split())


def test_a_restart_since_the_last_run_is_a_warning(tmp_path: Path) -> None:
    """A server that crashed and came back by its restart policy made a re-run say nothing (changed=0)."""
    record = tmp_path / "last-run.json"
    task = {"sparkserve_restarts": {"project": "p", "record": str(record), "release": "abc123",
                                    "save": "{{ save }}"}}
    docker = {"ps": "c0ffee\n", "inspect": "c0ffee 2 2026-11-27T10:00:00.5Z\n"}
    r = play(tmp_path, [task], {"save": True}, path=fake_docker(tmp_path, docker))
    assert r.returncode == 0 and "[WARNING]" not in r.stdout + r.stderr, r.stdout + r.stderr
    assert json.loads(record.read_text())["restart_count"] == 2
    docker["inspect"] = "c0ffee 3 2026-11-27T11:30:00.1Z\n"
    r = play(tmp_path, [task], {"save": False}, path=fake_docker(tmp_path, docker))
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "changed=0" in out
    assert "[WARNING]: release abc123: the server restarted 1 time(s) since the last run" in out
    assert "last started at 2026-11-27T11:30:00.1Z" in out


def test_what_counts_as_a_restart() -> None:
    restart_since = module("sparkserve_restarts").restart_since
    last = {"id": "c1", "restart_count": 0, "started_at": "t0", "recorded_at": "r"}

    def now(cid: str, count: int, started: str) -> dict[str, object]:
        return {"id": cid, "restart_count": count, "started_at": started}

    assert restart_since(last, now("c1", 0, "t0"), "x") is None
    assert "restarted 2 time(s)" in restart_since(last, now("c1", 2, "t1"), "x")
    assert "was started again" in restart_since(last, now("c1", 0, "t1"), "x")  # Docker or the host started
    assert restart_since(last, now("c2", 5, "t1"), "x") is None  # another container: a new release
    assert restart_since(None, now("c1", 5, "t1"), "x") is None  # the first run records


def test_check_mode_shows_what_a_new_release_changes_against_the_one_that_runs(tmp_path: Path) -> None:
    """`--check --diff` named the release it would write and showed nothing of what changes in it."""
    running, new = tmp_path / "releases/aaa", tmp_path / "releases/bbb"
    running.mkdir(parents=True)
    (running / "local.env").write_text("MAX_NUM_SEQS=4\nHF_TOKEN=hf_secret\n")
    (running / "docker-compose.yml").write_text("services: {}\n")
    task = {"sparkserve_files": {"dest": str(new), "private": ["local.env"], "diff_against": str(running),
                                 "files": {"local.env": "MAX_NUM_SEQS=8\nHF_TOKEN=hf_other\n",
                                           "docker-compose.yml": "services: {}\n"}}}
    r = play(tmp_path, [task], {}, "--check", "--diff")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "-MAX_NUM_SEQS=4" in r.stdout and "+MAX_NUM_SEQS=8" in r.stdout
    assert "hf_secret" not in r.stdout and "hf_other" not in r.stdout and "HF_TOKEN=(hidden)" in r.stdout
    assert "docker-compose.yml" not in r.stdout.split("TASK [sparkserve_files]")[1]  # the same as it runs
    assert not new.exists()  # a preview writes nothing


def test_a_check_run_previews_the_changed_values_the_image_and_a_restart(tmp_path: Path) -> None:
    """The whole role in --check --diff against a host whose release `aaa` runs (Docker's answers stood in
    for): what the new release changes, whether the image does, and the server's restart since the last
    run; nothing written."""
    root = tmp_path / "srv"
    (root / "releases/aaa").mkdir(parents=True)
    (root / "releases/aaa/local.env").write_text(
        "# Managed by Ansible (sparkserve serve role): these values override profiles/spark.env.\n"
        "HF_HUB_OFFLINE=1\nMAX_NUM_SEQS=4\n")
    (root / "current").symlink_to("releases/aaa")
    (root / "last-run.json").write_text(json.dumps({"id": "c0ffee", "restart_count": 0, "started_at": "t0",
                                                   "recorded_at": "2026-11-27T09:00:00Z"}))
    docker = {"image": "sha256:abc\n", "run": "  profile: spark\n  command: x\n", "ps": "c0ffee\n",
              "inspect": "c0ffee 1 t1\n"}
    r = play(tmp_path, [role("main")], {"serve_root": str(root), "serve_local_env": {"MAX_NUM_SEQS": "8"}},
             "--check", "--diff", path=fake_docker(tmp_path, docker))
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert f"--- before: {root}/releases/aaa/local.env\n" in out
    assert "-MAX_NUM_SEQS=4\n+MAX_NUM_SEQS=8\n" in out
    assert "the release that runs now: aaa; image: the same as it runs" in " ".join(out.split())
    assert ("[WARNING]: release aaa: the server restarted 1 time(s) since the last run "
            "(2026-11-27T09:00:00Z)") in out
    assert sorted(p.name for p in (root / "releases").iterdir()) == ["aaa"]


def _preview(tmp_path: Path, extra: dict[str, Any]) -> tuple[str, str]:
    """The role in --check --diff against a host whose release `aaa` runs: its output and the id of the
    release it would write."""
    root = tmp_path / "srv"
    if not root.exists():
        (root / "releases/aaa").mkdir(parents=True)
        (root / "current").symlink_to("releases/aaa")
    docker = {"image": "sha256:abc\n", "run": "  profile: spark\n  command: x\n", "ps": "c0ffee\n",
              "inspect": "c0ffee 0 t0\n"}
    r = play(tmp_path, [role("main")], {"serve_root": str(root), **extra}, "--check", "--diff",
             path=fake_docker(tmp_path, docker))
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    (release,) = re.findall(r"check mode: release (\w+) ", " ".join(out.split()))
    return out, release


def test_metrics_are_no_new_release_of_serve(tmp_path: Path) -> None:
    """serve_metrics adds the metrics profile through the release's .env (its files and Grafana's password
    are serve_root's): the release, so serve's image tag and container, stays the one it was without."""
    without, release = _preview(tmp_path, {})
    with_metrics, same = _preview(tmp_path, {"serve_metrics": True})
    assert same == release
    assert "COMPOSE_PROFILES" not in without
    root = tmp_path / "srv"
    assert "+COMPOSE_PROFILES=metrics\n" in with_metrics
    assert f"+SPARKSERVE_METRICS_DIR={root}/metrics\n" in with_metrics
    assert f"+SPARKSERVE_GRAFANA_PASSWORD_FILE={root}/grafana-admin-password\n" in with_metrics
    assert "Make Grafana's admin password once" in with_metrics
    assert not (root / "grafana-admin-password").exists()  # a preview writes nothing


def test_metrics_on_two_nodes_are_refused_before_anything_changes(tmp_path: Path) -> None:
    cluster = {"node_rank": 0, "nnodes": 2, "master_addr": "10.0.0.1", "master_port": 29501, "env": {}}
    r = play(tmp_path, [role("profile")], {"serve_metrics": True, "serve_cluster": cluster})
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "changed=0" in out
    assert "serve_metrics is for one host" in " ".join(out.split())
    assert play(tmp_path, [role("profile")], {"serve_metrics": True}).returncode == 0


def test_the_metrics_files_are_the_checkouts(tmp_path: Path) -> None:
    """What serve_root/metrics gets: metrics/ of this checkout, file for file, content for content."""
    out = tmp_path / "files.json"
    template = ANSIBLE / "roles/serve/templates/metrics.json.j2"
    task = {"ansible.builtin.copy": {"content": f"{{{{ lookup('ansible.builtin.template', '{template}') }}}}",
                                     "dest": str(out)}}
    r = play(tmp_path, [task], {"serve_repo_root": str(ROOT)})
    assert r.returncode == 0, r.stdout + r.stderr
    files = json.loads(out.read_text())
    shipped = {str(p.relative_to(ROOT / "metrics")): p.read_text() for p in (ROOT / "metrics").rglob("*")
               if p.is_file()}
    assert files == shipped


CLUSTER_WORKER = {"node_rank": 1, "nnodes": 2, "master_addr": "10.0.0.1", "master_port": 29501,
                  "env": {"NCCL_SOCKET_IFNAME": "enp1s0f1np1"}}


def test_two_nodes_reach_the_container_as_typed_profile_variables(tmp_path: Path) -> None:
    """The rank, node count, head and port went to vLLM as flags appended to VLLM_EXTRA_ARGS (the profile's
    own extra arguments copied into local.env to merge with them); now they are the profile variables the
    entrypoint checks, and extra arguments stay what the user gave."""
    out = tmp_path / "local.json"
    dump = {"ansible.builtin.copy": {"content": "{{ serve_local_env_effective | to_json }}",
                                     "dest": str(out)}}
    r = play(tmp_path, [role("profile"), dump], {"serve_cluster": CLUSTER_WORKER, "serve_host_port": 8001,
                                                 "serve_local_env": {"VLLM_EXTRA_ARGS": "--max-logprobs 5"}})
    assert r.returncode == 0, r.stdout + r.stderr
    local = json.loads(out.read_text())
    assert {k: local[k] for k in ("SPARKSERVE_NNODES", "SPARKSERVE_NODE_RANK", "SPARKSERVE_MASTER_ADDR",
                                  "SPARKSERVE_MASTER_PORT", "SPARKSERVE_PORT")} == {
        "SPARKSERVE_NNODES": "2", "SPARKSERVE_NODE_RANK": "1", "SPARKSERVE_MASTER_ADDR": "10.0.0.1",
        "SPARKSERVE_MASTER_PORT": "29501", "SPARKSERVE_PORT": "8001"}
    assert local["VLLM_EXTRA_ARGS"] == "--max-logprobs 5"
    # one host: none of them
    r = play(tmp_path, [role("profile"), dump], {})
    assert r.returncode == 0, r.stdout + r.stderr
    assert not {k for k in json.loads(out.read_text()) if k.startswith("SPARKSERVE_")}


class _ComposeLoader(yaml.SafeLoader):
    """Compose's YAML: its `!reset` tag as null."""


_ComposeLoader.add_constructor("!reset", lambda loader, node: None)


def _compose_override(tmp_path: Path, extra: dict[str, Any]) -> dict[str, Any]:
    out = tmp_path / "compose.ansible.yml"
    template = ANSIBLE / "roles/serve/templates/compose.ansible.yml.j2"
    task = {"ansible.builtin.copy": {"content": f"{{{{ lookup('ansible.builtin.template', '{template}') }}}}",
                                     "dest": str(out)}}
    r = play(tmp_path, [task], {"serve_model_cache_dir": "/var/lib/sparkserve/huggingface", **extra})
    assert r.returncode == 0, r.stdout + r.stderr
    return dict(yaml.load(out.read_text(), Loader=_ComposeLoader)["services"]["serve"])


def test_both_nodes_run_the_images_entrypoint_and_healthcheck(tmp_path: Path) -> None:
    """The worker's release had an inline Python program as its entrypoint that rebuilt vLLM's command
    line by itself, and `os.kill(1, 0)` as its healthcheck (true while the container exists)."""
    for rank in (0, 1):
        serve = _compose_override(tmp_path, {"serve_cluster": {**CLUSTER_WORKER, "node_rank": rank}})
        assert "entrypoint" not in serve and "healthcheck" not in serve, serve
        assert serve["network_mode"] == "host" and serve["environment"]["NCCL_SOCKET_IFNAME"] == "enp1s0f1np1"
    assert "network_mode" not in _compose_override(tmp_path, {"serve_cluster": {}})


def test_a_rerun_that_only_restarts_the_gates_is_no_change() -> None:
    """Compose's `up` runs serve's one-shot gates again on every run; the role's changed_when must leave out
    each of them (a gate it misses makes every re-run 'changed' and fails molecule's idempotence), and
    nothing of serve's own."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    gates = [name for name, dep in compose["services"]["serve"]["depends_on"].items()
             if dep.get("condition") == "service_completed_successfully"]
    assert gates
    tasks = yaml.safe_load((ANSIBLE / "roles/serve/tasks/main.yml").read_text())

    def walk(items: list[dict[str, Any]]) -> Any:
        for t in items:
            yield t
            for key in ("block", "rescue", "always"):
                yield from walk(t.get(key, []))

    up = next(t for t in walk(tasks) if t.get("name") == "Bring the release up")
    pattern = re.search(r"rejectattr\('id', 'search', '([^']+)'\)", up["changed_when"])
    assert pattern, up["changed_when"]
    for gate in gates:
        assert re.search(pattern.group(1), f"sparkserve-{gate}-1"), gate
    for own in ("sparkserve-serve-1", "sparkserve_default", "sparkserve_sparkserve-state"):
        assert not re.search(pattern.group(1), own), own
