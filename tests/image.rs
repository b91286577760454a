//! The operator's image as `scripts/image` builds it without Docker: reproducible (the same
//! inputs give the same digest), in agreement with the Dockerfile users build (entrypoint,
//! user, ports, binary path), runnable as the nonroot user on nothing but its own layers; and
//! the release workflow that publishes the image and chart passes actionlint.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use support::image::{self, Image};
use support::tools::Tool;

fn sha256(path: &Path) -> String {
    use sha2::Digest;
    let bytes = std::fs::read(path).unwrap();
    sha2::Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn the_image_is_reproducible_byte_for_byte() {
    let first = image::operator_image();
    let again = image::tmp().join("again.tar");
    let second: Image = image::build(&[
        "--binary",
        first.binary.to_str().unwrap(),
        "--out",
        again.to_str().unwrap(),
    ]);
    eprintln!(
        "{} {}: {} bytes compressed, {} unpacked; packages: {}",
        first.image, first.digest, first.compressed_bytes, first.uncompressed_bytes, first.packages
    );
    assert_eq!(first.digest, second.digest, "same inputs, another digest");
    assert_eq!(
        sha256(&first.tar),
        sha256(&second.tar),
        "same inputs, another tar"
    );
    // A different input is a different image: the tag is part of the index, not the manifest;
    // the binary is part of the manifest.
    let other_binary = image::tmp().join("other-binary");
    std::fs::copy(&first.binary, &other_binary).unwrap();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&other_binary)
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"\0"))
        .unwrap();
    let third = image::build(&[
        "--binary",
        other_binary.to_str().unwrap(),
        "--out",
        image::tmp().join("third.tar").to_str().unwrap(),
    ]);
    assert_ne!(
        first.digest, third.digest,
        "another binary, the same digest"
    );
}

/// The final stage of the Dockerfile: its instructions, one line each, continuations joined.
fn dockerfile_final_stage() -> Vec<String> {
    let text = std::fs::read_to_string(support::root().join("Dockerfile")).unwrap();
    let mut lines: Vec<String> = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if let Some(head) = line.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
            continue;
        }
        current.push_str(line);
        lines.push(std::mem::take(&mut current));
    }
    let last_from = lines.iter().rposition(|l| l.starts_with("FROM ")).unwrap();
    lines.split_off(last_from)
}

fn instruction<'a>(stage: &'a [String], name: &str) -> &'a str {
    stage
        .iter()
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {name} in the Dockerfile's final stage: {stage:?}"))
        .trim()
}

