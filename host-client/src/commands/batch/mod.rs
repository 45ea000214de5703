//! `pitcrew batch JOBS [--concurrency N] [--retries N] [--resume] [--reuse] [--out DIR]
//! [--json]`: many runs of harnesses, one sandbox each (or, with `--reuse`, one per worker), N
//! at a time, on any engine that creates sandboxes.
//!
//! Every job is checked first (its harness validated, its workspace, prompt and env checked
//! like the harness keys they replace): a job with problems is `invalid` and never runs. Then
//! up to N attempts run at once, each a `pitcrew run --json` of its own ([`pool`]). A job ends
//! `succeeded` or `failed` with the agent's outcome (never retried), or, after `1 + --retries`
//! attempts that ended without a report (the sandbox did not start, the connection was lost),
//! `infrastructure`; `cancelled` when the batch was interrupted. One job's end never stops the
//! others.
//!
//! The batch directory (`--out`, default `<jobs file without extension>.batch` next to it) has a
//! directory per job: `job.json` (its outcome and every attempt), `attempt-N.log` and
//! `records/<run id>/iteration-N/`; `batch.json` is the summary. `--resume` runs only the jobs
//! without a complete outcome (`succeeded` or `failed`); without it an existing batch
//! directory is refused.

mod jobs;
mod pool;

use crate::engine::{EngineArgs, EngineKind};
use crate::output::{errln, out, outln};
use crate::report::escape_controls;
use anyhow::{bail, Context as _};
use jobs::Job;
use pitcrew_core::harness::{self, Overrides};
use pool::{Attempt, AttemptEnd, Runner};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Arguments of `pitcrew batch`.
#[derive(Debug, clap::Args)]
pub struct BatchArgs {
    /// The jobs file: one JSON object per line, `{"id", "harness", "workspace", "prompt",
    /// "env", "iterations"}` (only `harness` required; paths relative to the file).
    pub jobs: PathBuf,
    /// Engine options (an engine that creates a sandbox per job: local, podman, docker,
    /// kubernetes).
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Jobs running at once.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub concurrency: u32,
    /// Further attempts of a job whose attempt ended without a report (infrastructure
    /// failure); the agent's own failure is never retried.
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=10))]
    pub retries: u32,
    /// Continue the batch in `--out`: run only the jobs without a complete outcome.
    #[arg(long)]
    pub resume: bool,
    /// Reuse sandboxes across jobs: each of the `--concurrency` workers keeps the sandbox of
    /// its first job and runs its next jobs in it (`pitcrew run --sandbox`: the job's trees and
    /// workspace uploaded again and verified), replacing it after an infrastructure failure;
    /// all are brought down at the end. Faster starts, less isolation between jobs (see
    /// docs/operators.md).
    #[arg(long)]
    pub reuse: bool,
    /// The batch directory [default: the jobs file's path without extension, plus `.batch`].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print one JSON document with every job instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Keep this model credential of pitcrew's environment on the host (repeatable): each
    /// job's `pitcrew run --model-key NAME`.
    #[arg(long = "model-key", value_name = "NAME")]
    pub model_key: Vec<String>,
}

/// How a job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// The run reported exit 0.
    Succeeded,
    /// The run reported the agent's failure (its exit code).
    Failed,
    /// Every attempt ended without a report.
    Infrastructure,
    /// The batch was interrupted before the job completed.
    Cancelled,
    /// The job's harness or its replacements have problems; it never ran.
    Invalid,
}

impl Status {
    fn complete(self) -> bool {
        matches!(self, Status::Succeeded | Status::Failed)
    }
}

/// A job's outcome, `<batch>/<id>/job.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobRecord {
    /// The job's id.
    pub id: String,
    /// How it ended.
    pub status: Status,
    /// The reported exit code of its last attempt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    /// The records of its last reported run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_dir: Option<String>,
    /// Why it is invalid, or its last infrastructure error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Every attempt, across `--resume`.
    pub attempts: Vec<Attempt>,
    /// Set in the summary when `--resume` found it complete and did not run it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skipped: bool,
}

