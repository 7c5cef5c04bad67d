# ruff: noqa: F811 (the fixtures of test_executor_aws and test_executor_cloud, imported)
"""The cloud executors' `observe()`: AWS against the moto server (a secondary IP
moved by hand from the leader's ENI to a follower's is `drift`), OCI and Azure
against the fakes of test_executor_cloud (their list calls). Read-only: no
write call is made."""

import json
from dataclasses import asdict

import pytest
from test_executor_aws import REGION, SEIZED, aws_env, moto, vpc  # noqa: F401
from test_executor_cloud import IP, NIC_A, NIC_B, VNIC_A, VNIC_B, FakeArm, FakeOciCli, arm  # noqa: F401

from elections.core.actions import action_config
from elections.core.ownership import CONFLICT, DRIFT, MISSING, OK, UNKNOWN, ownership_map, reports_of
from elections.executors import AwsExecutor, AzureExecutor, Completed, OciExecutor
from elections.executors.aws import boto3_client

SUBNET_OCID = "ocid1.subnet.oc1.eu-frankfurt-1.ssss"


def cfg_args(values, which):
    cfg, problems = action_config(values)
    assert problems == []
    return asdict(getattr(cfg, which))


def mapped(me, mine, others):
    """The map as `me` computes it, with `others` reporting through their heartbeats."""
    reports = {node: reports_of(node, {"holds": [s.report()]}) for node, s in others.items()}
    [entry] = ownership_map(me, me, 5, [mine], reports)
    return entry


# -- AWS (moto server) ------------------------------------------------------------------------


class Recording:
    def __init__(self, moto):
        self.calls = []
        self.moto = moto

    def __call__(self, region, url):
        client = boto3_client(region, url)
        client.meta.events.register("provide-client-params.ec2.*", lambda params, model, **kw:
                                    self.calls.append(model.name))  # fmt: skip
        return client


def test_a_secondary_ip_moved_by_hand_in_moto_is_drift(vpc, moto):
    ec2, eni_a, eni_b = vpc
    base = {"AWS_PRIVATE_IP": SEIZED, "AWS_REGION": REGION, "AWS_ENDPOINT_URL": moto}
    args = {n: cfg_args({**base, "AWS_ENI_ID": e}, "aws") for n, e in (("a", eni_a), ("b", eni_b))}
    rec = Recording(moto)
    ex = AwsExecutor(client_factory=rec)

    ec2.assign_private_ip_addresses(NetworkInterfaceId=eni_a, PrivateIpAddresses=[SEIZED])
    a, b = ex.observe(args["a"]), ex.observe(args["b"])
    assert (a.held, a.nic, a.holders, a.complete, a.error) == (True, eni_a, (eni_a,), True, "")
    assert b.held is False and b.holders == (eni_a,)
    assert mapped("a", a, {"b": b}).verdict == OK

    # By hand: off the leader's ENI, onto the follower's.
    ec2.unassign_private_ip_addresses(NetworkInterfaceId=eni_a, PrivateIpAddresses=[SEIZED])
    ec2.assign_private_ip_addresses(NetworkInterfaceId=eni_b, PrivateIpAddresses=[SEIZED])
    a, b = ex.observe(args["a"]), ex.observe(args["b"])
    assert a.held is False and a.holders == (eni_b,) and b.held is True
    entry = mapped("a", a, {"b": b})
    assert (entry.verdict, entry.holders, entry.expected) == (DRIFT, ("b",), "a")
    # b's heartbeat need not be current: a's own look names b's ENI, which b reported earlier.
    stale_b = reports_of("b", {"holds": [{**b.report(), "held": False}]})
    [entry] = ownership_map("a", "a", 5, [a], {"b": stale_b})
    assert entry.verdict == DRIFT

    # On both (moto copies where EC2 would move): a conflict. Nowhere: missing.
    ec2.assign_private_ip_addresses(NetworkInterfaceId=eni_a, PrivateIpAddresses=[SEIZED])
    assert mapped("a", ex.observe(args["a"]), {"b": ex.observe(args["b"])}).verdict == CONFLICT
    for eni in (eni_a, eni_b):
        ec2.unassign_private_ip_addresses(NetworkInterfaceId=eni, PrivateIpAddresses=[SEIZED])
    assert mapped("a", ex.observe(args["a"]), {"b": ex.observe(args["b"])}).verdict == MISSING
    assert set(rec.calls) == {"DescribeNetworkInterfaces"}  # read-only


