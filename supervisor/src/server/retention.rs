//! Retention of collected records in the sandbox: a long-lived sandbox writes a record every
//! iteration, so once the host has said it holds them (`collected`), the oldest are deleted,
//! keeping the newest `retention.records` of them within `retention.bytes` together (the
//! manifest's [`Retention`]). A record the host has not collected, the running iteration's and
//! one kept in memory are never deleted.
//!
//! Pruning runs when the host acknowledges records and when a manifest is set. The sizes are
//! the allocated bytes of each record's tree (walked once, relative to descriptors, never
//! following a link), remembered while the record is kept. `.collected` is rewritten to the
//! records still kept plus the highest collected number, so it stays as small as the retention
//! and iteration numbers never restart after a restart of the supervisor.

use super::records::iteration_dir;
use super::Server;
use crate::bounded_tree::{self, Step, Walk};
use crate::manifest::Retention;
use crate::record_names::{collected_lines, COLLECTED_FILE};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Most entries walked to size one record (a record holds far fewer: its copy is bounded).
const SIZE_WALK_ENTRIES: u64 = 1_000_000;

/// What retention did since the server started, for `status`.
#[derive(Debug, Default)]
pub(super) struct Pruned {
    /// Sizes of the collected records still kept, by iteration.
    sizes: BTreeMap<u32, u64>,
    /// Records deleted.
    pub(super) records: u64,
    /// Bytes they held.
    pub(super) bytes: u64,
}

/// Allocated bytes of the tree at `dir` (0 when it cannot be read).
fn tree_bytes(dir: &Path) -> u64 {
    let allocated = |st: &rustix::fs::Stat| u64::try_from(st.st_blocks).unwrap_or(0) * 512;
    let Ok(root) = bounded_tree::open_dir(dir) else {
        return 0;
    };
    let Ok(own) = rustix::fs::fstat(&root) else {
        return 0;
    };
    let mut total = allocated(&own);
    let Ok(mut walk) = Walk::new(root, &dir.display().to_string(), SIZE_WALK_ENTRIES) else {
        return total;
    };
    while let Some(step) = walk.next() {
        let entry = match step {
            Ok(Step::Entry(entry)) => entry,
            Ok(Step::Limit(_)) => break,
            Err(_) => continue,
        };
        total = total.saturating_add(allocated(&entry.stat));
        if entry.is_dir() {
            let _ = walk.enter();
        }
    }
    total
}

impl Server {
    /// Deletes the collected records past the manifest's retention, oldest first.
    pub(super) fn prune_collected(&mut self) {
        let Some(retention) = self.manifest.as_ref().map(|m| m.retention.clone()) else {
            return;
        };
        let running = self.current.as_ref().map(|c| c.iteration);
        let unwritten = &self.unwritten;
        prune(
            &self.records,
            &retention,
            &mut self.collected,
            &|n| Some(n) == running || unwritten.get(n).is_some(),
            &mut self.pruned,
        );
    }

    /// The retention and what it did, for `status`.
    pub(super) fn retention_status(&self) -> crate::protocol::status::RetentionStatus {
        crate::protocol::status::RetentionStatus {
            bytes: self.manifest.as_ref().map(|m| m.retention.bytes),
            deleted: self.pruned.records,
            deleted_bytes: self.pruned.bytes,
            kept: self.pruned.sizes.len() as u64,
            kept_bytes: self.pruned.sizes.values().sum::<u64>(),
            records: self.manifest.as_ref().map(|m| m.retention.records),
        }
    }
}

/// Deletes from `records` the collected records (`collected`) past `retention`, newest kept
/// first, leaving those `protect` names; the numbers of deleted records leave `collected`
/// (but the highest stays) and `.collected` is rewritten to match. Returns how many records
/// were deleted.
pub(super) fn prune(
    records: &Path,
    retention: &Retention,
    collected: &mut BTreeSet<u32>,
    protect: &dyn Fn(u32) -> bool,
    pruned: &mut Pruned,
) -> usize {
    let highest = collected.last().copied();
    let mut kept = 0u32;
    let mut kept_bytes = 0u64;
    let mut full = false;
    let mut gone = Vec::new();
    let mut deleted = 0;
    for &n in collected.iter().rev() {
        if protect(n) {
            continue;
        }
        let dir = iteration_dir(records, n);
        let size = match pruned.sizes.get(&n) {
            Some(size) => *size,
            None if dir.is_dir() => {
                let size = tree_bytes(&dir);
                pruned.sizes.insert(n, size);
                size
            }
            None => {
                gone.push(n);
                continue;
            }
        };
        full = full || !fits(retention, kept, kept_bytes, size);
        if !full {
            kept += 1;
            kept_bytes += size;
            continue;
        }
        match bounded_tree::remove_path(&dir) {
            Ok(_) => {
                pruned.records += 1;
                pruned.bytes += size;
                pruned.sizes.remove(&n);
                gone.push(n);
                deleted += 1;
            }
            Err(err) => tracing::warn!("retention: {}: {err}", dir.display()),
        }
    }
    if deleted > 0 {
        tracing::info!(
            "retention: deleted {deleted} collected record(s); {kept} kept ({kept_bytes} bytes)"
        );
    }
    // Nothing left `collected` but the highest number, which stays listed anyway.
    if gone.iter().all(|n| Some(*n) == highest) {
        return deleted;
    }
    for n in &gone {
        collected.remove(n);
    }
    // The highest collected number stays listed: `last_iteration` at a restart counts it.
    if let Some(n) = highest {
        collected.insert(n);
    }
    let text = collected_lines(collected.iter().copied());
    if let Err(err) =
        crate::atomic_file::write(&records.join(COLLECTED_FILE), text.as_bytes(), 0o600)
    {
        tracing::warn!("retention: {COLLECTED_FILE}: {err}");
    }
    deleted
}

/// Whether one more record of `size` bytes is within `retention` after `kept` records of
/// `kept_bytes`.
fn fits(retention: &Retention, kept: u32, kept_bytes: u64, size: u64) -> bool {
    kept < retention.records && kept_bytes.saturating_add(size) <= retention.bytes
}

#[cfg(test)]
mod tests;
