//! The argv each runtime needs to load exactly what was verified, run headless and report in
//! JSON (the judge reads it). `argv[0]` is the resolved absolute binary
//! from the verify step.
//!
//! - **pi**: `--print --mode json --no-extensions --no-skills --no-prompt-templates
//!   --no-themes` (and `--no-approve` from pi 0.87.1), then `-e <file>` per `files[]` entry with
//!   `use: pi-extension` (manifest order: adapters first, since pi runs `tool_call` handlers in
//!   `-e` order and the first block wins; then single-file plugins, role `plugin`, each followed
//!   by its `pi_args`), then per `pi-extension` tree `-e <path>/<entry>` for
//!   each entry followed by the tree's `pi_args`, then `--skill <path>/SKILL.md` per skill tree (role
//!   `skill`: with `--no-skills`, exactly these skills and none pi would discover; the file, since
//!   pi given the directory honours the tree's ignore files and offers its other `*.md`), then the
//!   tools (`--tools a,b` followed by every tool the verified extensions register that the list
//!   does not name, since pi's allowlist filters extension tools too; or `--no-builtin-tools`
//!   for an empty list, which keeps them), `--model`, `agent.args`,
//!   `--session-dir <sessions>`, the prompt last. pi gives an unknown `--flag` the next argument
//!   as its value unless it starts with `-`: with pitcrew's own option right before it, the
//!   prompt is never taken for the value of an extension flag the harness left without one
//!   (pi then says the flag needs a value).
//! - **claude**: `-p --output-format stream-json --verbose --setting-sources user`, the tools
//!   (`--tools a,b`, `--tools ""` for none; followed by an option, since Claude's `--tools`
//!   takes several values), `--settings '<json>'` (settings that keep hooks on and turn off
//!   Claude Code's built-in plugins, or those the supervisor derived from the verified bytes of
//!   the one `use: claude-settings` file: [`crate::claude_settings`]), `--append-system-prompt-file
//!   <workdir>/CLAUDE.md` (when the context step found one to give it: Claude Code reads no
//!   project file with `--setting-sources user`), `--plugin-dir <path>` per `claude-plugin`
//!   tree, then per skill tree the plugin directory the supervisor made for it
//!   (`<parent>/.pitcrew-claude-skills/<name>`, holding only `skills/<name>/` with a
//!   `SKILL.md` derived from the verified one: nothing of the skills tree runs), `--agent`,
//!   `--model`, `agent.args`, `--dangerously-skip-permissions`, the prompt last.
//! - **codex**: `exec --json --skip-git-repo-check --ephemeral --ignore-user-config
//!   --ignore-rules --strict-config --sandbox danger-full-access`, then Codex's configuration as
//!   `-c` overrides and `--disable` features ([`CODEX_CONFIG`]: no analytics, plugins, bundled
//!   or discovered skills, web search, shell snapshot or unbounded connection retries;
//!   `project_doc_max_bytes=0` under `context_files: none`), the hooks (`--disable hooks`, or,
//!   when the harness pins `hooks.json` in the config dir, `--dangerously-bypass-hook-trust`:
//!   pitcrew verified it, and no other hooks file is read: [`codex_hooks_pinned`]; also with
//!   verified plugins, whose `hooks/hooks.json` Codex runs only so), the model
//!   provider `pitcrew` when
//!   the agent's environment has an `OPENAI_BASE_URL` (its value as `base_url`, Responses API,
//!   key from `OPENAI_API_KEY`), the tools `agent.tools` leaves out turned off
//!   ([`CODEX_TOOLS`]), `--model`, `agent.args`, the prompt last. `--ignore-user-config` keeps
//!   `$CODEX_HOME/config.toml` unread: everything Codex is configured with is in the argv the
//!   record shows; with verified plugins ([`codex_plugins_delivered`]) it is left out and
//!   `--disable plugins` too, Codex reading the `config.toml` the supervisor wrote, which only
//!   enables them. Codex's own sandbox is off:
//!   pitcrew's confinement is the sandbox (docs/agent-support.md says why).
//! - **command**: the binary and `agent.args`.
//!
//! `agent.args` of pi and claude is checked first against the release found in the sandbox
//! ([`crate::env_policy::agent_args`]): an option that loads code, skills, prompts, settings or
//! MCP servers, grants project trust or sets what pitcrew sets is refused by name, and nothing
//! is launched (the host's `validate` refused it already; this holds for a manifest that did not
//! come through it).
//!
//! Each runtime skips the trees and files of the other's kind. A prompt starting with `-` is
//! refused for pi and claude (pi 0.73 has no `--` terminator, so it would be read as an
//! option); for pi a prompt starting with `@` is refused too (pi reads `@path` as a file to
//! attach). An element containing NUL is refused (exec could not pass it).

use crate::env_policy::agent_args::{agent_args_problems, Against, AgentArgProblem};
use crate::manifest::{ContextFiles, FileUse, Manifest, Runtime, RuntimeDirPaths, TreeKind};
use crate::result::PromptRecord;
use crate::runtime_version::PiFeatures;
use std::path::Path;

/// Why no argv could be built (the iteration fails with exit 125).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgvError {
    /// pi and claude need `manifest.prompt`.
    #[error("the {runtime} runtime needs a prompt (manifest field prompt)")]
    MissingPrompt {
        /// The runtime.
        runtime: &'static str,
    },
    /// The prompt starts with `-`.
    #[error("prompt starts with '-': {runtime} would read it as an option (there is no `--` terminator)")]
    PromptLooksLikeOption {
        /// The runtime.
        runtime: &'static str,
    },
    /// The prompt starts with `@` (pi).
    #[error("prompt starts with '@': pi would read it as a file to attach")]
    PromptLooksLikeFile,
    /// Several files have `use: claude-settings`.
    #[error("files {first} and {second} both have use: claude-settings; Claude Code takes one --settings")]
    SeveralClaudeSettings {
        /// The first such file.
        first: String,
        /// The second such file.
        second: String,
    },
    /// A `claude-settings` file is pinned but no settings were derived from it.
    #[error("the claude-settings file {path} was not read and derived before the argv was built")]
    ClaudeSettingsNotDerived {
        /// The file.
        path: String,
    },
    /// `agent.args` gives options the runtime release refuses there, or words it would read as
    /// the prompt (`(index, problem)`).
    #[error("{}", agent_args_text(.0))]
    AgentArgs(Vec<(usize, AgentArgProblem)>),
    /// An argv element contains a NUL byte.
    #[error("argv element {index} contains a NUL byte")]
    Nul {
        /// Index in argv.
        index: usize,
    },
    /// An argv element is longer than one argument may be.
    #[error("argv element {index} is {bytes} bytes, over the {MAX_ARG_BYTES} one argument may hold (a prompt that long does not fit)")]
    TooLong {
        /// Index in argv.
        index: usize,
        /// Its length.
        bytes: usize,
    },
}

