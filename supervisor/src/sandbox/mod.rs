//! The Linux process side of an iteration, one responsibility per module:
//!
//! - [`signals`]: every asynchronous signal blocked and read from one signalfd.
//! - [`reaper`]: the single owner of `waitpid(-1, WNOHANG)`.
//! - [`state`]: the supervisor's long-lived state ([`state::Supervisor`]: signals, reaper,
//!   baseline environment, PID-1 mode), handed to every iteration.
//! - [`heap`]: how the supervisor gets glibc's allocator to give freed memory back.
//! - [`reap`]: step 1, kill and reap everything but the supervisor.
//! - [`confine`]: step 4, identity, capabilities, fds, `no_new_privs`, Landlock in the child.
//! - [`landlock`]: the pinned Landlock ABI, what the kernel offers, and the agent's ruleset.
//! - [`child_status`]: what the forked child reports back (the failed stage, or what it
//!   confirmed).
//! - [`nofollow`]: directories reached without following a symlink in any component (the
//!   Landlock writable roots, the agent's directories in long-lived mode).
//! - [`own_limits`]: the supervisor's own resource limits, set back after every reap.
//! - [`owned_dirs`]: the directories of the unprivileged supervisor's uid on its paths, held by
//!   descriptor and given their modes back after every reap and before uploads and collects.
//! - [`seccomp`]: the filter that keeps the agent's tools from rewriting their runtime.
//! - [`capture`]: the agent's stdout/stderr through sockets only the supervisor reads.
//! - [`cgroup`]: the agent tree's own cgroup, bounding its memory and process count.
//! - [`disk_budget`]: what the agent's writes may add to the filesystems it can write.
//! - [`private_ipc`]: a fresh IPC namespace and `/dev/shm` per iteration where the sandbox
//!   shares the host's filesystem.
//! - [`launch`]: step 5, fork and exec with a status pipe (exit 127/126/125 on failure).
//! - [`wait`]: step 6, the loop that waits for the agent, forwards signals and enforces the
//!   timeout.
//! - [`netns`]: the network namespace: its `lo` brought up, and a namespace with other
//!   interfaces refused for `network: none` and `allow`.
//! - [`observer`]: what the wait loop calls back into while the agent runs (the
//!   long-lived mode's server).
//!
//! The order of the steps lives in [`crate::iteration`].

pub mod capture;
pub mod cgroup;
pub mod child_status;
pub mod confine;
pub mod disk_budget;
pub mod heap;
pub mod landlock;
pub mod launch;
pub mod netns;
pub mod netns_helper;
pub mod nofollow;
pub mod observer;
pub mod own_limits;
pub mod owned_dirs;
pub mod private_ipc;
pub mod private_run;
pub mod reap;
pub mod reaper;
pub mod seccomp;
pub mod signals;
pub mod state;
pub mod wait;
