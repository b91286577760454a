//! The `agentcard-operator` binary: all behaviour lives in the library.

fn main() -> std::process::ExitCode {
    agentcard_operator::cli::main()
}
