"""The libraries a configured backend needs, checked when the config is read (`stkconfig.places`).

`smb://` lease dirs need smbprotocol and pyspnego (the `smb` extra), `LEASE_STORE =
etcd` needs etcd3gw (the `etcd` extra). A clean install without the extra used to
end in a `ModuleNotFoundError` traceback at the agent's first read while `check`
said no issues; now it is `stkrelay.E170` (smb) or `stkrelay.E171` (etcd), naming
the extra to install. The import is tried for real (a broken install fails too).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from stkconfig.bad import Bad

SMB_MODULES = ("smbprotocol", "spnego")
ETCD_MODULES = ("etcd3gw",)
INSTALL = "pip install -c requirements.lock '.[smb,etcd]' (README, Install)"


def missing(modules: Iterable[str]) -> list[str]:
    """The modules of `modules` that cannot be imported here."""
    out = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            out.append(name)
    return out


def check_libraries(uses_smb: bool, uses_etcd: bool, bad: Bad) -> None:
    if uses_smb and (gone := missing(SMB_MODULES)):
        bad("stkrelay.E170", "LEASE_DIR", f"an smb:// share needs {', '.join(gone)}, which is not installed",
            f"install the smb extra: {INSTALL}")  # fmt: skip
    if uses_etcd and (gone := missing(ETCD_MODULES)):
        bad("stkrelay.E171", "LEASE_STORE", f"etcd needs {', '.join(gone)}, which is not installed",
            f"install the etcd extra: {INSTALL}")  # fmt: skip
