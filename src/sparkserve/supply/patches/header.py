"""DEP-3 style patch headers (Debian quilt), plus this project's Gate/Proof/Verified-On/Forward fields.

`Forwarded` is DEP-3's (was it sent upstream); `Forward` says whether it is ready to be: `ready: <why>`
or `not ready: <what is missing>` (`sparkserve patches export --to-upstream` writes the ready ones as
branches a maintainer can review).

A patch file is the header, a line '---', then a git diff. The header is also the commit
message of the patch in a source tree, byte for byte, which is what makes export exact.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

REQUIRED = ("Description", "Origin", "Forwarded", "Forward", "Gate", "Proof", "Verified-On", "Last-Update")
_FORWARD = re.compile(r"^(ready|not ready): \S", re.S)
VERIFIED_ON = ("cpu", "h100", "gb10", "unverified on hardware")
_FIELD = re.compile(r"^([A-Za-z][A-Za-z0-9-]*):(?: (.*))?$")


@dataclass(frozen=True)
class Header:
    fields: dict[str, str]

    @property
    def summary(self) -> str:
        return self.fields["Description"].splitlines()[0].strip()

    @property
    def verified_on(self) -> list[str]:
        return [v.strip() for v in self.fields["Verified-On"].split(",") if v.strip()]

    @property
    def forward_ready(self) -> bool:
        return self.fields["Forward"].startswith("ready:")

    @property
    def forward_why(self) -> str:
        return " ".join(self.fields["Forward"].partition(":")[2].split())

    def lines(self, indent: str = "") -> list[str]:
        """Every field, whole, in the file's order: `Field: first line`, continuation lines indented
        under it (a blank continuation stays blank)."""
        out = []
        for name, value in self.fields.items():
            first, *rest = value.split("\n")
            out.append(f"{indent}{name}: {first}".rstrip())
            out += [f"{indent}  {line}".rstrip() for line in rest]
        return out


class HeaderError(ValueError):
    pass


def parse(text: str) -> Header:
    """Parse 'Field: value' lines; continuation lines start with a space (' .' = blank)."""
    fields: dict[str, str] = {}
    current: str | None = None
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith(" ") and current is not None:
            cont = line[1:]
            fields[current] += "\n" + ("" if cont == "." else cont)
            continue
        m = _FIELD.match(line)
        if not m:
            raise HeaderError(f"header line {n} is neither 'Field: value' nor a continuation")
        current = m.group(1)
        if current in fields:
            raise HeaderError(f"header field {current!r} appears twice")
        fields[current] = m.group(2) or ""
    missing = [f for f in REQUIRED if not fields.get(f, "").strip()]
    if missing:
        raise HeaderError(f"header lacks required field(s): {', '.join(missing)}")
    header = Header(fields)
    bad = [v for v in header.verified_on if v not in VERIFIED_ON]
    if bad or not header.verified_on:
        raise HeaderError(
            f"Verified-On must be a comma list of {', '.join(VERIFIED_ON)}; got "
            f"{fields['Verified-On']!r}"
        )
    if not _FORWARD.match(fields["Forward"]):
        raise HeaderError("Forward must be 'ready: <why>' or 'not ready: <what is missing>'; got "
                          f"{fields['Forward']!r}")
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", fields["Last-Update"].strip()):
        raise HeaderError("Last-Update must be YYYY-MM-DD")
    return header