#[test]
fn the_image_and_the_dockerfile_agree_and_it_runs_as_nonroot_from_its_layers() {
    let img = image::operator_image();
    let config = image::config(&img.tar, &img.digest);
    let c = &config["config"];
    let stage = dockerfile_final_stage();

    // The binary links libgcc_s, which distroless "base" lacks: "cc" it is.
    assert!(
        stage[0].contains("gcr.io/distroless/cc-debian12"),
        "the Dockerfile's runtime image: {}",
        stage[0]
    );
    let user = instruction(&stage, "USER");
    assert_eq!(c["User"], user, "USER");
    let ports: Vec<String> = instruction(&stage, "EXPOSE")
        .split_whitespace()
        .map(|p| format!("{p}/tcp"))
        .collect();
    let mut exposed: Vec<String> = c["ExposedPorts"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    exposed.sort();
    assert_eq!(exposed, ports, "EXPOSE");
    let entrypoint: Value = serde_json::from_str(instruction(&stage, "ENTRYPOINT")).unwrap();
    assert_eq!(c["Entrypoint"], entrypoint, "ENTRYPOINT");
    let cmd: Value = serde_json::from_str(instruction(&stage, "CMD")).unwrap();
    assert_eq!(c["Cmd"], cmd, "CMD");
    let copy = instruction(&stage, "COPY");
    let binary_path = copy.split_whitespace().last().unwrap();
    assert_eq!(
        entrypoint[0], binary_path,
        "the Dockerfile's binary is its entrypoint"
    );
    for (label, want) in [
        (
            "org.opencontainers.image.source",
            "https://github.com/agentcard-dev/agentcard-operator",
        ),
        (
            "org.opencontainers.image.version",
            env!("CARGO_PKG_VERSION"),
        ),
        ("org.opencontainers.image.licenses", "Apache-2.0"),
    ] {
        assert_eq!(c["Labels"][label], want, "{label}");
    }
    let revision = c["Labels"]["org.opencontainers.image.revision"]
        .as_str()
        .unwrap();
    assert!(
        revision.len() >= 40 && revision[..40].chars().all(|ch| ch.is_ascii_hexdigit()),
        "revision label: {revision}"
    );

    // Its layers alone, unpacked, run the operator as the image's user: the loader, glibc,
    // libgcc and OpenSSL are all there (keygen makes a key with OpenSSL).
    let rootfs = unpack(img);
    assert!(rootfs.join(binary_path.trim_start_matches('/')).is_file());
    let passwd = std::fs::read_to_string(rootfs.join("etc/passwd")).unwrap();
    assert!(passwd.contains("nonroot:x:65532:65532:"), "{passwd}");
    let bundle = std::fs::read_to_string(rootfs.join("etc/ssl/certs/ca-certificates.crt")).unwrap();
    assert!(
        bundle.matches("BEGIN CERTIFICATE").count() > 100,
        "the CA bundle holds the Mozilla roots"
    );
    let out = Command::new("chroot")
        .arg(format!("--userspec={user}"))
        .arg(&rootfs)
        .args([
            binary_path,
            "keygen",
            "--alg",
            "ES256",
            "--kid",
            "image-test",
        ])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .output()
        .expect("chroot (root)");
    assert!(
        out.status.success(),
        "the binary does not run from the image's layers: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let jwk: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(jwk["kid"], "image-test");
    assert_eq!(jwk["crv"], "P-256");
}

/// The image's layers unpacked, in order, into a fresh directory.
fn unpack(img: &Image) -> PathBuf {
    let manifest: Value = serde_json::from_slice(&image::blob(&img.tar, &img.digest)).unwrap();
    let rootfs = image::tmp().join("rootfs");
    let _ = std::fs::remove_dir_all(&rootfs);
    std::fs::create_dir_all(&rootfs).unwrap();
    for layer in manifest["layers"].as_array().unwrap() {
        let digest = layer["digest"].as_str().unwrap();
        let blob = image::tmp().join("layer.tar.gz");
        std::fs::write(&blob, image::blob(&img.tar, digest)).unwrap();
        let st = Command::new("tar")
            .args(["-xzpf"])
            .arg(&blob)
            .arg("-C")
            .arg(&rootfs)
            .status()
            .unwrap();
        assert!(st.success(), "unpacking layer {digest}");
    }
    rootfs
}

fn actionlint(files: &[PathBuf]) -> std::process::Output {
    Command::new(Tool::Actionlint.path())
        // No shellcheck or pyflakes on the machine: actionlint's own checks.
        .args(["-shellcheck=", "-pyflakes=", "-no-color"])
        .args(files)
        .current_dir(support::root())
        .output()
        .expect("running actionlint")
}

#[test]
fn the_release_workflow_passes_actionlint() {
    let dir = support::root().join(".github/workflows");
    let workflows: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yml" || e == "yaml"))
        .collect();
    assert!(
        workflows.iter().any(|w| w.ends_with("release.yml")),
        "no release workflow in {}",
        dir.display()
    );
    let out = actionlint(&workflows);
    assert!(
        out.status.success(),
        "actionlint:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The linter lints: the same workflow with a job's runner misspelt and an unknown
    // expression fails.
    let text = std::fs::read_to_string(dir.join("release.yml")).unwrap();
    let broken_text = text.replacen("runs-on:", "runs-onn:", 1).replacen(
        "${{ github.actor }}",
        "${{ github.actorr }}",
        1,
    );
    assert_ne!(broken_text, text);
    let broken = image::tmp().join("broken.yml");
    std::fs::write(&broken, broken_text).unwrap();
    let out = actionlint(&[broken]);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "a broken workflow passed: {report}");
    assert!(
        report.contains("runs-onn") && report.contains("actorr"),
        "{report}"
    );
}
