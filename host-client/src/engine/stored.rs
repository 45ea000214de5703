//! A sandbox's records read from its storage when its supervisor is gone, by one rule for every
//! engine that can reach the storage: a finished record is a directory `iteration-N` holding a
//! regular `result.json`; `.collected` lists the iterations the host collected; one record is
//! streamed as a tar written by the supervisor's own walk (`collect`'s), which the host unpacks
//! with the same safe rule. A record the host read from the storage is then noted there as
//! collected, as the supervisor would have noted it. The local engine reads its state directory ([`Listing::read_dir`]);
//! the container engines read a tar of the stopped container's records directory, as `<cli> cp`
//! writes it ([`Listing::read_tar`]).

use pitcrew_core::record_names::{
    collected_lines, iteration_dir_name, parse_collected, parse_iteration_dir, COLLECTED_FILE,
    RESULT_FILE,
};
use pitcrew_core::server::tar_record_dir;
use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Read};
use std::os::unix::net::UnixStream;
use std::path::{Component, Path, PathBuf};
use std::thread::JoinHandle;

/// The most bytes of `.collected` read from a tar stream (a line per collected iteration).
const COLLECTED_MAX: u64 = 16 << 20;

/// What a records directory holds, as far as deleting it goes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Listing {
    /// The iterations with a finished record (a regular `iteration-N/result.json`), ascending.
    pub(super) finished: Vec<u32>,
    /// The iterations `.collected` lists: the host said it holds their records.
    pub(super) collected: BTreeSet<u32>,
}

impl Listing {
    /// The finished iterations the host never said it collected, ascending.
    pub(super) fn uncollected(&self) -> Vec<u32> {
        self.finished
            .iter()
            .copied()
            .filter(|n| !self.collected.contains(n))
            .collect()
    }

    /// The latest finished iteration.
    pub(super) fn latest(&self) -> Option<u32> {
        self.finished.last().copied()
    }

    /// Reads the records directory `records` (empty when there is none); an error when it, or
    /// its `.collected`, cannot be read.
    pub(super) fn read_dir(records: &Path) -> io::Result<Listing> {
        let collected = match fs::read_to_string(records.join(COLLECTED_FILE)) {
            Ok(text) => parse_collected(&text),
            Err(e) if e.kind() == io::ErrorKind::NotFound => BTreeSet::new(),
            Err(e) => return Err(e),
        };
        Ok(Listing {
            finished: finished(records)?,
            collected,
        })
    }

    /// Reads a tar stream of a records directory whose entries are below one top directory
    /// (`records/iteration-1/result.json`, as `<cli> cp CONTAINER:DIR -` writes it). Only
    /// names and `.collected` are read; every other entry's content is skipped.
    pub(super) fn read_tar(tar: impl Read) -> io::Result<Listing> {
        let mut listing = Listing::default();
        let mut archive = tar::Archive::new(tar);
        for entry in archive.entries()? {
            let mut entry = entry?;
            if entry.header().entry_type() != tar::EntryType::Regular {
                continue;
            }
            let path = entry.path()?.into_owned();
            let names: Vec<&str> = path
                .components()
                .filter(|c| !matches!(c, Component::CurDir))
                .skip(1)
                .map(|c| match c {
                    Component::Normal(name) => name.to_str().unwrap_or_default(),
                    _ => "",
                })
                .collect();
            match names.as_slice() {
                [name] if *name == COLLECTED_FILE => {
                    if entry.size() > COLLECTED_MAX {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("{}: {} bytes", path.display(), entry.size()),
                        ));
                    }
                    let mut text = String::new();
                    entry.read_to_string(&mut text)?;
                    listing.collected = parse_collected(&text);
                }
                [dir, name] if *name == RESULT_FILE => {
                    listing.finished.extend(parse_iteration_dir(dir))
                }
                _ => {}
            }
        }
        listing.finished.sort_unstable();
        listing.finished.dedup();
        Ok(listing)
    }
}

