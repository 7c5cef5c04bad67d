"""The bound on what the web process holds for one WebSocket (relay/web/ws_flow.py): bytes
held and the messages they belong to, with the server's held bytes given as numbers."""

from relay.web.ws_flow import BUFFER_BYTES, BUFFER_MESSAGES, Backlog, SendBound


def bound(held: list[int], inbound: int = 0, max_bytes: int = 10_000, max_messages: int = 4) -> SendBound:
    return SendBound(Backlog(lambda: held[0], lambda: inbound), max_bytes, max_messages)


def test_a_reader_that_keeps_up_is_never_refused():
    held = [0]
    b = bound(held)
    for _ in range(1000):
        assert b.before_send(2_000) is None  # every message written out before the next
    assert b.held_messages == 1


def test_messages_held_are_the_newest_whose_sizes_cover_the_bytes_held():
    held = [0]
    b = bound(held, max_messages=3)
    outcomes = []
    for _ in range(3):  # the reader reads nothing: each message stays held (with its header)
        outcomes.append(b.before_send(100))
        held[0] += 100 + SendBound.FRAME_HEADER
    assert outcomes == [None, None, None] and b.held_messages == 3
    held[0] = 150  # the first message went out, part of the second too
    assert b.before_send(100) is None and b.held_messages == 3
    held[0] += 110  # nothing more went out: 3 held, the bound
    assert b.before_send(100) == BUFFER_MESSAGES


def test_too_many_bytes_held_is_too_slow_whatever_the_count():
    held = [10_001]
    assert bound(held).before_send(1) == BUFFER_BYTES


def test_without_a_server_that_says_what_it_holds_nothing_is_refused():
    b = SendBound(None, 1, 1)
    assert all(b.before_send(1 << 20) is None for _ in range(10)) and not b.inbound_full()


def test_a_client_that_sends_faster_than_the_relay_takes_fills_the_inbound_bound():
    assert bound([0], inbound=4).inbound_full() and not bound([0], inbound=3).inbound_full()
