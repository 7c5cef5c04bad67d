"""/api/v1/openapi.json describes the API: schemathesis (pinned in requirements-dev.lock)
generates requests from it, valid and invalid, against a live agent (a real `runagent`
site) with a bearer token from `stkuser token`, and every answer must be no 5xx and
match the document: status code, content type, headers and body schema. Auth is
checked too (`ignored_auth`: the same request without the token must be refused).
Bounded: a few examples per operation and mode, derandomized, no shrinking."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections import Counter

import pytest
import schemathesis
from harness import KMSN, ROOT, wait_until
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from elections.core.commands import KINDS
from elections.ports.local.webcert import CERT_NAME

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance, ignored_auth]  # fmt: skip
EXAMPLES = 4  # per operation and mode: 15 operations x 2 modes, well under a minute here
# Every path of the document but the document's own (schemathesis leaves the one it loaded out).
OPERATIONS = {"GET /api/v1/leader", "GET /api/v1/sites",
              "GET /api/v1/sites/{kmsn}", "GET /api/v1/sites/{kmsn}/members",
              "GET /api/v1/sites/{kmsn}/lease", "GET /api/v1/sites/{kmsn}/addresses",
              "GET /api/v1/history", "GET /api/v1/audit",
              *(f"POST /api/v1/sites/{{kmsn}}/{kind}" for kind in KINDS)}  # fmt: skip
COMMANDS = {op for op in OPERATIONS if op.startswith("POST ")}


def _manage(agent, *args: str, stdin: str = "") -> str:  # type: ignore[no-untyped-def]
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), *args], input=stdin, cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin", "STK_INI": str(agent.ini)}, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture
def live_api(site_factory):
    site = site_factory(n=1)
    site.start()
    (agent,) = site.agents
    site.wait_leader(60)
    _manage(agent, "stkuser", "add", "bot", "--role", "operator", stdin="a-long-pass-phrase-9\n")
    token = _manage(agent, "stkuser", "token", "bot")
    wait_until(lambda: (agent.data_dir / "pool.json").exists(), 30, "the agent's pool view")
    return agent, {"Authorization": f"Bearer {token}"}


@pytest.mark.agents
def test_the_document_needs_a_token_like_the_rest_of_the_api(live_api):
    agent, auth = live_api
    with pytest.raises(urllib.request.HTTPError) as refused:
        agent.urlopen("/api/v1/openapi.json", timeout=10)
    assert refused.value.code == 401
    req = urllib.request.Request(f"{agent.web_url}/api/v1/openapi.json", headers=auth)
    with agent.urlopen(req, timeout=10) as r:
        doc = json.loads(r.read())
    assert (
        doc["openapi"].startswith("3.1")
        and doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    )


def _runs(op):  # type: ignore[no-untyped-def]
    """(mode, fixed path parameters) to run `op` with: generated paths in both modes, and, for the
    paths that name a pool, this agent's own pool too (a generated KMSN is always an unknown pool)."""
    runs = [(schemathesis.GenerationMode.POSITIVE, None), (schemathesis.GenerationMode.NEGATIVE, None)]
    if "{kmsn}" in op.path:
        runs.append((schemathesis.GenerationMode.POSITIVE, {"kmsn": KMSN}))
    return runs


@pytest.mark.agents
@pytest.mark.long
def test_every_answer_of_the_live_api_matches_its_openapi_document(live_api):
    agent, auth = live_api
    base, verify = agent.web_url, str(agent.data_dir / CERT_NAME)  # its own certificate as the CA file
    agent.web_ssl()
    schema = schemathesis.openapi.from_url(
        f"{base}/api/v1/openapi.json", headers=dict(auth), timeout=10, verify=verify
    )
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.label for op in operations} == OPERATIONS
    started, failures = time.monotonic(), []
    statuses: dict[str, Counter[int]] = {op.label: Counter() for op in operations}
    for op in operations:
        for mode, path in _runs(op):

            @given(case=op.as_strategy(generation_mode=mode, path_parameters=path))
            @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                      phases=[Phase.explicit, Phase.generate],
                      suppress_health_check=list(HealthCheck))  # fmt: skip
            def run(case):  # type: ignore[no-untyped-def]
                response = case.call_and_validate(
                    base_url=base, headers=auth, checks=CHECKS, timeout=10, verify=verify
                )
                statuses[case.operation.label][response.status_code] += 1

            try:
                run()
            except Exception as exc:  # one failing operation must not hide the others
                failures.append(f"{op.label} ({mode.value}, path {path}): {exc}")
    assert failures == [], "\n\n".join(failures)
    # It reached the real answers, not only errors: the pool's pages and an accepted command.
    for label in OPERATIONS - COMMANDS:
        assert statuses[label][200] > 0, (label, statuses[label])
    assert sum(statuses[label][202] for label in COMMANDS) > 0, statuses
    assert time.monotonic() - started < 90
