//! Process plumbing shared by the long-running commands (`run`, `serve`): logging and the
//! shutdown signal.

/// Log to stderr, filtered by `RUST_LOG` (default `info`).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
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
    draining: &std::sync::atomic::AtomicBool,
    seconds: u64,
    serving: &mut std::pin::Pin<&mut F>,
) -> anyhow::Result<()>
where
    F: std::future::Future<Output = anyhow::Result<()>>,
{
    draining.store(true, std::sync::atomic::Ordering::Release);
    tracing::info!(seconds, "shutting down: draining");
    tokio::select! {
        r = serving.as_mut() => r,
        () = tokio::time::sleep(std::time::Duration::from_secs(seconds)) => {
            tracing::info!("drained");
            Ok(())
        }
    }
}
