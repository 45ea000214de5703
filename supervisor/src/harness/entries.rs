//! The list entries of a harness: `plugins` (a directory or single pi extension file, or
//! `{path, env, pi}`), `adapters`
//! (`{path, role, use, to}`) and `skills` (paths), each checked for its shape, its rules and a local
//! path, before the file-system checks hash them.

use super::model::{AdapterSpec, PluginSpec, SkillSpec};
use super::remote::RemoteKind;
use super::yaml::{enum_name, location, Checker};
use crate::env_policy;
use crate::exit_code::PinRole;
use crate::manifest::{FileUse, Runtime};
use crate::plugin_format::SINGLE_FILE_EXTS;
use marked_yaml::Node;
use std::collections::BTreeMap;

impl Checker<'_> {
    /// The `plugins:` list.
    pub(super) fn plugins(&mut self, node: &Node) -> Vec<PluginSpec> {
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
            let Some((host_path, name, pin)) =
                self.source_path(at, &format!("{field}.path"), &raw, RemoteKind::Tree)
            else {
                continue;
            };
            // A plugin is a directory, or a single pi extension file (`ext/hello.ts`).
            let single_file = host_path.is_file()
                && host_path
                    .extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| SINGLE_FILE_EXTS.contains(&e));
            if !host_path.is_dir() && !single_file {
                self.problem(
                    at,
                    format!("{field}.path"),
                    format!(
                        "{} is neither a directory nor a single pi extension file (.{})",
                        host_path.display(),
                        SINGLE_FILE_EXTS.join(", .")
                    ),
                );
                continue;
            }
            out.push(PluginSpec {
                name,
                path: raw,
                host_path,
                env,
                pi_args,
                pin,
                single_file,
            });
        }
        out
    }

    /// The `adapters:` list (`use:` checked against `runtime` when there is one).
    pub(super) fn adapters(&mut self, node: &Node, runtime: Option<Runtime>) -> Vec<AdapterSpec> {
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
            self.unknown_keys(m, &field, &["path", "role", "use", "to"]);
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
                Some(n) => self.string(n, &format!("{field}.use")).and_then(|name| {
                    let usage = enum_name::<FileUse>(&name);
                    if usage.is_none() {
                        self.problem(
                            location(n),
                            format!("{field}.use"),
                            format!("{name:?} is not one of verify, pi-extension, claude-settings"),
                        );
                    }
                    usage
                }),
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
            if runtime == Some(Runtime::Opencode) && role == Some(PinRole::HookAdapter) {
                self.problem(
                    m.get_node("role").and_then(location),
                    format!("{field}.role"),
                    "runtime opencode runs no hook adapter file: give OpenCode its hooks as a \
                     verified plugin (plugins: a directory whose plugins/<name>.ts returns \
                     tool.execute.before and the like)",
                );
            }
            if runtime == Some(Runtime::Codex) && role == Some(PinRole::HookAdapter) {
                self.problem(
                    m.get_node("role").and_then(location),
                    format!("{field}.role"),
                    "runtime codex runs no hook adapter of this kind: give Codex its hooks as \
                     a config adapter placed at its hooks file (role: config, to: hooks.json), \
                     which pitcrew verifies and has Codex trust",
                );
            }
            let to = m.get_node("to").and_then(|n| {
                let to = self.string(n, &format!("{field}.to"))?;
                let problem = match role {
                    Some(PinRole::Config) => config_place_problem(&to, runtime),
                    Some(_) => Some(
                        "only a config adapter (role: config) is placed below the runtime's \
                         config directory; the others go to the adapters directory under \
                         their file name"
                            .to_string(),
                    ),
                    // The missing or unknown role is reported already.
                    None => None,
                };
                match problem {
                    Some(problem) => {
                        self.problem(location(n), format!("{field}.to"), problem);
                        None
                    }
                    None => Some(to),
                }
            });
            let Some(raw) = raw else {
                self.problem(at, format!("{field}.path"), "missing");
                continue;
            };
            let Some((host_path, name, pin)) =
                self.source_path(at, &format!("{field}.path"), &raw, RemoteKind::Blob)
            else {
                continue;
            };
            let (Some(role), Some(usage)) = (role, usage) else {
                continue;
            };
            out.push(AdapterSpec {
                path: raw,
                host_path,
                name,
                role,
                usage,
                to,
                pin,
            });
        }
        out
    }

    /// The `skills:` list.
    pub(super) fn skills(&mut self, node: &Node) -> Vec<SkillSpec> {
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
            let Some((host_path, name, pin)) = self.source_path(at, &field, &raw, RemoteKind::Tree)
            else {
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
                name,
                path: raw,
                host_path,
                pin,
            });
        }
        out
    }
}

/// The longest name of one component of a config adapter's `to:` (`NAME_MAX`).
const MAX_NAME: usize = 255;

/// What makes `to` unusable as the place of a config adapter below the runtime's config
/// directory, if anything: it must be a relative path of plain names (no empty, `.` or `..`
/// component, no absolute path), each at most 255 bytes, without a newline, carriage return,
/// NUL or backslash (names the upload and the tree hash refuse), and for pi not inside its
/// session directory (`sessions/`, emptied before every iteration).
pub(super) fn config_place_problem(to: &str, runtime: Option<Runtime>) -> Option<String> {
    const EXAMPLE: &str = "a path below the runtime's config directory, like agents/reviewer.md";
    if to.is_empty() {
        return Some(format!("is empty: give {EXAMPLE}"));
    }
    if to.starts_with('/') {
        return Some(format!("{to:?} is absolute: give {EXAMPLE}"));
    }
    if to.contains(['\n', '\r', '\0', '\\']) {
        return Some(format!(
            "{to:?} contains a newline, carriage return, NUL or backslash"
        ));
    }
    if to.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return Some(format!(
            "{to:?} must be plain names separated by single slashes: no empty, `.` or `..` \
             component, no trailing slash (name the file itself)"
        ));
    }
    if let Some(long) = to.split('/').find(|c| c.len() > MAX_NAME) {
        return Some(format!("the name {long:?} is longer than {MAX_NAME} bytes"));
    }
    let name = to.split('/').next_back().unwrap_or_default();
    if runtime == Some(Runtime::Codex)
        && (name.ends_with("config.toml") || (name == "hooks.json" && to != "hooks.json"))
    {
        return Some(format!(
            "{to:?}: Codex would not read it (pitcrew runs it with --ignore-user-config and \
             sets its configuration itself: agent.model, agent.tools, agent.context_files; \
             its hooks come from hooks.json at the top of its config dir)"
        ));
    }
    let first = to.split('/').next().unwrap_or_default();
    if runtime == Some(Runtime::Opencode)
        && (["opencode.json", "opencode.jsonc", "config.json"].contains(&to)
            || ["plugin", "plugins"].contains(&first))
    {
        return Some(format!(
            "{to:?}: pitcrew writes OpenCode's configuration itself (agent.model, agent.tools, \
             agent.context_files, skills:) and links its plugin modules into plugins/ of its \
             config dir from the verified plugins: (a configuration file there could bring \
             npm plugins, MCP servers and permissions on ask)"
        ));
    }
    if runtime == Some(Runtime::Pi) && to.split('/').next() == Some("sessions") {
        return Some(format!(
            "{to:?} is in pi's session directory (sessions/), which is emptied before every \
             iteration"
        ));
    }
    None
}

/// The message for a missing or unknown adapter role, with every role and its exit code.
fn role_help(what: &str) -> String {
    format!(
        "{what}: role is one of hook-adapter (exit 97), runtime-manifest (95), sub-agent (94), edit-repair (93), config (98)"
    )
}
