//! The harness file (YAML): what a run loads, checked completely before anything runs.
//!
//! A harness reads like a specification: one key, one effect (reference: `README.md` and
//! `docs/manifest.md`). [`validate`] runs every check and reports *all* problems at once, each
//! with its `line:column` in the file; [`Validated::manifest`] then turns a clean harness into
//! the [`Manifest`] the supervisor verifies against, with every expected digest computed from the
//! host's own copies.
//!
//! Paths in a harness are relative to the harness file and must stay inside its directory.

use crate::env_policy;
use crate::exit_code::PinRole;
use crate::manifest::{
    Agent, EnvSpec, FileListing, FilePin, FileUse, Limits, Manifest, RuntimeDirs, TreeKind,
    TreePin, MANIFEST_VERSION,
};
use crate::plugin_format::{self, PluginClass};
use crate::tree_hash::{self, TreeDigest, TreeFormat};
use marked_yaml::types::{MarkedMappingNode, MarkedScalarNode, MarkedSequenceNode};
use marked_yaml::Node;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

pub use crate::manifest::Runtime;

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
    /// The file could not be read.
    #[error("harness {path}: {source}")]
    Read {
        /// The harness path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
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
    /// Absolute host path of the directory.
    pub host_path: PathBuf,
    /// The upload name (the directory's base name).
    pub name: String,
    /// Plugin environment (`env:`).
    pub env: BTreeMap<String, String>,
    /// pi extension flags (`pi: {args: […]}`).
    pub pi_args: Vec<String>,
}

/// An adapter (a single pinned file) of the harness.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AdapterSpec {
    /// The path as written.
    pub path: String,
    /// Absolute host path of the file.
    pub host_path: PathBuf,
    /// What it is for (decides the exit code when it drifts).
    pub role: PinRole,
    /// How the runtime is told about it.
    #[serde(rename = "use")]
    pub usage: FileUse,
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
    /// pi tools.
    pub tools: Vec<String>,
    /// Claude `--agent`.
    pub claude_agent: Option<String>,
}

/// A harness whose fields have the right shapes (checks that need the file system are in
/// [`validate`]).
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
    /// Host directory uploaded as the agent's workspace.
    pub workdir: Option<PathBuf>,
    /// Host directory receiving run records.
    pub output: PathBuf,
    /// Host command run after each iteration; success stops the loop.
    pub validation: Option<Vec<String>>,
}

/// The largest `processes:` a harness may ask for (the kernel's own `pid_max` limit).
const MAX_PROCESSES: u64 = 4_194_304;

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

/// The result of [`validate`]: problems (errors), notes (things that load differently than a
/// reader might assume but are not errors) and, when the shapes were right, what was checked.
#[derive(Debug, Clone, Serialize)]
pub struct Validated {
    /// The parsed harness, when its shape allowed parsing.
    pub harness: Option<Harness>,
    /// Plugins with class and digest (only those that passed their checks).
    pub plugins: Vec<CheckedPlugin>,
    /// Skills with digest.
    pub skills: Vec<CheckedSkill>,
    /// Adapters with digest.
    pub adapters: Vec<CheckedAdapter>,
    /// Every problem found.
    pub problems: Vec<Problem>,
    /// Informational notes.
    pub notes: Vec<Problem>,
}

impl Validated {
    /// Whether the harness is usable.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty() && self.harness.is_some()
    }
}

/// Where things go inside the sandbox (all absolute).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxLayout {
    /// The root under which pitcrew places uploads (`/pitcrew`).
    pub root: String,
}

impl Default for SandboxLayout {
    fn default() -> Self {
        SandboxLayout {
            root: "/pitcrew".to_string(),
        }
    }
}

impl SandboxLayout {
    /// Where a plugin tree is uploaded.
    pub fn plugin(&self, name: &str) -> String {
        format!("{}/plugins/{name}", self.root)
    }
    /// Where a skills tree is uploaded.
    pub fn skill(&self, name: &str) -> String {
        format!("{}/skills/{name}", self.root)
    }
    /// Where an adapter is uploaded (config files go into the runtime config dir).
    pub fn adapter(&self, role: PinRole, file_name: &str) -> String {
        match role {
            PinRole::Config => format!("{}/{file_name}", self.config_dir()),
            _ => format!("{}/adapters/{file_name}", self.root),
        }
    }
    /// The agent's workspace.
    pub fn workdir(&self) -> String {
        format!("{}/workspace", self.root)
    }
    /// The runtime config dir (pi agent dir, Claude config dir).
    pub fn config_dir(&self) -> String {
        format!("{}/config", self.root)
    }
    /// The agent's home.
    pub fn home(&self) -> String {
        format!("{}/home", self.root)
    }
    /// The agent's tmp.
    pub fn tmp(&self) -> String {
        format!("{}/tmp", self.root)
    }
}

