//! The `status` reply's document and the claim it shows: written by the supervisor, read by the
//! host (`pitcrew inspect`, `ps`, `run --resume`, `down`), one type for both sides.
//!
//! On the wire the document's keys come in sorted order at every depth (it is written through a
//! JSON value, as it was when the supervisor built it as one); the fields are declared in that
//! order too. Every field an older supervisor may lack has a default, and keys a newer one adds
//! are kept in [`StatusDoc::other`] (`pitcrew inspect` shows them as they come).

use super::Capabilities;
use crate::result::ConfinementRecord;
use crate::verify::VerifyReport;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The `status` document (`docs/protocol.md`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusDoc {
    /// What the supervisor can do (as in its `hello`).
    #[serde(default)]
    pub capabilities: Option<Capabilities>,
    /// The run that holds the sandbox, if any.
    #[serde(default)]
    pub claim: Option<ClaimStatus>,
    /// The last iteration's confinement (none before the first iteration).
    #[serde(default)]
    pub confinement: Option<ConfinementRecord>,
    /// The finished iterations, oldest first (bounded: see `history_left_out`).
    #[serde(default)]
    pub history: Vec<HistoryEntry>,
    /// Finished iterations no longer in `history` (the oldest, beyond its bound).
    #[serde(default)]
    pub history_left_out: u64,
    /// The running iteration's number, else the last one's (0 before the first).
    #[serde(default)]
    pub iteration: u32,
    /// Whether a manifest is set.
    #[serde(default)]
    pub manifest_loaded: bool,
    /// The sandbox's processes, read from `/proc` (bounded).
    #[serde(default)]
    pub processes: Vec<ProcessEntry>,
    /// The running iteration's carried connections open now (`network: allow`), bytes so far.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network: Vec<crate::result::ConnectionRecord>,
    /// The records' retention and what it deleted.
    #[serde(default)]
    pub retention: Option<RetentionStatus>,
    /// `idle` or `running`.
    pub state: RunState,
    /// The records the host has not said it holds.
    #[serde(default)]
    pub uncollected: Option<Uncollected>,
    /// The live verification, when `status` asked for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<LiveVerify>,
    /// Keys of a newer supervisor that this build does not know, kept as they came.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// Whether an iteration runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunState {
    /// No iteration runs.
    Idle,
    /// An iteration runs.
    Running,
    /// A state a newer supervisor names that this build does not know.
    #[serde(other)]
    Unknown,
}

/// One finished iteration, in [`StatusDoc::history`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// How long it took.
    pub duration_ms: u64,
    /// Its exit code.
    pub exit_code: i32,
    /// Its number.
    pub iteration: u32,
    /// What the exit code means ([`crate::exit_code::meaning`]).
    pub meaning: String,
    /// The reason its record gives, if any.
    pub reason: Option<String>,
    /// When it started (seconds since the epoch).
    pub started_at: u64,
}

/// One entry of [`StatusDoc::processes`]: a process, or how many more were left out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ProcessEntry {
    /// A process of the sandbox.
    Process(ProcessInfo),
    /// The processes past the listed bound.
    More {
        /// How many were left out.
        more: u64,
    },
}

/// A process of the sandbox, from `/proc`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInfo {
    /// Its command line (NULs as spaces, bounded).
    pub cmd: String,
    /// Its process id.
    pub pid: i32,
    /// Its parent's (unknown when `/proc` did not say).
    pub ppid: Option<i32>,
    /// Its real user id (unknown when `/proc` did not say).
    pub uid: Option<u32>,
}

/// The claim of the run that holds the sandbox, as `status` and the `claim` answer show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimStatus {
    /// The iterations run under it.
    #[serde(default)]
    pub iterations: Vec<u32>,
    /// Its lease, in milliseconds.
    #[serde(default)]
    pub lease_ms: u64,
    /// When its holder went away (seconds since the epoch).
    #[serde(default)]
    pub orphaned_at: Option<u64>,
    /// Why it is orphaned: the connection closed, or the lease lapsed.
    #[serde(default)]
    pub orphaned_because: Option<String>,
    /// The host's plan for the run.
    #[serde(default)]
    pub plan: Option<ClaimPlan>,
    /// A manifest was set under it (a run that lost its host before cannot be resumed).
    #[serde(default)]
    pub ready: bool,
    /// The host's run id.
    pub run: String,
    /// How long its holder has been silent, in milliseconds (none once orphaned).
    #[serde(default)]
    pub silent_ms: Option<u64>,
    /// When it was claimed or taken back (seconds since the epoch).
    #[serde(default)]
    pub since: u64,
    /// `held` or `orphaned`.
    pub state: ClaimState,
    /// The host ended the run (`cancel` with `run`): its next `run` is refused.
    #[serde(default)]
    pub stopped: bool,
}

/// Whether a claim's holder is connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClaimState {
    /// Its connection holds it.
    Held,
    /// Its holder went away: the same run may take it back.
    Orphaned,
    /// A state a newer supervisor names that this build does not know.
    #[serde(other)]
    Unknown,
}

/// The host's plan for a run, sent with `claim` and kept with the claim: what `pitcrew run
/// --resume` needs to finish the run. The supervisor does not read it; it keeps keys it does not
/// know as they came.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimPlan {
    /// The harness file (absolute).
    #[serde(default)]
    pub harness: Option<PathBuf>,
    /// The run's iteration budget.
    #[serde(default)]
    pub iterations: Option<u32>,
    /// The sandbox is kept when the run ends.
    #[serde(default)]
    pub keep: Option<bool>,
    /// The records directory the run was given (`--records`).
    #[serde(default)]
    pub records: Option<PathBuf>,
    /// Keys this build does not know, kept as they came.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// The records the host has not said it holds ([`StatusDoc::uncollected`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Uncollected {
    /// How many (exact).
    pub count: u64,
    /// Their numbers (the first 1000).
    pub iterations: Vec<u32>,
}

/// The records' retention ([`StatusDoc::retention`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionStatus {
    /// Most bytes of collected records kept (none without a manifest).
    pub bytes: Option<u64>,
    /// Records deleted.
    pub deleted: u64,
    /// Bytes they held.
    pub deleted_bytes: u64,
    /// Collected records kept.
    pub kept: u64,
    /// Bytes they hold.
    pub kept_bytes: u64,
    /// Most collected records kept (none without a manifest).
    pub records: Option<u32>,
}

/// A live verification ([`StatusDoc::verify`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveVerify {
    /// Every failure (agent first, then trees and files in manifest order).
    #[serde(default)]
    pub failures: Vec<LiveFailure>,
    /// Nothing failed.
    pub ok: bool,
    /// The whole report (none without a manifest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<VerifyReport>,
}

/// One failure of a live verification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveFailure {
    /// The iteration exit code it would give (none when nothing could be verified).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// What failed.
    pub reason: String,
}
