//! The manifest: the versioned JSON document the host hands the supervisor.
//!
//! It says which runtime to launch and how, every tree and pinned file to verify with its
//! expected digest (computed by the host from its own copies), the environment inputs, the agent
//! identity and the limits. Every path in it is absolute *inside the sandbox*. The supervisor
//! keeps the parsed manifest in memory: nothing the agent can write is ever a source of an
//! expected value. (The long-lived server keeps the trees' per-file listings, which only
//! explain a drift, in files of its own checked against a digest in memory:
//! [`StoredListing`].) Field reference: `docs/manifest.md`.

use crate::exit_code::PinRole;
use crate::tree_hash::TreeFormat;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// The manifest format version this build reads and writes.
pub const MANIFEST_VERSION: u32 = 1;

/// The whole manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Format version; must equal [`MANIFEST_VERSION`].
    pub version: u32,
    /// Which runtime to launch.
    pub runtime: Runtime,
    /// The agent program and its runtime-specific options.
    pub agent: Agent,
    /// The prompt handed to the agent (pi and claude runtimes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// Directory trees to verify (plugins, skills, hook script directories).
    #[serde(default)]
    pub trees: Vec<TreePin>,
    /// Single files to verify (hook adapter, runtime manifest, configs).
    #[serde(default)]
    pub files: Vec<FilePin>,
    /// Environment inputs.
    #[serde(default)]
    pub env: EnvSpec,
    /// The agent's working directory (read-write for the agent).
    pub workdir: String,
    /// Directories the runtime needs: home, tmp, agent/config dirs.
    #[serde(default)]
    pub dirs: RuntimeDirs,
    /// The identity the agent runs as.
    #[serde(default)]
    pub user: AgentUser,
    /// Where the agent's stdout and stderr go.
    #[serde(default)]
    pub output: OutputSpec,
    /// Time limits.
    #[serde(default)]
    pub limits: Limits,
    /// How many records the host has collected the sandbox keeps.
    #[serde(default)]
    pub retention: Retention,
    /// Confinement policy.
    #[serde(default)]
    pub confinement: ConfinementSpec,
    /// What the agent may reach over the network; absent = what the engine gives it, as
    /// before pitcrew controlled egress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkPolicy>,
    /// The model endpoint whose credentials the host adds ([`ModelRoute`]); absent, none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelRoute>,
}

/// The runtime that loads the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Runtime {
    /// pi (`pi --print --mode json …`).
    Pi,
    /// Claude Code (`claude -p --output-format stream-json …`).
    Claude,
    /// Codex CLI (`codex exec --json …`).
    Codex,
    /// OpenCode (`opencode run --format json …`).
    Opencode,
    /// Any argv: `agent.binary` followed by `agent.args`.
    Command,
}

impl Runtime {
    /// The name used in harness files and manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            Runtime::Pi => "pi",
            Runtime::Claude => "claude",
            Runtime::Codex => "codex",
            Runtime::Opencode => "opencode",
            Runtime::Command => "command",
        }
    }

    /// The default agent binary name for this runtime (`pi`, `claude`, `codex`); none for
    /// `command`.
    pub fn default_binary(self) -> Option<&'static str> {
        match self {
            Runtime::Pi => Some("pi"),
            Runtime::Claude => Some("claude"),
            Runtime::Codex => Some("codex"),
            Runtime::Opencode => Some("opencode"),
            Runtime::Command => None,
        }
    }
}

/// The agent program.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Agent {
    /// Program name (looked up once on the baseline `PATH`) or absolute path.
    pub binary: String,
    /// Optional sha256 pin of the binary's bytes (exit 127 when it differs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Extra arguments: the whole argv tail for `command`, appended options for pi/claude.
    #[serde(default)]
    pub args: Vec<String>,
    /// Model (`--model`), for pi and claude.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The runtime's built-in tools (`--tools`); unset = the runtime's default set, empty =
    /// none (pi `--no-builtin-tools`, Claude `--tools ""`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Claude sub-agent name (`--agent`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claude_agent: Option<String>,
    /// Whether the record's `agent.argv` shows the prompt itself; by default it shows
    /// `<prompt>` and `agent.prompt` gives its length and SHA-256.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub record_prompt: bool,
    /// Which of the repository's context files (`AGENTS.md`, `CLAUDE.md`, …) the runtime
    /// reads ([`ContextFiles`]); absent, as they are (what `true` meant before the choice).
    #[serde(default, skip_serializing_if = "ContextFiles::is_as_is")]
    pub context_files: ContextFiles,
}

