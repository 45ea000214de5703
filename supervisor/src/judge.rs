//! Step 7 of an iteration: judge the agent's own report.
//!
//! pi and Claude Code both exit 0 on some failures (seen with pi 0.73 and Claude Code 2.1): pi
//! `--mode json` on a model error, Claude with a `result` event whose `is_error` is true, and
//! Claude when a `--plugin-dir` fails to load (only the `system/init` event says so, in
//! `plugin_errors`). This module reads the agent's JSONL stdout and says whether such an
//! iteration failed anyway. Lines that are not JSON objects are skipped: the judge looks for
//! evidence of failure, it does not validate the stream.
//!
//! The stream is the agent's to write (up to the 1 GiB the supervisor's capture keeps of it),
//! so the judge reads a bounded part of it ([`Bounds`]): the first 64 MiB (Claude's `system/init`) and the
//! last 64 MiB (the last assistant message, the `result` event), and skips lines longer than
//! 16 MiB as it reads them, without buffering them.

use crate::manifest::Runtime;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};

/// Longest excerpt of an agent-provided message copied into a reason.
const EXCERPT_CHARS: usize = 200;

/// How much of the stream the judge reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Bytes read from the start (where Claude's `system/init` event is).
    pub head: u64,
    /// Bytes read from the end (where pi's last assistant message and Claude's `result` are).
    /// A stream of at most `head + tail` bytes is read whole.
    pub tail: u64,
    /// Longest line parsed; longer ones are skipped without being buffered.
    pub max_line: usize,
}

impl Default for Bounds {
    /// 64 MiB head, 64 MiB tail, 16 MiB lines.
    fn default() -> Self {
        Bounds {
            head: 64 << 20,
            tail: 64 << 20,
            max_line: 16 << 20,
        }
    }
}

/// Why an agent that exited 0 is a failed iteration (exit 1), as a machine-readable reason
/// `judge: <kind>: <excerpt>`; `None` when the stream shows no failure or the runtime is
/// `command` (its output is not ours to interpret). Reads within [`Bounds::default`].
pub fn judge(runtime: Runtime, stdout: impl Read + Seek) -> Option<String> {
    judge_within(runtime, stdout, Bounds::default())
}

/// [`judge`] with explicit bounds.
pub fn judge_within(runtime: Runtime, stdout: impl Read + Seek, bounds: Bounds) -> Option<String> {
    let objects = || {
        Lines::new(stdout, bounds)
            .filter_map(|line| serde_json::from_slice::<Value>(&line).ok())
            .filter(Value::is_object)
    };
    match runtime {
        Runtime::Command => None,
        Runtime::Pi => judge_pi(objects()),
        Runtime::Claude => judge_claude(objects()),
        Runtime::Codex => judge_codex(objects()),
        Runtime::Opencode => judge_opencode(objects()),
    }
}

/// A part of the stream that is read.
#[derive(Debug, Clone, Copy)]
struct Window {
    start: u64,
    bytes: u64,
    /// It ends at the end of the stream: an unterminated last line counts.
    at_end: bool,
    /// It may start inside a line: the bytes up to the first newline are not a line.
    mid_line: bool,
}

/// The lines (without their newline) of a bounded stream: all of them when it is at most
/// `head + tail` bytes long, else the whole lines of its first `head` bytes, then those of its
/// last `tail` bytes. Lines longer than `max_line` are skipped as they are read; a read error
/// ends the lines. Also read by [`crate::usage`].
pub(crate) struct Lines<R> {
    reader: BufReader<R>,
    /// Windows still to read, the next one last.
    windows: Vec<Window>,
    /// The window being read, and its bytes not read yet.
    window: Option<(Window, u64)>,
    max_line: usize,
    line: Vec<u8>,
    /// Inside a line that is not kept (too long, or cut by the start of a window).
    skipping: bool,
}

