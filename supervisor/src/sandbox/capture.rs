//! The agent's stdout and stderr, captured by the supervisor.
//!
//! The agent never holds the record files. Its fd 1 and fd 2 are one end of a Unix stream
//! socket pair; the supervisor holds the other end and copies what arrives into the record files
//! (root-owned, opened by the supervisor alone). So:
//!
//! - what was streamed stays streamed: a socket cannot be truncated, seeked or rewritten
//!   (`ftruncate`, `lseek` and `pwrite` on fd 1 fail), and the file behind it is out of reach;
//! - a process of the agent cannot take the stream over: a socket cannot be reopened through
//!   `/proc/<pid>/fd/1` (`ENXIO`), and `pidfd_getfd`/`ptrace` are refused to the agent's tree
//!   by its seccomp filter ([`super::seccomp`]);
//! - the record is complete when the judge reads it: after the agent's final reap every holder of
//!   the sending end is gone, so [`OutputCapture::finish`] reads to end of stream and the judge
//!   sees exactly what the agent's processes wrote while they ran.
//!
//! Each stream keeps at most [`STREAM_CAP`] bytes (less with a disk budget:
//! [`OutputCapture::limit_to`]); what arrives beyond it is read and discarded (so the agent never
//! blocks on a full socket) and counted in [`StreamReport::dropped`].

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

/// Most bytes kept per stream and iteration (1 GiB); more is read and counted, not kept.
pub const STREAM_CAP: u64 = 1 << 30;

/// Bytes read per [`OutputCapture::pump`] call and stream while the agent runs (1 MiB), so a
/// flood of output cannot keep the wait loop from its signals, timeout and host requests.
pub const PUMP_BUDGET: u64 = 1 << 20;

const CHUNK: usize = 64 * 1024;

/// Which stream of the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamName {
    /// fd 1.
    Stdout,
    /// fd 2.
    Stderr,
    /// fd 1 and fd 2 into one file.
    Both,
}

/// One captured stream: the supervisor's end of the socket pair and the record file.
#[derive(Debug)]
struct Stream {
    name: StreamName,
    socket: OwnedFd,
    file: File,
    kept: u64,
    /// Most bytes kept.
    cap: u64,
    dropped: u64,
    eof: bool,
    /// A write to the record file failed (the disk is full, …): the rest is counted as dropped.
    write_error: Option<String>,
}

/// What became of one stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamReport {
    /// Which stream.
    pub name: StreamName,
    /// Bytes written to the record file.
    pub kept: u64,
    /// Bytes read beyond [`STREAM_CAP`] or after a write error, not kept.
    pub dropped: u64,
    /// The end of the stream was reached (every sending end closed).
    pub complete: bool,
    /// Why writing the record file stopped, if it did.
    pub write_error: Option<String>,
}

/// The agent's end of a stream, to become its fd 1 and/or fd 2.
#[derive(Debug)]
pub struct AgentEnd {
    /// The socket.
    pub fd: OwnedFd,
    /// Which of the agent's fds it becomes.
    pub name: StreamName,
}

/// The supervisor's side of every captured stream of one agent.
#[derive(Debug, Default)]
pub struct OutputCapture {
    streams: Vec<Stream>,
}

/// A close-on-exec Unix stream socket pair: (supervisor end, agent end). The supervisor's end is
/// non-blocking and shut for writing, the agent's end shut for reading.
fn socket_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    use nix::sys::socket::{shutdown, socketpair, AddressFamily, Shutdown, SockFlag, SockType};
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
    )?;
    shutdown(ours.as_raw_fd(), Shutdown::Write)?;
    shutdown(theirs.as_raw_fd(), Shutdown::Read)?;
    // The agent's end blocks like a pipe would: a full socket makes the writer wait.
    let flags = nix::fcntl::fcntl(&theirs, nix::fcntl::FcntlArg::F_GETFL)?;
    let mut flags = nix::fcntl::OFlag::from_bits_truncate(flags);
    flags.remove(nix::fcntl::OFlag::O_NONBLOCK);
    nix::fcntl::fcntl(&theirs, nix::fcntl::FcntlArg::F_SETFL(flags))?;
    Ok((ours, theirs))
}