/// Which context files (the repository's own instructions to the agent: `AGENTS.md`,
/// `AGENTS.override.md`, `CLAUDE.md`) the runtime reads (`agent.context_files`).
///
/// In a manifest `true` is [`ContextFiles::AsIs`] and `false` [`ContextFiles::None`] (the
/// forms a supervisor without the choice reads), and each is also taken by its name; only
/// `"uploaded"` is written as a name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ContextFiles {
    /// The workspace's context files as they are when the iteration starts: what an earlier
    /// iteration's agent wrote into them included.
    #[default]
    AsIs,
    /// Only those the workspace held when the run began (its upload): one the agent created or
    /// changed since is removed or restored before launch, and the record says so.
    Uploaded,
    /// None: pi `--no-context-files`; Claude Code is given no `CLAUDE.md`.
    None,
}

impl ContextFiles {
    /// The harness name (`as-is`, `uploaded`, `none`).
    pub fn as_str(self) -> &'static str {
        match self {
            ContextFiles::AsIs => "as-is",
            ContextFiles::Uploaded => "uploaded",
            ContextFiles::None => "none",
        }
    }

    /// The choice named `name` (`as-is`, `uploaded`, `none`).
    pub fn from_name(name: &str) -> Option<ContextFiles> {
        [
            ContextFiles::AsIs,
            ContextFiles::Uploaded,
            ContextFiles::None,
        ]
        .into_iter()
        .find(|c| c.as_str() == name)
    }

    /// Whether it is [`ContextFiles::AsIs`] (left out of a manifest).
    pub fn is_as_is(&self) -> bool {
        *self == ContextFiles::AsIs
    }
}

impl Serialize for ContextFiles {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ContextFiles::AsIs => s.serialize_bool(true),
            ContextFiles::None => s.serialize_bool(false),
            ContextFiles::Uploaded => s.serialize_str(self.as_str()),
        }
    }
}

impl<'de> Deserialize<'de> for ContextFiles {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ContextFiles, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Bool(bool),
            Name(String),
        }
        match Form::deserialize(d)? {
            Form::Bool(true) => Ok(ContextFiles::AsIs),
            Form::Bool(false) => Ok(ContextFiles::None),
            Form::Name(name) => ContextFiles::from_name(&name).ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "agent.context_files: {name:?} is not as-is, uploaded, none, true or false"
                ))
            }),
        }
    }
}

/// What kind of thing a verified tree is, which decides how the runtime is told about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TreeKind {
    /// A pi extension: loaded with `-e <entry>` for each entry.
    PiExtension,
    /// A Claude plugin: loaded with `--plugin-dir`.
    ClaudePlugin,
    /// A Codex plugin bundle: put in Codex's plugin cache and enabled in the `config.toml` the
    /// supervisor writes ([`crate::codex_config`]).
    CodexPlugin,
    /// An OpenCode plugin: its entries (plugin modules) linked into the config dir OpenCode is
    /// pinned to, which it imports them from.
    OpencodePlugin,
    /// Skills, hook scripts or other data: verified, not passed on the command line.
    Data,
}

/// One directory tree to verify before launch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TreePin {
    /// Unique name (the plugin's upload name).
    pub name: String,
    /// Absolute path inside the sandbox.
    pub path: String,
    /// What drifting means (decides the exit code).
    pub role: PinRole,
    /// How the runtime consumes it.
    pub kind: TreeKind,
    /// Hash format of `sha256`.
    pub format: TreeFormat,
    /// Expected tree hash (lowercase hex).
    pub sha256: String,
    /// Expected per-file listing, for drift reports (held compactly: see [`FileListing`]).
    #[serde(default)]
    pub files: FileListing,
    /// Expected subdirectories (relative), for drift reports.
    #[serde(default)]
    pub dirs: Vec<String>,
    /// Where a long-lived supervisor keeps `files` and `dirs` between iterations (then both are
    /// empty in memory): never part of the manifest a host sends.
    #[serde(skip)]
    pub stored: Option<StoredListing>,
    /// Entry files, relative to `path`: pi's (`-e`) for a pi extension, the plugin modules of an
    /// OpenCode plugin.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<String>,
    /// Validated plugin environment, exported last.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Validated extension flags passed after this extension's `-e` (pi only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pi_args: Vec<String>,
}

