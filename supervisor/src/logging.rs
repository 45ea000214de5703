//! Log setup shared by both binaries: quiet by default, `-v`/`RUST_LOG` for more, always on
//! stderr (never on the agent's or a command's stdout), coloured only on a terminal, and never
//! fatal: in a sandbox stderr is often a file on the disk the agent can fill, and PID 1 must
//! not die because a log line could not be written.

use std::io::IsTerminal as _;
use std::io::Write as _;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// Writes one line to stderr, prefixed `pitcrew-init: `, and ignores a failure to write it
/// (`eprintln!` panics then, and a panic in PID 1's panic hook aborts the sandbox). Every
/// message of the supervisor outside `tracing` goes through here.
pub fn line(args: std::fmt::Arguments<'_>) {
    let text = format!("pitcrew-init: {args}\n");
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}

/// [`line`] with `format!` arguments.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::logging::line(format_args!($($arg)*))
    };
}

/// Installs the stderr logger. `verbosity` counts `-v` flags; `RUST_LOG` wins when set and
/// valid: a level (`debug`), or targets with levels (`pitcrew_core=debug,info`). Parsed by
/// `Targets`, not the regex-based `EnvFilter`, whose regex engine would be in every sandbox's
/// `pitcrew-init`.
pub fn init(verbosity: u8, quiet: bool) {
    init_to(verbosity, quiet, std::io::stderr);
}

/// [`init`] with the log's lines written through `writer` (the host's, which notes a closed
/// stderr) instead of straight to stderr.
pub fn init_to<W>(verbosity: u8, quiet: bool, writer: W)
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let default = match verbosity {
        _ if quiet => "error",
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .and_then(|v| v.parse::<Targets>().ok())
        .or_else(|| default.parse::<Targets>().ok())
        .unwrap_or_default();
    // Colours only for a person at a terminal: a log file (a local sandbox's `supervisor.log`,
    // a container's log) or a pipe gets plain text.
    let ansi = colour_allowed(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
        std::env::var_os("TERM").as_deref(),
    );
    // A second call (tests) keeps the first subscriber. A line that cannot be written is
    // dropped: the subscriber's own report of it would go to the same stderr with `eprintln!`.
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .log_internal_errors(false)
                .with_ansi(ansi)
                .with_writer(writer)
                .with_target(false),
        )
        .with(filter)
        .try_init();
}

/// Whether the log may be coloured: stderr is a `terminal`, `NO_COLOR` is unset or empty
/// (no-color.org) and `TERM` is not `dumb`.
fn colour_allowed(
    terminal: bool,
    no_color: Option<&std::ffi::OsStr>,
    term: Option<&std::ffi::OsStr>,
) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty()) && term.is_none_or(|t| t != "dumb")
}

/// Restores the default `SIGPIPE` disposition for a command-line tool, so `pitcrew-init hash … |
/// head` ends quietly instead of failing on a broken pipe (the host's `pitcrew` handles `EPIPE`
/// itself instead). Not for PID 1 duties (the supervisor's
/// signal handling owns every disposition there).
pub fn restore_default_sigpipe() {
    #[cfg(unix)]
    // SAFETY: called at the start of `main`, before any thread exists; `signal` with `SIG_DFL`
    // only changes this process's disposition for SIGPIPE and touches no memory.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(test)]
mod tests {
    use super::colour_allowed;
    use std::ffi::OsStr;

    #[test]
    fn the_log_is_coloured_only_on_a_terminal_that_wants_colour() {
        assert!(colour_allowed(true, None, Some(OsStr::new("xterm"))));
        assert!(colour_allowed(true, Some(OsStr::new("")), None));
        // A file or a pipe (a sandbox's supervisor.log, a container's log).
        assert!(!colour_allowed(false, None, Some(OsStr::new("xterm"))));
        assert!(!colour_allowed(true, Some(OsStr::new("1")), None));
        assert!(!colour_allowed(true, None, Some(OsStr::new("dumb"))));
    }
}
