//! One control connection: non-blocking reads into a [`FrameDecoder`], bounded blocking writes.

use super::error::RequestError;
use crate::protocol::{Channel, Frame, FrameDecoder, Response};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long a write may wait for a slow peer before the connection is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Bytes read per wake-up.
const READ_CHUNK: usize = 64 * 1024;

/// An upload in progress on a connection.
#[derive(Debug)]
pub(super) enum Upload {
    /// No upload: data frames are out of order.
    Idle,
    /// The listing of an offered upload is arriving (channel 4).
    Offered {
        /// Correlation id of the `upload` request.
        id: u64,
        /// Destination.
        dest: PathBuf,
        /// Owner of the unpacked tree.
        owner: Option<(u32, u32)>,
        /// The tar stream that follows is zstd-compressed.
        zstd: bool,
        /// The listing so far (a recipe against `base` when the host named its listing).
        listing: Vec<u8>,
        /// Complete lines in it.
        lines: u64,
        /// The listing's digest, length and lines as the `upload` named them
        /// (`upload.listing_digest`): the listing rebuilt must be exactly that.
        named: Option<crate::protocol::ListingDigest>,
        /// The listing held for `dest` that `send_listing` offered as the base of a delta, and
        /// its chunks; `None` when the whole listing was asked for.
        base: Option<(Vec<u8>, Vec<std::ops::Range<usize>>)>,
    },
    /// Tar bytes are unpacked by a thread of the upload's own as they arrive.
    Receiving {
        /// Correlation id of the `upload` request.
        id: u64,
        /// Destination.
        dest: PathBuf,
        /// The stream and its unpacking thread.
        stream: super::upload_stream::UploadStream,
        /// Bytes received so far.
        bytes: u64,
        /// When the tar stream started.
        started: std::time::Instant,
        /// An offered upload's listing, kept for later uploads once the tree is in place
        /// (`held`); None for a plain upload.
        held: Option<super::held::HeldFile>,
    },
    /// The upload was refused: discard tar frames up to the empty one.
    Draining,
}

impl Upload {
    /// Whether an accepted upload's listing or tar stream is still arriving.
    pub fn in_progress(&self) -> bool {
        matches!(self, Upload::Offered { .. } | Upload::Receiving { .. })
    }
}

/// One connection.
#[derive(Debug)]
pub(super) struct Conn {
    /// Server-local id.
    pub id: u64,
    read: OwnedFd,
    write: OwnedFd,
    /// Received bytes not yet framed.
    pub decoder: FrameDecoder,
    /// `hello` was accepted.
    pub hello: bool,
    /// The upload state.
    pub upload: Upload,
    /// The peer closed its sending side.
    pub eof: bool,
    /// The connection must be closed (write failed, stream out of sync).
    pub dead: bool,
    /// The peer's pid in our PID namespace (0 or absent when outside it).
    pub peer_pid: Option<i32>,
    /// The peer carries the agent's connections (`claim` with `tunnel`).
    pub tunnel: bool,
}

fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    let flags = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFL).map_err(io::Error::from)?;
    let flags = nix::fcntl::OFlag::from_bits_retain(flags) | nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFL(flags)).map_err(io::Error::from)?;
    Ok(())
}

impl Conn {
    /// A connection reading from `read` and writing to `write` (the same socket twice, or the
    /// stdio pair); both are made non-blocking.
    pub fn new(id: u64, read: OwnedFd, write: OwnedFd, peer_pid: Option<i32>) -> io::Result<Conn> {
        set_nonblocking(read.as_fd())?;
        set_nonblocking(write.as_fd())?;
        Ok(Conn {
            id,
            read,
            write,
            decoder: FrameDecoder::new(),
            hello: false,
            upload: Upload::Idle,
            eof: false,
            dead: false,
            peer_pid,
            tunnel: false,
        })
    }