/// Runs `pitcrew batch`; `quiet` (the global `-q`) shows no progress and no table, and prints
/// the batch directory alone (`--json` still prints its document).
pub fn run(args: &BatchArgs, _verbose: u8, quiet: bool) -> anyhow::Result<ExitCode> {
    let kind = args.engine.named()?.unwrap_or(EngineKind::Local);
    if kind == EngineKind::Exec {
        bail!("--engine exec: a batch creates a sandbox per job; exec sandboxes are someone else's (use local, podman, docker or kubernetes)");
    }
    // Said once, before anything is written, rather than by every attempt.
    if let Some(name) = args
        .model_key
        .iter()
        .find(|n| std::env::var_os(n).is_none_or(|v| v.is_empty()))
    {
        bail!("--model-key {name}: not set in pitcrew's environment");
    }
    // A jobs file with problems fails with them; `--json` prints them as the error object's
    // `problems` (main.rs).
    let jobs = jobs::read(&args.jobs)?;
    let out = match &args.out {
        Some(dir) => dir.clone(),
        None => args.jobs.with_extension("batch"),
    };
    let out = std::path::absolute(&out)?;
    let earlier = read_earlier(&out, args.resume)?;
    std::fs::create_dir_all(&out).with_context(|| format!("batch directory {}", out.display()))?;

    let started = Instant::now();
    let mut records: Vec<Option<JobRecord>> = vec![None; jobs.len()];
    let mut queue = VecDeque::new();
    let mut harnesses: HashMap<PathBuf, Result<harness::Harness, String>> = HashMap::new();
    for (i, job) in jobs.iter().enumerate() {
        if let Some(done) = earlier.get(&job.id).filter(|r| r.status.complete()) {
            records[i] = Some(JobRecord {
                skipped: true,
                ..done.clone()
            });
            continue;
        }
        let prior = earlier
            .get(&job.id)
            .map(|r| r.attempts.clone())
            .unwrap_or_default();
        match check(job, &mut harnesses) {
            Ok(()) => queue.push_back((i, prior)),
            Err(why) => {
                let rec = JobRecord {
                    id: job.id.clone(),
                    status: Status::Invalid,
                    exit_code: None,
                    run_dir: None,
                    error: Some(why),
                    attempts: prior,
                    skipped: false,
                };
                write_job(&out, &rec)?;
                records[i] = Some(rec);
            }
        }
    }

    let runner = Runner {
        exe: std::env::current_exe().context("the path of this pitcrew")?,
        engine_args: engine_cli(&args.engine, kind),
        model_keys: args.model_key.clone(),
    };
    let total = jobs.len();
    let display = Display::new(total, records.iter().flatten().count(), quiet);
    for rec in records.iter().flatten() {
        display.finished(rec);
    }
    if !queue.is_empty() {
        pool::install_signals();
    }
    let queue = Mutex::new(queue);
    let results = Mutex::new(&mut records);
    std::thread::scope(|s| {
        for _ in 0..args
            .concurrency
            .min(u32::try_from(total).unwrap_or(u32::MAX))
        {
            s.spawn(|| {
                // With --reuse: this worker's kept sandbox.
                let mut slot: Option<String> = None;
                loop {
                    if pool::interrupted() {
                        break;
                    }
                    let next = queue
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .pop_front();
                    let Some((i, prior)) = next else {
                        break;
                    };
                    let job = &jobs[i];
                    display.started();
                    let reuse = args.reuse.then_some(&mut slot);
                    let rec = run_job(&runner, job, &out, prior, args.retries, &display, reuse);
                    if let Err(e) = write_job(&out, &rec) {
                        display.error(&format!("job {}: {e:#}", job.id));
                    }
                    display.finished(&rec);
                    results.lock().unwrap_or_else(PoisonError::into_inner)[i] = Some(rec);
                }
                if let Some(id) = slot {
                    runner.down(&id);
                }
            });
        }
    });
    display.done();

    // Jobs never started (the batch was interrupted) are cancelled.
    let records: Vec<JobRecord> = records
        .into_iter()
        .zip(&jobs)
        .map(|(rec, job)| {
            rec.unwrap_or_else(|| JobRecord {
                id: job.id.clone(),
                status: Status::Cancelled,
                exit_code: None,
                run_dir: None,
                error: None,
                attempts: earlier
                    .get(&job.id)
                    .map(|r| r.attempts.clone())
                    .unwrap_or_default(),
                skipped: false,
            })
        })
        .collect();
    let elapsed = started.elapsed();
    let ran = records
        .iter()
        .filter(|r| !r.skipped && r.status.complete())
        .count();
    let per_minute = if elapsed.as_secs_f64() > 0.0 {
        ran as f64 * 60.0 / elapsed.as_secs_f64()
    } else {
        0.0
    };
    let count = |s: Status| records.iter().filter(|r| r.status == s).count();
    let doc = serde_json::json!({
        "jobs_file": args.jobs.display().to_string(),
        "batch_dir": out.display().to_string(),
        "engine": format!("{kind:?}").to_lowercase(),
        "concurrency": args.concurrency,
        "reuse": args.reuse,
        "interrupted": pool::interrupted(),
        "counts": {
            "total": total,
            "succeeded": count(Status::Succeeded),
            "failed": count(Status::Failed),
            "infrastructure": count(Status::Infrastructure),
            "cancelled": count(Status::Cancelled),
            "invalid": count(Status::Invalid),
            "skipped": records.iter().filter(|r| r.skipped).count(),
        },
        "duration_ms": u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        "jobs_per_minute": (per_minute * 10.0).round() / 10.0,
        "jobs": records,
    });
    let text = serde_json::to_string_pretty(&doc)?;
    std::fs::write(out.join("batch.json"), &text)
        .with_context(|| format!("{}/batch.json", out.display()))?;
    // `batch.json` holds everything: a closed stdout only ends the printing.
    if args.json {
        outln!("{text}")?;
    } else if quiet {
        outln!("{}", escape_controls(&out.display().to_string()))?;
    } else {
        out!("{}", table(&records))?;
        outln!(
            "{} job(s): {} succeeded, {} failed, {} infrastructure, {} cancelled, {} invalid ({} skipped as complete); batch: {}",
            total,
            count(Status::Succeeded),
            count(Status::Failed),
            count(Status::Infrastructure),
            count(Status::Cancelled),
            count(Status::Invalid),
            records.iter().filter(|r| r.skipped).count(),
            escape_controls(&out.display().to_string()),
        )?;
    }
    Ok(if pool::interrupted() {
        ExitCode::from(130)
    } else if records.iter().all(|r| r.status == Status::Succeeded) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Runs `job`'s attempts until one reports, the retries are spent, or the batch is interrupted.
fn run_job(
    runner: &Runner,
    job: &Job,
    out: &Path,
    mut attempts: Vec<Attempt>,
    retries: u32,
    display: &Display,
    mut reuse: Option<&mut Option<String>>,
) -> JobRecord {
    let dir = out.join(&job.id);
    let mut rec = JobRecord {
        id: job.id.clone(),
        status: Status::Cancelled,
        exit_code: None,
        run_dir: None,
        error: None,
        attempts: Vec::new(),
        skipped: false,
    };
    if let Err(e) = std::fs::create_dir_all(&dir) {
        rec.status = Status::Infrastructure;
        rec.error = Some(format!("{}: {e}", dir.display()));
        rec.attempts = attempts;
        return rec;
    }
    let first = u32::try_from(attempts.len()).unwrap_or(u32::MAX) + 1;
    for n in first..=first.saturating_add(retries) {
        if pool::interrupted() {
            break;
        }
        if n > first {
            display.line(&format!(
                "job {}: attempt {n} after an infrastructure failure",
                job.id
            ));
            std::thread::sleep(Duration::from_secs(1));
        }
        let attempt = runner.attempt(job, n, &dir, reuse.as_deref_mut());
        let end = attempt.end;
        rec.exit_code = attempt.exit_code;
        rec.run_dir = attempt.run_dir.clone().or(rec.run_dir.take());
        rec.error = attempt.error.clone();
        attempts.push(attempt);
        match end {
            AttemptEnd::Completed => {
                rec.status = if rec.exit_code == Some(0) {
                    Status::Succeeded
                } else {
                    Status::Failed
                };
                break;
            }
            AttemptEnd::Cancelled => {
                rec.status = Status::Cancelled;
                break;
            }
            AttemptEnd::Infrastructure => {
                rec.status = if pool::interrupted() {
                    Status::Cancelled
                } else {
                    Status::Infrastructure
                };
            }
        }
    }
    rec.attempts = attempts;
    rec
}

/// Checks `job` as `pitcrew run` would before starting anything: the harness (validated once
/// per file) and the job's replacements.
fn check(
    job: &Job,
    harnesses: &mut HashMap<PathBuf, Result<harness::Harness, String>>,
) -> Result<(), String> {
    let h = harnesses
        .entry(job.harness.clone())
        .or_insert_with(|| {
            let file = job.harness.display().to_string();
            match crate::remote::validate(&job.harness, None) {
                Err(e) => Err(format!("{file}: {e}")),
                Ok(v) if !v.is_ok() => Err(format!(
                    "{file}: {}",
                    v.problems
                        .iter()
                        .map(|p| p.to_string())
                        .collect::<Vec<_>>()
                        .join("; ")
                )),
                Ok(v) => v.harness.ok_or_else(|| format!("{file}: not a harness")),
            }
        })
        .clone()?;
    let overrides = Overrides {
        workspace: job.workspace.clone(),
        prompt: job.prompt.clone(),
        env: job.env.clone().into_iter().collect(),
    };
    h.with_overrides(&overrides)
        .map(drop)
        .map_err(|problems| problems.join("; "))
}

/// The outcomes of an earlier batch in `out`: refused unless `resume`; none when it is new.
fn read_earlier(out: &Path, resume: bool) -> anyhow::Result<HashMap<String, JobRecord>> {
    let mut earlier = HashMap::new();
    let entries = match std::fs::read_dir(out) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if resume {
                bail!("--resume: no batch directory {}", out.display());
            }
            return Ok(earlier);
        }
        Err(e) => return Err(e).with_context(|| format!("batch directory {}", out.display())),
    };
    if !resume {
        bail!(
            "batch directory {} exists: --resume continues it, or give another --out",
            out.display()
        );
    }
    for entry in entries {
        let entry = entry?;
        if !entry.file_type()?.is_dir() {
            continue;
        }
        let path = entry.path().join("job.json");
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| path.display().to_string()),
        };
        let rec: JobRecord =
            serde_json::from_str(&text).with_context(|| format!("{}", path.display()))?;
        earlier.insert(rec.id.clone(), rec);
    }
    Ok(earlier)
}

