#!/usr/bin/python
"""Is a Hugging Face model revision complete in a host's HF cache? Reads only; never changes anything."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sparkserve_hf_cache
short_description: Check that a model revision is complete in a Hugging Face cache
description:
  - Looks for C(HF_HOME/hub/models--ORG--NAME/snapshots/COMMIT) (COMMIT from C(refs/REVISION) unless
    the revision is a commit), its C(config.json) and every weight file named by
    C(model.safetensors.index.json) (or at least one C(*.safetensors)); each must resolve to a non-empty file.
  - Read-only, supports check mode, never reports a change.
options:
  cache_dir:
    description: The HF_HOME directory on the host (its C(hub/) holds the models).
    type: path
    required: true
  repo:
    description: The model id, e.g. C(openai/gpt-oss-120b).
    type: str
    required: true
  revision:
    description: A branch or tag (resolved through C(refs/)) or a 40-hex commit.
    type: str
    default: main
author: sparkserve
"""

RETURN = r"""
present: {description: the revision is complete, type: bool, returned: always}
commit: {description: the snapshot's commit, type: str, returned: always}
snapshot: {description: the snapshot directory, type: str, returned: always}
missing: {description: files named by the index that are absent or empty, type: list, returned: always}
size_gb: {description: size of the snapshot's files in GB, type: float, returned: always}
reason: {description: why the revision is not complete, type: str, returned: always}
"""

import json
import os
import re

from ansible.module_utils.basic import AnsibleModule


def inspect(cache_dir, repo, revision):
    repo_dir = os.path.join(cache_dir, "hub", "models--" + repo.replace("/", "--"))
    out = {"present": False, "commit": "", "snapshot": "", "missing": [], "size_gb": 0.0, "reason": ""}
    if not os.path.isdir(repo_dir):
        out["reason"] = "%s is not in the cache (no %s)" % (repo, repo_dir)
        return out
    if re.match(r"^[0-9a-f]{40}$", revision):
        commit = revision
    else:
        ref = os.path.join(repo_dir, "refs", revision)
        try:
            with open(ref) as fh:
                commit = fh.read().strip()
        except OSError:
            out["reason"] = "revision %s of %s is not in the cache (no %s)" % (revision, repo, ref)
            return out
    snap = os.path.join(repo_dir, "snapshots", commit)
    out.update(commit=commit, snapshot=snap)
    if not os.path.isdir(snap):
        out["reason"] = "snapshot %s is missing" % snap
        return out
    wanted = ["config.json"]
    index = os.path.join(snap, "model.safetensors.index.json")
    if os.path.exists(index):
        try:
            with open(index) as fh:
                wanted += sorted(set(json.load(fh)["weight_map"].values()))
        except (OSError, ValueError, KeyError) as exc:
            out["reason"] = "unreadable %s: %s" % (index, exc)
            return out
    else:
        shards = [f for f in os.listdir(snap) if f.endswith(".safetensors")]
        if not shards:
            out["reason"] = "no *.safetensors and no model.safetensors.index.json in %s" % snap
            return out
        wanted += shards
    size = 0
    for name in wanted:
        path = os.path.join(snap, name)
        try:
            st = os.stat(path)  # follows the blob symlink
        except OSError:
            out["missing"].append(name)
            continue
        if st.st_size == 0:
            out["missing"].append(name)
        size += st.st_size
    out["size_gb"] = round(size / 1e9, 2)
    if out["missing"]:
        out["reason"] = "%d of %d files missing or empty in %s (first: %s)" % (
            len(out["missing"]), len(wanted), snap, out["missing"][0])
        return out
    out["present"] = True
    return out


def main():
    module = AnsibleModule(
        argument_spec={
            "cache_dir": {"type": "path", "required": True},
            "repo": {"type": "str", "required": True},
            "revision": {"type": "str", "default": "main"},
        },
        supports_check_mode=True,
    )
    p = module.params
    module.exit_json(changed=False, **inspect(p["cache_dir"], p["repo"], p["revision"]))


if __name__ == "__main__":
    main()
