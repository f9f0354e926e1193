//! `cdcflow ui`: serves the pipeline's web page (`cdcflow_runtime::ui`) until stopped.

use std::process::ExitCode;

use crate::PipelineArgs;

/// The address the page is served on unless `--addr` says otherwise: loopback only.
pub const DEFAULT_ADDR: &str = "127.0.0.1:8470";

pub fn serve(pipeline: &PipelineArgs, addr: std::net::SocketAddr) -> ExitCode {
    if !pipeline.dir.join("pipeline.yaml").is_file() {
        errln!("error: no pipeline.yaml in {}", pipeline.dir.display());
        return ExitCode::from(2);
    }
    crate::runtime().block_on(async {
        let listener = match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => l,
            Err(e) => {
                errln!("error: cannot listen on {addr}: {e}");
                errln!("  help: give another address with --addr 127.0.0.1:PORT (port 0 picks a free one)");
                return ExitCode::from(1);
            }
        };
        let bound = match listener.local_addr() {
            Ok(a) => a,
            Err(e) => {
                errln!("error: {e}");
                return ExitCode::from(1);
            }
        };
        if !bound.ip().is_loopback() {
            errln!(
                "warning: serving on {bound}: anyone who reaches it reads the pipeline's tables (the page is read-only)"
            );
        }
        // The first line names the page (a test reads the port from it).
        outln!("cdcflow ui: http://{bound}/ (pipeline folder {}; Ctrl-C stops)", pipeline.dir.display());
        let source = cdcflow_runtime::ui::UiSource {
            root: pipeline.dir.clone(),
            overrides: pipeline.overrides(),
            bound,
        };
        tokio::select! {
            () = cdcflow_runtime::ui::serve(listener, source) => ExitCode::SUCCESS,
            _ = tokio::signal::ctrl_c() => ExitCode::SUCCESS,
        }
    })
}
