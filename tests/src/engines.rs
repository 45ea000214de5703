//! The container engines pitcrew drives (`--engine podman|docker`) as the tests meet them: the
//! production images built by `scripts/build-image` from this build's `pitcrew-init`, and a
//! private docker daemon per test (never the machine's global daemon), stopped when dropped.

use crate::binary;
use crate::container::{containers_conf, repo};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Which engine a test drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// podman: `pitcrew` drives it with podman's stock configuration (no `CONTAINERS_CONF`);
    /// the tests' own podman commands ([`Engine::cli`]) use `images/containers.conf`.
    Podman,
    /// docker, against a [`PrivateDocker`].
    Docker,
}

impl Kind {
    /// The engine's name (`--engine`, the CLI).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Podman => "podman",
            Kind::Docker => "docker",
        }
    }
}

/// Whether `program` runs (`program --version` succeeds).
pub fn runs(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether the engine's programs run here (`podman`; `docker` and `dockerd`).
pub fn usable(kind: Kind) -> bool {
    match kind {
        Kind::Podman => runs("podman"),
        Kind::Docker => runs("docker") && runs("dockerd"),
    }
}

/// The gate of every container-engine test: root with PID namespaces, and the engine's
/// programs ([`crate::prerequisite`]: a recorded skip, or a failure with
/// `PITCREW_REQUIRE_E2E=1`).
pub fn require(kind: Kind) -> bool {
    crate::require_pid_namespaces()
        && crate::prerequisite(
            usable(kind),
            &format!(
                "needs {} (.ci/run installs podman and docker.io)",
                match kind {
                    Kind::Podman => "podman",
                    Kind::Docker => "docker.io (docker and dockerd)",
                }
            ),
        )
}

/// One engine ready for `pitcrew`: podman as it is, or a private docker daemon; the
/// environment `pitcrew` and the engine's CLI need.
pub struct Engine {
    /// Which engine.
    pub kind: Kind,
    docker: Option<PrivateDocker>,
}

impl Engine {
    /// Podman, or a freshly started private docker daemon.
    pub fn start(kind: Kind) -> Engine {
        let docker = (kind == Kind::Docker).then(PrivateDocker::start);
        Engine { kind, docker }
    }

    /// The variables `pitcrew` needs: `DOCKER_HOST` for docker, none for podman, which
    /// `pitcrew` drives as a stock install configures it (see [`Engine::command`]).
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env = Vec::new();
        if let Some(d) = &self.docker {
            env.push(("DOCKER_HOST".into(), d.host.clone()));
        }
        env
    }

    /// `program` with [`Engine::env`] and without `CONTAINERS_CONF`, whatever this process has:
    /// `pitcrew --engine podman` must work with podman's stock configuration.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
        cmd.env_remove("CONTAINERS_CONF").envs(self.env());
        cmd
    }

    /// [`Engine::env`] and `extra`, as `pitcrew_run` takes them.
    pub fn env_with(&self, extra: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut env = self.env();
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        env
    }

    /// `<cli> args…` as the tests run it themselves: with [`Engine::env`], and podman with
    /// `images/containers.conf` (the containers a test makes without `pitcrew`, as on a CI
    /// machine without `CAP_SYS_RESOURCE`).
    pub fn cli(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(self.kind.name());
        if self.kind == Kind::Podman {
            cmd.env("CONTAINERS_CONF", containers_conf());
        }
        cmd.args(args)
            .envs(self.env())
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", self.kind.name()))
    }

    /// Builds the production image of `runtime` (`pi` or `claude`) with `scripts/build-image`
    /// and this build's `pitcrew-init`, in this engine; returns its reference (the script's
    /// last line). Layers and the slow inputs are cached by the script, so a rebuild is quick.
    pub fn image(&self, runtime: &str) -> String {
        let mut cmd = Command::new(repo().join("scripts/build-image"));
        cmd.arg(runtime)
            .args(["--engine", self.kind.name()])
            .arg("--init")
            .arg(binary("pitcrew-init"))
            .args(["--tag", &format!("localhost/pitcrew-{runtime}:e2e")])
            .envs(self.env())
            .stdin(Stdio::null());
        let out = cmd.output().expect("scripts/build-image");
        assert!(
            out.status.success(),
            "scripts/build-image {runtime} --engine {}: {}",
            self.kind.name(),
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        stdout
            .lines()
            .last()
            .unwrap_or_else(|| panic!("scripts/build-image printed nothing"))
            .trim()
            .to_string()
    }

    /// The offline test image ([`crate::container::build_test_image`]: busybox and this
    /// build's `pitcrew-init`, nothing pulled) in this engine, under a tag of this test
    /// process's own; docker gets it from podman's storage (`podman save` | `docker load`).
    /// Removed when dropped.
    pub fn test_image(&self) -> TestImage<'_> {
        let tag = format!("localhost/pitcrew-test:engine-{}", std::process::id());
        crate::container::build_test_image(&tag);
        if self.kind == Kind::Docker {
            let dir = tempfile::tempdir().expect("tempdir");
            let archive = dir.path().join("image.tar");
            let archive = archive.to_str().expect("a UTF-8 temp path");
            let saved = crate::container::podman(&[
                "save",
                "--format",
                "docker-archive",
                "--output",
                archive,
                &tag,
            ]);
            let _ = crate::container::podman(&["rmi", "--force", &tag]);
            assert!(saved.status.success(), "podman save: {saved:?}");
            let loaded = self.cli(&["load", "--input", archive]);
            assert!(loaded.status.success(), "docker load: {loaded:?}");
        }
        TestImage { engine: self, tag }
    }

    /// Whether the engine has a container named `name` (running or not).
    pub fn has_container(&self, name: &str) -> bool {
        self.cli(&["inspect", "--type", "container", name])
            .status
            .success()
    }

    /// The names of the containers created from `image` (running or not).
    pub fn containers_from(&self, image: &str) -> Vec<String> {
        let filter = format!("ancestor={image}");
        let out = self.cli(&["ps", "--all", "--filter", &filter, "--format", "{{.Names}}"]);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    }
}

