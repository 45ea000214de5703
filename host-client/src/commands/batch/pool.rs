//! Running jobs: each attempt is a `pitcrew run --json` child process in a process group of its
//! own, its report read from stdout and its stderr kept as `attempt-N.log`. An attempt that
//! ends with a report is the agent's outcome (never retried); one that ends without (the
//! sandbox did not start, the connection was lost, the child was killed) is an infrastructure
//! failure, retried. SIGINT, SIGTERM or SIGHUP to the batch stops new attempts and forwards one
//! SIGTERM per signal to every running child (through a pidfd), which cancels, collects and
//! tears down as `pitcrew run` does. A closed stdout or stderr of the batch ([`crate::output`])
//! does the same once.

use super::jobs::Job;
use crate::output::errln;
use crate::report::{RunDocument, Stopped};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::Read as _;
use std::os::fd::OwnedFd;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

/// Set once the batch is interrupted: no attempt starts after it.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// The running children, by pid, each held by a pidfd (never signalled through its number).
static CHILDREN: Mutex<Option<HashMap<u32, OwnedFd>>> = Mutex::new(None);

/// Whether the batch was interrupted.
pub(super) fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Installs the handler of SIGINT, SIGTERM and SIGHUP: every signal stops new attempts and
/// sends SIGTERM to each running child (a second one makes them quit without collecting). A
/// closed stdout or stderr, watched from now on, does what one signal does.
pub(super) fn install_signals() {
    crate::output::on_gone(|| interrupt("stdout or stderr closed"));
    crate::output::watch();
    let res = ctrlc::set_handler(|| interrupt("batch interrupted"));
    if let Err(e) = res {
        tracing::warn!("cannot install the signal handler: {e}");
    }
}

/// Stops new attempts and sends SIGTERM to each running child, saying `why` (what happened).
fn interrupt(why: &str) {
    INTERRUPTED.store(true, Ordering::SeqCst);
    errln!("pitcrew: {why}: starting no more jobs, cancelling the running ones");
    let children = CHILDREN.lock().unwrap_or_else(PoisonError::into_inner);
    for fd in children.iter().flat_map(|c| c.values()) {
        let _ = rustix::process::pidfd_send_signal(fd, rustix::process::Signal::TERM);
    }
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AttemptEnd {
    /// `pitcrew run` reported the run: the agent's outcome.
    Completed,
    /// The run was cancelled (the batch was interrupted).
    Cancelled,
    /// No report: the sandbox did not start, the connection was lost, the run was killed.
    Infrastructure,
}

/// One attempt of a job.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Attempt {
    /// 1, 2, … (counted across `--resume`).
    pub attempt: u32,
    /// How it ended.
    pub end: AttemptEnd,
    /// The run's exit code (the last iteration's, as `pitcrew run` exits), when reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    /// Why there was no report.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The sandbox it ran in, when reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// Its records, when reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_dir: Option<String>,
    /// `pitcrew run`'s stderr.
    pub log: String,
    /// Wall time.
    pub duration_ms: u64,
}

/// What every attempt runs: this executable's `run`, with the batch's engine options.
pub(super) struct Runner {
    /// This `pitcrew`.
    pub exe: PathBuf,
    /// Engine options for `pitcrew run`.
    pub engine_args: Vec<OsString>,
    /// `--model-key` names for `pitcrew run`.
    pub model_keys: Vec<String>,
}

