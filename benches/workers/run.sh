#!/usr/bin/env bash
# The apply on workers against one machine (issue 33 §2, docs/benchmarks.md): loads N rows
# of the CDC-apply kit's data into an AUTO CDC table, then applies A events on random
# keys, with the pipeline run on one machine and on W `cdcflow worker` processes on this
# machine (loopback). Each configuration reports the wall time of the load and of the
# A-event batch, the run's peak RSS, the workers' peak RSS, and each slice's task time
# and files read; every configuration's table is checked against the counts the events
# imply and against one machine's: the same counts and sums, and the same rows (a
# SHA-256 of the whole table as sorted CSV). At the defaults this is issue 33's scale
# test: a 1e6-event batch into a 1e7-row table on 2 and 3 workers.
#
#   bash benches/workers/run.sh CDCFLOW_BIN [--n N] [--a A] [--workers "0 2 3"]
#        [--modes "scd1 scd2"] [--seed S] [--work DIR]
#
# Defaults: N=1e7, A=1e6, workers 0 (one machine), 2 and 3, both modes, work dir
# /tmp/cdcflow-workers-bench (deleted at start). Needs the kit (BENCH_KIT, default
# ../shared/bench beside the repository, else /work/shared/bench) and its venv (VENV,
# default /tmp/benchvenv; the kit's setup_venv.sh makes it).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
COST=$REPO/benches/cost_follows_change

usage() { sed -n '10,11p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { echo "error: $*" >&2; exit 1; }
# shellcheck source=benches/common.sh
source "$(dirname "$0")/../common.sh"

[ $# -ge 1 ] || usage
BIN=$(realpath "$1"); shift
[ -x "$BIN" ] || die "$BIN is not an executable cdcflow binary"
N=10000000 A=1000000 SEED=42 WORKERS="0 2 3" MODES="scd1 scd2" WORK=/tmp/cdcflow-workers-bench
while [ $# -gt 0 ]; do
  case "$1" in
    --n) N=$2; shift 2 ;;
    --a) A=$2; shift 2 ;;
    --workers) WORKERS=$2; shift 2 ;;
    --modes) MODES=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    *) usage ;;
  esac
done
kit_and_venv "$REPO"

WORK=$(fresh_work "$WORK")
DATA=$WORK/data LOGS=$WORK/logs TSV=$WORK/runs.tsv
mkdir -p "$DATA" "$LOGS"
printf 'mode\tworkers\tcase\tevents\tseconds\trss_kib\tworkers_rss_kib\tflow_ms\tslices\n' >"$TSV"

PIDS=()
stop_workers() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  PIDS=()
}
trap stop_workers EXIT

echo "== generating the kit's data: N=$N, A=$A events, seed $SEED"
"$PY" "$COST/gen_cases.py" --kit "$BENCH_KIT" --n "$N" --a "$A" --b 1 --c 1 --d 1 \
  --d-batches 1 --seed "$SEED" --out "$DATA" >/dev/null

expected() {
  "$PY" -c '
import json, sys
e = json.load(open(sys.argv[1]))["expected"]
print(e[sys.argv[2]][sys.argv[3]][sys.argv[4]])' "$DATA/expected.json" "$1" "$2" "$3"
}

# start_workers W: W workers on free loopback ports; sets URLS.
start_workers() {
  URLS=
  for _ in $(seq 1 "$1"); do
    local log=$LOGS/worker_$RANDOM.log
    "$BIN" worker --listen 127.0.0.1:0 >"$log" 2>&1 &
    PIDS+=($!)
    until grep -q listening "$log"; do sleep 0.05; done
    URLS="${URLS:+$URLS,}$(sed -n 's/.*listening on //p' "$log")"
  done
}

