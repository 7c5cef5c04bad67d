"""Action plans, the dry run, and the fencing gate in front of every executor."""

import json
import time

import pytest

from elections.core.actions import (
    ASSIGN_IP,
    ASSIGN_VIP,
    DEMOTED,
    RELEASE_IP,
    RELEASE_VIP,
    START_RELAY,
    STOP_RELAY,
    Action,
    ActionConfig,
    ActionPlan,
    action_config,
    demotion_plan,
    plan_for,
)
from elections.executors import (
    APPLIED,
    FAILED,
    FENCED,
    PLANNED,
    ActionFence,
    AwsExecutor,
    AzureExecutor,
    Completed,
    OciExecutor,
    Outcome,
    ProviderError,
    RelayExecutor,
    VipExecutor,
    build_executors,
    epoch_from_state,
    leader_duties,
    relay_wanted,
    run_plan,
)
from elections.executors.base import summarize

NIC = "/subscriptions/s1/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/nic-b"
EVERYTHING = {
    "VIP_ADDRESS": "192.0.2.100/24",
    "VIP_INTERFACE": "eth0",
    "AWS_ENI_ID": "eni-0b0b0b0b0b0b0b0b0",
    "AWS_PRIVATE_IP": "192.0.2.50",
    "AWS_REGION": "eu-west-1",
    "OCI_VNIC_ID": "ocid1.vnic.oc1.eu-frankfurt-1.bbb",
    "OCI_PRIVATE_IP": "192.0.2.51",
    "AZURE_NIC_ID": NIC,
    "AZURE_PRIVATE_IP": "192.0.2.52",
}


class Sink:
    def __init__(self):
        self.events = []

    def record(self, kind, epoch, reason, **extra):
        self.events.append({"kind": kind, "epoch": epoch, "reason": reason, **extra})

    def kinds(self):
        return [e["kind"] for e in self.events]