/// The iterations in `records` that have a finished record, ascending (none when there is no
/// records directory); an error when the directory cannot be read.
fn finished(records: &Path) -> io::Result<Vec<u32>> {
    let entries = match fs::read_dir(records) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut found = Vec::new();
    for entry in entries {
        let Some(n) = entry?.file_name().to_str().and_then(parse_iteration_dir) else {
            continue;
        };
        match fs::metadata(records.join(iteration_dir_name(n)).join(RESULT_FILE)) {
            Ok(m) if m.is_file() => found.push(n),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    found.sort_unstable();
    Ok(found)
}

/// The finished iterations in `records` that the host never said it collected; `None` when the
/// storage cannot be read (then nothing may be deleted on its word).
pub(super) fn uncollected(records: &Path) -> Option<Vec<u32>> {
    Listing::read_dir(records).ok().map(|l| l.uncollected())
}

/// Notes in `records/.collected` that the host holds the record of `iteration` (read from the
/// storage while the supervisor was gone): appended, never through a link.
pub(super) fn mark_collected(records: &Path, iteration: u32) -> io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(records.join(COLLECTED_FILE))?;
    file.write_all(collected_lines([iteration]).as_bytes())
}

/// A tar stream holding only `.collected` listing `collected` (root's, `0600`), for a
/// container engine's `cp -` into a stopped container's records directory.
pub(super) fn collected_tar(collected: &BTreeSet<u32>) -> io::Result<Vec<u8>> {
    let text = collected_lines(collected.iter().copied());
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mode(0o600);
    header.set_uid(0);
    header.set_gid(0);
    header.set_size(text.len() as u64);
    let mut builder = tar::Builder::new(Vec::new());
    builder.append_data(&mut header, COLLECTED_FILE, text.as_bytes())?;
    builder.into_inner()
}

/// The record of `iteration` (default: the latest finished one) in `records` as a tar stream
/// written by a thread; `None` when there is no such record.
pub(super) fn record_tar(
    records: &Path,
    iteration: Option<u32>,
) -> anyhow::Result<Option<(u32, Box<dyn Read + Send>)>> {
    let latest = || finished(records).ok().and_then(|f| f.last().copied());
    let Some(n) = iteration.or_else(latest) else {
        return Ok(None);
    };
    let dir = records.join(iteration_dir_name(n));
    if !dir.join(RESULT_FILE).is_file() {
        return Ok(None);
    }
    Ok(Some((n, stream_dir(dir, ())?)))
}

/// The record directory `dir` as a tar stream written by the supervisor's own walk (what it
/// would have sent, read the same way) in a thread; `keep` (a scratch copy holding `dir`) is
/// dropped once the walk ends. Dropping the stream waits for the thread.
pub(super) fn stream_dir(
    dir: PathBuf,
    keep: impl Send + 'static,
) -> io::Result<Box<dyn Read + Send>> {
    let (reader, mut writer) = UnixStream::pair()?;
    let walker = std::thread::spawn(move || {
        match tar_record_dir(&dir, &mut writer) {
            Ok(()) => {}
            // The reader stopped (at the archive's end marker, or on an error of its own).
            Err(err) if err.kind() == io::ErrorKind::BrokenPipe => {
                tracing::debug!("{}: the stored record's reader left: {err}", dir.display());
            }
            Err(err) => tracing::warn!("{}: reading the stored record: {err}", dir.display()),
        }
        drop(writer);
        drop(keep);
    });
    Ok(Box::new(DirStream {
        reader: Some(reader),
        walker: Some(walker),
    }))
}

/// The reading end of [`stream_dir`].
struct DirStream {
    reader: Option<UnixStream>,
    walker: Option<JoinHandle<()>>,
}

impl Read for DirStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &mut self.reader {
            Some(r) => r.read(buf),
            None => Ok(0),
        }
    }
}

