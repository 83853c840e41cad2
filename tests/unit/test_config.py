"""The typed configuration loader: each type it reads, and each refusal, worded one way (file, dotted key
path, what was expected, what was found)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest

from sparkserve import config
from sparkserve.errors import SparkserveError


@dataclass(frozen=True)
class Inner:
    gbs: float
    note: str = ""


@dataclass(frozen=True)
class Schema:
    name: str
    count: int = 0
    ratio: float = 1.0
    on: bool = False
    words: list[str] = field(default_factory=list)
    pins: tuple[str, ...] = ()
    pair: tuple[float, float] | None = None
    table: dict[str, int] = field(default_factory=dict)
    inner: Inner | None = None
    inners: tuple[Inner, ...] = ()
    mode: Literal["fast", "safe"] = "safe"
    version: Literal[1] = 1
    when: dict[str, str | list[str]] = field(default_factory=dict)
    later: object = None
    classes: tuple[str, ...] = field(default=(), metadata=config.renamed("class"))


KNOWN = "class, count, inner, inners, later, mode, name, on, pair, pins, ratio, table, version, when, words"


def parse(data: Any) -> Schema:
    return config.parse(Schema, data, "f.toml")


def test_each_type_reads_into_its_field() -> None:
    got = parse({"name": "a", "count": 3, "ratio": 2, "on": True, "words": ["x"], "pins": ["p", "q"],
                 "pair": [1, 2.5], "table": {"k": 1}, "inner": {"gbs": 273},
                 "inners": [{"gbs": 1.5, "note": "n"}], "mode": "fast", "version": 1,
                 "when": {"a": "x", "b": ["y", "z"]}, "later": {"any": [1]}, "class": ["c"]})
    assert got == Schema("a", 3, 2.0, True, ["x"], ("p", "q"), (1.0, 2.5), {"k": 1}, Inner(273.0),
                         (Inner(1.5, "n"),), "fast", 1, {"a": "x", "b": ["y", "z"]}, {"any": [1]}, ("c",))
    # an int where a number is asked becomes a float; tuples are tuples, not the file's lists
    assert got.inner is not None and type(got.ratio) is float and type(got.inner.gbs) is float
    assert type(got.pins) is tuple and type(got.pair) is tuple and type(got.words) is list


def test_defaults_come_from_the_dataclass() -> None:
    assert parse({"name": "a"}) == Schema("a")
    # null (YAML) for an optional field is None
    assert parse({"name": "a", "inner": None}).inner is None


@pytest.mark.parametrize(("data", "message"), [
    ({}, "f.toml: name: expected a string, got nothing"),
    ({"name": 5}, "f.toml: name: expected a string, got 5"),
    ({"name": "a", "count": 1.5}, "f.toml: count: expected a whole number, got 1.5"),
    # bool is an int subclass in Python, never a number in a file
    ({"name": "a", "count": True}, "f.toml: count: expected a whole number, got True"),
    ({"name": "a", "ratio": "fast"}, "f.toml: ratio: expected a number, got 'fast'"),
    ({"name": "a", "ratio": False}, "f.toml: ratio: expected a number, got False"),
    ({"name": "a", "on": 1}, "f.toml: on: expected true or false, got 1"),
    ({"name": "a", "words": "x"}, "f.toml: words: expected a list of strings, got 'x'"),
    ({"name": "a", "words": ["x", 2]}, "f.toml: words[2]: expected a string, got 2"),
    ({"name": "a", "pins": [1]}, "f.toml: pins[1]: expected a string, got 1"),
    ({"name": "a", "pair": [1]}, "f.toml: pair: expected a list of 2 numbers, got [1]"),
    ({"name": "a", "table": []}, "f.toml: table: expected a table, got []"),
    ({"name": "a", "table": {"k": "1"}}, "f.toml: table.k: expected a whole number, got '1'"),
    ({"name": "a", "table": {"a.b": "1"}}, 'f.toml: table."a.b": expected a whole number, got \'1\''),
    ({"name": "a", "table": {8000: 1}}, "f.toml: table: expected text keys, got 8000"),
    ({"name": "a", "inner": {}}, "f.toml: inner.gbs: expected a number, got nothing"),
    ({"name": "a", "inner": "x"}, "f.toml: inner: expected a table, got 'x'"),
    ({"name": "a", "inner": {"gbs": 1, "extra": 2}}, "f.toml: inner.extra: unknown key (known: gbs, note)"),
    ({"name": "a", "inners": [{"gbs": 1}, {"gbs": "x"}]},
     "f.toml: inners[2].gbs: expected a number, got 'x'"),
    ({"name": "a", "inners": {"gbs": 1}}, "f.toml: inners: expected a list of tables, got {'gbs': 1}"),
    ({"name": "a", "mode": "slow"}, "f.toml: mode: expected one of 'fast', 'safe', got 'slow'"),
    # `schema = true` is not `schema = 1`, though True == 1 in Python
    ({"name": "a", "version": True}, "f.toml: version: expected 1, got True"),
    ({"name": "a", "when": {"k": 1}}, "f.toml: when.k: expected a string or a list of strings, got 1"),
    ({"name": "a", "extra": 1}, f"f.toml: extra: unknown key (known: {KNOWN})"),
    # the file's key, not the attribute
    ({"name": "a", "classes": []}, f"f.toml: classes: unknown key (known: {KNOWN})"),
    (["name"], "f.toml: expected a table, got ['name']"),
    (None, "f.toml: expected a table, got None"),
    # a long value is cut: the message names it, it need not print it whole
    ({"name": "a", "count": "x" * 200}, "f.toml: count: expected a whole number, got '" + "x" * 76 + "..."),
])
def test_each_refusal_names_file_path_expected_and_got(data: Any, message: str) -> None:
    with pytest.raises(config.ConfigError) as info:
        parse(data)
    assert str(info.value) == message


def test_a_table_found_inside_another_file_is_named_by_its_path() -> None:
    with pytest.raises(config.ConfigError, match=r"^f\.toml: module\[3\]\.params\.gbs: expected a number"):
        config.parse(Inner, {"gbs": "x"}, "f.toml", "module[3].params")


def test_a_bad_file_is_the_clis_exit_3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """`sparkserve pins` on a pins.toml whose value has the wrong type: the uniform message, exit 3."""
    from sparkserve.cli.main import main

    root = Path(__file__).resolve().parents[2]
    text = (root / "pins.toml").read_text().replace('python = "3.13"', "python = 3.13")
    (tmp_path / "pins.toml").write_text(text)
    monkeypatch.setenv("SPARKSERVE_ROOT", str(tmp_path))
    assert issubclass(config.ConfigError, SparkserveError)
    assert main(["pins"]) == 3
    err = capsys.readouterr().err
    assert f"{tmp_path / 'pins.toml'}: base_image.python: expected a string, got 3.13" in err


def test_toml_files(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text('name = "a"\n[inner]\ngbs = 273\n')
    assert config.load_toml(Schema, good) == Schema("a", inner=Inner(273.0))
    bad = tmp_path / "bad.toml"
    bad.write_text("name = \n")
    with pytest.raises(config.ConfigError, match=rf"^{bad}: not TOML: "):
        config.load_toml(Schema, bad)
    with pytest.raises(config.ConfigError, match=rf"^{tmp_path / 'none.toml'}: cannot read: "):
        config.load_toml(Schema, tmp_path / "none.toml")
    with pytest.raises(config.ConfigError, match=r"^src\.toml: count: expected a whole number, got 'x'"):
        config.parse_toml(Schema, 'name = "a"\ncount = "x"\n', "src.toml")


def test_a_schema_must_be_a_frozen_dataclass() -> None:
    @dataclass
    class Mutable:
        x: int = 0

    with pytest.raises(TypeError, match="not a frozen dataclass"):
        config.parse(Mutable, {}, "f.toml")
    with pytest.raises(TypeError, match="not a frozen dataclass"):
        config.parse(dict, {}, "f.toml")  # type: ignore[arg-type]


@pytest.mark.parametrize(("data", "message"), [
    # the list alternative of `str | list[str]` names the bad item
    ({"name": "a", "when": {"k": ["x", 2]}}, "f.toml: when.k[2]: expected a string, got 2"),
    # a scalar fits no alternative better than another: the union is named
    ({"name": "a", "when": {"k": 1}}, "f.toml: when.k: expected a string or a list of strings, got 1"),
    # `X | None` is X to the messages, down to the bad key
    ({"name": "a", "pair": ["x", 1]}, "f.toml: pair[1]: expected a number, got 'x'"),
])
def test_a_union_names_the_alternative_the_value_is_shaped_like(data: Any, message: str) -> None:
    with pytest.raises(config.ConfigError) as info:
        parse(data)
    assert str(info.value) == message


def test_a_type_the_loader_does_not_read_is_the_schemas_error() -> None:
    """A schema bug (a set, a Path) is a TypeError at the first file read, not a message to the user."""

    @dataclass(frozen=True)
    class Odd:
        names: set[str] = field(default_factory=set)

    with pytest.raises(TypeError, match=r"names: the schema's type set\[str\] is not one parse reads"):
        config.parse(Odd, {"names": ["a"]}, "f.toml")
