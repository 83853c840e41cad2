#!/usr/bin/python
"""Write a set of files (path -> content) under one directory in a single round trip."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sparkserve_files
short_description: Write several small text files under one directory at once
description:
  - Creates I(dest) and the folders of the files, and writes each file whose content differs
    (atomically, through a temporary file). Reports changed only when a file was written.
  - One module call instead of one per file, which matters on slow connections (docker exec).
options:
  dest:
    description: The directory.
    type: path
    required: true
  files:
    description: Relative path -> text content.
    type: dict
    required: true
  mode:
    description: Mode of the files (folders get the matching x bits).
    type: str
    default: "0644"
  private:
    description: Relative paths written with mode 0600 instead (secrets, such as an env file).
    type: list
    elements: str
    default: []
author: sparkserve
"""

RETURN = r"""
written: {description: the relative paths written, type: list, returned: always}
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(
        argument_spec={
            "dest": {"type": "path", "required": True},
            "files": {"type": "dict", "required": True},
            "mode": {"type": "str", "default": "0644"},
            "private": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    dest, files = module.params["dest"], module.params["files"]
    private = set(module.params["private"])
    written = []
    for rel in sorted(files):
        mode = 0o600 if rel in private else int(module.params["mode"], 8)
        if os.path.isabs(rel) or ".." in rel.split("/"):
            module.fail_json(msg="file path must stay under dest: %s" % rel)
        path = os.path.join(dest, rel)
        data = str(files[rel]).encode()
        try:
            with open(path, "rb") as fh:
                if fh.read() == data and (os.stat(path).st_mode & 0o7777) == mode:
                    continue
        except OSError:
            pass
        written.append(rel)
        if module.check_mode:
            continue
        folder = os.path.dirname(path)
        os.makedirs(folder, mode=0o755, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".sparkserve-")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    module.exit_json(changed=bool(written), written=written)


if __name__ == "__main__":
    main()
