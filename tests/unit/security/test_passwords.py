"""SCRAM credentials and HTTP Basic parsing (lograft.security.passwords)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lograft import typed
from lograft.errors import InvalidRequestError
from lograft.security.failures import AuthenticationFailed, AuthFailure
from lograft.security.passwords import (
    AUTHORIZATION_HEADER_BYTES_MAX,
    ITERATIONS_MAX,
    ITERATIONS_MIN,
    PASSWORD_BYTES_MAX,
    BasicCredentials,
    ScramCredential,
    ScramMechanism,
    check_password,
    make_credential,
    parse_basic_authorization,
)

# RFC 7677 section 3: the SCRAM-SHA-256 exchange for user "user", password "pencil".
RFC7677_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC7677_AUTH_MESSAGE = (
    b"n=user,r=rOprNGfwEbeRWgbNEkqO,"
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,"
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
)
RFC7677_PROOF = base64.b64decode("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC7677_SERVER_SIGNATURE = base64.b64decode("6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")


def test_keys_agree_with_the_rfc_7677_exchange() -> None:
    """StoredKey and ServerKey are the RFC's: the client's proof verifies
    against StoredKey and the server signature is the RFC's."""
    cred = make_credential(
        "user", "pencil", mechanism=ScramMechanism.SCRAM_SHA_256, salt=RFC7677_SALT
    )
    assert hmac.digest(cred.server_key, RFC7677_AUTH_MESSAGE, "sha256") == RFC7677_SERVER_SIGNATURE
    signature = hmac.digest(cred.stored_key, RFC7677_AUTH_MESSAGE, "sha256")
    client_key = bytes(a ^ b for a, b in zip(RFC7677_PROOF, signature, strict=True))
    assert hashlib.sha256(client_key).digest() == cred.stored_key


def test_default_is_scram_sha_512_with_a_fresh_salt() -> None:
    one = make_credential("alice", "s3cret")
    two = make_credential("alice", "s3cret")
    assert one.mechanism is ScramMechanism.SCRAM_SHA_512
    assert one.iterations == ITERATIONS_MIN
    assert len(one.stored_key) == len(one.server_key) == 64
    assert one.salt != two.salt and one.stored_key != two.stored_key


@pytest.mark.parametrize("mechanism", list(ScramMechanism))
def test_check_password_accepts_the_right_one_and_refuses_others(mechanism) -> None:
    cred = make_credential("alice", "pä55:wörd", mechanism=mechanism)
    check_password(cred, "pä55:wörd")
    for wrong in ("pä55:wörd ", "", "pa55:word", "PÄ55:WÖRD"):
        with pytest.raises(AuthenticationFailed) as info:
            check_password(cred, wrong)
        assert info.value.reason is AuthFailure.BAD_CREDENTIALS


def test_an_unknown_user_is_refused_like_a_wrong_password() -> None:
    with pytest.raises(AuthenticationFailed) as info:
        check_password(None, "anything")
    assert info.value.reason is AuthFailure.BAD_CREDENTIALS
    assert info.value.message == "wrong user name or password"


def test_compare_is_constant_time(monkeypatch) -> None:
    """The StoredKey comparison goes through hmac.compare_digest."""
    calls = []
    real = hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    cred = make_credential("alice", "pw")
    with pytest.raises(AuthenticationFailed):
        check_password(cred, "nope")
    check_password(cred, "pw")
    assert len(calls) == 2


def test_an_overlong_password_is_refused_before_hashing(monkeypatch) -> None:
    cred = make_credential("alice", "pw")
    monkeypatch.setattr(hashlib, "pbkdf2_hmac", lambda *a: pytest.fail("hashed"))
    with pytest.raises(AuthenticationFailed) as info:
        check_password(cred, "x" * (PASSWORD_BYTES_MAX + 1))
    assert info.value.reason is AuthFailure.TOO_LARGE
    with pytest.raises(AuthenticationFailed) as info:
        check_password(cred, "\ud800")
    assert info.value.reason is AuthFailure.MALFORMED


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"name": ""}, "empty"),
        ({"name": "a:b"}, "':'"),
        ({"name": "a\nb"}, "control"),
        ({"name": "x" * 256}, "at most"),
        ({"password": ""}, "empty"),
        ({"password": "a\x00"}, "control"),
        ({"password": "x" * (PASSWORD_BYTES_MAX + 1)}, "at most"),
        ({"iterations": ITERATIONS_MIN - 1}, "iterations"),
        ({"iterations": ITERATIONS_MAX + 1}, "iterations"),
    ],
)
def test_make_credential_refuses_bad_input(kwargs, words) -> None:
    args = {"name": "alice", "password": "pw", **kwargs}
    with pytest.raises(ValueError, match=words):
        make_credential(args.pop("name"), args.pop("password"), **args)


