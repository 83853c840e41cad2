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
  diff_against:
    description:
      - With --diff, a file that I(dest) does not have yet is compared with the same path under this
        directory (the release that runs), so a new release shows what it changes. In a private file the
        values of names that look secret (TOKEN, KEY, SECRET, PASSWORD) are hidden.
    type: path
author: sparkserve
"""

RETURN = r"""
written: {description: the relative paths written, type: list, returned: always}
"""

import os
import re
import tempfile

from ansible.module_utils.basic import AnsibleModule

# NAME=value lines of an env file whose value must not appear in a diff
_SECRET_LINE = re.compile(r"^(\s*(?:export\s+)?\w*(?:TOKEN|KEY|SECRET|PASSWORD|PASSWD)\w*\s*[=:]\s*)\S.*$",
                          re.MULTILINE | re.IGNORECASE)


def _read(path):
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def masked(text):
    """An env file's text with the values of secret-looking names hidden."""
    return _SECRET_LINE.sub(r"\1(hidden)", text)


def file_diff(before, before_path, after, after_path, private):
    """Ansible's diff of one file: what it holds now (or what the release that runs has), and what it
    will hold."""
    show = masked if private else (lambda text: text)
    old = "" if before is None else before.decode(errors="replace")
    return {"before": show(old), "after": show(after.decode(errors="replace")),
            "before_header": before_path if before is not None else "%s (none)" % before_path,
            "after_header": after_path}


def main():
    module = AnsibleModule(
        argument_spec={
            "dest": {"type": "path", "required": True},
            "files": {"type": "dict", "required": True},
            "mode": {"type": "str", "default": "0644"},
            "private": {"type": "list", "elements": "str", "default": []},
            "diff_against": {"type": "path"},
        },
        supports_check_mode=True,
    )
    dest, files = module.params["dest"], module.params["files"]
    private = set(module.params["private"])
    against = module.params["diff_against"]
    written, diffs = [], []
    for rel in sorted(files):
        mode = 0o600 if rel in private else int(module.params["mode"], 8)
        if os.path.isabs(rel) or ".." in rel.split("/"):
            module.fail_json(msg="file path must stay under dest: %s" % rel)
        path = os.path.join(dest, rel)
        data = str(files[rel]).encode()
        current = _read(path)
        if current == data and (os.stat(path).st_mode & 0o7777) == mode:
            continue
        written.append(rel)
        if module._diff:
            # a file the new release's folder does not have yet: compared with the release that runs
            before_path = os.path.join(against, rel) if current is None and against else path
            before = _read(before_path)
            if before != data:
                diffs.append(file_diff(before, before_path, data, path, rel in private))
        if module.check_mode:
            continue
        folder = os.path.dirname(path)
        os.makedirs(folder, mode=0o755, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".sparkserve-")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    module.exit_json(changed=bool(written), written=written, diff=diffs)


if __name__ == "__main__":
    main()
