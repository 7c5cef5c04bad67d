"""The AWS executor against moto in server mode: a real HTTP EC2 endpoint on
127.0.0.1, started as a subprocess, with dummy credentials."""

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import free_port

pytest.importorskip("boto3", reason="boto3 is not installed (pip install boto3)")

from elections.core.actions import ActionPlan, action_config, demotion_plan, plan_for
from elections.executors import APPLIED, FAILED, FENCED, ActionFence, AwsExecutor, RelayExecutor, run_plan
from elections.executors.aws import boto3_client

REGION = "eu-west-1"
SEIZED = "192.0.2.50"


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    exe = Path(sys.executable).with_name("moto_server")
    if not exe.exists():
        pytest.skip("moto_server is not installed (pip install 'moto[server]')")
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=out)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"moto_server did not start on {url}: {log.read_text()[-2000:]}")
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def aws_env(monkeypatch):
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")


@pytest.fixture
def vpc(moto, aws_env):
    """A fresh VPC with one subnet and two ENIs, A and B (TEST-NET-1 addresses:
    they exist only in moto's memory)."""
    ec2 = boto3_client(REGION, moto)
    vpc_id = ec2.create_vpc(CidrBlock="192.0.2.0/24")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc_id, CidrBlock="192.0.2.0/25")["Subnet"]["SubnetId"]
    eni_a = ec2.create_network_interface(SubnetId=subnet, PrivateIpAddress="192.0.2.10")["NetworkInterface"]
    eni_b = ec2.create_network_interface(SubnetId=subnet, PrivateIpAddress="192.0.2.11")["NetworkInterface"]
    return ec2, eni_a["NetworkInterfaceId"], eni_b["NetworkInterfaceId"]


class Node:
    """One agent: its config, executors (EC2 calls recorded), and held epoch."""

    def __init__(self, name, eni, endpoint, tmp_path):
        self.name = name
        self.held = None
        self.calls = []
        self.cfg, problems = action_config(
            {"AWS_ENI_ID": eni, "AWS_PRIVATE_IP": SEIZED, "AWS_REGION": REGION, "AWS_ENDPOINT_URL": endpoint}
        )
        assert problems == []
        data = tmp_path / name
        data.mkdir()
        self.executors = [RelayExecutor(data), AwsExecutor(client_factory=self._client)]
        self.gate = ActionFence(lambda: self.held)

    def _client(self, region, url):
        client = boto3_client(region, url)

        def note(params, model, **kwargs):
            self.calls.append((model.name, dict(params)))

        client.meta.events.register("provide-client-params.ec2.*", note)
        return client

    def writes(self):
        return [(name, p) for name, p in self.calls if not name.startswith("Describe")]

    def elected(self, epoch):
        return run_plan(plan_for(epoch, self.name, self.cfg), self.executors, self.gate, None)

    def demoted(self, epoch):
        return run_plan(demotion_plan(epoch, self.name, self.cfg), self.executors, self.gate, None)


def secondary_ips(ec2, eni):
    [nic] = ec2.describe_network_interfaces(NetworkInterfaceIds=[eni])["NetworkInterfaces"]
    return {i["PrivateIpAddress"] for i in nic["PrivateIpAddresses"] if not i.get("Primary")}


def statuses(outcomes):
    return [o.status for o in outcomes], [o.line() for o in outcomes]


def test_it_seizes_the_secondary_ip_for_b_at_the_next_epoch_with_allow_reassignment(vpc, moto, tmp_path):
    ec2, eni_a, eni_b = vpc
    a, b = Node("a", eni_a, moto, tmp_path), Node("b", eni_b, moto, tmp_path)

    a.held = 7
    assert statuses(a.elected(7))[0] == [APPLIED, APPLIED]
    assert SEIZED in secondary_ips(ec2, eni_a)

    # A dies without releasing; B wins epoch 8 and seizes the address.
    a.held, b.held = None, 8
    out = b.elected(8)
    assert statuses(out)[0] == [APPLIED, APPLIED], statuses(out)[1]
    assert "confirmed by DescribeNetworkInterfaces" in out[1].message
    assert SEIZED in secondary_ips(ec2, eni_b)
    assert b.writes() == [
        ("AssignPrivateIpAddresses",
         {"NetworkInterfaceId": eni_b, "PrivateIpAddresses": [SEIZED], "AllowReassignment": True}),
    ]  # fmt: skip
    # (Real EC2 moves the address off A here; moto 5 does not model the move, so A is not asserted.)


