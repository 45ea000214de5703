//! Step 2 of an iteration: verify every tree and pinned file of the manifest and resolve the
//! agent binary, with nothing of the agent running and the expected values only from the
//! manifest the host sent.
//!
//! Runs with no other process alive (after the reap step). Expected values come only from the
//! in-memory manifest. Every check runs, whatever failed before it, so the report is complete:
//!
//! - **trees**: the root must be a real directory reached without symlinks (a symlinked root or
//!   ancestor is refused: the path must equal its canonical form), then it is re-scanned with
//!   [`tree_hash::scan_tree`] (no symlink following; symlinks, fifos, sockets, devices and bad
//!   names refused) and its digest compared; on a mismatch the report carries the
//!   [`tree_hash::drift`] between the manifest's listing and what is on disk.
//! - **files**: same path rule, then [`tree_hash::sha256_file`] (`O_NOFOLLOW`, regular files).
//! - **agent binary**: resolved once to an absolute path by [`resolve_agent_binary`], then its
//!   bytes compared with `agent.sha256` when pinned. The image is trusted, so the binary itself
//!   may be a symlink (`/usr/local/bin/pi` → `…/cli.js`); the pin hashes the file it points to.
//!
//! # Which failure decides the exit code
//!
//! [`VerifyReport::failure`] is deterministic:
//!
//! 1. the agent binary: 127 (not found, not absolute, or differs from its pin) or 126 (found
//!    but not a regular file or without an execute bit);
//! 2. then the drift classes from the highest code down: 98 (config), 97
//!    (hook adapter), 96 (plugin/skill trees), 95 (runtime manifest), 94 (sub-agent), 93
//!    (edit-repair);
//! 3. within the first class that has a failure, the first failing check in manifest order,
//!    trees (in `trees[]` order) before files (in `files[]` order).

use crate::exit_code::{self, PinRole, AGENT_NOT_EXECUTABLE, AGENT_NOT_FOUND};
use crate::manifest::{FilePin, Manifest, TreePin};
use crate::tree_hash::{self, Drift, TreeFormat};
use serde::{Deserialize, Serialize};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The order in which drift classes decide the exit code (after the agent binary).
pub const DRIFT_PRIORITY: [i32; 6] = [
    exit_code::CONFIG_DRIFT,
    exit_code::HOOK_ADAPTER_DRIFT,
    exit_code::PLUGIN_DRIFT,
    exit_code::RUNTIME_MANIFEST_DRIFT,
    exit_code::SUB_AGENT_DRIFT,
    exit_code::EDIT_REPAIR_DRIFT,
];

/// How many paths of each drift list a reason string names before summarising.
const REASON_PATHS: usize = 10;

/// The outcome of one tree or file check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CheckStatus {
    /// Digest matches.
    Ok,
    /// Present but its digest differs.
    Drifted,
    /// Not there.
    Missing,
    /// Could not be verified: a symlink, fifo, device, bad name, wrong type or I/O error.
    Refused,
}

/// One verified tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeCheck {
    /// The tree's name.
    pub name: String,
    /// Its path inside the sandbox.
    pub path: String,
    /// Its role (decides the exit code).
    pub role: PinRole,
    /// The hash format compared.
    pub format: TreeFormat,
    /// The expected digest (from the manifest).
    pub expected: String,
    /// The digest found, when the tree could be scanned.
    pub actual: Option<String>,
    /// The outcome.
    pub status: CheckStatus,
    /// What was added, removed, changed, when drifted.
    pub drift: Option<Drift>,
    /// Why it was missing or refused (names the offending path).
    pub error: Option<String>,
}

/// One verified file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileCheck {
    /// Its path inside the sandbox.
    pub path: String,
    /// Its role (decides the exit code).
    pub role: PinRole,
    /// The expected sha256 (from the manifest).
    pub expected: String,
    /// The sha256 found, when the file could be read.
    pub actual: Option<String>,
    /// The outcome.
    pub status: CheckStatus,
    /// Why it was missing or refused.
    pub error: Option<String>,
}

