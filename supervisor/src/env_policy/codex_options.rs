//! The Codex CLI's `codex exec` options, one table per supported release, as `codex exec
//! --help` lists them, each sorted by name, with the values each takes and whether
//! `agent.args` may give it ([`super::agent_args`]).
//!
//! Written by hand from `codex exec --help` of each release (Codex has no hidden options to
//! list beside them); `tests/tests/codex.rs` fails when the installed release lists other
//! options. Codex's subcommands (`resume`, `fork`, `review`, `help`) are bare words, which
//! `agent.args` refuses as words the runtime would read as the prompt.

use super::agent_args::{Arity, RuntimeOption, Verdict, Why};

/// The supported Codex CLI releases, oldest first, each with its table.
pub const CODEX_RELEASES: &[(&str, &[RuntimeOption])] = &[("0.169.1", CODEX_0_169_1)];

const fn refused(why: Why, instead: Option<&'static str>) -> Verdict {
    Verdict::Refused { why, instead }
}

const fn opt(
    name: &'static str,
    names: &'static str,
    arity: Arity,
    verdict: Verdict,
) -> RuntimeOption {
    RuntimeOption {
        name,
        names,
        arity,
        verdict,
    }
}

/// What `-c`, `--enable`, `--disable` and `-p` would change: the configuration pitcrew
/// generates ([`crate::runtime_argv`]).
const CONFIG: Option<&str> = Some("agent.model, agent.tools, agent.context_files");

/// The options of Codex CLI 0.169.1 (`@openai/codex`), `codex exec`.
pub const CODEX_0_169_1: &[RuntimeOption] = &[
    opt(
        "--add-dir",
        "--add-dir",
        Arity::Value,
        refused(Why::Permissions, None),
    ),
    opt(
        "--approve-for-me",
        "--approve-for-me",
        Arity::Flag,
        refused(Why::Permissions, None),
    ),
    opt(
        "--cd",
        "-C, --cd",
        Arity::Value,
        refused(Why::Pinned, Some("workdir:")),
    ),
    opt("--color", "--color", Arity::Value, Verdict::Allowed),
    opt(
        "--config",
        "-c, --config",
        Arity::Value,
        refused(Why::Settings, CONFIG),
    ),
    opt(
        "--cyber-access-program",
        "--cyber-access-program",
        Arity::Value,
        refused(Why::Model, None),
    ),
    opt(
        "--dangerously-bypass-approvals-and-sandbox",
        "--dangerously-bypass-approvals-and-sandbox",
        Arity::Flag,
        refused(Why::Permissions, None),
    ),
    opt(
        "--dangerously-bypass-hook-trust",
        "--dangerously-bypass-hook-trust",
        Arity::Flag,
        refused(Why::Code, None),
    ),
    opt(
        "--disable",
        "--disable",
        Arity::Value,
        refused(Why::Settings, CONFIG),
    ),
    opt(
        "--enable",
        "--enable",
        Arity::Value,
        refused(Why::Settings, CONFIG),
    ),
    opt(
        "--ephemeral",
        "--ephemeral",
        Arity::Flag,
        refused(Why::Session, None),
    ),
    opt(
        "--help",
        "-h, --help",
        Arity::Flag,
        refused(Why::Command, None),
    ),
    opt(
        "--ignore-rules",
        "--ignore-rules",
        Arity::Flag,
        refused(Why::Pinned, None),
    ),
    opt(
        "--ignore-user-config",
        "--ignore-user-config",
        Arity::Flag,
        refused(Why::Pinned, None),
    ),
    opt(
        "--image",
        "-i, --image",
        Arity::Values,
        refused(Why::Context, None),
    ),
    opt("--json", "--json", Arity::Flag, refused(Why::Output, None)),
    opt(
        "--local-provider",
        "--local-provider",
        Arity::Value,
        refused(Why::Model, Some("agent.model")),
    ),
    opt(
        "--model",
        "-m, --model",
        Arity::Value,
        refused(Why::Model, Some("agent.model")),
    ),
    opt(
        "--oss",
        "--oss",
        Arity::Flag,
        refused(Why::Model, Some("agent.model")),
    ),
    opt(
        "--output-last-message",
        "-o, --output-last-message",
        Arity::Value,
        refused(Why::Output, None),
    ),
    opt(
        "--output-schema",
        "--output-schema",
        Arity::Value,
        refused(Why::Output, None),
    ),
    opt(
        "--profile",
        "-p, --profile",
        Arity::Value,
        refused(Why::Settings, CONFIG),
    ),
    opt(
        "--sandbox",
        "-s, --sandbox",
        Arity::Value,
        refused(Why::Permissions, None),
    ),
    opt(
        "--skip-git-repo-check",
        "--skip-git-repo-check",
        Arity::Flag,
        refused(Why::Pinned, None),
    ),
    opt(
        "--strict-config",
        "--strict-config",
        Arity::Flag,
        refused(Why::Pinned, None),
    ),
    opt(
        "--thread-source",
        "--thread-source",
        Arity::Value,
        refused(Why::Host, None),
    ),
    opt("--trust", "--trust", Arity::Flag, refused(Why::Trust, None)),
    opt(
        "--version",
        "-V, --version",
        Arity::Flag,
        refused(Why::Command, None),
    ),
    opt(
        "--worktree",
        "--worktree",
        Arity::Flag,
        refused(Why::Pinned, None),
    ),
    opt(
        "-C",
        "-C, --cd",
        Arity::Value,
        refused(Why::Pinned, Some("workdir:")),
    ),
    opt(
        "-V",
        "-V, --version",
        Arity::Flag,
        refused(Why::Command, None),
    ),
    opt(
        "-c",
        "-c, --config",
        Arity::Value,
        refused(Why::Settings, CONFIG),
    ),
    opt("-h", "-h, --help", Arity::Flag, refused(Why::Command, None)),
    opt(
        "-i",
        "-i, --image",
        Arity::Values,
        refused(Why::Context, None),
    ),
    opt(
        "-m",
        "-m, --model",
        Arity::Value,
        refused(Why::Model, Some("agent.model")),
    ),
    opt(
        "-o",
        "-o, --output-last-message",
        Arity::Value,
        refused(Why::Output, None),
    ),
    opt(
        "-p",
        "-p, --profile",
        Arity::Value,
        refused(Why::Settings, CONFIG),
    ),
    opt(
        "-s",
        "-s, --sandbox",
        Arity::Value,
        refused(Why::Permissions, None),
    ),
];
