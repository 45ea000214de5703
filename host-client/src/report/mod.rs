//! Reading result records for people: one summary per iteration (exit code and meaning,
//! duration, reaped, verification or drift, removed environment names) and the table `pitcrew
//! run` prints; and [`escape_controls`], which every human-readable output of `pitcrew` goes
//! through before it reaches the operator's terminal.

use crate::failure_hint::cut;
use pitcrew_core::result::{IterationResult, UsageRecord};
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

/// Why a run's loop stopped (`stopped` in its report).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stopped {
    /// All N iterations ran.
    Iterations,
    /// The validation command exited 0.
    Validation,
    /// Ctrl-C (SIGTERM, SIGHUP, a closed stdout or stderr), or `pitcrew cancel --all`.
    Cancelled,
    /// An iteration failed in a way every further one would repeat (the agent could not be
    /// executed or found, or the supervisor refused to launch it).
    Repeating,
}

/// The report of a run: what `pitcrew run --json` prints and writes to the run's `run.json`,
/// and what `pitcrew batch` reads back from a run it started. `I` is the iterations' rows:
/// [`IterationSummary`]s when written; a reader that does not need them reads
/// [`serde::de::IgnoredAny`].
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct RunDocument<I = Vec<IterationSummary>> {
    /// `<UTC stamp>-<sandbox>`, the name of the run's records directory.
    pub run_id: String,
    /// The harness file.
    pub harness: String,
    /// The engine's name.
    pub engine: String,
    /// The sandbox.
    pub sandbox: String,
    /// Whether the sandbox was kept.
    pub kept: bool,
    /// The run's records directory.
    pub run_dir: String,
    /// Why the loop stopped.
    pub stopped: Stopped,
    /// The exit code of `pitcrew run`.
    pub exit_code: u8,
    /// One row per iteration that ran.
    pub iterations: I,
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
    /// Host wall-clock time from the `run` request to the result, in milliseconds; for a
    /// record collected later (`--resume`, `pitcrew collect`), the sum of the record's step
    /// times.
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
    /// The `.env` lines the supervisor refused, by name and line, never by value:
    /// `HTTPS_PROXY (.env line 3)`, or `.env line 5` for a line without a valid name.
    pub env_refused: Vec<String>,
    /// Workspace files the runtime read as configuration, unverified (`workspace_config`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub workspace_config: Vec<String>,
    /// What the host removed from the collected workspace because git would run it there
    /// (the record's `workspace_stripped`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub workspace_stripped: Vec<String>,
    /// What the host kept in the collected workspace but names (the record's
    /// `workspace_flagged`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub workspace_flagged: Vec<String>,
    /// Context files set back to the run's baseline before launch (`context_files.reset`):
    /// `PATH (removed)` or `PATH (restored)`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub context_reset: Vec<String>,
    /// Tokens and cost the runtime reported (the record's `usage`); absent for `command` and
    /// when the runtime's stream said nothing of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageRecord>,
    /// The iteration's network as a cell ([`network_cell`]); absent when the manifest had no
    /// `network`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
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

/// How long the supervisor took over an iteration by its own record: the sum of its step
/// times (what a record collected later has in place of the host's wall-clock time).
pub fn record_duration_ms(record: &IterationResult) -> u64 {
    let s = &record.steps;
    [
        s.reap_ms,
        s.verify_ms,
        s.env_ms,
        s.confine_launch_ms,
        s.agent_ms,
        s.final_reap_ms,
    ]
    .into_iter()
    .fold(0, u64::saturating_add)
}

/// The summary of one result record; without `duration_ms` (a record collected later, with no
/// host clock that saw it run), the duration is the record's own ([`record_duration_ms`]).
pub fn summarize(
    record: &IterationResult,
    duration_ms: Option<u64>,
    events: Vec<Value>,
) -> IterationSummary {
    let (verified, verification, drift) = verification_summary(record.verification.as_ref());
    let env_removed = record.env.removed.iter().map(|r| r.name.clone()).collect();
    let env_refused = record
        .env
        .dotenv_refused
        .iter()
        .map(|r| match &r.name {
            Some(name) => format!("{name} (.env line {})", r.line),
            None => format!(".env line {}", r.line),
        })
        .collect();
    let duration_ms = duration_ms.unwrap_or_else(|| record_duration_ms(record));
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
        env_refused,
        workspace_config: record.workspace_config.clone(),
        workspace_stripped: record.workspace_stripped.clone(),
        workspace_flagged: record.workspace_flagged.clone(),
        context_reset: record
            .context_files
            .iter()
            .flat_map(|c| &c.reset)
            .map(|r| format!("{} ({})", r.path, r.action))
            .collect(),
        usage: record.usage.clone(),
        network: record.network.as_ref().map(network_cell),
        steps: serde_json::to_value(&record.steps).unwrap_or(Value::Null),
        events,
        record_dir: None,
        validation_exit: None,
    }
}

impl IterationSummary {
    /// Every variable the agent did not get as asked: the removed names, then the refused
    /// `.env` lines ([`IterationSummary::env_refused`]).
    pub fn env_dropped(&self) -> Vec<String> {
        self.env_removed
            .iter()
            .chain(&self.env_refused)
            .cloned()
            .collect()
    }

