"""The `[tls]` settings and the stdlib `ssl` contexts built from them.

One section configures TLS for the client HTTP listener and for every
node-to-node HTTP link: the node's certificate chain and key (PEM), the CA
bundle that peers' certificates must chain to, the lowest protocol version
(TLS 1.2 by default; 1.3 may be required), and whether clients must show a
certificate (`none`, `optional`, `required`; any but `none` needs the CA
bundle). `principal_mapping_rules` maps a client certificate's subject to a
principal (Kafka's `ssl.principal.mapping.rules`, see `certificates`).

The contexts are plain `ssl.SSLContext`s with the standard library's secure
defaults (its cipher list, no compression) and renegotiation off; nothing here
implements cryptography. The server context presents the node's chain and
verifies client certificates against the CA bundle as configured. The client
context, used by a node to call its peers, verifies the peer's certificate
and host name (a peer reached by IP address needs that address in its
certificate's subjectAltName) against the CA bundle, or the system's trust
store when no bundle is set, and presents the node's own certificate so a
peer requiring client certificates accepts it.

Building a context reads the files: a missing or unreadable file, a bad PEM or
a key that does not match the certificate is `InvalidConfigError` naming the
setting, at startup rather than at the first connection.
"""

from __future__ import annotations

import enum
import ssl
from pathlib import Path

from lograft import typed
from lograft.errors import InvalidConfigError
from lograft.security.certificates import DEFAULT_RULES, PrincipalMapper

__all__ = ["ClientCertificate", "TlsSettings", "TlsVersion", "client_context", "server_context"]


class TlsVersion(enum.StrEnum):
    TLS_1_2 = "1.2"
    TLS_1_3 = "1.3"

    @property
    def ssl_version(self) -> ssl.TLSVersion:
        return ssl.TLSVersion.TLSv1_2 if self is TlsVersion.TLS_1_2 else ssl.TLSVersion.TLSv1_3


class ClientCertificate(enum.StrEnum):
    """Kafka's `ssl.client.auth`: none, requested, required."""

    NONE = "none"
    OPTIONAL = "optional"
    REQUIRED = "required"

    @property
    def verify_mode(self) -> ssl.VerifyMode:
        return {
            ClientCertificate.NONE: ssl.CERT_NONE,
            ClientCertificate.OPTIONAL: ssl.CERT_OPTIONAL,
            ClientCertificate.REQUIRED: ssl.CERT_REQUIRED,
        }[self]


class TlsSettings(typed.Record):
    """The `[tls]` section. Paths are PEM files."""

    # The node's certificate, followed by any intermediates.
    certificate_file: Path
    key_file: Path
    # The CA bundle peers' (and clients') certificates must chain to.
    ca_file: Path | None = None
    minimum_version: TlsVersion = TlsVersion.TLS_1_2
    client_certificate: ClientCertificate = ClientCertificate.NONE
    principal_mapping_rules: str = DEFAULT_RULES

    def __post_init__(self) -> None:
        if self.client_certificate is not ClientCertificate.NONE and self.ca_file is None:
            raise typed.FieldError(
                "ca_file",
                f"client_certificate = {self.client_certificate.value!r} needs a CA bundle",
            )
        try:
            PrincipalMapper(self.principal_mapping_rules)
        except ValueError as exc:
            raise typed.FieldError("principal_mapping_rules", str(exc)) from None

    def principal_mapper(self) -> PrincipalMapper:
        return PrincipalMapper(self.principal_mapping_rules)


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """The context of a listener: the node's chain, client certificates as configured."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _common(context, settings)
    if settings.ca_file is not None:
        _load_ca(context, settings.ca_file)
    context.verify_mode = settings.client_certificate.verify_mode
    return context


def client_context(settings: TlsSettings, *, present_certificate: bool = True) -> ssl.SSLContext:
    """The context a node calls its peers with: the peer's certificate and
    host name verified; the node's own certificate presented unless
    `present_certificate` is false."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED, check_hostname
    context.minimum_version = settings.minimum_version.ssl_version
    context.options |= ssl.OP_NO_RENEGOTIATION
    if present_certificate:
        _load_chain(context, settings)
    if settings.ca_file is not None:
        _load_ca(context, settings.ca_file)
    else:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    return context


def _common(context: ssl.SSLContext, settings: TlsSettings) -> None:
    context.minimum_version = settings.minimum_version.ssl_version
    # TLS 1.2 renegotiation: a peer could make the node redo handshakes at will.
    context.options |= ssl.OP_NO_RENEGOTIATION
    _load_chain(context, settings)


def _load_chain(context: ssl.SSLContext, settings: TlsSettings) -> None:
    for field in ("certificate_file", "key_file"):
        _check_readable(field, getattr(settings, field))
    try:
        context.load_cert_chain(settings.certificate_file, settings.key_file)
    except (ssl.SSLError, OSError) as exc:
        raise InvalidConfigError(
            f"tls: cannot load certificate_file {str(settings.certificate_file)!r} with "
            f"key_file {str(settings.key_file)!r} (not PEM, encrypted, or a key that does "
            f"not match the certificate): {exc}",
            key="tls.certificate_file",
        ) from None


def _load_ca(context: ssl.SSLContext, path: Path) -> None:
    _check_readable("ca_file", path)
    try:
        context.load_verify_locations(cafile=path)
    except (ssl.SSLError, OSError) as exc:
        raise InvalidConfigError(
            f"tls: cannot load ca_file {str(path)!r} (not a PEM bundle?): {exc}",
            key="tls.ca_file",
        ) from None


def _check_readable(field: str, path: Path) -> None:
    if not path.is_file():
        raise InvalidConfigError(
            f"tls: {field} {str(path)!r} is not a readable file", key=f"tls.{field}"
        )