/// Writes `<out>/<id>/job.json` atomically ([`pitcrew_core::atomic_file`]).
fn write_job(out: &Path, rec: &JobRecord) -> anyhow::Result<()> {
    let dir = out.join(&rec.id);
    std::fs::create_dir_all(&dir).with_context(|| dir.display().to_string())?;
    pitcrew_core::atomic_file::write(
        &dir.join("job.json"),
        &serde_json::to_vec_pretty(rec)?,
        0o644,
    )?;
    Ok(())
}

/// `pitcrew run`'s options for the engine the batch was given.
fn engine_cli(e: &EngineArgs, kind: EngineKind) -> Vec<std::ffi::OsString> {
    let mut out: Vec<std::ffi::OsString> =
        vec!["--engine".into(), format!("{kind:?}").to_lowercase().into()];
    let mut flag = |name: &str, value: Option<std::ffi::OsString>| {
        if let Some(v) = value {
            out.push(name.into());
            out.push(v);
        }
    };
    flag("--state-dir", e.state_dir.clone().map(Into::into));
    flag("--supervisor", e.supervisor.clone().map(Into::into));
    flag("--image", e.image.clone().map(Into::into));
    flag("--network", e.network.clone().map(Into::into));
    flag("--context", e.context.clone().map(Into::into));
    flag("--namespace", e.namespace.clone().map(Into::into));
    flag("--pod-template", e.pod_template.clone().map(Into::into));
    for path in &e.allow_host_path {
        out.extend(["--allow-host-path".into(), path.into()]);
    }
    out
}

