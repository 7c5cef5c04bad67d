"""Cross-site commanders at the cloud (issue 26 part 2): cloud-side grants. Pure.

A head office's commander reaches agents of several KMSNs through one cloud.
Its credential is a *grant* the cloud holds, not a paper signed by each site:
the cloud is the only party that sees every site's tunnel, so it is the one
that can say "this commander may reach A and B"; a paper signed by each
site's key would need the cloud to verify each site's key, and the cloud
holds none (only CLOUD_TOKEN and K_cloud, by design: docs/design.md §14). Each
site still authenticates the commander itself, with its own key, over the
cloud's nonce: the grant narrows what the cloud forwards, it never widens
what a site accepts.

``cloud.ini``: one ``[grant:<NAME>]`` per commander credential, ``TOKEN``
(as strong as a site key) and ``KMSNS`` (comma-separated, each a configured
``[site:<KMSN>]``). The commander's ``register`` carries ``grant`` (the
name) and ``grant_auth`` = HMAC(TOKEN, nonce|grant|kmsn|station)
(`relay.wire.auth.auth_digest` with role ``grant``). A cloud with no grant
section forwards commanders as before (single-site clouds are unchanged);
a cloud with one forwards a ``commander`` register only with a grant that
verifies and lists its KMSN. A refusal is counted by cause
(``grant_missing``, ``grant_unknown``, ``grant_bad_auth``, ``grant_unlisted``).
"""

from __future__ import annotations

from dataclasses import dataclass

from relay.wire.auth import verify_auth

GRANT_ROLE = "grant"
COMMANDER = "commander"


@dataclass(frozen=True, slots=True)
class Grant:
    name: str
    token: str
    kmsns: frozenset[str]


def grant_refusal(grants: dict[str, Grant], nonce: str, register: dict) -> str | None:
    """Why the cloud must not forward `register` (a cause above), or None. `register` is
    the client's first frame, already known to be a ``register`` naming a string KMSN."""
    if not grants or register.get("role") != COMMANDER:
        return None
    name, auth = register.get("grant"), register.get("grant_auth")
    if not isinstance(name, str) or not isinstance(auth, str):
        return "grant_missing"
    grant = grants.get(name)
    if grant is None:
        return "grant_unknown"
    kmsn, station = register["kmsn"], register.get("station")
    if not isinstance(station, str) or not verify_auth(grant.token, nonce, GRANT_ROLE, kmsn, station, auth):
        return "grant_bad_auth"
    if kmsn not in grant.kmsns:
        return "grant_unlisted"
    return None
