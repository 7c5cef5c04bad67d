"""Minimal read-only endpoints: this agent's health and the pool's leader.

`/healthz` answers anyone, but says to anyone only whether this agent is up
(its worker published its leadership state within `stale_after()`, 200) or
down (503), and its role (`leader` / `follower`). The node's name and the
decision text (which names other nodes, epochs, the share's state) are shown
only to a loopback client (the container's HEALTHCHECK, a local probe) or an
authenticated one (a session or a bearer token), like `/metrics`.

While the agent waits for its own Redis (its supervisor holds the worker back,
`runtime.redis_wait`) it is down whatever its last state says, and says why to
anyone (`"reason": "waiting for Redis"`); the URL, since when and the last error
only to those who see the node's name.
"""

import time

from django.conf import settings
from django.http import JsonResponse

from elections.errors import StoreUnavailable
from elections.ports.local.localstate import LocalState
from elections.ports.store.stores import PoolPlace, open_store
from elections.web.auth import bearer_user, is_loopback
from elections.web.panel.site import stale_after
from stkhost.clock import SystemClock


def healthz(request):
    local = LocalState(settings.STK.data_dir)
    state = local.leadership()
    redis = local.redis()
    now = time.monotonic()
    up = state.updated is not None and now - state.updated <= stale_after() and not redis.waiting
    leads = state.leads_now(now) and not redis.waiting
    doc: dict[str, object] = {"status": "up" if up else "down", "role": "leader" if leads else "follower"}
    if redis.waiting:
        doc["reason"] = "waiting for Redis"
    if is_loopback(request) or bearer_user(request) or request.user.is_authenticated:
        doc.update(node=settings.STK.node, leader=leads, decision=state.decision)
        if redis.waiting:
            doc["redis"] = {
                "url": redis.url,
                "since": redis.since_iso(),
                "tries": redis.tries,
                "why": redis.why,
            }
    return JsonResponse(doc, status=200 if up else 503)


def leader(request):
    """Who leads this agent's pool, from the signed lease (a client's fallback lookup)."""
    stk = settings.STK
    try:
        read = open_store(PoolPlace.of(stk), stk.node, SystemClock()).read()
    except StoreUnavailable as exc:
        return JsonResponse({"kmsn": stk.kmsn, "error": f"lease store unreachable: {exc}"}, status=503)
    if read.record is None or read.status != "valid" or read.record.released:
        return JsonResponse({"kmsn": stk.kmsn, "leader": None, "status": read.status}, status=404)
    rec = read.record
    return JsonResponse(
        {
            "kmsn": rec.kmsn,
            "leader": rec.node,
            "station": rec.station,
            "ip": rec.ip,
            "port": rec.port,
            "epoch": rec.epoch,
            "status": "valid",
        }
    )
