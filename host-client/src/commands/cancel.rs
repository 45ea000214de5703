//! `pitcrew cancel SANDBOX`: cancel the running iteration (SIGTERM to the agent's group, KILL
//! after the grace); whoever runs it still gets the result record. With `--signal`, send that
//! signal to the agent's process group instead.

use crate::engine::{EngineArgs, SandboxId};
use crate::output::{errln, outln};
use crate::report::escape_controls;
use pitcrew_core::protocol::AgentSignal;
use std::process::ExitCode;

/// Arguments of `pitcrew cancel`.
#[derive(Debug, clap::Args)]
pub struct CancelArgs {
    /// The sandbox id (or the container's name, with `--engine exec`).
    pub sandbox: String,
    /// Engine options.
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Send this signal to the agent's process group instead of cancelling.
    #[arg(long, value_name = "SIGNAL", value_parser = parse_signal)]
    pub signal: Option<AgentSignal>,
    /// Print the supervisor's answer as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also end the run that drives the sandbox: no further iteration starts, and its
    /// `pitcrew run` collects, tears down and exits 130.
    #[arg(long, conflicts_with = "signal")]
    pub all: bool,
}

/// Runs `pitcrew cancel`; `quiet` (the global `-q`) prints the id alone once something was
/// sent, as `podman stop` does (nothing to cancel is still an error on stderr).
pub fn run(args: &CancelArgs, quiet: bool) -> anyhow::Result<ExitCode> {
    let id = SandboxId(args.sandbox.clone());
    let engine = args.engine.engine_for(&id)?;
    let mut conn = engine.connect(&id)?;
    let (what, detail) = match args.signal {
        Some(sig) => {
            let res = conn.client().signal(sig).map_err(|e| conn.explain(e));
            (format!("{sig:?}").to_uppercase(), res.map(|()| None))
        }
        None => (
            "cancel".to_string(),
            conn.client()
                .cancel(args.all)
                .map(Some)
                .map_err(|e| conn.explain(e)),
        ),
    };
    conn.close();
    let detail = detail?;
    // `cancel` answers whether an iteration was running (and with --all whether a run was
    // stopped); a signal goes to whatever runs.
    let run_stopped = detail.as_ref().is_some_and(|d| d.run_stopped);
    let cancelled = detail.as_ref().is_some_and(|d| d.cancelled);
    let idle = args.signal.is_none() && !cancelled && !run_stopped;
    if args.json {
        outln!(
            "{}",
            serde_json::json!({"sandbox": id.0, "sent": what, "detail": detail})
        )?;
    } else if idle {
        errln!(
            "sandbox {}: nothing to cancel: no iteration is running{}",
            escape_controls(&id.0),
            if args.all {
                " and no connected host drives a run (an orphaned run ends with `pitcrew down`)"
            } else {
                ""
            }
        );
    } else if quiet {
        outln!("{}", escape_controls(&id.0))?;
    } else if run_stopped {
        outln!(
            "sandbox {}: the run that drives it is stopped: {}no further iteration starts, and \
             its `pitcrew run` collects what there is and ends",
            escape_controls(&id.0),
            if cancelled {
                "the running iteration ends (TERM to the agent's group, KILL after its grace); "
            } else {
                ""
            }
        )?;
    } else if args.signal.is_none() {
        outln!(
            "sandbox {}: cancel sent: the running iteration ends (TERM to the agent's group, KILL \
             after its grace) and is recorded; a `pitcrew run` driving it goes on to its next \
             iteration (Ctrl-C or SIGTERM to that `pitcrew run` ends the whole run)",
            escape_controls(&id.0)
        )?;
    } else {
        outln!("sandbox {}: {what} sent", escape_controls(&id.0))?;
    }
    Ok(if idle {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// `SIGINT`, `INT`, `int` … → the protocol's signal.
fn parse_signal(s: &str) -> Result<AgentSignal, String> {
    let upper = s.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    Ok(match name {
        "INT" => AgentSignal::Sigint,
        "TERM" => AgentSignal::Sigterm,
        "KILL" => AgentSignal::Sigkill,
        "HUP" => AgentSignal::Sighup,
        "USR1" => AgentSignal::Sigusr1,
        "USR2" => AgentSignal::Sigusr2,
        _ => {
            return Err(format!(
                "{s:?}: one of SIGINT, SIGTERM, SIGKILL, SIGHUP, SIGUSR1, SIGUSR2"
            ))
        }
    })
}
