//! Which run a sandbox serves, and which records its host has taken.
//!
//! A host's run first `claim`s the sandbox: from then on only the claiming connection may
//! `upload`, `set_manifest` and `run`, so a second run is refused before it sends anything and
//! the first one's trees and manifest stay as they were. The claim is a lease held by the
//! connection: `release` ends it (the run finished; the sandbox is kept or about to be stopped);
//! a connection that closes without releasing leaves it *orphaned* (its host died), which
//! `status` shows and only the same run may take back (`pitcrew run --resume`). The claim carries
//! the host's plan (opaque, bounded) and the iterations run under it.
//!
//! `collected` is the host's word that it holds a record: the iterations are kept in
//! `<records>/.collected` (one number a line, outliving the supervisor), so neither the host nor
//! anyone reading the sandbox's storage deletes a record nobody holds.

use super::error::RequestError;
use super::Server;
use crate::clock::now_secs;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

/// Most bytes of a claim's plan (JSON): it is the host's memo, not a store.
pub const PLAN_MAX_BYTES: usize = 64 * 1024;
/// Most uncollected iterations `status` names (the count is always exact).
const UNCOLLECTED_NAMED: usize = 1000;
/// The file of collected iterations in the records directory (the host reads it too, from a
/// sandbox's storage).
pub const COLLECTED_FILE: &str = ".collected";

/// The run a sandbox serves.
#[derive(Debug, Clone)]
pub(super) struct Claim {
    /// The host's run id.
    run: String,
    /// The host's plan for the run (opaque JSON).
    plan: Value,
    /// The connection holding it; `None` once that connection closed without `release`.
    holder: Option<u64>,
    /// The connection that holds it or held it last (a `run` it sent just before it closed
    /// still counts for the claim).
    held_by: u64,
    /// When it was claimed (or taken back), seconds since the epoch.
    since: u64,
    /// When its holder went away.
    orphaned_at: Option<u64>,
    /// The iterations run under it.
    iterations: Vec<u32>,
    /// A manifest was set under it: its run's trees and manifest are in place (a run whose host
    /// died during its upload has none of its own, and cannot be resumed).
    ready: bool,
}

impl Claim {
    /// The claim as `status` and the `claim` answer show it.
    pub(super) fn to_json(&self) -> Value {
        json!({
            "run": self.run,
            "plan": self.plan,
            "state": if self.holder.is_some() { "held" } else { "orphaned" },
            "since": self.since,
            "orphaned_at": self.orphaned_at,
            "iterations": self.iterations,
            "ready": self.ready,
        })
    }
}

/// The collected iterations listed in `records` (empty when none are).
pub(super) fn read_collected(records: &Path) -> BTreeSet<u32> {
    fs::read_to_string(records.join(COLLECTED_FILE))
        .map(|text| {
            text.lines()
                .filter_map(|l| l.trim().parse::<u32>().ok())
                .collect()
        })
        .unwrap_or_default()
}

impl Server {
    /// `claim`: connection `conn` claims the sandbox for `run`.
    pub(super) fn claim(
        &mut self,
        conn: u64,
        run: String,
        plan: Value,
    ) -> Result<Value, RequestError> {
        if plan.to_string().len() > PLAN_MAX_BYTES {
            return Err(RequestError::Malformed(format!(
                "claim: the plan is over {PLAN_MAX_BYTES} bytes"
            )));
        }
        if run.is_empty() || run.len() > 256 {
            return Err(RequestError::Malformed(
                "claim: run must be 1 to 256 bytes".into(),
            ));
        }
        let now = now_secs();
        match &mut self.claim {
            Some(c) if c.holder == Some(conn) && c.run == run => {
                c.plan = plan;
            }
            Some(c) if c.holder.is_some() => {
                return Err(RequestError::Busy(format!(
                    "the sandbox serves run {} (claimed {} s ago by a host that is still \
                     connected); a sandbox serves one run at a time",
                    c.run,
                    now.saturating_sub(c.since)
                )));
            }
            Some(c) if c.run != run => {
                return Err(RequestError::Busy(format!(
                    "run {} was orphaned here {} s ago after {} iteration(s) (its host went \
                     away): `pitcrew run --resume` finishes it, `pitcrew down` ends it",
                    c.run,
                    now.saturating_sub(c.orphaned_at.unwrap_or(now)),
                    c.iterations.len()
                )));
            }
            Some(c) => {
                // The same run, taken back by a new connection (`--resume`).
                tracing::info!("claim: run {run} resumed by conn {conn}");
                c.holder = Some(conn);
                c.held_by = conn;
                c.orphaned_at = None;
                c.since = now;
                if !plan.is_null() {
                    c.plan = plan;
                }
            }
            None => {
                self.claim = Some(Claim {
                    run,
                    plan,
                    holder: Some(conn),
                    held_by: conn,
                    since: now,
                    orphaned_at: None,
                    iterations: Vec::new(),
                    ready: false,
                });
            }
        }
        Ok(self
            .claim
            .as_ref()
            .map(Claim::to_json)
            .unwrap_or(Value::Null))
    }