impl Runner {
    /// Runs attempt `n` of `job`, its records and log in `dir`; with `reuse`, in the kept
    /// sandbox it names (or in a new one it keeps, named there afterwards; a sandbox whose
    /// attempt ended without a report is brought down and forgotten).
    pub(super) fn attempt(
        &self,
        job: &Job,
        n: u32,
        dir: &Path,
        reuse: Option<&mut Option<String>>,
    ) -> Attempt {
        let started = Instant::now();
        let log = dir.join(format!("attempt-{n}.log"));
        let mut attempt = Attempt {
            attempt: n,
            end: AttemptEnd::Infrastructure,
            exit_code: None,
            error: None,
            sandbox: None,
            run_dir: None,
            log: log.display().to_string(),
            duration_ms: 0,
        };
        let kept = reuse.as_ref().and_then(|slot| slot.as_deref());
        match self.spawn_and_wait(job, dir, &log, reuse.is_some(), kept) {
            Ok((status, stdout)) => classify(&mut attempt, status, &stdout, &log),
            Err(e) => attempt.error = Some(format!("{e:#}")),
        }
        if let Some(slot) = reuse {
            match attempt.end {
                AttemptEnd::Infrastructure => {
                    // The kept sandbox, or the one this attempt made and kept before failing.
                    if let Some(id) = slot.take().or_else(|| attempt.sandbox.clone()) {
                        self.down(&id);
                    }
                }
                _ => {
                    if slot.is_none() {
                        slot.clone_from(&attempt.sandbox);
                    }
                }
            }
        }
        attempt.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        attempt
    }

    /// Brings down a sandbox the batch kept (`pitcrew down ID --force`: a sandbox whose
    /// supervisor died is removed too).
    pub(super) fn down(&self, id: &str) {
        let out = Command::new(&self.exe)
            .args(["down", id, "--force"])
            .args(&self.engine_args)
            .stdin(Stdio::null())
            .output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => tracing::warn!(
                "pitcrew down {id}: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            ),
            Err(e) => tracing::warn!("pitcrew down {id}: {e}"),
        }
    }

    fn spawn_and_wait(
        &self,
        job: &Job,
        dir: &Path,
        log: &Path,
        keep: bool,
        sandbox: Option<&str>,
    ) -> anyhow::Result<(std::process::ExitStatus, Vec<u8>)> {
        use anyhow::Context as _;
        let mut cmd = Command::new(&self.exe);
        cmd.arg("run").arg(&job.harness).arg("--json");
        match sandbox {
            Some(id) => {
                cmd.args(["--sandbox", id]);
            }
            None if keep => {
                cmd.arg("--keep");
            }
            None => {}
        }
        cmd.arg("--records").arg(dir.join("records"));
        if let Some(w) = &job.workspace {
            cmd.arg("--workspace").arg(w);
        }
        if let Some(p) = &job.prompt {
            cmd.arg("--prompt").arg(p);
        }
        for (k, v) in &job.env {
            cmd.arg("--env").arg(format!("{k}={v}"));
        }
        if let Some(n) = job.iterations {
            cmd.arg("--iterations").arg(n.to_string());
        }
        for name in &self.model_keys {
            cmd.arg("--model-key").arg(name);
        }
        cmd.args(&self.engine_args);
        let stderr = std::fs::File::create(log).with_context(|| log.display().to_string())?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            // Its own group: a Ctrl-C on the terminal reaches the batch alone, which forwards
            // exactly one SIGTERM (a second signal would make the run quit without cleanup).
            .process_group(0);
        let mut children = CHILDREN.lock().unwrap_or_else(PoisonError::into_inner);
        if interrupted() {
            anyhow::bail!("the batch was interrupted before this attempt started");
        }
        let mut child = cmd.spawn().context("spawn pitcrew run")?;
        let pid = child.id();
        match rustix::process::Pid::from_raw(i32::try_from(pid).unwrap_or(0))
            .map(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()))
        {
            Some(Ok(fd)) => {
                children.get_or_insert_with(HashMap::new).insert(pid, fd);
            }
            _ => tracing::warn!("pidfd_open({pid}) failed: it will not be cancelled on Ctrl-C"),
        }
        drop(children);
        let mut stdout = Vec::new();
        if let Some(mut out) = child.stdout.take() {
            let _ = out.read_to_end(&mut stdout);
        }
        let status = child.wait();
        CHILDREN
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert_with(HashMap::new)
            .remove(&pid);
        Ok((status.context("wait for pitcrew run")?, stdout))
    }
}