impl Manifest {
    /// This manifest without its trees' per-file listings: what `set_manifest` carries when
    /// the listings follow in `add_listing` requests.
    pub fn without_listings(&self) -> Manifest {
        let mut bare = self.clone();
        for tree in &mut bare.trees {
            tree.files = FileListing::default();
            tree.dirs = Vec::new();
        }
        bare
    }
}

impl TreePin {
    /// The listing a drift is explained against: the one kept on disk, or the one in memory.
    pub fn expected_listing(&self) -> Result<crate::tree_hash::TreeListing, String> {
        match &self.stored {
            Some(stored) => stored.load(),
            None => Ok(crate::tree_hash::TreeListing {
                files: self.files.to_records(),
                dirs: self.dirs.clone(),
            }),
        }
    }
}

/// How the runtime is told about a pinned file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileUse {
    /// Verified only (config files the runtime finds by location).
    #[default]
    Verify,
    /// A pi extension file loaded with `-e` before any plugin (hook adapters).
    PiExtension,
    /// Claude Code's `--settings` (hooks config), derived from the verified bytes
    /// (`crate::claude_settings`).
    ClaudeSettings,
}

/// One file to verify byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilePin {
    /// Absolute path inside the sandbox.
    pub path: String,
    /// What drifting means (decides the exit code).
    pub role: PinRole,
    /// Expected sha256 of the exact bytes (lowercase hex).
    pub sha256: String,
    /// Expected size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// How the runtime is told about it.
    #[serde(default, rename = "use")]
    pub usage: FileUse,
    /// Validated plugin environment, exported last (a single-file plugin, role `plugin`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Validated extension flags passed after this file's `-e` (a single-file plugin, pi only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pi_args: Vec<String>,
}

/// Environment inputs, applied in this order: baseline, `.env`, deny rules, pins, plugin env.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvSpec {
    /// A sandbox `.env` file parsed as data (never executed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dotenv: Option<String>,
    /// Variables set by the harness (validated against the reserved set).
    #[serde(default)]
    pub set: BTreeMap<String, String>,
    /// Names the host passed from its own environment (`pitcrew run --pass-env`): they arrive
    /// in the supervisor's environment, and the record names their layer `pass-env`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub passed: Vec<String>,
    /// Variables the runner that started the run gives its hook adapter and the runtime
    /// (`pitcrew run --runner-env`): names in a runner namespace
    /// ([`crate::env_policy::RUNNER_PREFIXES`]), set after the `.env` and the harness `env:`,
    /// recorded by name as layer `runner`, values never.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub runner: BTreeMap<String, String>,
}

/// Directories the runtime uses. Unset ones get defaults under the workdir's parent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeDirs {
    /// `HOME` for the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<String>,
    /// `TMPDIR` for the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tmp: Option<String>,
    /// pi's agent directory (`PI_CODING_AGENT_DIR`) or Claude's config dir (`CLAUDE_CONFIG_DIR`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    /// pi session directory (`--session-dir`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<String>,
    /// Paths relative to `HOME` kept from one iteration to the next (unverified); everything
    /// else in `HOME` and `TMPDIR` is removed before each iteration.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub home_keep: Vec<String>,
}

/// The runtime directories after defaults, resolved in one place ([`Manifest::runtime_dirs`])
/// for the environment, the argv, the agent's directories, the config reset, confinement and
/// the records. With `BASE` the parent of `workdir`: `HOME` = `BASE/home`, `TMPDIR` =
/// `BASE/tmp`, config = `BASE/pi-config` (pi), `BASE/claude-config` (claude) or `BASE/config`
/// (command), sessions = `<config>/sessions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeDirPaths {
    /// `HOME`.
    pub home: String,
    /// `TMPDIR`.
    pub tmp: String,
    /// pi's agent dir / Claude's config dir.
    pub config: String,
    /// pi's session dir.
    pub sessions: String,
    /// Whether the runtime writes sessions there (pi), or the manifest names it: only then is it
    /// one of the agent's directories.
    pub uses_sessions: bool,
}

