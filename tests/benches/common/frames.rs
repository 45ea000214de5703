//! Data frames on one channel for the benchmarks that drive `pitcrew-init serve --stdio`
//! directly, counting the payload bytes sent.

use pitcrew_core::protocol::{write_frame, Channel, Frame};
use std::io::Write;

/// The host client's data frame size.
pub const DATA_FRAME: usize = pitcrew_core::protocol::MAX_PAYLOAD / 4;

/// A `Write` that cuts what it is given into data frames of [`DATA_FRAME`] bytes on `channel`.
pub struct FrameSink<'a, W: Write> {
    w: &'a mut W,
    channel: Channel,
    buf: Vec<u8>,
    sent: u64,
}

impl<'a, W: Write> FrameSink<'a, W> {
    /// Frames on `channel` written to `w`.
    pub fn new(w: &'a mut W, channel: Channel) -> Self {
        FrameSink {
            w,
            channel,
            buf: Vec::with_capacity(DATA_FRAME),
            sent: 0,
        }
    }

    fn frame(&mut self) {
        let payload = std::mem::replace(&mut self.buf, Vec::with_capacity(DATA_FRAME));
        self.sent += payload.len() as u64;
        write_frame(self.w, &Frame::data(self.channel, payload)).unwrap();
    }

    /// Sends what is buffered and the empty end-of-stream frame; the payload bytes sent.
    pub fn finish(mut self) -> u64 {
        if !self.buf.is_empty() {
            self.frame();
        }
        self.frame();
        self.w.flush().unwrap();
        self.sent
    }
}

impl<W: Write> Write for FrameSink<'_, W> {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let n = data.len().min(DATA_FRAME - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == DATA_FRAME {
            self.frame();
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
