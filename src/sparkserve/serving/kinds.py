"""The kinds of value a serving-profile variable takes: each reads one variable's text into a typed value
or raises a ProfileError naming the variable, the value and what it accepts, and describes itself for the
settings table of docs/PROFILES.md. The table itself is serving/settings.py.
"""

from __future__ import annotations

import ipaddress
import math
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sparkserve.errors import SparkserveError
from sparkserve.serving.checkpoint import HF_ID

TRUE = ("1", "on", "true", "yes")
FALSE = ("0", "off", "false", "no")


class ProfileError(SparkserveError):
    """A serving-profile variable has a value that cannot work."""

    def __init__(self, variable: str, value: str, why: str) -> None:
        self.variable = variable
        self.value = value
        self.why = why
        super().__init__(f"{variable}={value!r}: {why}")


class Context:
    """What parse() knows while it reads the table in order: the raw environment and the values read so
    far (by Profile field), for defaults and checks that depend on earlier settings."""

    def __init__(self, env: Mapping[str, str], gpt_oss: Callable[[str], bool]) -> None:
        self.env = env
        self.values: dict[str, Any] = {}
        self._gpt_oss = gpt_oss
        self._gpt_oss_of: tuple[str, bool] | None = None

    def __getitem__(self, field: str) -> Any:
        return self.values[field]

    @property
    def gpu(self) -> bool:
        return bool(self.values["target"] != "cpu")

    @property
    def gpt_oss(self) -> bool:
        """Whether MODEL is a gpt-oss checkpoint (asked once per model)."""
        model = str(self.values["model"])
        if self._gpt_oss_of is None or self._gpt_oss_of[0] != model:
            self._gpt_oss_of = (model, self._gpt_oss(model))
        return self._gpt_oss_of[1]


@dataclass(frozen=True)
class Derived:
    """A default that depends on earlier settings (the target, the model); `doc` says how, for the docs."""

    value: Callable[[Context], Any]
    doc: str


class Kind:
    """How one variable's text becomes a value."""

    def read(self, var: str, text: str, ctx: Context) -> Any:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def samples(self) -> tuple[str, ...]:
        """Valid texts, for the tests that try every value a setting can take."""
        raise NotImplementedError

    def show(self, value: Any) -> str:
        """A value as a profile would write it."""
        return "" if value is None else str(value)


@dataclass(frozen=True)
class Choice(Kind):
    choices: tuple[str, ...]

    def read(self, var: str, text: str, ctx: Context) -> str:
        if text not in self.choices:
            raise ProfileError(var, text, f"must be one of {', '.join(self.choices)}")
        return text

    def describe(self) -> str:
        return " \\| ".join(f"`{c}`" for c in self.choices)

    def samples(self) -> tuple[str, ...]:
        return self.choices


@dataclass(frozen=True)
class NumberChoice(Kind):
    choices: tuple[int, ...]

    def read(self, var: str, text: str, ctx: Context) -> int:
        try:
            number = int(text)
        except ValueError:
            raise ProfileError(var, text, "must be a whole number") from None
        if number not in self.choices:
            raise ProfileError(var, text, f"must be one of {', '.join(map(str, self.choices))}")
        return number

    def describe(self) -> str:
        return " \\| ".join(f"`{c}`" for c in self.choices)

    def samples(self) -> tuple[str, ...]:
        return tuple(map(str, self.choices))


@dataclass(frozen=True)
class Switch(Kind):
    def read(self, var: str, text: str, ctx: Context) -> bool:
        if text.lower() in TRUE:
            return True
        if text.lower() in FALSE:
            return False
        raise ProfileError(var, text, "must be on or off (also 1/0, true/false, yes/no)")

    def describe(self) -> str:
        return "`on` \\| `off`"

    def samples(self) -> tuple[str, ...]:
        return ("on", "off")

    def show(self, value: Any) -> str:
        return "on" if value else "off"


@dataclass(frozen=True)
class Whole(Kind):
    low: int = 1
    high: int | None = None
    auto: bool = False  # `auto` is accepted and read as None (vLLM decides)

    def read(self, var: str, text: str, ctx: Context) -> int | None:
        if self.auto and text == "auto":
            return None
        try:
            number = int(text)
        except ValueError:
            why = "must be a whole number" + (" or auto" if self.auto else "")
            raise ProfileError(var, text, why) from None
        if number < self.low or (self.high is not None and number > self.high):
            span = f"from {self.low} to {self.high}" if self.high is not None else f"at least {self.low}"
            raise ProfileError(var, text, f"must be {span}")
        return number

    def describe(self) -> str:
        span = f"{self.low}-{self.high}" if self.high is not None else f">= {self.low}"
        return f"whole number {span}" + (", or `auto`" if self.auto else "")

    def samples(self) -> tuple[str, ...]:
        # the bound and one above it: a setting that emits its flag only above its least value (a count of
        # nodes, a rank) is tried with both
        inside = () if self.high is not None and self.low + 1 > self.high else (str(self.low + 1),)
        return (str(self.low), *inside) + (("auto",) if self.auto else ())

    def show(self, value: Any) -> str:
        if value is None:
            return "auto" if self.auto else ""
        return str(value)


