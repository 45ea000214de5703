//! The content scan of the trees a harness uploads, fetched or local: a bounded look for what a
//! runtime would take as instructions or as code to load, in a tree somebody else may have
//! written.
//!
//! What it reports (each a finding, `path:line: what`):
//!
//! - prompt-injection phrases in text files ("ignore previous instructions", "disregard all
//!   prior", "you are now", "new system prompt", `<system>` tags, …), compared without case;
//! - characters that hide text from a reviewer: zero-width and bidirectional controls, Unicode
//!   tag characters, terminal escapes;
//! - `package.json` lifecycle scripts that `npm install` would run (`preinstall`, `install`,
//!   `postinstall`, `prepare`, …);
//! - files a runtime loads by their name alone: context files (`AGENTS.md`, `CLAUDE.md`,
//!   `SYSTEM.md`, `APPEND_SYSTEM.md`), runtime settings directories (`.pi/`, `.claude/`), a
//!   Claude plugin's command-running parts (`hooks/hooks.json`, `.mcp.json`), `.npmrc`, `.env`.
//!
//! The same scan runs over the local plugins, skills and adapters a harness names, at
//! `validate` and `run` (`pitcrew run` prints its findings on stderr), with the same findings.
//!
//! Bounds: files over 1 MiB are not read (each is named as not scanned), nor files with a NUL
//! byte in their first 8 KiB (binary); at most 64 MiB is read per source; at most 100000 files
//! are listed per source, walked without recursion; at most 50 findings are listed per source
//! (then how many more). The scan reads; it never runs anything.

use std::io::Read as _;
use std::path::Path;

/// Files larger than this are not read.
const MAX_FILE: u64 = 1 << 20;
/// At most this much is read per source.
const MAX_TOTAL: u64 = 64 << 20;
/// At most this many findings are listed per source.
const MAX_FINDINGS: usize = 50;
/// At most this many files are listed per source (a fetched one has at most
/// `PITCREW_REMOTE_MAX_FILES`; a local tree is not capped before).
const MAX_FILES: usize = 100_000;

/// Phrases that address the model rather than describe a tool (lowercase).
const PHRASES: &[&str] = &[
    "ignore previous instructions",
    "ignore all previous",
    "ignore the previous",
    "ignore all prior",
    "ignore prior instructions",
    "ignore the above",
    "disregard previous",
    "disregard all previous",
    "disregard all prior",
    "disregard the above",
    "forget your instructions",
    "forget all previous",
    "you are now",
    "new system prompt",
    "override the system prompt",
    "do not tell the user",
    "don't tell the user",
    "without telling the user",
    "<system>",
    "</system>",
    "<|im_start|>",
    "[inst]",
];

/// `scripts` that npm runs on install.
const LIFECYCLE: &[&str] = &[
    "preinstall",
    "install",
    "postinstall",
    "prepublish",
    "preprepare",
    "prepare",
    "postprepare",
];

/// Scans the fetched copy at `root` (a directory, or one file named `name`); findings name
/// paths relative to the source.
pub fn scan(root: &Path, name: &str) -> Vec<String> {
    let mut findings = Vec::new();
    let mut budget = MAX_TOTAL;
    let mut files = Vec::new();
    if root.is_dir() {
        if !collect(root, "", &mut files) {
            findings.push(format!(
                "not scanned past {MAX_FILES} files (the first {MAX_FILES} found are)"
            ));
        }
    } else {
        files.push((root.to_path_buf(), name.to_string()));
    }
    files.sort_by(|a, b| a.1.cmp(&b.1));
    for (path, rel) in files {
        by_name(&rel, &mut findings);
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        if meta.len() > MAX_FILE || meta.len() > budget {
            findings.push(format!(
                "{rel}: not scanned ({} bytes: over 1 MiB, or past the 64 MiB read per source)",
                meta.len()
            ));
            continue;
        }
        let mut bytes = Vec::new();
        if std::fs::File::open(&path)
            .and_then(|f| f.take(MAX_FILE).read_to_end(&mut bytes))
            .is_err()
        {
            continue;
        }
        budget -= bytes.len() as u64;
        if bytes[..bytes.len().min(8192)].contains(&0) {
            continue;
        }
        let text = String::from_utf8_lossy(&bytes);
        by_content(&rel, &text, &mut findings);
    }
    if findings.len() > MAX_FINDINGS {
        let more = findings.len() - MAX_FINDINGS;
        findings.truncate(MAX_FINDINGS);
        findings.push(format!("… and {more} more findings"));
    }
    findings
}