impl Validated {
    /// The manifest for a clean harness, with sandbox paths from `layout`. `None` if the
    /// harness had problems.
    pub fn manifest(&self, layout: &SandboxLayout) -> Option<Manifest> {
        if !self.is_ok() {
            return None;
        }
        let h = self.harness.as_ref()?;
        let mut trees = Vec::new();
        for p in &self.plugins {
            let (kind, entries) = match &p.class {
                PluginClass::Pi(pi) => (TreeKind::PiExtension, pi.entries.clone()),
                PluginClass::Claude(_) => (TreeKind::ClaudePlugin, Vec::new()),
            };
            // A plugin the runtime does not load is still uploaded and verified (it is part of
            // the harness), but it is data for this runtime.
            let kind = if p.loaded { kind } else { TreeKind::Data };
            trees.push(TreePin {
                name: p.spec.name.clone(),
                path: layout.plugin(&p.spec.name),
                role: PinRole::Plugin,
                kind,
                format: TreeFormat::PiTreeV1,
                sha256: p.digest.sha256.clone(),
                files: FileListing::from_records(&p.digest.listing.files).ok()?,
                dirs: p.digest.listing.dirs.clone(),
                entries: if kind == TreeKind::PiExtension {
                    entries
                } else {
                    Vec::new()
                },
                env: p.spec.env.clone(),
                pi_args: p.spec.pi_args.clone(),
            });
        }
        for s in &self.skills {
            trees.push(TreePin {
                name: format!("skill:{}", s.spec.name),
                path: layout.skill(&s.spec.name),
                role: PinRole::Skill,
                kind: TreeKind::Data,
                format: TreeFormat::PiTreeV1,
                sha256: s.digest.sha256.clone(),
                files: FileListing::from_records(&s.digest.listing.files).ok()?,
                dirs: s.digest.listing.dirs.clone(),
                entries: Vec::new(),
                env: BTreeMap::new(),
                pi_args: Vec::new(),
            });
        }
        let files = self
            .adapters
            .iter()
            .map(|a| FilePin {
                path: layout.adapter(a.spec.role, &file_name(&a.spec.host_path)),
                role: a.spec.role,
                sha256: a.sha256.clone(),
                size: Some(a.size),
                usage: a.spec.usage,
            })
            .collect();
        let (binary, args) = match h.runtime {
            Runtime::Command => (
                h.command.first().cloned().unwrap_or_default(),
                h.command.iter().skip(1).cloned().collect(),
            ),
            rt => (
                h.agent
                    .binary
                    .clone()
                    .or_else(|| rt.default_binary().map(str::to_string))
                    .unwrap_or_default(),
                h.agent.args.clone(),
            ),
        };
        let config = layout.config_dir();
        Some(Manifest {
            version: MANIFEST_VERSION,
            runtime: h.runtime,
            agent: Agent {
                binary,
                sha256: None,
                args,
                model: h.agent.model.clone(),
                tools: h.agent.tools.clone(),
                claude_agent: h.agent.claude_agent.clone(),
            },
            prompt: h.prompt.clone(),
            trees,
            files,
            env: EnvSpec {
                dotenv: None,
                set: h.env.clone(),
            },
            workdir: layout.workdir(),
            dirs: RuntimeDirs {
                home: Some(layout.home()),
                tmp: Some(layout.tmp()),
                sessions: (h.runtime == Runtime::Pi).then(|| format!("{config}/sessions")),
                config: Some(config),
            },
            user: Default::default(),
            output: Default::default(),
            limits: Limits {
                timeout_ms: u64::try_from(h.timeout.as_millis()).unwrap_or(u64::MAX),
                processes: h.processes,
                memory_bytes: h.memory,
                ..Limits::default()
            },
            confinement: Default::default(),
        })
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Reads and validates a harness file: shapes, paths, plugin formats, env and argument rules,
/// tree digests. All problems are collected; only an unreadable or unparsable file is an `Err`.
pub fn validate(file: &Path) -> Result<Validated, HarnessError> {
    let text = std::fs::read_to_string(file).map_err(|source| HarnessError::Read {
        path: file.to_path_buf(),
        source,
    })?;
    let node = parse_yaml(file, &text)?;
    let base = file
        .parent()
        .map(|p| {
            if p.as_os_str().is_empty() {
                Path::new(".")
            } else {
                p
            }
        })
        .unwrap_or(Path::new("."));
    let base = base.canonicalize().map_err(|source| HarnessError::Read {
        path: base.to_path_buf(),
        source,
    })?;
    let mut cx = Checker {
        base,
        problems: Vec::new(),
        notes: Vec::new(),
    };
    let harness = cx.harness(file, &node);
    let mut out = Validated {
        harness: None,
        plugins: Vec::new(),
        skills: Vec::new(),
        adapters: Vec::new(),
        problems: Vec::new(),
        notes: Vec::new(),
    };
    if let Some(h) = &harness {
        cx.deep_checks(h, &node, &mut out);
    }
    out.harness = harness;
    out.problems = cx.problems;
    out.notes = cx.notes;
    out.problems
        .sort_by_key(|p| p.location.map(|l| (l.line, l.column)));
    Ok(out)
}

/// Checks the records directory `output` (below the harness directory `base`) without
/// following links: a symlink in any component below `base` is refused, since records written
/// through it would land outside the harness directory; so is a component that is not a
/// directory. Components that do not exist yet are fine (`pitcrew run` creates them, again
/// without following links). The error names the offending path.
pub fn check_output_dir(base: &Path, output: &Path) -> Result<(), String> {
    let rel = output.strip_prefix(base).map_err(|_| {
        format!(
            "{} is not inside the harness directory {}",
            output.display(),
            base.display()
        )
    })?;
    let mut reached = base.to_path_buf();
    for component in rel.components() {
        match component {
            Component::Normal(name) => reached.push(name),
            Component::CurDir => continue,
            _ => {
                return Err(format!(
                    "{}: only plain names below the harness directory",
                    output.display()
                ))
            }
        }
        match std::fs::symlink_metadata(&reached) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(format!(
                    "{} is a symlink: records are written only to real directories inside the \
                     harness directory (links are not followed)",
                    reached.display()
                ))
            }
            Ok(meta) if !meta.is_dir() => {
                return Err(format!("{} is not a directory", reached.display()))
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(format!("{}: {e}", reached.display())),
        }
    }
    Ok(())
}

fn parse_yaml(file: &Path, text: &str) -> Result<Node, HarnessError> {
    // A key given twice in one mapping (`runtime:`, a name in `env:`) is refused: by default the
    // loader keeps the last one silently, while a reader sees the first.
    let options = marked_yaml::LoaderOptions::default().error_on_duplicate_keys(true);
    // The YAML loader has internal `unreachable!`s; a harness must never crash the CLI.
    let parsed =
        std::panic::catch_unwind(|| marked_yaml::parse_yaml_with_options(0, text, options));
    match parsed {
        Ok(Ok(node)) => Ok(node),
        Ok(Err(marked_yaml::LoadError::DuplicateKey(dup))) => {
            let at = |key: &MarkedScalarNode| match scalar_location(key) {
                Some(l) => format!("{}:{}", l.line, l.column),
                None => "?".to_string(),
            };
            Err(HarnessError::Yaml {
                path: file.to_path_buf(),
                detail: format!(
                    "{}: duplicate key {:?} (first at {}:{})",
                    at(&dup.key),
                    dup.key.as_str(),
                    file.display(),
                    at(&dup.prev_key)
                ),
            })
        }
        Ok(Err(err)) => Err(HarnessError::Yaml {
            path: file.to_path_buf(),
            detail: err.to_string(),
        }),
        Err(_) => Err(HarnessError::Yaml {
            path: file.to_path_buf(),
            detail: " the YAML parser failed on this input".to_string(),
        }),
    }
}

fn location(node: &Node) -> Option<Location> {
    node.span().start().map(|m| Location {
        line: m.line(),
        column: m.column(),
    })
}

fn scalar_location(node: &MarkedScalarNode) -> Option<Location> {
    node.span().start().map(|m| Location {
        line: m.line(),
        column: m.column(),
    })
}

const TOP_KEYS: &[&str] = &[
    "runtime",
    "agent",
    "command",
    "prompt",
    "plugins",
    "adapters",
    "skills",
    "env",
    "iterations",
    "timeout",
    "processes",
    "memory",
    "workdir",
    "output",
    "validation",
];

struct Checker {
    base: PathBuf,
    problems: Vec<Problem>,
    notes: Vec<Problem>,
}

impl Checker {
    fn problem(&mut self, at: Option<Location>, field: impl Into<String>, msg: impl Into<String>) {
        self.problems.push(Problem {
            location: at,
            field: field.into(),
            message: msg.into(),
        });
    }