    /// The descriptor to poll for input.
    pub fn read_fd(&self) -> BorrowedFd<'_> {
        self.read.as_fd()
    }

    /// Reads what is available into the decoder; sets `eof` at end of stream.
    pub fn fill(&mut self) {
        let mut buf = vec![0u8; READ_CHUNK];
        match nix::unistd::read(&self.read, &mut buf) {
            Ok(0) => self.eof = true,
            Ok(n) => self.decoder.push(&buf[..n]),
            Err(nix::errno::Errno::EAGAIN) | Err(nix::errno::Errno::EINTR) => {}
            Err(err) => {
                tracing::debug!("conn {}: read: {err}", self.id);
                self.eof = true;
                self.dead = true;
            }
        }
    }

    /// Writes all of `bytes`, waiting for the peer at most [`WRITE_TIMEOUT`]; a failure marks
    /// the connection dead.
    pub fn write_bytes(&mut self, mut bytes: &[u8]) {
        if self.dead {
            return;
        }
        let deadline = Instant::now() + WRITE_TIMEOUT;
        while !bytes.is_empty() {
            match nix::unistd::write(&self.write, bytes) {
                Ok(n) => bytes = &bytes[n..],
                Err(nix::errno::Errno::EINTR) => {}
                Err(nix::errno::Errno::EAGAIN) => {
                    let now = Instant::now();
                    if now >= deadline {
                        tracing::warn!("conn {}: peer not reading; dropped", self.id);
                        self.dead = true;
                        return;
                    }
                    let wait = (deadline - now).min(Duration::from_millis(500));
                    let ms = u16::try_from(wait.as_millis()).unwrap_or(500).max(1);
                    let mut fds = [PollFd::new(self.write.as_fd(), PollFlags::POLLOUT)];
                    let _ = poll(&mut fds, PollTimeout::from(ms));
                }
                Err(err) => {
                    tracing::debug!("conn {}: write: {err}", self.id);
                    self.dead = true;
                    return;
                }
            }
        }
    }

    /// Sends a frame.
    pub fn send_frame(&mut self, frame: &Frame) {
        self.write_bytes(&frame.encode());
    }

    /// Sends a control response.
    pub fn send(&mut self, response: &Response) {
        self.send_frame(&Frame::control(response));
    }

    /// Answers request `id` with an `error` response.
    pub fn error(&mut self, id: u64, err: RequestError) {
        self.send(&err.to_response(id));
    }

    /// Sends a data frame.
    pub fn data(&mut self, channel: Channel, bytes: &[u8]) {
        self.send_frame(&Frame::data(channel, bytes.to_vec()));
    }

    /// The raw write descriptor (for logs).
    pub fn raw(&self) -> i32 {
        self.write.as_raw_fd()
    }
}

/// A `Write` that cuts what it is given into tar-channel data frames of at most 64 KiB.
pub(super) struct TarFrames<'a> {
    /// The connection.
    pub conn: &'a mut Conn,
    /// Bytes sent so far.
    pub bytes: u64,
    buf: Vec<u8>,
}

impl<'a> TarFrames<'a> {
    const CHUNK: usize = 64 * 1024;

    /// A writer on `conn`.
    pub fn new(conn: &'a mut Conn) -> TarFrames<'a> {
        TarFrames {
            conn,
            bytes: 0,
            buf: Vec::with_capacity(Self::CHUNK),
        }
    }

    fn flush_buf(&mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            self.conn.data(Channel::Tar, &self.buf);
            self.bytes += self.buf.len() as u64;
            self.buf.clear();
        }
        if self.conn.dead {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the connection is gone",
            ));
        }
        Ok(())
    }

    /// Flushes and sends the empty frame that ends the stream.
    pub fn end(mut self) -> io::Result<u64> {
        self.flush_buf()?;
        self.conn.data(Channel::Tar, &[]);
        Ok(self.bytes)
    }
}

impl io::Write for TarFrames<'_> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let room = Self::CHUNK - self.buf.len();
        let n = room.min(data.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == Self::CHUNK {
            self.flush_buf()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.flush_buf()
    }
}
