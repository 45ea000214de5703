//! A container whose supervisor is gone. PID 1 is the supervisor, so the container exits with
//! it: `inspect` says how (its exit code, whether the OOM killer took it) and `<cli> logs` what
//! it said last (it logs on stderr). The container is never created with `--rm`, so it stays,
//! with its records volume, until `down` removes it; its records are read with `<cli> cp
//! CONTAINER:/var/lib/pitcrew/records -`, a tar stream both CLIs write for a stopped container
//! (its volumes included), by the local engine's rule ([`crate::engine::stored`]). One record
//! is copied into a private scratch directory with the host's safe unpack rule, then streamed by
//! the supervisor's own walk, as `collect` would have received it.
//!
//! Only a stopped container's storage is read: while it runs, its supervisor holds the records
//! (and may be writing them), and a host that cannot reach it keeps the container.

use super::{Container, ContainerEngine, RECORDS};
use crate::engine::stored::{self, Listing};
use crate::engine::{Gone, SandboxId};
use anyhow::{bail, Context as _};
use pitcrew_core::exit_code::signal_name;
use std::fs;
use std::io::Read;
use std::os::unix::fs::DirBuilderExt as _;
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long [`ContainerEngine::gone`] waits for the engine to note the exit of a container
/// whose connection just broke.
const EXIT_NOTED: Duration = Duration::from_secs(2);
/// How many lines of the container's log say why it died.
const LOG_LINES: usize = 5;

impl Container {
    /// Whether its PID 1 has exited: the container is stopped, not paused or never started.
    pub fn exited(&self) -> bool {
        !self.running && matches!(self.status.as_str(), "exited" | "stopped" | "dead")
    }

    /// How its PID 1 ended: `exited with code 137, killed by SIGKILL`, and whether the kernel's
    /// OOM killer took it.
    pub fn exit_summary(&self) -> String {
        let mut s = self.status.clone();
        if let Some(code) = self.exit_code {
            s += &format!(" with code {code}");
            if let Some(sig) = code
                .checked_sub(128)
                .filter(|n| (1..=64).contains(n))
                .and_then(|n| i32::try_from(n).ok())
            {
                s += &format!(", killed by {}", signal_name(sig));
            }
        }
        if self.oom_killed {
            s += ", OOM-killed (the container's memory limit)";
        }
        s
    }

    /// Whether its PID 1 shut down as asked (`shutdown`, or SIGTERM while idle): exit code 0.
    fn clean_exit(&self) -> bool {
        self.exit_code == Some(0) && !self.oom_killed
    }
}

