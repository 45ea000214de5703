//! A local sandbox's records read from its state directory, for when its supervisor is gone:
//! which ones the host never collected (`records/.collected` lists the collected ones), and one
//! record as a tar stream written by the supervisor's own walk (`collect`'s), unpacked by the
//! host with the same safe rule.

use pitcrew_core::server::{tar_record_dir, COLLECTED_FILE};
use std::fs;
use std::io::{self, Read};
use std::os::unix::net::UnixStream;
use std::path::Path;

/// The iterations in `records` that have a finished record (`result.json`), ascending (none
/// when there is no records directory); an error when the directory cannot be read.
fn finished(records: &Path) -> io::Result<Vec<u32>> {
    let entries = match fs::read_dir(records) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut found = Vec::new();
    for entry in entries {
        let Some(n) = entry?
            .file_name()
            .to_str()
            .and_then(|name| name.strip_prefix("iteration-"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        match fs::metadata(records.join(format!("iteration-{n}/result.json"))) {
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
    let collected: std::collections::BTreeSet<u32> =
        match fs::read_to_string(records.join(COLLECTED_FILE)) {
            Ok(text) => text.lines().filter_map(|l| l.trim().parse().ok()).collect(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Default::default(),
            Err(_) => return None,
        };
    let finished = finished(records).ok()?;
    Some(
        finished
            .into_iter()
            .filter(|n| !collected.contains(n))
            .collect(),
    )
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
    let dir = records.join(format!("iteration-{n}"));
    if !dir.join("result.json").is_file() {
        return Ok(None);
    }
    let (reader, mut writer) = UnixStream::pair()?;
    std::thread::spawn(move || {
        // The supervisor's own walk: what it would have sent, read the same way.
        if let Err(err) = tar_record_dir(&dir, &mut writer) {
            tracing::warn!("{}: reading the stored record: {err}", dir.display());
        }
    });
    Ok(Some((n, Box::new(reader))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uncollected_records_are_those_finished_and_not_listed() {
        let tmp = tempfile::tempdir().unwrap();
        for n in 1..=3 {
            let d = tmp.path().join(format!("iteration-{n}"));
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("result.json"), "{}").unwrap();
        }
        // Started, never finished: not a record.
        fs::create_dir_all(tmp.path().join("iteration-4")).unwrap();
        fs::write(tmp.path().join(COLLECTED_FILE), "1\n3\n").unwrap();
        assert_eq!(uncollected(tmp.path()), Some(vec![2]));
        let (n, mut tar) = record_tar(tmp.path(), None).unwrap().unwrap();
        assert_eq!(n, 3);
        let mut archive = tar::Archive::new(&mut tar);
        let names: Vec<String> = archive
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        assert_eq!(names, vec!["result.json"]);
        assert!(record_tar(tmp.path(), Some(4)).unwrap().is_none());
    }
}
