//! Real podman containers from the offline test image (`images/test/Containerfile`, built by
//! `scripts/build-test-image` from this machine's files; nothing is pulled). Podman runs with
//! `images/containers.conf` (runc, no default ulimits), as on the CI machine.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The workspace root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// `images/containers.conf`, for `CONTAINERS_CONF`.
pub fn containers_conf() -> PathBuf {
    repo().join("images/containers.conf")
}

/// `podman <args…>` with [`containers_conf`].
pub fn podman(args: &[&str]) -> Output {
    Command::new("podman")
        .args(args)
        .env("CONTAINERS_CONF", containers_conf())
        .output()
        .expect("podman")
}

/// Whether this process is root with podman and a busybox (`scripts/build-test-image` checks
/// that it is static).
pub fn podman_usable() -> bool {
    let podman_ok = Command::new("podman")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let busybox = Command::new("busybox")
        .arg("true")
        .output()
        .is_ok_and(|o| o.status.success());
    crate::can_unshare_pid() && podman_ok && busybox
}

/// Builds the offline test image with the `pitcrew-init` of this build into podman's storage
/// as `tag` (`scripts/build-test-image`; nothing is pulled). Removing it is the caller's.
pub fn build_test_image(tag: &str) {
    let out = Command::new(repo().join("scripts/build-test-image"))
        .arg(crate::binary("pitcrew-init"))
        .arg(tag)
        .env("CONTAINERS_CONF", containers_conf())
        .output()
        .expect("scripts/build-test-image");
    assert!(
        out.status.success(),
        "build-test-image: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A test image and a running container from it (`pitcrew-init` as its PID 1), both removed
/// when dropped.
pub struct Container {
    image: String,
    /// The container's name (the exec engine's `--sandbox`).
    pub name: String,
}

impl Container {
    /// Builds the image with the `pitcrew-init` of this build and starts a container from it
    /// with `run_args` added to `podman run -d` (`--network=none` unless they name a network).
    pub fn start(run_args: &[&str]) -> Container {
        let id = std::process::id();
        let tag = format!("localhost/pitcrew-test:e2e-{id}");
        build_test_image(&tag);
        // From here on, dropping `c` (a failed assertion too) removes the image and container.
        let c = Container {
            image: tag,
            name: format!("pitcrew-e2e-{id}"),
        };
        let _ = podman(&["rm", "-f", &c.name]);
        let mut args = vec!["run", "-d", "--name", &c.name];
        // No network of its own unless the test names one: the agent's network is the
        // harness's `network:`, which a sandbox with other interfaces refuses.
        if !run_args.iter().any(|a| a.starts_with("--network")) {
            args.push("--network=none");
        }
        args.extend_from_slice(run_args);
        args.push(&c.image);
        let out = podman(&args);
        assert!(
            out.status.success(),
            "podman run: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        c
    }
}

impl Drop for Container {
    /// Removes the container and the image; never panics (it may run while a test unwinds).
    fn drop(&mut self) {
        for args in [
            &["rm", "-f", "-t", "0", self.name.as_str()][..],
            &["rmi", "-f", self.image.as_str()][..],
        ] {
            let _ = Command::new("podman")
                .args(args)
                .env("CONTAINERS_CONF", containers_conf())
                .output();
        }
    }
}