/// The agent binary: what was asked for, what it resolved to, and the pin check.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentCheck {
    /// `agent.binary` as given.
    pub requested: String,
    /// The absolute path it resolved to (launched as is).
    pub resolved: Option<String>,
    /// `agent.sha256`, when pinned.
    pub expected_sha256: Option<String>,
    /// The sha256 of the resolved file, when pinned and readable.
    pub actual_sha256: Option<String>,
    /// For a `#!/usr/bin/env NAME` script (pi's `cli.js` is one): `NAME` resolved once on the
    /// baseline `PATH`. The supervisor execs this interpreter with the script as its first
    /// argument, so the agent's own `PATH` (which the agent-writable `.env` may set) never
    /// chooses what runs before any verified code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interpreter: Option<String>,
    /// The runtime release (pi, claude), from the npm package the binary lies in
    /// ([`crate::runtime_version::detect`]); it decides pi's trust options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Why the binary cannot be launched, if it cannot.
    pub failure: Option<VerifyFailure>,
}

/// What kind of check failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    /// Agent binary not found or not absolute (127).
    AgentNotFound,
    /// Agent binary not a regular file or not executable (126).
    AgentNotExecutable,
    /// Agent binary differs from `agent.sha256` (127).
    AgentPinMismatch,
    /// A tree's digest differs.
    TreeDrifted,
    /// A tree is missing.
    TreeMissing,
    /// A tree could not be verified.
    TreeRefused,
    /// A file's digest differs.
    FileDrifted,
    /// A file is missing.
    FileMissing,
    /// A file could not be verified.
    FileRefused,
}

/// A verification failure: the iteration exit code and a machine-readable reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyFailure {
    /// The iteration exit code (127, 126, 93–98).
    pub exit_code: i32,
    /// What kind of check failed.
    pub kind: FailureKind,
    /// One line naming what failed, where and how.
    pub reason: String,
}

/// What verification found: one entry per tree and file, plus the agent binary.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyReport {
    /// One check per `trees[]` entry, in manifest order.
    pub trees: Vec<TreeCheck>,
    /// One check per `files[]` entry, in manifest order.
    pub files: Vec<FileCheck>,
    /// The agent binary.
    pub agent: AgentCheck,
    /// Wall-clock time of the whole step.
    pub duration_ms: u64,
}

impl VerifyReport {
    /// The failure that decides the iteration's exit code, if any (see the module doc).
    pub fn failure(&self) -> Option<VerifyFailure> {
        if let Some(f) = &self.agent.failure {
            return Some(f.clone());
        }
        DRIFT_PRIORITY.iter().find_map(|&code| {
            let tree = self
                .trees
                .iter()
                .filter(|t| t.role.exit_code() == code)
                .find_map(TreeCheck::failure);
            tree.or_else(|| {
                self.files
                    .iter()
                    .filter(|f| f.role.exit_code() == code)
                    .find_map(FileCheck::failure)
            })
        })
    }

    /// Every failure, agent first, then trees and files in manifest order.
    pub fn failures(&self) -> Vec<VerifyFailure> {
        self.agent
            .failure
            .iter()
            .cloned()
            .chain(self.trees.iter().filter_map(TreeCheck::failure))
            .chain(self.files.iter().filter_map(FileCheck::failure))
            .collect()
    }

    /// The resolved absolute agent binary, when it can be launched.
    pub fn resolved_agent(&self) -> Option<&Path> {
        match (&self.agent.failure, &self.agent.resolved) {
            (None, Some(p)) => Some(Path::new(p)),
            _ => None,
        }
    }
}

impl TreeCheck {
    /// This check's failure, if it failed.
    pub fn failure(&self) -> Option<VerifyFailure> {
        let what = format!("{} tree {:?} ({})", self.role, self.name, self.path);
        let error = self.error.as_deref().unwrap_or("unknown error");
        let (kind, reason) = match self.status {
            CheckStatus::Ok => return None,
            CheckStatus::Missing => (FailureKind::TreeMissing, format!("{what} is missing")),
            CheckStatus::Refused => (FailureKind::TreeRefused, format!("{what} refused: {error}")),
            CheckStatus::Drifted => {
                let how = match &self.drift {
                    Some(d) if !d.is_empty() => format!(
                        "added {}, removed {}, changed {}",
                        path_list(&d.added),
                        path_list(&d.removed),
                        path_list(&d.changed)
                    ),
                    _ => format!(
                        "tree hash {} differs from {} ({})",
                        self.actual.as_deref().unwrap_or("?"),
                        self.expected,
                        self.error
                            .as_deref()
                            .unwrap_or("the manifest's listing shows no per-path difference")
                    ),
                };
                (FailureKind::TreeDrifted, format!("{what} drifted: {how}"))
            }
        };
        Some(VerifyFailure {
            exit_code: self.role.exit_code(),
            kind,
            reason,
        })
    }
}

