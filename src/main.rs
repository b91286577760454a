//! The `agentcard-operator` binary: all behaviour lives in the library.

/// jemalloc instead of the system allocator: the operator's many small, short-lived
/// allocations across tokio's worker threads fragment glibc's per-thread arenas; with
/// jemalloc the resident memory stays close to the live heap (see the controller load
/// benchmark's peak RSS). The `system-alloc` feature keeps the system allocator, for heap
/// profilers that hook it (`heaptrack`).
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    agentcard_operator::cli::main()
}
