"""The notification keys (E180-E183): each bad value refused with its id at start, good ones parsed."""

import pytest
from test_config import problems, write_ini

from stkrelay.config import load

SECRET = "a-webhook-secret-of-some-length"
PIN = "ab" * 32


@pytest.mark.parametrize(
    "over, expected",
    [
        ({"ON_ROLE_CHANGE": "/nonexistent/stk-role"}, ("stkrelay.E180", "ON_ROLE_CHANGE")),
        ({"ON_ROLE_CHANGE": "'unclosed"}, ("stkrelay.E180", "ON_ROLE_CHANGE")),
        ({"ON_ROLE_CHANGE_TIMEOUT": "0"}, ("stkrelay.E011", "ON_ROLE_CHANGE_TIMEOUT")),
        ({"WEBHOOK_URL": "ftp://example.net/x", "WEBHOOK_SECRET": SECRET}, ("stkrelay.E181", "WEBHOOK_URL")),
        ({"WEBHOOK_URL": "https:///nohost", "WEBHOOK_SECRET": SECRET}, ("stkrelay.E181", "WEBHOOK_URL")),
        ({"WEBHOOK_URL": "http://h:99999/", "WEBHOOK_SECRET": SECRET}, ("stkrelay.E181", "WEBHOOK_URL")),
        ({"WEBHOOK_URL": "https://h/x"}, ("stkrelay.E182", "WEBHOOK_SECRET")),
        ({"WEBHOOK_URL": "https://h/x", "WEBHOOK_SECRET": "short"}, ("stkrelay.E182", "WEBHOOK_SECRET")),
        ({"WEBHOOK_URL": "https://h/x", "WEBHOOK_SECRET_FILE": "/nonexistent/s"},
         ("stkrelay.E182", "WEBHOOK_SECRET_FILE")),
        ({"WEBHOOK_URL": "https://h/x", "WEBHOOK_SECRET": SECRET, "WEBHOOK_PINS": "zz"},
         ("stkrelay.E183", "WEBHOOK_PINS")),
        ({"WEBHOOK_URL": "http://h/x", "WEBHOOK_SECRET": SECRET, "WEBHOOK_PINS": PIN},
         ("stkrelay.E183", "WEBHOOK_PINS")),
        ({"WEBHOOK_QUEUE": "0"}, ("stkrelay.E011", "WEBHOOK_QUEUE")),
        ({"WEBHOOK_SECURITY_EVERY": "0.5"}, ("stkrelay.E011", "WEBHOOK_SECURITY_EVERY")),
        ({"WEBHOOK_SECURITY_EVERY": "3601"}, ("stkrelay.E011", "WEBHOOK_SECURITY_EVERY")),
    ],
)  # fmt: skip
def test_each_bad_notification_value_is_refused_with_its_id(tmp_path, over, expected):
    cfg = load(str(write_ini(tmp_path, **over)), env={})
    assert expected in problems(cfg), [p.line() for p in cfg.problems]


def test_good_notification_keys_are_parsed(tmp_path):
    secret = tmp_path / "hook.secret"
    secret.write_text(SECRET + "\n")
    ini = write_ini(tmp_path, ON_ROLE_CHANGE="/bin/echo role", ON_ROLE_CHANGE_TIMEOUT="2.5",
                    WEBHOOK_URL="https://hooks.example.net/stk", WEBHOOK_SECRET_FILE=str(secret),
                    WEBHOOK_PINS=PIN, WEBHOOK_QUEUE="10", WEBHOOK_SECURITY_EVERY="5")  # fmt: skip
    cfg = load(str(ini), env={})
    assert cfg.problems == []
    n = cfg.notify
    assert (n.role_cmd, n.role_timeout, n.webhook_secret, n.webhook_queue) == (
        ("/bin/echo", "role"),
        2.5,
        SECRET,
        10,
    )
    assert n.webhook_pins == frozenset({PIN}) and n.configured and n.webhook_security_every == 5.0


def test_no_notification_keys_no_notifier(tmp_path):
    assert not load(str(write_ini(tmp_path)), env={}).notify.configured
