"""LOG_FORMAT: `text` keeps the agent's lines as they were; `json` makes every line of
every process of the agent one JSON object (time, level, node, component, message,
event/fields). The access log in DATA_DIR rotates by size (LOG_MAX_BYTES, LOG_BACKUPS)."""

from __future__ import annotations

import io
import json
import logging

import pytest
from harness import KMSN, live_lease, wait_until

from elections.runtime.supervisor import Supervisor
from stkconfig.logs import JsonFormatter, SafeTextFormatter, as_json_line, logging_config
from stkrelay import config
from stkrelay.web import RotatingLog

KEYS = {"time", "level", "node", "kmsn", "component", "message"}
CHILDREN = {"agent", "web", "worker", "relay"}  # beat is a thread of the worker


def _record(msg: str, *args, **extra) -> logging.LogRecord:  # type: ignore[no-untyped-def]
    record = logging.LogRecord("stkrelay.agent", logging.WARNING, __file__, 1, msg, args, None)
    record.__dict__.update(extra)
    return record


def test_a_json_record_names_time_level_node_component_event_and_fields():
    line = JsonFormatter("S001", "worker", kmsn="1234-5678-90-12").format(
        _record("lost %s", "epoch 7", event="stepped_down", epoch=7)
    )
    doc = json.loads(line)
    assert doc["kmsn"] == "1234-5678-90-12"
    assert set(doc) >= KEYS and "\n" not in line
    assert (doc["level"], doc["node"], doc["component"], doc["logger"]) == ("warning", "S001", "worker",
                                                                            "stkrelay.agent")  # fmt: skip
    assert (doc["message"], doc["event"], doc["fields"]) == ("lost epoch 7", "stepped_down", {"epoch": 7})
    assert doc["time"].endswith("Z")


def test_an_exception_stays_inside_its_one_line():
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord(
            "x", logging.ERROR, __file__, 1, "failed", (), __import__("sys").exc_info()
        )
    line = JsonFormatter("S001", "web").format(record)
    assert "\n" not in line and "ValueError: boom" in json.loads(line)["exc"]


def test_a_childs_plain_line_is_wrapped_and_its_json_line_completed():
    wrapped = json.loads(as_json_line("[2026-01-01 10:00:00: WARNING/MainProcess] slow\n", "S002", "worker"))
    assert (wrapped["level"], wrapped["node"], wrapped["component"]) == ("warning", "S002", "worker")
    assert wrapped["message"] == "[2026-01-01 10:00:00: WARNING/MainProcess] slow"
    assert json.loads(as_json_line("    . logfile -> [stderr]@%WARNING", "S002", "beat"))["level"] == "info"
    own = json.loads(
        as_json_line('{"time": "t", "level": "info", "message": "m"}', "S002", "relay", kmsn="K1")
    )
    assert own == {
        "time": "t",
        "level": "info",
        "message": "m",
        "node": "S002",
        "kmsn": "K1",
        "component": "relay",
    }
    for odd in ("{not json", "[1, 2]", "{" * 100_000, ""):
        assert set(json.loads(as_json_line(odd, "S002", "web"))) >= KEYS


def test_the_supervisor_writes_its_own_and_its_childrens_lines_in_the_chosen_format():
    text, out = io.StringIO(), io.StringIO()
    Supervisor([], "/nonexistent", {}, lambda s: True, out=text).say("web", "hello\n")
    Supervisor([], "/nonexistent", {}, lambda s: True, out=out, log_format="json", node="S001").say(
        "web", "hi"
    )
    assert text.getvalue() == "[web] hello\n"
    doc = json.loads(out.getvalue())
    assert (doc["component"], doc["node"], doc["message"]) == ("web", "S001", "hi")


def test_text_is_the_default_and_keeps_the_historical_logging_config():
    assert config.load(env={}, check_dirs=False).log_format == "text"
    historical = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "plain": {"()": SafeTextFormatter, "format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}
        },
        "filters": {
            "drop_throttled": {"()": "stkconfig.drop_throttled.DropThrottled"},
            "quiet_refusals": {"()": "elections.web.body_limit.QuietRefusals"},
        },
        "handlers": {
            "console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["drop_throttled"]}
        },
        "loggers": {
            "stkrelay": {"handlers": ["console"], "level": "INFO", "propagate": False},
            "django": {"handlers": ["console"], "level": "WARNING"},
            "django.request": {"filters": ["quiet_refusals"]},
            "django.security.RequestDataTooBig": {"filters": ["quiet_refusals"]},
        },
    }
    assert logging_config("text", "S001", "web") == historical
    as_json = logging_config("json", "S001", "web")
    assert as_json["handlers"]["console"]["formatter"] == "json" and as_json["root"]["handlers"] == [
        "console"
    ]


