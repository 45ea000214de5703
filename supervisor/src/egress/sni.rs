//! The server name (SNI) a TLS ClientHello asks for, read from the first bytes a client sends.
//!
//! A tunnel pitcrew carries to an allowed name must carry TLS to that name, not to another
//! host served from the same address: the proxy compares the ClientHello's `server_name` with
//! the host of the `CONNECT` ([`names_match`]). TLS stays end to end; this reads the one
//! cleartext message that names the server, never anything encrypted.
//!
//! [`server_name`] is pure and bounded: it looks at no more than [`MAX_CLIENT_HELLO_BYTES`]
//! of its input, allocates nothing but the name it returns, and never panics. It reads the
//! whole ClientHello (a handshake message that may span several records), every length
//! checked against the one that encloses it, and refuses what two parsers could read
//! differently: two `server_name` extensions, a name list with more than one entry or an
//! entry of a type other than `host_name`, a name holding a character no host name holds, a
//! record of another type inside the ClientHello. A client using Encrypted Client Hello sends
//! its real name encrypted and a public name in the clear; the proxy sees only the public one.

use thiserror::Error;

/// The most bytes the ClientHello's records may take, headers included: past it the answer is
/// [`SniError::TooLarge`], so a caller that has read this many bytes never hears
/// [`SniError::Incomplete`].
pub const MAX_CLIENT_HELLO_BYTES: usize = 16 * 1024;

/// A TLS record carrying handshake messages.
const RECORD_HANDSHAKE: u8 = 0x16;
/// The length of a TLS record header (type, version, length).
const RECORD_HEADER_LEN: usize = 5;
/// The longest plaintext record payload TLS allows (2^14).
const MAX_RECORD_PAYLOAD: usize = 1 << 14;
/// The handshake message type of a ClientHello.
const HANDSHAKE_CLIENT_HELLO: u8 = 1;
/// The length of a handshake message header (type, 24-bit length).
const HANDSHAKE_HEADER_LEN: usize = 4;
/// The `server_name` extension (RFC 6066).
const EXTENSION_SERVER_NAME: u16 = 0;
/// The one name type `server_name` defines.
const NAME_TYPE_HOST_NAME: u8 = 0;
/// The longest name accepted: a DNS name's 253 characters and a trailing dot.
const MAX_NAME_LEN: usize = 254;
/// The longest legacy session id (TLS 1.2 and 1.3).
const MAX_SESSION_ID_LEN: usize = 32;

/// Why no server name could be read (yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum SniError {
    /// The bytes end before the ClientHello does: read more (the whole ClientHello fits in
    /// [`MAX_CLIENT_HELLO_BYTES`]) and ask again with everything read so far.
    #[error("the ClientHello is not complete yet")]
    Incomplete,
    /// The first byte is not that of a TLS handshake record: the client does not speak TLS.
    #[error("not TLS: the first byte is {0:#04x}, not a handshake record's (0x16)")]
    NotTls(u8),
    /// The ClientHello, with its record headers, takes more than [`MAX_CLIENT_HELLO_BYTES`].
    #[error("the ClientHello takes more than {MAX_CLIENT_HELLO_BYTES} bytes")]
    TooLarge,
    /// The bytes start as TLS but are not a ClientHello this parser reads as every server
    /// would; the reason says where.
    #[error("malformed ClientHello: {0}")]
    Malformed(&'static str),
}

/// The server name the ClientHello at the start of `first_bytes` asks for: `Ok(None)` when it
/// carries no `server_name` extension (a client connecting to an address literal), the name
/// as the client wrote it otherwise (ASCII letters, digits, `-`, `_` and `.`; compare it with
/// [`names_match`]). Bytes after the ClientHello are ignored.
pub fn server_name(first_bytes: &[u8]) -> Result<Option<String>, SniError> {
    let mut records = Records::new(first_bytes);
    if records.byte()? != HANDSHAKE_CLIENT_HELLO {
        return Err(SniError::Malformed(
            "the first handshake message is not a ClientHello",
        ));
    }
    let len = records.u24()?;
    if RECORD_HEADER_LEN + HANDSHAKE_HEADER_LEN + len > MAX_CLIENT_HELLO_BYTES {
        return Err(SniError::TooLarge);
    }
    let mut hello = Message {
        end: records.consumed + len,
        records,
    };
    read_hello(&mut hello)
}

