"""Every error class has a deliberate HTTP status, and docs/api.md shows it.

A class left out of `http_errors._STATUS` used to fall through to 500 (ten
did, among them the retriable RAFT_QUEUE_FULL and RAFT_STOPPED), which tells
a client "the server is broken, do not retry" about back-pressure."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lograft import errors
from lograft.api.http_errors import (
    RETRY_AFTER_S,
    STATUS_BY_CLASS,
    error_response,
    raw_error_response,
    status_for,
)

API_DOC = Path(__file__).resolve().parents[3] / "docs" / "api.md"
REGISTERED = errors.all_error_classes()


def unmapped(classes: list[type[errors.LograftError]]) -> list[str]:
    """The codes of `classes` without a status of their own (one inherited
    from a parent, or the 500 fallback, does not count)."""
    return [cls.code for cls in classes if cls not in STATUS_BY_CLASS]


def test_every_registered_error_class_has_its_own_status() -> None:
    assert not unmapped(REGISTERED), "add these to http_errors._STATUS and docs/api.md"


def test_a_new_error_class_without_a_status_is_caught() -> None:
    """The check above can fail: a subclass of a mapped class, registered but
    given no status, is reported (not passed on its parent's 400)."""

    class BrandNewError(errors.InvalidRequestError):
        code = "BRAND_NEW"

    assert unmapped([*REGISTERED, BrandNewError]) == ["BRAND_NEW"]


@pytest.mark.parametrize("cls", REGISTERED, ids=lambda cls: cls.code)
def test_the_status_is_the_mapped_one_and_retriable_errors_are_never_500(
    cls: type[errors.LograftError],
) -> None:
    status = status_for(cls("m"))
    assert status == STATUS_BY_CLASS[cls]
    assert 400 <= status < 600
    if cls.retriable:
        assert status != 500, f"{cls.code} is retriable: a 500 says do not retry"
    if status == 503:
        # A 503 says "retry later" (with Retry-After): only true of a retriable error.
        assert cls.retriable, f"{cls.code} is a 503 but not retriable"


def test_the_unknown_server_error_is_500() -> None:
    assert status_for(errors.LograftError("boom")) == 500


def test_an_unregistered_retriable_error_is_503_not_500() -> None:
    """A code from a newer node, relayed through this one, is not in the map."""
    newer = type("RemoteError", (errors.LograftError,), {"code": "NEWER", "retriable": True})
    assert status_for(newer("m")) == 503
    older = type("RemoteError", (errors.LograftError,), {"code": "OLDER", "retriable": False})
    assert status_for(older("m")) == 500


def test_a_503_answer_says_when_to_retry() -> None:
    busy = error_response(errors.RaftQueueFullError("too many appends in flight"))
    assert busy.status == 503 and busy.headers["Retry-After"] == str(RETRY_AFTER_S)
    refused = error_response(errors.InvalidRequestError("bad"))
    assert refused.status == 400 and "Retry-After" not in refused.headers
    raw = raw_error_response(errors.ConnectionsLimitReachedError("full"))
    head = raw.split(b"\r\n\r\n", 1)[0].decode()
    assert head.startswith("HTTP/1.1 503 Service Unavailable\r\n")
    assert f"\r\nRetry-After: {RETRY_AFTER_S}\r\n" in head + "\r\n"


# -- docs/api.md --------------------------------------------------------------------------

_ROW = re.compile(r"^\| (\d{3}) \| (.*) \|$")
_CODE = re.compile(r"`([A-Z][A-Z0-9_]*)`")


def _documented(section: str) -> dict[str, int]:
    """code -> status from the `| status | codes |` table under `section`."""
    text = API_DOC.read_text()
    start = text.index(f"\n{section}\n")
    end = text.index("\n#", start + len(section) + 2)
    out: dict[str, int] = {}
    for line in text[start:end].splitlines():
        row = _ROW.match(line)
        if row is None:
            continue
        for code in _CODE.findall(row.group(2)):
            assert code not in out, f"{code} listed twice in {section}"
            out[code] = int(row.group(1))
    return out


def _mapped() -> dict[str, int]:
    codes = {cls.code: STATUS_BY_CLASS[cls] for cls in REGISTERED}
    return {**codes, errors.LograftError.code: STATUS_BY_CLASS[errors.LograftError]}


def test_the_api_doc_lists_every_code_with_its_status() -> None:
    assert _documented("## Errors") == _mapped()


def test_the_group_error_table_agrees_with_the_map() -> None:
    documented = _documented("### Group errors")
    assert documented, "the group error table moved"
    mapped = _mapped()
    assert {code: mapped.get(code) for code in documented} == documented
