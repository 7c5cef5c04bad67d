"""The relay's TCP listeners while this agent leads, without Django (docs/design.md §4).

`python -m stkrelay.child relay.runner --standby` is the agent's warm standby relay: it
loads only the configuration (`stkrelay.config`, in `stkrelay.child`), the relay server and the
ports it needs (no Django, no Celery: a few MiB where a management command
costs ~75), waits for this agent's leadership and the fenced start_relay
action of its epoch, and serves until leadership is lost (see
`relay.management.commands.runrelay`, the same behaviour as a management
command). With ``CLOUD_URL`` set, it dials the cloud relay's tunnel as soon
as it serves (`relay.server.cloud_tunnel.TunnelClient`, presenting the signed lease of
its epoch), redials with backoff while the gate holds, and closes it on the
way out; its state is ``snapshot["tunnel"]`` in relay.json. It listens on
`NODE_IP`, on 127.0.0.1 (`RELAY_LOOPBACK`) and on every address an executor
holds for its epoch (`relay.server.listen_set`, from addresses.json, watched like
leadership.json); where, is ``snapshot["listen"]``. With
``RELAY_KIND = exec`` it serves the site's own relay instead (docs/design.md §16):
the external relay (`relay.server.external_relay`) on loopback, behind the fencing proxy
(`relay.server.fencing_proxy`) on the same addresses and gate; relay.json says it listens
only while the external relay accepts. Unless its command names ``{epoch}``, the standby starts
that relay at once, warm (`warm_standby`), for one serving period at most. Exit status: 0
after serving, 1 if a port cannot be bound, 2 on a configuration problem.

The runner's parts: `gate` (the leadership gate and its changes), `standby` (the wait before
serving), `serve` (the serving loop and relay.json) and `lease_reads` (the share, read off-loop).

Vocabulary:

  standby    the warm relay process waiting for its agent's leadership (`standby`)
  gate       whether this agent may serve its epoch now: leadership.json read on this
             machine's clock (`gate.LeadershipGate`); shut, the relay stops forwarding
  wanted     relay.wanted, the start_relay action's marker of the epoch to serve
  listen set where the relay listens: NODE_IP, loopback, the executors' addresses
  successor  whom the relay tells its clients to go to as it stops (`lease_reads`)
"""

from __future__ import annotations

import asyncio
import gc
import sys
import time
from collections.abc import Callable

from elections.ports.local.localstate import LocalState
from relay.runner.gate import LeadershipGate
from relay.runner.serve import RelayRunner
from relay.runner.standby import await_leadership
from relay.server.external_relay import ExternalRelay
from stkconfig.model import Config

Say = Callable[[str], None]


def main(stk: Config, argv: list[str] | None = None) -> int:
    """`python -m stkrelay.child relay.runner --standby`: the standby relay, with the
    configuration `stkrelay.child` loaded."""
    import argparse

    parser = argparse.ArgumentParser(prog="relay.runner", description=__doc__.splitlines()[0])
    parser.add_argument("--standby", action="store_true", help="wait for leadership, then serve")
    args = parser.parse_args(argv)

    def say(line: str) -> None:
        print(line, flush=True)

    def complain(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    return serve(stk, args.standby, say, complain)


def serve(stk: Config, standby: bool, say: Say, complain: Say) -> int:
    """Serve this agent's epoch until leadership is lost or a signal comes: with `standby`,
    wait for the leadership and its start_relay action first; without, serve only if the
    leadership state says this agent leads now. The exit status (module docstring)."""
    if standby and stk.relay_kind == "exec" and stk.relay_exec is not None and stk.relay_exec.warm:
        return asyncio.run(warm_standby(stk, say, complain))
    if standby:
        epoch = await_leadership(stk)
    else:
        held = LocalState(stk.data_dir).leadership().held_epoch(time.monotonic())
        why = (
            "the leadership state does not say this agent leads now"
            if held is None
            else LeadershipGate(stk.data_dir, held).why_not()
        )
        if why is not None:
            say(f"runrelay: {stk.node} is not the leader ({why}): not serving")
            return 0
        assert held is not None
        epoch = held
    # Everything loaded so far lives as long as the process: out of the collector's sight, it
    # costs no full collection while serving, and the interpreter's teardown after a SIGTERM
    # ~0.1 s less of the 1 s the relay has to be gone (docs/design.md §4).
    gc.freeze()
    return asyncio.run(RelayRunner(stk, epoch, say, complain).run())


async def warm_standby(stk: Config, say: Say, complain: Say) -> int:
    """``RELAY_KIND = exec`` whose command names no ``{epoch}``: the site's relay is started now, on
    its loopback `RELAY_EXEC_LISTEN` only, where nothing but this member's fencing proxy reaches it,
    and the proxy (shut until this member serves) forwards to it at once when it wins, instead of
    0.3-1 s later. It serves one period at most: it is stopped with the runner after it (whatever
    it holds of that period, its clients' registrations, queued messages, goes with it) and the
    standby the supervisor starts next starts a fresh one."""
    assert stk.relay_exec is not None
    warm = ExternalRelay(stk.relay_exec, epoch=0, kmsn=stk.kmsn, say=say)
    warm.start()
    try:
        epoch = await asyncio.to_thread(await_leadership, stk)
    except BaseException:
        await warm.stop()
        raise
    gc.freeze()
    return await RelayRunner(stk, epoch, say, complain, warm=warm).run()
