//! Running one iteration for a `run` request: the record directory, the iteration itself
//! (driven by [`crate::iteration::run_iteration`], calling back through
//! [`IterationObserver`]), and the record finalised once the agent's tree is gone.

use super::records;
use super::reserve;
use super::status::HistoryEntry;
use super::tail::{Tail, STREAM_CAP, TAIL_BUDGET};
use super::{PendingRun, Server};
use crate::clock::{millis, now_secs};
use crate::exit_code;
use crate::iteration::{run_iteration, IterationObserver, ObserverAction, Supervisor};
use crate::manifest::{Manifest, NetworkPolicy, RuntimeDirPaths};
use crate::protocol::events::{self, EventDetail, Step, StepState};
use crate::protocol::{Channel, Response};
use crate::result::{DiskFull, IterationResult, NetworkRecord};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Most finished iterations the server remembers for `status`, the latest: far below the
/// control frame's 32 MiB.
pub(super) const HISTORY_KEPT: usize = 1000;

/// The longest the loop sleeps while an iteration runs (output streams at least this often).
const ITERATION_WAIT: Duration = Duration::from_millis(50);

/// The running iteration.
#[derive(Debug)]
pub(super) struct Current {
    /// The connection that asked for it (gone = `None`).
    pub(super) conn: Option<u64>,
    /// Correlation id of the `run` request.
    pub(super) id: u64,
    /// Its number.
    pub(super) iteration: u32,
    /// Its `events.jsonl` (every step event is appended; `None` when it could not be created).
    pub(super) events: Option<File>,
    /// Its output files, streamed to the requester.
    pub(super) tails: Vec<Tail>,
    /// A tail has more output than the last pump sent: the loop should come back at once.
    pub(super) behind: bool,
}

impl Server {
    /// Runs the iteration a `run` request asked for, answers it with the record and keeps the
    /// record for `collect`.
    pub(super) fn run(&mut self, ctx: &mut Supervisor, request: PendingRun) {
        let PendingRun {
            conn: conn_id,
            id,
            feedback,
        } = request;
        let Some(mut manifest) = self.manifest.clone() else {
            return;
        };
        // The harness's feedback: this iteration's prompt says what the last validation said,
        // its end cut to what one argument still holds after the prompt.
        let mut feedback =
            feedback.filter(|_| manifest.runtime != crate::manifest::Runtime::Command);
        let mut feedback_cut = 0;
        if let (Some(text), Some(prompt)) = (&mut feedback, &mut manifest.prompt) {
            let room = crate::runtime_argv::MAX_ARG_BYTES.saturating_sub(prompt.len() + 2);
            feedback_cut = crate::protocol::keep_end(text, room);
            prompt.push_str("\n\n");
            prompt.push_str(text);
        }
        let n = self.last_iteration + 1;
        self.last_iteration = n;
        let dir = records::iteration_dir(&self.records, n);
        let started_at = now_secs();
        let started = Instant::now();
        let stdout = dir.join("output.jsonl");
        let stderr = dir.join("stderr.log");
        manifest.output.stdout = Some(stdout.display().to_string());
        manifest.output.stderr = Some(stderr.display().to_string());
        // Room for the record first: an iteration whose record the disk could not take is not
        // started (its record travels in the response and stays in memory until written).
        self.unwritten.flush();
        let events = self.hold_reserve().and_then(|()| {
            records::create_private_dir(&dir)
                .and_then(|()| {
                    OpenOptions::new()
                        .append(true)
                        .create_new(true)
                        .mode(0o600)
                        .open(dir.join("events.jsonl"))
                })
                .map_err(|e| format!("record directory {}: {e}", dir.display()))
        });
        self.current = Some(Current {
            conn: Some(conn_id),
            id,
            iteration: n,
            events: events.as_ref().ok().and_then(|f| f.try_clone().ok()),
            tails: vec![
                Tail::new(stdout, Channel::Stdout),
                Tail::new(stderr, Channel::Stderr),
            ],
            behind: false,
        });
        // The runtime directories, resolved once for the whole iteration and its record.
        let dirs = manifest.runtime_dirs();
        // The egress listeners are opened in `after_reap`, once nothing of an earlier agent
        // runs any more.
        self.egress = None;
        self.agent_netns = None;
        let mut record = match events.map(drop) {
            Ok(()) => run_iteration(ctx, &manifest, &dirs, n, self),
            Err(reason) => {
                let mut record = IterationResult::new(n, ctx.info.clone());
                record.finish(exit_code::SUPERVISOR_FAILED, Some(reason));
                record
            }
        };
        if let Some(text) = &feedback {
            use sha2::Digest as _;
            record.feedback = Some(crate::result::FeedbackRecord {
                bytes: text.len(),
                sha256: hex::encode(sha2::Sha256::digest(text.as_bytes())),
                cut_bytes: feedback_cut,
            });
        }
        self.pump_tails(STREAM_CAP);
        if let Some(network) = self.close_egress() {
            let placed = record.network.as_mut();
            let (namespace, namespace_via) = placed
                .map(|n| (n.namespace.take(), n.namespace_via.take()))
                .unwrap_or_default();
            // The sandbox's hidden /run, or the agent's own (its own network namespace).
            let hidden = match record.network.as_mut() {
                Some(n) if ctx.hidden_run.is_empty() => std::mem::take(&mut n.hidden),
                _ => ctx.hidden_run.clone(),
            };
            record.network = Some(crate::result::NetworkRecord {
                hidden,
                namespace,
                namespace_via,
                ..network
            });
        }
        self.finalise_record(&manifest, &dirs, &dir, &mut record);
        self.last_confinement = record.confinement.clone();
        self.claim_ran(conn_id, n);
        if self.history.len() >= HISTORY_KEPT {
            // Memory and `status` stay bounded in a sandbox that never stops (records stay on
            // disk): the oldest entry goes, counted.
            self.history.remove(0);
            self.history_left_out += 1;
        }
        self.history.push(HistoryEntry {
            iteration: n,
            exit_code: record.exit_code,
            meaning: super::status::Meaning(record.exit_code),
            reason: record.reason.clone(),
            started_at,
            duration_ms: millis(started.elapsed()),
        });
        let run_stopped = self.claim_stopped();
        if let Some(cur) = self.current.take() {
            if let Some(c) = cur.conn.and_then(|id| self.conn_mut(id)) {
                c.send(&Response::Result {
                    id,
                    iteration: n,
                    record: Box::new(record.clone()),
                    run_stopped,
                });
            }
        }
        tracing::info!(
            "iteration {n}: exit {} {}",
            record.exit_code,
            record.reason.as_deref().unwrap_or("")
        );
    }

