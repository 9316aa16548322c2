"""lograft.typed: the one validation mechanism names the bad field and refuses unknown ones."""

from typing import Annotated

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
        ({"http": {"port": 0}}, "config.http.port: Expected `int` >= 1"),
        ({"http": {"prt": 1}}, "config.http: Object contains unknown field `prt`"),
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
