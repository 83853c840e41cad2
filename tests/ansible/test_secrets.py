"""No task that carries a secret runs `async`: an async job writes the module's arguments (a token on
stdin among them) into a status file under ~/.ansible_async on the host, mode 0644, which an interrupted
run leaves behind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ANSIBLE = Path(__file__).resolve().parents[2] / "ansible"
TASK_FILES = sorted(
    [*ANSIBLE.glob("roles/*/tasks/*.yml"), *ANSIBLE.glob("roles/*/handlers/*.yml"), *ANSIBLE.glob("*.yml")]
)


def tasks(items: Any) -> Iterator[dict[str, Any]]:
    """Every task of a task list or a playbook, blocks and plays opened."""
    for item in items or []:
        if not isinstance(item, dict):
            continue
        for key in ("tasks", "pre_tasks", "post_tasks", "handlers", "block", "rescue", "always"):
            yield from tasks(item.get(key))
        if not any(k in item for k in ("hosts", "block", "import_playbook")):
            yield item


def carries_a_secret(task: dict[str, Any]) -> bool:
    args = [v for v in task.values() if isinstance(v, dict)]
    return bool(task.get("no_log")) or any("stdin" in a for a in args)


def test_the_task_lists_are_found() -> None:
    names = [t.get("name", "") for f in TASK_FILES for t in tasks(yaml.safe_load(f.read_text()))]
    assert any(n.startswith("Download the model") for n in names)


def test_no_task_with_a_secret_runs_async() -> None:
    offenders = [
        f"{f.relative_to(ANSIBLE)}: {t.get('name')}"
        for f in TASK_FILES
        for t in tasks(yaml.safe_load(f.read_text()))
        if "async" in t and carries_a_secret(t)
    ]
    assert not offenders, offenders


def test_the_check_counts_an_async_task_with_stdin() -> None:
    task = {"name": "x", "ansible.builtin.command": {"argv": ["cat"], "stdin": "{{ token }}"}, "async": 60}
    assert list(tasks([{"block": [task]}])) == [task]
    assert carries_a_secret(task)
