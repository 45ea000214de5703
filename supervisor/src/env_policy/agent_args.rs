//! What `agent.args` may carry for pi, Claude Code and the Codex CLI, per release.
//!
//! pitcrew builds the runtime's argv itself: what it loads (the verified trees and files, each
//! by its own option), the model, the tools, the output mode, the session directory, project
//! trust and the permission mode. `agent.args` is appended to that argv, and the runtime reads
//! it like the rest, so an option there could load code, skills, prompts, settings or MCP
//! servers pitcrew never verified (pi `-e ./ext.ts`, Claude Code `--mcp-config x.json`), grant
//! project trust (pi `--approve`, Claude Code `--setting-sources user,project`) or override what
//! pitcrew set (`--model`, `--tools`, `--mode`, `--session-dir`). The principle:
//!
//! - **Refused**: an option that loads anything from a path, a string or the network; that
//!   changes project trust or which settings are read; that sets what pitcrew sets (a harness
//!   key does it instead: `plugins:`, `skills:`, `adapters:`, `agent.model`, `agent.tools`,
//!   `agent.claude_agent`, `agent.context_files`); that makes the runtime do something other
//!   than the run (help, export, another session, a cloud or background session); that a host
//!   program passes (SDK, IDE, teammate plumbing: pitcrew is the host); or that puts a credential
//!   into the argv the record shows.
//! - **Allowed**: an option that tunes the run within that (thinking, effort, limits, a display
//!   name, debug output) or only takes something away (`--no-mcp`, `--disallowedTools`).
//!
//! Each option of each supported release is classified by name in the script that generates
//! its table from the release's `--help` ([`super::pi_options`] by `scripts/pi-options`,
//! [`super::claude_options`] by `scripts/claude-options`): an option a new release adds fails
//! the script until it is classified. An argument is matched by its name before any `=` or
//! whitespace (`--extension=npm:x`, `"-e ./x.ts"`), Claude Code's short options also as
//! commander reads a group (`-cp` is `-c -p`; `-dhooks` is `-d hooks`). Every element starting
//! with `-` is checked as an option, even where the runtime would take it as the value of the
//! one before it. A pi option that none of pi's tables knows is an extension flag (pi hands it to
//! the verified extensions, and refuses it when none registered it); Claude Code has no such
//! flags, so an option its table does not allow by name is refused. `--` is refused for both:
//! pitcrew's own options after it and the prompt would become arguments. A bare word that is
//! not the value of the option before it would be read as (part of) the prompt, or by pi as a
//! file to attach (`@path`), and is refused too, as is an option that takes a value given last
//! without one (it would take pitcrew's own next argument: pi `--thinking` its `--session-dir`).
//!
//! `pitcrew validate` checks against every supported release of the runtime (a harness may run
//! on any); the supervisor checks again before launch against the release it found in the
//! sandbox ([`crate::runtime_version::detect`]), or against every supported release when it
//! found none it knows.

use crate::manifest::Runtime;

/// How many values an option takes, as its `--help` line says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arity {
    /// None (`--verbose`).
    Flag,
    /// One, the next argument whatever it is (`--model <model>`), or after `=`.
    Value,
    /// One when the next argument does not start with `-` (`--resume [value]`).
    OptionalValue,
    /// Every following argument up to the next that starts with `-` (Claude Code's
    /// `--add-dir <directories...>`).
    Values,
}

/// Why an option is refused in `agent.args`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// It loads code: extensions, plugins, MCP servers.
    Code,
    /// It loads skills, prompts, agents, themes or context from a path or string.
    Context,
    /// It reads settings or configuration.
    Settings,
    /// It changes project trust.
    Trust,
    /// pitcrew sets it itself (what is loaded, how the runtime runs).
    Pinned,
    /// It chooses the model (`agent.model`).
    Model,
    /// It chooses the tools (`agent.tools`).
    Tools,
    /// It changes the output pitcrew reads.
    Output,
    /// It chooses the session pitcrew keeps (directory, resume, persistence).
    Session,
    /// It changes the permission mode pitcrew sets.
    Permissions,
    /// It makes the runtime do something other than the run.
    Command,
    /// It is plumbing between the runtime and a program hosting it.
    Host,
    /// It fetches from the network at startup.
    Network,
    /// It puts a credential into the argv.
    Credential,
    /// `--`: it ends the runtime's options.
    EndOfOptions,
}