impl RuntimeDirPaths {
    /// The agent's own directories besides the workdir, in the order they are prepared.
    pub fn agent_dirs(&self) -> Vec<&str> {
        let mut dirs = vec![self.home.as_str(), self.tmp.as_str(), self.config.as_str()];
        if self.uses_sessions {
            dirs.push(&self.sessions);
        }
        dirs
    }
}

/// The agent's identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentUser {
    /// User id (never 0 unless `allow_root`).
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Supplementary groups.
    #[serde(default)]
    pub groups: Vec<u32>,
}

impl Default for AgentUser {
    fn default() -> Self {
        // `nobody`/`nogroup` on Debian: an identity that owns nothing.
        AgentUser {
            uid: 65534,
            gid: 65534,
            groups: Vec::new(),
        }
    }
}

/// Where the agent's output goes (files created by the supervisor, owned by root).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputSpec {
    /// File receiving the agent's stdout; unset = the supervisor's stdout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    /// File receiving the agent's stderr; unset = the supervisor's stderr.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    /// Long-lived mode: copy the whole workspace into each record (`workspace/`), within the
    /// record's budget, besides `output/` (`pitcrew run --collect-workspace`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub collect_workspace: bool,
    /// Keep what the workspace's `output/` holds from one iteration to the next; by default it
    /// is emptied before each iteration, so a record holds what its own iteration wrote.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_output: bool,
}

/// How hard Landlock must be enforced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LandlockMode {
    /// Apply what the kernel supports and report what was enforced.
    #[default]
    BestEffort,
    /// Fail the iteration (125) unless the ruleset is fully enforced.
    Required,
    /// Do not apply Landlock (ownership and modes still protect verified trees).
    Off,
}

/// Confinement policy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfinementSpec {
    /// Landlock enforcement level.
    #[serde(default)]
    pub landlock: LandlockMode,
    /// Extra paths the agent may read (besides `/` read-only… see docs/threat-model.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_only: Vec<String>,
    /// Extra paths the agent may write (besides the workdir, home, tmp and config dirs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_write: Vec<String>,
    /// Allow `user.uid == 0` (tests of the supervisor itself only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_root: bool,
}

/// Why a manifest was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// Not valid JSON or not the expected shape.
    #[error("manifest is not valid: {0}")]
    Parse(String),
    /// A version this build does not understand.
    #[error(
        "manifest version {found} is not supported (this build reads version {MANIFEST_VERSION})"
    )]
    Version {
        /// The version found.
        found: u32,
    },
    /// A field has a bad value.
    #[error("manifest field {field}: {problem}")]
    Field {
        /// JSON path of the field (`trees[2].sha256`).
        field: String,
        /// What is wrong.
        problem: String,
    },
}

fn field(field: impl Into<String>, problem: impl Into<String>) -> ManifestError {
    ManifestError::Field {
        field: field.into(),
        problem: problem.into(),
    }
}

/// Whether `s` is a lowercase hex sha256 digest.
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// What makes `path` unacceptable as an absolute path inside the sandbox (not absolute, a `..`
/// segment, a newline, carriage return or NUL), if anything: the rule every manifest path
/// follows, also applied by the harness to what becomes one.
pub fn sandbox_path_problem(path: &str) -> Option<String> {
    if !Path::new(path).is_absolute() {
        return Some(format!("{path:?} is not an absolute path"));
    }
    if path.split('/').any(|seg| seg == "..") {
        return Some(format!("{path:?} contains a '..' segment"));
    }
    if path.contains(['\n', '\r', '\0']) {
        return Some("path contains a newline, carriage return or NUL".to_string());
    }
    None
}

/// Whether `name` can be one of `agent.tools`: the runtimes take the list joined with `,`, so
/// it is not empty, holds no `,` or NUL, and has no surrounding whitespace.
pub fn is_tool_name(name: &str) -> bool {
    !name.is_empty() && !name.contains([',', '\0']) && name.trim() == name
}