/// Every regular file below `dir`, with its path relative to the source (links not followed),
/// walked without recursion; at most [`MAX_FILES`] (`false` when there were more).
fn collect(dir: &Path, prefix: &str, out: &mut Vec<(std::path::PathBuf, String)>) -> bool {
    let mut pending = vec![(dir.to_path_buf(), prefix.to_string())];
    while let Some((dir, prefix)) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            match entry.file_type() {
                Ok(t) if t.is_dir() => pending.push((entry.path(), rel)),
                Ok(t) if t.is_file() => {
                    if out.len() == MAX_FILES {
                        return false;
                    }
                    out.push((entry.path(), rel));
                }
                _ => {}
            }
        }
    }
    true
}

/// Findings from a file's path alone: names a runtime loads without being told.
fn by_name(rel: &str, findings: &mut Vec<String>) {
    let base = rel.rsplit('/').next().unwrap_or(rel);
    let why = match base {
        "AGENTS.md" | "CLAUDE.md" | "SYSTEM.md" | "APPEND_SYSTEM.md" => {
            Some("a context file the runtimes load into the prompt by its name")
        }
        ".mcp.json" => Some("MCP servers: commands Claude Code starts for a plugin"),
        ".npmrc" => Some("npm configuration (registries, scripts)"),
        ".env" => Some("an environment file"),
        _ => None,
    };
    let why = why.or_else(|| {
        if rel == "hooks/hooks.json" || rel.ends_with("/hooks/hooks.json") {
            Some("hooks: commands Claude Code runs on the agent's events")
        } else if rel.split('/').any(|c| c == ".pi" || c == ".claude") {
            Some("inside a runtime settings directory (.pi/, .claude/)")
        } else {
            None
        }
    });
    if let Some(why) = why {
        findings.push(format!("{rel}: {why}"));
    }
}

/// Findings from a text file's content.
fn by_content(rel: &str, text: &str, findings: &mut Vec<String>) {
    for (n, line) in text.lines().enumerate() {
        let lower = line.to_lowercase();
        if let Some(phrase) = PHRASES.iter().find(|p| lower.contains(**p)) {
            findings.push(format!(
                "{rel}:{}: {phrase:?}: addresses the model (a prompt-injection phrase)",
                n + 1
            ));
        }
        if let Some(c) = line.chars().find(|c| hiding(*c)) {
            findings.push(format!(
                "{rel}:{}: U+{:04X}: a character that hides or reorders text",
                n + 1,
                c as u32
            ));
        }
    }
    if rel == "package.json" || rel.ends_with("/package.json") {
        if let Ok(doc) = serde_json::from_str::<serde_json::Value>(text) {
            if let Some(scripts) = doc.get("scripts").and_then(|s| s.as_object()) {
                for name in LIFECYCLE.iter().filter(|n| scripts.contains_key(**n)) {
                    findings.push(format!(
                        "{rel}: scripts.{name}: a lifecycle script `npm install` would run"
                    ));
                }
            }
        }
    }
}

/// Zero-width and bidirectional controls, Unicode tags, and the terminal's escape.
fn hiding(c: char) -> bool {
    matches!(c as u32,
        0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x2064 | 0x2066..=0x2069 | 0xFEFF
        | 0xE0000..=0xE007F | 0x1B)
}
