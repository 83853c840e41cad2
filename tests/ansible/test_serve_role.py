"""The serve role's own logic on this machine, without a target host or Docker: its tasks run by
ansible-playbook against localhost. Needs ansible-playbook beside this Python (the ansible venv of
scripts/ci/50-ansible.sh)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE = ROOT / "ansible"
LIBRARY = ANSIBLE / "roles/serve/library"
PLAYBOOK_BIN = Path(sys.executable).parent / "ansible-playbook"


def play(tmp: Path, tasks: list[dict[str, Any]], extra: dict[str, Any],
         *flags: str) -> subprocess.CompletedProcess[str]:
    """`tasks` on localhost with the repository's ansible.cfg, roles and filters."""
    book = tmp / "play.yml"
    book.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    (tmp / "extra.json").write_text(json.dumps(extra))
    env = {**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_LOCAL_TEMP": str(tmp / "ansible-tmp"), "ANSIBLE_LIBRARY": str(LIBRARY)}
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
