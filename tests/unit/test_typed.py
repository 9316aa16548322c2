"""lograft.typed: the one validation mechanism names the bad field and refuses unknown ones."""

from typing import Annotated, Literal

import msgspec
import pytest

from lograft.errors import InvalidConfigError, InvalidRequestError
from lograft.typed import Record, build, decode_json, encode_json


class Http(Record):
    port: Annotated[int, msgspec.Meta(ge=1, le=65535)] = 8080
    host: str = "127.0.0.1"


class Config(Record):
    http: Http = Http()


def test_defaults_and_values_are_built():
    assert build({}, Config, error=InvalidConfigError) == Config()
    assert build({"http": {"port": 9000}}, Config, error=InvalidConfigError).http.port == 9000


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"http": {"port": 0}}, "config.http.port: Expected `int` >= 1, got 0"),
        ({"http": {"prt": 1}}, "config.http.prt: unknown field; known: host, port"),
        ({"http": 1}, "config.http: Expected `object`, got `int`"),
        ({"http": {"port": "12"}}, "config.http.port: Expected `int`, got `str`"),
    ],
)
def test_a_bad_value_names_its_field(value, message):
    with pytest.raises(InvalidConfigError) as caught:
        build(value, Config, error=InvalidConfigError, where="config")
    assert str(caught.value) == message


def test_strings_stand_for_numbers_only_when_asked():
    built = build({"http": {"port": "12"}}, Config, error=InvalidConfigError, strict=False)
    assert built.http.port == 12


def test_json_round_trips_and_bad_json_is_the_callers_error():
    assert decode_json(encode_json(Config()), Config, error=InvalidRequestError) == Config()
    with pytest.raises(InvalidRequestError, match="not valid JSON"):
        decode_json(b"{", Config, error=InvalidRequestError)


class Node(Record):
    node_id: int
    http: Http = Http()


def test_a_missing_field_is_named_and_the_detail_carries_the_path():
    with pytest.raises(InvalidConfigError) as caught:
        build({}, Node, error=InvalidConfigError, detail="key")
    assert (str(caught.value), caught.value.details) == ("node_id: required", {"key": "node_id"})
    with pytest.raises(InvalidConfigError) as caught:
        build({"node_id": 1, "http": {"port": 70000}}, Node, error=InvalidConfigError, detail="key")
    assert caught.value.details == {"key": "http.port"}
    assert str(caught.value) == "http.port: Expected `int` <= 65535, got 70000"


def test_a_path_field_takes_a_string():
    from pathlib import Path

    class Where(Record):
        data_dir: Path

    assert build({"data_dir": "d"}, Where, error=InvalidConfigError).data_dir == Path("d")


class Window(Record):
    low: int = 0
    high: int = 1

    def __post_init__(self) -> None:
        if self.high <= self.low:
            from lograft.typed import FieldError

            raise FieldError("high", "must exceed low")


class Outer(Record):
    window: Window = Window()


def test_a_rule_between_fields_names_the_field_at_fault():
    with pytest.raises(InvalidConfigError) as caught:
        build({"window": {"low": 5}}, Outer, error=InvalidConfigError, detail="key")
    assert (str(caught.value), caught.value.details) == (
        "window.high: must exceed low",
        {"key": "window.high"},
    )


def test_names_and_values_from_the_data_are_not_echoed_whole():
    class Choice(Record):
        mode: Literal["a", "b"] = "a"

    for value in ({"mode": "9" * 5000}, {"x" * 5000: 1}, {"mode": ["9" * 5000]}):
        with pytest.raises(InvalidConfigError) as caught:
            build(value, Choice, error=InvalidConfigError, detail="key")
        assert len(str(caught.value)) < 400
        assert len(str(caught.value.details["key"])) < 100


def test_check_fields_checks_what_code_constructs():
    from lograft.typed import check_fields

    with pytest.raises(InvalidConfigError) as caught:
        check_fields(Http(port=0), error=InvalidConfigError, detail="setting")
    assert str(caught.value) == "port: Expected `int` >= 1, got 0"
    assert caught.value.details == {"setting": "port"}
    check_fields(Http(), error=InvalidConfigError)


def test_decode_json_shows_the_bad_value_and_can_name_it_in_a_detail():
    with pytest.raises(InvalidRequestError) as caught:
        decode_json(b'{"node_id": 1, "http": {"port": 0}}', Node, error=InvalidRequestError)
    assert str(caught.value) == "http.port: Expected `int` >= 1, got 0"
    assert caught.value.details == {}
    with pytest.raises(InvalidRequestError) as caught:
        decode_json(b"{}", Node, error=InvalidRequestError, detail="field")
    assert caught.value.details == {"field": "node_id"}


class Anything(Record):
    value: object = None


def test_json_nested_too_deeply_is_the_callers_error_not_a_recursion_error():
    deep = b'{"value": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    with pytest.raises(InvalidRequestError, match="nested too deeply"):
        decode_json(deep, Anything, error=InvalidRequestError)


def test_decode_json_keeps_a_decoder_per_type_and_judges_each_call_alike():
    from lograft import typed

    class Point(Record):
        x: int

    for _ in range(2):  # the second call uses the kept decoder
        assert decode_json(b'{"x": 1}', Point, error=InvalidRequestError) == Point(x=1)
        with pytest.raises(InvalidRequestError, match="x"):
            decode_json(b'{"x": "one"}', Point, error=InvalidRequestError)
    assert Point in typed._DECODERS
    # An unhashable type form is decoded all the same, without being kept.
    unhashable = Annotated[int, {"note": "a dict is not hashable"}]
    assert decode_json(b"7", unhashable, error=InvalidRequestError) == 7  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError):
        decode_json(b'"7"', unhashable, error=InvalidRequestError)  # type: ignore[arg-type]
