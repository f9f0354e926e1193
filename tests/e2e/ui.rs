//! `cdcflow ui` in a real browser: Debian's Chromium, headless, driven by playwright-core
//! (`.ci/chromium`) through `ui_check.cjs`. The graph shows every node; clicking a flow
//! shows its lag chart; a failing flow is drawn red with its error; a diagnostic sits
//! on its node; the page is read-only and shows no secret.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::{cdcflow, example_copy, stderr, stdout};

/// A `cdcflow ui` process, stopped when dropped.
struct Ui {
    child: Child,
    url: String,
}

impl Ui {
    fn start(dir: &Path, env: &[(&str, &str)]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cdcflow"))
            .args([
                "ui",
                "-p",
                dir.to_str().expect("utf-8"),
                "--addr",
                "127.0.0.1:0",
            ])
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("cdcflow ui starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the ui says where it serves");
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("the first line names the page: {line:?}"))
            .to_string();
        Self { child, url }
    }

    /// `method path` over HTTP/1.0: the status code, and the headers (lower-cased) and
    /// body.
    fn request(&self, method: &str, path: &str) -> (u16, String) {
        let host = self.url.trim_start_matches("http://").trim_end_matches('/');
        self.request_as(host, method, path)
    }

    /// As [`Ui::request`], naming `host` in the request.
    fn request_as(&self, host: &str, method: &str, path: &str) -> (u16, String) {
        let address = self.url.trim_start_matches("http://").trim_end_matches('/');
        let mut stream = std::net::TcpStream::connect(address).expect("connect");
        write!(stream, "{method} {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").expect("send");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("read");
        let status = response
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (
            status,
            response
                .split_once("\r\n\r\n")
                .map_or(String::new(), |(h, _)| h.to_lowercase())
                + "\n\n"
                + &body,
        )
    }
}

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `node`, the browser script and the playwright-core folder; fails naming the setup
/// script when the browser or playwright-core is missing.
fn browser_command() -> (&'static str, std::path::PathBuf, String) {
    let playwright = std::env::var("CDCFLOW_PLAYWRIGHT").unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_default();
        format!("{home}/.cache/cdcflow/tools/playwright-core-1.64.1")
    });
    assert!(
        Path::new(&playwright)
            .join("node_modules/playwright-core")
            .is_dir()
            && Path::new("/usr/bin/chromium").exists(),
        "the browser tests need Chromium and playwright-core: run `bash .ci/chromium` once (or set CDCFLOW_PLAYWRIGHT)"
    );
    (
        "node",
        crate::repo().join("tests/e2e/ui_check.cjs"),
        playwright,
    )
}

/// What `ui_check.cjs` found on the page at `url` after `args`.
fn browse(url: &str, args: &[&str]) -> serde_json::Value {
    let (program, script, playwright) = browser_command();
    let out = Command::new(program)
        .arg(script)
        .arg(url)
        .args(args)
        .env("CDCFLOW_PLAYWRIGHT", &playwright)
        .output()
        .expect("node runs");
    assert!(
        out.status.success(),
        "ui_check.cjs: {}{}",
        stdout(&out),
        stderr(&out)
    );
    serde_json::from_str(stdout(&out).trim()).expect("one JSON object")
}

fn run(dir: &Path) -> std::process::Output {
    cdcflow(&["run", "-p", dir.to_str().expect("utf-8")])
}

/// Where screenshots go: `CDCFLOW_UI_SCREENSHOTS` (docs/ui/ to refresh the README's),
/// else a scratch folder.
fn shot(name: &str, scratch: &Path) -> String {
    let dir =
        std::env::var("CDCFLOW_UI_SCREENSHOTS").map_or_else(|_| scratch.to_path_buf(), Into::into);
    dir.join(name).display().to_string()
}

