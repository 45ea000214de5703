//! Progress of `pitcrew run` for people, on stderr: a status line on a terminal (plain lines
//! otherwise, the transient ones only with `-v`), lines that stay for what happened, and with
//! `-v` the agent's own output, everything escaped for the terminal.

use crate::output::errln;
use crate::report::{escape_controls, EscapedStream};
use pitcrew_core::protocol::Channel;
use std::io::IsTerminal as _;
use std::sync::Mutex;

/// Progress for people: a status line on a terminal, plain lines otherwise. Everything it
/// prints is escaped for the terminal ([`escape_controls`]): messages quote the supervisor's
/// events, reasons and drifted names, and the agent's output is the agent's.
pub(super) struct Progress {
    bar: Option<indicatif::ProgressBar>,
    verbose: bool,
    /// `-q`: nothing but the agent's output with `-v` (which `-q` excludes) is shown.
    quiet: bool,
    /// The agent's stdout and stderr, each escaped as a stream.
    streams: Mutex<[EscapedStream; 2]>,
}

impl Progress {
    /// A display on stderr; with `verbose` (`-v`) the status is printed even off a terminal;
    /// with `quiet` (`-q`) nothing is.
    pub(super) fn new(verbose: bool, quiet: bool) -> Progress {
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let b = indicatif::ProgressBar::new_spinner();
            b.enable_steady_tick(std::time::Duration::from_millis(120));
            b
        });
        Progress {
            bar,
            verbose,
            quiet,
            streams: Mutex::default(),
        }
    }

    /// A line that stays.
    pub(super) fn line(&self, msg: &str) {
        if self.quiet {
            return;
        }
        let msg = escape_controls(msg);
        match &self.bar {
            Some(b) if !b.is_finished() => b.println(format!("pitcrew: {msg}")),
            _ => errln!("pitcrew: {msg}"),
        }
    }

    /// A warning: a line that stays, shown with `-q` too (something went wrong or is unsafe).
    pub(super) fn warn(&self, msg: &str) {
        let msg = escape_controls(msg);
        match &self.bar {
            Some(b) if !b.is_finished() => b.println(format!("pitcrew: {msg}")),
            _ => errln!("pitcrew: {msg}"),
        }
    }

    /// The current status: a transient status line on a terminal; otherwise a plain line with
    /// `-v` only (the lines that stay say what happened).
    pub(super) fn status(&self, msg: &str) {
        let msg = escape_controls(msg);
        match &self.bar {
            Some(b) => b.set_message(msg.into_owned()),
            None if self.verbose => errln!("pitcrew: {msg}"),
            None => {}
        }
    }

    /// Whether a status line is shown live (a terminal): only then is counting worth it.
    pub(super) fn live(&self) -> bool {
        self.bar.is_some()
    }

    /// The agent's output (only with `-v`), its lines kept and every other control escaped.
    pub(super) fn output(&self, channel: Channel, bytes: &[u8]) {
        let text = {
            let mut streams = self
                .streams
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let i = usize::from(matches!(channel, Channel::Stderr));
            streams[i].push(bytes)
        };
        if text.is_empty() {
            return;
        }
        let write = || crate::output::write_stderr(format_args!("{text}"));
        match &self.bar {
            Some(b) => b.suspend(write),
            None => write(),
        }
    }

    /// Ends the display: the agent's unfinished last lines, then the status line cleared.
    pub(super) fn finish(&self) {
        let tails: Vec<String> = self
            .streams
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter_mut()
            .map(EscapedStream::finish)
            .filter(|t| !t.is_empty())
            .collect();
        for t in tails {
            errln!("{t}");
        }
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// `what: 12.0 MiB of 48.0 MiB (25%)`, and the rate once a transfer has run a second.
pub(super) fn transfer(what: &str, done: u64, total: u64, elapsed: std::time::Duration) -> String {
    let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
    let mut s = format!("{what}: {:.1} MiB", mib(done));
    if total > 0 {
        s += &format!(
            " of {:.1} MiB ({}%)",
            mib(total),
            done.min(total) * 100 / total
        );
    }
    if elapsed >= std::time::Duration::from_secs(1) {
        s += &format!(", {:.1} MiB/s", mib(done) / elapsed.as_secs_f64());
    }
    s
}

#[cfg(test)]
mod tests {
    use super::transfer;
    use std::time::Duration;

    #[test]
    fn a_transfer_says_bytes_percentage_and_then_its_rate() {
        assert_eq!(
            transfer("up", 3 << 20, 12 << 20, Duration::from_millis(500)),
            "up: 3.0 MiB of 12.0 MiB (25%)"
        );
        assert_eq!(
            transfer("up", 6 << 20, 12 << 20, Duration::from_secs(2)),
            "up: 6.0 MiB of 12.0 MiB (50%), 3.0 MiB/s"
        );
        assert_eq!(transfer("up", 1 << 20, 0, Duration::ZERO), "up: 1.0 MiB");
    }
}
