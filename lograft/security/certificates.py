"""The principal of a client certificate, with Kafka's `ssl.principal.mapping.rules`.

A TLS client that shows a certificate (verified against the CA bundle by the
`ssl` module first) is `User:<name>`, where `<name>` is its subject's
distinguished name in RFC 4514 form (`CN=alice,OU=eng,O=Example,C=US`, most
specific first, as Java's `X500Principal.getName()` prints it) mapped by an
ordered list of rules. The rule syntax and semantics are those of Kafka's
`SslPrincipalMapper` (clients/.../security/ssl/SslPrincipalMapper.java at
commit 1eb7644349cb07139d6a3c1ad1986979647cac99), re-implemented here:

- rules are separated by commas (whitespace around them ignored, empty ones
  skipped); each is `DEFAULT` (the whole DN) or
  `RULE:pattern/replacement/` with an optional `L` or `U` after the last
  slash (lower- or upper-case the result); `\\` escapes a `/` or `\\` inside
  pattern and replacement;
- the first rule whose pattern matches the WHOLE DN gives the name: every
  match of the pattern in the DN is replaced (Java's `replaceAll`, which is
  Python's `re.sub`); no rule applying is a refusal (NO_MATCHING_RULE);
- in the replacement, `$n` is group n (Java's rule: as many digits as still
  name a group) and `${name}` a named group, `\\x` is a literal x; a `$n`
  beyond the pattern's groups is a literal `$n` (Kafka's
  `escapeLiteralBackReferences`).

Differences from Kafka, all about refusing earlier: the pattern is Python `re`
syntax (the same as Java's for groups, classes, anchors and lazy quantifiers;
a named group is written `(?P<name>...)`), and a rule whose pattern does not
compile, or whose replacement refers to a group when the pattern has none
(Kafka fails on every DN it matches), is refused when the rules are parsed.
A DN longer than SUBJECT_CHARS_MAX is refused before any rule runs, bounding
the input of the rules (the rules themselves are the administrator's: a
pattern that backtracks exponentially is slow on any long subject). The DN
comes from a certificate the CA bundle already vouched for. An empty mapped
name is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from cryptography import x509

from lograft.security.failures import AuthenticationFailed, AuthFailure
from lograft.security.principals import user_principal

__all__ = [
    "DEFAULT_RULES",
    "SUBJECT_CHARS_MAX",
    "MappingRule",
    "PrincipalMapper",
    "certificate_principal",
    "certificate_subject",
]

# Kafka's BrokerSecurityConfigs.DEFAULT_SSL_PRINCIPAL_MAPPING_RULES.
DEFAULT_RULES = "DEFAULT"
# The longest subject DN mapped, in characters.
SUBJECT_CHARS_MAX = 1024

# Kafka's RULE_PATTERN and RULE_SPLITTER, unchanged. Groups of the parser:
# 1 DEFAULT, 2 pattern, 4 replacement, 6 the L/U flag.
_RULE_PATTERN = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE_PATTERN + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE_PATTERN)

# A replacement, ready to expand: literal text, or a group by number or name.
_Part = tuple[Literal["text"], str] | tuple[Literal["group"], int | str]


@dataclass(frozen=True)
class MappingRule:
    """One parsed rule: DEFAULT (pattern None) or RULE:pattern/replacement/[LU]."""

    pattern: re.Pattern[str] | None
    replacement: str = ""
    case: Literal["", "L", "U"] = ""
    _parts: tuple[_Part, ...] = ()

    def apply(self, dn: str) -> str | None:
        """The name this rule maps `dn` to, or None when it does not apply."""
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        name = self.pattern.sub(self._expand, dn)
        if self.case == "L":
            return name.lower()
        if self.case == "U":
            return name.upper()
        return name

    def _expand(self, match: re.Match[str]) -> str:
        out: list[str] = []
        for kind, value in self._parts:
            if kind == "text":
                out.append(str(value))
            else:
                # A group that did not take part appends nothing, as in Java.
                out.append(match.group(value) or "")
        return "".join(out)

    def __str__(self) -> str:
        if self.pattern is None:
            return "DEFAULT"
        # Kafka's Rule.toString, so a logged rule list reads the same.
        flag = f"/{self.case}" if self.case else ""
        return f"RULE:{self.pattern.pattern}/{self.replacement}{flag}"


class PrincipalMapper:
    """An ordered list of mapping rules, parsed from Kafka's syntax."""

    def __init__(self, rules: str = DEFAULT_RULES) -> None:
        """Raises ValueError naming the bad rule."""
        parsed = (_parse_rule(text) for text in _split_rules(rules))
        self.rules: tuple[MappingRule, ...] = tuple(rule for rule in parsed if rule is not None)

    def name(self, dn: str) -> str:
        """The name the first applying rule gives `dn`, or AuthenticationFailed."""
        if len(dn) > SUBJECT_CHARS_MAX:
            raise AuthenticationFailed(
                AuthFailure.TOO_LARGE,
                f"the certificate subject is longer than {SUBJECT_CHARS_MAX} characters",
            )
        for rule in self.rules:
            name = rule.apply(dn)
            if name:
                return name
            if name is not None:
                break
        raise AuthenticationFailed(
            AuthFailure.NO_MATCHING_RULE,
            f"no principal mapping rule gives a name for the certificate subject {dn!r}",
        )

    def __repr__(self) -> str:
        return f"PrincipalMapper(rules = [{', '.join(str(rule) for rule in self.rules)}])"


