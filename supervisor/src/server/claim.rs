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
//! The connection alone cannot tell a host that hangs (stopped, its machine suspended, a remote
//! engine's stream left open by a network partition) from one that is busy: the claim is also a
//! lease of `lease_ms` (the host's choice, default 60 s) renewed by every frame from its
//! connection, and `pitcrew run` sends `renew` a few times per lease. Once the lease lapses the
//! claim is orphaned as if the connection had closed; the holder's later requests are refused.
//!
//! `collected` is the host's word that it holds a record: the iterations are kept in
//! `<records>/.collected` (one number a line, outliving the supervisor), so neither the host nor
//! anyone reading the sandbox's storage deletes a record nobody holds.

use super::error::RequestError;
use super::Server;
use crate::clock::now_secs;
use crate::protocol::status::{ClaimPlan, ClaimState, ClaimStatus, Uncollected};
use crate::record_names::{self, COLLECTED_FILE};
use std::collections::BTreeSet;
use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;
use std::time::{Duration, Instant};

/// Most bytes of a claim's plan (JSON): it is the host's memo, not a store.
pub const PLAN_MAX_BYTES: usize = 64 * 1024;
/// The lease of a claim whose host names none: 60 s.
pub const DEFAULT_LEASE_MS: u64 = 60_000;
/// The shortest and the longest lease a host may ask for: 1 s and a day.
const LEASE_MS: std::ops::RangeInclusive<u64> = 1_000..=86_400_000;
/// Most uncollected iterations `status` names (the count is always exact).
const UNCOLLECTED_NAMED: usize = 1000;

/// The run a sandbox serves.
#[derive(Debug, Clone)]
pub(super) struct Claim {
    /// The host's run id.
    run: String,
    /// The host's plan for the run (kept as it came).
    plan: Option<ClaimPlan>,
    /// The connection holding it; `None` once that connection closed without `release`.
    holder: Option<u64>,
    /// The connection that holds it or held it last (a `run` it sent just before it closed
    /// still counts for the claim).
    held_by: u64,
    /// When it was claimed (or taken back), seconds since the epoch.
    since: u64,
    /// When its holder went away.
    orphaned_at: Option<u64>,
    /// Why it is orphaned: the connection closed, or the lease lapsed.
    orphaned_because: Option<String>,
    /// How long it holds without word from its holder.
    lease: Duration,
    /// The last word from its holder.
    renewed: Instant,
    /// The iterations run under it.
    iterations: Vec<u32>,
    /// A manifest was set under it: its run's trees and manifest are in place (a run whose host
    /// died during its upload has none of its own, and cannot be resumed).
    ready: bool,
    /// The host ended the run (`cancel` with `run`): its next `run` is refused.
    stopped: bool,
}

impl Claim {
    /// Its holder is gone (`why`): the claim is orphaned, for the same run to take back.
    fn orphan(&mut self, why: String) {
        tracing::warn!("claim: run {}: {why}; orphaned", self.run);
        self.holder = None;
        self.orphaned_at = Some(now_secs());
        self.orphaned_because = Some(why);
    }

    /// The claim as `status` and the `claim` answer show it.
    pub(super) fn to_status(&self) -> ClaimStatus {
        ClaimStatus {
            iterations: self.iterations.clone(),
            lease_ms: u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX),
            orphaned_at: self.orphaned_at,
            orphaned_because: self.orphaned_because.clone(),
            plan: self.plan.clone(),
            ready: self.ready,
            run: self.run.clone(),
            since: self.since,
            silent_ms: self
                .holder
                .map(|_| u64::try_from(self.renewed.elapsed().as_millis()).unwrap_or(u64::MAX)),
            state: if self.holder.is_some() {
                ClaimState::Held
            } else {
                ClaimState::Orphaned
            },
            stopped: self.stopped,
        }
    }
}

/// The collected iterations listed in `records` (empty when none are).
pub(super) fn read_collected(records: &Path) -> BTreeSet<u32> {
    fs::read_to_string(records.join(COLLECTED_FILE))
        .map(|text| record_names::parse_collected(&text))
        .unwrap_or_default()
}

impl Server {
    /// The connection holding the claim, if one does.
    pub(super) fn claim_holder(&self) -> Option<u64> {
        self.claim.as_ref().and_then(|c| c.holder)
    }

