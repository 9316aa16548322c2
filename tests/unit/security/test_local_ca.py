"""The local CA (lograft.security.local_ca) and scripts/make_certs.py."""

from __future__ import annotations

import importlib.util
import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from lograft.security.local_ca import create_ca, issue, load_ca, make_local_certificates

ROOT = Path(__file__).resolve().parents[3]


def test_the_ca_may_sign_leaves_only_and_leaves_are_not_cas() -> None:
    ca = create_ca()
    constraints = ca.certificate.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca and constraints.value.path_length == 0
    assert ca.certificate.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign

    leaf = issue(ca, "node-1", unit="nodes", hosts=["localhost"], ips=["127.0.0.1", "::1"])
    leaf.certificate.verify_directly_issued_by(ca.certificate)
    assert not leaf.certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    usage = leaf.certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usage) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    names = leaf.certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    assert names.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("127.0.0.1"),
        ipaddress.ip_address("::1"),
    ]
    assert leaf.certificate.subject.rfc4514_string() == "CN=node-1,OU=nodes,O=lograft"


def test_a_client_certificate_is_for_clients_only() -> None:
    leaf = issue(create_ca(), "admin", unit="clients", server=False)
    usage = leaf.certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    with pytest.raises(ValueError):
        issue(create_ca(), "x", unit="clients", server=False, client=False)


def test_files_are_written_keys_private_and_the_ca_reused(tmp_path: Path) -> None:
    first = make_local_certificates(tmp_path, nodes=["node-1"], clients=["admin"])
    assert [p.name for p in first] == [
        "ca.pem",
        "ca-key.pem",
        "node-1.pem",
        "node-1-key.pem",
        "admin.pem",
        "admin-key.pem",
    ]
    for path in first:
        mode = stat.S_IMODE(path.stat().st_mode)
        if path.name.endswith("-key.pem"):
            assert mode == 0o600
        else:
            assert mode & 0o077 != 0o077  # certificates are public
    ca = load_ca(tmp_path / "ca.pem", tmp_path / "ca-key.pem")
    again = make_local_certificates(tmp_path, nodes=["node-2"])
    assert [p.name for p in again] == ["node-2.pem", "node-2-key.pem"]
    node_2 = x509.load_pem_x509_certificate((tmp_path / "node-2.pem").read_bytes())
    node_2.verify_directly_issued_by(ca.certificate)


@pytest.mark.parametrize(
    ("nodes", "clients"), [(["ca"], []), (["../x"], []), (["a"], ["a"]), ([""], [])]
)
def test_bad_names_are_refused(tmp_path: Path, nodes, clients) -> None:
    with pytest.raises(ValueError):
        make_local_certificates(tmp_path, nodes=nodes, clients=clients)
    assert list(tmp_path.iterdir()) == []


def test_load_ca_refuses_a_key_of_another_certificate(tmp_path: Path) -> None:
    make_local_certificates(tmp_path / "a", nodes=[])
    make_local_certificates(tmp_path / "b", nodes=[])
    with pytest.raises(ValueError, match="not the key"):
        load_ca(tmp_path / "a" / "ca.pem", tmp_path / "b" / "ca-key.pem")


def test_make_certs_script_prints_what_it_wrote(tmp_path: Path, capsys) -> None:
    spec = importlib.util.spec_from_file_location("make_certs", ROOT / "scripts" / "make_certs.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main(["--dir", str(tmp_path), "--nodes", "2", "--client", "admin"]) == 0
    printed = capsys.readouterr().out.splitlines()
    expected = [
        "ca",
        "ca-key",
        "node-1",
        "node-1-key",
        "node-2",
        "node-2-key",
        "admin",
        "admin-key",
    ]
    assert printed == [f"wrote {tmp_path / name}.pem" for name in expected]
    assert all((tmp_path / f"{name}.pem").is_file() for name in expected)
