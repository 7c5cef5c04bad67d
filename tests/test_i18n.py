"""The panel in Traditional Chinese and English (issue 24): the catalogues are
complete, compiled and in step with the code; the language comes from the browser,
the ini or the user's own remembered choice; times are shown in the ini's zone with
UTC on hover; LANGUAGE_CODE and TIME_ZONE are checked at start-up (E150, E151)."""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
from datetime import UTC, datetime, timedelta

import po
import pytest
import test_panel_support
from harness import ROOT
from test_panel_support import KMSN, PASSWORD, client_for, event, make_user, member, write_pool

from stkconfig import i18n

dj = test_panel_support.dj
LOCALE = ROOT / "locale"
ZH = LOCALE / "zh_Hant" / "LC_MESSAGES" / "django.po"
SITE = f"/sites/{KMSN}/"
PLACEHOLDER = re.compile(r"%\([a-z_]+\)[-+ #0-9.]*[sdrf]|\{[a-z_]+\}|</?[a-z]+(?: [^>]*)?>")


# -- the catalogues ----------------------------------------------------------------------
def test_every_zh_hant_string_is_translated_and_none_is_fuzzy():
    entries = po.read(ZH)
    assert len(entries) > 300
    untranslated = [e.msgid for e in entries if not e.translated]
    assert untranslated == [], f"translate these in {ZH.relative_to(ROOT)}: {untranslated}"


def test_every_translation_keeps_the_placeholders_and_markup_of_its_english():
    wrong = []
    for e in po.read(ZH):
        want = sorted(PLACEHOLDER.findall(e.msgid))
        for form in e.msgstr.values():
            if sorted(PLACEHOLDER.findall(form)) != want:
                wrong.append((e.msgid, form))
    assert wrong == []


def test_the_committed_mo_files_are_the_committed_catalogues_compiled(tmp_path):
    for lang in ("zh_Hant", "en"):
        source = LOCALE / lang / "LC_MESSAGES" / "django.po"
        built = tmp_path / f"{lang}.mo"
        out = subprocess.run(["msgfmt", "--check-format", "-o", str(built), str(source)],
                             capture_output=True, text=True)  # fmt: skip
        assert out.returncode == 0, out.stderr
        committed = source.with_suffix(".mo")
        assert built.read_bytes() == committed.read_bytes(), f"run `make messages`: {committed} is stale"


def test_the_catalogue_holds_every_string_of_the_code_and_no_other(tmp_path):
    """`make messages` on a copy of the sources adds no msgid to the committed catalogue
    (a string wrapped in the code but never collected) and drops none (a stale one)."""
    from installed import source_files

    copy = tmp_path / "src"
    for rel in source_files():
        (copy / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, copy / rel)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STK_")}
    env["PY"] = str(ROOT / ".venv" / "bin" / "python")
    out = subprocess.run([str(copy / "scripts" / "messages.sh"), str(copy)], env=env, capture_output=True,
                         text=True, timeout=180)  # fmt: skip
    assert out.returncode == 0, out.stderr
    collected = {e.key for e in po.read(copy / ZH.relative_to(ROOT))}
    committed = {e.key for e in po.read(ZH)}
    assert sorted(collected - committed, key=str) == [], "new strings: run `make messages` and translate them"
    assert sorted(committed - collected, key=str) == [], "strings the code no longer has: run `make messages`"


# -- configuration -------------------------------------------------------------------------
def _load(tmp_path, **over):
    from test_config import write_ini

    from stkrelay.config import load

    return load(str(write_ini(tmp_path, **over)), env={})


@pytest.mark.parametrize("given", ["zh-hant", "zh-TW", "zh_TW", "zh-Hant-TW", "ZH-HANT"])
def test_language_code_takes_the_ways_taiwan_is_spelled(tmp_path, given):
    cfg = _load(tmp_path, LANGUAGE_CODE=given)
    assert cfg.language_code == "zh-hant" and cfg.problems == []