    /// `release`: the holder `conn` ends its claim.
    pub(super) fn release(&mut self, conn: u64) -> Result<(), RequestError> {
        match &self.claim {
            Some(c) if c.holder == Some(conn) => {
                self.claim = None;
                Ok(())
            }
            _ => Err(RequestError::Order(
                "release: this connection holds no claim".into(),
            )),
        }
    }

    /// Refuses a request that changes the sandbox (`upload`, `set_manifest`, `run`) from a
    /// connection other than the claim's holder; without a claim every connection may.
    pub(super) fn check_claim(&self, conn: u64, what: &str) -> Result<(), RequestError> {
        match &self.claim {
            Some(c) if c.holder != Some(conn) => Err(RequestError::Busy(format!(
                "{what}: the sandbox serves run {} ({}); a sandbox serves one run at a time",
                c.run,
                if c.holder.is_some() {
                    "its host is connected"
                } else {
                    "orphaned: `pitcrew run --resume` finishes it"
                }
            ))),
            _ => Ok(()),
        }
    }

    /// Notes that iteration `n` ran for connection `conn` (under its claim, if it holds or held
    /// it last).
    pub(super) fn claim_ran(&mut self, conn: u64, n: u32) {
        if let Some(c) = self.claim.as_mut().filter(|c| c.held_by == conn) {
            c.iterations.push(n);
        }
    }

    /// Connection `conn` set the manifest: the claim it holds is ready to run.
    pub(super) fn claim_ready(&mut self, conn: u64) {
        if let Some(c) = self.claim.as_mut().filter(|c| c.holder == Some(conn)) {
            c.ready = true;
        }
    }

    /// The connection `conn` closed: a claim it held is orphaned.
    pub(super) fn claim_holder_gone(&mut self, conn: u64) {
        if let Some(c) = self.claim.as_mut().filter(|c| c.holder == Some(conn)) {
            tracing::warn!("claim: run {}: its host went away; orphaned", c.run);
            c.holder = None;
            c.orphaned_at = Some(now_secs());
        }
    }

    /// `collected`: the host holds the records of `iterations`; kept in [`COLLECTED_FILE`].
    pub(super) fn mark_collected(&mut self, iterations: &[u32]) {
        let running = self.current.as_ref().map(|c| c.iteration);
        let new: Vec<u32> = iterations
            .iter()
            .copied()
            .filter(|n| *n > 0 && *n <= self.last_iteration && Some(*n) != running)
            .filter(|n| !self.collected.contains(n))
            .collect();
        if new.is_empty() {
            return;
        }
        let mut text = String::new();
        for n in &new {
            text.push_str(&format!("{n}\n"));
        }
        // Known in memory even when the file cannot take it (a full disk): only a reader of the
        // storage after the supervisor is gone misses it, and keeps the records then.
        let written = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(self.records.join(COLLECTED_FILE))
            .and_then(|mut f| f.write_all(text.as_bytes()));
        if let Err(err) = written {
            tracing::warn!("{COLLECTED_FILE}: {err}");
        }
        self.collected.extend(new);
    }

    /// Finished iterations whose record the host has not confirmed it holds: the first
    /// [`UNCOLLECTED_NAMED`] and the count.
    pub(super) fn uncollected(&self) -> Value {
        let running = self.current.as_ref().map(|c| c.iteration);
        let all: Vec<u32> = (1..=self.last_iteration)
            .filter(|n| Some(*n) != running && !self.collected.contains(n))
            .filter(|n| {
                self.unwritten.get(*n).is_some()
                    || super::records::iteration_dir(&self.records, *n)
                        .join("result.json")
                        .is_file()
            })
            .collect();
        json!({
            "count": all.len(),
            "iterations": all.iter().take(UNCOLLECTED_NAMED).collect::<Vec<_>>(),
        })
    }
}
