"""One class, one file; one name, one meaning (issue 39, item 3). Read from the source (ast), no import.

- **No class split across files.** A class of ours whose base is another class of ours, defined in
  another module, that is not a Protocol (a promise), not an exception and not a dataclass (a
  record's fields), shares one object's state across two files: a mixin. It fails here unless the
  base is a complete class of its own that is made to be specialized (`SUBCLASSED`, each with its
  reason), and such a base must not be a mixin by its shape (no `__init__` of its own or its
  bases', while it declares attributes it expects its owner to set). `PENDING` would list a split
  still to be merged, with why it is not yet; an entry that no longer applies fails too.
- **One name, one meaning.** A top-level class name is defined once in the product, and so is a
  public top-level function name, unless `SAME_NAME` says why the two are one meaning.
"""

from __future__ import annotations

import ast
import builtins
from collections import defaultdict
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("elections", "relay", "stkrelay", "stkconfig", "stkhost")

# Bases of ours made to be specialized: each a complete class, instantiated or a template of variants.
SUBCLASSED = {
    "stkrelay.celery.SteadyScheduler": "Celery's in-memory beat without its spin before each due entry, "
    "the scheduler of a beat of its own (CELERY_BEAT_SCHEDULER); the worker's own beat calls the due "
    "entries on its thread instead of sending them (beat_here.InPlaceScheduler)",
    "relay.wire.framing.FramedConnection": "the sans-I/O framing every connection of the wire speaks: "
    "the client's, the server's and the cloud tunnel's acceptor add their handshakes",
    "relay.wire.server_connection.ServerConnection": "the server's side of the wire; the legacy protocol "
    "is the same connection with another greeting",
    "relay.server.connections.JsonPeer": "a JSON client's connection; the legacy and the tunnelled "
    "peers are the same peer reached another way",
    "relay.server.connections.PassthroughPeer": "a raw client's connection; legacy and tunnelled "
    "variants as for JsonPeer",
    "relay.cloud.remote_peers.RemotePeer": "a remote client on the cloud's ports; a forwarded one "
    "(relay.cloud.forward) is the same peer that came through another node",
    "relay.server.entry.EntryRunner": "the entry's proxy, gate and status file; the station door "
    "is one on this member's own addresses",
    "elections.ports.store.records.PoolStore": "the pool's records over the backend port (a constructor "
    "argument); each store names its backend and adds what only it can do",
    "elections.ports.events.event_records.PoolEventSink": "the event records over the backend port; the "
    "JSONL and etcd sinks are it on their backends",
    "elections.ports.events.event_records.PoolEventTail": "the event tail over the backend port; the "
    "JSONL and etcd tails are it on their backends",
    "stkrelay.operator_command.OperatorCommand": "Django's BaseCommand for the operator commands "
    "(relayctl, stkuser, relayclient): their shared arguments and output",
}
# Splits still to merge, each with why not yet (none left: keep the list for the next one found).
PENDING: dict[str, str] = {}
# Names defined in more than one module that are one meaning, and why.
SAME_NAME = {
    "Command": "Django finds a management command by this name in its module",
    "main": "each entry point's",
    "agent": "elections.tasks.agent is runtime.agent.agent built from the Django settings",
    "parse": "a configuration section's parser, one shape: parse(raw, known, bad) (stkconfig.raw)",
    "read": "an ini file read (stkrelay.config_ini, config_file; issue 39 item 4)",
    "load": "a configuration loaded from its file: the agent's (stkrelay.config) and the cloud's",
    "site": "the site page, as JSON (web.api) and as HTML (web.panel.views)",
    "sites": "the sites page, as JSON and as HTML",
    "history": "the history page, as JSON and as HTML",
    "audit_log": "the audit log page, as JSON and as HTML",
    "leader": "who leads the pool, from the signed lease: the API's view and /healthz's fallback",
    "forget_refusal": "core.commands' reason, and the panel's words for the same reason",
    "stale_after": "how old a pool view may be before it is stale (the panel's and the entry's bound)",
}


def modules() -> dict[str, Path]:
    out = {}
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


