//! One iteration, in the order of design section 3: reap → verify → environment → confine and
//! launch → supervise → judge → reap again, producing the result record.
//!
//! This is the only place that knows the order. `pitcrew-init run` calls it once; a long-lived
//! mode calls it once per iteration with the same [`Supervisor`].

use crate::exit_code::{self, signal_name};
use crate::judge::judge;
use crate::manifest::Manifest;
use crate::result::{AgentRecord, IterationResult};
use crate::sandbox::confine::ConfinePlan;
use crate::sandbox::launch::{launch, LaunchSpec};
use crate::sandbox::reap::{reap_everything, ReapOutcome};
use crate::sandbox::supervise::supervise;
use crate::{environment, runtime_argv, verify};
use serde::Serialize;
use std::io::{BufReader, Seek, SeekFrom};
use std::path::Path;
use std::time::{Duration, Instant};

pub use crate::sandbox::supervisor::{BaselineEnv, Supervisor};

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A step's report list as JSON values (whatever item type the step uses).
fn to_values(items: &impl Serialize) -> Vec<serde_json::Value> {
    match serde_json::to_value(items) {
        Ok(serde_json::Value::Array(values)) => values,
        Ok(other) => vec![other],
        Err(_) => Vec::new(),
    }
}

fn reap(ctx: &mut Supervisor, manifest: &Manifest) -> ReapOutcome {
    reap_everything(
        ctx,
        Duration::from_millis(manifest.limits.kill_grace_ms),
        Duration::from_millis(manifest.limits.reap_budget_ms),
    )
}

/// The reap after the agent (or after a failed launch): records it, never changes the code.
fn final_reap(ctx: &mut Supervisor, manifest: &Manifest, record: &mut IterationResult) {
    let outcome = reap(ctx, manifest);
    record.steps.final_reap_ms = millis(outcome.elapsed);
    record.reaped.after = outcome.killed;
    record.reaped.remaining_after = outcome.remaining;
}

/// Runs one whole iteration and returns its record (whose `exit_code` is the iteration's).
pub fn run_iteration(ctx: &mut Supervisor, manifest: &Manifest, iteration: u32) -> IterationResult {
    let mut record = IterationResult::new(iteration, ctx.info.clone());
    record.env.baseline_non_utf8 = ctx.baseline.non_utf8.clone();

    // 1. Reap: nothing but the supervisor may run while we verify.
    let outcome = reap(ctx, manifest);
    record.steps.reap_ms = millis(outcome.elapsed);
    record.reaped.before = outcome.killed;
    if outcome.remaining > 0 {
        record.finish(
            exit_code::SUPERVISOR_FAILED,
            Some(format!(
                "reap-incomplete: {} process(es) survived {} ms of TERM/KILL",
                outcome.remaining, manifest.limits.reap_budget_ms
            )),
        );
        return record;
    }

    // 2. Verify.
    let path_var = ctx.baseline.path().to_string();
    let started = Instant::now();
    let report = verify::verify(manifest, &path_var);
    record.steps.verify_ms = millis(started.elapsed());
    let failure = report.failure();
    let binary = report.resolved_agent().map(Path::to_path_buf);
    record.verification = Some(report);
    if let Some(failure) = failure {
        record.finish(failure.exit_code, Some(failure.reason));
        return record;
    }
    // A clean report always has a resolved agent; anything else is a supervisor bug.
    let Some(binary) = binary else {
        record.finish(
            exit_code::SUPERVISOR_FAILED,
            Some("internal: verification passed without a resolved agent binary".to_string()),
        );
        return record;
    };

    // 3. Environment.
    let started = Instant::now();
    let env = environment::build(manifest, &ctx.baseline.vars);
    record.steps.env_ms = millis(started.elapsed());
    let env = match env {
        Ok(env) => env,
        Err(err) => {
            record.finish(exit_code::SUPERVISOR_FAILED, Some(err.to_string()));
            return record;
        }
    };
    record.env.removed = to_values(&env.removed);
    record.env.dotenv_refused = to_values(&env.dotenv_refused);

    // 4 and 5. Confine and launch.
    crate::sandbox::supervisor::release_freed_memory();
    let started = Instant::now();
    let argv = match runtime_argv::argv(manifest, &binary) {
        Ok(argv) => argv,
        Err(err) => {
            record.finish(exit_code::SUPERVISOR_FAILED, Some(format!("argv: {err}")));
            return record;
        }
    };
    let mut plan = match ConfinePlan::prepare(manifest, *ctx.signals.original_mask()) {
        Ok(plan) => plan,
        Err(reason) => {
            record.finish(exit_code::SUPERVISOR_FAILED, Some(reason));
            return record;
        }
    };
    let spec = match LaunchSpec::prepare(&binary, &argv, &env.env, &manifest.output) {
        Ok(spec) => spec,
        Err(reason) => {
            record.finish(
                exit_code::SUPERVISOR_FAILED,
                Some(format!("launch: {reason}")),
            );
            return record;
        }
    };
    let launched = launch(&spec, &mut plan, &mut ctx.reaper);
    record.steps.confine_launch_ms = millis(started.elapsed());
    let mut confinement = plan.record.clone();
    drop(plan);
    let launched = match launched {
        Ok(launched) => launched,
        Err(err) => {
            tracing::warn!("launch: {}", err.reason());
            record.finish(err.exit_code(), Some(err.reason()));
            record.confinement = Some(confinement);
            ctx.reaper.unwatch();
            final_reap(ctx, manifest, &mut record);
            return record;
        }
    };
    confinement.no_new_privs = launched.report.no_new_privs;
    confinement.caps_cleared = launched.report.caps_cleared;
    confinement.landlock.status = launched.report.landlock;
    record.confinement = Some(confinement);

    // 6. Supervise.
    let started = Instant::now();
    let outcome = supervise(ctx, launched.pid, &manifest.limits);
    record.steps.agent_ms = millis(started.elapsed());
    record.agent = Some(AgentRecord {
        argv0: spec.argv0.clone(),
        pid: launched.pid,
        timed_out: outcome.timed_out,
        forwarded_signals: outcome.forwarded.clone(),
    });
    let mut code = outcome.exit.code();
    let mut reason = outcome.timed_out.then(|| {
        format!(
            "timeout: the agent ran longer than {} ms",
            manifest.limits.timeout_ms
        )
    });

    // 7. Judge, then reap again.
    if code == 0 {
        if let Some(verdict) = judge_stdout(manifest, &spec) {
            code = 1;
            reason = Some(verdict);
        }
    }
    record.finish(code, reason);
    record.signal = outcome.exit.signal().map(signal_name);
    final_reap(ctx, manifest, &mut record);
    record
}

/// Runs the judge over the captured stdout (only possible when the manifest sends stdout to
/// a file).
fn judge_stdout(manifest: &Manifest, spec: &LaunchSpec) -> Option<String> {
    let Some(mut file) = spec.stdout_file() else {
        if manifest.runtime != crate::manifest::Runtime::Command {
            tracing::warn!("judge: stdout is not captured (output.stdout unset); not judged");
        }
        return None;
    };
    if let Err(err) = file.seek(SeekFrom::Start(0)) {
        tracing::warn!("judge: cannot rewind the stdout file: {err}");
        return None;
    }
    judge(manifest.runtime, BufReader::new(file))
}
