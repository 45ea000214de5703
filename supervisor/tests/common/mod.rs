//! Shared helpers of the PID-1 tests: they start the real `pitcrew-init` (as PID 1 of a fresh
//! PID namespace through `unshare`, or as a plain child), and observe it from outside.
#![allow(dead_code, missing_docs, clippy::print_stdout)]

use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The agent identity of the tests (Debian's nobody/nogroup).
pub const AGENT_ID: u32 = 65534;

/// The binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_pitcrew-init")
}

/// Polls `condition` every 10 ms until it holds or `timeout` passes; returns whether it held.
pub fn busy_wait(mut condition: impl FnMut() -> bool, timeout: Duration) -> bool {
    let end = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether the PID-1 tests can run here (root, and `unshare --pid --fork --mount-proc` works).
/// When they cannot, the test is a recorded skip (`pitcrew_test_support::prerequisite`); with
/// `PITCREW_REQUIRE_E2E=1` it fails instead.
pub fn require_root_and_namespaces() -> bool {
    let why = if unsafe_free_geteuid() != 0 {
        Some("not running as root".to_string())
    } else {
        pitcrew_test_support::unshare_pid_failure()
    };
    pitcrew_test_support::prerequisite(
        why.is_none(),
        &format!(
            "PID-1 test needs root and PID namespaces (run the tests as root on a kernel with PID \
             namespaces): {}",
            why.unwrap_or_default()
        ),
    )
}

/// The running kernel's Landlock ABI version, asked by the test itself rather than through the
/// supervisor's own probe: `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`.
/// `Err` says why the kernel offers none.
pub fn kernel_landlock_abi() -> Result<u32, String> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a NULL attribute pointer, size 0 and the VERSION flag the syscall only
    // returns a number: it reads no memory and creates no file descriptor.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    match u32::try_from(abi) {
        Ok(abi) if abi > 0 => Ok(abi),
        _ => Err(format!(
            "landlock_create_ruleset: {}",
            std::io::Error::last_os_error()
        )),
    }
}

/// Whether a kernel of Landlock ABI `abi` knows every right and scope of the ABI the
/// supervisor pins (`pitcrew_core::sandbox::confine::LANDLOCK_ABI`): then a ruleset is fully
/// enforced, below it only partially.
pub fn landlock_fully_enforceable(abi: u32) -> bool {
    landlock::ABI::from(i32::try_from(abi).unwrap_or(i32::MAX))
        >= pitcrew_core::sandbox::confine::LANDLOCK_ABI
}

fn unsafe_free_geteuid() -> u32 {
    // /proc/self/status "Uid:" line: real, effective, saved, fs.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(u32::MAX)
}

/// A sandbox directory: a workdir owned by the agent uid, and room for manifests and results.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
    pub workdir: PathBuf,
    pub manifest: Value,
}

/// What a run produced.
#[derive(Debug)]
pub struct Run {
    /// The process exit code of pitcrew-init.
    pub code: i32,
    /// The result record.
    pub record: Value,
    /// pitcrew-init's stderr (for assertion messages).
    pub stderr: String,
}

impl Sandbox {
    /// A sandbox whose agent is `sh -c SCRIPT` (`$W` in the script is the workdir).
    pub fn sh(script: &str) -> Sandbox {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let workdir = dir.path().join("work");
        std::fs::create_dir(&workdir).expect("workdir");
        std::os::unix::fs::chown(&workdir, Some(AGENT_ID), Some(AGENT_ID)).expect("chown");
        let script = format!("W={}; {script}", workdir.display());
        let manifest = json!({
            "version": 1,
            "runtime": "command",
            "agent": {"binary": "/bin/sh", "args": ["-c", script]},
            "workdir": workdir,
            "user": {"uid": AGENT_ID, "gid": AGENT_ID},
            "limits": {"timeout_ms": 60_000, "kill_grace_ms": 300, "reap_budget_ms": 5_000},
        });
        Sandbox {
            dir,
            workdir,
            manifest,
        }
    }

    /// A path inside the sandbox directory (not the workdir).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes the manifest and returns (manifest path, result path).
    pub fn write_manifest(&self) -> (PathBuf, PathBuf) {
        let manifest = self.path("manifest.json");
        std::fs::write(&manifest, self.manifest.to_string()).expect("write manifest");
        let result = self.path("result.json");
        let _ = std::fs::remove_file(&result);
        (manifest, result)
    }

    /// `unshare --pid --fork --mount-proc pitcrew-init run …`, not waited for.
    pub fn spawn_pid1(&self) -> (Child, PathBuf) {
        self.spawn_pid1_with_env(&[])
    }

