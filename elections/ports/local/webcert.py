"""This agent's web certificate: HTTPS for the panel, the JSON API and the WebSockets.

Two sources, chosen by `stk.ini`:

- the operator's, `TLS_CERT` (PEM: the certificate first, then any intermediates)
  and `TLS_KEY` (PEM private key), checked at start-up (`stkhost.pem_pair.check_pair`);
- else one made at first start in DATA_DIR by `ensure_made`: a self-signed ECDSA
  P-256 certificate for NODE_IP, the loopback names and the plain host names of
  WEB_ALLOWED_HOSTS, valid `MADE_DAYS` days. `web-tls.pem` holds its key and
  certificate (mode 0600, created exclusively, so two starters agree on one);
  `web-tls.crt` the certificate alone, for clients that take a CA file. It is
  made again only when it is missing, damaged, expiring within `RENEW_DAYS`, or
  does not name NODE_IP (its fingerprint then changes: say so to the pinners).

Clients pin the certificate by its SHA-256 fingerprint (`fingerprints.fingerprint`, of
the DER bytes, as browsers show it): `relayctl tls` prints it, and every member's
heartbeat carries it (`web_tls`) so every agent's panel shows the others'.

Only making one imports `cryptography` (~13 MiB): `runagent` runs it as a short
child, `python -m elections.ports.local.webcert DATA_DIR NODE_IP [HOST...]`, so that the
supervisor and the lease worker never load it; checking the operator's pair
(`stkhost.pem_pair`) and reading fingerprints use the standard library's `ssl`.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from stkhost.files import write_atomic
from stkhost.fingerprints import PEM_CERT, fingerprint_of_pem
from stkhost.pem_pair import MAX_PEM_BYTES, read_pem

if TYPE_CHECKING:
    from cryptography.x509 import Certificate

MADE_NAME = "web-tls.pem"  # key + certificate, 0600
CERT_NAME = "web-tls.crt"  # the certificate alone (public)
CHAIN_NAME = "web-tls-chain.pem"  # the operator's intermediates, when TLS_CERT has any
MADE_DAYS = 3650
RENEW_DAYS = 30


@dataclass(frozen=True)
class WebCert:
    """The files Daphne's TLS endpoint reads, and what clients pin."""

    key_file: str
    cert_file: str
    chain_file: str | None
    fingerprint: str  # SHA-256 of the certificate's DER, 64 lowercase hex
    made: bool  # self-signed by this agent (False: the operator's TLS_CERT)

    def endpoint(self, ip: str, port: int) -> str:
        """Daphne's `-e` argument: a Twisted `ssl:` endpoint on ip:port."""
        parts = [f"ssl:port={port}", f"privateKey={_escape(self.key_file)}"]
        parts.append(f"certKey={_escape(self.cert_file)}")
        if self.chain_file:
            parts.append(f"extraCertChain={_escape(self.chain_file)}")
        parts.append(f"interface={_escape(ip)}")
        return ":".join(parts)


def _escape(value: str) -> str:
    """A value inside a Twisted endpoint string (':' and '=' separate fields)."""
    return value.replace("\\", "\\\\").replace(":", "\\:").replace("=", "\\=")


def cert_file(data_dir: str, tls_cert: str) -> Path:
    """Where the certificate this agent serves lives (the operator's, or the one made here)."""
    return Path(tls_cert) if tls_cert else Path(data_dir) / CERT_NAME


def served_fingerprint(data_dir: str, tls_cert: str, web_plain: bool) -> str:
    """The fingerprint of the certificate the panel serves; '' in plain HTTP or when none is readable."""
    if web_plain:
        return ""
    try:
        with open(cert_file(data_dir, tls_cert), "rb") as fh:
            return fingerprint_of_pem(fh.read(MAX_PEM_BYTES))
    except OSError:
        return ""


def operator_cert(data_dir: str, cert_path: str, key_path: str) -> WebCert:
    """The operator's pair as Daphne reads it; intermediates copied to CHAIN_NAME."""
    pem = read_pem(cert_path)
    certs = PEM_CERT.findall(pem)
    chain = None
    if len(certs) > 1:
        chain = str(Path(data_dir) / CHAIN_NAME)
        write_atomic(chain, b"\n".join(certs[1:]) + b"\n", durable=True)
    return WebCert(key_path, cert_path, chain, fingerprint_of_pem(pem), made=False)