    fn note(&mut self, at: Option<Location>, field: impl Into<String>, msg: impl Into<String>) {
        self.notes.push(Problem {
            location: at,
            field: field.into(),
            message: msg.into(),
        });
    }

    fn string(&mut self, node: &Node, field: &str) -> Option<String> {
        match node {
            Node::Scalar(s) => Some(s.as_str().to_string()),
            _ => {
                self.problem(location(node), field, "expected a string");
                None
            }
        }
    }

    fn mapping<'a>(&mut self, node: &'a Node, field: &str) -> Option<&'a MarkedMappingNode> {
        match node {
            Node::Mapping(m) => Some(m),
            _ => {
                self.problem(location(node), field, "expected a mapping");
                None
            }
        }
    }

    fn sequence<'a>(&mut self, node: &'a Node, field: &str) -> Option<&'a MarkedSequenceNode> {
        match node {
            Node::Sequence(s) => Some(s),
            _ => {
                self.problem(location(node), field, "expected a list");
                None
            }
        }
    }

    fn string_list(&mut self, node: &Node, field: &str) -> Vec<String> {
        let Some(seq) = self.sequence(node, field) else {
            return Vec::new();
        };
        seq.iter()
            .enumerate()
            .filter_map(|(i, n)| self.string(n, &format!("{field}[{i}]")))
            .collect()
    }

    fn unknown_keys(&mut self, map: &MarkedMappingNode, field: &str, allowed: &[&str]) {
        for key in map.keys() {
            if !allowed.contains(&key.as_str()) {
                let prefix = if field.is_empty() {
                    String::new()
                } else {
                    format!("{field}.")
                };
                self.problem(
                    scalar_location(key),
                    format!("{prefix}{}", key.as_str()),
                    format!("unknown key (allowed: {})", allowed.join(", ")),
                );
            }
        }
    }

    /// Checks the program the agent runs as (`agent.binary`, `command[0]`) by the manifest's
    /// rule for it: not empty, and a name with a '/' is an absolute path inside the sandbox.
    fn program(&mut self, at: Option<Location>, field: &str, what: &str, name: &str) {
        if name.is_empty() {
            self.problem(at, field, format!("an empty {what} name"));
        } else if name.contains('/') {
            if !name.starts_with('/') {
                self.problem(
                    at,
                    field,
                    format!("a {what} with a '/' must be an absolute path inside the sandbox"),
                );
            } else if let Some(problem) = crate::manifest::sandbox_path_problem(name) {
                self.problem(at, field, problem);
            }
        }
    }

    /// Resolves a harness-relative path: refuses remote sources, absolute paths, `..` and
    /// anything that resolves (through symlinks) outside the harness directory.
    fn local_path(&mut self, at: Option<Location>, field: &str, raw: &str) -> Option<PathBuf> {
        const REMOTE: &[&str] = &[
            "npm:", "git:", "github:", "ssh:", "http:", "https:", "file:", "git+", "builtin:",
        ];
        if let Some(scheme) = REMOTE.iter().find(|s| raw.starts_with(**s)) {
            self.problem(
                at,
                field,
                format!(
                    "{raw:?}: {scheme} sources are refused: plugins are local, vendored directories (pi would fetch them from the network at startup)"
                ),
            );
            return None;
        }
        if raw.contains("://") {
            self.problem(
                at,
                field,
                format!("{raw:?}: URLs are refused; use a local path"),
            );
            return None;
        }
        if raw.is_empty() {
            self.problem(at, field, "empty path");
            return None;
        }
        let rel = Path::new(raw);
        if rel.is_absolute() {
            self.problem(
                at,
                field,
                format!("{raw:?} is absolute; paths are relative to the harness file"),
            );
            return None;
        }
        if rel.components().any(|c| matches!(c, Component::ParentDir)) {
            self.problem(
                at,
                field,
                format!("{raw:?} has a '..' segment; paths must stay inside the harness directory"),
            );
            return None;
        }
        let joined = self.base.join(rel);
        match joined.canonicalize() {
            Ok(real) if real.starts_with(&self.base) => Some(real),
            Ok(real) => {
                self.problem(
                    at,
                    field,
                    format!(
                        "{raw:?} resolves to {} outside the harness directory {}",
                        real.display(),
                        self.base.display()
                    ),
                );
                None
            }
            Err(err) => {
                self.problem(at, field, format!("{}: {err}", joined.display()));
                None
            }
        }
    }

    fn env_map(&mut self, node: &Node, field: &str) -> Vec<(String, String, Option<Location>)> {
        let Some(map) = self.mapping(node, field) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (key, value) in map.iter() {
            let f = format!("{field}.{}", key.as_str());
            if let Some(v) = self.string(value, &f) {
                out.push((key.as_str().to_string(), v, scalar_location(key)));
            }
        }
        out
    }

    fn harness(&mut self, file: &Path, node: &Node) -> Option<Harness> {
        let top = self.mapping(node, "")?;
        self.unknown_keys(top, "", TOP_KEYS);
        let runtime = match top.get_node("runtime") {
            None => {
                self.problem(location(node), "runtime", "missing (pi, claude or command)");
                None
            }
            Some(n) => match self.string(n, "runtime").as_deref() {
                Some("pi") => Some(Runtime::Pi),
                Some("claude") => Some(Runtime::Claude),
                Some("command") => Some(Runtime::Command),
                Some(other) => {
                    self.problem(
                        location(n),
                        "runtime",
                        format!("{other:?} is not a runtime (pi, claude or command)"),
                    );
                    None
                }
                None => None,
            },
        };

        let mut agent = AgentSection::default();
        if let Some(n) = top.get_node("agent") {
            if let Some(m) = self.mapping(n, "agent") {
                self.unknown_keys(
                    m,
                    "agent",
                    &["binary", "args", "model", "tools", "claude_agent"],
                );
                agent.binary = m
                    .get_node("binary")
                    .and_then(|n| self.string(n, "agent.binary"));
                if let Some(b) = &agent.binary {
                    let at = m.get_node("binary").and_then(location);
                    self.program(at, "agent.binary", "binary", b);
                }
                if let Some(n) = m.get_node("args") {
                    agent.args = self.string_list(n, "agent.args");
                }
                agent.model = m
                    .get_node("model")
                    .and_then(|n| self.string(n, "agent.model"));
                if let Some(n) = m.get_node("tools") {
                    agent.tools = self.string_list(n, "agent.tools");
                }
                agent.claude_agent = m
                    .get_node("claude_agent")
                    .and_then(|n| self.string(n, "agent.claude_agent"));
            }
        }

        let command = match top.get_node("command") {
            Some(n) => self.string_list(n, "command"),
            None => Vec::new(),
        };
        let prompt = top
            .get_node("prompt")
            .and_then(|n| self.string(n, "prompt"));
        match runtime {
            Some(Runtime::Command) => {
                if command.is_empty() {
                    self.problem(
                        location(node),
                        "command",
                        "runtime command needs a non-empty `command:` argv list",
                    );
                }
                if top.get_node("agent").is_some() {
                    self.problem(
                        top.get_node("agent").and_then(location),
                        "agent",
                        "runtime command takes its program from `command:`, not `agent:`",
                    );
                }
            }
            Some(rt) => {
                if let Some(n) = top.get_node("command") {
                    self.problem(
                        location(n),
                        "command",
                        format!(
                            "`command:` is only for runtime command, not {}",
                            rt.as_str()
                        ),
                    );
                }
                match &prompt {
                    None => self.problem(
                        location(node),
                        "prompt",
                        format!("runtime {} needs a prompt", rt.as_str()),
                    ),
                    Some(p) if p.starts_with('-') => self.problem(
                        top.get_node("prompt").and_then(location),
                        "prompt",
                        "a prompt starting with '-' would be read as an option",
                    ),
                    Some(_) => {}
                }
            }
            None => {}
        }
        if let Some(cmd0) = command.first() {
            let at = top.get_node("command").and_then(location);
            self.program(at, "command[0]", "program", cmd0);
        }

        let plugins = match top.get_node("plugins") {
            Some(n) => self.plugins(n),
            None => Vec::new(),
        };
        let adapters = match top.get_node("adapters") {
            Some(n) => self.adapters(n, runtime),
            None => Vec::new(),
        };
        let skills = match top.get_node("skills") {
            Some(n) => self.skills(n),
            None => Vec::new(),
        };

        let mut env = BTreeMap::new();
        if let Some(n) = top.get_node("env") {
            for (k, v, at) in self.env_map(n, "env") {
                for p in env_policy::sandbox_env_problems(&k, &v) {
                    self.problem(at, format!("env.{k}"), p.to_string());
                }
                env.insert(k, v);
            }
        }

        let iterations = match top.get_node("iterations") {
            None => 1,
            Some(n) => match n.as_scalar().and_then(|s| s.as_u32()) {
                Some(i) if (1..=1000).contains(&i) => i,
                _ => {
                    self.problem(
                        location(n),
                        "iterations",
                        "expected an integer from 1 to 1000",
                    );
                    1
                }
            },
        };
        let processes = match top.get_node("processes") {
            None => crate::manifest::DEFAULT_PROCESSES,
            Some(n) => match n.as_scalar().and_then(|s| s.as_u64()) {
                Some(p) if (1..=MAX_PROCESSES).contains(&p) => p,
                _ => {
                    self.problem(
                        location(n),
                        "processes",
                        format!("expected an integer from 1 to {MAX_PROCESSES}"),
                    );
                    crate::manifest::DEFAULT_PROCESSES
                }
            },
        };
        let memory = match top.get_node("memory") {
            None => crate::manifest::DEFAULT_MEMORY_BYTES,
            Some(n) => match self.string(n, "memory").as_deref().map(parse_size) {
                Some(Ok(bytes)) => bytes,
                Some(Err(e)) => {
                    self.problem(location(n), "memory", e);
                    crate::manifest::DEFAULT_MEMORY_BYTES
                }
                None => crate::manifest::DEFAULT_MEMORY_BYTES,
            },
        };
        let timeout = match top.get_node("timeout") {
            None => Duration::from_secs(30 * 60),
            Some(n) => match self.string(n, "timeout").as_deref().map(parse_duration) {
                Some(Ok(d)) => d,
                Some(Err(e)) => {
                    self.problem(location(n), "timeout", e);
                    Duration::from_secs(1)
                }
                None => Duration::from_secs(1),
            },
        };
        let workdir = top.get_node("workdir").and_then(|n| {
            let raw = self.string(n, "workdir")?;
            let path = self.local_path(location(n), "workdir", &raw)?;
            if !path.is_dir() {
                self.problem(
                    location(n),
                    "workdir",
                    format!("{} is not a directory", path.display()),
                );
                return None;
            }
            Some(path)
        });
        let output = match top.get_node("output") {
            None => self.base.join("runs"),
            Some(n) => match self.string(n, "output") {
                Some(raw)
                    if !raw.is_empty()
                        && !Path::new(&raw).is_absolute()
                        && !raw.split('/').any(|s| s == "..") =>
                {
                    self.base.join(raw)
                }
                Some(raw) => {
                    self.problem(
                        location(n),
                        "output",
                        format!("{raw:?} must be a relative path inside the harness directory"),
                    );
                    self.base.join("runs")
                }
                None => self.base.join("runs"),
            },
        };
        if let Err(e) = check_output_dir(&self.base, &output) {
            self.problem(top.get_node("output").and_then(location), "output", e);
        }
        let validation = top.get_node("validation").and_then(|n| match n {
            Node::Sequence(_) => {
                let v = self.string_list(n, "validation");
                if v.is_empty() {
                    self.problem(location(n), "validation", "an empty command");
                    None
                } else {
                    Some(v)
                }
            }
            _ => {
                self.problem(
                    location(n),
                    "validation",
                    "expected an argv list (no shell is run for you: write [sh, -c, \"…\"] if you want one)",
                );
                None
            }
        });

        let runtime = runtime?;
        Some(Harness {
            file: file.to_path_buf(),
            base: self.base.clone(),
            runtime,
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
            workdir,
            output,
            validation,
        })
    }

    fn plugins(&mut self, node: &Node) -> Vec<PluginSpec> {
        let Some(seq) = self.sequence(node, "plugins") else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, item) in seq.iter().enumerate() {
            let field = format!("plugins[{i}]");
            let at = location(item);
            let (raw, env_node, pi_node) = match item {
                Node::Scalar(s) => (s.as_str().to_string(), None, None),
                Node::Mapping(m) => {
                    self.unknown_keys(m, &field, &["path", "env", "pi"]);
                    let Some(raw) = m.get_node("path").and_then(|n| self.string(n, &field)) else {
                        self.problem(at, format!("{field}.path"), "missing");
                        continue;
                    };
                    (raw, m.get_node("env"), m.get_node("pi"))
                }
                Node::Sequence(_) => {
                    self.problem(at, &field, "expected a path or {path, env, pi}");
                    continue;
                }
            };
            let mut env = BTreeMap::new();
            if let Some(n) = env_node {
                for (k, v, kat) in self.env_map(n, &format!("{field}.env")) {
                    for p in env_policy::plugin_env_problems(&k, &v) {
                        self.problem(kat, format!("{field}.env.{k}"), p.to_string());
                    }
                    env.insert(k, v);
                }
            }
            let mut pi_args = Vec::new();
            if let Some(n) = pi_node {
                if let Some(m) = self.mapping(n, &format!("{field}.pi")) {
                    self.unknown_keys(m, &format!("{field}.pi"), &["args"]);
                    if let Some(a) = m.get_node("args") {
                        pi_args = self.string_list(a, &format!("{field}.pi.args"));
                        for (j, p) in env_policy::pi_args_problems(&pi_args, None) {
                            self.problem(
                                location(a),
                                format!("{field}.pi.args[{j}]"),
                                p.to_string(),
                            );
                        }
                    }
                }
            }
            let Some(host_path) = self.local_path(at, &format!("{field}.path"), &raw) else {
                continue;
            };
            if !host_path.is_dir() {
                self.problem(
                    at,
                    format!("{field}.path"),
                    format!(
                        "{} is not a directory (plugins are directories)",
                        host_path.display()
                    ),
                );
                continue;
            }
            out.push(PluginSpec {
                name: file_name(&host_path),
                path: raw,
                host_path,
                env,
                pi_args,
            });
        }
        out
    }

    fn adapters(&mut self, node: &Node, runtime: Option<Runtime>) -> Vec<AdapterSpec> {
        let Some(seq) = self.sequence(node, "adapters") else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, item) in seq.iter().enumerate() {
            let field = format!("adapters[{i}]");
            let at = location(item);
            let Some(m) = self.mapping(item, &field) else {
                continue;
            };
            self.unknown_keys(m, &field, &["path", "role", "use"]);
            let raw = m
                .get_node("path")
                .and_then(|n| self.string(n, &format!("{field}.path")));
            let role = match m.get_node("role") {
                None => {
                    self.problem(at, format!("{field}.role"), role_help("missing"));
                    None
                }
                Some(n) => self.string(n, &format!("{field}.role")).and_then(|r| {
                    let parsed = PinRole::parse(&r)
                        .filter(|r| !matches!(r, PinRole::Plugin | PinRole::Skill));
                    if parsed.is_none() {
                        self.problem(
                            location(n),
                            format!("{field}.role"),
                            role_help(&format!("{r:?} is not an adapter role")),
                        );
                    }
                    parsed
                }),
            };
            let usage = match m.get_node("use") {
                None => Some(FileUse::Verify),
                Some(n) => match self.string(n, &format!("{field}.use")).as_deref() {
                    Some("verify") => Some(FileUse::Verify),
                    Some("pi-extension") => Some(FileUse::PiExtension),
                    Some("claude-settings") => Some(FileUse::ClaudeSettings),
                    Some(other) => {
                        self.problem(
                            location(n),
                            format!("{field}.use"),
                            format!(
                                "{other:?} is not one of verify, pi-extension, claude-settings"
                            ),
                        );
                        None
                    }
                    None => None,
                },
            };
            match (usage, runtime) {
                (Some(FileUse::PiExtension), Some(rt)) if rt != Runtime::Pi => self.problem(
                    m.get_node("use").and_then(location),
                    format!("{field}.use"),
                    format!(
                        "pi-extension adapters are loaded by pi, not by runtime {}",
                        rt.as_str()
                    ),
                ),
                (Some(FileUse::ClaudeSettings), Some(rt)) if rt != Runtime::Claude => self.problem(
                    m.get_node("use").and_then(location),
                    format!("{field}.use"),
                    format!(
                        "claude-settings adapters are read by Claude Code, not by runtime {}",
                        rt.as_str()
                    ),
                ),
                _ => {}
            }
            let Some(raw) = raw else {
                self.problem(at, format!("{field}.path"), "missing");
                continue;
            };
            let Some(host_path) = self.local_path(at, &format!("{field}.path"), &raw) else {
                continue;
            };
            let (Some(role), Some(usage)) = (role, usage) else {
                continue;
            };
            out.push(AdapterSpec {
                path: raw,
                host_path,
                role,
                usage,
            });
        }
        out
    }

    fn skills(&mut self, node: &Node) -> Vec<SkillSpec> {
        let Some(seq) = self.sequence(node, "skills") else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, item) in seq.iter().enumerate() {
            let field = format!("skills[{i}]");
            let at = location(item);
            let Some(raw) = self.string(item, &field) else {
                continue;
            };
            let Some(host_path) = self.local_path(at, &field, &raw) else {
                continue;
            };
            if !host_path.is_dir() {
                self.problem(
                    at,
                    &field,
                    format!("{} is not a directory", host_path.display()),
                );
                continue;
            }
            out.push(SkillSpec {
                name: file_name(&host_path),
                path: raw,
                host_path,
            });
        }
        out
    }

    /// Checks that need the file system: plugin formats and registered flags, tree digests
    /// (which refuse symlinks and special files), adapter files, duplicate upload names.
    fn deep_checks(&mut self, h: &Harness, node: &Node, out: &mut Validated) {
        let top = node.as_mapping();
        let item_loc = |key: &str, i: usize| -> Option<Location> {
            top.and_then(|m| m.get_sequence(key))
                .and_then(|s| s.get_node(i))
                .and_then(location)
        };
        let mut names: BTreeMap<String, usize> = BTreeMap::new();
        for (i, spec) in h.plugins.iter().enumerate() {
            let at = item_loc("plugins", i);
            let field = format!("plugins[{i}]");
            if let Some(first) = names.insert(spec.name.clone(), i) {
                self.problem(
                    at,
                    &field,
                    format!(
                        "uploads under the same name {:?} as plugins[{first}]; rename one directory",
                        spec.name
                    ),
                );
            }
            let class = match plugin_format::classify(&spec.host_path) {
                Ok(c) => c,
                Err(e) => {
                    self.problem(at, &field, e.to_string());
                    continue;
                }
            };
            let loaded = match (&class, h.runtime) {
                (PluginClass::Pi(pi), _) => {
                    if !spec.pi_args.is_empty() {
                        for (j, p) in
                            env_policy::pi_args_problems(&spec.pi_args, Some(&pi.registered_flags))
                        {
                            if matches!(p, env_policy::PiArgProblem::Unregistered { .. }) {
                                self.problem(at, format!("{field}.pi.args[{j}]"), p.to_string());
                            }
                        }
                    }
                    h.runtime == Runtime::Pi
                }
                (PluginClass::Claude(_), _) => {
                    if !spec.env.is_empty() {
                        self.problem(
                            at,
                            format!("{field}.env"),
                            "a Claude plugin takes no env: (it would be silently dropped)",
                        );
                    }
                    if !spec.pi_args.is_empty() {
                        self.problem(
                            at,
                            format!("{field}.pi"),
                            "a Claude plugin takes no pi: options",
                        );
                    }
                    h.runtime == Runtime::Claude
                }
            };
            if !loaded {
                self.note(
                    at,
                    &field,
                    format!(
                        "{} is a {} plugin: runtime {} names and skips it",
                        spec.name,
                        class.kind(),
                        h.runtime.as_str()
                    ),
                );
            }
            match tree_hash::hash_tree(&spec.host_path, TreeFormat::PiTreeV1) {
                Ok(digest) => out.plugins.push(CheckedPlugin {
                    spec: spec.clone(),
                    class,
                    digest,
                    loaded,
                }),
                Err(e) => self.problem(at, &field, e.to_string()),
            }
        }
        let mut skill_names = BTreeSet::new();
        for (i, spec) in h.skills.iter().enumerate() {
            let at = item_loc("skills", i);
            if !skill_names.insert(spec.name.clone()) {
                self.problem(
                    at,
                    format!("skills[{i}]"),
                    format!("a second skills directory named {:?}", spec.name),
                );
            }
            match tree_hash::hash_tree(&spec.host_path, TreeFormat::PiTreeV1) {
                Ok(digest) => out.skills.push(CheckedSkill {
                    spec: spec.clone(),
                    digest,
                }),
                Err(e) => self.problem(at, format!("skills[{i}]"), e.to_string()),
            }
        }
        let mut adapter_names = BTreeMap::new();
        for (i, spec) in h.adapters.iter().enumerate() {
            let at = item_loc("adapters", i);
            let dest = (spec.role == PinRole::Config, file_name(&spec.host_path));
            if let Some(first) = adapter_names.insert(dest.clone(), i) {
                self.problem(
                    at,
                    format!("adapters[{i}]"),
                    format!(
                        "uploads under the same name {:?} as adapters[{first}]",
                        dest.1
                    ),
                );
            }
            match tree_hash::sha256_file(&spec.host_path) {
                Ok(rec) => out.adapters.push(CheckedAdapter {
                    spec: spec.clone(),
                    sha256: rec.sha256,
                    size: rec.size,
                }),
                Err(e) => self.problem(at, format!("adapters[{i}]"), e.to_string()),
            }
        }
    }
}

