//! Codex plugin detection: `.codex-plugin/plugin.json`, the manifest of a Codex CLI plugin
//! bundle (its `skills/`, `.mcp.json` MCP servers and hooks).
//!
//! Codex 0.169.1 also loads a bundle whose manifest is `.claude-plugin/plugin.json` once it
//! sits in its plugin cache; pitcrew classifies such a tree as Claude Code's (checked first), so
//! runtime codex names and skips it.

use super::{ClassifyError, CodexPlugin, Ctx, Kind};

/// The manifest Codex reads.
pub(super) const MANIFEST: &str = ".codex-plugin/plugin.json";

/// Manifest fields whose string values are paths into the plugin.
const PATH_FIELDS: [&str; 4] = ["skills", "mcpServers", "hooks", "apps"];

/// The Codex plugin in `ctx`, or `None` when `.codex-plugin/plugin.json` does not exist.
pub(super) fn detect(ctx: &Ctx) -> Result<Option<CodexPlugin>, ClassifyError> {
    // Checking the folder first refuses a symlinked `.codex-plugin/` before reading through it.
    if ctx.kind(".codex-plugin")?.is_none() || ctx.kind(MANIFEST)?.is_none() {
        return Ok(None);
    }
    let refuse = |problem: String| ClassifyError::CodexManifest {
        dir: ctx.dir.clone(),
        problem,
    };
    let serde_json::Value::Object(obj) = ctx.read_json(MANIFEST)? else {
        return Err(refuse("is not a JSON object".to_owned()));
    };
    let name = match obj.get("name") {
        Some(serde_json::Value::String(s)) if is_segment(s) => s.clone(),
        Some(serde_json::Value::String(s)) => {
            return Err(refuse(format!(
                "`name` {s:?} is not a Codex plugin name (ASCII letters, digits, `-` and `_`)"
            )))
        }
        _ => return Err(refuse("has no string `name`".to_owned())),
    };
    for field in PATH_FIELDS {
        let paths: Vec<&str> = match obj.get(field) {
            Some(serde_json::Value::String(s)) => vec![s.as_str()],
            Some(serde_json::Value::Array(items)) => {
                items.iter().filter_map(serde_json::Value::as_str).collect()
            }
            _ => Vec::new(),
        };
        for path in paths {
            let rel = path.strip_prefix("./").unwrap_or(path);
            if path.starts_with('/') || rel.split('/').any(|c| c == "..") {
                return Err(refuse(format!(
                    "`{field}`: {path:?} leaves the plugin directory"
                )));
            }
            if !rel.is_empty() && rel != "." {
                ctx.kind(rel.trim_end_matches('/'))?;
            }
        }
    }
    super::codex_commands::check(ctx, &obj)?;
    Ok(Some(CodexPlugin {
        name,
        has_skills: ctx.kind("skills")? == Some(Kind::Dir) || obj.contains_key("skills"),
        has_mcp: ctx.exists(".mcp.json") || obj.contains_key("mcpServers"),
        has_hooks: ctx.exists("hooks/hooks.json")
            || ctx.exists("hooks.json")
            || obj.contains_key("hooks"),
    }))
}

