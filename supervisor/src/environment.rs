//! Step 3 of an iteration: build the agent's environment from scratch.
//!
//! Nothing is inherited implicitly. The layers, in order:
//!
//! 1. the **baseline** (trusted): the image environment the supervisor captured at start;
//! 2. the sandbox **`.env`** (untrusted: an earlier iteration or the repository writes it,
//!    `manifest.env.dotenv`), parsed as data by [`crate::dotenv`] (a missing file adds nothing;
//!    a symlink, a non-regular file or an unreadable one is an error; refused lines are reported
//!    by number, key and reason). Refused besides the grammar: a name `--pass-env` passed or
//!    the harness `env:` sets (the reason names that layer: `operator_names`), a name only
//!    a trusted layer may set ([`env_policy::untrusted_denial`]: proxies, TLS trust, telemetry,
//!    debug output, programs the runtime runs), a `NAME=value` over
//!    [`DOTENV_MAX_ENTRY_BYTES`], and assignments past [`DOTENV_MAX_TOTAL_BYTES`] for the whole
//!    file;
//! 3. the harness **`env.set`** (trusted), then the **runner** values (`env.runner`, trusted:
//!    `pitcrew run --runner-env`, names in a runner namespace only, which no `.env`, harness
//!    `env:` or plugin `env:` may set);
//! 4. the **deny rules**: [`env_policy::loader_denial`] removes every loader/interpreter control
//!    set by any layer so far; each removed name is reported once, with the layer that set the
//!    value that was removed and the rule that matched;
//! 5. the **runner pins** (see [`common_pins`], [`pi_pins`], [`claude_pins`],
//!    [`claude_context_pins`]);
//! 6. each tree's plugin **`env`** (untrusted), in manifest order, validated again with
//!    [`env_policy::plugin_env_problems`] (a problem, a pinned name, or a name `--pass-env`
//!    passed or the harness `env:` sets, is an error).
//!
//! The result must fit `execve`: a `NAME=value` over [`ENV_MAX_ENTRY_BYTES`] or an environment
//! over [`ENV_MAX_TOTAL_BYTES`] is an error naming the variables and their layers (exit 125),
//! never a launch that fails with `E2BIG` (126). The `.env` limits keep the `.env` alone from
//! getting there.
//!
//! Reports carry names only, never values; [`EnvOutcome::env`] itself is never serialized.
//! [`EnvOutcome::layers`] says which layer set each variable of the result.
//!
//! Default runtime directories (when `manifest.dirs` leaves them unset), with `BASE` the parent
//! of `manifest.workdir` (`/` if it has none): `HOME` = `BASE/home`, `TMPDIR` = `BASE/tmp`,
//! config dir = `BASE/pi-config` (pi), `BASE/claude-config` (claude) or `BASE/config`
//! (command), sessions = `<config>/sessions`. See [`Manifest::runtime_dirs`].

use crate::dotenv::{self, Denial, DotenvRefusal};
use crate::env_policy::{self, DenyRule, EnvProblem};
use crate::manifest::{ContextFiles, Manifest, Runtime};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::path::Path;

/// The largest `.env` file read (bigger is an error, not a truncation).
pub const DOTENV_MAX_BYTES: u64 = 1024 * 1024;

/// The longest `NAME=value` a `.env` line may produce, in bytes (the kernel refuses a string
/// over 131072 bytes with its NUL, `MAX_ARG_STRLEN`); a longer one is a named refusal.
pub const DOTENV_MAX_ENTRY_BYTES: usize = 64 * 1024;

/// The most bytes all accepted `.env` assignments together may take (`NAME=value` and a NUL
/// each, every assignment counted, expansions included); past it lines are refused by name.
pub const DOTENV_MAX_TOTAL_BYTES: usize = 256 * 1024;

/// The longest `NAME=value` of the built environment (the kernel's `MAX_ARG_STRLEN` less the
/// NUL); a longer one is an error (exit 125).
pub const ENV_MAX_ENTRY_BYTES: usize = 128 * 1024 - 1;

/// The most bytes the built environment may take as `execve` counts it (each `NAME=value`, its
/// NUL and its pointer), a quarter of the usual 2 MiB `ARG_MAX`, so the argv has the rest;
/// more is an error (exit 125).
pub const ENV_MAX_TOTAL_BYTES: usize = 512 * 1024;

/// `PATH` when no layer sets one.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Which layer set a variable: serialized as `baseline`, `pass-env`, `dotenv`, `harness`,
/// `runner`, `pin` or `plugin:<tree path>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum EnvSource {
    /// The image environment captured at supervisor start.
    Baseline,
    /// A variable of that environment the host passed by name (`pitcrew run --pass-env`): the
    /// local engine starts the supervisor with it, a container engine adds it to the
    /// container's, and the manifest's `env.passed` names it, so the record can tell it from
    /// the image's own. The same trusted layer as [`EnvSource::Baseline`].
    PassEnv,
    /// The sandbox `.env` file.
    Dotenv,
    /// The harness `env.set` block.
    Harness,
    /// The manifest's `env.runner` (`pitcrew run --runner-env`): the runner's per-run values.
    Runner,
    /// A runner pin.
    Pin,
    /// The `env` of the plugin tree at this path.
    Plugin(String),
}