    /// Finishes the record of an iteration that has ended: copies what the agent left
    /// (`output/`, `transcripts/`, `workspace/`) within the record's budget (bounded by the disk
    /// budget, [`records::copy_budget_bytes`]), reports it as the `record` step and writes
    /// `result.json`.
    fn finalise_record(
        &mut self,
        manifest: &Manifest,
        runtime_dirs: &RuntimeDirPaths,
        dir: &Path,
        record: &mut IterationResult,
    ) {
        // After the final reap nothing but the supervisor runs: copy what the agent left, and
        // keep the whole record within what the host accepts (one refused entry or a record
        // over the host's limits would lose all of it).
        // Processes that survived the final reap could swap paths under the copy (it runs as
        // root): then nothing the agent left is copied.
        records::restore_modes(&self.records, dir);
        // Bounded by the disk budget too: a sparse file costs the sandbox a few KiB, but its
        // copy and the host's unpack write every byte of it.
        let mut budget = if record.reaped.remaining_after > 0 {
            records::CopyBudget::none()
        } else {
            records::CopyBudget::for_record(manifest.limits.disk_bytes)
        };
        let budget_bytes = budget.bytes();
        let output = records::copy_tree(
            &Path::new(&manifest.workdir).join("output"),
            &dir.join("output"),
            "output",
            &|_| true,
            &mut budget,
        );
        // The runtime's transcripts, before the next iteration's config reset removes them:
        // pi's session files (`dirs.sessions`), Claude Code's `<config>/projects/<cwd>/<session
        // id>.jsonl` (and its sub-agents' below them).
        let mut transcript_dirs = Vec::new();
        if runtime_dirs.uses_sessions {
            transcript_dirs.push(PathBuf::from(&runtime_dirs.sessions));
        }
        if manifest.runtime == crate::manifest::Runtime::Claude {
            transcript_dirs.push(Path::new(&runtime_dirs.config).join("projects"));
        }
        let transcripts = (!transcript_dirs.is_empty()).then(|| {
            let mut report = records::CopyReport::default();
            for from in &transcript_dirs {
                report.add(records::copy_tree(
                    from,
                    &dir.join("transcripts"),
                    "transcripts",
                    &|p| p.extension().is_some_and(|e| e == "jsonl"),
                    &mut budget,
                ));
            }
            report
        });
        // The whole workspace, when the host asked for it: what the agent changed comes back.
        let workspace = manifest.output.collect_workspace.then(|| {
            records::copy_tree(
                Path::new(&manifest.workdir),
                &dir.join("workspace"),
                "workspace",
                // `output/` is in the record already.
                &|rel| !rel.starts_with("output"),
                &mut budget,
            )
        });
        // What the capture read past its cap (or after the record file failed) and did not keep.
        let mut truncated = std::collections::BTreeMap::new();
        for stream in record.agent.iter().flat_map(|a| &a.output) {
            if stream.dropped > 0 {
                let name = if stream.stream == "stderr" {
                    "stderr.log"
                } else {
                    "output.jsonl"
                };
                truncated.insert(name.to_string(), stream.dropped);
            }
        }
        for (what, report) in [
            ("output", Some(&output)),
            ("transcripts", transcripts.as_ref()),
            ("workspace", workspace.as_ref()),
        ] {
            if let Some(report) = report.filter(|r| !r.skipped.is_empty()) {
                tracing::warn!("record: {what}: skipped {:?}", report.skipped);
            }
        }
        let copied = events::RecordCopied {
            copy_budget_bytes: budget_bytes,
            not_copied: (record.reaped.remaining_after > 0)
                .then(|| "processes survived the final reap".to_string()),
            output,
            transcripts,
            truncated_bytes: truncated,
            workspace,
        };
        self.step(Step::Record, StepState::Finished, EventDetail::of(&copied));
        self.judge_disk(record);
        self.keep_record(record.iteration, dir, record.to_json_line());
    }