impl Why {
    /// Every reason, in the order the documentation lists them.
    pub const ALL: &'static [Why] = &[
        Why::Code,
        Why::Context,
        Why::Settings,
        Why::Trust,
        Why::Pinned,
        Why::Model,
        Why::Tools,
        Why::Output,
        Why::Session,
        Why::Permissions,
        Why::Command,
        Why::Host,
        Why::Network,
        Why::Credential,
        Why::EndOfOptions,
    ];

    /// Its short name in the documentation's tables.
    pub fn label(self) -> &'static str {
        match self {
            Why::Code => "code",
            Why::Context => "context",
            Why::Settings => "settings",
            Why::Trust => "trust",
            Why::Pinned => "pitcrew's",
            Why::Model => "model",
            Why::Tools => "tools",
            Why::Output => "output",
            Why::Session => "session",
            Why::Permissions => "permissions",
            Why::Command => "command",
            Why::Host => "host",
            Why::Network => "network",
            Why::Credential => "credential",
            Why::EndOfOptions => "end of options",
        }
    }

    /// What the refusal says: the option is one "that" does this.
    pub fn text(self) -> &'static str {
        match self {
            Why::Code => "loads code pitcrew did not verify (an extension, a plugin, an MCP server)",
            Why::Context => {
                "loads skills, prompts, agents, themes or instructions from a path or directory pitcrew did not verify"
            }
            Why::Settings => "reads settings pitcrew did not verify",
            Why::Trust => {
                "changes project trust: the runtime would read the repository's own configuration"
            }
            Why::Pinned => "pitcrew sets itself (what the runtime loads and how it runs)",
            Why::Model => "chooses the model, which agent.model sets",
            Why::Tools => "chooses the tools, which agent.tools sets",
            Why::Output => "changes the output pitcrew reads (print mode, its format and events)",
            Why::Session => {
                "chooses the session pitcrew keeps per iteration (its directory, resuming, persistence)"
            }
            Why::Permissions => "changes the permission mode pitcrew sets",
            Why::Command => {
                "makes the runtime do something other than the run (help, export, a listing, an interactive, background, cloud or remote session)"
            }
            Why::Host => {
                "is plumbing between the runtime and a program hosting it (SDK, IDE, desktop, teammates): pitcrew is the host"
            }
            Why::Network => "fetches something from the network at startup",
            Why::Credential => "puts a credential into the argv, which the record shows",
            Why::EndOfOptions => {
                "ends the runtime's options: pitcrew's own options after it and the prompt would be read as arguments"
            }
        }
    }
}

/// What `agent.args` may do with an option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It may be given.
    Allowed,
    /// It is refused, and why; `instead` names what does it, where something does.
    Refused {
        /// Why.
        why: Why,
        /// What to use instead (a harness key), if anything.
        instead: Option<&'static str>,
    },
}

/// One option of a runtime release, from its `--help`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimeOption {
    /// This name (`--extension`, `-e`, `--`).
    pub name: &'static str,
    /// Every name of the option, as `--help` lists them (`--extension, -e`).
    pub names: &'static str,
    /// How many values it takes.
    pub arity: Arity,
    /// Whether `agent.args` may give it.
    pub verdict: Verdict,
}