impl fmt::Display for EnvSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EnvSource::Baseline => f.write_str("baseline"),
            EnvSource::PassEnv => f.write_str("pass-env"),
            EnvSource::Dotenv => f.write_str("dotenv"),
            EnvSource::Harness => f.write_str("harness"),
            EnvSource::Runner => f.write_str("runner"),
            EnvSource::Pin => f.write_str("pin"),
            EnvSource::Plugin(path) => write!(f, "plugin:{path}"),
        }
    }
}

impl From<EnvSource> for String {
    fn from(source: EnvSource) -> String {
        source.to_string()
    }
}

impl TryFrom<String> for EnvSource {
    type Error = String;

    fn try_from(text: String) -> Result<EnvSource, String> {
        Ok(match text.as_str() {
            "baseline" => EnvSource::Baseline,
            "pass-env" => EnvSource::PassEnv,
            "dotenv" => EnvSource::Dotenv,
            "harness" => EnvSource::Harness,
            "runner" => EnvSource::Runner,
            "pin" => EnvSource::Pin,
            _ => match text.strip_prefix("plugin:") {
                Some(path) => EnvSource::Plugin(path.to_string()),
                None => return Err(format!("unknown environment layer {text:?}")),
            },
        })
    }
}

/// A variable removed by a deny rule (name only, never the value).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemovedVar {
    /// The removed name.
    pub name: String,
    /// The layer that set the value that was removed (the last one to set it).
    pub source: EnvSource,
    /// The rule that matched (`NODE_OPTIONS (Node loads or changes code from it)`).
    pub rule: String,
}

/// The environment to launch with, and what was removed or refused on the way.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvOutcome {
    /// The agent's environment, sorted by name, names unique. Never serialized: values can be
    /// credentials.
    #[serde(skip)]
    pub env: Vec<(String, String)>,
    /// Names removed by the deny rules, sorted by name.
    pub removed: Vec<RemovedVar>,
    /// `.env` lines refused by the parser.
    pub dotenv_refused: Vec<DotenvRefusal>,
    /// The layer that set each variable of [`EnvOutcome::env`] (names only). `PATH` keeps the
    /// layer whose value the pin kept, and is `pin` only when it is the default.
    pub layers: BTreeMap<String, EnvSource>,
    /// Entries of the `PATH` a layer gave that the agent's environment does not keep
    /// ([`agent_safe_path`]), in their order.
    pub path_dropped: Vec<String>,
}

/// Splits `path` into the entries the agent's `PATH` keeps and those it drops: an entry that
/// is empty or relative (the runtime runs its tools and hooks in the workspace, so it would
/// name a directory of the agent's), or that lies in one of `agent_dirs` (the workdir, the
/// agent's home, temporary, config and sessions directories, `confinement.read_write`): a
/// verified hook looking a program up on `PATH` would run what the agent planted there.
pub fn agent_safe_path(path: &str, agent_dirs: &[&str]) -> (String, Vec<String>) {
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    for entry in path.split(':') {
        if entry.is_empty() || names_agent_dir(entry, agent_dirs) {
            dropped.push(entry.to_string());
        } else {
            kept.push(entry);
        }
    }
    (kept.join(":"), dropped)
}

/// Why an `XDG_*` variable is removed although a trusted layer set it ([`points_into_agent_dirs`]).
pub const XDG_IN_AGENT_DIR: &str = "XDG_* naming a directory the agent writes that outlives the \
     iteration (the workdir, confinement.read_write): git, Claude Code and other tools would read \
     the configuration and data an earlier iteration's agent left there";

/// Whether `value` (a directory, or a `:`-separated list of them as in `XDG_DATA_DIRS`) names a
/// directory in one of `dirs`, or a relative one (resolved in the workspace, where the runtime
/// runs its tools), or one with a `..` component.
pub fn points_into_agent_dirs(value: &str, dirs: &[&str]) -> bool {
    value
        .split(':')
        .filter(|e| !e.is_empty())
        .any(|entry| names_agent_dir(entry, dirs))
}

/// Whether the directory `entry` may be one the agent writes: relative (resolved in the
/// workspace, where the runtime runs its tools), with a `..` component, or in one of `dirs`.
fn names_agent_dir(entry: &str, dirs: &[&str]) -> bool {
    let p = std::path::Path::new(entry);
    !p.is_absolute()
        || p.components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
        || dirs.iter().any(|d| p.starts_with(d))
}