    /// `claim`: connection `conn` claims the sandbox for `run`.
    pub(super) fn claim(
        &mut self,
        conn: u64,
        run: String,
        plan: Option<ClaimPlan>,
        lease_ms: Option<u64>,
    ) -> Result<ClaimStatus, RequestError> {
        let lease_ms = lease_ms.unwrap_or(DEFAULT_LEASE_MS);
        if !LEASE_MS.contains(&lease_ms) {
            return Err(RequestError::Malformed(format!(
                "claim: lease_ms {lease_ms} is not from {} to {}",
                LEASE_MS.start(),
                LEASE_MS.end()
            )));
        }
        let lease = Duration::from_millis(lease_ms);
        let plan_bytes = serde_json::to_vec(&plan).map_or(usize::MAX, |b| b.len());
        if plan_bytes > PLAN_MAX_BYTES {
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
                c.lease = lease;
                c.renewed = Instant::now();
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
                    "run {} was orphaned here {} s ago after {} iteration(s) ({}): `pitcrew run \
                     --resume` finishes it, `pitcrew down` ends it",
                    c.run,
                    now.saturating_sub(c.orphaned_at.unwrap_or(now)),
                    c.iterations.len(),
                    c.orphaned_because
                        .as_deref()
                        .unwrap_or("its host went away")
                )));
            }
            Some(c) => {
                // The same run, taken back by a new connection (`--resume`).
                tracing::info!("claim: run {run} resumed by conn {conn}");
                c.holder = Some(conn);
                c.held_by = conn;
                c.orphaned_at = None;
                c.orphaned_because = None;
                c.stopped = false;
                c.lease = lease;
                c.renewed = Instant::now();
                c.since = now;
                if plan.is_some() {
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
                    orphaned_because: None,
                    lease,
                    renewed: Instant::now(),
                    iterations: Vec::new(),
                    ready: false,
                    stopped: false,
                });
            }
        }
        self.claim
            .as_ref()
            .map(Claim::to_status)
            .ok_or_else(|| RequestError::Internal("claim: the claim was not kept".into()))
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
            c.orphan("its host's connection closed".into());
        }
    }

    /// `cancel` with `run`: the run a connected host drives ends after its running iteration
    /// (its next `run` is refused); false when no connected host drives one (an orphaned run
    /// is ended by `down`, or taken back by `--resume`).
    pub(super) fn stop_claimed_run(&mut self) -> bool {
        match self.claim.as_mut().filter(|c| c.holder.is_some()) {
            Some(c) => {
                tracing::info!("claim: run {}: stopped by the host", c.run);
                c.stopped = true;
                true
            }
            None => false,
        }
    }

    /// Whether the run holding the sandbox was stopped by the host.
    pub(super) fn claim_stopped(&self) -> bool {
        self.claim.as_ref().is_some_and(|c| c.stopped)
    }

    /// Refuses `run` under a claim the host stopped (`cancel` with `run`).
    pub(super) fn check_run_not_stopped(&self) -> Result<(), RequestError> {
        match &self.claim {
            Some(c) if c.stopped => Err(RequestError::Stopped(format!(
                "run {} was stopped by the host (`pitcrew cancel --all`): no further iteration \
                 starts",
                c.run
            ))),
            _ => Ok(()),
        }
    }

    /// Word from connection `conn`: the claim it holds is renewed.
    pub(super) fn claim_renewed(&mut self, conn: u64) {
        if let Some(c) = self.claim.as_mut().filter(|c| c.holder == Some(conn)) {
            c.renewed = Instant::now();
        }
    }

    /// `renew`: the claim `conn` holds is renewed (every frame renews it); refused when it
    /// holds none, naming why (its lease lapsed, another run holds the sandbox). Returns the
    /// lease in milliseconds.
    pub(super) fn renew(&mut self, conn: u64) -> Result<u64, RequestError> {
        match &self.claim {
            Some(c) if c.holder == Some(conn) => {
                Ok(u64::try_from(c.lease.as_millis()).unwrap_or(u64::MAX))
            }
            Some(c) if c.held_by == conn => Err(RequestError::Order(format!(
                "renew: the claim of run {} is no longer this connection's ({}); \
                 `pitcrew run --resume` takes it back",
                c.run,
                c.orphaned_because.as_deref().unwrap_or("orphaned")
            ))),
            _ => Err(RequestError::Order(
                "renew: this connection holds no claim".into(),
            )),
        }
    }

    /// Orphans a held claim whose lease lapsed: its host said nothing for longer than it asked.
    pub(super) fn check_lease(&mut self) {
        if let Some(c) = self
            .claim
            .as_mut()
            .filter(|c| c.holder.is_some() && c.renewed.elapsed() > c.lease)
        {
            let why = format!(
                "its lease lapsed: no word from its host for {} ms (lease {} ms)",
                c.renewed.elapsed().as_millis(),
                c.lease.as_millis()
            );
            c.orphan(why);
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
        let text = record_names::collected_lines(new.iter().copied());
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
    /// [`UNCOLLECTED_NAMED`] and the count. One read of the records directory (retention keeps
    /// it short), not a look per iteration ever run.
    pub(super) fn uncollected(&self) -> Uncollected {
        let running = self.current.as_ref().map(|c| c.iteration);
        let mut all: BTreeSet<u32> = super::records::iterations_in(&self.records)
            .into_iter()
            .filter(|n| {
                super::records::iteration_dir(&self.records, *n)
                    .join(record_names::RESULT_FILE)
                    .is_file()
            })
            .chain(self.unwritten.iterations())
            .collect();
        all.retain(|n| Some(*n) != running && !self.collected.contains(n));
        Uncollected {
            count: all.len() as u64,
            iterations: all.iter().take(UNCOLLECTED_NAMED).copied().collect(),
        }
    }
}
