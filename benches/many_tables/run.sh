#!/usr/bin/env bash
# Issue 32 §2: T tables of R rows each captured from one connection, declared once
# (`syncs:` with a pattern) against T hand-written read_* flows (a bronze streaming
# table and an SCD type 1 AUTO CDC table each). For each form, from empty storage: one
# `cdcflow run` takes the snapshots, then C changes spread over the tables (60 %
# updates, 20 % inserts, 20 % deletes, in transactions of 100) are read by a second
# run. Prints each run's wall time, the most connections the pipeline held on the
# server at once (sampled every 20 ms), the replication slots it keeps (PostgreSQL),
# and the binary log dumps of the catch-up run (MySQL); checks every table's count.
# A last run of each form finds nothing new (an idle poll's cost).
#
#   bash benches/many_tables/run.sh CDCFLOW_BIN [--source postgres|mysql] [--tables T]
#        [--rows R] [--changes C] [--work DIR]
#
# Defaults: postgres, T=50, R=20000, C=10000, work dir /tmp/cdcflow-many-tables.
# PostgreSQL at PGHOST/PGPORT/PGUSER (127.0.0.1:5432, postgres; `bash .ci/postgres`),
# MariaDB/MySQL at 127.0.0.1:3306 as root (`bash .ci/mariadb`), each in a database of
# the benchmark's own, dropped at the start.
set -euo pipefail

die() { echo "error: $*" >&2; exit 1; }
# shellcheck source=benches/common.sh
source "$(dirname "$0")/../common.sh"
[ $# -ge 1 ] || die "usage: run.sh CDCFLOW_BIN [--source postgres|mysql] [--tables T] [--rows R] [--changes C] [--work DIR]"
BIN=$(realpath "$1"); shift
[ -x "$BIN" ] || die "$BIN is not an executable cdcflow binary"
SOURCE=postgres T=50 R=20000 C=10000 WORK=/tmp/cdcflow-many-tables
while [ $# -gt 0 ]; do
  case "$1" in
    --source) SOURCE=$2; shift 2 ;;
    --tables) T=$2; shift 2 ;;
    --rows) R=$2; shift 2 ;;
    --changes) C=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    *) die "unknown argument $1" ;;
  esac
done
WORK=$(fresh_work "$WORK")
mkdir -p "$WORK"
DB=cdcflow_bench_many_tables
PGHOST=${PGHOST:-127.0.0.1} PGPORT=${PGPORT:-5432} PGUSER=${PGUSER:-postgres}

case "$SOURCE" in
  postgres)
    sql() { psql -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -d "$DB" -qAtX -v ON_ERROR_STOP=1 "$@"; }
    admin() { psql -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -d postgres -qAtX -v ON_ERROR_STOP=1 "$@"; }
    admin -c "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = '$DB' AND NOT active" >/dev/null
    admin -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB"
    SCHEMA=public
    CONNECTION="kind: postgres
    host: $PGHOST
    port: $PGPORT
    database: $DB
    user: $PGUSER"
    READ=read_postgres SEQ="_commit_lsn" META="_change_type, _commit_lsn, _change_seq, _commit_timestamp, _xid"
    connections() { admin -c "SELECT count(*) FROM pg_stat_activity WHERE datname = '$DB' AND pid <> pg_backend_pid() AND application_name NOT LIKE 'psql%'"; }
    slots() { admin -c "SELECT count(*) FROM pg_replication_slots WHERE database = '$DB' AND slot_name LIKE 'cdcflow_many_tables_$1%'"; }
    ;;
  mysql)
    sql() { mysql -h 127.0.0.1 -P 3306 -u root -N "$DB" "$@"; }
    mysql -h 127.0.0.1 -P 3306 -u root -e "DROP DATABASE IF EXISTS $DB; CREATE DATABASE $DB"
    SCHEMA=$DB
    CONNECTION="kind: mysql
    host: 127.0.0.1
    port: 3306
    database: $DB
    user: root"
    READ=read_mysql SEQ="_binlog_position" META="_change_type, _binlog_position, _change_seq, _commit_timestamp, _binlog_file"
    # Binary log dumps show as `Binlog Dump` threads; others as the pipeline's queries.
    connections() { mysql -h 127.0.0.1 -P 3306 -u root -N -e "SELECT count(*) FROM information_schema.PROCESSLIST WHERE (DB = '$DB' OR COMMAND LIKE 'Binlog Dump%') AND ID <> CONNECTION_ID()"; }
    slots() { echo 0; }   # a binary log reader keeps nothing on the server
    ;;
  *) die "--source is postgres or mysql" ;;
