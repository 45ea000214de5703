//! Connections the host carries for the agent (feature `network`): the channel-5 payloads and
//! the flow control both sides keep.
//!
//! A data frame on [`super::Channel::Tunnel`] starts with the connection's id (4 bytes,
//! big-endian), then its bytes; a payload of the id alone says that side finished writing
//! (half close). Each side may have at most [`WINDOW`] bytes of a connection unacknowledged:
//! the receiver sends `tunnel_ack` once it wrote bytes to its socket, so neither side buffers
//! more than a window per connection and a slow socket never stalls the control stream.

/// Bytes of one connection a side may send before the other acknowledges them.
pub const WINDOW: u32 = 256 * 1024;

/// The most bytes of a connection one data frame carries (after the id).
pub const CHUNK: usize = 64 * 1024;

/// The most connections carried at once for one iteration.
pub const MAX_OPEN: usize = 64;

/// The most connection attempts one iteration may make; later ones are refused.
pub const MAX_ATTEMPTS: u32 = 4096;

/// A channel-5 payload: `conn`'s id, then `bytes` (empty: `conn`'s sender finished writing).
pub fn encode(conn: u32, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + bytes.len());
    out.extend_from_slice(&conn.to_be_bytes());
    out.extend_from_slice(bytes);
    out
}

/// The connection id and bytes of a channel-5 payload; `None` when it is shorter than the id.
pub fn decode(payload: &[u8]) -> Option<(u32, &[u8])> {
    let (id, rest) = payload.split_first_chunk::<4>()?;
    Some((u32::from_be_bytes(*id), rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_carry_the_id_first_and_an_id_alone_is_the_end() {
        let p = encode(0x0102_0304, b"hi");
        assert_eq!(p, [1, 2, 3, 4, b'h', b'i']);
        assert_eq!(decode(&p), Some((0x0102_0304, &b"hi"[..])));
        assert_eq!(decode(&encode(7, b"")), Some((7, &b""[..])));
        assert_eq!(decode(&[1, 2, 3]), None);
    }
}
