//! The two digest formats, computed from a [`TreeListing`] (see the module documentation of
//! [`super`] for the definitions).

use std::cmp::Ordering;

use sha2::{Digest, Sha256};

use super::{FileRecord, TreeListing};

/// `pi-tree-v1`: sorted `<hash>  ./<path>` lines, then `<hash of sorted dir list>  -`.
pub(super) fn pi_tree_v1(listing: &TreeListing) -> String {
    // `LC_ALL=C sort` over whole lines: by content hash first, then by path. Names cannot
    // contain '\n', so sorting the lines without their terminator gives the same order. The lines
    // are compared in place, not built.
    let mut files: Vec<&FileRecord> = listing.files.iter().collect();
    files.sort_unstable_by(|a, b| line_order(a, b));
    let mut outer = Sha256::new();
    for f in files {
        outer.update(f.sha256.as_bytes());
        outer.update(b"  ./");
        outer.update(f.path.as_bytes());
        outer.update(b"\n");
    }

    let mut dirs: Vec<&str> = listing.dirs.iter().map(String::as_str).collect();
    dirs.sort_unstable();
    let mut inner = Sha256::new();
    inner.update(b".\n");
    for dir in dirs {
        inner.update(b"./");
        inner.update(dir.as_bytes());
        inner.update(b"\n");
    }
    outer.update(hex::encode(inner.finalize()).as_bytes());
    outer.update(b"  -\n");
    hex::encode(outer.finalize())
}

/// `content-v1`: sorted `<path>:<hash>` lines joined by `\n`, plus a final `\n`.
pub(super) fn content_v1(listing: &TreeListing) -> String {
    let mut lines: Vec<String> = listing
        .files
        .iter()
        .map(|f| format!("{}:{}", f.path, f.sha256))
        .collect();
    lines.sort_unstable();
    let mut hasher = Sha256::new();
    for line in &lines {
        hasher.update(line.as_bytes());
        hasher.update(b"\n");
    }
    if lines.is_empty() {
        hasher.update(b"\n");
    }
    hex::encode(hasher.finalize())
}

/// The bytewise order of the lines `<sha256>  ./<path>` of two files, without building them.
fn line_order(a: &FileRecord, b: &FileRecord) -> Ordering {
    if a.sha256.len() == b.sha256.len() {
        // The separators line up: comparing the fields in turn is comparing the lines.
        a.sha256.cmp(&b.sha256).then_with(|| a.path.cmp(&b.path))
    } else {
        let line = |f: &FileRecord| {
            let (sha256, path) = (f.sha256.as_bytes(), f.path.as_bytes());
            sha256
                .iter()
                .chain(b"  ./")
                .chain(path)
                .copied()
                .collect::<Vec<u8>>()
        };
        line(a).cmp(&line(b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, sha256: &str) -> FileRecord {
        FileRecord {
            path: path.into(),
            sha256: sha256.into(),
            size: 0,
        }
    }

    #[test]
    fn content_v1_sorts_whole_lines_not_paths() {
        // Path order puts "ab" before "ab.c"; line order puts "ab.c:" first ('.' < ':').
        let listing = TreeListing {
            files: vec![file("ab", "11"), file("ab.c", "22")],
            dirs: vec![],
        };
        let expected = hex::encode(Sha256::digest(b"ab.c:22\nab:11\n"));
        assert_eq!(content_v1(&listing), expected);
    }

    #[test]
    fn pi_tree_v1_sorts_by_hash_first() {
        let listing = TreeListing {
            files: vec![file("a", "bb"), file("b", "aa")],
            dirs: vec!["z".into()],
        };
        let dirs = hex::encode(Sha256::digest(b".\n./z\n"));
        let all = format!("aa  ./b\nbb  ./a\n{dirs}  -\n");
        assert_eq!(pi_tree_v1(&listing), hex::encode(Sha256::digest(all)));
    }

    #[test]
    fn pi_tree_v1_orders_lines_of_unequal_hash_lengths_as_whole_lines() {
        // Listings read from manifests may carry malformed hashes: ' ' after "a" sorts before
        // "\u{1}", so the line "a  ./x" comes after "a\u{1}  ./y" only if compared as lines.
        let listing = TreeListing {
            files: vec![file("x", "a"), file("y", "a\u{1}"), file("z", "a\u{1}b")],
            dirs: vec![],
        };
        let dirs = hex::encode(Sha256::digest(b".\n"));
        let all = format!("a\u{1}  ./y\na\u{1}b  ./z\na  ./x\n{dirs}  -\n");
        assert_eq!(pi_tree_v1(&listing), hex::encode(Sha256::digest(all)));
    }

    #[test]
    fn empty_listings() {
        let empty = TreeListing::default();
        let dirs = hex::encode(Sha256::digest(b".\n"));
        let all = format!("{dirs}  -\n");
        assert_eq!(pi_tree_v1(&empty), hex::encode(Sha256::digest(all)));
        assert_eq!(content_v1(&empty), hex::encode(Sha256::digest(b"\n")));
    }
}
