//! The TLS ClientHello server-name reader (`pitcrew_core::egress::sni::server_name`) on
//! arbitrary bytes: the first bytes a client in the sandbox sends through a tunnel.
//!
//! Invariants: it never panics; a name holds only host-name characters and matches itself;
//! input as long as the cap never asks for more; an answer other than "incomplete" does not
//! change when more bytes follow, and every prefix of the input is either incomplete or gives
//! that same answer; a ClientHello carried in one record gives the same answer carried in
//! smaller records (unless those no longer fit under the cap).

#![no_main]

use libfuzzer_sys::fuzz_target;
use pitcrew_core::egress::sni::{names_match, server_name, SniError, MAX_CLIENT_HELLO_BYTES};

/// The payload of `data`'s first record carried again in records of `size` bytes.
fn fragmented(data: &[u8], size: usize) -> Option<Vec<u8>> {
    let len = usize::from(*data.get(3)?) << 8 | usize::from(*data.get(4)?);
    let payload = data.get(5..5 + len)?;
    let mut out = Vec::new();
    for chunk in payload.chunks(size) {
        out.extend_from_slice(&data[..3]);
        out.extend_from_slice(&u16::try_from(chunk.len()).ok()?.to_be_bytes());
        out.extend_from_slice(chunk);
    }
    out.extend_from_slice(&data[5 + len..]);
    Some(out)
}

fuzz_target!(|data: &[u8]| {
    let answer = server_name(data);
    if let Ok(Some(name)) = &answer {
        assert!(!name.is_empty() && name.len() <= 254);
        assert!(name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)));
        assert!(names_match(name, name));
    }
    if data.len() >= MAX_CLIENT_HELLO_BYTES {
        assert_ne!(answer, Err(SniError::Incomplete), "incomplete past the cap");
    }
    if answer == Err(SniError::Incomplete) {
        return;
    }
    let mut longer = data.to_vec();
    longer.extend_from_slice(&[0x16, 3, 3, 0, 1, 0]);
    assert_eq!(
        server_name(&longer),
        answer,
        "bytes after the answer changed it"
    );
    for cut in [data.len() / 2, data.len().saturating_sub(1)] {
        let prefix = server_name(&data[..cut]);
        assert!(
            prefix == Err(SniError::Incomplete) || prefix == answer,
            "a prefix of {cut} bytes answered {prefix:?}, the whole {answer:?}"
        );
    }
    if answer.is_ok() {
        let size = usize::from(data.last().copied().unwrap_or(0) % 64) + 1;
        if let Some(records) = fragmented(data, size) {
            let again = server_name(&records);
            assert!(
                again == answer || again == Err(SniError::TooLarge),
                "in records of {size}: {again:?}, in one: {answer:?}"
            );
        }
    }
});
