//! The harness model: what a harness file says once its shapes are right ([`Harness`] and its
//! entries), what validation found ([`Problem`], [`Location`]), and what a clean harness was
//! checked into ([`Validated`] with its [`CheckedPlugin`]s, [`CheckedSkill`]s and
//! [`CheckedAdapter`]s).

use crate::exit_code::PinRole;
use crate::manifest::{FileUse, Runtime};
use crate::plugin_format::PluginClass;
use crate::tree_hash::TreeDigest;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// A position in the harness file (1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Location {
    /// Line number.
    pub line: usize,
    /// Column number.
    pub column: usize,
}

/// One problem found in a harness, with where it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// Where in the file (absent for problems about the file as a whole).
    pub location: Option<Location>,
    /// Which field (`plugins[1].env.NODE_OPTIONS`).
    pub field: String,
    /// What is wrong and which rule says so.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(loc) = self.location {
            write!(f, "{}:{}: ", loc.line, loc.column)?;
        }
        if self.field.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

/// Why a harness could not be read at all (as opposed to [`Problem`]s found in it).
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// The file could not be read (the error is said once: in the message, not again as a
    /// source for a chain printer).
    #[error("harness {path}: {error}")]
    Read {
        /// The harness path.
        path: PathBuf,
        /// The I/O error.
        error: std::io::Error,
    },
    /// The file is not valid YAML (or not a mapping at the top).
    #[error("harness {path}:{detail}")]
    Yaml {
        /// The harness path.
        path: PathBuf,
        /// Parser message with its position.
        detail: String,
    },
}

/// A plugin entry of the harness.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PluginSpec {
    /// The path as written.
    pub path: String,
    /// Absolute host path of the directory (or of the single file).
    pub host_path: PathBuf,
    /// The upload name (the directory's or the file's base name).
    pub name: String,
    /// Plugin environment (`env:`).
    pub env: BTreeMap<String, String>,
    /// pi extension flags (`pi: {args: […]}`).
    pub pi_args: Vec<String>,
    /// The `#sha256=` pin of a remote entry (`content-v1` of a directory, SHA-256 of a file),
    /// checked again against the very listing the manifest pins; `None` for a local path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pin: Option<String>,
    /// A single pi extension file rather than a directory: pinned and uploaded like an adapter.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub single_file: bool,
}

/// An adapter (a single pinned file) of the harness.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AdapterSpec {
    /// The path as written.
    pub path: String,
    /// Absolute host path of the file.
    pub host_path: PathBuf,
    /// Its file name (a local file's, or the last segment of a remote one's path).
    pub name: String,
    /// What it is for (decides the exit code when it drifts).
    pub role: PinRole,
    /// How the runtime is told about it.
    #[serde(rename = "use")]
    pub usage: FileUse,
    /// `to:` (config adapters only): where below the runtime's config directory it goes, a
    /// relative path of plain names (`agents/reviewer.md`); unset, its file name at the top.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// The `#sha256=` pin of a remote entry (`content-v1` of a directory, SHA-256 of a file),
    /// checked again against the very listing the manifest pins; `None` for a local path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pin: Option<String>,
}

impl AdapterSpec {
    /// Where it goes: for a config adapter the path below the runtime's config directory (`to:`,
    /// or its file name), for the others its file name below the adapters directory.
    pub fn destination(&self) -> String {
        match (&self.to, self.role) {
            (Some(to), PinRole::Config) => to.clone(),
            _ => self.name.clone(),
        }
    }
}

/// A skills directory of the harness.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkillSpec {
    /// The path as written.
    pub path: String,
    /// Absolute host path.
    pub host_path: PathBuf,
    /// Upload name (base name).
    pub name: String,
    /// The `#sha256=` pin of a remote entry (`content-v1` of a directory, SHA-256 of a file),
    /// checked again against the very listing the manifest pins; `None` for a local path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pin: Option<String>,
}

/// Agent options of the harness (`agent:`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AgentSection {
    /// Binary name or absolute path inside the sandbox (defaults per runtime).
    pub binary: Option<String>,
    /// Extra arguments.
    pub args: Vec<String>,
    /// Model.
    pub model: Option<String>,
    /// The runtime's built-in tools: unset = its default set, empty = none.
    pub tools: Option<Vec<String>>,
    /// Claude `--agent`.
    pub claude_agent: Option<String>,
    /// Whether the record shows the prompt in `agent.argv` (default: its length and SHA-256).
    pub record_prompt: bool,
    /// Which of the repository's context files (`AGENTS.md`, `CLAUDE.md`, …) the runtime
    /// reads; unset, [`crate::manifest::ContextFiles::Uploaded`] (kept apart so that a
    /// sandbox too old for it can be told from a harness that asks for it).
    pub context_files: Option<crate::manifest::ContextFiles>,
}

