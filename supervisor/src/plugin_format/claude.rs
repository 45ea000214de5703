//! Claude plugin detection: `plugin.json` at the root (fullsend's historical marker) or
//! `.claude-plugin/plugin.json` (the manifest Claude Code reads), and the component paths its
//! manifest names.

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
    check_component_paths(ctx, manifest, &obj)?;
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

/// Manifest fields whose values are paths into the plugin: a string or a list of strings
/// (`hooks`, `mcpServers` and `lspServers` may instead be inline objects, not checked here).
const COMPONENT_FIELDS: [&str; 8] = [
    "skills",
    "commands",
    "agents",
    "workflows",
    "hooks",
    "mcpServers",
    "outputStyles",
    "lspServers",
];

/// Every component path of the manifest must be what Claude accepts, `./` and a path inside
/// the plugin (`skills` also takes `.`), with no `..`, naming something that exists and is not
/// a symlink; a `hooks` file must end with `.json`. Otherwise Claude refuses the manifest or
/// loads the plugin without the component, reporting it only in its init event's
/// `plugin_errors` (observed: `path-not-found`), which the judge would then fail every iteration
/// on: better refused at validation.
fn check_component_paths(
    ctx: &Ctx,
    file: &str,
    obj: &serde_json::Map<String, serde_json::Value>,
) -> Result<(), ClassifyError> {
    let experimental = obj.get("experimental").and_then(|e| e.as_object());
    let fields = COMPONENT_FIELDS
        .iter()
        .filter_map(|f| obj.get(*f).map(|v| ((*f).to_owned(), v)))
        .chain(["themes", "monitors"].iter().filter_map(|f| {
            experimental
                .and_then(|e| e.get(*f))
                .map(|v| (format!("experimental.{f}"), v))
        }));
    for (field, value) in fields {
        let paths: Vec<&str> = match value {
            serde_json::Value::String(p) => vec![p.as_str()],
            serde_json::Value::Array(items) => items.iter().filter_map(|i| i.as_str()).collect(),
            _ => Vec::new(),
        };
        for path in paths {
            let refuse = |problem| ClassifyError::ClaudeComponentPath {
                dir: ctx.dir.clone(),
                file: file.to_owned(),
                field: field.clone(),
                path: path.to_owned(),
                problem,
            };
            if path == "." && field == "skills" {
                continue;
            }
            let Some(rel) = path.strip_prefix("./") else {
                return Err(refuse("must start with `./`"));
            };
            let rel = rel.trim_end_matches('/');
            if rel.split('/').any(|c| c == "..") {
                return Err(refuse("contains `..`: it would reach outside the plugin"));
            }
            if rel.is_empty() || rel.split('/').any(|c| c.is_empty() || c == ".") {
                return Err(refuse("does not name a file or folder of the plugin"));
            }
            if field == "hooks" && !rel.ends_with(".json") {
                return Err(refuse("must end with `.json`"));
            }
            // Refuses a symlink on the way, like every other path a loader reads.
            let mut prefix = String::new();
            for component in rel.split('/') {
                prefix = super::join(&prefix, component);
                if ctx.kind(&prefix)?.is_none() {
                    return Err(refuse(
                        "names nothing in the plugin: Claude would load it without this component (`path-not-found`)",
                    ));
                }
            }
        }
    }
    Ok(())
}
