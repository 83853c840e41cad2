"""Env files as docker compose reads them (`env_file:`), so that the harness measures what compose deploys.

The rules are compose v2's (its dotenv reader, checked against the real `docker compose config` on the
shared cases of tests/data/envfile-cases.toml):
- blank lines and lines whose first non-blank character is `#` are skipped; `export ` before a name is
  dropped; `NAME=value` or `NAME: value`; spaces around the name and before the value are dropped;
- a name alone on its line (`NAME`) takes the value from the lookup (compose: its own environment), and is
  left unset when the lookup has none; `NAME=` is the empty value;
- `'single quoted'`: literal (only `\\'` is the quote), may span lines;
- `"double quoted"`: `\\n`, `\\r`, `\\t`, `\\\\`, `\\"` and `\\$` are escapes (other backslashes stay), then
  `$` substitution; may span lines;
- unquoted: up to the end of the line, a ` #` (a space, then `#`) starts a comment, trailing blanks are
  dropped, then `$` substitution; backslashes are literal;
- substitution: `$$` is `$`; `$NAME`, `${NAME}`, `${NAME:-default}`, `${NAME-default}`, `${NAME:+other}`,
  `${NAME+other}`, `${NAME:?error}`, `${NAME?error}`; a name is looked up in the lookup first, then in the
  file's earlier lines; an unknown name is empty.

Where compose accepts a line but reads something no one meant (text after a closing quote, which it
drops; `=value`, which it sets as a variable with no name) this reader refuses it with the line number.

Standalone on purpose (no sparkserve imports): the Ansible filter plugin loads this file by its path.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

_NAME_CHARS = re.compile(r"[\w.\-]", re.UNICODE)
_SUBST_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "$": "\0"}  # \0: a `$` kept literal
_BLANK = " \t\f\v\r"


class EnvFileError(ValueError):
    """An env file line that compose would reject, or would read as something else than written."""

    def __init__(self, line: int, why: str) -> None:
        self.line = line
        super().__init__(f"line {line}: {why}")


def parse(text: str, lookup: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables an env file sets, in file order; `lookup` is compose's own environment."""
    return _Reader(text.removeprefix("\ufeff").replace("\r\n", "\n"), lookup or {}).read()


def read(path: Path, lookup: Mapping[str, str] | None = None) -> dict[str, str]:
    """`parse` of a file; OSError and EnvFileError pass through to the caller, who names the file."""
    return parse(path.read_text(encoding="utf-8"), lookup)


