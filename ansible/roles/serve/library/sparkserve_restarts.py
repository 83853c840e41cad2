#!/usr/bin/python
"""Report a restart of the serving container since the last run recorded it; record it for the next."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sparkserve_restarts
short_description: Warn when the serving container restarted since the last run
description:
  - Reads the serving container of a compose project (its ID, Docker's RestartCount and StartedAt) and
    compares it with what the last run recorded in I(record); a restart in between (the restart policy after
    a crash or the watchdog, or a start of Docker or the host) is reported as a warning naming when, even
    when the run changes nothing.
  - With I(save), writes the container's state into I(record) for the next run (not in check mode). The
    record is the role's own bookkeeping, not a change of the deployment: the module reports no change.
options:
  project:
    description: The compose project whose C(serve) service is read.
    type: str
    required: true
  record:
    description: The JSON file of the last run's reading.
    type: path
    required: true
  release:
    description: The release the container serves (recorded, and named in the warning).
    type: str
    required: true
  save:
    description: Record the container's state for the next run.
    type: bool
    default: false
author: sparkserve
"""

RETURN = r"""
restarted: {description: the container restarted since the recorded reading, type: bool, returned: always}
message: {description: what the warning said (empty when nothing restarted), type: str, returned: always}
container: {description: "the reading: id, restart_count, started_at (empty: no container)", type: dict,
            returned: always}
"""

import datetime
import json
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule

_FORMAT = "{{.Id}} {{.RestartCount}} {{.State.StartedAt}}"


def reading(text):
    """`docker inspect --format '{{.Id}} {{.RestartCount}} {{.State.StartedAt}}'` as a dict."""
    cid, count, started = text.split()
    return {"id": cid, "restart_count": int(count), "started_at": started}


def restart_since(last, now, release):
    """What to warn about (None: nothing) when the container read `now` was read as `last` by the run
    before. Another container (a new release, a recreate) or no record is no restart of this one."""
    if not last or not now or last.get("id") != now["id"]:
        return None
    restarts = now["restart_count"] - int(last.get("restart_count", 0))
    if restarts > 0:
        return ("release %s: the server restarted %d time(s) since the last run (%s), last started at %s: "
                "its restart policy brought it back after it exited (a crash, or the entrypoint's watchdog: "
                "exit 8); `docker compose logs serve` in the release folder says why"
                % (release, restarts, last.get("recorded_at", "?"), now["started_at"]))
    if now["started_at"] != last.get("started_at"):
        return ("release %s: the server was started again since the last run (%s), at %s: a start of "
                "Docker or of the host, a `docker restart`, or the restart of a run that failed" % (release, last.get("recorded_at", "?"),
                                                                 now["started_at"]))
    return None


def _read_record(path):
    try:
        with open(path) as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def _write_record(path, data):
    folder = os.path.dirname(path)
    os.makedirs(folder, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".sparkserve-")
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def main():
    module = AnsibleModule(
        argument_spec={
            "project": {"type": "str", "required": True},
            "record": {"type": "path", "required": True},
            "release": {"type": "str", "required": True},
            "save": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    rc, out, err = module.run_command(["docker", "ps", "-aq", "--filter",
                                       "label=com.docker.compose.project=%s" % p["project"],
                                       "--filter", "label=com.docker.compose.service=serve"])
    ids = out.split()
    if rc != 0:
        module.fail_json(msg="docker ps failed: %s" % (err or out).strip())
    now = {}
    if ids:
        rc, out, err = module.run_command(["docker", "inspect", "--format", _FORMAT, ids[0]])
        if rc != 0:
            module.fail_json(msg="docker inspect %s failed: %s" % (ids[0], (err or out).strip()))
        now = reading(out)
    message = restart_since(_read_record(p["record"]), now, p["release"])
    if message:
        module.warn(message)
    if p["save"] and now and not module.check_mode:
        recorded = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        _write_record(p["record"], dict(now, release=p["release"], recorded_at=recorded))
    module.exit_json(changed=False, restarted=bool(message), message=message or "", container=now)


if __name__ == "__main__":
    main()
