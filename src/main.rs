//! The `agentcard-operator` binary: all behaviour lives in the library.

/// jemalloc instead of the system allocator: the operator's many small, short-lived
/// allocations across tokio's worker threads fragment glibc's per-thread arenas; with
/// jemalloc the resident memory stays close to the live heap (see the controller load
/// benchmark's peak RSS). The `system-alloc` feature keeps the system allocator, for heap
/// profilers that hook it (`heaptrack`).
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read before `main` runs (`_RJEM_MALLOC_CONF` in the environment still
/// overrides them). A bulk apply or a restart makes heaps of short-lived garbage (list pages,
/// request and response bodies, the objects each reconcile builds): by default jemalloc keeps
/// freed pages for 10 s, in up to 8 arenas on 2 cores, and the process's resident memory rises
/// well above what is live. Here freed pages go back to the system at once, by a background
/// thread, from at most 2 arenas (the operator has few busy threads). Against a decay of one
/// second this took a restart's peak at 10,000 cards from 132 to 125 MiB, with the card server's
/// CPU per request unchanged (`bench/serve-vs-nginx`).
#[cfg(not(feature = "system-alloc"))]
#[export_name = "_rjem_malloc_conf"]
pub static MALLOC_CONF: &[u8; 67] =
    b"background_thread:true,narenas:2,dirty_decay_ms:0,muzzy_decay_ms:0\0";

fn main() -> std::process::ExitCode {
    agentcard_operator::cli::main()
}
