"""No `getattr`/`hasattr` on our own types (issue 39): what a caller uses of one of our objects
is on its class or its Protocol, and the type checker sees it. The calls that remain are listed
below by module and object, each with why it cannot be an attribute: a module (a constant this
platform may lack), an exception (its fields vary by class), Django's request, user, settings and
log records, objects of other libraries (a stream, an ASGI server's internals, ctypes), and the
few reads of our own objects' fields or methods by a name from a fixed list (serialising a
record, dispatching a sub-command). Any other call fails this test: declare the member instead.

The source is read, not imported: every call in the product's packages is found."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("elections", "relay", "stkconfig", "stkhost", "stkrelay")

MODULE = "a module: a constant or function this platform may lack"
EXCEPTION = "an exception: its fields depend on its class"
DJANGO = "Django's settings, request, user or log record"
EXTERNAL = "an object of another library"
BY_NAME = "our own fields or methods by a name from a fixed list (a record's fields, a sub-command)"

# (module, the object's expression) -> why; each such call is allowed as often as it occurs now.
ALLOWED: dict[tuple[str, str], str] = {
    ("elections/audit.py", "entry"): BY_NAME,
    ("elections/audit.py", "self"): BY_NAME,
    ("elections/audit.py", "settings"): DJANGO,
    ("elections/core/beacons.py", "self"): BY_NAME,
    ("elections/core/lease.py", "self"): BY_NAME,
    ("elections/core/untrusted.py", "exc"): EXCEPTION,
    ("elections/executors/aws.py", "exc"): EXCEPTION,
    ("elections/management/commands/relayctl.py", "self"): BY_NAME,
    ("stkhost/clock.py", "time"): MODULE,
    ("stkhost/dirwatch.py", "libc"): MODULE,  # ctypes' libc: a function this libc may lack
    ("stkhost/files.py", "os"): MODULE,
    ("stkhost/files.py", "libc"): MODULE,
    ("stkhost/locks.py", "os"): MODULE,
    ("stkhost/processes.py", "fcntl"): MODULE,  # F_SETPIPE_SZ: Linux only
    ("stkhost/secret_source.py", "exc"): EXCEPTION,
    ("elections/ports/share/sharefiles.py", "os"): MODULE,
    ("stkconfig/smburl.py", "exc"): EXCEPTION,
    # a text stream or Django's OutputWrapper
    ("elections/ports/local/terminal.py", "self._stream"): EXTERNAL,
    # CPython's X509 reader; None elsewhere: the child decides
    ("elections/ports/local/webcert.py", "ssl"): MODULE,
    ("elections/ports/local/webcert.py", "getattr(ssl, '_ssl', None)"): MODULE,
    ("elections/ports/local/shallow.py", "obj"): BY_NAME,  # a dataclass's fields, by `fields()`
    ("elections/runtime/notify.py", "self"): BY_NAME,
    ("elections/runtime/notify.py", "exc"): EXCEPTION,
    ("elections/runtime/ownership.py", "config"): BY_NAME,
    ("elections/web/api.py", "settings"): DJANGO,
    ("elections/web/auth.py", "user"): DJANGO,
    ("elections/web/auth.py", "settings"): DJANGO,
    ("elections/web/body_limit.py", "record"): DJANGO,
    ("elections/web/device.py", "settings"): DJANGO,
    ("elections/web/language.py", "request"): DJANGO,
    ("elections/web/metrics.py", "m"): BY_NAME,
    ("elections/web/metrics.py", "r"): BY_NAME,
    ("elections/web/panel/audit_log.py", "e"): BY_NAME,
    ("elections/web/panel/audit_log.py", "r"): BY_NAME,
    ("stkconfig/drop_throttled.py", "record"): DJANGO,
    ("relay/client/discovery.py", "exc"): EXCEPTION,
    ("relay/client/events.py", "self"): BY_NAME,
    # The per-thread etcd client: a threading.local, and the proxy that forwards to its client.
    ("relay/cloud/cluster.py", "self.local"): EXTERNAL,
    ("relay/cloud/cluster.py", "client"): BY_NAME,
    ("relay/cloud/handshake.py", "kind"): EXTERNAL,  # a type or a tuple of types, named
    ("relay/management/commands/relayclient.py", "self"): BY_NAME,
    ("relay/server/cloud_tunnel.py", "exc"): EXCEPTION,
    ("relay/server/listen_set.py", "socket"): MODULE,
    ("relay/server/splice_pipe.py", "os"): MODULE,  # os.splice: Linux only
    ("relay/web/ws_flow.py", "receive"): EXTERNAL,  # the ASGI server's receive callable and protocol
    ("relay/web/ws_flow.py", "protocol"): EXTERNAL,
    ("stkconfig/model.py", "filled"): BY_NAME,
    ("stkrelay/celery.py", "sender"): EXTERNAL,  # Celery's worker process
}

# How many such calls each (module, object) has today: a new one is a new line here, said why.
COUNTS: dict[tuple[str, str], int] = {
    ("elections/audit.py", "settings"): 2,
    ("elections/core/beacons.py", "self"): 2,
    ("stkhost/files.py", "os"): 1,
    ("elections/ports/share/sharefiles.py", "os"): 4,
    ("elections/ports/local/terminal.py", "self._stream"): 2,
    ("elections/runtime/notify.py", "self"): 2,
    ("elections/web/auth.py", "settings"): 1,
    ("elections/web/language.py", "request"): 2,
    ("elections/web/panel/audit_log.py", "e"): 1,
    ("relay/server/splice_pipe.py", "os"): 4,  # os.splice and SPLICE_F_* where the platform has them
}


def probes(source: str) -> list[tuple[str, int]]:
    """Every `getattr(obj, ...)` and `hasattr(obj, ...)` in `source`: (obj as written, line)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        call = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args
        if call and node.func.id in ("getattr", "hasattr"):
            found.append((ast.unparse(node.args[0]), node.lineno))
    return found


def _calls() -> tuple[Counter[tuple[str, str]], dict[tuple[str, str], list[int]]]:
    counts: Counter[tuple[str, str]] = Counter()
    lines: dict[tuple[str, str], list[int]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            rel = path.relative_to(ROOT).as_posix()
            for obj, line in probes(path.read_text()):
                counts[(rel, obj)] += 1
                lines.setdefault((rel, obj), []).append(line)
    return counts, lines


def test_no_getattr_or_hasattr_on_our_own_types():
    counts, lines = _calls()
    unlisted = [f"{m}:{lines[(m, o)][0]}: getattr/hasattr on {o}" for m, o in counts if (m, o) not in ALLOWED]
    assert unlisted == [], "declare the member on its class or Protocol instead:\n" + "\n".join(unlisted)


def test_no_more_such_calls_than_listed():
    counts, lines = _calls()
    more = [
        f"{m}: {n} calls on {o} (lines {lines[(m, o)]}), {COUNTS.get((m, o), 1)} allowed"
        for (m, o), n in counts.items()
        if (m, o) in ALLOWED and n > COUNTS.get((m, o), 1)
    ]
    assert more == []


def test_every_allowed_call_is_still_there():
    counts, _ = _calls()
    assert [key for key in ALLOWED if key not in counts] == [], "an allowed call is gone: drop its line"


def test_the_finder_sees_getattr_and_hasattr_but_no_attribute():
    source = "getattr(a.b, 'x', None)\nhasattr(os, 'O_X')\nobj.getattr(c)\nx = y.z\n"
    assert probes(source) == [("a.b", 1), ("os", 2)]