impl FileCheck {
    /// This check's failure, if it failed.
    pub fn failure(&self) -> Option<VerifyFailure> {
        let what = format!("{} file {}", self.role, self.path);
        let (kind, reason) = match self.status {
            CheckStatus::Ok => return None,
            CheckStatus::Missing => (FailureKind::FileMissing, format!("{what} is missing")),
            CheckStatus::Refused => (
                FailureKind::FileRefused,
                format!(
                    "{what} refused: {}",
                    self.error.as_deref().unwrap_or("unknown error")
                ),
            ),
            CheckStatus::Drifted => (
                FailureKind::FileDrifted,
                format!(
                    "{what} differs: sha256 {}, expected {}",
                    self.actual.as_deref().unwrap_or("?"),
                    self.expected
                ),
            ),
        };
        Some(VerifyFailure {
            exit_code: self.role.exit_code(),
            kind,
            reason,
        })
    }
}

/// `[a, b/, … (+3 more)]`.
fn path_list(paths: &[String]) -> String {
    let mut shown: Vec<String> = paths.iter().take(REASON_PATHS).cloned().collect();
    if paths.len() > REASON_PATHS {
        shown.push(format!("… (+{} more)", paths.len() - REASON_PATHS));
    }
    format!("[{}]", shown.join(", "))
}

/// Verifies the manifest's trees and files and resolves the agent binary on `path_var` (the
/// supervisor's baseline `PATH`, never one the agent could write).
pub fn verify(manifest: &Manifest, path_var: &str) -> VerifyReport {
    let started = Instant::now();
    let trees = manifest.trees.iter().map(check_tree).collect();
    let files = manifest.files.iter().map(check_file).collect();
    let mut agent = check_agent(
        &manifest.agent.binary,
        manifest.agent.sha256.as_deref(),
        path_var,
    );
    if manifest.runtime != crate::manifest::Runtime::Command {
        agent.version = agent
            .resolved
            .as_deref()
            .and_then(|p| crate::runtime_version::detect(Path::new(p)));
    }
    VerifyReport {
        trees,
        files,
        agent,
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    }
}

/// Checks that `path` exists as the wanted type and is reached without any symlink.
fn check_path(path: &Path, want_dir: bool) -> Result<(), (CheckStatus, String)> {
    let refused = |why: String| Err((CheckStatus::Refused, format!("{}: {why}", path.display())));
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err((
                CheckStatus::Missing,
                format!("{}: does not exist", path.display()),
            ))
        }
        Err(e) => return refused(e.to_string()),
        Ok(m) if m.file_type().is_symlink() => return refused("is a symbolic link".into()),
        Ok(m) if want_dir && !m.is_dir() => return refused("is not a directory".into()),
        Ok(m) if !want_dir && !m.is_file() => return refused("is not a regular file".into()),
        Ok(_) => {}
    }
    match std::fs::canonicalize(path) {
        Ok(real) if real == path => Ok(()),
        Ok(real) => refused(format!("resolves through a symlink to {}", real.display())),
        Err(e) => refused(e.to_string()),
    }
}

fn check_tree(pin: &TreePin) -> TreeCheck {
    let mut check = TreeCheck {
        name: pin.name.clone(),
        path: pin.path.clone(),
        role: pin.role,
        format: pin.format,
        expected: pin.sha256.clone(),
        actual: None,
        status: CheckStatus::Ok,
        drift: None,
        error: None,
    };
    let root = Path::new(&pin.path);
    if let Err((status, error)) = check_path(root, true) {
        check.status = status;
        check.error = Some(error);
        return check;
    }
    match tree_hash::scan_tree(root) {
        Err(e) => {
            check.status = CheckStatus::Refused;
            check.error = Some(e.to_string());
        }
        Ok(listing) => {
            let actual = listing.digest(pin.format);
            if actual != pin.sha256 {
                check.status = CheckStatus::Drifted;
                match pin.expected_listing() {
                    Ok(expected) => check.drift = Some(tree_hash::drift(&expected, &listing)),
                    Err(e) => {
                        check.error = Some(format!("the expected listing is unavailable: {e}"))
                    }
                }
            }
            check.actual = Some(actual);
        }
    }
    check
}

