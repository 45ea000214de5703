//! Why a directory is refused: every message names the plugin directory, the file or entry, and
//! the loader rule that makes it a problem.

use std::fmt;
use std::path::PathBuf;

/// Why `classify` or `registered_flags` refused a directory.
///
/// Each variant's message starts with the plugin directory as given, then names the file or
/// entry and the runtime rule behind the refusal.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClassifyError {
    /// The directory, or a file in it, could not be read.
    #[error("{}: cannot read {what}: {error}", dir.display())]
    Io {
        /// The plugin directory as given.
        dir: PathBuf,
        /// What was being read, e.g. "the plugin directory" or "`package.json`".
        what: String,
        /// The underlying error.
        error: std::io::Error,
    },
    /// The path is not a directory.
    #[error(
        "{}: not a directory (a plugin directory; a single pi extension file is checked by its imports instead)",
        dir.display()
    )]
    NotADirectory {
        /// The plugin directory as given.
        dir: PathBuf,
    },
    /// A file or folder the loaders would read is a symlink.
    #[error(
        "{}: `{path}` is a symlink (plugins must contain no symlinks: the loaders follow them out \
         of the directory and the tree-hash preflight refuses them)",
        dir.display()
    )]
    Symlink {
        /// The plugin directory as given.
        dir: PathBuf,
        /// The symlink, relative to the plugin directory.
        path: String,
    },
    /// A name the loaders would use is not valid UTF-8.
    #[error("{}: `{path}` is not a UTF-8 name", dir.display())]
    NonUtf8Name {
        /// The plugin directory as given.
        dir: PathBuf,
        /// The name, lossily decoded, relative to the plugin directory.
        path: String,
    },
    /// A JSON file is not valid JSON.
    #[error("{}: `{file}` is not valid JSON: {error}", dir.display())]
    BadJson {
        /// The plugin directory as given.
        dir: PathBuf,
        /// The file, relative to the plugin directory.
        file: String,
        /// The parse error.
        error: serde_json::Error,
    },
    /// A Claude `plugin.json` manifest is unusable.
    #[error("{}: Claude manifest `{file}` {problem}", dir.display())]
    ClaudeManifest {
        /// The plugin directory as given.
        dir: PathBuf,
        /// `plugin.json` or `.claude-plugin/plugin.json`.
        file: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A Codex `.codex-plugin/plugin.json` manifest is unusable: Codex 0.169.1 would load the
    /// plugin without it, or with a component from outside the directory.
    #[error("{}: Codex manifest `.codex-plugin/plugin.json` {problem}", dir.display())]
    CodexManifest {
        /// The plugin directory as given.
        dir: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// A command of a Codex plugin (a hook, an MCP server) that would run a file of the
    /// session's directory (a relative path) or one outside the plugin (`..` after
    /// `$PLUGIN_ROOT`).
    #[error(
        "{}: `{file}`: the command {command:?} {why}: Codex would run what lies there, never verified; name the plugin's own files through $PLUGIN_ROOT (an MCP server may set \"cwd\": \".\")",
        dir.display()
    )]
    CodexCommandOutside {
        /// The plugin directory as given.
        dir: PathBuf,
        /// The file holding the command, relative to the plugin.
        file: String,
        /// The command as written (at most 200 characters).
        command: String,
        /// What it would run.
        why: &'static str,
    },
    /// A command of a Claude plugin (a hook, an MCP or LSP server) names a path below
    /// `${CLAUDE_PLUGIN_ROOT}` that leaves the plugin through `..`.
    #[error(
        "{}: `{file}`: the command {command:?} reaches outside the plugin through `..` after ${{CLAUDE_PLUGIN_ROOT}}: Claude Code would run what lies there (the workspace is the agent's to write), never verified; ship it inside the plugin",
        dir.display()
    )]
    ClaudeCommandOutside {
        /// The plugin directory as given.
        dir: PathBuf,
        /// The file holding the command, relative to the plugin.
        file: String,
        /// The command as written (at most 200 characters).
        command: String,
    },
    /// would refuse or report as a load error (`path-not-found`), loading the plugin without it.
    #[error(
        "{}: Claude manifest `{file}` `{field}`: {path:?} {problem} (Claude's component path rule)",
        dir.display()
    )]
    ClaudeComponentPath {
        /// The plugin directory as given.
        dir: PathBuf,
        /// `plugin.json` or `.claude-plugin/plugin.json`.
        file: String,
        /// The manifest field.
        field: String,
        /// The path as written.
        path: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// Both Claude manifests exist and name different plugins.
    #[error(
        "{}: `plugin.json` names {root_name:?} but `.claude-plugin/plugin.json` names \
         {dot_name:?} (Claude reads `.claude-plugin/plugin.json`; keep one manifest)",
        dir.display()
    )]
    ClaudeManifestsDisagree {
        /// The plugin directory as given.
        dir: PathBuf,
        /// The name in the root `plugin.json`.
        root_name: String,
        /// The name in `.claude-plugin/plugin.json`.
        dot_name: String,
    },
    /// A `package.json` is valid JSON but not an object.
    #[error("{}: `{file}` is not a JSON object", dir.display())]
    PackageJsonNotObject {
        /// The plugin directory as given.
        dir: PathBuf,
        /// The file, relative to the plugin directory.
        file: String,
    },
    /// A `package.json` `pi` manifest would load no extension code, or loads differently
    /// across pi versions.
    #[error("{}: `{file}` `pi` manifest {problem}", dir.display())]
    PiManifest {
        /// The plugin directory as given.
        dir: PathBuf,
        /// The `package.json`, relative to the plugin directory.
        file: String,
        /// What is wrong with it.
        problem: ManifestProblem,
    },
    /// A `pi.extensions` entry is refused.
    #[error("{}: `{file}` `pi.extensions` entry {entry:?} {problem}", dir.display())]
    PiEntry {
        /// The plugin directory as given.
        dir: PathBuf,
        /// The `package.json`, relative to the plugin directory.
        file: String,
        /// The entry exactly as written.
        entry: String,
        /// What is wrong with it.
        problem: EntryProblem,
    },
    /// A `package.json` `main` is refused.
    #[error("{}: `package.json` `main` {main:?} {problem}", dir.display())]
    PackageMain {
        /// The plugin directory as given.
        dir: PathBuf,
        /// The `main` value (JSON text when it is not a string).
        main: String,
        /// What is wrong with it.
        problem: EntryProblem,
    },
    /// Conventional folders exist, so pi silently ignores a root `index.*` or `main`.
    #[error(
        "{}: {} present: pi loads {} only; root {shadowed} would be silently ignored (move the \
         code into extensions/ or list it in package.json `pi.extensions`)",
        dir.display(), slash_list(folders), what_loads(folders)
    )]
    ShadowedByConventionalDirs {
        /// The plugin directory as given.
        dir: PathBuf,
        /// The conventional folders present (`extensions`, `skills`, `prompts`, `themes`).
        folders: Vec<String>,
        /// What would be ignored, e.g. `index.ts` or `package.json main "lib/x.ts"`.
        shadowed: String,
    },
    /// Conventional folders exist but `extensions/` yields no entry: nothing to load as code.
    #[error(
        "{}: {} present but no extension entries under extensions/: pi would load no extension \
         code from this directory, silently (not a pi extension)",
        dir.display(), slash_list(folders)
    )]
    ConventionalDirsWithoutEntries {
        /// The plugin directory as given.
        dir: PathBuf,
        /// The conventional folders present.
        folders: Vec<String>,
    },
    /// More than one `index.*` at the root: which one loads depends on jiti's probe order.
    #[error("{}: {}", dir.display(), ambiguous_index(candidates))]
    AmbiguousIndex {
        /// The plugin directory as given.
        dir: PathBuf,
        /// The `index.*` files present, in jiti's probe order.
        candidates: Vec<String>,
    },
    /// `package.json` `main` names another file than the `index.*` pi actually loads.
    #[error(
        "{}: `package.json` `main` {main:?} would be silently ignored: jiti probes `{index}` \
         before `main` (remove one)",
        dir.display()
    )]
    MainShadowedByIndex {
        /// The plugin directory as given.
        dir: PathBuf,
        /// The `main` value.
        main: String,
        /// The index file pi loads instead.
        index: String,
    },
    /// Neither runtime would load the directory.
    #[error(
        "{}: no runtime would load this directory: no plugin.json or .claude-plugin/plugin.json \
         (Claude), no package.json pi manifest, no extensions/ folder, no index.* or main (pi)",
        dir.display()
    )]
    NotAPlugin {
        /// The plugin directory as given.
        dir: PathBuf,
    },
}

