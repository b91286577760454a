//! Process plumbing shared by the long-running commands (`run`, `serve`): logging, the shutdown
//! signal, and tasks that end with their owner.

/// A spawned task aborted when this is dropped, so a task never outlives what owns it (a
/// watch its hub, the controllers' tasks the lease).
pub struct AbortOnDrop(pub tokio::task::JoinHandle<()>);

impl AbortOnDrop {
    /// Spawn `task` inside `span`: every long-lived task runs in a span naming what it works
    /// on, so its log lines can be told from another's.
    pub fn spawn<F>(span: tracing::Span, task: F) -> Self
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        AbortOnDrop(tokio::spawn(tracing::Instrument::instrument(task, span)))
    }
}

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
