//! OpenCode's instruction files below the workdir.
//!
//! When its `read` tool reads a file, OpenCode 1.18.33 hands the model the first `AGENTS.md`
//! or `CONTEXT.md` of every directory between that file and the project root ("Instructions
//! from: …"), whatever its switches. So for OpenCode the baseline holds those files of every
//! directory below the workdir too, the reset sets them back (one created since is removed,
//! one changed is written back; one removed stays removed: OpenCode reads nothing there), and
//! the record names each one present at launch (scope `nested`). The walk goes through the
//! whole workdir without following a link, within [`MAX_ENTRIES`] entries: past that the
//! iteration stops rather than launch with files it did not look at.

use super::{keep_entry, read_entry, Baseline, ContextError, Kept};
use crate::bounded_tree::{Step, Walk};
use crate::result::{ContextFileRecord, ContextResetRecord};
use std::collections::BTreeMap;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};

/// The names OpenCode reads below the workdir, in each directory.
pub(super) const NAMES: &[&str] = &["AGENTS.md", "CONTEXT.md"];

/// The most entries of the workdir the walk looks at.
pub(super) const MAX_ENTRIES: u64 = 1_000_000;

/// Calls `found` with the directory (its descriptor and path) of every entry named one of
/// [`NAMES`] in a directory strictly below `workdir`, and the name.
fn each(
    workdir: &Path,
    mut found: impl FnMut(BorrowedFd<'_>, &Path, &str) -> Result<(), ContextError>,
) -> Result<(), ContextError> {
    let root = super::open_dir(workdir)?;
    let label = workdir.display().to_string();
    let mut walk = Walk::new(root, &label, MAX_ENTRIES)
        .map_err(|e| ContextError::Dir(format!("nested instruction files: {e}")))?;
    while let Some(step) = walk.next() {
        let entry = match step {
            Ok(Step::Entry(entry)) => entry,
            Ok(Step::Limit(at)) => {
                return Err(ContextError::Dir(format!(
                    "{}: the workdir holds more than {MAX_ENTRIES} entries; OpenCode's \
                     instruction files below it cannot all be checked (agent.context_files: \
                     as-is runs with them)",
                    workdir.join(at).display()
                )))
            }
            Err(e) => return Err(ContextError::Dir(format!("nested instruction files: {e}"))),
        };
        if entry.is_dir() {
            walk.enter()
                .map_err(|e| ContextError::Dir(format!("nested instruction files: {e}")))?;
            continue;
        }
        let name = entry.name.to_str().filter(|n| NAMES.contains(n));
        let (Some(name), Some(parent)) = (name, entry.rel.parent()) else {
            continue;
        };
        // The workdir's own are the ordinary context files'.
        if parent.as_os_str().is_empty() {
            continue;
        }
        found(walk.dir(), &workdir.join(parent), name)?;
    }
    Ok(())
}

/// Keeps, in the baseline's `kept`, the instruction files below `workdir`.
pub(super) fn take(
    workdir: &Path,
    kept: &mut BTreeMap<PathBuf, Kept>,
    total: &mut u64,
) -> Result<(), ContextError> {
    each(workdir, |dir, dir_path, name| {
        keep_entry(dir, dir_path, name, kept, total)
    })
}

/// Sets the instruction files below `workdir` back to `baseline`, recording each in `done`.
pub(super) fn reset(
    baseline: &Baseline,
    workdir: &Path,
    done: &mut Vec<ContextResetRecord>,
) -> Result<(), ContextError> {
    each(workdir, |dir, dir_path, name| {
        baseline.reset_entry(dir, dir_path, name, done)
    })
}

/// The record entries of the instruction files below `workdir` (scope `nested`).
pub(super) fn named(workdir: &Path) -> Result<Vec<ContextFileRecord>, ContextError> {
    let mut out = Vec::new();
    each(workdir, |dir, dir_path, name| {
        out.extend(read_entry(dir, name, &dir_path.join(name), "nested")?);
        Ok(())
    })?;
    Ok(out)
}
