#!/usr/bin/env bash
# The cost-follows-change benchmark of issue 18: does the cost of a batch follow the
# change or the table? Loads N rows of the CDC-apply kit's data into an AUTO CDC table
# (SCD type 1, then type 2), then times whole `cdcflow run` processes applying:
#   (a) A events on uniformly random keys        (b) B events, the same
#   (c) C events on the newest 1% of keys        (d) K batches of D events, one after another
# plus one batch of D events in `cdcflow run --continuous`, timed until it is visible.
# Each reports wall time, peak RSS and bytes added to the storage folder; every run's
# table is checked against the row count the events imply. See docs/benchmarks.md.
#
#   bash benches/cost_follows_change/run.sh CDCFLOW_BIN [--n N] [--a A] [--b B] [--c C]
#        [--d D] [--d-batches K] [--modes "scd1 scd2"] [--seed S] [--work DIR] [--keep]
#
# Defaults are the issue's: N=1e7, A=1e6, B=C=1e4, D=1e3, K=10, work dir
# /tmp/cdcflow-cost-bench (deleted at start). Needs the kit (BENCH_KIT, default
# ../shared/bench beside the repository, else /work/shared/bench) and its venv
# (VENV, default /tmp/benchvenv; the kit's setup_venv.sh makes it).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

usage() { sed -n '11,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { echo "error: $*" >&2; exit 1; }
# shellcheck source=benches/common.sh
source "$(dirname "$0")/../common.sh"

[ $# -ge 1 ] || usage
BIN=$(realpath "$1"); shift
[ -x "$BIN" ] || die "$BIN is not an executable cdcflow binary"
N=10000000 A=1000000 B=10000 C=10000 D=1000 K=10 SEED=42
MODES="scd1 scd2" WORK=/tmp/cdcflow-cost-bench KEEP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --n) N=$2; shift 2 ;;
    --a) A=$2; shift 2 ;;
    --b) B=$2; shift 2 ;;
    --c) C=$2; shift 2 ;;
    --d) D=$2; shift 2 ;;
    --d-batches) K=$2; shift 2 ;;
    --modes) MODES=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    *) usage ;;
  esac
done
declare -A EVENTS=([a]=$A [b]=$B [c]=$C)
for mode in $MODES; do
  case "$mode" in scd1|scd2) ;; *) die "--modes: unknown mode $mode (scd1, scd2)" ;; esac
done

kit_and_venv "$REPO"

WORK=$(fresh_work "$WORK")
DATA=$WORK/data STAGING=$WORK/staging LOGS=$WORK/logs TSV=$WORK/runs.tsv
mkdir -p "$DATA" "$STAGING" "$LOGS"
printf 'mode\tcase\tevents\tseconds\trss_kib\tbytes_before\tbytes_after\ttable_bytes\trows_expected\trows\tflow_ms\textra\n' >"$TSV"

CONT_PID=
cleanup() {
  # A continuous run left behind by a failure would hold the CPU and the run lock.
  if [ -n "$CONT_PID" ] && kill -0 "$CONT_PID" 2>/dev/null; then
    kill -TERM "$CONT_PID" 2>/dev/null || true
    wait "$CONT_PID" 2>/dev/null || true
  fi
}
trap cleanup EXIT

echo "== generating the kit's data: N=$N, (a) $A, (b) $B, (c) $C, (d) ${K}x$D events, seed $SEED"
"$PY" "$HERE/gen_cases.py" --kit "$BENCH_KIT" --n "$N" --a "$A" --b "$B" --c "$C" \
  --d "$D" --d-batches "$K" --seed "$SEED" --out "$DATA"

# expected KEY MODE FIELD: a count from expected.json (KEY: load, a, b, c, cont or d.I).
expected() {
  "$PY" -c '
import json, sys
e = json.load(open(sys.argv[1]))["expected"]
key, mode, field = sys.argv[2:]
case, _, i = key.partition(".")
v = e[case][int(i)] if i else e[case]
print(v[mode][field])' "$DATA/expected.json" "$1" "$2" "$3"
}

bytes_of() { if [ -e "$1" ]; then du -sb "$1" | cut -f1; else echo 0; fi; }
storage_bytes() { bytes_of "$1/_storage"; }
table_dir() { echo "$1/_storage/tables/customers"; }