esac

echo "source: $SOURCE, $T tables of $R rows, then $C changes" >&2
for i in $(seq 1 "$T"); do
  if [ "$SOURCE" = postgres ]; then
    echo "CREATE TABLE t$i (id bigint PRIMARY KEY, name text NOT NULL, amount numeric(12,2) NOT NULL);
INSERT INTO t$i SELECT g, 'name ' || g, g * 1.5 FROM generate_series(1, $R) g;"
  else
    echo "CREATE TABLE t$i (id BIGINT PRIMARY KEY, name VARCHAR(40) NOT NULL, amount DECIMAL(12,2) NOT NULL) ENGINE=InnoDB;
INSERT INTO t$i SELECT seq, CONCAT('name ', seq), seq * 1.5 FROM seq_1_to_$R;"
  fi
done | sql >/dev/null

# The two forms of the same pipeline.
mkdir -p "$WORK/declared" "$WORK/flows"
cat >"$WORK/declared/pipeline.yaml" <<YAML
name: many_tables_declared
connections:
  src:
    $CONNECTION
syncs:
  src:
    connection: src
    tables: '$SCHEMA.t*'
YAML
cat >"$WORK/flows/pipeline.yaml" <<YAML
name: many_tables_flows
connections:
  src:
    $CONNECTION
YAML
for i in $(seq 1 "$T"); do
  cat >>"$WORK/flows/flows.sql" <<SQL
CREATE OR REFRESH STREAMING TABLE t${i}_changes AS SELECT * FROM STREAM $READ(connection => 'src', table => '$SCHEMA.t$i');
CREATE OR REFRESH STREAMING TABLE t$i;
CREATE FLOW t${i}_apply AS AUTO CDC INTO t$i FROM STREAM(t${i}_changes) KEYS (id)
  APPLY AS DELETE WHEN _change_type = 'delete' APPLY AS TRUNCATE WHEN _change_type = 'truncate'
  SEQUENCE BY struct($SEQ, _change_seq) COLUMNS * EXCEPT ($META);
SQL
done

# timed_run FORM LABEL: one `cdcflow run`, its seconds and the most connections held.
timed_run() {
  local form=$1 label=$2 most=0 n start end pid
  start=$(date +%s.%N)
  RUST_LOG=warn,cdcflow_mysql=info "$BIN" run -p "$WORK/$form" >"$WORK/$form-$label.out" 2>"$WORK/$form-$label.err" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    n=$(connections 2>/dev/null || echo 0)
    [ "${n:-0}" -gt "$most" ] && most=$n
    sleep 0.02
  done
  wait "$pid" || { cat "$WORK/$form-$label.err" >&2; die "$form: the $label run failed"; }
  end=$(date +%s.%N)
  printf '%s %s %.2f s, at most %s connection(s), %s slot(s) kept, %s binary log dump(s)\n' \
    "$form" "$label" "$(echo "$end - $start" | bc -l)" "$most" "$(slots "$form")" \
    "$(grep -c 'reading the binary log' "$WORK/$form-$label.err" || true)"
}

# The changes, the same for both forms: C statements over the tables in turn.
changes() {
  local k=0 i id
  echo "BEGIN;"
  while [ "$k" -lt "$C" ]; do
    i=$((k % T + 1)) id=$((k / T + 1))
    case $((k % 5)) in
      0|1|2) echo "UPDATE t$i SET amount = amount + 1 WHERE id = $id;" ;;
      3) echo "INSERT INTO t$i VALUES ($((R + id)), 'new $id', 1);" ;;
      4) echo "DELETE FROM t$i WHERE id = $((R - id));" ;;
    esac
    k=$((k + 1))
    [ $((k % 100)) -eq 0 ] && echo "COMMIT; BEGIN;"
  done
  echo "COMMIT;"
}

check() {
  local form=$1 i want got
  for i in 1 "$T"; do
    want=$(echo "SELECT count(*) FROM t$i;" | sql)
    got=$("$BIN" query -p "$WORK/$form" "SELECT count(*) AS n FROM t$i" --format csv | tail -1)
    [ "$want" = "$got" ] || die "$form: t$i has $got rows, the source $want"
  done
}

changes >"$WORK/changes.sql"
for form in declared flows; do
  timed_run "$form" snapshot
  check "$form"
done
sql <"$WORK/changes.sql" >/dev/null
for form in declared flows; do
  timed_run "$form" catch-up
  check "$form"
done
# A run with nothing new: what a poll of `run --continuous` costs when the source is idle.
for form in declared flows; do
  timed_run "$form" nothing-new
done
