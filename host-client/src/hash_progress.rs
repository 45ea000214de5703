//! Progress of the host's own hashing (the digests `validate`, `run` and `discover` compute from
//! the host's copies): nothing while it is short, then, once it has taken a second, a status line
//! on a terminal's stderr with the bytes read, the rate and the files hashed of those found so
//! far, cleared when the hashing ends. Off a terminal, and with `-q`, nothing is shown.

use pitcrew_core::tree_hash::HashProgress;
use std::io::IsTerminal as _;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

/// How long hashing runs before the status line appears.
const QUIET_FOR: Duration = Duration::from_secs(1);
/// How often the status line is redrawn.
const REDRAW: Duration = Duration::from_millis(100);

/// Runs `work`, giving it counters to fill when a display could show them (stderr is a terminal
/// and not `quiet`), and shows them while `work` runs past [`QUIET_FOR`].
pub fn watch<T>(quiet: bool, work: impl FnOnce(Option<&HashProgress>) -> T) -> T {
    if quiet || !std::io::stderr().is_terminal() {
        return work(None);
    }
    let progress = HashProgress::default();
    let (done, finished) = mpsc::channel::<()>();
    std::thread::scope(|scope| {
        let progress = &progress;
        scope.spawn(move || display(progress, &finished));
        let out = work(Some(progress));
        drop(done);
        out
    })
}

/// Waits [`QUIET_FOR`]; if the work still runs, draws the status line until it ends.
fn display(progress: &HashProgress, finished: &mpsc::Receiver<()>) {
    if finished.recv_timeout(QUIET_FOR) != Err(RecvTimeoutError::Timeout) {
        return;
    }
    let bar = indicatif::ProgressBar::with_draw_target(
        None,
        indicatif::ProgressDrawTarget::hidden(),
    )
    .with_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} hashing the host's copies: {binary_bytes} ({binary_bytes_per_sec}), {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    // What was read before the line appeared is not part of the rate.
    bar.set_position(progress.bytes());
    bar.reset_eta();
    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
    loop {
        bar.set_position(progress.bytes());
        bar.set_message(files_message(
            progress.files_hashed(),
            progress.files_found(),
        ));
        bar.tick();
        if finished.recv_timeout(REDRAW) != Err(RecvTimeoutError::Timeout) {
            break;
        }
    }
    bar.finish_and_clear();
}

/// `hashed/found files (p%)`: the share of the files found so far (the walk still lists
/// directories while it hashes, so `found` may grow).
pub fn files_message(hashed: u64, found: u64) -> String {
    let found = found.max(hashed);
    let percent = hashed.saturating_mul(100).checked_div(found).unwrap_or(0);
    format!("{hashed}/{found} files ({percent}%)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use pitcrew_core::tree_hash::{hash_tree_watched, sha256_file_watched, TreeFormat};

    #[test]
    fn the_message_gives_the_share_of_the_files_found() {
        assert_eq!(files_message(0, 0), "0/0 files (0%)");
        assert_eq!(files_message(1, 3), "1/3 files (33%)");
        assert_eq!(files_message(5, 5), "5/5 files (100%)");
        // A count read between two updates never shows more than 100%.
        assert_eq!(files_message(6, 5), "6/6 files (100%)");
    }

    #[test]
    fn the_counters_add_up_to_what_was_hashed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        std::fs::write(dir.path().join("one"), vec![1u8; 200_000]).unwrap();
        std::fs::write(dir.path().join("a/two"), b"two").unwrap();
        std::fs::write(dir.path().join("a/b/three"), b"").unwrap();
        let other = tempfile::tempdir().unwrap();
        let single = other.path().join("single");
        std::fs::write(&single, b"12345").unwrap();

        let progress = HashProgress::default();
        let digest = hash_tree_watched(dir.path(), TreeFormat::PiTreeV1, Some(&progress)).unwrap();
        assert_eq!(progress.files_found(), 3);
        assert_eq!(progress.files_hashed(), 3);
        assert_eq!(progress.bytes(), digest.listing.total_bytes());
        sha256_file_watched(&single, Some(&progress)).unwrap();
        assert_eq!(progress.files_found(), 4);
        assert_eq!(progress.files_hashed(), 4);
        assert_eq!(progress.bytes(), 200_000 + 3 + 5);
    }

    #[test]
    fn counters_only_where_a_display_shows_them() {
        let terminal = std::io::stderr().is_terminal();
        assert_eq!(watch(false, |p| p.is_some()), terminal);
        assert!(watch(true, |p| p.is_none()));
    }
}
