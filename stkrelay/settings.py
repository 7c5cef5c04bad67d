"""Django settings, built from the agent's `stk.ini` and its `STK_*` environment variables (see
stkrelay/config.py; the variables are rows of the key table, parsed by stkconfig.environment).

Configuration problems do not raise here: they surface as system checks
(`manage.py check`) and stop `runagent` with one line per problem.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from stkconfig.logs import logging_config
from stkconfig.panel_transport import plain_on_lan
from stkconfig.web import allowed_hosts
from stkhost.processes import SITE_TZ
from stkrelay import config as stk_config

BASE_DIR = Path(__file__).resolve().parent.parent
# templates/ and static/: at the top of a source checkout; inside the package once installed
# (pyproject.toml maps them there), so an installed agent finds them from any directory.
_PACKAGE = Path(__file__).resolve().parent
ASSETS_DIR = _PACKAGE if (_PACKAGE / "templates").is_dir() else BASE_DIR
STK = stk_config.load(check_dirs=None)  # STK_SKIP_DIR_CHECKS=1: not on disk
DATA_DIR = Path(STK.data_dir)


def _secret_key() -> str:
    """One random key per agent, kept in DATA_DIR (never in the repo)."""
    path = DATA_DIR / "secret_key"
    try:
        return path.read_text().strip()
    except OSError:
        pass
    key = __import__("secrets").token_urlsafe(50)
    try:
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(key)
    except FileExistsError:
        return path.read_text().strip()
    except OSError:
        pass  # DATA_DIR unusable: reported by the config checks
    return key


SECRET_KEY = STK.environment.secret_key or _secret_key()
DEBUG = STK.environment.debug
# Any other Host header is Django's 400 (DisallowedHost); the WebSocket routes check Origin
# against the same list (stkrelay/asgi.py). A LAN attacker's DNS name for us gets nothing.
ALLOWED_HOSTS = allowed_hosts(
    STK.node_ip, STK.web_allowed_hosts, vip=STK.actions.vip_address, hostname=socket.gethostname()
)

# Not "daphne": the web child runs Daphne itself (stkrelay/web.py); as an app it would load
# Twisted and TLS libraries (~25 MiB) into the supervisor and the lease worker, which serve no HTTP.
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "elections",
    "relay",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",  # Accept-Language, the language cookie, LANGUAGE_CODE
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "elections.web.language.UserLanguageMiddleware",  # a logged-in user's own choice wins
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "stkrelay.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [ASSETS_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "elections.web.panel.page.transport",
            ]
        },
    }
]
ASGI_APPLICATION = "stkrelay.asgi.application"
WSGI_APPLICATION = None

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": DATA_DIR / "stkrelay.sqlite3",
        "OPTIONS": {"timeout": 20, "init_command": "PRAGMA journal_mode=WAL;"},
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
PASSWORD_HASHERS = [
    "django.contrib.auth.hashers.Argon2PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2PasswordHasher",
]
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"

# Admin panel and API authentication (docs/panel.md).
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 10}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Sessions end 8 h after login (panel polling does not extend them) or when the browser closes.
SESSION_COOKIE_AGE = STK.environment.session_age
SESSION_EXPIRE_AT_BROWSER_CLOSE = True
SESSION_COOKIE_NAME = "stk_session"
CSRF_COOKIE_NAME = "stk_csrf"
CSRF_COOKIE_HTTPONLY = True  # pages carry the token; scripts never need the cookie
# The web port serves HTTPS unless WEB_PLAIN = 1 (stkconfig/panel_transport.py): the cookies are then
# never sent in clear, and browsers are told to come back over HTTPS only (HSTS; Django sends it on
# HTTPS responses only, and browsers ignore it for IP addresses and certificates they had to accept).
# In plain HTTP behind a TLS-terminating proxy, set STK_SECURE_COOKIES=1.
STK_SERVES_TLS = not STK.web_plain
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = STK_SERVES_TLS or STK.environment.secure_cookies
SECURE_HSTS_SECONDS = 365 * 24 * 3600 if STK_SERVES_TLS else 0
# WEB_PLAIN = 1 on a LAN address: every page says so (elections.web.panel.page.transport).
STK_PLAIN_ON_LAN = plain_on_lan(STK.node_ip, STK.web_plain)
# Login throttling (elections/web/throttle.py), all answered 429 + Retry-After:
# - this many failures per (user, client address) within the window (counted in the database);
STK_LOGIN_MAX_FAILURES = 5
STK_LOGIN_WINDOW_S = 300
# - WEB_LOGIN_ADDRESS_FAILURES per client address per window, in memory, before any password hashing;
STK_LOGIN_ADDRESS_MAX_FAILURES = STK.web_login_address_failures
# - WEB_LOGIN_FAILURES_PER_S failed logins per second from everyone together (WEB_LOGIN_BURST at once).
STK_LOGIN_GLOBAL_RATE = STK.web_login_failures_per_s
STK_LOGIN_GLOBAL_BURST = STK.web_login_burst
# - once that is spent, an address that has not failed within the window may still draw on a
#   reserve of its own (strangers failing elsewhere never lock an operator out), and a browser
#   that logged in as that user before (device cookie, STK_LOGIN_DEVICE_DAYS) or the console
#   (loopback) skip the global bucket altogether.
STK_LOGIN_RESERVE_RATE = STK.environment.login_reserve_rate
STK_LOGIN_RESERVE_BURST = STK.environment.login_reserve_burst
STK_LOGIN_DEVICE_DAYS = STK.environment.login_device_days
# X-Forwarded-For is believed only from these direct peers (WEB_TRUSTED_PROXIES; networks).
STK_TRUSTED_PROXIES = STK.web_trusted_proxies
# 1: GET /api/v1/leader answers without login (relay clients' fallback lookup).
STK_PUBLIC_LEADER_LOOKUP = STK.environment.public_leader_lookup
# Request bodies: the panel's forms and the API's JSON are a few hundred bytes (the API reads at
# most 64 KiB); anything over this is 413 before Django reads it (elections/web/body_limit.py).
DATA_UPLOAD_MAX_MEMORY_SIZE = 256 << 10
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True

# The panel speaks English and Traditional Chinese (Taiwan usage), from the catalogues in
# locale/ (`make messages`); LANGUAGE_CODE and TIME_ZONE come from the ini (stkconfig/i18n.py).
LANGUAGE_CODE = STK.language_code
LANGUAGES = [("en", "English"), ("zh-hant", "繁體中文")]
LOCALE_PATHS = [ASSETS_DIR / "locale"]
USE_I18N = True
LANGUAGE_COOKIE_NAME = "stk_language"
LANGUAGE_COOKIE_AGE = 365 * 24 * 3600
LANGUAGE_COOKIE_SECURE = SESSION_COOKIE_SECURE
LANGUAGE_COOKIE_HTTPONLY = True
LANGUAGE_COOKIE_SAMESITE = "Lax"
TIME_ZONE = STK.time_zone
# Django puts TIME_ZONE in this process's TZ, which every child would inherit. A site's own command
# (ON_ROLE_CHANGE, GATE_CMD, HEALTH_CMD, RELAY_EXEC: `processes.site_environment`) is given the TZ of
# the agent's start instead (none: none), or TIME_ZONE where the ini sets it (issue 42). Set once, by
# the first process (the supervisor), before Django sets TZ: its children inherit it.
os.environ.setdefault(SITE_TZ, STK.site_time_zone)
USE_TZ = True
STATIC_URL = "static/"
STATICFILES_DIRS = [ASSETS_DIR / "static"]
STATIC_ROOT = DATA_DIR / "static"

# Channels: the local Redis carries low-rate events only (docs/design.md §12).
# socket_timeout None: redis-py 8 defaults to 5 s, which kills idle consumers.
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [{"address": STK.redis_url, "socket_timeout": None}]},
    }
}

# Celery: lease work on its own queue, solo worker, prefetch 1; in-memory beat, whose entries the
# agent's worker calls on the beat's own thread (stkrelay.beat_here), not through the broker.
CELERY_BROKER_URL = STK.redis_url
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ACKS_LATE = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# No task is acknowledged late here, so this changes nothing but the 8-line deprecation warning
# Celery 5 prints at every loss of its broker (the supervisor then restarts the worker anyway).
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = True
CELERY_TASK_ROUTES = {"elections.*": {"queue": "lease"}}
# kombu's BRPOP returns as soon as a task is pushed; its timeout only bounds an idle
# wait (1 s by default: a wakeup a second for nothing). A half-open broker socket
# is still found within brpop_timeout + health_check_interval.
CELERY_BROKER_TRANSPORT_OPTIONS = {"polling_interval": 5}
CELERY_BEAT_SCHEDULER = "stkrelay.celery:SteadyScheduler"
CELERY_BEAT_SCHEDULE = {
    # A late renewal is dropped (expires), never replayed in a burst; called in place, never queued.
    "lease-renew": {
        "task": "elections.renew",
        "schedule": STK.lease_renew,
        "options": {"expires": STK.lease_renew * 0.8, "queue": "lease"},
    },
    "lease-poll": {
        "task": "elections.poll",
        "schedule": STK.lease_poll,
        "options": {"expires": STK.lease_poll * 0.8, "queue": "lease"},
    },
    # The cheap look for commands and handoffs between polls (planned switchovers < 1 s),
    # every LEASE_WATCH, runs on a thread of the lease worker (elections/tasks.py `Watcher`).
}

# LOG_FORMAT text (the default) or json: one JSON object per line (stkconfig/logs.py), its
# `component` from STK_COMPONENT (runagent: agent; its supervisor sets web, worker, beat, relay).
LOGGING = logging_config(STK.log_format, STK.node, kmsn=STK.kmsn)
