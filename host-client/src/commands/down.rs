//! `pitcrew down SANDBOX [--keep]`: stop a sandbox (`shutdown`, wait), then remove its host-side
//! state unless `--keep`. A recorded pid that is not provably the sandbox's process any more is
//! never signalled; `down` says so.

use crate::engine::{ignore_sigpipe, EngineArgs, SandboxId};
use crate::report::escape_controls;
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
    let outcome = engine.stop(&id, args.keep)?;
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "sandbox": id.0, "stopped": true, "state_kept": args.keep,
                "warning": outcome.warning,
            })
        );
    } else {
        let id = escape_controls(&id.0);
        match &outcome.warning {
            None => println!("sandbox {id}: stopped"),
            Some(why) => {
                let state = if args.keep { "kept" } else { "removed" };
                eprintln!("pitcrew: sandbox {id}: {}", escape_controls(why));
                println!("sandbox {id}: not running; its state {state}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
