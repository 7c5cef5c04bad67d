"""stkrelay installed from a wheel into a fresh venv, once per test session: what a
site gets from `pip install`, with no checkout on its path.

The wheel is built from a copy of the repository's files (tracked, and untracked
ones not ignored), so it carries only what the repository carries; pip resolves the
runtime pins from requirements.lock (its cache makes this ~20 s).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path

    def bin(self, name: str) -> Path:
        return self.venv / "bin" / name

    def env(self) -> dict[str, str]:
        """The environment of a shell on a site: no checkout on the path, no Django settings."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("STK_", "DJANGO_", "PYTHON"))}
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}/usr/bin:/bin"
        return env


def _run(argv: list[str], **kw) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, **kw)
    assert done.returncode == 0, f"{argv[:3]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def source_files() -> list[str]:
    out = _run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT).stdout.split("\n")
    return [f for f in out if f and (ROOT / f).is_file()]


def readme_extras() -> str:
    """The extras of README "Install on a site"'s pip line, as `[a,b]` ('' for none)."""
    readme = (ROOT / "README.md").read_text().split("## Install on a site", 1)[1]
    line = next(ln for ln in readme.splitlines() if "/bin/pip install -c requirements.lock" in ln)
    found = re.search(r"'\.(\[[a-z0-9,]+\])'", line)
    return found.group(1) if found else ""


def install(workdir: Path) -> Installed:
    src = workdir / "src"
    for rel in source_files():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, src / rel)
    wheels = workdir / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(src)])
    (wheel,) = wheels.glob("stkrelay-*.whl")
    venv = workdir / "venv"
    base = shutil.which("python3.11") or sys.executable
    _run([base, "-m", "venv", str(venv)])
    # The README's install line, with the wheel for its `.` (and the extras it names).
    _run([str(venv / "bin" / "pip"), "install", "-q", "-c", str(ROOT / "requirements.lock"),
          f"{wheel}{readme_extras()}"], cwd=workdir)  # fmt: skip
    return Installed(wheel, venv)
