//! `pitcrew-init`: the sandbox supervisor (PID 1 of the sandbox container).

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// The sandbox supervisor: reaps, verifies, sanitises, confines and launches the agent.
#[derive(Debug, Parser)]
#[command(name = "pitcrew-init", version, about)]
struct Cli {
    /// More log output on stderr (repeat for more); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the tree hash of a directory (same output as `pitcrew hash`).
    Hash(pitcrew_core::hash_command::HashArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    pitcrew_core::logging::init(cli.verbose);
    let result = match cli.command {
        Command::Hash(args) => pitcrew_core::hash_command::run(&args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("pitcrew-init: {err:#}");
            ExitCode::FAILURE
        }
    }
}
