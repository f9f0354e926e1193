# Recipes are plain cargo commands; CI (.ci/run) runs the same test command.

build:
    cargo build --workspace --locked

test:
    bash .ci/py-delta >/dev/null
    cargo test --workspace --locked

lint:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets --locked -- -D warnings

validate-examples:
    for p in pipelines/*/; do cargo run --locked -q -p cdcflow-cli -- validate -p "$p" || exit 1; done

run-example:
    cargo run --locked -p cdcflow-cli -- run -p pipelines/orders
    cargo run --locked -p cdcflow-cli -- query -p pipelines/orders "SELECT * FROM silver_orders_history ORDER BY order_id"

bench:
    cargo bench --locked -p cdcflow-plan --bench validate

# The CDC-apply benchmark against DuckDB, Polars and delta-rs (docs/benchmarks.md). Built
# with the workspace's features, as the release binary is, so it reuses that build.
bench-apply n="1000000" m="100000":
    cargo bench --workspace --locked --bench apply_peer --no-run
    bash ../shared/bench/run_all.sh {{n}} {{m}} --reps 3 --peer "cdcflow=$(ls -t ${CARGO_TARGET_DIR:-target}/release/deps/apply_peer-* | grep -v '\.d$' | head -1)"


# Defaults: N = 1e7 and the release binary (`cargo build --workspace --locked --release`);
# small: `just bench-cost target/debug/cdcflow --n 100000 --a 10000 --b 100 --c 100 --d 10`.
# Issue 18's cost-follows-change benchmark: whole `cdcflow run` processes (docs/benchmarks.md).
bench-cost bin=(env_var_or_default("CARGO_TARGET_DIR", "target") + "/release/cdcflow") *args="":
    bash benches/cost_follows_change/run.sh {{bin}} {{args}}

# Issue 33's apply on workers against one machine (docs/benchmarks.md), release binary.
bench-workers bin=(env_var_or_default("CARGO_TARGET_DIR", "target") + "/release/cdcflow") *args="":
    bash benches/workers/run.sh {{bin}} {{args}}

# Issue 34's `cdcflow test` speed: 50 cases of a 10-flow pipeline (docs/benchmarks.md).
bench-tests bin=(env_var_or_default("CARGO_TARGET_DIR", "target") + "/release/cdcflow") *args="":
    bash benches/pipeline_tests/run.sh {{bin}} {{args}}

# Issue 30's convergence check, long: the random PostgreSQL workload (four writers,
# TOASTed values, key changes, rollbacks, a TRUNCATE, two SIGKILLs) at a larger size;
# CI runs the same test short. Needs `bash .ci/postgres`.
soak-postgres keys="20000" ops="3000" seed="7":
    CDCFLOW_PG_RANDOM_KEYS={{keys}} CDCFLOW_PG_RANDOM_OPS={{ops}} CDCFLOW_PG_RANDOM_SEED={{seed}} \
      cargo test --locked -p cdcflow-cli --test e2e -- --exact postgres::convergence::a_random_workload_with_a_truncate_and_two_kills_converges
