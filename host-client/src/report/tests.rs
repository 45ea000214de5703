//! Unit tests of the summaries, the table and the terminal escaping.

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
    r.context_files = Some(pitcrew_core::result::ContextFilesRecord {
        mode: "uploaded".into(),
        baseline_iteration: Some(1),
        read: Vec::new(),
        reset: vec![pitcrew_core::result::ContextResetRecord {
            path: "/w/AGENTS.md".into(),
            action: "restored".into(),
            was: "regular file".into(),
        }],
        git_status: false,
    });
    // What the host receives is what the supervisor serialized.
    let r: IterationResult = serde_json::from_str(&r.to_json_line()).unwrap();
    let s = summarize(&r, Some(1500), Vec::new());
    assert!(!s.verified);
    assert_eq!(
        s.meaning,
        "a plugin or skills tree is missing or its hash differs"
    );
    assert_eq!(s.verification, "hello drifted: changed index.ts");
    assert_eq!(s.env_removed, ["NODE_OPTIONS"]);
    assert_eq!(s.workspace_config, [".pi/settings.json"]);
    assert_eq!(s.context_reset, ["/w/AGENTS.md (restored)"]);
    let t = table(&[s], false);
    assert!(
        t.contains("96 a plugin or skills tree is missing or its hash differs"),
        "{t}"
    );
    assert!(t.contains("1/0"), "{t}");
    assert!(t.contains("1: NODE_OPTIONS"), "{t}");
}

#[test]
fn refused_dotenv_lines_are_counted_and_named_with_the_removed_names_never_by_value() {
    let mut r = record(
        1,
        0,
        "",
        tree("p", CheckStatus::Ok, Drift::default(), None),
        file("/a", CheckStatus::Ok),
    );
    r.env.removed = vec![removed("NODE_OPTIONS")];
    r.env.dotenv_refused = vec![
        pitcrew_core::dotenv::DotenvRefusal {
            line: 2,
            name: Some("HTTPS_PROXY".into()),
            reason: "only a trusted layer may set it".into(),
        },
        pitcrew_core::dotenv::DotenvRefusal {
            line: 5,
            name: None,
            reason: "not an assignment".into(),
        },
    ];
    let s = summarize(&r, Some(10), Vec::new());
    assert_eq!(s.env_refused, ["HTTPS_PROXY (.env line 2)", ".env line 5"]);
    assert_eq!(
        s.env_note(),
        "; env removed or refused: NODE_OPTIONS, HTTPS_PROXY (.env line 2), .env line 5"
    );
    let t = table(&[s], false);
    assert!(
        t.contains("3: NODE_OPTIONS, HTTPS_PROXY (.env line 2), .env line 5"),
        "{t}"
    );
}

#[test]
fn a_record_collected_later_takes_its_duration_from_its_steps() {
    let mut r = record(
        1,
        0,
        "",
        tree("p", CheckStatus::Ok, Drift::default(), None),
        file("/a", CheckStatus::Ok),
    );
    r.steps.reap_ms = 5;
    r.steps.verify_ms = 20;
    r.steps.agent_ms = 30_000;
    r.steps.final_reap_ms = 3;
    assert_eq!(summarize(&r, None, Vec::new()).duration_ms, 30_028);
    assert_eq!(summarize(&r, Some(31_000), Vec::new()).duration_ms, 31_000);
    let t = table(&[summarize(&r, None, Vec::new())], false);
    assert!(t.contains("30.03s"), "{t}");
}

