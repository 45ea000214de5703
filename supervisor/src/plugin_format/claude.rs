//! Claude plugin detection: `plugin.json` at the root (fullsend's historical marker) or
//! `.claude-plugin/plugin.json` (the manifest Claude Code reads).

use super::{ClassifyError, ClaudePlugin, Ctx};

const ROOT_MANIFEST: &str = "plugin.json";
const DOT_MANIFEST: &str = ".claude-plugin/plugin.json";

/// The Claude plugin in `ctx`, or `None` when neither manifest exists.
pub(super) fn detect(ctx: &Ctx) -> Result<Option<ClaudePlugin>, ClassifyError> {
    // Checking the folder first refuses a symlinked `.claude-plugin/` before reading through it.
    let dot_present = ctx.kind(".claude-plugin")?.is_some() && ctx.kind(DOT_MANIFEST)?.is_some();
    let root_present = ctx.kind(ROOT_MANIFEST)?.is_some();
    let root = if root_present {
        Some(read_manifest(ctx, ROOT_MANIFEST)?)
    } else {
        None
    };
    let dot = if dot_present {
        Some(read_manifest(ctx, DOT_MANIFEST)?)
    } else {
        None
    };
    let (manifest, (name, obj)) = match (root, dot) {
        (None, None) => return Ok(None),
        (Some(r), None) => (ROOT_MANIFEST, r),
        (None, Some(d)) => (DOT_MANIFEST, d),
        (Some((root_name, _)), Some(d)) => {
            if root_name != d.0 {
                return Err(ClassifyError::ClaudeManifestsDisagree {
                    dir: ctx.dir.clone(),
                    root_name,
                    dot_name: d.0,
                });
            }
            (DOT_MANIFEST, d)
        }
    };
    Ok(Some(ClaudePlugin {
        manifest: manifest.to_owned(),
        name,
        has_hooks: ctx.exists("hooks/hooks.json") || obj.contains_key("hooks"),
        has_mcp: ctx.exists(".mcp.json") || obj.contains_key("mcpServers"),
        has_bin: ctx.exists("bin"),
    }))
}

/// Parses one manifest: a JSON object with a non-empty string `name`.
fn read_manifest(
    ctx: &Ctx,
    file: &str,
) -> Result<(String, serde_json::Map<String, serde_json::Value>), ClassifyError> {
    let refuse = |problem| ClassifyError::ClaudeManifest {
        dir: ctx.dir.clone(),
        file: file.to_owned(),
        problem,
    };
    let serde_json::Value::Object(obj) = ctx.read_json(file)? else {
        return Err(refuse("is not a JSON object"));
    };
    let name = match obj.get("name") {
        None => return Err(refuse("has no `name` (Claude's validator requires one)")),
        Some(serde_json::Value::String(s)) if !s.trim().is_empty() => s.clone(),
        Some(_) => return Err(refuse("`name` is not a non-empty string")),
    };
    Ok((name, obj))
}
