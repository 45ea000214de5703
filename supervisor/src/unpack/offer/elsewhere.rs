//! Content from the other trees of the sandbox: an offered file that the tree being replaced
//! lacks may be held by another tree uploaded before (the same plugin library under two
//! plugins, a file the workspace and a plugin share). The server keeps, for each tree an offered
//! upload put in place, the listing it was offered with ([`OtherTree`]); that listing only says
//! where to look. A file found there is opened without following links (the path walked
//! directory by directory from the tree's root), must be a regular file of the listed size, and
//! is copied into staging, a reflink where the file system offers one, never moved and never
//! hard-linked: the copy is hashed, and kept only when it is the listed content. A tree the
//! agent changed since, or one replaced by a plain upload, only yields fewer files.

use super::{old_file, parse, Assembly, UnpackError};
use crate::bounded_tree;
use std::collections::HashMap;
use std::os::fd::AsFd;
use std::path::PathBuf;

/// Another tree of the sandbox, and the listing it was offered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtherTree {
    /// Its root (an earlier upload's destination).
    pub root: PathBuf,
    /// The file holding its listing, as offered (the server's own, in its records directory).
    pub listing: PathBuf,
}

impl Assembly {
    /// Copies into staging the content of the `missing` files (item, ordinal) that one of
    /// `others` holds, and leaves in `missing` only those none holds.
    pub(super) fn copy_from_others(
        &mut self,
        missing: &mut Vec<(usize, usize)>,
        others: &[OtherTree],
        buf: &mut [u8],
    ) -> Result<(), UnpackError> {
        // By content: the first missing file of each (sha256, size); later ones are duplicates
        // of it already.
        let mut wanted: HashMap<([u8; 32], u64), usize> = HashMap::new();
        for (at, &(i, _)) in missing.iter().enumerate() {
            if let Some(f) = self.items[i].file {
                wanted.entry((f.sha256, f.size)).or_insert(at);
            }
        }
        let mut found = vec![false; missing.len()];
        // Candidates that turned out to hold other content, by content: after two, that
        // content is asked for (a tree the agent rewrote, file by file at the same sizes, costs
        // at most two copies of each wanted file, not one per file it holds).
        let mut misses: HashMap<([u8; 32], u64), u8> = HashMap::new();
        for other in others {
            if wanted.is_empty() {
                break;
            }
            if other.root == self.dest {
                continue;
            }
            let Ok(text) = std::fs::read(&other.listing) else {
                continue;
            };
            let Ok(items) = parse(&text, &self.limits) else {
                continue;
            };
            let Ok(root) = bounded_tree::open_dir(&other.root) else {
                continue;
            };
            let mut cache = None;
            for item in &items {
                let Some(listed) = item.file else {
                    continue;
                };
                let key = (listed.sha256, listed.size);
                let Some(&at) = wanted.get(&key) else {
                    continue;
                };
                if misses.get(&key).is_some_and(|&n| n >= 2) {
                    continue;
                }
                let (name, parents) = item.name_and_parents();
                let Some(source) = old_file(root.as_fd(), &mut cache, &parents, &name, &listed)
                else {
                    continue;
                };
                let i = missing[at].0;
                let Some(file) = self.items[i].file else {
                    continue;
                };
                let raw = self.items[i].path.clone();
                let (name, parents) = self.items[i].name_and_parents();
                if !self.copy_in(&source, &parents, &name, &file, &raw, buf)? {
                    *misses.entry(key).or_default() += 1;
                } else {
                    wanted.remove(&key);
                    found[at] = true;
                    self.report.reused_files += 1;
                    self.report.reused_bytes += file.size;
                    self.report.from_other_trees += 1;
                }
            }
        }
        let mut at = 0;
        missing.retain(|_| {
            at += 1;
            !found[at - 1]
        });
        Ok(())
    }
}
