//! The limits of an iteration (time, the agent tree's processes, memory and disk) and the
//! retention of collected records in the sandbox.

use serde::{Deserialize, Serialize};

/// Time limits (in milliseconds) and the bounds of the agent's process tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// The agent's wall-clock limit; then TERM to its group, grace, KILL.
    pub timeout_ms: u64,
    /// Grace between TERM and KILL, for the agent and for leftovers.
    pub kill_grace_ms: u64,
    /// Upper bound for one reap step (TERM, grace, KILL, rescans).
    pub reap_budget_ms: u64,
    /// Most processes (threads count) the agent's tree may have at once, so a fork bomb stops
    /// there and the supervisor keeps serving: `pids.max` of the tree's cgroup, or
    /// `RLIMIT_NPROC` of the agent's uid where there is none ([`crate::sandbox::cgroup`]).
    #[serde(default = "default_processes")]
    pub processes: u64,
    /// Most memory the agent's tree may use at once, in bytes: `memory.limit_in_bytes` of the
    /// tree's cgroup (the kernel kills a process of the tree past it), or `RLIMIT_DATA` of each
    /// process where there is none.
    #[serde(default = "default_memory_bytes")]
    pub memory_bytes: u64,
    /// Most the agent's writes may add to the space used on the filesystems it can write, in
    /// bytes, per iteration; unset = no budget. Enforced by the supervisor where no engine
    /// bounds the agent's disk: `RLIMIT_FSIZE` on every file, and the growth of each writable
    /// root's filesystem sampled while the agent runs ([`crate::sandbox::disk_budget`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_bytes: Option<u64>,
}

/// The default of [`Limits::memory_bytes`]: 8 GiB, room for a runtime and the builds its
/// tools run.
pub const DEFAULT_MEMORY_BYTES: u64 = 8 << 30;

/// The smallest [`Limits::memory_bytes`]: below it no runtime starts.
pub const MIN_MEMORY_BYTES: u64 = 16 << 20;

/// The smallest [`Limits::disk_bytes`]: 1 MiB.
pub const MIN_DISK_BYTES: u64 = 1 << 20;

fn default_memory_bytes() -> u64 {
    DEFAULT_MEMORY_BYTES
}

/// The default of [`Limits::processes`]: room for a runtime and its tools (Node alone runs a
/// dozen threads), far below what would starve the machine.
pub const DEFAULT_PROCESSES: u64 = 4096;

fn default_processes() -> u64 {
    DEFAULT_PROCESSES
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout_ms: 30 * 60 * 1000,
            kill_grace_ms: 2000,
            reap_budget_ms: 10_000,
            processes: DEFAULT_PROCESSES,
            memory_bytes: DEFAULT_MEMORY_BYTES,
            disk_bytes: None,
        }
    }
}

/// The records the sandbox keeps once the host has collected them (`collected`): the newest
/// `records` of them, as long as they hold at most `bytes` together; older collected records are
/// deleted. A record the host has not collected is never deleted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retention {
    /// Most collected records kept.
    #[serde(default = "default_retained_records")]
    pub records: u32,
    /// Most bytes (allocated on disk) the kept collected records hold together.
    #[serde(default = "default_retained_bytes")]
    pub bytes: u64,
}

/// The default of [`Retention::records`].
pub const DEFAULT_RETAINED_RECORDS: u32 = 100;

/// The default of [`Retention::bytes`]: 256 MiB.
pub const DEFAULT_RETAINED_BYTES: u64 = 256 << 20;

fn default_retained_records() -> u32 {
    DEFAULT_RETAINED_RECORDS
}

fn default_retained_bytes() -> u64 {
    DEFAULT_RETAINED_BYTES
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            records: DEFAULT_RETAINED_RECORDS,
            bytes: DEFAULT_RETAINED_BYTES,
        }
    }
}
