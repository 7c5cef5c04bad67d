#!/usr/bin/env bash
# `make messages`: collect every translatable string of the panel, the API and the
# error pages into the catalogues (locale/<lang>/LC_MESSAGES/django.po: new msgids
# appear untranslated, vanished ones are dropped), then compile them (.mo, committed).
# After it, translate what `git diff locale/` shows as msgstr "" or fuzzy in zh_Hant:
# tests/test_i18n.py fails until every zh-Hant string is translated.
# Usage: scripts/messages.sh [SOURCE_DIR]   (default: this checkout; the test runs it on a copy)
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"
PY=${PY:-.venv/bin/python}
export STK_SKIP_DIR_CHECKS=1 DJANGO_SETTINGS_MODULE=stkrelay.settings
"$PY" manage.py makemessages --locale zh_Hant --locale en --no-obsolete --add-location file --no-wrap \
  --ignore 'tests/*' --ignore 'bench/*' --ignore 'scripts/*' --ignore 'docker/*' --ignore 'packaging/*' \
  --ignore 'docs/*' --ignore '.venv/*' --ignore 'build/*' -v 0
"$PY" manage.py compilemessages --ignore '.venv' --ignore 'build' -v 0