/// Whether `path` is a plain relative path (`dirs.home_keep`): not empty, not absolute, no NUL,
/// and no empty, `.` or `..` component.
pub fn is_plain_relative_path(path: &str) -> bool {
    !path.is_empty()
        && !path.starts_with('/')
        && !path.contains('\0')
        && !path
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
}

/// What Claude Code does with a shell start-up file in `HOME`.
const SHELL_SNAPSHOT: &str =
    "Claude Code runs the shell's start-up file when it launches (its shell snapshot)";
/// What git does with its user configuration.
const GIT_CONFIG: &str =
    "git, which the runtimes run, reads the commands it runs from it (core.fsmonitor, core.pager, hooks)";

/// What Node does with its global module folders in `HOME`.
const NODE_GLOBAL: &str = "Node resolves a bare require() or import there (after the node_modules \
     of the importing file's directories) for pi and its extensions, and for a plugin's Node hooks";

/// Paths below `HOME` that a runtime reads at startup (or runs through the tools it starts)
/// whatever its config dir, each with the runtimes that do (`None`: both) and what reads it: a
/// `dirs.home_keep` entry that is one of them, lies inside one or holds one would carry what an
/// earlier agent wrote there into the next iteration's runtime, loaded without a digest.
pub const RUNTIME_HOME_PATHS: &[(&str, Option<Runtime>, &str)] = &[
    (".bashrc", Some(Runtime::Claude), SHELL_SNAPSHOT),
    (".bash_profile", Some(Runtime::Claude), SHELL_SNAPSHOT),
    (".bash_login", Some(Runtime::Claude), SHELL_SNAPSHOT),
    (".profile", Some(Runtime::Claude), SHELL_SNAPSHOT),
    (".zshrc", Some(Runtime::Claude), SHELL_SNAPSHOT),
    (".zshenv", Some(Runtime::Claude), SHELL_SNAPSHOT),
    (".zprofile", Some(Runtime::Claude), SHELL_SNAPSHOT),
    (".zlogin", Some(Runtime::Claude), SHELL_SNAPSHOT),
    (".gitconfig", None, GIT_CONFIG),
    (".config/git", None, GIT_CONFIG),
    (
        ".config/anthropic",
        Some(Runtime::Claude),
        "Claude Code reads its authentication profiles there",
    ),
    (
        ".claude",
        Some(Runtime::Claude),
        "Claude Code reads its state there whatever its config dir",
    ),
    (
        ".claude.json",
        Some(Runtime::Claude),
        "Claude Code's user configuration",
    ),
    (
        ".local/share/claude",
        Some(Runtime::Claude),
        "Claude Code's installed releases",
    ),
    (".agents", None, "the runtimes' user-level skills"),
    (".node_modules", None, NODE_GLOBAL),
    (".node_libraries", None, NODE_GLOBAL),
    (
        ".pi",
        Some(Runtime::Pi),
        "pi's default agent dir (extensions, skills, settings)",
    ),
    (
        ".config/opencode",
        Some(Runtime::Opencode),
        "OpenCode's user config dir (config, plugins, tools, agents, AGENTS.md)",
    ),
    (
        ".opencode",
        Some(Runtime::Opencode),
        "an OpenCode config dir (plugins, tools, agents)",
    ),
    (
        ".local/share/opencode",
        Some(Runtime::Opencode),
        "OpenCode's data dir (auth.json, whose well-known entries fetch remote config)",
    ),
    (
        ".local/state/opencode",
        Some(Runtime::Opencode),
        "OpenCode's state dir",
    ),
    (
        ".cache/opencode",
        Some(Runtime::Opencode),
        "OpenCode's cache (npm plugins and providers it imports, rg, the models catalogue)",
    ),
    (
        ".bun",
        Some(Runtime::Opencode),
        "Bun's transpiler cache (a saved module runs in place of the verified plugin's source)",
    ),
    (
        ".cache/bun",
        Some(Runtime::Opencode),
        "Bun's transpiler cache under XDG_CACHE_HOME",
    ),
    (
        ".claude/CLAUDE.md",
        Some(Runtime::Opencode),
        "OpenCode's user instructions (off by OPENCODE_DISABLE_CLAUDE_CODE, kept out all the same)",
    ),
];