impl EnvOutcome {
    /// The value of `name` in the built environment.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.env
            .binary_search_by(|(k, _)| k.as_str().cmp(name))
            .ok()
            .map(|i| self.env[i].1.as_str())
    }
}

/// Why the environment could not be built (the iteration fails with exit 125).
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// The `.env` file exists but could not be read.
    #[error(".env file {path}: {source}")]
    DotenvIo {
        /// The `.env` path.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The `.env` path is a symlink, not a regular file, or too large.
    #[error(".env file {path} refused: {why}")]
    DotenvRefused {
        /// The `.env` path.
        path: String,
        /// What is wrong with it.
        why: String,
    },
    /// A plugin's `env` entry fails validation.
    #[error("plugin tree {tree:?} env: {problem}")]
    PluginEnv {
        /// The tree's name.
        tree: String,
        /// The problem (names only).
        problem: EnvProblem,
    },
    /// A plugin's `env` sets a variable the runner pins.
    #[error("plugin tree {tree:?} env sets {name}, which the runner pins")]
    PluginSetsPin {
        /// The tree's name.
        tree: String,
        /// The pinned name.
        name: String,
    },
    /// A plugin's `env` sets a variable a trusted layer of the operator's sets.
    #[error("plugin tree {tree:?} env sets {name}, which the trusted layer {layer} sets: a plugin never replaces what the operator set")]
    PluginReplacesTrusted {
        /// The tree's name.
        tree: String,
        /// The name as the plugin wrote it.
        name: String,
        /// The trusted layer (`pass-env`, `harness`, `runner`).
        layer: &'static str,
    },
    /// One variable is longer than `execve` takes.
    #[error("environment: {name} (set by {layer}) is {bytes} bytes as NAME=value, over the limit of {limit} per variable")]
    EntryTooLong {
        /// The variable.
        name: String,
        /// The layer that set it.
        layer: EnvSource,
        /// Its `NAME=value` length.
        bytes: usize,
        /// [`ENV_MAX_ENTRY_BYTES`].
        limit: usize,
    },
    /// The whole environment is larger than the limit.
    #[error("environment: {bytes} bytes, over the limit of {limit}; largest: {largest}")]
    TooLarge {
        /// Its size as `execve` counts it.
        bytes: usize,
        /// [`ENV_MAX_TOTAL_BYTES`].
        limit: usize,
        /// The largest variables, `NAME (layer, N bytes)`, comma-separated.
        largest: String,
    },
}

pub use crate::manifest::RuntimeDirPaths;

