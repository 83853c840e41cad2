"""The benchmark text, served on 127.0.0.1 so llama-benchy never goes to the network.

llama-benchy only fetches `--book-url` over HTTP (no file://) and caches it under
~/.cache/llama-benchy/<md5(url)>.txt; the driver gives it a private HOME, so no stale cache is read.
Default text: `corpus()` (deterministic pseudo-English, ~0.75 MB; the tiny test model's tokenizer is
trained on the same text, so its token counts are meaningful). A real book can be given
(`--book FILE`), e.g. the Gutenberg Sherlock Holmes that llama-benchy uses online; the metadata records
the sha256 of whichever text was used.
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

# Word stock of the pseudo-English text.
WORDS = (  # noqa: SIM905
    "the of and to in a is that for it as was with be by on not he i this are or his from at which "
    "but have an they you were her she there been one all we their has would when if so no will more "
    "time who can said them what about up out other into than its some could then only new these two "
    "may first any like now my such over our man even most made after also did many before must through "
    "back years where much your way well down should because each just those people how too little state "
    "good very make world still own see men work long get here between both life being under never day "
    "same another know while last might us great old year off come since against go came right used take "
    "three number system water light river mountain engine kernel memory token model server request "
    "answer question garden window city north south morning evening letter house family friend road "
    "story country music table voice paper field market winter summer animal forest island ocean"
).split()


SYLLABLES = (  # noqa: SIM905
    "ka lo mi ra ten vor sel an dru pha qui zen mar tol bec nis ul gor shi wen pra ost lem fi dak "
    "rho sun bel tri caz yo mun esk vi hap dor lin gu sep tar ob nev cra"
).split()


def corpus(n_words: int, seed: int = 0) -> str:
    """Deterministic pseudo-English text: sentences of 6-18 words, paragraphs of 3-7 sentences.

    One word in four is made of 2-3 random syllables, so a BPE trained on it reaches a vocabulary of a
    few thousand tokens instead of saturating at the size of the word list.
    """
    rng = random.Random(seed)

    def word() -> str:
        if rng.random() < 0.25:
            return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3)))
        return rng.choice(WORDS)

    out: list[str] = []
    count = 0
    while count < n_words:
        para: list[str] = []
        for _ in range(rng.randint(3, 7)):
            k = rng.randint(6, 18)
            words = [word() for _ in range(k)]
            count += k
            sentence = " ".join(words)
            para.append(sentence[0].upper() + sentence[1:] + rng.choice([".", ".", ".", "?", "!", ","]))
        out.append(" ".join(para))
    return "\n\n".join(out) + "\n"


DEFAULT_WORDS = 150_000


def default_text() -> str:
    return corpus(DEFAULT_WORDS, seed=1)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@contextmanager
def serve(text: str) -> Iterator[str]:
    """Serve `text` at http://127.0.0.1:<free port>/book-<sha12>.txt for the duration of the block."""
    body = text.encode()
    name = f"/book-{sha256(text)[:12]}.txt"

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path != name:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}{name}"
    finally:
        server.shutdown()
        server.server_close()


def load(path: Path | None) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path else default_text()