fn role_help(what: &str) -> String {
    format!(
        "{what}: role is one of hook-adapter (exit 97), runtime-manifest (95), sub-agent (94), edit-repair (93), config (98)"
    )
}

/// Parses a harness size: `8GiB`, `512MiB`, `64KiB`, `1TiB` or a number of bytes; at least
/// 16 MiB.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, ""),
    };
    let example = "e.g. 512MiB, 8GiB or a number of bytes";
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size ({example})"))?;
    let shift = match unit.trim_start() {
        "" => 0,
        "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        "TiB" => 40,
        _ => {
            return Err(format!(
                "{s:?} has an unknown unit (use KiB, MiB, GiB or TiB)"
            ))
        }
    };
    let bytes = n
        .checked_mul(1 << shift)
        .filter(|b| *b <= MAX_MEMORY_BYTES)
        .ok_or_else(|| format!("{s:?} is more than 1024 TiB"))?;
    if bytes < crate::manifest::MIN_MEMORY_BYTES {
        return Err(format!(
            "{s:?} is less than 16MiB, too little for any runtime"
        ));
    }
    Ok(bytes)
}

/// The largest `memory:` a harness may ask for (1024 TiB: past any machine's, short of overflow).
const MAX_MEMORY_BYTES: u64 = 1 << 50;

