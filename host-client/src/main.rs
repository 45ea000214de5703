//! `pitcrew`: the host CLI. Validates harnesses, computes expected hashes from the host's own
//! copies, and drives sandboxed agent iterations.
// Every write to stdout and stderr goes through `output`, which never panics on a closed one.
#![deny(clippy::print_stdout, clippy::print_stderr)]

mod client;
mod collected_workspace;
mod commands;
mod engine;
mod failure_hint;
mod hash_progress;
mod output;
mod records;
mod remote;
mod report;
mod tarball;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Validate harnesses, hash plugin trees and drive sandboxed coding-agent iterations.
#[derive(Debug, Parser)]
#[command(name = "pitcrew", version, about)]
struct Cli {
    /// More log output on stderr (repeat for more); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    /// Only what a script needs: `run` prints its records directory alone and `batch` its batch
    /// directory (no progress, no table), `collect` the record's directory, `ps` the ids alone,
    /// `down` and `cancel` the sandbox's id; logs only errors.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the tree hash of a directory (pi-tree-v1 or content-v1).
    #[command(
        after_help = "Examples:\n  pitcrew hash plugins/review\n  pitcrew hash --format content-v1 skills/"
    )]
    Hash(pitcrew_core::hash_command::HashArgs),
    /// Say which runtime would load a plugin directory and, for pi, which entry files.
    #[command(after_help = "Example:\n  pitcrew classify plugins/review")]
    Classify(commands::classify::ClassifyArgs),
    /// Check a harness file: shapes, paths, plugin formats, env and argument rules, digests.
    #[command(
        after_help = "Examples:\n  pitcrew validate harness.yaml\n  pitcrew validate harness.yaml --emit-manifest > manifest.json"
    )]
    Validate(commands::validate::ValidateArgs),
    /// Fetch a harness's remote sources into the cache, verify their pins, write its lock file.
    #[command(
        after_help = "Examples:\n  pitcrew lock harness.yaml\n  pitcrew lock harness.yaml --refresh"
    )]
    Lock(commands::lock::LockArgs),
    /// List what pi would auto-discover (agent dir, project), classified and hashed, never loaded.
    #[command(after_help = "Example:\n  pitcrew discover --project ~/src/app --json")]
    Discover(commands::discover::DiscoverArgs),
    /// Run a harness's iterations in a sandbox: upload, verify, launch, collect, summarise.
    #[command(
        after_help = "Examples:\n  pitcrew run harness.yaml\n  pitcrew run harness.yaml --iterations 5 --keep -v\n  pitcrew run harness.yaml --engine podman --image localhost/pitcrew-pi:0.1.0-init4afd0f5d-pi0.73.1-ctxffce1ae6\n  pitcrew run harness.yaml --workspace ../task-17 --prompt \"fix the failing test\"\n  pitcrew run --resume pc-1a2b3c4d"
    )]
    Run(commands::run::RunArgs),
    /// Run many jobs (a harness plus what varies per task) in a sandbox each, N at a time.
    #[command(
        after_help = "The jobs file is JSON lines, one job per line:\n  {\"id\": \"issue-17\", \"harness\": \"harness.yaml\", \"workspace\": \"tasks/17\", \"prompt\": \"fix #17\"}\n\nExample:\n  pitcrew batch jobs.jsonl --concurrency 8"
    )]
    Batch(commands::batch::BatchArgs),
    /// Show a sandbox: state, history, live re-verification with drift, processes, confinement.
    #[command(
        after_help = "Examples:\n  pitcrew inspect pc-1a2b3c4d\n  pitcrew inspect pc-1a2b3c4d --json --no-verify"
    )]
    Inspect(commands::inspect::InspectArgs),
    /// Cancel the iteration running in a sandbox.
    #[command(
        visible_alias = "stop",
        after_help = "Examples:\n  pitcrew cancel pc-1a2b3c4d\n  pitcrew cancel pc-1a2b3c4d --signal SIGINT"
    )]
    Cancel(commands::cancel::CancelArgs),
    /// Fetch an iteration's record from a sandbox.
    #[command(
        after_help = "Example:\n  pitcrew collect pc-1a2b3c4d --iteration 3 --out runs/again"
    )]
    Collect(commands::collect::CollectArgs),
    /// Stop a sandbox and remove its host-side state.
    #[command(
        visible_alias = "rm",
        after_help = "Examples:\n  pitcrew down pc-1a2b3c4d\n  pitcrew down pc-1a2b3c4d --force"
    )]
    Down(commands::down::DownArgs),
    /// Print a sandbox's supervisor log (its state directory's supervisor.log, or the
    /// container's or Pod's output); --follow keeps printing until the sandbox stops.
    #[command(
        after_help = "Examples:\n  pitcrew logs pc-1a2b3c4d\n  pitcrew logs pc-1a2b3c4d --follow\n  pitcrew logs pc-1a2b3c4d --follow --json"
    )]
    Logs(commands::logs::LogsArgs),
    /// List the sandboxes known to this host.
    #[command(
        after_help = "Examples:\n  pitcrew ps\n  pitcrew ps -q --engine podman\n  pitcrew ps --filter state=orphaned --format '{{.ID}}\\t{{.Created}}'"
    )]
    Ps(commands::ps::PsArgs),
    /// Take down the sandboxes nobody drives any more (orphaned, or their supervisor gone).
    #[command(after_help = "Examples:\n  pitcrew prune --dry-run\n  pitcrew prune --force")]
    Prune(commands::prune::PruneArgs),
    /// Write one self-contained HTML page of a run's or a batch's records, to open in a browser.
    #[command(
        after_help = "Examples:\n  pitcrew report runs/20260105T101500Z-pc-1a2b3c4d\n  pitcrew report jobs.batch --output /tmp/batch.html"
    )]
    Report(commands::html_report::ReportArgs),
    /// The ids of the sandboxes this host knows, one a line (for completion scripts).
    #[command(name = "__complete-sandboxes", hide = true)]
    CompleteSandboxes(engine::EngineArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(
        after_help = "Example:\n  pitcrew completions bash > /etc/bash_completion.d/pitcrew"
    )]
    Completions(commands::docs::CompletionsArgs),
    /// Write the man pages (pitcrew.1 and one per subcommand, each with its EXIT STATUS) into a
    /// directory.
    #[command(
        after_help = "Examples (installing them):\n  pitcrew man --out ~/.local/share/man/man1\n  sudo pitcrew man --out /usr/local/share/man/man1 && sudo mandb"
    )]
    Man(commands::docs::ManArgs),
}

