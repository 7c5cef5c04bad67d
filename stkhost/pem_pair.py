"""The operator's PEM certificate and key, checked as a TLS server loads them: `check_pair`
(`TLS_CERT`, `TLS_KEY`: `stkconfig.tls` at start-up), and `read_pem`, a PEM file read within
`MAX_PEM_BYTES` (`elections.ports.local.webcert` serves the pair).

The standard library's `ssl` only: no `cryptography` (making a certificate is the web
certificate's short child, `elections.ports.local.webcert`).
"""

from __future__ import annotations

import ssl

from stkhost.fingerprints import PEM_CERT

MAX_PEM_BYTES = 1 << 20


class PemPairError(Exception):
    """A certificate or key that cannot serve: unreadable, not PEM, or not a pair."""


def check_pair(cert_path: str, key_path: str) -> tuple[str, str]:
    """(key, why) for the operator's pair: ('', '') when it can serve, else the key to blame."""
    try:
        pem = read_pem(cert_path)
        if not PEM_CERT.search(pem):
            raise ValueError("not a PEM certificate")
        ssl.create_default_context().load_verify_locations(cadata=pem.decode("ascii"))
    except ssl.SSLError:
        return "TLS_CERT", f"{cert_path}: not a PEM certificate"
    except (OSError, ValueError) as exc:
        return "TLS_CERT", f"{cert_path}: {_why(exc, 'not a PEM certificate')}"
    try:
        read_pem(key_path)
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert_path, key_path, password=_no_password)
    except ssl.SSLError as exc:  # before OSError, its base
        if "KEY_VALUES_MISMATCH" in str(exc):
            return "TLS_KEY", f"{key_path} is not the key of the certificate in {cert_path}"
        return "TLS_KEY", f"{key_path}: not a PEM private key"
    except (OSError, ValueError, PemPairError) as exc:
        return "TLS_KEY", f"{key_path}: {_why(exc, 'not a PEM private key')}"
    return "", ""


def _no_password() -> bytes:
    raise PemPairError("the key is encrypted: give it unencrypted, readable by this agent only")


def _why(exc: Exception, default: str) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or default
    if isinstance(exc, UnicodeDecodeError):
        return default
    return str(exc) or default  # PemPairError, ValueError: their own words


def read_pem(path: str) -> bytes:
    """The file's bytes; ValueError when it is larger than `MAX_PEM_BYTES`."""
    with open(path, "rb") as fh:
        data = fh.read(MAX_PEM_BYTES + 1)
    if len(data) > MAX_PEM_BYTES:
        raise ValueError(f"larger than {MAX_PEM_BYTES} bytes")
    return data