impl OutputCapture {
    /// Adds a stream captured into `file`; returns the agent's end.
    pub fn add(&mut self, name: StreamName, file: File) -> std::io::Result<AgentEnd> {
        let (ours, theirs) = socket_pair()?;
        self.streams.push(Stream {
            name,
            socket: ours,
            file,
            kept: 0,
            cap: STREAM_CAP,
            dropped: 0,
            eof: false,
            write_error: None,
        });
        Ok(AgentEnd { fd: theirs, name })
    }

    /// Keeps at most `cap` bytes of each stream (never more than [`STREAM_CAP`]): what the
    /// agent writes to its output lands on the records' disk, so a disk budget bounds it too.
    pub fn limit_to(&mut self, cap: u64) {
        for stream in &mut self.streams {
            stream.cap = cap.min(STREAM_CAP);
        }
    }

    /// The sockets still open, to poll for input.
    pub fn poll_fds(&self) -> Vec<BorrowedFd<'_>> {
        self.streams
            .iter()
            .filter(|s| !s.eof)
            .map(|s| s.socket.as_fd())
            .collect()
    }

    /// Copies what has arrived, at most `budget` bytes per stream; returns whether any stream
    /// had more waiting when its budget ran out.
    pub fn pump(&mut self, budget: u64) -> bool {
        let mut behind = false;
        for stream in &mut self.streams {
            behind |= stream.pump(budget);
        }
        behind
    }

    /// After the final reap: copies what is queued in the sockets and reports each stream. A
    /// stream whose every sending end is closed reaches its end (`complete`); one still held
    /// (by a process that survived the reap, or one outside the sandbox the agent passed its
    /// socket to) is read no further than what was queued plus one chunk, so a writer that
    /// never stops cannot hold the supervisor here.
    pub fn finish(&mut self) -> Vec<StreamReport> {
        for stream in &mut self.streams {
            let queued = queued_bytes(&stream.socket);
            stream.pump(queued);
            if !stream.eof {
                // End of stream, EAGAIN, or data that arrived since (then not complete).
                stream.pump(CHUNK as u64);
            }
            if let Err(err) = stream.file.flush() {
                stream.write_error.get_or_insert_with(|| err.to_string());
            }
        }
        self.reports()
    }

    /// What became of each stream so far.
    pub fn reports(&self) -> Vec<StreamReport> {
        self.streams
            .iter()
            .map(|s| StreamReport {
                name: s.name,
                kept: s.kept,
                dropped: s.dropped,
                complete: s.eof,
                write_error: s.write_error.clone(),
            })
            .collect()
    }
}

/// Bytes waiting in the receive queue of `socket` (`FIONREAD`); 0 when it cannot be read.
fn queued_bytes(socket: &OwnedFd) -> u64 {
    let mut queued: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int into `queued`, a live stack variable.
    let rc = unsafe { libc::ioctl(socket.as_raw_fd(), libc::FIONREAD, &mut queued) };
    if rc == 0 {
        u64::try_from(queued).unwrap_or(0)
    } else {
        0
    }
}

impl Stream {
    /// Reads at most `budget` bytes; true when more is waiting.
    fn pump(&mut self, budget: u64) -> bool {
        // On the heap, not the stack: the main thread's stack keeps every page it ever touched.
        let mut buf = vec![0u8; CHUNK];
        let mut left = budget;
        while !self.eof {
            if left == 0 {
                return true;
            }
            let want = usize::try_from(left).map_or(CHUNK, |l| l.min(CHUNK));
            match nix::unistd::read(&self.socket, &mut buf[..want]) {
                Ok(0) => self.eof = true,
                Ok(n) => {
                    left = left.saturating_sub(n as u64);
                    self.keep(&buf[..n]);
                }
                Err(nix::errno::Errno::EINTR) => {}
                Err(nix::errno::Errno::EAGAIN) => return false,
                Err(err) => {
                    // Not expected on a socket pair; stop reading rather than spin.
                    tracing::warn!("capture: {:?}: read: {err}", self.name);
                    self.eof = true;
                }
            }
        }
        false
    }

    fn keep(&mut self, bytes: &[u8]) {
        let room = self.cap.saturating_sub(self.kept);
        let take = usize::try_from(room).map_or(bytes.len(), |r| r.min(bytes.len()));
        let (kept, rest) = bytes.split_at(take);
        if self.write_error.is_none() && !kept.is_empty() {
            match self.file.write_all(kept) {
                Ok(()) => self.kept += kept.len() as u64,
                Err(err) => {
                    tracing::warn!("capture: {:?}: record file: {err}", self.name);
                    self.write_error = Some(err.to_string());
                    self.dropped += kept.len() as u64;
                }
            }
        } else {
            self.dropped += kept.len() as u64;
        }
        self.dropped += rest.len() as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek};

