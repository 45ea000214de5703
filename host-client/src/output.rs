//! Everything `pitcrew` writes on its stdout and stderr goes through here, and a closed output
//! is never a panic (`println!` and `eprintln!` panic on a write that fails).
//!
//! `pitcrew` ignores SIGPIPE, so a write to a pipe whose reader is gone (`pitcrew … | head`)
//! fails with `EPIPE` instead of killing it. Such an output is then *gone*:
//!
//! - on stdout ([`out!`], [`outln!`], [`Stdout`]) the write's error comes back to the command,
//!   which stops printing ([`is_gone`] tells it from other errors, so it is not reported);
//! - on stderr ([`errln!`], [`Stderr`], the log's writer) the line is dropped: logs and
//!   progress are never fatal;
//! - either way the process exits [`GONE_EXIT`] at its end, and the hook of [`on_gone`] runs
//!   once: the commands that drive a sandbox (`run`, `batch`) cancel there as on SIGTERM
//!   (collect what can be collected, tear down the sandbox) instead of running on blind.
//!
//! [`watch`] notices a closed pipe before anything is written to it (`poll` reports `POLLERR`
//! on a pipe's write end once its reader is gone), so a run whose stdout closes mid-iteration
//! is cancelled then, not at its end.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// The exit code of a `pitcrew` that found its stdout or stderr closed: 128 + SIGPIPE, the
/// status a shell reports for a program that SIGPIPE killed, so a pipeline (`set -o pipefail`)
/// reads it as "the reader went away", apart from 130 (interrupted) and real failures.
pub const GONE_EXIT: u8 = 141;

/// One of `pitcrew`'s outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output: the report, the JSON document, the listing.
    Stdout,
    /// Standard error: progress, warnings, errors, the log.
    Stderr,
}

impl Stream {
    /// `stdout` or `stderr`.
    fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }

    fn flag(self) -> &'static AtomicBool {
        static STDOUT: AtomicBool = AtomicBool::new(false);
        static STDERR: AtomicBool = AtomicBool::new(false);
        match self {
            Stream::Stdout => &STDOUT,
            Stream::Stderr => &STDERR,
        }
    }
}

/// What runs once when an output is gone ([`on_gone`]).
static HOOK: OnceLock<Box<dyn Fn() + Send + Sync>> = OnceLock::new();

/// Set once the hook was started.
static FIRED: AtomicBool = AtomicBool::new(false);

/// Whether `stream` was found closed.
pub fn stream_gone(stream: Stream) -> bool {
    stream.flag().load(Ordering::SeqCst)
}

/// Whether stdout or stderr was found closed: the process exits [`GONE_EXIT`].
pub fn gone() -> bool {
    stream_gone(Stream::Stdout) || stream_gone(Stream::Stderr)
}

/// Records that `stream` is gone and starts the hook if it has not run.
pub fn mark_gone(stream: Stream) {
    stream.flag().store(true, Ordering::SeqCst);
    fire();
}

/// Runs `hook` (once, on a thread of its own) when an output is gone, at once if one already
/// is. The first registration wins; a command registers one at most.
pub fn on_gone(hook: impl Fn() + Send + Sync + 'static) {
    if HOOK.set(Box::new(hook)).is_err() {
        tracing::debug!("an output hook is already registered");
    }
    fire();
}

/// Starts the hook when an output is gone and a hook is registered, once. On a thread of its
/// own: the write that found the output gone may hold a lock the hook takes (the Ctrl-C
/// handler's slot).
fn fire() {
    if !gone() {
        return;
    }
    let Some(hook) = HOOK.get() else {
        return;
    };
    if FIRED.swap(true, Ordering::SeqCst) {
        return;
    }
    let started = std::thread::Builder::new()
        .name("output-gone".into())
        .spawn(hook);
    if started.is_err() {
        hook();
    }
}

