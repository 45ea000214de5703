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
    let read = manifest == DOT_MANIFEST;
    check_component_paths(ctx, manifest, &obj)?;
    check_commands_stay_inside(ctx, manifest, &obj)?;
    Ok(Some(ClaudePlugin {
        manifest: manifest.to_owned(),
        name,
        // Keys of a root `plugin.json` do not count: Claude only reads `.claude-plugin/`.
        has_hooks: ctx.exists("hooks/hooks.json") || (read && obj.contains_key("hooks")),
        has_mcp: ctx.exists(".mcp.json") || (read && obj.contains_key("mcpServers")),
        has_bin: ctx.exists("bin"),
    }))
}

/// Files whose strings Claude Code runs as commands with `${CLAUDE_PLUGIN_ROOT}` expanded.
const COMMAND_FILES: [&str; 3] = ["hooks/hooks.json", ".mcp.json", ".lsp.json"];

/// Refuses a hook, MCP or LSP server command (in [`COMMAND_FILES`] or inline in the manifest
/// Claude reads) naming a path below `${CLAUDE_PLUGIN_ROOT}` with a `..` component: the verified
/// text would run what lies outside the plugin, the agent's workspace included.
fn check_commands_stay_inside(
    ctx: &Ctx,
    manifest: &str,
    obj: &serde_json::Map<String, serde_json::Value>,
) -> Result<(), ClassifyError> {
    let mut sources: Vec<(String, serde_json::Value)> = Vec::new();
    for file in COMMAND_FILES {
        // A file that is not JSON runs nothing (Claude Code reports `hook-load-failed`, which
        // the judge fails on): left to that.
        if ctx.kind(file)? == Some(super::Kind::File) {
            if let Ok(value) = ctx.read_json(file) {
                sources.push((file.to_owned(), value));
            }
        }
    }
    if manifest == DOT_MANIFEST {
        sources.push((manifest.to_owned(), serde_json::Value::Object(obj.clone())));
    }
    for (file, value) in sources {
        if let Some(command) = outside_command(&value) {
            return Err(ClassifyError::ClaudeCommandOutside {
                dir: ctx.dir.clone(),
                file,
                command: command.chars().take(200).collect(),
            });
        }
    }
    Ok(())
}

/// The first string in `value` where a path after `${CLAUDE_PLUGIN_ROOT}` (or
/// `$CLAUDE_PLUGIN_ROOT`) has a `..` component.
fn outside_command(value: &serde_json::Value) -> Option<&str> {
    use serde_json::Value;
    match value {
        Value::String(s) => {
            let leaves = |marker: &str| {
                s.match_indices(marker).any(|(at, _)| {
                    let rest = &s[at + marker.len()..];
                    let end = rest
                        .find(|c: char| c.is_whitespace() || "\"';:|&<>()`".contains(c))
                        .unwrap_or(rest.len());
                    rest[..end].split('/').any(|c| c == "..")
                })
            };
            (leaves("${CLAUDE_PLUGIN_ROOT}") || leaves("$CLAUDE_PLUGIN_ROOT")).then_some(s.as_str())
        }
        Value::Array(items) => items.iter().find_map(outside_command),
        Value::Object(map) => map.values().find_map(outside_command),
        _ => None,
    }
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
/// (`hooks`, `mcpServers` and `lspServers` may instead be inline objects; `commands` may be an
/// object whose entries name their file in `source`). `themes` and `monitors` are also read
/// under `experimental` (top level is deprecated but still loads).
const COMPONENT_FIELDS: [&str; 10] = [
    "skills",
    "commands",
    "agents",
    "workflows",
    "hooks",
    "mcpServers",
    "outputStyles",
    "lspServers",
    "themes",
    "monitors",
];

/// Every component path of `.claude-plugin/plugin.json` (the manifest Claude reads; a root
/// `plugin.json` only marks the directory) must be what Claude accepts: `./` and a path inside
/// the plugin (`skills` may also be `.` or `./`, the plugin itself), no `..`, no URL, naming
/// something that exists and is not reached through a symlink; a `hooks` file ends with
/// `.json` and an `agents` file with `.md`. Otherwise Claude refuses the manifest, or loads the
/// plugin without the component and reports it only in its init event's `plugin_errors`
/// (observed: `path-not-found`), on which the judge would fail every iteration: better refused
/// at validation.
fn check_component_paths(
    ctx: &Ctx,
    file: &str,
    obj: &serde_json::Map<String, serde_json::Value>,
) -> Result<(), ClassifyError> {
    use serde_json::Value;
    if file != DOT_MANIFEST {
        return Ok(());
    }
    let experimental = obj.get("experimental").and_then(Value::as_object);
    let fields = COMPONENT_FIELDS
        .iter()
        .filter_map(|f| obj.get(*f).map(|v| ((*f).to_owned(), v)))
        .chain(["themes", "monitors"].iter().filter_map(|f| {
            experimental
                .and_then(|e| e.get(*f))
                .map(|v| (format!("experimental.{f}"), v))
        }));
    for (field, value) in fields {
        let paths: Vec<(String, &str)> = match value {
            Value::String(p) => vec![(field.clone(), p.as_str())],
            Value::Array(items) => items
                .iter()
                .filter_map(Value::as_str)
                .map(|p| (field.clone(), p))
                .collect(),
            Value::Object(entries) if field == "commands" => entries
                .iter()
                .filter_map(|(name, entry)| {
                    let source = entry.get("source").and_then(Value::as_str)?;
                    Some((format!("commands.{name}.source"), source))
                })
                .collect(),
            _ => Vec::new(),
        };
        for (field, path) in paths {
            if let Some(problem) = component_path_problem(ctx, &field, path)? {
                return Err(ClassifyError::ClaudeComponentPath {
                    dir: ctx.dir.clone(),
                    file: file.to_owned(),
                    field,
                    path: path.to_owned(),
                    problem,
                });
            }
        }
    }
    Ok(())
}

/// What is wrong with one component path of manifest field `field`, if anything.
fn component_path_problem(
    ctx: &Ctx,
    field: &str,
    path: &str,
) -> Result<Option<&'static str>, ClassifyError> {
    if path.contains("://") {
        return Ok(Some(
            "is a URL: Claude would fetch code that pitcrew never verified",
        ));
    }
    if field == "skills" && (path == "." || path == "./") {
        return Ok(None);
    }
    let Some(rel) = path.strip_prefix("./") else {
        return Ok(Some("must start with `./`"));
    };
    // Claude accepts `./a//b` and `./a/./b`.
    let components: Vec<&str> = rel
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    if components.contains(&"..") {
        return Ok(Some("contains `..`: it would reach outside the plugin"));
    }
    if components.is_empty() {
        return Ok(Some("does not name a file or folder of the plugin"));
    }
    let last = components[components.len() - 1];
    if field == "hooks" && !last.ends_with(".json") {
        return Ok(Some("must end with `.json`"));
    }
    if field == "agents" && !last.ends_with(".md") {
        return Ok(Some("must end with `.md`"));
    }
    // One component at a time, so a symlink on the way is refused like every other path a
    // loader reads.
    let mut prefix = String::new();
    for component in components {
        prefix = super::join(&prefix, component);
        if ctx.kind(&prefix)?.is_none() {
            return Ok(Some(
                "names nothing in the plugin: Claude would load it without this component (`path-not-found`)",
            ));
        }
    }
    Ok(None)
}
