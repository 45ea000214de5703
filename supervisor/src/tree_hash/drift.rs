//! What differs between an expected listing and the tree actually found.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::TreeListing;

/// Differences between two listings. Paths are relative without `./`; directory entries end with
/// `/`. Each list is sorted bytewise.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Drift {
    /// Files and directories present only in the actual tree.
    pub added: Vec<String>,
    /// Files and directories present only in the expected tree.
    pub removed: Vec<String>,
    /// Files present in both with different content.
    pub changed: Vec<String>,
    /// Paths left out of the three lists, each cut to its first [`DRIFT_NAMED`] (a tree may
    /// differ in a million files; a record must stay readable).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub left_out: u64,
}

/// Most paths named in each list of a [`Drift`].
pub const DRIFT_NAMED: usize = 1000;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Drift {
    /// True when the two listings are the same.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// Compares `expected` with `actual`.
pub fn drift(expected: &TreeListing, actual: &TreeListing) -> Drift {
    let want: BTreeMap<&str, (&str, u64)> = expected
        .files
        .iter()
        .map(|f| (f.path.as_str(), (f.sha256.as_str(), f.size)))
        .collect();
    let have: BTreeMap<&str, (&str, u64)> = actual
        .files
        .iter()
        .map(|f| (f.path.as_str(), (f.sha256.as_str(), f.size)))
        .collect();
    let want_dirs: BTreeSet<&str> = expected.dirs.iter().map(String::as_str).collect();
    let have_dirs: BTreeSet<&str> = actual.dirs.iter().map(String::as_str).collect();

    let mut out = Drift::default();
    for (path, entry) in &have {
        match want.get(path) {
            None => out.added.push((*path).to_owned()),
            Some(expected)
                if !expected.0.eq_ignore_ascii_case(entry.0) || expected.1 != entry.1 =>
            {
                out.changed.push((*path).to_owned())
            }
            Some(_) => {}
        }
    }
    out.removed.extend(
        want.keys()
            .filter(|p| !have.contains_key(*p))
            .map(|p| (*p).to_owned()),
    );
    out.added
        .extend(have_dirs.difference(&want_dirs).map(|d| format!("{d}/")));
    out.removed
        .extend(want_dirs.difference(&have_dirs).map(|d| format!("{d}/")));
    out.added.sort_unstable();
    out.removed.sort_unstable();
    for list in [&mut out.added, &mut out.removed, &mut out.changed] {
        if list.len() > DRIFT_NAMED {
            out.left_out += (list.len() - DRIFT_NAMED) as u64;
            list.truncate(DRIFT_NAMED);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree_hash::FileRecord;

    #[test]
    fn each_list_names_at_most_drift_named_paths_and_counts_the_rest() {
        let files = |n: usize, prefix: &str| TreeListing {
            files: (0..n)
                .map(|i| FileRecord {
                    path: format!("{prefix}{i:05}"),
                    sha256: "00".into(),
                    size: 1,
                })
                .collect(),
            dirs: Vec::new(),
        };
        let d = drift(&files(10, "gone-"), &files(DRIFT_NAMED + 5, "new-"));
        assert_eq!(d.added.len(), DRIFT_NAMED);
        assert_eq!(d.removed.len(), 10);
        assert_eq!(d.left_out, 5);
        assert_eq!(d.added[0], "new-00000");
    }
}
