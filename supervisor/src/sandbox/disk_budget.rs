//! The agent's disk budget (`limits.disk_bytes`), for engines that bound no disk of their own
//! (the local engine, podman and docker on most storage): how much the agent's writes may add to
//! the space used on the filesystems it can write, per iteration.
//!
//! Two parts, both set up before the agent starts:
//!
//! - `RLIMIT_FSIZE` = the budget on the agent (set in [`super::confine`]): the kernel refuses at
//!   once (`EFBIG`, `SIGXFSZ`) any write, `truncate` or `fallocate` that would make one file
//!   larger than the whole budget, however fast it is written.
//! - A [`DiskWatch`]: each writable root is opened once without following a link (so renaming
//!   or replacing it later changes nothing), one per filesystem, and the filesystem's used space
//!   and inodes (`fstatvfs`) are sampled at launch, every [`SAMPLE`] while the agent runs and
//!   during the final reap, and once after it. Each new inode counts as [`INODE_BYTES`] (a
//!   filesystem runs out of inodes long before bytes when the agent makes empty files). When a
//!   filesystem has grown past the budget, the agent's group is killed at once and the final
//!   reap kills everything else without a grace period; the iteration fails with
//!   `disk-limit: …`.
//! - `fallocate` fails with `EOPNOTSUPP` ([`super::seccomp`]): it would allocate gigabytes
//!   between two samples, where written bytes come at the disk's pace.
//!
//! What it counts is the filesystem's used space, not the agent's own writes: a file the agent
//! deletes gives its space back, and another writer of the same filesystem (the host, another
//! sandbox on a shared disk) counts as well. The budget is per iteration: what an iteration
//! leaves stays, and the next is measured from there. Between two samples the agent may write
//! past the budget by what it can write in [`SAMPLE`]. Filesystems the agent may write only where
//! Landlock is not enforced (a world-writable `/tmp` of the image) are bounded by
//! `RLIMIT_FSIZE` per file only. `confinement.limits.disk` of the record says what was watched
//! and how much each filesystem grew.

use crate::result::{DiskLimitRecord, FilesystemGrowth};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::{Duration, Instant};

/// How often the used space is sampled while the agent runs.
pub const SAMPLE: Duration = Duration::from_millis(100);

/// What one new inode counts for against the budget, in bytes.
pub const INODE_BYTES: u64 = 4096;

/// One watched filesystem.
struct Watched {
    /// The first writable root found on it.
    root: String,
    /// The root, opened without following a link.
    fd: OwnedFd,
    /// Its device, to watch each filesystem once.
    dev: u64,
    /// Used bytes and inodes at launch.
    start: Usage,
    /// The most it grew at any sample (bytes, new inodes counted at [`INODE_BYTES`]).
    peak: u64,
    /// The most inodes it gained at any sample.
    peak_inodes: u64,
    /// The growth at the last sample (negative when the agent freed space).
    last: i128,
}

/// A filesystem's used bytes and inodes.
#[derive(Debug, Clone, Copy)]
struct Usage {
    bytes: u64,
    inodes: u64,
}

/// The disk budget of one iteration: what was watched and whether the budget was passed.
pub struct DiskWatch {
    limit: u64,
    watched: Vec<Watched>,
    next: Instant,
    /// The first filesystem found past the budget (an index into `watched`).
    exceeded: Option<usize>,
    /// Whether the budget was found passed only after the agent ended.
    exceeded_after_exit: bool,
}

/// Used bytes and inodes of the filesystem holding `fd`.
fn usage(fd: &OwnedFd) -> std::io::Result<Usage> {
    let st = rustix::fs::fstatvfs(fd)?;
    Ok(Usage {
        bytes: st
            .f_blocks
            .saturating_sub(st.f_bfree)
            .saturating_mul(st.f_frsize),
        inodes: st.f_files.saturating_sub(st.f_ffree),
    })
}

