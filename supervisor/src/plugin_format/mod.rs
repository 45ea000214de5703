//! Plugin format: which runtime loads a plugin directory, and what it loads.
//!
//! A harness lists plugin directories once (`plugins:`); the directory itself decides the
//! runtime: a harness never says "this is a pi extension", so a file added to a plugin cannot
//! move it to the other runtime unnoticed. The rules, in precedence order:
//!
//! 1. **Claude plugin**: `plugin.json` at the root or `.claude-plugin/plugin.json`. Checked
//!    first, so a Claude plugin that ships a `package.json` (an MCP server's `main`, even a `pi`
//!    key) stays a Claude plugin. The manifest must be a JSON object with a `name`.
//! 2. **Codex plugin**: `.codex-plugin/plugin.json` (a JSON object whose `name` Codex accepts
//!    as a plugin name), and no Claude manifest.
//! 3. **pi extension**, by pi's own `-e <dir>` rule (`collectPackageResources`, then jiti's
//!    directory-as-module probing), resolved to the concrete entry files:
//!    [`PiRule::Manifest`], [`PiRule::ConventionalDirs`], [`PiRule::Index`],
//!    [`PiRule::PackageMain`]. Everything pi would load silently-as-nothing, or load differently
//!    in 0.73 and 1.6, is refused (see [`ClassifyError`]).
//! 4. **OpenCode plugin**, by OpenCode's plugin-module rule ([`opencode`]): files matching
//!    `{plugin,plugins}/*.{ts,js}`, which OpenCode imports from a config dir.
//! 5. **None of them**: [`ClassifyError::NotAPlugin`].
//!
//! pitcrew hands pi the resolved entry files (`-e /abs/dir/index.ts`), never the directory.
//! That sidesteps the sibling-file trap (`-e /p/X` loads `/p/X.js` when it exists, not
//! `/p/X/index.ts`), the `index.js`-over-`index.ts` probe order, and keeps a package's
//! `skills/`, `prompts/` and `themes/` out of the run (pi loads them even with `--no-skills`).
//!
//! Not modelled: pi honours `.gitignore`, `.ignore` and `.fdignore` when it scans an
//! `extensions/` folder; pitcrew does not, so its entry list may be a superset of what
//! `-e <dir>` would load. Since pitcrew passes the entry files themselves, what it lists is
//! what runs.
//!
//! A plugin may also be a single pi extension file (`ext/hello.ts`): pi loads it with `-e FILE`
//! and Claude Code names and skips it; [`check_single_file`] refuses one whose imports reach
//! past the file.
//!
//! Nothing here imports or executes plugin code; [`registered_flags`], [`registered_tools`]
//! and [`check_single_file`] are textual scans.

mod claude;
mod codex;
mod codex_commands;
mod error;
mod flags;
pub mod opencode;
mod pi;
mod single_file;

pub use codex::is_segment as is_codex_plugin_name;
pub use error::{ClassifyError, EntryProblem, ManifestProblem};
pub use flags::{registered_flags, registered_tools, registered_tools_in_file};
pub use single_file::{
    check_single_file, import_specifiers, specifier_problem, SingleFile, PI_PROVIDED,
    SINGLE_FILE_EXTS,
};

use serde::{Deserialize, Serialize};
use std::fmt;
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// The largest JSON manifest (`plugin.json`, `package.json`) classification reads.
const MAX_JSON_BYTES: u64 = 4 << 20;

/// Which runtime loads a plugin directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum PluginClass {
    /// A Claude Code plugin (`plugin.json` or `.claude-plugin/plugin.json`).
    Claude(ClaudePlugin),
    /// A pi extension, with the entry files pi loads.
    Pi(PiExtension),
    /// A Codex CLI plugin bundle (`.codex-plugin/plugin.json`).
    Codex(CodexPlugin),
    /// An OpenCode plugin: a config-dir-shaped tree whose `{plugin,plugins}/*.{ts,js}` OpenCode
    /// imports.
    Opencode(OpencodePlugin),
}

/// An OpenCode plugin and the modules OpenCode imports from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpencodePlugin {
    /// The plugin modules, relative to the plugin directory, sorted.
    pub entries: Vec<String>,
    /// What else of a config dir the tree holds, which OpenCode is not given
    /// ([`opencode::SKIPPED_PARTS`]).
    #[serde(default)]
    pub skipped: Vec<String>,
}