    /// Opens the iteration's listeners for a manifest with `network: allow`: in the sandbox's
    /// network namespace when it has loopback only, else in a namespace of the agent's own made
    /// for the iteration (where that cannot be made, none: the launch step refuses, naming
    /// why). `Err` is the iteration's reason.
    fn open_egress(&mut self, manifest: &Manifest) -> Result<(), String> {
        self.egress = None;
        self.agent_netns = None;
        let Some(policy @ NetworkPolicy::Allow { .. }) = &manifest.network else {
            return Ok(());
        };
        let (model, first) = (manifest.model.as_ref(), self.egress_next_id);
        let namespace = crate::sandbox::netns::interfaces().unwrap_or_default();
        if !crate::sandbox::netns::needs_agent_namespace(Some(policy), &namespace) {
            let bind = &mut crate::sandbox::netns::bind_here;
            self.egress = Some(super::egress::Egress::open(policy, model, first, bind)?);
            return Ok(());
        }
        let made = crate::sandbox::netns::AgentNamespace::create(&manifest.user, |bind| {
            super::egress::Egress::open(policy, model, first, bind)
        });
        if let Ok((ns, egress)) = made {
            self.egress = Some(egress?);
            self.agent_netns = Some(ns);
        }
        Ok(())
    }

    /// Closes the iteration's listeners and connections; the record's `network` when there
    /// were listeners.
    fn close_egress(&mut self) -> Option<NetworkRecord> {
        self.agent_netns = None;
        let egress = self.egress.take()?;
        self.egress_next_id = egress.next_id();
        let host = self.tunnel_conn();
        let (record, frames) = egress.close();
        if let Some(c) = host.and_then(|id| self.conn_mut(id)) {
            for frame in &frames {
                c.send_frame(frame);
            }
        }
        Some(record)
    }

    /// Holds the records' reserve before an iteration; `Err` (the iteration's reason) when the
    /// disk has no room for it. Any other failure to hold it is logged, not fatal.
    fn hold_reserve(&mut self) -> Result<(), String> {
        match self.reserve.hold() {
            Ok(()) => Ok(()),
            Err(err) if reserve::is_disk_full(&err) => Err(format!(
                "disk-full: no room for the record in {} ({}, {} bytes needed): {err}; free \
                 space in the sandbox (the workspace, temporary files) before the next iteration",
                self.records.display(),
                reserve::room_left(&self.records),
                reserve::RESERVE_BYTES,
            )),
            Err(err) => {
                tracing::warn!("record reserve: {err}");
                Ok(())
            }
        }
    }