/// Whether a ClientHello's server name names the host a `CONNECT` asked for: ASCII case is
/// ignored, and so is one trailing dot on either side.
pub fn names_match(server_name: &str, connect_host: &str) -> bool {
    let (a, b) = (
        without_root_dot(server_name),
        without_root_dot(connect_host),
    );
    !a.is_empty() && a.eq_ignore_ascii_case(b)
}

/// `name` without one trailing dot.
fn without_root_dot(name: &str) -> &str {
    name.strip_suffix('.').unwrap_or(name)
}

/// The ClientHello's body, from its legacy version to the end of its extensions.
fn read_hello(hello: &mut Message<'_>) -> Result<Option<String>, SniError> {
    let (major, _minor) = (hello.byte()?, hello.byte()?);
    if major != 3 {
        return Err(SniError::Malformed(
            "the ClientHello's version is not TLS's (3.x)",
        ));
    }
    hello.skip(32)?; // random
    let session_id = usize::from(hello.byte()?);
    if session_id > MAX_SESSION_ID_LEN {
        return Err(SniError::Malformed("a session id longer than 32 bytes"));
    }
    hello.skip(session_id)?;
    let suites = hello.u16()?;
    if suites < 2 || suites % 2 != 0 {
        return Err(SniError::Malformed(
            "the cipher suites' length is not a positive even number",
        ));
    }
    hello.skip(suites)?;
    let compressions = usize::from(hello.byte()?);
    if compressions == 0 {
        return Err(SniError::Malformed("no compression method"));
    }
    hello.skip(compressions)?;
    if hello.left() == 0 {
        return Ok(None); // a ClientHello without extensions
    }
    let extensions = hello.u16()?;
    if extensions != hello.left() {
        return Err(SniError::Malformed(
            "the extensions' length disagrees with the ClientHello's",
        ));
    }
    let mut name = None;
    while hello.left() > 0 {
        let kind = hello.u16()?;
        let len = hello.u16()?;
        if len > hello.left() {
            return Err(SniError::Malformed(
                "an extension runs past the end of the ClientHello",
            ));
        }
        if kind == usize::from(EXTENSION_SERVER_NAME) {
            if name.is_some() {
                return Err(SniError::Malformed("two server_name extensions"));
            }
            name = Some(read_server_name(hello, len)?);
        } else {
            hello.skip(len)?;
        }
    }
    Ok(name)
}

/// The `server_name` extension's body of `len` bytes: a list of exactly one `host_name`.
fn read_server_name(hello: &mut Message<'_>, len: usize) -> Result<String, SniError> {
    if len < 2 {
        return Err(SniError::Malformed("an empty server_name extension"));
    }
    let list = hello.u16()?;
    if list + 2 != len {
        return Err(SniError::Malformed(
            "the server name list's length disagrees with its extension's",
        ));
    }
    if list < 3 {
        return Err(SniError::Malformed("an empty server name list"));
    }
    if hello.byte()? != NAME_TYPE_HOST_NAME {
        return Err(SniError::Malformed("a server name that is not a host name"));
    }
    let name_len = hello.u16()?;
    if name_len + 3 < list {
        return Err(SniError::Malformed("more than one server name"));
    }
    if name_len + 3 > list {
        return Err(SniError::Malformed(
            "the server name runs past the end of its list",
        ));
    }
    if name_len == 0 || name_len > MAX_NAME_LEN {
        return Err(SniError::Malformed(
            "a server name that is empty or longer than 254 bytes",
        ));
    }
    let mut name = String::with_capacity(name_len);
    for _ in 0..name_len {
        let b = hello.byte()?;
        if !(b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.') {
            return Err(SniError::Malformed(
                "a server name holding a character no host name holds",
            ));
        }
        name.push(char::from(b));
    }
    if name.starts_with('.') || name.contains("..") {
        return Err(SniError::Malformed("a server name with an empty label"));
    }
    Ok(name)
}

