#!/usr/bin/env bash
# Issue 13 §4: do independent flows run at the same time? A pipeline of F independent
# small flows (each a streaming table reading its own landing folder of R JSON rows,
# and an SCD type 1 AUTO CDC table from it, so 2F flows in F independent chains) is
# run from empty storage, REPS times each, with the flows one after another
# (CDCFLOW_PARALLEL_FLOWS=1) and at once (the default: one per core), in the same run.
# Prints the wall times (median of REPS) and checks every table's row count.
#
#   bash benches/independent_flows/run.sh CDCFLOW_BIN [--flows F] [--rows R] [--reps N] [--work DIR]
#
# Defaults: F=20, R=2000, N=5, work dir /tmp/cdcflow-independent-flows (deleted at start).
set -euo pipefail

die() { echo "error: $*" >&2; exit 1; }
# shellcheck source=benches/common.sh
source "$(dirname "$0")/../common.sh"
[ $# -ge 1 ] || die "usage: run.sh CDCFLOW_BIN [--flows F] [--rows R] [--reps N] [--work DIR]"
BIN=$(realpath "$1"); shift
[ -x "$BIN" ] || die "$BIN is not an executable cdcflow binary"
F=20 R=2000 REPS=5 WORK=/tmp/cdcflow-independent-flows
while [ $# -gt 0 ]; do
  case "$1" in
    --flows) F=$2; shift 2 ;;
    --rows) R=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    *) die "unknown argument $1" ;;
  esac
done
WORK=$(fresh_work "$WORK")
PIPE=$WORK/pipeline
mkdir -p "$PIPE"
echo "name: independent_flows" >"$PIPE/pipeline.yaml"
for i in $(seq 1 "$F"); do
  mkdir -p "$PIPE/landing/t$i"
  cat >>"$PIPE/flows.sql" <<SQL
CREATE OR REFRESH STREAMING TABLE bronze_$i AS SELECT * FROM STREAM read_files('landing/t$i', format => 'json', schema => 'id BIGINT, name STRING, amount DOUBLE, op STRING, seq BIGINT');
CREATE OR REFRESH STREAMING TABLE silver_$i;
CREATE FLOW silver_${i}_cdc AS AUTO CDC INTO silver_$i FROM STREAM(bronze_$i) KEYS (id) APPLY AS DELETE WHEN op = 'D' SEQUENCE BY seq COLUMNS * EXCEPT (op, seq);
SQL
  awk -v r="$R" -v t="$i" 'BEGIN { for (k = 1; k <= r; k++) printf "{\"id\":%d,\"name\":\"n%d_%d\",\"amount\":%d.5,\"op\":\"%s\",\"seq\":%d}\n", k % (r / 2) + 1, t, k, k, (k % 10 == 0 ? "D" : "U"), k }' \
    >"$PIPE/landing/t$i/1.json"
done
"$BIN" validate -p "$PIPE" >/dev/null || die "the generated pipeline does not validate"

# run_once PARALLEL: seconds of one `cdcflow run` from empty storage.
run_once() {
  rm -rf "$PIPE/_storage"
  local start end
  start=$(date +%s.%N)
  CDCFLOW_PARALLEL_FLOWS=$1 "$BIN" run -p "$PIPE" >"$WORK/run.log" 2>&1 || { cat "$WORK/run.log" >&2; die "the run failed"; }
  end=$(date +%s.%N)
  echo "$end - $start" | bc -l
}


cores=$(nproc)
run_once "$cores" >/dev/null # warm-up: the binary and the files in the page cache
declare -A TIMES
for rep in $(seq 1 "$REPS"); do
  # Alternated, so a slower moment of the machine falls on both.
  order="1 $cores"
  if [ $((rep % 2)) = 0 ]; then order="$cores 1"; fi
  for p in $order; do
    TIMES[$p]+="$(run_once "$p") "
  done
done
# Every table holds what its events imply: R/2 keys, less the deleted ones.
rows=$("$BIN" query -p "$PIPE" --format csv "SELECT count(*) FROM silver_1" | tail -1)
[ "$rows" -gt 0 ] || die "silver_1 is empty"
for i in $(seq 2 "$F"); do
  other=$("$BIN" query -p "$PIPE" --format csv "SELECT count(*) FROM silver_$i" | tail -1)
  [ "$other" = "$rows" ] || die "silver_$i holds $other rows, silver_1 $rows"
done
one=$(echo "${TIMES[1]}" | tr ' ' '\n' | grep . | median)
all=$(echo "${TIMES[$cores]}" | tr ' ' '\n' | grep . | median)
printf 'flows: %d chains of 2 (%d flows), %d rows each; %d reps; %d cores\n' "$F" $((2 * F)) "$R" "$REPS" "$cores"
printf 'one after another (CDCFLOW_PARALLEL_FLOWS=1): median %.2f s  [%s]\n' "$one" "${TIMES[1]}"
printf 'at once (%d at a time):                       median %.2f s  [%s]\n' "$cores" "$all" "${TIMES[$cores]}"
printf 'speed-up: %.2fx\n' "$(echo "$one / $all" | bc -l)"