/// The offline test image in an [`Engine`] ([`Engine::test_image`]).
pub struct TestImage<'e> {
    engine: &'e Engine,
    /// Its reference, for `--image`.
    pub tag: String,
}

impl Drop for TestImage<'_> {
    /// Removes the image (podman: with the containers made from it); never panics.
    fn drop(&mut self) {
        let mut cmd = Command::new(self.engine.kind.name());
        if self.engine.kind == Kind::Podman {
            cmd.env("CONTAINERS_CONF", containers_conf());
        }
        let _ = cmd
            .args(["rmi", "--force", &self.tag])
            .envs(self.engine.env())
            .stdin(Stdio::null())
            .output();
    }
}

/// A docker daemon of this test's own: `dockerd` with no iptables and no bridge (containers get
/// `--network none` or `host`), its socket and exec root in a temp dir, and its data root in
/// `$PITCREW_DOCKER_TEST_ROOT` (default `/var/cache/pitcrew/docker-test`), kept between tests
/// and runs so images are built once per machine. One daemon at a time uses that data root (an
/// exclusive lock held while it runs; nextest's `docker` test group runs these tests one by
/// one). The storage driver is overlay2 where the kernel and file system allow it, else vfs
/// (every layer a full copy). Dropping it removes its containers and dangling images, stops it
/// and deletes the temp dir; the machine's own docker daemon is never touched.
pub struct PrivateDocker {
    /// Socket, exec root and log; removed when dropped (after the daemon stops).
    _dir: tempfile::TempDir,
    child: Child,
    _lock: std::fs::File,
    /// `unix://…/docker.sock`, for `DOCKER_HOST`.
    pub host: String,
}