/// Fills in how the attempt ended from the child's exit status, its stdout and its log.
fn classify(attempt: &mut Attempt, status: std::process::ExitStatus, stdout: &[u8], log: &Path) {
    let report: Option<RunDocument<serde::de::IgnoredAny>> = serde_json::from_slice(stdout).ok();
    match report {
        Some(doc) => {
            attempt.exit_code = Some(i64::from(doc.exit_code));
            attempt.sandbox = Some(doc.sandbox);
            attempt.run_dir = Some(doc.run_dir);
            attempt.end = if doc.stopped == Stopped::Cancelled {
                AttemptEnd::Cancelled
            } else {
                AttemptEnd::Completed
            };
        }
        None => {
            attempt.end = AttemptEnd::Infrastructure;
            let text = std::fs::read_to_string(log).unwrap_or_default();
            // `pitcrew run` names its sandbox as soon as it has one.
            attempt.sandbox = text.lines().find_map(|l| {
                let rest = l.strip_prefix("pitcrew: sandbox ")?;
                let (id, engine) = rest.split_once(' ')?;
                (engine.starts_with('(') && engine.ends_with(')')).then(|| id.to_string())
            });
            let last = text
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(String::from);
            attempt.error = Some(match (status.code(), status.signal(), last) {
                (_, Some(sig), _) => format!("pitcrew run was killed by signal {sig}"),
                (code, _, Some(line)) => format!("{line} (exit {})", code.unwrap_or(-1)),
                (code, _, None) => {
                    format!("pitcrew run exited {} without a report", code.unwrap_or(-1))
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt() -> Attempt {
        Attempt {
            attempt: 1,
            end: AttemptEnd::Infrastructure,
            exit_code: None,
            error: None,
            sandbox: None,
            run_dir: None,
            log: String::new(),
            duration_ms: 0,
        }
    }

    #[test]
    fn a_report_is_the_agents_outcome_and_its_absence_an_infrastructure_failure() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("attempt-1.log");
        std::fs::write(
            &log,
            "pitcrew: sandbox x (local)\npitcrew: connection lost\n\n",
        )
        .unwrap();

        // What `pitcrew run --json` prints: the writer's own type.
        let report = |exit_code: u8, stopped: Stopped| {
            serde_json::to_vec_pretty(&RunDocument {
                run_id: "20261204T000000Z-s".into(),
                harness: "/h/harness.yaml".into(),
                engine: "local".into(),
                sandbox: "s".into(),
                kept: false,
                run_dir: "/r".into(),
                stopped,
                exit_code,
                iterations: Vec::<crate::report::IterationSummary>::new(),
            })
            .unwrap()
        };
        let mut a = attempt();
        classify(
            &mut a,
            std::process::ExitStatus::from_raw(3 << 8),
            &report(3, Stopped::Iterations),
            &log,
        );
        assert_eq!((a.end, a.exit_code), (AttemptEnd::Completed, Some(3)));
        assert_eq!(a.run_dir.as_deref(), Some("/r"));

        let mut a = attempt();
        classify(
            &mut a,
            std::process::ExitStatus::from_raw(130 << 8),
            &report(130, Stopped::Cancelled),
            &log,
        );
        assert_eq!(a.end, AttemptEnd::Cancelled);

        let mut a = attempt();
        classify(
            &mut a,
            std::process::ExitStatus::from_raw(1 << 8),
            b"",
            &log,
        );
        assert_eq!(a.end, AttemptEnd::Infrastructure);
        assert_eq!(
            a.error.as_deref(),
            Some("pitcrew: connection lost (exit 1)")
        );
        // The sandbox it had made, named in its log.
        assert_eq!(a.sandbox.as_deref(), Some("x"));

        let mut a = attempt();
        classify(&mut a, std::process::ExitStatus::from_raw(9), b"{", &log);
        assert_eq!(
            a.error.as_deref(),
            Some("pitcrew run was killed by signal 9")
        );
    }
}
