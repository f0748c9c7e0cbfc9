//! The installer's container image, built by `scripts/image` with buildah as
//! the README says (deploy/image/Containerfile, FROM scratch): its layers hold
//! the release build of scripts/build and nothing else, its entrypoint is
//! `/ipam-delegated install-cni`, its OCI archive is written, and the program
//! runs inside it (no libc in the image: the build is static) and installs
//! into a mounted "host" directory.
//!
//! Needs root and Debian's buildah: #[ignore]d, run by scripts/test with the
//! end-to-end tests (which CI requires); run by hand without buildah or root,
//! it fails saying so. buildah's storage is a temporary directory of its own
//! (vfs), so the machine's images are left alone.

mod support;

use std::fs;
use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::{json, Value};
use support::repo;

fn success(what: &str, output: Output) -> String {
    assert!(
        output.status.success(),
        "{what}: {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn prerequisites() {
    // SAFETY: geteuid only reads the process's credentials.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(
        root,
        "tests/image.rs needs root: buildah's storage and its chroot isolation (run: sudo bash scripts/test)"
    );
    let buildah = Command::new("buildah").arg("--version").output();
    assert!(
        buildah.as_ref().is_ok_and(|o| o.status.success()),
        "tests/image.rs needs buildah (apt-get install buildah; .ci/run installs it): {buildah:?}"
    );
}

struct Buildah {
    storage: PathBuf,
}

impl Buildah {
    fn command(&self) -> Command {
        let mut command = Command::new("buildah");
        command.arg("--storage-driver=vfs").arg("--root").arg(self.storage.join("root"));
        command.arg("--runroot").arg(self.storage.join("run"));
        command
    }

    fn run(&self, args: &[&str]) -> String {
        success(&format!("buildah {args:?}"), self.command().args(args).output().expect("running buildah"))
    }
}

#[test]
#[ignore = "needs root and buildah (apt-get install buildah): scripts/test runs it with the end-to-end tests, required in CI"]
fn the_image_is_the_static_program_alone_with_the_installer_as_its_entrypoint() {
    prerequisites();
    let dir = tempfile::tempdir().expect("tempdir");
    let buildah = Buildah { storage: dir.path().join("buildah") };
    let image = format!("localhost/ipam-delegated-test:{}", std::process::id());
    let archive = dir.path().join("image.tar");

    // As the README has it: scripts/image (which runs scripts/build first).
    let out = Command::new("bash")
        .arg(repo().join("scripts/image"))
        .arg("--archive")
        .arg(&archive)
        .env("IMAGE", &image)
        .env("BUILDAH_ROOT", &buildah.storage)
        .output()
        .expect("running scripts/image");
    let printed = success("scripts/image", out);
    assert_eq!(printed.lines().last(), Some(image.as_str()), "scripts/image prints the image's name last");
    let program =
        success("scripts/build", Command::new("bash").arg(repo().join("scripts/build")).output().expect("build"));
    let program = repo().join(program.lines().last().expect("scripts/build prints the program's path"));
    let program_bytes = fs::read(&program).expect("the release build");

    // The entrypoint and the labels.
    let inspect: Value =
        serde_json::from_str(&buildah.run(&["inspect", "--type", "image", &image])).expect("buildah inspect's JSON");
    let config = &inspect["OCIv1"]["config"];
    assert_eq!(config["Entrypoint"], json!(["/ipam-delegated", "install-cni"]), "{config}");
    assert!(config.get("Cmd").is_none_or(Value::is_null), "no default arguments: {config}");
    assert_eq!(config["Labels"]["org.opencontainers.image.version"], env!("CARGO_PKG_VERSION"), "{config}");

    // The contents: every layer's files, which are the program alone.
    let layout = dir.path().join("layout");
    buildah.run(&["push", "--quiet", &image, &format!("dir:{}", layout.display())]);
    let manifest: Value =
        serde_json::from_slice(&fs::read(layout.join("manifest.json")).expect("manifest.json")).expect("manifest");
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1, "{manifest}");
    let mut files = Vec::new();
    for layer in layers {
        let digest = layer["digest"].as_str().expect("digest");
        let blob = layout.join(digest.trim_start_matches("sha256:"));
        let listing = success("tar -tv", Command::new("tar").arg("-tvzf").arg(&blob).output().expect("tar"));
        files.extend(listing.lines().map(str::to_string));
        let extracted = Command::new("tar").arg("-xzOf").arg(&blob).arg("ipam-delegated").output().expect("tar -xO");
        assert!(extracted.status.success(), "{extracted:?}");
        assert!(
            extracted.stdout == program_bytes,
            "the image's /ipam-delegated is not scripts/build's {}",
            program.display()
        );
    }
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(files[0].starts_with("-rwxr-xr-x 0/0 ") && files[0].ends_with(" ipam-delegated"), "{files:?}");

    // The OCI archive, for ctr/skopeo.
    let listing = success("tar -t", Command::new("tar").arg("-tf").arg(&archive).output().expect("tar"));
    assert!(listing.lines().any(|l| l == "index.json" || l == "./index.json"), "{listing}");

    // It runs in the image (nothing but the program there) and installs
    // into a mounted host directory.
    let host = dir.path().join("host");
    fs::create_dir_all(host.join("opt/cni/bin")).expect("host");
    let container = buildah.run(&["from", "--quiet", &image]).trim().to_string();
    let mount = format!("{}:/host", host.display());
    let mut run = buildah.command();
    run.args(["run", "--isolation", "chroot", "-v", &mount]).args([
        "-e",
        "NODE_NAME=node-a",
        &container,
        "--",
        "/ipam-delegated",
        "install-cni",
        "--once",
        "--bin-dir=/host/opt/cni/bin",
        "--node-file=/host/etc/cni/ipam-delegated/node-name",
    ]);
    let ran = run.output().expect("buildah run");
    buildah.run(&["rm", &container]);
    let out = success("the installer in the image", ran);
    assert!(out.contains("installed /host/opt/cni/bin/ipam-delegated"), "{out}");
    assert!(fs::read(host.join("opt/cni/bin/ipam-delegated")).expect("installed") == program_bytes);
    assert_eq!(fs::read_to_string(host.join("etc/cni/ipam-delegated/node-name")).expect("node name"), "node-a\n");
}
