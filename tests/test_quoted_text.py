"""Text quoted from refused records (a keyless beacon's node name, a forged lease's holder) as every
reader of the refusals gets it: `evidence.printable` keeps `evidence.SAFE` and a bound, whoever
quotes it next (`Refusals.note`, the webhook's `recent_of`, the logs). Agents: tests/test_agents_quoted.py."""

import json

import pytest

from elections.core.beacon_board import BeaconBoard
from elections.core.evidence import DETAIL_CHARS, SAFE, SOURCE_CHARS, UNSAFE, Refusals, printable
from elections.runtime.notify_feed import recent_of, totals_of

KMSN = "9999-9999-99-99"
PHISH = "@channel <https://evil.example|Re-authenticate\u202e now>\n\x1b[31m`*[x](https://e)*`"


def safe(text: str) -> bool:
    return set(text) <= SAFE | {UNSAFE}


@pytest.mark.parametrize(
    "text, shown",
    [
        ("S001", "S001"),  # node names, addresses, paths, times, our words: as they are
        ("beacon from 192.168.1.10", "beacon from 192.168.1.10"),
        ("relay_leader.json", "relay_leader.json"),
        ("events/S002/000000000041.jsonl", "events/S002/000000000041.jsonl"),
        ("2026-12-02T13:38:20+00:00", "2026-12-02T13:38:20+00:00"),
        ("lease has bad signature (claims 'S9', epoch 5)", "lease has bad signature (claims 'S9', epoch 5)"),
        ("@here <!channel> a|b", "?here ??channel? a?b"),  # chat mentions and links
        ("<img src=x onerror=alert(1)>", "?img src=x onerror=alert(1)?"),
        ("[click](https://e)", "?click?(https://e)"),  # markdown links
        ("W:\\socket", "W:\\socket"),
        ("members/\\xff.json", "members/\\xff.json"),  # a repr's escapes stay readable
        ("line\nnext\r\tend", "line?next??end"),  # no line ends, no control characters
        ("abc\u202edef\u2066", "abc\\u202edef\\u2066"),  # bidi overrides: their escapes, inert
        ("S\u0430\u00e9\ud800", "S\\u0430\\xe9\\ud800"),  # look-alike letters, a lone surrogate
    ],
)
def test_quoted_text_keeps_the_safe_alphabet_and_nothing_else(text, shown):
    assert printable(text, 200) == shown


def test_quoted_text_is_bounded():
    assert printable("x" * 10_000, DETAIL_CHARS) == "x" * DETAIL_CHARS


def test_a_refusal_is_kept_safe_and_bounded_whatever_it_quotes():
    r = Refusals()
    r.note(PHISH * 50, "forged", f"bad signature on leader beacon of {PHISH!r}" * 20, "t", 0.0)
    (kept,) = r.to_doc()["recent"]
    assert safe(kept["source"]) and len(kept["source"]) == SOURCE_CHARS
    assert safe(kept["detail"]) and len(kept["detail"]) == DETAIL_CHARS
    assert "Re-authenticate" in kept["detail"]  # still readable: what was refused, in words


def test_a_keyless_beacon_naming_a_phishing_line_is_refused_with_safe_words():
    board = BeaconBoard(KMSN, "k" * 24, "S001")
    doc = {"v": 1, "kmsn": KMSN, "node": PHISH, "ip": "10.0.0.9", "port": 9530, "role": "leader",
           "epoch": 7, "renew_seq": 1, "boot": "0" * 16, "seq": 1, "sig": "00" * 32}  # fmt: skip
    assert board.receive(json.dumps(doc).encode(), "10.0.0.9", 1.0, None) is None
    (kept,) = board.refusals.to_doc()["recent"]
    assert kept["cause"] == "forged" and kept["source"] == "beacon from 10.0.0.9"
    assert safe(kept["detail"]) and "?channel ?https://evil.example?Re-authenticate" in kept["detail"]


def test_the_webhook_quotes_a_view_s_refusals_safely_even_when_the_file_holds_anything():
    """pool.json is the agent's own file, read again by the feed: its refusals are quoted
    through the same alphabet (a second wall) and a field that is not text is dropped."""
    view = {"counts": {"forged": 3, PHISH: 2},
            "recent": [{"source": PHISH, "cause": "forged<b>", "detail": PHISH * 20, "count": 3,
                        "last_at": "2026-12-02T13:38:20+00:00"},
                       {"source": ["x"], "cause": None, "detail": {"a": PHISH}, "count": "9"}]}  # fmt: skip
    first, second = recent_of(view)
    assert all(safe(first[k]) for k in ("source", "cause", "detail", "last_at"))
    assert len(first["detail"]) == DETAIL_CHARS and first["count"] == 3
    assert second == {"source": "", "cause": "", "detail": "", "count": 0, "last_at": ""}
    assert all(safe(cause) for cause in totals_of(view))
