"""Executors: what carries out an `ActionPlan`, one provider each, behind the
fencing gate (see `base`). `build_executors` makes the set an agent uses;
`leader_duties` turns it into the elector's `on_elected`/`on_demoted` hooks.

Wiring in the agent (the owner's part), for example:

    cfg = stk.actions  # the agent's Config: VIP_*, AWS_*, OCI_*, AZURE_* checked at load
    executors = build_executors(cfg, data_dir)
    gate = ActionFence(epoch_from_state(LocalState(data_dir), time.monotonic))
    on_elected, on_demoted = leader_duties(node, cfg, executors, gate, event_sink())

Vocabulary:

  Executor     one provider's `apply` of an action (vip, aws, azure, oci, relay) (`base`)
  ActionFence  fencing: an action runs only if its epoch is current (`base`)
  Outcome      what one action came to, recorded through a `Sink` (`base.run_plan`)
  Observer     an executor that says where its address really is (`observe`, read-only)
  held         the addresses this leader holds, in `addresses.json` (`held`)
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from elections.core.action_config import ActionConfig
from elections.core.actions import ActionPlan, demotion_plan, plan_for
from elections.executors.aws import AwsExecutor
from elections.executors.azure import AzCliClient, AzureExecutor
from elections.executors.base import (
    APPLIED,
    FAILED,
    FENCED,
    PLANNED,
    ActionFence,
    CommandFailed,
    Completed,
    Executor,
    ExecutorError,
    Fenced,
    Observer,
    Outcome,
    PreconditionFailed,
    ProviderError,
    Runner,
    Sink,
    epoch_from_state,
    run_command,
    run_plan,
)
from elections.executors.held import AddressBook
from elections.executors.oci import OciExecutor
from elections.executors.relay import RelayExecutor, relay_wanted
from elections.executors.vip import VipExecutor

__all__ = [
    "APPLIED",
    "FAILED",
    "FENCED",
    "PLANNED",
    "ActionFence",
    "AddressBook",
    "AwsExecutor",
    "AzCliClient",
    "AzureExecutor",
    "CommandFailed",
    "Completed",
    "Executor",
    "ExecutorError",
    "Fenced",
    "Observer",
    "OciExecutor",
    "Outcome",
    "PreconditionFailed",
    "ProviderError",
    "RelayExecutor",
    "VipExecutor",
    "build_executors",
    "epoch_from_state",
    "leader_duties",
    "relay_wanted",
    "run_command",
    "run_plan",
]

log = logging.getLogger("stkrelay.actions")


def build_executors(
    config: ActionConfig,
    data_dir: str | os.PathLike[str],
    runner: Runner = run_command,
) -> list[Executor]:
    """The relay executor, plus one per provider the config enables."""
    out: list[Executor] = [RelayExecutor(data_dir)]
    if config.vip is not None:
        out.append(VipExecutor(runner))
    if config.aws is not None:
        out.append(AwsExecutor())
    if config.oci is not None:
        out.append(OciExecutor(runner))
    if config.azure is not None:
        out.append(AzureExecutor(client_for=lambda cli: AzCliClient(runner, cli)))
    return out


def leader_duties(
    node: str,
    config: ActionConfig,
    executors: list[Executor],
    gate: ActionFence,
    sink: Sink | None,
    notify: Callable[[Outcome], None] | None = None,
) -> tuple[Callable[[int], list[Outcome]], Callable[[int], list[Outcome]]]:
    """(on_elected, on_demoted): each plans for the epoch and runs the plan
    through the gate; both return the outcomes and never raise. `notify` gets
    each outcome as it is known (the agent passes `held.AddressBook`)."""

    def on_elected(epoch: int) -> list[Outcome]:
        return _run(plan_for(epoch, node, config))

    def on_demoted(epoch: int) -> list[Outcome]:
        return _run(demotion_plan(epoch, node, config))

    def _run(plan: ActionPlan) -> list[Outcome]:
        outcomes = run_plan(plan, executors, gate, sink, notify=notify)
        bad = [o for o in outcomes if not o.ok]
        if bad:
            log.warning("%s plan of epoch %s: %d of %d action(s) not applied", plan.kind, plan.epoch,
                        len(bad), len(outcomes))  # fmt: skip
        return outcomes

    return on_elected, on_demoted