/// Parses a duration: `90` (seconds), `90s`, `15m`, `2h`, `500ms`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (e.g. 90, 90s, 15m, 2h, 500ms)"))?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        "h" => Duration::from_secs(n.saturating_mul(3600)),
        _ => return Err(format!("{s:?} has an unknown unit (use ms, s, m or h)")),
    };
    if d.is_zero() {
        return Err("a timeout of zero would kill the agent at once".to_string());
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_binary_units_and_refuse_the_rest() {
        assert_eq!(parse_size("8GiB"), Ok(8 << 30));
        assert_eq!(parse_size("512 MiB"), Ok(512 << 20));
        assert_eq!(parse_size("33554432"), Ok(32 << 20));
        for (bad, why) in [
            ("8GB", "unknown unit"),
            ("1MiB", "less than 16MiB"),
            ("lots", "not a size"),
            ("2048TiB", "more than 1024 TiB"),
            ("99999999999999999999", "not a size"),
        ] {
            let err = parse_size(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    /// Validates `text` as the harness of an empty directory.
    fn check(text: &str) -> Validated {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("harness.yaml");
        std::fs::write(&file, text).unwrap();
        validate(&file).unwrap()
    }

    /// Found by the `harness` fuzz target: `command: [/bin/..]` passed validation, but the
    /// manifest built from it was refused (`'..' segment`), so `validate` said ok and
    /// `--emit-manifest` and `run` failed. The program follows the manifest's rule now.
    #[test]
    fn fuzz_regression_program_paths_follow_the_manifest_rule() {
        let refused = [
            (
                "runtime: command\ncommand: [/bin/.., -c, \"true\"]\n",
                "command[0]",
                "'..'",
            ),
            ("runtime: command\ncommand: [\"\"]\n", "command[0]", "empty"),
            (
                "runtime: pi\nprompt: hi\nagent:\n  binary: \"/usr/bin/pi\\r\"\n",
                "agent.binary",
                "carriage return",
            ),
            (
                "runtime: pi\nprompt: hi\nagent:\n  binary: \"\"\n",
                "agent.binary",
                "empty",
            ),
        ];
        for (text, field, needle) in refused {
            let v = check(text);
            assert!(
                v.problems
                    .iter()
                    .any(|p| p.field == field && p.message.contains(needle)),
                "{text:?}: {:?}",
                v.problems
            );
            assert!(v.manifest(&SandboxLayout::default()).is_none());
        }
        for text in [
            "runtime: command\ncommand: [/bin/true]\n",
            "runtime: command\ncommand: [sh, -c, \"true\"]\n",
            "runtime: pi\nprompt: hi\nagent:\n  binary: /usr/local/bin/pi\n",
        ] {
            let v = check(text);
            assert!(v.is_ok(), "{text:?}: {:?}", v.problems);
            let manifest = v.manifest(&SandboxLayout::default()).unwrap();
            manifest.validate().unwrap();
        }
    }
}