class Recorder:
    """Stands in at every provider boundary: a runner, an EC2 client, a NIC
    client. Records each call; answers just enough to succeed."""

    def __init__(self):
        self.calls = []

    def __call__(self, argv, timeout):  # runner
        self.calls.append(("run", list(argv)))
        out = json.dumps({"data": {"vnic-id": argv[5]}}) if "assign-private-ip" in argv else ""
        return Completed(0, out, "")

    def __getattr__(self, name):  # EC2 client and NIC client methods
        def call(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            if name == "describe_network_interfaces":
                return {"NetworkInterfaces": [{"PrivateIpAddresses": [{"PrivateIpAddress": "192.0.2.50"}]}]}
            if name == "get_nic":
                return {"id": NIC, "properties": {"ipConfigurations": [
                    {"name": "ipconfig1", "properties": {"primary": True, "privateIPAddress": "192.0.2.9",
                                                         "subnet": {"id": "sub"}}}]}}, "etag-1"  # fmt: skip
            return [] if name == "find_nics_with_ip" else {}

        return call


def executors_with(rec, tmp_path):
    return [
        RelayExecutor(tmp_path),
        VipExecutor(runner=rec, which=lambda name: None),
        AwsExecutor(client_factory=lambda region, url: rec),
        OciExecutor(runner=rec),
        AzureExecutor(client=rec),
    ]


def held(epoch):
    return ActionFence(lambda: epoch)


# -- plans -------------------------------------------------------------------------


def test_it_plans_only_the_relay_when_nothing_else_is_configured():
    cfg, problems = action_config({})
    assert problems == [] and cfg == ActionConfig()
    plan = plan_for(7, "S001", cfg)
    assert [(a.verb, a.executor, a.epoch) for a in plan.actions] == [(START_RELAY, "relay", 7)]
    assert [a.verb for a in demotion_plan(7, "S001", cfg).actions] == [STOP_RELAY]


def test_it_plans_every_configured_executor_stamped_with_the_epoch():
    cfg, problems = action_config(EVERYTHING)
    assert problems == []
    plan = plan_for(8, "S002", cfg)
    assert [(a.verb, a.executor) for a in plan.actions] == [
        (START_RELAY, "relay"),
        (ASSIGN_VIP, "vip"),
        (ASSIGN_IP, "aws"),
        (ASSIGN_IP, "oci"),
        (ASSIGN_IP, "azure"),
    ]
    assert {a.epoch for a in plan.actions} == {8}
    assert all(a.description and a.risk for a in plan.actions)
    aws = plan.actions[2]
    assert aws.args["allow_reassignment"] is True and aws.args["eni_id"] == "eni-0b0b0b0b0b0b0b0b0"
    assert plan.actions[3].args["unassign_if_already_assigned"] is True
    assert plan.actions[1].target == "192.0.2.100/24 on eth0"


def test_it_plans_the_demotion_as_stop_then_release_of_each_address():
    cfg, _ = action_config(EVERYTHING)
    plan = demotion_plan(8, "S002", cfg)
    assert plan.kind == DEMOTED
    assert [a.verb for a in plan.actions] == [STOP_RELAY, RELEASE_VIP, RELEASE_IP, RELEASE_IP, RELEASE_IP]


def test_it_renders_the_dry_run_text_with_what_and_risk_for_each_action():
    cfg, _ = action_config(EVERYTHING)
    text = plan_for(8, "S002", cfg).render()
    assert text.splitlines()[0] == "Action plan for S002 on winning epoch 8: 5 action(s)"
    assert "  2. assign_vip 192.0.2.100/24 on eth0  [vip, epoch 8]" in text
    assert text.count("     what: ") == 5 and text.count("     risk: ") == 5
    assert "AllowReassignment" in text and "--unassign-if-already-assigned" in text and "If-Match" in text
    assert "on losing epoch 8" in demotion_plan(8, "S002", cfg).render()


def test_it_serializes_a_plan_to_plain_json():
    cfg, _ = action_config(EVERYTHING)
    doc = json.loads(json.dumps(plan_for(8, "S002", cfg).to_dict()))
    assert doc["epoch"] == 8 and doc["node"] == "S002" and doc["kind"] == "elected"
    assert doc["actions"][1]["args"] == {"address": "192.0.2.100", "prefix": 24, "interface": "eth0",
                                         "netns": "", "garp": "auto", "garp_count": 1}  # fmt: skip


def test_it_reads_defaults_and_lowercase_keys_from_the_ini_values():
    cfg, problems = action_config({"vip_address": "192.0.2.7", "vip_interface": "br0", "VIP_GARP": "builtin"})
    assert problems == []
    assert (cfg.vip.address, cfg.vip.prefix, cfg.vip.garp, cfg.vip.garp_count) == (
        "192.0.2.7",
        32,
        "builtin",
        1,
    )
    cfg, _ = action_config({**EVERYTHING, "VIP_ADDRESS": "192.0.2.7", "VIP_PREFIX": "25"})
    assert cfg.vip.prefix == 25 and cfg.azure.ip_config == "stkrelay-vip" and cfg.oci.cli == "oci"


@pytest.mark.parametrize(
    "values, key",
    [
        ({"VIP_ADDRESS": "192.0.2.300", "VIP_INTERFACE": "eth0"}, "VIP_ADDRESS"),
        ({"VIP_ADDRESS": "192.0.2.1"}, "VIP_INTERFACE"),
        ({"VIP_ADDRESS": "192.0.2.1/33", "VIP_INTERFACE": "eth0"}, "VIP_PREFIX"),
        ({"VIP_ADDRESS": "192.0.2.1", "VIP_INTERFACE": "eth0", "VIP_GARP": "loud"}, "VIP_GARP"),
        ({"AWS_ENI_ID": "eni-0b0b0b0b0b0b0b0b0", "AWS_PRIVATE_IP": "192.0.2.5"}, "AWS_REGION"),
        ({"AWS_ENI_ID": "nic-1", "AWS_PRIVATE_IP": "192.0.2.5", "AWS_REGION": "x"}, "AWS_ENI_ID"),
        ({"OCI_VNIC_ID": "ocid1.vnic.oc1..a"}, "OCI_PRIVATE_IP"),
        ({"AZURE_NIC_ID": "nic-b", "AZURE_PRIVATE_IP": "192.0.2.5"}, "AZURE_NIC_ID"),
    ],
)
def test_it_reports_a_bad_action_setting_by_key_and_leaves_that_executor_off(values, key):
    cfg, problems = action_config(values)
    assert [p.key for p in problems] == [key]
    assert problems[0].hint and key in str(problems[0])
    assert cfg == ActionConfig()


# -- the gate ----------------------------------------------------------------------


def all_actions(epoch):
    cfg, _ = action_config(EVERYTHING)
    return list(plan_for(epoch, "S002", cfg).actions) + list(demotion_plan(epoch, "S002", cfg).actions)


@pytest.mark.parametrize("action", all_actions(7), ids=lambda a: f"{a.executor}-{a.verb}")
def test_it_fences_a_stale_epoch_at_the_gate_for_every_executor(action, tmp_path):
    rec, sink = Recorder(), Sink()
    outcomes = run_plan(ActionPlan(7, "S002", (action,)), executors_with(rec, tmp_path), held(8), sink)
    assert [o.status for o in outcomes] == [FENCED]
    assert rec.calls == [] and relay_wanted(tmp_path) is None
    assert sink.events == [
        {
            "kind": "action_fenced",
            "epoch": 7,
            "reason": "stale epoch 7: this node holds epoch 8",
            "verb": action.verb,
            "target": action.target,
            "executor": action.executor,
            "held": 8,
        }
    ]


@pytest.mark.parametrize("action", all_actions(7)[:5], ids=lambda a: f"{a.executor}-{a.verb}")
def test_it_fences_an_acquiring_action_when_this_node_leads_no_epoch(action, tmp_path):
    rec, sink = Recorder(), Sink()
    [out] = run_plan(ActionPlan(7, "S002", (action,)), executors_with(rec, tmp_path), held(None), sink)
    assert (out.status, out.message, out.held) == (
        FENCED,
        "stale epoch 7: this node leads no epoch now",
        None,
    )
    assert rec.calls == [] and sink.kinds() == ["action_fenced"]


@pytest.mark.parametrize("action", all_actions(7)[5:], ids=lambda a: f"{a.executor}-{a.verb}")
def test_it_lets_a_release_run_after_the_lease_is_gone(action, tmp_path):
    rec, sink = Recorder(), Sink()
    [out] = run_plan(ActionPlan(7, "S002", (action,)), executors_with(rec, tmp_path), held(None), sink)
    assert out.status == APPLIED, out.message
    assert sink.kinds() == ["action_applied"] and sink.events[0]["reason"] == out.message


def test_it_applies_a_whole_plan_at_the_held_epoch_and_records_each_action(tmp_path):
    rec, sink = Recorder(), Sink()
    cfg, _ = action_config(EVERYTHING)
    outcomes = run_plan(plan_for(9, "S002", cfg), executors_with(rec, tmp_path), held(9), sink)
    assert [o.status for o in outcomes] == [APPLIED] * 5, [o.line() for o in outcomes]
    assert sink.kinds() == ["action_applied"] * 5
    assert {e["epoch"] for e in sink.events} == {9}
    assert relay_wanted(tmp_path) == 9
    names = [c[0] for c in rec.calls]
    assert "assign_private_ip_addresses" in names and "update_nic" in names


def test_it_turns_a_provider_error_into_a_failed_outcome_and_records_it(tmp_path):
    class Broken:
        name, verbs = "aws", frozenset({ASSIGN_IP})

        def apply(self, action, recheck):
            raise ProviderError("AWS UnauthorizedOperation: You are not authorized")

    class Crashing(Broken):
        name = "oci"

        def apply(self, action, recheck):
            raise KeyError("vnic_id")

    cfg, _ = action_config(EVERYTHING)
    plan = plan_for(9, "S002", cfg)
    sink = Sink()
    outcomes = run_plan(plan, [Broken(), Crashing()], held(9), sink)
    assert [o.status for o in outcomes] == [FAILED] * 5
    assert outcomes[2].message == "AWS UnauthorizedOperation: You are not authorized"
    assert outcomes[3].message == "KeyError: 'vnic_id'"
    assert outcomes[0].message == "no executor 'relay' for start_relay"
    assert sink.kinds() == ["action_failed"] * 5
    assert sink.events[2]["error"] == "AWS UnauthorizedOperation: You are not authorized"


def test_it_keeps_going_when_the_history_cannot_be_written(tmp_path):
    class DeadSink:
        def record(self, *a, **kw):
            raise OSError("share is gone")

    [out] = run_plan(plan_for(3, "S001", ActionConfig()), [RelayExecutor(tmp_path)], held(3), DeadSink())
    assert out.status == APPLIED and relay_wanted(tmp_path) == 3


def test_it_fences_when_the_epoch_source_itself_fails(tmp_path):
    def broken():
        raise RuntimeError("state unreadable")

    [out] = run_plan(
        plan_for(3, "S001", ActionConfig()), [RelayExecutor(tmp_path)], ActionFence(broken), None
    )
    assert out.status == FENCED and "state unreadable" in out.message and relay_wanted(tmp_path) is None


def test_it_runs_and_records_nothing_on_a_dry_run(tmp_path):
    rec, sink = Recorder(), Sink()
    cfg, _ = action_config(EVERYTHING)
    outcomes = run_plan(
        plan_for(9, "S002", cfg), executors_with(rec, tmp_path)[:2], held(None), sink, dry_run=True
    )
    assert [o.status for o in outcomes] == [PLANNED] * 5
    assert outcomes[0].message == "dry run: not applied"
    assert outcomes[2].message == "dry run: no executor 'aws' configured"
    assert rec.calls == [] and sink.events == [] and relay_wanted(tmp_path) is None


def test_it_fences_the_second_step_when_the_lease_is_lost_in_between(tmp_path):
    """A multi-step executor rechecks the gate before each write."""
    epoch = [5]

    class TwoStep:
        name, verbs = "azure", frozenset({ASSIGN_IP})
        writes = []

        def apply(self, action, recheck):
            self.writes.append("remove")
            epoch[0] = None  # the lease lapses here
            recheck()
            self.writes.append("add")
            return Outcome(action, APPLIED, "done")

    cfg, _ = action_config(EVERYTHING)
    action = plan_for(5, "S002", cfg).actions[4]
    sink, ex = Sink(), TwoStep()
    [out] = run_plan(ActionPlan(5, "S002", (action,)), [ex], ActionFence(lambda: epoch[0]), sink)
    assert out.status == FENCED and ex.writes == ["remove"]
    assert sink.events[0]["kind"] == "action_fenced" and sink.events[0]["held"] is None


# -- relay executor and epoch sources ----------------------------------------------


def test_it_marks_the_relay_wanted_and_unwanted_in_the_data_dir(tmp_path):
    sink = Sink()
    ex = RelayExecutor(tmp_path)
    run_plan(plan_for(4, "S001", ActionConfig()), [ex], held(4), sink)
    assert relay_wanted(tmp_path) == 4
    run_plan(demotion_plan(4, "S001", ActionConfig()), [ex], held(None), sink)
    assert relay_wanted(tmp_path) is None
    assert sink.kinds() == ["action_applied", "action_applied"]


def test_it_leaves_a_newer_relay_marker_alone_on_a_late_stop(tmp_path):
    ex = RelayExecutor(tmp_path)
    run_plan(plan_for(6, "S001", ActionConfig()), [ex], held(6), None)
    [out] = run_plan(demotion_plan(4, "S001", ActionConfig()), [ex], held(4), None)
    assert out.status == APPLIED and "left alone" in out.message and relay_wanted(tmp_path) == 6


def test_it_reads_the_held_epoch_from_the_leadership_state_file(tmp_path):
    from elections.ports.local.localstate import LocalState

    current = epoch_from_state(LocalState(tmp_path), time.monotonic)
    assert current() is None  # no file yet
    doc = {"leader": True, "epoch": 12, "valid_until": time.monotonic() + 30}
    (tmp_path / "leadership.json").write_text(json.dumps(doc))
    assert current() == 12
    (tmp_path / "leadership.json").write_text(json.dumps({**doc, "valid_until": time.monotonic() - 1}))
    assert current() is None  # past its renew deadline: not leader any more
    (tmp_path / "leadership.json").write_text(json.dumps({**doc, "leader": False, "epoch": None}))
    assert current() is None


def test_it_wires_plans_into_elector_hooks(tmp_path):
    cfg, _ = action_config({})
    executors = build_executors(cfg, tmp_path)
    state = {"epoch": 2}
    sink = Sink()
    on_elected, on_demoted = leader_duties("S001", cfg, executors, ActionFence(lambda: state["epoch"]), sink)
    assert [o.status for o in on_elected(2)] == [APPLIED] and relay_wanted(tmp_path) == 2
    state["epoch"] = None
    assert [o.status for o in on_demoted(2)] == [APPLIED] and relay_wanted(tmp_path) is None
    assert [o.status for o in on_elected(2)] == [FENCED]  # a late hook of a lost epoch
    assert sink.kinds() == ["action_applied", "action_applied", "action_fenced"]


def test_it_summarizes_cli_errors_in_one_line():
    err = {"code": "NotAuthorizedOrNotFound", "message": "Authorization failed", "status": 404}
    oci = "ServiceError:\n" + json.dumps(err, indent=4)
    assert summarize(oci) == "NotAuthorizedOrNotFound: Authorization failed"
    az = 'ERROR: {"error": {"code": "PreconditionFailed", "message": "etag mismatch"}}'
    assert summarize(az) == "PreconditionFailed: etag mismatch"
    assert summarize("warning\nError: ipv4: Address not found.\n") == "Error: ipv4: Address not found."
    assert summarize("") == "(no output)"


def test_it_describes_an_action_in_one_line():
    a = Action(ASSIGN_VIP, "192.0.2.1/32 on eth0", 3, "d", "r", "vip")
    assert a.describe() == "assign_vip 192.0.2.1/32 on eth0 (epoch 3)"
