"""OCI and Azure executors against recording fakes at their boundaries: the
OCI CLI's argv (the fake answers as `oci network vnic ...` does), and Azure's
NIC API with ETags enforced (a PUT whose If-Match is not the NIC's current
ETag gets HTTP 412)."""

import copy
import json
import shlex

import pytest

from elections.core.actions import ActionPlan, action_config, demotion_plan, plan_for
from elections.executors import (
    APPLIED,
    FAILED,
    FENCED,
    ActionFence,
    AzCliClient,
    AzureExecutor,
    Completed,
    OciExecutor,
    PreconditionFailed,
    ProviderError,
    run_plan,
)

IP = "192.0.2.50"
VNIC_A, VNIC_B = "ocid1.vnic.oc1.eu-frankfurt-1.aaaa", "ocid1.vnic.oc1.eu-frankfurt-1.bbbb"
NIC_ROOT = "/subscriptions/s1/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/"
NIC_A, NIC_B = NIC_ROOT + "nic-a", NIC_ROOT + "nic-b"
SUBNET = "/subscriptions/s1/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/s"


def only(plan, executor):
    return ActionPlan(
        plan.epoch, plan.node, tuple(a for a in plan.actions if a.executor == executor), plan.kind
    )


def run(plan, executor, held, sink=None):
    return run_plan(plan, [executor], ActionFence(lambda: held), sink)


# -- OCI ---------------------------------------------------------------------------


class FakeOciCli:
    """Records argv; answers like `oci network vnic assign-private-ip` /
    `unassign-private-ip` (oci-cli's extended commands) over one subnet."""

    def __init__(self, owner=None):
        self.owner = dict(owner or {})  # ip -> vnic
        self.argv = []

    def __call__(self, argv, timeout):
        self.argv.append(list(argv))
        verb = argv[3]
        opts = dict(zip(argv[4::2], argv[5::2], strict=False))
        vnic, ip = opts.get("--vnic-id"), opts.get("--ip-address")
        if vnic not in (VNIC_A, VNIC_B):
            message = "Authorization failed or requested resource not found."
            err = {"code": "NotAuthorizedOrNotFound", "message": message, "status": 404}
            return Completed(1, "", "ServiceError:\n" + json.dumps(err, indent=4))
        holder = self.owner.get(ip)
        if verb == "assign-private-ip":
            if holder == vnic:
                return Completed(
                    0, "", f"Taking no action as IP address {ip} is already assigned to VNIC {vnic}\n"
                )
            if holder and "--unassign-if-already-assigned" not in argv:
                return Completed(
                    1, "", f"IP address {ip} is already assigned to a different VNIC: {holder}. ...\n"
                )
            self.owner[ip] = vnic
            data = {"ip-address": ip, "vnic-id": vnic, "is-primary": False, "id": "ocid1.privateip.oc1..p"}
            doc = {"data": data, "etag": "e1"}
            return Completed(0, json.dumps(doc, indent=2), "")
        if holder != vnic:
            return Completed(1, "", f"IP address {ip} was not found on VNIC {vnic}\n")
        del self.owner[ip]
        return Completed(0, "", f"Unassigned IP address {ip} from VNIC {vnic}\n")


def oci_cfg(vnic):
    cfg, problems = action_config({"OCI_VNIC_ID": vnic, "OCI_PRIVATE_IP": IP})
    assert problems == []
    return cfg


def test_it_runs_the_documented_oci_command_to_seize_the_ip():
    cli = FakeOciCli({IP: VNIC_A})
    [out] = run(only(plan_for(8, "b", oci_cfg(VNIC_B)), "oci"), OciExecutor(runner=cli), 8)
    assert out.status == APPLIED, out.message
    command = f"oci network vnic assign-private-ip --vnic-id {VNIC_B} --ip-address {IP}"
    assert cli.argv == [[*shlex.split(command), "--unassign-if-already-assigned"]]
    assert cli.owner[IP] == VNIC_B


def test_it_moves_the_oci_ip_from_a_to_b_at_the_next_epoch_and_fences_a_late_a():
    cli = FakeOciCli()
    ex = OciExecutor(runner=cli)
    assert run(only(plan_for(7, "a", oci_cfg(VNIC_A)), "oci"), ex, 7)[0].status == APPLIED
    assert cli.owner == {IP: VNIC_A}
    assert run(only(plan_for(8, "b", oci_cfg(VNIC_B)), "oci"), ex, 8)[0].status == APPLIED
    assert cli.owner == {IP: VNIC_B}
    calls = len(cli.argv)
    for held in (None, 9):  # A's late epoch-7 plan: A leads nothing, or leads a newer epoch
        [late] = run(only(plan_for(7, "a", oci_cfg(VNIC_A)), "oci"), ex, held)
        assert late.status == FENCED
    [late_release] = run(only(demotion_plan(7, "a", oci_cfg(VNIC_A)), "oci"), ex, 9)
    assert late_release.status == FENCED
    assert len(cli.argv) == calls and cli.owner == {IP: VNIC_B}


