//! The commands of a Codex plugin that would run the agent's files instead of the plugin's.
//!
//! Codex 0.169.1 runs a plugin's hooks, and an MCP server that names no `cwd`, in the session's
//! directory: the workspace, the agent's to write. It names the plugin's copy in `PLUGIN_ROOT`
//! (and `CLAUDE_PLUGIN_ROOT`). So a command whose program is a relative path (`./check.sh`,
//! `hooks/check.sh`), an interpreter given a relative script (`bash check.sh`, `python3
//! server.py` with no `cwd`), or a path after either variable with a `..` component would run
//! what the agent wrote there, never verified. The check is textual: it reads the program and
//! an interpreter's first argument of each command of a pipeline or list; a command that builds
//! a path otherwise (a script that runs something it finds) is not seen.

use super::{ClassifyError, Ctx};
use serde_json::Value;

/// The files a Codex plugin's commands are in (the manifest's inline `hooks` and `mcpServers`
/// are read too).
const COMMAND_FILES: [&str; 3] = ["hooks/hooks.json", "hooks.json", ".mcp.json"];

/// Interpreters whose first argument that is not an option is the program they run.
const INTERPRETERS: [&str; 11] = [
    "sh", "bash", "dash", "zsh", "node", "python", "python3", "ruby", "perl", "bun", "deno",
];

/// Refuses the first command of the plugin in `ctx` (manifest object `manifest`) that would
/// run a file of the session's directory or one outside the plugin.
pub(super) fn check(
    ctx: &Ctx,
    manifest: &serde_json::Map<String, Value>,
) -> Result<(), ClassifyError> {
    let mut sources: Vec<(String, Value)> = Vec::new();
    for file in COMMAND_FILES {
        if ctx.kind(file)? == Some(super::Kind::File) {
            if let Ok(value) = ctx.read_json(file) {
                sources.push((file.to_owned(), value));
            }
        }
    }
    for field in ["hooks", "mcpServers"] {
        if let Some(value @ Value::Object(_)) = manifest.get(field) {
            sources.push((super::codex::MANIFEST.to_owned(), value.clone()));
        }
    }
    for (file, value) in &sources {
        if let Some((command, why)) = hook_problem(value).or_else(|| server_problem(value)) {
            return Err(ClassifyError::CodexCommandOutside {
                dir: ctx.dir.clone(),
                file: file.clone(),
                command: command.chars().take(200).collect(),
                why,
            });
        }
    }
    Ok(())
}

/// The first hook command (`"type": "command"`, its `command` a shell line) that runs a
/// relative path or leaves the plugin, with why.
fn hook_problem(value: &Value) -> Option<(String, &'static str)> {
    match value {
        Value::Object(map) => {
            // An MCP server (`args`, `cwd`) is [`server_problem`]'s.
            let server = map.contains_key("args") || map.contains_key("cwd");
            if let (Some(Value::String(line)), false) = (map.get("command"), server) {
                if let Some(why) = line_problem(line) {
                    return Some((line.clone(), why));
                }
            }
            map.values().find_map(hook_problem)
        }
        Value::Array(items) => items.iter().find_map(hook_problem),
        _ => None,
    }
}

/// The first MCP server (an object with `command` and `args`, or `command` alone) that runs
/// a relative path with no `cwd`, or names a path outside the plugin, with why.
fn server_problem(value: &Value) -> Option<(String, &'static str)> {
    let Value::Object(map) = value else {
        return None;
    };
    let servers = match map.get("mcpServers") {
        Some(Value::Object(servers)) => servers.values().collect::<Vec<_>>(),
        _ => map.values().collect(),
    };
    servers.into_iter().find_map(|server| {
        let Value::Object(server) = server else {
            return None;
        };
        let Some(Value::String(program)) = server.get("command") else {
            return None;
        };
        let args: Vec<&str> = match server.get("args") {
            Some(Value::Array(args)) => args.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let words: Vec<&str> = std::iter::once(program.as_str())
            .chain(args.iter().copied())
            .collect();
        let shown = words.join(" ");
        if words.iter().any(|w| leaves_root(w)) {
            return Some((shown, LEAVES));
        }
        let in_cwd = server.get("cwd").is_some();
        (!in_cwd && runs_relative(&words)).then_some((shown, RELATIVE))
    })
}

const LEAVES: &str = "names a path after $PLUGIN_ROOT (or $CLAUDE_PLUGIN_ROOT) with `..`";
const RELATIVE: &str = "runs a relative path, which Codex resolves in the session's directory \
                        (the workspace, the agent's to write)";

/// Why the shell line `line` would run something outside the plugin, if it would.
fn line_problem(line: &str) -> Option<&'static str> {
    for command in line.split(['|', ';', '&', '\n']) {
        let words: Vec<&str> = command
            .split_whitespace()
            .map(|w| w.trim_matches(['"', '\'']))
            .filter(|w| !w.is_empty())
            .collect();
        if words.iter().any(|w| leaves_root(w)) {
            return Some(LEAVES);
        }
        // Variable assignments before the program (`X=1 ./run`) are no program.
        let from = words
            .iter()
            .position(|w| !w.contains('=') || w.starts_with('/'));
        if runs_relative(&words[from.unwrap_or(words.len())..]) {
            return Some(RELATIVE);
        }
    }
    None
}