def test_language_code_defaults_to_english_and_refuses_what_the_panel_does_not_speak(tmp_path):
    assert _load(tmp_path).language_code == "en"
    cfg = _load(tmp_path, LANGUAGE_CODE="fr")
    assert [(p.id, p.key) for p in cfg.problems] == [("stkrelay.E150", "LANGUAGE_CODE")]
    assert "zh-hant" in cfg.problems[0].hint


def test_time_zone_is_an_iana_name_checked_at_start_up(tmp_path):
    assert _load(tmp_path, TIME_ZONE="Asia/Taipei").time_zone == "Asia/Taipei"
    assert _load(tmp_path, TIME_ZONE="UTC").time_zone == "UTC"
    cfg = _load(tmp_path, TIME_ZONE="Taipei/Standard")
    assert [(p.id, p.key) for p in cfg.problems] == [("stkrelay.E151", "TIME_ZONE")]


def test_the_default_zone_is_the_servers_own(tmp_path):
    link = tmp_path / "localtime"
    link.symlink_to("/usr/share/zoneinfo/Europe/Berlin")
    assert i18n.server_zone({}, link) == "Europe/Berlin"
    assert i18n.server_zone({"TZ": "Asia/Taipei"}, link) == "Asia/Taipei"
    assert i18n.server_zone({"TZ": "nonsense"}, tmp_path / "none") == "UTC"
    utc = tmp_path / "utc"
    utc.symlink_to("/usr/share/zoneinfo/Etc/UTC")
    assert i18n.server_zone({}, utc) == "UTC"


# -- the language of a page -------------------------------------------------------------------
def _text(response) -> str:  # type: ignore[no-untyped-def]
    return re.sub(r"\s+", " ", response.content.decode())


def test_the_browser_s_language_picks_the_panel_s(dj):
    zh = client_for(HTTP_ACCEPT_LANGUAGE="zh-TW,zh;q=0.9,en;q=0.5").get("/login/")
    assert '<html lang="zh-Hant-TW">' in _text(zh) and "登入 stkrelay" in _text(zh)
    assert zh["Content-Language"] == "zh-hant"
    en = client_for(HTTP_ACCEPT_LANGUAGE="en-US,en;q=0.8").get("/login/")
    assert '<html lang="en">' in _text(en) and "Log in to stkrelay" in _text(en)


def test_a_browser_asking_for_no_language_the_panel_speaks_gets_the_ini_s(dj):
    from django.test import override_settings

    assert "Log in to stkrelay" in _text(client_for(HTTP_ACCEPT_LANGUAGE="fr-FR").get("/login/"))
    with override_settings(LANGUAGE_CODE="zh-hant"):
        assert "登入 stkrelay" in _text(client_for(HTTP_ACCEPT_LANGUAGE="fr-FR").get("/login/"))


def test_a_user_s_choice_wins_over_the_browser_and_is_remembered_for_the_user(dj):
    user = make_user("olga", "operator")
    c = client_for(user, HTTP_ACCEPT_LANGUAGE="en")
    write_pool(test_panel_support.django_env()["data_dir"])
    assert "Members" in _text(c.get(SITE))
    chosen = c.post("/language/", {"language": "zh-hant", "next": SITE})
    assert chosen.status_code == 302 and chosen["Location"] == SITE
    assert chosen.cookies["stk_language"].value == "zh-hant" and chosen.cookies["stk_language"]["httponly"]
    page = _text(c.get(SITE))
    assert "成員" in page and ">Members<" not in page
    # Another browser, English everywhere, no cookie: the user's choice follows the login.
    other = client_for(HTTP_ACCEPT_LANGUAGE="en")
    assert "Log in to stkrelay" in _text(other.get("/login/"))
    assert other.post("/login/", {"username": "olga", "password": PASSWORD, "next": SITE}).status_code == 302
    assert "成員" in _text(other.get(SITE))
    # Back to English, for this user everywhere.
    other.post("/language/", {"language": "en", "next": SITE})
    assert ">Members<" in _text(client_for(user, HTTP_ACCEPT_LANGUAGE="zh-TW").get(SITE))


