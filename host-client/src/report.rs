//! Reading result records for people: one summary per iteration (exit code and meaning,
//! duration, reaped, verification or drift, removed environment names) and the table `pitcrew
//! run` prints.

use serde::Serialize;
use serde_json::Value;
use std::fmt::Write as _;

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

fn names(list: &[Value], max: usize) -> String {
    let shown: Vec<&str> = list.iter().filter_map(Value::as_str).take(max).collect();
    let mut s = shown.join(", ");
    if list.len() > max {
        let _ = write!(s, " (+{} more)", list.len() - max);
    }
    s
}

/// The verification summary of a record's `verification` (or a live status's): `(verified,
/// text, drift entries)`.
pub fn verification_summary(verification: &Value) -> (bool, String, Vec<Value>) {
    if verification.is_null() {
        return (false, "not verified".into(), Vec::new());
    }
    let mut bad = Vec::new();
    let mut drift = Vec::new();
    let trees = verification["trees"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let files = verification["files"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for t in &trees {
        let status = t["status"].as_str().unwrap_or("?");
        if status == "ok" {
            continue;
        }
        let name = t["name"].as_str().unwrap_or("?");
        let mut parts = Vec::new();
        for key in ["changed", "added", "removed"] {
            if let Some(list) = t["drift"][key].as_array().filter(|l| !l.is_empty()) {
                parts.push(format!("{key} {}", names(list, 5)));
            }
        }
        if let Some(e) = t["error"].as_str() {
            parts.push(e.to_string());
        }
        bad.push(if parts.is_empty() {
            format!("{name} {status}")
        } else {
            format!("{name} {status}: {}", parts.join("; "))
        });
        drift.push(serde_json::json!({
            "tree": name, "path": t["path"], "status": status, "drift": t["drift"], "error": t["error"],
        }));
    }
    for f in &files {
        let status = f["status"].as_str().unwrap_or("?");
        if status == "ok" {
            continue;
        }
        let path = f["path"].as_str().unwrap_or("?");
        bad.push(format!("{path} {status}"));
        drift.push(serde_json::json!({"file": path, "status": status, "error": f["error"]}));
    }
    if let Some(failure) = verification["agent"]["failure"]["reason"].as_str() {
        bad.push(format!("agent: {failure}"));
    }
    if bad.is_empty() {
        (
            true,
            format!("ok ({} trees, {} files)", trees.len(), files.len()),
            drift,
        )
    } else {
        (false, bad.join("; "), drift)
    }
}

/// The summary of one result record.
pub fn summarize(record: &Value, duration_ms: u64, events: Vec<Value>) -> IterationSummary {
    let (verified, verification, drift) = verification_summary(&record["verification"]);
    let env_removed = record["env"]["removed"]
        .as_array()
        .map(|l| {
            l.iter()
                .filter_map(|v| {
                    v.as_str()
                        .or_else(|| v["name"].as_str())
                        .map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default();
    IterationSummary {
        iteration: record["iteration"]
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0),
        exit_code: record["exit_code"]
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .unwrap_or(125),
        meaning: record["meaning"].as_str().unwrap_or_default().to_string(),
        reason: record["reason"].as_str().map(str::to_string),
        duration_ms,
        reaped_before: record["reaped"]["before"].as_u64().unwrap_or(0),
        reaped_after: record["reaped"]["after"].as_u64().unwrap_or(0),
        verified,
        verification,
        drift,
        env_removed,
        workspace_config: record["workspace_config"]
            .as_array()
            .map(|l| {
                l.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default(),
        steps: record["steps"].clone(),
        events,
        record_dir: None,
        validation_exit: None,
    }
}

/// The summary table, one row per iteration.
pub fn table(rows: &[IterationSummary]) -> String {
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
        if let Some(reason) = &r.reason {
            let _ = write!(exit, " ({reason})");
        }
        if let Some(v) = r.validation_exit {
            let _ = write!(exit, " [validation {v}]");
        }
        let env = if r.env_removed.is_empty() {
            "0".to_string()
        } else {
            format!("{}: {}", r.env_removed.len(), r.env_removed.join(", "))
        };
        lines.push([
            r.iteration.to_string(),
            exit,
            format!("{:.2}s", r.duration_ms as f64 / 1000.0),
            format!("{}/{}", r.reaped_before, r.reaped_after),
            r.verification.clone(),
            env,
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
    for l in &lines {
        let mut line = String::new();
        for (i, c) in l.iter().enumerate() {
            if i + 1 == l.len() {
                line.push_str(c);
            } else {
                let pad = widths[i] - c.chars().count();
                let _ = write!(line, "{c}{}  ", " ".repeat(pad));
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
    use serde_json::json;

    #[test]
    fn drift_and_env_names_are_summarised() {
        let record = json!({
            "iteration": 2, "exit_code": 96, "meaning": "plugin tree differs",
            "reason": "tree-drifted: hello",
            "reaped": {"before": 1, "after": 0},
            "verification": {
                "trees": [{"name": "hello", "path": "/p/hello", "status": "drifted",
                           "drift": {"added": [], "removed": [], "changed": ["index.ts"]}}],
                "files": [{"path": "/p/adapters/hooks.json", "status": "ok"}],
                "agent": {"requested": "/bin/sh"}
            },
            "env": {"removed": [{"name": "NODE_OPTIONS", "rule": "deny"}]},
            "workspace_config": [".pi/settings.json"],
            "steps": {}
        });
        let s = summarize(&record, 1500, Vec::new());
        assert!(!s.verified);
        assert_eq!(s.verification, "hello drifted: changed index.ts");
        assert_eq!(s.env_removed, ["NODE_OPTIONS"]);
        assert_eq!(s.workspace_config, [".pi/settings.json"]);
        let t = table(&[s]);
        assert!(t.contains("96 plugin tree differs"), "{t}");
        assert!(t.contains("1/0"), "{t}");
        assert!(t.contains("1: NODE_OPTIONS"), "{t}");
    }
}