def test_it_counts_an_ip_already_on_this_vnic_as_applied():
    cli = FakeOciCli({IP: VNIC_B})
    [out] = run(only(plan_for(8, "b", oci_cfg(VNIC_B)), "oci"), OciExecutor(runner=cli), 8)
    assert out.status == APPLIED
    note = f"Taking no action as IP address {IP} is already assigned to VNIC {VNIC_B}"
    assert out.message == f"{IP} already on {VNIC_B}: {note}"


def test_it_releases_the_oci_ip_and_counts_not_found_as_released():
    cli = FakeOciCli({IP: VNIC_A})
    ex = OciExecutor(runner=cli)
    plan = only(demotion_plan(7, "a", oci_cfg(VNIC_A)), "oci")
    first, again = run(plan, ex, None) + run(plan, ex, None)
    assert cli.argv[0] == shlex.split(
        f"oci network vnic unassign-private-ip --vnic-id {VNIC_A} --ip-address {IP}"
    )
    assert (first.status, again.status) == (APPLIED, APPLIED)
    assert first.message == f"{IP} unassigned from {VNIC_A}"
    assert again.message == f"{IP} is not on {VNIC_A} (any more): nothing to release"
    assert cli.owner == {}


def test_it_reports_an_oci_service_error_in_one_readable_line():
    cfg = oci_cfg("ocid1.vnic.oc1.eu-frankfurt-1.gone")
    [out] = run(only(plan_for(8, "b", cfg), "oci"), OciExecutor(runner=FakeOciCli()), 8)
    assert out.status == FAILED
    assert out.message == (
        "oci assign-private-ip exited 1: NotAuthorizedOrNotFound: "
        "Authorization failed or requested resource not found."
    )


def test_it_reports_a_missing_oci_cli_as_a_failure():
    cfg, _ = action_config({"OCI_VNIC_ID": VNIC_B, "OCI_PRIVATE_IP": IP, "OCI_CLI": "/nonexistent/oci"})
    [out] = run(only(plan_for(8, "b", cfg), "oci"), OciExecutor(), 8)
    assert (out.status, out.message) == (FAILED, "/nonexistent/oci: command not found")


# -- Azure -------------------------------------------------------------------------


class FakeArm:
    """NICs with ETags, as ARM keeps them. Every call is recorded; a PUT whose
    If-Match is stale gets 412; an address may be on one NIC only. `meddle`
    holds writes by someone else, one run just before each of our next PUTs."""

    def __init__(self):
        self.nics, self.etags, self.calls, self.meddle = {}, {}, [], []
        self._n = 0

    def add_nic(self, nic_id, primary_ip, extra_ip=None):
        configs = [{"name": "ipconfig1", "properties": {"primary": True, "privateIPAddress": primary_ip,
                                                         "privateIPAllocationMethod": "Dynamic",
                                                         "subnet": {"id": SUBNET}}}]  # fmt: skip
        if extra_ip:
            configs.append({"name": "old-vip", "properties": {"primary": False, "privateIPAddress": extra_ip,
                                                              "subnet": {"id": SUBNET}}})  # fmt: skip
        self.nics[nic_id] = {"id": nic_id, "properties": {"ipConfigurations": configs}}
        self._bump(nic_id)

    def _bump(self, nic_id):
        self._n += 1
        self.etags[nic_id] = f'W/"{nic_id.rsplit("/", 1)[-1]}-{self._n}"'
        self.nics[nic_id]["etag"] = self.etags[nic_id]

    def ips(self, nic_id):
        return {
            c["properties"]["privateIPAddress"] for c in self.nics[nic_id]["properties"]["ipConfigurations"]
        }

    def someone_else_edits(self, nic_id):
        self.nics[nic_id].setdefault("tags", {})["touched"] = str(self._n)
        self._bump(nic_id)

    # NicClient
    def find_nics_with_ip(self, ip):
        self.calls.append(("find", ip))
        return [n for n in self.nics if ip in self.ips(n)]

    def get_nic(self, nic_id):
        self.calls.append(("get", nic_id.rsplit("/", 1)[-1], self.etags[nic_id]))
        return copy.deepcopy(self.nics[nic_id]), self.etags[nic_id]

    def update_nic(self, nic_id, nic, etag):
        if self.meddle:
            self.meddle.pop(0)()
        short = nic_id.rsplit("/", 1)[-1]
        if etag != self.etags[nic_id]:
            self.calls.append(("put", short, etag, 412))
            raise PreconditionFailed(
                f"{short}: 412 Precondition Failed (If-Match {etag}, now {self.etags[nic_id]})"
            )
        mine = {c["properties"]["privateIPAddress"] for c in nic["properties"]["ipConfigurations"]}
        for other in self.nics:
            if other != nic_id and mine & self.ips(other):
                self.calls.append(("put", short, etag, 400))
                raise ProviderError(
                    f"PrivateIPAddressInUse: {sorted(mine & self.ips(other))} used by {other}"
                )
        self.calls.append(("put", short, etag, 200))
        self.nics[nic_id] = copy.deepcopy(nic)
        self._bump(nic_id)
        return self.etags[nic_id]


