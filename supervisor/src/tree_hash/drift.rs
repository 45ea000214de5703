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
    out
}
