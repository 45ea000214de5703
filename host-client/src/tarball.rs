//! Tar streams for uploads: a whole directory tree, or a few single files.
//!
//! Entries are written in sorted order with deterministic headers (fixed mtime and owner, modes
//! 0644/0755 keeping the execute bit). Symlinks are never followed and never sent: anything that
//! is not a regular file or a directory is refused with its path (the harness validation refuses
//! them earlier; this is the second line).

use anyhow::{bail, Context as _};
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

/// Writes the tree under `dir` (its contents, paths relative to it) as a tar stream.
pub fn write_tree(w: &mut dyn Write, dir: &Path) -> anyhow::Result<()> {
    let mut b = builder(w);
    append_dir(&mut b, dir, Path::new(""))?;
    b.into_inner()
        .with_context(|| format!("{}: finishing the tar stream", dir.display()))?
        .flush()?;
    Ok(())
}

fn append_dir(b: &mut tar::Builder<&mut dyn Write>, dir: &Path, rel: &Path) -> anyhow::Result<()> {
    let here = dir.join(rel);
    let mut names: Vec<_> = fs::read_dir(&here)
        .with_context(|| format!("{}: reading the directory", here.display()))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()
        .with_context(|| format!("{}: reading the directory", here.display()))?;
    names.sort();
    for name in names {
        let rel = rel.join(&name);
        let path = dir.join(&rel);
        let meta =
            fs::symlink_metadata(&path).with_context(|| format!("{}: stat", path.display()))?;
        if meta.is_dir() {
            b.append_dir(&rel, &path)
                .with_context(|| format!("{}: adding to the tar stream", path.display()))?;
            append_dir(b, dir, &rel)?;
        } else if meta.is_file() {
            let mut f =
                fs::File::open(&path).with_context(|| format!("{}: open", path.display()))?;
            b.append_file(&rel, &mut f)
                .with_context(|| format!("{}: adding to the tar stream", path.display()))?;
        } else {
            bail!(
                "{}: not a regular file or directory (symlinks and special files are never uploaded)",
                path.display()
            );
        }
    }
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
        let mut f = fs::File::open(path).with_context(|| format!("{}: open", path.display()))?;
        b.append_file(name, &mut f)
            .with_context(|| format!("{}: adding to the tar stream", path.display()))?;
    }
    b.into_inner()
        .context("finishing the tar stream")?
        .flush()?;
    Ok(())
}