/// The handshake bytes carried by the handshake records at the start of the input, read in
/// order across record boundaries.
struct Records<'a> {
    /// Everything the client sent so far.
    input: &'a [u8],
    /// The index in `input` of the next byte to read (a record header or payload byte).
    pos: usize,
    /// The payload bytes left in the current record.
    record_left: usize,
    /// The handshake bytes read so far.
    consumed: usize,
}

impl<'a> Records<'a> {
    fn new(input: &'a [u8]) -> Self {
        Records {
            input,
            pos: 0,
            record_left: 0,
            consumed: 0,
        }
    }

    /// The input byte at `index`: too large past the cap, incomplete past the input's end.
    fn at(&self, index: usize) -> Result<u8, SniError> {
        if index >= MAX_CLIENT_HELLO_BYTES {
            return Err(SniError::TooLarge);
        }
        self.input.get(index).copied().ok_or(SniError::Incomplete)
    }

    /// Reads the header of the next record, which must be a non-empty handshake record.
    fn next_record(&mut self) -> Result<(), SniError> {
        let kind = self.at(self.pos)?;
        if kind != RECORD_HANDSHAKE {
            return Err(if self.pos == 0 {
                SniError::NotTls(kind)
            } else {
                SniError::Malformed("a record of another type inside the ClientHello")
            });
        }
        let (major, minor) = (self.at(self.pos + 1)?, self.at(self.pos + 2)?);
        if major != 3 || minor > 4 {
            return Err(SniError::Malformed(
                "a record version that is not TLS's (3.0 to 3.4)",
            ));
        }
        let len = usize::from(self.at(self.pos + 3)?) << 8 | usize::from(self.at(self.pos + 4)?);
        if len == 0 {
            return Err(SniError::Malformed("an empty handshake record"));
        }
        if len > MAX_RECORD_PAYLOAD {
            return Err(SniError::Malformed("a record longer than 2^14 bytes"));
        }
        self.pos += RECORD_HEADER_LEN;
        self.record_left = len;
        Ok(())
    }

    /// The next handshake byte.
    fn byte(&mut self) -> Result<u8, SniError> {
        if self.record_left == 0 {
            self.next_record()?;
        }
        let b = self.at(self.pos)?;
        self.pos += 1;
        self.record_left -= 1;
        self.consumed += 1;
        Ok(b)
    }

    /// The next three handshake bytes as a big-endian number.
    fn u24(&mut self) -> Result<usize, SniError> {
        let (a, b, c) = (self.byte()?, self.byte()?, self.byte()?);
        Ok(usize::from(a) << 16 | usize::from(b) << 8 | usize::from(c))
    }

    /// Passes over the next `n` handshake bytes, which must all be present.
    fn skip(&mut self, mut n: usize) -> Result<(), SniError> {
        while n > 0 {
            if self.record_left == 0 {
                self.next_record()?;
            }
            let step = n.min(self.record_left);
            // The last byte of the step: `pos` is below the cap and `step` at most 2^14.
            self.at(self.pos + step - 1)?;
            self.pos += step;
            self.record_left -= step;
            self.consumed += step;
            n -= step;
        }
        Ok(())
    }
}

/// The ClientHello's body: reads that may not run past its declared end.
struct Message<'a> {
    records: Records<'a>,
    /// The handshake offset where the ClientHello ends.
    end: usize,
}

impl Message<'_> {
    /// The ClientHello's bytes not read yet.
    fn left(&self) -> usize {
        self.end.saturating_sub(self.records.consumed)
    }

    /// Refuses a read of `n` bytes past the ClientHello's end.
    fn within(&self, n: usize) -> Result<(), SniError> {
        if n > self.left() {
            return Err(SniError::Malformed(
                "a field runs past the end of the ClientHello",
            ));
        }
        Ok(())
    }

    fn byte(&mut self) -> Result<u8, SniError> {
        self.within(1)?;
        self.records.byte()
    }

    fn u16(&mut self) -> Result<usize, SniError> {
        self.within(2)?;
        let (a, b) = (self.records.byte()?, self.records.byte()?);
        Ok(usize::from(a) << 8 | usize::from(b))
    }

    fn skip(&mut self, n: usize) -> Result<(), SniError> {
        self.within(n)?;
        self.records.skip(n)
    }
}

#[cfg(test)]
mod tests;