# Peak RSS (KiB) summed over the workers.
workers_rss() {
  local sum=0
  for p in "${PIDS[@]}"; do
    sum=$((sum + $(awk '/VmHWM/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0)))
  done
  echo "$sum"
}

# measure DIR MODE W CASE EVENTS: one `cdcflow run`, timed.
measure() {
  local dir=$1 mode=$2 w=$3 case=$4 events=$5 log=$LOGS/$2_w$3_$4.log secs rss
  local args=(run -p "$dir" --json)
  [ "$w" = 0 ] || args+=(--workers "$URLS")
  sync
  /usr/bin/time -f '%e %M' -o "$log.time" "$BIN" "${args[@]}" >"$log" 2>&1 ||
    { cat "$log" >&2; die "$mode $w workers $case: the run failed (log $log)"; }
  read -r secs rss < <(tail -1 "$log.time")
  read -r ms slices < <("$PY" - "$log" <<'PY'
import json, sys
flows = {f["flow"]: f for f in (json.loads(l) for l in open(sys.argv[1]) if l.startswith("{"))}
f = flows["customers_cdc"]
if f["outcome"].get("status") != "committed":
    sys.exit(f"not committed: {f['outcome']}")
tasks = ";".join(f"{s['slice']}:{s['millis']}ms/{s['files_read']}f" for s in f.get("slices", []))
print(f["millis"], tasks or "-")
PY
)
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$mode" "$w" "$case" "$events" "$secs" "$rss" \
    "$(workers_rss)" "$ms" "$slices" >>"$TSV"
  printf "   %-5s %-4s %8.2f s (flow %s ms)  run %6d MiB  workers %6d MiB  %s\n" \
    "$w" "$case" "$secs" "$ms" $((rss / 1024)) $(($(workers_rss) / 1024)) "$slices"
}

# digest DIR MODE: what every configuration must agree on.
digest() {
  local open="count(*)"
  [ "$2" = scd1 ] || open="count(*) - count(__END_AT)"
  "$BIN" query -p "$1" --format csv \
    "SELECT count(*) AS n, $open AS open, sum(customer_id) AS ids, sum(CAST(round(balance * 100) AS BIGINT)) AS cents FROM customers" | tail -1
}

# rows DIR MODE: a SHA-256 of the whole table, every column, as sorted CSV.
rows() {
  local order=customer_id
  [ "$2" = scd1 ] || order="customer_id, __START_AT"
  "$BIN" query -p "$1" --format csv "SELECT * FROM customers ORDER BY $order" | sha256sum | cut -c1-16
}

for mode in $MODES; do
  echo "== $mode"
  first= first_rows=
  for w in $WORKERS; do
    dir=$WORK/$mode/w$w
    mkdir -p "$dir/landing/changes"
    cp "$COST/pipeline/pipeline.yaml" "$COST/pipeline/flow.sql" "$dir/"
    sed -i "s/^  scd_type: .*/  scd_type: \"${mode#scd}\"/" "$dir/pipeline.yaml"
    [ "$w" = 0 ] || start_workers "$w"
    cp "$DATA/load_$mode.parquet" "$dir/landing/changes/0000_load.parquet"
    measure "$dir" "$mode" "$w" load "$(expected load "$mode" rows)"
    cp "$DATA/a.parquet" "$dir/landing/changes/0001_a.parquet"
    measure "$dir" "$mode" "$w" a "$A"
    stop_workers
    got=$(digest "$dir" "$mode")
    [ "$got" = "$(expected a "$mode" rows),$(expected a "$mode" open),${got#*,*,}" ] ||
      die "$mode $w workers: $got does not hold the rows the events imply"
    got_rows=$(rows "$dir" "$mode")
    if [ -z "$first" ]; then first=$got first_rows=$got_rows; fi
    [ "$got" = "$first" ] || die "$mode $w workers: $got, one machine: $first"
    [ "$got_rows" = "$first_rows" ] || die "$mode $w workers: rows $got_rows, one machine: $first_rows"
    echo "   $w     same table as one machine: $got (rows, open, id sum, balance in cents), rows $got_rows"
    rm -rf "$dir"
  done
done
echo "== runs: $TSV"