fn check_file(pin: &FilePin) -> FileCheck {
    let mut check = FileCheck {
        path: pin.path.clone(),
        role: pin.role,
        expected: pin.sha256.clone(),
        actual: None,
        status: CheckStatus::Ok,
        error: None,
    };
    let path = Path::new(&pin.path);
    if let Err((status, error)) = check_path(path, false) {
        check.status = status;
        check.error = Some(error);
        return check;
    }
    match tree_hash::sha256_file(path) {
        Err(e) => {
            check.status = CheckStatus::Refused;
            check.error = Some(e.to_string());
        }
        Ok(record) => {
            if record.sha256 != pin.sha256 {
                check.status = CheckStatus::Drifted;
            }
            check.actual = Some(record.sha256);
        }
    }
    check
}

/// Whether the agent program `binary` can be launched as the verify step would launch it on
/// `path_var`: resolved (absolute, or the first executable on the absolute `PATH` entries) and,
/// for a `#!/usr/bin/env NAME` script, `NAME` resolved too. The host asks this before it
/// starts a local sandbox, whose supervisor resolves the agent on the same `PATH`.
pub fn agent_launchable(binary: &str, path_var: &str) -> Result<(), VerifyFailure> {
    match check_agent(binary, None, path_var).failure {
        Some(failure) => Err(failure),
        None => Ok(()),
    }
}

fn check_agent(binary: &str, pin: Option<&str>, path_var: &str) -> AgentCheck {
    let mut check = AgentCheck {
        requested: binary.to_string(),
        expected_sha256: pin.map(str::to_string),
        ..AgentCheck::default()
    };
    let resolved = match resolve_agent_binary(binary, path_var) {
        Ok(p) => p,
        Err(f) => {
            check.failure = Some(f);
            return check;
        }
    };
    check.resolved = Some(resolved.display().to_string());
    if let Some(name) = env_shebang(&resolved) {
        match resolve_agent_binary(&name, path_var) {
            Ok(interpreter) => check.interpreter = Some(interpreter.display().to_string()),
            Err(f) => {
                check.failure = Some(VerifyFailure {
                    reason: format!(
                        "agent binary {} runs `#!/usr/bin/env {name}`: {}",
                        resolved.display(),
                        f.reason
                    ),
                    ..f
                });
                return check;
            }
        }
    }
    let Some(pin) = pin else {
        return check;
    };
    let pin_failure = |reason: String| VerifyFailure {
        exit_code: AGENT_NOT_FOUND,
        kind: FailureKind::AgentPinMismatch,
        reason,
    };
    let hashed = std::fs::canonicalize(&resolved)
        .map_err(|e| format!("{}: {e}", resolved.display()))
        .and_then(|real| tree_hash::sha256_file(&real).map_err(|e| e.to_string()));
    match hashed {
        Err(e) => {
            check.failure = Some(pin_failure(format!(
                "agent binary differs from its pin: {} could not be hashed: {e}",
                resolved.display()
            )));
        }
        Ok(record) => {
            if record.sha256 != pin {
                check.failure = Some(pin_failure(format!(
                    "agent binary differs from its pin: {} has sha256 {}, expected {pin}",
                    resolved.display(),
                    record.sha256
                )));
            }
            check.actual_sha256 = Some(record.sha256);
        }
    }
    check
}

enum Candidate {
    Absent,
    Unusable(String),
    Executable,
}

/// `NAME` when `script` starts with `#!/usr/bin/env NAME` (or `#!/bin/env NAME`) and nothing
/// else: the form that looks `NAME` up on `PATH` at exec time. Other shebangs name an absolute
/// interpreter (the kernel needs no `PATH`) and `env` with options is left to `env`.
pub fn env_shebang(script: &Path) -> Option<String> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let mut file = std::fs::File::open(script).ok()?;
    let n = file.read(&mut head).ok()?;
    let line = head[..n].split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line.strip_prefix(b"#!")?).ok()?.trim();
    let mut words = line.split_whitespace();
    let env = words.next()?;
    if env != "/usr/bin/env" && env != "/bin/env" {
        return None;
    }
    let name = words.next()?;
    if words.next().is_some() || name.starts_with('-') || name.contains('/') || name.contains('=') {
        return None;
    }
    Some(name.to_string())
}

fn candidate(path: &Path) -> Candidate {
    // Follows symlinks: the image (and so its PATH directories) is trusted.
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Candidate::Absent,
        Err(e) => Candidate::Unusable(e.to_string()),
        Ok(m) if !m.is_file() => Candidate::Unusable("not a regular file".into()),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => {
            Candidate::Unusable("no execute permission bit".into())
        }
        Ok(_) => Candidate::Executable,
    }
}