/// `line` without terminal colour sequences (`ESC [ … m`: the supervisor's log colours its
/// levels); any other control character stays, for the caller's escaping.
pub(super) fn without_colours(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            // Parameters and intermediates, up to the final byte (0x40–0x7e).
            for c in chars.by_ref() {
                if ('\u{40}'..='\u{7e}').contains(&c) {
                    break;
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// Whether `<cli> cp`'s error says the path does not exist in the container (podman: `… could
/// not be found on container …`, docker: `Could not find the file … in container …`).
fn not_found(stderr: &str) -> bool {
    let s = stderr.to_ascii_lowercase();
    s.contains("could not be found") || s.contains("could not find") || s.contains("no such file")
}

/// A private directory (0700) in the temporary directory, holding a record copied out of a
/// container (or what a copy into one leaves); removed with what it holds when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> anyhow::Result<Scratch> {
        let base = std::path::absolute(std::env::temp_dir())
            .context("the temporary directory: resolve")?;
        let path = base.join(format!("pitcrew-record-{}", crate::engine::random_id()?));
        // A fresh name, created here: an existing path (or a link planted there) is an error.
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .with_context(|| format!("{}: create", path.display()))?;
        Ok(Scratch(path))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Err(err) = pitcrew_core::bounded_tree::remove_path(&self.0) {
            tracing::warn!("{}: remove: {err}", self.0.display());
        }
    }
}

/// A running `<cli> cp CONTAINER:PATH -`; its stdout (taken by the caller) is the tar stream.
struct CopyOut {
    child: Child,
    stderr: Option<JoinHandle<String>>,
    what: String,
}

impl CopyOut {
    /// Waits for the copy to end (the caller has read or dropped its stdout): `Ok(false)` when
    /// the path does not exist in the container, an error quoting the CLI when it failed
    /// otherwise.
    fn finish(mut self) -> anyhow::Result<bool> {
        let status = self
            .child
            .wait()
            .with_context(|| format!("{}: wait", self.what))?;
        let said = self
            .stderr
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        if status.success() {
            return Ok(true);
        }
        if not_found(&said) {
            return Ok(false);
        }
        bail!("{} ({status}): {}", self.what, said.trim())
    }
}

impl ContainerEngine {
    /// Starts `<cli> cp <id>:<path> -`: its stdout and the running copy (see
    /// [`ContainerEngine::read_copy`]).
    fn copy_out(&self, id: &SandboxId, path: &str) -> anyhow::Result<(ChildStdout, CopyOut)> {
        let program = self.cli.program();
        let what = format!("{program} cp {id}:{path} -");
        let mut child = Command::new(program)
            .args(["cp", &format!("{}:{path}", id.0), "-"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot run {program} (is it installed and on PATH?)"))?;
        // Read apart from stdout: a copy blocked on a full stderr pipe would never end.
        let stderr = child.stderr.take().map(|mut pipe| {
            std::thread::spawn(move || {
                let mut said = String::new();
                let _ = pipe.read_to_string(&mut said);
                said
            })
        });
        let stdout = child
            .stdout
            .take()
            .with_context(|| format!("{what}: stdout not piped"))?;
        let copy = CopyOut {
            child,
            stderr,
            what,
        };
        Ok((stdout, copy))
    }

    /// The container of `id` when it is stopped; `None` while it runs.
    fn stopped(&self, id: &SandboxId) -> anyhow::Result<Option<Container>> {
        let c = self.container(id)?;
        Ok((!c.running).then_some(c))
    }

    /// What the records directory of the stopped container `id` holds (nothing when the
    /// supervisor never made one).
    fn listing(&self, id: &SandboxId) -> anyhow::Result<Listing> {
        let listing = self.read_copy(id, RECORDS, |tar| Ok(Listing::read_tar(tar)?))?;
        Ok(listing.unwrap_or_default())
    }

    /// Runs `<cli> cp <id>:<path> -` and hands its tar stream to `read`; `None` when `path` does
    /// not exist in the container.
    fn read_copy<T>(
        &self,
        id: &SandboxId,
        path: &str,
        read: impl FnOnce(&mut dyn Read) -> anyhow::Result<T>,
    ) -> anyhow::Result<Option<T>> {
        let (mut stdout, copy) = self.copy_out(id, path)?;
        let read = read(&mut stdout).and_then(|v| {
            // What follows the archive's end (padding to the CLI's block size) is read too: a
            // copy whose output is cut short dies of SIGPIPE.
            std::io::copy(&mut stdout, &mut std::io::sink())
                .with_context(|| format!("{}: read", copy.what))?;
            Ok(v)
        });
        // A read that failed leaves the rest unread: the copy ends on a closed pipe.
        drop(stdout);
        let what = copy.what.clone();
        match (copy.finish(), read) {
            (Ok(false), _) => Ok(None),
            (Ok(true), Ok(v)) => Ok(Some(v)),
            (Ok(true), Err(err)) => Err(err.context(format!("{what}: its tar stream"))),
            (Err(failed), Ok(_)) => Err(failed),
            (Err(failed), Err(err)) => Err(err.context(format!("{failed:#}"))),
        }
    }

    /// [`crate::engine::Engine::supervisor_gone`]: the container exited (waiting briefly for a
    /// container whose connection just broke); how, and its log's last lines. A supervisor that
    /// shut down as asked (exit code 0) did not die: it was stopped.
    pub(super) fn gone(&self, id: &SandboxId) -> Option<Gone> {
        let start = Instant::now();
        let c = loop {
            let c = self.inspect(&id.0).ok()??;
            if !c.running || start.elapsed() >= EXIT_NOTED {
                break c;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        if !c.exited() {
            return None;
        }
        if c.clean_exit() {
            return Some(Gone {
                why: format!("its container {}", c.exit_summary()),
                log_says: false,
                stopped: true,
            });
        }
        let logs = format!("`{} logs {id}`", self.cli.program());
        let (log, log_says) = match self.log_lines(id, LOG_LINES) {
            Ok(lines) if lines.is_empty() => (format!("{logs} is empty"), false),
            Ok(lines) => (format!("{logs} ends: {}", lines.join(" | ")), true),
            Err(err) => (format!("{logs} cannot be read: {err:#}"), false),
        };
        Some(Gone {
            why: format!("its container {}; {log}", c.exit_summary()),
            log_says,
            stopped: false,
        })
    }

    /// The last `n` lines the container printed (the supervisor's log), without colours and
    /// blank lines.
    pub(super) fn log_lines(&self, id: &SandboxId, n: usize) -> anyhow::Result<Vec<String>> {
        let out = self.output(&["logs", "--tail", &n.to_string(), &id.0])?;
        if !out.status.success() {
            bail!(
                "{} logs {id}: {}",
                self.cli.program(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        // The container's stdout and stderr (docker keeps them apart): their last `n` lines.
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let lines: Vec<String> = text
            .lines()
            .map(|l| without_colours(l).trim().to_string())
            .filter(|l| !l.is_empty())
            .collect();
        Ok(lines[lines.len().saturating_sub(n)..].to_vec())
    }

    /// [`crate::engine::Engine::stored_uncollected`], from a stopped container.
    pub(super) fn uncollected(&self, id: &SandboxId) -> Option<Vec<u32>> {
        let read = self
            .stopped(id)
            .and_then(|c| c.map(|_| self.listing(id)).transpose());
        match read {
            Ok(listing) => listing.map(|l| l.uncollected()),
            Err(err) => {
                tracing::info!("sandbox {id}: its stored records: {err:#}");
                None
            }
        }
    }

    /// [`crate::engine::Engine::mark_stored_collected`], in a stopped container: its
    /// `.collected` with `iteration` added, copied back into its records directory.
    pub(super) fn mark_collected(&self, id: &SandboxId, iteration: u32) -> anyhow::Result<()> {
        if self.stopped(id)?.is_none() {
            bail!("sandbox {id}: its container runs again; its supervisor keeps its records");
        }
        let mut collected = self.listing(id)?.collected;
        collected.insert(iteration);
        let tar = stored::collected_tar(&collected)?;
        let program = self.cli.program();
        let what = format!("{program} cp - {id}:{RECORDS}");
        // podman keeps a copy of what `cp -` read in its TMPDIR: a scratch one, removed after.
        let scratch = Scratch::new()?;
        let mut child = Command::new(program)
            .args(["cp", "-", &format!("{}:{RECORDS}", id.0)])
            .env("TMPDIR", &scratch.0)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot run {program} (is it installed and on PATH?)"))?;
        let written = child
            .stdin
            .take()
            .with_context(|| format!("{what}: stdin not piped"))
            .and_then(|mut stdin| {
                std::io::Write::write_all(&mut stdin, &tar)
                    .with_context(|| format!("{what}: write"))
            });
        let out = child
            .wait_with_output()
            .with_context(|| format!("{what}: wait"))?;
        if !out.status.success() {
            bail!("{what}: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
        written
    }

    /// [`crate::engine::Engine::stored_record`], from a stopped container: the record of
    /// `iteration` (default: the latest finished one) copied out into a scratch directory with
    /// the host's safe unpack rule, and streamed from there by the supervisor's walk.
    pub(super) fn record(
        &self,
        id: &SandboxId,
        iteration: Option<u32>,
    ) -> anyhow::Result<Option<(u32, Box<dyn Read + Send>)>> {
        if self.stopped(id)?.is_none() {
            return Ok(None);
        }
        let n = match iteration {
            Some(n) => n,
            None => match self.listing(id)?.latest() {
                Some(n) => n,
                None => return Ok(None),
            },
        };
        let scratch = Scratch::new()?;
        let copy_dir = scratch.0.join("copy");
        let copied = self
            .read_copy(
                id,
                &format!(
                    "{RECORDS}/{}",
                    pitcrew_core::record_names::iteration_dir_name(n)
                ),
                |tar| crate::records::unpack_record(tar, &copy_dir).map(|_| ()),
            )
            .with_context(|| format!("sandbox {id}: copying the record of iteration {n}"))?;
        if copied.is_none() {
            return Ok(None);
        }
        let dir = copy_dir.join(format!("iteration-{n}"));
        let finished = fs::symlink_metadata(dir.join(pitcrew_core::record_names::RESULT_FILE))
            .is_ok_and(|m| m.is_file());
        if !finished {
            return Ok(None);
        }
        let tar = stored::stream_dir(dir, scratch)
            .with_context(|| format!("sandbox {id}: streaming the record of iteration {n}"))?;
        Ok(Some((n, tar)))
    }
}
