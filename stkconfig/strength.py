"""How strong a site secret must be (`RELAY_TOKEN`, `POOL_KEY`, `CLOUD_TOKEN`, the cloud's keys):
E018/E026/E029 here, the cloud's C-checks in `relay.cloud.config`."""

from __future__ import annotations

SECRET_MIN_LENGTH = 16
SECRET_MIN_DISTINCT = 6
PLACEHOLDERS = ("change-me", "changeme", "change_me")
SECRET_HINT = (
    "use a long random secret, the same on every agent of the KMSN, "
    "e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))'"
)


def secret_weakness(secret: str) -> str:
    """Why `secret` is too weak for a site key ('' when it is acceptable)."""
    if len(secret) < SECRET_MIN_LENGTH:
        return f"is {len(secret)} characters, fewer than {SECRET_MIN_LENGTH}"
    if len(set(secret)) < SECRET_MIN_DISTINCT:
        return f"uses only {len(set(secret))} distinct characters"
    for period in range(1, len(secret) // 2 + 1):
        if all(secret[i] == secret[i % period] for i in range(len(secret))):
            return f"repeats the same {period} characters"
    if secret.lower().startswith(PLACEHOLDERS):
        return "is the example's placeholder"
    return ""