def ensure_made(data_dir: str, node_ip: str, hosts: Iterable[str], now: datetime.datetime) -> WebCert:
    """The self-signed certificate in DATA_DIR, made (or made again) when needed."""
    from cryptography import x509

    data = Path(data_dir)
    made = data / MADE_NAME
    pem = b""
    try:
        pem = read_pem(str(made))
        found = PEM_CERT.search(pem)
        if found is None:
            raise ValueError(f"no certificate in {made}")
        cert = x509.load_pem_x509_certificate(found.group(0))
        if not _serves(cert, node_ip, now):
            pem = b""
    except (OSError, ValueError, AttributeError):
        pem = b""
    if not pem:
        pem = _make(node_ip, list(hosts), now)
        if made.exists():
            _replace_private(made, pem)
        else:
            try:
                _create_exclusive(made, pem)
            except FileExistsError:  # another starter made one first: serve that one
                pem = read_pem(str(made))
    certs = PEM_CERT.findall(pem)
    write_atomic(data / CERT_NAME, certs[0] + b"\n", durable=True)
    return made_cert(data_dir, fingerprint_of_pem(pem))


def made_as_is(data_dir: str, node_ip: str, now: datetime.datetime) -> WebCert | None:
    """The certificate `ensure_made` would keep as it is, told with the standard library's
    `ssl` alone: no `cryptography`, so no child on a start that has nothing to make (~0.3 s
    and more of every start on the path to the first election, issue 41). None when it may
    need making (missing, damaged, expiring within `RENEW_DAYS`, not naming NODE_IP, its
    `web-tls.crt` not its copy) or when `ssl` cannot tell: `ensure_made` decides then."""
    data = Path(data_dir)
    decode = getattr(getattr(ssl, "_ssl", None), "_test_decode_cert", None)  # CPython's X509 reader
    if decode is None:
        return None
    try:
        pem = read_pem(str(data / MADE_NAME))
        first = PEM_CERT.search(pem)
        if first is None or read_pem(str(data / CERT_NAME)) != first.group(0) + b"\n":
            return None
        seen = decode(str(data / MADE_NAME))  # its first certificate, as `first` is
        until = datetime.datetime.fromtimestamp(ssl.cert_time_to_seconds(seen["notAfter"]), datetime.UTC)
        ips = {ipaddress.ip_address(v) for k, v in seen.get("subjectAltName", ()) if k == "IP Address"}
    except (OSError, ValueError, KeyError, TypeError, ssl.SSLError):
        return None
    if until - datetime.timedelta(days=RENEW_DAYS) < now or ipaddress.ip_address(node_ip) not in ips:
        return None
    return made_cert(data_dir, fingerprint_of_pem(pem))


def made_cert(data_dir: str, fingerprint: str) -> WebCert:
    """The certificate `ensure_made` keeps in DATA_DIR, as Daphne reads it."""
    made = str(Path(data_dir) / MADE_NAME)
    return WebCert(made, made, None, fingerprint, made=True)


def _serves(cert: Certificate, node_ip: str, now: datetime.datetime) -> bool:
    from cryptography import x509

    if cert.not_valid_after_utc - datetime.timedelta(days=RENEW_DAYS) < now:
        return False
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    return ipaddress.ip_address(node_ip) in names.get_values_for_type(x509.IPAddress)


def _make(node_ip: str, hosts: list[str], now: datetime.datetime) -> bytes:
    """A new key and self-signed certificate for `node_ip`, loopback and `hosts`, as one PEM."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    ips = list(dict.fromkeys(ipaddress.ip_address(a) for a in (node_ip, "127.0.0.1", "::1")))
    dns = list(dict.fromkeys(["localhost", *(h for h in hosts if h and not h.startswith((".", "[")))]))
    for host in list(dns):
        try:
            ips.append(ipaddress.ip_address(host))
            dns.remove(host)
        except ValueError:
            pass
    names = [*map(x509.IPAddress, ips), *map(x509.DNSName, dns)]
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"stkrelay agent {node_ip}")])
    usage = x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                          data_encipherment=False, key_agreement=False, key_cert_sign=False,
                          crl_sign=False, encipher_only=False, decipher_only=False)  # fmt: skip
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=MADE_DAYS))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return key_pem + cert.public_bytes(serialization.Encoding.PEM)


def _create_exclusive(path: Path, data: bytes) -> None:
    """Write `data` to a temporary file, then link it to `path` (FileExistsError if taken)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    _write(tmp, data, 0o600)
    try:
        os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _replace_private(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    _write(tmp, data, 0o600)
    os.replace(tmp, path)


def _write(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(path, mode)


def main(argv: list[str]) -> int:
    """`python -m elections.ports.local.webcert DATA_DIR NODE_IP [HOST...]`: make the certificate
    when needed, print its fingerprint; exit 1 with the reason when it cannot be written."""
    data_dir, node_ip, *hosts = argv
    try:
        made = ensure_made(data_dir, node_ip, hosts, datetime.datetime.now(datetime.UTC))
    except OSError as exc:
        print(f"{exc.filename2 or exc.filename or data_dir}: {exc.strerror}")
        return 1
    print(made.fingerprint)
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))
