//! Helpers for the tests of the modules that walk agent-written trees.

use std::io;

/// Runs `f` in a child process whose `RLIMIT_NOFILE` is `limit`, so a walk that needs more
/// descriptors fails there; the test fails when the child does.
pub fn with_fd_limit(limit: u64, f: impl FnOnce() -> Result<(), String>) {
    // SAFETY: the child only runs `f` (plain system calls through rustix and std) and
    // leaves with `_exit`; the test harness's other threads are not used in it.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
    if pid == 0 {
        // Only the standard streams: the other threads' descriptors are not this test's.
        // SAFETY: close_range on descriptors this child does not use.
        unsafe { libc::syscall(libc::SYS_close_range, 3, u32::MAX, 0) };
        let lim = libc::rlimit {
            rlim_cur: limit,
            rlim_max: limit,
        };
        // SAFETY: setrlimit with a valid pointer to an initialised rlimit.
        let code = if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
            3
        } else {
            match f() {
                Ok(()) => 0,
                Err(e) => {
                    crate::say!("{e}");
                    1
                }
            }
        };
        // SAFETY: leaves the child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waitpid on the child just forked, with a valid status pointer.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child with RLIMIT_NOFILE {limit} failed (status {status:#x})"
    );
}