def test_it_hands_over_cleanly_when_the_old_leader_releases_first(vpc, moto, tmp_path):
    ec2, eni_a, eni_b = vpc
    a, b = Node("a", eni_a, moto, tmp_path), Node("b", eni_b, moto, tmp_path)
    a.held = 7
    a.elected(7)
    a.held = None
    assert statuses(a.demoted(7))[0] == [APPLIED, APPLIED]
    b.held = 8
    assert statuses(b.elected(8))[0] == [APPLIED, APPLIED]
    assert SEIZED not in secondary_ips(ec2, eni_a)
    assert SEIZED in secondary_ips(ec2, eni_b)
    assert [name for name, _ in a.writes()] == ["AssignPrivateIpAddresses", "UnassignPrivateIpAddresses"]


def test_it_fences_a_stale_epoch_and_changes_nothing(vpc, moto, tmp_path):
    ec2, eni_a, eni_b = vpc
    a, b = Node("a", eni_a, moto, tmp_path), Node("b", eni_b, moto, tmp_path)
    a.held = 7
    a.elected(7)
    a.held = None
    a.demoted(7)
    b.held = 8
    b.elected(8)
    before = (secondary_ips(ec2, eni_a), secondary_ips(ec2, eni_b))
    a.calls.clear()
    b.calls.clear()

    # A's delayed plan of epoch 7 arrives after it lost: fenced at A's gate.
    late = a.elected(7)
    assert statuses(late)[0] == [FENCED, FENCED]
    assert late[1].message == "stale epoch 7: this node leads no epoch now"
    # A plan of epoch 7 run on B, which holds 8: fenced too; and a late release from 7.
    assert statuses(run_plan(ActionPlan(7, "b", (late[1].action,)), b.executors, b.gate, None))[0] == [FENCED]
    assert statuses(b.demoted(7))[0] == [FENCED, FENCED]

    assert a.calls == [] and b.calls == []
    assert (secondary_ips(ec2, eni_a), secondary_ips(ec2, eni_b)) == before == (set(), {SEIZED})


def test_it_releases_nothing_when_the_address_already_moved_away(vpc, moto, tmp_path):
    _, eni_a, _ = vpc
    a = Node("a", eni_a, moto, tmp_path)
    out = a.demoted(7)
    assert statuses(out)[0] == [APPLIED, APPLIED]
    assert out[1].message == f"{SEIZED} is not on {eni_a} (any more): nothing to release"
    assert a.writes() == []


def test_it_reports_an_api_error_as_a_failed_outcome(vpc, moto, tmp_path):
    ghost = Node("ghost", "eni-0000000000000dead", moto, tmp_path)
    ghost.held = 3
    out = ghost.elected(3)
    assert statuses(out)[0] == [APPLIED, FAILED]
    assert out[1].message.startswith("AWS InvalidNetworkInterfaceID.NotFound"), out[1].message


def test_it_reports_an_unreachable_endpoint_as_a_failed_outcome(aws_env, tmp_path):
    node = Node("a", "eni-0a0a0a0a0a0a0a0a0", f"http://127.0.0.1:{free_port()}", tmp_path)
    node.executors[1] = AwsExecutor(client_factory=lambda region, url: _no_retry_client(region, url))
    node.held = 3
    out = node.elected(3)
    assert out[1].status == FAILED
    assert out[1].message.startswith("AWS call failed: EndpointConnectionError"), out[1].message


def _no_retry_client(region, url):
    import boto3
    from botocore.config import Config

    cfg = Config(connect_timeout=1, read_timeout=1, retries={"max_attempts": 1, "mode": "standard"})
    return boto3.client("ec2", region_name=region, endpoint_url=url, config=cfg)


def test_it_fails_when_the_move_is_not_confirmed_in_time(tmp_path):
    class Lagging:
        """An EC2 that accepts the assignment but never lists it."""

        def assign_private_ip_addresses(self, **kw):
            return {}

        def describe_network_interfaces(self, **kw):
            return {"NetworkInterfaces": [{"PrivateIpAddresses": []}]}

    now = [0.0]
    ex = AwsExecutor(
        client_factory=lambda r, u: Lagging(),
        confirm_within=2,
        sleep=lambda s: now.__setitem__(0, now[0] + s),
        monotonic=lambda: now[0],
    )
    cfg, _ = action_config(
        {"AWS_ENI_ID": "eni-0a0a0a0a0a0a0a0a0", "AWS_PRIVATE_IP": SEIZED, "AWS_REGION": REGION}
    )
    [out] = run_plan(
        ActionPlan(3, "a", (plan_for(3, "a", cfg).actions[1],)), [ex], ActionFence(lambda: 3), None
    )
    assert out.status == FAILED and "did not list it within 2 s" in out.message
    assert now[0] >= 2
