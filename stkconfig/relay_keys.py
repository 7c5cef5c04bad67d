"""The built-in relay's own keys: the `relay_keys` section (`RELAY_STATION_KEYS_ONLY`,
`RELAY_MAX_PER_ADDRESS`, `RELAY_LOOPBACK` E090, `RELAY_FORWARD` E091, `RELAY_MAX_FRAME`,
`RELAY_KEEPALIVE`, `RELAY_ATTESTS`; E010/E011 for the numbers). Old stations are the `legacy`
section, `RELAY_HOST` the `stations` one, `ENTRY*` the `entry` one."""

from __future__ import annotations

from dataclasses import dataclass

from stkconfig.bad import Bad
from stkconfig.raw import Raw

LOOPBACK_WORDS = {"auto": "auto", "on": "on", "1": "on", "yes": "on", "off": "off", "0": "off", "no": "off"}
FORWARD_WORDS = {"loopback": "loopback", "on": "loopback", "1": "loopback", "yes": "loopback", "lan": "lan",
                 "off": "off", "0": "off", "no": "off"}  # fmt: skip


@dataclass(frozen=True)
class RelayKeys:
    relay_station_keys_only: bool = False
    relay_max_per_address: int = 0
    relay_loopback: str = "auto"  # auto | on | off (relay.server.listen_set)
    relay_forward: str = "loopback"  # loopback | lan | off (relay.server.station_door)
    relay_max_frame: int = 1 << 20
    relay_keepalive: float = 10.0
    relay_attests: bool = True


def parse(raw: Raw, known: object, bad: Bad) -> RelayKeys:
    d = RelayKeys()
    per_address = raw.number("RELAY_MAX_PER_ADDRESS", bad)
    loopback = _word(raw.text("RELAY_LOOPBACK"), LOOPBACK_WORDS, d.relay_loopback, bad, "stkrelay.E090",
                     "RELAY_LOOPBACK", "auto, on or off",
                     "auto (127.0.0.1 unless NODE_IP is a loopback address), on, or off")  # fmt: skip
    forward = _word(raw.text("RELAY_FORWARD"), FORWARD_WORDS, d.relay_forward, bad, "stkrelay.E091",
                    "RELAY_FORWARD", "loopback, lan or off",
                    "loopback (127.0.0.1 on every member), lan (also a follower's NODE_IP), "
                    "or off")  # fmt: skip
    frame = raw.number("RELAY_MAX_FRAME", bad)
    keep = raw.number("RELAY_KEEPALIVE", bad)
    return RelayKeys(
        relay_station_keys_only=raw.flag("RELAY_STATION_KEYS_ONLY", False),
        relay_max_per_address=per_address if per_address is not None else d.relay_max_per_address,
        relay_loopback=loopback,
        relay_forward=forward,
        relay_max_frame=frame or d.relay_max_frame,
        relay_keepalive=keep or d.relay_keepalive,
        relay_attests=raw.flag("RELAY_ATTESTS", True),
    )


def _word(
    text: str, words: dict[str, str], default: str, bad: Bad, id: str, key: str, shown: str, hint: str
) -> str:
    """One of a key's `words` (any case), or `default` with the problem `id` said."""
    mode = words.get(text.strip().lower())
    if mode is None:
        bad(id, key, f"{text!r} is not {shown}", hint)
        return default
    return mode
