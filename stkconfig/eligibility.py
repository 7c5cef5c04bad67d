"""What besides the lease decides who may lead (ADR 0011's eligibility): the `eligibility` section,
`PRIORITY` (E010/E011), `HEALTH_CMD` and `HEALTH_URL`; the gate is its own (`stkconfig.gate`)."""

from __future__ import annotations

from dataclasses import dataclass

from stkconfig.bad import Bad
from stkconfig.raw import Raw


@dataclass(frozen=True)
class Eligibility:
    priority: int = 50
    health_cmd: str = ""
    health_url: str = ""


def parse(raw: Raw, known: object, bad: Bad) -> Eligibility:
    prio = raw.number("PRIORITY", bad)
    return Eligibility(
        Eligibility.priority if prio is None else prio, raw.text("HEALTH_CMD"), raw.text("HEALTH_URL")
    )