impl PluginClass {
    /// `"claude"`, `"pi"`, `"codex"` or `"opencode"`, the same tag the serialized form carries.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Claude(_) => "claude",
            Self::Pi(_) => "pi",
            Self::Codex(_) => "codex",
            Self::Opencode(_) => "opencode",
        }
    }
}

/// A Claude Code plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaudePlugin {
    /// The manifest read: `"plugin.json"` or `".claude-plugin/plugin.json"` (the latter when
    /// both exist, since that is the one Claude Code reads).
    pub manifest: String,
    /// The manifest's `name`.
    pub name: String,
    /// Ships hooks (`hooks/hooks.json` or a `hooks` key in `.claude-plugin/plugin.json`): runs
    /// commands. Informational.
    pub has_hooks: bool,
    /// Ships MCP servers (`.mcp.json` or an `mcpServers` key in `.claude-plugin/plugin.json`):
    /// runs servers. Informational.
    pub has_mcp: bool,
    /// Ships `bin/` (added to the Bash tool's PATH). Informational.
    pub has_bin: bool,
}

/// A Codex CLI plugin bundle: what Codex 0.169.1 loads from it once it is in its plugin cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodexPlugin {
    /// The manifest's `name` (Codex prefixes the plugin's skills with it).
    pub name: String,
    /// Ships skills (`skills/` or a `skills` key). Informational.
    pub has_skills: bool,
    /// Ships MCP servers (`.mcp.json` or an `mcpServers` key): runs servers. Informational.
    pub has_mcp: bool,
    /// Ships hooks (`hooks/hooks.json`, `hooks.json` or a `hooks` key): runs commands.
    /// Informational.
    pub has_hooks: bool,
}

/// A pi extension and the entry files pi loads from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PiExtension {
    /// Which part of pi's `-e <dir>` rule selected the entries.
    pub rule: PiRule,
    /// Entry files, relative to the plugin directory, `/`-separated, sorted, deduplicated.
    pub entries: Vec<String>,
    /// Flag names the sources register (`registerFlag("name", …)`), sorted, deduplicated.
    pub registered_flags: Vec<String>,
    /// Tool names the sources register (`registerTool({ name: "tool", …`), sorted,
    /// deduplicated.
    #[serde(default)]
    pub registered_tools: Vec<String>,
}

impl PiExtension {
    /// The entry files joined onto `root` (where the directory lives at run time), one per
    /// `-e` argument.
    #[must_use]
    pub fn entry_paths(&self, root: &Path) -> Vec<PathBuf> {
        self.entries.iter().map(|e| root.join(e)).collect()
    }
}

/// The part of pi's `-e <dir>` rule that selected a pi extension's entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PiRule {
    /// `package.json` has a `pi` object whose `extensions` lists the entries.
    Manifest,
    /// `extensions/` (or `skills/`, `prompts/`, `themes/`) exists; entries come from
    /// `extensions/` by pi's folder rule.
    ConventionalDirs,
    /// The directory is loaded as a module through its single `index.*`.
    Index,
    /// The directory is loaded as a module through `package.json` `main`.
    PackageMain,
}

impl fmt::Display for PiRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Manifest => "package.json pi manifest",
            Self::ConventionalDirs => "conventional extensions/ folder",
            Self::Index => "index file, directory loaded as a module",
            Self::PackageMain => "package.json main, directory loaded as a module",
        })
    }
}