/// The summary table: job, status, exit, attempts, time, records.
fn table(records: &[JobRecord]) -> String {
    let mut rows = vec![[
        "job".to_string(),
        "status".into(),
        "exit".into(),
        "attempts".into(),
        "time".into(),
        "records".into(),
    ]];
    for r in records {
        let secs: u64 = r.attempts.iter().map(|a| a.duration_ms).sum();
        let mut status = format!("{:?}", r.status).to_lowercase();
        if r.skipped {
            status.push_str(" (earlier)");
        }
        // The records, or why there are none (cut: an error may quote a whole stderr line).
        let detail: String = r
            .run_dir
            .clone()
            .or_else(|| r.error.clone())
            .unwrap_or_default()
            .chars()
            .take(200)
            .collect();
        rows.push([
            escape_controls(&r.id).into_owned(),
            status,
            r.exit_code.map_or("-".into(), |c| c.to_string()),
            r.attempts.len().to_string(),
            format!("{:.1}s", secs as f64 / 1000.0),
            escape_controls(&detail).into_owned(),
        ]);
    }
    let mut widths = [0usize; 6];
    for row in &rows {
        for (i, c) in row.iter().enumerate().take(5) {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    for row in &rows {
        for (i, c) in row.iter().enumerate() {
            if i < 5 {
                out.push_str(&format!("{c:<w$}  ", w = widths[i]));
            } else {
                out.push_str(c);
            }
        }
        out.push('\n');
    }
    out
}

/// Live progress on stderr: a bar with done/running/failed and throughput on a terminal, a
/// line per finished job either way.
struct Display {
    bar: Option<indicatif::ProgressBar>,
    /// `-q`: no progress lines, errors only.
    quiet: bool,
    counts: Arc<Mutex<(usize, usize, usize)>>,
    started: Instant,
}

impl Display {
    fn new(total: usize, done: usize, quiet: bool) -> Display {
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let b = indicatif::ProgressBar::new(total as u64);
            b.set_style(
                indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            b.set_position(done as u64);
            b.enable_steady_tick(Duration::from_millis(250));
            b
        });
        Display {
            bar,
            quiet,
            counts: Arc::new(Mutex::new((0, 0, 0))),
            started: Instant::now(),
        }
    }

    /// A progress line (none with `-q`).
    fn line(&self, msg: &str) {
        if !self.quiet {
            self.error(msg);
        }
    }

    /// A line `-q` shows too: something failed.
    fn error(&self, msg: &str) {
        let msg = escape_controls(msg);
        match &self.bar {
            Some(b) => b.println(format!("pitcrew: {msg}")),
            None => errln!("pitcrew: {msg}"),
        }
    }

    fn update(&self) {
        let (running, finished, failed) =
            *self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(b) = &self.bar {
            let minutes = self.started.elapsed().as_secs_f64() / 60.0;
            let rate = if minutes > 0.0 {
                finished as f64 / minutes
            } else {
                0.0
            };
            b.set_message(format!(
                "{running} running, {failed} not succeeded, {rate:.1} jobs/min"
            ));
        }
    }

    fn started(&self) {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner).0 += 1;
        self.update();
    }

    fn finished(&self, rec: &JobRecord) {
        {
            let mut c = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
            if !rec.skipped && rec.status != Status::Invalid {
                c.0 = c.0.saturating_sub(1);
                c.1 += 1;
            }
            if rec.status != Status::Succeeded {
                c.2 += 1;
            }
        }
        if let Some(b) = &self.bar {
            b.inc(u64::from(!rec.skipped));
        }
        let what = match (rec.status, rec.exit_code) {
            (Status::Failed, Some(code)) => format!("failed (exit {code})"),
            (status, _) => format!("{status:?}").to_lowercase(),
        };
        let earlier = if rec.skipped {
            " (complete earlier)"
        } else {
            ""
        };
        let error = rec
            .error
            .as_deref()
            .map(|e| format!(": {e}"))
            .unwrap_or_default();
        self.line(&format!(
            "job {}: {what}{earlier}, {} attempt(s){error}",
            rec.id,
            rec.attempts.len()
        ));
        self.update();
    }

    fn done(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}
