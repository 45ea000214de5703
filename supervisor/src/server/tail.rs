//! Following the running agent's output files and streaming them to the requester as data
//! frames, in bounded slices per wake-up and never past the per-iteration cap.

use super::{records, Server};
use crate::iteration::IterationObserver;
use crate::protocol::events::{EventDetail, OutputTruncated, Step, StepState};
use crate::protocol::Channel;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

/// Bytes of agent output read (and sent as one data frame) at a time.
const TAIL_CHUNK: usize = 64 * 1024;
/// Most bytes of one output stream sent per wake-up while the agent runs. Output that grows
/// faster is sent over the next wake-ups, which come without waiting,
/// so the wait loop keeps enforcing the timeout and serving `cancel`, signals and
/// connections in between.
pub(super) const TAIL_BUDGET: u64 = 1 << 20;
/// Most bytes of one output stream sent to the host per iteration: the same 1 GiB the record
/// keeps of it ([`records::STREAM_CAP_BYTES`], the capture's cap). Past it the stream stops
/// with an `output`/`truncated` event.
pub(super) const STREAM_CAP: u64 = records::STREAM_CAP_BYTES;

/// Follows one output file of the running agent.
#[derive(Debug)]
pub(super) struct Tail {
    path: PathBuf,
    channel: Channel,
    file: Option<File>,
    /// Bytes sent so far.
    sent: u64,
    /// Most bytes ever sent ([`STREAM_CAP`]).
    cap: u64,
    /// The cap was reached with more output behind it: nothing more is sent.
    truncated: bool,
}

/// What one [`Tail::pump`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pumped {
    /// Everything written so far was sent (or the stream was truncated earlier).
    CaughtUp,
    /// The budget ran out before the end of the file.
    Behind,
    /// The cap was reached now with more output behind it: the stream stops here.
    Truncated,
}

impl Tail {
    /// A tail of `path`, sent on `channel`; the file is opened once it exists.
    pub(super) fn new(path: PathBuf, channel: Channel) -> Tail {
        Tail {
            path,
            channel,
            file: None,
            sent: 0,
            cap: STREAM_CAP,
            truncated: false,
        }
    }

    /// At most `max` (and [`TAIL_CHUNK`]) new bytes (empty when none).
    fn next_chunk(&mut self, max: u64) -> Vec<u8> {
        if self.file.is_none() {
            self.file = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&self.path)
                .ok();
        }
        let Some(file) = self.file.as_mut() else {
            return Vec::new();
        };
        let len = usize::try_from(max).map_or(TAIL_CHUNK, |m| m.min(TAIL_CHUNK));
        let mut buf = vec![0u8; len];
        match file.read(&mut buf) {
            Ok(n) => {
                buf.truncate(n);
                buf
            }
            Err(_) => Vec::new(),
        }
    }

    /// Hands up to `budget` new bytes to `send`, in chunks, never more than `cap` in all.
    fn pump(&mut self, budget: u64, mut send: impl FnMut(Channel, &[u8])) -> Pumped {
        let mut left = budget;
        while !self.truncated {
            if self.sent >= self.cap {
                // Only output beyond the cap truncates the stream (one byte tells).
                if self.next_chunk(1).is_empty() {
                    return Pumped::CaughtUp;
                }
                self.truncated = true;
                return Pumped::Truncated;
            }
            if left == 0 {
                return Pumped::Behind;
            }
            let chunk = self.next_chunk(left.min(self.cap - self.sent));
            if chunk.is_empty() {
                return Pumped::CaughtUp;
            }
            let n = chunk.len() as u64;
            left -= n;
            self.sent += n;
            send(self.channel, &chunk);
        }
        Pumped::CaughtUp
    }
}

impl Server {
    /// Streams up to `budget` bytes of new agent output per stream to the requester (and
    /// advances the tails even without one). While the agent runs the budget is
    /// [`TAIL_BUDGET`]; once it has ended, [`STREAM_CAP`] (everything, up to the cap). A stream
    /// that reaches the cap gets an `output`/`truncated` event.
    pub(super) fn pump_tails(&mut self, budget: u64) {
        let Some(cur) = self.current.as_mut() else {
            return;
        };
        let mut conn = cur
            .conn
            .and_then(|id| self.conns.iter_mut().find(|c| c.id == id));
        let mut behind = false;
        let mut truncated = Vec::new();
        for tail in &mut cur.tails {
            let pumped = tail.pump(budget, |channel, chunk| {
                if let Some(c) = conn.as_mut() {
                    c.data(channel, chunk);
                }
            });
            match pumped {
                Pumped::CaughtUp => {}
                Pumped::Behind => behind = true,
                Pumped::Truncated => truncated.push((tail.channel, tail.sent)),
            }
        }
        cur.behind = behind;
        for (channel, bytes) in truncated {
            tracing::warn!("output: {channel:?} reached {bytes} bytes; no longer streamed");
            self.step(
                Step::Output,
                StepState::Truncated,
                EventDetail::of(&OutputTruncated { bytes, channel }),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::io::Write;

    /// Pumps `tail` once; the bytes it sent.
    fn pump(tail: &mut Tail, budget: u64) -> (Pumped, u64) {
        let mut sent = 0u64;
        let pumped = tail.pump(budget, |channel, chunk| {
            assert_eq!(channel, Channel::Stdout);
            assert!(chunk.len() <= TAIL_CHUNK);
            sent += chunk.len() as u64;
        });
        (pumped, sent)
    }

    #[test]
    fn a_tail_sends_at_most_its_budget_per_call() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("out");
        let file = File::create(&path).unwrap();
        // A sparse file far larger than anything pumped here costs nothing.
        file.set_len(1 << 40).unwrap();
        let mut tail = Tail::new(path, Channel::Stdout);
        assert_eq!(pump(&mut tail, TAIL_BUDGET), (Pumped::Behind, TAIL_BUDGET));
        assert_eq!(pump(&mut tail, 100), (Pumped::Behind, 100));
        assert_eq!(tail.sent, TAIL_BUDGET + 100);
    }

    #[test]
    fn a_tail_stops_at_its_cap_only_when_more_follows() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("out");
        let mut file = File::create(&path).unwrap();
        let mut tail = Tail::new(path, Channel::Stdout);
        tail.cap = 3 * TAIL_CHUNK as u64;
        // Nothing yet (the file may not even exist yet in real use).
        assert_eq!(pump(&mut tail, u64::MAX), (Pumped::CaughtUp, 0));
        // Exactly the cap: all of it is sent, nothing is truncated.
        file.write_all(&vec![b'x'; 3 * TAIL_CHUNK]).unwrap();
        assert_eq!(pump(&mut tail, u64::MAX), (Pumped::CaughtUp, tail.cap));
        assert_eq!(pump(&mut tail, u64::MAX), (Pumped::CaughtUp, 0));
        assert!(!tail.truncated);
        // One byte more: the stream is truncated, once, and stays quiet afterwards.
        file.write_all(b"y").unwrap();
        assert_eq!(pump(&mut tail, u64::MAX), (Pumped::Truncated, 0));
        assert!(tail.truncated);
        file.write_all(b"more").unwrap();
        assert_eq!(pump(&mut tail, u64::MAX), (Pumped::CaughtUp, 0));
        assert_eq!(tail.sent, tail.cap);
    }

    #[test]
    fn a_tail_under_its_cap_sends_everything() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("out");
        fs::write(&path, b"{\"hello\":1}\n").unwrap();
        let mut tail = Tail::new(path, Channel::Stdout);
        assert_eq!(pump(&mut tail, TAIL_BUDGET), (Pumped::CaughtUp, 12));
    }
}
