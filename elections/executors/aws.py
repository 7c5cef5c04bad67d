"""The AWS executor: a secondary private IP that follows the leader (boto3 EC2).

`assign_secondary_ip` seizes the address for this agent's ENI with
`AssignPrivateIpAddresses(NetworkInterfaceId, PrivateIpAddresses=[ip],
AllowReassignment=True)`: the address moves from whichever ENI holds it, last
writer wins. The move is asynchronous, so the executor then polls
`DescribeNetworkInterfaces` until the ENI lists the address (bounded).
`release_secondary_ip` unassigns the address from this agent's ENI, and only if
the ENI still lists it (after a failover it is already on the new leader's).

`observe` (read-only, ADR 0011 phase 4) lists the ENIs of this ENI's subnet
(`DescribeNetworkInterfaces` filtered on `subnet-id`, paged, at most
`MAX_PAGES`) and names every one that carries the address: a secondary IP can
only be on an ENI of its subnet. The subnet is read once (the ENI's own
description). The `addresses.private-ip-address` filter would be shorter,
but moto 5 matches it against primary addresses only.

boto3 is imported only when a client is first needed; `client_factory(region,
endpoint_url)` is injectable (tests, or a pre-built session).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from elections.core.actions import ASSIGN_IP, RELEASE_IP, Action
from elections.core.ownership import MAX_HOLDERS, Sighting
from elections.executors.base import Outcome, ProviderError, Recheck, applied, no_recheck

CONFIRM_WITHIN = 10.0  # seconds for DescribeNetworkInterfaces to show the move
CONFIRM_EVERY = 0.5
MAX_PAGES = 10  # of DescribeNetworkInterfaces (1000 ENIs each) when observing

ClientFactory = Callable[[str, str], Any]


def boto3_client(region: str, endpoint_url: str) -> Any:
    """An EC2 client with short timeouts and the standard retry mode."""
    import boto3
    from botocore.config import Config

    config = Config(connect_timeout=5, read_timeout=10, retries={"max_attempts": 3, "mode": "standard"})
    # A session of its own: boto3's default session is not safe to build clients from two
    # threads at once (a duty plan and the ownership watch may both start here).
    session = boto3.session.Session()
    return session.client("ec2", region_name=region, endpoint_url=endpoint_url or None, config=config)


class AwsExecutor:
    name = "aws"
    verbs = frozenset({ASSIGN_IP, RELEASE_IP})

    def __init__(
        self,
        client_factory: ClientFactory = boto3_client,
        confirm_within: float = CONFIRM_WITHIN,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client_factory = client_factory
        self.confirm_within = confirm_within
        self.sleep = sleep
        self.monotonic = monotonic
        self._clients: dict[tuple[str, str], Any] = {}
        self._subnets: dict[str, str] = {}  # eni -> its subnet (never changes)
        self._lock = threading.Lock()  # the duty plans and the ownership watch share the clients

    def apply(self, action: Action, recheck: Recheck = no_recheck) -> Outcome:
        a = action.args
        eni, ip = a["eni_id"], a["private_ip"]
        try:
            ec2 = self._client(a["region"], a.get("endpoint_url") or "")
            if action.verb == ASSIGN_IP:
                return self._assign(action, ec2, eni, ip, bool(a.get("allow_reassignment", True)))
            return self._release(action, ec2, eni, ip, recheck)
        except ProviderError:
            raise
        except Exception as exc:
            raise ProviderError(_explain(exc)) from exc

    def observe(self, args: dict[str, Any]) -> Sighting:
        """Which ENIs of this ENI's subnet carry the address (read-only; never raises)."""
        eni, ip = args["eni_id"], args["private_ip"]
        try:
            ec2 = self._client(args["region"], args.get("endpoint_url") or "")
            subnet = self._subnets.get(eni)
            if subnet is None:
                [nic] = ec2.describe_network_interfaces(NetworkInterfaceIds=[eni])["NetworkInterfaces"]
                subnet = self._subnets[eni] = str(nic["SubnetId"])
            holders = []
            token = ""
            for _ in range(MAX_PAGES):
                kw = {"NextToken": token} if token else {}
                in_subnet = [{"Name": "subnet-id", "Values": [subnet]}]
                doc = ec2.describe_network_interfaces(Filters=in_subnet, **kw)
                nics = doc.get("NetworkInterfaces", [])
                holders += [n["NetworkInterfaceId"] for n in nics if ip in _ips(n)]
                token = doc.get("NextToken") or ""
                if not token:
                    break
            else:
                raise ProviderError(f"subnet {subnet} has more than {MAX_PAGES} pages of ENIs")
        except Exception as exc:
            why = str(exc) if isinstance(exc, ProviderError) else _explain(exc)
            return Sighting(self.name, ip, eni, error=why)
        held = eni in holders
        return Sighting(self.name, ip, eni, held, tuple(sorted(holders)[:MAX_HOLDERS]), True)

    def _client(self, region: str, endpoint_url: str) -> Any:
        key = (region, endpoint_url)
        with self._lock:
            if key not in self._clients:
                self._clients[key] = self.client_factory(region, endpoint_url)
            return self._clients[key]

    def _assign(self, action: Action, ec2: Any, eni: str, ip: str, allow: bool) -> Outcome:
        ec2.assign_private_ip_addresses(
            NetworkInterfaceId=eni, PrivateIpAddresses=[ip], AllowReassignment=allow
        )
        deadline = self.monotonic() + self.confirm_within
        while True:
            if ip in _addresses(ec2, eni):
                how = "seized (AllowReassignment)" if allow else "assigned"
                return applied(action, f"{ip} {how} on {eni}; confirmed by DescribeNetworkInterfaces")
            if self.monotonic() >= deadline:
                raise ProviderError(
                    f"AWS accepted {ip} for {eni} but DescribeNetworkInterfaces did not list it "
                    f"within {self.confirm_within:g} s"
                )
            self.sleep(CONFIRM_EVERY)

    def _release(self, action: Action, ec2: Any, eni: str, ip: str, recheck: Recheck) -> Outcome:
        if ip not in _addresses(ec2, eni):
            return applied(action, f"{ip} is not on {eni} (any more): nothing to release")
        recheck()
        ec2.unassign_private_ip_addresses(NetworkInterfaceId=eni, PrivateIpAddresses=[ip])
        return applied(action, f"{ip} unassigned from {eni}")


def _addresses(ec2: Any, eni: str) -> set[str]:
    doc = ec2.describe_network_interfaces(NetworkInterfaceIds=[eni])
    out: set[str] = set()
    for nic in doc.get("NetworkInterfaces", []):
        out |= _ips(nic)
    return out


def _ips(nic: dict[str, Any]) -> set[str]:
    return {i["PrivateIpAddress"] for i in nic.get("PrivateIpAddresses", []) if i.get("PrivateIpAddress")}


def _explain(exc: Exception) -> str:
    """`AWS <Code>: <Message>` for an API error; the exception's text otherwise."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and isinstance(response.get("Error"), dict):
        err = response["Error"]
        return f"AWS {err.get('Code', '?')}: {err.get('Message', '')}".rstrip(": ")
    if isinstance(exc, ImportError):
        return "boto3 is not installed (pip install boto3)"
    return f"AWS call failed: {type(exc).__name__}: {exc}"
