//! The drive loop of `pitcrew run`: compile the harness for the sandbox's layout, upload it,
//! set the manifest, then run iterations, collecting each into the run's records directory and
//! running the harness's `validation` command on the host after each, until N iterations ran,
//! validation passed or Ctrl-C cancelled.

use super::progress::Progress;
use super::signals::{interrupted, CancelSlot};
use super::upload::upload_all;
use super::RunArgs;
use crate::client::RunUpdate;
use crate::engine::{Connection, Engine, SandboxId};
use crate::records;
use crate::report::{self, IterationSummary};
use anyhow::Context as _;
use pitcrew_core::harness::{Compiled, Harness, Validated};
use pitcrew_core::protocol::{Channel, Owner};
use pitcrew_core::result::IterationResult;
use std::os::fd::AsFd as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Why the loop stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum Stopped {
    /// All N iterations ran.
    Iterations,
    /// The validation command exited 0.
    Validation,
    /// Ctrl-C.
    Cancelled,
}

/// What the loop leaves for the run's report.
pub(super) struct RunReport {
    /// `<UTC stamp>-<sandbox>`, the name of the run's records directory.
    pub(super) run_id: String,
    /// The run's records directory.
    pub(super) run_dir: String,
    /// One row per iteration that ran.
    pub(super) rows: Vec<IterationSummary>,
    /// Why the loop stopped.
    pub(super) stopped: Stopped,
    /// The exit code of `pitcrew run`.
    pub(super) exit_code: u8,
}

/// What `--resume` takes back: the orphaned run's id, the iterations it ran, and which of
/// them the host never collected.
pub(super) struct Resumed {
    /// The run id (its records directory's name).
    pub(super) run_id: String,
    /// The iterations the run ran before its host went away.
    pub(super) ran: Vec<u32>,
    /// Which of those the sandbox still holds uncollected.
    pub(super) uncollected: Vec<u32>,
    /// The run's iteration budget.
    pub(super) total: u32,
}

/// The plan a run leaves with its claim (what `--resume` needs to finish it).
pub(super) fn plan(args: &RunArgs, total: u32, kept: bool) -> serde_json::Value {
    let harness = args
        .harness
        .as_deref()
        .map(|h| std::path::absolute(h).unwrap_or_else(|_| h.to_path_buf()));
    serde_json::json!({
        "harness": harness,
        "iterations": total,
        "records": args.records,
        "keep": kept,
    })
}

