"""The OpenAPI document against the code it describes: every /api/v1/ route has its
paths in the document and every path of the document is served (with the methods the
view takes); what the document declares (the `sort`/`dir` enums, a command's required
`target`, `expected_epoch`'s null in a form) is what the views enforce."""

from __future__ import annotations

import re

import pytest
import test_panel_support
from test_api import API, bearer, post_json, token_for
from test_panel_support import KMSN, client_for, member, write_pool

dj = test_panel_support.dj  # the fixture, under its name here


def _routes() -> set[str]:
    """The API's paths as Django routes them, `<str:x>` as `{x}`; `{kind}` is one path per command."""
    from django.urls import URLPattern

    from elections.core.commands import KINDS
    from stkrelay.urls import urlpatterns

    out = set()
    for p in urlpatterns:
        assert isinstance(p, URLPattern)
        route = str(p.pattern)
        if not route.startswith("api/v1/") or p.name == "api-not-found":
            continue
        path = "/" + re.sub(r"<str:(\w+)>", r"{\1}", route)
        out |= {path.replace("{kind}", k) for k in KINDS} if "{kind}" in path else {path}
    return out


def test_every_route_has_its_path_in_the_document_and_no_path_is_unserved(dj):
    from elections.web.openapi import document

    assert set(document()["paths"]) == _routes()


def test_every_operation_is_answered_and_another_method_is_405(dj):
    from elections.web.openapi import document

    write_pool(dj["data_dir"], leader="S001", epoch=7, members={"S001": member(), "S002": member()})
    auth = bearer(token_for("bot"))
    c = client_for()
    for path, ops in document()["paths"].items():
        url = path.replace("{kmsn}", KMSN)
        (method,) = ops
        other = c.get if method == "post" else c.post
        assert other(url, **auth).status_code == 405, path
        answer = getattr(c, method)(url, **auth)
        assert str(answer.status_code) in ops[method]["responses"], (path, answer.status_code)


def test_the_sort_and_dir_enums_are_enforced(dj):
    from elections.web.openapi import document

    params = {p["name"]: p for p in document()["paths"]["/api/v1/sites"]["get"]["parameters"]}
    c, auth = client_for(), bearer(token_for("bot", "viewer"))
    write_pool(dj["data_dir"], leader="S001", epoch=7)
    for name in ("sort", "dir"):
        for value in params[name]["schema"]["enum"]:
            assert c.get(f"{API}/sites", {name: value}, **auth).status_code == 200, (name, value)
        refused = c.get(f"{API}/sites", {name: "sideways"}, **auth)
        assert refused.status_code == 400 and refused.json()["error"] == "bad_request", name


@pytest.mark.parametrize("kind", ["drain", "undrain", "promote", "forget", "unbind"])
def test_a_command_that_needs_a_target_declares_it_and_refuses_a_body_without_it(dj, kind):
    from elections.web.openapi import document

    op = document()["paths"][f"/api/v1/sites/{{kmsn}}/{kind}"]["post"]
    assert op["requestBody"]["required"] is True
    for schema in (c["schema"] for c in op["requestBody"]["content"].values()):
        assert schema["required"] == ["target"]
    write_pool(dj["data_dir"], leader="S001", epoch=7)
    c, auth = client_for(), bearer(token_for("bot"))
    for body in ({}, {"target": ""}, {"reason": "no one"}):
        answer = post_json(c, f"{API}/sites/{KMSN}/{kind}", body, **auth)
        assert answer.status_code == 400 and answer.json()["error"] == "bad_request", (kind, body)


@pytest.mark.parametrize("kind", ["pause", "resume"])
def test_a_pool_command_needs_no_body(dj, kind):
    from elections.web.openapi import document

    op = document()["paths"][f"/api/v1/sites/{{kmsn}}/{kind}"]["post"]
    assert op["requestBody"]["required"] is False
    assert "target" not in op["requestBody"]["content"]["application/json"]["schema"]["properties"]
    write_pool(dj["data_dir"], leader="S001", epoch=7)
    answer = client_for().post(f"{API}/sites/{KMSN}/{kind}", **bearer(token_for("bot")))
    assert answer.status_code in (202, 422), answer.content  # resume of an unpaused pool: refused


def test_a_forms_null_or_empty_expected_epoch_is_no_expectation_and_a_word_is_400(dj):
    write_pool(dj["data_dir"], leader="S001", epoch=7, members={"S001": member(), "S002": member()})
    c, auth, url = client_for(), bearer(token_for("bot")), f"{API}/sites/{KMSN}/drain"
    for value in ("null", ""):
        answer = c.post(url, {"target": "S002", "expected_epoch": value}, **auth)
        assert answer.status_code == 202, (value, answer.content)
        c.post(f"{API}/sites/{KMSN}/undrain", {"target": "S002"}, **auth)
    assert c.post(url, {"target": "S002", "expected_epoch": "seven"}, **auth).status_code == 400
    assert c.post(url, {"target": "S002", "expected_epoch": "6"}, **auth).status_code == 409