    fn write_all(fd: &OwnedFd, bytes: &[u8]) {
        let mut file = File::from(fd.try_clone().unwrap());
        file.write_all(bytes).unwrap();
    }

    #[test]
    fn what_the_agent_writes_reaches_the_file_and_ends_with_its_last_writer() {
        let mut capture = OutputCapture::default();
        let file = tempfile::tempfile().unwrap();
        let mut reader = file.try_clone().unwrap();
        let end = capture.add(StreamName::Stdout, file).unwrap();
        write_all(&end.fd, b"one\n");
        assert!(!capture.pump(PUMP_BUDGET));
        write_all(&end.fd, b"two\n");
        drop(end);
        let reports = capture.finish();
        assert_eq!(reports.len(), 1);
        assert_eq!(reports[0].kept, 8);
        assert!(reports[0].complete);
        assert!(capture.poll_fds().is_empty());
        let mut text = String::new();
        reader.rewind().unwrap();
        reader.read_to_string(&mut text).unwrap();
        assert_eq!(text, "one\ntwo\n");
    }

    #[test]
    fn the_agents_end_cannot_be_rewound_or_truncated() {
        let mut capture = OutputCapture::default();
        let end = capture
            .add(StreamName::Both, tempfile::tempfile().unwrap())
            .unwrap();
        let raw = end.fd.as_raw_fd();
        // SAFETY: plain syscalls on an fd this test owns.
        unsafe {
            assert_eq!(libc::ftruncate(raw, 0), -1);
            assert_eq!(libc::lseek(raw, 0, libc::SEEK_SET), -1);
            assert_eq!(libc::pwrite(raw, b"x".as_ptr().cast(), 1, 0), -1);
            let mut byte = 0u8;
            // The agent's end is shut for reading: nothing it could steal from the stream.
            assert_eq!(libc::read(raw, (&mut byte as *mut u8).cast(), 1), 0);
        }
    }

    #[test]
    fn a_writer_that_never_stops_cannot_hold_finish() {
        let mut capture = OutputCapture::default();
        let end = capture
            .add(StreamName::Stdout, tempfile::tempfile().unwrap())
            .unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = std::thread::spawn({
            let mut file = File::from(end.fd.try_clone().unwrap());
            let stop = stop.clone();
            move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = file.write_all(&[b'y'; CHUNK]);
                }
            }
        });
        std::thread::sleep(std::time::Duration::from_millis(20));
        let reports = capture.finish();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        drop(capture);
        let _ = writer.join();
        assert!(!reports[0].complete);
        assert!(reports[0].kept > 0);
        drop(end);
    }

    #[test]
    fn a_flood_is_read_in_budgets_and_a_held_end_does_not_hang_finish() {
        let mut capture = OutputCapture::default();
        let end = capture
            .add(StreamName::Stderr, tempfile::tempfile().unwrap())
            .unwrap();
        let writer = std::thread::spawn({
            let fd = end.fd.try_clone().unwrap();
            move || write_all(&fd, &vec![b'x'; 3 * CHUNK])
        });
        let mut reads = 0;
        while capture.reports()[0].kept < 3 * CHUNK as u64 {
            capture.pump(CHUNK as u64);
            reads += 1;
            assert!(reads < 10_000, "the capture never caught up");
            std::thread::yield_now();
        }
        writer.join().unwrap();
        // `end` is still open (a process that survived the reap): finish returns anyway.
        let reports = capture.finish();
        assert!(!reports[0].complete);
        assert_eq!(reports[0].kept, 3 * CHUNK as u64);
        drop(end);
    }

    #[test]
    fn bytes_past_the_cap_are_counted_not_kept() {
        let mut stream = Stream {
            name: StreamName::Stdout,
            socket: socket_pair().unwrap().0,
            file: tempfile::tempfile().unwrap(),
            kept: STREAM_CAP - 2,
            cap: STREAM_CAP,
            dropped: 0,
            eof: false,
            write_error: None,
        };
        stream.keep(b"abcde");
        assert_eq!((stream.kept, stream.dropped), (STREAM_CAP, 3));
    }
}