impl DiskWatch {
    /// Opens and samples the filesystems of `roots` for a budget of `limit` bytes. A root that
    /// cannot be opened without following a link, or whose filesystem cannot be read, refuses
    /// the launch: a budget with a filesystem left out would promise what it does not hold.
    pub fn start(limit: u64, roots: &[String]) -> Result<DiskWatch, String> {
        let mut watched: Vec<Watched> = Vec::new();
        for root in roots {
            let refuse = |why: String| format!("disk budget: writable root {root}: {why}");
            let fd = super::nofollow::open_dir(Path::new(root)).map_err(refuse)?;
            let dev = rustix::fs::fstat(&fd)
                .map_err(|e| refuse(format!("fstat: {e}")))?
                .st_dev;
            if watched.iter().any(|w| w.dev == dev) {
                continue;
            }
            let start = usage(&fd).map_err(|e| refuse(format!("fstatvfs: {e}")))?;
            watched.push(Watched {
                root: root.clone(),
                fd,
                dev,
                start,
                peak: 0,
                peak_inodes: 0,
                last: 0,
            });
        }
        Ok(DiskWatch {
            limit,
            watched,
            next: Instant::now() + SAMPLE,
            exceeded: None,
            exceeded_after_exit: false,
        })
    }

    /// How long until the next sample is due (zero when it is).
    pub fn until_next(&self) -> Duration {
        self.next.saturating_duration_since(Instant::now())
    }

    /// Samples every filesystem; true the first time one has grown past the budget. A sample
    /// that fails (the filesystem went away) leaves that filesystem's figures as they were.
    pub fn sample(&mut self) -> bool {
        self.next = Instant::now() + SAMPLE;
        let mut newly = false;
        for (i, w) in self.watched.iter_mut().enumerate() {
            let Ok(now) = usage(&w.fd) else {
                continue;
            };
            let new_inodes = i128::from(now.inodes) - i128::from(w.start.inodes);
            w.last = i128::from(now.bytes) - i128::from(w.start.bytes)
                + new_inodes * i128::from(INODE_BYTES);
            let grew = u64::try_from(w.last.max(0)).unwrap_or(u64::MAX);
            w.peak = w.peak.max(grew);
            w.peak_inodes = w
                .peak_inodes
                .max(u64::try_from(new_inodes.max(0)).unwrap_or(u64::MAX));
            if grew > self.limit && self.exceeded.is_none() {
                self.exceeded = Some(i);
                newly = true;
            }
        }
        newly
    }

    /// For the final reap: samples when a sample is due; true once the budget is passed (the
    /// reap then kills at once, without a grace period).
    pub fn passed_while_reaping(&mut self) -> bool {
        if self.exceeded.is_none() && self.until_next().is_zero() {
            self.sample();
        }
        self.exceeded.is_some()
    }

    /// The last sample, after the final reap: nothing of the agent writes any more.
    pub fn finish(&mut self) {
        let before = self.exceeded.is_some();
        self.sample();
        self.exceeded_after_exit = !before && self.exceeded.is_some();
    }

    /// Why the iteration failed, when the budget was passed: the most the filesystem grew.
    pub fn reason(&self) -> Option<String> {
        let w = &self.watched[self.exceeded?];
        let when = if self.exceeded_after_exit {
            "found after the agent ended"
        } else {
            "the agent's tree was killed"
        };
        Some(format!(
            "disk-limit: the filesystem of {} grew by {} bytes ({} new inodes at {INODE_BYTES} \
             bytes each included) during the iteration, past limits.disk_bytes ({} bytes); {when}",
            w.root, w.peak, w.peak_inodes, self.limit
        ))
    }

    /// What the record shows.
    pub fn record(&self) -> DiskLimitRecord {
        DiskLimitRecord {
            limit: self.limit,
            file_size_limit: self.limit,
            sample_ms: u64::try_from(SAMPLE.as_millis()).unwrap_or(u64::MAX),
            filesystems: self
                .watched
                .iter()
                .map(|w| FilesystemGrowth {
                    root: w.root.clone(),
                    peak_growth: w.peak,
                    peak_inodes: w.peak_inodes,
                    end_growth: i64::try_from(w.last).unwrap_or(i64::MAX),
                })
                .collect(),
            exceeded: self.exceeded.is_some(),
        }
    }
}

#[cfg(test)]
mod tests;