/// Why `runtime` may not keep the `dirs.home_keep` entry `keep`: the path of
/// [`RUNTIME_HOME_PATHS`] it is, lies in or holds, and what reads it (`runtime: command` runs
/// what the operator chose: none).
pub fn home_keep_problem(runtime: Runtime, keep: &str) -> Option<String> {
    if runtime == Runtime::Command {
        return None;
    }
    let under = |a: &str, b: &str| a == b || a.starts_with(&format!("{b}/"));
    RUNTIME_HOME_PATHS
        .iter()
        .filter(|(_, only, _)| only.is_none_or(|r| r == runtime))
        .find(|(path, _, _)| under(keep, path) || under(path, keep))
        .map(|(path, _, why)| {
            format!(
                "keeping {keep:?} would keep ~/{path} for the next iteration, unverified: {why}; \
                 keep a narrower path (a cache such as .cache/uv)"
            )
        })
}

fn check_abs(name: &str, path: &str) -> Result<(), ManifestError> {
    match sandbox_path_problem(path) {
        Some(problem) => Err(field(name, problem)),
        None => Ok(()),
    }
}

impl Manifest {
    /// The skills trees (role `skill`, kind `data`), in manifest order: what the runtime is
    /// given as skills.
    pub fn skill_trees(&self) -> impl Iterator<Item = &TreePin> {
        self.trees
            .iter()
            .filter(|t| t.role == PinRole::Skill && t.kind == TreeKind::Data)
    }

    /// The runtime directories with defaults applied (see [`RuntimeDirPaths`]).
    pub fn runtime_dirs(&self) -> RuntimeDirPaths {
        let base = std::path::Path::new(&self.workdir)
            .parent()
            .unwrap_or(std::path::Path::new("/"))
            .to_string_lossy()
            .trim_end_matches('/')
            .to_string();
        let dirs = &self.dirs;
        let config_name = match self.runtime {
            Runtime::Pi => "pi-config",
            Runtime::Claude => "claude-config",
            Runtime::Codex => "codex-home",
            Runtime::Opencode => "opencode-config",
            Runtime::Command => "config",
        };
        let config = dirs
            .config
            .clone()
            .unwrap_or_else(|| format!("{base}/{config_name}"));
        RuntimeDirPaths {
            home: dirs.home.clone().unwrap_or_else(|| format!("{base}/home")),
            tmp: dirs.tmp.clone().unwrap_or_else(|| format!("{base}/tmp")),
            sessions: dirs
                .sessions
                .clone()
                .unwrap_or_else(|| format!("{}/sessions", config.trim_end_matches('/'))),
            uses_sessions: self.runtime == Runtime::Pi || dirs.sessions.is_some(),
            config,
        }
    }

    /// Parses and validates a manifest.
    pub fn from_json(bytes: &[u8]) -> Result<Manifest, ManifestError> {
        // Check the version before the shape, so a newer manifest gets the version message.
        // A struct that reads only `version` (serde skips the rest without building it) keeps
        // a 20,000-file manifest from being held twice in memory as a JSON tree.
        #[derive(Deserialize)]
        struct VersionOnly {
            version: Option<serde_json::Number>,
        }
        let probe: VersionOnly =
            serde_json::from_slice(bytes).map_err(|e| ManifestError::Parse(e.to_string()))?;
        match probe.version.as_ref().and_then(serde_json::Number::as_u64) {
            Some(v) if v == u64::from(MANIFEST_VERSION) => {}
            Some(v) => {
                return Err(ManifestError::Version {
                    found: u32::try_from(v).unwrap_or(u32::MAX),
                })
            }
            None => return Err(field("version", "missing or not a number")),
        }
        let manifest: Manifest =
            serde_json::from_slice(bytes).map_err(|e| ManifestError::Parse(e.to_string()))?;
        manifest.validate()?;
        Ok(manifest)
    }

