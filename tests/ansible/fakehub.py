"""TEST ONLY: a stand-in for the Hugging Face Hub that serves one model folder as one repository, so that
the model_cache role's real download (huggingface_hub's snapshot_download in the serving image, with
HF_ENDPOINT pointing here) runs without the network.

    python3 fakehub.py MODEL_DIR PORT LOG

Answers the requests snapshot_download makes: the revision's metadata (its commit), the file tree at
that commit, and each file (HEAD with the commit and ETag headers, then GET). Every request's path and
Authorization header is appended to LOG as a JSON line, so a test can see which token the downloader sent.
"""

from __future__ import annotations

import hashlib
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _etag(body: bytes) -> str:
    """The git blob id the Hub gives a small (non-LFS) file as its ETag and tree oid."""
    return hashlib.sha1(b"blob %d\0" % len(body) + body).hexdigest()


class Hub(BaseHTTPRequestHandler):
    root: Path
    log: Path

    def _record(self) -> str:
        path = unquote(urlsplit(self.path).path)
        with self.log.open("a") as f:
            f.write(json.dumps({"method": self.command, "path": path,
                                "authorization": self.headers.get("Authorization", "")}) + "\n")
        return path

    def _files(self) -> list[str]:
        return sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*") if p.is_file())

    def _send(self, code: int, body: bytes, headers: dict[str, str], head: bool = False) -> None:
        self.send_response(code)
        for k, v in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(k, v)
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _answer(self, head: bool) -> None:
        path = self._record()
        parts = path.strip("/").split("/")
        # /api/models/ORG/NAME/revision/REV
        if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "revision":
            info = {"id": f"{parts[2]}/{parts[3]}", "sha": COMMIT,
                    "siblings": [{"rfilename": f} for f in self._files()]}
            self._send(200, json.dumps(info).encode(), {"Content-Type": "application/json"}, head)
            return
        # /api/models/ORG/NAME/tree/REV: every file, one page
        if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "tree":
            tree = [{"type": "file", "path": f, "size": (self.root / f).stat().st_size,
                     "oid": _etag((self.root / f).read_bytes())} for f in self._files()]
            self._send(200, json.dumps(tree).encode(), {"Content-Type": "application/json"}, head)
            return
        # /ORG/NAME/resolve/REV/FILE
        if len(parts) >= 5 and parts[2] == "resolve":
            file = self.root / "/".join(parts[4:])
            if file.is_file() and file.resolve().is_relative_to(self.root.resolve()):
                body = file.read_bytes()
                self._send(200, body, {"X-Repo-Commit": COMMIT, "ETag": f'"{_etag(body)}"',
                                       "Content-Type": "application/octet-stream"}, head)
                return
        self._send(404, b'{"error": "not found"}', {"X-Error-Code": "EntryNotFound",
                                                    "Content-Type": "application/json"}, head)

    def do_GET(self) -> None:
        self._answer(head=False)

    def do_HEAD(self) -> None:
        self._answer(head=True)

    def log_message(self, format: str, *args: object) -> None:
        pass


def main() -> None:
    Hub.root, port, Hub.log = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    ThreadingHTTPServer(("0.0.0.0", port), Hub).serve_forever()


if __name__ == "__main__":
    main()