def test_the_language_choice_is_a_post_of_a_known_language_that_stays_on_this_site(dj):
    c = client_for(HTTP_ACCEPT_LANGUAGE="en")
    assert c.get("/language/").status_code == 405
    refused = c.post("/language/", {"language": "klingon", "next": "/login/"})
    assert refused.status_code == 302 and "stk_language" not in refused.cookies
    away = c.post("/language/", {"language": "zh-hant", "next": "https://evil.example/"})
    assert away["Location"] == "/"
    assert "登入 stkrelay" in _text(c.get("/login/"))  # the cookie, before anyone logs in


def test_a_form_without_the_csrf_token_is_refused_on_the_language_too(dj):
    from django.test import Client

    c = Client(enforce_csrf_checks=True, HTTP_ACCEPT_LANGUAGE="zh-TW")
    refused = c.post("/language/", {"language": "zh-hant"})
    assert refused.status_code == 403 and "表單被拒絕" in _text(refused)


def test_error_pages_speak_the_reader_s_language(dj):
    c = client_for(make_user("vera"), HTTP_ACCEPT_LANGUAGE="zh-TW")
    missing = c.get("/sites/0000-0000-00-00/")
    assert missing.status_code == 404 and "找不到" in _text(missing)
    api = c.get("/api/v1/sites/0000-0000-00-00")
    assert api.json() == {"error": "unknown_pool", "message": "此代理程式看不到集區 '0000-0000-00-00'"}
    english = client_for(make_user("vic"), HTTP_ACCEPT_LANGUAGE="en").get("/api/v1/nothing")
    assert english.json()["error"] == "not_found" and english.json()["message"].startswith("no endpoint")