    /// Serializes the manifest as pretty JSON.
    pub fn to_json_pretty(&self) -> String {
        // Serializing plain data structs to a String cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Checks everything serde cannot: digests, absolute paths, unique names, sane limits.
    pub fn validate(&self) -> Result<(), ManifestError> {
        if self.version != MANIFEST_VERSION {
            return Err(ManifestError::Version {
                found: self.version,
            });
        }
        if self.agent.binary.is_empty() {
            return Err(field("agent.binary", "empty"));
        }
        if self.agent.binary.contains('/') {
            check_abs("agent.binary", &self.agent.binary)?;
        }
        if let Some(sha) = &self.agent.sha256 {
            if !is_sha256_hex(sha) {
                return Err(field("agent.sha256", "not a lowercase hex sha256"));
            }
        }
        for (i, tool) in self.agent.tools.iter().flatten().enumerate() {
            if !is_tool_name(tool) {
                return Err(field(
                    format!("agent.tools[{i}]"),
                    format!("{tool:?} is not a tool name"),
                ));
            }
        }
        check_abs("workdir", &self.workdir)?;
        let mut names = std::collections::BTreeSet::new();
        for (i, tree) in self.trees.iter().enumerate() {
            let at = |f: &str| format!("trees[{i}].{f}");
            if tree.name.is_empty() || tree.name.contains(['/', '\n', '\r', '\0']) {
                return Err(field(
                    at("name"),
                    format!("{:?} is not a valid name", tree.name),
                ));
            }
            if !names.insert(tree.name.as_str()) {
                return Err(field(at("name"), format!("{:?} appears twice", tree.name)));
            }
            check_abs(&at("path"), &tree.path)?;
            if !is_sha256_hex(&tree.sha256) {
                return Err(field(at("sha256"), "not a lowercase hex sha256"));
            }
            for (j, entry) in tree.entries.iter().enumerate() {
                if entry.starts_with('/') || entry.split('/').any(|s| s == ".." || s.is_empty()) {
                    return Err(field(
                        format!("trees[{i}].entries[{j}]"),
                        format!("{entry:?} is not a relative path inside the tree"),
                    ));
                }
            }
            // A skill is text: never handed to a runtime as a plugin or extension to load.
            if tree.role == PinRole::Skill && tree.kind != TreeKind::Data {
                return Err(field(
                    at("kind"),
                    "a skill tree is data (a skill is text: the runtime is given its SKILL.md, \
                     never the tree as a plugin or extension)",
                ));
            }
            if tree.kind == TreeKind::PiExtension && tree.entries.is_empty() {
                return Err(field(
                    at("entries"),
                    "a pi extension needs at least one entry",
                ));
            }
            if tree.kind == TreeKind::OpencodePlugin
                && (tree.entries.is_empty()
                    || tree
                        .entries
                        .iter()
                        .any(|e| !(e.ends_with(".ts") || e.ends_with(".js"))))
            {
                return Err(field(
                    at("entries"),
                    "an OpenCode plugin needs at least one entry, each a .ts or .js module",
                ));
            }
            for (key, value) in &tree.env {
                if let Some(problem) = crate::env_policy::plugin_env_problems(key, value).first() {
                    return Err(field(at("env"), problem.to_string()));
                }
            }
            if let Some((j, problem)) =
                crate::env_policy::pi_args_problems(&tree.pi_args, None).first()
            {
                return Err(field(
                    format!("trees[{i}].pi_args[{j}]"),
                    problem.to_string(),
                ));
            }
        }
        for (i, file) in self.files.iter().enumerate() {
            check_abs(&format!("files[{i}].path"), &file.path)?;
            if !is_sha256_hex(&file.sha256) {
                return Err(field(
                    format!("files[{i}].sha256"),
                    "not a lowercase hex sha256",
                ));
            }
            if file.role != PinRole::Plugin && (!file.env.is_empty() || !file.pi_args.is_empty()) {
                return Err(field(
                    format!("files[{i}]"),
                    "only a single-file plugin (role plugin) takes env and pi_args",
                ));
            }
            for (key, value) in &file.env {
                if let Some(problem) = crate::env_policy::plugin_env_problems(key, value).first() {
                    return Err(field(format!("files[{i}].env"), problem.to_string()));
                }
            }
            if let Some((j, problem)) =
                crate::env_policy::pi_args_problems(&file.pi_args, None).first()
            {
                return Err(field(
                    format!("files[{i}].pi_args[{j}]"),
                    problem.to_string(),
                ));
            }
        }
        if let Some(dotenv) = &self.env.dotenv {
            check_abs("env.dotenv", dotenv)?;
        }
        for (key, value) in &self.env.set {
            if let Some(problem) = crate::env_policy::sandbox_env_problems(key, value).first() {
                return Err(field("env.set", problem.to_string()));
            }
        }
        for (key, value) in &self.env.runner {
            if let Some(problem) = crate::env_policy::runner_env_problems(key, value).first() {
                return Err(field("env.runner", problem.to_string()));
            }
        }
        for (name, dir) in [
            ("dirs.home", &self.dirs.home),
            ("dirs.tmp", &self.dirs.tmp),
            ("dirs.config", &self.dirs.config),
            ("dirs.sessions", &self.dirs.sessions),
            ("output.stdout", &self.output.stdout),
            ("output.stderr", &self.output.stderr),
        ] {
            if let Some(dir) = dir {
                check_abs(name, dir)?;
            }
        }
        for (i, p) in self.dirs.home_keep.iter().enumerate() {
            if !is_plain_relative_path(p) {
                return Err(field(
                    format!("dirs.home_keep[{i}]"),
                    format!("{p:?} is not a plain relative path below HOME"),
                ));
            }
            if let Some(problem) = home_keep_problem(self.runtime, p) {
                return Err(field(format!("dirs.home_keep[{i}]"), problem));
            }
        }
        for (i, p) in self.confinement.read_only.iter().enumerate() {
            check_abs(&format!("confinement.read_only[{i}]"), p)?;
        }
        for (i, p) in self.confinement.read_write.iter().enumerate() {
            check_abs(&format!("confinement.read_write[{i}]"), p)?;
        }
        if self.user.uid == 0 && !self.confinement.allow_root {
            return Err(field(
                "user.uid",
                "the agent may not run as root (set confinement.allow_root only for tests)",
            ));
        }
        if self.limits.timeout_ms == 0 {
            return Err(field("limits.timeout_ms", "must be greater than 0"));
        }
        if self.limits.processes == 0 {
            return Err(field("limits.processes", "must be greater than 0"));
        }
        if self.limits.memory_bytes < MIN_MEMORY_BYTES {
            return Err(field(
                "limits.memory_bytes",
                format!("must be at least {MIN_MEMORY_BYTES} (16 MiB)"),
            ));
        }
        if self.limits.disk_bytes.is_some_and(|d| d < MIN_DISK_BYTES) {
            return Err(field(
                "limits.disk_bytes",
                format!("must be at least {MIN_DISK_BYTES} (1 MiB)"),
            ));
        }
        if let Some(network) = &self.network {
            network.check().map_err(|e| field("network", e))?;
        }
        if let Some(model) = &self.model {
            model
                .check(self.network.as_ref())
                .map_err(|e| field("model", e))?;
            if model.pi_provider.is_some() {
                if self.runtime != Runtime::Pi {
                    return Err(field("model.pi_provider", "only for the pi runtime"));
                }
                let models_json = Path::new(&self.runtime_dirs().config).join("models.json");
                let pinned = self.files.iter().any(|f| Path::new(&f.path) == models_json);
                if model.rewritten_models_json.is_some() && !pinned {
                    return Err(field(
                        "model.rewritten_models_json",
                        format!("the manifest does not pin {}", models_json.display()),
                    ));
                }
                if model.rewritten_models_json.is_none() && pinned {
                    return Err(field(
                        "model.pi_provider",
                        format!(
                            "the manifest pins {}, which the supervisor would write",
                            models_json.display()
                        ),
                    ));
                }
            }
        }
        if self.runtime != Runtime::Command && self.prompt.is_none() {
            return Err(field(
                "prompt",
                format!("the {} runtime needs a prompt", self.runtime.as_str()),
            ));
        }
        Ok(())
    }
}

mod file_listing;
mod limits;
pub mod model;
pub mod network;
mod stored_listing;
pub use file_listing::FileListing;
pub use limits::{
    Limits, Retention, DEFAULT_MEMORY_BYTES, DEFAULT_PROCESSES, MIN_DISK_BYTES, MIN_MEMORY_BYTES,
};
pub use model::ModelRoute;
pub use network::{
    DialFrom, Endpoint, EndpointError, NetworkPolicy, PLATFORMS, PLATFORM_PROXY_VARS,
};
pub use stored_listing::{ListingWriter, StoredListing};

#[cfg(test)]
mod tests;