    /// Notes in `record` that the filesystem holding the records was full when the iteration
    /// ended (what the agent wrote, or something else in the sandbox, filled it); on a failed
    /// iteration the reason says so too.
    fn judge_disk(&self, record: &mut IterationResult) {
        let Some(free) = reserve::free_bytes(&self.records) else {
            return;
        };
        if free >= reserve::RESERVE_BYTES && !reserve::no_inode_free(&self.records) {
            return;
        }
        let path = self.records.display().to_string();
        let said = record
            .reason
            .as_deref()
            .is_some_and(|r| r.starts_with("disk-full:"));
        if record.exit_code != 0 && !said {
            let note = format!(
                "disk-full: the filesystem holding the records ({path}) was full when the \
                 iteration ended ({})",
                reserve::room_left(&self.records)
            );
            record.reason = Some(match record.reason.take() {
                Some(reason) => format!("{reason}; {note}"),
                None => note,
            });
        }
        record.disk_full = Some(DiskFull {
            path,
            free_bytes: free,
        });
    }

    /// Writes the record `line` of iteration `n` to `dir`: on a full disk the reserve is given
    /// back and the write tried again; a record that still cannot be written is kept in memory
    /// (collectable) until it can.
    fn keep_record(&mut self, n: u32, dir: &Path, line: String) {
        let mut written = reserve::write_record(dir, line.as_bytes());
        if written.as_ref().is_err_and(reserve::is_disk_full) {
            self.reserve.release();
            written = reserve::write_record(dir, line.as_bytes());
        }
        if let Err(err) = written {
            tracing::error!("record: {}: {err} (kept in memory)", dir.display());
            self.unwritten.keep(n, dir.to_path_buf(), line);
        }
    }
}

impl IterationObserver for Server {
    fn step(&mut self, step: Step, state: StepState, detail: EventDetail) {
        if step == Step::Agent && state == StepState::Finished {
            self.pump_tails(STREAM_CAP);
        }
        let Some(cur) = self.current.as_mut() else {
            return;
        };
        let event = Response::Event {
            id: cur.id,
            iteration: cur.iteration,
            step,
            state,
            detail,
        };
        if let Some(file) = cur.events.as_mut() {
            let mut line = serde_json::to_vec(&event).unwrap_or_default();
            line.push(b'\n');
            if let Err(err) = file.write_all(&line) {
                tracing::warn!("record: events.jsonl: {err}");
            }
        }
        if let Some(id) = cur.conn {
            if let Some(c) = self.conns.iter_mut().find(|c| c.id == id) {
                c.send(&event);
            }
        }
    }

    fn poll_fds(&self) -> Vec<BorrowedFd<'_>> {
        self.fds()
    }

    fn poll_out_fds(&self) -> Vec<BorrowedFd<'_>> {
        self.egress
            .as_ref()
            .map(super::egress::Egress::write_fds)
            .unwrap_or_default()
    }

    fn network_pins(&self) -> Vec<crate::environment::IterationPin> {
        self.egress
            .as_ref()
            .map(super::egress::Egress::pins)
            .unwrap_or_default()
    }

    fn agent_namespace(&self) -> Option<&crate::sandbox::netns::AgentNamespace> {
        self.agent_netns.as_ref()
    }

    fn model_listener_url(&self) -> Option<String> {
        self.egress
            .as_ref()
            .and_then(super::egress::Egress::model_listener_url)
    }

    fn after_reap(&mut self, manifest: &Manifest) -> Result<(), String> {
        self.open_egress(manifest)
    }

    fn context_baseline(&mut self) -> Option<&mut Option<crate::context_files::Baseline>> {
        Some(&mut self.context_baseline)
    }

    fn on_ready(&mut self, ctx: &mut Supervisor) -> Vec<ObserverAction> {
        self.service(ctx);
        std::mem::take(&mut self.actions)
    }

    fn on_tick(&mut self) {
        self.pump_tails(TAIL_BUDGET);
        self.check_lease();
    }

    fn max_wait(&self) -> Duration {
        if self.current.as_ref().is_some_and(|c| c.behind) {
            Duration::ZERO
        } else {
            ITERATION_WAIT
        }
    }
}
