#!/usr/bin/env bash
# Issue 34 §1: `cdcflow test` on C cases of a 10-flow pipeline (two landing sources
# in JSON and CSV, three AUTO CDC flows of SCD types 1 and 2, five materialized views
# over them, one through a view), each case with its own rows for both sources and
# expected rows for four tables. Prints the wall time of the whole `cdcflow test`
# (median of REPS) and its peak RSS, and checks that every case passed.
#
#   bash benches/pipeline_tests/run.sh CDCFLOW_BIN [--cases C] [--rows R] [--reps N] [--work DIR]
#
# Defaults: C=50, R=20 (rows per source per case), N=3, work dir
# /tmp/cdcflow-pipeline-tests (deleted at start). The target (issue 34): 50 cases in
# under 5 s on the release build.
set -euo pipefail

die() { echo "error: $*" >&2; exit 1; }
# shellcheck source=benches/common.sh
source "$(dirname "$0")/../common.sh"
[ $# -ge 1 ] || die "usage: run.sh CDCFLOW_BIN [--cases C] [--rows R] [--reps N] [--work DIR]"
BIN=$(realpath "$1"); shift
[ -x "$BIN" ] || die "$BIN is not an executable cdcflow binary"
C=50 R=20 REPS=3 WORK=/tmp/cdcflow-pipeline-tests
while [ $# -gt 0 ]; do
  case "$1" in
    --cases) C=$2; shift 2 ;;
    --rows) R=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    *) die "unknown argument $1" ;;
  esac
done
WORK=$(fresh_work "$WORK")
PIPE=$WORK/pipeline
mkdir -p "$PIPE/landing/orders" "$PIPE/landing/customers"
cat >"$PIPE/pipeline.yaml" <<'YAML'
name: ten_flows
YAML
cat >"$PIPE/flows.sql" <<'SQL'
CREATE OR REFRESH STREAMING TABLE bronze_orders AS SELECT * FROM STREAM read_files('landing/orders', format => 'json', schema => 'order_id BIGINT, customer_id BIGINT, status STRING, amount DECIMAL(12,2), op STRING, seq BIGINT');
CREATE OR REFRESH STREAMING TABLE bronze_customers AS SELECT * FROM STREAM read_files('landing/customers', format => 'csv', header => true, schema => 'customer_id BIGINT, name STRING, city STRING, op STRING, seq BIGINT');
CREATE OR REFRESH STREAMING TABLE orders;
CREATE FLOW orders_cdc AS AUTO CDC INTO orders FROM STREAM(bronze_orders) KEYS (order_id) APPLY AS DELETE WHEN op = 'D' SEQUENCE BY seq COLUMNS * EXCEPT (op, seq);
CREATE OR REFRESH STREAMING TABLE orders_history;
CREATE FLOW orders_history_cdc AS AUTO CDC INTO orders_history FROM STREAM(bronze_orders) KEYS (order_id) APPLY AS DELETE WHEN op = 'D' SEQUENCE BY seq COLUMNS * EXCEPT (op, seq) STORED AS SCD TYPE 2;
CREATE OR REFRESH STREAMING TABLE customers;
CREATE FLOW customers_cdc AS AUTO CDC INTO customers FROM STREAM(bronze_customers) KEYS (customer_id) APPLY AS DELETE WHEN op = 'D' SEQUENCE BY seq COLUMNS * EXCEPT (op, seq);
CREATE MATERIALIZED VIEW orders_by_status AS SELECT status, count(*) AS orders, sum(amount) AS amount FROM orders GROUP BY status;
CREATE MATERIALIZED VIEW orders_by_city AS SELECT c.city, count(*) AS orders, sum(o.amount) AS amount FROM orders o JOIN customers c ON o.customer_id = c.customer_id GROUP BY c.city;
CREATE MATERIALIZED VIEW versions_per_order AS SELECT order_id, count(*) AS versions FROM orders_history GROUP BY order_id;
CREATE TEMPORARY VIEW open_orders AS SELECT * FROM orders WHERE status <> 'shipped';
CREATE MATERIALIZED VIEW open_per_customer AS SELECT customer_id, count(*) AS open_orders FROM open_orders GROUP BY customer_id;
CREATE MATERIALIZED VIEW customers_per_city AS SELECT city, count(*) AS customers FROM customers GROUP BY city;
SQL
"$BIN" validate -p "$PIPE" >/dev/null || die "the generated pipeline does not validate"
for c in $(seq 1 "$C"); do
  case_dir=$PIPE/tests/case_$(printf %03d "$c")
  mkdir -p "$case_dir/input"
  awk -v r="$R" -v c="$c" 'BEGIN { split("new paid shipped", s, " "); for (k = 1; k <= r; k++) printf "{\"order_id\":%d,\"customer_id\":%d,\"status\":\"%s\",\"amount\":%d.%02d,\"op\":\"%s\",\"seq\":%d}\n", k % (r / 2) + 1, k % 5 + 1, s[(k + c) % 3 + 1], k * c % 97, k % 100, (k % 7 == 0 ? "D" : "U"), k }' \
    >"$case_dir/input/bronze_orders.json"
  awk -v r="$R" -v c="$c" 'BEGIN { print "customer_id,name,city,op,seq"; split("Oslo Lima Pune", t, " "); for (k = 1; k <= r; k++) printf "%d,n%d_%d,%s,U,%d\n", k % 5 + 1, c, k, t[(k + c) % 3 + 1], k }' \
    >"$case_dir/input/bronze_customers.csv"
done
# The expected rows are what the pipeline gives now (written once, then compared).
"$BIN" test -p "$PIPE" --update >"$WORK/update.log" 2>&1 || { cat "$WORK/update.log" >&2; die "--update failed"; }
for c in "$PIPE"/tests/*/; do
  # Four tables checked per case: keep them, drop the rest.
  find "$c/expect" -type f ! -name 'orders.csv' ! -name 'orders_history.csv' ! -name 'orders_by_city.csv' ! -name 'open_per_customer.csv' -delete
done

times=()
rss=0
for _ in $(seq 1 "$REPS"); do
  start=$(date +%s.%N)
  /usr/bin/time -f "%M" -o "$WORK/rss" "$BIN" test -p "$PIPE" >"$WORK/test.log" 2>&1 || { tail -20 "$WORK/test.log" >&2; die "cases failed"; }
  end=$(date +%s.%N)
  times+=("$(echo "$end - $start" | bc -l)")
  r=$(cat "$WORK/rss"); [ "$r" -gt "$rss" ] && rss=$r
done
grep -q "test result: ok. $C passed" "$WORK/test.log" || die "not every case passed: $(tail -1 "$WORK/test.log")"
wall=$(printf '%s\n' "${times[@]}" | median)
printf 'cases %d, flows 10, rows per source per case %d: cdcflow test %.2f s (median of %d), %.0f ms per case, peak RSS %d MiB\n' \
  "$C" "$R" "$wall" "$REPS" "$(echo "$wall * 1000 / $C" | bc -l)" "$((rss / 1024))"