/// The problems of `agent.args`, each with its index, joined.
fn agent_args_text(problems: &[(usize, AgentArgProblem)]) -> String {
    problems
        .iter()
        .map(|(i, p)| format!("agent.args[{i}]: {p}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The longest argv element `execve` takes (Linux `MAX_ARG_STRLEN`, 32 pages, less its NUL).
pub const MAX_ARG_BYTES: usize = 32 * 4096 - 1;

/// The full argv (`argv[0]` = the resolved absolute binary) for the manifest's runtime, whose
/// release is `version` when known ([`crate::runtime_version::detect`]); `agent.args` checked
/// against that release first (against every supported one when it is unknown).
/// `agent_env` is the environment the agent is launched with (Codex's model endpoint is its
/// `OPENAI_BASE_URL`). `claude_md` is the workdir's `CLAUDE.md` the context step found for Claude Code
/// ([`crate::context_files`]); `claude_settings` the settings derived from the pinned
/// `claude-settings` file (`crate::claude_settings`), which Claude Code needs when one is
/// pinned; `extension_tools` the tools the verified pi extensions register
/// ([`extension_tools`]), added to a non-empty `agent.tools` for pi.
#[allow(clippy::too_many_arguments)] // each input is a separate step's finding
pub fn argv(
    manifest: &Manifest,
    dirs: &RuntimeDirPaths,
    binary: &Path,
    version: Option<&str>,
    agent_env: &[(String, String)],
    claude_md: Option<&str>,
    claude_settings: Option<&str>,
    extension_tools: &[String],
) -> Result<Vec<String>, ArgvError> {
    let refused = agent_args_problems(
        manifest.runtime,
        Against::Found(version),
        &manifest.agent.args,
    );
    if !refused.is_empty() {
        return Err(ArgvError::AgentArgs(refused));
    }
    let mut v = vec![binary.to_string_lossy().into_owned()];
    match manifest.runtime {
        Runtime::Pi => pi_args(
            manifest,
            dirs,
            PiFeatures::of(version),
            extension_tools,
            &mut v,
        )?,
        Runtime::Claude => claude_args(manifest, claude_md, claude_settings, &mut v)?,
        Runtime::Codex => {
            let base_url = agent_env
                .iter()
                .find(|(name, _)| name == CODEX_BASE_URL_VAR)
                .map(|(_, value)| value.as_str());
            codex_args(manifest, dirs, base_url, &mut v)?;
        }
        Runtime::Opencode => opencode_args(manifest, &mut v)?,
        Runtime::Command => v.extend(manifest.agent.args.iter().cloned()),
    }
    if let Some(index) = v.iter().position(|a| a.contains('\0')) {
        return Err(ArgvError::Nul { index });
    }
    if let Some(index) = v.iter().position(|a| a.len() > MAX_ARG_BYTES) {
        return Err(ArgvError::TooLong {
            index,
            bytes: v[index].len(),
        });
    }
    Ok(v)
}

/// The argv as the record shows it: `argv` (what was executed, an interpreter possibly first)
/// with the prompt, the last element for pi and claude, shown as `<prompt>` unless
/// `agent.record_prompt`; and the prompt's place, length and SHA-256.
pub fn recorded(manifest: &Manifest, argv: &[String]) -> (Vec<String>, Option<PromptRecord>) {
    let mut shown = argv.to_vec();
    let carries_prompt = matches!(
        manifest.runtime,
        Runtime::Pi | Runtime::Claude | Runtime::Codex | Runtime::Opencode
    );
    let prompt = match (carries_prompt, shown.last_mut()) {
        (true, Some(last)) => {
            use sha2::Digest as _;
            let record = PromptRecord {
                index: argv.len() - 1,
                bytes: last.len(),
                sha256: hex::encode(sha2::Sha256::digest(last.as_bytes())),
            };
            if !manifest.agent.record_prompt {
                *last = "<prompt>".to_string();
            }
            Some(record)
        }
        _ => None,
    };
    (shown, prompt)
}

fn prompt(manifest: &Manifest) -> Result<&str, ArgvError> {
    let runtime = manifest.runtime.as_str();
    let prompt = manifest
        .prompt
        .as_deref()
        .ok_or(ArgvError::MissingPrompt { runtime })?;
    if prompt.starts_with('-') {
        return Err(ArgvError::PromptLooksLikeOption { runtime });
    }
    if manifest.runtime == Runtime::Pi && prompt.starts_with('@') {
        return Err(ArgvError::PromptLooksLikeFile);
    }
    Ok(prompt)
}

fn push(v: &mut Vec<String>, args: &[&str]) {
    v.extend(args.iter().map(|a| (*a).to_string()));
}

/// The tools the manifest's pi extensions register (`registerTool({ name: "tool"`, found by a
/// textual scan of each `pi-extension` tree and file, in manifest order, deduplicated): pi's
/// `--tools` allowlist applies to extension tools too, so [`argv`] adds them to `agent.tools`.
///
/// # Errors
/// A tree or file cannot be read (its path and why).
pub fn extension_tools(m: &Manifest) -> Result<Vec<String>, String> {
    let mut found = Vec::new();
    let files = m.files.iter().filter(|f| f.usage == FileUse::PiExtension);
    for file in files {
        let tools = crate::plugin_format::registered_tools_in_file(Path::new(&file.path))
            .map_err(|e| e.to_string())?;
        found.extend(tools);
    }
    for tree in m.trees.iter().filter(|t| t.kind == TreeKind::PiExtension) {
        let tools = crate::plugin_format::registered_tools(Path::new(&tree.path))
            .map_err(|e| e.to_string())?;
        found.extend(tools);
    }
    let mut seen = std::collections::BTreeSet::new();
    found.retain(|t| seen.insert(t.clone()));
    Ok(found)
}

/// The names of pi's built-in tools (every supported release's `--help`, "Built-in Tool
/// Names"). pi's `--tools` allowlist covers them too: one of these names added for an extension
/// would offer the model the built-in tool whenever the extension does not register it (the
/// scan for registered tools is textual: a comment counts), so only `agent.tools` names them.
pub const PI_BUILTIN_TOOLS: &[&str] = &[
    "read",
    "bash",
    "powershell",
    "edit",
    "write",
    "grep",
    "find",
    "ls",
];

/// `agent.tools` then each of `extension_tools` it does not name, but for pi's built-in tool
/// names ([`PI_BUILTIN_TOOLS`]).
fn tools_union(tools: &[String], extension_tools: &[String]) -> Vec<String> {
    let mut all = tools.to_vec();
    for tool in extension_tools {
        if !all.contains(tool) && !PI_BUILTIN_TOOLS.contains(&tool.as_str()) {
            all.push(tool.clone());
        }
    }
    all
}

fn pi_args(
    m: &Manifest,
    dirs: &RuntimeDirPaths,
    features: PiFeatures,
    extension_tools: &[String],
    v: &mut Vec<String>,
) -> Result<(), ArgvError> {
    let prompt = prompt(m)?;
    let sessions = dirs.sessions.clone();
    push(
        v,
        &[
            "--print",
            "--mode",
            "json",
            "--no-extensions",
            "--no-skills",
            "--no-prompt-templates",
            "--no-themes",
        ],
    );
    if features.no_approve {
        push(v, &["--no-approve"]);
    }
    if m.agent.context_files == ContextFiles::None {
        push(v, &["--no-context-files"]);
    }
    for file in m.files.iter().filter(|f| f.usage == FileUse::PiExtension) {
        push(v, &["-e", &file.path]);
        v.extend(file.pi_args.iter().cloned());
    }
    for tree in m.trees.iter().filter(|t| t.kind == TreeKind::PiExtension) {
        let root = tree.path.trim_end_matches('/');
        for entry in &tree.entries {
            push(v, &["-e", &format!("{root}/{entry}")]);
        }
        v.extend(tree.pi_args.iter().cloned());
    }
    // The skill's `SKILL.md` itself, not its directory: given a directory, pi skips a
    // `SKILL.md` the tree's own `.gitignore`, `.ignore` or `.fdignore` ignores and offers the
    // tree's other `*.md` files and nested `SKILL.md`s as skills instead.
    for tree in m.skill_trees() {
        let root = tree.path.trim_end_matches('/');
        push(v, &["--skill", &format!("{root}/SKILL.md")]);
    }
    match &m.agent.tools {
        Some(tools) if tools.is_empty() => push(v, &["--no-builtin-tools"]),
        // pi's allowlist holds extension tools too: a verified extension's tool stays.
        Some(tools) => push(
            v,
            &["--tools", &tools_union(tools, extension_tools).join(",")],
        ),
        None => {}
    }
    if let Some(model) = &m.agent.model {
        push(v, &["--model", model]);
    }
    v.extend(m.agent.args.iter().cloned());
    push(v, &["--session-dir", &sessions, prompt]);
    Ok(())
}

/// Claude Code's built-in plugins (its own list, 2.1.332), each turned off by
/// [`claude_builtins_off`]: `cc-plugin-plugin-authoring` offers the model a skill, the others
/// hooks or instructions (`cc-plugin-agents-md` loads the project's `AGENTS.md`), none of them
/// verified.
pub const CLAUDE_BUILTIN_PLUGINS: &[&str] = &[
    "cc-plugin-sec-default",
    "cc-plugin-agents-md",
    "cc-plugin-telemetry",
    "cc-plugin-privacy",
    "cc-plugin-hipaa-default",
    "cc-plugin-plugin-authoring",
    "cc-plugin-mods-guide",
    "cc-plugin-tips",
    "cc-plugin-mermaid",
    "cc-plugin-responsive-mode",
    "cc-plugin-diff",
    "cc-plugin-promos",
    "cc-plugin-you-should-know",
    "cc-plugin-easel",
    "claude-platform",
];

/// The settings (JSON) pitcrew gives Claude Code with `--settings` when the harness pins no
/// settings file of its own (one it pins gets the same added: `crate::claude_settings`): every
/// built-in plugin disabled (`enabledPlugins`), and
/// `disableAllHooks: false`. The config dir is the agent's to write during an iteration and
/// Claude Code reloads its user settings there as they change: a `disableAllHooks: true` the
/// agent writes would turn off the verified plugins' hooks in that same iteration, unless a
/// source above the user's (this one) says `false`.
pub fn claude_builtins_off() -> String {
    let off: serde_json::Map<String, serde_json::Value> = CLAUDE_BUILTIN_PLUGINS
        .iter()
        .map(|name| (format!("{name}@builtin"), serde_json::Value::Bool(false)))
        .collect();
    serde_json::json!({ "enabledPlugins": off, "disableAllHooks": false }).to_string()
}

fn claude_args(
    m: &Manifest,
    claude_md: Option<&str>,
    claude_settings: Option<&str>,
    v: &mut Vec<String>,
) -> Result<(), ArgvError> {
    let prompt = prompt(m)?;
    push(
        v,
        &[
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--setting-sources",
            "user",
        ],
    );
    // Several values: an option always follows (`--dangerously-skip-permissions` at least).
    if let Some(tools) = &m.agent.tools {
        push(v, &["--tools", &tools.join(",")]);
    }
    let mut settings = m
        .files
        .iter()
        .filter(|f| f.usage == FileUse::ClaudeSettings);
    if let Some(first) = settings.next() {
        if let Some(second) = settings.next() {
            return Err(ArgvError::SeveralClaudeSettings {
                first: first.path.clone(),
                second: second.path.clone(),
            });
        }
        // Never the file itself: the settings derived from its verified bytes, which keep
        // hooks on and the built-in plugins off unless the file says otherwise.
        let derived = claude_settings.ok_or_else(|| ArgvError::ClaudeSettingsNotDerived {
            path: first.path.clone(),
        })?;
        push(v, &["--settings", derived]);
    } else {
        push(v, &["--settings", &claude_builtins_off()]);
    }
    if let Some(path) = claude_md {
        push(v, &["--append-system-prompt-file", path]);
    }
    for tree in m.trees.iter().filter(|t| t.kind == TreeKind::ClaudePlugin) {
        push(v, &["--plugin-dir", &tree.path]);
    }
    // Never the skills tree itself: the supervisor's plugin directory holding its SKILL.md
    // (`crate::claude_skills`), made before the launch.
    for tree in m.skill_trees() {
        if let Some(dir) = crate::skill_md::claude_plugin_dir(&tree.path) {
            push(v, &["--plugin-dir", &dir]);
        }
    }
    if let Some(agent) = &m.agent.claude_agent {
        push(v, &["--agent", agent]);
    }
    if let Some(model) = &m.agent.model {
        push(v, &["--model", model]);
    }
    v.extend(m.agent.args.iter().cloned());
    push(v, &["--dangerously-skip-permissions", prompt]);
    Ok(())
}

/// The variable of the agent's environment whose value is the `base_url` of the model provider
/// pitcrew gives Codex (as `ANTHROPIC_BASE_URL` is Claude Code's endpoint).
pub const CODEX_BASE_URL_VAR: &str = "OPENAI_BASE_URL";

/// The variable Codex reads the API key of pitcrew's model provider from.
pub const CODEX_KEY_VAR: &str = "OPENAI_API_KEY";

/// What every Codex run is configured with (0.169.1), beside the model provider: each a `-c`
/// override or a `--disable` feature. No analytics (`analytics.enabled`) and no plugins (the
/// marketplace would be fetched from GitHub); none of the skills built into Codex and no list of the skills it discovers (in a
/// repository's `.codex/skills` and `.agents/skills`, trusted or not, and in `~/.agents`): no
/// skill reaches the model unverified; no web search (the provider's, past pitcrew's network);
/// no shell snapshot (Codex would run the login shell's start-up files); no unbounded
/// connection retries (an unreachable model endpoint would have Codex wait for the network
/// until the iteration's timeout; bounded, the turn fails after its 5 retries).
pub const CODEX_CONFIG: &[(&str, &str)] = &[
    ("-c", "analytics.enabled=false"),
    ("--disable", "plugins"),
    ("--disable", "shell_snapshot"),
    ("--disable", "unbounded_connection_retries"),
    ("-c", "skills.bundled.enabled=false"),
    ("-c", "skills.include_instructions=false"),
    ("-c", "web_search=\"disabled\""),
];

/// The tool names `agent.tools` may list for Codex, each with the features that turn it off
/// when it is left out: `shell` is `exec_command` and `write_stdin`. Codex has no allowlist:
/// its `request_user_input` tool (which `exec` answers itself) stays. Without `agent.tools`
/// every one is on but `multi_agent` (sub-agents), which only a list naming it turns on.
pub const CODEX_TOOLS: &[(&str, &[&str])] = &[
    ("shell", &["shell_tool", "unified_exec"]),
    ("view_image", &["view_image"]),
    ("goals", &["goals"]),
    ("multi_agent", &["multi_agent"]),
];

/// A TOML basic string holding `value`.
fn toml_string(value: &str) -> String {
    let mut out = String::from("\"");
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Whether the harness pins `hooks.json` in Codex's config dir (`CODEX_HOME`): Codex 0.169.1
/// loads it at start whatever `--ignore-user-config` says, and runs it once trusted. Pinned, it
/// is verified before every launch (drift: exit 98) and the config reset removes every other
/// file there; a repository's `.codex/hooks.json` is not loaded in an untrusted project, and
/// the only plugins are the verified ones. So pitcrew passes `--dangerously-bypass-hook-trust`
/// for it (and for verified plugins' hooks: [`codex_plugins_delivered`]), and `--disable hooks`
/// without either.
pub fn codex_hooks_pinned(m: &Manifest, dirs: &RuntimeDirPaths) -> bool {
    let hooks = format!("{}/hooks.json", dirs.config.trim_end_matches('/'));
    m.files.iter().any(|f| f.path == hooks)
}

/// Whether the manifest gives Codex verified plugins (trees of kind `codex-plugin`): then its
/// plugins stay on, it reads `CODEX_HOME/config.toml`, which the supervisor writes
/// ([`crate::codex_config::deliver_plugins`]), and its hooks are on with
/// `--dangerously-bypass-hook-trust` (Codex runs a plugin's `hooks/hooks.json` only trusted;
/// without a pinned `hooks.json` the config dir's is the supervisor's `{}`, a repository's is not
/// read in an untrusted project); otherwise `--disable plugins` and `--ignore-user-config`.
pub fn codex_plugins_delivered(m: &Manifest) -> bool {
    m.trees.iter().any(|t| t.kind == TreeKind::CodexPlugin)
}

fn codex_args(
    m: &Manifest,
    dirs: &RuntimeDirPaths,
    base_url: Option<&str>,
    v: &mut Vec<String>,
) -> Result<(), ArgvError> {
    let prompt = prompt(m)?;
    // With verified plugins, Codex reads the config.toml the supervisor writes (the only
    // place Codex 0.169.1 enables a plugin) and keeps its plugins on.
    let plugins = codex_plugins_delivered(m);
    push(
        v,
        &["exec", "--json", "--skip-git-repo-check", "--ephemeral"],
    );
    if !plugins {
        push(v, &["--ignore-user-config"]);
    }
    push(
        v,
        &[
            "--ignore-rules",
            "--strict-config",
            "--sandbox",
            "danger-full-access",
        ],
    );
    for (option, value) in CODEX_CONFIG {
        if plugins && *value == "plugins" {
            continue;
        }
        push(v, &[option, value]);
    }
    if codex_hooks_pinned(m, dirs) || plugins {
        push(v, &["--dangerously-bypass-hook-trust"]);
    } else {
        push(v, &["--disable", "hooks"]);
    }
    if m.agent.context_files == ContextFiles::None {
        push(v, &["-c", "project_doc_max_bytes=0"]);
    }
    if let Some(url) = base_url {
        let provider = [
            ("model_provider", toml_string("pitcrew")),
            ("model_providers.pitcrew.name", toml_string("pitcrew")),
            ("model_providers.pitcrew.base_url", toml_string(url)),
            ("model_providers.pitcrew.wire_api", toml_string("responses")),
            (
                "model_providers.pitcrew.env_key",
                toml_string(CODEX_KEY_VAR),
            ),
        ];
        for (key, value) in provider {
            push(v, &["-c", &format!("{key}={value}")]);
        }
    }
    match &m.agent.tools {
        Some(tools) => {
            for (tool, features) in CODEX_TOOLS {
                if !tools.iter().any(|t| t == tool) {
                    for feature in *features {
                        push(v, &["--disable", feature]);
                    }
                }
            }
        }
        // Sub-agents only when `agent.tools` names them: a sub-agent reads the workdir's
        // context files again when it is spawned, past what the record names.
        None => push(v, &["--disable", "multi_agent"]),
    }
    if let Some(model) = &m.agent.model {
        push(v, &["--model", model]);
    }
    v.extend(m.agent.args.iter().cloned());
    v.push(prompt.to_string());
    Ok(())
}

/// Whether OpenCode loads plugin modules for `m`: only when the harness verified some
/// (`opencode-plugin` trees, linked into the pinned config dir:
/// `crate::opencode_config::deliver_plugins`); otherwise `--pure` (no plugin module of any
/// config dir, no npm plugin).
pub fn opencode_plugins(m: &Manifest) -> bool {
    m.trees.iter().any(|t| t.kind == TreeKind::OpencodePlugin)
}

fn opencode_args(m: &Manifest, v: &mut Vec<String>) -> Result<(), ArgvError> {
    let prompt = prompt(m)?;
    push(v, &["run", "--format", "json"]);
    if !opencode_plugins(m) {
        push(v, &["--pure"]);
    }
    if let Some(model) = &m.agent.model {
        push(v, &["--model", &format!("pitcrew/{model}")]);
    }
    v.extend(m.agent.args.iter().cloned());
    v.push(prompt.to_string());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn opencode_runs_pure_with_pitcrews_model_and_the_prompt_last() {
        let m = manifest(json!({
            "version": 1, "runtime": "opencode", "prompt": "fix it", "workdir": "/w",
            "agent": {"binary": "opencode", "model": "m1", "args": ["--log-level", "WARN"]},
        }));
        let got = argv(&m, Path::new("/o"), Some("1.18.33"), None, None, &[]).unwrap();
        assert_eq!(
            got.join(" "),
            "/o run --format json --pure --model pitcrew/m1 --log-level WARN fix it"
        );
        let mut bad = m.clone();
        bad.agent.args = vec!["--auto".into()];
        let err = argv(&bad, Path::new("/o"), None, None, None, &[]).unwrap_err();
        assert!(
            err.to_string()
                .contains("--auto is an option of OpenCode 1.18.33"),
            "{err}"
        );
        assert_eq!(recorded(&m, &got).0.last().unwrap(), "<prompt>");
    }

    /// [`super::argv`] with the manifest's own runtime directories.
    fn argv(
        m: &Manifest,
        binary: &Path,
        version: Option<&str>,
        claude_md: Option<&str>,
        claude_settings: Option<&str>,
        extension_tools: &[String],
    ) -> Result<Vec<String>, ArgvError> {
        super::argv(
            m,
            &m.runtime_dirs(),
            binary,
            version,
            &[],
            claude_md,
            claude_settings,
            extension_tools,
        )
    }

    fn manifest(v: serde_json::Value) -> Manifest {
        Manifest::from_json(v.to_string().as_bytes()).unwrap()
    }

    fn tree(name: &str, kind: &str, extra: serde_json::Value) -> serde_json::Value {
        let mut t = json!({
            "name": name, "path": format!("/sandbox/plugins/{name}"), "role": "plugin",
            "kind": kind, "format": "pi-tree-v1", "sha256": "a".repeat(64),
        });
        for (k, val) in extra.as_object().unwrap() {
            t[k] = val.clone();
        }
        t
    }

    fn file(path: &str, role: &str, usage: &str) -> serde_json::Value {
        json!({"path": path, "role": role, "sha256": "b".repeat(64), "use": usage})
    }

    /// With a verified Codex plugin, Codex keeps its plugins on and reads the user config the
    /// supervisor writes: no `--disable plugins`, no `--ignore-user-config`; the rest is as
    /// without.
    #[test]
    fn codex_with_a_verified_plugin_reads_the_supervisors_config_with_plugins_on() {
        let m = manifest(json!({
            "version": 1, "runtime": "codex", "prompt": "fix it", "workdir": "/w",
            "agent": {"binary": "codex"},
            "trees": [tree("cx", "codex-plugin", json!({}))],
        }));
        let got = argv(&m, Path::new("/c"), None, None, None, &[]).unwrap();
        let joined = got.join(" ");
        assert!(
            joined.starts_with(
                "/c exec --json --skip-git-repo-check --ephemeral --ignore-rules \
                 --strict-config --sandbox danger-full-access -c analytics.enabled=false \
                 --disable shell_snapshot"
            ),
            "{joined}"
        );
        assert!(!joined.contains("--disable plugins"), "{joined}");
        assert!(
            joined.contains("-c skills.include_instructions=false"),
            "{joined}"
        );
        assert!(!joined.contains("--disable hooks"), "{joined}");
        assert!(
            joined.contains("--dangerously-bypass-hook-trust"),
            "{joined}"
        );
    }

    #[test]
    fn codex_gets_its_configuration_the_provider_and_the_tools_left_out_turned_off() {
        let m = manifest(json!({
            "version": 1, "runtime": "codex", "prompt": "fix it", "workdir": "/w",
            "agent": {"binary": "codex", "model": "m1", "tools": ["shell"],
                      "context_files": "none", "args": ["--color", "never"]},
        }));
        let env = [(
            "OPENAI_BASE_URL".to_string(),
            "http://127.0.0.1:9/v\"1".to_string(),
        )];
        let got = super::argv(
            &m,
            &m.runtime_dirs(),
            Path::new("/c"),
            None,
            &env,
            None,
            None,
            &[],
        )
        .unwrap();
        let joined = got.join(" ");
        assert!(
            joined.starts_with(
                "/c exec --json --skip-git-repo-check --ephemeral --ignore-user-config \
                 --ignore-rules --strict-config --sandbox danger-full-access -c \
                 analytics.enabled=false --disable plugins"
            ),
            "{joined}"
        );
        assert!(joined.contains("-c project_doc_max_bytes=0"), "{joined}");
        assert!(joined.contains("--disable hooks"), "{joined}");
        assert!(!joined.contains("hook-trust"), "{joined}");
        assert!(
            got.contains(
                &r#"model_providers.pitcrew.base_url="http://127.0.0.1:9/v\"1""#.to_string()
            ),
            "{got:?}"
        );
        assert!(joined.contains("--disable view_image --disable goals --disable multi_agent"));
        assert!(!joined.contains("--disable shell_tool"), "{joined}");
        assert!(
            joined.ends_with("--model m1 --color never fix it"),
            "{joined}"
        );
        // Without OPENAI_BASE_URL, Codex's own provider; a config option in agent.args is refused.
        let plain = super::argv(
            &m,
            &m.runtime_dirs(),
            Path::new("/c"),
            None,
            &[],
            None,
            None,
            &[],
        )
        .unwrap();
        assert!(!plain.join(" ").contains("model_provider"), "{plain:?}");
        // Without agent.tools, every tool but sub-agents.
        let mut untold = m.clone();
        untold.agent.tools = None;
        let all = argv(&untold, Path::new("/c"), None, None, None, &[]).unwrap();
        let all = all.join(" ");
        assert!(all.contains("--disable multi_agent"), "{all}");
        assert!(!all.contains("--disable view_image"), "{all}");
        let mut bad = m.clone();
        bad.agent.args = vec!["-c".into(), "sandbox_mode=\"x\"".into()];
        let err = argv(&bad, Path::new("/c"), None, None, None, &[]).unwrap_err();
        assert!(matches!(err, ArgvError::AgentArgs(_)), "{err}");
        // A pinned hooks.json in the config dir: hooks on, its trust pitcrew's verification.
        let mut hooked = m.clone();
        let config = m.runtime_dirs().config;
        hooked.files =
            vec![
                serde_json::from_value(file(&format!("{config}/hooks.json"), "config", "verify"))
                    .unwrap(),
            ];
        let with_hooks = argv(&hooked, Path::new("/c"), None, None, None, &[]).unwrap();
        assert!(with_hooks.contains(&"--dangerously-bypass-hook-trust".to_string()));
        assert!(
            !with_hooks.join(" ").contains("--disable hooks"),
            "{with_hooks:?}"
        );
        let (shown, prompt) = recorded(&m, &got);
        assert_eq!(shown.last().map(String::as_str), Some("<prompt>"));
        assert_eq!(prompt.map(|p| p.bytes), Some(6));
    }

    fn pi_manifest() -> serde_json::Value {
        json!({
            "version": 1,
            "runtime": "pi",
            "agent": {
                "binary": "pi", "model": "mock/mock-model", "tools": ["read", "bash"],
                "args": ["--thinking", "high"],
            },
            "prompt": "fix the bug",
            "workdir": "/sandbox/workspace",
            "dirs": {"sessions": "/sandbox/pi-config/sessions"},
            "files": [
                file("/sandbox/pi-config/models.json", "config", "verify"),
                file("/usr/local/share/pitcrew/hooks.js", "hook-adapter", "pi-extension"),
                file("/usr/local/share/pitcrew/agent.js", "sub-agent", "pi-extension"),
                file("/sandbox/claude-config/hooks.json", "hook-adapter", "claude-settings"),
            ],
            "trees": [
                tree("hello", "pi-extension", json!({
                    "entries": ["index.ts", "extra/tool.ts"],
                    "pi_args": ["--greeting=Hello", "--loud"],
                })),
                tree("claudy", "claude-plugin", json!({})),
                tree("data", "data", json!({})),
                tree("second", "pi-extension", json!({"entries": ["main.js"]})),
                tree("skill:review", "data", json!({
                    "role": "skill", "path": "/sandbox/skills/review",
                })),
            ],
        })
    }

    #[test]
    fn pi_argv_exact() {
        let m = manifest(pi_manifest());
        let got = argv(
            &m,
            Path::new("/usr/local/bin/pi"),
            Some("0.73.1"),
            None,
            None,
            &[],
        )
        .unwrap();
        let want = [
            "/usr/local/bin/pi",
            "--print",
            "--mode",
            "json",
            "--no-extensions",
            "--no-skills",
            "--no-prompt-templates",
            "--no-themes",
            "-e",
            "/usr/local/share/pitcrew/hooks.js",
            "-e",
            "/usr/local/share/pitcrew/agent.js",
            "-e",
            "/sandbox/plugins/hello/index.ts",
            "-e",
            "/sandbox/plugins/hello/extra/tool.ts",
            "--greeting=Hello",
            "--loud",
            "-e",
            "/sandbox/plugins/second/main.js",
            "--skill",
            "/sandbox/skills/review/SKILL.md",
            "--tools",
            "read,bash",
            "--model",
            "mock/mock-model",
            "--thinking",
            "high",
            "--session-dir",
            "/sandbox/pi-config/sessions",
            "fix the bug",
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn pi_argv_minimal_uses_default_session_dir() {
        let m = manifest(json!({
            "version": 1, "runtime": "pi", "agent": {"binary": "pi"},
            "prompt": "hi", "workdir": "/sandbox/workspace",
        }));
        let got = argv(
            &m,
            Path::new("/usr/bin/pi"),
            Some("0.73.1"),
            None,
            None,
            &[],
        )
        .unwrap();
        let want = [
            "/usr/bin/pi",
            "--print",
            "--mode",
            "json",
            "--no-extensions",
            "--no-skills",
            "--no-prompt-templates",
            "--no-themes",
            "--session-dir",
            "/sandbox/pi-config/sessions",
            "hi",
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn claude_argv_exact() {
        let mut v = pi_manifest();
        v["runtime"] = "claude".into();
        v["agent"] = json!({
            "binary": "claude", "model": "claude-sonnet-4-5", "claude_agent": "reviewer",
            "args": ["--max-turns", "5"], "tools": ["Read", "Bash"],
        });
        let m = manifest(v);
        let derived = r#"{"hooks":{},"disableAllHooks":false}"#;
        let got = argv(
            &m,
            Path::new("/usr/local/bin/claude"),
            Some("0.73.1"),
            None,
            Some(derived),
            &[],
        )
        .unwrap();
        let want = [
            "/usr/local/bin/claude",
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--setting-sources",
            "user",
            "--tools",
            "Read,Bash",
            // The settings derived from the pinned file, never its path.
            "--settings",
            derived,
            "--plugin-dir",
            "/sandbox/plugins/claudy",
            // The supervisor's plugin holding the skill's SKILL.md, never the skills tree.
            "--plugin-dir",
            "/sandbox/skills/.pitcrew-claude-skills/review",
            "--agent",
            "reviewer",
            "--model",
            "claude-sonnet-4-5",
            "--max-turns",
            "5",
            "--dangerously-skip-permissions",
            "fix the bug",
        ];
        assert_eq!(got, want);
        // Without the derived settings nothing is launched.
        let err = argv(&m, Path::new("/c"), None, None, None, &[]).unwrap_err();
        assert_eq!(
            err,
            ArgvError::ClaudeSettingsNotDerived {
                path: "/sandbox/claude-config/hooks.json".into()
            }
        );
    }

    #[test]
    fn claude_argv_minimal_and_several_settings_refused() {
        let m = manifest(json!({
            "version": 1, "runtime": "claude", "agent": {"binary": "claude"},
            "prompt": "hi", "workdir": "/w",
        }));
        let got = argv(
            &m,
            Path::new("/bin/claude"),
            Some("0.73.1"),
            None,
            None,
            &[],
        )
        .unwrap();
        let builtins_off = claude_builtins_off();
        let want = [
            "/bin/claude",
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--setting-sources",
            "user",
            "--settings",
            &builtins_off,
            "--dangerously-skip-permissions",
            "hi",
        ];
        assert_eq!(got, want);
        let settings: serde_json::Value = serde_json::from_str(&builtins_off).unwrap();
        assert_eq!(
            settings["enabledPlugins"]["cc-plugin-plugin-authoring@builtin"],
            false
        );
        assert_eq!(
            settings["enabledPlugins"].as_object().unwrap().len(),
            CLAUDE_BUILTIN_PLUGINS.len()
        );
        // The workdir's CLAUDE.md the context step found follows the settings.
        let got = argv(
            &m,
            Path::new("/bin/claude"),
            None,
            Some("/w/CLAUDE.md"),
            None,
            &[],
        )
        .unwrap();
        let at = got
            .iter()
            .position(|a| a == "--append-system-prompt-file")
            .unwrap();
        assert_eq!(got[at - 2], "--settings");
        assert_eq!(got[at + 1], "/w/CLAUDE.md");

        let mut v = pi_manifest();
        v["runtime"] = "claude".into();
        v["files"] = json!([
            file("/a.json", "hook-adapter", "claude-settings"),
            file("/b.json", "config", "claude-settings"),
        ]);
        let err = argv(
            &manifest(v),
            Path::new("/bin/claude"),
            Some("0.73.1"),
            None,
            None,
            &[],
        )
        .unwrap_err();
        assert_eq!(
            err,
            ArgvError::SeveralClaudeSettings {
                first: "/a.json".into(),
                second: "/b.json".into()
            }
        );
    }

    #[test]
    fn a_single_file_plugin_gets_its_pi_args_after_its_e_and_only_a_plugin_file_has_them() {
        let mut v = pi_manifest();
        let mut plugin = file("/sandbox/adapters/hello.ts", "plugin", "pi-extension");
        plugin["pi_args"] = json!(["--greeting=Hi"]);
        plugin["env"] = json!({"HELLO_LEVEL": "3"});
        v["files"].as_array_mut().unwrap().push(plugin.clone());
        let got = argv(
            &manifest(v.clone()),
            Path::new("/p"),
            Some("0.73.1"),
            None,
            None,
            &[],
        )
        .unwrap();
        let at = got
            .iter()
            .position(|a| a == "/sandbox/adapters/hello.ts")
            .unwrap();
        assert_eq!(got[at - 1], "-e");
        assert_eq!(got[at + 1], "--greeting=Hi");
        // After the hook adapters, before the plugin trees.
        let adapter = got.iter().position(|a| a.ends_with("hooks.js")).unwrap();
        let tree = got
            .iter()
            .position(|a| a.ends_with("hello/index.ts"))
            .unwrap();
        assert!(adapter < at && at < tree, "{got:?}");
        // Under Claude Code it is not passed.
        let mut c = v.clone();
        c["runtime"] = "claude".into();
        c["files"] = json!([plugin.clone()]);
        let got = argv(
            &manifest(c),
            Path::new("/bin/claude"),
            None,
            None,
            None,
            &[],
        )
        .unwrap();
        assert!(!got.iter().any(|a| a.contains("hello.ts")), "{got:?}");

        for (key, value) in [
            ("pi_args", json!(["--greeting=Hi"])),
            ("env", json!({"A": "1"})),
        ] {
            let mut bad = pi_manifest();
            let mut f = file("/sandbox/adapters/guard.ts", "hook-adapter", "pi-extension");
            f[key] = value;
            bad["files"] = json!([f]);
            let err = Manifest::from_json(bad.to_string().as_bytes()).unwrap_err();
            assert!(
                err.to_string().contains("only a single-file plugin"),
                "{err}"
            );
        }
        let mut bad = pi_manifest();
        plugin["pi_args"] = json!(["--model=x"]);
        bad["files"] = json!([plugin]);
        assert!(Manifest::from_json(bad.to_string().as_bytes()).is_err());
    }

    #[test]
    fn a_pi_tool_list_gets_the_extension_tools_it_does_not_name() {
        let mut v = pi_manifest();
        v["agent"]["tools"] = json!(["read", "hello_tool"]);
        let ext = ["hello_tool".to_string(), "other".to_string()];
        let got = argv(
            &manifest(v.clone()),
            Path::new("/p"),
            None,
            None,
            None,
            &ext,
        )
        .unwrap();
        let at = got.iter().position(|a| a == "--tools").unwrap();
        assert_eq!(got[at + 1], "read,hello_tool,other", "{got:?}");
        // An empty list keeps extension tools already; an absent one too; Claude Code has none.
        v["agent"]["tools"] = json!([]);
        let got = argv(
            &manifest(v.clone()),
            Path::new("/p"),
            None,
            None,
            None,
            &ext,
        )
        .unwrap();
        assert!(!got.iter().any(|a| a.contains("other")), "{got:?}");
        v["runtime"] = "claude".into();
        v["agent"]["tools"] = json!(["Read"]);
        let got = argv(&manifest(v), Path::new("/c"), None, None, Some("{}"), &ext).unwrap();
        let at = got.iter().position(|a| a == "--tools").unwrap();
        assert_eq!(got[at + 1], "Read", "{got:?}");
    }

    #[test]
    fn extension_tools_are_scanned_from_the_pi_extension_trees_and_files() {
        let dir = tempfile::tempdir().unwrap();
        let hello = dir.path().join("hello");
        std::fs::create_dir(&hello).unwrap();
        std::fs::write(
            hello.join("index.ts"),
            "pi.registerTool({ name: \"hello_tool\" });\n",
        )
        .unwrap();
        let one = dir.path().join("one.ts");
        std::fs::write(
            &one,
            "pi.registerTool({ name: 'one' }); registerTool({ name: 'hello_tool' })",
        )
        .unwrap();
        let mut v = pi_manifest();
        v["trees"] = json!([tree(
            "hello",
            "pi-extension",
            json!({"path": hello.to_str().unwrap(), "entries": ["index.ts"]}),
        )]);
        v["files"] = json!([file(one.to_str().unwrap(), "plugin", "pi-extension")]);
        assert_eq!(
            extension_tools(&manifest(v)).unwrap(),
            ["hello_tool", "one"]
        );
    }

    #[test]
    fn an_empty_tool_list_gives_no_built_in_tools_and_an_absent_one_the_default() {
        let mut v = pi_manifest();
        v["agent"]["tools"] = json!([]);
        let got = argv(
            &manifest(v.clone()),
            Path::new("/p"),
            Some("0.73.1"),
            None,
            None,
            &[],
        )
        .unwrap();
        assert!(got.contains(&"--no-builtin-tools".to_string()), "{got:?}");
        assert!(!got.contains(&"--tools".to_string()), "{got:?}");
        v["agent"].as_object_mut().unwrap().remove("tools");
        let got = argv(
            &manifest(v.clone()),
            Path::new("/p"),
            Some("0.73.1"),
            None,
            None,
            &[],
        )
        .unwrap();
        assert!(!got.iter().any(|a| a.contains("tools")), "{got:?}");

        v["runtime"] = "claude".into();
        v["agent"]["tools"] = json!([]);
        let got = argv(
            &manifest(v.clone()),
            Path::new("/p"),
            Some("0.73.1"),
            None,
            Some("{}"),
            &[],
        )
        .unwrap();
        let at = got.iter().position(|a| a == "--tools").unwrap();
        assert_eq!(got[at + 1], "");
        assert!(got[at + 2].starts_with("--"), "{got:?}");
        v["agent"].as_object_mut().unwrap().remove("tools");
        let got = argv(
            &manifest(v),
            Path::new("/p"),
            Some("0.73.1"),
            None,
            Some("{}"),
            &[],
        );
        assert!(!got.unwrap().contains(&"--tools".to_string()));
    }

    #[test]
    fn tool_names_the_runtimes_could_not_take_are_refused() {
        for bad in ["", "a,b", " read", "a\0b"] {
            let mut v = pi_manifest();
            v["agent"]["tools"] = json!(["read", bad]);
            let err = Manifest::from_json(v.to_string().as_bytes()).unwrap_err();
            assert!(err.to_string().contains("agent.tools[1]"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn the_record_shows_the_prompt_by_its_length_and_digest_unless_asked() {
        let mut m = manifest(pi_manifest());
        let full = argv(&m, Path::new("/p"), Some("0.73.1"), None, None, &[]).unwrap();
        let (shown, prompt) = recorded(&m, &full);
        assert_eq!(shown.last().unwrap(), "<prompt>");
        assert_eq!(shown[..shown.len() - 1], full[..full.len() - 1]);
        let prompt = prompt.unwrap();
        assert_eq!(prompt.index, full.len() - 1);
        assert_eq!(prompt.bytes, "fix the bug".len());
        // printf 'fix the bug' | sha256sum
        assert_eq!(
            prompt.sha256,
            "280fd7e3571b7c850d6fe771aee96db0ccdeef47910414e3a4a93bb06ea9f7c2"
        );
        m.agent.record_prompt = true;
        let (shown, prompt) = recorded(&m, &full);
        assert_eq!(shown, full);
        assert!(prompt.is_some());
        let c = manifest(json!({
            "version": 1, "runtime": "command", "agent": {"binary": "/bin/sh", "args": ["-c", "x"]},
            "workdir": "/w", "prompt": "ignored",
        }));
        let a = argv(&c, Path::new("/bin/sh"), Some("0.73.1"), None, None, &[]).unwrap();
        assert_eq!(recorded(&c, &a), (a.clone(), None));
    }

    #[test]
    fn trust_gated_pi_releases_get_no_approve_and_context_files_can_be_turned_off() {
        let mut m = manifest(pi_manifest());
        let old = argv(&m, Path::new("/p"), Some("0.73.1"), None, None, &[]).unwrap();
        assert!(!old.contains(&"--no-approve".to_string()), "{old:?}");
        assert!(!old.contains(&"--no-context-files".to_string()), "{old:?}");
        // An unknown release is taken for the oldest (it would refuse --no-approve).
        assert_eq!(
            argv(&m, Path::new("/p"), None, None, None, &[]).unwrap(),
            old
        );
        for version in ["0.87.1", "1.6.0"] {
            let new = argv(&m, Path::new("/p"), Some(version), None, None, &[]).unwrap();
            let at = new.iter().position(|a| a == "--no-approve").unwrap();
            assert_eq!(new[at - 1], "--no-themes", "{new:?}");
            assert_eq!(new.len(), old.len() + 1);
        }
        m.agent.context_files = ContextFiles::None;
        let off = argv(&m, Path::new("/p"), Some("1.6.0"), None, None, &[]).unwrap();
        let at = off.iter().position(|a| a == "--no-context-files").unwrap();
        assert_eq!(off[at - 1], "--no-approve", "{off:?}");
    }

    /// A manifest that did not come through the host's `validate` still cannot make the runtime
    /// load an unverified extension or take trust: the argv is refused against the release found.
    #[test]
    #[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
    fn attack_harness__refused_agent_args_give_no_argv_for_the_release_found() {
        let mut v = pi_manifest();
        v["agent"]["args"] = json!(["--approve", "-e", "./unverified_ext.ts"]);
        let m = manifest(v.clone());
        let err = argv(&m, Path::new("/p"), Some("1.6.0"), None, None, &[]).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with(
                "agent.args[0]: --approve is an option of pi 1.6.0 that changes project trust"
            ) && text.contains("; agent.args[1]: -e is an option of pi 1.6.0 that loads code"),
            "{text}"
        );
        // pi 0.73.1 has no --approve (an extension flag there); its -e is refused all the same.
        let text = argv(&m, Path::new("/p"), Some("0.73.1"), None, None, &[])
            .unwrap_err()
            .to_string();
        assert!(
            text.starts_with("agent.args[1]: -e is an option of pi 0.73.1 that"),
            "{text}"
        );
        // An unknown release: every supported release's rules.
        let text = argv(&m, Path::new("/p"), None, None, None, &[])
            .unwrap_err()
            .to_string();
        assert!(
            text.contains("--approve is an option of pi 0.87.1, 1.6.0"),
            "{text}"
        );

        v["runtime"] = "claude".into();
        v["agent"]["args"] = json!([
            "--setting-sources",
            "user,project",
            "--mcp-config",
            "x.json"
        ]);
        let text = argv(
            &manifest(v.clone()),
            Path::new("/c"),
            Some("2.1.332"),
            None,
            None,
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(
            text.starts_with(
                "agent.args[0]: --setting-sources is an option of Claude Code 2.1.332"
            ) && text.contains("agent.args[2]: --mcp-config is an option of Claude Code 2.1.332"),
            "{text}"
        );
        // `runtime: command` takes any argv.
        v["runtime"] = "command".into();
        v["agent"]["args"] = json!(["--approve", "-e", "x"]);
        assert!(argv(&manifest(v), Path::new("/bin/x"), None, None, None, &[]).is_ok());
    }

    #[test]
    fn an_argument_longer_than_exec_takes_is_refused_by_name() {
        let mut m = manifest(pi_manifest());
        m.prompt = Some("x".repeat(MAX_ARG_BYTES));
        assert!(argv(&m, Path::new("/p"), None, None, None, &[]).is_ok());
        m.prompt = Some("x".repeat(MAX_ARG_BYTES + 1));
        let err = argv(&m, Path::new("/p"), None, None, None, &[]).unwrap_err();
        assert!(matches!(err, ArgvError::TooLong { bytes, .. } if bytes == MAX_ARG_BYTES + 1));
    }

    #[test]
    fn command_argv_is_binary_and_args() {
        let m = manifest(json!({
            "version": 1, "runtime": "command",
            "agent": {"binary": "/bin/sh", "args": ["-c", "echo hi", "--", "-x"]},
            "workdir": "/w",
        }));
        assert_eq!(
            argv(&m, Path::new("/bin/sh"), Some("0.73.1"), None, None, &[]).unwrap(),
            ["/bin/sh", "-c", "echo hi", "--", "-x"]
        );
    }

    #[test]
    fn bad_prompts_and_nul_are_errors() {
        let mut v = pi_manifest();
        v["prompt"] = "--help".into();
        assert_eq!(
            argv(
                &manifest(v.clone()),
                Path::new("/p"),
                Some("0.73.1"),
                None,
                None,
                &[]
            )
            .unwrap_err(),
            ArgvError::PromptLooksLikeOption { runtime: "pi" }
        );
        v["prompt"] = "@/etc/shadow".into();
        assert_eq!(
            argv(
                &manifest(v.clone()),
                Path::new("/p"),
                Some("0.73.1"),
                None,
                None,
                &[]
            )
            .unwrap_err(),
            ArgvError::PromptLooksLikeFile
        );
        v["runtime"] = "claude".into();
        v["prompt"] = "-x".into();
        assert_eq!(
            argv(
                &manifest(v.clone()),
                Path::new("/p"),
                Some("0.73.1"),
                None,
                None,
                &[]
            )
            .unwrap_err(),
            ArgvError::PromptLooksLikeOption { runtime: "claude" }
        );
        // `@` means nothing special to Claude Code's argv.
        v["prompt"] = "@file".into();
        assert!(argv(
            &manifest(v.clone()),
            Path::new("/p"),
            Some("0.73.1"),
            None,
            Some("{}"),
            &[]
        )
        .is_ok());

        let mut m = manifest(pi_manifest());
        m.prompt = None;
        assert_eq!(
            argv(&m, Path::new("/p"), Some("0.73.1"), None, None, &[]).unwrap_err(),
            ArgvError::MissingPrompt { runtime: "pi" }
        );
        let mut m = manifest(pi_manifest());
        m.prompt = Some("a\0b".into());
        assert!(matches!(
            argv(&m, Path::new("/p"), Some("0.73.1"), None, None, &[]).unwrap_err(),
            ArgvError::Nul { .. }
        ));
    }
}
