//! Token usage and cost of an iteration, from the runtime's own JSON stream on stdout (the
//! record's `output.jsonl`), read after the final reap like the judge's stream ([`crate::judge`]).
//!
//! - pi `--mode json`: every assistant message carries `usage` (`input`, `output`,
//!   `cacheRead`, `cacheWrite`, `totalTokens`, `cost.total` in dollars, computed by pi from the
//!   model's price list) in its `message_end` event, and again in `turn_end` and in the
//!   `messages` of `agent_end`. The iteration's usage is the sum over the `message_end` events
//!   of assistant messages; a stream with none of them (cut short) takes the assistant messages
//!   of its last `agent_end` instead. `message_start` and `message_update` carry partial
//!   figures and are not read.
//! - Claude Code `--output-format stream-json`: the last `result` event. Its tokens are the sum
//!   over `modelUsage` (per model: every call of the process, sub-agents and auxiliary calls
//!   included, the calls `total_cost_usd` covers), or its `usage` (the main loop only) when
//!   there is no `modelUsage`; the cost is `total_cost_usd`. Without a `result` event (the
//!   agent was killed), the `usage` of its `assistant` events, each run of events with the same
//!   message id once (Claude repeats a message's usage in the event of each of its content
//!   blocks, one after the other), and no cost.
//!
//! - Codex `exec --json`: the sum of the `usage` of its `turn.completed` events
//!   (`input_tokens`, of them `cached_input_tokens`, `cache_write_input_tokens`,
//!   `output_tokens`); no cost.
//! - OpenCode `run --format json`: the sum of its `step_finish` events' `part.tokens`
//!   (`input`, which excludes the cached prompt tokens, `output` with `reasoning` added, `cache.read`,
//!   `cache.write`) and `part.cost` (dollars, from OpenCode's price list for the model; 0 for
//!   a model it has no price for).
//!
//! The stream is the agent's to write, so this reads only the record file the capture wrote
//! (at most its 1 GiB), once, front to back: lines longer than 16 MiB are skipped without being
//! buffered, and a line whose leading `"type"` names an event without usage (pi's
//! `message_update` carries the whole partial message each time) is not parsed. Lines that are
//! not JSON objects, and numbers that are not non-negative, are skipped: the figures are the
//! runtime's report, not a bill.

use crate::judge::{Bounds, Lines};
use crate::manifest::Runtime;
use crate::result::{UsageRecord, UsageSource};
use serde_json::Value;
use std::io::{Read, Seek};

/// Longest line parsed (as the judge's).
const MAX_LINE: usize = 16 << 20;

/// The usage the runtime reported in `stdout`: `None` for `command`, and when the stream
/// carries none. Reads the whole stream, lines over 16 MiB skipped.
pub fn usage(runtime: Runtime, stdout: impl Read + Seek) -> Option<UsageRecord> {
    usage_within(runtime, stdout, MAX_LINE)
}

/// [`usage`] with lines over `max_line` bytes skipped.
pub fn usage_within(
    runtime: Runtime,
    stdout: impl Read + Seek,
    max_line: usize,
) -> Option<UsageRecord> {
    // Head and tail together cover any length: the stream is read whole.
    let whole = Bounds {
        head: u64::MAX / 2,
        tail: u64::MAX / 2,
        max_line,
    };
    let events = |wanted: &'static [&'static [u8]]| {
        Lines::new(stdout, whole)
            .filter(move |line| leading_type(line).is_none_or(|t| wanted.contains(&t)))
            .filter_map(|line| serde_json::from_slice::<Value>(&line).ok())
            .filter(Value::is_object)
    };
    match runtime {
        Runtime::Command => None,
        Runtime::Pi => pi(events(&[b"message_end", b"agent_end"])),
        Runtime::Claude => claude(events(&[b"assistant", b"result"])),
        Runtime::Codex => codex(events(&[b"turn.completed"])),
        Runtime::Opencode => opencode(events(&[b"step_finish"])),
    }
}

