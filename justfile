# Recipes are plain cargo commands; CI (.ci/run) runs the same test command.

build:
    cargo build --workspace --locked

test:
    cargo test --workspace --locked

lint:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets --locked -- -D warnings

validate-examples:
    for p in pipelines/*/; do cargo run --locked -q -p cdcflow-cli -- validate -p "$p" || exit 1; done

run-example:
    cargo run --locked -p cdcflow-cli -- validate -p pipelines/orders
    cargo run --locked -p cdcflow-cli -- explain -p pipelines/orders

bench:
    cargo bench --locked -p cdcflow-plan --bench validate