def certificate_subject(der: bytes) -> str:
    """The subject DN of a DER certificate (what `SSLObject.getpeercert(True)`
    gives), in RFC 4514 form."""
    return x509.load_der_x509_certificate(der).subject.rfc4514_string()


def certificate_principal(der: bytes | None, mapper: PrincipalMapper) -> str:
    """`User:<mapped subject>` for the peer's DER certificate, or
    AuthenticationFailed (NO_CERTIFICATE when the peer showed none)."""
    if not der:
        raise AuthenticationFailed(AuthFailure.NO_CERTIFICATE, "no client certificate was shown")
    try:
        dn = certificate_subject(der)
    except ValueError:
        raise AuthenticationFailed(
            AuthFailure.MALFORMED, "the client certificate cannot be read"
        ) from None
    return user_principal(mapper.name(dn), "the certificate's mapped subject")


def _split_rules(rules: str) -> list[str]:
    return [m.group(1) for m in _RULE_SPLITTER.finditer(rules.strip())]


def _parse_rule(text: str) -> MappingRule | None:
    match = _RULE_PARSER.match(text)
    if match is None or match.end() != len(text):
        unmatched = text[match.end() :] if match is not None else text
        raise ValueError(f"invalid principal mapping rule {text!r}: unmatched {unmatched!r}")
    if match.group(1) is not None:
        return MappingRule(None)
    if match.group(2) is None:
        return None  # an empty rule, ignored as Kafka ignores it
    pattern_text, replacement = match.group(2), match.group(4)
    try:
        pattern = re.compile(pattern_text)
    except re.error as exc:
        raise ValueError(f"invalid principal mapping rule {text!r}: pattern: {exc}") from None
    case = match.group(6)
    parts = _replacement_parts(replacement, pattern, text)
    return MappingRule(pattern, replacement, case, parts)  # type: ignore[arg-type]


def _replacement_parts(replacement: str, pattern: re.Pattern[str], rule: str) -> tuple[_Part, ...]:
    """Java's `Matcher.appendReplacement` syntax, after Kafka turned `$n`
    beyond the pattern's groups into literal text."""
    groups = pattern.groups
    parts: list[_Part] = []
    text: list[str] = []
    i = 0
    while i < len(replacement):
        char = replacement[i]
        if char == "\\":
            if i + 1 == len(replacement):
                raise ValueError(
                    f"invalid principal mapping rule {rule!r}: replacement ends in '\\'"
                )
            text.append(replacement[i + 1])
            i += 2
            continue
        if char != "$":
            text.append(char)
            i += 1
            continue
        ref, i = _reference(replacement, i + 1, pattern, rule)
        if ref is None:  # Kafka's literal `$n`
            text.append("$")
            continue
        if text:
            parts.append(("text", "".join(text)))
            text = []
        parts.append(("group", ref))
    if text:
        parts.append(("text", "".join(text)))
    if groups == 0 and any(kind == "group" and value != 0 for kind, value in parts):
        raise ValueError(f"invalid principal mapping rule {rule!r}: the pattern has no groups")
    return tuple(parts)


def _reference(
    replacement: str, i: int, pattern: re.Pattern[str], rule: str
) -> tuple[int | str | None, int]:
    """The group a `$` at i - 1 refers to and where the text goes on; None
    when Kafka would have escaped it (a number beyond the pattern's groups)."""
    if i < len(replacement) and replacement[i] == "{":
        end = replacement.find("}", i)
        name = replacement[i + 1 : end] if end > 0 else ""
        if not name or name not in pattern.groupindex:
            raise ValueError(f"invalid principal mapping rule {rule!r}: no group ${{{name}}}")
        return name, end + 1
    if i >= len(replacement) or not replacement[i].isdigit():
        raise ValueError(f"invalid principal mapping rule {rule!r}: '$' names no group")
    digits = re.match(r"\d+", replacement[i:]).group()  # type: ignore[union-attr]
    groups = pattern.groups
    if groups > 0 and not digits.startswith("0"):
        # Kafka's escapeLiteralBackReferences: cut digits off while the number
        # is over the group count and has more than one digit.
        number = int(digits)
        while number > groups and number >= 10:
            number //= 10
        if number > groups:
            return None, i
    # Java: the first digit always counts; each further one only while the
    # number still names a group.
    number = int(digits[0])
    used = 1
    for digit in digits[1:]:
        bigger = number * 10 + int(digit)
        if bigger > groups:
            break
        number, used = bigger, used + 1
    return number, i + used
