"""The AWS executor: a secondary private IP that follows the leader (boto3 EC2).

`assign_secondary_ip` seizes the address for this agent's ENI with
`AssignPrivateIpAddresses(NetworkInterfaceId, PrivateIpAddresses=[ip],
AllowReassignment=True)`: the address moves from whichever ENI holds it, last
writer wins. The move is asynchronous, so the executor then polls
`DescribeNetworkInterfaces` until the ENI lists the address (bounded).
`release_secondary_ip` unassigns the address from this agent's ENI, and only if
the ENI still lists it (after a failover it is already on the new leader's).

boto3 is imported only when a client is first needed; `client_factory(region,
endpoint_url)` is injectable (tests, or a pre-built session).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from elections.core.actions import ASSIGN_IP, RELEASE_IP, Action
from elections.executors.base import Outcome, ProviderError, Recheck, applied, no_recheck

CONFIRM_WITHIN = 10.0  # seconds for DescribeNetworkInterfaces to show the move
CONFIRM_EVERY = 0.5

ClientFactory = Callable[[str, str], Any]


def boto3_client(region: str, endpoint_url: str) -> Any:
    """An EC2 client with short timeouts and the standard retry mode."""
    import boto3
    from botocore.config import Config

    config = Config(connect_timeout=5, read_timeout=10, retries={"max_attempts": 3, "mode": "standard"})
    return boto3.client("ec2", region_name=region, endpoint_url=endpoint_url or None, config=config)


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

    def _client(self, region: str, endpoint_url: str) -> Any:
        key = (region, endpoint_url)
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
    out = set()
    for nic in doc.get("NetworkInterfaces", []):
        for item in nic.get("PrivateIpAddresses", []):
            if item.get("PrivateIpAddress"):
                out.add(item["PrivateIpAddress"])
    return out


def _explain(exc: Exception) -> str:
    """`AWS <Code>: <Message>` for an API error; the exception's text otherwise."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and isinstance(response.get("Error"), dict):
        err = response["Error"]
        return f"AWS {err.get('Code', '?')}: {err.get('Message', '')}".rstrip(": ")
    if isinstance(exc, ImportError):
        return "boto3 is not installed (pip install boto3)"
    return f"AWS call failed: {type(exc).__name__}: {exc}"
