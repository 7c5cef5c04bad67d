"""Which executors an agent uses, from its raw `[stk]` values (pure, ADR 0011).

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from elections.errors import ConfigError

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

    @property
    def vip_address(self) -> str:
        """The VIP (without its prefix), '' when this agent has none."""
        return self.vip.address if self.vip is not None else ""


_IFNAME = re.compile(r"^[A-Za-z0-9_.:@-]{1,15}$")
_AZURE_NIC = re.compile(
    r"^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Network/networkInterfaces/[^/]+$", re.I
)


Refuse = Callable[[str, str, str], None]  # (key, what is wrong, a hint): one ConfigError
Address = Callable[[str, str], "str | None"]  # (key, the executor that needs it): its IPv4 address


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


def _vip(v: dict[str, str], bad: Refuse) -> VipConfig | None:
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


def _aws(v: dict[str, str], bad: Refuse, address: Address) -> AwsConfig | None:
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


def _oci(v: dict[str, str], bad: Refuse, address: Address) -> OciConfig | None:
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


def _azure(v: dict[str, str], bad: Refuse, address: Address) -> AzureConfig | None:
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
