//! The requests of a model connection, on their way from the agent to the provider: HTTP/1.1
//! request heads read with `httparse`, each credential's placeholder in the `x-api-key`,
//! `authorization` and `x-goog-api-key` values replaced by the credential's value, `Host` set to the upstream, the
//! route's path prefix put before the target, an `Upgrade` header left out; bodies (`Content-Length` or chunked) passed on
//! as they are, so that requests follow one another on one connection (keep-alive,
//! pipelining). Responses are not read here: they go back to the agent byte for byte.
//!
//! A request this side cannot frame for certain (both `Content-Length` and
//! `Transfer-Encoding`, a transfer coding other than `chunked`, `Content-Length`s that
//! disagree, a `CONNECT`, a target that is not a path) ends the connection: what the provider
//! would read as a request boundary must be where this side saw one.

use crate::manifest::model::CREDENTIAL_HEADERS;

/// The largest request head (request line and headers) taken.
pub const MAX_HEAD: usize = 64 * 1024;

/// The most headers one request head may have.
const MAX_HEADERS: usize = 128;

/// The longest chunk-size line or trailer line of a chunked body.
const MAX_LINE: usize = 4096;

/// The most bytes of trailers after a chunked body.
const MAX_TRAILERS: usize = 16 * 1024;

/// A model credential: what the sandbox has in its place, and its value.
#[derive(Clone)]
pub struct Credential {
    /// The variable's name.
    pub name: String,
    /// The placeholder the sandbox has.
    pub placeholder: Vec<u8>,
    /// The value (never logged, never recorded).
    pub value: Vec<u8>,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Where in the request stream the rewriter is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading a request head.
    Head,
    /// Passing on this many more bytes of a `Content-Length` body.
    Fixed(u64),
    /// Reading a chunk-size line.
    ChunkSize,
    /// Passing on this many more bytes of a chunk.
    ChunkData(u64),
    /// The CRLF after a chunk's data.
    ChunkEnd,
    /// Trailer lines after the last chunk, this many bytes so far.
    Trailers(usize),
}

/// Rewrites one connection's requests.
#[derive(Debug)]
pub struct RequestRewriter {
    /// Longest placeholder first, so no placeholder is taken for a shorter one it starts with.
    creds: Vec<Credential>,
    /// The `Host` the upstream gets.
    authority: String,
    /// The upstream base URL's path, without its trailing `/` (empty for none).
    prefix: String,
    buf: Vec<u8>,
    state: State,
    /// Names injected and not yet taken ([`RequestRewriter::take_injected`]).
    injected: Vec<String>,
}

impl RequestRewriter {
    /// A rewriter for requests to `authority` (`host[:port]`) under path `prefix`.
    pub fn new(creds: &[Credential], authority: &str, prefix: &str) -> RequestRewriter {
        let mut creds = creds.to_vec();
        creds.sort_by_key(|c| std::cmp::Reverse(c.placeholder.len()));
        RequestRewriter {
            creds,
            authority: authority.to_string(),
            prefix: prefix.trim_end_matches('/').to_string(),
            buf: Vec::new(),
            state: State::Head,
            injected: Vec::new(),
        }
    }

    /// The names of the credentials put in since the last call, each once.
    pub fn take_injected(&mut self) -> Vec<String> {
        std::mem::take(&mut self.injected)
    }