/// A pinned variable: name and value.
pub type Pin = (&'static str, String);

/// A pin the supervisor decides per iteration, its name not known in advance (the model
/// route's variables).
pub type IterationPin = (String, String);

/// Pins for every runtime.
pub fn common_pins(dirs: &RuntimeDirPaths, current_path: Option<&str>) -> Vec<Pin> {
    vec![
        // JITI_FS_CACHE=false: jiti's on-disk transpile cache lives in an agent-writable dir
        // ($TMPDIR/jiti or node_modules/.cache/jiti) and validates entries only by a
        // source-hash trailer, so whoever can write it can plant code that pi then runs.
        ("JITI_FS_CACHE", "false".to_string()),
        // NODE_DISABLE_COMPILE_CACHE=1: Node >= 22 (pi 1.6 calls module.enableCompileCache())
        // caches compiled code under $TMPDIR/node-compile-cache, agent-writable between
        // iterations.
        ("NODE_DISABLE_COMPILE_CACHE", "1".to_string()),
        // PYTHONNOUSERSITE=1: Python puts the user site directory in HOME
        // (~/.local/lib/pythonX.Y/site-packages) on sys.path before the system's and runs the
        // `.pth` files there at every start, so a verified Python hook would run what the
        // agent's tools wrote there.
        ("PYTHONNOUSERSITE", "1".to_string()),
        // HOME: a private home the supervisor chose, so dotfiles of an earlier layer or of the
        // image user are not read.
        ("HOME", dirs.home.clone()),
        // TMPDIR: a private temp dir; jiti and Node derive cache locations from it.
        ("TMPDIR", dirs.tmp.clone()),
        // PATH: always set (a runtime without PATH resolves tools unpredictably); kept from the
        // layers above when one sets it, else a fixed system default.
        (
            "PATH",
            current_path
                .filter(|p| !p.is_empty())
                .unwrap_or(DEFAULT_PATH)
                .to_string(),
        ),
    ]
}

/// Pins for pi.
pub fn pi_pins(dirs: &RuntimeDirPaths) -> Vec<Pin> {
    vec![
        // PI_CODING_AGENT_DIR: pi reads settings.json/models.json (which can execute commands)
        // from its agent dir; it holds the pinned, verified files and nothing else when the
        // agent starts (`dir_reset`).
        ("PI_CODING_AGENT_DIR", dirs.config.clone()),
        // PI_CODING_AGENT_SESSION_DIR: sessions go where the supervisor collects them
        // (--session-dir also says so; the variable covers sub-agents started by pi).
        ("PI_CODING_AGENT_SESSION_DIR", dirs.sessions.clone()),
        // PI_OFFLINE=1: no package installs or updates, no tool downloads, no catalog refresh:
        // nothing unverified is fetched and loaded.
        ("PI_OFFLINE", "1".to_string()),
        // PI_SKIP_VERSION_CHECK=1: no network call at startup (implied by PI_OFFLINE; explicit
        // for versions that do not imply it).
        ("PI_SKIP_VERSION_CHECK", "1".to_string()),
        // PI_TELEMETRY=0: no telemetry traffic out of the sandbox.
        ("PI_TELEMETRY", "0".to_string()),
    ]
}

/// Pins for Claude Code.
pub fn claude_pins(dirs: &RuntimeDirPaths) -> Vec<Pin> {
    vec![
        // CLAUDE_CONFIG_DIR: replaces ~/.claude (settings, hooks, plugins, credentials); a fresh,
        // supervisor-owned dir keeps settings of earlier runs or of the image out.
        ("CLAUDE_CONFIG_DIR", dirs.config.clone()),
        // DISABLE_AUTOUPDATER=1: the binary must stay the one that was verified.
        ("DISABLE_AUTOUPDATER", "1".to_string()),
        // CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1: no updates, telemetry, error reports or
        // feature-flag fetches (any non-empty value works).
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_string()),
        // CLAUDE_CODE_DISABLE_BUNDLED_SKILLS=1: none of the skills built into Claude Code is
        // offered to the model beside the verified ones.
        ("CLAUDE_CODE_DISABLE_BUNDLED_SKILLS", "1".to_string()),
        // CLAUDE_CODE_DISABLE_AUTO_MEMORY=1: no memory directory the model is told to read and
        // write from one session to the next (and no instructions for it in the system prompt).
        ("CLAUDE_CODE_DISABLE_AUTO_MEMORY", "1".to_string()),
        // CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL=1: the official plugin
        // marketplace is never installed (fetched) into the config dir.
        (
            "CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL",
            "1".to_string(),
        ),
        // CLAUDE_CODE_SIMPLE=0, CLAUDE_CODE_SAFE_MODE=0: what `--bare` and `--safe-mode` (refused
        // in agent.args) read; set, Claude Code runs none of the hooks of the verified
        // `--settings` file and plugins, the hook adapter included.
        ("CLAUDE_CODE_SIMPLE", "0".to_string()),
        ("CLAUDE_CODE_SAFE_MODE", "0".to_string()),
    ]
}

/// Pins for the Codex CLI.
pub fn codex_pins(dirs: &RuntimeDirPaths) -> Vec<Pin> {
    vec![
        // CODEX_HOME: replaces ~/.codex (config.toml, AGENTS.md, skills, hooks, rules, state);
        // the config dir, emptied to the pinned files before every iteration (`dir_reset`), so
        // nothing one iteration's Codex or agent wrote there is read by the next.
        ("CODEX_HOME", dirs.config.clone()),
    ]
}

/// Pins for OpenCode ([`crate::opencode_config::pins`]): its switches on, its config dir, the
/// XDG homes at their defaults under `HOME`.
pub fn opencode_pins(dirs: &RuntimeDirPaths) -> Vec<Pin> {
    crate::opencode_config::pins(dirs)
}

/// The pins for Claude Code by `agent.context_files`. Under `uploaded` and `none`,
/// `CLAUDE_CODE_DISABLE_GIT_INSTRUCTIONS=1`: Claude Code otherwise puts a snapshot of the
/// workdir's repository into the model's context at startup (its branch, `git status`, the
/// last commits and their messages), so what one iteration's agent commits would be the next
/// one's context, and no reset can take a commit back (it also drops Claude Code's own git
/// workflow instructions). Under `none` also `CLAUDE_CODE_DISABLE_CLAUDE_MDS=1`: no
/// `CLAUDE.md` at all, not even the pinned ones of its config dir (as pi's
/// `--no-context-files` drops its agent dir's). Under `as-is` the snapshot is read and the
/// record says so (`context_files.git_status`).
pub fn claude_context_pins(context: ContextFiles) -> Vec<Pin> {
    let no_git = ("CLAUDE_CODE_DISABLE_GIT_INSTRUCTIONS", "1".to_string());
    match context {
        ContextFiles::None => vec![no_git, ("CLAUDE_CODE_DISABLE_CLAUDE_MDS", "1".to_string())],
        ContextFiles::Uploaded => vec![no_git],
        ContextFiles::AsIs => Vec::new(),
    }
}

