//! The protocol frame decoders (`pitcrew_core::protocol`) on an arbitrary byte stream.
//!
//! The blocking reader (`read_frame`, fed one to a few bytes per `read` with an `Interrupted`
//! now and then) and the incremental decoder (`FrameDecoder`, fed in uneven chunks) must decode
//! the same frames and stop at the same point for the same reason; every decoded frame
//! re-encodes to exactly the bytes it was decoded from; a control payload that parses as a
//! `Request` re-encodes and re-parses to the same request, and one that parses as a `Response`
//! re-parses (to the same value when it holds no floating-point number, which JSON does not
//! round-trip exactly).

#![no_main]

use libfuzzer_sys::fuzz_target;
use pitcrew_core::protocol::{
    read_frame, Frame, FrameDecoder, FrameError, FrameKind, Request, Response, HEADER_LEN,
};
use std::io::{self, Read};

/// A reader that hands out at most a few bytes per call and interrupts itself now and then.
struct Trickle<'a> {
    data: &'a [u8],
    calls: usize,
}

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.calls += 1;
        if self.calls.is_multiple_of(7) {
            return Err(io::Error::from(io::ErrorKind::Interrupted));
        }
        let n = (self.calls % 5 + 1).min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

/// How a decoder stopped.
#[derive(Debug, PartialEq, Eq)]
enum Stop {
    /// At a frame boundary, at the end of the stream.
    Clean,
    /// Inside a frame, at the end of the stream.
    Truncated,
    /// On a header error (unknown kind, bad channel, oversized).
    BadHeader(String),
}

fn header_error(e: &FrameError) -> Stop {
    assert!(
        matches!(
            e,
            FrameError::UnknownKind(_) | FrameError::BadChannel(_) | FrameError::Oversized { .. }
        ),
        "unexpected decoder error {e:?}"
    );
    assert!(!e.stream_usable());
    Stop::BadHeader(e.to_string())
}

fn with_reader(data: &[u8]) -> (Vec<Frame>, Stop) {
    let mut r = Trickle { data, calls: 0 };
    let mut frames = Vec::new();
    loop {
        match read_frame(&mut r) {
            Ok(Some(f)) => frames.push(f),
            Ok(None) => return (frames, Stop::Clean),
            Err(FrameError::Truncated { got, want }) => {
                assert!(got < want);
                return (frames, Stop::Truncated);
            }
            Err(e) => return (frames, header_error(&e)),
        }
    }
}

fn with_decoder(data: &[u8]) -> (Vec<Frame>, Stop) {
    let mut dec = FrameDecoder::new();
    let mut frames = Vec::new();
    let mut rest = data;
    let mut step = 0;
    loop {
        match dec.next_frame() {
            Ok(Some(f)) => frames.push(f),
            Ok(None) if rest.is_empty() => {
                let stop = if dec.pending() == 0 {
                    Stop::Clean
                } else {
                    Stop::Truncated
                };
                return (frames, stop);
            }
            Ok(None) => {
                step += 1;
                let n = ((step * 37) % 4099 + 1).min(rest.len());
                dec.push(&rest[..n]);
                rest = &rest[n..];
            }
            Err(e) => return (frames, header_error(&e)),
        }
    }
}

/// Whether a JSON value holds a floating-point number anywhere.
fn has_float(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Number(n) => n.is_f64(),
        serde_json::Value::Array(a) => a.iter().any(has_float),
        serde_json::Value::Object(o) => o.values().any(has_float),
        _ => false,
    }
}

fn check_messages(frame: &Frame) {
    if frame.kind != FrameKind::Control {
        assert!(matches!(
            frame.json::<Request>(),
            Err(FrameError::NotControl)
        ));
        return;
    }
    if let Ok(request) = frame.json::<Request>() {
        let again = Frame::control(&request);
        let reparsed: Request = again.json().expect("an encoded request parses");
        assert_eq!(reparsed, request, "a request does not round-trip");
        assert_eq!(reparsed.id(), request.id());
    }
    if let Ok(response) = frame.json::<Response>() {
        let again = Frame::control(&response);
        let reparsed: Response = again.json().expect("an encoded response parses");
        let value = serde_json::to_value(&response).expect("a response serializes");
        if !has_float(&value) {
            assert_eq!(reparsed, response, "a response does not round-trip");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let (frames, stop) = with_reader(data);
    let (frames2, stop2) = with_decoder(data);
    assert_eq!(frames, frames2, "the two decoders disagree on the frames");
    assert_eq!(stop, stop2, "the two decoders stop differently");

    let mut at = 0;
    for frame in &frames {
        let bytes = frame.encode();
        assert!(bytes.len() >= HEADER_LEN);
        assert_eq!(
            &data[at..at + bytes.len()],
            &bytes[..],
            "a frame does not re-encode to its bytes"
        );
        at += bytes.len();
        check_messages(frame);
    }
    if stop == Stop::Clean {
        assert_eq!(at, data.len(), "a clean end left bytes over");
    }
});