/// The event type of a line that starts exactly `{"type":"<name>"` (how both runtimes write
/// most events); `None` when it does not, or the name holds an escape: such a line is parsed.
fn leading_type(line: &[u8]) -> Option<&[u8]> {
    let rest = line.strip_prefix(b"{\"type\":\"")?;
    let end = rest.iter().position(|&b| b == b'"' || b == b'\\')?;
    (rest[end] == b'"').then(|| &rest[..end])
}

/// A count the runtime reported: a non-negative integer (a float is truncated); anything else
/// counts 0.
fn count(object: &Value, key: &str) -> u64 {
    match object.get(key) {
        Some(v) => v.as_u64().unwrap_or_else(|| {
            // `as` saturates: a huge float counts u64::MAX, never wraps.
            v.as_f64()
                .filter(|f| f.is_finite() && *f >= 0.0)
                .map_or(0, |f| f as u64)
        }),
        None => 0,
    }
}

/// A dollar amount the runtime reported (finite, non-negative).
fn dollars(v: Option<&Value>) -> Option<f64> {
    v.and_then(Value::as_f64)
        .filter(|f| f.is_finite() && *f >= 0.0)
}

/// Figures being summed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Tally {
    input: u64,
    output: u64,
    cache_read: u64,
    cache_write: u64,
    cost: Option<f64>,
    /// How many reports were added (a tally of none is no usage).
    reports: u64,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.input = self.input.saturating_add(other.input);
        self.output = self.output.saturating_add(other.output);
        self.cache_read = self.cache_read.saturating_add(other.cache_read);
        self.cache_write = self.cache_write.saturating_add(other.cache_write);
        self.cost = match (self.cost, other.cost) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        self.reports += other.reports;
    }

    fn record(self, source: UsageSource) -> Option<UsageRecord> {
        (self.reports > 0).then_some(UsageRecord {
            input_tokens: self.input,
            output_tokens: self.output,
            cache_read_tokens: self.cache_read,
            cache_write_tokens: self.cache_write,
            cost_usd: self.cost,
            source,
        })
    }
}

/// The usage of a pi message, when it is an assistant message that carries one.
fn pi_message(message: &Value) -> Option<Tally> {
    if message.get("role").and_then(Value::as_str) != Some("assistant") {
        return None;
    }
    let usage = message.get("usage").filter(|u| u.is_object())?;
    Some(Tally {
        input: count(usage, "input"),
        output: count(usage, "output"),
        cache_read: count(usage, "cacheRead"),
        cache_write: count(usage, "cacheWrite"),
        cost: dollars(usage.get("cost").and_then(|c| c.get("total"))),
        reports: 1,
    })
}

/// pi `--mode json` (see the module docs).
fn pi(events: impl Iterator<Item = Value>) -> Option<UsageRecord> {
    let mut ended = Tally::default();
    let mut last_agent_end: Option<Tally> = None;
    for event in events {
        match event.get("type").and_then(Value::as_str) {
            Some("message_end") => {
                if let Some(t) = event.get("message").and_then(pi_message) {
                    ended.add(t);
                }
            }
            Some("agent_end") => {
                let mut all = Tally::default();
                for t in event
                    .get("messages")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(pi_message)
                {
                    all.add(t);
                }
                last_agent_end = Some(all);
            }
            _ => {}
        }
    }
    let tally = if ended.reports > 0 {
        ended
    } else {
        last_agent_end.unwrap_or_default()
    };
    tally.record(UsageSource::PiJson)
}

/// The usage of a Claude `result` event: `modelUsage` summed, else `usage`; `None` when it
/// carries neither and no cost.
fn claude_result(event: &Value) -> Option<Tally> {
    let cost = dollars(event.get("total_cost_usd"));
    let models = event
        .get("modelUsage")
        .and_then(Value::as_object)
        .filter(|m| !m.is_empty());
    let mut tally = Tally {
        cost,
        reports: 1,
        ..Tally::default()
    };
    if let Some(models) = models {
        for model in models.values() {
            tally.input = tally.input.saturating_add(count(model, "inputTokens"));
            tally.output = tally.output.saturating_add(count(model, "outputTokens"));
            tally.cache_read = tally
                .cache_read
                .saturating_add(count(model, "cacheReadInputTokens"));
            tally.cache_write = tally
                .cache_write
                .saturating_add(count(model, "cacheCreationInputTokens"));
        }
    } else if let Some(usage) = event.get("usage").filter(|u| u.is_object()) {
        tally.input = count(usage, "input_tokens");
        tally.output = count(usage, "output_tokens");
        tally.cache_read = count(usage, "cache_read_input_tokens");
        tally.cache_write = count(usage, "cache_creation_input_tokens");
    } else if cost.is_none() {
        return None;
    }
    Some(tally)
}