fn slash_list(folders: &[String]) -> String {
    folders
        .iter()
        .map(|f| format!("{f}/"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn what_loads(folders: &[String]) -> String {
    let names: Vec<&str> = folders.iter().map(String::as_str).collect();
    match names.as_slice() {
        [one] => (*one).to_owned(),
        _ => "those folders".to_owned(),
    }
}

fn ambiguous_index(candidates: &[String]) -> String {
    let has = |n: &str| candidates.iter().any(|c| c == n);
    if candidates.len() == 2 && has("index.js") && has("index.ts") {
        "both `index.js` and `index.ts`: pi loads index.js, not index.ts (ambiguous; keep one)"
            .to_owned()
    } else {
        format!(
            "several index files ({}): which one pi loads depends on jiti's probe order \
             (ambiguous; keep one)",
            candidates.join(", ")
        )
    }
}

/// What is wrong with a root `package.json` `pi` manifest.
///
/// pi 0.73 enters manifest mode for any truthy `pi` value; 1.6 only for a non-array object that
/// lists `extensions|skills|prompts|themes` as arrays of strings. In manifest mode nothing else
/// (no conventional folders, no index) is looked at, even with zero extensions. pitcrew accepts
/// only manifests both versions read the same way and that yield at least one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ManifestProblem {
    /// `pi` is not an object, e.g. `"pi": "yes"`.
    NotAnObject {
        /// The `pi` value as compact JSON (truncated).
        found: String,
    },
    /// `pi: {}` or metadata only: no `extensions`, `skills`, `prompts` or `themes`.
    Empty,
    /// Only `skills`/`prompts`/`themes`, no `extensions`.
    OnlyOtherResources {
        /// The resource kinds listed.
        kinds: Vec<String>,
    },
    /// `extensions` is not an array of strings.
    ExtensionsNotStrings,
    /// `extensions: []`.
    NoExtensions,
}

impl fmt::Display for ManifestProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotAnObject { found } => write!(
                f,
                "is {found}, not an object: pi 0.73 enters manifest mode and loads nothing, \
                 silently; 1.6 ignores it and falls back (ambiguous across versions)"
            ),
            Self::Empty => f.write_str(
                "lists no extension entries (`pi: {}` or metadata only): pi 0.73 would load \
                 nothing, silently; 1.6 falls back to the index (ambiguous across versions)",
            ),
            Self::OnlyOtherResources { kinds } => write!(
                f,
                "lists only {} and no `extensions`: pi would load no extension code, silently",
                kinds.join(", ")
            ),
            Self::ExtensionsNotStrings => f.write_str(
                "`extensions` is not an array of strings (pi 1.6 ignores it, 0.73 does not: \
                 ambiguous across versions)",
            ),
            Self::NoExtensions => f.write_str(
                "lists no extension entries (`extensions: []`): pi would load nothing, silently",
            ),
        }
    }
}

