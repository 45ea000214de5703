//! Progress of `pitcrew run` for people, on stderr: a status line on a terminal (plain lines
//! otherwise, the transient ones only with `-v`), lines that stay for what happened, and with
//! `-v` the agent's own output, everything escaped for the terminal.

use crate::report::{escape_controls, EscapedStream};
use pitcrew_core::protocol::Channel;
use std::io::{IsTerminal as _, Write as _};
use std::sync::Mutex;

/// Progress for people: a status line on a terminal, plain lines otherwise. Everything it
/// prints is escaped for the terminal ([`escape_controls`]): messages quote the supervisor's
/// events, reasons and drifted names, and the agent's output is the agent's.
pub(super) struct Progress {
    bar: Option<indicatif::ProgressBar>,
    verbose: bool,
    /// The agent's stdout and stderr, each escaped as a stream.
    streams: Mutex<[EscapedStream; 2]>,
}

impl Progress {
    /// A display on stderr; with `verbose` (`-v`) the status is printed even off a terminal.
    pub(super) fn new(verbose: bool) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = indicatif::ProgressBar::new_spinner();
            b.enable_steady_tick(std::time::Duration::from_millis(120));
            b
        });
        Progress {
            bar,
            verbose,
            streams: Mutex::default(),
        }
    }

    /// A line that stays.
    pub(super) fn line(&self, msg: &str) {
        let msg = escape_controls(msg);
        match &self.bar {
            Some(b) => b.println(format!("pitcrew: {msg}")),
            None => eprintln!("pitcrew: {msg}"),
        }
    }

    /// The current status: a transient status line on a terminal; otherwise a plain line with
    /// `-v` only (the lines that stay say what happened).
    pub(super) fn status(&self, msg: &str) {
        let msg = escape_controls(msg);
        match &self.bar {
            Some(b) => b.set_message(msg.into_owned()),
            None if self.verbose => eprintln!("pitcrew: {msg}"),
            None => {}
        }
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
        let write = || {
            let mut e = std::io::stderr().lock();
            let _ = e.write_all(text.as_bytes());
            let _ = e.flush();
        };
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
            eprintln!("{t}");
        }
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}