/// Resolves the agent binary once to an absolute path.
///
/// A `binary` containing `/` must be absolute. Otherwise the absolute entries of `path_var` are
/// searched in order (empty and relative entries are skipped) and the first regular file with
/// an execute bit wins. Errors: 127 when nothing is found or the path is not absolute, 126
/// when a candidate exists but is not a regular file or has no execute bit.
pub fn resolve_agent_binary(binary: &str, path_var: &str) -> Result<PathBuf, VerifyFailure> {
    let not_found = |reason: String| VerifyFailure {
        exit_code: AGENT_NOT_FOUND,
        kind: FailureKind::AgentNotFound,
        reason,
    };
    let not_executable = |path: &Path, why: &str| VerifyFailure {
        exit_code: AGENT_NOT_EXECUTABLE,
        kind: FailureKind::AgentNotExecutable,
        reason: format!("agent binary {} cannot be executed: {why}", path.display()),
    };
    if binary.is_empty() {
        return Err(not_found("agent binary name is empty".into()));
    }
    if binary.contains('\0') {
        return Err(not_found("agent binary name contains a NUL byte".into()));
    }
    if binary.contains('/') {
        let path = Path::new(binary);
        if !path.is_absolute() {
            return Err(not_found(format!(
                "agent binary {binary:?} is not an absolute path"
            )));
        }
        return match candidate(path) {
            Candidate::Executable => Ok(path.to_path_buf()),
            Candidate::Absent => Err(not_found(format!("agent binary {binary} does not exist"))),
            Candidate::Unusable(why) => Err(not_executable(path, &why)),
        };
    }
    let mut searched = Vec::new();
    let mut unusable: Option<VerifyFailure> = None;
    for dir in path_var.split(':') {
        if dir.is_empty() || !Path::new(dir).is_absolute() {
            continue;
        }
        searched.push(dir);
        let path = Path::new(dir).join(binary);
        match candidate(&path) {
            Candidate::Executable => return Ok(path),
            Candidate::Absent => {}
            Candidate::Unusable(why) => {
                unusable.get_or_insert_with(|| not_executable(&path, &why));
            }
        }
    }
    Err(unusable.unwrap_or_else(|| {
        not_found(format!(
            "agent binary {binary:?} not found on PATH (searched {})",
            if searched.is_empty() {
                "no absolute entries".to_string()
            } else {
                searched.join(":")
            }
        ))
    }))
}

#[cfg(test)]
mod shebang_tests {
    use super::*;

    fn script(body: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cli.js");
        std::fs::write(&path, body).unwrap();
        (dir, path)
    }

    #[test]
    fn env_shebangs_name_the_interpreter_others_do_not() {
        let (_d, p) = script("#!/usr/bin/env node\nconsole.log(1)\n");
        assert_eq!(env_shebang(&p).as_deref(), Some("node"));
        let (_d, p) = script("#!/bin/env  python3 \n");
        assert_eq!(env_shebang(&p).as_deref(), Some("python3"));
        for body in [
            "#!/bin/sh\n",
            "#!/usr/bin/env -S node --flag\n",
            "#!/usr/bin/env A=1 node\n",
            "#!/usr/bin/env node extra\n",
            "\x7fELF",
            "",
        ] {
            let (_d, p) = script(body);
            assert_eq!(env_shebang(&p), None, "{body:?}");
        }
    }

    #[test]
    fn the_interpreter_is_resolved_on_the_baseline_path() {
        let bin = tempfile::tempdir().unwrap();
        let interp = bin.path().join("fakenode");
        std::fs::write(&interp, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&interp, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let (_d, p) = script("#!/usr/bin/env fakenode\n");
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let path_var = bin.path().display().to_string();
        let check = check_agent(&p.display().to_string(), None, &path_var);
        assert_eq!(check.interpreter.as_deref(), Some(interp.to_str().unwrap()));
        assert!(check.failure.is_none());
        let check = check_agent(&p.display().to_string(), None, "/nonexistent");
        let failure = check.failure.unwrap();
        assert_eq!(failure.exit_code, AGENT_NOT_FOUND);
        assert!(
            failure.reason.contains("#!/usr/bin/env fakenode"),
            "{}",
            failure.reason
        );
    }
}

#[cfg(test)]
mod tests;