# -- what a page says ----------------------------------------------------------------------------
def _visible(page: str) -> str:
    """The text a reader sees, less what is marked as English on purpose (lang="en":
    records written by agents, such as a decision or a refusal's detail)."""
    page = re.sub(r"<(script|style|title)\b.*?</\1>", " ", page, flags=re.S)
    page = re.sub(r'<(span|pre)[^>]*lang="en"[^>]*>.*?</\1>', " ", page, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def english_left(page: str) -> list[str]:
    """Catalogue strings of two words or more that a zh-Hant page still shows in English."""
    text = re.sub(r"\s+", " ", _visible(page))
    return sorted(
        e.msgid
        for e in po.read(ZH)
        if " " in e.msgid and re.search("[A-Za-z]", e.msgid)  # not the separators (", " -> "，")
        and not PLACEHOLDER.search(e.msgid) and e.msgid not in e.msgstr.values()
        and e.msgid in text
    )  # fmt: skip


def test_every_page_in_chinese_shows_no_english_string_of_the_catalogue(dj):
    data_dir = test_panel_support.django_env()["data_dir"]
    write_pool(data_dir, leader="S002", members={"S001": member(), "S002": member(),
               "S003": member(eligible=False, reasons=["drained"], drain=True)})  # fmt: skip
    event("S002", 1, "elected", 7, datetime.now(UTC) - timedelta(minutes=3), "first election")
    c = client_for(make_user("olga", "operator"), HTTP_ACCEPT_LANGUAGE="zh-TW")
    pages = ["/", SITE, "/history/?period=all", "/audit/", "/lockouts/", f"{SITE}promote/?epoch=7",
             f"{SITE}drain/?target=S001&epoch=7", f"{SITE}pause/?epoch=7"]  # fmt: skip
    for path in pages:
        response = c.get(path)
        assert response.status_code == 200, path
        assert english_left(response.content.decode()) == [], path
    assert english_left(client_for(HTTP_ACCEPT_LANGUAGE="zh-TW").get("/login/").content.decode()) == []


def test_times_are_shown_in_the_ini_s_zone_named_with_utc_on_hover_and_in_the_api(dj):
    from django.test import override_settings

    at = datetime(2026, 6, 15, 12, 30, 15, tzinfo=UTC)
    event("S002", 1, "elected", 7, at, "first election")
    c = client_for(make_user("vera"), HTTP_ACCEPT_LANGUAGE="en")
    with override_settings(TIME_ZONE="Asia/Taipei"):
        page = _text(c.get("/history/?period=all"))
        api = c.get("/api/v1/history?period=all").json()
    assert "When (Asia/Taipei)" in page
    assert ('<time datetime="2026-06-15T12:30:15Z" title="2026-06-15 12:30:15 UTC · Asia/Taipei">'
            "2026-06-15 20:30:15 UTC+8</time>") in page  # fmt: skip
    assert api["failovers"][0]["at"] == "2026-06-15T12:30:15+00:00"  # ISO 8601, UTC, with its offset


def test_a_member_whose_heartbeat_outlived_its_ttl_reads_gone_not_follower(dj):
    data_dir = test_panel_support.django_env()["data_dir"]
    # HEARTBEAT_TTL is LEASE_TTL = 3 s in these tests: S003 was last heard 40 s ago.
    gone = member(age=40.0, eligible=False, reasons=["heartbeat 40.0 s old > 3 + 5"])
    write_pool(data_dir, leader="S001", members={"S001": member(), "S002": member(), "S003": gone})
    c = client_for(make_user("vera"), HTTP_ACCEPT_LANGUAGE="en")
    page = _text(c.get(SITE))
    row = re.search(r'<tr data-member="S003" data-role="gone".*?</tr>', page)
    assert row and re.search(r">gone</strong> <span class=\"why\">no heartbeat for 4\d s<", row[0])
    assert "follower" not in row[0]
    assert 'data-member="S002" data-role="follower"' in page
    assert "Member(s) S003 gone: no heartbeat within the TTL." in page  # the one sentence on top
    roles = {m["node"]: m["role"] for m in c.get(f"/api/v1/sites/{KMSN}/members").json()["members"]}
    assert roles == {"S001": "leader", "S002": "follower", "S003": "gone"}
    zh = _text(client_for(make_user("vic"), HTTP_ACCEPT_LANGUAGE="zh-TW").get(SITE))
    assert "失聯" in zh and "心跳已 40.0 秒 &gt; 3 + 5" in zh


AGES = [(timedelta(minutes=2), "15m"), (timedelta(minutes=30), "1h"), (timedelta(hours=3), "6h"),
        (timedelta(days=3), "24h")]  # fmt: skip


@pytest.mark.parametrize(("ago", "window"), AGES)
def test_the_timeline_s_default_window_fits_the_last_change(dj, ago, window):
    write_pool(test_panel_support.django_env()["data_dir"], leader="S002")
    event("S002", 1, "elected", 7, datetime.now(UTC) - ago, "first election")
    c = client_for(make_user("vera"), HTTP_ACCEPT_LANGUAGE="en")
    assert re.search(rf'<strong aria-current="true">{re.escape(_label(window))}</strong>', _text(c.get(SITE)))
    asked = _text(c.get(SITE, {"window": "24h"}))
    assert '<strong aria-current="true">24 h</strong>' in asked


def _label(window: str) -> str:
    return {"15m": "15 min", "1h": "1 h", "6h": "6 h", "24h": "24 h"}[window]


def test_the_site_page_says_what_is_wrong_in_one_sentence_in_the_reader_s_language(dj):
    data_dir = test_panel_support.django_env()["data_dir"]
    write_pool(data_dir, leader="S002", released=True)
    en = _text(client_for(make_user("vera"), HTTP_ACCEPT_LANGUAGE="en").get(SITE))
    assert re.search(
        r'id="trouble"><strong>What is wrong:</strong> This pool has no leader: lease released', en
    )
    zh = _text(client_for(make_user("vic"), HTTP_ACCEPT_LANGUAGE="zh-TW").get(SITE))
    assert re.search(r'id="trouble"><strong>問題：</strong> 此集區沒有領導者：S002 已釋出租約', zh)
    write_pool(data_dir, leader="S002", renew_seq=13)
    calm = _text(client_for(make_user("wim"), HTTP_ACCEPT_LANGUAGE="en").get(SITE))
    assert 'id="trouble"' not in calm, re.search(r'id="trouble">.{0,200}', calm)
