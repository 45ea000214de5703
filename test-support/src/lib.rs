//! The one rule for a test that cannot run here: every test of the workspace that needs
//! something of the machine (root, PID namespaces, Landlock, podman, an agent on `PATH`, …)
//! asks [`prerequisite`] (or calls [`skip`]) instead of returning early on its own.
//!
//! - With `PITCREW_REQUIRE_E2E=1` (CI sets it) a missing prerequisite panics with the reason:
//!   the test fails, it cannot pass by not running.
//! - Otherwise the test is skipped: `SKIPPED: <test name>: <reason>` goes to stderr, and when
//!   `PITCREW_SKIP_DIR` names a directory (`scripts/test` sets it) a line `<test name>\t<reason>`
//!   is appended to a file of this process there (named by pid, so parallel test processes
//!   never write the same file), from which `scripts/test` prints the run's skip summary.
//!   A skipped test still shows as passed in the runner's own report; the summary is where
//!   skips are counted.
//!
//! The test name is the name of the current thread: libtest runs each test on a thread named
//! after the test (`module::name`).
//!
//! Only the standard library: every test crate of the workspace can depend on it.

use std::io::Write as _;
use std::path::Path;

/// The variable that turns a missing prerequisite into a failure (`1`).
pub const REQUIRE_E2E_VAR: &str = "PITCREW_REQUIRE_E2E";

/// The variable naming the directory where skips are recorded.
pub const SKIP_DIR_VAR: &str = "PITCREW_SKIP_DIR";

/// Whether a missing prerequisite must fail the test instead of skipping it
/// (`PITCREW_REQUIRE_E2E=1`).
pub fn e2e_required() -> bool {
    std::env::var(REQUIRE_E2E_VAR).is_ok_and(|v| v == "1")
}

/// `true` when `ok`; otherwise [`skip`]s with `what` (a failure with `PITCREW_REQUIRE_E2E=1`)
/// and returns `false`, so the test returns early:
///
/// ```no_run
/// # use pitcrew_test_support::prerequisite;
/// # fn can_unshare() -> bool { true }
/// if !prerequisite(can_unshare(), "needs root and PID namespaces (run the tests as root)") {
///     return;
/// }
/// ```
///
/// `what` says what is missing and how to get it.
#[track_caller] // a failure points at the test's gate
pub fn prerequisite(ok: bool, what: &str) -> bool {
    if !ok {
        skip(what);
    }
    ok
}

/// Records that the current test (or a part of it) does not run here, because of `what`
/// (what is missing and how to get it). Panics with `PITCREW_REQUIRE_E2E=1`; otherwise prints
/// `SKIPPED: <test name>: <what>` to stderr and appends `<test name>\t<what>` to this process's
/// file in `$PITCREW_SKIP_DIR` when that is set. The caller returns (or leaves out the part).
///
/// Panics too when the skip cannot be recorded in `$PITCREW_SKIP_DIR`: an unrecorded skip
/// would look like a pass.
#[track_caller] // a failure points at the test's gate
pub fn skip(what: &str) {
    let dir = std::env::var_os(SKIP_DIR_VAR).filter(|d| !d.is_empty());
    skip_as(
        &test_name(),
        what,
        e2e_required(),
        dir.as_deref().map(Path::new),
    );
}

/// [`skip`] of `test`, failing when `required`, recording in `dir`.
#[track_caller] // a failure points at the test's gate
fn skip_as(test: &str, what: &str, required: bool, dir: Option<&Path>) {
    assert!(
        !required,
        "{REQUIRE_E2E_VAR}=1 and {test} cannot run here: {what}"
    );
    eprintln!("SKIPPED: {test}: {what}");
    let Some(dir) = dir else { return };
    let file = dir.join(format!("{}.skips", std::process::id()));
    // One line per skip: tabs and line breaks of the reason would split it.
    let line = format!("{}\t{}\n", one_line(test), one_line(what));
    // One write of an O_APPEND file: lines of threads of this process do not interleave.
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&file)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(err) = written {
        panic!(
            "{test} is skipped ({what}) but the skip cannot be recorded in {} ({SKIP_DIR_VAR}): {err}",
            file.display()
        );
    }
}

/// The running test's name: libtest names the test's thread after it. A thread the test
/// started itself has no such name; then the test binary names where the skip came from.
fn test_name() -> String {
    match std::thread::current().name() {
        Some(name) if name != "main" => name.to_string(),
        _ => {
            let exe = std::env::current_exe().ok();
            let exe = exe
                .as_deref()
                .and_then(|p| p.file_name())
                .map_or_else(|| "?".into(), |n| n.to_string_lossy());
            format!("(a thread of test binary {exe})")
        }
    }
}

/// `s` with tabs and line breaks replaced by spaces.
fn one_line(s: &str) -> String {
    s.replace(['\t', '\n', '\r'], " ")
}

/// Why this process cannot create PID + mount namespaces (`unshare --pid --fork --mount-proc`,
/// which needs root), or `None` when it can: the prerequisite of every test that starts a
/// sandbox or runs `pitcrew-init` as PID 1.
pub fn unshare_pid_failure() -> Option<String> {
    match std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "true"])
        .stdin(std::process::Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(format!(
            "unshare --pid --fork --mount-proc failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(err) => Some(format!("cannot run unshare (util-linux): {err}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_test_name_is_the_threads() {
        assert_eq!(test_name(), "tests::the_test_name_is_the_threads");
    }

    #[test]
    fn a_reason_stays_on_one_line() {
        assert_eq!(one_line("a\tb\nc\r\nd"), "a b c  d");
    }

    #[test]
    fn a_prerequisite_that_holds_neither_skips_nor_fails() {
        assert!(prerequisite(true, "never reported"));
    }

    /// The panic message of `f`, which must panic.
    fn panic_of(f: impl FnOnce() + std::panic::UnwindSafe) -> String {
        let payload = std::panic::catch_unwind(f).expect_err("no panic");
        payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    }

    #[test]
    fn a_skip_is_recorded_on_one_line_or_fails_when_required() {
        let dir = std::env::temp_dir().join(format!("pitcrew-test-support-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let recorded = || {
            let mut lines = Vec::new();
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                assert_eq!(
                    path.file_name().unwrap().to_str(),
                    Some(format!("{}.skips", std::process::id()).as_str())
                );
                lines.extend(
                    std::fs::read_to_string(path)
                        .unwrap()
                        .lines()
                        .map(str::to_string),
                );
            }
            lines
        };

        skip_as("m::t", "needs a\tthing\nhere", false, Some(&dir));
        skip_as("m::u", "needs more", false, Some(&dir));
        assert_eq!(recorded(), ["m::t\tneeds a thing here", "m::u\tneeds more"]);
        // Not recording (no directory) still skips.
        skip_as("m::v", "needs nothing recorded", false, None);

        // Required: a failure naming the test and the reason, and nothing recorded.
        let message = panic_of(|| skip_as("m::w", "needs a\tthing", true, Some(&dir)));
        assert_eq!(
            message,
            "PITCREW_REQUIRE_E2E=1 and m::w cannot run here: needs a\tthing"
        );
        assert_eq!(recorded().len(), 2);

        // A skip that cannot be recorded is a failure, not a silent pass.
        let gone = dir.join("gone");
        let message = panic_of(|| skip_as("m::x", "needs y", false, Some(&gone)));
        assert!(
            message.starts_with("m::x is skipped (needs y) but the skip cannot be recorded in "),
            "{message}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