@dataclass(frozen=True)
class Fraction(Kind):
    """A number in (0, high]; `high` may depend on earlier settings, with the words that say why."""

    high: float | Callable[[Context], tuple[float, str]]
    doc: str = ""

    def read(self, var: str, text: str, ctx: Context) -> float:
        high, bound = self.high(ctx) if callable(self.high) else (self.high, "")
        try:
            number = float(text)
        except ValueError:
            raise ProfileError(var, text, "must be a number such as 0.75") from None
        if not math.isfinite(number) or number <= 0 or number > high:
            raise ProfileError(var, text, f"must be greater than 0 and at most {high:g}{bound}")
        return number

    def describe(self) -> str:
        return self.doc or f"number in (0, {self.high}]"

    def samples(self) -> tuple[str, ...]:
        return ("0.5",)

    def show(self, value: Any) -> str:
        return f"{value:g}"


@dataclass(frozen=True)
class OffOrNumber(Kind):
    """`off` (None), or a finite number of at least `low` (the upper bound depends on other variables:
    the setting's check)."""

    low: float
    doc: str

    def read(self, var: str, text: str, ctx: Context) -> float | None:
        if text.lower() == "off":
            return None
        try:
            number = float(text)
        except ValueError:
            raise ProfileError(var, text, f"must be off or a number of at least {self.low:g}") from None
        if not math.isfinite(number) or number < self.low:
            raise ProfileError(var, text, f"must be off or a number of at least {self.low:g}")
        return number

    def describe(self) -> str:
        return self.doc

    def samples(self) -> tuple[str, ...]:
        return ("off", f"{self.low:g}")

    def show(self, value: Any) -> str:
        return "off" if value is None else f"{value:g}"


@dataclass(frozen=True)
class Text(Kind):
    doc: str = "text"

    def read(self, var: str, text: str, ctx: Context) -> str:
        return text

    def describe(self) -> str:
        return self.doc

    def samples(self) -> tuple[str, ...]:
        return ("sample",)


@dataclass(frozen=True)
class Checkpoint(Kind):
    """A checkpoint: a Hugging Face id (in the hf-cache volume) or an absolute folder in the container."""

    def read(self, var: str, text: str, ctx: Context) -> str:
        if not text.startswith("/") and not HF_ID.match(text):
            raise ProfileError(var, text, "neither an absolute folder in the container nor a Hugging Face id "
                                          "(org/name)")
        return text

    def describe(self) -> str:
        return "Hugging Face id, or an absolute folder in the container"

    def samples(self) -> tuple[str, ...]:
        return ("org/draft", "/models/draft")


@dataclass(frozen=True)
class AbsolutePath(Kind):
    what: str  # what the path is, for the error: "the state volume"

    def read(self, var: str, text: str, ctx: Context) -> str:
        if not text.startswith("/"):
            raise ProfileError(var, text, f"must be an absolute path ({self.what})")
        return text

    def describe(self) -> str:
        return "absolute path"

    def samples(self) -> tuple[str, ...]:
        return ("/tmp/sample",)


@dataclass(frozen=True)
class Address(Kind):
    def read(self, var: str, text: str, ctx: Context) -> str:
        try:
            ipaddress.ip_address(text)
        except ValueError:
            raise ProfileError(var, text, "must be an IP address such as 127.0.0.1") from None
        return text

    def describe(self) -> str:
        return "IP address"

    def samples(self) -> tuple[str, ...]:
        return ("127.0.0.1",)


@dataclass(frozen=True)
class Words(Kind):
    """Shell words (extra command-line arguments)."""

    def read(self, var: str, text: str, ctx: Context) -> tuple[str, ...]:
        try:
            return tuple(shlex.split(text))
        except ValueError as exc:
            raise ProfileError(var, text, f"not valid shell words: {exc}") from None

    def describe(self) -> str:
        return "shell words"

    def samples(self) -> tuple[str, ...]:
        return ("--max-logprobs 5",)

    def show(self, value: Any) -> str:
        return shlex.join(value) if value else ""