def test_a_log_line_never_carries_a_control_or_bidi_character_from_outside_in_either_format():
    hostile = "events/\x1b[2J\x1b]0;pwned\x07S9\u202e.jsonl\nFAKE 00:00 INFO: all good"
    record = logging.LogRecord(
        "stkrelay.eventlog", logging.ERROR, __file__, 1, "ignoring %s", (hostile,), None
    )
    text = SafeTextFormatter("%(levelname)s %(message)s").format(record)
    shown = "events/\\u001b[2J\\u001b]0;pwned\\u0007S9\\u202e.jsonl\\u000aFAKE 00:00 INFO: all good"
    assert text == f"ERROR ignoring {shown}"
    line = JsonFormatter("S001", "worker").format(record)
    assert "\x1b" not in line and "\u202e" not in line and "\n" not in line
    assert json.loads(line)["message"] == "ignoring " + hostile  # the same JSON, escaped
    wrapped = as_json_line("child says \x9b31m\u2066hi", "S001", "relay")
    assert "\x9b" not in wrapped and "\u2066" not in wrapped
    assert json.loads(wrapped)["message"] == "child says \x9b31m\u2066hi"


def test_the_access_log_writes_a_requested_path_escaped(tmp_path):
    from stkrelay.web import RotatingLog

    log = RotatingLog(str(tmp_path / "access.log"), 1 << 20, 1)
    log.write('127.0.0.1 - - [01/Jan/2026:10:00:00] "GET /\x1b[2J\u202ex HTTP/1.1" 404 9\n')
    log.flush()
    assert (tmp_path / "access.log").read_text() == (
        '127.0.0.1 - - [01/Jan/2026:10:00:00] "GET /\\u001b[2J\\u202ex HTTP/1.1" 404 9\n'
    )


@pytest.mark.parametrize("value", ["xml", "JSONL", "1"])
def test_an_unknown_log_format_stops_start_up_naming_the_key(value):
    problems = config.load(env={"STK_LOG_FORMAT": value}, check_dirs=False).problems
    assert [(p.id, p.key) for p in problems if p.key == "LOG_FORMAT"] == [("stkrelay.E021", "LOG_FORMAT")]


def test_the_access_log_rotates_by_size_keeping_its_backups(tmp_path):
    log = RotatingLog(str(tmp_path / "access.log"), max_bytes=4096, backups=2)
    for i in range(400):
        log.write(f'127.0.0.1 - - [01/Jan/2026:10:00:00] "GET /healthz {i}" 200 42\n')
    log.flush()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["access.log", "access.log.1", "access.log.2"]
    assert all((tmp_path / n).stat().st_size <= 4096 for n in names)
    assert "/healthz 399" in (tmp_path / "access.log").read_text()


# -- real agents -------------------------------------------------------------------------------------


def _get(agent, path: str) -> int:  # type: ignore[no-untyped-def]
    with agent.urlopen(path) as r:
        return r.status


def _components(lines: list[str]) -> set[str]:
    return {json.loads(line)["component"] for line in lines}


@pytest.mark.agents
def test_a_json_agent_writes_one_object_per_line_from_every_process_and_rotates_its_access_log(site_factory):
    site = site_factory(n=1, extra={"LOG_FORMAT": "json", "LOG_MAX_BYTES": "4096", "LOG_BACKUPS": "2"})
    site.start()
    (agent,) = site.agents
    site.wait_leader(60)
    wait_until(lambda: agent.data_dir.joinpath("relay.json").exists(), 30, "the relay's status")
    for _ in range(300):  # ~55 bytes a line: several rotations of 4 KiB
        assert _get(agent, "/healthz") == 200

    def every_child_spoke() -> list[str] | None:
        lines = [ln for ln in agent.log().splitlines() if ln.strip()]
        return lines if _components(lines) >= CHILDREN else None

    lines = wait_until(every_child_spoke, 30, "a line from every child")
    for line in lines:
        doc = json.loads(line)
        assert isinstance(doc, dict) and set(doc) >= KEYS, line
        assert doc["node"] == "S001" and doc["kmsn"] == KMSN, line
    # The children log through the JSON formatter themselves (a `logger`), not only wrapped by runagent.
    own = {json.loads(ln)["component"] for ln in lines if "logger" in json.loads(ln)}
    assert {"web", "worker"} <= own, own
    rotated = sorted(p.name for p in agent.data_dir.glob("access.log*"))
    assert rotated == ["access.log", "access.log.1", "access.log.2"]
    assert all((agent.data_dir / n).stat().st_size <= 4096 for n in rotated)
    assert live_lease(site.lease_dir) is not None


@pytest.mark.agents
def test_a_text_agent_keeps_its_prefixed_lines(site_factory):
    site = site_factory(n=1)
    site.start()
    (agent,) = site.agents
    site.wait_leader(60)

    def prefixed() -> list[str] | None:
        lines = [ln for ln in agent.log().splitlines() if ln.strip()]
        heads = {ln.split("]")[0].lstrip("[") for ln in lines if ln.startswith("[")}
        return lines if {"agent", "web", "worker"} <= heads else None

    lines = wait_until(prefixed, 30, "prefixed lines from the children")
    assert lines[0].startswith("stkrelay agent S001 of ")
    assert not any(ln.startswith("{") for ln in lines)
