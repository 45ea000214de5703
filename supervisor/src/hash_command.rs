//! `hash DIR [--format …] [--json]`, shared by `pitcrew hash` and `pitcrew-init hash`.

use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of the `hash` subcommand.
#[derive(Debug, clap::Args)]
pub struct HashArgs {
    /// The directory to hash (the root itself may be a symlink to a directory).
    pub dir: PathBuf,
}

/// Runs the `hash` subcommand, printing to stdout.
pub fn run(_args: &HashArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("hash: in progress")
}
