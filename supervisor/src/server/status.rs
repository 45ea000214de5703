//! The `status` request: what the server did and holds, the sandbox's processes read from
//! `/proc` (bounded), and a live verification on request.

use super::Server;
use crate::iteration::Supervisor;
use crate::protocol::status::{
    LiveFailure, LiveVerify, ProcessEntry, ProcessInfo, RunState, StatusDoc,
};
use crate::sandbox::reap::{parse_stat_ppid, proc_pids};
use std::fs;
use std::io::Read;

/// One finished iteration, as the server keeps it ([`crate::protocol::status::HistoryEntry`]
/// on the wire).
#[derive(Debug, Clone)]
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

/// What an exit code means, spelled by [`crate::exit_code::meaning`] when `status` is answered.
#[derive(Debug, Clone, Copy)]
pub(super) struct Meaning(pub(super) i32);

impl HistoryEntry {
    /// The entry as `status` shows it.
    fn to_wire(&self) -> crate::protocol::status::HistoryEntry {
        crate::protocol::status::HistoryEntry {
            duration_ms: self.duration_ms,
            exit_code: self.exit_code,
            iteration: self.iteration,
            meaning: crate::exit_code::meaning(self.meaning.0),
            reason: self.reason.clone(),
            started_at: self.started_at,
        }
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
fn processes() -> Vec<ProcessEntry> {
    let mut pids = proc_pids();
    pids.sort_unstable();
    let total = pids.len();
    let mut listed: Vec<ProcessEntry> = pids
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
            Some(ProcessEntry::Process(ProcessInfo {
                cmd,
                pid,
                ppid,
                uid,
            }))
        })
        .collect();
    if total > STATUS_PROCESSES {
        listed.push(ProcessEntry::More {
            more: (total - STATUS_PROCESSES) as u64,
        });
    }
    listed
}

impl Server {
    /// The `status` reply: state, history, processes and capabilities; with `verify`, a live
    /// verification of the loaded manifest.
    pub(super) fn status(&self, ctx: &Supervisor, verify: bool) -> StatusDoc {
        let verify = verify.then(|| match &self.manifest {
            Some(m) => {
                let report = crate::verify::verify(m, ctx.baseline.path());
                let failures: Vec<LiveFailure> = report
                    .failures()
                    .into_iter()
                    .map(|f| LiveFailure {
                        exit_code: Some(f.exit_code),
                        reason: f.reason,
                    })
                    .collect();
                LiveVerify {
                    ok: failures.is_empty(),
                    failures,
                    report: Some(report),
                }
            }
            None => LiveVerify {
                failures: vec![LiveFailure {
                    exit_code: None,
                    reason: "no manifest loaded".into(),
                }],
                ok: false,
                report: None,
            },
        });
        StatusDoc {
            capabilities: Some(self.capabilities.clone()),
            claim: self.claim.as_ref().map(super::claim::Claim::to_status),
            confinement: self.last_confinement.clone(),
            history: self.history.iter().map(HistoryEntry::to_wire).collect(),
            history_left_out: self.history_left_out,
            iteration: self
                .current
                .as_ref()
                .map_or(self.last_iteration, |c| c.iteration),
            manifest_loaded: self.manifest.is_some(),
            processes: processes(),
            network: self
                .egress
                .as_ref()
                .map(super::egress::Egress::live)
                .unwrap_or_default(),
            retention: Some(self.retention_status()),
            state: if self.current.is_some() {
                RunState::Running
            } else {
                RunState::Idle
            },
            uncollected: Some(self.uncollected()),
            verify,
            other: Default::default(),
        }
    }
}
