//! How `pitcrew-init` asks glibc's allocator to give memory back.
//!
//! The supervisor lives as long as its sandbox, and between iterations it should hold little
//! more than its own code.
//!
//! Two glibc habits stand in the way, each measured with `tests/benches/footprint.rs`:
//!
//! - **Per-thread arenas**: every hashing thread of a verification would get an arena of its
//!   own (about 400 KiB resident after the threads are gone). [`one_malloc_arena`] keeps every
//!   thread in the main arena.
//! - **The per-thread cache (tcache)**: up to seven freed chunks of each small size stay in a
//!   thread's cache, counted as in use, scattered over the pages a verification grew the heap
//!   to; `malloc_trim` cannot release those pages. In a kept sandbox about 650 KiB of the idle
//!   heap were pages pinned that way. glibc reads the cache's size only from the environment at
//!   startup (`GLIBC_TUNABLES`), so the long-lived supervisor (`serve`) starts itself again
//!   with the cache off ([`exec_without_thread_cache`]), and [`restore_environment`] then puts
//!   the environment back as it was given, before anything reads it. Without the cache every
//!   allocation takes the arena's lock, which is why the hashing threads allocate nothing per
//!   file. The one-iteration `run` keeps the cache: it exits after its iteration anyway.
//!
//! [`release_freed_memory`] hands what is free back to the kernel at the points where the
//! supervisor has just dropped a lot (before the agent starts, when the last client leaves,
//! when an iteration ends with nobody connected).

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt as _;

/// The glibc tunable that turns the per-thread cache off.
const NO_THREAD_CACHE: &str = "glibc.malloc.tcache_count=0";

/// Set only in the environment of the supervisor started again by
/// [`exec_without_thread_cache`]: `-` when `GLIBC_TUNABLES` was unset, `=` and its value when
/// it was set.
const ORIGINAL_TUNABLES: &str = "PITCREW_INIT_ORIGINAL_GLIBC_TUNABLES";

/// Makes every thread allocate from glibc's one main arena. Called at the start of `main`,
/// before any thread exists.
pub fn one_malloc_arena() {
    #[cfg(target_env = "gnu")]
    // SAFETY: `mallopt` sets a glibc tunable; called before any other thread exists, it races
    // with no allocation, and `M_ARENA_MAX` only limits how many arenas later threads create.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Hands memory freed by the verify and environment steps (or by a client's requests) back
/// to the kernel: free pages in the middle of the heap as well as at its top.
pub fn release_freed_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: `malloc_trim` only releases free heap pages of every arena; it takes glibc's
    // own arena locks and touches no memory the program still owns.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Whether this process is the supervisor started again by [`exec_without_thread_cache`]; if
/// so, puts `GLIBC_TUNABLES` back as the first start was given it and forgets the marker, so
/// the environment the supervisor reads (and the baseline its agents' environments are built
/// from) is the one it was started with, and gives the process back its name (an exec of
/// `/proc/self/exe` names it `exe`). A marker in the environment of a first start (an image
/// that sets the name) is dropped and not believed. Called first thing in `main`, before any
/// thread exists.
pub fn restore_environment() -> bool {
    let Some(original) = std::env::var_os(ORIGINAL_TUNABLES) else {
        return false;
    };
    // Single-threaded here (first thing in main), so changing the environment races nothing.
    std::env::remove_var(ORIGINAL_TUNABLES);
    if !executed_as_proc_self_exe() {
        return false;
    }
    match original.as_bytes().split_first() {
        Some((b'=', value)) => std::env::set_var("GLIBC_TUNABLES", OsStr::from_bytes(value)),
        _ => std::env::remove_var("GLIBC_TUNABLES"),
    }
    restore_name();
    true
}

/// Whether the kernel started this image from the path `/proc/self/exe` (the `execve` file
/// name it keeps in the auxiliary vector), as [`exec_without_thread_cache`] does.
fn executed_as_proc_self_exe() -> bool {
    // SAFETY: `getauxval` only reads the auxiliary vector; AT_EXECFN, when present, is the
    // address of the NUL-terminated file name the kernel copied to the stack at exec, which
    // lives as long as the process.
    unsafe {
        let name = libc::getauxval(libc::AT_EXECFN) as *const libc::c_char;
        !name.is_null() && std::ffi::CStr::from_ptr(name).to_bytes() == b"/proc/self/exe"
    }
}

/// Names the process after the last component of its `argv[0]`, up to 15 bytes: the name the
/// kernel gave the first start when, as usual, `argv[0]` is the path that was executed.
fn restore_name() {
    let Some(arg0) = std::env::args_os().next() else {
        return;
    };
    let base = std::path::Path::new(&arg0)
        .file_name()
        .map_or(&[][..], |n| n.as_bytes());
    let mut name = [0u8; 16];
    let len = base.len().min(15);
    name[..len].copy_from_slice(&base[..len]);
    if len == 0 || name[..len].contains(&0) {
        return;
    }
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes from the pointer;
    // `name` is 16 bytes with a NUL at or before index 15, and lives across the call.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, name.as_ptr());
    }
}

/// Starts this program again (`/proc/self/exe`, the same pid and arguments, the same
/// environment as Rust's `Command` passes it on: each name once) with glibc's per-thread cache
/// off. Returns only if that failed, with the reason; the supervisor then simply goes on with
/// the cache. Called before anything else has started: no thread, no signal handling, nothing
/// open that the new image would lose.
pub fn exec_without_thread_cache() -> std::io::Error {
    let original = std::env::var_os("GLIBC_TUNABLES");
    let mut marker = OsString::new();
    let mut tunables = OsString::new();
    match &original {
        Some(value) => {
            marker.push("=");
            marker.push(value);
            tunables.push(value);
            tunables.push(":");
        }
        None => marker.push("-"),
    }
    tunables.push(NO_THREAD_CACHE);
    let mut command = std::process::Command::new("/proc/self/exe");
    let mut args = std::env::args_os();
    if let Some(arg0) = args.next() {
        std::os::unix::process::CommandExt::arg0(&mut command, arg0);
    }
    command
        .args(args)
        .env("GLIBC_TUNABLES", tunables)
        .env(ORIGINAL_TUNABLES, marker);
    let failed = std::os::unix::process::CommandExt::exec(&mut command);
    // SAFETY: `signal` only changes this process's disposition of SIGPIPE; ignored, as Rust's
    // runtime had it before `exec` reset it to the default for the new image.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    failed
}
