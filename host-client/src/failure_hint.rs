//! Why a failed iteration failed, in the runtime's own words, for the line and the table row
//! the operator reads first: an agent that exits non-zero without a supervisor reason (no API
//! key, not logged in) says why in its JSON stream or on stderr, which only the record holds.
//!
//! Read from the collected record: the runtime's error from `output.jsonl` (the judge's rule:
//! pi's assistant message with `stopReason: "error"`, Claude's `result` with `is_error`), else
//! the last lines of `stderr.log`. Bounded (the judge's bounds; the last 8 KiB of stderr) and
//! cut to [`HINT_CHARS`]; the caller escapes it for the terminal.

use pitcrew_core::manifest::Runtime;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// Longest hint, in characters.
pub const HINT_CHARS: usize = 200;
/// How much of the end of `stderr.log` is read.
const STDERR_TAIL: u64 = 8 * 1024;
/// How many of its last non-empty lines the hint quotes.
const STDERR_LINES: usize = 2;

/// The hint for the record collected in `record_dir` of a `runtime` agent, if there is one.
pub fn failure_hint(runtime: Runtime, record_dir: &Path) -> Option<String> {
    let from_stream = File::open(record_dir.join("output.jsonl"))
        .ok()
        .and_then(|f| pitcrew_core::judge::judge(runtime, f))
        .map(|verdict| verdict.trim_start_matches("judge: ").to_string());
    from_stream
        .or_else(|| stderr_tail(&record_dir.join("stderr.log")))
        .map(|hint| cut(&hint, HINT_CHARS))
}

/// The last non-empty lines of the file at `path`, joined with ` / `.
fn stderr_tail(path: &Path) -> Option<String> {
    let mut f = File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(STDERR_TAIL)))
        .ok()?;
    let mut tail = Vec::new();
    f.take(STDERR_TAIL).read_to_end(&mut tail).ok()?;
    let text = String::from_utf8_lossy(&tail);
    let mut lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .rev()
        .take(STDERR_LINES)
        .collect();
    lines.reverse();
    (!lines.is_empty()).then(|| lines.join(" / "))
}

/// `s` cut to `max` characters, with `…` when cut.
pub fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtime_error_comes_first_then_the_end_of_stderr() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("stderr.log"),
            "starting\n\nError: No API key found for anthropic\n  at main\n\n",
        )
        .unwrap();
        assert_eq!(
            failure_hint(Runtime::Command, dir.path()).as_deref(),
            Some("Error: No API key found for anthropic / at main")
        );
        std::fs::write(
            dir.path().join("output.jsonl"),
            r#"{"type":"message_end","message":{"role":"assistant","stopReason":"error","errorMessage":"401 Unauthorized"}}"#,
        )
        .unwrap();
        let hint = failure_hint(Runtime::Pi, dir.path()).unwrap();
        assert!(hint.contains("401 Unauthorized"), "{hint}");
        assert!(!hint.starts_with("judge:"), "{hint}");
    }

    #[test]
    fn nothing_to_say_is_none_and_long_hints_are_cut() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(failure_hint(Runtime::Pi, dir.path()), None);
        std::fs::write(dir.path().join("stderr.log"), "x".repeat(10_000)).unwrap();
        let hint = failure_hint(Runtime::Command, dir.path()).unwrap();
        assert_eq!(hint.chars().count(), HINT_CHARS);
        assert!(hint.ends_with('…'));
    }
}
