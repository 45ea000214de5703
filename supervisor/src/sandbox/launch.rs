//! Step 5 of an iteration: fork, confine (step 4) and exec the agent, and learn how it went.
//!
//! A close-on-exec status pipe carries fixed-size messages from the child, in the spirit of
//! bubblewrap's `--json-status-fd`: the child writes a *report* (what confinement it confirmed)
//! right before `execve`; if exec succeeds the kernel closes the pipe and the parent reads EOF
//! after the report. Otherwise the child writes a *failure* (stage and errno) and exits. So:
//!
//! - report then EOF: exec happened; the agent runs.
//! - failure at stage `exec`: `ENOENT`/`ENOTDIR`/`ELOOP`/`ENAMETOOLONG` → 127, any other errno
//!   (`EACCES`, `ENOEXEC`, …) → 126.
//! - failure at any other stage: 125 with the stage named.
//! - EOF without a message: the child died before confinement finished → 125.
//!
//! Everything the child touches (argv, envp, paths, fds) is prepared here in the parent.
//!
//! **Fork invariant**: pitcrew-init forks only while it has exactly one thread, so the child
//! may allocate (see "Allocation after fork" in [`super::confine`]). [`launch`] checks it
//! right before `fork` with [`ensure_single_threaded`] and otherwise fails the iteration with
//! 125, `internal: …`, without forking.

use super::capture::{OutputCapture, StreamName};
use super::child_status::{ChildFailure, ChildReport, Stage};
use super::confine::ConfinePlan;
use super::reaper::Reaper;
use crate::exit_code;
use crate::manifest::OutputSpec;
use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

const MSG_REPORT: u32 = 1;
const MSG_FAILURE: u32 = 2;
const MSG_WORDS: usize = 5;
const MSG_BYTES: usize = MSG_WORDS * 4;

/// How long [`launch`] waits for the thread count to reach 1. A thread that `pthread_join` has
/// already returned for is still counted for a moment: the kernel wakes the joiner when it
/// clears the thread's tid (`exit_mm`) and only later removes it from the thread group
/// (`release_task`). A thread still running after this long is a real second thread.
const THREAD_EXIT_WAIT: Duration = Duration::from_millis(200);

/// Mode of the output files the supervisor creates (only the supervisor writes them, from what
/// the agent sends through its socket: [`super::capture`]).
const OUTPUT_MODE: u32 = 0o600;

/// The argv, environment and stdio of the agent, as C data ready for `execve`.
#[derive(Debug)]
pub struct LaunchSpec {
    program: CString,
    _argv: Vec<CString>,
    argv_ptrs: Vec<*const libc::c_char>,
    _envp: Vec<CString>,
    envp_ptrs: Vec<*const libc::c_char>,
    stdin: OwnedFd,
    /// The agent's ends of the capture sockets (fd 1, fd 2); closed in the supervisor right
    /// after the fork, so the stream ends with the agent's last process.
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
    /// The stdout record file, for the judge (read once the capture is finished).
    stdout_file: Option<File>,
    /// The program path as text, for the result record.
    pub argv0: String,
}

/// Why the agent did not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaunchError {
    /// Preparing the launch failed in the parent (125).
    Setup(String),
    /// A supervisor invariant did not hold, so nothing was forked (125).
    Internal(String),
    /// A confinement stage failed in the child (125).
    Confine(ChildFailure),
    /// `execve` failed with this errno (127 or 126).
    Exec {
        /// The program.
        program: String,
        /// `errno`.
        errno: i32,
    },
}

impl LaunchError {
    /// The iteration exit code.
    pub fn exit_code(&self) -> i32 {
        match self {
            LaunchError::Setup(_) | LaunchError::Internal(_) | LaunchError::Confine(_) => {
                exit_code::SUPERVISOR_FAILED
            }
            LaunchError::Exec { errno, .. } => exec_exit_code(*errno),
        }
    }

    /// The machine-readable reason.
    pub fn reason(&self) -> String {
        match self {
            LaunchError::Setup(text) => format!("launch: {text}"),
            LaunchError::Internal(text) => format!("internal: {text}"),
            LaunchError::Confine(ChildFailure {
                stage: Stage::LandlockRequired,
                ..
            }) => "confine: landlock-required: the Landlock ruleset was not fully enforced"
                .to_string(),
            LaunchError::Confine(ChildFailure {
                stage: stage @ (Stage::Seccomp | Stage::Landlock | Stage::NoNewPrivs),
                errno: errno @ (libc::EPERM | libc::EACCES),
            }) => format!(
                "confine: {}: {}: refused by a seccomp filter (or another security module) \
                 around the supervisor, which must allow prctl and the landlock_* system calls",
                stage.name(),
                std::io::Error::from_raw_os_error(*errno)
            ),
            LaunchError::Confine(failure) => format!(
                "confine: {}: {}",
                failure.stage.name(),
                std::io::Error::from_raw_os_error(failure.errno)
            ),
            LaunchError::Exec { program, errno } => {
                let kind = if exec_exit_code(*errno) == exit_code::AGENT_NOT_FOUND {
                    "exec-not-found"
                } else {
                    "exec-not-executable"
                };
                format!(
                    "{kind}: {program}: {}",
                    std::io::Error::from_raw_os_error(*errno)
                )
            }
        }
    }
}

