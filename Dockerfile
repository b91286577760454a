# agentcard-operator image: the static-ish binary on a distroless, non-root runtime.
#   docker build -t agentcard-operator:0.1.0 .
# The runtime user (65532) and read-only root filesystem match the Helm chart's restricted
# Pod Security settings; the binary writes nothing to disk.

FROM rust:1.95-bookworm AS build
WORKDIR /src
RUN apt-get update && apt-get install -y --no-install-recommends pkg-config libssl-dev \
    && rm -rf /var/lib/apt/lists/*
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY benches ./benches
COPY tests/support/dircards.rs ./tests/support/dircards.rs
RUN cargo build --release --locked --bin agentcard-operator \
    && strip target/release/agentcard-operator

# distroless "cc" carries glibc, libgcc (Rust's unwinder), libssl and CA certificates (the binary
# links OpenSSL); "base" lacks libgcc. scripts/image builds the same root filesystem from Debian 12
# packages without Docker (tests/image.rs checks the two agree).
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/agentcard-operator /usr/local/bin/agentcard-operator
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/usr/local/bin/agentcard-operator"]
CMD ["run"]
