"""relay/server/external_relay.py with real processes: serving only once it accepts, the process group
stopped whole, restarts after the Backoff. The relay is tests/standin_relay.py (not ours)."""

import asyncio
import os
import sys
import time
from pathlib import Path

from harness import free_pair, free_port

from relay.server.external_relay import ExternalRelay
from stkconfig.parsed import ExecRelay
from stkhost.retry import Backoff

STANDIN = str(Path(__file__).resolve().parent / "standin_relay.py")


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "Z"


async def until(cond, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


def test_stop_ends_the_whole_process_group_even_what_the_relay_started(tmp_path):
    """A relay that starts a helper of its own (here: a shell that leaves a `sleep` behind and
    execs the stand-in) is stopped as a group: nothing of it is left."""
    child_file = tmp_path / "helper.pid"
    port = free_port()
    script = f"sleep 300 & echo $! > {child_file}; exec {sys.executable} {STANDIN} --host {{host}} " \
             f"--port {{port}} --passthrough-port {{passthrough_port}}"  # fmt: skip
    spec = ExecRelay(("/bin/sh", "-c", script), "127.0.0.1", port)
    lines: list[str] = []

    async def main() -> None:
        ups: list[bool] = []
        relay = ExternalRelay(spec, epoch=3, kmsn="K", say=lines.append, on_up=lambda: ups.append(True))
        relay.start()
        await until(lambda: relay.accepting)
        assert ups == [True] and relay.snapshot()["pid"] is not None
        pid, helper = relay.proc.pid, int(child_file.read_text())
        await relay.stop()
        assert gone(pid)  # reaped by stop()
        # The helper's SIGKILL lands asynchronously (PID 1 here reaps no orphans: a zombie is gone).
        await until(lambda: gone(helper), 5)
        assert not relay.accepting

    asyncio.run(main())
    assert any("standin relay" in line for line in lines), lines  # its output, prefixed, in the log


def test_an_exiting_relay_is_restarted_after_the_backoff_and_reported_down(tmp_path):
    port = free_pair()
    argv = (sys.executable, STANDIN, "--host", "{host}", "--port", "{port}",
            "--passthrough-port", "{passthrough_port}", "--exit-after", "0.3")  # fmt: skip
    spec = ExecRelay(argv, "127.0.0.1", port)
    downs: list[str] = []
    said: list[str] = []

    async def main() -> None:
        relay = ExternalRelay(spec, epoch=1, kmsn="K", say=said.append, on_down=downs.append,
                              backoff=Backoff(tries=100, first=0.2, factor=2.0, cap=1.0))  # fmt: skip
        relay.start()
        try:
            await until(lambda: relay.starts >= 3, 20)
            snap = relay.snapshot()
            assert snap["last_error"] == "exited with 7" and snap["restarts"] >= 2, said
        finally:
            await relay.stop()

    asyncio.run(main())
    assert len(downs) >= 2 and set(downs) == {"relay_down"}


def test_a_relay_that_never_accepts_is_killed_and_started_again(tmp_path):
    spec = ExecRelay(("/bin/sleep", "300"), "127.0.0.1", free_port())
    said: list[str] = []

    async def main() -> None:
        relay = ExternalRelay(spec, epoch=1, kmsn="K", say=said.append, start_within=0.5,
                              backoff=Backoff(tries=100, first=0.1))  # fmt: skip
        relay.start()
        await until(lambda: relay.starts >= 2)
        assert not relay.accepting and relay.last_exit == -15  # the first was killed (SIGTERM)
        await relay.stop()

    asyncio.run(main())
    assert any("did not accept on 127.0.0.1:" in line for line in said), said
