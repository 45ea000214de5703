//! Pinned remote sources: a `plugins:`, `skills:` or `adapters:` entry may name a directory or a
//! file in a forge repository instead of a local path, pinned by its content:
//!
//! ```text
//! https://<forge>/<owner>/<repo>/tree/<ref>/<path>#sha256=<content-v1 of the directory>
//! https://<forge>/<owner>/<repo>/blob/<ref>/<path>#sha256=<sha256 of the file>
//! ```
//!
//! This module parses such a URL ([`RemoteSource::parse`]) and defines what the harness checker
//! asks of whoever holds the fetched copies ([`RemoteSources`]): the checker itself never touches
//! the network. `pitcrew` resolves entries from its content-addressed cache (offline) or, for
//! `pitcrew lock`, by fetching them.
//!
//! The pin is the fragment after the **last** `#`: `sha256=` and exactly 64 hex digits
//! (lowercased). Only `https` is accepted; a URL carries no credentials, query, percent
//! escapes, backslashes or empty, `.` and `..` segments, so one string names one thing.

use crate::tree_hash::TreeListing;
use std::path::{Path, PathBuf};

/// Whether a remote source is a directory (`/tree/`, pinned with `content-v1`) or one file
/// (`/blob/`, pinned with the SHA-256 of its bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RemoteKind {
    /// A directory (`…/tree/<ref>/<path>`).
    Tree,
    /// One file (`…/blob/<ref>/<path>`).
    Blob,
}

impl RemoteKind {
    /// `tree` or `blob`, as in the URL.
    pub fn as_str(self) -> &'static str {
        match self {
            RemoteKind::Tree => "tree",
            RemoteKind::Blob => "blob",
        }
    }
}

/// A parsed, pinned remote source.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RemoteSource {
    /// The URL without its fragment, as written.
    pub url: String,
    /// Directory or file.
    pub kind: RemoteKind,
    /// `host` or `host:port`, lowercased.
    pub host: String,
    /// The repository owner (first path segment).
    pub owner: String,
    /// The repository name (second path segment).
    pub repo: String,
    /// The segments after `tree/` or `blob/`: the ref followed by the path inside the
    /// repository. Where the ref ends is decided against the repository's refs (a branch may
    /// contain slashes), so it is kept whole here.
    pub ref_and_path: Vec<String>,
    /// The pin: 64 lowercase hex digits.
    pub sha256: String,
}

/// How a remote entry is written, said in every refusal of one.
pub const REMOTE_FORM: &str =
    "https://<forge>/<owner>/<repo>/tree/<ref>/<dir>#sha256=<content-v1 hash> \
     (a directory) or …/blob/<ref>/<file>#sha256=<sha256> (a file)";