def test_an_unknown_eni_or_a_dead_endpoint_is_an_observation_that_failed(vpc, moto, aws_env):
    ghost = cfg_args({"AWS_ENI_ID": "eni-0000000000000dead", "AWS_PRIVATE_IP": SEIZED, "AWS_REGION": REGION,
                      "AWS_ENDPOINT_URL": moto}, "aws")  # fmt: skip
    s = AwsExecutor().observe(ghost)
    assert s.held is None and s.error.startswith("AWS InvalidNetworkInterfaceID.NotFound"), s.error
    [entry] = ownership_map("a", "a", 5, [s], {})
    assert entry.verdict == UNKNOWN


# -- OCI (the CLI's argv) ---------------------------------------------------------------------


class ListingOciCli(FakeOciCli):
    """FakeOciCli, plus `vnic get` and `private-ip list` as oci-cli prints them."""

    def __call__(self, argv, timeout):
        if argv[2:4] == ["vnic", "get"]:
            self.argv.append(list(argv))
            vnic = argv[argv.index("--vnic-id") + 1]
            return Completed(0, json.dumps({"data": {"id": vnic, "subnet-id": SUBNET_OCID}}), "")
        if argv[2:4] == ["private-ip", "list"]:
            self.argv.append(list(argv))
            ip = argv[argv.index("--ip-address") + 1]
            found = [
                {"ip-address": ip, "vnic-id": v, "is-primary": False}
                for i, v in self.owner.items()
                if i == ip
            ]
            return Completed(0, json.dumps({"data": found}) if found else "", "")
        return super().__call__(argv, timeout)


def oci_args(vnic, cli="oci"):
    return cfg_args({"OCI_VNIC_ID": vnic, "OCI_PRIVATE_IP": IP, "OCI_CLI": cli}, "oci")


def test_oci_lists_the_subnets_private_ips_and_names_the_vnic():
    cli = ListingOciCli({IP: VNIC_B})
    ex = OciExecutor(runner=cli)
    a = ex.observe(oci_args(VNIC_A))
    assert (a.held, a.holders, a.complete) == (False, (VNIC_B,), True)
    assert mapped("a", a, {"b": ex.observe(oci_args(VNIC_B))}).verdict == DRIFT
    assert cli.argv[:2] == [
        ["oci", "network", "vnic", "get", "--vnic-id", VNIC_A],
        ["oci", "network", "private-ip", "list", "--subnet-id", SUBNET_OCID, "--ip-address", IP, "--all"],
    ]
    ex.observe(oci_args(VNIC_A))
    assert [a[2:4] for a in cli.argv].count(["vnic", "get"]) == 2  # once per VNIC: the subnet is kept
    cli.owner.clear()
    assert ex.observe(oci_args(VNIC_A)).holders == ()  # empty output: no holder


@pytest.mark.parametrize("stdout", ["not json", json.dumps({"data": {"not": "a list"}})])
def test_oci_garbage_is_no_evidence(stdout):
    def cli(argv, timeout):
        if argv[2:4] == ["vnic", "get"]:
            return Completed(0, json.dumps({"data": {"subnet-id": SUBNET_OCID}}), "")
        return Completed(0, stdout, "")

    s = OciExecutor(runner=cli).observe(oci_args(VNIC_A))
    assert s.held is None and s.error.startswith("oci private-ip list")


def test_oci_a_missing_cli_is_an_observation_that_failed():
    s = OciExecutor().observe(oci_args(VNIC_A, cli="/nonexistent/oci"))
    assert (s.held, s.error) == (None, "/nonexistent/oci: command not found")


# -- Azure (NIC API with ETags) ---------------------------------------------------------------


def az_args(nic):
    return cfg_args({"AZURE_NIC_ID": nic, "AZURE_PRIVATE_IP": IP}, "azure")


def test_azure_finds_the_nics_that_carry_the_address(arm):
    ex = AzureExecutor(arm)
    a, b = ex.observe(az_args(NIC_A)), ex.observe(az_args(NIC_B))
    assert (a.held, a.holders, b.held) == (True, (NIC_A,), False)
    assert mapped("b", b, {"a": a}).verdict == DRIFT  # b leads: the address is on a
    upper = ex.observe(az_args(NIC_A.replace("nic-a", "NIC-A")))  # ARM ids are case-blind
    assert upper.held is True
    assert {c[0] for c in arm.calls} == {"find"}  # read-only


def test_azure_a_failing_list_is_no_evidence(arm):
    class Broken(FakeArm):
        def find_nics_with_ip(self, ip):
            raise RuntimeError("az exploded")

    s = AzureExecutor(Broken()).observe(az_args(NIC_A))
    assert (s.held, s.error) == (None, "RuntimeError: az exploded")
