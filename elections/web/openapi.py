"""`GET /api/v1/openapi.json`: the JSON API described as OpenAPI 3.1, by hand.

Every path, parameter, body and error answer of `elections/web/api.py` (and of
the `api_view` wrapper around it: 401, 403 csrf, 405) is written out here;
`tests/test_openapi.py` runs schemathesis against a live agent with it, so a
view that answers something undescribed fails the suite.

It needs authentication like the rest of `/api/v1/` (docs/design.md §10: everything
but the optional leader lookup does): a client that can read the document can
call the API anyway, and an unauthenticated scanner on the LAN learns nothing.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from elections.core.commands import STATION_PATTERN
from elections.core.ownership import ADDRESS_EXECUTORS, VERDICTS
from elections.web.api import TARGETED
from elections.web.auth import api_view
from elections.web.panel.fleet import ALARM_LABELS, DIRECTIONS, SORTS
from elections.web.panel.operate import KINDS
from elections.web.panel.views import PERIODS

JSON = "application/json"


def _t(kind: str, nullable: bool = False, **extra: Any) -> dict[str, Any]:
    return {"type": [kind, "null"] if nullable else kind, **extra}


def _obj(required: dict[str, Any], optional: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "object", "required": sorted(required), "properties": {**required, **(optional or {})}}


S, N, INT, B = "string", "number", "integer", "boolean"
ANY: dict[str, Any] = {}

ERROR = _obj({"error": _t(S), "message": _t(S)})
ALARMS = list(ALARM_LABELS)
SUMMARY = _obj(
    {
        "kmsn": _t(S), "agent": _t(S), "leader": _t(S, True), "has_leader": _t(B),
        "why_no_leader": _t(S, True), "epoch": _t(INT, True), "since": _t(S, True), "lease_status": _t(S),
        "lease_renewed_ago_s": _t(N, True), "lease_expires_in_s": _t(N, True),
        "members_eligible": _t(INT), "members_total": _t(INT), "relay_clients": _t(INT, True),
        "leader_changes_24h": _t(INT), "paused": _t(B, True), "view_age_s": _t(N, True), "view_stale": _t(B),
        "watched": _t(B), "store_reachable": _t(B), "alarms": {"type": "array", "items": _t(S, enum=ALARMS)},
        "security_alarm": _t(B), "refused_records": _t(INT), "fast_takeover": _t(S, True),
    }
)  # fmt: skip
CLOCK = {**_obj({"offset_s": _t(N), "error_s": _t(N), "against": _t(S, enum=["file server", "etcd"]),
                 "vs_this_agent_s": _t(N, True)}), "type": ["object", "null"]}  # fmt: skip
MEMBER = _obj(
    {
        "node": _t(S), "role": _t(S), "eligible": _t(B), "reasons": {"type": "array", "items": _t(S)},
        "heartbeat_age_s": _t(N, True), "priority": ANY, "drain": _t(B), "health": ANY, "version": ANY,
        "ip": _t(S, True), "epoch": ANY, "web_tls_sha256": _t(S, True),
        "clock": CLOCK,
    }
)  # fmt: skip
MEMBERS = {"type": "array", "items": MEMBER}
LEASE = _obj(
    {
        "kmsn": _t(S), "status": _t(S), "detail": _t(S), "store_reachable": _t(B),
        "store": _t("object", True), "record": _t("object", True), "renewed_ago_s": _t(N, True),
        "expires_in_s": _t(N, True), "decision": _t(S),
    }
)  # fmt: skip
PROXY = {
    "oneOf": [
        {"type": "null"},
        _obj(
            {
                "command": _t(S), "accepting": _t(B), "pid": _t(INT, True), "upstream": _t(S),
                "listening": {"type": "array", "items": {"type": "string"}}, "connections": _t(INT),
                "accepted": _t(INT), "refused": {"type": "object"}, "closed": {"type": "object"},
                "bytes_up": _t(INT), "bytes_down": _t(INT), "restarts": _t(INT), "last_error": _t(S, True),
            }
        ),
    ]
}  # fmt: skip
RELAY = {
    "oneOf": [
        {"type": "null"},
        _obj(
            {
                "running": _t(B), "why": _t(S, True), "pid": ANY, "epoch": ANY, "clients": _t(INT),
                "per_station": {"type": "object", "additionalProperties": {"type": "object"}},
                "connections": _t(INT), "messages": _t(INT), "messages_per_s": _t(N, True),
                "deliveries": _t(INT), "bytes": _t(INT), "no_route": _t(INT), "drops": {"type": "object"},
                "listen": {"type": "array", "items": _obj({"address": _t(S), "why": _t(S), "state": _t(S),
                                                           "error": _t(S, True)})},
                "legacy": _t("object", True),
                "kind": {"type": "string", "enum": ["builtin", "exec"]}, "proxy": PROXY,
            },
        ),
    ]
}  # fmt: skip
ADDRESS = _obj(
    {
        "executor": _t(S, enum=list(ADDRESS_EXECUTORS)), "address": _t(S),
        "verdict": _t(S, enum=list(VERDICTS)),
        "expected": _t(S, True), "epoch": _t(INT, True), "holders": {"type": "array", "items": _t(S)},
        "foreign": {"type": "array", "items": _t(S)}, "errors": {"type": "array", "items": _t(S)},
    }
)  # fmt: skip
REPAIR = _obj(
    {
        "executor": _t(S), "address": _t(S), "verb": _t(S), "cause": _t(S), "epoch": _t(INT), "status": _t(S),
        "message": _t(S), "age_s": _t(N, True),
    }
)  # fmt: skip
ADDRESSES = _obj(
    {
        "kmsn": _t(S), "observed_ago_s": _t(N, True), "addresses": {"type": "array", "items": ADDRESS},
        "repairs": {"type": "array", "items": REPAIR},
    }
)  # fmt: skip
SITE = {
    "allOf": [SUMMARY, _obj({"members": MEMBERS, "lease": LEASE, "relay": RELAY, "addresses": ADDRESSES})]
}
PAGE = {
    "page": _t(INT),
    "page_size": _t(INT),
    "pages": _t(INT),
    "count": _t(INT),
    "filters": {"type": "object"},
}
FAILOVER = _obj(
    {
        "kmsn": _t(S), "epoch": _t(INT), "at": _t(S), "from": _t(S, True), "to": _t(S), "reason": _t(S),
        "actor": _t(S, True), "gap_s": _t(N, True), "detail": ANY, "correlation": _t(S, True),
    }
)  # fmt: skip
ACTION = _obj(
    {
        "node": _t(S), "seq": _t(INT), "at": _t(S), "user": _t(S), "client": _t(S), "via": _t(S),
        "action": _t(S), "kmsn": _t(S), "target": _t(S, True), "reason": _t(S),
        "expected_epoch": _t(INT, True), "force": _t(B), "result": _t(S, True), "message": _t(S, True),
        "epoch": _t(INT, True), "correlation": _t(S),
    }
)  # fmt: skip
CHAIN = _obj({"ok": _t(B), "entries": _t(INT), "broken_at": _t(INT, True), "detail": _t(S, True)})
OUTCOME = _obj(
    {
        "command": _t(S, enum=list(KINDS)), "target": _t(S, True), "result": _t(S), "message": _t(S),
        "correlation": _t(S), "epoch": _t(INT, True), "audit_recorded": _t(B),
    }
)  # fmt: skip
_COMMAND_FIELDS = {
    "expected_epoch": _t(
        INT,
        True,
        minimum=0,
        maximum=(1 << 63) - 1,
        description="refused with 409 if the pool's epoch moved on (a form's `null` or empty: none)",
    ),
    "reason": _t(S, description="kept in the audit trail (first 500 characters)"),
    "force": _t(B, description="drain even the last eligible member"),
}
# drain, undrain, promote, forget name a member, unbind a station (api.TARGETED): the body is required.
TARGET_BODY: dict[str, Any] = {
    "type": "object",
    "required": ["target"],
    "properties": {
        "target": _t(S, minLength=1, maxLength=64, description="the member (unbind: the station)"),
        **_COMMAND_FIELDS,
    },
}
POOL_BODY: dict[str, Any] = {"type": "object", "properties": _COMMAND_FIELDS}  # pause, resume: the whole pool
LEADER = _obj(
    {"kmsn": _t(S), "leader": _t(S), "station": _t(S), "ip": _t(S), "port": _t(INT), "epoch": _t(INT),
     "status": _t(S)}
)  # fmt: skip
NO_LEADER = {
    "oneOf": [
        _obj({"kmsn": _t(S), "leader": {"type": "null"}, "status": _t(S)}),  # 404: none, or another KMSN
        _obj({"kmsn": _t(S), "error": _t(S)}),  # 503: the share is unreachable
    ]
}


def _answer(description: str, schema: dict[str, Any], **headers: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"description": description, "content": {JSON: {"schema": schema}}}
    if headers:
        out["headers"] = headers
    return out


AUTH_ERRORS = {
    "401": _answer(
        "no, a bad, revoked or malformed credential (`unauthenticated`, `bad_token`)",
        ERROR,
        **{"WWW-Authenticate": {"schema": _t(S), "required": True}},
    ),
    "405": _answer("another method (`method_not_allowed`; the Allow header names the right one)", ERROR),
}


def _get(summary: str, ok: dict[str, Any], params: list[dict[str, Any]] | None = None,
         **errors: str) -> dict[str, Any]:  # fmt: skip
    responses = {"200": _answer(summary, ok), **{code: _answer(why, ERROR) for code, why in errors.items()}}
    return {
        "get": {"summary": summary, "parameters": params or [], "responses": {**responses, **AUTH_ERRORS}}
    }


def _q(name: str, description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "description": description,
            "schema": schema or _t(S)}  # fmt: skip


KMSN_PARAM = {"name": "kmsn", "in": "path", "required": True, "description": "the pool, e.g. 9999-9999-99-99",
              "schema": _t(S, pattern="^[^/]+$")}  # fmt: skip
PAGING = [
    _q("page", "page number, from 1 (past the last page: 404)", _t(INT)),
    _q("page_size", "rows per page (clamped to 1..500; default 50)", _t(INT)),
]
BAD_PAGE = {
    "400": "page or page_size is not an integer (`bad_request`)",
    "404": "no such page (`no_such_page`)",
}
UNKNOWN = {"404": "this agent does not see that pool (`unknown_pool`), or no such path (`not_found`)"}


def _command(kind: str) -> dict[str, Any]:
    """`POST /api/v1/sites/{kmsn}/<kind>`: its body names a target (api.TARGETED) or none."""
    body = TARGET_BODY if kind in TARGETED else POOL_BODY
    if kind == "unbind":  # a station, member or not: its name's pattern, as core.commands checks it
        target = dict(body["properties"]["target"], pattern=STATION_PATTERN)
        body = dict(body, properties=dict(body["properties"], target=target))
    return {
        "post": {
            "summary": f"{kind}: an operator command, audited like the panel's button (operator role)",
            "parameters": [KMSN_PARAM],
            "requestBody": {
                "required": kind in TARGETED,
                "content": {JSON: {"schema": body}, "application/x-www-form-urlencoded": {"schema": body}},
            },
            "responses": {
                "202": _answer("accepted: the command event is written", OUTCOME),
                "400": _answer("not an object, a field of the wrong type or range, or no target", ERROR),
                "403": _answer(
                    "no permission (`forbidden`), or a session without the CSRF header",
                    {"oneOf": [OUTCOME, ERROR]},
                ),
                "404": _answer("unknown member or pool", {"oneOf": [OUTCOME, ERROR]}),
                "409": _answer("stale epoch: the pool moved on since `expected_epoch`", OUTCOME),
                "422": _answer("refused by the pool check (e.g. draining the last eligible member)", OUTCOME),
                "503": _answer("the share, the pool view or the audit trail is unavailable", OUTCOME),
                **AUTH_ERRORS,
            },
        }
    }


def _site_paths() -> dict[str, Any]:
    """One pool's pages: the site, its members, its addresses, its lease."""
    return {
        "/api/v1/sites/{kmsn}": _get(
            "the site: summary, members, lease, relay", SITE, [KMSN_PARAM], **UNKNOWN
        ),
        "/api/v1/sites/{kmsn}/members": _get(
            "the members, with eligibility and its reasons",
            _obj({"kmsn": _t(S), "epoch": _t(INT, True), "members": MEMBERS}), [KMSN_PARAM], **UNKNOWN,
        ),
        "/api/v1/sites/{kmsn}/addresses": _get(
            "where each address really is against the lease (ADR 0011 phase 4): expected owner, observed "
            "owners, verdict (ok, drift, orphan, conflict, missing, unknown), and the latest repairs",
            ADDRESSES, [KMSN_PARAM], **UNKNOWN,
        ),
        "/api/v1/sites/{kmsn}/lease": _get(
            "the lease as this agent sees it: record, signature status, renewal timing", LEASE, [KMSN_PARAM],
            **UNKNOWN,
        ),
    }  # fmt: skip