/// Compiles, uploads and runs the iterations in the started sandbox `id`; with `resumed`,
/// collects what the orphaned run left and runs its remaining iterations instead (its trees
/// and manifest are in place).
#[allow(clippy::too_many_arguments)]
pub(super) fn drive(
    args: &RunArgs,
    verbose: u8,
    engine: &dyn Engine,
    id: &SandboxId,
    validated: &Validated,
    h: &Harness,
    progress: &Progress,
    slot: &CancelSlot,
    kept: bool,
    resumed: Option<Resumed>,
) -> anyhow::Result<RunReport> {
    let layout = engine.layout(id)?;
    let mut conn = engine.connect(id)?;
    let claims = conn.supports("claim");
    let total = resumed
        .as_ref()
        .map_or_else(|| args.iterations.unwrap_or(h.iterations), |r| r.total);
    let run_id = match &resumed {
        Some(r) => r.run_id.clone(),
        None => format!("{}-{}", utc_stamp(), path_safe(&id.0)),
    };
    // Compiled before the claim: a harness problem claims nothing.
    let prepared = match &resumed {
        Some(_) => None,
        None => {
            let Compiled {
                mut manifest,
                mut uploads,
            } = validated
                .compile(&layout)
                .context("the harness has problems")?;
            // A supervisor that cannot choose the agent's identity (unprivileged) names the
            // only one.
            if let Some(user) = &conn.hello().capabilities.agent_user {
                manifest.user = user.clone();
                for upload in uploads.iter_mut().filter(|u| u.owner.is_some()) {
                    upload.owner = Some(Owner {
                        uid: user.uid,
                        gid: user.gid,
                    });
                }
            }
            manifest
                .validate()
                .context("the manifest built from this harness is invalid")?;
            Some((manifest, uploads))
        }
    };
    // The sandbox is this run's before anything is sent: a second run is refused here, and the
    // first one's trees and manifest stay as they are.
    if claims {
        conn.client()
            .claim(&run_id, plan(args, total, kept), args.lease)
            .map_err(|e| conn.explain(e))
            .with_context(|| format!("sandbox {id}: claim it for run {run_id}"))?;
    }
    let heartbeat =
        claims.then(|| super::lease::Heartbeat::start(conn.client().canceller(), args.lease));
    slot.arm(conn.client().canceller());
    let report = (|| -> anyhow::Result<RunReport> {
        let conn = &mut conn;
        if let Some((manifest, uploads)) = &prepared {
            upload_all(conn, uploads, progress)?;
            conn.client()
                .set_manifest(manifest)
                .map_err(|e| conn.explain(e))?;
        }

        // Created without following links: `output:` stays inside the harness directory (or
        // `--records`).
        let (run_dir, _) = records::open_run_dir(args.records_base(h), &h.output, &run_id)?;
        let mut rows = Vec::new();
        let mut done = 0;
        let mut stopped = Stopped::Iterations;
        let mut validation_passed = false;
        if let Some(r) = &resumed {
            done = u32::try_from(r.ran.len()).unwrap_or(u32::MAX);
            for &n in &r.uncollected {
                let dest = run_dir.join(format!("iteration-{n}"));
                progress.status(&format!("iteration {n}: collecting what the run left"));
                // Collected before the host died, but not yet acknowledged: only the word is missing.
                let collected = if dest.join("result.json").is_file() {
                    Ok(())
                } else {
                    records::open_run_dir(args.records_base(h), &h.output, &run_id)
                        .and_then(|_| records::collect_into(conn, Some(n), &dest))
                };
                let record = collected.and_then(|()| {
                    let bytes = std::fs::read(dest.join("result.json"))?;
                    Ok(serde_json::from_slice::<IterationResult>(&bytes)?)
                });
                match record {
                    Ok(record) => {
                        if claims {
                            acknowledge(conn, n, progress);
                        }
                        let mut row = report::summarize(&record, 0, Vec::new());
                        row.record_dir = Some(dest.display().to_string());
                        progress.line(&format!(
                            "iteration {n}: exit {} ({}), {} (run {run_id}, collected now)",
                            row.exit_code, row.meaning, row.verification
                        ));
                        rows.push(row);
                    }
                    Err(e) => progress.line(&format!("iteration {n}: {e:#}")),
                }
            }
            // The host died before it could judge the last of them.
            if let (Some(argv), Some(row)) = (&h.validation, rows.last_mut()) {
                let dest = run_dir.join(format!("iteration-{}", row.iteration));
                let code = run_validation(argv, h, engine, id, &layout.root, &dest)?;
                row.validation_exit = Some(code);
                progress.line(&format!(
                    "iteration {}: validation exited {code}",
                    row.iteration
                ));
                if code == 0 {
                    validation_passed = true;
                    stopped = Stopped::Validation;
                }
            }
        }
        for n in done.saturating_add(1)..=total {
            if validation_passed {
                break;
            }
            if interrupted() {
                stopped = Stopped::Cancelled;
                break;
            }
            let started = Instant::now();
            let mut events = Vec::new();
            let outcome = conn
                .client()
                .run(|u| match u {
                    RunUpdate::Event {
                        iteration,
                        step,
                        state,
                        detail,
                    } => {
                        let at_ms = started.elapsed().as_secs_f64() * 1000.0;
                        events.push(
                            serde_json::json!({"step": step, "state": state, "at_ms": at_ms}),
                        );
                        let detail = if detail.is_null() {
                            String::new()
                        } else {
                            let s = detail.to_string();
                            if s.len() > 120 {
                                String::new()
                            } else {
                                format!(" {s}")
                            }
                        };
                        progress.status(&format!(
                            "iteration {iteration}/{total}: {step} {state}{detail}"
                        ));
                    }
                    RunUpdate::Output { channel, bytes } => {
                        if verbose > 0 && matches!(channel, Channel::Stdout | Channel::Stderr) {
                            progress.output(channel, bytes);
                        }
                    }
                })
                .map_err(|e| engine.explain_lost(id, conn.explain(e)))?;
            let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            let mut row = report::summarize(&outcome.record, duration_ms, events);
            let dest = run_dir.join(format!("iteration-{}", outcome.iteration));
            progress.status(&format!("iteration {}: collecting", outcome.iteration));
            // Checked again before every collect: the validation command runs on the host between
            // iterations and may have swapped the run directory for a link.
            let collected = records::open_run_dir(args.records_base(h), &h.output, &run_id)
                .and_then(|_| records::collect_into(conn, Some(outcome.iteration), &dest));
            match collected {
                Ok(()) => {
                    row.record_dir = Some(dest.display().to_string());
                    // Only now may the sandbox forget it (a stop deletes no record it holds alone).
                    if claims {
                        acknowledge(conn, outcome.iteration, progress);
                    }
                }
                Err(e) => progress.line(&format!("iteration {}: {e:#}", outcome.iteration)),
            }
            progress.line(&format!(
                "iteration {}: exit {} ({}), {}",
                row.iteration, row.exit_code, row.meaning, row.verification
            ));
            if !row.workspace_config.is_empty() {
                progress.line(&format!(
                    "iteration {}: the agent's runtime read unverified configuration from the workspace: {}",
                    row.iteration,
                    row.workspace_config.join(", ")
                ));
            }
            let cancelled = interrupted();
            if !cancelled {
                if let Some(argv) = &h.validation {
                    let code = run_validation(argv, h, engine, id, &layout.root, &dest)?;
                    row.validation_exit = Some(code);
                    progress.line(&format!("iteration {n}: validation exited {code}"));
                    validation_passed = code == 0;
                }
            }
            rows.push(row);
            if cancelled {
                stopped = Stopped::Cancelled;
                break;
            }
            if validation_passed {
                stopped = Stopped::Validation;
                break;
            }
        }
        let last = rows
            .last()
            .map_or(if resumed.is_some() { 0 } else { 125 }, |r| r.exit_code);
        let exit_code = match stopped {
            Stopped::Cancelled => 130,
            _ if validation_passed || last == 0 => 0,
            _ => u8::try_from(last.clamp(1, 255)).unwrap_or(1),
        };
        Ok(RunReport {
            run_id,
            run_dir: run_dir.display().to_string(),
            rows,
            stopped,
            exit_code,
        })
    })();
    // The cancel slot and the heartbeat hold the transport's input too: release them first, so
    // closing the connection ends the transport's input and it exits at once.
    drop(heartbeat);
    slot.disarm();
    if claims {
        // The run is over, finished or failed: the sandbox is kept (or about to be stopped),
        // not orphaned. (Only a host that dies leaves an orphan.)
        if let Err(e) = conn.client().release() {
            progress.line(&format!("sandbox {id}: release the claim: {e}"));
        }
    }
    conn.close();
    report
}