def test_the_record_round_trips_through_json_and_never_holds_the_password() -> None:
    cred = make_credential("alice", "correct horse battery staple")
    data = typed.encode_json(cred)
    assert b"correct horse" not in data
    assert typed.decode_json(data, ScramCredential, error=InvalidRequestError) == cred
    assert "stored_key" not in repr(cred) and "alice" in repr(cred)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"iterations": 1000}, "iterations"),
        ({"mechanism": "SCRAM-SHA-1"}, "mechanism"),
        ({"salt": base64.b64encode(b"short").decode()}, "salt"),
        ({"stored_key": base64.b64encode(bytes(32)).decode()}, "stored_key"),
        ({"name": "a:b"}, "name"),
        ({"password": "pw"}, "password"),
    ],
)
def test_a_bad_stored_record_is_refused(change, field) -> None:
    body = typed.to_builtins(make_credential("alice", "pw"))
    body.update(change)
    with pytest.raises(InvalidRequestError, match=field):
        typed.build(body, ScramCredential, error=InvalidRequestError)


def basic(text: str | bytes) -> str:
    raw = text.encode() if isinstance(text, str) else text
    return "Basic " + base64.b64encode(raw).decode()


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (basic("alice:pw"), ("alice", "pw")),
        (basic("alice:p:w:"), ("alice", "p:w:")),  # the user name ends at the first colon
        (basic("alice:"), ("alice", "")),
        (basic("ålice:pä"), ("ålice", "pä")),
        ("bAsIc   " + basic("bob:x")[6:] + " ", ("bob", "x")),
    ],
)
def test_basic_header_is_parsed(header, expected) -> None:
    assert parse_basic_authorization(header) == BasicCredentials(*expected)
    assert parse_basic_authorization(header.encode()) == BasicCredentials(*expected)


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        ("Bearer abc", AuthFailure.MISSING),
        ("", AuthFailure.MISSING),
        ("Basic", AuthFailure.MALFORMED),
        ("Basic !!!!", AuthFailure.MALFORMED),
        ("Basic YWxpY2U6cHc", AuthFailure.MALFORMED),  # missing padding
        ("Basic YWxp Y2U6cHc=", AuthFailure.MALFORMED),
        (basic("no-colon"), AuthFailure.MALFORMED),
        (basic(":pw"), AuthFailure.MALFORMED),
        (basic(b"al\xffice:pw"), AuthFailure.MALFORMED),
        (basic("al\x01ice:pw"), AuthFailure.MALFORMED),
        (basic("alice:p\x7fw"), AuthFailure.MALFORMED),
        (basic("x" * 256 + ":pw"), AuthFailure.MALFORMED),
        ("Basic é", AuthFailure.MALFORMED),
        (b"Basic \xff", AuthFailure.MALFORMED),
        (basic("alice:" + "x" * (PASSWORD_BYTES_MAX + 1)), AuthFailure.TOO_LARGE),
        ("Basic " + "A" * AUTHORIZATION_HEADER_BYTES_MAX, AuthFailure.TOO_LARGE),
    ],
)
def test_bad_basic_headers_are_refused_with_a_stable_reason(header, reason) -> None:
    with pytest.raises(AuthenticationFailed) as info:
        parse_basic_authorization(header)
    assert info.value.reason is reason
    # The message never repeats what was sent.
    assert "pw" not in info.value.message and "alice" not in info.value.message


def test_basic_credentials_hide_the_password_in_repr() -> None:
    assert "secret" not in repr(BasicCredentials("alice", "secret"))


# Hostile input: any header is parsed or refused with AuthenticationFailed,
# never another exception (which would be a 500).
@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=300),
        st.binary(max_size=300).map(lambda raw: basic(raw)),
        st.binary(max_size=300).map(lambda raw: raw.decode("utf-8", "surrogateescape")),
        st.binary(max_size=300),
    )
)
def test_any_basic_header_is_parsed_or_refused(header) -> None:
    with contextlib.suppress(AuthenticationFailed):
        found = parse_basic_authorization(header)
        assert found.user and ":" not in found.user
