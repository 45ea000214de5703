//! One iteration, in the order of design section 3: reap → verify → environment → confine and
//! launch → supervise → judge → reap again, producing the result record.
//!
//! This is the only place that knows the order. `pitcrew-init run` calls it once; a long-lived
//! mode calls it once per iteration with the same [`Supervisor`], and prepares the agent's
//! directories between the reap and the verification ([`IterationObserver::after_reap`]).

use crate::exit_code::{self, signal_name};
use crate::judge::judge;
use crate::manifest::Manifest;
use crate::result::{AgentRecord, IterationResult, OutputRecord};
use crate::sandbox::capture::{StreamName, StreamReport};
use crate::sandbox::confine::ConfinePlan;
use crate::sandbox::launch::{launch, LaunchSpec};
use crate::sandbox::reap::{reap_everything, ReapOutcome};
use crate::sandbox::supervise::supervise;
use crate::{environment, runtime_argv, verify};
use serde::Serialize;
use std::path::Path;
use std::time::{Duration, Instant};

pub use crate::sandbox::supervisor::{BaselineEnv, Supervisor};
use serde_json::json;
use std::os::fd::BorrowedFd;

/// What an observer asks the running iteration to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObserverAction {
    /// Send this signal to the agent's process group.
    Signal(i32),
    /// Cancel: SIGTERM to the agent's group, SIGKILL after `kill_grace_ms`; the record's reason
    /// becomes `cancelled: <text>`.
    Cancel(String),
}

/// Watches an iteration and keeps other work going while the agent runs, without threads: the
/// supervise loop polls [`IterationObserver::poll_fds`] with its signalfd and calls
/// [`IterationObserver::on_ready`] and [`IterationObserver::on_tick`] after every wake-up.
/// `pitcrew-init run` passes [`NoopObserver`]; the long-lived mode passes its server, so both run
/// the same code path.
pub trait IterationObserver {
    /// A step `started` or `finished`, with details.
    fn step(&mut self, _step: &str, _state: &str, _detail: serde_json::Value) {}
    /// Descriptors to wait on (readable) while the agent runs.
    fn poll_fds(&self) -> Vec<BorrowedFd<'_>> {
        Vec::new()
    }
    /// Called after every wake-up of the supervise loop (and once before launch): service the
    /// descriptors and return actions for the agent.
    fn on_ready(&mut self, _ctx: &mut Supervisor) -> Vec<ObserverAction> {
        Vec::new()
    }
    /// Called after every wake-up of the supervise loop, after [`IterationObserver::on_ready`].
    fn on_tick(&mut self) {}
    /// Called once the first reap succeeded (nothing of an earlier agent runs any more), before
    /// verification: the long-lived mode prepares the agent's directories here. An error ends
    /// the iteration with 125 and the error as its reason; nothing is verified or launched.
    fn after_reap(&mut self, _manifest: &Manifest) -> Result<(), String> {
        Ok(())
    }
    /// The longest the supervise loop may sleep between calls.
    fn max_wait(&self) -> Duration {
        Duration::from_secs(1)
    }
}

/// An observer that does nothing (the one-shot `pitcrew-init run`).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopObserver;

impl IterationObserver for NoopObserver {}

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
fn final_reap(
    ctx: &mut Supervisor,
    manifest: &Manifest,
    record: &mut IterationResult,
    observer: &mut dyn IterationObserver,
) {
    observer.step("final-reap", "started", json!({}));
    let outcome = reap(ctx, manifest);
    record.steps.final_reap_ms = millis(outcome.elapsed);
    record.reaped.after = outcome.killed;
    record.reaped.remaining_after = outcome.remaining;
    observer.step(
        "final-reap",
        "finished",
        json!({"killed": outcome.killed, "remaining": outcome.remaining}),
    );
}

