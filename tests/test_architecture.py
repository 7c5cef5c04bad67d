"""The layering holds: no import cycles, a pure core, the agent wiring imported
only by its entry points, and the import-linter contracts in pyproject.toml.

Imports are read from the source (every `import` statement, including those
inside functions), so a lazy import cannot hide a cycle."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("elections", "relay", "stkrelay", "stkconfig", "stkhost")
PURE = (
    "elections.core.decide",
    "elections.core.lease_memory",
    "elections.core.serving",
    "elections.core.serving_book",
    "elections.core.lease",
    "elections.core.eligibility",
    "elections.core.commands",
    "elections.core.failovers",
    "elections.core.actions",
    "elections.core.action_config",
    "elections.core.ownership",
    "elections.core.repair",
    "relay.wire.server_connection",
    "relay.wire.framing",
    "relay.wire.mux",
    "relay.cloud.fence",
    "relay.cloud.handshake",
    "relay.cloud.remote",
    "relay.wire.lease_mac",
)
IMPURE_ROOTS = {
    "django",
    "socket",
    "asyncio",
    "subprocess",
    "time",
    "threading",
    "channels",
    "celery",
    "redis",
}
ENTRY_POINTS = ("elections.tasks",)  # the supervisor (management.agent_root) builds no agent (issue 41)


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            rel = path.relative_to(ROOT).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            out[".".join(parts)] = path
    return out


def _imports(path: Path) -> set[str]:
    """Every module name an import statement in `path` names (absolute imports)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import (use absolute imports)"
            if node.module:
                names.add(node.module)
                names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: {t for t in _imports(p) if t in mods and t != m} for m, p in mods.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_module_of_the_project_imports_itself_back_through_others():
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("module", PURE)
def test_the_core_imports_no_django_no_sockets_no_processes_and_no_clock(module):
    path = _modules()[module]
    roots = {name.split(".")[0] for name in _imports(path)}
    assert roots & IMPURE_ROOTS == set(), f"{module} imports {sorted(roots & IMPURE_ROOTS)}"
    assert "datetime.now" not in path.read_text() and "monotonic()" not in path.read_text()


def test_the_agent_wiring_is_imported_only_by_its_entry_points():
    users = sorted(m for m, deps in _graph().items() if "elections.runtime.agent" in deps)
    assert users == sorted(ENTRY_POINTS)


