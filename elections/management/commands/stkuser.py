"""`python manage.py stkuser`: panel accounts and API tokens on this agent.

    stkuser add NAME --role viewer|operator [--password-file PATH]   (else $STK_USER_PASSWORD, else stdin)
    stkuser role NAME --role viewer|operator
    stkuser passwd NAME [--password-file PATH]
    stkuser token NAME [--label L]      prints a new bearer token once
    stkuser revoke NAME                 deletes every token of NAME
    stkuser disable NAME | enable NAME
    stkuser list

The password comes from the first line of `--password-file PATH` (`-` is
stdin), else from `$STK_USER_PASSWORD`, else from stdin (a prompt on a
terminal, else its first line). `--password P` is refused (exit 2, naming
these): argv is visible to every local user (`ps`, /proc/PID/cmdline) for as
long as the command runs (`stkhost.secret_source`).

Accounts live in this agent's database: create them on each agent whose panel
people use. Run it with the agent's settings (STK_INI=/path/to/stk.ini).
"""

from __future__ import annotations

import getpass
import os
import sys

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import CommandError
from django.db import transaction

from elections.ports.local.terminal import make_safe
from elections.web.auth import ROLES, ensure_roles, role_of
from stkhost.secret_source import SecretUnreadable, argv_refusal, read_secret
from stkrelay.operator_command import OperatorCommand

PASSWORD_ENV = "STK_USER_PASSWORD"


class Command(OperatorCommand):
    help = "Manage panel users (roles viewer/operator) and API tokens."

    def add_arguments(self, parser):
        parser.add_argument(
            "verb", choices=["add", "role", "passwd", "token", "revoke", "disable", "enable", "list"]
        )
        parser.add_argument("name", nargs="?")
        parser.add_argument("--role", choices=sorted(ROLES))
        parser.add_argument(
            "--password-file",
            metavar="PATH",
            help=f"the password: PATH's first line ('-': stdin; else ${PASSWORD_ENV}, else stdin)",
        )
        parser.add_argument("--password", help="refused: visible to other users in `ps`; use --password-file")
        parser.add_argument("--label", default="", help="a label for the token")

    def handle(self, *args, verb, name, role, password, password_file, label, **options):
        make_safe(self)  # user names and labels are printed escaped (elections.ports.local.terminal)
        if password is not None:
            self.stderr.write(
                "stkuser: "
                + argv_refusal("--password", "--password-file PATH ('-': stdin)", f"${PASSWORD_ENV}", "stdin")
            )
            raise SystemExit(2)
        ensure_roles()
        if verb in ("add", "passwd"):
            try:
                password = read_secret(password_file, "--password-file") if password_file else None
            except SecretUnreadable as exc:
                raise CommandError(str(exc)) from None
            password = password or os.environ.get(PASSWORD_ENV) or None
        users = get_user_model()
        if verb == "list":
            for u in users.objects.order_by("username"):
                tokens = u.stk_tokens.count()
                state = "" if u.is_active else " (disabled)"
                self.stdout.row(u.username, role_of(u), f"{tokens} token(s){state}")
            return
        if not name:
            raise CommandError(f"stkuser {verb} needs a user name")
        if verb == "add":
            if not role:
                raise CommandError("stkuser add needs --role viewer|operator")
            if users.objects.filter(username=name).exists():
                raise CommandError(f"user {name!r} exists (use `stkuser role` or `stkuser passwd`)")
            secret = self._password(password, name)
            with transaction.atomic():
                user = users.objects.create_user(username=name)
                self._set_password(user, secret)
                self._set_role(user, role)
            self.stdout.write(f"created {name} ({role})")
            return
        try:
            user = users.objects.get(username=name)
        except users.DoesNotExist:
            raise CommandError(f"no user {name!r}") from None
        if verb == "role":
            if not role:
                raise CommandError("stkuser role needs --role viewer|operator")
            self._set_role(user, role)
            self.stdout.write(f"{name} is now {role}")
        elif verb == "passwd":
            self._set_password(user, self._password(password, name))
            self.stdout.write(f"password of {name} changed")
        elif verb == "token":
            from elections.audit import ApiToken

            _, key = ApiToken.issue(user, label)
            self.stdout.write(key)
        elif verb == "revoke":
            n, _ = user.stk_tokens.all().delete()
            self.stdout.write(f"{n} token(s) of {name} revoked")
        elif verb in ("disable", "enable"):
            user.is_active = verb == "enable"
            user.save(update_fields=["is_active"])
            self.stdout.write(f"{name} {verb}d")

    def _password(self, given: str | None, name: str) -> str:
        if given is not None:
            return given
        if sys.stdin.isatty():
            first = getpass.getpass(f"Password for {name}: ")
            if getpass.getpass("Again: ") != first:
                raise CommandError("the passwords differ")
            return first
        line = sys.stdin.readline()
        if not line.strip():
            raise CommandError(f"no password on stdin (or use --password-file PATH, or ${PASSWORD_ENV})")
        return line.rstrip("\r\n")

    def _set_password(self, user, secret: str) -> None:
        try:
            validate_password(secret, user)
        except ValidationError as exc:
            raise CommandError("password refused: " + " ".join(exc.messages)) from None
        user.set_password(secret)
        user.save()

    def _set_role(self, user, role: str) -> None:
        user.groups.remove(*Group.objects.filter(name__in=list(ROLES)))
        user.groups.add(Group.objects.get(name=role))
