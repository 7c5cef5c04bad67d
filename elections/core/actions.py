"""What winning or losing an epoch does: the ActionPlan (pure, ADR 0011).

On winning epoch N the planner emits an `ActionPlan`: `Action`s, each a
`(verb, target, epoch=N)` with a human description and a risk note, naming the
executor that carries it and the arguments it needs. Losing the epoch emits the
demotion plan (stop the relay, release the addresses). A plan can be shown
without being run (`render()`, the dry run the panel uses to preview a promote).
Nothing here does I/O: `executors/` carries the plans out behind the gate.

Verbs: `start_relay`/`stop_relay` (executor `relay`), `assign_vip`/`release_vip`
(`vip`: `ip addr` + gratuitous ARP), `assign_secondary_ip`/`release_secondary_ip`
(`aws`, `oci`, `azure`: each provider's reassign semantics).

Configuration (which executors, with which addresses): `core.action_config`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from elections.core.action_config import (  # noqa: F401 (known here by their users)
    ACTION_DEFAULTS,
    GARP_MODES,
    ActionConfig,
    AwsConfig,
    AzureConfig,
    OciConfig,
    VipConfig,
    action_config,
)

START_RELAY, STOP_RELAY = "start_relay", "stop_relay"
ASSIGN_VIP, RELEASE_VIP = "assign_vip", "release_vip"
ASSIGN_IP, RELEASE_IP = "assign_secondary_ip", "release_secondary_ip"
ELECTED, DEMOTED = "elected", "demoted"


@dataclass(frozen=True)
class Action:
    verb: str
    target: str
    epoch: int
    description: str
    risk: str
    executor: str = ""
    args: dict[str, Any] = field(default_factory=dict, hash=False)

    def describe(self) -> str:
        return f"{self.verb} {self.target} (epoch {self.epoch})"


@dataclass(frozen=True)
class ActionPlan:
    epoch: int
    node: str
    actions: tuple[Action, ...]
    kind: str = ELECTED

    def render(self) -> str:
        """The dry-run text: what would be done, in order, and what could go wrong."""
        when = "on winning" if self.kind == ELECTED else "on losing"
        head = f"Action plan for {self.node} {when} epoch {self.epoch}: {len(self.actions)} action(s)"
        lines = [head]
        for i, a in enumerate(self.actions, 1):
            lines.append(f"  {i}. {a.verb} {a.target}  [{a.executor}, epoch {a.epoch}]")
            lines.append(f"     what: {a.description}")
            lines.append(f"     risk: {a.risk}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "node": self.node,
            "kind": self.kind,
            "actions": [asdict(a) for a in self.actions],
        }


# -- configuration -----------------------------------------------------------------


def plan_for(epoch: int, node: str, config: ActionConfig) -> ActionPlan:
    """What `node` does on winning `epoch`: the relay first (local, fast), then
    the addresses, each seized from whoever holds them."""
    acts = [
        Action(
            START_RELAY,
            f"relay on {node}",
            epoch,
            f"Start the relay listeners on {node}, stamped with epoch {epoch}.",
            "Clients of an older epoch are refused and must reconnect; if the relay port is taken, "
            "the relay stays down until it is freed.",
            "relay",
        )
    ]
    if (c := config.vip) is not None:
        garp = "no gratuitous ARP" if c.garp == "off" else f"{c.garp_count} gratuitous ARP(s)"
        acts.append(
            Action(
                ASSIGN_VIP,
                f"{c.address}/{c.prefix} on {c.interface}" + (f" (netns {c.netns})" if c.netns else ""),
                epoch,
                f"Add {c.address}/{c.prefix} to {c.interface} (`ip addr add`), then send {garp} so "
                "neighbours map the address to this host's MAC.",
                "If the old leader is partitioned rather than dead it may still answer ARP for the address "
                "until its renew deadline stops it; neighbours that miss the gratuitous ARP keep the old MAC "
                "until their cache entry expires.",
                "vip",
                asdict(c),
            )
        )
    if (a := config.aws) is not None:
        acts.append(
            Action(
                ASSIGN_IP,
                f"{a.private_ip} on {a.eni_id} (aws {a.region})",
                epoch,
                f"Seize {a.private_ip} for ENI {a.eni_id}: AssignPrivateIpAddresses with AllowReassignment, "
                "then confirm with DescribeNetworkInterfaces.",
                "Last writer wins and the move is asynchronous; an Elastic IP associated with the address "
                "moves with it.",
                "aws",
                {**asdict(a), "allow_reassignment": True},
            )
        )
    if (o := config.oci) is not None:
        acts.append(
            Action(
                ASSIGN_IP,
                f"{o.private_ip} on {o.vnic_id} (oci)",
                epoch,
                f"Seize {o.private_ip} for VNIC {o.vnic_id}: `oci network vnic assign-private-ip "
                "--unassign-if-already-assigned`.",
                "Last writer wins, within one subnet only; a public IP assigned to the address moves too.",
                "oci",
                {**asdict(o), "unassign_if_already_assigned": True},
            )
        )
    if (z := config.azure) is not None:
        acts.append(
            Action(
                ASSIGN_IP,
                f"{z.private_ip} on {_short_nic(z.nic_id)} (azure)",
                epoch,
                f"Move {z.private_ip}: remove its ipConfiguration from the NIC that holds it, then add "
                f"{z.ip_config!r} to {_short_nic(z.nic_id)}, each write with If-Match on the NIC's ETag.",
                "Two steps, not atomic: between them the address answers nowhere. A concurrent change "
                "(HTTP 412) is re-read and retried once, then the action fails.",
                "azure",
                asdict(z),
            )
        )
    return ActionPlan(epoch, node, tuple(acts), ELECTED)


def demotion_plan(epoch: int, node: str, config: ActionConfig) -> ActionPlan:
    """What `node` does on losing `epoch`: stop serving first, then let go of
    the addresses it holds (only its own: the next leader seizes them anyway)."""
    acts = [
        Action(
            STOP_RELAY,
            f"relay on {node}",
            epoch,
            f"Stop the relay on {node}: clients get leader_changed and reconnect to the new leader.",
            "Connected clients see a short gap while they reconnect.",
            "relay",
        )
    ]
    if (c := config.vip) is not None:
        acts.append(
            Action(
                RELEASE_VIP,
                f"{c.address}/{c.prefix} on {c.interface}" + (f" (netns {c.netns})" if c.netns else ""),
                epoch,
                f"Remove {c.address}/{c.prefix} from {c.interface} (`ip addr del`).",
                "None for the new leader; if it fails, this host keeps answering ARP for the address until "
                "an operator removes it.",
                "vip",
                asdict(c),
            )
        )
    if (a := config.aws) is not None:
        acts.append(
            Action(
                RELEASE_IP,
                f"{a.private_ip} on {a.eni_id} (aws {a.region})",
                epoch,
                f"Unassign {a.private_ip} from ENI {a.eni_id}, if it is still there.",
                "None: only this agent's ENI is touched; the new leader seizes the address regardless.",
                "aws",
                asdict(a),
            )
        )
    if (o := config.oci) is not None:
        acts.append(
            Action(
                RELEASE_IP,
                f"{o.private_ip} on {o.vnic_id} (oci)",
                epoch,
                f"Unassign {o.private_ip} from VNIC {o.vnic_id} (`oci network vnic unassign-private-ip`).",
                "None: only this agent's VNIC is touched.",
                "oci",
                asdict(o),
            )
        )
    if (z := config.azure) is not None:
        acts.append(
            Action(
                RELEASE_IP,
                f"{z.private_ip} on {_short_nic(z.nic_id)} (azure)",
                epoch,
                f"Remove the ipConfiguration holding {z.private_ip} from {_short_nic(z.nic_id)} (If-Match).",
                "None: only this agent's NIC is touched.",
                "azure",
                asdict(z),
            )
        )
    return ActionPlan(epoch, node, tuple(acts), DEMOTED)


def _short_nic(nic_id: str) -> str:
    return nic_id.rsplit("/", 1)[-1] or nic_id