/// The usage of a Claude `assistant` event's message (the Messages API's own usage).
fn claude_message(message: &Value) -> Option<Tally> {
    let usage = message.get("usage").filter(|u| u.is_object())?;
    Some(Tally {
        input: count(usage, "input_tokens"),
        output: count(usage, "output_tokens"),
        cache_read: count(usage, "cache_read_input_tokens"),
        cache_write: count(usage, "cache_creation_input_tokens"),
        cost: None,
        reports: 1,
    })
}

/// Claude Code `stream-json` (see the module docs).
fn claude(events: impl Iterator<Item = Value>) -> Option<UsageRecord> {
    let mut result: Option<Tally> = None;
    // Each message once: Claude Code repeats a message's usage once per content block, in a
    // row, so a run of events with the same id counts once (its last report). Only the current
    // run is held: the stream is the agent's, and PID 1's memory must not grow with it.
    let mut sum = Tally::default();
    let mut current: Option<(String, Tally)> = None;
    for event in events {
        match event.get("type").and_then(Value::as_str) {
            Some("result") => {
                if let Some(t) = claude_result(&event) {
                    result = Some(t);
                }
            }
            Some("assistant") => {
                let Some(message) = event.get("message") else {
                    continue;
                };
                let Some(t) = claude_message(message) else {
                    continue;
                };
                match message.get("id").and_then(Value::as_str) {
                    Some(id) => match &mut current {
                        Some((same, last)) if same == id => *last = t,
                        _ => {
                            if let Some((_, done)) = current.replace((id.to_string(), t)) {
                                sum.add(done);
                            }
                        }
                    },
                    None => sum.add(t),
                }
            }
            _ => {}
        }
    }
    let tally = result.unwrap_or_else(|| {
        if let Some((_, last)) = current {
            sum.add(last);
        }
        sum
    });
    tally.record(UsageSource::ClaudeStreamJson)
}

/// Codex `exec --json`: the sum of its `turn.completed` events' `usage`. Its `input_tokens`
/// count the cached ones (`cached_input_tokens`) too, which the record counts apart.
fn codex(events: impl Iterator<Item = Value>) -> Option<UsageRecord> {
    let mut sum = Tally::default();
    for event in events {
        if event.get("type").and_then(Value::as_str) != Some("turn.completed") {
            continue;
        }
        let Some(usage) = event.get("usage").filter(|u| u.is_object()) else {
            continue;
        };
        let cached = count(usage, "cached_input_tokens");
        sum.add(Tally {
            input: count(usage, "input_tokens").saturating_sub(cached),
            output: count(usage, "output_tokens"),
            cache_read: cached,
            cache_write: count(usage, "cache_write_input_tokens"),
            cost: None,
            reports: 1,
        });
    }
    sum.record(UsageSource::CodexJson)
}