def az_cfg(nic):
    cfg, problems = action_config({"AZURE_NIC_ID": nic, "AZURE_PRIVATE_IP": IP})
    assert problems == []
    return cfg


@pytest.fixture
def arm():
    arm = FakeArm()
    arm.add_nic(NIC_A, "192.0.2.10", extra_ip=IP)
    arm.add_nic(NIC_B, "192.0.2.11")
    return arm


def test_it_moves_the_azure_ip_by_remove_then_add_each_under_if_match(arm):
    a1, b1 = arm.etags[NIC_A], arm.etags[NIC_B]
    [out] = run(only(plan_for(8, "b", az_cfg(NIC_B)), "azure"), AzureExecutor(arm), 8)
    assert out.status == APPLIED, out.message
    assert out.message == f"{IP} added to nic-b as 'stkrelay-vip' (removed from nic-a first)"
    assert arm.calls == [
        ("find", IP),
        ("get", "nic-a", a1), ("put", "nic-a", a1, 200),
        ("get", "nic-b", b1), ("put", "nic-b", b1, 200),
    ]  # fmt: skip
    assert IP not in arm.ips(NIC_A) and IP in arm.ips(NIC_B)
    [added] = [c for c in arm.nics[NIC_B]["properties"]["ipConfigurations"] if c["name"] == "stkrelay-vip"]
    assert added["properties"] == {"privateIPAddress": IP, "privateIPAllocationMethod": "Static",
                                   "primary": False, "subnet": {"id": SUBNET}}  # fmt: skip


def test_it_rereads_and_retries_once_when_the_nic_changed_concurrently(arm):
    arm.meddle = [lambda: None, lambda: arm.someone_else_edits(NIC_B)]  # before our 2nd PUT (on nic-b)
    b1 = arm.etags[NIC_B]
    [out] = run(only(plan_for(8, "b", az_cfg(NIC_B)), "azure"), AzureExecutor(arm), 8)
    assert out.status == APPLIED, out.message
    b2 = arm.etags[NIC_B]  # after our retry's write
    puts_b = [c for c in arm.calls if c[1] == "nic-b"]
    assert puts_b[0:2] == [("get", "nic-b", b1), ("put", "nic-b", b1, 412)]
    assert puts_b[2][0] == "get" and puts_b[2][2] != b1  # re-read: the meddler's ETag
    assert puts_b[3] == ("put", "nic-b", puts_b[2][2], 200) and len(puts_b) == 4
    assert b2 != puts_b[2][2] and arm.nics[NIC_B]["tags"]  # the other writer's change survived
    assert IP in arm.ips(NIC_B) and IP not in arm.ips(NIC_A)


def test_it_fails_after_a_second_concurrent_change(arm):
    arm.meddle = [lambda: None, lambda: arm.someone_else_edits(NIC_B), lambda: arm.someone_else_edits(NIC_B)]
    sink = []

    class Sink:
        def record(self, kind, epoch, reason, **extra):
            sink.append((kind, reason))

    [out] = run(only(plan_for(8, "b", az_cfg(NIC_B)), "azure"), AzureExecutor(arm), 8, Sink())
    assert out.status == FAILED
    assert "HTTP 412 twice" in out.message and "gave up after one re-read" in out.message
    assert [c[-1] for c in arm.calls if c[0] == "put"] == [200, 412, 412]
    assert sink == [("action_failed", out.message)]


def test_it_refuses_to_add_before_the_old_nic_let_go(arm):
    """Why remove comes first: the address may be on one NIC only."""
    doc, etag = arm.get_nic(NIC_B)
    doc["properties"]["ipConfigurations"].append({"name": "x", "properties": {"privateIPAddress": IP}})
    with pytest.raises(ProviderError, match="PrivateIPAddressInUse"):
        arm.update_nic(NIC_B, doc, etag)


