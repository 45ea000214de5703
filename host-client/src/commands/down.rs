//! `pitcrew down SANDBOX [--keep]`: stop a sandbox (`shutdown`, wait), then remove its host-side
//! state unless `--keep`.

use crate::engine::{ignore_sigpipe, EngineArgs, SandboxId};
use std::process::ExitCode;

/// Arguments of `pitcrew down`.
#[derive(Debug, clap::Args)]
pub struct DownArgs {
    /// The sandbox id (local engine) or name (exec engine).
    pub sandbox: String,
    /// Engine options.
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Keep the sandbox's host-side state (records, uploads, supervisor.log).
    #[arg(long)]
    pub keep: bool,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `pitcrew down`.
pub fn run(args: &DownArgs) -> anyhow::Result<ExitCode> {
    ignore_sigpipe();
    let engine = args.engine.engine()?;
    let id = SandboxId(args.sandbox.clone());
    engine.stop(&id, args.keep)?;
    if args.json {
        println!(
            "{}",
            serde_json::json!({"sandbox": id.0, "stopped": true, "state_kept": args.keep})
        );
    } else {
        println!("sandbox {id}: stopped");
    }
    Ok(ExitCode::SUCCESS)
}
