//! The `event` response's step, state and detail: what the supervisor reports while an
//! iteration runs (and writes to the record's `events.jsonl`), what the host shows.
//!
//! A step or state this build does not know (from a newer supervisor) parses as `Other`, so an
//! older host still reads the event. A detail is made only from a [`StepDetail`] type, written
//! through a JSON value ([`EventDetail::of`]): its keys come in sorted order, as they did when
//! the supervisor built details as JSON values.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use std::fmt;

/// Names with a wire spelling and an `Other` fallback.
macro_rules! wire_names {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $wire:literal,)* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vdoc])* $variant,)*
            /// A name this build does not know, as it came.
            Other(String),
        }

        impl $name {
            /// Every name this build sends.
            pub const KNOWN: &'static [$name] = &[$($name::$variant,)*];

            /// The wire name.
            pub fn as_str(&self) -> &str {
                match self {
                    $($name::$variant => $wire,)*
                    $name::Other(other) => other,
                }
            }

            /// The value a wire name spells (`Other` when this build does not know it).
            pub fn from_wire(name: &str) -> $name {
                match name {
                    $($wire => $name::$variant,)*
                    other => $name::Other(other.to_string()),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let name = String::deserialize(deserializer)?;
                Ok($name::from_wire(&name))
            }
        }
    };
}

wire_names! {
    /// A step of an iteration, in the order they run.
    Step {
        /// Every process but the supervisor killed and reaped.
        Reap = "reap",
        /// The supervisor's own limits and directory modes set back.
        OwnState = "own-state",
        /// The agent's System V IPC objects removed.
        IpcSweep = "ipc-sweep",
        /// The agent's directories made.
        AgentDirs = "agent-dirs",
        /// The runtime's config directory set back to what the host pinned.
        ConfigReset = "config-reset",
        /// `HOME` emptied.
        HomeReset = "home-reset",
        /// `TMPDIR` emptied.
        TmpReset = "tmp-reset",
        /// `output/` emptied.
        OutputReset = "output-reset",
        /// Trees, pinned files and the agent binary verified.
        Verify = "verify",
        /// Workspace configuration the runtime reads that no tree pins.
        WorkspaceConfig = "workspace-config",
        /// Claude Code's skill plugins made.
        ClaudeSkills = "claude-skills",
        /// Claude Code's `--settings` derived from the verified `claude-settings` file.
        ClaudeSettings = "claude-settings",
        /// The context files set back and named.
        ContextFiles = "context-files",
        /// The agent's environment built.
        Environment = "environment",
        /// The agent confined and launched.
        Launch = "launch",
        /// The agent ran.
        Agent = "agent",
        /// A stream of the agent's output reached its cap.
        Output = "output",
        /// Every process killed and reaped after the agent.
        FinalReap = "final-reap",
        /// What the agent left copied into the record.
        Record = "record",
    }
}

wire_names! {
    /// Where a step is.
    StepState {
        /// It started.
        Started = "started",
        /// It finished.
        Finished = "finished",
        /// Something was set back (`own-state`).
        Restored = "restored",
        /// A stream was cut (`output`).
        Truncated = "truncated",
    }
}

/// A type that is the detail of an event.
pub trait StepDetail: Serialize {}

/// The `detail` of an `event` response: made from a [`StepDetail`] ([`EventDetail::of`]). On the
/// wire it is the detail's JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EventDetail(serde_json::Value);

impl fmt::Display for EventDetail {
    /// The detail's JSON.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl EventDetail {
    /// The detail `detail`.
    pub fn of<T: StepDetail>(detail: &T) -> EventDetail {
        // The details are plain structs of strings, numbers and maps with string keys.
        EventDetail(serde_json::to_value(detail).unwrap_or_default())
    }

    /// An empty detail (`{}`): a step started.
    pub fn empty() -> EventDetail {
        EventDetail(serde_json::Value::Object(serde_json::Map::new()))
    }

    /// The detail as JSON (to show it).
    pub fn as_json(&self) -> &serde_json::Value {
        &self.0
    }
}

/// `agent started`, `launch finished`: the agent's pid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pid {
    /// The agent's process id.
    pub pid: i32,
}
impl StepDetail for Pid {}

/// `reap finished`, `final-reap finished`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reaped {
    /// Processes killed.
    pub killed: u64,
    /// Processes that survived.
    pub remaining: u64,
}
impl StepDetail for Reaped {}

/// A step that failed: what went wrong (and, for `launch`, the iteration's exit code).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failed {
    /// What went wrong.
    pub error: String,
    /// The iteration's exit code, when the step decides it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
}
impl StepDetail for Failed {}

/// `agent-dirs finished`: what stood where a directory belongs and was replaced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgentDirs {
    /// The entries replaced.
    pub replaced: Vec<crate::sandbox::nofollow::Replaced>,
}
impl StepDetail for AgentDirs {}

/// `verify finished`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verified {
    /// The iteration's exit code, when something failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Nothing failed.
    pub ok: bool,
    /// What failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}
impl StepDetail for Verified {}

/// `workspace-config finished`: configuration the runtime reads that no tree pins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceConfig {
    /// Its paths.
    pub unverified: Vec<String>,
}
impl StepDetail for WorkspaceConfig {}

/// `claude-skills finished`: the plugin directories made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaudeSkills {
    /// Their paths.
    pub plugins: Vec<String>,
}
impl StepDetail for ClaudeSkills {}

/// `claude-settings finished`: the pinned file the `--settings` was derived from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaudeSettings {
    /// Its path.
    pub file: String,
}
impl StepDetail for ClaudeSettings {}

/// `environment finished`: how many names were removed and `.env` entries refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Environment {
    /// `.env` entries refused.
    pub dotenv_refused: u64,
    /// Names removed.
    pub removed: u64,
}
impl StepDetail for Environment {}

/// `agent finished`: how the agent ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentEnded {
    /// The host cancelled it.
    pub cancelled: bool,
    /// Its exit code (128 + the signal's number when a signal ended it).
    pub exit_code: i32,
    /// The signal that ended it, when one did.
    pub signal: Option<String>,
    /// It ran past its timeout.
    pub timed_out: bool,
}
impl StepDetail for AgentEnded {}

/// `output truncated`: a stream of the agent's output reached its cap and is no longer streamed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputTruncated {
    /// Bytes sent on it.
    pub bytes: u64,
    /// The stream.
    pub channel: super::Channel,
}
impl StepDetail for OutputTruncated {}

/// `record finished`: what the agent left, copied into the record (`R`: a copy's report).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecordCopied<R> {
    /// The record's copy budget.
    pub copy_budget_bytes: u64,
    /// Why nothing was copied, when nothing was.
    pub not_copied: Option<String>,
    /// `output/`.
    pub output: R,
    /// The runtime's transcripts, when it keeps any.
    pub transcripts: Option<R>,
    /// Bytes of each output file the capture read past its cap and did not keep.
    pub truncated_bytes: BTreeMap<String, u64>,
    /// The workspace, when the host asked for it.
    pub workspace: Option<R>,
}
impl<R: Serialize> StepDetail for RecordCopied<R> {}

impl StepDetail for crate::result::ResetRecord {}
impl StepDetail for crate::result::IpcSweepRecord {}
impl StepDetail for crate::result::ContextFilesRecord {}
impl StepDetail for crate::result::SupervisorRestored {}
