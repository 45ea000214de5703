//! Step 7 of an iteration: judge the agent's own report.
//!
//! pi and Claude Code both exit 0 on some failures (design section 8 and `reference/`): pi
//! `--mode json` on a model error, Claude with a `result` event whose `is_error` is true, and
//! Claude when a `--plugin-dir` fails to load (only the `system/init` event says so, in
//! `plugin_errors`). This module reads the agent's JSONL stdout and says whether such an
//! iteration failed anyway. Lines that are not JSON objects are skipped: the judge looks for
//! evidence of failure, it does not validate the stream.

use crate::manifest::Runtime;
use serde_json::Value;
use std::io::BufRead;

/// Longest excerpt of an agent-provided message copied into a reason.
const EXCERPT_CHARS: usize = 200;

/// Why an agent that exited 0 is a failed iteration (exit 1), as a machine-readable reason
/// `judge: <kind>: <excerpt>`; `None` when the stream shows no failure or the runtime is
/// `command` (its output is not ours to interpret).
pub fn judge(runtime: Runtime, stdout: impl BufRead) -> Option<String> {
    match runtime {
        Runtime::Command => None,
        Runtime::Pi => judge_pi(stdout),
        Runtime::Claude => judge_claude(stdout),
    }
}

fn objects(stdout: impl BufRead) -> impl Iterator<Item = Value> {
    stdout
        .split(b'\n')
        .map_while(Result::ok)
        .filter_map(|line| serde_json::from_slice::<Value>(&line).ok())
        .filter(Value::is_object)
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
fn judge_pi(stdout: impl BufRead) -> Option<String> {
    let mut last: Option<Value> = None;
    for event in objects(stdout) {
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
fn judge_claude(stdout: impl BufRead) -> Option<String> {
    for event in objects(stdout) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn run(runtime: Runtime, lines: &[&str]) -> Option<String> {
        judge(runtime, lines.join("\n").as_bytes())
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
    fn long_messages_are_cut() {
        let long = "x".repeat(1000);
        let line = format!(r#"{{"type":"result","is_error":true,"result":"{long}"}}"#);
        let reason = run(Runtime::Claude, &[&line]).unwrap();
        assert!(reason.chars().count() < 300, "{}", reason.len());
    }
}