/// Whether `name` is a plugin name Codex accepts as a path segment of its plugin cache and a
/// `<name>@<marketplace>` key: non-empty ASCII letters, digits, `-` and `_`.
#[must_use]
pub fn is_segment(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

#[cfg(test)]
mod tests {
    use super::super::{classify, PluginClass};
    use std::fs;

    fn plugin(manifest: &str) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        fs::create_dir_all(d.path().join(".codex-plugin")).unwrap();
        fs::create_dir_all(d.path().join("skills/s")).unwrap();
        fs::write(d.path().join(".codex-plugin/plugin.json"), manifest).unwrap();
        d
    }

    #[test]
    fn a_codex_manifest_makes_a_codex_plugin() {
        let d = plugin(r#"{"name": "probe", "version": "1.0.0"}"#);
        fs::write(d.path().join(".mcp.json"), "{}").unwrap();
        let PluginClass::Codex(c) = classify(d.path()).unwrap() else {
            panic!("not a Codex plugin");
        };
        assert_eq!(c.name, "probe");
        assert!(c.has_skills && c.has_mcp && !c.has_hooks);
    }

    #[test]
    fn a_claude_manifest_beside_it_keeps_the_tree_claudes() {
        let d = plugin(r#"{"name": "probe"}"#);
        fs::create_dir_all(d.path().join(".claude-plugin")).unwrap();
        fs::write(
            d.path().join(".claude-plugin/plugin.json"),
            r#"{"name": "probe"}"#,
        )
        .unwrap();
        assert!(matches!(
            classify(d.path()).unwrap(),
            PluginClass::Claude(_)
        ));
    }

    /// Codex 0.169.1 runs a plugin's hooks in the session's directory (the workspace, the
    /// agent's to write) and an MCP server without `cwd` there too, with `PLUGIN_ROOT` and
    /// `CLAUDE_PLUGIN_ROOT` naming the plugin's copy: a command whose program is a relative path,
    /// or whose path after either variable has a `..` component, runs what the agent wrote, never
    /// verified (`codex::attack_harness__a_codex_plugin_hook_naming_its_script_relatively_never_runs_what_the_agent_wrote`).
    /// One naming the plugin's files through `$PLUGIN_ROOT`, or an MCP server run in `"cwd": "."`,
    /// is fine.
    #[test]
    fn a_codex_command_running_the_workspace_is_refused() {
        let hook = |command: &str| {
            serde_json::json!({"hooks": {"PreToolUse": [{"hooks": [
                {"type": "command", "command": command}]}]}})
            .to_string()
        };
        for (file, text) in [
            ("hooks/hooks.json", hook("./hooks/check.sh")),
            ("hooks/hooks.json", hook("hooks/check.sh --strict")),
            (
                "hooks/hooks.json",
                hook("bash ${PLUGIN_ROOT}/../../../../workspace/h.sh"),
            ),
            (
                "hooks/hooks.json",
                hook("node \"$CLAUDE_PLUGIN_ROOT/../x.js\""),
            ),
            (
                ".mcp.json",
                r#"{"mcpServers": {"s": {"command": "./bin/server"}}}"#.to_owned(),
            ),
        ] {
            let d = plugin(r#"{"name": "p"}"#);
            fs::create_dir_all(d.path().join("hooks")).unwrap();
            fs::write(d.path().join(file), &text).unwrap();
            let err = classify(d.path()).map(|_| ()).unwrap_err().to_string();
            assert!(err.contains(file), "{text}: {err}");
        }
        let d = plugin(r#"{"name": "p"}"#);
        fs::create_dir_all(d.path().join("hooks")).unwrap();
        fs::write(
            d.path().join("hooks/hooks.json"),
            hook("sh \"$PLUGIN_ROOT/hooks/check.sh\""),
        )
        .unwrap();
        fs::write(
            d.path().join(".mcp.json"),
            r#"{"mcpServers": {"s": {"command": "python3", "args": ["server.py"], "cwd": "."}}}"#,
        )
        .unwrap();
        classify(d.path()).unwrap();
    }

    #[test]
    fn a_bad_codex_manifest_is_named() {
        for (manifest, says) in [
            ("[]", "not a JSON object"),
            (r#"{"version": "1"}"#, "no string `name`"),
            (r#"{"name": "a b"}"#, "not a Codex plugin name"),
            (
                r#"{"name": "p", "skills": "../x"}"#,
                "leaves the plugin directory",
            ),
            (
                r#"{"name": "p", "mcpServers": "/etc/x.json"}"#,
                "leaves the plugin directory",
            ),
        ] {
            let d = plugin(manifest);
            let e = classify(d.path()).unwrap_err().to_string();
            assert!(e.contains(says), "{manifest}: {e}");
        }
    }
}
