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

Configuration: optional `[stk]` keys of `stk.ini` (each overridable by
`STK_<KEY>` like the others), read by `action_config(values)` from a plain
dict of the raw strings. An executor is enabled by its first key:

| key                | default        | meaning |
|--------------------|----------------|---------|
| VIP_ADDRESS        | (off)          | on-prem floating address, `a.b.c.d` or `a.b.c.d/nn` |
| VIP_PREFIX         | 32             | prefix length, unless VIP_ADDRESS carries one |
| VIP_INTERFACE      | (required)     | interface the VIP goes on, e.g. `eth0` |
| VIP_NETNS          | (none)         | run the commands in this network namespace |
| VIP_GARP           | auto           |`auto` (arping if on PATH, else built-in), `arping`, `builtin`, `off`|
| VIP_GARP_COUNT     | 1              | gratuitous ARPs sent after the address is added (1..10) |
| AWS_ENI_ID         | (off)          | this agent's ENI, `eni-...` |
| AWS_PRIVATE_IP     | (required)     | the secondary private IP that follows the leader |
| AWS_REGION         | (required)     | e.g. `eu-west-1` |
| AWS_ENDPOINT_URL   | (none)         | EC2 endpoint override (VPC endpoint, or a test server) |
| OCI_VNIC_ID        | (off)          | this agent's VNIC OCID, `ocid1.vnic....` |
| OCI_PRIVATE_IP     | (required)     | the secondary private IP that follows the leader |
| OCI_CLI            | oci            | the OCI CLI executable |
| AZURE_NIC_ID       | (off)          | this agent's NIC id `/subscriptions/.../networkInterfaces/<nic>` |
| AZURE_PRIVATE_IP   | (required)     | the private IP that follows the leader |
| AZURE_IP_CONFIG    | stkrelay-vip   | name of the ipConfiguration that carries it |
| AZURE_CLI          | az             | the Azure CLI executable (`az rest` with If-Match) |
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from elections.errors import ConfigError

START_RELAY, STOP_RELAY = "start_relay", "stop_relay"
ASSIGN_VIP, RELEASE_VIP = "assign_vip", "release_vip"
ASSIGN_IP, RELEASE_IP = "assign_secondary_ip", "release_secondary_ip"
ELECTED, DEMOTED = "elected", "demoted"

ACTION_DEFAULTS: dict[str, str] = {
    "VIP_ADDRESS": "",
    "VIP_PREFIX": "",
    "VIP_INTERFACE": "",
    "VIP_NETNS": "",
    "VIP_GARP": "auto",
    "VIP_GARP_COUNT": "1",
    "AWS_ENI_ID": "",
    "AWS_PRIVATE_IP": "",
    "AWS_REGION": "",
    "AWS_ENDPOINT_URL": "",
    "OCI_VNIC_ID": "",
    "OCI_PRIVATE_IP": "",
    "OCI_CLI": "oci",
    "AZURE_NIC_ID": "",
    "AZURE_PRIVATE_IP": "",
    "AZURE_IP_CONFIG": "stkrelay-vip",
    "AZURE_CLI": "az",
}
GARP_MODES = ("auto", "arping", "builtin", "off")


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


@dataclass(frozen=True)
class VipConfig:
    address: str
    prefix: int
    interface: str
    netns: str = ""
    garp: str = "auto"
    garp_count: int = 1


@dataclass(frozen=True)
class AwsConfig:
    eni_id: str
    private_ip: str
    region: str
    endpoint_url: str = ""


@dataclass(frozen=True)
class OciConfig:
    vnic_id: str
    private_ip: str
    cli: str = "oci"


@dataclass(frozen=True)
class AzureConfig:
    nic_id: str
    private_ip: str
    ip_config: str = "stkrelay-vip"
    cli: str = "az"


@dataclass(frozen=True)
class ActionConfig:
    """Which executors this agent uses; the relay is always part of a plan."""

    vip: VipConfig | None = None
    aws: AwsConfig | None = None
    oci: OciConfig | None = None
    azure: AzureConfig | None = None


_IFNAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")
_AZURE_NIC = re.compile(
    r"^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Network/networkInterfaces/[^/]+$", re.I
)


def action_config(values: Mapping[str, str]) -> tuple[ActionConfig, list[ConfigError]]:
    """The executors enabled by raw `[stk]` values (missing keys take
    `ACTION_DEFAULTS`). Never raises: bad values come back as `ConfigError`s,
    each naming its key with a hint, and leave that executor off."""
    v = {**ACTION_DEFAULTS, **{k.upper(): str(x).strip() for k, x in values.items()}}
    problems: list[ConfigError] = []

    def bad(key: str, message: str, hint: str) -> None:
        problems.append(ConfigError(key, message, hint))

    def address(key: str, owner: str) -> str | None:
        text = v[key]
        if not text:
            bad(key, f"is required with {owner}", f"set {key} to the address that follows the leader")
            return None
        try:
            return str(ipaddress.IPv4Address(text))
        except ValueError:
            bad(key, f"{text!r} is not an IPv4 address", "e.g. 192.168.1.250")
            return None

    return (
        ActionConfig(
            vip=_vip(v, bad) if v["VIP_ADDRESS"] else None,
            aws=_aws(v, bad, address) if v["AWS_ENI_ID"] else None,
            oci=_oci(v, bad, address) if v["OCI_VNIC_ID"] else None,
            azure=_azure(v, bad, address) if v["AZURE_NIC_ID"] else None,
        ),
        problems,
    )


