#!/usr/bin/env bash
# The test suite's production stacks (PostgreSQL + S3) run two at a time under pytest-xdist,
# each with auth, metadata, the webhook dispatcher and their pools; with the webhook tests'
# own stacks the peak passed PostgreSQL's default of 100 connections ("too many clients").
# On the machine's own cluster (root, pg_ctlcluster), raise max_connections once to $WANT and
# restart it; elsewhere say what to set and go on.
set -euo pipefail
WANT="${COFFER_TEST_PG_MAX_CONNECTIONS:-300}"
PSQL=(psql -h 127.0.0.1 -U postgres -Atqc)
have=$("${PSQL[@]}" "show max_connections" 2>/dev/null) || exit 0  # no PostgreSQL: tests say so
if ((have >= WANT)); then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v pg_ctlcluster >/dev/null 2>&1; then
  version=$(ls /etc/postgresql | head -n 1)
  echo "PostgreSQL allows $have connections; setting max_connections = $WANT and restarting it"
  "${PSQL[@]}" "ALTER SYSTEM SET max_connections = $WANT" >/dev/null
  pg_ctlcluster --skip-systemctl-redirect "$version" main restart
  for _ in $(seq 1 50); do pg_isready -q -h 127.0.0.1 -p 5432 && exit 0; sleep 0.2; done
  echo "PostgreSQL did not come back after the restart" >&2; exit 1
fi
echo "PostgreSQL allows $have connections; the suite needs about $WANT (set max_connections)" >&2
