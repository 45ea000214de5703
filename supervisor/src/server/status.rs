//! The `status` request: what the server did and holds, the sandbox's processes read from
//! `/proc` (bounded), and a live verification on request.

use super::Server;
use crate::iteration::Supervisor;
use crate::sandbox::reap::{parse_stat_ppid, proc_pids};
use serde_json::{json, Value};
use std::fs;
use std::io::Read;

/// One finished iteration, for `status`.
#[derive(Debug, Clone, serde::Serialize)]
pub(super) struct HistoryEntry {
    /// Its number.
    pub(super) iteration: u32,
    /// Its exit code.
    pub(super) exit_code: i32,
    /// What the exit code means (spelled out only when `status` is answered: an entry holds
    /// no string of its own unless the iteration failed with a reason).
    pub(super) meaning: Meaning,
    /// The reason its record gives, if any.
    pub(super) reason: Option<String>,
    /// When it started (seconds since the epoch).
    pub(super) started_at: u64,
    /// How long it took.
    pub(super) duration_ms: u64,
}

/// What an exit code means, written as [`crate::exit_code::meaning`] spells it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Meaning(pub(super) i32);

impl serde::Serialize for Meaning {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&crate::exit_code::meaning(self.0))
    }
}

/// How uids are used, for `hello`.
pub(super) fn uid_model(
    ns: Option<&crate::user_namespace::UserNamespace>,
    unprivileged: bool,
) -> String {
    if unprivileged {
        let me = own_identity();
        return format!(
            "unprivileged: supervisor, uploads and agent all uid {}:{}",
            me.uid, me.gid
        );
    }
    let base = "supervisor and uploads root; agent as the manifest's user (default 65534:65534)";
    match ns {
        None => base.to_string(),
        Some(ns) => format!("{base}; rootless, in a user namespace: {}", ns.describe()),
    }
}

/// This process's uid, gid and supplementary groups: the agent's in the unprivileged mode.
pub(super) fn own_identity() -> crate::manifest::AgentUser {
    crate::manifest::AgentUser {
        uid: nix::unistd::getuid().as_raw(),
        gid: nix::unistd::getgid().as_raw(),
        groups: nix::unistd::getgroups()
            .map(|g| g.into_iter().map(|g| g.as_raw()).collect())
            .unwrap_or_default(),
    }
}

/// Most processes listed by `status`.
const STATUS_PROCESSES: usize = 2000;
/// Most bytes of one process's command line in `status`.
const STATUS_CMDLINE_BYTES: usize = 4096;

/// The processes of the sandbox, from `/proc`.
///
/// Bounded, since the agent decides how many processes there are and how long their command
/// lines are: at most [`STATUS_PROCESSES`] processes, [`STATUS_CMDLINE_BYTES`] of each command
/// line (a `status` reply stays far below the 32 MiB control frame).
fn processes() -> Vec<Value> {
    let mut pids = proc_pids();
    pids.sort_unstable();
    let total = pids.len();
    let mut listed: Vec<Value> = pids
        .into_iter()
        .take(STATUS_PROCESSES)
        .filter_map(|pid| {
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let ppid = parse_stat_ppid(&stat);
            let uid = fs::read_to_string(format!("/proc/{pid}/status"))
                .ok()
                .and_then(|s| {
                    s.lines().find(|l| l.starts_with("Uid:")).and_then(|l| {
                        l.split_whitespace()
                            .nth(1)
                            .and_then(|v| v.parse::<u32>().ok())
                    })
                });
            let mut cmdline = Vec::new();
            if let Ok(f) = fs::File::open(format!("/proc/{pid}/cmdline")) {
                let _ = f
                    .take(STATUS_CMDLINE_BYTES as u64)
                    .read_to_end(&mut cmdline);
            }
            let cmd = String::from_utf8_lossy(&cmdline)
                .trim_end_matches('\0')
                .replace('\0', " ");
            Some(json!({"pid": pid, "ppid": ppid, "uid": uid, "cmd": cmd}))
        })
        .collect();
    if total > STATUS_PROCESSES {
        listed.push(json!({"more": total - STATUS_PROCESSES}));
    }
    listed
}

impl Server {
    /// The `status` reply: state, history, processes and capabilities; with `verify`, a live
    /// verification of the loaded manifest.
    pub(super) fn status(&self, ctx: &Supervisor, verify: bool) -> Value {
        let mut status = json!({
            "state": if self.current.is_some() { "running" } else { "idle" },
            "iteration": self.current.as_ref().map_or(self.last_iteration, |c| c.iteration),
            "history": self.history,
            "history_left_out": self.history_left_out,
            "manifest_loaded": self.manifest.is_some(),
            "processes": processes(),
            "capabilities": self.capabilities,
            "confinement": self.last_confinement,
            "claim": self.claim.as_ref().map(super::claim::Claim::to_json),
            "uncollected": self.uncollected(),
            "retention": self.retention_status(),
        });
        if verify {
            let report = match &self.manifest {
                Some(m) => {
                    let report = crate::verify::verify(m, ctx.baseline.path());
                    let failures: Vec<Value> = report
                        .failures()
                        .into_iter()
                        .map(|f| json!({"exit_code": f.exit_code, "reason": f.reason}))
                        .collect();
                    json!({"ok": failures.is_empty(), "failures": failures, "report": report})
                }
                None => json!({"ok": false, "failures": [{"reason": "no manifest loaded"}]}),
            };
            status["verify"] = report;
        }
        status
    }
}
