//! The top-level keys of a harness checked into a [`Harness`]: `runtime`, `agent`, `command`,
//! `prompt`, `env`, the limits (`iterations`, `processes`, `memory`, `disk`, `timeout`), `retention`, `upload_limits`, `workdir`,
//! `output` and `validation`, each against its rule, with the list entries (`plugins`,
//! `adapters`, `skills`) handed to their own checks.

use super::fs_checks::{check_output_dir, find_program};
use super::model::{AgentSection, Harness, Location};
use super::units::{parse_duration_at_most, parse_size, parse_size_within};
use super::yaml::{enum_name, location, Checker};
use crate::env_policy;
use crate::manifest::{ContextFiles, Retention, Runtime};
use crate::protocol::UploadLimits;
use marked_yaml::Node;
use std::collections::BTreeMap;
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

    /// Checks `agent.args` (the strings of `node`) against every supported release of `runtime`
    /// ([`env_policy::agent_args`]): each refused option or stray word is a problem at its own
    /// line and column, naming the releases and what to use instead.
    fn agent_args(&mut self, runtime: Runtime, node: &Node, args: &[String]) {
        let items = node.as_sequence();
        // Element i of `args` is item i when every item was a string (otherwise the list has a
        // problem already, and the list's own place is given).
        let aligned = items.filter(|s| s.len() == args.len());
        for (i, p) in env_policy::agent_args_problems(runtime, env_policy::Against::Supported, args)
        {
            let at = aligned
                .and_then(|s| s.get(i))
                .and_then(location)
                .or_else(|| location(node));
            self.problem(at, format!("agent.args[{i}]"), p.to_string());
        }
    }

    /// Checks the whole harness for shapes and rules; `None` when it is not a mapping or has
    /// no runtime (the problems say why).
    pub(super) fn harness(&mut self, file: &Path, node: &Node) -> Option<Harness> {
        let top = self.mapping(node, "")?;
        self.unknown_keys(top, "", TOP_KEYS);
        let runtime = match top.get_node("runtime") {
            None => {
                self.problem(location(node), "runtime", "missing (pi, claude or command)");
                None
            }
            Some(n) => self.string(n, "runtime").and_then(|name| {
                let runtime = enum_name::<Runtime>(&name);
                if runtime.is_none() {
                    self.problem(
                        location(n),
                        "runtime",
                        format!("{name:?} is not a runtime (pi, claude or command)"),
                    );
                }
                runtime
            }),
        };

        let mut agent = AgentSection::default();
        if let Some(n) = top.get_node("agent") {
            if let Some(m) = self.mapping(n, "agent") {
                self.unknown_keys(
                    m,
                    "agent",
                    &[
                        "binary",
                        "args",
                        "model",
                        "tools",
                        "claude_agent",
                        "record_prompt",
                        "context_files",
                    ],
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
                    if let Some(rt) = runtime {
                        self.agent_args(rt, n, &agent.args);
                    }
                }
                agent.model = m
                    .get_node("model")
                    .and_then(|n| self.string(n, "agent.model"));
                if let Some(n) = m.get_node("tools") {
                    let tools = self.string_list(n, "agent.tools");
                    for (i, tool) in tools.iter().enumerate() {
                        if !crate::manifest::is_tool_name(tool) {
                            self.problem(
                                location(n),
                                format!("agent.tools[{i}]"),
                                format!(
                                    "{tool:?} is not a tool name (the runtimes take the list \
                                     joined with ','; [] gives no built-in tools)"
                                ),
                            );
                        }
                    }
                    agent.tools = Some(tools);
                }
                agent.claude_agent = m
                    .get_node("claude_agent")
                    .and_then(|n| self.string(n, "agent.claude_agent"));
                if let Some(n) = m.get_node("record_prompt") {
                    agent.record_prompt = self.boolean(n, "agent.record_prompt").unwrap_or(false);
                }
                if let Some(n) = m.get_node("context_files") {
                    agent.context_files = self.context_files(n);
                }
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
                if let Some(n) = top.get_node("prompt") {
                    self.note(
                        location(n),
                        "prompt",
                        "runtime command ignores `prompt:` (its argv is `command:`)",
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
                // Options only one runtime reads.
                let agent = top.get_node("agent").and_then(Node::as_mapping);
                for (key, reader) in [("claude_agent", Runtime::Claude)] {
                    if rt == reader {
                        continue;
                    }
                    if let Some(n) = agent.and_then(|m| m.get_node(key)) {
                        self.note(
                            location(n),
                            format!("agent.{key}"),
                            format!(
                                "runtime {} ignores it (only runtime {} reads it)",
                                rt.as_str(),
                                reader.as_str()
                            ),
                        );
                    }
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
        if let Some(rt) = runtime.filter(|rt| *rt != Runtime::Pi) {
            for (i, p) in plugins.iter().enumerate() {
                if !p.pi_args.is_empty() {
                    self.note(
                        top.get_node("plugins").and_then(location),
                        format!("plugins[{i}].pi"),
                        format!(
                            "runtime {} ignores it (only runtime pi reads it)",
                            rt.as_str()
                        ),
                    );
                }
            }
        }
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
        // A plugin's `env:` applies after this one and may not replace it (the supervisor
        // would stop the iteration with 125).
        for (i, p) in plugins.iter().enumerate() {
            for name in p.env.keys() {
                if let Some(set) = env.keys().find(|k| k.eq_ignore_ascii_case(name)) {
                    self.problem(
                        top.get_node("plugins").and_then(location),
                        format!("plugins[{i}].env.{name}"),
                        format!(
                            "the harness `env:` sets {set}: a plugin never replaces what the operator set; keep one"
                        ),
                    );
                }
            }
        }

        let iterations = match top.get_node("iterations") {
            None => 1,
            Some(n) => match integer(n) {
                Some(i) if (1..=u64::from(MAX_ITERATIONS)).contains(&i) => {
                    u32::try_from(i).unwrap_or(1)
                }
                _ => {
                    self.problem(
                        location(n),
                        "iterations",
                        format!("expected an integer from 1 to {MAX_ITERATIONS}"),
                    );
                    1
                }
            },
        };
        let processes = match top.get_node("processes") {
            None => crate::manifest::DEFAULT_PROCESSES,
            Some(n) => match integer(n) {
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
        let disk = match top.get_node("disk") {
            None => None,
            Some(n) => match self.string(n, "disk").as_deref().map(|s| {
                parse_size_within(
                    s,
                    crate::manifest::MIN_DISK_BYTES,
                    MAX_DISK_BYTES,
                    "too small a budget",
                )
            }) {
                Some(Ok(bytes)) => Some(bytes),
                Some(Err(e)) => {
                    self.problem(location(n), "disk", e);
                    None
                }
                None => None,
            },
        };
        // A `.env` in the sandbox: relative to the workspace, or an absolute sandbox path.
        let dotenv = top.get_node("dotenv").and_then(|n| {
            let path = self.string(n, "dotenv")?;
            let absolute = if path.starts_with('/') {
                path.clone()
            } else {
                format!("/workspace/{path}")
            };
            match crate::manifest::sandbox_path_problem(&absolute) {
                _ if path.is_empty() => {
                    self.problem(location(n), "dotenv", "an empty path");
                    None
                }
                Some(problem) => {
                    self.problem(location(n), "dotenv", problem.replace("/workspace/", ""));
                    None
                }
                None => Some(path),
            }
        });
        let retention = top
            .get_node("retention")
            .map(|n| self.retention(n))
            .unwrap_or_default();
        let upload_limits = top
            .get_node("upload_limits")
            .map(|n| self.upload_limits(n))
            .unwrap_or_default();
        // The workspace's `output/` kept between iterations (emptied before each by default).
        let keep_output = top
            .get_node("keep_output")
            .and_then(|n| self.boolean(n, "keep_output"))
            .unwrap_or(false);
        // What persists in HOME from one iteration to the next (everything else is removed).
        let keep_home = top
            .get_node("keep_home")
            .map(|n| {
                let paths = self.string_list(n, "keep_home");
                for (i, p) in paths.iter().enumerate() {
                    if !crate::manifest::is_plain_relative_path(p) {
                        self.problem(
                            location(n),
                            format!("keep_home[{i}]"),
                            format!("{p:?} is not a plain path relative to HOME"),
                        );
                    }
                }
                paths
            })
            .unwrap_or_default();
        let timeout = match top.get_node("timeout") {
            None => Duration::from_secs(30 * 60),
            Some(n) => match self
                .string(n, "timeout")
                .as_deref()
                .map(|s| parse_duration_at_most(s, MAX_TIMEOUT))
            {
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
                    // It runs on this host, in the harness directory, after each iteration.
                    let path = std::env::var_os("PATH");
                    if let Err(why) = find_program(&v[0], &self.base, path.as_deref()) {
                        self.problem(
                            location(n),
                            "validation[0]",
                            format!("the validation command cannot run on this host: {why}"),
                        );
                    }
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
        // The end of the validation's output in the next prompt: `true` (16 KiB) or a size.
        let feedback = top.get_node("feedback").and_then(|n| {
            let at = location(n);
            let text = self.string(n, "feedback")?;
            let keep = match text.as_str() {
                "false" => return None,
                "true" => DEFAULT_FEEDBACK,
                size => match parse_size_within(size, 1, MAX_FEEDBACK, "") {
                    Ok(bytes) => bytes,
                    Err(e) => {
                        self.problem(at, "feedback", format!("true, false or a size: {e}"));
                        return None;
                    }
                },
            };
            if validation.is_none() {
                self.problem(
                    at,
                    "feedback",
                    "feedback is what `validation:` printed: set validation",
                );
            }
            if matches!(runtime, Some(Runtime::Command)) {
                self.note(
                    at,
                    "feedback",
                    "runtime command has no prompt to carry it: it is ignored",
                );
            }
            Some(keep)
        });

        let runtime = runtime?;
        let harness = Harness {
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
            disk,
            dotenv,
            keep_home,
            keep_output,
            retention,
            upload_limits,
            workdir,
            output,
            validation,
            feedback,
        };
        // pi's tool names are lowercase (`read`, `bash`), Claude Code's capitalised (`Read`,
        // `Bash`): a name of the other runtime's kind names no tool, and the runtime then has
        // fewer tools than the harness meant (Claude Code, which only took `agent.tools` since
        // it is passed as `--tools`, is the likely case).
        if let Some(tools) = &harness.agent.tools {
            let other_kind = |t: &String| match harness.runtime {
                Runtime::Pi => t.starts_with(|c: char| c.is_ascii_uppercase()),
                Runtime::Claude => t.starts_with(|c: char| c.is_ascii_lowercase()),
                Runtime::Command => false,
            };
            if let Some(name) = tools.iter().find(|t| other_kind(t)) {
                let at = top.get_node("agent").and_then(Node::as_mapping);
                self.note(
                    at.and_then(|m| m.get_node("tools")).and_then(location),
                    "agent.tools",
                    format!(
                        "{name:?} is not how {} names its tools ({})",
                        harness.runtime.as_str(),
                        if harness.runtime == Runtime::Pi {
                            "read, bash, edit, write, grep, find, ls"
                        } else {
                            "Bash, Read, Edit, Write, Glob, Grep, Skill, …"
                        }
                    ),
                );
            }
        }
        // Skills reach the model only through a tool that reads them.
        if let (Some(tools), false) = (&harness.agent.tools, harness.skills.is_empty()) {
            let readers: &[&str] = match harness.runtime {
                // pi 0.73.1 lists skills only with `read`; later versions with `bash` too.
                Runtime::Pi => &["read"],
                Runtime::Claude => &["Skill"],
                Runtime::Command => &[],
            };
            if !readers.is_empty() && !tools.iter().any(|t| readers.contains(&t.as_str())) {
                let at = top.get_node("agent").and_then(Node::as_mapping);
                self.note(
                    at.and_then(|m| m.get_node("tools")).and_then(location),
                    "agent.tools",
                    format!(
                        "none of {} is listed, so {} offers the model no skill",
                        readers.join(", "),
                        harness.runtime.as_str()
                    ),
                );
            }
        }
        if harness.runtime == Runtime::Claude {
            self.claude_context(top, &harness);
        }
        // The local engine runs the agent from this host's filesystem and PATH.
        let program = harness.agent_program();
        // A relative path with a `/` is a problem of its own (not an absolute sandbox path).
        if !program.is_empty() && (!program.contains('/') || program.starts_with('/')) {
            let path = std::env::var("PATH").unwrap_or_default();
            if let Err(failure) = crate::verify::agent_launchable(&program, &path) {
                let at = top
                    .get_node("command")
                    .or_else(|| top.get_node("agent"))
                    .or_else(|| top.get_node("runtime"))
                    .and_then(location);
                self.note(
                    at,
                    "agent",
                    format!(
                        "not on this host: {}; the local engine would fail with {} (a \
                         container image must have it)",
                        failure.reason, failure.exit_code
                    ),
                );
            }
        }
        Some(harness)
    }
}

impl Checker<'_> {
    /// What Claude Code is given beside the verified set: a `claude-settings` file takes the
    /// place of the settings that turn off Claude Code's built-in plugins. (The workdir's
    /// `CLAUDE.md` goes with `--append-system-prompt-file`, which `agent.args` may never give:
    /// it reads a file pitcrew did not verify.)
    fn claude_context(&mut self, top: &marked_yaml::types::MarkedMappingNode, harness: &Harness) {
        if harness
            .adapters
            .iter()
            .any(|a| a.usage == crate::manifest::FileUse::ClaudeSettings)
        {
            self.note(
                top.get_node("adapters").and_then(location),
                "adapters",
                "Claude Code takes one --settings, derived from this claude-settings file: \
                 the supervisor adds \"disableAllHooks\": false unless the file sets it (a \
                 file's own true turns its hooks and the plugins' off, and is kept), and turns \
                 off each built-in plugin its enabledPlugins does not name \
                 (docs/agent-support.md)",
            );
        }
    }

    /// `agent.context_files`: `as-is`, `uploaded` or `none`, with `true` (`as-is`, what it
    /// meant before there was a choice) and `false` (`none`) kept; anything else is a problem.
    fn context_files(&mut self, node: &Node) -> Option<ContextFiles> {
        let name = match node {
            Node::Scalar(s) => s.as_str(),
            _ => "",
        };
        let choice = match name {
            "true" => Some(ContextFiles::AsIs),
            "false" => Some(ContextFiles::None),
            other => ContextFiles::from_name(other),
        };
        if choice.is_none() {
            self.problem(
                location(node),
                "agent.context_files",
                "expected uploaded, as-is or none (true is as-is, false is none)",
            );
        }
        choice
    }
}

impl Checker<'_> {
    /// `retention: {records, size}`: the collected records the sandbox keeps; a key left out
    /// keeps its default.
    fn retention(&mut self, node: &Node) -> Retention {
        let mut retention = Retention::default();
        let Some(m) = self.mapping(node, "retention") else {
            return retention;
        };
        self.unknown_keys(m, "retention", &["records", "size"]);
        if let Some(n) = m.get_node("records") {
            match integer(n) {
                Some(r) if r <= u64::from(MAX_RETAINED_RECORDS) => {
                    retention.records = u32::try_from(r).unwrap_or(MAX_RETAINED_RECORDS);
                }
                _ => self.problem(
                    location(n),
                    "retention.records",
                    format!("expected an integer from 0 to {MAX_RETAINED_RECORDS}"),
                ),
            }
        }
        if let Some(n) = m.get_node("size") {
            match self
                .string(n, "retention.size")
                .as_deref()
                .map(|s| parse_size_within(s, 0, MAX_RETAINED_BYTES, ""))
            {
                Some(Ok(bytes)) => retention.bytes = bytes,
                Some(Err(e)) => self.problem(location(n), "retention.size", e),
                None => {}
            }
        }
        retention
    }
}

impl Checker<'_> {
    /// `upload_limits: {entries, size}`: the most one upload (a plugin, a skills directory, the
    /// workspace) may hold; a new sandbox's supervisor is started with them, and a key left out
    /// keeps its default (100000 entries, 4GiB).
    fn upload_limits(&mut self, node: &Node) -> UploadLimits {
        let mut limits = UploadLimits::default();
        let Some(m) = self.mapping(node, "upload_limits") else {
            return limits;
        };
        self.unknown_keys(m, "upload_limits", &["entries", "size"]);
        if let Some(n) = m.get_node("entries") {
            match integer(n) {
                Some(e) if (1..=MAX_UPLOAD_ENTRIES).contains(&e) => limits.max_entries = e,
                _ => self.problem(
                    location(n),
                    "upload_limits.entries",
                    format!("expected an integer from 1 to {MAX_UPLOAD_ENTRIES}"),
                ),
            }
        }
        if let Some(n) = m.get_node("size") {
            match self.string(n, "upload_limits.size").as_deref().map(|s| {
                parse_size_within(
                    s,
                    1 << 20,
                    MAX_UPLOAD_BYTES,
                    "the least an upload may be given",
                )
            }) {
                Some(Ok(bytes)) => limits.max_bytes = bytes,
                Some(Err(e)) => self.problem(location(n), "upload_limits.size", e),
                None => {}
            }
        }
        limits
    }
}

/// A scalar as a non-negative integer, written plainly or quoted (`3`, `"3"`: a templating tool
/// may quote every value; the YAML loader keeps quoted scalars as text).
fn integer(node: &Node) -> Option<u64> {
    node.as_scalar()?.as_str().trim().parse().ok()
}