/// The supported releases of `runtime` (pi, claude, codex, opencode), oldest first, each with its options sorted
/// by name; empty for `command`.
pub fn releases(runtime: Runtime) -> &'static [(&'static str, &'static [RuntimeOption])] {
    match runtime {
        Runtime::Pi => super::pi_options::PI_RELEASES,
        Runtime::Claude => super::claude_options::CLAUDE_RELEASES,
        Runtime::Codex => super::codex_options::CODEX_RELEASES,
        Runtime::Opencode => super::opencode_options::OPENCODE_RELEASES,
        Runtime::Command => &[],
    }
}

/// The runtime's name as a release is named (`pi 1.6.0`, `Claude Code 2.1.332`).
fn runtime_name(runtime: Runtime) -> &'static str {
    match runtime {
        Runtime::Claude => "Claude Code",
        Runtime::Codex => "Codex CLI",
        Runtime::Opencode => "OpenCode",
        _ => runtime.as_str(),
    }
}

/// The option `name` of a release's table.
pub fn find(options: &[RuntimeOption], name: &str) -> Option<RuntimeOption> {
    options
        .binary_search_by(|o| o.name.cmp(name))
        .ok()
        .map(|i| options[i])
}

/// Which releases `agent.args` is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Against<'a> {
    /// Every supported release (`pitcrew validate`: a harness may run on any).
    Supported,
    /// The release found in the sandbox (`verification.agent.version`); every supported
    /// release when it is none of them or unknown.
    Found(Option<&'a str>),
}

/// What is wrong with one element of `agent.args`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentArgProblem {
    /// An option the releases' tables refuse.
    #[error("{option} is an option of {releases} that {why}{instead}", why = why.text(), instead = instead_clause(*instead))]
    Refused {
        /// The option as matched (`-e`, `--extension`; in a group of short options, the one).
        option: String,
        /// The releases that refuse it (`pi 0.87.1, 1.6.0`).
        releases: String,
        /// Why.
        why: Why,
        /// What to use instead, if anything.
        instead: Option<&'static str>,
    },
    /// An option the releases do not have (Claude Code: none passes unless allowed by name; pi:
    /// a short option no release has).
    #[error("{option} is not an option of {releases} that pitcrew allows in agent.args (the allowed ones: docs/agent-support.md)")]
    Unknown {
        /// The option as matched.
        option: String,
        /// The releases that lack it.
        releases: String,
    },
    /// An option that takes a value, last in `agent.args` without one.
    #[error("{0} takes a value and is the last of agent.args: the runtime would take pitcrew's own next argument for it")]
    MissingValue(String),
    /// A bare word that is not the value of the option before it.
    #[error("bare word {0:?} is not the value of an option before it: {1} would read it as (part of) the prompt")]
    StrayWord(String, &'static str),
}

fn instead_clause(instead: Option<&str>) -> String {
    instead.map(|i| format!("; use {i}")).unwrap_or_default()
}

/// How the runtime reads a bare word after the element before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    /// It is not a value: it would be the prompt.
    None,
    /// It is the value (an optional one, which the runtime takes only when the next argument
    /// does not start with `-`).
    One,
    /// It is the value of the option at this index, which takes the next argument whatever it is
    /// (after the last element: pitcrew's own next argument).
    Required(usize),
    /// It is the value unless it starts with `@` (after a pi extension flag: pi reads `@path`
    /// as a file to attach).
    OneNoAt,
    /// It is one of the values, and so is the next bare word.
    Many,
}

impl Slot {
    /// After the option at `index` of `arity`, given without its value.
    fn after(arity: Arity, index: usize) -> Slot {
        match arity {
            Arity::Flag => Slot::None,
            Arity::Value => Slot::Required(index),
            Arity::OptionalValue => Slot::One,
            Arity::Values => Slot::Many,
        }
    }
}

/// The name of an option element: what comes before its first `=` or whitespace (`--x=v`, a
/// value given in the same element as `"-e ./x.ts"`), and whether a value came with it.
fn split_name(arg: &str) -> (&str, bool) {
    match arg.find(|c: char| c == '=' || c.is_whitespace()) {
        Some(at) => (&arg[..at], true),
        None => (arg, false),
    }
}

