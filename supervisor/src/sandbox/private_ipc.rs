//! Private IPC for sandboxes that share the host's filesystem (the local engine): a fresh System
//! V IPC namespace and a fresh `/dev/shm` for every iteration.
//!
//! `/dev/shm` is world-writable and System V segments, queues and semaphores live as long as
//! their namespace: without their own, an agent leaves files, symlinks, POSIX and System V
//! shared memory that outlive the iteration and the sandbox, and that the host's processes and
//! other sandboxes see. The local engine starts the supervisor in its own mount and IPC
//! namespaces and asks for this module with `serve --private-ipc`: after every iteration's first
//! reap, when nothing of the agent runs any more, the supervisor moves itself into a new IPC
//! namespace (the agent's next tree is born in it; the old one, and everything in it, goes when
//! its last process is gone) and replaces the tmpfs on `/dev/shm` with a fresh one (detach the
//! old, mount a new: empty at any depth, in constant time, without walking what the agent left).
//!
//! Container engines give each container its own IPC namespace and `/dev/shm` already; the flag
//! is not needed there (it needs `CAP_SYS_ADMIN`, and is refused unless the supervisor is PID 1
//! of its PID namespace, since unmounting `/dev/shm` in the host's mount namespace would take it
//! from the host).

use std::ffi::CString;

/// Where the private tmpfs is mounted.
pub const SHM: &str = "/dev/shm";

/// The mount options: as container engines mount it (nosuid, nodev, noexec), world-writable
/// and sticky, 64 MiB at most.
const OPTIONS: &str = "mode=1777,size=64m";

/// Moves the calling process into a new IPC namespace and mounts a fresh, empty tmpfs on
/// [`SHM`], detaching whatever was mounted there.
pub fn renew() -> Result<(), String> {
    // SAFETY: unshare takes a flag word and touches no memory.
    if unsafe { libc::unshare(libc::CLONE_NEWIPC) } != 0 {
        return Err(format!(
            "private IPC: unshare(CLONE_NEWIPC): {}",
            std::io::Error::last_os_error()
        ));
    }
    let target = CString::new(SHM).map_err(|_| "shm path".to_string())?;
    let fstype = CString::new("tmpfs").map_err(|_| "fstype".to_string())?;
    let data = CString::new(OPTIONS).map_err(|_| "options".to_string())?;
    // SAFETY: umount2 and mount read NUL-terminated strings that live across the calls.
    unsafe {
        // EINVAL: nothing mounted there (a plain directory): fine, mount over it.
        if libc::umount2(target.as_ptr(), libc::MNT_DETACH) != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EINVAL) {
                return Err(format!("private /dev/shm: umount {SHM}: {err}"));
            }
        }
        if libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            data.as_ptr().cast(),
        ) != 0
        {
            return Err(format!(
                "private /dev/shm: mount tmpfs on {SHM}: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}
