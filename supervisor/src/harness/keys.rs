//! The top-level keys of a harness checked into a [`Harness`]. [`Checker::harness`] is the
//! spine: one line per key (or group of keys), each checked by a function of its own that
//! records every problem it finds and goes on, so a harness's problems are all reported at
//! once. The list entries (`plugins`, `adapters`, `skills`) have their own checks
//! (`entries`); the keys are grouped by what they are about:
//!
//! - `agent`: `runtime`, `agent`, `command`, `prompt`, and the notes only the whole harness
//!   can give about its agent;
//! - `sandbox`: `env`, `dotenv`, `keep_home`, `keep_output`, `network`, the plugins' pi-only options;
//! - `limits`: `iterations`, `processes`, `memory`, `disk`, `timeout`, `retention`,
//!   `upload_limits`;
//! - `host`: `workdir`, `output`, `validation`, `feedback`.

mod agent;
mod host;
mod limits;
mod sandbox;

use super::model::Harness;
use super::yaml::Checker;
use marked_yaml::Node;
use std::path::Path;
use std::time::Duration;

/// Every key a harness may have at the top.
const TOP_KEYS: &[&str] = &[
    "runtime",
    "agent",
    "command",
    "prompt",
    "plugins",
    "adapters",
    "skills",
    "env",
    "dotenv",
    "keep_home",
    "keep_output",
    "network",
    "iterations",
    "timeout",
    "processes",
    "memory",
    "disk",
    "retention",
    "upload_limits",
    "workdir",
    "output",
    "validation",
    "feedback",
];

/// What `feedback: true` keeps of the validation's output.
const DEFAULT_FEEDBACK: u64 = 16 * 1024;

// Every number a harness gives has a maximum (docs/manifest.md names each): past it, a value is
// refused at its line and column, naming the maximum, before anything is computed from it.

/// The most `iterations:` a harness may ask for.
pub const MAX_ITERATIONS: u32 = 1000;

/// The longest `timeout:` an iteration may be given: 168h (a week).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);

/// The largest `processes:` a harness may ask for (the kernel's own `pid_max` limit).
pub const MAX_PROCESSES: u64 = 4_194_304;

/// The most `memory:` may be: 1024 TiB, past any machine's, short of overflow.
pub const MAX_MEMORY_BYTES: u64 = 1 << 50;

/// The most `disk:` may be: 1024 TiB.
pub const MAX_DISK_BYTES: u64 = 1 << 50;

/// The most collected records `retention.records` may ask the sandbox to keep.
pub const MAX_RETAINED_RECORDS: u32 = 1_000_000;

/// The most `retention.size` may keep: 1024 TiB.
pub const MAX_RETAINED_BYTES: u64 = 1 << 50;

/// The most entries `upload_limits.entries` may allow in one upload.
pub const MAX_UPLOAD_ENTRIES: u64 = 100_000_000;

/// The most `upload_limits.size` may allow one upload: 1024 TiB.
pub const MAX_UPLOAD_BYTES: u64 = 1 << 50;

/// The most `feedback:` may keep (the prompt travels in one argv element, at most 128 KiB).
pub const MAX_FEEDBACK: u64 = 32 * 1024;

impl Checker<'_> {
    /// Checks the whole harness for shapes and rules; `None` when it is not a mapping or has
    /// no runtime (the problems say why). Every key is checked whatever the others held.
    pub(super) fn harness(&mut self, file: &Path, node: &Node) -> Option<Harness> {
        let top = self.mapping(node, "")?;
        self.unknown_keys(top, "", TOP_KEYS);
        let runtime = self.runtime_key(node, top);
        let agent = self.agent_key(top, runtime);
        let (command, prompt) = self.command_and_prompt(node, top, runtime);
        let plugins = match top.get_node("plugins") {
            Some(n) => self.plugins(n),
            None => Vec::new(),
        };
        self.plugins_pi_options(top, runtime, &plugins);
        let adapters = match top.get_node("adapters") {
            Some(n) => self.adapters(n, runtime),
            None => Vec::new(),
        };
        let skills = match top.get_node("skills") {
            Some(n) => self.skills(n),
            None => Vec::new(),
        };
        let env = self.env_key(top, &plugins);
        let iterations = self.iterations(top);
        let processes = self.processes(top);
        let memory = self.memory(top);
        let disk = self.disk(top);
        let dotenv = self.dotenv(top);
        let retention = top
            .get_node("retention")
            .map(|n| self.retention(n))
            .unwrap_or_default();
        let upload_limits = top
            .get_node("upload_limits")
            .map(|n| self.upload_limits(n))
            .unwrap_or_default();
        let keep_output = self.keep_output(top);
        let keep_home = self.keep_home(top, runtime);
        let network = self.network(top);
        let timeout = self.timeout(top);
        let workdir = self.workdir(top);
        let output = self.output(top);
        let validation = self.validation(top);
        let feedback = self.feedback(top, validation.is_some(), runtime);

        let harness = Harness {
            file: file.to_path_buf(),
            base: self.base.clone(),
            runtime: runtime?,
            agent,
            command,
            prompt,
            plugins,
            adapters,
            skills,
            env,
            iterations,
            timeout,
            processes,
            memory,
            disk,
            dotenv,
            keep_home,
            keep_output,
            network,
            retention,
            upload_limits,
            workdir,
            output,
            validation,
            feedback,
        };
        self.agent_notes(top, &harness);
        Some(harness)
    }
}

/// A scalar as a non-negative integer, written plainly or quoted (`3`, `"3"`: a templating tool
/// may quote every value; the YAML loader keeps quoted scalars as text).
fn integer(node: &Node) -> Option<u64> {
    node.as_scalar()?.as_str().trim().parse().ok()
}