/// Watches stdout and stderr on a thread of its own and marks one gone as soon as `poll`
/// reports it closed (`POLLERR`: a pipe whose reader is gone; `POLLHUP`: a hung-up terminal or
/// a closed socket), before anything is written to it. A file, `/dev/null` or a live pipe never
/// wakes it.
pub fn watch() {
    let started = std::thread::Builder::new()
        .name("output-watch".into())
        .spawn(|| {
            let (stdout, stderr) = (io::stdout(), io::stderr());
            let mut open = vec![Stream::Stdout, Stream::Stderr];
            while !open.is_empty() {
                let mut fds: Vec<rustix::event::PollFd<'_>> = open
                    .iter()
                    .map(|s| {
                        let fd = match s {
                            Stream::Stdout => std::os::fd::AsFd::as_fd(&stdout),
                            Stream::Stderr => std::os::fd::AsFd::as_fd(&stderr),
                        };
                        // No events asked: only the error and hang-up that poll always reports.
                        rustix::event::PollFd::from_borrowed_fd(
                            fd,
                            rustix::event::PollFlags::empty(),
                        )
                    })
                    .collect();
                match rustix::event::poll(&mut fds, None) {
                    Ok(_) => {}
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(e) => {
                        tracing::debug!("output watch: poll: {e}");
                        return;
                    }
                }
                let revents: Vec<_> = fds.iter().map(rustix::event::PollFd::revents).collect();
                drop(fds);
                let mut still = Vec::new();
                for (stream, r) in open.iter().zip(revents) {
                    use rustix::event::PollFlags;
                    if r.intersects(PollFlags::ERR | PollFlags::HUP) {
                        mark_gone(*stream);
                    } else if !r.contains(PollFlags::NVAL) {
                        still.push(*stream);
                    }
                }
                open = still;
            }
        });
    if let Err(e) = started {
        tracing::warn!("cannot watch stdout and stderr: {e}");
    }
}

/// The error of a write to a gone output: an [`io::Error`] of kind `BrokenPipe` carrying it.
#[derive(Debug, thiserror::Error)]
#[error("{} is closed", .0.name())]
struct Closed(Stream);

/// `err` as it comes back from a write to `stream`: a broken pipe marks the stream gone and
/// becomes the error [`is_gone`] recognises.
fn noted(stream: Stream, err: io::Error) -> io::Error {
    if err.kind() == io::ErrorKind::BrokenPipe {
        mark_gone(stream);
        io::Error::new(io::ErrorKind::BrokenPipe, Closed(stream))
    } else {
        err
    }
}

/// Whether `err` is (or was caused by) a write to a gone output: the command stopped because
/// its reader went away, which is no failure to report.
pub fn is_gone(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<io::Error>()
            .and_then(io::Error::get_ref)
            .is_some_and(|inner| inner.is::<Closed>())
    })
}

/// An error made of several problems, each a line of its own (`FILE:LINE: …`): printed one
/// per line, each escaped for the terminal, or as a JSON array by a command in `--json` mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problems(pub Vec<String>);

impl std::fmt::Display for Problems {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join("\n"))
    }
}

impl std::error::Error for Problems {}

/// The lines `err` is reported as: one per problem when it is [`Problems`] alone, else its
/// whole chain on one line. Unescaped: the caller escapes each for the terminal (a newline
/// inside a problem stays escaped, so no quoted text can forge a line of its own).
pub fn error_lines(err: &anyhow::Error) -> Vec<String> {
    match err.downcast_ref::<Problems>() {
        Some(problems) if err.chain().count() == 1 => problems.0.clone(),
        _ => vec![format!("{err:#}")],
    }
}

/// What kind of failure a `--json` error object reports ([`json_error`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The command line was refused (an unknown option, a bad value): exit 2.
    Usage,
    /// An input has problems, each listed in `problems`.
    Problems,
    /// Anything else the command could not do.
    Failed,
}

impl FailureKind {
    /// The kind's name in the error object.
    pub fn name(self) -> &'static str {
        match self {
            FailureKind::Usage => "usage",
            FailureKind::Problems => "problems",
            FailureKind::Failed => "failed",
        }
    }
}

/// The error object a command given `--json` prints on stdout when it fails (its human lines
/// still go to stderr): `{"error": {"message", "kind", "exit_code", "problems"?}}`. `message`
/// is the whole chain on one line, unescaped (JSON escapes it).
pub fn json_error(
    message: &str,
    kind: FailureKind,
    exit_code: u8,
    problems: Option<&[String]>,
) -> serde_json::Value {
    let mut error = serde_json::json!({
        "message": message,
        "kind": kind.name(),
        "exit_code": exit_code,
    });
    if let Some(problems) = problems {
        error["problems"] = problems.into();
    }
    serde_json::json!({ "error": error })
}