class _Reader:
    def __init__(self, text: str, lookup: Mapping[str, str]) -> None:
        self.text = text
        self.pos = 0
        self.lookup = lookup
        self.out: dict[str, str] = {}

    def line(self) -> int:
        return self.text.count("\n", 0, self.pos) + 1

    def read(self) -> dict[str, str]:
        while self._next_statement():
            self._statement()
        return self.out

    def _next_statement(self) -> bool:
        """Skip blanks, empty lines and comment lines; False at the end of the text."""
        text = self.text
        while self.pos < len(text):
            ch = text[self.pos]
            if ch in _BLANK or ch == "\n":
                self.pos += 1
            elif ch == "#":
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end
            else:
                return True
        return False

    def _statement(self) -> None:
        line = self.line()
        end = self.text.find("\n", self.pos)
        rest = self.text[self.pos:] if end < 0 else self.text[self.pos:end]
        m = re.match(r"export[ \t]+(?=\S)", rest)
        if m:
            self.pos += m.end()
            rest = rest[m.end():]
        sep = next((i for i, ch in enumerate(rest) if ch in "=:"), -1)
        name = (rest if sep < 0 else rest[:sep]).rstrip(_BLANK)
        if not name:
            raise EnvFileError(line, f"no variable name before {rest[sep] if sep >= 0 else 'the end'}: "
                                     f"{rest!r}")
        bad = next((ch for ch in name if not _NAME_CHARS.match(ch)), None)
        if bad is not None:
            what = "a space" if bad in _BLANK else repr(bad)
            raise EnvFileError(line, f"{what} in the variable name {name!r} (letters, digits, _ . - only)")
        if sep < 0:  # NAME alone: compose passes its own value through, if it has one
            self.pos += len(rest)
            if name in self.lookup:
                self.out[name] = self.lookup[name]
            return
        self.pos += sep + 1
        while self.pos < len(self.text) and self.text[self.pos] in _BLANK:
            self.pos += 1
        self.out[name] = self._value(line)

    def _value(self, line: int) -> str:
        text = self.text
        quote = text[self.pos] if self.pos < len(text) else ""
        if quote not in ("'", '"'):
            end = text.find("\n", self.pos)
            raw = text[self.pos:] if end < 0 else text[self.pos:end]
            self.pos += len(raw)
            comment = raw.find(" #")
            if comment >= 0:
                raw = raw[:comment]
            return self._substitute(raw.rstrip(_BLANK + "\n"), line)
        close = self.pos + 1
        while True:
            close = text.find(quote, close)
            if close < 0:
                shown = text[self.pos:].split("\n", 1)[0]
                raise EnvFileError(line, f"unterminated quoted value {shown}")
            if text[close - 1] != "\\":
                break
            close += 1
        body = text[self.pos + 1:close]
        self.pos = close + 1
        end = text.find("\n", self.pos)
        trailing = text[self.pos:] if end < 0 else text[self.pos:end]
        self.pos += len(trailing)
        if trailing.strip(_BLANK) and not trailing.lstrip(_BLANK).startswith("#"):
            raise EnvFileError(line, f"text after the closing quote: {trailing.strip()!r} (compose would "
                                     "read it as another variable); put it inside the quotes or after a #")
        if quote == "'":
            return body.replace("\\'", "'")
        unescaped = re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(0)), body, flags=re.DOTALL)
        return self._substitute(unescaped, line).replace("\0", "$")

    def _get(self, name: str) -> str | None:
        if name in self.lookup:
            return self.lookup[name]
        return self.out.get(name)

    def _substitute(self, value: str, line: int) -> str:
        out: list[str] = []
        i = 0
        while i < len(value):
            ch = value[i]
            if ch != "$" or i + 1 >= len(value):
                out.append(ch)
                i += 1
                continue
            nxt = value[i + 1]
            if nxt == "$":
                out.append("\0")
                i += 2
            elif nxt == "{":
                text, i = self._braced(value, i, line)
                out.append(text)
            else:
                m = _SUBST_NAME.match(value, i + 1)
                if m is None:
                    out.append("$")
                    i += 1
                else:
                    out.append(self._get(m.group(0)) or "")
                    i = m.end()
        return "".join(out).replace("\0", "$")

    def _braced(self, value: str, start: int, line: int) -> tuple[str, int]:
        """`${...}` starting at value[start]; returns its text and the index after the closing brace."""
        depth, j = 0, start + 1
        while j < len(value):
            if value[j] == "{":
                depth += 1
            elif value[j] == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        if j >= len(value):
            raise EnvFileError(line, f"invalid substitution {value[start:]!r}: no closing }}")
        inner = value[start + 2:j]
        m = re.match(r"([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-+?])(.*))?$", inner, re.DOTALL)
        if m is None:
            raise EnvFileError(line, f"invalid substitution ${{{inner}}} (write ${{NAME}}, "
                                     "${NAME:-default}, ${NAME:+other} or ${NAME:?error})")
        name, op, word = m.group(1), m.group(2), m.group(3) or ""
        have = self._get(name)
        empty_counts = op is not None and op.startswith(":")
        unset = have is None or (empty_counts and have == "")
        if op is None:
            return have or "", j + 1
        kind = op[-1]
        if kind == "-":
            return (self._substitute(word, line) if unset else have or ""), j + 1
        if kind == "+":
            return ("" if unset else self._substitute(word, line)), j + 1
        if unset:
            raise EnvFileError(line, f"required variable {name} is missing a value: {word}")
        return have or "", j + 1