impl PrivateDocker {
    /// Takes the data root's lock, starts the daemon and waits (up to 60 s) until it answers.
    pub fn start() -> PrivateDocker {
        let root = std::env::var_os("PITCREW_DOCKER_TEST_ROOT").map_or_else(
            || "/var/cache/pitcrew/docker-test".into(),
            std::path::PathBuf::from,
        );
        std::fs::create_dir_all(&root).unwrap_or_else(|e| panic!("{}: {e}", root.display()));
        let lock = std::fs::File::create(root.join("lock")).expect("lock file");
        // SAFETY: flock on a descriptor this function owns; no memory is passed.
        let locked = unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) };
        assert_eq!(
            locked,
            0,
            "flock {}: {}",
            root.join("lock").display(),
            std::io::Error::last_os_error()
        );
        let mut failures = Vec::new();
        for driver in ["overlay2", "vfs"] {
            match PrivateDocker::try_start(&root, driver) {
                Ok((dir, child, host)) => {
                    return PrivateDocker {
                        _dir: dir,
                        child,
                        _lock: lock,
                        host,
                    }
                }
                Err(why) => failures.push(format!("{driver}: {why}")),
            }
        }
        panic!("the private dockerd did not start: {}", failures.join("; "))
    }

    fn try_start(root: &Path, driver: &str) -> Result<(tempfile::TempDir, Child, String), String> {
        // Short: containerd's sockets live under the exec root (108-byte socket paths).
        let dir = tempfile::Builder::new()
            .prefix("pcd")
            .tempdir_in("/tmp")
            .map_err(|e| e.to_string())?;
        let d = dir.path();
        let log = std::fs::File::create(d.join("dockerd.log")).map_err(|e| e.to_string())?;
        let host = format!("unix://{}/docker.sock", d.display());
        let mut child = Command::new("dockerd")
            .args(["--iptables=false", "--ip6tables=false", "--bridge=none"])
            .arg(format!("--storage-driver={driver}"))
            .arg(format!("--data-root={}", root.join(driver).display()))
            .arg(format!("--exec-root={}/exec", d.display()))
            .arg(format!("--pidfile={}/dockerd.pid", d.display()))
            .args(["-H", &host])
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("dockerd (apt-get install docker.io): {e}"))?;
        let tail = || {
            let text = std::fs::read_to_string(d.join("dockerd.log")).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(5)..].join(" | ")
        };
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("dockerd exited ({status}): {}", tail()));
            }
            let up = Command::new("docker")
                .args(["version", "--format", "{{.Server.Version}}"])
                .env("DOCKER_HOST", &host)
                .output()
                .is_ok_and(|o| o.status.success());
            if up {
                return Ok((dir, child, host));
            }
            if start.elapsed() > Duration::from_secs(60) {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("no answer within 60 s: {}", tail()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for PrivateDocker {
    /// Removes every container and the dangling images (older builds' layers), stops the
    /// daemon (TERM, then KILL after 20 s); never panics (it may run while a test unwinds).
    fn drop(&mut self) {
        let docker = |args: &[&str]| {
            Command::new("docker")
                .args(args)
                .env("DOCKER_HOST", &self.host)
                .stdin(Stdio::null())
                .output()
        };
        if let Ok(out) = docker(&["ps", "--all", "--quiet"]) {
            let ids = String::from_utf8_lossy(&out.stdout).into_owned();
            let ids: Vec<&str> = ids.split_whitespace().collect();
            if !ids.is_empty() {
                let mut args = vec!["rm", "--force", "--volumes"];
                args.extend(ids);
                let _ = docker(&args);
            }
        }
        let _ = docker(&["image", "prune", "--force"]);
        let _ = docker(&["volume", "prune", "--force"]);
        // TERM: dockerd stops its containerd and cleans up; our child is not reaped yet, so
        // its pid is still ours.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .output();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20) {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
