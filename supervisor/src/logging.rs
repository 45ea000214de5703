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
