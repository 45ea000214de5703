//! `pitcrew down SANDBOX [--keep] [--force]`: stop a sandbox pitcrew created (`shutdown`, wait;
//! a container is stopped with a grace and removed with its volumes), then remove its host-side
//! state unless `--keep`, or unless it holds records the host never collected or its supervisor
//! died (then the state is kept and `down` says so; `--force` deletes it). A recorded pid that is not provably the sandbox's process any more is
//! never signalled; `down` says so. A sandbox pitcrew did not create (an exec sandbox, a
//! container without pitcrew's label) is left alone, and `down` says so and fails, unless
//! `--force`: then its supervisor is stopped and the container is left for its owner to remove.

use crate::engine::{EngineArgs, SandboxId};
use crate::output::{errln, outln};
use crate::report::escape_controls;
use anyhow::bail;
use std::process::ExitCode;

/// Arguments of `pitcrew down`.
#[derive(Debug, clap::Args)]
pub struct DownArgs {
    /// The sandbox id (or the container's name, with `--engine exec`).
    pub sandbox: String,
    /// Engine options.
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Keep the sandbox's host-side state (records, uploads, supervisor.log; a container is
    /// stopped, not removed).
    #[arg(long)]
    pub keep: bool,
    /// Stop a sandbox pitcrew did not create (it is not removed), and delete the state of one
    /// with records the host never collected or whose supervisor died (kept otherwise).
    #[arg(long)]
    pub force: bool,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `pitcrew down`; `quiet` (the global `-q`) prints the id alone, as `podman rm` does.
pub fn run(args: &DownArgs, quiet: bool) -> anyhow::Result<ExitCode> {
    let id = SandboxId(args.sandbox.clone());
    let engine = args.engine.engine_for(&id)?;
    if !args.force && !engine.owns(&id)? {
        bail!(
            "sandbox {id} ({}): pitcrew did not create it, so down leaves it alone (--force stops its supervisor; removing it stays with its owner)",
            engine.name()
        );
    }
    let outcome = crate::engine::stop_keeping_records(&*engine, &id, args.keep, args.force)?;
    if args.json {
        outln!(
            "{}",
            serde_json::json!({
                "sandbox": id.0, "stopped": !outcome.left_alone,
                "state_kept": args.keep || outcome.state_kept,
                "warning": outcome.warning,
            })
        )?;
    } else {
        let id = escape_controls(&id.0);
        if let Some(why) = &outcome.warning {
            errln!("pitcrew: sandbox {id}: {}", escape_controls(why));
        }
        if quiet {
            outln!("{id}")?;
            return Ok(ExitCode::SUCCESS);
        }
        let state = if args.keep || outcome.state_kept {
            "kept"
        } else {
            "removed"
        };
        if outcome.left_alone {
            outln!("sandbox {id}: not running; its state {state}")?;
        } else {
            outln!("sandbox {id}: stopped; its state {state}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