/// Tells the supervisor the host holds the record of iteration `n`; a refusal is reported, not
/// fatal: the sandbox then keeps the record (a stop does not delete it without `--force`).
fn acknowledge(conn: &mut Connection, n: u32, progress: &Progress) {
    if let Err(e) = conn.client().collected(&[n]) {
        progress.line(&format!(
            "iteration {n}: the sandbox did not take note that the record was collected: {e}"
        ));
    }
}

/// Runs the harness's validation command on the host (cwd = the harness directory, its stdout
/// sent to stderr so `--json` stays clean). It sees `PITCREW_ITERATION`,
/// `PITCREW_RECORD_DIR` (the collected record), `PITCREW_SANDBOX`, `PITCREW_ENGINE` and
/// `PITCREW_SANDBOX_ROOT` (the uploads root inside the sandbox; a host path for the local
/// engine).
fn run_validation(
    argv: &[String],
    h: &Harness,
    engine: &dyn Engine,
    id: &SandboxId,
    root: &str,
    record_dir: &Path,
) -> anyhow::Result<i32> {
    let (program, rest) = argv.split_first().context("validation: empty command")?;
    let iteration = record_dir
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("iteration-"))
        .unwrap_or_default()
        .to_string();
    let stdout = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map_or_else(|_| Stdio::null(), Stdio::from);
    let status = Command::new(program)
        .args(rest)
        .current_dir(&h.base)
        .env("PITCREW_ITERATION", iteration)
        .env("PITCREW_RECORD_DIR", record_dir)
        .env("PITCREW_SANDBOX", &id.0)
        .env("PITCREW_ENGINE", engine.name())
        .env("PITCREW_SANDBOX_ROOT", root)
        .stdin(Stdio::null())
        .stdout(stdout)
        .status()
        .with_context(|| format!("validation: cannot run {program:?} in {}", h.base.display()))?;
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

/// A UTC timestamp `YYYYMMDDTHHMMSSZ` (run ids sort by time).
fn utc_stamp() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// `name` as one path component: anything but ASCII letters, digits, `.`, `_` and `-` becomes
/// `_` (an exec-engine sandbox may be named by a path or a `pod/container` pair).
fn path_safe(name: &str) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    safe.trim_start_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::path_safe;

    #[test]
    fn sandbox_names_become_one_path_component() {
        assert_eq!(path_safe("pc-1a2b3c4d"), "pc-1a2b3c4d");
        assert_eq!(path_safe("/run/x/control.sock"), "_run_x_control.sock");
        assert_eq!(path_safe("ns/pod:ctr"), "ns_pod_ctr");
        assert_eq!(path_safe("../up"), "_up");
    }
}
