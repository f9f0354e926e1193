//! `cdcflow worker`: a process that `cdcflow run --workers` spreads the slices of AUTO
//! CDC batches over (docs/scale-out.md).

use std::process::ExitCode;

pub fn serve(listen: std::net::SocketAddr) -> ExitCode {
    crate::runtime().block_on(async {
        let listener = match tokio::net::TcpListener::bind(listen).await {
            Ok(l) => l,
            Err(e) => {
                errln!("error: cannot listen on {listen}: {e}");
                return ExitCode::from(1);
            }
        };
        match listener.local_addr() {
            // The address a run names this worker by (a test reads the port).
            Ok(addr) => outln!("cdcflow worker listening on http://{addr}"),
            Err(e) => {
                errln!("error: {e}");
                return ExitCode::from(1);
            }
        }
        match cdcflow_runtime::cluster::serve(listener).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                errln!("error: {e}");
                ExitCode::from(1)
            }
        }
    })
}
