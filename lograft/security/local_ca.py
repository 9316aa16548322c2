"""A local certificate authority for development and tests, with `cryptography`.

`scripts/make_certs.py` and `scripts/cluster.sh start --secure` use it: it
makes a CA and, signed by it, one certificate per node (usable as server and
as client: nodes present it to each other) and one per client, written as
PEM files a `[tls]` section and curl (`--cacert`, `--cert`, `--key`) read.

Keys are ECDSA P-256 (fast to make and to verify; every TLS 1.2+ stack has
it). Certificates carry what verifiers check: the CA is a CA (basicConstraints
critical, may sign only leaves, keyCertSign), leaves are not, name their
purposes (extendedKeyUsage serverAuth and/or clientAuth) and their host names
and IP addresses (subjectAltName: host-name checks ignore the CN). Validity
starts five minutes in the past to absorb clock skew between machines.

This CA is for a cluster on machines you control: its key sits unencrypted on
disk (mode 0600), so whoever reads it can mint any identity. Production
clusters use their organisation's CA.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "CA_DAYS",
    "LEAF_DAYS",
    "CertificateAuthority",
    "Issued",
    "create_ca",
    "issue",
    "load_ca",
    "make_local_certificates",
]

CA_DAYS = 3650
LEAF_DAYS = 825
ORGANIZATION = "lograft"
_SKEW = datetime.timedelta(minutes=5)
# A certificate's name is also its file name.
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class CertificateAuthority:
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate


@dataclass(frozen=True)
class Issued:
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate


def create_ca(common_name: str = "lograft local CA", days: int = CA_DAYS) -> CertificateAuthority:
    """A new self-signed CA that may sign leaf certificates only."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )
    now = _now()
    public = key.public_key()
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _SKEW)
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    return CertificateAuthority(key, certificate)


def issue(
    ca: CertificateAuthority,
    common_name: str,
    *,
    unit: str,
    hosts: Iterable[str] = (),
    ips: Iterable[str] = (),
    server: bool = True,
    client: bool = True,
    days: int = LEAF_DAYS,
) -> Issued:
    """A leaf certificate for `CN=<common_name>,OU=<unit>,O=lograft`, signed by `ca`."""
    if not (server or client):
        raise ValueError("a certificate must be for a server, a client or both")
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )
    purposes = [ExtendedKeyUsageOID.SERVER_AUTH] * server + [
        ExtendedKeyUsageOID.CLIENT_AUTH
    ] * client
    alt_names: list[x509.GeneralName] = [x509.DNSName(host) for host in hosts]
    alt_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    now = _now()
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _SKEW)
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(purposes), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
            critical=False,
        )
    )
    if alt_names:
        builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
    return Issued(key, builder.sign(ca.key, hashes.SHA256()))


def load_ca(certificate_file: Path, key_file: Path) -> CertificateAuthority:
    """A CA written earlier by `make_local_certificates`."""
    certificate = x509.load_pem_x509_certificate(certificate_file.read_bytes())
    key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{key_file} is not an EC private key")
    if key.public_key() != certificate.public_key():
        raise ValueError(f"{key_file} is not the key of {certificate_file}")
    return CertificateAuthority(key, certificate)


def make_local_certificates(
    directory: Path,
    *,
    nodes: Iterable[str],
    clients: Iterable[str] = (),
    hosts: Iterable[str] = ("localhost",),
    ips: Iterable[str] = ("127.0.0.1", "::1"),
) -> list[Path]:
    """Write a CA (reused when `ca.pem` and `ca-key.pem` are already there,
    so certificates made before stay trusted) and, per node and client,
    `<name>.pem` and `<name>-key.pem` into `directory`. Node certificates are
    for server and client use and name `hosts` and `ips`; client certificates
    are for client use only. Returns the paths written, in order."""
    nodes, clients = list(nodes), list(clients)
    names = [*nodes, *clients]
    for name in names:
        if _FILE_NAME.fullmatch(name) is None or name == "ca":
            raise ValueError(f"{name!r} cannot name certificate files (letters, digits, . _ -)")
    if len(set(names)) != len(names):
        raise ValueError("node and client names must be distinct")
    directory.mkdir(parents=True, exist_ok=True)
    ca_file, ca_key_file = directory / "ca.pem", directory / "ca-key.pem"
    written: list[Path] = []
    if ca_file.exists() and ca_key_file.exists():
        ca = load_ca(ca_file, ca_key_file)
    else:
        ca = create_ca()
        written += _write(directory, "ca", ca.key, ca.certificate)
    hosts, ips = list(hosts), list(ips)
    for node in nodes:
        made = issue(ca, node, unit="nodes", hosts=[*hosts, node], ips=ips)
        written += _write(directory, node, made.key, made.certificate)
    for client in clients:
        made = issue(ca, client, unit="clients", server=False)
        written += _write(directory, client, made.key, made.certificate)
    return written


def _write(
    directory: Path, name: str, key: ec.EllipticCurvePrivateKey, certificate: x509.Certificate
) -> list[Path]:
    certificate_file, key_file = directory / f"{name}.pem", directory / f"{name}-key.pem"
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    # Created with 0600 from the start: never readable by others, even briefly.
    descriptor = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(key_pem)
    os.chmod(key_file, 0o600)
    certificate_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return [certificate_file, key_file]


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)