/// The names pinned for some runtime: whatever an earlier layer sets for them is replaced.
pub fn pinned_names() -> Vec<&'static str> {
    let dirs = RuntimeDirPaths {
        home: String::new(),
        tmp: String::new(),
        config: String::new(),
        sessions: String::new(),
        uses_sessions: true,
    };
    let mut names: Vec<&'static str> = common_pins(&dirs, None)
        .into_iter()
        .chain(pi_pins(&dirs))
        .chain(claude_pins(&dirs))
        .chain(codex_pins(&dirs))
        .chain(opencode_pins(&dirs))
        .chain(claude_context_pins(ContextFiles::None))
        .map(|(name, _)| name)
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// Every pin for the manifest's runtime.
pub fn runner_pins(
    manifest: &Manifest,
    dirs: &RuntimeDirPaths,
    current_path: Option<&str>,
) -> Vec<Pin> {
    let mut pins = common_pins(dirs, current_path);
    match manifest.runtime {
        Runtime::Pi => pins.extend(pi_pins(dirs)),
        Runtime::Claude => {
            pins.extend(claude_pins(dirs));
            pins.extend(claude_context_pins(manifest.agent.context_files));
        }
        Runtime::Codex => pins.extend(codex_pins(dirs)),
        Runtime::Opencode => pins.extend(opencode_pins(dirs)),
        Runtime::Command => {}
    }
    pins
}

/// The variables that point an agent at the egress proxy listening on `127.0.0.1:port`: the
/// proxy variables most clients read (upper and lower case; `ALL_PROXY` too, for clients
/// that only read it and speak HTTP `CONNECT` to it), loopback kept direct (the mirrored
/// endpoints listen there), and Node's switch that makes its `fetch` honour them. Advisory: the
/// namespace, not these, is what keeps the agent in.
pub fn network_pins(port: u16) -> Vec<IterationPin> {
    let url = format!("http://127.0.0.1:{port}");
    let mut pins: Vec<Pin> = ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"]
        .into_iter()
        .map(|name| (name, url.clone()))
        .collect();
    pins.push(("NO_PROXY", "localhost,127.0.0.1,::1".to_string()));
    pins.push(("no_proxy", "localhost,127.0.0.1,::1".to_string()));
    pins.push(("NODE_USE_ENV_PROXY", "1".to_string()));
    pins.into_iter().map(|(n, v)| (n.to_string(), v)).collect()
}

/// The variable in which the host tells a sandbox's supervisor, when it starts it, which names
/// of its environment the operator passed with `--pass-env` (comma-separated). It never
/// reaches the agent.
pub const PASSED_AT_START: &str = "PITCREW_PASSED_ENV";

/// Builds the environment: baseline, `.env` as data, harness `env.set`, deny rules, runner
/// pins, plugin env, then the size check (see the module doc).
pub fn build(
    manifest: &Manifest,
    dirs: &RuntimeDirPaths,
    baseline: &[(String, String)],
) -> Result<EnvOutcome, EnvError> {
    build_with(manifest, dirs, baseline, &[])
}

