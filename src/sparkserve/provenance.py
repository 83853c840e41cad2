"""What build an image is, and whether it is the build a checkout expects.

An image's provenance is what it was built from, as the image itself carries it: the sparkserve version
(`src/sparkserve/__init__.py`), the pins (`pins.toml`) and the patch series (`patches/<upstream>/series`
and each patch file's sha256), all under its /opt/sparkserve. A checkout has the same three in the same
layout, so one function reads both (`record`) and `compare` names every difference in words.

The release tag says the pins (`tag`: `<version>-vllm<version>-fi<version>`), and the labels a release
carries (`labels`) repeat the tag and a digest of the whole record, for registries and `docker inspect`.

Python's standard library only, and no import of the rest of the package: compose's `image-check` gate
runs this file from the checkout with the image's interpreter (so any image is judged by the checkout's
rules, also one older than them), Ansible pipes it into a throwaway container of the image, and
scripts/build-image.sh runs it on a fresh clone with nothing installed:

    python3 src/sparkserve/provenance.py tag [--platform linux/arm64]
    python3 src/sparkserve/provenance.py labels
    python3 src/sparkserve/provenance.py record [--root DIR]
    python3 src/sparkserve/provenance.py check-image --image-root /opt/sparkserve --expected-root DIR
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

# The gate's exit status when the image is not the build the checkout expects (or records no build).
EXIT_NOT_THIS_BUILD = 10
# What only the dev container uses (pins.toml [lock.dev] and each platform's dev_file, the Dockerfile's
# dev target): not part of the serving image, so a change there does not make an image another build.
_DEV_ONLY = re.compile(r"^lock\.dev\.|^lock\.platforms\.[^.]+\.dev_file$")
_VERSION = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.M)
# The labels of a release image (OCI's version, and the record's digest).
LABEL_VERSION = "org.opencontainers.image.version"
LABEL_PROVENANCE = "io.sparkserve.provenance.sha256"


class ProvenanceError(Exception):
    """A root lacks what a record needs (pins.toml, a series file, a patch file it names)."""


def version(root: Path) -> str:
    path = root / "src" / "sparkserve" / "__init__.py"
    try:
        m = _VERSION.search(path.read_text())
    except OSError as exc:
        raise ProvenanceError(f"no sparkserve package at {path.parent} ({exc.strerror})") from None
    if not m:
        raise ProvenanceError(f"{path} sets no __version__")
    return m.group(1)


def _flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def pins(root: Path) -> dict[str, Any]:
    """pins.toml as `dotted.key: value`, without what only the dev container uses."""
    path = root / "pins.toml"
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ProvenanceError(f"no pins at {path} ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProvenanceError(f"{path} does not parse: {exc}") from None
    flat = _flatten(data)
    return {k: v for k, v in sorted(flat.items()) if not _DEV_ONLY.match(k)}


def series(root: Path) -> dict[str, list[list[str]]]:
    """Each upstream's series in order: [patch file name, its sha256]."""
    base = root / "patches"
    if not base.is_dir():
        raise ProvenanceError(f"no patch series at {base}")
    out: dict[str, list[list[str]]] = {}
    for d in sorted(p for p in base.iterdir() if (p / "series").is_file()):
        entries = []
        for line in (d / "series").read_text().splitlines():
            name = line.split("#", 1)[0].strip()
            if not name:
                continue
            try:
                entries.append([name, hashlib.sha256((d / name).read_bytes()).hexdigest()])
            except OSError:
                raise ProvenanceError(f"{d / 'series'} names {name}, which is not there") from None
        out[d.name] = entries
    if not out:
        raise ProvenanceError(f"no patches/<upstream>/series under {base}")
    return out


def record(root: Path) -> dict[str, Any]:
    return {"sparkserve": version(root), "pins": pins(root), "series": series(root)}


