"""A throw-away certificate authority and a loopback server certificate.

Clients of the fake trust ``ca.pem`` (our client's ``ca_path``, or
``REQUESTS_CA_BUNDLE`` for the Jumpstarter driver) and verify the host name
as they would against the real service.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class CertFiles:
    ca: Path
    cert: Path
    key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_usage(*, signs_certificates: bool) -> x509.KeyUsage:
    """A CA's key usage (signs certificates and CRLs) or a server's (signs
    the handshake)."""
    return x509.KeyUsage(digital_signature=not signs_certificates, content_commitment=False,
                         key_encipherment=False, data_encipherment=False, key_agreement=False,
                         key_cert_sign=signs_certificates, crl_sign=signs_certificates, encipher_only=False,
                         decipher_only=False)


def _certificate(subject: x509.Name, issuer: x509.Name, public_key, validity: tuple, ca_key,
                 extensions: list[tuple[x509.ExtensionType, bool]]) -> x509.Certificate:
    """A certificate signed by ``ca_key``, with ``extensions`` (each with
    whether it is critical) in that order."""
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(validity[0])
        .not_valid_after(validity[1])
    )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical=critical)
    return builder.sign(ca_key, hashes.SHA256())


def generate(directory: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> CertFiles:
    """Write ca.pem, server.pem and server.key into ``directory``."""
    now = datetime.datetime.now(datetime.UTC)
    validity = (now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=2))

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("corellium-fake test CA")
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_cert = _certificate(ca_name, ca_name, ca_key.public_key(), validity, ca_key, [
        (x509.BasicConstraints(ca=True, path_length=0), True),
        (_key_usage(signs_certificates=True), True),
        (ca_ski, False),
    ])

    server_key = ec.generate_private_key(ec.SECP256R1())
    alt_names = []
    for host in hosts:
        try:
            alt_names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            alt_names.append(x509.DNSName(host))
    server_cert = _certificate(_name(hosts[0]), ca_name, server_key.public_key(), validity, ca_key, [
        (x509.SubjectAlternativeName(alt_names), False),
        (x509.BasicConstraints(ca=False, path_length=None), True),
        (_key_usage(signs_certificates=False), True),
        (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False),
        (x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), False),
    ])

    files = CertFiles(directory / "ca.pem", directory / "server.pem", directory / "server.key")
    files.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    files.cert.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    files.key.write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    files.key.chmod(0o600)
    return files
