//! The operator's image, built here by `scripts/image` (the operator's binary on Debian 12
//! packages, an OCI image layout tar) for the image and node tests.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use super::root;

/// One image `scripts/image` wrote.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Image {
    /// `repository:tag`, as containerd names it once imported.
    pub image: String,
    /// The manifest's digest.
    pub digest: String,
    /// The OCI layout tar.
    pub tar: PathBuf,
    /// Layers, config and manifest, as pushed to a registry.
    pub compressed_bytes: u64,
    /// The layers unpacked.
    pub uncompressed_bytes: u64,
    /// The operator binary inside.
    pub binary: PathBuf,
    /// The Debian packages inside, `name=version` each.
    pub packages: String,
}

/// Run `scripts/image` with `args`; what it wrote.
pub fn build(args: &[&str]) -> Image {
    let out = Command::new("python3")
        .arg(root().join("scripts/image"))
        .args(args)
        .output()
        .expect("running scripts/image");
    assert!(
        out.status.success(),
        "scripts/image {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .rfind(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("scripts/image printed no result: {stdout}"));
    serde_json::from_str(line).unwrap()
}

/// The operator's image (made once per test binary) under the chart's default repository and
/// appVersion tag, with the binary `cargo test` built: the image is the release one in every
/// other respect (`scripts/image` without `--binary` builds the release binary, as the release
/// and `scripts/demo-node` do), and a cold run of the tests is spared a second, optimised build
/// of the operator and every crate it uses.
pub fn operator_image() -> &'static Image {
    static IMAGE: OnceLock<Image> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let out = tmp().join("operator-image.tar");
        let image = build(&[
            "--binary",
            env!("CARGO_BIN_EXE_agentcard-operator"),
            "--out",
            out.to_str().unwrap(),
        ]);
        eprintln!(
            "operator image {} {}: {} bytes compressed, {} unpacked",
            image.image, image.digest, image.compressed_bytes, image.uncompressed_bytes
        );
        image
    })
}

/// A directory of this test binary's own for image files.
pub fn tmp() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("image-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The JSON blob `digest` (`sha256:...`) of the OCI layout tar at `tar`.
pub fn blob(tar: &Path, digest: &str) -> Vec<u8> {
    let name = format!("blobs/sha256/{}", digest.trim_start_matches("sha256:"));
    let out = Command::new("tar")
        .arg("-xOf")
        .arg(tar)
        .arg(&name)
        .output()
        .unwrap();
    assert!(out.status.success(), "no {name} in {}", tar.display());
    out.stdout
}

/// The image config of the image in `tar` (its single manifest's config).
pub fn config(tar: &Path, manifest_digest: &str) -> serde_json::Value {
    let manifest: serde_json::Value = serde_json::from_slice(&blob(tar, manifest_digest)).unwrap();
    let config = manifest["config"]["digest"].as_str().unwrap();
    serde_json::from_slice(&blob(tar, config)).unwrap()
}
