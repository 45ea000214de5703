//! Step 6 of an iteration: wait for the agent, forwarding signals and enforcing the timeout.
//!
//! One loop on the signalfd with a `poll` timeout: `SIGCHLD` → a reap pass (the agent's exit is
//! recognised inside it); a forwardable signal ([`super::signals::is_forwarded`]) →
//! `kill(-pgid)` of the agent's process group (the agent is a session leader, so its pid is the
//! group id; if the group is gone, the agent's pid); the deadline → `SIGTERM` to the group, then
//! `SIGKILL` after `kill_grace_ms`. The poll also wakes at least once a second and reaps anyway
//! (tini #123: a missed `SIGCHLD` must not hang the supervisor).
//!
//! The same poll also waits on the [`IterationObserver`]'s descriptors (the long-lived mode's
//! control connections), so the supervisor stays single-threaded; the observer may ask for a
//! signal to the agent or a cancel (TERM to the group, KILL after `kill_grace_ms`).
//!
//! With a disk budget the loop also samples the [`DiskWatch`] when a sample is due; growth past
//! the budget is `SIGKILL` to the group at once (no grace: a grace would be more writing).

use super::capture::{OutputCapture, PUMP_BUDGET};
use super::disk_budget::DiskWatch;
use super::observer::{IterationObserver, ObserverAction};
use super::reaper::ChildExit;
use super::signals::is_forwarded;
use super::state::Supervisor;
use crate::exit_code::signal_name;
use crate::manifest::Limits;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// The longest the loop sleeps without a reap pass.
const TICK: Duration = Duration::from_secs(1);

/// Most forwarded signal names kept in the record (the count is unbounded, the list is not).
const MAX_RECORDED: usize = 256;

/// How the agent ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentOutcome {
    /// Its exit.
    pub exit: ChildExit,
    /// Whether the timeout ended it.
    pub timed_out: bool,
    /// Names of the signals forwarded to it, in order.
    pub forwarded: Vec<String>,
    /// Why it was cancelled, when an observer cancelled it.
    pub cancelled: Option<String>,
}

/// Sends `signo` to the agent's group, or to the agent alone if it left its group.
fn signal_agent(pid: i32, signo: i32) {
    // SAFETY: kill takes plain integers.
    let rc = unsafe { libc::kill(-pid, signo) };
    if rc != 0 {
        // SAFETY: as above.
        let rc = unsafe { libc::kill(pid, signo) };
        if rc != 0 {
            tracing::debug!(
                "wait: {} to agent {pid}: {}",
                signal_name(signo),
                std::io::Error::last_os_error()
            );
        }
    }
}

/// Waits for the agent `pid` (already registered with the reaper) to exit, copying its output
/// from `capture` as it arrives and servicing `observer` at least every
/// [`IterationObserver::max_wait`] and sampling `disk` when one is due.
pub fn wait_for_agent(
    ctx: &mut Supervisor,
    pid: i32,
    limits: &Limits,
    capture: &mut OutputCapture,
    observer: &mut dyn IterationObserver,
    mut disk: Option<&mut DiskWatch>,
) -> AgentOutcome {
    let start = Instant::now();
    let mut deadline = start + Duration::from_millis(limits.timeout_ms);
    let grace = Duration::from_millis(limits.kill_grace_ms);
    let mut timed_out = false;
    let mut term_sent = false;
    let mut killed = false;
    let mut forwarded = Vec::new();
    let mut cancelled = None;

    for signo in ctx.signals.take_held() {
        tracing::info!("wait: forwarding held {}", signal_name(signo));
        signal_agent(pid, signo);
        forwarded.push(signal_name(signo));
    }

    let mut capture_behind = false;
    loop {
        ctx.reaper.reap(|_, _| {});
        if let Some(exit) = ctx.reaper.main_exit() {
            ctx.reaper.unwatch();
            return AgentOutcome {
                exit,
                timed_out,
                forwarded,
                cancelled,
            };
        }
        let now = Instant::now();
        if now >= deadline {
            if !term_sent {
                tracing::warn!(
                    "wait: timeout after {} ms; SIGTERM to the agent's group",
                    limits.timeout_ms
                );
                timed_out = true;
                term_sent = true;
                signal_agent(pid, libc::SIGTERM);
                deadline = now + grace;
            } else if !killed {
                tracing::warn!("wait: still running after the grace period; SIGKILL");
                killed = true;
                signal_agent(pid, libc::SIGKILL);
                deadline = now + TICK;
            } else {
                // Already killed: keep reaping until the exit shows up.
                deadline = now + TICK;
            }
            continue;
        }
        let mut wait = (deadline - now).min(TICK).min(observer.max_wait());
        if let Some(watch) = disk.as_deref_mut() {
            if watch.until_next().is_zero() && watch.sample() && !killed {
                tracing::warn!(
                    "wait: {}; SIGKILL to the agent's group",
                    watch.reason().unwrap_or_default()
                );
                term_sent = true;
                killed = true;
                signal_agent(pid, libc::SIGKILL);
                deadline = now + TICK;
                continue;
            }
            wait = wait.min(watch.until_next());
        }
        // More output is waiting: only look for what else is ready, do not sleep.
        let millis = if capture_behind {
            0
        } else {
            u16::try_from(wait.as_millis()).unwrap_or(u16::MAX).max(1)
        };
        {
            let mut fds = vec![PollFd::new(ctx.signals.as_fd(), PollFlags::POLLIN)];
            let output = capture.poll_fds();
            fds.extend(output.iter().map(|fd| PollFd::new(*fd, PollFlags::POLLIN)));
            let extra = observer.poll_fds();
            fds.extend(extra.iter().map(|fd| PollFd::new(*fd, PollFlags::POLLIN)));
            let out = observer.poll_out_fds();
            fds.extend(out.iter().map(|fd| PollFd::new(*fd, PollFlags::POLLOUT)));
            if let Err(err) = poll(&mut fds, PollTimeout::from(millis)) {
                tracing::debug!("wait: poll: {err}");
            }
        }
        // The output first, so the observer streams what just arrived.
        capture_behind = capture.pump(PUMP_BUDGET);
        for action in observer.on_ready(ctx) {
            match action {
                ObserverAction::Signal(signo) => {
                    tracing::info!("wait: {} to the agent (host)", signal_name(signo));
                    signal_agent(pid, signo);
                    if forwarded.len() < MAX_RECORDED {
                        forwarded.push(signal_name(signo));
                    }
                }
                ObserverAction::Cancel(why) => {
                    if cancelled.is_none() {
                        tracing::info!("wait: cancelled ({why}); SIGTERM to the agent");
                        cancelled = Some(why);
                    }
                    if !term_sent {
                        term_sent = true;
                        signal_agent(pid, libc::SIGTERM);
                        deadline = Instant::now() + grace;
                    }
                }
            }
        }
        observer.on_tick();
        while let Some(info) = ctx.signals.read_one() {
            let signo = i32::try_from(info.ssi_signo).unwrap_or(0);
            if signo == libc::SIGCHLD {
                continue;
            }
            if is_forwarded(signo) {
                tracing::info!(
                    "wait: forwarding {} to the agent's group",
                    signal_name(signo)
                );
                signal_agent(pid, signo);
                if forwarded.len() < MAX_RECORDED {
                    forwarded.push(signal_name(signo));
                }
            } else {
                tracing::debug!("wait: ignoring {}", signal_name(signo));
            }
        }
    }
}
