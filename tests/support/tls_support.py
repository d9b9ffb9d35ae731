"""Certificates made in the test (with ``cryptography``): a CA, a server certificate for 127.0.0.1, ::1,
localhost and tubemq.test, client certificates signed by that CA, and a stranger's client certificate from
another CA. A ``name`` prefixes the files (and names the CA), so several PKIs can share one folder."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path
    subject: x509.Name


@dataclass(frozen=True)
class Pki:
    ca: Path
    server: Issued
    client: Issued
    stranger: Issued  # signed by a CA the gateway does not trust
    dual: Issued  # server and client use: what replicas that forward to each other over mTLS share

    def client_context(self, client: Issued | None = None) -> ssl.SSLContext:
        """A client context trusting the test CA, presenting ``client`` when given."""
        context = ssl.create_default_context(cafile=str(self.ca))
        if client is not None:
            context.load_cert_chain(client.cert, client.key)
        return context

    def server_context(self, require_client_cert: bool = False) -> ssl.SSLContext:
        """A server context presenting the server certificate, demanding a client certificate signed by the
        test CA when ``require_client_cert``."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.server.cert, self.server.key)
        if require_client_cert:
            context.load_verify_locations(self.ca)
            context.verify_mode = ssl.CERT_REQUIRED
        return context


def _name(**attributes: str) -> x509.Name:
    oids = {
        "CN": NameOID.COMMON_NAME,
        "O": NameOID.ORGANIZATION_NAME,
        "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
        "C": NameOID.COUNTRY_NAME,
        "E": NameOID.EMAIL_ADDRESS,
        "L": NameOID.LOCALITY_NAME,
        "DC": NameOID.DOMAIN_COMPONENT,
    }
    return x509.Name([x509.NameAttribute(oids[k], v) for k, v in attributes.items()])


def _issue(
    directory: Path,
    stem: str,
    subject: x509.Name,
    issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
    *,
    ca: bool = False,
    server: bool = False,
    client: bool = True,
) -> tuple[Issued, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    issuer_name, issuer_key = issuer if issuer is not None else (subject, key)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        ).add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    else:
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else []
        usages += [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False
        )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.DNSName("tubemq.test"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.IPAddress(ipaddress.ip_address("::1")),
                ]
            ),
            critical=False,
        )
    cert = builder.sign(issuer_key, hashes.SHA256())
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return Issued(cert_path, key_path, subject), key


def make_pki(directory: Path, client_subject: x509.Name | None = None, *, name: str = "") -> Pki:
    """Write a CA, a server, a dual-use, a client and a stranger certificate (with keys) under ``directory``
    (created when missing); a ``name`` prefixes every file and names the CA."""
    directory.mkdir(parents=True, exist_ok=True)
    prefix = f"{name}-" if name else ""
    ca_name = _name(CN=f"{name or 'gateway'} test CA", O="tubemq-gateway tests")
    ca, ca_key = _issue(directory, f"{prefix}ca", ca_name, None, ca=True)
    server, _ = _issue(
        directory, f"{prefix}server", _name(CN="127.0.0.1"), (ca_name, ca_key), server=True, client=False
    )
    dual, _ = _issue(directory, f"{prefix}dual", _name(CN="replica"), (ca_name, ca_key), server=True)
    subject = client_subject or _name(C="DE", O="Example Corp", OU="ingest", CN="alice")
    client, _ = _issue(directory, f"{prefix}client", subject, (ca_name, ca_key))
    other_name = _name(CN=f"{name} stranger CA".lstrip())
    _, other_key = _issue(directory, f"{prefix}other-ca", other_name, None, ca=True)
    stranger, _ = _issue(directory, f"{prefix}stranger", _name(CN="mallory"), (other_name, other_key))
    return Pki(ca.cert, server, client, stranger, dual)


def odd_subject() -> x509.Name:
    """A subject exercising RFC 4514 escaping and attributes written as OIDs."""
    return _name(
        C="US",
        DC="example",
        L="#Springfield ",
        O='Acme, "Widgets" + Co',
        OU="a<b>;c\\d",
        E="alice@example.com",
        CN=" alice=admin",
    )


def issue_client(pki: Pki, stem: str, common_name: str) -> Issued:
    """Another client certificate (``CN=common_name``) signed by ``pki``'s CA, written beside it."""
    ca = x509.load_pem_x509_certificate(pki.ca.read_bytes())
    ca_key = serialization.load_pem_private_key(pki.ca.with_suffix(".key").read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    issued, _ = _issue(pki.ca.parent, stem, _name(CN=common_name), (ca.subject, ca_key))
    return issued