/// [`build`] with `extra_pins` set after the runner pins, as pins (the supervisor's own values
/// for this iteration: the egress proxy's address, [`network_pins`]).
pub fn build_with(
    manifest: &Manifest,
    dirs: &RuntimeDirPaths,
    baseline: &[(String, String)],
    extra_pins: &[IterationPin],
) -> Result<EnvOutcome, EnvError> {
    let mut outcome = EnvOutcome::default();
    let mut vars: BTreeMap<String, (String, EnvSource)> = BTreeMap::new();

    // The names the host passed when it started this sandbox: a later run's manifest cannot
    // name them (`--pass-env` is refused on an existing sandbox), and they stay the operator's.
    let passed_at_start: Vec<&str> = baseline
        .iter()
        .find(|(name, _)| name == PASSED_AT_START)
        .map(|(_, names)| names.split(',').filter(|n| !n.is_empty()).collect())
        .unwrap_or_default();
    for (name, value) in baseline {
        // A name exec cannot pass on is dropped (the baseline comes from our own environ), and
        // so is the host's word on what it passed.
        if name.is_empty()
            || name.contains(['=', '\0'])
            || value.contains('\0')
            || name == PASSED_AT_START
        {
            continue;
        }
        let source =
            if manifest.env.passed.contains(name) || passed_at_start.contains(&name.as_str()) {
                EnvSource::PassEnv
            } else {
                EnvSource::Baseline
            };
        vars.insert(name.clone(), (value.clone(), source));
    }

    let operator = operator_names(manifest, &vars);
    let operator_layer = |name: &str| operator.get(&name.to_ascii_uppercase()).copied();

    if let Some(path) = &manifest.env.dotenv {
        if let Some(bytes) = read_dotenv(path)? {
            let deny = |name: &str| match operator_layer(name) {
                Some(layer) => Some(Denial::SetByTrustedLayer(layer)),
                None => env_policy::untrusted_denial(name).map(Denial::TrustedOnly),
            };
            let rules = dotenv::Rules {
                max_entry_bytes: DOTENV_MAX_ENTRY_BYTES,
                max_total_bytes: DOTENV_MAX_TOTAL_BYTES,
                deny_name: &deny,
            };
            let parsed = dotenv::parse(
                &bytes,
                |name| vars.get(name).map(|(v, _)| v.clone()),
                &rules,
            );
            for a in parsed.assignments {
                vars.insert(a.key, (a.value, EnvSource::Dotenv));
            }
            outcome.dotenv_refused = parsed.refused;
        }
    }

    for (name, value) in &manifest.env.set {
        vars.insert(name.clone(), (value.clone(), EnvSource::Harness));
    }
    for (name, value) in &manifest.env.runner {
        vars.insert(name.clone(), (value.clone(), EnvSource::Runner));
    }

    vars.retain(|name, (_, source)| match env_policy::loader_denial(name) {
        Some(rule) => {
            outcome.removed.push(RemovedVar {
                name: name.clone(),
                source: source.clone(),
                rule: rule.to_string(),
            });
            false
        }
        None => true,
    });

    let mut agent_dirs: Vec<&str> = vec![manifest.workdir.as_str()];
    agent_dirs.extend(dirs.agent_dirs());
    agent_dirs.extend(manifest.confinement.read_write.iter().map(String::as_str));
    // Only trusted layers may set `XDG_*`, but one of them may still point it where the agent
    // writes and nothing resets: the workdir, `confinement.read_write`.
    let persistent: Vec<&str> = std::iter::once(manifest.workdir.as_str())
        .chain(manifest.confinement.read_write.iter().map(String::as_str))
        .collect();
    vars.retain(|name, (value, source)| {
        if !name.starts_with("XDG_") || !points_into_agent_dirs(value, &persistent) {
            return true;
        }
        outcome.removed.push(RemovedVar {
            name: name.clone(),
            source: source.clone(),
            rule: XDG_IN_AGENT_DIR.to_string(),
        });
        false
    });
    let current_path = vars
        .get("PATH")
        .map(|(p, source)| {
            let (kept, dropped) = agent_safe_path(p, &agent_dirs);
            outcome.path_dropped = dropped;
            (kept, source.clone())
        })
        .filter(|(p, _)| !p.is_empty());
    let mut pins: Vec<IterationPin> = runner_pins(
        manifest,
        dirs,
        current_path.as_ref().map(|(p, _)| p.as_str()),
    )
    .into_iter()
    .map(|(n, v)| (n.to_string(), v))
    .collect();
    pins.extend(extra_pins.iter().cloned());
    for (name, value) in &pins {
        let source = match &current_path {
            Some((_, source)) if *name == "PATH" => source.clone(),
            _ => EnvSource::Pin,
        };
        vars.insert(name.clone(), (value.clone(), source));
    }

    // Plugin trees, then single-file plugins (named by their path).
    let plugins = manifest
        .trees
        .iter()
        .map(|t| (&t.name, &t.path, &t.env))
        .chain(manifest.files.iter().map(|f| (&f.path, &f.path, &f.env)));
    for (plugin, path, env) in plugins {
        for (name, value) in env {
            if let Some(problem) = env_policy::plugin_env_problems(name, value)
                .into_iter()
                .next()
            {
                return Err(EnvError::PluginEnv {
                    tree: plugin.clone(),
                    problem,
                });
            }
            if pins.iter().any(|(pin, _)| pin.eq_ignore_ascii_case(name)) {
                return Err(EnvError::PluginSetsPin {
                    tree: plugin.clone(),
                    name: name.clone(),
                });
            }
            if let Some(layer) = operator_layer(name) {
                return Err(EnvError::PluginReplacesTrusted {
                    tree: plugin.clone(),
                    name: name.clone(),
                    layer,
                });
            }
            let source = EnvSource::Plugin(path.clone());
            vars.insert(name.clone(), (value.clone(), source));
        }
    }

    check_size(&vars)?;
    for (name, (value, source)) in vars {
        outcome.layers.insert(name.clone(), source);
        outcome.env.push((name, value));
    }
    Ok(outcome)
}