/// Decides which runtime loads `dir` and, for pi, which entry files.
///
/// Reads the directory and its JSON manifests only; never imports or runs plugin code and never
/// panics. The root itself may be a symlink to a directory; anything the loaders would read
/// inside it must not be.
///
/// # Errors
/// A missing or unreadable directory, invalid JSON, and every case in which a runtime would load
/// nothing, load it differently across pi versions, or load files outside the directory.
pub fn classify(dir: &Path) -> Result<PluginClass, ClassifyError> {
    let ctx = Ctx::new(dir)?;
    if let Some(plugin) = claude::detect(&ctx)? {
        return Ok(PluginClass::Claude(plugin));
    }
    if let Some(plugin) = codex::detect(&ctx)? {
        return Ok(PluginClass::Codex(plugin));
    }
    match pi::detect(&ctx)? {
        Some((rule, entries)) => Ok(PluginClass::Pi(PiExtension {
            rule,
            entries,
            registered_flags: registered_flags(dir)?,
            registered_tools: registered_tools(dir)?,
        })),
        None => match opencode::detect(&ctx)? {
            Some(entries) => Ok(PluginClass::Opencode(OpencodePlugin {
                entries,
                skipped: opencode::SKIPPED_PARTS
                    .iter()
                    .filter(|p| ctx.exists(p))
                    .map(|p| (*p).to_string())
                    .collect(),
            })),
            None => Err(ClassifyError::NotAPlugin {
                dir: dir.to_path_buf(),
            }),
        },
    }
}

/// What a path inside the plugin is, without following symlinks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
    Other,
}

/// The plugin directory being classified: `dir` as given (for messages), `root` canonical.
struct Ctx {
    dir: PathBuf,
    root: PathBuf,
}

impl Ctx {
    fn new(dir: &Path) -> Result<Self, ClassifyError> {
        let io_err = |error| ClassifyError::Io {
            dir: dir.to_path_buf(),
            what: "the plugin directory".to_owned(),
            error,
        };
        let meta = fs::metadata(dir).map_err(io_err)?;
        if !meta.is_dir() {
            return Err(ClassifyError::NotADirectory {
                dir: dir.to_path_buf(),
            });
        }
        let root = fs::canonicalize(dir).map_err(io_err)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            root,
        })
    }

    fn abs(&self, rel: &str) -> PathBuf {
        if rel.is_empty() {
            self.root.clone()
        } else {
            self.root.join(rel)
        }
    }

    fn io(&self, rel: &str, error: io::Error) -> ClassifyError {
        ClassifyError::Io {
            dir: self.dir.clone(),
            what: if rel.is_empty() {
                "the plugin directory".to_owned()
            } else {
                format!("`{rel}`")
            },
            error,
        }
    }

    /// What `rel` is (`None` if absent); a symlink is an error.
    fn kind(&self, rel: &str) -> Result<Option<Kind>, ClassifyError> {
        match fs::symlink_metadata(self.abs(rel)) {
            Ok(meta) => {
                let ft = meta.file_type();
                if ft.is_symlink() {
                    Err(ClassifyError::Symlink {
                        dir: self.dir.clone(),
                        path: rel.to_owned(),
                    })
                } else if ft.is_file() {
                    Ok(Some(Kind::File))
                } else if ft.is_dir() {
                    Ok(Some(Kind::Dir))
                } else {
                    Ok(Some(Kind::Other))
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(self.io(rel, e)),
        }
    }

    /// Whether anything (a symlink included) exists at `rel`.
    fn exists(&self, rel: &str) -> bool {
        fs::symlink_metadata(self.abs(rel)).is_ok()
    }

    /// Reads and parses a JSON file (a regular file, not a symlink), capped at
    /// [`MAX_JSON_BYTES`]. Anything else is refused before it is opened: opening a fifo named
    /// `package.json` would block for ever.
    fn read_json(&self, rel: &str) -> Result<serde_json::Value, ClassifyError> {
        if self.kind(rel)? != Some(Kind::File) {
            return Err(self.io(
                rel,
                io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"),
            ));
        }
        let mut text = Vec::new();
        fs::File::open(self.abs(rel))
            .and_then(|f| f.take(MAX_JSON_BYTES).read_to_end(&mut text))
            .map_err(|e| self.io(rel, e))?;
        serde_json::from_slice(&text).map_err(|error| ClassifyError::BadJson {
            dir: self.dir.clone(),
            file: rel.to_owned(),
            error,
        })
    }

    /// The entries of directory `rel` that pi's folder scan looks at (no dot entries, no
    /// `node_modules`), sorted by name; symlinks refused.
    fn list(&self, rel: &str) -> Result<Vec<(String, Kind)>, ClassifyError> {
        let mut names = Vec::new();
        let rd = fs::read_dir(self.abs(rel)).map_err(|e| self.io(rel, e))?;
        for item in rd {
            let item = item.map_err(|e| self.io(rel, e))?;
            let Some(name) = item.file_name().to_str().map(str::to_owned) else {
                return Err(ClassifyError::NonUtf8Name {
                    dir: self.dir.clone(),
                    path: join(rel, &item.file_name().to_string_lossy()),
                });
            };
            if !name.starts_with('.') && name != "node_modules" {
                names.push(name);
            }
        }
        names.sort();
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            if let Some(kind) = self.kind(&join(rel, &name))? {
                out.push((name, kind));
            }
        }
        Ok(out)
    }
}

