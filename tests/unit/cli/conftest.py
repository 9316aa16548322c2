"""The CLI tests drive the same one-node data server as the API tests."""

from tests.unit.api.conftest import srv

__all__ = ["srv"]
