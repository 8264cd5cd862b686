"""A tiny certificate authority for the embedded control plane (tests only).

Uses the ``cryptography`` package. Everything is generated fresh for each
control plane and lives in its work directory; nothing here is meant to be
secure beyond "only this machine's loopback can reach it".
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import pathlib

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=365)


def _key_pem(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _name(cn: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


@dataclasses.dataclass(frozen=True)
class KeyPair:
    cert_pem: bytes
    key_pem: bytes

    def write(self, directory: pathlib.Path, stem: str) -> tuple[pathlib.Path, pathlib.Path]:
        crt = directory / f"{stem}.crt"
        key = directory / f"{stem}.key"
        crt.write_bytes(self.cert_pem)
        key.write_bytes(self.key_pem)
        key.chmod(0o600)
        return crt, key


def _builder(subject: x509.Name, issuer: x509.Name, public_key, ca: bool) -> x509.CertificateBuilder:
    """The fields every certificate here shares; ``ca`` decides basic constraints and usage."""
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=ca,
                crl_sign=ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )


class TinyCA:
    """A self-signed CA that issues serving and client certificates."""

    def __init__(self, cn: str = "lorarl-test-ca") -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = _name(cn)
        self._cert = (
            _builder(self._name, self._name, self._key.public_key(), ca=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False)
            .sign(self._key, hashes.SHA256())
        )

    @property
    def cert_pem(self) -> bytes:
        return self._cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return _key_pem(self._key)

    def _issue(self, subject: x509.Name, usages, sans: list[x509.GeneralName] | None = None, rsa_key: bool = False) -> KeyPair:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048) if rsa_key else ec.generate_private_key(ec.SECP256R1())
        builder = (
            _builder(subject, self._name, key.public_key(), ca=False)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))

    def serving_cert(self, cn: str, hosts: list[str], *, rsa_key: bool = False) -> KeyPair:
        """A server certificate for ``hosts`` (IPs or DNS names); ``rsa_key``: an RSA-2048 key
        (kubeadm's default) instead of P-256, for TLS clients that offer only RSA signatures."""
        sans: list[x509.GeneralName] = []
        for host in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                sans.append(x509.DNSName(host))
        return self._issue(_name(cn), [ExtendedKeyUsageOID.SERVER_AUTH], sans, rsa_key=rsa_key)

    def client_cert(self, user: str, groups: tuple[str, ...] = ()) -> KeyPair:
        return self._issue(_name(user, groups), [ExtendedKeyUsageOID.CLIENT_AUTH])


def service_account_keypair() -> tuple[bytes, bytes]:
    """RSA key pair (private PEM, public PEM) for signing ServiceAccount tokens."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pub = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return _key_pem(key), pub