impl RemoteSource {
    /// Parses `raw` as a pinned remote source. `Ok(None)` when `raw` is no URL at all (a local
    /// path); `Err` with the reason and the form to use for every remote spelling that is
    /// refused: other schemes (`http:`, `git:`, `ssh:`, `npm:`, any `://`, …), an unpinned or
    /// malformed URL. This is the one rule of what a local path is (`workdir:` too).
    pub fn parse(raw: &str) -> Result<Option<RemoteSource>, String> {
        const OTHER_SCHEMES: &[&str] = &[
            "npm:", "git:", "github:", "ssh:", "http:", "file:", "git+", "builtin:",
        ];
        if let Some(scheme) = OTHER_SCHEMES.iter().find(|s| raw.starts_with(**s)) {
            return Err(format!(
                "{raw:?}: {scheme} sources are refused (the runtime would fetch them at startup, \
                 unverified); a remote source is {REMOTE_FORM}"
            ));
        }
        let Some(rest) = raw.strip_prefix("https://") else {
            if raw.contains("://") || raw.starts_with("https:") {
                return Err(format!(
                    "{raw:?}: only https:// URLs are remote sources: {REMOTE_FORM}"
                ));
            }
            return Ok(None);
        };
        let (location, pin) = match rest.rfind('#') {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest, None),
        };
        let Some(pin) = pin else {
            return Err(format!(
                "{raw:?} is not pinned: add #sha256=<hash> (`pitcrew hash --format content-v1 DIR` \
                 of a checkout for a directory, `sha256sum FILE` for a file); {REMOTE_FORM}"
            ));
        };
        let sha256 = parse_pin(pin).map_err(|why| format!("{raw:?}: {why}"))?;
        if let Some(bad) = location.chars().find(|c| {
            matches!(c, '?' | '%' | '\\' | '#' | '@') || c.is_whitespace() || c.is_control()
        }) {
            return Err(format!(
                "{raw:?}: {bad:?} is not allowed in a remote source (no credentials, query, \
                 percent escapes, backslashes or spaces: one string names one thing)"
            ));
        }
        let mut segments = location.split('/');
        let host = segments.next().unwrap_or_default().to_ascii_lowercase();
        if !valid_host(&host) {
            return Err(format!(
                "{raw:?}: {host:?} is not a host name (letters, digits, dots and hyphens, an \
                 optional :port)"
            ));
        }
        let segments: Vec<&str> = segments.collect();
        if let Some(bad) = segments
            .iter()
            .find(|s| s.is_empty() || **s == "." || **s == "..")
        {
            return Err(format!(
                "{raw:?}: the path has an empty, `.` or `..` segment ({bad:?})"
            ));
        }
        let (kind, owner, repo, ref_and_path) = match segments.as_slice() {
            [owner, repo, kind, ref_and_path @ ..] if ref_and_path.len() >= 2 => {
                let kind = match *kind {
                    "tree" => RemoteKind::Tree,
                    "blob" => RemoteKind::Blob,
                    other => {
                        return Err(format!(
                            "{raw:?}: {other:?} where tree or blob belongs: {REMOTE_FORM}"
                        ))
                    }
                };
                (kind, *owner, *repo, ref_and_path)
            }
            _ => {
                return Err(format!(
                    "{raw:?} does not name a directory or file inside a repository: \
                     {REMOTE_FORM}"
                ))
            }
        };
        Ok(Some(RemoteSource {
            url: format!("https://{location}"),
            kind,
            host,
            owner: owner.to_string(),
            repo: repo.to_string(),
            ref_and_path: ref_and_path.iter().map(|s| s.to_string()).collect(),
            sha256,
        }))
    }

    /// The repository's address for git (`https://<forge>/<owner>/<repo>`).
    pub fn repository(&self) -> String {
        format!("https://{}/{}/{}", self.host, self.owner, self.repo)
    }

    /// The name it is uploaded under: the last segment of its path.
    pub fn name(&self) -> &str {
        self.ref_and_path.last().map(String::as_str).unwrap_or("")
    }

    /// The URL with its pin, as a harness writes it.
    pub fn pinned_url(&self) -> String {
        format!("{}#sha256={}", self.url, self.sha256)
    }
}

/// The pin of a fragment: `sha256=` and exactly 64 hex digits, lowercased.
fn parse_pin(fragment: &str) -> Result<String, String> {
    let Some(hex) = fragment.strip_prefix("sha256=") else {
        return Err(format!(
            "the fragment {fragment:?} is not a pin: write #sha256=<64 hex digits>"
        ));
    };
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("the pin {hex:?} is not 64 hex digits (a SHA-256)"));
    }
    Ok(hex.to_ascii_lowercase())
}

/// Whether `authority` is `host` or `host:port` with a plain DNS name or IPv4 address.
fn valid_host(authority: &str) -> bool {
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (authority, None),
    };
    let port_ok =
        port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    port_ok
        && !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && !label.starts_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// A remote entry resolved to a verified local copy.
#[derive(Debug, Clone, Default)]
pub struct Resolved {
    /// The local copy (a directory for a tree, a file for a blob), verified against the pin.
    pub path: PathBuf,
    /// For a tree, the listing the copy was verified with (when the resolver hashed it): the
    /// checker pins it as it is instead of reading the copy a second time.
    pub listing: Option<TreeListing>,
    /// What the content scan found, reported as notes.
    pub notes: Vec<String>,
    /// What the content scan found when findings are refused, reported as problems.
    pub problems: Vec<String>,
}

/// Whoever holds the fetched copies of remote entries: asked once per remote entry of a
/// harness, with the entry's field (`plugins[2].path`) for its messages.
pub trait RemoteSources {
    /// The verified local copy of `source`, or why there is none (not admitted, not in the
    /// cache, fetch failed, …): the message is reported as a problem of the entry.
    fn resolve(&mut self, source: &RemoteSource, field: &str) -> Result<Resolved, String>;

    /// What the content scan finds in the local tree or file `path` an entry names (uploaded
    /// as `name`), reported as notes of the entry the way a remote copy's findings are: a
    /// local plugin, skill or adapter is scanned like a fetched one. None by default.
    fn scan_local(&mut self, path: &Path, name: &str) -> Vec<String> {
        let _ = (path, name);
        Vec::new()
    }
}

/// The [`RemoteSources`] of a caller that has none: every remote entry is refused.
#[derive(Debug, Default)]
pub struct NoRemoteSources;

impl RemoteSources for NoRemoteSources {
    fn resolve(&mut self, source: &RemoteSource, _field: &str) -> Result<Resolved, String> {
        Err(format!(
            "{}: remote sources are resolved by `pitcrew validate`, `pitcrew run` and \
             `pitcrew lock` from their cache, not here",
            source.url
        ))
    }
}

#[cfg(test)]
mod tests;
