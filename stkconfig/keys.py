"""The key table: every key of `[stk]`, in the order of docs/configuration.md (docs/design.md §11),
then the variables the agent reads from its environment alone (`environment=True`, `STK_DEBUG`...:
parsed by `stkconfig.environment`, never read from `stk.ini`).

Each row: name, kind, raw default, the check ids that report it, the range of a
number (E010/E011), the docs table's default column when it is derived, the value
`stk.ini.example` gives, and its meaning. Keys that share one row of the docs table name
the row's first key in `row`. Adding a key: one row here, then
`python scripts/config_docs.py` (the docs table and the example ini), then its field on
`stkconfig.model.Config` and where `stkrelay.config.load` parses it.
"""

from __future__ import annotations

from stkconfig.table import Key, defaults

# fmt: off
KEYS: tuple[Key, ...] = (
    Key("KMSN", "str", "", check="E003", example="9999-9999-99-99",
        doc="the site's id, e.g. `9999-9999-99-99`"),
    Key("STATION", "str", "", check="E003", example="S001",
        doc="this agent's station, e.g. `S001`; also its node id"),
    Key("NODE", "str", "", shown="`STATION`",
        doc="this agent's member name in the pool (its heartbeat, its event files)"),
    Key("NODE_IP", "str", "127.0.0.1", check="E005", example="192.168.1.10",
        doc="this agent's LAN address (the relay and web bind it)"),
    Key("RELAY_PORT", "int", "9530", check="E010/E011", range=(1, 65534), example="9530",
        doc='framed-JSON relay; passthrough is `RELAY_PORT+1`'),
    Key("RELAY_TOKEN", "str", "", check="E004/E018", example="change-me-to-a-long-random-secret",
        doc="the site's shared secret: signs leases, authenticates clients"),
    Key("LEASE_DIR", "str", "", check="E012", example="/share/socket",
        doc="the share's socket folder (`W:\\socket`), or "
        "`smb://[user@]host[:port]/share/folder` to reach it "
        'over SMB2/3 without a mount (below)'),
    Key("SMB_PASSWORD", "str", "", check="E022",
        doc="the password of an `smb://` lease dir's user, or a file whose first line is it (never in the "
        'URL, never shown)'),
    Key("SMB_PASSWORD_FILE", "str", "", check="E022", row="SMB_PASSWORD"),
    Key("LEASE_TTL", "float", "10", check="E010/E011/E007", range=(0.1, 300), example="10",
        doc='seconds a lease lives without renewal'),
    Key("LEASE_RENEW", "float", "3", check="E010/E011", range=(0.1, 300), example="3",
        doc='leader renews (and every member heartbeats) this often'),
    Key("LEASE_POLL", "float", "2", check="E010/E011/E102", range=(0.1, 300), example="2",
        doc='followers look at the lease this often'),
    Key("RENEW_DEADLINE", "float", "7", check="E010/E011/E008", range=(0.1, 300), example="7",
        doc='a leader that has not renewed for this long stops leading'),
    Key("WEB_PORT", "int", "8000", check="E010/E011/E006", range=(1, 65535), example="8000",
        doc='admin panel and API'),
    Key("REDIS_URL", "str", "redis://127.0.0.1:6379/0", check="E009", example="redis://127.0.0.1:6379/0",
        doc="this agent's own Redis (Celery, Channels)"),
    Key("DATA_DIR", "str", "", check="E013", shown="`~/.stkrelay/<node>`", example="/var/lib/stkrelay/site1",
        doc="this agent's database, state and logs; under the systemd unit its state directory, "
        "`/var/lib/stkrelay/<instance>` (E241 otherwise): `relayctl` and `stkuser` read it here too "
        "(E240 when it holds no agent database)"),
    Key("RELAY_MAX_FRAME", "int", "1048576", check="E010/E011", range=(1024, 64 << 20),
        doc='largest relay frame, bytes'),
    Key("RELAY_KEEPALIVE", "float", "10", check="E010/E011", range=(0.1, 3600),
        doc='a relay connection silent for 3 × this is closed'),
    Key("HEARTBEAT_TTL", "float", "", check="E010/E011/E100/E101", range=(0.1, 3600), shown="`LEASE_TTL`",
        doc="a member's heartbeat counts as stale after this…"),
    Key("PROMOTION_HOLD", "float", "5", check="E010/E011", range=(0, 3600), doc='…plus this (anti-flap)'),
    Key("PRIORITY", "int", "50", check="E010/E011", range=(0, 100),
        doc='0–100; higher wins simultaneous contention; 0 = never leader'),
    Key("HEALTH_CMD", "str", "", doc='optional health checks (exit 0 / HTTP < 400 = healthy)'),
    Key("HEALTH_URL", "str", "", row="HEALTH_CMD"),
    Key("GATE_CMD", "argv", "", check="E104/E106",
        doc='the VRRP-master gate (ADR 0011): a command, split like a shell would but run without one, exit 0'
        ' = this host is master; anything else, or past `GATE_TIMEOUT` (its process group killed), is not'
        ' master (see "The gate")'),
    Key("GATE_FILE", "str", "", check="E105/E106",
        doc="…or an absolute path to a file holding `MASTER`, `BACKUP`, `FAULT` or `STOP` as keepalived's "
        '`notify` script writes it; only a readable regular file whose first word is `MASTER` counts (not'
        ' both keys)'),
    Key("GATE_TIMEOUT", "float", "1", check="E010/E011/E107", range=(0.1, 60),
        doc="the gate's own deadline, seconds, at most `LEASE_RENEW`"),
    Key("GATE_MAX_AGE", "float", "0", check="E010/E011/E108", range=(0, 86400), shown="`0` (off)",
        doc='with `GATE_FILE`: the file counts only if it changed within this many seconds (for a writer that'
        ' rewrites or touches it periodically, e.g. a keepalived track script); at least 2 looks + '
        '`GATE_TIMEOUT`'),
    Key("ON_ROLE_CHANGE", "argv", "", check="E180",
        doc='a command run on each role change of this agent: `CMD ROLE EPOCH KMSN NODE CAUSE`, also as '
        '`STK_*` (see "Notifications"); E180'),
    Key("ON_ROLE_CHANGE_TIMEOUT", "float", "10", check="E010/E011", range=(0.1, 600),
        doc='seconds, then its process group is killed and audited'),
    Key("WEBHOOK_URL", "str", "", check="E181",
        doc='http(s) URL receiving a signed JSON POST of every failover, drain, promote, pause and security '
        'event; E181'),
    Key("WEBHOOK_SECRET", "str", "", check="E182",
        doc="the HMAC-SHA256 key of `X-Stkrelay-Signature` (≥ 16 characters; the file's first line); E182"),
    Key("WEBHOOK_SECRET_FILE", "str", "", check="E182", row="WEBHOOK_SECRET"),
    Key("WEBHOOK_PINS", "set", "", check="E183",
        doc="https only: SHA-256 fingerprints of the receiver's certificate (else the system's CAs); E183"),
    Key("WEBHOOK_TIMEOUT", "float", "5", check="E010/E011", range=(0.1, 120),
        doc='per POST; tries per event (backoff 0.5 s doubling to 30 s); events waiting, kept in '
        '`DATA_DIR/webhook-outbox.json` across restarts (full: oldest dropped, counted, audited)'),
    Key("WEBHOOK_TRIES", "int", "8", check="E010/E011", range=(1, 100), row="WEBHOOK_TIMEOUT"),
    Key("WEBHOOK_QUEUE", "int", "1000", check="E010/E011", range=(1, 100_000), row="WEBHOOK_TIMEOUT"),
    Key("WEBHOOK_SECURITY_EVERY", "float", "60", check="E010/E011", range=(1, 3600),
        doc='seconds, 1..3600: security events are coalesced, the first posted at once, then at most one '
        'per this many seconds carrying every refusal counted meanwhile'),
    Key("RELAY_ATTESTS", "flag", "1", doc='a leader whose relay is not serving hands off'),
    Key("LEASE_WATCH", "float", "0.25", check="E010/E011/E103", range=(0.05, 60),
        doc='cheap look for commands and handoffs between polls'),
    Key("POOL_KEY", "str", "", check="E018", shown="`RELAY_TOKEN`",
        doc='signs every pool record: lease, lock, members, event lines, the audit chain; set it apart from '
        '`RELAY_TOKEN` so that a relay client cannot forge pool records; station credentials derive from '
        'it (`relayctl credential STATION`)'),
    Key("SHARE_TIMEOUT", "float", "2", check="E010/E011", range=(0.1, 60),
        doc='seconds any one share operation may take before the share counts as unreachable (on etcd: any '
        'one call, failover between members included)'),
    Key("LEASE_STORE", "str", "", check="E033", shown="`file`",
        doc='`etcd`: the pool\'s lease, members and events live on etcd '
        'v3 instead of the share (see "The pool'
        ' on etcd")'),
    Key("ETCD_ENDPOINTS", "list", "", check="E034",
        doc="with etcd: comma list of `http(s)://host:port`, the cluster's members"),
    Key("ETCD_PREFIX", "str", "", check="E035", shown="`/stkrelay/<KMSN>/`",
        doc="with etcd: the pool's keys live under this prefix (one per pool)"),
    Key("ETCD_CA", "str", "", check="E036",
        doc="with etcd: TLS (the cluster's CA; this agent's client certificate and key); needs `https://` "
        'endpoints'),
    Key("ETCD_CERT", "str", "", check="E036", row="ETCD_CA"),
    Key("ETCD_KEY", "str", "", check="E036", row="ETCD_CA"),
    Key("RELAY_STATION_KEYS_ONLY", "flag", "0",
        doc='`1`: relay clients must use their station credential; the site token is refused (`bad_auth`). '
        'The posture for a migrated site: once every station has its credential (`relayctl credential '
        '--all`; the site page lists the sessions still on the token), set it; until then stations that '
        'only know the token keep working, and a station that used its credential once is already refused'
        ' the token (see "Stations bound to their credentials")'),
    Key("RELAY_MAX_PER_ADDRESS", "int", "0", check="E010/E011", range=(0, 1 << 20), shown="`0` (auto)",
        doc='relay connections from one source IP; `0` = half the pre-auth cap (see below)'),
    Key("RELAY_LOOPBACK", "str", "auto", check="E090",
        doc="the relay (and the fencing proxy) also listens on `127.0.0.1`, for the leader's own agent (seed "
        '000 §3.6): `auto` = unless `NODE_IP` is itself a loopback address (a test machine whose agents '
        'each have their own `127.0.0.x` and share loopback), `on`, `off` (see "Where the relay listens")'),
    Key("RELAY_FORWARD", "str", "loopback", check="E091",
        doc="the station door: every member, leader or not, takes a station's connection and "
        "forwards its bytes untouched to the relay of whoever leads now, so a station that dials "
        "`127.0.0.1:RELAY_PORT` on its own PC reaches the elected relay: `loopback` = on `127.0.0.1` "
        "(where `RELAY_LOOPBACK` puts a loopback listener; the relay then leaves loopback to the door), "
        "`lan` = also on a follower's `NODE_IP`, for a commander on a PC without an agent that lists two "
        "members as its `RELAY_HOST` and backup, `off` = no door (the leader's relay listens on loopback "
        'itself; see "The station door")'),
    Key("RELAY_HOST", "str", "", check="E113",
        doc="where this PC's stations dial (the old agent's key: they dial `RELAY_HOST:9530`, then "
        "`127.0.0.1`): `127.0.0.1`, or a member's address, reaches the elected relay; any other address is"
        ' the old central relay, still the single point of failure (`relayctl doctor` says which, WARN '
        'for the old one)'),
    Key("RELAY_LEGACY", "flag", "0",
        doc="`1`: the built-in relay also takes the site's old stations (`relay_client.prg` framing, the old "
        'MAGIC, the site token in clear, no HMAC handshake; see "Legacy stations"). Off by default: the '
        'token crosses the LAN in clear'),
    Key("RELAY_LEGACY_MAGIC", "str", "", check="E080/E081",
        doc="the old relay's `MAGIC`, copied from the site's `relay_server.py` (our documents do not hold "
        'it); required while `RELAY_LEGACY = 1` (E080)'),
    Key("RELAY_LEGACY_WAIT", "float", "0.3", check="E082",
        doc='seconds the relay holds its `hello` for a client that may speak first (an old station); `0` = '
        'greet at once (an old station must then skip a frame it does not know). 0..2'),
    Key("ENTRY", "flag", "", shown="`0`",
        doc="`1`: this member has the router's port-forward: while the pool has a leader it takes remote "
        'clients on `ENTRY_LISTEN` and forwards them to the leader\'s relay (see "Entry members")'),
    Key("ENTRY_LISTEN", "address", "", check="E200/E201/E202",
        doc='with `ENTRY = 1`: `addr:port` (`[v6]:port`) the router forwards to, `port` protocol v1 and `port'
        " + 1` passthrough; this member's `NODE_IP` or a VIP the entry members share (bound with "
        "`IP_FREEBIND`). Not the relay's or the panel's ports on `NODE_IP` (E200–E202)"),
    Key("VIP_*", "family", "", check="E014",
        doc='leader actions, see below; checked at start-up like the rest'),
    Key("AWS_*", "family", "", check="E015", row="VIP_*"),
    Key("OCI_*", "family", "", check="E016", row="VIP_*"),
    Key("AZURE_*", "family", "", check="E017", row="VIP_*"),
    Key("OWNERSHIP_CHECK", "float", "2", check="E120",
        doc="seconds between this agent's looks at where its addresses (`VIP_*`, `AWS_*`, `OCI_*`, `AZURE_*`)"
        ' really are; `0` = off (no look, no map, no repair); else 0.5..300 (see "Where the addresses '
        'really are")'),
    Key("OWNERSHIP_HOLD", "float", "", check="E121", shown="`LEASE_TTL`",
        doc='after putting an address right, this agent leaves it alone this long (at least `RENEW_DEADLINE`,'
        ' at most 86400)'),
    Key("OWNERSHIP_REPAIR", "flag", "1", check="E122",
        doc='`0`: show the ownership map and its alarms, never act on it'),
    Key("WEB_ALLOWED_HOSTS", "list", "", check="E019",
        doc='comma list of further names/addresses the panel answers to (`NODE_IP`, `localhost`, `127.0.0.1`,'
        " `[::1]`, the machine's host name and `VIP_ADDRESS` always); `.site.lan` admits subdomains; `*` "
        'is refused'),
    Key("WEB_TRUSTED_PROXIES", "list", "", check="E020",
        doc='comma list of addresses/CIDRs of reverse proxies whose `X-Forwarded-For` is believed'),
    Key("WEB_LOGIN_ADDRESS_FAILURES", "int", "20", check="E010/E011", range=(1, 10000),
        doc='failed logins per client address (IPv6: per /64) per 5 min before 429'),
    Key("WEB_LOGIN_FAILURES_PER_S", "float", "0.5", check="E010/E011", range=(0.01, 1000),
        doc='failed logins per second from everyone together before 429…'),
    Key("WEB_LOGIN_BURST", "int", "5", check="E010/E011", range=(1, 10000), doc='…with this many at once'),
    Key("TLS_CERT", "str", "", check="E057/E058",
        doc="the panel's certificate (PEM, the leaf first, then any intermediates) and its unencrypted PEM "
        'key; both or neither; empty: a self-signed certificate made in `DATA_DIR` at first start (see '
        '"TLS")'),
    Key("TLS_KEY", "str", "", check="E057/E059", row="TLS_CERT"),
    Key("WEB_PLAIN", "flag", "0", check="E060",
        doc='`1`: the panel, API and WebSockets in plain HTTP instead of HTTPS — for loopback (a local TLS '
        'proxy in front); on a LAN address every page carries a red warning and start-up says so'),
    Key("WEB_WS_MAX_BUFFER", "int", "4194304", check="E066",
        doc='what the web process may hold unsent for one WebSocket (bytes, at least `RELAY_MAX_FRAME`; '
        'messages, 16..1,000,000) before it closes it as too slow (4408), and how many messages a client '
        'may have sent that the relay has not taken yet'),
    Key("WEB_WS_MAX_MESSAGES", "int", "4096", check="E067", row="WEB_WS_MAX_BUFFER"),
    Key("LOG_FORMAT", "str", "text", check="E021",
        doc='`json`: every line of every process of the agent (children included) is one JSON object — '
        '`time`, `level`, `node`, `kmsn` (the site: one log store holds many), `component` (`agent`, '
        '`web`, `worker`, `relay`), `message`, and `logger`, `event`, `fields`, `exc` when there are any '
        '— for journald or Loki'),
    Key("LOG_MAX_BYTES", "int", "10485760", check="E010/E011", range=(4096, 1 << 40),
        doc='the files the agent writes in `DATA_DIR` (the web access log, `access.log`) rotate at this size,'
        ' keeping this many (`access.log.1`…)'),
    Key("LOG_BACKUPS", "int", "5", check="E010/E011", range=(1, 1000), row="LOG_MAX_BYTES"),
    Key("BEACON_INTERVAL", "float", "0.2", check="E030/E130",
        doc="seconds between this member's signed beacons (±20 % jitter); `0` = off: no beacons, no liveness "
        'port, the lease alone, exactly as before; else 0.05..`LEASE_RENEW`/2 (see "Beacons")'),
    Key("BEACON_PORT", "int", "", check="E031", shown="`RELAY_PORT+2`",
        doc="UDP beacons and the supervisor's TCP liveness port; the same on every member"),
    Key("BEACON_PEERS", "list", "", check="E032",
        doc="comma list of member addresses to send beacons to; empty = the broadcast address of `NODE_IP`'s "
        'subnet'),
    Key("EVENTS_SEGMENT_BYTES", "int", "1048576", check="E010/E011", range=(4096, 8 << 20),
        doc="this member's `events/` files: the active file is sealed at this size; its newest segments "
        'within this many bytes (the active one included) and younger than this many days (on its own '
        'clock) stay, older ones are retired (what rules need is kept, see below); `stkrelay.E041` if the'
        ' keep is under two segments'),
    Key("EVENTS_KEEP_BYTES", "int", "4194304", check="E010/E011/E041", range=(4096, 1 << 40),
        row="EVENTS_SEGMENT_BYTES"),
    Key("EVENTS_KEEP_DAYS", "float", "400", check="E010/E011", range=(1, 100_000),
        row="EVENTS_SEGMENT_BYTES"),
    Key("RELAY_KIND", "str", "builtin", check="E070/E076",
        doc="`exec`: the leader serves the site's own relay (`RELAY_EXEC`) on loopback, behind stkrelay's "
        'fencing proxy on `NODE_IP:RELAY_PORT` and `RELAY_PORT+1` (see "An external relay")'),
    Key("RELAY_EXEC", "argv", "", check="E071/E072/E073/E077",
        doc="with `exec`: the relay's command line, split like a POSIX shell (never run by one: no `$VAR`, "
        'pipes or globs; a Windows path in single quotes), placeholders `{host}`, `{port}`, '
        '`{passthrough_port}`, `{epoch}`, `{kmsn}` (`{{`/`}}` for braces); one that names no `{epoch}` '
        'runs warm on every member, behind the fencing proxy that only the leader runs'),
    Key("RELAY_EXEC_LISTEN", "address", "", check="E074/E075", shown="`127.0.0.1:`RELAY_PORT+10",
        doc='where the external relay listens (`{host}:{port}`; its passthrough port is `{port}+1`); a '
        'loopback address only'),
    Key("LANGUAGE_CODE", "str", "", check="E150", shown="`en`",
        doc="the panel's language for a browser that asks for none it speaks and a user who chose none: `en` "
        'or `zh-hant` (Traditional Chinese, Taiwan usage; `zh-TW` is read as it); see "Languages and time'
        ' zone"'),
    Key("TIME_ZONE", "str", '', check='E151', shown="the server's zone",
        doc='the IANA zone every time of the panel is shown in, e.g. `Asia/Taipei` (named after each time; '
        'UTC on hover; the API stays UTC)'),
    Key("CLOUD_URL", "list", "", check="E028/E076",
        doc="the cloud relay's tunnel port, `tcp://host:TUNNEL_PORT` (docs/design.md §14; `ws://`/`wss://` "
        "are refused for now), or several nodes' comma-separated (tried in turn: see "
        '"Several cloud nodes"); empty: no tunnel'),
    Key("CLOUD_TOKEN", "str", "", check="E029/E055",
        doc="this site's secret with the cloud relay (its `[site:<KMSN>]` `CLOUD_TOKEN`): as strong as a site"
        ' key (at least 16 characters, 6 distinct, no short run repeated, no placeholder), not '
        "`RELAY_TOKEN` nor `POOL_KEY` nor the site's lease key (`relayctl cloud-key`, E055). The cloud's "
        '`LEASE_KEY` for the site is not an agent key: it derives from `POOL_KEY`'),
    Key("STK_INI", "str", "", check="E001", environment=True,
        doc="the agent's `stk.ini` (`--ini PATH` sets it); unset or empty: no file, the `STK_<KEY>` "
        "variables alone"),
    Key("STK_SECRET_KEY", "str", "", shown="a random key kept in `DATA_DIR/secret_key`", environment=True,
        doc="the panel's Django secret key (signs sessions, CSRF tokens and device cookies)"),
    Key("STK_DEBUG", "flag", "0", environment=True,
        doc="`1`: Django's debug mode (tracebacks in pages); never on a site"),
    Key("STK_SESSION_AGE", "int", "28800", check="E010", environment=True,
        doc="seconds a panel session lasts after login (polling does not extend it; closing the browser ends"
        " it too)"),
    Key("STK_SECURE_COOKIES", "flag", "0", environment=True,
        doc="`1`: the panel's cookies go over HTTPS only with `WEB_PLAIN = 1` too (behind a "
        "TLS-terminating proxy); with HTTPS they always do"),
    Key("STK_LOGIN_RESERVE_RATE", "float", "0.2", check="E010", environment=True,
        doc="failed logins per second, and at once, an address without a failure in the window may still "
        "draw from its reserve once the bucket for everyone is empty (docs/panel.md)"),
    Key("STK_LOGIN_RESERVE_BURST", "int", "10", check="E010", environment=True,
        row="STK_LOGIN_RESERVE_RATE"),
    Key("STK_LOGIN_DEVICE_DAYS", "int", "30", check="E010", environment=True,
        doc="days a browser's device cookie (a login as that user before) lets it skip the bucket for "
        "everyone"),
    Key("STK_PUBLIC_LEADER_LOOKUP", "flag", "0", environment=True,
        doc="`1`: `GET /api/v1/leader` answers without login (relay clients' fallback lookup)"),
    Key("STK_SKIP_DIR_CHECKS", "flag", "0", environment=True,
        doc="`1`: the settings are made without checking `LEASE_DIR` and `DATA_DIR` on disk (E012/E013), for "
        "tools that need no share (`scripts/messages.sh`)"),
)
# fmt: on

BY_NAME: dict[str, Key] = {k.name: k for k in KEYS}
# Keys holding a secret: never read with a comment inside (stkrelay.E112), never shown; an ini
# holding one must not be readable by group or others (stkrelay.W111).
SECRET_KEYS: frozenset[str] = frozenset({"RELAY_TOKEN", "POOL_KEY", "SMB_PASSWORD", "CLOUD_TOKEN",
                                         "WEBHOOK_SECRET"})  # fmt: skip
# Keys holding a command line: the ini reader leaves their quotes to their own splitter (or shell).
COMMAND_KEYS: frozenset[str] = frozenset({k.name for k in KEYS if k.kind == "argv"} | {"HEALTH_CMD"})
DEFAULTS: dict[str, str] = defaults(KEYS)
