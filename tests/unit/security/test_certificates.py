"""Kafka's ssl.principal.mapping.rules (lograft.security.certificates).

The first three tests are Kafka's SslPrincipalMapperTest, case for case.
"""

from __future__ import annotations

import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from lograft.security.certificates import (
    SUBJECT_CHARS_MAX,
    PrincipalMapper,
    certificate_principal,
    certificate_subject,
)
from lograft.security.failures import AuthenticationFailed, AuthFailure


@pytest.mark.parametrize(
    "rules",
    [
        "DEFAULT",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
        "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
        "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
        "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
    ],
)
def test_valid_rules(rules) -> None:
    PrincipalMapper(rules)


@pytest.mark.parametrize(
    "rules",
    [
        "default",
        "DEFAUL",
        "DEFAULT/L",
        "DEFAULT/U",
        "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
        "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
        # lograft refuses at parse time what Kafka refuses only when a DN arrives
        "RULE:^CN=(.*?/$1/",  # the pattern does not compile
        "RULE:^CN=.*$/$1/",  # a group reference without groups
        "RULE:^CN=(.*)$/${who}/",  # no such named group
        "RULE:^CN=(.*)$/$x/",  # '$' names no group
    ],
)
def test_invalid_rules(rules) -> None:
    with pytest.raises(ValueError, match="invalid principal mapping rule"):
        PrincipalMapper(rules)


def test_kafka_mapping_examples() -> None:
    mapper = PrincipalMapper(
        ", ".join(
            [
                "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
                "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
                "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
                "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
                "DEFAULT",
            ]
        )
    )
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert (
        mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"
    )


@pytest.mark.parametrize(
    ("expected", "rules"),
    [
        ("[]", ""),
        ("[DEFAULT]", "DEFAULT"),
        ("[RULE:/]", "RULE://"),
        ("[RULE:/.*]", "RULE:/.*/"),
        ("[RULE:/.*/L]", "RULE:/.*/L"),
        ("[RULE:/, DEFAULT]", "RULE://,DEFAULT"),
        ("[RULE:/, DEFAULT]", "  RULE:// ,  DEFAULT  "),
        ("[RULE:   /     , DEFAULT]", "  RULE:   /     / ,  DEFAULT  "),
        ("[RULE:  /     /U, DEFAULT]", "  RULE:  /     /U   ,DEFAULT  "),
        (
            "[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]",
            "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ",
        ),
        # empty rules are ignored
        ("[]", ",   , , ,      , , ,   "),
        ("[RULE:/, DEFAULT]", ",,RULE://,,,DEFAULT,,"),
        ("[RULE: /   , DEFAULT]", ",  , RULE: /   /    ,,,   DEFAULT, ,   "),
        ("[RULE:   /  /U, DEFAULT]", "     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,"),
        # escape sequences
        ("[RULE:\\/\\\\\\(\\)\\n\\t/\\/\\/]", "RULE:\\/\\\\\\(\\)\\n\\t/\\/\\//"),
        ("[RULE:\\**\\/+/*/L, RULE:\\/*\\**/**]", "RULE:\\**\\/+/*/L,RULE:\\/*\\**/**/"),
        # rules rule
        (
            "[RULE:,RULE:,/,RULE:,\\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT,"
            " /DEFAULT, DEFAULT]",
            "RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT,"
            " /DEFAULT/,DEFAULT",
        ),
    ],
)
def test_rules_splitting(expected, rules) -> None:
    assert repr(PrincipalMapper(rules)) == f"PrincipalMapper(rules = {expected})"


def test_comma_with_whitespace() -> None:
    mapper = PrincipalMapper("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"


@pytest.mark.parametrize(
    ("rule", "dn", "name"),
    [
        # $n past the groups is literal text (Kafka's escapeLiteralBackReferences)
        ("RULE:^CN=(\\w+),.*$/$1@$4/", "CN=ann,O=x", "ann@$4"),
        # Java reads as many digits as still name a group: $12 with one group is $1 then "2"
        ("RULE:^CN=(\\w+),.*$/$12/", "CN=ann,O=x", "ann2"),
        ("RULE:^CN=(\\w+),.*$/$0!/", "CN=ann,O=x", "CN=ann,O=x!"),
        ("RULE:^CN=(?P<who>\\w+),.*$/${who}/", "CN=ann,O=x", "ann"),
        ("RULE:^CN=(\\w+),.*$/\\$1-$1/", "CN=ann,O=x", "$1-ann"),
        # an optional group that did not take part expands to nothing
        ("RULE:^CN=(\\w+)(-x)?,.*$/$1$2/", "CN=ann,O=x", "ann"),
        # every match is replaced, as Java's replaceAll does
        ("RULE:.*/X/", "CN=ann", "XX"),
    ],
)
def test_replacements(rule, dn, name) -> None:
    assert PrincipalMapper(rule).name(dn) == name


def test_no_matching_rule_and_empty_names_are_refused() -> None:
    with pytest.raises(AuthenticationFailed) as info:
        PrincipalMapper("RULE:^CN=(.*),OU=ops$/$1/").name("CN=a,OU=dev")
    assert info.value.reason is AuthFailure.NO_MATCHING_RULE
    with pytest.raises(AuthenticationFailed) as info:
        PrincipalMapper("").name("CN=a")
    assert info.value.reason is AuthFailure.NO_MATCHING_RULE
    # an empty result stops the search (Kafka would return an empty name)
    with pytest.raises(AuthenticationFailed) as info:
        PrincipalMapper("RULE:^CN=()$/$1/, DEFAULT").name("CN=")
    assert info.value.reason is AuthFailure.NO_MATCHING_RULE


def test_an_overlong_subject_is_refused_before_any_rule_runs() -> None:
    with pytest.raises(AuthenticationFailed) as info:
        PrincipalMapper("RULE:^(a|a)*$/x/").name("a" * (SUBJECT_CHARS_MAX + 1))
    assert info.value.reason is AuthFailure.TOO_LARGE


def _certificate(name: x509.Name) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.DER)


def test_the_principal_of_a_certificate_is_its_mapped_rfc_4514_subject() -> None:
    der = _certificate(
        x509.Name(
            [
                x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Example, Inc"),
                x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "ServiceUsers"),
                x509.NameAttribute(NameOID.COMMON_NAME, "Alice"),
            ]
        )
    )
    # most specific first, commas in values escaped, as Java's X500Principal.getName()
    assert certificate_subject(der) == "CN=Alice,OU=ServiceUsers,O=Example\\, Inc,C=US"
    assert certificate_principal(der, PrincipalMapper()) == (
        "User:CN=Alice,OU=ServiceUsers,O=Example\\, Inc,C=US"
    )
    mapper = PrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L,DEFAULT")
    assert certificate_principal(der, mapper) == "User:alice"


def test_missing_unreadable_and_unprintable_certificates_are_refused() -> None:
    with pytest.raises(AuthenticationFailed) as info:
        certificate_principal(None, PrincipalMapper())
    assert info.value.reason is AuthFailure.NO_CERTIFICATE
    with pytest.raises(AuthenticationFailed) as info:
        certificate_principal(b"\x30\x03junk", PrincipalMapper())
    assert info.value.reason is AuthFailure.MALFORMED
    der = _certificate(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "a\x07b")]))
    with pytest.raises(AuthenticationFailed) as info:
        certificate_principal(der, PrincipalMapper())
    assert info.value.reason is AuthFailure.MALFORMED
