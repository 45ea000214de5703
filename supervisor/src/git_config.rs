//! A git configuration file (`.git/config`, `config.worktree`) read as DATA and written back
//! with only the keys that run nothing: what the host keeps of a repository the agent left in a
//! collected workspace (`pitcrew run --collect-workspace`, `pitcrew collect`). Git reads that
//! file at the next command an operator runs in the tree, and many of its keys name commands it
//! runs then (`core.fsmonitor`, `core.hooksPath`, `core.sshCommand`, `core.pager`,
//! `filter.*.clean`, `diff.*.textconv`, `credential.helper`, …) or files it reads as more
//! configuration (`include.path`, `includeIf.*.path`). A denylist would miss the next one, so
//! the file is rewritten from an allowlist ([`is_kept`]).
//!
//! # Grammar (git's own, `config.c`)
//!
//! - Lines end at `\n` (`\r\n` counts as one); a UTF-8 byte order mark at the start is skipped.
//!   Blanks (space, tab, `\r`) between items are skipped; `#` or `;` outside a value starts a
//!   comment to the end of the line.
//! - `[section]`: the name is letters, digits, `-` and `.` (case-insensitive; `[a.b]` is the
//!   old spelling of `[a "b"]`, its subsection lowercased). `[section "subsection"]`: one or
//!   more blanks, then a double-quoted subsection in which `\x` is `x`, then `]` at once. After
//!   the `]` the same line may go on with a key.
//! - `key`: a letter, then letters, digits and `-` (case-insensitive); blanks; then the end of
//!   the line (a boolean true) or `=` and a value.
//! - A value: leading and trailing blanks outside quotes are dropped; `"` opens and closes a
//!   quoted part (the quotes are not kept); `#` and `;` outside quotes start a comment; the
//!   escapes are `\n`, `\t`, `\b`, `\"`, `\\`, and `\` before the end of the line continues the
//!   value on the next line. Any other escape, or a quote still open at the end of a line, is
//!   an error.
//!
//! Anything else is an error at its line: [`parse`] returns the entries before it and the
//! error, as git would refuse the whole file. The file written back ([`write`]) is built from
//! the parsed entries alone, every value quoted and escaped, so a difference between this
//! parser and git's can only change the value of a key that was kept, never smuggle in one
//! that was not. Bounded: at most [`MAX_ENTRIES`] entries are read, in one pass over the bytes.

use std::collections::HashSet;

/// Most entries [`parse`] reads; past them it stops with an error (a real repository's
/// configuration has a few dozen).
pub const MAX_ENTRIES: usize = 10_000;

/// One `section.subsection.key = value` of a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The section name, lowercased (git compares it without case).
    pub section: String,
    /// The subsection: as written when quoted (git compares it with case), lowercased in the
    /// old `[section.subsection]` spelling. Never holds a newline or a NUL.
    pub subsection: Option<Vec<u8>>,
    /// The key as written (git compares it without case).
    pub key: String,
    /// The value; `None` for a key without `=` (a boolean true).
    pub value: Option<Vec<u8>>,
}

impl Entry {
    /// `section.subsection.key` for people: the subsection as UTF-8 (invalid bytes replaced),
    /// the key as written.
    pub fn name(&self) -> String {
        match &self.subsection {
            Some(sub) => format!(
                "{}.{}.{}",
                self.section,
                String::from_utf8_lossy(sub),
                self.key
            ),
            None => format!("{}.{}", self.section, self.key),
        }
    }
}

/// Where and why a configuration file stops making sense.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {what}")]
pub struct ParseError {
    /// The 1-based line.
    pub line: usize,
    /// What was wrong there.
    pub what: &'static str,
}

/// What [`parse`] read: every entry before the first error, and that error.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Parsed {
    /// The entries, in file order.
    pub entries: Vec<Entry>,
    /// The first error, if any: nothing after it was read.
    pub error: Option<ParseError>,
}

/// Whether git counts `c` as a blank (its `isspace`: space, tab, `\n`, `\r`).
fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r')
}

