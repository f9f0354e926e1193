//! `syncs:` against the local PostgreSQL: every table of a schema, by a pattern, each
//! into its bronze and SCD tables through one replication slot; names from templates,
//! a key the primary key does not give, and a table created later joining with its
//! own snapshot.

use super::{Db, query, run};
use crate::{cdcflow, stderr, stdout};

#[test]
fn one_declaration_keeps_every_table_of_a_schema_through_one_slot() {
    let db = Db::create("syncs");
    db.exec(
        "CREATE SCHEMA sales;
         CREATE TABLE sales.orders (id int PRIMARY KEY, amount numeric(10,2), note text);
         CREATE TABLE sales.lines (order_id int, line int, qty int, PRIMARY KEY (order_id, line));
         CREATE TABLE sales.events (at timestamptz, what text);
         CREATE TABLE public.elsewhere (id int PRIMARY KEY);
         INSERT INTO sales.orders VALUES (1, 10, 'a'), (2, 20, 'b');
         INSERT INTO sales.lines VALUES (1, 1, 3), (1, 2, 4), (2, 1, 5);",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path();
    std::fs::write(
        p.join("pipeline.yaml"),
        format!(
            "name: pg_syncs
connections:
  crm:
    kind: postgres
    host: {}
    port: {}
    database: {}
    user: {}
syncs:
  sales:
    connection: crm
    tables: 'sales.*'
    bronze_table: 'raw_{{schema}}_{{table}}'
    target: '{{schema}}_{{table}}'
    history_target: '{{schema}}_{{table}}_history'
    scd_type: [1, 2]
",
            db.admin.host, db.admin.port, db.name, db.admin.user
        ),
    )
    .expect("pipeline.yaml");
    let out = cdcflow(&["validate", "-p", p.to_str().expect("utf-8")]);
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("sync `sales` (postgres connection `crm`): 2 table(s)"),
        "{said}"
    );
    assert!(
        said.contains("sales.events  not synced: no primary key"),
        "{said}"
    );
    assert!(!said.contains("elsewhere"), "{said}");

    run(p);
    db.exec(
        "UPDATE sales.orders SET amount = 11 WHERE id = 1;
         DELETE FROM sales.lines WHERE order_id = 2;
         UPDATE sales.lines SET line = 3 WHERE order_id = 1 AND line = 2;
         CREATE TABLE sales.refunds (id int PRIMARY KEY, amount int);
         INSERT INTO sales.refunds VALUES (1, 5);",
    );
    run(p);
    for (target, source, columns) in [
        ("sales_orders", "sales.orders", "id, amount, note"),
        ("sales_lines", "sales.lines", "order_id, line, qty"),
        ("sales_refunds", "sales.refunds", "id, amount"),
        (
            "sales_lines_history WHERE __END_AT IS NULL",
            "sales.lines",
            "order_id, line, qty",
        ),
    ] {
        assert_eq!(
            query(p, &format!("SELECT {columns} FROM {target} ORDER BY 1, 2")),
            db.rows(&format!("SELECT {columns} FROM {source} ORDER BY 1, 2")),
            "{target}"
        );
    }
    assert_eq!(query(p, "SELECT count(*) FROM raw_sales_refunds"), ["1"]);
    let slots = db.rows(&format!(
        "SELECT count(*) FROM pg_replication_slots WHERE database = '{}'",
        db.name
    ));
    assert_eq!(slots, ["1"], "one slot for the sync's three tables");
}