impl Command {
    /// Whether the command was given `--json`: its failure is then a JSON object on stdout too.
    fn json(&self) -> bool {
        match self {
            Command::Hash(a) => a.json,
            Command::Classify(a) => a.json,
            Command::Validate(a) => a.json,
            Command::Lock(a) => a.json,
            Command::Discover(a) => a.json,
            Command::Run(a) => a.json,
            Command::Batch(a) => a.json,
            Command::Inspect(a) => a.json,
            Command::Cancel(a) => a.json,
            Command::Collect(a) => a.json,
            Command::Down(a) => a.json,
            Command::Ps(a) => a.json,
            Command::Prune(a) => a.json,
            Command::Report(a) => a.json,
            Command::Logs(a) => a.json,
            Command::CompleteSandboxes(_) | Command::Completions(_) | Command::Man(_) => false,
        }
    }
}

/// `pitcrew`'s command line: the derived one, with what differs per command of the shared
/// engine options: `batch` neither offers nor takes `--engine exec` (it creates a sandbox per
/// job; exec sandboxes are someone else's) and hides the exec engine's options. Help, man pages
/// and completions are made from it too.
pub fn cli_command() -> clap::Command {
    use clap::builder::{PossibleValuesParser, TypedValueParser as _};
    use clap::{CommandFactory as _, ValueEnum as _};
    let creatable = engine::EngineKind::value_variants()
        .iter()
        .filter(|k| **k != engine::EngineKind::Exec)
        .filter_map(engine::EngineKind::to_possible_value);
    let parser =
        PossibleValuesParser::new(creatable).try_map(|s| engine::EngineKind::from_str(&s, true));
    Cli::command().mut_subcommand("batch", |batch| {
        // Every argument in its order: `mut_arg` moves the one it changes last, and the help
        // lists the engine groups in the order of their first argument.
        let ids: Vec<clap::Id> = batch.get_arguments().map(|a| a.get_id().clone()).collect();
        ids.into_iter().fold(batch, |batch, id| {
            batch.mut_arg(id, |a| match a.get_id().as_str() {
                "engine" => a.value_parser(parser.clone()),
                "exec_template" | "sandbox_root" => a.hide(true),
                _ => a,
            })
        })
    })
}

