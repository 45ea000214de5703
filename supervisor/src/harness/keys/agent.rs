//! The keys that say what runs as the agent: `runtime`, `agent` (`binary`, `args`, `model`,
//! `tools`, `claude_agent`, `record_prompt`, `context_files`), `command` and `prompt`, and the
//! checks across them once the harness is whole (tool names of the other runtime, skills no
//! tool reads, Claude Code's settings, the agent on this host).

use super::super::model::{AgentSection, Harness, Location};
use super::super::yaml::{enum_name, location, Checker};
use crate::env_policy;
use crate::manifest::{ContextFiles, Runtime};
use marked_yaml::types::MarkedMappingNode;
use marked_yaml::Node;

/// The keys `agent:` may have.
const AGENT_KEYS: &[&str] = &[
    "binary",
    "args",
    "model",
    "tools",
    "claude_agent",
    "record_prompt",
    "context_files",
];

impl Checker<'_> {
    /// `runtime:` (required): pi, claude, codex, opencode or command.
    pub(super) fn runtime_key(&mut self, node: &Node, top: &MarkedMappingNode) -> Option<Runtime> {
        let Some(n) = top.get_node("runtime") else {
            self.problem(
                location(node),
                "runtime",
                "missing (pi, claude, codex, opencode or command)",
            );
            return None;
        };
        let name = self.string(n, "runtime")?;
        let runtime = enum_name::<Runtime>(&name);
        if runtime.is_none() {
            self.problem(
                location(n),
                "runtime",
                format!("{name:?} is not a runtime (pi, claude, codex, opencode or command)"),
            );
        }
        runtime
    }

    /// `agent:`, each of its keys against its rule (`agent.args` against `runtime`'s releases).
    pub(super) fn agent_key(
        &mut self,
        top: &MarkedMappingNode,
        runtime: Option<Runtime>,
    ) -> AgentSection {
        let mut agent = AgentSection::default();
        let Some(m) = top.get_node("agent").and_then(|n| self.mapping(n, "agent")) else {
            return agent;
        };
        self.unknown_keys(m, "agent", AGENT_KEYS);
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
            agent.tools = Some(self.tools(n));
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
        agent
    }

    /// `agent.tools`: a list of tool names.
    fn tools(&mut self, node: &Node) -> Vec<String> {
        let tools = self.string_list(node, "agent.tools");
        for (i, tool) in tools.iter().enumerate() {
            if !crate::manifest::is_tool_name(tool) {
                self.problem(
                    location(node),
                    format!("agent.tools[{i}]"),
                    format!(
                        "{tool:?} is not a tool name (the runtimes take the list joined with \
                         ','; [] gives no built-in tools)"
                    ),
                );
            }
        }
        tools
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

    /// `command:` and `prompt:` for `runtime`: runtime command runs `command:` and nothing else
    /// (no `agent:`, `prompt:` ignored); pi and Claude Code need a prompt and take no
    /// `command:`. Returns both.
    pub(super) fn command_and_prompt(
        &mut self,
        node: &Node,
        top: &MarkedMappingNode,
        runtime: Option<Runtime>,
    ) -> (Vec<String>, Option<String>) {
        let command = match top.get_node("command") {
            Some(n) => self.string_list(n, "command"),
            None => Vec::new(),
        };
        let prompt = top
            .get_node("prompt")
            .and_then(|n| self.string(n, "prompt"));
        match runtime {
            Some(Runtime::Command) => self.command_runtime(node, top, &command),
            Some(rt) => self.prompted_runtime(node, top, rt, prompt.as_deref()),
            None => {}
        }
        if let Some(cmd0) = command.first() {
            let at = top.get_node("command").and_then(location);
            self.program(at, "command[0]", "program", cmd0);
        }
        (command, prompt)
    }

    /// Runtime command: a non-empty `command:`, no `agent:`; a `prompt:` is noted as ignored.
    fn command_runtime(&mut self, node: &Node, top: &MarkedMappingNode, command: &[String]) {
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

    /// pi or Claude Code: no `command:`, a prompt that cannot be read as an option, and a note
    /// for each `agent:` option only the other runtime reads.
    fn prompted_runtime(
        &mut self,
        node: &Node,
        top: &MarkedMappingNode,
        rt: Runtime,
        prompt: Option<&str>,
    ) {
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
        match prompt {
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

    /// The notes only the whole harness can give about its agent: tool names of the other
    /// runtime's kind, skills no listed tool reads, Claude Code's settings, and an agent this
    /// host cannot run (the local engine runs it from here).
    pub(super) fn agent_notes(&mut self, top: &MarkedMappingNode, harness: &Harness) {
        let tools_at = top
            .get_node("agent")
            .and_then(Node::as_mapping)
            .and_then(|m| m.get_node("tools"))
            .and_then(location);
        if let Some(tools) = &harness.agent.tools {
            self.tool_names(tools_at, harness.runtime, tools);
            if !harness.skills.is_empty() {
                self.skill_readers(tools_at, harness.runtime, tools);
            }
        }
        if harness.runtime == Runtime::Claude {
            self.claude_context(top, harness);
        }
        if harness.runtime == Runtime::Opencode && harness.agent.model.is_none() {
            self.problem(
                top.get_node("agent").and_then(location),
                "agent.model",
                "runtime opencode needs agent.model: pitcrew gives OpenCode one provider \
                 (its baseURL OPENAI_BASE_URL) and the model of it to use",
            );
        }
        self.agent_on_this_host(top, harness);
    }

    /// pi's tool names are lowercase (`read`, `bash`), Claude Code's capitalised (`Read`,
    /// `Bash`): a name of the other runtime's kind names no tool, and the runtime then has
    /// fewer tools than the harness meant (Claude Code, which only took `agent.tools` since it
    /// is passed as `--tools`, is the likely case).
    fn tool_names(&mut self, at: Option<Location>, runtime: Runtime, tools: &[String]) {
        if runtime == Runtime::Codex {
            self.codex_tool_names(at, tools);
            return;
        }
        if runtime == Runtime::Opencode {
            self.opencode_tool_names(at, tools);
            return;
        }
        let other_kind = |t: &String| match runtime {
            Runtime::Pi => t.starts_with(|c: char| c.is_ascii_uppercase()),
            Runtime::Claude => t.starts_with(|c: char| c.is_ascii_lowercase()),
            Runtime::Codex | Runtime::Opencode | Runtime::Command => false,
        };
        if let Some(name) = tools.iter().find(|t| other_kind(t)) {
            self.note(
                at,
                "agent.tools",
                format!(
                    "{name:?} is not how {} names its tools ({})",
                    runtime.as_str(),
                    if runtime == Runtime::Pi {
                        "read, bash, edit, write, grep, find, ls"
                    } else {
                        "Bash, Read, Edit, Write, Glob, Grep, Skill, …"
                    }
                ),
            );
        }
    }

    /// Codex has no tool allowlist: pitcrew turns off each tool group `agent.tools` leaves out
    /// ([`crate::runtime_argv::CODEX_TOOLS`]), so a name that is none of them cannot be honoured.
    fn codex_tool_names(&mut self, at: Option<Location>, tools: &[String]) {
        let known: Vec<&str> = crate::runtime_argv::CODEX_TOOLS
            .iter()
            .map(|(name, _)| *name)
            .collect();
        for name in tools.iter().filter(|t| !known.contains(&t.as_str())) {
            self.problem(
                at,
                "agent.tools",
                format!(
                    "{name:?} is no tool pitcrew can give or take from codex: it has no \
                     allowlist, and pitcrew turns off each of {} that the list leaves out \
                     (request_user_input always stays)",
                    known.join(", ")
                ),
            );
        }
    }

    /// OpenCode's `agent.tools` turns off each of its built-in tools the list leaves out
    /// ([`crate::opencode_config::BUILTIN_TOOLS`]): a name that is none of them cannot be
    /// honoured.
    fn opencode_tool_names(&mut self, at: Option<Location>, tools: &[String]) {
        let known = crate::opencode_config::BUILTIN_TOOLS;
        for name in tools.iter().filter(|t| !known.contains(&t.as_str())) {
            self.problem(
                at,
                "agent.tools",
                format!(
                    "{name:?} is no built-in tool of opencode; pitcrew turns off each of {} \
                     that the list leaves out",
                    known.join(", ")
                ),
            );
        }
        let one = |t: &str| tools.iter().any(|x| x == t);
        if one("write") != one("edit") {
            self.note(
                at,
                "agent.tools",
                "write and edit share OpenCode's edit permission: the list gives opencode both",
            );
        }
    }

    /// Skills reach the model only through a tool that reads them.
    fn skill_readers(&mut self, at: Option<Location>, runtime: Runtime, tools: &[String]) {
        let readers: &[&str] = match runtime {
            // pi 0.73.1 lists skills only with `read`; later versions with `bash` too.
            Runtime::Pi => &["read"],
            Runtime::Claude => &["Skill"],
            Runtime::Opencode => &["skill"],
            Runtime::Codex | Runtime::Command => &[],
        };
        if !readers.is_empty() && !tools.iter().any(|t| readers.contains(&t.as_str())) {
            self.note(
                at,
                "agent.tools",
                format!(
                    "none of {} is listed, so {} offers the model no skill",
                    readers.join(", "),
                    runtime.as_str()
                ),
            );
        }
    }

    /// What Claude Code is given beside the verified set: the `--settings` derived from a
    /// `claude-settings` file (hooks kept on, built-in plugins it does not name off). (The workdir's
    /// `CLAUDE.md` goes with `--append-system-prompt-file`, which `agent.args` may never give:
    /// it reads a file pitcrew did not verify.)
    fn claude_context(&mut self, top: &MarkedMappingNode, harness: &Harness) {
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

    /// The local engine runs the agent from this host's filesystem and `PATH`: one it would
    /// not find or could not run is noted (a container image must have it).
    fn agent_on_this_host(&mut self, top: &MarkedMappingNode, harness: &Harness) {
        let program = harness.agent_program();
        // A relative path with a `/` is a problem of its own (not an absolute sandbox path).
        if program.is_empty() || (program.contains('/') && !program.starts_with('/')) {
            return;
        }
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
                    "not on this host: {}; the local engine would fail with {} (a container \
                     image must have it)",
                    failure.reason, failure.exit_code
                ),
            );
        }
    }
}
