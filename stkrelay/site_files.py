"""The files a site installs beside the package: the systemd units, the Grafana
dashboard, the Prometheus alert rules, the Redis and agent example configs.

They ship in the wheel as `stkrelay.site_files` package data (pyproject.toml maps
`packaging/` there); a source checkout finds them in its `packaging/`. `stkrelay
files` prints where each is; `stkrelay install-units [--dest DIR]` copies the two
units (default /etc/systemd/system) and names what it wrote.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
# Installed: stkrelay/site_files/ (package data); a checkout: packaging/ at its top.
INSTALLED = _HERE / "site_files"
CHECKOUT = _HERE.parent / "packaging"
UNITS = ("stkrelay@.service", "stkrelay-redis@.service")
FILES = {  # what -> path inside packaging/
    "unit": "stkrelay@.service",
    "redis-unit": "stkrelay-redis@.service",
    "redis-conf": "redis.conf.example",
    "dashboard": "grafana/stkrelay.json",
    "alerts": "prometheus/alerts.yml",
    "ini": "stk.ini.example",
}


def path_of(name: str) -> Path:
    return (INSTALLED if INSTALLED.is_dir() else CHECKOUT) / FILES[name]


def files_main(argv: list[str]) -> int:
    if argv:
        print("usage: stkrelay files", file=sys.stderr)
        return 2
    for name in FILES:
        path = path_of(name)
        print(f"{name:11} {path}{'' if path.is_file() else '  (missing)'}")
    return 0 if all(path_of(n).is_file() for n in FILES) else 1


def install_units_main(argv: list[str]) -> int:
    dest = Path("/etc/systemd/system")
    if argv[:1] == ["--dest"] and len(argv) == 2:
        dest = Path(argv[1])
    elif argv:
        print("usage: stkrelay install-units [--dest DIR]", file=sys.stderr)
        return 2
    if not dest.is_dir():
        print(f"stkrelay install-units: {dest} is not a directory", file=sys.stderr)
        return 1
    for unit in UNITS:
        target = dest / unit
        shutil.copyfile(path_of("unit" if unit == UNITS[0] else "redis-unit"), target)
        target.chmod(0o644)
        print(f"wrote {target}")
    print("then: systemctl daemon-reload && systemctl enable --now stkrelay@SITE")
    return 0
