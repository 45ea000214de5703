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
//!   (`fstatvfs`) is sampled at launch, every [`SAMPLE`] while the agent runs and once after the
//!   final reap. When it has grown past the budget on any of them, the agent's group is killed
//!   (the final reap takes whatever left it) and the iteration fails with `disk-limit: …`.
//!
//! What it counts is the filesystem's used space, not the agent's own writes: a file the agent
//! deletes gives its space back, and another writer of the same filesystem (the host, another
//! sandbox on a shared disk) counts as well. Between two samples the agent may write past the
//! budget by what it can write in [`SAMPLE`]. Filesystems the agent may write only where
//! Landlock is not enforced (a world-writable `/tmp` of the image) are bounded by
//! `RLIMIT_FSIZE` per file only. `confinement.limits.disk` of the record says what was watched
//! and how much each filesystem grew.

use crate::result::{DiskLimitRecord, FilesystemGrowth};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::{Duration, Instant};

/// How often the used space is sampled while the agent runs.
pub const SAMPLE: Duration = Duration::from_millis(100);

/// One watched filesystem.
struct Watched {
    /// The first writable root found on it.
    root: String,
    /// The root, opened without following a link.
    fd: OwnedFd,
    /// Its device, to watch each filesystem once.
    dev: u64,
    /// Used bytes at launch.
    start: u64,
    /// The most it grew at any sample.
    peak: u64,
    /// The growth at the last sample (negative when the agent freed space).
    last: i128,
}

/// The disk budget of one iteration: what was watched and whether the budget was passed.
pub struct DiskWatch {
    limit: u64,
    watched: Vec<Watched>,
    next: Instant,
    /// The first filesystem found past the budget, and its growth then.
    exceeded: Option<(String, u64)>,
    /// Whether the budget was found passed only after the agent ended.
    exceeded_after_exit: bool,
}

/// Used bytes of the filesystem holding `fd`.
fn used_bytes(fd: &OwnedFd) -> std::io::Result<u64> {
    let st = rustix::fs::fstatvfs(fd)?;
    Ok(st
        .f_blocks
        .saturating_sub(st.f_bfree)
        .saturating_mul(st.f_frsize))
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
            let start = used_bytes(&fd).map_err(|e| refuse(format!("fstatvfs: {e}")))?;
            watched.push(Watched {
                root: root.clone(),
                fd,
                dev,
                start,
                peak: 0,
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
        for w in &mut self.watched {
            let Ok(used) = used_bytes(&w.fd) else {
                continue;
            };
            w.last = i128::from(used) - i128::from(w.start);
            let grew = used.saturating_sub(w.start);
            w.peak = w.peak.max(grew);
            if grew > self.limit && self.exceeded.is_none() {
                self.exceeded = Some((w.root.clone(), grew));
                newly = true;
            }
        }
        newly
    }

    /// The last sample, after the final reap: nothing of the agent writes any more.
    pub fn finish(&mut self) {
        let before = self.exceeded.is_some();
        self.sample();
        self.exceeded_after_exit = !before && self.exceeded.is_some();
    }

    /// Why the iteration failed, when the budget was passed.
    pub fn reason(&self) -> Option<String> {
        let (root, grew) = self.exceeded.as_ref()?;
        let when = if self.exceeded_after_exit {
            "found after the agent ended"
        } else {
            "the agent's tree was killed"
        };
        Some(format!(
            "disk-limit: the filesystem of {root} grew by {grew} bytes during the iteration, \
             past limits.disk_bytes ({} bytes); {when}",
            self.limit
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
                    end_growth: i64::try_from(w.last).unwrap_or(i64::MAX),
                })
                .collect(),
            exceeded: self.exceeded.is_some(),
        }
    }
}

#[cfg(test)]
mod tests;
