"""The exceptions of the elections app.

ElectionError
├── StoreUnavailable   the lease store cannot be read or written (share down,
│                      permissions, directory gone). Callers treat it as "no
│                      evidence" and let the leader's renew deadline act.
├── RedisUnavailable   this agent's own Redis does not answer (not started yet,
│                      killed, wrong password): its supervisor holds the worker
│                      back until it does (`runtime.redis_wait`).
└── ConfigError        a setting is invalid; carries the key and a hint.
"""


class ElectionError(Exception):
    pass


class StoreUnavailable(ElectionError):
    pass


class RedisUnavailable(ElectionError):
    pass


class ConfigError(ElectionError):
    def __init__(self, key: str, message: str, hint: str = "") -> None:
        self.key = key
        self.message = message
        self.hint = hint
        super().__init__(f"{key}: {message}" + (f" — {hint}" if hint else ""))