/// What the selected releases say of option `name`.
struct Lookup {
    /// The first entry found (its arity).
    found: Option<RuntimeOption>,
    /// The releases that refuse it, with the last refusal's reason.
    refused: Vec<&'static str>,
    verdict: Option<Verdict>,
    /// The releases that lack it.
    missing: Vec<&'static str>,
}

fn lookup(selected: &[(&'static str, &'static [RuntimeOption])], name: &str) -> Lookup {
    let mut out = Lookup {
        found: None,
        refused: Vec::new(),
        verdict: None,
        missing: Vec::new(),
    };
    for (version, options) in selected {
        match find(options, name) {
            None => out.missing.push(version),
            Some(option) => {
                out.found.get_or_insert(option);
                if let Verdict::Refused { .. } = option.verdict {
                    out.refused.push(version);
                    out.verdict = Some(option.verdict);
                }
            }
        }
    }
    out
}

/// Every problem of `args` (the `agent.args` of runtime `runtime`), as `(index, problem)`,
/// checked against the releases `against` selects. None for `runtime: command` (its args are
/// its program's).
pub fn agent_args_problems(
    runtime: Runtime,
    against: Against<'_>,
    args: &[String],
) -> Vec<(usize, AgentArgProblem)> {
    let all = releases(runtime);
    if all.is_empty() {
        return Vec::new();
    }
    let selected: Vec<(&'static str, &'static [RuntimeOption])> = match against {
        Against::Found(Some(version)) if all.iter().any(|(v, _)| *v == version) => {
            all.iter().filter(|(v, _)| *v == version).copied().collect()
        }
        _ => all.to_vec(),
    };
    let label = |versions: &[&str]| format!("{} {}", runtime_name(runtime), versions.join(", "));
    let every: Vec<&str> = selected.iter().map(|(v, _)| *v).collect();
    let mut problems = Vec::new();
    let mut slot = Slot::None;
    for (i, arg) in args.iter().enumerate() {
        let bare = !arg.starts_with('-') || arg == "-";
        if bare {
            match slot {
                Slot::One | Slot::Required(_) => slot = Slot::None,
                Slot::Many => {}
                Slot::OneNoAt if !arg.starts_with('@') => slot = Slot::None,
                Slot::None | Slot::OneNoAt => {
                    let who = match runtime {
                        Runtime::Pi => "pi (a word starting with @: a file to attach)",
                        _ => runtime_name(runtime),
                    };
                    problems.push((i, AgentArgProblem::StrayWord(arg.clone(), who)));
                    slot = Slot::None;
                }
            }
            continue;
        }
        if arg == "--" {
            problems.push((
                i,
                AgentArgProblem::Refused {
                    option: "--".into(),
                    releases: label(&every),
                    why: Why::EndOfOptions,
                    instead: None,
                },
            ));
            slot = Slot::None;
            continue;
        }
        let (name, inline) = split_name(arg);
        let found = lookup(&selected, name);
        let problem = |option: &str, found: &Lookup| -> Option<AgentArgProblem> {
            if let Some(Verdict::Refused { why, instead }) = found.verdict {
                return Some(AgentArgProblem::Refused {
                    option: option.to_string(),
                    releases: label(&found.refused),
                    why,
                    instead,
                });
            }
            let unknown = match runtime {
                // A pi release that lacks a long option hands it to the extensions.
                Runtime::Pi => found.found.is_none() && !option.starts_with("--"),
                _ => !found.missing.is_empty(),
            };
            unknown.then(|| AgentArgProblem::Unknown {
                option: option.to_string(),
                releases: label(if found.found.is_none() {
                    &every
                } else {
                    &found.missing
                }),
            })
        };
        if found.found.is_some() || runtime == Runtime::Pi || arg.starts_with("--") {
            problems.extend(problem(name, &found).map(|p| (i, p)));
            slot = match (found.found, inline) {
                (_, true) => Slot::None,
                (Some(option), false) => Slot::after(option.arity, i),
                // A pi extension flag takes the next word unless it starts with `-` or `@`.
                (None, false) => Slot::OneNoAt,
            };
            continue;
        }
        // Claude Code (commander): a group of short options, `-cp` or `-dhooks`: each letter an
        // option until one that takes a value, which takes the rest.
        slot = Slot::None;
        for (at, letter) in arg.char_indices().skip(1) {
            let short = format!("-{letter}");
            let found = lookup(&selected, &short);
            if let Some(p) = problem(&short, &found) {
                problems.push((i, p));
                break;
            }
            let rest = &arg[at + letter.len_utf8()..];
            match found.found.map(|o| o.arity) {
                Some(Arity::Flag) | None => {}
                Some(arity) => {
                    if rest.is_empty() {
                        slot = Slot::after(arity, i);
                    }
                    break;
                }
            }
        }
    }
    if let Slot::Required(at) = slot {
        let option = split_name(&args[at]).0.to_string();
        problems.push((at, AgentArgProblem::MissingValue(option)));
    }
    problems
}

