//! Process plumbing shared by the long-running commands (`run`, `serve`): logging, the shutdown
//! signal, and tasks that end with their owner.

/// A spawned task aborted when this is dropped, so a task never outlives what owns it (a
/// watch its hub, the controllers' tasks the lease).
pub struct AbortOnDrop(pub tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Log to stderr, filtered by `RUST_LOG` (default `info`).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours for a person at a terminal only: a container runtime's log file (kubectl logs)
    // or a log collector gets plain text.
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .try_init();
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return ctrl_c.await.unwrap_or(()),
            };
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// Drain before exiting: `/readyz` turns 503 at once (load balancers stop sending), responses
/// ask clients to close their connections, and requests keep being answered for `seconds`
/// while `serving` (the servers' future) runs; an error of the servers ends it early.
pub async fn drain<F>(
    shutdown: &crate::serve::server::Shutdown,
    seconds: u64,
    serving: &mut std::pin::Pin<&mut F>,
) -> anyhow::Result<()>
where
    F: std::future::Future<Output = anyhow::Result<()>>,
{
    shutdown.drain();
    tracing::info!(seconds, "shutting down: draining");
    tokio::select! {
        r = serving.as_mut() => return r,
        () = tokio::time::sleep(std::time::Duration::from_secs(seconds)) => {}
    }
    // Stop accepting; the requests in flight finish before the servers return (bounded).
    shutdown.close();
    match tokio::time::timeout(std::time::Duration::from_secs(15), serving.as_mut()).await {
        Ok(r) => r?,
        Err(_) => tracing::warn!("connections still open after closing; exiting anyway"),
    }
    tracing::info!("drained");
    Ok(())
}