impl<R: Read + Seek> Lines<R> {
    pub(crate) fn new(mut stdout: R, bounds: Bounds) -> Lines<R> {
        let windows = match stdout.seek(SeekFrom::End(0)) {
            Err(_) => Vec::new(),
            Ok(len) if len <= bounds.head.saturating_add(bounds.tail) => vec![Window {
                start: 0,
                bytes: len,
                at_end: true,
                mid_line: false,
            }],
            // The tail window starts one byte early: when a line starts exactly `tail` bytes
            // before the end, the partial line skipped is just the newline before it.
            Ok(len) => vec![
                Window {
                    start: len - bounds.tail - 1,
                    bytes: bounds.tail + 1,
                    at_end: true,
                    mid_line: true,
                },
                Window {
                    start: 0,
                    bytes: bounds.head,
                    at_end: false,
                    mid_line: false,
                },
            ],
        };
        Lines {
            reader: BufReader::new(stdout),
            windows,
            window: None,
            max_line: bounds.max_line,
            line: Vec::new(),
            skipping: false,
        }
    }

    /// Starts the next window; `None` when there is none (or it cannot be reached).
    fn start_window(&mut self) -> Option<()> {
        let w = self.windows.pop()?;
        if self.reader.seek(SeekFrom::Start(w.start)).is_err() {
            self.windows.clear();
            return None;
        }
        self.window = Some((w, w.bytes));
        self.line.clear();
        self.skipping = w.mid_line;
        Some(())
    }

    /// Ends the current window; its unterminated last line, when that counts.
    fn end_window(&mut self) -> Option<Vec<u8>> {
        let at_end = self.window.take().is_some_and(|(w, _)| w.at_end);
        let last = std::mem::take(&mut self.line);
        let skipped = std::mem::replace(&mut self.skipping, false);
        (at_end && !skipped && !last.is_empty()).then_some(last)
    }
}

impl<R: Read + Seek> Iterator for Lines<R> {
    type Item = Vec<u8>;

    fn next(&mut self) -> Option<Vec<u8>> {
        loop {
            let Some((_, left)) = self.window else {
                self.start_window()?;
                continue;
            };
            if left == 0 {
                match self.end_window() {
                    Some(last) => return Some(last),
                    None => continue,
                }
            }
            let buf = match self.reader.fill_buf() {
                Ok([]) => {
                    // The stream shrank under us: the window ends here.
                    self.window = self.window.map(|(w, _)| (w, 0));
                    continue;
                }
                Ok(buf) => buf,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.window = None;
                    self.windows.clear();
                    return None;
                }
            };
            let avail = &buf[..usize::try_from(left).map_or(buf.len(), |l| l.min(buf.len()))];
            let newline = avail.iter().position(|&b| b == b'\n');
            let part = &avail[..newline.unwrap_or(avail.len())];
            if !self.skipping {
                if self.line.len() + part.len() > self.max_line {
                    self.skipping = true;
                    self.line = Vec::new();
                } else {
                    self.line.extend_from_slice(part);
                }
            }
            let used = newline.map_or(avail.len(), |i| i + 1);
            self.reader.consume(used);
            self.window = self.window.map(|(w, left)| (w, left - used as u64));
            if newline.is_some() {
                if std::mem::replace(&mut self.skipping, false) {
                    continue;
                }
                return Some(std::mem::take(&mut self.line));
            }
        }
    }
}

fn excerpt(text: &str) -> String {
    let mut out: String = text.chars().take(EXCERPT_CHARS).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out.replace(['\n', '\r'], " ")
}

/// pi `--mode json`: the last assistant message decides. It arrives in `message_end`
/// (`message`), and again in `turn_end` (`message`) and `agent_end` (`messages`).
fn judge_pi(events: impl Iterator<Item = Value>) -> Option<String> {
    let mut last: Option<Value> = None;
    for event in events {
        let candidates: Vec<&Value> = match event.get("type").and_then(Value::as_str) {
            Some("message_end" | "turn_end") => event.get("message").into_iter().collect(),
            Some("agent_end") => event
                .get("messages")
                .and_then(Value::as_array)
                .map(|m| m.iter().collect())
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        for message in candidates {
            if message.get("role").and_then(Value::as_str) == Some("assistant") {
                last = Some(message.clone());
            }
        }
    }
    let message = last?;
    let stop = message.get("stopReason").and_then(Value::as_str);
    let error = message
        .get("errorMessage")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty());
    if stop == Some("error") || error.is_some() {
        return Some(format!(
            "judge: pi-error: {}",
            excerpt(error.unwrap_or("stopReason is \"error\""))
        ));
    }
    None
}

