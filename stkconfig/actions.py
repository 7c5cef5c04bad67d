"""The leader's actions: `VIP_*`, `AWS_*`, `OCI_*`, `AZURE_*` (ADR 0011), the `actions` section.

The keys are read by `elections.core.action_config.action_config` (pure, the executors' own
types); its problems come back here with one id per executor family (`ACTION_IDS`), so a bad
address stops start-up instead of leaving that executor silently off.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from elections.core.action_config import ActionConfig, action_config
from stkconfig.bad import Bad
from stkconfig.raw import Raw

ACTION_IDS: dict[str, str] = {  # key prefix -> id, for the leader-action problems
    "VIP": "stkrelay.E014",
    "AWS": "stkrelay.E015",
    "OCI": "stkrelay.E016",
    "AZURE": "stkrelay.E017",
}


@dataclass(frozen=True)
class Actions:
    actions: ActionConfig = field(default_factory=ActionConfig)


def parse(raw: Raw, known: object, bad: Bad) -> Actions:
    config, problems = action_config(raw.values)
    for err in problems:
        bad(ACTION_IDS[err.key.partition("_")[0]], err.key, err.message, err.hint)
    return Actions(config)