#[test]
fn the_graph_shows_every_node_and_clicking_a_flow_shows_its_lag_over_its_runs() {
    let dir = example_copy("orders");
    let bronze = dir.path().join("sql/01_bronze.sql");
    let text = std::fs::read_to_string(&bronze).expect("bronze");
    std::fs::write(
        &bronze,
        text.replace(
            "TABLE bronze_order_changes\n",
            "TABLE bronze_order_changes (CONSTRAINT known_operation EXPECT (operation IN ('INSERT', 'UPDATE')))\n",
        ),
    )
    .expect("write");
    let landing = dir.path().join("landing/orders");
    let second = landing.join("0002.json");
    let later = std::fs::read(&second).expect("second file");
    std::fs::remove_file(&second).expect("hold the second file back");
    assert!(run(dir.path()).status.success());
    std::fs::write(&second, later).expect("land it");
    assert!(run(dir.path()).status.success());

    let ui = Ui::start(dir.path(), &[]);
    let graph = cdcflow(&[
        "graph",
        "-p",
        dir.path().to_str().expect("utf-8"),
        "--format",
        "json",
    ]);
    let graph: serde_json::Value = serde_json::from_str(&stdout(&graph)).expect("graph json");
    let mut want: Vec<String> = graph["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["id"].as_str().expect("id").to_string())
        .collect();
    want.sort();

    let scratch = tempfile::tempdir().expect("tempdir");
    let page = browse(
        &ui.url,
        &[
            "--click",
            "flow:orders_changes",
            "--shot",
            &shot("graph.png", scratch.path()),
            "--shot-after-click",
            &shot("flow.png", scratch.path()),
        ],
    );
    assert_eq!(page["errors"], serde_json::json!([]), "{page}");
    assert_eq!(page["title"], "orders");
    let mut nodes: Vec<String> = page["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n.as_str().expect("id").to_string())
        .collect();
    nodes.sort();
    assert_eq!(nodes, want);
    assert_eq!(page["failed"], serde_json::json!([]));
    assert_eq!(page["badges"]["flow:orders_changes"], "✔", "{page}");
    // One point per run that read something: two runs, two points.
    assert_eq!(page["chart_points"], 2, "{page}");
    assert_eq!(page["hash"], "#flow:orders_changes");
    let detail = page["detail"].as_str().expect("detail");
    assert!(
        detail.contains("AUTO CDC, SCD type 2") && detail.contains("flow_completed"),
        "{detail}"
    );

    // A table's detail: its rows, columns and history.
    let page = browse(
        &ui.url,
        &[
            "--click",
            "table:silver_orders_history",
            "--shot-after-click",
            &shot("table.png", scratch.path()),
        ],
    );
    let detail = page["detail"].as_str().expect("detail");
    for want in ["rows6", "DECIMAL(12,2)", "__START_AT", "MERGE", "shipped"] {
        assert!(detail.contains(want), "{want} in {detail}");
    }
    // A table's own query: its expectations' counts in the last batch (the second file
    // holds one DELETE).
    let page = browse(&ui.url, &["--click", "table:bronze_order_changes"]);
    let detail = page["detail"].as_str().expect("detail");
    assert!(
        detail.contains("expectationsknown_operation (warn): 4 passed, 1 failed"),
        "{detail}"
    );
}

#[test]
fn a_failing_flow_is_red_with_its_error_and_a_diagnostic_sits_on_its_node() {
    let dir = example_copy("orders");
    // An event without its key fails the AUTO CDC flow (and only it).
    std::fs::write(
        dir.path().join("landing/orders/0003.json"),
        "{\"order_id\": null, \"customer_id\": 1, \"status\": \"paid\", \"amount\": 1.00, \"operation\": \"UPDATE\", \"commit_ts\": \"2024-06-03T10:00:00Z\", \"log_position\": 9}\n",
    )
    .expect("write");
    let out = run(dir.path());
    assert!(!out.status.success(), "{}", stdout(&out));
    // An error of validate in a file of its own.
    std::fs::write(
        dir.path().join("sql/04_broken.sql"),
        "CREATE OR REFRESH MATERIALIZED VIEW broken AS SELECT no_such_column FROM silver_orders_history;\n",
    )
    .expect("write");

    let ui = Ui::start(dir.path(), &[]);
    let scratch = tempfile::tempdir().expect("tempdir");
    let page = browse(
        &ui.url,
        &[
            "--click",
            "flow:orders_changes",
            "--shot-after-click",
            &shot("failed.png", scratch.path()),
        ],
    );
    assert_eq!(page["errors"], serde_json::json!([]), "{page}");
    assert_eq!(
        page["failed"],
        serde_json::json!(["table:silver_orders_history", "flow:orders_changes"]),
        "{page}"
    );
    assert_eq!(page["badges"]["flow:orders_changes"], "failed", "{page}");
    let detail = page["detail"].as_str().expect("detail");
    assert!(detail.contains("null key"), "{detail}");
    assert_eq!(page["failed_points"], 1, "{page}");
    // The error of validate is listed, and marked on the node it is about.
    let diagnostics = page["diagnostics"].to_string();
    assert!(
        diagnostics.contains("sql/04_broken.sql:1:"),
        "{diagnostics}"
    );
    assert!(diagnostics.contains("no_such_column"), "{diagnostics}");
    // With its source line, as validate shows it.
    assert!(
        diagnostics
            .contains("1 | CREATE OR REFRESH MATERIALIZED VIEW broken AS SELECT no_such_column"),
        "{diagnostics}"
    );
    assert!(
        page["badges"]["table:broken"]
            .as_str()
            .is_some_and(|b| b.starts_with('✖')),
        "{page}"
    );
}

#[test]
fn the_page_follows_a_run_made_while_it_is_open() {
    let dir = example_copy("orders");
    let ui = Ui::start(dir.path(), &[]);
    let (program, script, playwright) = browser_command();
    let mut browser = Command::new(program)
        .arg(script)
        .arg(&ui.url)
        .args(["--wait-done", "flow:orders_changes"])
        .env("CDCFLOW_PLAYWRIGHT", playwright)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node runs");
    let mut line = String::new();
    BufReader::new(browser.stderr.take().expect("stderr"))
        .read_line(&mut line)
        .expect("the browser says it watches");
    assert_eq!(line.trim(), "watching");
    assert!(run(dir.path()).status.success());
    let out = browser.wait_with_output().expect("node ends");
    assert!(out.status.success(), "{}", stdout(&out));
    let page: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("json");
    assert_eq!(page["badge_before"], "", "{page}");
    assert_eq!(page["badge_after"], "✔", "{page}");
}

#[test]
fn the_page_is_read_only_and_shows_no_secret() {
    let dir = example_copy("crm_postgres");
    let yaml = dir.path().join("pipeline.yaml");
    let text = std::fs::read_to_string(&yaml).expect("yaml");
    std::fs::write(
        &yaml,
        text.replace("# password_env: CRM_PASSWORD", "password_env: CRM_PASSWORD"),
    )
    .expect("write");
    let secret = "sekrit-8d1f0c";
    let ui = Ui::start(dir.path(), &[("CRM_PASSWORD", secret)]);
    for path in [
        "/",
        "/app.js",
        "/api/pipeline",
        "/api/status",
        "/api/flow?name=customers_current",
        "/api/table?name=customers",
    ] {
        let (status, text) = ui.request("GET", path);
        assert_eq!(status, 200, "{path}: {text}");
        assert!(!text.contains(secret), "{path} shows the secret: {text}");
        assert!(
            text.contains("content-security-policy: default-src 'self'"),
            "{path}: {text}"
        );
    }
    let (status, _) = ui.request("POST", "/api/status");
    assert_eq!(status, 405);
    let (status, _) = ui.request("GET", "/nothing");
    assert_eq!(status, 404);
    // Another site's name resolved to loopback (DNS rebinding) is refused.
    let (status, _) = ui.request_as("evil.example:80", "GET", "/api/status");
    assert_eq!(status, 403);
    let (_, text) = ui.request("GET", "/api/table?name=no_such_table");
    assert!(
        text.contains("the pipeline stores no table `no_such_table`"),
        "{text}"
    );
    // Bound to loopback unless told otherwise.
    assert!(ui.url.starts_with("http://127.0.0.1:"), "{}", ui.url);
}