    /// Takes the agent's next bytes; what is to go to the upstream is appended to `out`. `Err`
    /// says why the connection must end.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.extend_from_slice(input);
        let mut at = 0;
        let result = loop {
            match self.step(&buf[at..], out) {
                Ok(Some(used)) => at += used,
                Ok(None) => break Ok(()),
                Err(why) => break Err(why),
            }
        };
        buf.drain(..at);
        self.buf = buf;
        result
    }

    /// One step at the start of `rest`: `Some(bytes used)`, `None` when more input is needed.
    fn step(&mut self, rest: &[u8], out: &mut Vec<u8>) -> Result<Option<usize>, String> {
        if rest.is_empty() {
            return Ok(None);
        }
        match self.state {
            State::Head => {
                let Some((used, head, framing)) = self.head(rest)? else {
                    return Ok(None);
                };
                out.extend_from_slice(&head);
                self.state = framing;
                Ok(Some(used))
            }
            State::Fixed(left) => {
                let (n, left) = copy_body(left, rest, out);
                self.state = if left == 0 {
                    State::Head
                } else {
                    State::Fixed(left)
                };
                Ok(Some(n))
            }
            State::ChunkSize => {
                let Some(line) = line_end(rest, MAX_LINE, "a chunk-size line")? else {
                    return Ok(None);
                };
                let size = match httparse::parse_chunk_size(&rest[..line]) {
                    Ok(httparse::Status::Complete((_, size))) => size,
                    _ => return Err("a chunk-size line that is not one".into()),
                };
                // Written anew, without extensions: the upstream reads the size this side read.
                out.extend_from_slice(format!("{size:x}\r\n").as_bytes());
                self.state = if size == 0 {
                    State::Trailers(0)
                } else {
                    State::ChunkData(size)
                };
                Ok(Some(line))
            }
            State::ChunkData(left) => {
                let (n, left) = copy_body(left, rest, out);
                self.state = if left == 0 {
                    State::ChunkEnd
                } else {
                    State::ChunkData(left)
                };
                Ok(Some(n))
            }
            State::ChunkEnd => {
                if rest.len() < 2 {
                    return Ok(None);
                }
                if &rest[..2] != b"\r\n" {
                    return Err("a chunk's data is not followed by CRLF".into());
                }
                out.extend_from_slice(b"\r\n");
                self.state = State::ChunkSize;
                Ok(Some(2))
            }
            State::Trailers(seen) => {
                let Some(line) = line_end(rest, MAX_LINE, "a trailer line")? else {
                    return Ok(None);
                };
                if seen + line > MAX_TRAILERS {
                    return Err(format!("trailers over {MAX_TRAILERS} bytes"));
                }
                // Trailers are read and left out: only the chunked body's end goes on.
                self.state = if line == 2 {
                    out.extend_from_slice(b"\r\n");
                    State::Head
                } else {
                    State::Trailers(seen + line)
                };
                Ok(Some(line))
            }
        }
    }

    /// A whole request head at the start of `rest`, rewritten, with the bytes it took and how
    /// its body is framed; `None` when it is not all in yet.
    fn head(&mut self, rest: &[u8]) -> Result<Option<(usize, Vec<u8>, State)>, String> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut headers);
        let used = match req.parse(rest) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) if rest.len() > MAX_HEAD => {
                return Err(format!("a request head over {MAX_HEAD} bytes"))
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(err) => return Err(format!("a request head that is not HTTP/1.1: {err}")),
        };
        if used > MAX_HEAD {
            return Err(format!("a request head over {MAX_HEAD} bytes"));
        }
        let method = req.method.unwrap_or_default();
        let path = req.path.unwrap_or_default();
        if method.eq_ignore_ascii_case("CONNECT") {
            return Err("CONNECT on the model endpoint".into());
        }
        if !path.starts_with('/') {
            return Err(format!("the request target {path:?} is not a path"));
        }
        if let Some(why) = path_escape(path) {
            return Err(format!(
                "the request target {path:?} {why} (it could leave the route's path)"
            ));
        }
        let mut out = Vec::with_capacity(used + 64);
        out.extend_from_slice(method.as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.prefix.as_bytes());
        out.extend_from_slice(path.as_bytes());
        out.extend_from_slice(format!(" HTTP/1.{}\r\n", req.version.unwrap_or(1)).as_bytes());
        out.extend_from_slice(format!("Host: {}\r\n", self.authority).as_bytes());
        let mut length: Option<u64> = None;
        let mut chunked = false;
        for h in req.headers.iter() {
            let name = h.name;
            // `Host` is the upstream's; an `Upgrade` is never offered, so the upstream never
            // switches the connection to bytes this side cannot read as requests.
            if name.eq_ignore_ascii_case("host") || name.eq_ignore_ascii_case("upgrade") {
                continue;
            }
            if name.eq_ignore_ascii_case("content-length") {
                let text = std::str::from_utf8(h.value).unwrap_or_default().trim();
                let n: u64 = text
                    .parse()
                    .ok()
                    .filter(|_| text.bytes().all(|b| b.is_ascii_digit()))
                    .ok_or_else(|| format!("a Content-Length of {text:?}"))?;
                if length.is_some_and(|l| l != n) {
                    return Err("Content-Length headers that disagree".into());
                }
                length = Some(n);
            }
            if name.eq_ignore_ascii_case("transfer-encoding") {
                let text = std::str::from_utf8(h.value).unwrap_or_default().trim();
                if !text.eq_ignore_ascii_case("chunked") || chunked {
                    return Err(format!(
                        "Transfer-Encoding {text:?}: only one `chunked` is taken"
                    ));
                }
                chunked = true;
            }
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            if CREDENTIAL_HEADERS
                .iter()
                .any(|h| name.eq_ignore_ascii_case(h))
            {
                let (value, names) = replace_placeholders(h.value, &self.creds);
                out.extend_from_slice(&value);
                for n in names {
                    if !self.injected.contains(&n) {
                        self.injected.push(n);
                    }
                }
            } else {
                out.extend_from_slice(h.value);
            }
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
        if chunked && req.version == Some(0) {
            return Err("Transfer-Encoding in an HTTP/1.0 request".into());
        }
        let framing = match (chunked, length) {
            (true, Some(_)) => {
                return Err("both Content-Length and Transfer-Encoding".into());
            }
            (true, None) => State::ChunkSize,
            (false, Some(n)) if n > 0 => State::Fixed(n),
            (false, _) => State::Head,
        };
        Ok(Some((used, out, framing)))
    }
}

