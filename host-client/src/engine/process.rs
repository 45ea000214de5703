//! The local engine's sandbox process, known by more than its pid.
//!
//! A pid alone names whatever process has it now: after the sandbox died, the kernel may give
//! it to an unrelated process, and `pitcrew down` would signal a stranger. So `engine.json`
//! keeps the process's start time with its pid (field 22 of `/proc/<pid>/stat`, clock ticks
//! since boot), and [`identify`] checks both through a pidfd: it opens the pidfd first and reads
//! the start time second, so a match proves the pidfd refers to the sandbox's own process (that
//! process held the pid from its start until after the pidfd was opened), and every signal goes
//! through that pidfd (`pidfd_send_signal`), never through the number.

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::process::{Pid, PidfdFlags, Signal, WaitId, WaitIdOptions};
use std::os::fd::{AsFd as _, OwnedFd};
use std::time::{Duration, Instant};

/// The start time (clock ticks after boot) and state letter of a `/proc/<pid>/stat` line.
pub fn parse_stat(stat: &str) -> Option<(u64, char)> {
    // The command name (field 2) is in parentheses and may hold anything, `)` included: the
    // fields after it start at the last `)`.
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 (state), so field 22 (starttime) is fields[19].
    let state = fields.first()?.chars().next()?;
    let start = fields.get(19)?.parse().ok()?;
    Some((start, state))
}

/// The start time of process `pid` (field 22 of `/proc/<pid>/stat`, clock ticks after boot).
pub fn start_time(pid: u32) -> std::io::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_stat(&stat).map(|(start, _)| start).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("/proc/{pid}/stat: no start time in {stat:?}"),
        )
    })
}

/// Marks every descriptor from 3 up close-on-exec, in a forked child before `exec` (only
/// async-signal-safe calls, no allocation): what is exec'd then holds its stdio and nothing else
/// of the process that forked it. Marked, not closed: the standard library's exec-error pipe
/// must stay open until the `exec`.
pub fn cloexec_from_3() {
    // libc, not rustix: rustix has no `close_range`.
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only changes descriptor flags.
    let marked = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if marked == 0 {
        return;
    }
    // Kernels before 5.11: one fcntl per possible descriptor.
    let max = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(1 << 20)
        .min(1 << 20);
    for fd in 3..i32::try_from(max).unwrap_or(1024) {
        // libc, not rustix: rustix's `fcntl_setfd` takes a `BorrowedFd`, which must be open;
        // these are descriptor numbers that may not be.
        // SAFETY: fcntl on a descriptor number that may not be open only fails with EBADF.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
}

/// What the pid recorded for a sandbox is now.
#[derive(Debug)]
pub enum Identity {
    /// The sandbox's own process (pid and start time match), held by a pidfd.
    Running(Process),
    /// No process has the pid, or the sandbox's process has exited.
    Gone,
    /// Another process has the pid now: the sandbox's is gone.
    Reused {
        /// The recorded start time.
        recorded: u64,
        /// The start time of the process that has the pid now.
        found: u64,
    },
    /// A live process has the pid, but nothing shows it is the sandbox's (the state predates
    /// start times, or the check itself failed): it is never signalled.
    Unverified {
        /// Why.
        why: String,
    },
}

impl Identity {
    /// `running`, `stopped`, `stale` (the pid is another process now) or `unverified`.
    pub fn state(&self) -> &'static str {
        match self {
            Identity::Running(_) => "running",
            Identity::Gone => "stopped",
            Identity::Reused { .. } => "stale",
            Identity::Unverified { .. } => "unverified",
        }
    }

    /// Why the process with the recorded `pid` is left alone, for the operator (none when it is
    /// the sandbox's or there is none).
    pub fn warning(&self, pid: u32) -> Option<String> {
        match self {
            Identity::Running(_) | Identity::Gone => None,
            Identity::Reused { recorded, found } => Some(format!(
                "pid {pid} is another process now (started {found} clock ticks after boot; the \
                 sandbox's started at {recorded}): the sandbox is gone, and that process was not \
                 signalled"
            )),
            Identity::Unverified { why } => Some(format!(
                "pid {pid} is unverified ({why}): it may belong to another process now, so it \
                 was not signalled"
            )),
        }
    }
}

/// The sandbox's process, held by a pidfd.
#[derive(Debug)]
pub struct Process {
    pidfd: OwnedFd,
}