/// Whether `c` may be part of a section or key name.
fn is_key_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-'
}

/// The bytes of a file read as git reads them: `\r\n` as `\n`, the end of the input as one
/// last `\n`, lines counted.
struct Source<'a> {
    bytes: &'a [u8],
    pos: usize,
    line: usize,
    eof: bool,
}

impl Source<'_> {
    /// The next character (git's `get_next_char`).
    fn next(&mut self) -> u8 {
        let Some(&c) = self.bytes.get(self.pos) else {
            if !self.eof {
                self.eof = true;
                self.line += 1;
            }
            return b'\n';
        };
        self.pos += 1;
        if c == b'\r' && self.bytes.get(self.pos) == Some(&b'\n') {
            self.pos += 1;
            self.line += 1;
            return b'\n';
        }
        if c == b'\n' {
            self.line += 1;
        }
        c
    }

    /// An error at the current line (the line a newline just ended counts as the one it ended).
    fn error(&self, what: &'static str) -> ParseError {
        let ended = self.pos > 0 && self.bytes.get(self.pos - 1) == Some(&b'\n');
        let line = if ended || self.eof {
            self.line
        } else {
            self.line + 1
        };
        ParseError {
            line: line.max(1),
            what,
        }
    }
}

/// The section header after its `[`: the section and its subsection.
fn section_header(src: &mut Source<'_>) -> Result<(String, Option<Vec<u8>>), ParseError> {
    let mut name = Vec::new();
    let mut c;
    loop {
        c = src.next();
        if src.eof {
            return Err(src.error("a section header without its ']'"));
        }
        if c == b']' {
            break;
        }
        if is_space(c) {
            return quoted_subsection(src, name, c);
        }
        if !is_key_char(c) && c != b'.' {
            return Err(src.error("a section name may hold letters, digits, '-' and '.'"));
        }
        name.push(c.to_ascii_lowercase());
    }
    // `[a.b.c]`: the section `a`, the subsection `b.c` (lowercased, as git reads it).
    let (section, subsection) = match name.iter().position(|&b| b == b'.') {
        Some(dot) => (name[..dot].to_vec(), Some(name[dot + 1..].to_vec())),
        None => (name, None),
    };
    if section.is_empty() {
        return Err(src.error("an empty section name"));
    }
    // Only ASCII letters, digits and '-' were kept.
    Ok((String::from_utf8_lossy(&section).into_owned(), subsection))
}

/// The rest of `[section "subsection"]` after the blank `c` that followed the section name.
fn quoted_subsection(
    src: &mut Source<'_>,
    section: Vec<u8>,
    mut c: u8,
) -> Result<(String, Option<Vec<u8>>), ParseError> {
    if section.is_empty() || section.contains(&b'.') {
        return Err(src.error("a section name before a quoted subsection may not hold '.'"));
    }
    while is_space(c) {
        if c == b'\n' {
            return Err(src.error("a section header broken over lines"));
        }
        c = src.next();
    }
    if c != b'"' {
        return Err(src.error("a subsection must be double-quoted"));
    }
    let mut sub = Vec::new();
    loop {
        let mut c = src.next();
        if c == b'\n' {
            return Err(src.error("a subsection broken over lines"));
        }
        if c == b'"' {
            break;
        }
        if c == b'\\' {
            c = src.next();
            if c == b'\n' {
                return Err(src.error("a subsection broken over lines"));
            }
        }
        if c == 0 {
            return Err(src.error("a NUL byte"));
        }
        sub.push(c);
    }
    if src.next() != b']' {
        return Err(src.error("a subsection's closing quote must be followed by ']'"));
    }
    Ok((String::from_utf8_lossy(&section).into_owned(), Some(sub)))
}