impl Drop for DirStream {
    /// Closes the stream (a walk still writing ends with `EPIPE`) and waits for the walk, so
    /// what it kept is gone when the caller goes on (or exits).
    fn drop(&mut self) {
        drop(self.reader.take());
        if let Some(walker) = self.walker.take() {
            let _ = walker.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(tar: &mut dyn Read) -> Vec<String> {
        let mut archive = tar::Archive::new(tar);
        archive
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect()
    }

    #[test]
    fn uncollected_records_are_those_finished_and_not_listed() {
        let tmp = tempfile::tempdir().unwrap();
        for n in 1..=3 {
            let d = tmp.path().join(format!("iteration-{n}"));
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("result.json"), "{}").unwrap();
        }
        // Started, never finished: not a record. Not the supervisor's names: not records.
        fs::create_dir_all(tmp.path().join("iteration-4")).unwrap();
        for odd in ["iteration-05", "iteration-+6"] {
            fs::create_dir_all(tmp.path().join(odd)).unwrap();
            fs::write(tmp.path().join(odd).join("result.json"), "{}").unwrap();
        }
        fs::write(tmp.path().join(COLLECTED_FILE), "1\n3\n").unwrap();
        assert_eq!(uncollected(tmp.path()), Some(vec![2]));
        // A record read from the storage is noted there: then none is left uncollected.
        mark_collected(tmp.path(), 2).unwrap();
        assert_eq!(uncollected(tmp.path()), Some(vec![]));
        let (n, mut tar) = record_tar(tmp.path(), None).unwrap().unwrap();
        assert_eq!(n, 3);
        assert_eq!(names(&mut tar), vec!["result.json"]);
        assert!(record_tar(tmp.path(), Some(4)).unwrap().is_none());
        // No records directory: nothing to keep.
        assert_eq!(uncollected(&tmp.path().join("absent")), Some(vec![]));
    }

    #[test]
    fn a_records_tar_lists_what_the_directory_would() {
        let mut bytes = Vec::new();
        {
            let mut b = tar::Builder::new(&mut bytes);
            let mut add = |path: &str, kind: tar::EntryType, body: &[u8]| {
                let mut h = tar::Header::new_gnu();
                h.set_entry_type(kind);
                h.set_mode(0o600);
                h.set_size(body.len() as u64);
                b.append_data(&mut h, path, body).unwrap();
            };
            add("records/", tar::EntryType::Directory, b"");
            add("records/.collected", tar::EntryType::Regular, b"1\nx\n3\n");
            for n in [3, 1, 2] {
                add(
                    &format!("records/iteration-{n}/result.json"),
                    tar::EntryType::Regular,
                    b"{}",
                );
                add(
                    &format!("records/iteration-{n}/output.jsonl"),
                    tar::EntryType::Regular,
                    b"out\n",
                );
            }
            // Unfinished, misnamed, not a regular file, too deep: none is a record.
            add(
                "records/iteration-4/output.jsonl",
                tar::EntryType::Regular,
                b"",
            );
            add(
                "records/iteration-07/result.json",
                tar::EntryType::Regular,
                b"{}",
            );
            add(
                "records/iteration-8/result.json",
                tar::EntryType::Directory,
                b"",
            );
            add(
                "records/x/iteration-9/result.json",
                tar::EntryType::Regular,
                b"{}",
            );
            b.finish().unwrap();
        }
        let listing = Listing::read_tar(&bytes[..]).unwrap();
        assert_eq!(listing.finished, vec![1, 2, 3]);
        assert_eq!(listing.uncollected(), vec![2]);
        assert_eq!(listing.latest(), Some(3));
        // The `.collected` a container engine copies back in is read as the supervisor's.
        let collected: BTreeSet<u32> = [1, 2, 3].into();
        let tar = collected_tar(&collected).unwrap();
        let mut archive = tar::Archive::new(&tar[..]);
        let mut entry = archive.entries().unwrap().next().unwrap().unwrap();
        assert_eq!(entry.path().unwrap().to_str(), Some(COLLECTED_FILE));
        let mut text = String::new();
        entry.read_to_string(&mut text).unwrap();
        assert_eq!(parse_collected(&text), collected);
        // An empty stream (no records directory) lists nothing.
        assert_eq!(Listing::read_tar(&[][..]).unwrap(), Listing::default());
    }

    #[test]
    fn a_streamed_copy_is_dropped_once_the_walk_ends() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("iteration-1");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("result.json"), "{}").unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        struct Kept(std::sync::mpsc::Sender<()>);
        impl Drop for Kept {
            fn drop(&mut self) {
                let _ = self.0.send(());
            }
        }
        let mut tar = stream_dir(dir, Kept(tx)).unwrap();
        assert_eq!(names(&mut tar), vec!["result.json"]);
        drop(tar);
        // Dropping the stream waited for the walk, which dropped what it kept.
        assert!(rx.try_recv().is_ok());
    }
}