def _vip(v: dict[str, str], bad: Any) -> VipConfig | None:
    ok = True
    text = v["VIP_ADDRESS"]
    addr, _, pfx = text.partition("/")
    pfx = pfx or v["VIP_PREFIX"] or "32"
    try:
        addr = str(ipaddress.IPv4Address(addr))
    except ValueError:
        bad("VIP_ADDRESS", f"{text!r} is not an IPv4 address", "e.g. 192.168.1.250 or 192.168.1.250/24")
        ok = False
    prefix = int(pfx) if pfx.isdigit() else -1
    if not 1 <= prefix <= 32:
        bad("VIP_PREFIX", f"{pfx!r} is not a prefix length", "use 1..32, e.g. 24 (default 32)")
        ok = False
    iface = v["VIP_INTERFACE"]
    if not _IFNAME.match(iface):
        why = "is required with VIP_ADDRESS" if not iface else f"{iface!r} is not an interface name"
        bad("VIP_INTERFACE", why, "name the LAN interface, e.g. eth0 (see `ip link`)")
        ok = False
    garp = v["VIP_GARP"].lower() or "auto"
    if garp not in GARP_MODES:
        bad("VIP_GARP", f"{garp!r} is not a mode", "use one of " + ", ".join(GARP_MODES))
        ok = False
    count = int(v["VIP_GARP_COUNT"]) if v["VIP_GARP_COUNT"].isdigit() else 0
    if not 1 <= count <= 10:
        bad("VIP_GARP_COUNT", f"{v['VIP_GARP_COUNT']!r} is out of range", "use 1..10")
        ok = False
    if not ok:
        return None
    return VipConfig(addr, prefix, iface, v["VIP_NETNS"], garp, count)


def _aws(v: dict[str, str], bad: Any, address: Any) -> AwsConfig | None:
    ok = True
    if not re.match(r"^eni-[0-9a-f]{8,}$", v["AWS_ENI_ID"]):
        bad("AWS_ENI_ID", f"{v['AWS_ENI_ID']!r} is not an ENI id", "e.g. eni-0123456789abcdef0")
        ok = False
    ip = address("AWS_PRIVATE_IP", "AWS_ENI_ID")
    if not v["AWS_REGION"]:
        bad("AWS_REGION", "is required with AWS_ENI_ID", "the ENI's region, e.g. eu-west-1")
        ok = False
    url = v["AWS_ENDPOINT_URL"]
    if url and not re.match(r"^https?://", url):
        bad("AWS_ENDPOINT_URL", f"{url!r} is not an http(s) URL", "leave empty for the regional endpoint")
        ok = False
    return AwsConfig(v["AWS_ENI_ID"], ip, v["AWS_REGION"], url) if ok and ip else None


def _oci(v: dict[str, str], bad: Any, address: Any) -> OciConfig | None:
    ok = True
    if not v["OCI_VNIC_ID"].startswith("ocid1.vnic."):
        bad(
            "OCI_VNIC_ID",
            f"{v['OCI_VNIC_ID']!r} is not a VNIC OCID",
            "e.g. ocid1.vnic.oc1.eu-frankfurt-1.abc",
        )
        ok = False
    ip = address("OCI_PRIVATE_IP", "OCI_VNIC_ID")
    return OciConfig(v["OCI_VNIC_ID"], ip, v["OCI_CLI"] or "oci") if ok and ip else None


def _azure(v: dict[str, str], bad: Any, address: Any) -> AzureConfig | None:
    ok = True
    if not _AZURE_NIC.match(v["AZURE_NIC_ID"]):
        bad(
            "AZURE_NIC_ID",
            f"{v['AZURE_NIC_ID']!r} is not a NIC resource id",
            "/subscriptions/<sub>/resourceGroups/<rg>/providers/Microsoft.Network/networkInterfaces/<nic>",
        )
        ok = False
    ip = address("AZURE_PRIVATE_IP", "AZURE_NIC_ID")
    name = v["AZURE_IP_CONFIG"] or "stkrelay-vip"
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,79}$", name):
        bad("AZURE_IP_CONFIG", f"{name!r} is not a valid ipConfiguration name", "e.g. stkrelay-vip")
        ok = False
    return AzureConfig(v["AZURE_NIC_ID"], ip, name, v["AZURE_CLI"] or "az") if ok and ip else None


# -- planning ----------------------------------------------------------------------


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
