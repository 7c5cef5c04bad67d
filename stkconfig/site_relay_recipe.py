"""Which site relay source a `RELAY_EXEC` command line runs through the launcher
`stkrelay-site-relay` (`relay.server.site_relay`, issue 36): `source_of`, for the check that it is
there before the first election (`stkconfig.relay_kind`, E078).

The launcher runs as a script on the image's bare Python and imports nothing of the project, so
its names and its options that take a value are written here as well as in its parser;
`tests/test_site_relay.py` keeps the two in step.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

LAUNCHER_NAMES = ("stkrelay-site-relay", "relay.server.site_relay", "site_relay.py")
VALUED = ("--host", "--port", "--passthrough-port", "--site-port", "--site-passthrough-port")


def source_of(argv: Sequence[str]) -> str | None:
    """The site relay source a `RELAY_EXEC` command line runs through the launcher, or None."""
    words = list(argv)
    for i, word in enumerate(words):
        if any(word == name or word.endswith(os.sep + name) for name in LAUNCHER_NAMES):
            rest = iter(words[i + 1 :])
            for arg in rest:
                if arg == "--":
                    return ""
                if arg in VALUED:
                    next(rest, None)
                elif not arg.startswith("-"):
                    return arg
            return ""
    return None