def test_it_fences_a_stale_azure_epoch_without_any_call(arm):
    for held in (None, 9):
        [out] = run(only(plan_for(8, "b", az_cfg(NIC_B)), "azure"), AzureExecutor(arm), held)
        assert out.status == FENCED
    [out] = run(only(demotion_plan(7, "a", az_cfg(NIC_A)), "azure"), AzureExecutor(arm), 9)
    assert out.status == FENCED
    assert arm.calls == [] and IP in arm.ips(NIC_A)


def test_it_stops_between_the_two_steps_when_the_lease_is_lost(arm):
    held = [8]
    arm.meddle = [lambda: held.__setitem__(0, None)]  # the lease lapses while the remove is in flight
    plan = only(plan_for(8, "b", az_cfg(NIC_B)), "azure")
    [out] = run_plan(plan, [AzureExecutor(arm)], ActionFence(lambda: held[0]), None)
    assert out.status == FENCED and out.message == "stale epoch 8: this node leads no epoch now"
    assert [c[:2] for c in arm.calls] == [("find", IP), ("get", "nic-a"), ("put", "nic-a"), ("get", "nic-b")]
    assert IP not in arm.ips(NIC_A) and IP not in arm.ips(NIC_B)  # the next leader seizes it


def test_it_releases_the_azure_ip_from_its_own_nic_only(arm):
    plan = only(demotion_plan(7, "a", az_cfg(NIC_A)), "azure")
    first, again = run(plan, AzureExecutor(arm), None) + run(plan, AzureExecutor(arm), None)
    assert first.message == f"{IP} removed from nic-a"
    assert again.message == f"{IP} is not on nic-a (any more): nothing to release"
    assert {c[1] for c in arm.calls} == {"nic-a"} and IP not in arm.ips(NIC_A)


def test_it_will_not_move_a_primary_address(arm):
    cfg, _ = action_config({"AZURE_NIC_ID": NIC_B, "AZURE_PRIVATE_IP": "192.0.2.10"})
    [out] = run(only(plan_for(8, "b", cfg), "azure"), AzureExecutor(arm), 8)
    assert out.status == FAILED and out.message == "192.0.2.10 is the primary address of nic-a: not movable"


class FakeAzCli:
    """`az` at the argv boundary, backed by a FakeArm: `az rest` GET/PUT with
    If-Match, and `az network nic list --query`; 412 printed as az does."""

    def __init__(self, arm):
        self.arm, self.argv = arm, []

    def __call__(self, argv, timeout):
        self.argv.append(list(argv))
        if argv[1:4] == ["network", "nic", "list"]:
            ip = argv[argv.index("--query") + 1].split("'")[1]
            return Completed(0, json.dumps(self.arm.find_nics_with_ip(ip)), "")
        opts = dict(zip(argv[2::2], argv[3::2], strict=False))
        nic_id = opts["--url"].split("https://management.azure.com", 1)[1].split("?")[0]
        if opts["--method"] == "get":
            return Completed(0, json.dumps(self.arm.get_nic(nic_id)[0]), "")
        try:
            self.arm.update_nic(nic_id, json.loads(opts["--body"]), json.loads(opts["--headers"])["If-Match"])
        except PreconditionFailed:
            return Completed(1, "", 'ERROR: Precondition Failed({"error":{"code":"PreconditionFailed"}})\n')
        return Completed(0, json.dumps(self.arm.nics[nic_id]), "")


def test_it_drives_az_rest_with_if_match_and_maps_412(arm):
    cli = FakeAzCli(arm)
    arm.meddle = [lambda: None, lambda: arm.someone_else_edits(NIC_B)]
    ex = AzureExecutor(client_for=lambda path: AzCliClient(runner=cli, cli=path))
    [out] = run(only(plan_for(8, "b", az_cfg(NIC_B)), "azure"), ex, 8)
    assert out.status == APPLIED, out.message
    kinds = [(a[1], a[3]) for a in cli.argv]
    assert kinds == [("network", "list"), ("rest", "get"), ("rest", "put"), ("rest", "get"), ("rest", "put"),
                     ("rest", "get"), ("rest", "put")]  # fmt: skip
    put = cli.argv[2]
    assert put[:6] == [
        "az",
        "rest",
        "--method",
        "put",
        "--url",
        f"https://management.azure.com{NIC_A}?api-version=2023-09-01",
    ]
    assert json.loads(put[put.index("--headers") + 1]) == {"If-Match": arm.calls[1][2]}
    query = f"[?ipConfigurations[?privateIPAddress=='{IP}']].id"
    assert cli.argv[0] == ["az", "network", "nic", "list", "--query", query, "--output", "json"]
    assert IP in arm.ips(NIC_B)
