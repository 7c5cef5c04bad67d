"""Screenshots of every panel page, from a real 3-agent demo site.

    .venv/bin/python scripts/screenshots.py [--out docs/screenshots]

Starts agents S001-S003 on 127.0.0.21-23 (tests/harness.py), creates an
operator with `manage.py stkuser`, logs in with Playwright driving Debian's
Chromium (never `playwright install`), drains the leader to have some history,
and writes one PNG per page. Needs: `apt-get install chromium`, `pip install playwright`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from harness import CHROMIUM, KMSN, PY, Site, wait_until  # noqa: E402
from harness import CHROMIUM_ARGS as ARGS  # noqa: E402

PASSWORD = "screenshot-pass-2024"


def stkuser(agent, *args: str, password: str | None = None) -> str:  # type: ignore[no-untyped-def]
    env = {k: v for k, v in os.environ.items() if not k.startswith("STK_")}
    env["STK_INI"] = str(agent.ini)
    out = subprocess.run(
        [PY, str(ROOT / "manage.py"), "stkuser", *args],
        input=(password or "") + "\n",
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if out.returncode != 0:
        raise RuntimeError(f"stkuser {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if CHROMIUM is None:
        raise SystemExit("Debian's chromium is missing: apt-get install -y chromium")
    from playwright.sync_api import sync_playwright

    work = Path(tempfile.mkdtemp(prefix="stk-shots-"))
    site = Site(work / "site", n=3)
    try:
        site.start()
        first = site.wait_leader(60)
        leader = site.by_name(first.node)
        wait_until(lambda: (leader.data_dir / "pool.json").exists(), 30, "a pool view")
        stkuser(leader, "add", "alice", "--role", "operator", password=PASSWORD)
        stkuser(leader, "add", "victor", "--role", "viewer", password=PASSWORD)
        base = leader.web_url  # https://, its self-signed certificate (the browser is told to accept it)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(
                viewport={"width": 1360, "height": 900}, device_scale_factor=1, ignore_https_errors=True
            )
            page.goto(f"{base}/login/")
            page.screenshot(path=str(out / "01-login.png"), full_page=True)
            page.fill("#id_username", "alice")
            page.fill("#id_password", PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_selector("table.grid")
            page.wait_for_timeout(1500)
            page.screenshot(path=str(out / "02-sites.png"), full_page=True)
            page.goto(f"{base}/sites/{KMSN}/")
            page.wait_for_selector("#site-members")
            page.wait_for_timeout(1500)
            page.screenshot(path=str(out / "03-site.png"), full_page=True)
            # A drain of a follower: the confirmation, then progress.
            follower = next(a.name for a in site.agents if a.name != first.node)
            page.goto(f"{base}/sites/{KMSN}/drain/?target={follower}&epoch={first.epoch}")
            page.screenshot(path=str(out / "04-confirm-drain.png"), full_page=True)
            page.goto(f"{base}/sites/{KMSN}/promote/?epoch={first.epoch}")
            page.screenshot(path=str(out / "05-confirm-promote.png"), full_page=True)
            # Drain the leader so that history and audit have something to show.
            page.goto(f"{base}/sites/{KMSN}/drain/?target={first.node}&epoch={first.epoch}")
            page.fill("#reason", "maintenance window")
            page.click("button.danger")
            page.wait_for_selector(".progress")
            page.screenshot(path=str(out / "06-progress.png"), full_page=True)
            try:
                page.wait_for_selector(".progress[data-done='1']", timeout=30000)
            except Exception:
                pass
            page.screenshot(path=str(out / "07-progress-done.png"), full_page=True)
            # A stale-epoch attempt, for the audit page.
            page.goto(f"{base}/sites/{KMSN}/drain/?target={follower}&epoch={first.epoch}")
            page.click("button.danger")
            page.screenshot(path=str(out / "08-stale-epoch.png"), full_page=True)
            page.goto(f"{base}/audit/")
            page.screenshot(path=str(out / "10-audit.png"), full_page=True)
            page.goto(f"{base}/sites/{KMSN}/?window=15m")
            page.wait_for_timeout(2500)
            page.screenshot(path=str(out / "11-site-after-drain.png"), full_page=True)
            # A viewer's view: buttons disabled, with the reason.
            viewer = browser.new_page(viewport={"width": 1360, "height": 900})
            viewer.goto(f"{base}/login/")
            viewer.fill("#id_username", "victor")
            viewer.fill("#id_password", PASSWORD)
            viewer.click("button[type=submit]")
            viewer.goto(f"{base}/sites/{KMSN}/")
            viewer.wait_for_selector("#site-members")
            viewer.screenshot(path=str(out / "12-site-viewer.png"), full_page=True)
            # No eligible member left: drain the others (the last one with force) → no leader, red.
            page.goto(f"{base}/sites/{KMSN}/")
            for _ in range(3):
                enabled = page.locator("a.button.drain")
                if enabled.count() == 0:
                    break
                target = enabled.first.get_attribute("href")
                page.goto(base + target)
                if page.locator("#force").count():
                    page.check("#force")
                page.fill("#reason", "screenshot: no eligible member")
                page.click("button.danger")
                page.wait_for_selector(".progress[data-done='1']", timeout=30000)
                page.goto(f"{base}/sites/{KMSN}/")
                page.wait_for_timeout(500)
            page.goto(f"{base}/")
            page.wait_for_selector("tr.bad", timeout=30000)
            page.wait_for_timeout(1000)
            page.screenshot(path=str(out / "13-sites-no-leader.png"), full_page=True)
            page.goto(f"{base}/sites/{KMSN}/?window=15m")
            page.wait_for_timeout(1000)
            page.screenshot(path=str(out / "14-site-no-leader.png"), full_page=True)
            page.goto(f"{base}/history/?period=all")
            page.screenshot(path=str(out / "09-history.png"), full_page=True)
            browser.close()
    finally:
        site.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"screenshots in {out}")


if __name__ == "__main__":
    main()