/// Claude `stream-json`: a `system/init` event with non-empty `plugin_errors`, or a `result`
/// event with `is_error: true`.
fn judge_claude(events: impl Iterator<Item = Value>) -> Option<String> {
    for event in events {
        match event.get("type").and_then(Value::as_str) {
            Some("system") if event.get("subtype").and_then(Value::as_str) == Some("init") => {
                if let Some(errors) = event.get("plugin_errors").and_then(Value::as_array) {
                    if !errors.is_empty() {
                        let listed = Value::Array(errors.clone()).to_string();
                        return Some(format!("judge: claude-plugin-errors: {}", excerpt(&listed)));
                    }
                }
            }
            Some("result") if event.get("is_error").and_then(Value::as_bool) == Some(true) => {
                let text = event
                    .get("result")
                    .and_then(Value::as_str)
                    .unwrap_or("is_error is true");
                return Some(format!("judge: claude-result-error: {}", excerpt(text)));
            }
            _ => {}
        }
    }
    None
}

/// Codex `exec --json`: the last of its turn outcomes decides. `turn.completed` passes;
/// `turn.failed` (its `error.message`) or a top-level `error` event after the last
/// `turn.completed` fails. An `error` Codex recovers from (`Reconnecting... 2/5`) is followed
/// by its turn's outcome; an `item.completed` of type `error` is a warning (`Model metadata …
/// not found`) and is not read.
fn judge_codex(events: impl Iterator<Item = Value>) -> Option<String> {
    let mut last: Option<String> = None;
    for event in events {
        match event.get("type").and_then(Value::as_str) {
            Some("turn.completed") => last = None,
            Some("turn.failed") => {
                let text = event
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("turn.failed");
                last = Some(format!("judge: codex-turn-failed: {}", excerpt(text)));
            }
            Some("error") => {
                let text = event
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("error");
                last = Some(format!("judge: codex-error: {}", excerpt(text)));
            }
            _ => {}
        }
    }
    last
}

/// The error OpenCode 1.18.33 gives a tool call whose permission was asked for in `opencode
/// run`, which rejects every ask: the turn ends without the model hearing of it, and OpenCode
/// exits 0.
pub const OPENCODE_REJECTED: &str = "The user rejected permission to use this specific tool call.";

