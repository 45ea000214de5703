//! The drive loop of `pitcrew run`: compile the harness for the sandbox's layout, upload it,
//! set the manifest, then run iterations, collecting each into the run's records directory and
//! running the harness's `validation` command on the host after each, until N iterations ran,
//! validation passed or Ctrl-C cancelled.

use super::progress::Progress;
use super::signals::{interrupted, interrupted_code, CancelSlot};
use super::upload::upload_all;
use super::validation;
use super::RunArgs;
use crate::client::RunUpdate;
use crate::engine::{Connection, Engine, SandboxId};
use crate::records;
use crate::report::{self, IterationSummary};
use anyhow::Context as _;
use pitcrew_core::harness::{Compiled, Harness, Validated};
use pitcrew_core::manifest::ContextFiles;
use pitcrew_core::protocol::{Channel, ClaimPlan, ErrorKind, Owner};
use pitcrew_core::result::IterationResult;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

pub(super) use crate::report::Stopped;

/// Why every further iteration would fail as the iteration of `row` did, if it would: the agent
/// could not be executed (126) or found (127), or the supervisor refused to launch it (125) for
/// a reason nothing in the sandbox changes before the next iteration (the agent never ran). A
/// 125 for processes that survived the reap may pass, and is not one.
pub(super) fn failure_that_repeats(exit_code: i32, reason: Option<&str>) -> Option<String> {
    let reason = reason.unwrap_or("no reason recorded");
    match exit_code {
        126 => Some(format!("the agent could not be executed (126: {reason})")),
        127 => Some(format!("the agent was not found (127: {reason})")),
        125 if !reason.starts_with("reap-incomplete") && !reason.starts_with("cancelled") => Some(
            format!("the supervisor did not launch the agent (125: {reason})"),
        ),
        _ => None,
    }
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
pub(super) fn plan(args: &RunArgs, total: u32, kept: bool) -> ClaimPlan {
    let harness = args
        .harness
        .as_deref()
        .map(|h| std::path::absolute(h).unwrap_or_else(|_| h.to_path_buf()));
    ClaimPlan {
        harness,
        iterations: Some(total),
        keep: Some(kept),
        records: args.records.clone(),
        other: Default::default(),
    }
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
    // pi's pinned models.json as the host rewrote it for the model route: uploaded from here.
    let mut rewritten_file = None;
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
            manifest.output.collect_workspace = args.collect_workspace;
            manifest.env.passed = args.pass_env.clone();
            manifest.model = args
                .model_plan
                .as_ref()
                .and_then(|p| p.route.as_ref())
                .map(|(route, _)| route.clone());
            if manifest.model.is_some() && !conn.hello().capabilities.has_feature("network.model") {
                anyhow::bail!(
                    "the sandbox's pitcrew-init is older than this pitcrew: it cannot keep the \
                     model key on the host (feature network.model); nothing was sent. Use an \
                     image built with this pitcrew (scripts/build-image), or network: open to \
                     hand the key in as it is"
                );
            }
            if let Some(rewritten) = args.model_plan.as_ref().and_then(|p| p.rewritten.as_ref()) {
                if !conn
                    .hello()
                    .capabilities
                    .has_feature("network.model.rewritten")
                {
                    anyhow::bail!(
                        "the sandbox's pitcrew-init is older than this pitcrew: it cannot keep                          the key of pi's pinned models.json on the host (feature                          network.model.rewritten); nothing was sent. Use an image built with                          this pitcrew (scripts/build-image), or network: open to hand the key                          in as it is"
                    );
                }
                rewritten_file = Some(pin_rewritten_models_json(
                    &mut manifest,
                    &mut uploads,
                    &rewritten.bytes,
                )?);
            }
            manifest.env.runner = super::runner_env(args)?;
            older_supervisor(
                &mut manifest,
                h,
                &conn.hello().capabilities.features,
                progress,
            )?;
            let listings_inline = !conn.hello().capabilities.has_feature("manifest.listings");
            if let Some(why) = pitcrew_core::harness::too_big_to_send(&manifest, listings_inline) {
                anyhow::bail!("{why}; nothing was sent");
            }
            manifest
                .validate()
                .context("the manifest built from this harness is invalid")?;
            Some((manifest, uploads))
        }
    };
    // The sandbox is this run's before anything is sent: a second run is refused here, and the
    // first one's trees and manifest stay as they are.
    // The connections the agent may make under `network: allow` are carried by this host.
    let carried = prepared
        .as_ref()
        .and_then(|(manifest, _)| manifest.network.clone())
        .filter(|p| matches!(p, pitcrew_core::manifest::NetworkPolicy::Allow { .. }))
        .filter(|_| conn.hello().capabilities.has_feature("network"));
    if let Some(policy) = &carried {
        let model = args
            .model_plan
            .as_ref()
            .and_then(|p| p.route.as_ref())
            .map(|(_, upstream)| upstream.clone());
        conn.client().carry_connections(policy.clone(), model);
    }
    match prepared.as_ref().and_then(|(m, _)| m.network.as_ref()) {
        Some(pitcrew_core::manifest::NetworkPolicy::Open) => progress.warn(
            "network: open: the agent has the sandbox engine's network as it is; pitcrew \
             neither limits nor records its connections",
        ),
        Some(pitcrew_core::manifest::NetworkPolicy::Platform { platform }) => {
            progress.warn(&format!(
                "network: platform {platform}: the platform's own policy decides what the \
                 agent reaches; pitcrew neither limits nor records its connections"
            ))
        }
        _ => {}
    }
    if claims {
        conn.client()
            .claim(
                &run_id,
                plan(args, total, kept),
                args.lease,
                carried.is_some(),
            )
            .map_err(|e| conn.explain(e))
            .with_context(|| format!("sandbox {id}: claim it for run {run_id}"))?;
    }
    // The disk budget of the manifest this run sent bounds the unpack of each record it
    // collects; a resumed run's manifest is the orphaned run's, not known here.
    let disk_bytes = prepared
        .as_ref()
        .and_then(|(manifest, _)| manifest.limits.disk_bytes);
    let heartbeat =
        claims.then(|| super::lease::Heartbeat::start(conn.client().canceller(), args.lease));
    slot.arm(conn.client().canceller());
    let report = (|| -> anyhow::Result<RunReport> {
        let conn = &mut conn;
        if let Some((manifest, uploads)) = &prepared {
            let level = super::upload::upload_compression(
                engine.name(),
                &conn.hello().capabilities.features,
            )?;
            conn.client().compress_uploads(level);
            upload_all(conn, uploads, progress)?;
            let listings_follow = conn.hello().capabilities.has_feature("manifest.listings");
            conn.client()
                .set_manifest(manifest, listings_follow)
                .map_err(|e| conn.explain(e))?;
        }

        // Created without following links: `output:` stays inside the harness directory (or
        // `--records`).
        let (run_dir, _) = records::open_run_dir(args.records_base(h), &h.output, &run_id)?;
        let mut rows = Vec::new();
        let mut done = 0;
        let mut stopped = Stopped::Iterations;
        let mut validation_passed = false;
        // What the last validation said, for the next iteration's prompt (`feedback:`).
        let mut feedback: Option<String> = None;
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
                        .and_then(|_| records::collect_into(conn, Some(n), &dest, disk_bytes))
                        .map(|_| ())
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
                        let mut row = report::summarize(&record, None, Vec::new());
                        row.record_dir = Some(dest.display().to_string());
                        progress.line(&format!(
                            "iteration {n}: exit {} ({}), {}{} (run {run_id}, collected now)",
                            row.exit_code,
                            row.meaning,
                            row.verification,
                            row.env_note()
                        ));
                        for line in row.workspace_lines() {
                            progress.warn(&line);
                        }
                        rows.push(row);
                    }
                    Err(e) => progress.warn(&format!("iteration {n}: {e:#}")),
                }
            }
            // The host died before it could judge the last of them.
            if let (Some(argv), Some(row)) = (&h.validation, rows.last_mut()) {
                let dest = run_dir.join(format!("iteration-{}", row.iteration));
                let v = validation::run(argv, h, engine, id, &layout.root, &dest)?;
                let code = v.code;
                row.validation_exit = Some(code);
                feedback =
                    (h.feedback.is_some() && code != 0).then(|| validation::feedback(argv, &v));
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
            let outcome = match conn.client().run(feedback.take().as_deref(), |u| match u {
                RunUpdate::Event {
                    iteration,
                    step,
                    state,
                    detail,
                } => {
                    let at_ms = started.elapsed().as_secs_f64() * 1000.0;
                    events.push(serde_json::json!({"step": step, "state": state, "at_ms": at_ms}));
                    let detail = if detail.as_json().is_null() {
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
            }) {
                Ok(outcome) => outcome,
                // `pitcrew cancel --all`: the run ends here, as after Ctrl-C.
                Err(e) if e.refused_kind() == Some(&ErrorKind::Stopped) => {
                    progress.line(&format!("{e}"));
                    stopped = Stopped::Cancelled;
                    break;
                }
                Err(e) => return Err(engine.explain_lost(id, conn.explain(e))),
            };
            let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            let mut row = report::summarize(&outcome.record, Some(duration_ms), events);
            // What was stripped from the workspace is the host's word alone, said once the
            // record is collected: never the supervisor's.
            row.workspace_stripped.clear();
            row.workspace_flagged.clear();
            let dest = run_dir.join(format!("iteration-{}", outcome.iteration));
            progress.status(&format!("iteration {}: collecting", outcome.iteration));
            // Checked again before every collect: the validation command runs on the host between
            // iterations and may have swapped the run directory for a link.
            let collected = records::open_run_dir(args.records_base(h), &h.output, &run_id)
                .and_then(|_| {
                    records::collect_into(conn, Some(outcome.iteration), &dest, disk_bytes)
                });
            match collected {
                Ok(workspace) => {
                    row.record_dir = Some(dest.display().to_string());
                    row.workspace_stripped = workspace.stripped;
                    row.workspace_flagged = workspace.flagged;
                    if row.exit_code != 0 && row.reason.is_none() {
                        row.error = crate::failure_hint::failure_hint(h.runtime, &dest);
                    }
                    // Only now may the sandbox forget it (a stop deletes no record it holds alone).
                    if claims {
                        acknowledge(conn, outcome.iteration, progress);
                    }
                }
                Err(e) => progress.warn(&format!("iteration {}: {e:#}", outcome.iteration)),
            }
            progress.line(&format!(
                "iteration {}: exit {} ({}), {}{}{}",
                row.iteration,
                row.exit_code,
                row.meaning,
                row.verification,
                row.env_note(),
                row.error
                    .as_ref()
                    .map(|e| format!("; it said: {e}"))
                    .unwrap_or_default()
            ));
            for line in row.workspace_lines() {
                progress.warn(&line);
            }
            if !row.workspace_config.is_empty() {
                progress.warn(&format!(
                    "iteration {}: the agent's runtime read unverified configuration from the workspace: {}",
                    row.iteration,
                    row.workspace_config.join(", ")
                ));
            }
            if !row.context_reset.is_empty() {
                progress.warn(&format!(
                    "iteration {}: context files an earlier iteration changed were set back to \
                     the run's baseline before launch: {}",
                    row.iteration,
                    row.context_reset.join(", ")
                ));
            }
            // Ctrl-C, or `pitcrew cancel --all`: the run ends with this iteration, unvalidated.
            let cancelled = interrupted() || outcome.run_stopped;
            // Named by the supervisor's number (a kept sandbox's count goes on across runs), as
            // every line of the iteration is.
            let iteration = outcome.iteration;
            if outcome.run_stopped {
                progress.line(&format!(
                    "iteration {iteration}: the run was stopped by the host (`pitcrew cancel --all`)"
                ));
            }
            if !cancelled {
                if let Some(argv) = &h.validation {
                    let v = validation::run(argv, h, engine, id, &layout.root, &dest)?;
                    row.validation_exit = Some(v.code);
                    progress.line(&format!(
                        "iteration {iteration}: validation exited {}",
                        v.code
                    ));
                    validation_passed = v.code == 0;
                    feedback = (h.feedback.is_some() && !validation_passed)
                        .then(|| validation::feedback(argv, &v));
                }
            }
            let repeats = failure_that_repeats(row.exit_code, row.reason.as_deref());
            rows.push(row);
            if cancelled {
                stopped = Stopped::Cancelled;
                break;
            }
            if validation_passed {
                stopped = Stopped::Validation;
                break;
            }
            if let Some(why) = repeats.filter(|_| n < total) {
                progress.line(&format!(
                    "stopping after iteration {iteration}: {why}; every further iteration would fail the \
                     same way"
                ));
                stopped = Stopped::Repeating;
                break;
            }
        }
        let last = rows
            .last()
            .map_or(if resumed.is_some() { 0 } else { 125 }, |r| r.exit_code);
        let exit_code = match stopped {
            Stopped::Cancelled => interrupted_code(),
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
    // Uploaded by now (or never to be).
    drop(rewritten_file);
    slot.disarm();
    if claims {
        // The run is over, finished or failed: the sandbox is kept (or about to be stopped),
        // not orphaned. (Only a host that dies leaves an orphan.)
        if let Err(e) = conn.client().release() {
            progress.warn(&format!("sandbox {id}: release the claim: {e}"));
        }
    }
    conn.close();
    report
}

/// Tells the supervisor the host holds the record of iteration `n`; a refusal is reported, not
/// fatal: the sandbox then keeps the record (a stop does not delete it without `--force`).
fn acknowledge(conn: &mut Connection, n: u32, progress: &Progress) {
    if let Err(e) = conn.client().collected(&[n]) {
        progress.warn(&format!(
            "iteration {n}: the sandbox did not take note that the record was collected: {e}"
        ));
    }
}

/// The `hello` feature of a supervisor that holds the agent to the manifest's `network`.
pub(super) const NETWORK_FEATURE: &str = "network";

/// What the manifest and the harness ask of this release's supervisor that `offered` (its
/// `hello` features) lacks: refused before anything is sent, naming what, rather than refused
/// or ignored by an older `pitcrew-init` in the sandbox. `env.passed` is only a label: dropped.
/// A supervisor that offers none of them gets a warning: it gives the runtime no skills and
/// does not empty `HOME` between iterations.
pub(super) fn older_supervisor(
    manifest: &mut pitcrew_core::manifest::Manifest,
    h: &Harness,
    offered: &[String],
    progress: &Progress,
) -> anyhow::Result<()> {
    let has = |f: &str| offered.iter().any(|o| o == f);
    if !has("env.passed") {
        manifest.env.passed.clear();
    }
    // The network goes only to a supervisor that offers `network`: one that does not would
    // refuse the field (a release before it) or not hold the agent to it. A harness that says
    // `none` or `allow` is refused below; the runtime's default (or `open`) is dropped, and the
    // agent reaches what the engine gives it, as before egress control, said once.
    let explicit = h.network.as_ref().is_some_and(|n| !n.unenforced());
    if !has(NETWORK_FEATURE) && !explicit && manifest.network.take().is_some() {
        progress.warn(
            "the sandbox's pitcrew-init is older than this pitcrew: it does not control egress, \
             and the agent reaches what the engine's network gives it",
        );
    }
    // The default the harness left unset: what such a supervisor does (as-is), said once.
    if manifest.agent.context_files == ContextFiles::Uploaded
        && h.agent.context_files.is_none()
        && !has("agent.context_files.uploaded")
    {
        manifest.agent.context_files = ContextFiles::AsIs;
        progress.warn(
            "the sandbox's pitcrew-init is older than this pitcrew: the runtime reads the \
             workspace's context files (AGENTS.md, CLAUDE.md) as an earlier iteration left them \
             (agent.context_files: as-is), and the record does not name them",
        );
    }
    let asked = [
        (
            "agent.tools-empty",
            manifest.agent.tools.as_ref().is_some_and(Vec::is_empty),
            "agent.tools: []",
        ),
        (
            "agent.record_prompt",
            manifest.agent.record_prompt,
            "agent.record_prompt",
        ),
        (
            "agent.context_files",
            manifest.agent.context_files == ContextFiles::None,
            "agent.context_files: none",
        ),
        (
            "agent.context_files.uploaded",
            h.agent.context_files == Some(ContextFiles::Uploaded),
            "agent.context_files: uploaded",
        ),
        (
            "dirs.home_keep",
            !manifest.dirs.home_keep.is_empty(),
            "keep_home",
        ),
        (
            "output.keep_output",
            manifest.output.keep_output,
            "keep_output",
        ),
        ("run.feedback", h.feedback.is_some(), "feedback"),
        (
            "env.runner",
            !manifest.env.runner.is_empty(),
            "--runner-env",
        ),
        ("network", explicit, "network"),
        (
            "network.platform",
            matches!(
                h.network,
                Some(pitcrew_core::manifest::NetworkPolicy::Platform { .. })
            ),
            "network: {platform: …}",
        ),
        (
            "network.from-sandbox",
            h.network
                .as_ref()
                .is_some_and(|p| p.dial_from() == pitcrew_core::manifest::DialFrom::Sandbox),
            "network: {allow: …, from: sandbox}",
        ),
    ];
    let missing: Vec<&str> = asked
        .iter()
        .filter(|(feature, used, _)| *used && !has(feature))
        .map(|(_, _, key)| *key)
        .collect();
    if !missing.is_empty() {
        anyhow::bail!(
            "the sandbox's pitcrew-init is older than this pitcrew and does not know {}: use an \
             image built with this release, or drop the key",
            missing.join(", ")
        );
    }
    if !has("skills") {
        progress.warn(
            "the sandbox's pitcrew-init is older than this pitcrew: it gives the runtime no \
             skills and does not empty HOME between iterations",
        );
    }
    Ok(())
}

/// Pins `bytes` (pi's `models.json` rewritten by the host for the model route) in place of the
/// harness's own: the manifest's digest and size of the config dir's `models.json`, and its
/// upload, which is made from the temporary file returned (kept until the upload is done).
fn pin_rewritten_models_json(
    manifest: &mut pitcrew_core::manifest::Manifest,
    uploads: &mut [pitcrew_core::harness::Upload],
    bytes: &[u8],
) -> anyhow::Result<tempfile::NamedTempFile> {
    use sha2::Digest as _;
    let path = std::path::Path::new(&manifest.runtime_dirs().config).join("models.json");
    let path = path.to_string_lossy().into_owned();
    let pin = manifest
        .files
        .iter_mut()
        .find(|f| f.path == path)
        .with_context(|| format!("the manifest pins no {path} to rewrite"))?;
    pin.sha256 = hex::encode(sha2::Sha256::digest(bytes));
    pin.size = Some(bytes.len() as u64);
    let upload = uploads
        .iter_mut()
        .find(|u| u.sandbox_path == path)
        .with_context(|| format!("no upload puts {path} in place"))?;
    let mut file = tempfile::NamedTempFile::new().context("the rewritten models.json")?;
    std::io::Write::write_all(&mut file, bytes).context("the rewritten models.json")?;
    upload.host_path = file.path().to_path_buf();
    Ok(file)
}

/// A UTC timestamp `YYYYMMDDTHHMMSSZ` (run ids sort by time).
fn utc_stamp() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (y, m, d, hh, mm, ss) = crate::report::utc(secs);
    format!("{y:04}{m:02}{d:02}T{hh:02}{mm:02}{ss:02}Z")
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
    use super::{failure_that_repeats, path_safe};

    #[test]
    fn only_failures_nothing_changes_stop_the_run() {
        assert!(failure_that_repeats(127, Some("exec: No such file"))
            .unwrap()
            .starts_with("the agent was not found (127"));
        assert!(failure_that_repeats(126, None).is_some());
        assert!(failure_that_repeats(125, Some("confine: writable root /w: a symlink")).is_some());
        for (code, reason) in [
            (
                125,
                Some("reap-incomplete: 1 process(es) survived 10000 ms of TERM/KILL"),
            ),
            (125, Some("cancelled: requested by the host")),
            (1, None),
            (96, Some("tree-drift: …")),
            (137, Some("timeout: …")),
            (0, None),
        ] {
            assert_eq!(
                failure_that_repeats(code, reason),
                None,
                "{code} {reason:?}"
            );
        }
    }

    #[test]
    fn sandbox_names_become_one_path_component() {
        assert_eq!(path_safe("pc-1a2b3c4d"), "pc-1a2b3c4d");
        assert_eq!(path_safe("/run/x/control.sock"), "_run_x_control.sock");
        assert_eq!(path_safe("ns/pod:ctr"), "ns_pod_ctr");
        assert_eq!(path_safe("../up"), "_up");
    }
}
