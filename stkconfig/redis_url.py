"""`REDIS_URL`: this agent's own Redis (Celery, Channels): the `redis_url` section (E009)."""

from __future__ import annotations

from dataclasses import dataclass

from stkconfig.bad import Bad
from stkconfig.raw import Raw

SCHEMES = ("redis://", "rediss://", "unix://")


@dataclass(frozen=True)
class RedisUrl:
    redis_url: str = "redis://127.0.0.1:6379/0"


def parse(raw: Raw, known: object, bad: Bad) -> RedisUrl:
    url = raw.text("REDIS_URL")
    if not url.startswith(SCHEMES):
        bad("stkrelay.E009", "REDIS_URL", f"{url!r} is not a redis:// URL",
            "use this agent's local Redis, e.g. redis://127.0.0.1:6379/0")  # fmt: skip
    return RedisUrl(url)