#[test]
fn tokens_and_cost_get_a_column_and_stay_whole_in_the_json() {
    use pitcrew_core::result::UsageSource;
    let ok = || {
        record(
            1,
            0,
            "",
            tree("p", CheckStatus::Ok, Drift::default(), None),
            file("/a", CheckStatus::Ok),
        )
    };
    let mut claude = ok();
    claude.usage = Some(UsageRecord {
        input_tokens: 20,
        output_tokens: 1_234,
        cache_read_tokens: 120_000,
        cache_write_tokens: 5_000,
        cost_usd: Some(0.4567),
        source: UsageSource::ClaudeStreamJson,
    });
    let mut pi = ok();
    pi.iteration = 2;
    pi.usage = Some(UsageRecord {
        input_tokens: 17,
        output_tokens: 10,
        cache_read_tokens: 3,
        cache_write_tokens: 0,
        cost_usd: Some(0.000_209_4),
        source: UsageSource::PiJson,
    });
    let mut unpriced = ok();
    unpriced.iteration = 3;
    unpriced.usage = Some(UsageRecord {
        cost_usd: None,
        ..pi.usage.clone().unwrap()
    });
    let mut none = ok();
    none.iteration = 4;
    // What the host receives is what the supervisor serialized.
    let rows: Vec<IterationSummary> = [claude, pi, unpriced, none]
        .iter()
        .map(|r| {
            let r: IterationResult = serde_json::from_str(&r.to_json_line()).unwrap();
            summarize(&r, Some(10), Vec::new())
        })
        .collect();
    let t = table(&rows, false);
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["iter", "exit", "duration", "reaped", "tokens", "verified", "env", "removed"],
        "{t}"
    );
    assert!(lines[1].contains("  125.0k/1.2k $0.46  "), "{t}");
    assert!(lines[2].contains("  20/10 $0.0002  "), "{t}");
    assert!(lines[3].contains("  20/10  "), "{t}");
    assert!(lines[4].contains("  -  "), "{t}");
    let json = serde_json::to_value(&rows).unwrap();
    assert_eq!(
        json[0]["usage"],
        serde_json::json!({"input_tokens": 20, "output_tokens": 1234,
            "cache_read_tokens": 120000, "cache_write_tokens": 5000, "cost_usd": 0.4567,
            "source": "claude-stream-json"})
    );
    assert_eq!(json[2]["usage"]["cost_usd"], Value::Null);
    assert!(json[3].get("usage").is_none(), "{json:#}");
    // Without usage anywhere (runtime `command`), no column.
    let t = table(&rows[3..], false);
    assert!(!t.contains("tokens"), "{t}");
    assert_eq!(usage_cell(None), "-");
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
        Some(10),
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
        Some(10),
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
    let s = summarize(&record, Some(10), Vec::new());
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
    let s = summarize(&record, Some(10), Vec::new());
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

#[test]
fn the_net_column_counts_allowed_and_refused_attempts_and_says_open_loudly() {
    use pitcrew_core::result::{ConnectionRecord, NetworkRecord};
    let conn = |allowed: bool| ConnectionRecord {
        host: "api.example.com".into(),
        port: 443,
        via: "proxy".into(),
        allowed,
        reason: None,
        bytes_up: 1,
        bytes_down: 2,
        duration_ms: 3,
        injected: Vec::new(),
        from: None,
    };
    let allow = NetworkRecord {
        mode: "allow".into(),
        platform: None,
        allow: vec!["api.example.com:443".into()],
        connections: vec![conn(true), conn(true), conn(false)],
        dropped: 4,
        error: None,
        hidden: vec!["/run".into()],
        ..NetworkRecord::default()
    };
    assert_eq!(network_cell(&allow), "2 ok/1 refused (+4 unlisted)");
    let open = NetworkRecord {
        mode: "open".into(),
        ..NetworkRecord::default()
    };
    assert_eq!(network_cell(&open), "OPEN");
    let platform = NetworkRecord {
        mode: "platform".into(),
        platform: Some("openshell".into()),
        ..NetworkRecord::default()
    };
    assert_eq!(network_cell(&platform), "PLATFORM openshell");
    let info = SupervisorInfo {
        pid1: true,
        mode: SupervisorMode::Pid1,
        degraded_reason: None,
    };
    let mut with = summarize(&IterationResult::new(1, info.clone()), Some(5), Vec::new());
    with.network = Some(network_cell(&allow));
    let without = summarize(&IterationResult::new(2, info), Some(5), Vec::new());
    let text = table(&[with, without], false);
    let header = text.lines().next().unwrap_or_default();
    assert!(header.contains(" net "), "{text}");
    assert!(text.contains("2 ok/1 refused"), "{text}");
}