# counts DIR: "rows open" of the published table (open = SCD2 versions with no end; for
# SCD1 every row).
counts() {
  local open="count(*)"
  if [ "$MODE" = scd2 ]; then open="count(*) - count(__END_AT)"; fi
  local sql="SELECT count(*) AS n_rows, $open AS n_open FROM customers"
  "$BIN" query -p "$1" --format csv "$sql" | tail -1 | tr ',' ' '
}

# check DIR KEY: the published table holds what the events imply, or the benchmark stops.
check() {
  local want_rows want_open rows open
  want_rows=$(expected "$2" "$MODE" rows)
  want_open=$(expected "$2" "$MODE" open)
  read -r rows open < <(counts "$1")
  if [ "$rows" != "$want_rows" ] || [ "$open" != "$want_open" ]; then
    die "$MODE $2: the table holds $rows rows ($open open), the events imply $want_rows ($want_open open); folder $1"
  fi
  echo "$rows"
}

# flow_ms LOG: the AUTO CDC flow's own time (ms) in the run's JSON summary, once every
# flow of the run is seen to have committed its batch with nothing quarantined (else the
# case did not measure what it says). Warnings are passed on to stderr.
flow_ms() {
  "$PY" - "$1" <<'EOF'
import json, sys
flows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
batch = {f["flow"]: f for f in flows}   # the last batch's report of each flow
for f in batch.values():
    for w in f["warnings"]:
        print(f"warning: {f['flow']}: {w}", file=sys.stderr)
bad = [f for f in batch.values() if f["outcome"].get("status") != "committed" or f["quarantined"]]
if not batch or bad:
    sys.exit(f"not every flow committed cleanly: {bad or 'no flow reports'}")
print(batch["customers_cdc"]["millis"])
EOF
}

# land FILE DIR NAME: the file appears in the landing folder whole, by a rename (the copy
# to the same file system comes first, untimed).
land() {
  cp "$1" "$STAGING/$3.parquet"
  mv "$STAGING/$3.parquet" "$2/landing/changes/$3.parquet"
}

# measure DIR CASE KEY EVENTS: one `cdcflow run` process, timed; appends its row to TSV.
measure() {
  local dir=$1 case=$2 key=$3 events=$4 log=$LOGS/${MODE}_$2.log before after secs rss rows ms
  before=$(storage_bytes "$dir")
  sync   # earlier writes flushed, so that no write-back of theirs lands in this run
  if ! /usr/bin/time -f '%e %M' -o "$log.time" "$BIN" run -p "$dir" --json >"$log" 2>&1; then
    cat "$log" >&2
    die "$MODE $case: cdcflow run failed (log $log)"
  fi
  read -r secs rss < <(tail -1 "$log.time")
  after=$(storage_bytes "$dir")
  ms=$(flow_ms "$log") || die "$MODE $case: see $log"
  rows=$(check "$dir" "$key")
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n' "$MODE" "$case" "$events" "$secs" "$rss" \
    "$before" "$after" "$(bytes_of "$(table_dir "$dir")")" "$(expected "$key" "$MODE" rows)" "$rows" "$ms" >>"$TSV"
  printf "   %-6s %8.2f s (flow %s ms)  %6d MiB  +%s bytes  (%s rows)\n" "$case" "$secs" "$ms" $((rss / 1024)) $((after - before)) "$rows"
}

# fresh_copy NAME: a copy of the loaded pipeline (landing files and storage, with their
# times, so the checkpoint's file identities still hold): every case starts from one table.
fresh_copy() {
  local dir=$WORK/$MODE/$1
  cp -a "$WORK/$MODE/loaded" "$dir"
  echo "$dir"
}

done_with() { [ "$KEEP" = 1 ] || rm -rf "$1"; }

# Newest Delta version of a table (its highest-numbered commit file); -1 when none.
delta_version() {
  local last
  last=$(find "$1/_delta_log" -maxdepth 1 -name '[0-9]*.json' 2>/dev/null | sort | tail -1)
  if [ -z "$last" ]; then echo -1; else basename "$last" .json | sed 's/^0*//; s/^$/0/'; fi
}

elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }

