#!/usr/bin/env python
"""Django's command-line utility for the stkrelay agent."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "stkrelay.settings")
    if sys.argv[1:2] == ["runagent"]:  # the agent's supervisor loads no Django (issue 41)
        from elections.management.agent_root import main as runagent

        sys.exit(runagent(sys.argv[2:]))
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
