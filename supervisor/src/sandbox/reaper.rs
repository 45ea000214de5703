//! The single owner of `waitpid(-1, WNOHANG)`.
//!
//! Nothing else in pitcrew-init waits for a child: no `std::process::Child::wait`, no tokio
//! process. A second waiter would race this one and steal exit statuses (talos #1110,
//! kernel-images #351). Each pass loops until `waitpid` says 0 (children left, none exited)
//! or `ECHILD` (no children), because several exits coalesce into one `SIGCHLD`; the main
//! child (the agent) is recognised *inside* the loop (catatonit #4/#5), and its status is kept
//! for whoever asks.

use nix::errno::Errno;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildExit {
    /// It called `exit` with this code.
    Exited(i32),
    /// A signal (this number) killed it.
    Signaled(i32),
}

impl ChildExit {
    /// The shell convention: the exit code, or 128 + the signal number.
    pub fn code(self) -> i32 {
        match self {
            ChildExit::Exited(code) => code,
            ChildExit::Signaled(signo) => 128 + signo,
        }
    }

    /// The signal number, when a signal ended it.
    pub fn signal(self) -> Option<i32> {
        match self {
            ChildExit::Exited(_) => None,
            ChildExit::Signaled(signo) => Some(signo),
        }
    }
}

/// What one reap pass found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReapPass {
    /// Children reaped in this pass.
    pub reaped: usize,
    /// `waitpid` reported `ECHILD`: the supervisor has no children at all.
    pub no_children: bool,
}

/// Reaps every exited child and remembers the main child's status.
#[derive(Debug, Default)]
pub struct Reaper {
    main: Option<i32>,
    main_exit: Option<ChildExit>,
}

impl Reaper {
    /// A reaper with no main child.
    pub fn new() -> Reaper {
        Reaper::default()
    }

    /// Registers `pid` as the main child; its exit status will be kept. Call right after fork,
    /// before the next pass (the supervisor is single-threaded, so no pass can run in between).
    pub fn watch(&mut self, pid: i32) {
        self.main = Some(pid);
        self.main_exit = None;
    }

    /// Forgets the main child (after its status was taken).
    pub fn unwatch(&mut self) {
        self.main = None;
    }

    /// The main child's exit, once reaped.
    pub fn main_exit(&self) -> Option<ChildExit> {
        self.main_exit
    }

    /// One pass: reaps until no exited child is left, calling `on_exit(pid, exit)` for each.
    pub fn reap(&mut self, mut on_exit: impl FnMut(i32, ChildExit)) -> ReapPass {
        let mut pass = ReapPass::default();
        loop {
            let (pid, exit) = match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => return pass,
                Ok(WaitStatus::Exited(pid, code)) => (pid.as_raw(), ChildExit::Exited(code)),
                Ok(WaitStatus::Signaled(pid, sig, _core)) => {
                    (pid.as_raw(), ChildExit::Signaled(sig as i32))
                }
                // Stops and continues are not requested (no WUNTRACED/WCONTINUED); keep looping.
                Ok(_) => continue,
                Err(Errno::EINTR) => continue,
                Err(Errno::ECHILD) => {
                    pass.no_children = true;
                    return pass;
                }
                Err(err) => {
                    tracing::warn!("reaper: waitpid failed: {err}");
                    return pass;
                }
            };
            pass.reaped += 1;
            if self.main == Some(pid) {
                self.main_exit = Some(exit);
            }
            on_exit(pid, exit);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_shell_convention() {
        assert_eq!(ChildExit::Exited(3).code(), 3);
        assert_eq!(ChildExit::Signaled(15).code(), 143);
        assert_eq!(ChildExit::Signaled(9).signal(), Some(9));
        assert_eq!(ChildExit::Exited(0).signal(), None);
    }
}