/// A value after its `=` (git's `parse_value`).
fn value(src: &mut Source<'_>) -> Result<Vec<u8>, ParseError> {
    let mut out = Vec::new();
    let mut quote = false;
    let mut comment = false;
    let mut trim: Option<usize> = None;
    loop {
        let mut c = src.next();
        if c == b'\n' {
            if quote {
                return Err(src.error("a quote left open at the end of the line"));
            }
            if let Some(len) = trim {
                out.truncate(len);
            }
            return Ok(out);
        }
        if comment {
            continue;
        }
        if is_space(c) && !quote {
            if trim.is_none() {
                trim = Some(out.len());
            }
            if !out.is_empty() {
                out.push(c);
            }
            continue;
        }
        if !quote && (c == b';' || c == b'#') {
            comment = true;
            continue;
        }
        trim = None;
        if c == 0 {
            return Err(src.error("a NUL byte"));
        }
        if c == b'\\' {
            c = match src.next() {
                b'\n' => continue,
                b't' => b'\t',
                b'b' => 0x08,
                b'n' => b'\n',
                c @ (b'\\' | b'"') => c,
                _ => return Err(src.error("an unknown escape in a value")),
            };
            out.push(c);
            continue;
        }
        if c == b'"' {
            quote = !quote;
            continue;
        }
        out.push(c);
    }
}

/// Reads the configuration file `bytes` (see the module docs for the grammar).
pub fn parse(bytes: &[u8]) -> Parsed {
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    let mut src = Source {
        bytes,
        pos: 0,
        line: 0,
        eof: false,
    };
    let mut parsed = Parsed::default();
    let mut section: Option<(String, Option<Vec<u8>>)> = None;
    let mut comment = false;
    let fail = |parsed: &mut Parsed, err: ParseError| parsed.error = Some(err);
    loop {
        let c = src.next();
        if src.eof {
            return parsed;
        }
        if c == b'\n' {
            comment = false;
            continue;
        }
        if comment || is_space(c) {
            continue;
        }
        if c == b'#' || c == b';' {
            comment = true;
            continue;
        }
        if c == b'[' {
            match section_header(&mut src) {
                Ok(header) => section = Some(header),
                Err(err) => {
                    fail(&mut parsed, err);
                    return parsed;
                }
            }
            continue;
        }
        if !c.is_ascii_alphabetic() {
            fail(
                &mut parsed,
                src.error("a line that is no section, key or comment"),
            );
            return parsed;
        }
        let Some((name, subsection)) = &section else {
            fail(&mut parsed, src.error("a key before any section"));
            return parsed;
        };
        if parsed.entries.len() == MAX_ENTRIES {
            fail(
                &mut parsed,
                src.error("more entries than a configuration holds"),
            );
            return parsed;
        }
        match key_and_value(&mut src, c) {
            Ok((key, value)) => parsed.entries.push(Entry {
                section: name.clone(),
                subsection: subsection.clone(),
                key,
                value,
            }),
            Err(err) => {
                fail(&mut parsed, err);
                return parsed;
            }
        }
    }
}

/// A key whose first letter `first` was read, and its value (git's `get_value`).
fn key_and_value(src: &mut Source<'_>, first: u8) -> Result<(String, Option<Vec<u8>>), ParseError> {
    let mut key = String::from(char::from(first));
    let mut c;
    loop {
        c = src.next();
        if src.eof || !is_key_char(c) {
            break;
        }
        key.push(char::from(c));
    }
    while c == b' ' || c == b'\t' {
        c = src.next();
    }
    if c == b'\n' {
        return Ok((key, None));
    }
    if c != b'=' {
        return Err(src.error("a key must be followed by '=' or the end of the line"));
    }
    Ok((key, Some(value(src)?)))
}

/// The `extensions.*` keys kept: how the repository stores its objects and refs, which git
/// must know to read it at all. `extensions.partialClone` is not: it names a remote git
/// fetches from whenever an object is missing.
const EXTENSIONS_KEPT: &[&str] = &[
    "objectformat",
    "compatobjectformat",
    "refstorage",
    "worktreeconfig",
];

/// The `core.*` keys kept: the repository's format and how its work tree is read.
const CORE_KEPT: &[&str] = &[
    "repositoryformatversion",
    "bare",
    "filemode",
    "logallrefupdates",
    "ignorecase",
    "precomposeunicode",
    "symlinks",
    "sparsecheckout",
    "sparsecheckoutcone",
];

