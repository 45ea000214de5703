//! Sending an offered listing as a delta against the one the supervisor holds for the same
//! destination (feature `upload.listing_digest`).
//!
//! A listing is cut into content-defined chunks of whole lines: a chunk ends after a line whose
//! path hashes to a multiple of [`AVERAGE_LINES`] (or after [`MAX_LINES`] lines), so a line
//! added, removed or changed moves the boundaries of its own chunk only, never those of every
//! chunk after it. The supervisor names the chunks it holds by [`chunk_digest`]; the host sends
//! a recipe ([`rebuild`]): its listing's lines, each run of chunks the supervisor holds replaced
//! by one line `= A B` (held chunks `A` to `B - 1`, in order). A recipe holds listing lines and
//! such references only: a listing line starts with `d `, `f ` or `!`, never with `=`.
//!
//! The chunk digests only say where to look: the supervisor rebuilds the whole listing and takes
//! it only when its SHA-256 and length are the ones the `upload` named.

use sha2::{Digest, Sha256};
use std::ops::Range;

/// Lines in a chunk on average: a boundary follows a line whose path hash is a multiple of it.
pub const AVERAGE_LINES: u64 = 32;

/// Most lines in a chunk (a run of paths none of which hits a boundary is cut here).
pub const MAX_LINES: usize = 128;

/// The path of a listing line (`d <path>` or `f <sha256> <size> <x|-> <path>`); the whole line
/// for anything else (it hashes as well as any path).
fn line_path(line: &[u8]) -> &[u8] {
    match line {
        [b'f', b' ', rest @ ..] => {
            let mut spaces = 0;
            for (i, &b) in rest.iter().enumerate() {
                if b == b' ' {
                    spaces += 1;
                    if spaces == 3 {
                        return &rest[i + 1..];
                    }
                }
            }
            line
        }
        [b'd', b' ', rest @ ..] => rest,
        _ => line,
    }
}

/// A 64-bit hash of `bytes` (FNV-1a, then mixed so its low bits are as good as its high ones).
fn path_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h
}

/// The chunks of `listing` (byte ranges of whole lines, newline included, end to end). A last
/// line without a newline is a chunk's end too.
pub fn chunks(listing: &[u8]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut lines, mut at) = (0usize, 0usize, 0usize);
    while at < listing.len() {
        let end = listing[at..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(listing.len(), |p| at + p + 1);
        let line = listing[at..end]
            .strip_suffix(b"\n")
            .unwrap_or(&listing[at..end]);
        lines += 1;
        at = end;
        if path_hash(line_path(line)) % AVERAGE_LINES == 0
            || lines >= MAX_LINES
            || at == listing.len()
        {
            out.push(start..at);
            start = at;
            lines = 0;
        }
    }
    out
}

/// The digest a chunk is named by: the first 16 bytes of its SHA-256, 32 lowercase hex digits.
pub fn chunk_digest(chunk: &[u8]) -> String {
    hex::encode(&Sha256::digest(chunk)[..16])
}

/// The digests of the chunks of `listing`, in order.
pub fn chunk_digests(listing: &[u8]) -> Vec<String> {
    chunks(listing)
        .into_iter()
        .map(|r| chunk_digest(&listing[r]))
        .collect()
}

/// The recipe of `listing` against the held chunks named `held` (see the module docs): runs of
/// chunks the supervisor holds become `= A B` lines, the rest is sent as it is. With no held
/// chunks it is the listing itself.
#[cfg(any(test, feature = "host"))]
pub fn recipe(listing: &[u8], held: &[String]) -> Vec<u8> {
    use std::collections::HashMap;
    let mut index: HashMap<&str, usize> = HashMap::with_capacity(held.len());
    for (i, d) in held.iter().enumerate() {
        index.entry(d.as_str()).or_insert(i);
    }
    let mut out = Vec::new();
    // The run of held chunks being gathered: `A..B`.
    let mut run: Option<Range<usize>> = None;
    let flush = |out: &mut Vec<u8>, run: &mut Option<Range<usize>>| {
        if let Some(r) = run.take() {
            out.extend_from_slice(format!("= {} {}\n", r.start, r.end).as_bytes());
        }
    };
    for range in chunks(listing) {
        let chunk = &listing[range];
        match index.get(chunk_digest(chunk).as_str()) {
            Some(&i) => match &mut run {
                Some(r) if r.end == i => r.end = i + 1,
                _ => {
                    flush(&mut out, &mut run);
                    run = Some(i..i + 1);
                }
            },
            None => {
                flush(&mut out, &mut run);
                out.extend_from_slice(chunk);
                if !chunk.ends_with(b"\n") {
                    out.push(b'\n');
                }
            }
        }
    }
    flush(&mut out, &mut run);
    out
}

/// Why a recipe could not be rebuilt into a listing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RebuildError {
    /// A `= A B` line that is malformed or names chunks the supervisor does not hold.
    #[error("recipe line {line}: {why}")]
    Reference {
        /// The recipe's line number, from 1.
        line: usize,
        /// What is wrong with it.
        why: String,
    },
    /// The rebuilt listing grew past the length the upload named.
    #[error("the rebuilt listing is longer than the {0} bytes the upload named")]
    TooLong(u64),
}