/// The line that opens the generated section of `docs/agent-support.md`.
pub const DOC_BEGIN: &str = "<!-- BEGIN agent-args: generated from supervisor/src/env_policy/pi_options.rs and claude_options.rs (scripts/pi-options, scripts/claude-options) by `PITCREW_UPDATE_DOCS=1 cargo test -p pitcrew-supervisor --lib agent_args_doc`; classify options in the scripts, not in these tables -->";

/// The line that closes it.
pub const DOC_END: &str = "<!-- END agent-args -->";

/// The section of `docs/agent-support.md` generated from the tables: per runtime, every option of
/// every supported release, whether `agent.args` may give it, and if not why and what to use.
pub fn agent_args_doc() -> String {
    let mut out = String::from("\n\nWhy an option is refused (the column *why*): it\n\n");
    for why in Why::ALL {
        out.push_str(&format!("- **{}**: {}\n", why.label(), why.text()));
    }
    for runtime in [
        Runtime::Pi,
        Runtime::Claude,
        Runtime::Codex,
        Runtime::Opencode,
    ] {
        let releases = releases(runtime);
        let name = runtime_name(runtime);
        out.push_str(&format!("\n### {name}\n\n| option |"));
        for (version, _) in releases {
            out.push_str(&format!(" {version} |"));
        }
        out.push_str(" why | use instead |\n|---|");
        out.push_str(&"---|".repeat(releases.len() + 2));
        out.push('\n');
        // One row per option line of `--help` (its names together), sorted by its first name.
        let mut rows: Vec<(&str, Verdict)> = Vec::new();
        for (_, options) in releases {
            for o in options.iter() {
                if !rows.iter().any(|(names, _)| *names == o.names) {
                    rows.push((o.names, o.verdict));
                }
            }
        }
        rows.sort_by_key(|(names, _)| names.trim_start_matches('-').to_ascii_lowercase());
        for (names, verdict) in rows {
            let shown: Vec<String> = names.split(", ").map(|n| format!("`{n}`")).collect();
            out.push_str(&format!("| {} |", shown.join(", ")));
            let first = names.split(", ").next().unwrap_or(names);
            for (_, options) in releases {
                let cell = match find(options, first).map(|o| o.verdict) {
                    None => "",
                    Some(Verdict::Allowed) => "allowed",
                    Some(Verdict::Refused { .. }) => "**refused**",
                };
                out.push_str(&format!(" {cell} |"));
            }
            match verdict {
                Verdict::Allowed => out.push_str(" | |\n"),
                Verdict::Refused { why, instead } => out.push_str(&format!(
                    " {} | {} |\n",
                    why.label(),
                    instead.map(|i| i.replace('|', "\\|")).unwrap_or_default()
                )),
            }
        }
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests;
