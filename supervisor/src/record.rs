//! The record step: an iteration's result record written where its mode keeps it, by one
//! function for both modes. `pitcrew-init run` writes it to `--result FILE` or `--result-fd N`
//! ([`Sink`]); `pitcrew-init serve` to `<records>/iteration-N/result.json`
//! ([`write_result_file`], after the server copied what the agent left into the record
//! directory). A file is written atomically ([`crate::atomic_file`]) and owner-only: a record
//! names what the agent did and holds its usage.

use crate::result::IterationResult;
use std::io::{self, Write as _};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// The mode of a record file: the supervisor's alone (less the umask).
pub const RECORD_MODE: u32 = 0o600;

/// Where the record of `pitcrew-init run` goes.
#[derive(Debug)]
pub enum Sink {
    /// A file, replaced atomically.
    File(PathBuf),
    /// An inherited descriptor the record is written to once.
    Fd(OwnedFd),
    /// Nowhere (the command line named no place, or a bad one).
    None,
}

/// Writes `record` to `sink`; `Err` says where it could not be written.
pub fn write(sink: Sink, record: &IterationResult) -> Result<(), String> {
    let line = record.to_json_line();
    match sink {
        Sink::File(path) => write_result_file(&path, line.as_bytes())
            .map_err(|e| format!("{}: {e}", path.display())),
        Sink::Fd(fd) => std::fs::File::from(fd)
            .write_all(line.as_bytes())
            .map_err(|e| format!("result fd: {e}")),
        Sink::None => Ok(()),
    }
}

/// Writes the record `line` (a [`IterationResult::to_json_line`]) to the file `path`,
/// atomically and owner-only.
pub fn write_result_file(path: &Path, line: &[u8]) -> io::Result<()> {
    crate::atomic_file::write(path, line, RECORD_MODE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::{SupervisorInfo, SupervisorMode};
    use std::os::unix::fs::PermissionsExt as _;

    fn record() -> IterationResult {
        let mut record = IterationResult::new(
            3,
            SupervisorInfo {
                pid1: false,
                mode: SupervisorMode::Degraded,
                degraded_reason: None,
            },
        );
        record.finish(7, Some("why".into()));
        record
    }

    #[test]
    fn a_file_sink_holds_the_record_line_owner_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("result.json");
        write(Sink::File(path.clone()), &record()).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            record().to_json_line()
        );
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, RECORD_MODE);
    }

    #[test]
    fn an_fd_sink_gets_the_same_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fd");
        let file = std::fs::File::create(&path).unwrap();
        write(Sink::Fd(file.into()), &record()).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            record().to_json_line()
        );
        assert_eq!(write(Sink::None, &record()), Ok(()));
    }

    #[test]
    fn an_unwritable_file_sink_names_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent/result.json");
        let err = write(Sink::File(path), &record()).unwrap_err();
        assert!(err.contains("absent/result.json"), "{err}");
    }
}