/// Whether an entry is kept in a collected repository's configuration: the allowlist of keys
/// that describe the repository and run nothing. `core.` [`CORE_KEPT`], `extensions.`
/// [`EXTENSIONS_KEPT`], `remote.<name>.{url,pushurl,fetch,push}`, `branch.<name>.{remote,merge}`
/// and `submodule.<name>.{url,active}`. Everything else is dropped: every key that names a
/// command (`core.fsmonitor`, `core.sshCommand`, `core.pager`, `core.editor`,
/// `filter.*`, `diff.*`, `merge.*`, `credential.*`, `remote.*.uploadpack`, `alias.*`, …), a
/// path git reads or writes (`core.hooksPath`, `core.worktree`, `core.attributesFile`,
/// `core.excludesFile`, `include.path`, `includeIf.*.path`), and the rest, which the operator's
/// own configuration provides.
pub fn is_kept(entry: &Entry) -> bool {
    let key = entry.key.to_ascii_lowercase();
    let key = key.as_str();
    match (entry.section.as_str(), entry.subsection.is_some()) {
        ("core", false) => CORE_KEPT.contains(&key),
        ("extensions", false) => EXTENSIONS_KEPT.contains(&key),
        ("remote", true) => matches!(key, "url" | "pushurl" | "fetch" | "push"),
        ("branch", true) => matches!(key, "remote" | "merge"),
        ("submodule", true) => matches!(key, "url" | "active"),
        _ => false,
    }
}

/// `bytes` double-quoted with git's escapes (`\\`, `\"`, `\n`, `\t`, `\b`).
fn quoted(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'"');
    for &c in bytes {
        match c {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'"' => out.extend_from_slice(b"\\\""),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            c => out.push(c),
        }
    }
    out.push(b'"');
}

/// A configuration file holding `entries`, in order, that [`parse`] (and git) read back as the
/// same entries (the subsection in its quoted spelling): a header wherever the section
/// changes, every value quoted.
pub fn write(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut current: Option<(&str, Option<&[u8]>)> = None;
    for entry in entries {
        let here = (entry.section.as_str(), entry.subsection.as_deref());
        if current != Some(here) {
            out.push(b'[');
            out.extend_from_slice(entry.section.as_bytes());
            if let Some(sub) = &entry.subsection {
                out.push(b' ');
                // In a subsection only `"` and `\` need escaping; it never holds a newline.
                out.push(b'"');
                for &c in sub {
                    if c == b'"' || c == b'\\' {
                        out.push(b'\\');
                    }
                    out.push(c);
                }
                out.push(b'"');
            }
            out.extend_from_slice(b"]\n");
            current = Some(here);
        }
        out.push(b'\t');
        out.extend_from_slice(entry.key.as_bytes());
        if let Some(value) = &entry.value {
            out.extend_from_slice(b" = ");
            quoted(&mut out, value);
        }
        out.push(b'\n');
    }
    out
}

/// What [`filter`] made of a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filtered {
    /// The file to write instead: the kept entries alone ([`write`]).
    pub text: Vec<u8>,
    /// The entries dropped, by name ([`Entry::name`]), each once, in file order.
    pub dropped: Vec<String>,
    /// Where the file stopped making sense: what followed was not read, and is not kept.
    pub error: Option<ParseError>,
}

/// The configuration file `bytes` with only the entries [`is_kept`] accepts.
pub fn filter(bytes: &[u8]) -> Filtered {
    let parsed = parse(bytes);
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    let mut seen = HashSet::new();
    for entry in parsed.entries {
        if is_kept(&entry) {
            kept.push(entry);
        } else {
            let name = entry.name();
            if seen.insert(name.clone()) {
                dropped.push(name);
            }
        }
    }
    Filtered {
        text: write(&kept),
        dropped,
        error: parsed.error,
    }
}

#[cfg(test)]
mod tests;