/// 127 for "not found" errnos, 126 for the rest (tini's convention).
pub fn exec_exit_code(errno: i32) -> i32 {
    match errno {
        libc::ENOENT | libc::ENOTDIR | libc::ELOOP | libc::ENAMETOOLONG => {
            exit_code::AGENT_NOT_FOUND
        }
        _ => exit_code::AGENT_NOT_EXECUTABLE,
    }
}

/// A started agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launched {
    /// Its pid (also its process group and session id).
    pub pid: i32,
    /// What the child confirmed before exec.
    pub report: ChildReport,
}

fn cstring(what: &str, text: &str) -> Result<CString, String> {
    CString::new(text).map_err(|_| format!("{what} contains a NUL byte"))
}

fn open_output(path: &str) -> Result<File, String> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .mode(OUTPUT_MODE)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| format!("output-files: {path}: {e}"))?;
    // An existing file keeps its owner and mode: reset both so the agent cannot reopen it.
    let fd = file.as_raw_fd();
    // SAFETY: fchmod/fchown on an fd we own; no memory is passed.
    unsafe {
        libc::fchmod(fd, OUTPUT_MODE);
        if libc::geteuid() == 0 {
            libc::fchown(fd, 0, 0);
        }
    }
    Ok(file)
}

impl LaunchSpec {
    /// Prepares `argv` (argv\[0\] included) and `env` for exec of `program`, with stdin
    /// `/dev/null` and stdout/stderr captured into the files `output` names (created here, see
    /// [`super::capture`]) or inherited when it names none. Returns the capture the wait
    /// loop pumps.
    pub fn prepare(
        program: &Path,
        argv: &[String],
        env: &[(String, String)],
        output: &OutputSpec,
    ) -> Result<(LaunchSpec, OutputCapture), String> {
        let argv0 = program.display().to_string();
        let program = CString::new(program.as_os_str().as_encoded_bytes())
            .map_err(|_| "the agent path contains a NUL byte".to_string())?;
        let argv: Vec<CString> = argv
            .iter()
            .map(|a| cstring("an argument", a))
            .collect::<Result<_, _>>()?;
        let envp: Vec<CString> = env
            .iter()
            .map(|(k, v)| cstring("an environment variable", &format!("{k}={v}")))
            .collect::<Result<_, _>>()?;
        let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
        argv_ptrs.push(std::ptr::null());
        let mut envp_ptrs: Vec<*const libc::c_char> = envp.iter().map(|e| e.as_ptr()).collect();
        envp_ptrs.push(std::ptr::null());
        let stdin = File::open("/dev/null")
            .map_err(|e| format!("stdin: /dev/null: {e}"))?
            .into();

        let mut capture = OutputCapture::default();
        let mut capture_into = |name: StreamName, path: &str| -> Result<(OwnedFd, File), String> {
            let file = open_output(path)?;
            let reader = file
                .try_clone()
                .map_err(|e| format!("output-files: {path}: {e}"))?;
            let end = capture
                .add(name, file)
                .map_err(|e| format!("output-files: capture socket: {e}"))?;
            Ok((end.fd, reader))
        };
        let (stdout, stderr, stdout_file) = match (&output.stdout, &output.stderr) {
            (Some(out), Some(err)) if out == err => {
                let (end, file) = capture_into(StreamName::Both, out)?;
                let twin = end
                    .try_clone()
                    .map_err(|e| format!("output-files: capture socket: {e}"))?;
                (Some(end), Some(twin), Some(file))
            }
            (out, err) => {
                let stdout = out
                    .as_deref()
                    .map(|p| capture_into(StreamName::Stdout, p))
                    .transpose()?;
                let stderr = err
                    .as_deref()
                    .map(|p| capture_into(StreamName::Stderr, p))
                    .transpose()?;
                let (stdout, stdout_file) = stdout.unzip();
                (stdout, stderr.map(|(end, _)| end), stdout_file)
            }
        };
        Ok((
            LaunchSpec {
                program,
                _argv: argv,
                argv_ptrs,
                _envp: envp,
                envp_ptrs,
                stdin,
                stdout,
                stderr,
                stdout_file,
                argv0,
            },
            capture,
        ))
    }

