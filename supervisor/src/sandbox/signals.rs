//! Signal intake of the supervisor: every asynchronous signal is blocked and read from one
//! `signalfd`, owned by [`Signals`].
//!
//! PID 1 of a PID namespace gets no default action for signals it has no handler for, so every
//! signal it must act on has to be caught; a blocked signal is queued even for PID 1 (the
//! kernel only drops unblocked, unhandled ones), and the signalfd hands it over. catatonit, the
//! minimal init of podman, works the same way.
//!
//! [`Signals::install`] must run before any thread exists: the mask is per thread and new
//! threads inherit it, so a thread created earlier could have a signal delivered to it instead.

use nix::sys::signal::{self, SigHandler, SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use std::os::fd::{AsFd, BorrowedFd};

/// Signals that stay unblocked: the kernel raises them synchronously on a fault, and blocking
/// them would turn a crash into a hang.
pub const SYNCHRONOUS: [Signal; 7] = [
    Signal::SIGSEGV,
    Signal::SIGBUS,
    Signal::SIGILL,
    Signal::SIGFPE,
    Signal::SIGABRT,
    Signal::SIGTRAP,
    Signal::SIGSYS,
];

/// Signals forwarded to the agent's process group when the supervisor receives them.
///
/// `SIGTSTP` is forwarded (as tini does) for agents that handle it; an agent with the default
/// action is not stopped by it, because its process group is orphaned (its parent is in another
/// session) and the kernel discards stop signals for orphaned groups. Not forwarded: `SIGCHLD`
/// (ours), `SIGTTIN`/`SIGTTOU` (ignored), `SIGPIPE`/`SIGXCPU`/`SIGXFSZ` (raised by the kernel
/// for the supervisor's own writes and limits), `SIGVTALRM`/`SIGPROF`/`SIGIO`/`SIGURG`/
/// `SIGSTKFLT`/`SIGPWR` (not meant for the agent). Real-time signals (`SIGRTMIN..=SIGRTMAX`) are
/// forwarded.
pub const FORWARDED: [Signal; 10] = [
    Signal::SIGHUP,
    Signal::SIGINT,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGTERM,
    Signal::SIGWINCH,
    Signal::SIGALRM,
    Signal::SIGCONT,
    Signal::SIGTSTP,
];

/// Whether a signal number received by the supervisor is forwarded to the agent's group.
pub fn is_forwarded(signo: i32) -> bool {
    FORWARDED.iter().any(|s| *s as i32 == signo)
        || (libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&signo)
}

/// The blocked mask and its signalfd, plus the mask to restore in the agent.
pub struct Signals {
    fd: SignalFd,
    original_mask: libc::sigset_t,
    held: Vec<i32>,
}

impl std::fmt::Debug for Signals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signals").finish_non_exhaustive()
    }
}

impl Signals {
    /// Blocks every signal except [`SYNCHRONOUS`], ignores `SIGTTIN`/`SIGTTOU`, and opens the
    /// signalfd (close-on-exec, non-blocking). Call before any thread exists.
    pub fn install() -> nix::Result<Signals> {
        let mut blocked = SigSet::all();
        for sig in SYNCHRONOUS {
            blocked.remove(sig);
        }
        let mut original = SigSet::empty();
        signal::pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&blocked), Some(&mut original))?;
        for sig in [Signal::SIGTTIN, Signal::SIGTTOU] {
            // SAFETY: SIG_IGN installs no handler code, so no async-signal-safety concern.
            unsafe { signal::signal(sig, SigHandler::SigIgn) }?;
        }
        let fd = SignalFd::with_flags(&blocked, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)?;
        Ok(Signals {
            fd,
            original_mask: *original.as_ref(),
            held: Vec::new(),
        })
    }

    /// Reads one pending signal, `None` when none is pending.
    pub fn read_one(&mut self) -> Option<libc::signalfd_siginfo> {
        match self.fd.read_signal() {
            Ok(info) => info,
            Err(err) => {
                tracing::warn!("signals: reading the signalfd failed: {err}");
                None
            }
        }
    }

    /// Reads every pending signal while no agent runs: `SIGCHLD`s are discarded (the caller
    /// reaps anyway), forwardable ones are kept for the next agent ([`Signals::take_held`]), so a
    /// cancel that arrives during the reap or verification still reaches the agent at launch.
    pub fn drain(&mut self) {
        while let Some(info) = self.read_one() {
            let signo = i32::try_from(info.ssi_signo).unwrap_or(0);
            if is_forwarded(signo) && !self.held.contains(&signo) {
                tracing::info!(
                    "signals: holding {} until the agent starts",
                    crate::exit_code::signal_name(signo)
                );
                self.held.push(signo);
            }
        }
    }

    /// Takes the signals held by [`Signals::drain`] (each at most once, in arrival order).
    pub fn take_held(&mut self) -> Vec<i32> {
        std::mem::take(&mut self.held)
    }

    /// The signal mask the supervisor started with (restored in the agent before exec).
    pub fn original_mask(&self) -> &libc::sigset_t {
        &self.original_mask
    }
}

impl AsFd for Signals {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
