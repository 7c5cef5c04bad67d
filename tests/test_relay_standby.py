"""The warm standby relay waits on the kernel for this agent's leadership: an
idle standby looks at the state about once a second (it looked 20 times), and
the worker's write of the state and the marker wakes it at once."""

from __future__ import annotations

import os
import threading
import time
from types import SimpleNamespace

from harness import wait_until

from elections.ports.local import localstate
from elections.ports.local.localstate import Leadership, LocalState
from relay.runner import standby as runner


def test_an_idle_standby_barely_looks_and_wakes_on_the_workers_write(tmp_path, monkeypatch):
    looks: list[float] = []
    real = localstate.LocalState.leadership

    def counted(self):  # type: ignore[no-untyped-def]
        looks.append(time.monotonic())
        return real(self)

    monkeypatch.setattr(localstate.LocalState, "leadership", counted)
    got: list[int] = []
    stk = SimpleNamespace(data_dir=tmp_path)
    threading.Thread(target=lambda: got.append(runner.await_leadership(stk)), daemon=True).start()
    time.sleep(2.0)  # the idle window being measured, not a wait for something
    idle = len(looks)
    assert idle <= 2.0 / runner.STANDBY_FALLBACK + 2, idle  # 40 when it polled every 50 ms
    local = LocalState(tmp_path)
    local.want_relay(3)
    written = time.monotonic()
    local.write_leadership(Leadership(node="S001", pid=os.getpid(), leader=True, epoch=3, max_epoch=3,
                                      valid_until=time.monotonic() + 60))  # fmt: skip
    wait_until(lambda: got, 5, "the standby to see its leadership")
    assert got == [3]
    assert time.monotonic() - written < runner.STANDBY_FALLBACK / 2  # the write woke it, not the fallback