/// Whether `words` (a program and its arguments) run a relative path: the program itself
/// (with a `/`, not absolute nor from a variable), or an interpreter's script (any path not
/// absolute nor from a variable).
fn runs_relative(words: &[&str]) -> bool {
    let Some((program, args)) = words.split_first() else {
        return false;
    };
    let anchored = |w: &str| w.starts_with('/') || w.starts_with('$') || w.starts_with('~');
    if program.contains('/') && !anchored(program) {
        return true;
    }
    let name = program.rsplit('/').next().unwrap_or(program);
    if !INTERPRETERS.contains(&name) {
        return false;
    }
    // `sh -c '…'` (`bash -lc`), `node -e '…'` and `python3 -m mod` run inline text or a
    // module, no file of the session's directory.
    let cluster = |a: &str, letter: char| !a.starts_with("--") && a[1..].contains(letter);
    let inline = |a: &str| match name {
        "sh" | "bash" | "dash" | "zsh" => cluster(a, 'c'),
        "python" | "python3" => matches!(a, "-c" | "-m"),
        "perl" | "ruby" => cluster(a, 'e'),
        _ => matches!(a, "-e" | "--eval" | "-p" | "--print"),
    };
    if args
        .iter()
        .take_while(|a| a.starts_with('-'))
        .any(|a| inline(a))
    {
        return false;
    }
    args.iter()
        .find(|a| !a.starts_with('-'))
        .is_some_and(|script| !anchored(script))
}

/// Whether `word` names a path after `$PLUGIN_ROOT`/`$CLAUDE_PLUGIN_ROOT` (braced or not)
/// with a `..` component.
fn leaves_root(word: &str) -> bool {
    [
        "${PLUGIN_ROOT}",
        "$PLUGIN_ROOT",
        "${CLAUDE_PLUGIN_ROOT}",
        "$CLAUDE_PLUGIN_ROOT",
    ]
    .iter()
    .any(|marker| {
        word.match_indices(marker).any(|(at, _)| {
            let rest = &word[at + marker.len()..];
            // `$PLUGIN_ROOTX` is another variable.
            let other = rest.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
            !other && rest.split('/').any(|c| c == "..")
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_mcp_server_run_in_the_plugin_may_name_its_files_relatively() {
        let in_plugin =
            serde_json::json!({"mcpServers": {"s": {"command": "./bin/server", "cwd": "."}}});
        assert_eq!(hook_problem(&in_plugin), None);
        assert_eq!(server_problem(&in_plugin), None);
        let in_workspace =
            serde_json::json!({"mcpServers": {"s": {"command": "python3", "args": ["server.py"]}}});
        assert!(server_problem(&in_workspace).is_some());
    }

    #[test]
    fn relative_programs_and_scripts_and_dot_dot_after_the_root_are_seen() {
        for line in [
            "./hooks/check.sh",
            "hooks/check.sh --strict",
            "bash check.sh",
            "bash -e ./check.sh",
            "X=1 ./run",
            "jq . | node lib/x.js",
            "bash ${PLUGIN_ROOT}/../../workspace/h.sh",
            "node \"$CLAUDE_PLUGIN_ROOT/../x.js\"",
        ] {
            assert!(line_problem(line).is_some(), "{line}");
        }
        for line in [
            "sh \"$PLUGIN_ROOT/hooks/check.sh\"",
            "grep -q FORBIDDEN",
            "if grep -q X; then echo no >&2; exit 2; fi",
            "/usr/bin/python3 /opt/check.py",
            "sh -c 'exit 0'",
            "bash -lc 'grep -q x'",
            "python3 -m json.tool",
            "jq -r .tool_input.command | grep -q 'rm -rf'",
        ] {
            assert_eq!(line_problem(line), None, "{line}");
        }
    }
}