/// The names a trusted layer of the operator's sets (what `--pass-env` passed, the harness
/// `env:`, the runner's `--runner-env`), ASCII upper case, each with that layer's name (a name both set: `harness`, whose
/// value wins). An untrusted layer never replaces them: a `.env` line setting one (in any case)
/// is refused naming the layer, a plugin's `env:` entry is an error.
///
/// The image's own environment (`baseline`) is not among them: it holds defaults a `.env` is
/// expected to change (`PATH`, the locale, `NODE_ENV`), and whatever in it routes traffic,
/// changes trust or carries credentials is trusted-only by name whatever the layer
/// ([`env_policy::untrusted_denial`]). The pinned names are not either: the pins decide them,
/// and a `PATH` the local engine passed stays the one a `.env` prepends a workspace `bin/` to.
fn operator_names(
    manifest: &Manifest,
    vars: &BTreeMap<String, (String, EnvSource)>,
) -> BTreeMap<String, &'static str> {
    let pinned = pinned_names();
    let passed = vars
        .iter()
        .filter(|(_, (_, source))| *source == EnvSource::PassEnv)
        .map(|(name, _)| (name, "pass-env"));
    let harness = manifest.env.set.keys().map(|name| (name, "harness"));
    let runner = manifest.env.runner.keys().map(|name| (name, "runner"));
    passed
        .chain(harness)
        .chain(runner)
        .filter(|(name, _)| !pinned.iter().any(|p| p.eq_ignore_ascii_case(name)))
        .map(|(name, layer)| (name.to_ascii_uppercase(), layer))
        .collect()
}

/// The size of `NAME=value` as `execve` counts it in the total: the string, its NUL and its
/// pointer.
fn exec_cost(name: &str, value: &str) -> usize {
    name.len() + 1 + value.len() + 1 + std::mem::size_of::<usize>()
}

/// Refuses an environment `execve` would refuse (`E2BIG`), naming what makes it so.
fn check_size(vars: &BTreeMap<String, (String, EnvSource)>) -> Result<(), EnvError> {
    for (name, (value, source)) in vars {
        let bytes = name.len() + 1 + value.len();
        if bytes > ENV_MAX_ENTRY_BYTES {
            return Err(EnvError::EntryTooLong {
                name: name.clone(),
                layer: source.clone(),
                bytes,
                limit: ENV_MAX_ENTRY_BYTES,
            });
        }
    }
    let bytes: usize = vars.iter().map(|(n, (v, _))| exec_cost(n, v)).sum();
    if bytes > ENV_MAX_TOTAL_BYTES {
        let mut sizes: Vec<(usize, &String, &EnvSource)> = vars
            .iter()
            .map(|(n, (v, source))| (exec_cost(n, v), n, source))
            .collect();
        sizes.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        let largest = sizes
            .iter()
            .take(5)
            .map(|(size, name, source)| format!("{name} ({source}, {size} bytes)"))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(EnvError::TooLarge {
            bytes,
            limit: ENV_MAX_TOTAL_BYTES,
            largest,
        });
    }
    Ok(())
}

/// The first line of the generated policy tables in `docs/manifest.md`.
pub const POLICY_DOC_BEGIN: &str = "<!-- BEGIN env-policy: generated from supervisor/src/env_policy.rs and environment.rs by `PITCREW_UPDATE_DOCS=1 cargo test -p pitcrew-supervisor --lib policy_doc`; edit the code, not these tables -->";

/// The last line of the generated policy tables in `docs/manifest.md`.
pub const POLICY_DOC_END: &str = "<!-- END env-policy -->";

