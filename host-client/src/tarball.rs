//! Tar streams for uploads: a whole directory tree, or a few single files.
//!
//! Entries are written in sorted order with deterministic headers (fixed mtime and owner, modes
//! 0644/0755 keeping the execute bit). Symlinks are never followed and never sent: anything that
//! is not a regular file or a directory is refused with its path (the harness validation refuses
//! them earlier; this is the second line).

use anyhow::{bail, Context as _};
use pitcrew_core::unpack::offer::host as offer_host;
use std::fs;
use std::io::Write;
use std::path::Path;

fn builder(w: &mut dyn Write) -> tar::Builder<&mut dyn Write> {
    let mut b = tar::Builder::new(w);
    b.mode(tar::HeaderMode::Deterministic);
    b.follow_symlinks(false);
    // A sparse file is sent as the regular file it reads as: the supervisor's unpack takes
    // regular files, directories and nothing else (GNU sparse entries included).
    b.sparse(false);
    b
}

/// Writes the tree under `dir` (its contents, paths relative to it) as a tar stream, in the
/// order and under the rules of `pitcrew_core::unpack::offer::host::walk` (the same as an
/// offered upload's).
pub fn write_tree(w: &mut dyn Write, dir: &Path) -> anyhow::Result<()> {
    let mut b = builder(w);
    for entry in offer_host::walk(dir)? {
        let path = &entry.path;
        let added = if entry.dir {
            b.append_dir(&entry.rel, path)
        } else {
            let (mut f, _) = offer_host::open_listed(path)?;
            b.append_file(&entry.rel, &mut f)
        };
        added.with_context(|| format!("{}: adding to the tar stream", path.display()))?;
    }
    b.into_inner()
        .with_context(|| format!("{}: finishing the tar stream", dir.display()))?
        .flush()?;
    Ok(())
}

/// Writes single files as a flat tar stream: each `(name, host path)` becomes the entry `name`.
pub fn write_files(w: &mut dyn Write, files: &[(String, &Path)]) -> anyhow::Result<()> {
    let mut b = builder(w);
    for (name, path) in files {
        let meta =
            fs::symlink_metadata(path).with_context(|| format!("{}: stat", path.display()))?;
        if !meta.is_file() {
            bail!(
                "{}: not a regular file (symlinks and special files are never uploaded)",
                path.display()
            );
        }
        let (mut f, _) = offer_host::open_listed(path)?;
        b.append_file(name, &mut f)
            .with_context(|| format!("{}: adding to the tar stream", path.display()))?;
    }
    b.into_inner()
        .context("finishing the tar stream")?
        .flush()?;
    Ok(())
}
