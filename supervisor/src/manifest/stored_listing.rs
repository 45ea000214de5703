//! [`ListingWriter`] and [`StoredListing`]: a tree's expected per-file listing kept in a file of
//! the supervisor's own directory between iterations instead of in memory.
//!
//! The listing only explains a drift (which paths differ); the tree's digest, which decides
//! whether the tree passes, stays in memory. A long-lived supervisor would otherwise hold every
//! listed path for the sandbox's life (about 70 bytes a file compact, 70 MB for a million files).
//! The file holds one JSON value a line: a directory as a string, a file as
//! `{"path", "sha256", "size"}`. Its SHA-256 is kept in memory and checked when the file is
//! read back, so a file changed behind the supervisor's back is reported, never believed.

use crate::tree_hash::{FileRecord, TreeListing};
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// A complete listing on disk: where, how long, its SHA-256 and how many entries it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredListing {
    path: PathBuf,
    bytes: u64,
    sha256: [u8; 32],
    /// Files listed.
    pub files: u64,
    /// Directories listed.
    pub dirs: u64,
}

impl StoredListing {
    /// Reads the listing back, refusing a file that is not exactly what was written.
    pub fn load(&self) -> Result<TreeListing, String> {
        let file = File::open(&self.path).map_err(|e| format!("{}: {e}", self.path.display()))?;
        let mut text = Vec::new();
        // One byte more than written: a longer file is caught by the length check below.
        file.take(self.bytes.saturating_add(1))
            .read_to_end(&mut text)
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        if text.len() as u64 != self.bytes || Sha256::digest(&text).as_slice() != self.sha256 {
            return Err(format!(
                "{} changed since the supervisor wrote it",
                self.path.display()
            ));
        }
        let mut listing = TreeListing::default();
        for (n, line) in BufReader::new(text.as_slice()).lines().enumerate() {
            let line = line.map_err(|e| format!("{}: {e}", self.path.display()))?;
            let bad = |e: serde_json::Error| format!("{} line {}: {e}", self.path.display(), n + 1);
            if line.starts_with('"') {
                listing.dirs.push(serde_json::from_str(&line).map_err(bad)?);
            } else {
                listing
                    .files
                    .push(serde_json::from_str(&line).map_err(bad)?);
            }
        }
        Ok(listing)
    }
}

/// A listing being written, possibly over several requests (`add_listing`).
#[derive(Debug)]
pub struct ListingWriter {
    path: PathBuf,
    file: std::io::BufWriter<File>,
    hasher: Sha256,
    bytes: u64,
    files: u64,
    dirs: u64,
}

impl ListingWriter {
    /// Creates (or truncates) the owner-only file `path`, without following a link there.
    pub fn create(path: &Path) -> std::io::Result<ListingWriter> {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)?;
        Ok(ListingWriter {
            path: path.to_path_buf(),
            file: std::io::BufWriter::with_capacity(64 * 1024, file),
            hasher: Sha256::new(),
            bytes: 0,
            files: 0,
            dirs: 0,
        })
    }

    fn line(&mut self, json: &[u8]) -> std::io::Result<()> {
        for part in [json, b"\n"] {
            self.file.write_all(part)?;
            self.hasher.update(part);
            self.bytes += part.len() as u64;
        }
        Ok(())
    }

    /// Appends files and directories.
    pub fn append<'a>(
        &mut self,
        files: impl IntoIterator<Item = FileRecord>,
        dirs: impl IntoIterator<Item = &'a String>,
    ) -> std::io::Result<()> {
        let mut json = Vec::with_capacity(256);
        for record in files {
            json.clear();
            serde_json::to_writer(&mut json, &record)?;
            self.line(&json)?;
            self.files += 1;
        }
        for dir in dirs {
            json.clear();
            serde_json::to_writer(&mut json, dir)?;
            self.line(&json)?;
            self.dirs += 1;
        }
        Ok(())
    }

    /// Files and directories appended so far.
    pub fn counts(&self) -> (u64, u64) {
        (self.files, self.dirs)
    }

    /// Flushes the file and returns what it holds.
    pub fn finish(mut self) -> std::io::Result<StoredListing> {
        self.file.flush()?;
        Ok(StoredListing {
            path: self.path,
            bytes: self.bytes,
            sha256: self.hasher.finalize().into(),
            files: self.files,
            dirs: self.dirs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_comes_back_as_written_in_parts_and_not_once_the_file_grew() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tree-0.jsonl");
        let record = |p: &str, size| FileRecord {
            path: p.into(),
            sha256: "ab".repeat(32),
            size,
        };
        let mut writer = ListingWriter::create(&path).unwrap();
        writer
            .append([record("a\nb.js", 1)], &["\"quoted\" dir".to_string()])
            .unwrap();
        writer.append([record("c.js", 2)], &[]).unwrap();
        assert_eq!(writer.counts(), (2, 1));
        let stored = writer.finish().unwrap();
        let listing = stored.load().unwrap();
        assert_eq!(listing.files, [record("a\nb.js", 1), record("c.js", 2)]);
        assert_eq!(listing.dirs, ["\"quoted\" dir"]);
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(b"\"extra\"\n").unwrap();
        let err = stored.load().unwrap_err();
        assert!(
            err.contains("changed since the supervisor wrote it"),
            "{err}"
        );
    }
}
