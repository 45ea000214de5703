//! `pitcrew classify DIR [--json]`.

use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `pitcrew classify`.
#[derive(Debug, clap::Args)]
pub struct ClassifyArgs {
    /// The plugin directory.
    pub dir: PathBuf,
}

/// Runs `pitcrew classify`.
pub fn run(_args: &ClassifyArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("classify: in progress")
}
