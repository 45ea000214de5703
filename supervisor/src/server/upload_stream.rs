//! The tar stream of an upload, unpacked by a thread of its own while its frames arrive (no
//! spool of the whole stream first): the poll loop hands each frame over a bounded channel, so
//! the transfer and the writes to disk overlap (and a zstd stream is decoded on the way), and a sender faster than the disk waits at most
//! [`IN_FLIGHT`] frames ahead. What the thread unpacks goes into a staging tree, swapped in only
//! once the stream is complete and every rule held ([`crate::unpack`]).

use super::error::RequestError;
use crate::unpack::UnpackError;
use std::io::{self, Read};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

/// Frames queued for the unpacking thread before the poll loop waits for it.
const IN_FLIGHT: usize = 8;

/// What the unpacking thread ends with: the `ok` detail, or why the upload is refused.
type Outcome = Result<serde_json::Value, UnpackError>;

/// One upload's stream and the thread unpacking it.
#[derive(Debug)]
pub(super) struct UploadStream {
    /// `None` once the thread stopped reading (it finished or refused the stream).
    frames: Option<SyncSender<Vec<u8>>>,
    worker: Option<JoinHandle<Outcome>>,
    /// The thread's `ok` detail, when it finished before the stream's end (the tar stream's end
    /// blocks came before the host's last frame).
    early: Option<serde_json::Value>,
}

impl Drop for UploadStream {
    /// An upload abandoned (its connection went away, a budget was exceeded): the thread sees
    /// the stream end without its marker, removes its staging tree and is joined here, so no
    /// thread outlives its upload (the agent is forked only with the poll loop's thread alive).
    fn drop(&mut self) {
        self.frames = None;
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

impl UploadStream {
    /// Starts the thread that runs `unpack` on the stream's bytes (decompressed first with
    /// `zstd`: one zstd frame, decoded as it arrives).
    pub fn start(
        zstd: bool,
        unpack: impl FnOnce(&mut dyn Read) -> Outcome + Send + 'static,
    ) -> Result<UploadStream, RequestError> {
        let (tx, rx) = sync_channel(IN_FLIGHT);
        let worker = std::thread::Builder::new()
            .name("upload".into())
            .spawn(move || {
                let mut frames = FrameReader::new(rx);
                if !zstd {
                    return unpack(&mut frames);
                }
                match ruzstd::decoding::StreamingDecoder::new(&mut frames) {
                    Ok(mut decoder) => unpack(&mut decoder),
                    Err(e) => Err(UnpackError::Format(format!("zstd: {e}"))),
                }
            })
            .map_err(|e| RequestError::Internal(format!("upload: no unpacking thread: {e}")))?;
        Ok(UploadStream {
            frames: Some(tx),
            worker: Some(worker),
            early: None,
        })
    }

    /// Hands one frame's bytes (never empty: the empty frame is [`Self::finish`]) to the thread. A refusal the thread already reached is returned
    /// (the rest of the stream is then drained); once it finished reading, bytes are dropped.
    pub fn push(&mut self, bytes: Vec<u8>) -> Result<(), RequestError> {
        let Some(tx) = &self.frames else {
            return Ok(());
        };
        if tx.send(bytes).is_ok() {
            return Ok(());
        }
        // The thread stopped reading: its outcome says whether that was a refusal.
        self.frames = None;
        self.early = Some(self.join()?);
        Ok(())
    }

    /// Ends the stream and waits for the thread's outcome.
    pub fn finish(mut self) -> Result<serde_json::Value, RequestError> {
        // The end marker: a stream whose sender is dropped without it (the connection went away,
        // a budget was exceeded) is abandoned, never taken as complete.
        if let Some(tx) = self.frames.take() {
            let _ = tx.send(Vec::new());
        }
        match self.early.take() {
            Some(detail) => Ok(detail),
            None => self.join(),
        }
    }

    fn join(&mut self) -> Result<serde_json::Value, RequestError> {
        let Some(worker) = self.worker.take() else {
            return Err(RequestError::Internal(
                "upload: the stream was already ended".into(),
            ));
        };
        match worker.join() {
            Ok(outcome) => outcome.map_err(RequestError::from),
            Err(_) => Err(RequestError::Internal(
                "upload: the unpacking thread panicked".into(),
            )),
        }
    }
}

/// The stream's bytes as the thread reads them: frames from the channel up to the empty end
/// marker. A sender dropped before the marker is an error, so the unpack removes its staging
/// tree instead of taking a cut stream for a whole one.
struct FrameReader {
    frames: Receiver<Vec<u8>>,
    chunk: Vec<u8>,
    pos: usize,
    ended: bool,
}

impl FrameReader {
    fn new(frames: Receiver<Vec<u8>>) -> FrameReader {
        FrameReader {
            frames,
            chunk: Vec::new(),
            pos: 0,
            ended: false,
        }
    }
}

impl Read for FrameReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.chunk.len() {
            if self.ended {
                return Ok(0);
            }
            match self.frames.recv() {
                Ok(chunk) if chunk.is_empty() => self.ended = true,
                Ok(chunk) => {
                    self.chunk = chunk;
                    self.pos = 0;
                }
                Err(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the upload was abandoned before its end",
                    ))
                }
            }
        }
        let n = out.len().min(self.chunk.len() - self.pos);
        out[..n].copy_from_slice(&self.chunk[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}