fn main() -> ExitCode {
    // A write to a closed pipe comes back as EPIPE, handled where it happens: `output` for
    // stdout and stderr, the transport's context for a sandbox's.
    engine::ignore_sigpipe();
    let cli = match cli_command()
        .try_get_matches()
        .and_then(|m| <Cli as clap::FromArgMatches>::from_arg_matches(&m))
    {
        Ok(cli) => cli,
        Err(e) if output::json_requested(std::env::args_os()) => {
            return ExitCode::from(output::clap_exit_json(&e))
        }
        Err(e) => return ExitCode::from(output::clap_exit(&e)),
    };
    let json = cli.command.json();
    pitcrew_core::logging::init_to(cli.verbose, cli.quiet, || output::Stderr);
    let result = match cli.command {
        Command::Hash(args) => pitcrew_core::hash_command::run(&args, &mut output::Stdout),
        Command::Classify(args) => commands::classify::run(&args),
        Command::Validate(args) => commands::validate::run(&args, cli.quiet),
        Command::Lock(args) => commands::lock::run(&args, cli.quiet),
        Command::Discover(args) => commands::discover::run(&args, cli.quiet),
        Command::Run(args) => commands::run::run(&args, cli.verbose, cli.quiet),
        Command::Batch(args) => commands::batch::run(&args, cli.verbose, cli.quiet),
        Command::Inspect(args) => commands::inspect::run(&args),
        Command::Cancel(args) => commands::cancel::run(&args, cli.quiet),
        Command::Collect(args) => commands::collect::run(&args, cli.quiet),
        Command::Down(args) => commands::down::run(&args, cli.quiet),
        Command::Logs(args) => commands::logs::run(&args),
        Command::Ps(args) => commands::ps::run(&args, cli.quiet),
        Command::Prune(args) => commands::prune::run(&args),
        Command::Report(args) => commands::html_report::run(&args),
        Command::CompleteSandboxes(args) => commands::ps::complete_ids(&args),
        Command::Completions(args) => commands::docs::completions(&args),
        Command::Man(args) => commands::docs::man(&args),
    };
    let code = match result {
        Ok(code) => code,
        Err(err) => {
            // A command that stopped because its stdout closed has nothing to report.
            if !output::is_gone(&err) {
                // Errors quote paths, names and messages from the sandbox: escaped for the
                // terminal.
                for line in output::error_lines(&err) {
                    output::errln!("pitcrew: {}", report::escape_controls(&line));
                }
                // `--json`: the same failure as one object on stdout, for the script that
                // parses it (docs/operators.md, "Errors in --json mode"). A closed stdout is
                // marked gone by the write.
                if json {
                    let _ = output::outln!("{}", output::json_error_of(&err, 1));
                }
            }
            ExitCode::FAILURE
        }
    };
    // Whatever else happened, a closed output says so (docs/troubleshooting.md).
    if output::gone() {
        ExitCode::from(output::GONE_EXIT)
    } else {
        code
    }
}