def _leader_path() -> dict[str, Any]:
    """`/api/v1/leader`: who leads, with its 404 and 503, and readable without a credential."""
    leader = _get(
        "who leads, from the signed lease", LEADER,
        [_q("kmsn", "the pool (default: this agent's; a watched pool: from this agent's view of it)")],
    )  # fmt: skip
    leader["get"]["responses"]["404"] = _answer(
        "no live leader, or a pool this agent does not see", NO_LEADER
    )
    leader["get"]["responses"]["503"] = _answer("the lease store is unreachable", NO_LEADER)
    leader["get"]["description"] = (
        "Readable without a credential when the agent runs with STK_PUBLIC_LEADER_LOOKUP=1."
    )
    return leader


def _sites_path() -> dict[str, Any]:
    """`/api/v1/sites`: every pool this agent sees, filtered and sorted like the fleet view."""
    return _get(
        "every pool this agent sees: its own and the watched ones ([pool:<KMSN>])",
        _obj({"sites": _t("array", items=SUMMARY)}),
        [
            _q("kmsn", "only pools whose KMSN contains this"),
            _q(
                "sort",
                "order like the fleet view (default: this agent's pool, then the ini's order)",
                _t(S, enum=list(SORTS)),
            ),
            _q(
                "dir",
                "with sort: asc or desc (default: the column's natural way)",
                _t(S, enum=list(DIRECTIONS)),
            ),
        ],
        **{"400": "sort or dir is not one of its values (`bad_request`)"},
    )