/// Runs one whole iteration and returns its record (whose `exit_code` is the iteration's),
/// reporting each step to `observer`.
pub fn run_iteration(
    ctx: &mut Supervisor,
    manifest: &Manifest,
    iteration: u32,
    observer: &mut dyn IterationObserver,
) -> IterationResult {
    let mut record = IterationResult::new(iteration, ctx.info.clone());
    record.env.baseline_non_utf8 = ctx.baseline.non_utf8.clone();

    // 1. Reap: nothing but the supervisor may run while we verify.
    observer.step("reap", "started", json!({}));
    let outcome = reap(ctx, manifest);
    record.steps.reap_ms = millis(outcome.elapsed);
    record.reaped.before = outcome.killed;
    observer.step(
        "reap",
        "finished",
        json!({"killed": outcome.killed, "remaining": outcome.remaining}),
    );
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
    if ctx.private_ipc {
        if let Err(reason) = crate::sandbox::private_ipc::renew() {
            record.finish(exit_code::SUPERVISOR_FAILED, Some(reason));
            return record;
        }
    }
    if let Err(reason) = observer.after_reap(manifest) {
        record.finish(exit_code::SUPERVISOR_FAILED, Some(reason));
        return record;
    }

    // 1b. The config dir holds what the host pinned and nothing the agent added since.
    match crate::config_reset::reset(manifest) {
        Ok(reset) if reset.count > 0 => {
            observer.step(
                "config-reset",
                "finished",
                json!({"removed": reset.count, "paths": reset.removed}),
            );
            record.config_reset = Some(crate::result::ConfigResetRecord {
                removed: reset.count,
                paths: reset.removed,
            });
        }
        Ok(_) => {}
        Err(err) => {
            record.finish(
                exit_code::SUPERVISOR_FAILED,
                Some(format!("config-reset: {err}")),
            );
            return record;
        }
    }

    // 2. Verify.
    observer.step("verify", "started", json!({}));
    let path_var = ctx.baseline.path().to_string();
    let started = Instant::now();
    let report = verify::verify(manifest, &path_var);
    record.steps.verify_ms = millis(started.elapsed());
    let failure = report.failure();
    let binary = report.resolved_agent().map(Path::to_path_buf);
    let interpreter = report
        .agent
        .interpreter
        .clone()
        .map(std::path::PathBuf::from);
    record.verification = Some(report);
    observer.step(
        "verify",
        "finished",
        match &failure {
            None => json!({"ok": true}),
            Some(f) => json!({"ok": false, "exit_code": f.exit_code, "reason": f.reason}),
        },
    );
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

    // 2b. What the runtime will read from the workspace unverified, with no flag to stop it.
    record.workspace_config = crate::workspace_config::present(manifest);
    if !record.workspace_config.is_empty() {
        observer.step(
            "workspace-config",
            "finished",
            json!({"unverified": record.workspace_config}),
        );
    }

    // 3. Environment.
    observer.step("environment", "started", json!({}));
    let started = Instant::now();
    let env = environment::build(manifest, &ctx.baseline.vars);
    record.steps.env_ms = millis(started.elapsed());
    let env = match env {
        Ok(env) => env,
        Err(err) => {
            observer.step("environment", "finished", json!({"error": err.to_string()}));
            record.finish(exit_code::SUPERVISOR_FAILED, Some(err.to_string()));
            return record;
        }
    };
    record.env.removed = to_values(&env.removed);
    record.env.dotenv_refused = to_values(&env.dotenv_refused);
    record.env.layers = env
        .layers
        .iter()
        .map(|(name, layer)| (name.clone(), layer.to_string()))
        .collect();
    observer.step(
        "environment",
        "finished",
        json!({"removed": record.env.removed.len(), "dotenv_refused": record.env.dotenv_refused.len()}),
    );

    // A cancel that arrived while reaping or verifying: nothing is launched.
    let early = observer.on_ready(ctx);
    if let Some(why) = early.into_iter().find_map(|a| match a {
        ObserverAction::Cancel(why) => Some(why),
        ObserverAction::Signal(_) => None,
    }) {
        record.finish(
            128 + libc::SIGTERM,
            Some(format!("cancelled: {why} (before launch)")),
        );
        return record;
    }

    // 4 and 5. Confine and launch.
    observer.step("launch", "started", json!({}));
    crate::sandbox::supervisor::release_freed_memory();
    let started = Instant::now();
    let argv = match runtime_argv::argv(manifest, &binary) {
        Ok(argv) => argv,
        Err(err) => {
            observer.step(
                "launch",
                "finished",
                json!({"error": format!("argv: {err}")}),
            );
            record.finish(exit_code::SUPERVISOR_FAILED, Some(format!("argv: {err}")));
            return record;
        }
    };
    // The agent tree's own cgroups, where the supervisor may make them (removed on drop).
    let cgroups = match ctx.agent_cgroups.create(
        iteration,
        manifest.limits.memory_bytes,
        manifest.limits.processes,
    ) {
        Ok(cgroups) => cgroups,
        Err(reason) => {
            let reason = format!("limits: {reason}");
            observer.step("launch", "finished", json!({"error": reason}));
            record.finish(exit_code::SUPERVISOR_FAILED, Some(reason));
            return record;
        }
    };
    let mut plan = match ConfinePlan::prepare(
        manifest,
        *ctx.signals.original_mask(),
        &ctx.agent_cgroups,
        &cgroups,
    ) {
        Ok(plan) => plan,
        Err(reason) => {
            observer.step("launch", "finished", json!({"error": reason}));
            record.finish(exit_code::SUPERVISOR_FAILED, Some(reason));
            return record;
        }
    };
    // A `#!/usr/bin/env NAME` agent runs through the interpreter verify resolved on the
    // baseline PATH: `NAME script args…`, what env would have run, minus the PATH lookup.
    let (program, argv) = match interpreter {
        Some(interpreter) => {
            let mut full = vec![interpreter.display().to_string()];
            full.extend(argv);
            (interpreter, full)
        }
        None => (binary, argv),
    };
    let (mut spec, mut capture) =
        match LaunchSpec::prepare(&program, &argv, &env.env, &manifest.output) {
            Ok(prepared) => prepared,
            Err(reason) => {
                observer.step(
                    "launch",
                    "finished",
                    json!({"error": format!("launch: {reason}")}),
                );
                record.finish(
                    exit_code::SUPERVISOR_FAILED,
                    Some(format!("launch: {reason}")),
                );
                return record;
            }
        };
    let launched = launch(&mut spec, &mut plan, &mut ctx.reaper);
    record.steps.confine_launch_ms = millis(started.elapsed());
    let mut confinement = plan.record.clone();
    drop(plan);
    let launched = match launched {
        Ok(launched) => launched,
        Err(err) => {
            tracing::warn!("launch: {}", err.reason());
            observer.step(
                "launch",
                "finished",
                json!({"error": err.reason(), "exit_code": err.exit_code()}),
            );
            record.finish(err.exit_code(), Some(err.reason()));
            record.confinement = Some(confinement);
            ctx.reaper.unwatch();
            final_reap(ctx, manifest, &mut record, observer);
            capture.finish();
            return record;
        }
    };
    confinement.no_new_privs = launched.report.no_new_privs;
    confinement.caps_cleared = launched.report.caps_cleared;
    confinement.landlock.status = launched.report.landlock;
    confinement.seccomp.installed = launched.report.seccomp;
    record.confinement = Some(confinement);

    observer.step("launch", "finished", json!({"pid": launched.pid}));

    // 6. Supervise.
    observer.step("agent", "started", json!({"pid": launched.pid}));
    let started = Instant::now();
    let outcome = supervise(ctx, launched.pid, &manifest.limits, &mut capture, observer);
    record.steps.agent_ms = millis(started.elapsed());
    let mut code = outcome.exit.code();
    let mut reason = outcome.timed_out.then(|| {
        format!(
            "timeout: the agent ran longer than {} ms",
            manifest.limits.timeout_ms
        )
    });
    if let Some(why) = &outcome.cancelled {
        reason = Some(format!("cancelled: {why}"));
        if outcome.exit.signal().is_none() {
            // The agent handled SIGTERM and exited by itself: still a cancelled iteration.
            code = 128 + libc::SIGTERM;
        }
    }
    observer.step(
        "agent",
        "finished",
        json!({
            "exit_code": outcome.exit.code(),
            "signal": outcome.exit.signal().map(signal_name),
            "timed_out": outcome.timed_out,
            "cancelled": outcome.cancelled.is_some(),
        }),
    );

    // 7. Reap again, then judge: nothing of the agent runs while the verdict is formed, and
    // the stream the judge reads is complete (every process that could write it is gone).
    record.signal = outcome.exit.signal().map(signal_name);
    final_reap(ctx, manifest, &mut record, observer);
    let usage = cgroups.usage();
    drop(cgroups);
    if let Some(confinement) = &mut record.confinement {
        let limits = &mut confinement.limits;
        limits.memory.peak = usage.memory_peak;
        limits.memory.oom_kills = usage.oom_kills;
        limits.processes.peak = usage.processes_peak;
        limits.processes.refused_forks = usage.refused_forks;
    }
    if reason.is_none() && code != 0 && usage.oom_kills.is_some_and(|n| n > 0) {
        reason = Some(format!(
            "memory-limit: the agent's tree reached limits.memory_bytes ({} bytes); the kernel \
             killed {} of its processes",
            manifest.limits.memory_bytes,
            usage.oom_kills.unwrap_or(0)
        ));
    }
    let streams = capture.finish();
    record.agent = Some(AgentRecord {
        argv0: spec.argv0.clone(),
        pid: launched.pid,
        timed_out: outcome.timed_out,
        forwarded_signals: outcome.forwarded.clone(),
        output: streams.iter().map(output_record).collect(),
    });
    if code == 0 && outcome.cancelled.is_none() {
        if let Some(verdict) = judge_stdout(manifest, &spec, &streams) {
            code = 1;
            reason = Some(verdict);
        }
    }
    record.finish(code, reason);
    record
}