impl Process {
    /// Waits up to `timeout` for the process to exit; whether it did. Reaps it when it is this
    /// process's child (`waitid(P_PIDFD)`: this process and no other).
    pub fn wait_exit(&self, timeout: Duration) -> bool {
        let start = Instant::now();
        loop {
            let mut fds = [PollFd::new(&self.pidfd, PollFlags::IN)];
            let left = timeout.saturating_sub(start.elapsed());
            let wait = rustix::event::Timespec::try_from(left).ok();
            match rustix::event::poll(&mut fds, wait.as_ref()) {
                Ok(n) if n > 0 => {
                    // Not our child (the usual case after `pitcrew run --keep`): ECHILD.
                    let _ = rustix::process::waitid(
                        WaitId::PidFd(self.pidfd.as_fd()),
                        WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
                    );
                    return true;
                }
                Ok(_) => return false,
                Err(Errno::INTR) if start.elapsed() < timeout => continue,
                Err(e) => {
                    tracing::warn!("poll on the sandbox's pidfd: {e}");
                    return false;
                }
            }
        }
    }

    /// Sends SIGKILL to this process (and no other: through its pidfd). An exited process is
    /// not an error.
    pub fn kill(&self) -> std::io::Result<()> {
        match rustix::process::pidfd_send_signal(&self.pidfd, Signal::KILL) {
            Ok(()) | Err(Errno::SRCH) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// What process `pid` is now, against the start time `recorded` with it (`None`: a state file
/// of an older pitcrew).
pub fn identify(pid: u32, recorded: Option<u64>) -> Identity {
    let Some(raw) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return Identity::Gone;
    };
    // The pidfd first, the start time second (see the module docs).
    let pidfd = match rustix::process::pidfd_open(raw, PidfdFlags::empty()) {
        Ok(fd) => fd,
        Err(Errno::SRCH) => return Identity::Gone,
        Err(e) => {
            return Identity::Unverified {
                why: format!("pidfd_open: {e}"),
            }
        }
    };
    let stat = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Identity::Gone,
        Err(e) => {
            return Identity::Unverified {
                why: format!("/proc/{pid}/stat: {e}"),
            }
        }
    };
    let Some((found, state)) = parse_stat(&stat) else {
        return Identity::Unverified {
            why: format!("/proc/{pid}/stat has no start time"),
        };
    };
    let exited = matches!(state, 'Z' | 'X');
    match recorded {
        Some(recorded) if recorded != found => Identity::Reused { recorded, found },
        Some(_) if exited => {
            // Ours to reap when it is our child; nobody else's is touched.
            let _ = rustix::process::waitid(
                WaitId::PidFd(pidfd.as_fd()),
                WaitIdOptions::EXITED | WaitIdOptions::NOHANG,
            );
            Identity::Gone
        }
        Some(_) => Identity::Running(Process { pidfd }),
        None if exited => Identity::Gone,
        None => Identity::Unverified {
            why: "engine.json, written by an older pitcrew, records no start time for it"
                .to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_time_is_field_22_after_the_command_name() {
        let stat = "4242 (a) b) (c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 \
                    987654 1000 100 18446744073709551615";
        assert_eq!(parse_stat(stat), Some((987_654, 'S')));
        assert_eq!(parse_stat("12 (x) Z 1"), None);
        let own = start_time(std::process::id()).unwrap();
        assert!(own > 0);
    }

    #[test]
    #[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
    fn attack_pid_reuse__a_live_process_with_another_start_time_is_never_the_sandbox() {
        let mut stranger = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = stranger.id();
        let real = start_time(pid).unwrap();
        match identify(pid, Some(real + 1)) {
            Identity::Reused { recorded, found } => {
                assert_eq!((recorded, found), (real + 1, real));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(identify(pid, None), Identity::Unverified { .. }));
        // The right start time: the process itself, signalled through its pidfd.
        let Identity::Running(p) = identify(pid, Some(real)) else {
            panic!("not identified");
        };
        assert!(!p.wait_exit(Duration::from_millis(50)));
        p.kill().unwrap();
        assert!(p.wait_exit(Duration::from_secs(5)));
        // Reaped through the pidfd (it is our child): gone.
        assert!(matches!(identify(pid, Some(real)), Identity::Gone));
        assert!(stranger.try_wait().is_err(), "already reaped");
    }
}
