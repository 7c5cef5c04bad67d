"""Certificate fingerprints as clients pin them: the SHA-256 of the DER bytes, as 64 lowercase
hex (`FINGERPRINT`), read as typed (`normalise`, `parse_pins`) and shown as browsers show it (`show`).
"""

from __future__ import annotations

import hashlib
import re
import ssl
from collections.abc import Iterable

FINGERPRINT = re.compile(r"^[0-9a-f]{64}$")
PEM_CERT = re.compile(rb"-----BEGIN CERTIFICATE-----\r?\n.+?\r?\n-----END CERTIFICATE-----", re.DOTALL)


def normalise(fingerprint: str) -> str:
    """A fingerprint as typed (`AB:CD:...`, `sha256:abcd...`, spaces) as 64 lowercase hex, or ''."""
    text = fingerprint.strip().lower().removeprefix("sha256:").removeprefix("sha256 ")
    text = re.sub(r"[\s:]", "", text)
    return text if FINGERPRINT.fullmatch(text) else ""


def parse_pins(values: Iterable[str]) -> frozenset[str]:
    """Fingerprints as typed (see `normalise`); ValueError names a bad one."""
    pins = set()
    for value in values:
        pin = normalise(value)
        if not pin:
            raise ValueError(f"{value!r} is not a SHA-256 fingerprint (64 hex digits, colons allowed)")
        pins.add(pin)
    return frozenset(pins)


def show(fingerprint: str) -> str:
    """64 hex as browsers show it: `AB:CD:...` (32 pairs)."""
    return ":".join(fingerprint[i : i + 2] for i in range(0, len(fingerprint), 2)).upper()


def fingerprint(der: bytes) -> str:
    return hashlib.sha256(der).hexdigest()


def fingerprint_of_pem(pem: bytes) -> str:
    """The fingerprint of the first certificate in `pem` ('' if there is none)."""
    match = PEM_CERT.search(pem)
    if match is None:
        return ""
    try:
        return fingerprint(ssl.PEM_cert_to_DER_cert(match.group(0).decode("ascii")))
    except (ValueError, UnicodeDecodeError):
        return ""
