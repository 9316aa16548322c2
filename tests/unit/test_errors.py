"""The typed error hierarchy: every code maps back to its class."""

from __future__ import annotations

import inspect

from lograft import errors
from lograft.api import http_errors


def _defined() -> list[type[errors.LograftError]]:
    return [
        cls
        for _name, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, errors.LograftError) and cls is not errors.LograftError
    ]


def test_every_error_class_is_found_again_by_its_code() -> None:
    """A node re-raises another node's answer through `error_class_for`; a
    class left out comes back as UNKNOWN_SERVER_ERROR (CLUSTER_AUTHORIZATION_FAILED
    once did, from a forwarded produce)."""
    defined = _defined()
    assert len(defined) == len({cls.code for cls in defined}), "a code used twice"
    missing = [cls.__name__ for cls in defined if errors.error_class_for(cls.code) is not cls]
    assert not missing, f"not registered: {missing}"
    assert errors.error_class_for("CLUSTER_AUTHORIZATION_FAILED") is http_errors.UnauthorizedError


def test_an_unknown_code_is_the_generic_error() -> None:
    assert errors.error_class_for("NO_SUCH_CODE") is errors.LograftError
