"""Screenshots of every panel page, from a real 3-agent demo site, in English and
Traditional Chinese, on a desktop (1360 px) and a phone (390 px).

    .venv/bin/python scripts/screenshots.py [--out docs/screenshots]

Starts agents S001-S003 on 127.0.0.21-23 (tests/harness.py; TIME_ZONE = Asia/Taipei), creates an operator
and a viewer with `manage.py stkuser`, and drives Debian's Chromium with Playwright
(never `playwright install`), each browser asking for its language (Accept-Language,
as an operator's browser does). The story: the healthy site; a drain of the leader
done in the Chinese panel; a promote done in the English one; a follower's agent
killed (it reads gone); every member drained (no leader). One PNG per page, language
and width: `<out>/<en|zh-Hant>/<desktop|phone>/NN-name.png`.
Needs: `apt-get install chromium`, `pip install playwright`.
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
LANGUAGES = {"en": "en-US", "zh-Hant": "zh-TW"}
WIDTHS = {"desktop": {"width": 1360, "height": 900}, "phone": {"width": 390, "height": 844}}
SITE = f"/sites/{KMSN}/"


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


class Shots:
    """One logged-in page per (language, width), and where its PNGs go."""

    def __init__(self, browser, base: str, out: Path, user: str) -> None:  # type: ignore[no-untyped-def]
        self.base, self.out, self.pages = base, out, {}
        for lang, locale in LANGUAGES.items():
            for width, viewport in WIDTHS.items():
                context = browser.new_context(viewport=viewport, locale=locale, ignore_https_errors=True,
                                              device_scale_factor=1)  # fmt: skip
                page = context.new_page()
                page.set_default_timeout(30_000)
                page.goto(f"{base}/login/")
                self.pages[(lang, width)] = page
                (out / lang / width).mkdir(parents=True, exist_ok=True)
        self.shoot("01-login")
        for page in self.pages.values():
            page.fill("#id_username", user)
            page.fill("#id_password", PASSWORD)
            page.click("form[action='/login/'] button[type=submit]")
            page.wait_for_selector("main")

    def page(self, lang: str = "en", width: str = "desktop"):  # type: ignore[no-untyped-def]
        return self.pages[(lang, width)]

    def shoot(
        self, name: str, path: str | None = None, wait: str | None = None, settle_ms: int = 1200
    ) -> None:
        for (lang, width), page in self.pages.items():
            if path is not None:
                page.goto(self.base + path)
            if wait:
                page.wait_for_selector(wait)
            page.wait_for_timeout(settle_ms)
            page.screenshot(path=str(self.out / lang / width / f"{name}.png"), full_page=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    args = parser.parse_args()
    out = Path(args.out)
    if CHROMIUM is None:
        raise SystemExit("Debian's chromium is missing: apt-get install -y chromium")
    from playwright.sync_api import sync_playwright

    for old in out.glob("*.png"):
        old.unlink()
    for lang in LANGUAGES:
        shutil.rmtree(out / lang, ignore_errors=True)
    work = Path(tempfile.mkdtemp(prefix="stk-shots-"))
    site = Site(work / "site", n=3, extra={"TIME_ZONE": "Asia/Taipei"})  # the sites' own zone
    try:
        site.start()
        first = site.wait_leader(60)
        panel = site.by_name(first.node)
        wait_until(lambda: (panel.data_dir / "pool.json").exists(), 30, "a pool view")
        stkuser(panel, "add", "alice", "--role", "operator", password=PASSWORD)
        stkuser(panel, "add", "victor", "--role", "viewer", password=PASSWORD)
        base = panel.web_url  # https://, its self-signed certificate (the browser is told to accept it)
        follower = next(a.name for a in site.agents if a.name != first.node)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            shots = Shots(browser, base, out, "alice")
            shots.shoot("02-sites", "/", wait="table.grid")
            shots.shoot("03-site", SITE, wait="#site-members")
            shots.shoot("04-confirm-drain", f"{SITE}drain/?target={follower}&epoch={first.epoch}")
            shots.shoot("05-confirm-promote", f"{SITE}promote/?epoch={first.epoch}")
            # The leader is drained in the Chinese panel: it hands leadership over.
            zh = shots.page("zh-Hant")
            zh.goto(f"{base}{SITE}drain/?target={first.node}&epoch={first.epoch}")
            zh.fill("#reason", "維護時段")
            zh.click("button.danger")
            zh.wait_for_selector(".progress[data-done='1']", timeout=40_000)
            progress = zh.url.replace(base, "")
            shots.shoot("06-progress-done", progress, wait=".progress")
            second = site.wait_leader(30, other_than=first.node)
            # A stale-epoch attempt, refused, for the audit page.
            for page in shots.pages.values():
                page.goto(f"{base}{SITE}undrain/?target={first.node}&epoch={first.epoch}")
                page.click("button.danger")
                page.screenshot(path=str(page_path(out, shots, page, "07-stale-epoch")), full_page=True)
            # A promote back to the first leader's peer, in English.
            en = shots.page("en")
            en.goto(f"{base}{SITE}undrain/?target={first.node}&epoch={second.epoch}")
            en.click("button.danger")
            en.wait_for_selector(".progress[data-done='1']", timeout=40_000)
            shots.shoot("08-history", "/history/?period=all", wait="table.grid")
            shots.shoot("09-audit", "/audit/", wait="table.grid")
            shots.shoot("10-site-after-drain", SITE, wait="#site-members")
            # A follower's agent killed: it reads gone (since its heartbeat outlived the TTL).
            victim = next(a for a in site.agents if a.name not in (second.node, panel.name))
            victim.kill9()
            wait_until(lambda: _role(en, base, victim.name) == "gone", 60, f"{victim.name} shown as gone")
            en.wait_for_selector(
                f'tr[data-member="{victim.name}"] .reasons', timeout=30_000
            )  # past the hold too
            shots.shoot("11-site-member-gone", SITE, wait="#site-members")
            # A viewer's view: every button disabled, with the reason.
            viewer = Shots(browser, base, out / "_viewer", "victor")
            for (lang, width), page in viewer.pages.items():
                page.goto(base + SITE)
                page.wait_for_selector("#site-members")
                page.wait_for_timeout(800)
                page.screenshot(path=str(out / lang / width / "12-site-viewer.png"), full_page=True)
                page.context.close()
            shutil.rmtree(out / "_viewer", ignore_errors=True)
            # Every live member drained (the last one with force): no leader, red.
            for _ in range(4):
                en.goto(base + SITE)
                en.wait_for_timeout(500)
                enabled = en.locator('tr[data-member]:not([data-role="gone"]) a.button.drain')
                if enabled.count() == 0:
                    break
                en.goto(base + enabled.first.get_attribute("href"))
                if en.locator("#force").count():
                    en.check("#force")
                en.fill("#reason", "screenshot: no eligible member")
                en.click("button.danger")
                en.wait_for_selector(".progress[data-done='1']", timeout=40_000)
            shots.shoot("13-sites-no-leader", "/", wait="tr.bad")
            shots.shoot("14-site-no-leader", SITE, wait="#site-members")
            browser.close()
    finally:
        site.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"screenshots in {out}")


def page_path(out: Path, shots: Shots, page, name: str) -> Path:  # type: ignore[no-untyped-def]
    lang, width = next(k for k, v in shots.pages.items() if v is page)
    return out / lang / width / f"{name}.png"


def _role(page, base: str, node: str) -> str:  # type: ignore[no-untyped-def]
    page.goto(base + SITE)
    row = page.locator(f'tr[data-member="{node}"]')
    return (row.get_attribute("data-role") or "") if row.count() else ""


if __name__ == "__main__":
    main()