/// `a/b`, or `b` when `a` is empty.
fn join(a: &str, b: &str) -> String {
    if a.is_empty() {
        b.to_owned()
    } else {
        format!("{a}/{b}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hook, MCP or LSP command naming `${CLAUDE_PLUGIN_ROOT}/../…` would run what lies
    /// outside the verified plugin (the workspace); one staying inside is fine.
    #[test]
    fn a_claude_command_leaving_the_plugin_root_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let plugin = root.path().join("p");
        fs::create_dir_all(plugin.join(".claude-plugin")).unwrap();
        fs::create_dir_all(plugin.join("hooks")).unwrap();
        fs::write(
            plugin.join(".claude-plugin/plugin.json"),
            r#"{"name": "p"}"#,
        )
        .unwrap();
        let hook = |command: &str| {
            serde_json::json!({"hooks": {"PreToolUse": [{"hooks": [
                {"type": "command", "command": command}]}]}})
            .to_string()
        };
        for (file, text) in [
            ("hooks/hooks.json", hook("bash ${CLAUDE_PLUGIN_ROOT}/../../workspace/h.sh")),
            ("hooks/hooks.json", hook("node \"$CLAUDE_PLUGIN_ROOT/x/..\"")),
            (".mcp.json", r#"{"mcpServers": {"s": {"command": "node", "args": ["${CLAUDE_PLUGIN_ROOT}/../s.js"]}}}"#.to_owned()),
        ] {
            let _ = fs::remove_file(plugin.join("hooks/hooks.json"));
            let _ = fs::remove_file(plugin.join(".mcp.json"));
            fs::write(plugin.join(file), &text).unwrap();
            let err = classify(&plugin).unwrap_err().to_string();
            assert!(err.contains("reaches outside the plugin"), "{text}: {err}");
            assert!(err.contains(file), "{err}");
        }
        let _ = fs::remove_file(plugin.join(".mcp.json"));
        fs::write(
            plugin.join("hooks/hooks.json"),
            hook("bash ${CLAUDE_PLUGIN_ROOT}/hooks/h.sh ../relative-arg"),
        )
        .unwrap();
        classify(&plugin).unwrap();
    }

    /// Found with the `pi_manifest` fuzz target's fixture: a `package.json` (or `plugin.json`)
    /// that is a fifo made `classify` (and so `pitcrew classify`, `validate`, `discover`) block
    /// for ever in `open`. A manifest that is not a regular file is refused now.
    #[cfg(unix)]
    #[test]
    fn fuzz_regression_a_fifo_manifest_is_refused_not_opened() {
        let mkfifo = |path: &Path| {
            let status = std::process::Command::new("mkfifo")
                .arg(path)
                .status()
                .unwrap();
            assert!(status.success());
        };
        let root = tempfile::tempdir().unwrap();
        let pkg = root.path().join("pkg");
        fs::create_dir(&pkg).unwrap();
        mkfifo(&pkg.join("package.json"));
        fs::write(pkg.join("index.ts"), "export default 1;\n").unwrap();
        let err = classify(&pkg).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");

        let nested = root.path().join("nested");
        fs::create_dir_all(nested.join("sub")).unwrap();
        fs::write(
            nested.join("package.json"),
            r#"{"pi":{"extensions":["sub"]}}"#,
        )
        .unwrap();
        fs::write(nested.join("sub/index.ts"), "export default 1;\n").unwrap();
        mkfifo(&nested.join("sub/package.json"));
        let err = classify(&nested).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");

        let claude = root.path().join("claude");
        fs::create_dir(&claude).unwrap();
        mkfifo(&claude.join("plugin.json"));
        let err = classify(&claude).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }
}