/// [`json_error`] for an error a command returned: `problems` when it is [`Problems`] alone.
pub fn json_error_of(err: &anyhow::Error, exit_code: u8) -> serde_json::Value {
    match err.downcast_ref::<Problems>() {
        Some(problems) if err.chain().count() == 1 => json_error(
            &problems.0.join("; "),
            FailureKind::Problems,
            exit_code,
            Some(&problems.0),
        ),
        Some(problems) => json_error(
            &format!("{err:#}"),
            FailureKind::Problems,
            exit_code,
            Some(&problems.0),
        ),
        None => json_error(&format!("{err:#}"), FailureKind::Failed, exit_code, None),
    }
}

/// Whether the command line asks for `--json` (before a `--`): a usage error is then reported
/// as a JSON object too.
pub fn json_requested(args: impl IntoIterator<Item = std::ffi::OsString>) -> bool {
    args.into_iter()
        .skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "--json")
}

/// Writes `args` to stdout and flushes: the error of a closed stdout comes back ([`is_gone`]).
pub fn write_stdout(args: std::fmt::Arguments<'_>) -> io::Result<()> {
    let mut lock = io::stdout().lock();
    lock.write_fmt(args)
        .and_then(|()| lock.flush())
        .map_err(|e| noted(Stream::Stdout, e))
}

/// Writes `args` to stderr; a failure is dropped (a closed stderr is marked gone).
pub fn write_stderr(args: std::fmt::Arguments<'_>) {
    let mut lock = io::stderr().lock();
    if let Err(e) = lock.write_fmt(args).and_then(|()| lock.flush()) {
        noted(Stream::Stderr, e);
    }
}

/// `print!` through [`write_stdout`]: an `io::Result<()>`.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!($($arg)*))
    };
}
pub(crate) use out;

/// `println!` through [`write_stdout`]: an `io::Result<()>`.
macro_rules! outln {
    () => {
        $crate::output::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}
pub(crate) use outln;

/// `eprintln!` through [`write_stderr`]: never fails, never panics.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::output::write_stderr(format_args!("{}\n", format_args!($($arg)*)))
    };
}
pub(crate) use errln;

/// Stdout as a writer (for code that takes one): a closed stdout's error comes back.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stdout;

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        io::stdout()
            .lock()
            .write(buf)
            .map_err(|e| noted(Stream::Stdout, e))
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stdout()
            .lock()
            .flush()
            .map_err(|e| noted(Stream::Stdout, e))
    }
}

/// Stderr as a writer (the log's): a closed stderr is marked gone, and its error comes back to
/// the caller, which drops it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stderr;

impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        io::stderr()
            .lock()
            .write(buf)
            .map_err(|e| noted(Stream::Stderr, e))
    }

    fn flush(&mut self) -> io::Result<()> {
        io::stderr()
            .lock()
            .flush()
            .map_err(|e| noted(Stream::Stderr, e))
    }
}

/// Prints clap's message (help, version, a usage error) and says how `pitcrew` exits: clap's
/// code, or [`GONE_EXIT`] when the output it went to is closed.
pub fn clap_exit(err: &clap::Error) -> u8 {
    let stream = if err.use_stderr() {
        Stream::Stderr
    } else {
        Stream::Stdout
    };
    match err.print() {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
            mark_gone(stream);
            GONE_EXIT
        }
        _ => u8::try_from(err.exit_code()).unwrap_or(2),
    }
}

/// [`clap_exit`] for a command line that asked for `--json`: a usage error (not help or the
/// version) also prints its [`json_error`] object on stdout.
pub fn clap_exit_json(err: &clap::Error) -> u8 {
    let code = clap_exit(err);
    if err.use_stderr() && code != GONE_EXIT {
        let rendered = err.render().to_string();
        let message = rendered
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or_default()
            .trim_start_matches("error: ")
            .to_string();
        // A closed stdout is marked gone by the write; the exit code says so.
        if write_stdout(format_args!(
            "{}\n",
            json_error(&message, FailureKind::Usage, code, None)
        ))
        .is_err()
        {
            return GONE_EXIT;
        }
    }
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_pipe_is_recognised_through_context_and_other_errors_are_not() {
        let closed = anyhow::Error::from(io::Error::new(
            io::ErrorKind::BrokenPipe,
            Closed(Stream::Stdout),
        ))
        .context("cannot write to stdout");
        assert!(is_gone(&closed));
        // A broken pipe of something else (the transport to a sandbox) is a failure to report.
        let transport = anyhow::Error::from(io::Error::from(io::ErrorKind::BrokenPipe))
            .context("sandbox pc-1: send");
        assert!(!is_gone(&transport));
        assert!(!is_gone(&anyhow::anyhow!("stdout is closed")));
    }
}
