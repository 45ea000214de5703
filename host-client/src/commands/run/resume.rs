//! `pitcrew run --resume ID`: take back a run whose host went away. The sandbox's supervisor
//! kept the run's claim, orphaned, with the plan the run left (its harness, iteration budget,
//! records directory and whether it keeps the sandbox) and the iterations it ran; the resumed
//! run collects what was never collected and runs the rest.

use super::drive::Resumed;
use super::RunArgs;
use crate::engine::SandboxId;
use crate::output::errln;
use anyhow::{bail, Context as _};
use pitcrew_core::protocol::status::{ClaimState, RunState};

/// The arguments that finish the run orphaned in sandbox `id`, what it left, and whether that
/// run kept its sandbox.
pub(super) fn take_back(args: &RunArgs, id: &str) -> anyhow::Result<(RunArgs, Resumed, bool)> {
    let sandbox = SandboxId(id.to_string());
    let engine = args.engine.engine_for(&sandbox)?;
    let mut conn = engine.connect(&sandbox)?;
    // The iteration the run left running goes on without its host: wait for its end (the
    // supervisor enforces its timeout), so it is collected like the others.
    let mut waited = false;
    let status = loop {
        let status = match conn.client().status(false) {
            Ok(s) => s,
            Err(e) => {
                let err = conn.explain(e);
                conn.close();
                return Err(err);
            }
        };
        if status.state != RunState::Running {
            break status;
        }
        if !waited {
            errln!(
                "pitcrew: sandbox {id}: waiting for iteration {} to end",
                status.iteration
            );
            waited = true;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    conn.close();
    let Some(claim) = status.claim else {
        bail!("sandbox {id}: no run to resume (none holds it: the last one finished, or it was never claimed)");
    };
    let run_id = &claim.run;
    if claim.state != ClaimState::Orphaned {
        bail!("sandbox {id}: run {run_id} is still driven by a connected host; nothing to resume");
    }
    if !claim.ready {
        bail!(
            "sandbox {id}: run {run_id} lost its host before its manifest was set (during its \
             upload): nothing of it ran and nothing can be resumed; `pitcrew down {id}` ends it"
        );
    }
    let plan = claim.plan.clone().unwrap_or_default();
    let harness = plan
        .harness
        .with_context(|| format!("sandbox {id}: run {run_id} left no harness in its plan"))?;
    let total = plan
        .iterations
        .with_context(|| format!("sandbox {id}: run {run_id} left no iteration count"))?;
    let ran = claim.iterations.clone();
    let uncollected: Vec<u32> = status
        .uncollected
        .map(|u| u.iterations)
        .unwrap_or_default()
        .into_iter()
        .filter(|n| ran.contains(n))
        .collect();
    let resumed_args = RunArgs {
        harness: Some(harness),
        resume: None,
        sandbox: Some(id.to_string()),
        records: plan.records,
        ..args.clone()
    };
    let keep = plan.keep.unwrap_or(true);
    Ok((
        resumed_args,
        Resumed {
            run_id: run_id.to_string(),
            ran,
            uncollected,
            total,
        },
        keep,
    ))
}
