"""The typed error hierarchy: every code maps back to its class, and
`LograftError.from_dict` is the one way back from an error body."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

import pytest

import lograft
from lograft import errors
from lograft.api import http_errors


def _refines(cls: type[errors.LograftError]) -> bool:
    """A subclass of the registered class of its own code (PeerUnreachableError
    of BrokerNotAvailableError): it tells the raising node's code one failure
    from another and comes back from the wire as that registered class, with
    the same code, so it is no second definition of the code."""
    registered = {c.code: c for c in errors.all_error_classes()}.get(cls.code)
    return registered is not None and registered is not cls and issubclass(cls, registered)


def _defined() -> list[type[errors.LograftError]]:
    return [
        cls
        for _name, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, errors.LograftError)
        and cls is not errors.LograftError
        and not _refines(cls)
    ]


def test_every_error_class_is_found_again_by_its_code() -> None:
    """A node re-raises another node's answer through `from_dict`; a class
    left out of the registry comes back as something else (UNKNOWN_SERVER_ERROR
    for CLUSTER_AUTHORIZATION_FAILED once, from a forwarded produce)."""
    defined = _defined()
    assert len(defined) == len({cls.code for cls in defined}), "a code used twice"
    assert sorted(c.code for c in errors.all_error_classes()) == sorted(c.code for c in defined)
    back = errors.LograftError.from_dict({"code": "SASL_AUTHENTICATION_FAILED"})
    assert type(back) is http_errors.SaslAuthenticationFailedError


@pytest.mark.parametrize("cls", errors.all_error_classes(), ids=lambda cls: cls.code)
def test_to_dict_and_from_dict_round_trip(cls: type[errors.LograftError]) -> None:
    sent = cls("what happened", topic="t", partition=3, nested={"a": [1, 2]})
    back = errors.LograftError.from_dict(sent.to_dict())
    assert type(back) is cls
    assert back.message == "what happened" and back.retriable is cls.retriable
    assert back.details == {"topic": "t", "partition": 3, "nested": {"a": [1, 2]}}
    assert back.to_dict() == sent.to_dict()


def test_the_class_comes_from_the_code_whichever_class_is_asked() -> None:
    body = errors.NotLeaderOrFollowerError("go to 2", leader_id=2).to_dict()
    assert type(errors.InvalidRequestError.from_dict(body)) is errors.NotLeaderOrFollowerError


def test_the_generic_code_is_the_base_class() -> None:
    back = errors.LograftError.from_dict({"code": "UNKNOWN_SERVER_ERROR", "message": "boom"})
    assert type(back) is errors.LograftError and back.message == "boom"


def test_an_unknown_code_keeps_its_code_and_retriable_flag() -> None:
    """A newer node's code: the client still sees the code and whether to retry."""
    new = errors.LograftError.from_dict(
        {"code": "SOMETHING_NEW", "message": "m", "retriable": True, "details": {"x": 1}}
    )
    assert isinstance(new, errors.LograftError)
    assert (new.code, new.message, new.retriable, new.details) == (
        "SOMETHING_NEW",
        "m",
        True,
        {"x": 1},
    )
    again = errors.LograftError.from_dict({"code": "SOMETHING_NEW", "retriable": True})
    assert type(again) is type(new)
    assert not errors.LograftError.from_dict({"code": "SOMETHING_NEW"}).retriable
    # A registered code keeps its class's flag, whatever the body says.
    assert (
        errors.LograftError.from_dict({"code": "INVALID_REQUEST", "retriable": True}).retriable
        is False
    )


def test_unknown_codes_make_a_bounded_number_of_classes() -> None:
    """Codes come from the network: each distinct one must not be kept forever."""
    for i in range(1000):
        errors.LograftError.from_dict({"code": f"FLOOD_{i}"})
    info = errors._remote_class.cache_info()
    assert info.maxsize is not None and info.currsize <= info.maxsize


def test_a_missing_message_is_the_code_and_details_are_copied() -> None:
    details: dict[str, Any] = {"message": "a detail may be called message", "leader_id": 2}
    back = errors.LograftError.from_dict({"code": "NOT_CONTROLLER", "details": details})
    assert back.message == "NOT_CONTROLLER"
    assert back.details == details and back.details is not details
    assert errors.LograftError.from_dict({"code": "NOT_CONTROLLER", "details": None}).details == {}


@pytest.mark.parametrize(
    "body",
    [
        None,
        [],
        "NOT_CONTROLLER",
        {},
        {"code": ""},
        {"code": 6},
        {"message": "no code"},
        {"code": "NOT_CONTROLLER", "message": ["not", "a", "string"]},
        {"code": "NOT_CONTROLLER", "details": ["not", "an", "object"]},
        {"code": "X" * 10_000, "details": 1},
    ],
)
def test_what_is_not_an_error_object_is_a_value_error(body: Any) -> None:
    with pytest.raises(ValueError) as info:
        errors.LograftError.from_dict(body)
    assert len(str(info.value)) < 200, "the message must not echo a large body"


def test_a_refinement_comes_back_as_its_registered_class() -> None:
    sent = errors.PeerUnreachableError("no answer from broker 2", leader_id=2)
    back = errors.LograftError.from_dict(sent.to_dict())
    assert type(back) is errors.BrokerNotAvailableError
    assert (back.code, back.retriable, back.details) == (
        "BROKER_NOT_AVAILABLE",
        True,
        {"leader_id": 2},
    )


def test_every_error_code_is_one_class_across_lograft() -> None:
    """Each error is defined once: the command line's client-side errors are
    `lograft.client.errors`' (a second CLUSTER_UNREACHABLE, and a
    BAD_RESPONSE beside UNEXPECTED_RESPONSE, once lived in api/http_client.py)."""
    defined: dict[str, list[str]] = {}
    for info in pkgutil.walk_packages(lograft.__path__, "lograft."):
        module = importlib.import_module(info.name)
        for _name, cls in inspect.getmembers(module, inspect.isclass):
            if (
                cls.__module__ == module.__name__
                and issubclass(cls, errors.LograftError)
                and not _refines(cls)
            ):
                defined.setdefault(cls.code, []).append(f"{cls.__module__}.{cls.__qualname__}")
    twice = {code: where for code, where in defined.items() if len(where) > 1}
    assert not twice, f"codes defined more than once: {twice}"
