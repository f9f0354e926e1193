#!/usr/bin/env bash
# Issue 32 §3: AUTO CDC FROM SNAPSHOT against a full rewrite. A snapshot of N rows (an
# external Delta table, as another tool would export it) is loaded into an SCD type 1
# target; then a second snapshot with P % of its rows changed (half updates, a quarter
# deletes, a quarter new keys) replaces it, and the flow's run compares and applies it.
# The full rewrite is a materialized view over the same table, recomputed on the same
# second snapshot; and, as the floor of any comparison, a materialized view that only reads
# the second snapshot (every column decoded, one row written). Prints each run's wall time,
# peak RSS and CPU time (/usr/bin/time), the ratios of the snapshot run and of the read
# alone to the rewrite, the bytes each added to its storage folder, and
# checks the target against the snapshot (row count, sum of balances, rows of changed
# city).
#
#   bash benches/snapshot_diff/run.sh CDCFLOW_BIN [--n N] [--changed P] [--work DIR]
#
# Defaults: N=10000000, P=1, work dir /tmp/cdcflow-snapshot-diff. The data is written
# with Python's deltalake and pyarrow (`bash .ci/py-delta` prints that Python).
set -euo pipefail

die() { echo "error: $*" >&2; exit 1; }
# shellcheck source=benches/common.sh
source "$(dirname "$0")/../common.sh"
[ $# -ge 1 ] || die "usage: run.sh CDCFLOW_BIN [--n N] [--changed P] [--work DIR]"
BIN=$(realpath "$1"); shift
[ -x "$BIN" ] || die "$BIN is not an executable cdcflow binary"
N=10000000 P=1 WORK=/tmp/cdcflow-snapshot-diff
while [ $# -gt 0 ]; do
  case "$1" in
    --n) N=$2; shift 2 ;;
    --changed) P=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    *) die "unknown argument $1" ;;
  esac
done
WORK=$(fresh_work "$WORK")
mkdir -p "$WORK"
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${CDCFLOW_PYTHON:-$(bash "$HERE/../../.ci/py-delta")}

snapshot() { # version: writes the export (overwrite) and prints what the target must hold
  "$PY" "$HERE/snapshot.py" "$WORK/export" "$N" "$P" "$1"
}

pipeline() { # dir, flows.sql
  mkdir -p "$1"
  cat > "$1/pipeline.yaml" <<YAML
name: snapshot_diff
external_tables:
  crm.export:
    format: delta
    path: $WORK/export
YAML
  printf '%s\n' "$2" > "$1/flows.sql"
}

pipeline "$WORK/diff" "CREATE OR REFRESH STREAMING TABLE customers;
CREATE FLOW customers_snapshots AS AUTO CDC INTO customers
FROM SNAPSHOT (SELECT * FROM crm.export)
KEYS (customer_id);"
pipeline "$WORK/rewrite" "CREATE OR REFRESH MATERIALIZED VIEW customers AS SELECT * FROM crm.export;"
# The floor of any comparison: the snapshot read and decoded once, every column, and
# nothing written but one row. A comparison must do at least this.
pipeline "$WORK/scan" "CREATE OR REFRESH MATERIALIZED VIEW scanned AS
SELECT count(*) AS n, sum(customer_id) AS ids, max(name) AS name, max(city) AS city, sum(balance) AS balance
FROM crm.export;"

timed() { # label, command...: prints "label seconds rss_mib cpu_seconds"
  local label=$1; shift
  /usr/bin/time -f "%e %M %U %S" -o "$WORK/time" "$@" > "$WORK/$label.out" 2> "$WORK/$label.err" \
    || { cat "$WORK/$label.out" "$WORK/$label.err" >&2; die "$label failed"; }
  read -r secs kib user sys < "$WORK/time"
  echo "$label $secs $((kib / 1024)) $(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')"
}

count() { # dir: the target's row count, sum of balances and rows in city 'Moved'
  "$BIN" query -p "$1" "SELECT count(*), sum(balance), sum(CASE WHEN city = 'Moved' THEN 1 ELSE 0 END) FROM customers" \
    --format csv | tail -1 | tr ',' ' '
}

echo "N=$N changed=$P% ($(date -u +%F), $(git -C "$HERE" rev-parse --short HEAD 2>/dev/null || echo '?'))"
want=$(snapshot 1)
timed load "$BIN" run -p "$WORK/diff" | tee "$WORK/load.line"
timed rewrite_load "$BIN" run -p "$WORK/rewrite" > /dev/null
[ "$(count "$WORK/diff")" = "$want" ] || die "after the load: $(count "$WORK/diff"), want $want"
want=$(snapshot 2)
size() { du -sb "$1/_storage" | cut -f1; }
before=$(size "$WORK/diff") rewrite_before=$(size "$WORK/rewrite")
timed snapshot "$BIN" run -p "$WORK/diff" | tee "$WORK/snapshot.line"
timed rewrite "$BIN" run -p "$WORK/rewrite" | tee "$WORK/rewrite.line"
timed scan "$BIN" run -p "$WORK/scan" | tee "$WORK/scan.line"
echo "bytes added: snapshot $(( $(size "$WORK/diff") - before )), rewrite $(( $(size "$WORK/rewrite") - rewrite_before )) (loaded table $(du -sb "$WORK/diff/_storage/tables" | cut -f1))"
[ "$(count "$WORK/diff")" = "$want" ] || die "after the second snapshot: $(count "$WORK/diff"), want $want"
echo "target equals the snapshot (rows, balance sum, moved rows: $want)"
grep -h "snapshot " "$WORK/snapshot.out" | sed 's/^ */  /' || true
read -r _ s _ < "$WORK/snapshot.line"
read -r _ r _ < "$WORK/rewrite.line"
read -r _ f _ < "$WORK/scan.line"
awk -v s="$s" -v r="$r" -v f="$f" 'BEGIN { printf "snapshot run / full rewrite: %.2f\nsnapshot read alone / full rewrite: %.2f\n", s / r, f / r }'
