"""The cloud nodes' directory of tunnels (issue 26 part 3) on a real 3-member etcd:
compare-and-set on the epoch, an etcd lease per entry, and the history in etcd's revisions."""

import itertools
import json

import pytest
from harness import wait_until

from elections.core.untrusted import Untrusted
from elections.ports.etcd.client import EtcdClient, b64, put, unb64
from relay.cloud.directory import TunnelDirectory, may_claim, read_entry
from stkconfig.etcd_endpoints import parse_endpoints

KMSN = "9999-9999-99-99"


@pytest.mark.parametrize(
    "held, node, epoch, ok",
    [(None, "a", 1, True), (("a", 7), "b", 8, True), (("a", 7), "b", 7, False), (("a", 7), "a", 7, True),
     (("a", 7), "a", 6, False)],
)  # fmt: skip
def test_a_node_claims_a_site_only_above_the_held_epoch_or_to_refresh_its_own(held, node, epoch, ok):
    assert may_claim(held, node, epoch) is ok


@pytest.mark.parametrize("raw", [b"", b"[]", b'{"node": "a"}', b'{"node": 1, "epoch": 2}', b"{" * 5000,
                                 b'{"node": "a", "epoch": true}'])  # fmt: skip
def test_an_entry_that_is_not_evidence_is_untrusted(raw):
    with pytest.raises(Untrusted):
        read_entry(raw)


def test_nodes_race_for_a_site_and_the_history_shows_one_holder_per_epoch(etcd_cluster, request):
    prefix = f"/stk-cloud-test/{request.node.name}/"
    client = EtcdClient(parse_endpoints(etcd_cluster.endpoints), 3.0)
    a, b, c = (TunnelDirectory(client, prefix, n, ttl=2) for n in ("a", "b", "c"))
    start = int(client.range(a.key(KMSN))["header"]["revision"])
    assert a.claim(KMSN, 7)
    assert not b.claim(KMSN, 7)  # the same epoch from another node: never two tunnels
    assert a.claim(KMSN, 7)  # a refresh of its own
    assert b.claim(KMSN, 8) and not a.claim(KMSN, 7)
    assert a.entry(KMSN)[0] == ("b", 8)
    # b dies (its leases are never kept alive again): its entry expires and c takes the site.
    wait_until(lambda: a.entry(KMSN)[0] is None, 10, "the dead node's entry to expire")
    assert c.claim(KMSN, 8) and c.keepalive() == []
    # Garbage written under the prefix is never overwritten by a claim.
    client.txn([], [put(prefix + "tunnels/junk", b"not json")])
    with pytest.raises(Untrusted):
        c.claim("junk", 1)
    # The history: every revision of the site's key, one holder per epoch, epochs never going back.
    key = a.key(KMSN)
    last = int(client.range(key)["kvs"][0]["mod_revision"])
    seen = []
    for rev in range(start, last + 1):
        kvs = client.range(key, revision=rev).get("kvs") or []
        if kvs and int(kvs[0]["mod_revision"]) == rev:
            seen.append(tuple(json.loads(unb64(kvs[0]["value"])).values()))
    assert seen[-1] == ("c", 8)
    assert all(x[1] <= y[1] for x, y in itertools.pairwise(seen))
    by_epoch = {}
    for node, epoch in seen:
        by_epoch.setdefault(epoch, set()).add(node)
    assert by_epoch[7] == {"a"} and by_epoch[8] == {"b", "c"}  # c only after b's entry expired
    client.txn([], [{"request_delete_range": {"key": b64(prefix), "range_end": b64(prefix[:-1] + "0")}}])


def test_one_request_keeps_many_leases_alive_and_names_the_gone_ones(etcd_cluster):
    from relay.cloud.keepalive import keepalive_many

    client = EtcdClient(parse_endpoints(etcd_cluster.endpoints), 3.0)
    leases = [client.grant(5)[0] for _ in range(30)]
    client.revoke(leases[7])
    ttls = keepalive_many(client, leases)
    assert set(ttls) == set(leases) and ttls[leases[7]] <= 0
    assert all(ttls[lease] > 0 for lease in leases if lease != leases[7])
    for lease in leases:
        client.revoke(lease)


@pytest.mark.parametrize(
    "raw",
    [b"not json\n", b'{"result": 1}\n', b'{"result": {"ID": "1", "TTL": "5"}}\n',  # lease 2 not answered
     b"[]\n"],
)  # fmt: skip
def test_a_keepalive_answer_that_is_not_evidence_fails_the_round(raw):
    from relay.cloud.keepalive import _parse

    with pytest.raises(ValueError):
        _parse(raw, [1, 2])
