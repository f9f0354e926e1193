#!/usr/bin/env bash
# Self-test of the cost-follows-change benchmark (about a minute with the debug build):
# a tiny run must pass its checks, and two broken cdcflows must make it fail loudly:
# one whose run of case (b) applies case (a)'s events (a wrong row count), one whose
# run of case (c) exits with an error.
#
#   bash benches/cost_follows_change/selftest.sh CDCFLOW_BIN
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
[ $# -eq 1 ] || { echo "usage: bash $0 CDCFLOW_BIN" >&2; exit 2; }
BIN=$(realpath "$1")
WORK=/tmp/cdcflow-cost-selftest
TINY=(--n 10000 --a 1000 --b 100 --c 100 --d 20 --d-batches 2)
rm -rf "$WORK"
mkdir -p "$WORK"

echo "== a tiny run passes its checks"
bash "$HERE/run.sh" "$BIN" "${TINY[@]}" --work "$WORK/ok" >"$WORK/ok.log" 2>&1 ||
  { cat "$WORK/ok.log" >&2; echo "FAIL: the tiny run failed" >&2; exit 1; }
grep -q '^| 2 | cont |' "$WORK/ok/results.md" || { echo "FAIL: no results table" >&2; exit 1; }

# broken NAME CASE-FILE ACTION: a cdcflow that misbehaves on the run that finds CASE-FILE
# landed; the benchmark must stop with MESSAGE.
broken() {
  local name=$1 landed=$2 action=$3 message=$4 wrapper=$WORK/$1.sh
  cat >"$wrapper" <<EOF
#!/usr/bin/env bash
if [ "\$1" = run ] && [ -e "\$3/landing/changes/$landed" ]; then $action; fi
exec "$BIN" "\$@"
EOF
  chmod +x "$wrapper"
  echo "== $name: the benchmark must stop"
  if bash "$HERE/run.sh" "$wrapper" "${TINY[@]}" --modes scd1 --work "$WORK/$name" >"$WORK/$name.log" 2>&1; then
    echo "FAIL: $name: the benchmark passed" >&2; exit 1
  fi
  grep -q "$message" "$WORK/$name.log" ||
    { cat "$WORK/$name.log" >&2; echo "FAIL: $name: no \"$message\"" >&2; exit 1; }
}

broken wrong_count 0001_b.parquet \
  "cp $WORK/wrong_count/data/a.parquet \"\$3/landing/changes/0001_b.parquet\"" \
  "error: scd1 b: the table holds"
broken run_fails 0001_c.parquet "exit 3" "error: scd1 c: cdcflow run failed"

rm -rf "$WORK"
echo "selftest ok"