/// Where the CRLF-terminated line at the start of `rest` ends (after its CRLF); `None` when
/// it has not ended yet. A CR or LF anywhere else in the line is refused: an upstream that
/// ended the line at a bare LF would read the bytes after it otherwise than this side.
fn line_end(rest: &[u8], max: usize, what: &str) -> Result<Option<usize>, String> {
    let bare = || Err(format!("{what} with a bare CR or LF"));
    match rest.iter().position(|&b| b == b'\n') {
        Some(i) if i == 0 || rest[i - 1] != b'\r' || rest[..i - 1].contains(&b'\r') => bare(),
        Some(i) if i < max => Ok(Some(i + 1)),
        Some(_) => Err(format!("{what} over {max} bytes")),
        None if rest
            .iter()
            .enumerate()
            .any(|(i, &b)| b == b'\r' && i + 1 < rest.len()) =>
        {
            bare()
        }
        None if rest.len() > max => Err(format!("{what} over {max} bytes")),
        None => Ok(None),
    }
}

/// What in the path of a request target (before any `?`) could take an upstream outside the
/// route's path, or `None`: a `.` or `..` segment (a `;` parameter after it included, which
/// some servers drop before resolving), a `\` (which WHATWG URL parsers read as `/`), or an
/// encoded `.`, `/`, `\` or `%` (which a server decoding before it resolves dot segments, as
/// nginx does, would read as one; a model API's path needs none of them).
fn path_escape(target: &str) -> Option<&'static str> {
    let path = target.split(['?', '#']).next().unwrap_or_default();
    if path.contains('\\') {
        return Some("has a `\\`");
    }
    let lower = path.to_ascii_lowercase();
    if ["%2e", "%2f", "%5c", "%25"]
        .iter()
        .any(|e| lower.contains(e))
    {
        return Some("has an encoded `.`, `/`, `\\` or `%`");
    }
    let dot = path.split('/').any(|segment| {
        let segment = segment.split(';').next().unwrap_or_default();
        segment == "." || segment == ".."
    });
    dot.then_some("has a `.` or `..` segment")
}

/// Whether `b` may stand next to a placeholder: a placeholder counts only as a whole token,
/// so one followed by more name characters (another variable's placeholder, or text) is not
/// taken.
fn token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'~' | b'+' | b'/' | b'=')
}

/// `value` with each credential's placeholder, where it stands as a whole token, replaced by
/// the credential's value; the names of those replaced. `creds` come longest placeholder
/// first.
pub fn replace_placeholders(value: &[u8], creds: &[Credential]) -> (Vec<u8>, Vec<String>) {
    let mut out = Vec::with_capacity(value.len());
    let mut names: Vec<String> = Vec::new();
    let mut i = 0;
    while i < value.len() {
        let before_ok = i == 0 || !token_byte(value[i - 1]);
        let found = before_ok
            .then(|| {
                creds.iter().find(|c| {
                    !c.placeholder.is_empty()
                        && value[i..].starts_with(&c.placeholder)
                        && value
                            .get(i + c.placeholder.len())
                            .is_none_or(|b| !token_byte(*b))
                })
            })
            .flatten();
        match found {
            Some(c) => {
                out.extend_from_slice(&c.value);
                if !names.contains(&c.name) {
                    names.push(c.name.clone());
                }
                i += c.placeholder.len();
            }
            None => {
                out.push(value[i]);
                i += 1;
            }
        }
    }
    (out, names)
}

/// Copies to `out` what `rest` holds of a body part with `left` bytes to go: how many bytes it
/// took, and how many are left after them.
fn copy_body(left: u64, rest: &[u8], out: &mut Vec<u8>) -> (usize, u64) {
    let n = usize::try_from(left).unwrap_or(usize::MAX).min(rest.len());
    out.extend_from_slice(&rest[..n]);
    (n, left - n as u64)
}

#[cfg(test)]
mod tests;