/// A captured stream as the record shows it.
fn output_record(report: &StreamReport) -> OutputRecord {
    OutputRecord {
        stream: match report.name {
            StreamName::Stdout => "stdout",
            StreamName::Stderr => "stderr",
            StreamName::Both => "both",
        }
        .to_string(),
        kept: report.kept,
        dropped: report.dropped,
        complete: report.complete,
        write_error: report.write_error.clone(),
    }
}

/// Runs the judge over the captured stdout (only possible when the manifest sends stdout to
/// a file). A stdout still held open after the final reap (a process outside the sandbox got
/// the agent's socket, or one survived the reap) could have been written after the runtime
/// ended: the iteration fails rather than be judged on it.
fn judge_stdout(
    manifest: &Manifest,
    spec: &LaunchSpec,
    streams: &[StreamReport],
) -> Option<String> {
    let Some(file) = spec.stdout_file() else {
        if manifest.runtime != crate::manifest::Runtime::Command {
            tracing::warn!("judge: stdout is not captured (output.stdout unset); not judged");
        }
        return None;
    };
    if manifest.runtime == crate::manifest::Runtime::Command {
        return None;
    }
    let held = streams
        .iter()
        .any(|s| s.name != StreamName::Stderr && !s.complete);
    if held {
        return Some(
            "judge: output-incomplete: the agent's stdout was still open after the final reap \
             (a process outside the sandbox holds it, or one survived the reap); not judged"
                .to_string(),
        );
    }
    // The judge seeks within the file itself and reads a bounded part of it.
    judge(manifest.runtime, file)
}