/// OpenCode `run --format json`: an `error` event (a model error; OpenCode also exits 1) or a
/// `tool_use` whose permission was rejected ([`OPENCODE_REJECTED`]) fails the iteration,
/// wherever it is in the stream: pitcrew's configuration leaves no permission on `ask`, so a
/// rejection means a configuration pitcrew did not write took effect.
fn judge_opencode(events: impl Iterator<Item = Value>) -> Option<String> {
    let mut found: Option<String> = None;
    for event in events {
        match event.get("type").and_then(Value::as_str) {
            Some("error") => {
                let text = event
                    .pointer("/error/data/message")
                    .or_else(|| event.pointer("/error/name"))
                    .and_then(Value::as_str)
                    .unwrap_or("error");
                found = Some(format!("judge: opencode-error: {}", excerpt(text)));
            }
            Some("tool_use")
                if event.pointer("/part/state/status").and_then(Value::as_str) == Some("error")
                    && event
                        .pointer("/part/state/error")
                        .and_then(Value::as_str)
                        .is_some_and(|e| e.contains(OPENCODE_REJECTED)) =>
            {
                let tool = event
                    .pointer("/part/tool")
                    .and_then(Value::as_str)
                    .unwrap_or("a tool");
                if found.is_none() {
                    found = Some(format!(
                        "judge: opencode-permission-rejected: {}",
                        excerpt(tool)
                    ));
                }
            }
            _ => {}
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::io::Cursor;

    #[test]
    fn opencode_fails_on_an_error_event_or_a_rejected_permission() {
        let ok = [
            r#"{"type":"step_start","part":{}}"#,
            r#"{"type":"tool_use","part":{"tool":"bash","state":{"status":"completed","output":"hi"}}}"#,
            r#"{"type":"tool_use","part":{"tool":"bash","state":{"status":"error","error":"exit 1"}}}"#,
            r#"{"type":"step_finish","part":{"tokens":{}}}"#,
        ];
        assert_eq!(run(Runtime::Opencode, &ok), None);
        let rejected = [
            r#"{"type":"step_start","part":{}}"#,
            r#"{"type":"tool_use","part":{"tool":"bash","state":{"status":"error","error":"The user rejected permission to use this specific tool call."}}}"#,
            r#"{"type":"step_finish","part":{"tokens":{}}}"#,
        ];
        assert_eq!(
            run(Runtime::Opencode, &rejected).as_deref(),
            Some("judge: opencode-permission-rejected: bash")
        );
        let error = [
            r#"{"type":"error","error":{"name":"APIError","data":{"message":"scripted model failure","statusCode":400}}}"#,
        ];
        assert_eq!(
            run(Runtime::Opencode, &error).as_deref(),
            Some("judge: opencode-error: scripted model failure")
        );
    }

    fn run(runtime: Runtime, lines: &[&str]) -> Option<String> {
        judge(runtime, Cursor::new(lines.join("\n")))
    }

    fn lines_of(text: &str, bounds: Bounds) -> Vec<String> {
        Lines::new(Cursor::new(text), bounds)
            .map(|l| String::from_utf8(l).unwrap())
            .collect()
    }

    /// A stream of `len` zero bytes (a sparse file), counting what is read of it.
    struct Zeros {
        len: u64,
        pos: u64,
        read: u64,
    }

    impl Read for Zeros {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = usize::try_from(self.len.saturating_sub(self.pos))
                .unwrap_or(usize::MAX)
                .min(buf.len());
            buf[..n].fill(0);
            self.pos += n as u64;
            self.read += n as u64;
            Ok(n)
        }
    }

    impl Seek for Zeros {
        fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
            self.pos = match to {
                SeekFrom::Start(p) => p,
                SeekFrom::End(d) => self.len.saturating_add_signed(d),
                SeekFrom::Current(d) => self.pos.saturating_add_signed(d),
            };
            Ok(self.pos)
        }
    }

    #[test]
    fn pi_success_stream_passes() {
        let stream = [
            r#"{"type":"session","id":"s1"}"#,
            r#"{"type":"agent_start"}"#,
            r#"{"type":"message_end","message":{"role":"user","content":"hi"}}"#,
            r#"{"type":"message_end","message":{"role":"assistant","stopReason":"stop"}}"#,
            r#"{"type":"agent_end","messages":[{"role":"assistant","stopReason":"stop"}]}"#,
        ];
        assert_eq!(run(Runtime::Pi, &stream), None);
    }

    #[test]
    fn pi_final_error_message_fails() {
        let stream = [
            r#"{"type":"agent_start"}"#,
            "not json at all",
            r#"{"type":"message_end","message":{"role":"assistant","stopReason":"error","errorMessage":"401 Unauthorized"}}"#,
            r#"{"type":"agent_end","messages":[]}"#,
        ];
        let reason = run(Runtime::Pi, &stream).unwrap();
        assert!(
            reason.starts_with("judge: pi-error: 401 Unauthorized"),
            "{reason}"
        );
    }

    #[test]
    fn pi_error_then_recovery_passes() {
        // An earlier turn failed, the final answer is fine: only the last message decides.
        let stream = [
            r#"{"type":"message_end","message":{"role":"assistant","stopReason":"error","errorMessage":"overloaded"}}"#,
            r#"{"type":"message_end","message":{"role":"assistant","stopReason":"stop"}}"#,
        ];
        assert_eq!(run(Runtime::Pi, &stream), None);
    }

    #[test]
    fn pi_agent_end_error_without_message_end_fails() {
        let stream =
            [r#"{"type":"agent_end","messages":[{"role":"assistant","stopReason":"error"}]}"#];
        let reason = run(Runtime::Pi, &stream).unwrap();
        assert!(reason.contains("pi-error"), "{reason}");
    }

    #[test]
    fn claude_result_is_error_fails() {
        let stream = [
            r#"{"type":"system","subtype":"init","plugins":[],"plugin_errors":[]}"#,
            r#"{"type":"result","subtype":"success","is_error":true,"result":"Not logged in · Please run /login"}"#,
        ];
        let reason = run(Runtime::Claude, &stream).unwrap();
        assert!(
            reason.starts_with("judge: claude-result-error: Not logged in"),
            "{reason}"
        );
    }

    #[test]
    fn claude_plugin_errors_fail_even_with_good_result() {
        let stream = [
            r#"{"type":"system","subtype":"init","plugin_errors":[{"plugin":"inline[2]","type":"path-not-found"}]}"#,
            r#"{"type":"result","is_error":false,"result":"done"}"#,
        ];
        let reason = run(Runtime::Claude, &stream).unwrap();
        assert!(
            reason.contains("claude-plugin-errors") && reason.contains("path-not-found"),
            "{reason}"
        );
    }

    #[test]
    fn claude_clean_stream_and_command_runtime_pass() {
        let stream = [
            r#"{"type":"system","subtype":"init","plugins":[{"name":"p"}]}"#,
            r#"{"type":"assistant","message":{}}"#,
            r#"{"type":"result","is_error":false,"result":"ok"}"#,
        ];
        assert_eq!(run(Runtime::Claude, &stream), None);
        let bad = [r#"{"type":"result","is_error":true}"#];
        assert_eq!(run(Runtime::Command, &bad), None);
    }

    #[test]
    fn codex_turn_outcomes_decide() {
        let ok = [
            r#"{"type":"thread.started","thread_id":"t"}"#,
            r#"{"type":"item.completed","item":{"id":"i","type":"error","message":"Model metadata for `m` not found"}}"#,
            r#"{"type":"turn.started"}"#,
            r#"{"type":"error","message":"Reconnecting... 2/5 (stream disconnected)"}"#,
            r#"{"type":"turn.completed","usage":{"input_tokens":1,"output_tokens":1}}"#,
        ];
        assert_eq!(run(Runtime::Codex, &ok), None);
        let failed = [
            r#"{"type":"turn.started"}"#,
            r#"{"type":"error","message":"unexpected status 400: scripted model failure"}"#,
            r#"{"type":"turn.failed","error":{"message":"unexpected status 400: scripted model failure"}}"#,
        ];
        let reason = run(Runtime::Codex, &failed).unwrap();
        assert!(
            reason.starts_with("judge: codex-turn-failed: unexpected status 400"),
            "{reason}"
        );
        let error_last = [
            r#"{"type":"turn.started"}"#,
            r#"{"type":"error","message":"boom"}"#,
        ];
        assert_eq!(
            run(Runtime::Codex, &error_last).as_deref(),
            Some("judge: codex-error: boom")
        );
    }

    #[test]
    fn a_short_stream_is_read_whole() {
        let bounds = Bounds {
            head: 8,
            tail: 8,
            max_line: 100,
        };
        assert_eq!(lines_of("a\n\nbb\nccc", bounds), ["a", "", "bb", "ccc"]);
        assert_eq!(lines_of("a\nbb\n", bounds), ["a", "bb"]);
        assert!(lines_of("", bounds).is_empty());
    }

    #[test]
    fn a_long_stream_is_read_at_its_head_and_tail_only() {
        let bounds = Bounds {
            head: 6,
            tail: 6,
            max_line: 100,
        };
        // The head keeps the whole lines of the first 6 bytes ("h1\nh2\n"), the tail those of
        // the last 6 ("t1\nt22": "xxt1" started before the window, so it is skipped).
        assert_eq!(
            lines_of("h1\nh2\nmiddle\nxxt1\nt22", bounds),
            ["h1", "h2", "t22"]
        );
        // A line starting exactly `tail` bytes before the end is whole.
        assert_eq!(
            lines_of("h1\nh2\nmiddle\nt1\nt2\n", bounds),
            ["h1", "h2", "t1", "t2"]
        );
        // A line cut by the end of the head window is not a line.
        assert_eq!(
            lines_of("h1\nh2345\nmiddle\nt1\nt2\n", bounds),
            ["h1", "t1", "t2"]
        );
    }

    #[test]
    fn lines_over_the_bound_are_skipped() {
        let bounds = Bounds {
            head: 1 << 20,
            tail: 1 << 20,
            max_line: 4,
        };
        assert_eq!(
            lines_of("abcd\nabcde\nxyz\nlong-last-line", bounds),
            ["abcd", "xyz"]
        );
        // A stream in pieces: the bound holds across reads of the buffer.
        let long = "y".repeat(100_000);
        let text = format!("ok\n{long}\nend");
        assert_eq!(lines_of(&text, bounds), ["ok", "end"]);
    }

    #[test]
    fn the_verdict_comes_from_the_head_and_the_tail_of_a_long_stream() {
        let bounds = Bounds {
            head: 1024,
            tail: 1024,
            max_line: 512,
        };
        let filler = format!(r#"{{"type":"assistant","text":"{}"}}"#, "f".repeat(400));
        let middle: Vec<&str> = std::iter::repeat_n(filler.as_str(), 20).collect();
        let judged = |first: &str, last: &str| {
            let mut stream = vec![first];
            stream.extend(&middle);
            stream.push(last);
            let text = stream.join("\n");
            assert!(text.len() > 4 * 1024);
            judge_within(Runtime::Claude, Cursor::new(text), bounds)
        };
        let init_ok = r#"{"type":"system","subtype":"init","plugin_errors":[]}"#;
        let init_bad = r#"{"type":"system","subtype":"init","plugin_errors":[{"plugin":"p"}]}"#;
        let result_ok = r#"{"type":"result","is_error":false,"result":"done"}"#;
        let result_bad = r#"{"type":"result","is_error":true,"result":"Not logged in"}"#;
        assert_eq!(judged(init_ok, result_ok), None);
        assert!(judged(init_bad, result_ok)
            .unwrap()
            .contains("plugin-errors"));
        assert!(judged(init_ok, result_bad)
            .unwrap()
            .contains("Not logged in"));
        // pi: the last assistant message, at the end.
        let mut stream =
            vec![r#"{"type":"message_end","message":{"role":"assistant","stopReason":"stop"}}"#];
        stream.extend(&middle);
        stream.push(r#"{"type":"message_end","message":{"role":"assistant","stopReason":"error","errorMessage":"429"}}"#);
        let reason = judge_within(Runtime::Pi, Cursor::new(stream.join("\n")), bounds).unwrap();
        assert!(reason.contains("429"), "{reason}");
    }

    #[test]
    fn a_huge_sparse_stream_is_read_within_the_bounds() {
        // 8 TiB of zeros: one endless line, never buffered, and only head + tail bytes read.
        let bounds = Bounds::default();
        let mut zeros = Zeros {
            len: 1 << 43,
            pos: 0,
            read: 0,
        };
        let mut lines = Lines::new(&mut zeros, bounds);
        let mut count = 0;
        for _ in lines.by_ref() {
            count += 1;
        }
        assert!(lines.line.capacity() <= 2 * bounds.max_line);
        drop(lines);
        assert_eq!(count, 0);
        let slack = 64 * 1024;
        assert!(
            zeros.read <= bounds.head + bounds.tail + 1 + slack,
            "{}",
            zeros.read
        );
        assert!(zeros.read >= bounds.head + bounds.tail);
        let mut zeros = Zeros {
            len: 1 << 43,
            pos: 0,
            read: 0,
        };
        assert_eq!(judge(Runtime::Claude, &mut zeros), None);
        assert!(zeros.read <= bounds.head + bounds.tail + 1 + slack);
    }

    #[test]
    fn long_messages_are_cut() {
        let long = "x".repeat(1000);
        let line = format!(r#"{{"type":"result","is_error":true,"result":"{long}"}}"#);
        let reason = run(Runtime::Claude, &[&line]).unwrap();
        assert!(reason.chars().count() < 300, "{}", reason.len());
    }
}