/// OpenCode `run --format json`: the sum of its `step_finish` events' `part.tokens` and
/// `part.cost` (one per model step; there is no run total). Reasoning tokens are output tokens.
fn opencode(events: impl Iterator<Item = Value>) -> Option<UsageRecord> {
    let mut sum = Tally::default();
    for event in events {
        if event.get("type").and_then(Value::as_str) != Some("step_finish") {
            continue;
        }
        let Some(tokens) = event.pointer("/part/tokens").filter(|t| t.is_object()) else {
            continue;
        };
        let cache = tokens.get("cache").cloned().unwrap_or(Value::Null);
        sum.add(Tally {
            input: count(tokens, "input"),
            output: count(tokens, "output").saturating_add(count(tokens, "reasoning")),
            cache_read: count(&cache, "read"),
            cache_write: count(&cache, "write"),
            cost: dollars(event.pointer("/part/cost")),
            reports: 1,
        });
    }
    sum.record(UsageSource::OpencodeJson)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    #[test]
    fn opencode_sums_its_step_finish_tokens_and_cost() {
        let lines = [
            r#"{"type":"step_start","part":{}}"#,
            r#"{"type":"step_finish","part":{"reason":"tool-calls","cost":0.001,"tokens":{"total":20,"input":7,"output":5,"reasoning":2,"cache":{"read":3,"write":1}}}}"#,
            r#"{"type":"text","part":{"text":"done"}}"#,
            r#"{"type":"step_finish","part":{"reason":"stop","cost":0.002,"tokens":{"total":20,"input":7,"output":5,"reasoning":0,"cache":{"read":3,"write":0}}}}"#,
        ];
        let u = run(Runtime::Opencode, &lines).unwrap();
        assert_eq!(
            (
                u.input_tokens,
                u.output_tokens,
                u.cache_read_tokens,
                u.cache_write_tokens
            ),
            (14, 12, 6, 1)
        );
        assert!((u.cost_usd.unwrap() - 0.003).abs() < 1e-12, "{u:?}");
        assert_eq!(u.source, UsageSource::OpencodeJson);
        assert_eq!(run(Runtime::Opencode, &[r#"{"type":"error"}"#]), None);
    }

    fn run(runtime: Runtime, lines: &[&str]) -> Option<UsageRecord> {
        usage(runtime, Cursor::new(lines.join("\n")))
    }

    /// pi 0.73.1 `--mode json` against the scripted model (price list 3/15/0.3/3.75 dollars per
    /// million tokens): a tool call, the tool's result, the answer. Long lines cut where they
    /// carried only text.
    const PI_0_73: &[&str] = &[
        r#"{"type":"session","version":3,"id":"01a23238-4cac-77fa-a5ae-44c2ee629426","timestamp":"2026-12-01T15:28:00.172Z","cwd":"/tmp/hc-real/ws"}"#,
        r#"{"type":"agent_start"}"#,
        r#"{"type":"turn_start"}"#,
        r#"{"type":"message_start","message":{"role":"user","content":[{"type":"text","text":"please call hello_tool"}],"timestamp":1796138880330}}"#,
        r#"{"type":"message_end","message":{"role":"user","content":[{"type":"text","text":"please call hello_tool"}],"timestamp":1796138880330}}"#,
        r#"{"type":"message_start","message":{"role":"assistant","content":[],"api":"openai-completions","provider":"scripted","model":"scripted-model","usage":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"totalTokens":0,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},"stopReason":"stop","timestamp":1796138880400}}"#,
        r#"{"type":"message_update","assistantMessageEvent":{"type":"toolcall_end","contentIndex":0},"message":{"role":"assistant","content":[],"usage":{"input":10,"output":5,"cacheRead":0,"cacheWrite":0,"totalTokens":15,"cost":{"input":0.00003,"output":0.000075,"cacheRead":0,"cacheWrite":0,"total":0.000105}},"stopReason":"toolUse"}}"#,
        r#"{"type":"message_end","message":{"role":"assistant","content":[{"type":"toolCall","id":"call_pitcrew_1","name":"hello_tool","arguments":{"name":"pitcrew"}}],"api":"openai-completions","provider":"scripted","model":"scripted-model","usage":{"input":10,"output":5,"cacheRead":0,"cacheWrite":0,"totalTokens":15,"cost":{"input":3e-05,"output":7.500000000000001e-05,"cacheRead":0,"cacheWrite":0,"total":0.000105}},"stopReason":"toolUse","timestamp":1796138880474,"responseId":"chatcmpl-pitcrew","responseModel":"mock-model"}}"#,
        r#"{"type":"tool_execution_start","toolCallId":"call_pitcrew_1","toolName":"hello_tool","args":{"name":"pitcrew"}}"#,
        r#"{"type":"tool_execution_end","toolCallId":"call_pitcrew_1","toolName":"hello_tool","result":{"content":[{"type":"text","text":"Hello, pitcrew!"}],"details":{}},"isError":false}"#,
        r#"{"type":"message_end","message":{"role":"toolResult","toolCallId":"call_pitcrew_1","toolName":"hello_tool","content":[{"type":"text","text":"Hello, pitcrew!"}],"details":{},"isError":false,"timestamp":1796138880528}}"#,
        r#"{"type":"turn_end","message":{"role":"assistant","content":[],"usage":{"input":10,"output":5,"cacheRead":0,"cacheWrite":0,"totalTokens":15,"cost":{"total":0.000105}},"stopReason":"toolUse"},"toolResults":[]}"#,
        r#"{"type":"turn_start"}"#,
        r#"{"type":"message_end","message":{"role":"assistant","content":[{"type":"text","text":"the tool said: Hello, pitcrew!"}],"api":"openai-completions","provider":"scripted","model":"scripted-model","usage":{"input":7,"output":5,"cacheRead":3,"cacheWrite":2,"totalTokens":17,"cost":{"input":2.1e-05,"output":7.500000000000001e-05,"cacheRead":9e-07,"cacheWrite":7.5e-06,"total":0.0001044}},"stopReason":"stop","timestamp":1796138880528,"responseId":"chatcmpl-pitcrew","responseModel":"mock-model"}}"#,
        r#"{"type":"turn_end","message":{"role":"assistant","content":[],"usage":{"input":7,"output":5,"cacheRead":3,"cacheWrite":2,"totalTokens":17,"cost":{"total":0.0001044}},"stopReason":"stop"},"toolResults":[]}"#,
        r#"{"type":"agent_end","messages":[{"role":"user","content":[{"type":"text","text":"please call hello_tool"}]},{"role":"assistant","content":[],"usage":{"input":10,"output":5,"cacheRead":0,"cacheWrite":0,"totalTokens":15,"cost":{"total":0.000105}},"stopReason":"toolUse"},{"role":"toolResult","toolCallId":"call_pitcrew_1","content":[]},{"role":"assistant","content":[],"usage":{"input":7,"output":5,"cacheRead":3,"cacheWrite":2,"totalTokens":17,"cost":{"total":0.0001044}},"stopReason":"stop"}]}"#,
    ];

    /// pi 1.6.0: `message_update` carries a top-level `usage`, a `system` message comes first,
    /// and `cost` says `totalFromProvider`.
    const PI_1_6: &[&str] = &[
        r#"{"type":"session","version":3,"id":"01a23238-62c8-75f4-9c0b-eaaa2be0a4ba","timestamp":"2026-12-01T15:28:05.833Z","cwd":"/tmp/hc-real/ws"}"#,
        r#"{"type":"message_end","message":{"role":"system","content":"","sections":{"preamble":"You are a coding assistant running inside pi, a coding agent harness."}}}"#,
        r#"{"type":"message_update","usage":{"input":10,"output":5,"cacheRead":0,"cacheWrite":0,"reasoning":0,"totalTokens":15,"cost":{"input":0.00003,"output":0.00007500000000000001,"cacheRead":0,"cacheWrite":0,"total":0.000105,"totalFromProvider":false}},"assistantMessageEvent":{"type":"text_delta","contentIndex":0,"delta":"the tool said: Hello, pitcrew!"}}"#,
        r#"{"type":"message_end","message":{"role":"assistant","content":[{"type":"text","text":"the tool said: Hello, pitcrew!"}],"api":"openai-completions","provider":"scripted","model":"scripted-model","usage":{"input":10,"output":5,"cacheRead":0,"cacheWrite":0,"reasoning":0,"totalTokens":15,"cost":{"input":0.00003,"output":0.00007500000000000001,"cacheRead":0,"cacheWrite":0,"total":0.000105,"totalFromProvider":false}},"stopReason":"stop","timestamp":1796138886228}}"#,
        r#"{"type":"agent_end","messages":[{"role":"assistant","content":[],"usage":{"input":10,"output":5,"cacheRead":0,"cacheWrite":0,"totalTokens":15,"cost":{"total":0.000105}},"stopReason":"stop"}]}"#,
        r#"{"type":"agent_settled","aborted":false}"#,
    ];

    /// Claude Code 2.1.332 `-p --output-format stream-json --verbose` against the scripted
    /// model: the init event (cut), a tool call, its result, the answer and the `result` event.
    const CLAUDE: &[&str] = &[
        r#"{"type":"system","subtype":"init","cwd":"/tmp/hc-real/cws","session_id":"714a8e91-67e7-42f0-9199-0ca200454877","tools":["Task","Bash"],"model":"claude-sonnet-4-5","plugins":[],"plugin_errors":[]}"#,
        r#"{"type":"assistant","message":{"content":[{"id":"toolu_pitcrew_1","input":{"command":"echo hello from the sandbox > hello.txt && cat hello.txt","description":"write hello.txt"},"name":"Bash","type":"tool_use"}],"id":"msg_01","model":"mock-model","role":"assistant","stop_reason":null,"stop_sequence":null,"type":"message","usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":3,"cache_creation_input_tokens":2},"context_management":null},"parent_tool_use_id":null,"session_id":"714a8e91-67e7-42f0-9199-0ca200454877","uuid":"04c42ccd-fc68-4a99-9ad2-e734f017f515","timestamp":"2026-12-01T15:28:13.556Z"}"#,
        r#"{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_pitcrew_1","type":"tool_result","content":"hello from the sandbox","is_error":false}]},"parent_tool_use_id":null,"session_id":"714a8e91-67e7-42f0-9199-0ca200454877","uuid":"ca2c5bca-4588-42c4-b5eb-49f2caebb744","timestamp":"2026-12-01T15:28:13.790Z"}"#,
        r#"{"type":"assistant","message":{"content":[{"text":"the tool said: hello from the sandbox","type":"text"}],"id":"msg_02","model":"mock-model","role":"assistant","stop_reason":null,"stop_sequence":null,"type":"message","usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":3,"cache_creation_input_tokens":2},"context_management":null},"parent_tool_use_id":null,"session_id":"714a8e91-67e7-42f0-9199-0ca200454877","uuid":"75edf417-c076-461c-8a92-454a64fd886b","timestamp":"2026-12-01T15:28:13.833Z"}"#,
        r#"{"duration_api_ms":259,"stop_reason":"end_turn","session_id":"714a8e91-67e7-42f0-9199-0ca200454877","total_cost_usd":0.0002493,"usage":{"input_tokens":20,"cache_creation_input_tokens":4,"cache_read_input_tokens":6,"output_tokens":10,"output_tokens_details":{"thinking_tokens":0},"server_tool_use":{"web_search_requests":0,"web_fetch_requests":0},"service_tier":"standard","cache_creation":{"ephemeral_1h_input_tokens":0,"ephemeral_5m_input_tokens":4},"inference_geo":"","iterations":[],"speed":"standard","fallback_credit":null},"modelUsage":{"claude-sonnet-4-5":{"inputTokens":20,"outputTokens":10,"cacheReadInputTokens":6,"cacheCreationInputTokens":4,"webSearchRequests":0,"costUSD":0.0002493,"contextWindow":200000,"maxOutputTokens":32000,"thinkingTokens":0,"canonicalModel":"claude-sonnet-4-5","provider":"firstParty","costBasis":"list"}},"permission_denials":[],"terminal_reason":"completed","is_error":false,"num_turns":2,"subtype":"success","api_error_status":null,"result":"the tool said: hello from the sandbox","type":"result","duration_ms":837,"uuid":"6e60ea3d-9ecc-4fe5-a3cc-1756d9e02b1a"}"#,
    ];

    #[test]
    fn pi_sums_the_assistant_messages_it_ended() {
        let u = run(Runtime::Pi, PI_0_73).unwrap();
        assert_eq!(
            (
                u.input_tokens,
                u.output_tokens,
                u.cache_read_tokens,
                u.cache_write_tokens
            ),
            (17, 10, 3, 2)
        );
        let cost = u.cost_usd.unwrap();
        assert!((cost - 0.0002094).abs() < 1e-12, "{cost}");
        assert_eq!(u.source, UsageSource::PiJson);
        let u = run(Runtime::Pi, PI_1_6).unwrap();
        assert_eq!((u.input_tokens, u.output_tokens), (10, 5));
        assert!((u.cost_usd.unwrap() - 0.000105).abs() < 1e-12);
    }

    #[test]
    fn pi_without_message_end_takes_its_last_agent_end() {
        let lines: Vec<&str> = PI_0_73
            .iter()
            .copied()
            .filter(|l| !l.starts_with(r#"{"type":"message_end""#))
            .collect();
        let u = run(Runtime::Pi, &lines).unwrap();
        assert_eq!(
            (u.input_tokens, u.output_tokens, u.cache_read_tokens),
            (17, 10, 3)
        );
        // A stream with no usage at all (a pi that failed before the model answered).
        let none = [
            r#"{"type":"session","version":3,"id":"x"}"#,
            r#"{"type":"agent_start"}"#,
            r#"{"type":"message_end","message":{"role":"user","content":"hi"}}"#,
            r#"{"type":"agent_end","messages":[{"role":"user","content":"hi"}]}"#,
        ];
        assert_eq!(run(Runtime::Pi, &none), None);
        assert_eq!(run(Runtime::Pi, &[]), None);
    }

    #[test]
    fn pi_without_a_cost_says_null() {
        let lines = [
            r#"{"type":"message_end","message":{"role":"assistant","usage":{"input":4,"output":2}}}"#,
        ];
        let u = run(Runtime::Pi, &lines).unwrap();
        assert_eq!((u.input_tokens, u.output_tokens, u.cost_usd), (4, 2, None));
        let json = serde_json::to_value(&u).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"input_tokens": 4, "output_tokens": 2, "cache_read_tokens": 0,
                "cache_write_tokens": 0, "cost_usd": null, "source": "pi-json"})
        );
    }

    #[test]
    fn codex_sums_its_completed_turns_cached_tokens_apart() {
        let lines = [
            r#"{"type":"turn.started"}"#,
            r#"{"type":"turn.completed","usage":{"input_tokens":20,"cached_input_tokens":6,"cache_write_input_tokens":1,"output_tokens":10,"reasoning_output_tokens":0}}"#,
            r#"{"type":"turn.completed","usage":{"input_tokens":5,"cached_input_tokens":0,"output_tokens":2}}"#,
        ];
        let u = run(Runtime::Codex, &lines).unwrap();
        assert_eq!(
            (
                u.input_tokens,
                u.cache_read_tokens,
                u.cache_write_tokens,
                u.output_tokens
            ),
            (19, 6, 1, 12)
        );
        assert_eq!((u.cost_usd, u.source), (None, UsageSource::CodexJson));
        assert_eq!(run(Runtime::Codex, &[r#"{"type":"turn.failed"}"#]), None);
    }

    #[test]
    fn claude_takes_the_result_event_and_prefers_model_usage() {
        let u = run(Runtime::Claude, CLAUDE).unwrap();
        assert_eq!(
            (
                u.input_tokens,
                u.output_tokens,
                u.cache_read_tokens,
                u.cache_write_tokens,
                u.cost_usd
            ),
            (20, 10, 6, 4, Some(0.0002493))
        );
        assert_eq!(u.source, UsageSource::ClaudeStreamJson);
        assert_eq!(
            serde_json::to_value(u.source).unwrap(),
            serde_json::json!("claude-stream-json")
        );
        // `modelUsage` covers sub-agents and auxiliary calls, `usage` the main loop only.
        let result = r#"{"type":"result","is_error":false,"total_cost_usd":0.5,"usage":{"input_tokens":100,"output_tokens":10},"modelUsage":{"claude-sonnet-4-5":{"inputTokens":100,"outputTokens":10,"cacheReadInputTokens":1,"cacheCreationInputTokens":2},"claude-haiku-4-5":{"inputTokens":50,"outputTokens":7,"cacheReadInputTokens":0,"cacheCreationInputTokens":0}}}"#;
        let u = run(Runtime::Claude, &[result]).unwrap();
        assert_eq!(
            (
                u.input_tokens,
                u.output_tokens,
                u.cache_read_tokens,
                u.cache_write_tokens
            ),
            (150, 17, 1, 2)
        );
        // Without `modelUsage`: the `usage` object.
        let result = r#"{"type":"result","total_cost_usd":0.01,"usage":{"input_tokens":9,"output_tokens":8,"cache_read_input_tokens":7,"cache_creation_input_tokens":6}}"#;
        let u = run(Runtime::Claude, &[result]).unwrap();
        assert_eq!(
            (
                u.input_tokens,
                u.output_tokens,
                u.cache_read_tokens,
                u.cache_write_tokens,
                u.cost_usd
            ),
            (9, 8, 7, 6, Some(0.01))
        );
    }

    #[test]
    fn claude_without_a_result_sums_each_message_once_and_has_no_cost() {
        // Killed before its result: the assistant events, one per content block of a message.
        let lines = [
            CLAUDE[0],
            r#"{"type":"assistant","message":{"id":"msg_a","content":[{"type":"text","text":"a"}],"usage":{"input_tokens":10,"output_tokens":1}}}"#,
            r#"{"type":"assistant","message":{"id":"msg_a","content":[{"type":"tool_use","id":"t","name":"Bash","input":{}}],"usage":{"input_tokens":10,"output_tokens":4}}}"#,
            CLAUDE[2],
            r#"{"type":"assistant","message":{"id":"msg_b","content":[],"usage":{"input_tokens":20,"output_tokens":3,"cache_read_input_tokens":5}}}"#,
        ];
        let u = run(Runtime::Claude, &lines).unwrap();
        assert_eq!(
            (
                u.input_tokens,
                u.output_tokens,
                u.cache_read_tokens,
                u.cost_usd
            ),
            (30, 7, 5, None)
        );
        assert_eq!(run(Runtime::Claude, &[CLAUDE[0], CLAUDE[2]]), None);
    }

    #[test]
    fn command_output_and_junk_are_no_usage() {
        assert_eq!(run(Runtime::Command, CLAUDE), None);
        assert_eq!(run(Runtime::Command, PI_0_73), None);
        let junk = [
            "not json",
            "[1,2]",
            r#"{"type":"message_end","message":{"role":"assistant","usage":"lots"}}"#,
            r#"{"type":"result","usage":[1]}"#,
        ];
        assert_eq!(run(Runtime::Pi, &junk), None);
        assert_eq!(run(Runtime::Claude, &junk), None);
        // Negative or non-numeric counts count 0; a negative cost is no cost.
        let odd = [
            r#"{"type":"message_end","message":{"role":"assistant","usage":{"input":-5,"output":"7","cacheRead":2.9,"cost":{"total":-1}}}}"#,
        ];
        let u = run(Runtime::Pi, &odd).unwrap();
        assert_eq!(
            (
                u.input_tokens,
                u.output_tokens,
                u.cache_read_tokens,
                u.cost_usd
            ),
            (0, 0, 2, None)
        );
    }

    #[test]
    fn lines_of_other_types_are_not_parsed_and_long_lines_are_skipped() {
        assert_eq!(
            leading_type(br#"{"type":"message_end","x":1}"#),
            Some(&b"message_end"[..])
        );
        assert_eq!(leading_type(br#"{"type": "message_end"}"#), None);
        assert_eq!(leading_type(br#"{"type":"a\"b"}"#), None);
        assert_eq!(leading_type(br#"{"usage":{}}"#), None);
        // A `message_update` is not parsed: its partial figures do not count.
        let lines = [
            r#"{"type":"message_update","message":{"role":"assistant","usage":{"input":1000}}}"#,
            PI_1_6[3],
        ];
        assert_eq!(run(Runtime::Pi, &lines).unwrap().input_tokens, 10);
        // A line over the bound is skipped unbuffered: its usage does not count.
        let long = format!(
            r#"{{"type":"message_end","message":{{"role":"assistant","content":"{}","usage":{{"input":1,"output":1}}}}}}"#,
            "x".repeat(4096)
        );
        let text = [long.as_str(), PI_1_6[3]].join("\n");
        let u = usage_within(Runtime::Pi, Cursor::new(text), 1024).unwrap();
        assert_eq!(u.input_tokens, 10);
    }
}
