"""Configuration files read through one typed model: a file's mapping -> a frozen dataclass instance.

Each reader declares its file's schema as frozen dataclasses; `parse` builds an instance from the
mapping TOML or YAML gave, by the fields' types:

    str, int, float, bool     exact (a bool is not a number; an int is accepted as a float)
    list[X], tuple[X, ...]    a list; tuple[X, Y] a list of exactly that many
    dict[str, X]              a table of any keys
    a frozen dataclass        a table of its fields: no other key, a missing one takes the field's default
    X | Y, X | None           the first that fits (None: YAML's null; TOML has none, so absent = default)
    Literal["a", "b"]         one of the choices (choices of one type, compared with the type too)
    object                    anything, unchecked: a table the reader checks later by another schema

A field whose key in the file is not a Python name (`[[class]]`, YAML's `set`) says so with
`field(metadata=renamed("class"))`. Every refusal is a ConfigError naming the file, the dotted key path
(list items counted from 1, as a person counts the tables), what was expected and what was found:

    lab/configs/gb10-estimate.toml: bandwidth.gb10_nominal_gbs: expected a number, got 'fast'

What is more than a type (non-empty text, references between tables, cross-field rules) stays with the
reader, after parse.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
import types
import typing
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any, Literal, TypeVar

from sparkserve.errors import SparkserveError

T = TypeVar("T")
_KEY = "sparkserve.config.key"
# A key that needs no quotes in a dotted path (TOML's bare keys); others are quoted as TOML would.
_BARE = re.compile(r"^[A-Za-z0-9_-]+$")
_SHOWN = 80  # a value longer than this is cut in a message (a whole table helps nobody)


class ConfigError(SparkserveError):
    """A configuration file that does not fit its schema (the CLI's exit 3, like every SparkserveError)."""


def renamed(key: str) -> dict[str, str]:
    """Field metadata: the field is `key` in the file (a Python keyword, a builtin's name)."""
    return {_KEY: key}


def load_toml(schema: type[T], path: Path) -> T:
    """The TOML file at path as an instance of schema."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return parse_toml(schema, text, str(path))


def parse_toml(schema: type[T], text: str, source: str) -> T:
    """TOML text as an instance of schema; source names it in errors (its path)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not TOML: {exc}") from None
    return parse(schema, data, source)


def parse(schema: type[T], data: object, source: str, at: str = "") -> T:
    """data (a file's mapping, or a table of it found at the dotted path `at`) as an instance of schema."""
    if not _is_schema(schema):
        raise TypeError(f"{schema!r} is not a frozen dataclass")
    value: T = _convert(schema, data, _Where(source, at))
    return value


@dataclasses.dataclass(frozen=True)
class _Where:
    source: str
    path: str

    def key(self, name: str) -> _Where:
        shown = name if _BARE.match(name) else '"' + name.replace('"', '\\"') + '"'
        return _Where(self.source, f"{self.path}.{shown}" if self.path else shown)

    def item(self, index: int) -> _Where:
        return _Where(self.source, f"{self.path}[{index + 1}]")

    def fail(self, message: str) -> ConfigError:
        return ConfigError(f"{self.source}: {self.path}: {message}" if self.path
                           else f"{self.source}: {message}")


_MISSING = object()  # what a key absent from its table is, to the messages


def _shown(value: object) -> str:
    if value is _MISSING:
        return "nothing"
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _is_schema(t: object) -> bool:
    # dataclasses keeps `frozen` only in this attribute (no public API for it)
    params = getattr(t, "__dataclass_params__", None)
    return isinstance(t, type) and dataclasses.is_dataclass(t) and bool(getattr(params, "frozen", False))


@cache
def _fields(schema: type) -> tuple[tuple[str, str, Any, bool], ...]:
    """(attribute, key in the file, type, required) of each field the file may set."""
    hints = typing.get_type_hints(schema)
    return tuple(
        (f.name, f.metadata.get(_KEY, f.name), hints[f.name],
         f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
        for f in dataclasses.fields(schema) if f.init
    )


def _expected(t: Any) -> str:
    """What a type accepts, as the messages say it."""
    origin, args = typing.get_origin(t), typing.get_args(t)
    if t is object or t is Any:
        return "anything"
    if origin is Literal:
        return ("" if len(args) == 1 else "one of ") + ", ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        # not "or null": TOML has none (the key is left out), and YAML's null is seldom what was meant
        return " or ".join(_expected(a) for a in args if a is not type(None))
    if origin is list or (origin is tuple and len(args) == 2 and args[1] is Ellipsis):
        return _list_of(args[0])
    if origin is tuple and len(set(args)) == 1 and args[0] in _SCALARS:
        return f"a list of {len(args)} {_SCALARS[args[0]][1]}"
    if origin is tuple:
        return f"a list of {len(args)} ({', '.join(_expected(a) for a in args)})"
    if origin is dict or _is_schema(t):
        return "a table"
    return _SCALARS[t][0]


def _list_of(t: Any) -> str:
    """`a list of strings`, `a list of tables`; a list of choices or unions says what each item is."""
    if t in _SCALARS:
        return f"a list of {_SCALARS[t][1]}"
    if typing.get_origin(t) is dict or _is_schema(t):
        return "a list of tables"
    if typing.get_origin(t) in (list, tuple):
        return "a list of lists"
    return f"a list, each {_expected(t)}"


_SCALARS: dict[Any, tuple[str, str]] = {
    str: ("a string", "strings"),
    int: ("a whole number", "whole numbers"),
    float: ("a number", "numbers"),
    bool: ("true or false", "true or false values"),
}


def _convert(t: Any, value: object, where: _Where) -> Any:
    origin, args = typing.get_origin(t), typing.get_args(t)
    if t is object or t is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        return _union(t, args, value, where)
    if value is _MISSING:
        raise where.fail(f"expected {_expected(t)}, got nothing")
    if origin is Literal:
        # `schema = true` is not `schema = 1`, though True == 1
        if any(type(value) is type(a) and value == a for a in args):
            return value
        raise where.fail(f"expected {_expected(t)}, got {_shown(value)}")
    if origin is list or origin is tuple:
        return _sequence(t, origin, args, value, where)
    if origin is dict:
        if not isinstance(value, Mapping):
            raise where.fail(f"expected {_expected(t)}, got {_shown(value)}")
        return {_key(k, where): _convert(args[1], v, where.key(str(k))) for k, v in value.items()}
    if _is_schema(t):
        return _table(t, value, where)
    if t in _SCALARS:
        return _scalar(t, value, where)
    raise TypeError(f"{where.source}: {where.path}: the schema's type {t!r} is not one parse reads")


def _union(t: Any, args: tuple[Any, ...], value: object, where: _Where) -> Any:
    if value is None and type(None) in args:
        return None
    errors: list[tuple[Any, ConfigError]] = []
    for a in args:
        if a is type(None):
            continue
        try:
            return _convert(a, value, where)
        except ConfigError as exc:
            errors.append((a, exc))
    # The one alternative that is a list (or a table) where the value is one says more than the union:
    # `when.target[2]: expected a string`, not `when.target: expected a string or a list of strings`.
    fitting = [exc for a, exc in errors if len(errors) == 1 or _shape(a) == _shape(value) != "scalar"]
    if len(fitting) == 1 and value is not _MISSING:
        raise fitting[0]
    raise where.fail(f"expected {_expected(t)}, got {_shown(value)}")


def _shape(t_or_value: Any) -> str:
    """list, table or scalar: of a type, or of a value read from a file."""
    origin = typing.get_origin(t_or_value)
    if origin in (list, tuple) or isinstance(t_or_value, list):
        return "list"
    if origin is dict or _is_schema(t_or_value) or isinstance(t_or_value, Mapping):
        return "table"
    return "scalar"


def _sequence(t: Any, origin: Any, args: tuple[Any, ...], value: object, where: _Where) -> Any:
    if not isinstance(value, list):
        raise where.fail(f"expected {_expected(t)}, got {_shown(value)}")
    if origin is list or (len(args) == 2 and args[1] is Ellipsis):
        items = [_convert(args[0], v, where.item(i)) for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if len(value) != len(args):
        raise where.fail(f"expected {_expected(t)}, got {_shown(value)}")
    return tuple(_convert(a, v, where.item(i)) for i, (a, v) in enumerate(zip(args, value, strict=True)))


def _key(key: object, where: _Where) -> str:
    # TOML keys are always text; YAML's may be numbers (`8000: x`)
    if not isinstance(key, str):
        raise where.fail(f"expected text keys, got {_shown(key)}")
    return key


def _table(schema: type, value: object, where: _Where) -> Any:
    if not isinstance(value, Mapping):
        raise where.fail(f"expected {_expected(schema)}, got {_shown(value)}")
    fields = _fields(schema)
    known = {key for _, key, _, _ in fields}
    for k in value:
        if _key(k, where) not in known:
            raise where.key(k).fail(f"unknown key (known: {', '.join(sorted(known)) or 'none'})")
    kwargs = {}
    for attr, key, t, required in fields:
        if key in value:
            kwargs[attr] = _convert(t, value[key], where.key(key))
        elif required:
            kwargs[attr] = _convert(t, _MISSING, where.key(key))
    return schema(**kwargs)


def _scalar(t: type, value: object, where: _Where) -> Any:
    # bool is an int subclass: demand the exact type, except an int where a float is asked for
    if type(value) is t:
        return value
    if t is float and type(value) is int:
        return float(value)
    raise where.fail(f"expected {_expected(t)}, got {_shown(value)}")