def digest(rec: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(rec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _arch(platform: str) -> str:
    arch = platform.strip().removeprefix("linux/")
    if not re.fullmatch(r"[a-z0-9_]+", arch):
        raise ProvenanceError(f"not a platform: {platform!r} (linux/arm64, linux/amd64)")
    return arch


def tag(root: Path, platform: str | None = None) -> str:
    """The release tag: the sparkserve version and the pinned vLLM and FlashInfer versions, e.g.
    `0.1.0-vllm0.33.0-fi0.7.2.post1`; with a platform, the one-platform image's `...-arm64`, so that
    only the multi-platform index ever carries the plain tag."""
    p = pins(root)
    try:
        vllm, fi = p["upstream.vllm.version"], p["upstream.flashinfer.version"]
    except KeyError as exc:
        raise ProvenanceError(f"{root / 'pins.toml'} has no {exc.args[0]}") from None
    name = f"{version(root)}-vllm{vllm}-fi{fi}"
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,100}", name):
        raise ProvenanceError(f"{name!r} is not a valid image tag: check the versions in pins.toml")
    return f"{name}-{_arch(platform)}" if platform else name


def labels(root: Path) -> dict[str, str]:
    return {LABEL_VERSION: tag(root), LABEL_PROVENANCE: digest(record(root))}


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 80 else text[:77] + "..."


def compare(image: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    """Every way the image's record differs from the checkout's, one line each ([] when none)."""
    problems = []
    if image.get("sparkserve") != expected.get("sparkserve"):
        problems.append(f"sparkserve {image.get('sparkserve')} in the image, {expected.get('sparkserve')} "
                        "in this checkout")
    have, want = image.get("pins", {}), expected.get("pins", {})
    for key in sorted(set(have) | set(want)):
        if key not in have:
            problems.append(f"pins.toml {key}: not in the image's, {_short(want[key])} in this checkout's")
        elif key not in want:
            problems.append(f"pins.toml {key}: {_short(have[key])} in the image's, not in this checkout's")
        elif have[key] != want[key]:
            problems.append(f"pins.toml {key}: {_short(have[key])} in the image's, {_short(want[key])} in "
                            "this checkout's")
    have_s, want_s = image.get("series", {}), expected.get("series", {})
    for up in sorted(set(have_s) | set(want_s)):
        a = {name: sha for name, sha in have_s.get(up, [])}
        b = {name: sha for name, sha in want_s.get(up, [])}
        missing = [n for n in b if n not in a]
        extra = [n for n in a if n not in b]
        changed = [n for n in b if n in a and a[n] != b[n]]
        if missing:
            problems.append(f"patches/{up}: the image lacks {', '.join(missing)}")
        if extra:
            problems.append(f"patches/{up}: the image has {', '.join(extra)}, which this checkout does not")
        if changed:
            problems.append(f"patches/{up}: {', '.join(changed)} differ(s) from this checkout's")
        if not (missing or extra or changed) and [n for n, _ in have_s.get(up, [])] != list(b):
            problems.append(f"patches/{up}: the image applies the same patches in another order")
    return problems


def refusal(image: str, problems: list[str], revision: str = "") -> str:
    """What the gate prints: which image, what differs, and what to do."""
    built = f" (built from commit {revision})" if revision and revision != "unknown" else ""
    return "\n".join([
        f"sparkserve: image {image}{built} is not the build this checkout expects:",
        *(f"  - {p}" for p in problems),
        "  Serve the image made for this checkout: its release reference (docs/RELEASE.md) in",
        "  SPARKSERVE_IMAGE (Ansible: serve_image), or build it here (`docker compose build serve` with",
        "  SPARKSERVE_IMAGE unset);",
        "  or check out the commit the image was built from"
        + (f" (`git checkout {revision}`)." if built else "."),
    ])


_BY_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def pinned(reference: str) -> bool:
    """A reference by digest (`repo[:tag]@sha256:<64 hex>`): the same bytes wherever it is pulled."""
    return bool(_BY_DIGEST.search(reference))


def digest_refusal(image: str) -> str:
    """'' for a reference by digest, else what to do (a pulled release must be pinned)."""
    if pinned(image):
        return ""
    return (f"sparkserve: {image} names no digest: a tag can be moved to another image. Pin the release by "
            "digest, `<registry>/<repository>:<tag>@sha256:<digest>` (the reference its release prints, "
            "docs/RELEASE.md; `docker buildx imagetools inspect <registry>/<repository>:<tag>` shows the "
            "digest)")


def files(root: Path) -> list[str]:
    """The checkout's files a record is made of (relative paths): what compose's image-check gate must
    see of the checkout."""
    out = ["pins.toml", "src/sparkserve/__init__.py", "src/sparkserve/provenance.py"]
    for up, entries in series(root).items():
        out += [f"patches/{up}/series"] + [f"patches/{up}/{name}" for name, _ in entries]
    return out


def check_image(image_root: Path, expected: dict[str, Any], image: str, revision: str = "",
                require_digest: bool = False) -> tuple[int, str]:
    """(exit status, message) of the gate: 0 and a one-line summary, or EXIT_NOT_THIS_BUILD and why."""
    if require_digest and not pinned(image):
        return EXIT_NOT_THIS_BUILD, digest_refusal(image)
    try:
        have = record(image_root)
    except ProvenanceError as exc:
        return EXIT_NOT_THIS_BUILD, refusal(image, [f"it records no sparkserve build: {exc}"], revision)
    problems = compare(have, expected)
    if problems:
        return EXIT_NOT_THIS_BUILD, refusal(image, problems, revision)
    return 0, (f"image-check: {image} is sparkserve {have['sparkserve']} with this checkout's pins and patch "
               f"series ({tag(image_root)}, provenance {digest(have)[:12]})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="provenance", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    for verb in ("tag", "labels", "record"):
        sp = sub.add_parser(verb)
        sp.add_argument("--root", type=Path, help="a checkout (default: the one this file is in)")
        if verb == "tag":
            sp.add_argument("--platform", help="one platform's image (linux/arm64): the tag ends in -arm64")
    sp = sub.add_parser("check-image",
                        help="the image's record against a checkout's (exit 10: not this build)")
    sp.add_argument("--image-root", type=Path, default=Path("/opt/sparkserve"))
    src = sp.add_mutually_exclusive_group(required=True)
    src.add_argument("--expected-root", type=Path, help="the checkout's pins.toml, patches/, src/sparkserve")
    src.add_argument("--expected-json", help="the checkout's record (`record` printed it)")
    sp.add_argument("--image", default=os.environ.get("SPARKSERVE_IMAGE_REF", "this image"),
                    help="how to name the image in messages")
    a = ap.parse_args(argv)
    if getattr(a, "root", "") is None:
        a.root = Path(__file__).resolve().parents[2]
    try:
        if a.verb == "tag":
            print(tag(a.root, a.platform))
        elif a.verb == "labels":
            for key, value in labels(a.root).items():
                print(f"{key}={value}")
        elif a.verb == "record":
            print(json.dumps(record(a.root), sort_keys=True))
        else:
            expected = record(a.expected_root) if a.expected_root else json.loads(a.expected_json)
            rc, message = check_image(a.image_root, expected, a.image,
                                      os.environ.get("SPARKSERVE_COMMIT", ""),
                                      require_digest=os.environ.get("SPARKSERVE_REQUIRE_DIGEST") == "1")
            print(message, file=sys.stderr if rc else sys.stdout)
            return rc
    except ProvenanceError as exc:
        print(f"sparkserve: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