    /// As [`Sandbox::spawn_pid1`], with extra variables in pitcrew-init's own (baseline)
    /// environment.
    pub fn spawn_pid1_with_env(&self, vars: &[(&str, &str)]) -> (Child, PathBuf) {
        self.spawn_pid1_with(vars, &[])
    }

    /// As [`Sandbox::spawn_pid1_with_env`], with extra `run` arguments.
    pub fn spawn_pid1_with(&self, vars: &[(&str, &str)], args: &[&str]) -> (Child, PathBuf) {
        let (manifest, result) = self.write_manifest();
        let child = Command::new("unshare")
            .envs(vars.iter().copied())
            .args([
                "--pid",
                "--fork",
                "--mount-proc",
                bin(),
                "run",
                "--manifest",
            ])
            .arg(&manifest)
            .arg("--result")
            .arg(&result)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn unshare");
        (child, result)
    }

    /// Runs pitcrew-init as PID 1 with extra `run` arguments and waits.
    pub fn run_pid1_with_args(&self, args: &[&str]) -> Run {
        let (child, result) = self.spawn_pid1_with(&[], args);
        finish(child.wait_with_output().expect("wait"), &result)
    }

    /// Runs pitcrew-init as PID 1 of a fresh PID namespace and waits.
    pub fn run_pid1(&self) -> Run {
        self.run_pid1_with_env(&[])
    }

    /// As [`Sandbox::run_pid1`], with extra variables in pitcrew-init's baseline environment.
    pub fn run_pid1_with_env(&self, vars: &[(&str, &str)]) -> Run {
        let (child, result) = self.spawn_pid1_with_env(vars);
        finish(child.wait_with_output().expect("wait"), &result)
    }

    /// Runs pitcrew-init as PID 1 with a shell `prelude` that runs first in the namespace and
    /// then `exec`s pitcrew-init (so pitcrew-init inherits the prelude's processes).
    pub fn run_pid1_after(&self, prelude: &str) -> Run {
        let (manifest, result) = self.write_manifest();
        let script = format!(
            "{prelude}\nexec {} run --manifest {} --result {}",
            bin(),
            manifest.display(),
            result.display()
        );
        let out = Command::new("unshare")
            .args(["--pid", "--fork", "--mount-proc", "sh", "-c", &script])
            .stdin(Stdio::null())
            .output()
            .expect("run unshare");
        finish(out, &result)
    }

    /// Runs pitcrew-init as a plain child (not PID 1: degraded mode) and waits.
    pub fn run_plain(&self) -> Run {
        let (manifest, result) = self.write_manifest();
        let out = Command::new(bin())
            .args(["run", "--manifest"])
            .arg(&manifest)
            .arg("--result")
            .arg(&result)
            .stdin(Stdio::null())
            .output()
            .expect("run pitcrew-init");
        finish(out, &result)
    }
}

fn finish(out: Output, result: &Path) -> Run {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let text = std::fs::read_to_string(result).unwrap_or_else(|e| {
        panic!(
            "no result record at {} ({e}); stderr:\n{stderr}",
            result.display()
        )
    });
    let record: Value = serde_json::from_str(&text).expect("result record is JSON");
    Run {
        code: out.status.code().unwrap_or(-1),
        record,
        stderr,
    }
}

/// The pid (host view) of pitcrew-init under `unshare` pid `unshare_pid`.
pub fn pid1_of(unshare_pid: u32) -> Option<i32> {
    let children =
        std::fs::read_to_string(format!("/proc/{unshare_pid}/task/{unshare_pid}/children")).ok()?;
    children.split_whitespace().next()?.parse().ok()
}

/// Host pids whose command line contains `needle` (arguments joined by spaces).
pub fn processes_matching(needle: &str) -> Vec<i32> {
    processes_where(|cmdline| cmdline.contains(needle))
}

/// Host pids whose command line starts with `prefix`: the program itself, not a launcher such as
/// `nsenter … -- sleep N` that carries it in its arguments.
pub fn processes_started_as(prefix: &str) -> Vec<i32> {
    processes_where(|cmdline| cmdline.starts_with(prefix))
}

fn processes_where(matches: impl Fn(&str) -> bool) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) {
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if matches(&text) {
                found.push(pid);
            }
        }
    }
    found
}

/// A token unlikely to collide with other tests running at the same time (a sleep duration).
pub fn unique_seconds() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    100_000 + (std::process::id() % 1000) * 1000 + nanos % 1000
}
pub mod server;