@cache
def tree(module: str) -> ast.Module:
    return ast.parse(modules_by_name()[module].read_text())


@cache
def modules_by_name() -> dict[str, Path]:
    return modules()


@cache
def classes() -> dict[str, ast.ClassDef]:
    """module.Name -> its top-level class, for every class of the product."""
    return {
        f"{m}.{n.name}": n for m in modules_by_name() for n in tree(m).body if isinstance(n, ast.ClassDef)
    }


@cache
def imported(module: str) -> dict[str, str]:
    """The names a module binds by import -> what they name (module.Name or a module)."""
    out = {}
    for node in ast.walk(tree(module)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                out[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:  # `import a.b` binds a; `import a.b as c` binds c to a.b
                out[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
    return out


def resolve(module: str, expr: ast.expr) -> str | None:
    """The qualified name of the class of ours `expr` names in `module`, or None (not ours)."""
    text = ast.unparse(expr.value if isinstance(expr, ast.Subscript) else expr)
    head, _, rest = text.partition(".")
    if f"{module}.{text}" in classes():
        return f"{module}.{text}"
    target = imported(module).get(head)
    if target is None:
        return None
    name = f"{target}.{rest}" if rest else target
    for _ in range(5):  # through a package's re-exports
        if name in classes():
            return name
        owner, _, last = name.rpartition(".")
        if owner not in modules_by_name() or last not in imported(owner):
            return None
        name = imported(owner)[last]
    return None


def bases_of(name: str) -> list[str]:
    module = name.rpartition(".")[0]
    return [ast.unparse(b) for b in classes()[name].bases] + [
        base for b in classes()[name].bases if (base := resolve(module, b)) is not None
    ]


def is_protocol(name: str) -> bool:
    """A typing Protocol (not asyncio's, a transport's callbacks)."""
    module = name.rpartition(".")[0]
    for expr in classes()[name].bases:
        text = ast.unparse(expr.value if isinstance(expr, ast.Subscript) else expr)
        head, _, rest = text.partition(".")
        if imported(module).get(head, "") + (f".{rest}" if rest else "") in (
            "typing.Protocol",
            "typing_extensions.Protocol",
        ):
            return True
    return False


def is_exception(name: str, depth: int = 0) -> bool:
    for base in bases_of(name):
        raised = getattr(builtins, base, None)
        if isinstance(raised, type) and issubclass(raised, BaseException):
            return True
        if base in classes() and depth < 8 and is_exception(base, depth + 1):
            return True
    return False


def is_dataclass(name: str) -> bool:
    decorators = classes()[name].decorator_list
    return any("dataclass" in ast.unparse(d) for d in decorators)


def has_init(name: str, depth: int = 0) -> bool:
    node = classes()[name]
    if any(isinstance(n, ast.FunctionDef) and n.name == "__init__" for n in node.body):
        return True
    ours = [b for b in bases_of(name) if b in classes()]
    foreign = [b for b in node.bases if resolve(name.rpartition(".")[0], b) is None]
    return bool(foreign) or any(has_init(b, depth + 1) for b in ours if depth < 8)


def expects_owner_state(name: str) -> bool:
    """Declares instance attributes without values (`x: T` in the class body): set by someone else."""
    return any(
        isinstance(n, ast.AnnAssign) and n.value is None and "ClassVar" not in ast.unparse(n.annotation)
        for n in classes()[name].body
    )


def is_mixin_shape(name: str) -> bool:
    return expects_owner_state(name) and not has_init(name)


def shared_bases() -> dict[str, list[str]]:
    """Base -> the classes of other modules that take it as a base (Protocols, exceptions and
    dataclasses aside)."""
    out: dict[str, list[str]] = defaultdict(list)
    for name, node in classes().items():
        module = name.rpartition(".")[0]
        for expr in node.bases:
            base = resolve(module, expr)
            if base is None or base.rpartition(".")[0] == module:
                continue
            if is_protocol(base) or is_exception(base) or is_dataclass(base):
                continue
            out[base].append(name)
    return out


def test_no_class_takes_a_mixin_of_ours_from_another_module():
    split = {
        base: users
        for base, users in shared_bases().items()
        if base not in SUBCLASSED and base not in PENDING
    }
    assert not split, (
        "a class of ours takes as its base a class of ours from another module (a mixin: one object's "
        "state in two files). Merge it into the class, or make it a collaborator passed to the "
        f"constructor; if it is a complete class made to be specialized, say so in SUBCLASSED: {split}"
    )


def test_the_bases_made_to_be_specialized_are_not_mixins_and_every_entry_still_applies():
    shared = shared_bases()
    mixins = [base for base in SUBCLASSED if base in classes() and is_mixin_shape(base)]
    assert not mixins, (
        f"these SUBCLASSED bases have no __init__ and expect their owner's state: mixins {mixins}"
    )
    stale = [base for base in (*SUBCLASSED, *PENDING) if base not in shared]
    assert not stale, (
        f"no class of another module takes these as a base any more: drop them from the lists {stale}"
    )


def test_the_checks_tell_a_mixin_from_a_complete_class():
    half = ast.parse(
        "class Half:\n    owner_sets: int\n\n    def reads(self):\n        return self.owner_sets\n"
    )
    whole = ast.parse("class Whole:\n    kept: int\n\n    def __init__(self):\n        self.kept = 1\n")
    for node in (*half.body, *whole.body):
        classes()[f"made_up.{node.name}"] = node  # type: ignore[union-attr]
    try:
        assert is_mixin_shape("made_up.Half") and not is_mixin_shape("made_up.Whole")
    finally:
        classes().pop("made_up.Half"), classes().pop("made_up.Whole")
    assert not is_mixin_shape("elections.ports.store.records.PoolStore")
    assert is_protocol("elections.ports.share.share.Share") and is_exception(
        "elections.errors.StoreUnavailable"
    )
    assert is_dataclass("elections.core.decide.Decision")
    # The splits merged in issue 39 are gone for good: each class whole in its own file.
    wholes = (
        "relay.client.relay_client.RelayClient",
        "relay.cloud.server.CloudServer",
        "relay.runner.serve.RelayRunner",
        "elections.runtime.agent.Agent",
        "elections.runtime.elector.Elector",
        "elections.ports.beacons.beacons.BeaconService",
        "elections.ports.share.smbshare.SmbShare",
    )
    for whole in wholes:
        assert whole in classes() and all(
            resolve(whole.rpartition(".")[0], b) is None for b in classes()[whole].bases
        )


def defined_twice(kind: type[ast.AST], public_only: bool) -> dict[str, list[str]]:
    where: dict[str, list[str]] = defaultdict(list)
    for module in modules_by_name():
        for node in tree(module).body:
            named = isinstance(node, kind) or (
                kind is ast.FunctionDef and isinstance(node, ast.AsyncFunctionDef)
            )
            if named and not (public_only and node.name.startswith("_")):  # type: ignore[attr-defined]
                where[node.name].append(module)  # type: ignore[attr-defined]
    return {name: mods for name, mods in where.items() if len(mods) > 1}


def test_a_class_name_is_defined_once_in_the_product():
    twins = {name: mods for name, mods in defined_twice(ast.ClassDef, False).items() if name not in SAME_NAME}
    assert not twins, (
        f"one class name, two definitions: give each its own name (or say in SAME_NAME why not) {twins}"
    )


def test_a_public_function_name_is_defined_once_in_the_product():
    twins = {
        name: mods for name, mods in defined_twice(ast.FunctionDef, True).items() if name not in SAME_NAME
    }
    assert not twins, (
        f"one function name, two definitions: give each its own name (or say in SAME_NAME why) {twins}"
    )


def test_every_same_name_entry_is_still_defined_twice():
    twice = {**defined_twice(ast.ClassDef, False), **defined_twice(ast.FunctionDef, True)}
    assert not set(SAME_NAME) - set(twice), (
        f"no longer defined twice: drop from SAME_NAME {set(SAME_NAME) - set(twice)}"
    )