def _history_path() -> dict[str, Any]:
    """`/api/v1/history`: failovers, newest first, by page."""
    params = [
        _q("kmsn", "only this pool"),
        _q("period", f"one of {', '.join(PERIODS)} (default and anything else: 7d)"),
        _q("reason", "only this reason, e.g. `lease expired`"),
        *PAGING,
    ]
    return _get(
        "failovers, newest first",
        _obj({**PAGE, "failovers": {"type": "array", "items": FAILOVER}}),
        params,
        **BAD_PAGE,
    )


def _audit_path() -> dict[str, Any]:
    """`/api/v1/audit`: the operator actions and the chains' status, by page."""
    params = [_q(k, f"only rows with this {k}") for k in ("user", "action", "result", "kmsn")] + PAGING
    return _get(
        "the pool's operator actions with their outcome, newest first, and the chains' status",
        _obj(
            {
                **PAGE,
                "chain": CHAIN,
                "node": _t(S),
                "actions": {"type": "array", "items": ACTION},
                "pool_chains": {"type": "object", "additionalProperties": CHAIN},
            }
        ),
        params,
        **BAD_PAGE,
    )


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of /api/v1/."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "stkrelay agent API",
            "version": "1",
            "description": "The panel's data as JSON (docs/panel.md: The admin panel and the JSON API).",
        },
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "`stkuser token NAME`"}
            }
        },
        "security": [{"bearer": []}],
        "paths": {
            "/api/v1/openapi.json": _get("this document", _obj({"openapi": _t(S), "paths": _t("object")})),
            "/api/v1/leader": _leader_path(),
            "/api/v1/sites": _sites_path(),
            **_site_paths(),
            **{f"/api/v1/sites/{{kmsn}}/{kind}": _command(kind) for kind in KINDS},
            "/api/v1/history": _history_path(),
            "/api/v1/audit": _audit_path(),
        },
    }


@api_view()
def openapi_json(request: HttpRequest) -> HttpResponse:
    return JsonResponse(document())
