//! Unit tests of `protocol`.

use super::*;

#[test]
fn frames_round_trip_through_both_decoders() {
    let frames = vec![
        Frame::control(&Request::Run {
            id: 7,
            feedback: None,
        }),
        Frame::data(Channel::Stdout, b"hello\n".to_vec()),
        Frame::data(Channel::Tar, Vec::new()),
    ];
    let mut bytes = Vec::new();
    for f in &frames {
        write_frame(&mut bytes, f).unwrap();
    }
    let mut cursor = &bytes[..];
    for f in &frames {
        assert_eq!(read_frame(&mut cursor).unwrap().as_ref(), Some(f));
    }
    assert!(read_frame(&mut cursor).unwrap().is_none());

    let mut dec = FrameDecoder::new();
    let mut out = Vec::new();
    for b in &bytes {
        dec.push(std::slice::from_ref(b));
        while let Some(f) = dec.next_frame().unwrap() {
            out.push(f);
        }
    }
    assert_eq!(out, frames);
    assert_eq!(dec.pending(), 0);
    assert_eq!(
        out[0].json::<Request>().unwrap(),
        Request::Run {
            id: 7,
            feedback: None
        }
    );
}

/// Feeds `bytes` to `dec` in 64 KiB reads, as a connection does.
fn push_in_reads(dec: &mut FrameDecoder, bytes: &[u8]) {
    for chunk in bytes.chunks(64 * 1024) {
        dec.push(chunk);
    }
}

#[test]
fn a_large_frame_does_not_leave_its_buffer_behind() {
    let big = Frame::control(&"a listing ".repeat(200_000));
    let small = Frame::data(Channel::Tar, vec![1; 10]);
    let mut bytes = big.encode();
    bytes.extend_from_slice(&small.encode()[..8]);
    let mut dec = FrameDecoder::new();
    push_in_reads(&mut dec, &bytes);
    assert_eq!(dec.next_frame().unwrap(), Some(big));
    assert!(
        dec.buf.capacity() <= FrameDecoder::KEPT_CAPACITY,
        "{}",
        dec.buf.capacity()
    );
    // What followed the large frame is still there.
    dec.push(&small.encode()[8..]);
    assert_eq!(dec.next_frame().unwrap(), Some(small));
    assert_eq!(dec.pending(), 0);

    // A control frame under a data frame's size (a smaller listing part) is let go of too.
    let part = Frame::control(&"a listing ".repeat(60_000));
    push_in_reads(&mut dec, &part.encode());
    assert_eq!(dec.next_frame().unwrap(), Some(part));
    assert!(
        dec.buf.capacity() <= FrameDecoder::KEPT_CAPACITY,
        "{}",
        dec.buf.capacity()
    );
}

#[test]
fn bad_headers_oversize_and_truncation_are_errors() {
    let mut dec = FrameDecoder::new();
    dec.push(&[9, 0, 0, 0, 0, 0]);
    assert!(matches!(dec.next_frame(), Err(FrameError::UnknownKind(9))));

    let mut dec = FrameDecoder::new();
    dec.push(&[1, 3, 0, 0, 0, 0]);
    assert!(matches!(dec.next_frame(), Err(FrameError::BadChannel(3))));

    let mut dec = FrameDecoder::new();
    dec.push(&[2, 1, 0xff, 0xff, 0xff, 0xff]);
    let err = dec.next_frame().unwrap_err();
    assert!(matches!(
        err,
        FrameError::Oversized {
            limit: MAX_PAYLOAD,
            ..
        }
    ));
    assert!(!err.stream_usable());

    let mut dec = FrameDecoder::new();
    dec.push(&[1, 0, 0xff, 0xff, 0xff, 0xff]);
    assert!(matches!(
        dec.next_frame(),
        Err(FrameError::Oversized {
            limit: MAX_CONTROL_PAYLOAD,
            ..
        })
    ));
    let mut sink = Vec::new();
    let big = Frame::data(Channel::Tar, vec![0; MAX_PAYLOAD + 1]);
    assert!(write_frame(&mut sink, &big).is_err());
    assert!(sink.is_empty(), "nothing is written for an oversized frame");

    let bytes = Frame::data(Channel::Stdout, vec![1; 10]).encode();
    let mut cursor = &bytes[..8];
    assert!(matches!(
        read_frame(&mut cursor),
        Err(FrameError::Truncated { got: 2, want: 10 })
    ));
    let mut cursor = &bytes[..3];
    assert!(matches!(
        read_frame(&mut cursor),
        Err(FrameError::Truncated { .. })
    ));
}

#[test]
fn unknown_or_malformed_messages_do_not_parse() {
    let f = Frame {
        kind: FrameKind::Control,
        channel: Channel::Control,
        payload: br#"{"type":"launch_missiles","id":1}"#.to_vec(),
    };
    let err = f.json::<Request>().unwrap_err();
    assert!(err.stream_usable());
    let f = Frame {
        kind: FrameKind::Control,
        channel: Channel::Control,
        payload: b"{not json".to_vec(),
    };
    assert!(f.json::<Request>().is_err());
    let f = Frame::data(Channel::Stdout, b"{}".to_vec());
    assert!(matches!(f.json::<Request>(), Err(FrameError::NotControl)));
}

#[test]
fn the_end_is_kept_at_a_character_boundary() {
    let mut t = "abcdef".to_string();
    assert_eq!(keep_end(&mut t, 10), 0);
    assert_eq!(keep_end(&mut t, 4), 2);
    assert_eq!(t, "cdef");
    // "é" is two bytes: a cut inside it drops it whole.
    let mut t = "aébc".to_string();
    assert_eq!(keep_end(&mut t, 3), 3);
    assert_eq!(t, "bc");
}