/// A harness whose fields have the right shapes (checks that need the file system are in
/// [`validate`](super::validate)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Harness {
    /// The harness file.
    pub file: PathBuf,
    /// Its directory (paths are relative to it).
    pub base: PathBuf,
    /// Runtime.
    pub runtime: Runtime,
    /// Agent options.
    pub agent: AgentSection,
    /// For `runtime: command`: the argv.
    pub command: Vec<String>,
    /// The prompt.
    pub prompt: Option<String>,
    /// Plugin directories.
    pub plugins: Vec<PluginSpec>,
    /// Pinned files.
    pub adapters: Vec<AdapterSpec>,
    /// Skills directories.
    pub skills: Vec<SkillSpec>,
    /// Sandbox environment.
    pub env: BTreeMap<String, String>,
    /// How many iterations at most.
    pub iterations: u32,
    /// Per-iteration agent time limit.
    #[serde(serialize_with = "serialize_duration_secs")]
    pub timeout: Duration,
    /// Most processes and threads of the agent's tree at once (`limits.processes`).
    pub processes: u64,
    /// Most memory of the agent's tree at once, in bytes (`limits.memory_bytes`).
    pub memory: u64,
    /// Most the agent's writes may add to the disk per iteration, in bytes
    /// (`limits.disk_bytes`); unset = no budget.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk: Option<u64>,
    /// A `.env` in the sandbox, parsed as data by the supervisor (`dotenv`): relative to the
    /// workspace, or absolute inside the sandbox.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dotenv: Option<String>,
    /// Paths relative to `HOME` that persist between iterations (`keep_home`), unverified.
    pub keep_home: Vec<String>,
    /// The workspace's `output/` kept between iterations (`keep_output`; emptied by default).
    pub keep_output: bool,
    /// The collected records the sandbox keeps (`retention`).
    pub retention: crate::manifest::Retention,
    /// The most one upload may hold (`upload_limits`): checked here, and a new sandbox's
    /// supervisor is started with them.
    pub upload_limits: crate::protocol::UploadLimits,
    /// Host directory uploaded as the agent's workspace.
    pub workdir: Option<PathBuf>,
    /// Host directory receiving run records.
    pub output: PathBuf,
    /// Host command run after each iteration; success stops the loop.
    pub validation: Option<Vec<String>>,
    /// `feedback:`: how many bytes of the end of a failed validation's output the next
    /// iteration's prompt gets (unset: none).
    pub feedback: Option<u64>,
    /// `network:`: what the agent may reach; unset, the runtime's default
    /// ([`network_default`](super::network_default)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::manifest::NetworkPolicy>,
}

fn serialize_duration_secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// A plugin after validation: its classification and its tree digest.
#[derive(Debug, Clone, Serialize)]
pub struct CheckedPlugin {
    /// The harness entry.
    pub spec: PluginSpec,
    /// Which runtime loads it.
    pub class: PluginClass,
    /// Its `pi-tree-v1` digest with the per-file listing.
    pub digest: TreeDigest,
    /// Whether the harness runtime loads it (others name and skip it).
    pub loaded: bool,
}

/// A skills tree after validation.
#[derive(Debug, Clone, Serialize)]
pub struct CheckedSkill {
    /// The harness entry.
    pub spec: SkillSpec,
    /// Its digest.
    pub digest: TreeDigest,
}

/// An adapter after validation.
#[derive(Debug, Clone, Serialize)]
pub struct CheckedAdapter {
    /// The harness entry.
    pub spec: AdapterSpec,
    /// sha256 of its bytes.
    pub sha256: String,
    /// Size in bytes.
    pub size: u64,
}

/// A single-file plugin after validation: pinned by its bytes, like an adapter.
#[derive(Debug, Clone, Serialize)]
pub struct CheckedPluginFile {
    /// The harness entry.
    pub spec: PluginSpec,
    /// sha256 of its bytes.
    pub sha256: String,
    /// Size in bytes.
    pub size: u64,
    /// Whether the harness's runtime loads it (pi); Claude Code names and skips it.
    pub loaded: bool,
}

/// The result of [`validate`](super::validate): problems (errors), notes (things that load
/// differently than a reader might assume but are not errors) and, when the shapes were right,
/// what was checked.
#[derive(Debug, Clone, Serialize)]
pub struct Validated {
    /// The parsed harness, when its shape allowed parsing.
    pub harness: Option<Harness>,
    /// Plugins with class and digest (only those that passed their checks).
    pub plugins: Vec<CheckedPlugin>,
    /// Single-file plugins with their sha256 (only those that passed their checks).
    pub plugin_files: Vec<CheckedPluginFile>,
    /// Skills with digest.
    pub skills: Vec<CheckedSkill>,
    /// Adapters with digest.
    pub adapters: Vec<CheckedAdapter>,
    /// Every problem found.
    pub problems: Vec<Problem>,
    /// Informational notes.
    pub notes: Vec<Problem>,
    /// What pi's pinned `models.json` and `settings.json` say about its model endpoints, read
    /// for the default network (empty for the other runtimes and with `network:` set).
    pub pi_config: super::network::PiModelConfig,
}

impl Validated {
    /// Whether the harness is usable.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty() && self.harness.is_some()
    }
}