/// The environment policy as the Markdown tables of `docs/manifest.md` (between
/// [`POLICY_DOC_BEGIN`] and [`POLICY_DOC_END`]): the pins, the four rule lists and the size
/// limits, so the documented lists are the code's.
pub fn policy_doc() -> String {
    let dirs = RuntimeDirPaths {
        home: "dirs.home".into(),
        tmp: "dirs.tmp".into(),
        config: "dirs.config".into(),
        sessions: "dirs.sessions".into(),
        uses_sessions: true,
    };
    let mut out = String::from(
        "#### Pinned by the supervisor\n\n\
         Set after the harness `env:`, whatever an earlier layer said; a plugin's `env:` may not \
         set a pin of its runtime.\n\n| name | runtime | value |\n|---|---|---|\n",
    );
    for (runtime, pins) in [
        ("all", common_pins(&dirs, None)),
        ("pi", pi_pins(&dirs)),
        ("claude", claude_pins(&dirs)),
        ("opencode", opencode_pins(&dirs)),
        (
            "claude, `agent.context_files: uploaded`",
            claude_context_pins(ContextFiles::Uploaded),
        ),
        (
            "claude, `agent.context_files: none`",
            claude_context_pins(ContextFiles::None),
        ),
    ] {
        for (name, value) in pins {
            let value = if name == "PATH" {
                format!("the layers' `PATH` when one sets it, without its empty, relative and agent-directory entries (`env.path_dropped`), else `{value}`")
            } else {
                format!("`{value}`")
            };
            out.push_str(&format!("| `{name}` | {runtime} | {value} |\n"));
        }
    }
    let sections: [(&str, &[DenyRule]); 5] = [
        (
            "#### Stripped from every layer (loader rules)\n\n\
             Removed from the image's environment, the `.env` and the harness `env:` (each removal \
             recorded in `env.removed`); refused in the harness `env:`, a plugin's `env:` and \
             `--pass-env`.",
            env_policy::LOADER_RULES,
        ),
        (
            "#### Only a trusted layer may set (refused in the `.env` and a plugin's `env:`)\n\n\
             The image's environment, the harness `env:` and `--pass-env` may set them (except \
             the pinned and reserved names, and in the harness `env:` the egress names below); \
             a `.env` line is refused by name \
             (`env.dotenv_refused`), a plugin's `env:` entry is an error. \
             Only `CLAUDE_CONFIG_DIR` and `PI_CODING_AGENT_DIR` are pinned (in their runtime): when no \
             trusted layer sets one of the others, it is absent and programs use their default \
             (under the pinned `HOME`). Beyond this list, whatever name `--pass-env` passed or \
             the harness `env:` sets (pinned names aside), the `.env` and a plugin's `env:` never \
             replace: the `.env` line is refused naming the layer, the plugin's entry is an error.",
            env_policy::TRUSTED_ONLY_RULES,
        ),
        (
            "#### Reserved: the harness `env:` and `--pass-env` may not set (besides the loader \
             rules)",
            env_policy::SANDBOX_ENV_RULES,
        ),
        (
            "#### Egress: refused in the harness `env:` (besides the reserved names)\n\n\
             pitcrew sets the agent's proxy itself, and where the agent connects is the harness's \
             `network:`: the harness `env:` may not set a proxy, change TLS trust or name a \
             program git connects through. The image's environment and `--pass-env` still may \
             (a site's own proxy under `network: open`, the CA of an image behind a \
             TLS-inspecting proxy); the `.env` and a plugin's `env:` never may (above). \
             Endpoint variables (`ANTHROPIC_BASE_URL`) stay the harness's: the default network \
             follows them.",
            env_policy::EGRESS_ENV_RULES,
        ),
        (
            "#### Refused in a plugin's `env:` (besides the loader and trusted-only lists)",
            env_policy::PLUGIN_ENV_RULES,
        ),
    ];
    for (heading, rules) in sections {
        out.push_str(&format!("\n{heading}\n\n| name | why |\n|---|---|\n"));
        for rule in rules {
            let reason = rule.reason.replace('*', "\\*");
            out.push_str(&format!("| `{}` | {reason} |\n", rule.pattern));
        }
    }
    out.push_str(&format!(
        "\n#### Size limits\n\n| what | bytes | past it |\n|---|---|---|\n\
         | the `.env` file | {DOTENV_MAX_BYTES} | the `.env` is refused: exit 125 |\n\
         | one `NAME=value` of the `.env` | {DOTENV_MAX_ENTRY_BYTES} | the line is refused by name |\n\
         | all `.env` assignments (`NAME=value` and a NUL each; every one counted, expansions included) | {DOTENV_MAX_TOTAL_BYTES} | later lines are refused by name |\n\
         | one `NAME=value` of the built environment | {ENV_MAX_ENTRY_BYTES} | exit 125 naming it and its layer |\n\
         | the built environment (`NAME=value`, a NUL and a pointer each) | {ENV_MAX_TOTAL_BYTES} | exit 125 naming the largest variables and their layers |\n"
    ));
    out
}

/// Reads the `.env` file without following a symlink: `Ok(None)` when it does not exist.
fn read_dotenv(path: &str) -> Result<Option<Vec<u8>>, EnvError> {
    use rustix::fs::{Mode, OFlags};
    let refused = |why: &str| EnvError::DotenvRefused {
        path: path.to_string(),
        why: why.to_string(),
    };
    let io = |source: std::io::Error| EnvError::DotenvIo {
        path: path.to_string(),
        source,
    };
    let fd = match rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(rustix::io::Errno::LOOP) => return Err(refused("is a symbolic link")),
        Err(e) => return Err(io(e.into())),
    };
    let file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(refused("not a regular file"));
    }
    // The file is agent-writable content, but it is read as root: a symlinked parent directory
    // must not make us read (and hand the agent) a file it could not read itself.
    match std::fs::canonicalize(path) {
        Ok(real) if real == Path::new(path) => {}
        Ok(real) => {
            return Err(refused(&format!(
                "its path resolves through a symlink (to {})",
                real.display()
            )))
        }
        Err(e) => return Err(io(e)),
    }
    if meta.len() > DOTENV_MAX_BYTES {
        return Err(refused(&format!("larger than {DOTENV_MAX_BYTES} bytes")));
    }
    let mut bytes = Vec::new();
    file.take(DOTENV_MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > DOTENV_MAX_BYTES {
        return Err(refused(&format!("larger than {DOTENV_MAX_BYTES} bytes")));
    }
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests;
