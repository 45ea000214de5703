//! OpenCode's `opencode run` options, one table per supported release, as `opencode run --help`
//! lists them (the global `--help`, `--version`, `--print-logs` and `--log-level` included),
//! each sorted by name, with the values each takes and whether `agent.args` may give it
//! ([`super::agent_args`]).
//!
//! Written by hand from `opencode run --help` of each release; `tests/tests/opencode.rs` fails
//! when the installed release lists other options. An option the table does not know (yargs'
//! `--no-<flag>` negations and camel-case spellings included) is refused; a bare word would be
//! read as the message.

use super::agent_args::{Arity, RuntimeOption, Verdict, Why};

/// The supported OpenCode releases, oldest first, each with its table.
pub const OPENCODE_RELEASES: &[(&str, &[RuntimeOption])] = &[("1.18.33", OPENCODE_1_18_33)];

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

/// The options of OpenCode 1.18.33 (`opencode-ai`), `opencode run`.
pub const OPENCODE_1_18_33: &[RuntimeOption] = &[
    opt(
        "--agent",
        "--agent",
        Arity::Value,
        refused(Why::Context, None),
    ),
    opt(
        "--attach",
        "--attach",
        Arity::Value,
        refused(Why::Host, None),
    ),
    opt(
        "--auto",
        "--auto",
        Arity::Flag,
        refused(Why::Permissions, None),
    ),
    opt(
        "--command",
        "--command",
        Arity::Value,
        refused(Why::Command, None),
    ),
    opt(
        "--continue",
        "-c, --continue",
        Arity::Flag,
        refused(Why::Session, None),
    ),
    opt(
        "--dir",
        "--dir",
        Arity::Value,
        refused(Why::Pinned, Some("workdir:")),
    ),
    opt(
        "--file",
        "-f, --file",
        Arity::Values,
        refused(Why::Context, None),
    ),
    opt("--fork", "--fork", Arity::Flag, refused(Why::Session, None)),
    opt(
        "--format",
        "--format",
        Arity::Value,
        refused(Why::Output, None),
    ),
    opt(
        "--help",
        "-h, --help",
        Arity::Flag,
        refused(Why::Command, None),
    ),
    opt(
        "--interactive",
        "-i, --interactive",
        Arity::Flag,
        refused(Why::Command, None),
    ),
    opt("--log-level", "--log-level", Arity::Value, Verdict::Allowed),
    opt(
        "--model",
        "-m, --model",
        Arity::Value,
        refused(Why::Model, Some("agent.model")),
    ),
    opt(
        "--password",
        "-p, --password",
        Arity::Value,
        refused(Why::Credential, None),
    ),
    opt(
        "--port",
        "--port",
        Arity::OptionalValue,
        refused(Why::Host, None),
    ),
    opt(
        "--print-logs",
        "--print-logs",
        Arity::Flag,
        Verdict::Allowed,
    ),
    opt("--pure", "--pure", Arity::Flag, refused(Why::Pinned, None)),
    opt(
        "--session",
        "-s, --session",
        Arity::Value,
        refused(Why::Session, None),
    ),
    opt(
        "--share",
        "--share",
        Arity::Flag,
        refused(Why::Network, None),
    ),
    opt("--thinking", "--thinking", Arity::Flag, Verdict::Allowed),
    opt("--title", "--title", Arity::OptionalValue, Verdict::Allowed),
    opt(
        "--username",
        "-u, --username",
        Arity::Value,
        refused(Why::Credential, None),
    ),
    opt("--variant", "--variant", Arity::Value, Verdict::Allowed),
    opt(
        "--version",
        "-v, --version",
        Arity::Flag,
        refused(Why::Command, None),
    ),
    opt(
        "-c",
        "-c, --continue",
        Arity::Flag,
        refused(Why::Session, None),
    ),
    opt(
        "-f",
        "-f, --file",
        Arity::Values,
        refused(Why::Context, None),
    ),
    opt("-h", "-h, --help", Arity::Flag, refused(Why::Command, None)),
    opt(
        "-i",
        "-i, --interactive",
        Arity::Flag,
        refused(Why::Command, None),
    ),
    opt(
        "-m",
        "-m, --model",
        Arity::Value,
        refused(Why::Model, Some("agent.model")),
    ),
    opt(
        "-p",
        "-p, --password",
        Arity::Value,
        refused(Why::Credential, None),
    ),
    opt(
        "-s",
        "-s, --session",
        Arity::Value,
        refused(Why::Session, None),
    ),
    opt(
        "-u",
        "-u, --username",
        Arity::Value,
        refused(Why::Credential, None),
    ),
    opt(
        "-v",
        "-v, --version",
        Arity::Flag,
        refused(Why::Command, None),
    ),
];