    /// The record file of the agent's stdout, when the manifest names one (for the judge: read
    /// it once [`OutputCapture::finish`] has run).
    pub fn stdout_file(&self) -> Option<&File> {
        self.stdout_file.as_ref()
    }
}

/// The `Threads:` field of a `/proc/<pid>/status` text.
pub fn parse_thread_count(status: &str) -> Option<usize> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("Threads:"))
        .and_then(|value| value.trim().parse().ok())
}

/// The number of threads of this process, from `/proc/self/status`.
fn thread_count() -> Result<usize, String> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("/proc/self/status: {e}"))?;
    parse_thread_count(&status).ok_or_else(|| "/proc/self/status has no Threads: line".to_string())
}

/// The fork invariant: succeeds once this process has exactly one thread, re-reading the
/// count for up to `wait` while joined threads finish leaving. Fails (the reason without the
/// `internal:` prefix) if a second thread remains or the count cannot be read: without it,
/// allocating in the forked child would not be sound.
///
/// Once the count is 1 it stays 1 until the `fork`: the only thread left is the caller, and
/// it starts none in between.
pub fn ensure_single_threaded(wait: Duration) -> Result<(), String> {
    let deadline = Instant::now() + wait;
    loop {
        let threads = thread_count()
            .map_err(|e| format!("cannot confirm a single thread before fork: {e}"))?;
        if threads == 1 {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "{threads} threads before fork (must be 1: a lock held by another thread \
                 would stay held in the child); refusing to launch"
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Forks, confines and execs; on success the agent's pid is registered with `reaper`.
pub fn launch(
    spec: &mut LaunchSpec,
    plan: &mut ConfinePlan,
    reaper: &mut Reaper,
) -> Result<Launched, LaunchError> {
    ensure_single_threaded(THREAD_EXIT_WAIT).map_err(LaunchError::Internal)?;
    let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| LaunchError::Setup(format!("status pipe: {e}")))?;
    // SAFETY: `ensure_single_threaded` just saw this thread as the only one, and nothing since
    // started another; so no other thread can hold a lock (the allocator's included) that the
    // child would inherit held, and the child may allocate. The child runs only `child_main`,
    // on data prepared before the fork, and never returns.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        spec.stdout = None;
        spec.stderr = None;
        return Err(LaunchError::Setup(format!(
            "fork: {}",
            std::io::Error::last_os_error()
        )));
    }
    if pid == 0 {
        // SAFETY: we are the freshly forked child; see `child_main`.
        unsafe { child_main(spec, plan, write_end.as_raw_fd()) }
    }
    drop(write_end);
    // Only the agent holds the sending ends of its streams now.
    spec.stdout = None;
    spec.stderr = None;
    reaper.watch(pid);

    let mut buf = [0u8; MSG_BYTES * 2];
    let mut len = 0;
    let file = File::from(read_end);
    while len < buf.len() {
        match std::io::Read::read(&mut &file, &mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(LaunchError::Setup(format!("status pipe: {e}"))),
        }
    }
    let mut report = None;
    for msg in buf[..len].chunks_exact(MSG_BYTES) {
        let mut words = [0u32; MSG_WORDS];
        for (w, bytes) in words.iter_mut().zip(msg.chunks_exact(4)) {
            *w = u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        }
        match words[0] {
            MSG_REPORT => {
                report = ChildReport::from_words([words[1], words[2], words[3], words[4]])
            }
            MSG_FAILURE => {
                let stage = Stage::from_u32(words[1]).unwrap_or(Stage::Exec);
                let errno = i32::try_from(words[2]).unwrap_or(0);
                return Err(if stage == Stage::Exec {
                    LaunchError::Exec {
                        program: spec.argv0.clone(),
                        errno,
                    }
                } else {
                    LaunchError::Confine(ChildFailure { stage, errno })
                });
            }
            _ => {}
        }
    }
    match report {
        Some(report) => Ok(Launched { pid, report }),
        None => Err(LaunchError::Setup(
            "the child exited before confinement finished (no status message)".to_string(),
        )),
    }
}

/// Writes one message to the status pipe (no allocation; retries on EINTR).
fn write_message(fd: RawFd, words: [u32; MSG_WORDS]) {
    let mut bytes = [0u8; MSG_BYTES];
    for (chunk, w) in bytes.chunks_exact_mut(4).zip(words) {
        chunk.copy_from_slice(&w.to_ne_bytes());
    }
    loop {
        // SAFETY: writes from a stack buffer of the stated length.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), MSG_BYTES) };
        if n >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

/// Points `target` at `fd`; if they are already the same fd, clears its close-on-exec flag.
///
/// # Safety
///
/// Only in the child before exec; `fd` must be open.
unsafe fn redirect(fd: RawFd, target: RawFd) -> bool {
    // SAFETY: dup2/fcntl on fds; no memory involved.
    unsafe {
        if fd == target {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            flags >= 0 && libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) == 0
        } else {
            libc::dup2(fd, target) >= 0
        }
    }
}

/// The child between fork and exec. Never returns.
///
/// # Safety
///
/// Only in the freshly forked child of a single-threaded parent (the fork invariant of this
/// module). Besides [`ConfinePlan::apply_in_child`] it only calls `dup2`, `fcntl`, `write`,
/// `execve` and `_exit`.
unsafe fn child_main(spec: &LaunchSpec, plan: &mut ConfinePlan, status: RawFd) -> ! {
    let fail = |stage: Stage, errno: i32, code: i32| -> ! {
        write_message(
            status,
            [
                MSG_FAILURE,
                stage as u32,
                u32::try_from(errno).unwrap_or(0),
                0,
                0,
            ],
        );
        // SAFETY: _exit skips atexit handlers and stdio flushing, as a forked child must.
        unsafe { libc::_exit(code) }
    };
    let errno = || std::io::Error::last_os_error().raw_os_error().unwrap_or(0);

    // SAFETY: the child owns its copy of these fds; see `redirect`.
    let stdio_ok = unsafe {
        redirect(spec.stdin.as_raw_fd(), 0)
            && spec
                .stdout
                .as_ref()
                .is_none_or(|fd| redirect(fd.as_raw_fd(), 1))
            && spec
                .stderr
                .as_ref()
                .is_none_or(|fd| redirect(fd.as_raw_fd(), 2))
    };
    if !stdio_ok {
        fail(Stage::Stdio, errno(), exit_code::SUPERVISOR_FAILED);
    }
    // SAFETY: we are the forked child, before exec (the contract of apply_in_child).
    let report = match unsafe { plan.apply_in_child() } {
        Ok(report) => report,
        Err(failure) => fail(failure.stage, failure.errno, exit_code::SUPERVISOR_FAILED),
    };
    let [a, b, c, d] = report.to_words();
    write_message(status, [MSG_REPORT, a, b, c, d]);
    // SAFETY: program, argv and envp are NUL-terminated C strings and NULL-terminated pointer
    // arrays owned by `spec`, alive for the whole call.
    unsafe {
        libc::execve(
            spec.program.as_ptr(),
            spec.argv_ptrs.as_ptr(),
            spec.envp_ptrs.as_ptr(),
        )
    };
    let e = errno();
    fail(Stage::Exec, e, exec_exit_code(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_errnos_map_to_tini_codes() {
        assert_eq!(exec_exit_code(libc::ENOENT), 127);
        assert_eq!(exec_exit_code(libc::ENOTDIR), 127);
        assert_eq!(exec_exit_code(libc::EACCES), 126);
        assert_eq!(exec_exit_code(libc::ENOEXEC), 126);
    }

    #[test]
    fn thread_count_is_parsed_from_proc_status() {
        let status = "Name:\tpitcrew-init\nTgid:\t1\nThreads:\t3\nSigQ:\t0/63\n";
        assert_eq!(parse_thread_count(status), Some(3));
        assert_eq!(parse_thread_count("Threads:\t1"), Some(1));
        assert_eq!(parse_thread_count("Name:\tx\n"), None);
        assert_eq!(parse_thread_count("Threads:\tmany\n"), None);
        let own = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
        assert!(parse_thread_count(&own).is_some_and(|n| n >= 1), "{own}");
    }

    #[test]
    fn a_second_thread_blocks_the_fork() {
        let (stop, parked) = std::sync::mpsc::channel::<()>();
        let other = std::thread::spawn(move || parked.recv());
        let refused = ensure_single_threaded(Duration::from_millis(20));
        stop.send(()).expect("stop the thread");
        let _ = other.join();
        let reason = LaunchError::Internal(refused.expect_err("two threads")).reason();
        assert!(
            reason.starts_with("internal: ") && reason.contains("threads before fork"),
            "{reason}"
        );
        assert_eq!(LaunchError::Internal(String::new()).exit_code(), 125);
    }

    #[test]
    fn reasons_are_prefixed_by_kind() {
        let e = LaunchError::Exec {
            program: "/nope".into(),
            errno: libc::ENOENT,
        };
        assert!(
            e.reason().starts_with("exec-not-found: /nope: "),
            "{}",
            e.reason()
        );
        let e = LaunchError::Confine(ChildFailure {
            stage: Stage::Uid,
            errno: libc::EPERM,
        });
        assert_eq!(e.exit_code(), 125);
        assert!(
            e.reason().starts_with("confine: setresuid: "),
            "{}",
            e.reason()
        );
    }
}