    /// `; env removed or refused: NODE_OPTIONS, HTTPS_PROXY (.env line 2)` for a progress
    /// line, or nothing when the environment was built as asked.
    pub fn env_note(&self) -> String {
        let dropped = self.env_dropped();
        if dropped.is_empty() {
            String::new()
        } else {
            format!("; env removed or refused: {}", dropped.join(", "))
        }
    }

    /// The lines that say what the host stripped from, and flagged in, the collected
    /// workspace (none when nothing was), unescaped.
    pub fn workspace_lines(&self) -> Vec<String> {
        let n = self.iteration;
        let mut lines = Vec::new();
        if !self.workspace_stripped.is_empty() {
            lines.push(format!(
                "iteration {n}: removed from the collected workspace what git would run on the \
                 host: {}",
                self.workspace_stripped.join(", ")
            ));
        }
        if !self.workspace_flagged.is_empty() {
            lines.push(format!(
                "iteration {n}: kept in the collected workspace, naming git drivers that run \
                 only if your own git configuration defines them: {}",
                self.workspace_flagged.join(", ")
            ));
        }
        lines
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

/// A token count as the table shows it: exact below 1000, else in thousands (`12.3k`) or
/// millions (`4.5M`).
fn tokens(n: u64) -> String {
    match n {
        0..=999 => n.to_string(),
        1_000..=999_999 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

/// The `net` cell: `open` and `platform` (said loudly: pitcrew enforced nothing; the platform's
/// name after it), `none`, or the allowed and refused connection attempts (`3 ok/1 refused`,
/// attempts past the record's list counted).
pub fn network_cell(network: &pitcrew_core::result::NetworkRecord) -> String {
    match network.mode.as_str() {
        "allow" => {
            let ok = network.connections.iter().filter(|c| c.allowed).count();
            let refused = network.connections.len() - ok;
            let mut cell = format!("{ok} ok/{refused} refused");
            if network.dropped > 0 {
                let _ = write!(cell, " (+{} unlisted)", network.dropped);
            }
            cell
        }
        "open" => "OPEN".to_string(),
        "platform" => format!(
            "PLATFORM {}",
            escape_controls(network.platform.as_deref().unwrap_or("?"))
        ),
        other => escape_controls(other).into_owned(),
    }
}

/// The `tokens` cell: input (fresh, cache reads and cache writes together) / output, and the
/// cost when the runtime said it; `-` for an iteration without usage.
pub fn usage_cell(usage: Option<&UsageRecord>) -> String {
    let Some(u) = usage else {
        return "-".to_string();
    };
    let input = u
        .input_tokens
        .saturating_add(u.cache_read_tokens)
        .saturating_add(u.cache_write_tokens);
    let mut cell = format!("{}/{}", tokens(input), tokens(u.output_tokens));
    if let Some(cost) = u.cost_usd {
        // Cents, or four decimals for what a cent would show as nothing.
        let digits = if cost != 0.0 && cost < 0.01 { 4 } else { 2 };
        let _ = write!(cell, " ${cost:.digits$}");
    }
    cell
}

/// The summary table, one row per iteration; with `colour`, the exit column green for 0 and red
/// otherwise (only pitcrew's own escape sequences: every cell is escaped first). The `tokens`
/// column (input/output tokens and cost, [`usage_cell`]) is there when an iteration has usage,
/// and the `net` column ([`network_cell`]) when an iteration's manifest said `network`.
pub fn table(rows: &[IterationSummary], colour: bool) -> String {
    let with_usage = rows.iter().any(|r| r.usage.is_some());
    let mut header = vec!["iter", "exit", "duration", "reaped"];
    if with_usage {
        header.push("tokens");
    }
    let with_network = rows.iter().any(|r| r.network.is_some());
    if with_network {
        header.push("net");
    }
    header.extend(["verified", "env removed"]);
    let mut lines: Vec<Vec<String>> = vec![header.into_iter().map(String::from).collect()];
    for r in rows {
        let mut exit = format!("{} {}", r.exit_code, r.meaning);
        if let Some(why) = r.reason.as_ref().or(r.error.as_ref()) {
            let _ = write!(exit, " ({})", cut(why, CELL_CHARS));
        }
        if let Some(v) = r.validation_exit {
            let _ = write!(exit, " [validation {v}]");
        }
        let dropped = r.env_dropped();
        let env = if dropped.is_empty() {
            "0".to_string()
        } else {
            format!("{}: {}", dropped.len(), dropped.join(", "))
        };
        // Meaning, reason, drifted names and env names come from the record: escaped.
        let mut line = vec![
            r.iteration.to_string(),
            escape_controls(&exit).into_owned(),
            format!("{:.2}s", r.duration_ms as f64 / 1000.0),
            format!("{}/{}", r.reaped_before, r.reaped_after),
        ];
        if with_usage {
            line.push(usage_cell(r.usage.as_ref()));
        }
        if with_network {
            line.push(r.network.clone().unwrap_or_else(|| "-".into()));
        }
        line.extend([
            escape_controls(&cut(&r.verification, VERIFICATION_CHARS)).into_owned(),
            escape_controls(&cut(&env, CELL_CHARS)).into_owned(),
        ]);
        lines.push(line);
    }
    // The last two columns are free-width; the others are padded.
    let mut widths = vec![0usize; lines[0].len()];
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
mod tests;