/// What is wrong with a `pi.extensions` entry or a `package.json` `main`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EntryProblem {
    /// Not a string.
    NotAString,
    /// The empty string.
    Empty,
    /// An absolute path.
    Absolute,
    /// A `..` segment.
    ParentSegment,
    /// A glob (`*`, `?`).
    Glob,
    /// A `!`, `+` or `-` pattern prefix.
    PatternPrefix(char),
    /// Names the package root itself (`.`).
    NamesRoot,
    /// Does not exist.
    Missing,
    /// A path component is a symlink.
    Symlink(String),
    /// Resolves outside the plugin directory.
    OutsideDir,
    /// Neither a regular file nor a directory.
    NotFileOrDir,
    /// A directory where a file is required.
    IsADirectory,
    /// A directory from which pi's folder rule collects no entry.
    DirectoryYieldsNothing,
}

impl fmt::Display for EntryProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotAString => f.write_str("is not a string"),
            Self::Empty => f.write_str("is empty"),
            Self::Absolute => f.write_str("is an absolute path (name a file inside the directory)"),
            Self::ParentSegment => {
                f.write_str("contains `..` (pi does not check containment: it would load files outside the directory)")
            }
            Self::Glob => f.write_str(
                "is a glob: pi's glob and pattern semantics are a known silent-failure trap \
                 (name each file)",
            ),
            Self::PatternPrefix(c) => write!(
                f,
                "starts with `{c}`, a pi pattern prefix: pi's pattern semantics are a known \
                 silent-failure trap (a `!./x` exclude never matches; name each file)"
            ),
            Self::NamesRoot => f.write_str("names the package directory itself"),
            Self::Missing => {
                f.write_str("does not exist (pi silently drops missing manifest entries)")
            }
            Self::Symlink(p) => write!(f, "goes through the symlink `{p}` (plugins must contain no symlinks)"),
            Self::OutsideDir => f.write_str("resolves outside the plugin directory"),
            Self::NotFileOrDir => f.write_str("is neither a regular file nor a directory"),
            Self::IsADirectory => f.write_str(
                "is a directory (Node would probe it for an index; name the file)",
            ),
            Self::DirectoryYieldsNothing => f.write_str(
                "is a directory in which pi finds no extension entry (no pi.extensions, \
                 index.ts/index.js, *.ts/*.js or subfolder index): it would load nothing from it, \
                 silently",
            ),
        }
    }
}
