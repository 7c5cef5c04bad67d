"""Minimal read-only endpoints: this agent's health and the pool's leader."""

import time

from django.conf import settings
from django.http import JsonResponse

from elections.errors import StoreUnavailable
from elections.ports.clock import SystemClock
from elections.ports.localstate import LocalState
from elections.ports.stores import PoolPlace, open_store


def healthz(request):  # type: ignore[no-untyped-def]
    state = LocalState(settings.STK.data_dir).leadership()
    return JsonResponse(
        {"node": settings.STK.node, "leader": state.leads_now(time.monotonic()), "decision": state.decision}
    )


def leader(request):  # type: ignore[no-untyped-def]
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
