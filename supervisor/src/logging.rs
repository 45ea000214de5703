//! Log setup shared by both binaries: quiet by default, `-v`/`RUST_LOG` for more, always on
//! stderr (never on the agent's or a command's stdout).

use tracing_subscriber::EnvFilter;

/// Installs the stderr logger. `verbosity` counts `-v` flags; `RUST_LOG` wins when set.
pub fn init(verbosity: u8) {
    let default = match verbosity {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    // A second call (tests) keeps the first subscriber.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

/// Restores the default `SIGPIPE` disposition for a command-line tool, so `pitcrew … | head`
/// ends quietly instead of failing on a broken pipe. Not for PID 1 duties (the supervisor's
/// signal handling owns every disposition there).
pub fn restore_default_sigpipe() {
    #[cfg(unix)]
    // SAFETY: called at the start of `main`, before any thread exists; `signal` with `SIG_DFL`
    // only changes this process's disposition for SIGPIPE and touches no memory.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