def test_the_import_linter_contracts_hold():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint, "import-linter is a pinned test dependency (requirements-dev.lock)"
    done = subprocess.run([lint], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "broken" not in done.stdout.lower().replace("0 broken", "")


# Backends are opened in one place (`elections.ports.store.stores`); contend.py is the
# bare contender of the tests and benchmarks (it opens its store through stores
# too, but writes its own events file).
STORE_OPENERS = {"elections.ports.store.stores", "elections.runtime.contend"}
BACKEND_CLASSES = ("FileLeaseStore(", "JsonlEventSink(", "EventTail(", "EtcdLeaseStore(", "EtcdEventSink(",
                   "EtcdEventTail(", "ShareBackend(", "EtcdBackend(", "PoolStore(", "PoolEventSink(",
                   "PoolEventTail(")  # fmt: skip


def test_only_the_store_factory_constructs_a_backend():
    mods = _modules()
    makers = {
        m
        for m, path in mods.items()
        if not m.startswith("elections.ports.store.store")
        and m != "elections.ports.events.eventlog"
        and not m.startswith("elections.ports.etcd")
        and any(c in path.read_text() for c in BACKEND_CLASSES)
    }
    assert makers <= STORE_OPENERS, sorted(makers - STORE_OPENERS)


# The OS seam (stkhost/): what only Linux answers is called there and nowhere else.
OS_ATTRIBUTES = {"killpg", "setsid", "pipe2", "prctl", "flock"}
OS_KEYWORDS = {"preexec_fn", "start_new_session", "reuse_port"}
SEAM = "stkhost"


def _os_calls(tree: ast.AST) -> list[str]:
    """Each OS-specific call, attribute or keyword in `tree` (docstrings and comments aside)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and (
            node.attr in OS_ATTRIBUTES or node.attr.startswith("inotify")
        ):
            found.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Name) and node.id.startswith("inotify"):
            found.append(f"line {node.lineno}: {node.id}")
        elif isinstance(node, ast.keyword) and node.arg in OS_KEYWORDS:
            found.append(f"line {node.value.lineno}: {node.arg}=")
    return found


def test_every_os_specific_call_lives_in_the_host_seam():
    outside = {
        name: calls
        for name, path in _modules().items()
        if not (name == SEAM or name.startswith(SEAM + "."))
        and (calls := _os_calls(ast.parse(path.read_text())))
    }
    assert outside == {}, f"OS-specific calls outside {SEAM} (put them behind a name there): {outside}"
    inside = [
        n for n, p in _modules().items() if n.startswith(SEAM + ".") and _os_calls(ast.parse(p.read_text()))
    ]
    assert {f"{SEAM}.processes", f"{SEAM}.dirwatch", f"{SEAM}.sockets", f"{SEAM}.locks"} <= set(inside), (
        inside
    )


def test_the_seam_finder_finds_each_kind_of_call():
    code = "\n".join(
        (
            "os.killpg(1, 9)",
            "fcntl.flock(fd, 2)",
            "Popen(a, preexec_fn=f)",
            "libc.inotify_init1(0)",
            "loop.create_datagram_endpoint(f, reuse_port=True)",
        )
    )
    assert len(_os_calls(ast.parse(code))) == 5


# The configuration (issue 25.4): stkconfig is the bottom layer, and only the Django-facing
# layers read `django.conf.settings.STK`; below them the Config is handed in (`Agent(config)`,
# `relay.runner.main(config, argv)` from `stkrelay.child`).
SETTINGS_READERS = ("stkrelay", "elections.web", "elections.management", "elections.tasks",
                    "elections.steering", "elections.audit", "relay.web.ws", "relay.management")  # fmt: skip


# stkconfig stands on stkhost, the one package below it (which imports nothing of the project,
# stkconfig included): a section checks its keys with the host's own helpers (a secret file's first
# line, certificate pins, a PEM pair as a TLS server loads it, the pool key's derived keys), so
# every section lives in stkconfig and none of those checks is written twice (issue 39, item 4).
def test_the_configuration_package_imports_only_itself_the_host_and_the_pure_core():
    graph = _graph()
    below = {m: sorted(d for d in deps if not d.startswith(("stkconfig", "stkhost", "elections.core")))
             for m, deps in graph.items() if m.startswith("stkconfig")}  # fmt: skip
    assert below and all(deps == [] for deps in below.values()), below


def test_only_the_django_layers_read_settings_stk():
    import re

    reads = re.compile(r"settings\.STK\b")
    readers = sorted(m for m, p in _modules().items() if reads.search(p.read_text()))
    assert readers and [m for m in readers if not m.startswith(SETTINGS_READERS)] == []
    assert "elections.runtime.agent" not in readers and "relay.runner" not in readers


def test_every_package_opens_with_its_vocabulary():
    """Issue 25: each package's `__init__` says what its words mean ("Vocabulary:", a term a line)."""
    missing = []
    for pkg in PACKAGES:
        for init in sorted((ROOT / pkg).rglob("__init__.py")):
            if "migrations" in init.parts:
                continue
            lines = (ast.get_docstring(ast.parse(init.read_text())) or "").splitlines()
            at = next((i for i, line in enumerate(lines) if line.startswith("Vocabulary")), None)
            after = lines[at + 1 :] if at is not None else []
            if not any(line.startswith(("  ", "- ")) and line.split() for line in after):
                missing.append(str(init.relative_to(ROOT)))
    assert missing == [], f"packages without a vocabulary block: {missing}"


def test_no_module_waits_with_asyncio_wait_for():
    """`asyncio.wait_for` on Python 3.11 can swallow a cancellation that arrives as the awaited
    thing completes (CPython gh-86296, fixed in 3.12 by building it on `asyncio.timeout`): a
    task told to stop runs on. The project waits with `async with asyncio.timeout(...)`."""
    found = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            named = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            if named and node.attr == "wait_for" and node.value.id == "asyncio":  # type: ignore[attr-defined]
                found.append(f"{name}:{node.lineno}")
    assert found == [], f"asyncio.wait_for in {found}"
