"""`python -m stkrelay.child relay.runner|relay.server.entry|relay.server.station_door [ARGS]`: a
Django-free child of `runagent`.

The composition root for the relay's own processes: it loads the configuration
(`stkrelay.config`, from `STK_INI` like every command), sets up logging, refuses to
start on any problem (one line each, exit 2), and hands the typed `Config` to the
child's `main(config, argv)`. So `relay/` never reads the configuration itself.
"""

from __future__ import annotations

import logging.config
import sys
from collections.abc import Callable

from stkconfig.logs import logging_config
from stkconfig.model import Config
from stkrelay import config


def _children() -> dict[str, tuple[str, Callable[[Config, list[str]], int]]]:
    from relay import runner
    from relay.server import entry, station_door

    return {"relay.runner": ("runrelay", runner.main), "relay.server.entry": ("entry", entry.main),
            "relay.server.station_door": ("door", station_door.main)}  # fmt: skip


def main(argv: list[str]) -> int:
    children = _children()
    if not argv or argv[0] not in children:
        print(f"usage: python -m stkrelay.child {{{'|'.join(children)}}} [ARGS]", file=sys.stderr)
        return 2
    prog, run = children[argv[0]]
    stk = config.load(check_dirs=None)  # STK_SKIP_DIR_CHECKS=1: not on disk
    logging.config.dictConfig(logging_config(stk.log_format, stk.node, kmsn=stk.kmsn))
    if stk.problems:
        for problem in stk.problems:
            print(f"{prog}: config {stk.source}: {problem.line()}", file=sys.stderr)
        return 2
    return run(stk, argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
