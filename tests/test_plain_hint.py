"""`stkrelay.plain_hint.hint`: the plain answer of the HTTPS port (issue 42)."""

from stkrelay.plain_hint import hint


def test_the_hint_redirects_to_the_same_path_on_this_agents_own_https_address():
    out = hint("192.168.1.10", 8000, b"GET /audit/?page=2 HTTP/1.1")
    head, body = out.split(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 301 ") and b"Location: https://192.168.1.10:8000/audit/?page=2" in head
    assert body == b"This port speaks HTTPS: https://192.168.1.10:8000/audit/?page=2\n"


def test_a_first_line_that_is_no_request_or_no_path_goes_to_the_root_and_ipv6_is_bracketed():
    assert b"Location: https://[fd00::1]:8000/\r\n" in hint("fd00::1", 8000, b"\x00\x01garbage")
    assert b"Location: https://10.0.0.1:8000/\r\n" in hint("10.0.0.1", 8000, b"GET http://x/ HTTP/1.1")
    assert b"\r\nX" not in hint("10.0.0.1", 8000, b"GET /a\r\nX-Evil: 1 HTTP/1.1")  # no header injection
