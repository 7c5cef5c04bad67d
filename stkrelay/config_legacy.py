"""The site as it is (issue 19): old stations on the relay, and the old agent's stk.ini.

Keys (docs/relay.md, "Legacy stations"; checked by the `legacy` section, `stkconfig.legacy`):

- `RELAY_LEGACY` (0|1, default 0): the built-in relay also accepts old stations
  (``relay_client.prg`` framing, the old MAGIC, the site token in clear;
  `relay.wire.legacy`).
- `RELAY_LEGACY_MAGIC`: the old relay's MAGIC, as its ``relay_server.py`` has
  it. Required while `RELAY_LEGACY = 1` (`stkrelay.E080`): our documents do
  not hold it, so there is no default to guess wrong. 1..64 printable ASCII
  characters, not ``STKRELAY/1`` (`stkrelay.E081`).
- `RELAY_LEGACY_WAIT` (seconds, default 0.3, 0..2): how long the relay holds
  its hello for a client that may speak first (`stkrelay.E082`). 0 greets at
  once (an old station then gets a frame it must skip).

`RELAY_LEGACY = 1` with `RELAY_KIND = exec` would be meaningless (the site's
own relay already speaks the old protocol); that pairing is checked where
`RELAY_KIND` is.

The site's file is read by `stkrelay.config_ini` (encodings, inline comments,
quotes); `stk_values(ini)` takes the keys that stand before any section header as
`[stk]` keys (the seed adds ours to the old agent's file), `[stk]` (any case) wins
where both have a key; duplicate keys keep the last one, and a line that is a bare
word (no ``=``) is skipped rather than refusing the whole file.
`ignored_keys(values)` names the keys nobody reads: the agent says so in one
line (`stkrelay.config.Config.ignored`), never one warning per key.
"""

from __future__ import annotations

from collections.abc import Collection

from stkrelay.config_ini import TOP, IniFile

# Keys read outside config.DEFAULTS (executors, the etcd store, this turn's other modules), by family.
KNOWN_PREFIXES = ("VIP_", "AWS_", "OCI_", "AZURE_", "ETCD_", "GATE_", "ENTRY", "CLOUD_", "SMB_", "TLS_",
                  "WEB_", "BEACON_", "EVENTS_", "LOG_", "RELAY_LEGACY", "RELAY_KIND", "RELAY_EXEC",
                  "ON_ROLE_", "WEBHOOK_", "TIME_ZONE", "LANGUAGE_CODE")  # fmt: skip


def stk_values(ini: IniFile) -> dict[str, tuple[str, int]] | None:
    """The agent's keys, each with its line: the headerless ones overlaid with `[stk]`; None when
    neither has any."""
    stk = ini.named("stk")
    top = ini.sections.get(TOP, {})
    if not top and not stk:
        return None
    values = dict(top)
    for name in stk:
        values.update(ini.sections[name])
    return values


def ignored_keys(given: Collection[str], known: Collection[str]) -> list[str]:
    """The keys of the file that no part of the agent reads (the old agent's own), sorted."""
    return sorted(k for k in given if k not in known and not k.startswith(KNOWN_PREFIXES))


def startup_lines(source: str, ignored: list[str], legacy: bool, magic: str) -> list[str]:
    """What `runagent` says once at start about the site's file and old stations (at most 2 lines)."""
    lines = []
    if ignored:
        shown = ", ".join(ignored[:12]) + (", ..." if len(ignored) > 12 else "")
        lines.append(f"{source}: {len(ignored)} key{'s' if len(ignored) != 1 else ''} of the old agent "
                     f"ignored ({shown})")  # fmt: skip
    if legacy:
        lines.append(f"WARNING: RELAY_LEGACY = 1 (magic {magic!r}): old stations send the site token "
                     "in clear on the LAN; give each its station credential "
                     "(relayctl credential --all)")  # fmt: skip
    return lines