/// Rebuilds a listing from `recipe` against `held` (the listing the supervisor holds) and its
/// chunks `held_chunks`; stops once it grows past `max_bytes`.
pub fn rebuild(
    recipe: &[u8],
    held: &[u8],
    held_chunks: &[Range<usize>],
    max_bytes: u64,
) -> Result<Vec<u8>, RebuildError> {
    let mut out = Vec::new();
    for (n, line) in recipe.split_inclusive(|&b| b == b'\n').enumerate() {
        if let Some(reference) = line.strip_prefix(b"= ") {
            let bad = |why: &str| RebuildError::Reference {
                line: n + 1,
                why: why.to_string(),
            };
            let text = std::str::from_utf8(reference)
                .map_err(|_| bad("not UTF-8"))?
                .trim_end_matches('\n');
            let (a, b) = text
                .split_once(' ')
                .and_then(|(a, b)| Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?)))
                .ok_or_else(|| bad("a reference is `= A B`, two chunk numbers"))?;
            if a >= b || b > held_chunks.len() {
                return Err(bad(&format!(
                    "chunks {a} to {b} (end excluded): {} chunks are held",
                    held_chunks.len()
                )));
            }
            for r in &held_chunks[a..b] {
                out.extend_from_slice(&held[r.clone()]);
            }
        } else {
            out.extend_from_slice(line);
        }
        if out.len() as u64 > max_bytes {
            return Err(RebuildError::TooLong(max_bytes));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(files: usize, changed: &[usize], inserted: Option<usize>) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..files {
            if Some(i) == inserted {
                out.extend_from_slice(
                    format!("f {} 3 - new/inserted-{i}.txt\n", "ab".repeat(32)).as_bytes(),
                );
            }
            let sha = if changed.contains(&i) { "cd" } else { "ef" }.repeat(32);
            out.extend_from_slice(
                format!("f {sha} {i} - src/dir{}/file{i}.rs\n", i / 50).as_bytes(),
            );
        }
        out
    }

    #[test]
    fn chunks_cover_the_listing_in_whole_lines() {
        let l = listing(5000, &[], None);
        let c = chunks(&l);
        assert_eq!(c.first().unwrap().start, 0);
        assert_eq!(c.last().unwrap().end, l.len());
        for w in c.windows(2) {
            assert_eq!(w[0].end, w[1].start);
        }
        for r in &c {
            assert!(l[r.clone()].ends_with(b"\n"));
            let lines = l[r.clone()].iter().filter(|&&b| b == b'\n').count();
            assert!(lines <= MAX_LINES);
        }
        // About AVERAGE_LINES a chunk.
        let average = 5000 / c.len();
        assert!((8..=128).contains(&average), "{average} lines a chunk");
        assert!(chunks(b"").is_empty());
        assert_eq!(chunks(b"d a"), vec![0..3]);
    }

    #[test]
    fn an_unchanged_listing_is_one_reference() {
        let l = listing(3000, &[], None);
        let r = recipe(&l, &chunk_digests(&l));
        let n = chunks(&l).len();
        assert_eq!(r, format!("= 0 {n}\n").into_bytes());
        assert_eq!(rebuild(&r, &l, &chunks(&l), l.len() as u64).unwrap(), l);
    }

    #[test]
    fn three_changed_lines_and_an_insertion_cost_their_chunks_only() {
        let held = listing(20_000, &[], None);
        let now = listing(20_000, &[1, 10_001, 19_999], Some(7_000));
        let r = recipe(&now, &chunk_digests(&held));
        // At most four chunks sent (each at most MAX_LINES lines of ~100 bytes), plus references.
        assert!(r.len() < 4 * MAX_LINES * 110, "{} bytes", r.len());
        assert!(
            r.len() < now.len() / 20,
            "{} of {} bytes",
            r.len(),
            now.len()
        );
        let rebuilt = rebuild(&r, &held, &chunks(&held), now.len() as u64).unwrap();
        assert_eq!(rebuilt, now);
    }

    #[test]
    fn nothing_held_sends_the_listing_itself() {
        let l = listing(100, &[], None);
        assert_eq!(recipe(&l, &[]), l);
        assert_eq!(rebuild(&l, b"", &[], l.len() as u64).unwrap(), l);
    }

    #[test]
    fn bad_references_and_overlong_listings_are_refused_naming_the_line() {
        let held = listing(200, &[], None);
        let c = chunks(&held);
        let n = c.len();
        for (recipe, what) in [
            (format!("d a\n= {n} {}\n", n + 1), "chunks are held"),
            ("= 2 1\n".to_string(), "chunks are held"),
            ("= x\n".to_string(), "two chunk numbers"),
        ] {
            let err = rebuild(recipe.as_bytes(), &held, &c, u64::MAX).unwrap_err();
            assert!(err.to_string().contains(what), "{err}");
        }
        let err = rebuild(&held, b"", &[], 10).unwrap_err();
        assert_eq!(err, RebuildError::TooLong(10));
    }
}