# continuous DIR: start `cdcflow run --continuous`, land one batch once it is idle, and
# time the rename until the batch's commit to the published table (the moment any reader
# sees it) and until `cdcflow query` returns the counts the batch implies.
continuous() {
  local dir=$1 log=$LOGS/${MODE}_cont.log v0 t0 t1 t2 rows open want_rows want_open rss ms waited=0
  sync   # the copy flushed, as before every timed run
  "$BIN" run -p "$dir" --continuous --json >"$log" 2>"$log.err" &
  CONT_PID=$!
  # Its first batch (nothing new) prints one line per flow; then it waits for files.
  until [ -s "$log" ]; do
    kill -0 "$CONT_PID" 2>/dev/null || { cat "$log.err" >&2; die "$MODE cont: the continuous run ended"; }
    sleep 0.1; waited=$((waited + 1))
    [ "$waited" -lt 1200 ] || die "$MODE cont: no first batch within 120 s"
  done
  # Past the trigger interval (1 s) after that batch: the landing waits for no floor.
  sleep 2
  v0=$(delta_version "$(table_dir "$dir")")
  cp "$DATA/cont.parquet" "$STAGING/cont.parquet"
  t0=$EPOCHREALTIME
  mv "$STAGING/cont.parquet" "$dir/landing/changes/cont.parquet"
  until [ "$(delta_version "$(table_dir "$dir")")" -gt "$v0" ]; do
    kill -0 "$CONT_PID" 2>/dev/null || { cat "$log.err" >&2; die "$MODE cont: the continuous run ended"; }
    [ "$(elapsed "$t0" "$EPOCHREALTIME" | cut -d. -f1)" -lt 300 ] || die "$MODE cont: no commit within 300 s"
    sleep 0.005
  done
  t1=$EPOCHREALTIME
  want_rows=$(expected cont "$MODE" rows)
  want_open=$(expected cont "$MODE" open)
  until read -r rows open < <(counts "$dir") && [ "$rows" = "$want_rows" ] && [ "$open" = "$want_open" ]; do
    [ "$(elapsed "$t1" "$EPOCHREALTIME" | cut -d. -f1)" -lt 60 ] ||
      die "$MODE cont: the table holds $rows rows ($open open) 60 s after the commit, the events imply $want_rows ($want_open)"
    sleep 0.05
  done
  t2=$EPOCHREALTIME
  rss=$(awk '/^VmHWM/ { print $2 }' "/proc/$CONT_PID/status")
  kill -TERM "$CONT_PID"
  wait "$CONT_PID" || die "$MODE cont: the continuous run failed on shutdown (log $log.err)"
  CONT_PID=
  ms=$(flow_ms "$log") || die "$MODE cont: see $log"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$MODE" cont "$D" "$(elapsed "$t0" "$t1")" "$rss" \
    "" "" "" "$want_rows" "$rows" "$ms" "$(elapsed "$t0" "$t2")" >>"$TSV"
  echo "   cont   $(elapsed "$t0" "$t1") s to the commit, $(elapsed "$t0" "$t2") s until cdcflow query shows it"
}

for MODE in $MODES; do
  echo "== $MODE: initial load of N=$N rows (one batch of a new table)"
  loaded=$WORK/$MODE/loaded
  mkdir -p "$loaded/landing/changes"
  cp "$HERE/pipeline/pipeline.yaml" "$HERE/pipeline/flow.sql" "$loaded/"
  sed -i "s/^  scd_type: .*/  scd_type: \"${MODE#scd}\"/" "$loaded/pipeline.yaml"
  land "$DATA/load_$MODE.parquet" "$loaded" 0000_load
  measure "$loaded" load load "$(expected load "$MODE" rows)"

  for case in a b c; do
    dir=$(fresh_copy "$case")
    land "$DATA/$case.parquet" "$dir" "0001_$case"
    measure "$dir" "$case" "$case" "${EVENTS[$case]}"
    done_with "$dir"
  done

  # (d): one table, K batches in a row, each its own process.
  dir=$(fresh_copy d)
  for ((i = 0; i < K; i++)); do
    name=$(printf 'd_%02d' "$i")
    land "$DATA/$name.parquet" "$dir" "$(printf '%04d' $((i + 1)))_$name"
    measure "$dir" "$name" "d.$i" "$D"
  done
  done_with "$dir"

  dir=$(fresh_copy cont)
  continuous "$dir"
  done_with "$dir"
done

RESULTS=$WORK/results.md
"$PY" "$HERE/report.py" --tsv "$TSV" --out "$RESULTS" --bin "$BIN" --repo "$REPO" \
  --params "N=$N, (a) $A, (b) $B, (c) $C, (d) ${K}x$D events, seed $SEED"
echo "results: $RESULTS (runs: $TSV, logs: $LOGS)"
