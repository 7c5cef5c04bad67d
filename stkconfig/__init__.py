"""The agent's configuration and logging: the bottom layer under `relay/` and `elections/`.

Vocabulary:

- **key**: one name of `stk.ini`'s `[stk]` section (`LEASE_TTL`), also `STK_<KEY>`
  in the environment. Every key is one row of the **key table** (`stkconfig.keys`), and so is
  every variable the agent reads from its environment alone (`STK_DEBUG`: `environment`).
- **raw value**: the text a key was given (or its table default). Raw values stay in the
  loader: what it hands on is typed (`tests/test_config_contract.py` fails when code below
  it reads a raw value or an `STK_*` variable).
- **`Config`**: the typed, frozen result (`stkconfig.model`), one attribute per key
  (`LEASE_TTL` → `config.lease_ttl`), plus what some keys parse into (`gate`,
  `notify`, `cloud`, `relay_exec`, `watched`, `actions`, `etcd`, `smb`, `environment`). It is
  handed to what needs it (`Agent(config)`); only the Django layers read it from the `STK` setting.
- **section**: one module's keys, checked together into one frozen dataclass whose fields are
  `Config`'s (`stkconfig.timing.LeaseTiming`), by the one parser shape
  `parse(raw, known, bad)` (`stkconfig.raw`); `bad` is the one way a check says a value is
  wrong (`stkconfig.bad`).
- **`Problem`**: one bad value: a stable check id (`stkrelay.E0xx`), the key, what is
  wrong and the fix. `stkrelay.config.load` returns them; nothing raises.

Nothing here imports Django, `relay/`, `stkrelay/` or `elections/` above its pure core; it
stands on `stkhost` alone, the one package below it (a section checks its keys with the host's
helpers: a secret file, certificate pins, a PEM pair, the pool key's derived keys).
`stkrelay.config` (the Django project, on top) reads the file, runs the sections in order
(`SECTIONS`: every one of them here) and installs Django's translation of a problem's words
(`stkconfig.said`).
"""
