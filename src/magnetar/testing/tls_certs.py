"""A throwaway certificate authority for the TLS tests, made with ``cryptography``."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_cert: Path
    other_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    return path


def _issue(subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name, issuer_key: ec.EllipticCurvePrivateKey,
           ca: bool = False, server: bool = False) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if server:
        names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
            decipher_only=False), critical=True)
    return builder.sign(issuer_key, hashes.SHA256())


def make_pki(directory: Path, client_name: str = "client-role", other_name: str = "other-role") -> Pki:
    """A CA, a server certificate for localhost, and two client certificates (``client_name``
    and ``other_name``) it signed."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _issue("magnetar-test-ca", ca_key, _name("magnetar-test-ca"), ca_key, ca=True)
    paths = {}
    for role, common_name, server in (("server", "localhost", True), ("client", client_name, False),
                                      ("other", other_name, False)):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _issue(common_name, key, ca_cert.subject, ca_key, server=server)
        paths[f"{role}_key"] = _write_key(key, directory / f"{role}.key.pem")
        paths[f"{role}_cert"] = directory / f"{role}.cert.pem"
        paths[f"{role}_cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    ca = directory / "ca.cert.pem"
    ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    return Pki(ca=ca, **paths)
