//! Reading result records for people: one summary per iteration (exit code and meaning,
//! duration, reaped, verification or drift, removed environment names) and the table `pitcrew
//! run` prints; and [`escape_controls`], which every human-readable output of `pitcrew` goes
//! through before it reaches the operator's terminal.

use crate::failure_hint::cut;
use pitcrew_core::result::IterationResult;
use pitcrew_core::verify::{CheckStatus, VerifyReport};
use serde::Serialize;
use serde_json::Value;
use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` must not reach a terminal as it is: C0 controls (ESC, BEL, CR, …), DEL, C1
/// controls, and the Unicode bidi controls and line separators that reorder or break what the
/// operator reads. `\n` and `\t` only when `keep_lines` is false.
fn is_unsafe(c: char, keep_lines: bool) -> bool {
    match c {
        '\n' | '\t' => !keep_lines,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => true,
        '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{2028}' | '\u{2029}' => true,
        '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => true,
        _ => false,
    }
}

fn escape(s: &str, keep_lines: bool) -> Cow<'_, str> {
    if !s.chars().any(|c| is_unsafe(c, keep_lines)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if !is_unsafe(c, keep_lines) {
            out.push(c);
            continue;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if u32::from(c) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
        }
    }
    Cow::Owned(out)
}

/// The UTC civil time of `secs` since the epoch: year, month, day, hour, minute, second
/// (Howard Hinnant's days-to-civil algorithm).
pub fn utc(secs: u64) -> (i64, i64, i64, u64, u64, u64) {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d, rem / 3600, (rem / 60) % 60, rem % 60)
}

/// `s` as it may be shown on the operator's terminal: control characters and bidi controls
/// are written as escapes (`\x1b`, `\x07`, `\r`, `\n`, `\u{9b}`, `\u{202e}`), so bytes the
/// agent or a repository chose (file names, reasons, command lines, output) cannot move the
/// cursor, clear the screen, retitle the window or reorder a line. Everything else, backslashes
/// included, is unchanged. JSON output does not use it: JSON escapes controls itself.
pub fn escape_controls(s: &str) -> Cow<'_, str> {
    escape(s, false)
}

/// [`escape_controls`] for text the operator asked to see as lines (the agent's output with
/// `-v`): newlines and tabs are kept, every other control is escaped.
pub fn escape_text(s: &str) -> Cow<'_, str> {
    escape(s, true)
}

/// A byte stream (the agent's output) made safe for a terminal piece by piece: invalid UTF-8
/// becomes `\xNN`, controls are escaped as by [`escape_text`], and a character split between
/// two pieces is kept until the next one.
#[derive(Debug, Default)]
pub struct EscapedStream {
    pending: Vec<u8>,
}

impl EscapedStream {
    /// The printable text of `bytes` (after what an earlier piece left pending).
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(text) => {
                    out.push_str(&escape_text(text));
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (good, bad) = rest.split_at(e.valid_up_to());
                    // Valid UTF-8 by construction.
                    out.push_str(&escape_text(&String::from_utf8_lossy(good)));
                    match e.error_len() {
                        Some(n) => {
                            for b in &bad[..n] {
                                let _ = write!(out, "\\x{b:02x}");
                            }
                            rest = &bad[n..];
                        }
                        // An incomplete character at the end: wait for the rest of it.
                        None => {
                            rest = bad;
                            break;
                        }
                    }
                }
            }
        }
        let keep = rest.len();
        let start = self.pending.len() - keep;
        self.pending.drain(..start);
        out
    }

    /// What is still pending at the end of the stream, escaped.
    pub fn finish(&mut self) -> String {
        let mut out = String::new();
        for b in self.pending.drain(..) {
            let _ = write!(out, "\\x{b:02x}");
        }
        out
    }
}

/// What the summary table shows of one iteration.
#[derive(Debug, Clone, Serialize)]
pub struct IterationSummary {
    /// Iteration number.
    pub iteration: u32,
    /// The iteration's exit code.
    pub exit_code: i32,
    /// What the code means.
    pub meaning: String,
    /// Machine-readable reason for codes that are not the agent's.
    pub reason: Option<String>,
    /// A failed iteration without a reason: the runtime's own error, or the end of its
    /// stderr (cut to 200 characters).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Host wall-clock time from the `run` request to the result, in milliseconds.
    pub duration_ms: u64,
    /// Processes killed before verification.
    pub reaped_before: u64,
    /// Processes killed after the agent.
    pub reaped_after: u64,
    /// Whether every tree and file verified.
    pub verified: bool,
    /// `ok (…)`, or what drifted.
    pub verification: String,
    /// Per-tree/per-file drift (empty when verified).
    pub drift: Vec<Value>,
    /// Names of the environment variables the supervisor removed.
    pub env_removed: Vec<String>,
    /// Workspace files the runtime read as configuration, unverified (`workspace_config`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub workspace_config: Vec<String>,
    /// Step times from the record (`reap_ms`, `verify_ms`, …).
    pub steps: Value,
    /// Host-side time of each event since the `run` request (`step`, `state`, `at_ms`).
    pub events: Vec<Value>,
    /// Where the record was collected to on the host.
    pub record_dir: Option<String>,
    /// The harness validation command's exit code after this iteration.
    pub validation_exit: Option<i32>,
}

fn names(list: &[String], max: usize) -> String {
    let mut s = list
        .iter()
        .take(max)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if list.len() > max {
        let _ = write!(s, " (+{} more)", list.len() - max);
    }
    s
}

/// A check's status as the record spells it (`ok`, `drifted`, `missing`, `refused`).
fn status_name(status: CheckStatus) -> String {
    serde_json::to_value(status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "?".to_string())
}

/// The verification summary of a record's `verification` (or a live status's report):
/// `(verified, text, drift entries)`.
pub fn verification_summary(verification: Option<&VerifyReport>) -> (bool, String, Vec<Value>) {
    let Some(verification) = verification else {
        return (false, "not verified".into(), Vec::new());
    };
    let mut bad = Vec::new();
    let mut drift = Vec::new();
    for t in &verification.trees {
        if t.status == CheckStatus::Ok {
            continue;
        }
        let status = status_name(t.status);
        let mut parts = Vec::new();
        if let Some(d) = &t.drift {
            for (key, list) in [
                ("changed", &d.changed),
                ("added", &d.added),
                ("removed", &d.removed),
            ] {
                if !list.is_empty() {
                    parts.push(format!("{key} {}", names(list, 5)));
                }
            }
        }
        if let Some(e) = &t.error {
            parts.push(e.clone());
        }
        bad.push(if parts.is_empty() {
            format!("{} {status}", t.name)
        } else {
            format!("{} {status}: {}", t.name, parts.join("; "))
        });
        drift.push(serde_json::json!({
            "tree": t.name, "path": t.path, "status": status, "drift": t.drift, "error": t.error,
        }));
    }
    for f in &verification.files {
        if f.status == CheckStatus::Ok {
            continue;
        }
        let status = status_name(f.status);
        bad.push(format!("{} {status}", f.path));
        drift.push(serde_json::json!({"file": f.path, "status": status, "error": f.error}));
    }
    if let Some(failure) = &verification.agent.failure {
        bad.push(format!("agent: {}", failure.reason));
    }
    if bad.is_empty() {
        (
            true,
            format!(
                "ok ({} trees, {} files)",
                verification.trees.len(),
                verification.files.len()
            ),
            drift,
        )
    } else {
        (false, bad.join("; "), drift)
    }
}

/// The summary of one result record.
pub fn summarize(
    record: &IterationResult,
    duration_ms: u64,
    events: Vec<Value>,
) -> IterationSummary {
    let (verified, verification, drift) = verification_summary(record.verification.as_ref());
    let env_removed = record.env.removed.iter().map(|r| r.name.clone()).collect();
    IterationSummary {
        iteration: record.iteration,
        exit_code: record.exit_code,
        meaning: record.meaning.clone(),
        reason: record.reason.clone(),
        error: None,
        duration_ms,
        reaped_before: record.reaped.before,
        reaped_after: record.reaped.after,
        verified,
        verification,
        drift,
        env_removed,
        workspace_config: record.workspace_config.clone(),
        steps: serde_json::to_value(&record.steps).unwrap_or(Value::Null),
        events,
        record_dir: None,
        validation_exit: None,
    }
}

/// Longest reason or environment text in a table cell (the JSON has it whole).
const CELL_CHARS: usize = 100;
/// Longest verification text in a table cell (it names what drifted).
const VERIFICATION_CHARS: usize = 240;

/// Whether the summary may be coloured: standard output is a terminal, `NO_COLOR` is unset or
/// empty (no-color.org) and `TERM` is not `dumb`.
pub fn colour_wanted() -> bool {
    use std::io::IsTerminal as _;
    colour_allowed(
        std::env::var_os("NO_COLOR").as_deref(),
        std::env::var_os("TERM").as_deref(),
        std::io::stdout().is_terminal(),
    )
}

/// [`colour_wanted`] from its inputs.
fn colour_allowed(
    no_color: Option<&std::ffi::OsStr>,
    term: Option<&std::ffi::OsStr>,
    terminal: bool,
) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty()) && term.is_none_or(|t| t != "dumb")
}

/// The summary table, one row per iteration; with `colour`, the exit column green for 0 and red
/// otherwise (only pitcrew's own escape sequences: every cell is escaped first).
pub fn table(rows: &[IterationSummary], colour: bool) -> String {
    let mut lines = vec![[
        "iter".to_string(),
        "exit".to_string(),
        "duration".to_string(),
        "reaped".to_string(),
        "verified".to_string(),
        "env removed".to_string(),
    ]];
    for r in rows {
        let mut exit = format!("{} {}", r.exit_code, r.meaning);
        if let Some(why) = r.reason.as_ref().or(r.error.as_ref()) {
            let _ = write!(exit, " ({})", cut(why, CELL_CHARS));
        }
        if let Some(v) = r.validation_exit {
            let _ = write!(exit, " [validation {v}]");
        }
        let env = if r.env_removed.is_empty() {
            "0".to_string()
        } else {
            format!("{}: {}", r.env_removed.len(), r.env_removed.join(", "))
        };
        // Meaning, reason, drifted names and env names come from the record: escaped.
        lines.push([
            r.iteration.to_string(),
            escape_controls(&exit).into_owned(),
            format!("{:.2}s", r.duration_ms as f64 / 1000.0),
            format!("{}/{}", r.reaped_before, r.reaped_after),
            escape_controls(&cut(&r.verification, VERIFICATION_CHARS)).into_owned(),
            escape_controls(&cut(&env, CELL_CHARS)).into_owned(),
        ]);
    }
    // The last two columns are free-width; the others are padded.
    let mut widths = [0usize; 6];
    for l in &lines {
        for (i, c) in l.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    for (row, l) in lines.iter().enumerate() {
        let mut line = String::new();
        for (i, c) in l.iter().enumerate() {
            // The header is row 0; row r is rows[r - 1].
            let paint = match rows.get(row.wrapping_sub(1)) {
                Some(r) if colour && i == 1 => Some(if r.exit_code == 0 { "32" } else { "31" }),
                _ => None,
            };
            let shown = match paint {
                Some(sgr) => format!("\x1b[{sgr}m{c}\x1b[0m"),
                None => c.clone(),
            };
            if i + 1 == l.len() {
                line.push_str(&shown);
            } else {
                let pad = widths[i] - c.chars().count();
                let _ = write!(line, "{shown}{}  ", " ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pitcrew_core::environment::{EnvSource, RemovedVar};
    use pitcrew_core::exit_code::PinRole;
    use pitcrew_core::result::{SupervisorInfo, SupervisorMode};
    use pitcrew_core::tree_hash::{Drift, TreeFormat};
    use pitcrew_core::verify::{AgentCheck, FailureKind, FileCheck, TreeCheck, VerifyFailure};

    /// A record as the supervisor builds it: `iteration`, `exit_code` and `reason` set through
    /// `finish`, one tree and one file checked.
    fn record(
        iteration: u32,
        code: i32,
        reason: &str,
        tree: TreeCheck,
        file: FileCheck,
    ) -> IterationResult {
        let mut r = IterationResult::new(
            iteration,
            SupervisorInfo {
                pid1: true,
                mode: SupervisorMode::Pid1,
                degraded_reason: None,
            },
        );
        r.verification = Some(VerifyReport {
            trees: vec![tree],
            files: vec![file],
            agent: AgentCheck {
                requested: "/bin/sh".into(),
                resolved: Some("/bin/sh".into()),
                ..AgentCheck::default()
            },
            duration_ms: 3,
        });
        r.finish(code, Some(reason.to_string()));
        r
    }

    fn tree(name: &str, status: CheckStatus, drift: Drift, error: Option<&str>) -> TreeCheck {
        TreeCheck {
            name: name.into(),
            path: format!("/p/{name}"),
            role: PinRole::Plugin,
            format: TreeFormat::PiTreeV1,
            expected: "aa".into(),
            actual: Some("bb".into()),
            status,
            drift: Some(drift),
            error: error.map(String::from),
        }
    }

    fn file(path: &str, status: CheckStatus) -> FileCheck {
        FileCheck {
            path: path.into(),
            role: PinRole::HookAdapter,
            expected: "aa".into(),
            actual: Some("aa".into()),
            status,
            error: None,
        }
    }

    fn removed(name: &str) -> RemovedVar {
        RemovedVar {
            name: name.into(),
            source: EnvSource::Dotenv,
            rule: "NODE_OPTIONS (Node loads or changes code from it)".into(),
        }
    }

    #[test]
    fn drift_and_env_names_are_summarised() {
        let drift = Drift {
            added: vec![],
            removed: vec![],
            changed: vec!["index.ts".into()],
            left_out: 0,
        };
        let mut r = record(
            2,
            96,
            "tree-drifted: hello",
            tree("hello", CheckStatus::Drifted, drift, None),
            file("/p/adapters/hooks.json", CheckStatus::Ok),
        );
        r.reaped.before = 1;
        r.env.removed = vec![removed("NODE_OPTIONS")];
        r.workspace_config = vec![".pi/settings.json".into()];
        // What the host receives is what the supervisor serialized.
        let r: IterationResult = serde_json::from_str(&r.to_json_line()).unwrap();
        let s = summarize(&r, 1500, Vec::new());
        assert!(!s.verified);
        assert_eq!(
            s.meaning,
            "a plugin or skills tree is missing or its hash differs"
        );
        assert_eq!(s.verification, "hello drifted: changed index.ts");
        assert_eq!(s.env_removed, ["NODE_OPTIONS"]);
        assert_eq!(s.workspace_config, [".pi/settings.json"]);
        let t = table(&[s], false);
        assert!(
            t.contains("96 a plugin or skills tree is missing or its hash differs"),
            "{t}"
        );
        assert!(t.contains("1/0"), "{t}");
        assert!(t.contains("1: NODE_OPTIONS"), "{t}");
    }

    /// No raw control (C0, DEL, C1) or bidi control in `text` (newlines allowed when `lines`).
    fn assert_clean(text: &str, lines: bool) {
        let bad: Vec<char> = text
            .chars()
            .filter(|&c| !(lines && c == '\n'))
            .filter(|&c| {
                c.is_control()
                    || ('\u{202a}'..='\u{202e}').contains(&c)
                    || ('\u{2066}'..='\u{2069}').contains(&c)
            })
            .collect();
        assert!(bad.is_empty(), "raw {bad:?} in {text:?}");
    }

    #[test]
    fn no_color_a_dumb_terminal_or_a_pipe_turn_colour_off() {
        use std::ffi::OsStr;
        assert!(colour_allowed(None, Some(OsStr::new("xterm")), true));
        assert!(colour_allowed(Some(OsStr::new("")), None, true));
        assert!(!colour_allowed(Some(OsStr::new("1")), None, true));
        assert!(!colour_allowed(None, Some(OsStr::new("dumb")), true));
        assert!(!colour_allowed(None, None, false));
    }

    #[test]
    fn the_exit_column_is_green_for_success_and_red_otherwise() {
        let ok = summarize(
            &record(
                1,
                0,
                "",
                tree("p", CheckStatus::Ok, Drift::default(), None),
                file("/a", CheckStatus::Ok),
            ),
            10,
            Vec::new(),
        );
        let failed = summarize(
            &record(
                2,
                3,
                "",
                tree("p", CheckStatus::Ok, Drift::default(), None),
                file("/a", CheckStatus::Ok),
            ),
            10,
            Vec::new(),
        );
        let rows = [ok, failed];
        let plain = table(&rows, false);
        assert!(!plain.contains('\x1b'), "{plain}");
        let coloured = table(&rows, true);
        let lines: Vec<&str> = coloured.lines().collect();
        assert!(lines[1].contains("\x1b[32m0 success"), "{coloured:?}");
        assert!(lines[2].contains("\x1b[31m3 "), "{coloured:?}");
        // Colour changes no column's position.
        let strip = |l: &str| {
            l.replace("\x1b[32m", "")
                .replace("\x1b[31m", "")
                .replace("\x1b[0m", "")
        };
        assert_eq!(
            coloured.lines().map(strip).collect::<Vec<_>>(),
            plain.lines().map(String::from).collect::<Vec<_>>()
        );
    }

    #[test]
    fn long_reasons_and_environment_lists_are_cut_in_the_table_not_in_the_json() {
        let reason = format!(
            "exec: pi: not found in PATH {}",
            "/usr/local/bin:".repeat(40)
        );
        let mut record = record(
            1,
            127,
            &reason,
            tree("p", CheckStatus::Ok, Drift::default(), None),
            file("/a/hooks.js", CheckStatus::Ok),
        );
        record.env.removed = (0..50).map(|i| removed(&format!("NAME_{i}"))).collect();
        let s = summarize(&record, 10, Vec::new());
        assert_eq!(s.reason.as_deref(), Some(reason.as_str()));
        let t = table(&[s], false);
        let row = t.lines().nth(1).unwrap();
        assert!(row.chars().count() < 400, "{row}");
        assert!(row.contains('…'), "{row}");
    }

    #[test]
    #[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
    fn attack_terminal__control_bytes_in_a_record_are_escaped_in_the_summary() {
        // Everything the record carries that the agent or a repository can choose.
        let drift = Drift {
            added: vec!["x\u{1b}]0;owned\u{7}.js".into()],
            removed: vec![],
            changed: vec!["\u{9b}31m.js".into()],
            left_out: 0,
        };
        let mut record = record(
            1,
            96,
            "tree-drifted: \u{1b}[2J\u{7}\r",
            tree(
                "p",
                CheckStatus::Drifted,
                drift,
                Some("bad \u{2066}name\u{2069}"),
            ),
            file("/a/\u{1b}[1Ahooks.js", CheckStatus::Drifted),
        );
        record.meaning = "m\u{202e}gnp".into();
        if let Some(v) = &mut record.verification {
            v.agent.failure = Some(VerifyFailure {
                exit_code: 127,
                kind: FailureKind::AgentNotFound,
                reason: "agent \u{8}\u{8}\u{8}ok".into(),
            });
        }
        record.env.removed = vec![removed("LD_\u{1b}[2J")];
        let s = summarize(&record, 10, Vec::new());
        // The summary itself (the --json document) stays exact.
        assert_eq!(s.reason.as_deref(), Some("tree-drifted: \u{1b}[2J\u{7}\r"));
        let t = table(&[s], false);
        assert_clean(&t, true);
        assert_eq!(t.lines().count(), 2, "{t}");
        for shown in [
            "tree-drifted: \\x1b[2J\\x07\\r",
            "m\\u{202e}gnp",
            "added x\\x1b]0;owned\\x07.js",
            "changed \\u{9b}31m.js",
            "bad \\u{2066}name\\u{2069}",
            "/a/\\x1b[1Ahooks.js drifted",
            "agent: agent \\x08\\x08\\x08ok",
            "1: LD_\\x1b[2J",
        ] {
            assert!(t.contains(shown), "{shown} not in {t}");
        }
    }

    #[test]
    fn escapes_controls_and_bidi_and_leaves_the_rest() {
        assert!(matches!(
            escape_controls("plain é ✓ a\\b"),
            Cow::Borrowed(_)
        ));
        assert_eq!(
            escape_controls("a\u{0}\u{1b}\u{7}\r\n\t\u{7f}\u{85}\u{9f}"),
            "a\\x00\\x1b\\x07\\r\\n\\t\\x7f\\u{85}\\u{9f}"
        );
        for c in [
            '\u{202a}', '\u{202e}', '\u{2066}', '\u{2069}', '\u{200f}', '\u{2028}',
        ] {
            assert_eq!(
                escape_controls(&c.to_string()),
                format!("\\u{{{:x}}}", u32::from(c))
            );
        }
        assert_eq!(escape_text("l1\n\tl2\r\u{1b}c"), "l1\n\tl2\\r\\x1bc");
    }

    #[test]
    fn a_stream_is_escaped_across_pieces_and_bad_utf8() {
        let mut st = EscapedStream::default();
        let bidi = "\u{202e}".as_bytes();
        let mut out = st.push(b"a\x1b[2J");
        out += &st.push(&bidi[..1]);
        out += &st.push(&bidi[1..]);
        out += &st.push(b"\xff\n\xc3");
        out += &st.finish();
        assert_eq!(out, "a\\x1b[2J\\u{202e}\\xff\n\\xc3");
    }
}
