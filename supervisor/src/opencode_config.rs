//! OpenCode's configuration: the one pitcrew writes, and the places it would load another from
//! made root's before each launch.
//!
//! OpenCode 1.18.33 has no project trust: it merges configuration from every layer it finds
//! (`~/.config/opencode`, `$OPENCODE_CONFIG`, the project's `opencode.json(c)`, each config
//! dir's, `$OPENCODE_CONFIG_CONTENT`, `/etc/opencode`, `$OPENCODE_PERMISSION`), and loads plugin
//! modules, custom tools, agents and commands from each config dir (`~/.config/opencode`, every
//! `.opencode` up to the worktree root, `~/.opencode`, `$OPENCODE_CONFIG_DIR`).
//! docs/agent-support.md has the table. pitcrew:
//!
//! - pins the switches of [`SWITCHES`] (no project config, no `.claude`/`.agents` skills, no
//!   `CLAUDE.md`, no internal plugins, no models fetch, update check, share or LSP download) and
//!   refuses every other `OPENCODE_*` from every layer
//!   ([`crate::env_policy::LOADER_RULES`]);
//! - writes the whole configuration itself into `OPENCODE_CONFIG_CONTENT` ([`config`]): the
//!   model provider `pitcrew` (`@ai-sdk/openai-compatible`, its `baseURL` the agent's
//!   `OPENAI_BASE_URL`, which a model route pins to the supervisor's model listener, its key
//!   the agent's `OPENAI_API_KEY`, a placeholder when the key stays on the host), a permission
//!   with no `ask` anywhere (`opencode run` rejects every ask silently and exits 0), the tools
//!   `agent.tools` leaves out turned off, the workdir's `AGENTS.md` as its only instruction file
//!   (`agent.context_files`), the verified skills' paths;
//! - points `OPENCODE_CONFIG_DIR` at the config dir (reset to the pinned files before each
//!   iteration), and before each launch ([`protect`]) makes it root's and read-only to the
//!   agent (so that nothing the agent writes there loads: not a custom tool, which `--pure`
//!   would not stop, nor a plugin, nor OpenCode's own install of `@opencode-ai/plugin`), and
//!   puts root-owned guards in `HOME` in place of the other config dirs (`~/.config/opencode`,
//!   `~/.opencode`: empty directories) and of what OpenCode would load from its data and cache
//!   dirs ([`HOME_GUARDED`]).
//!
//! A supervisor that is not root (unprivileged mode), or an agent that runs as root, leaves
//! the directories alone, and the record names nothing as guarded.

use crate::manifest::{ContextFiles, Manifest, Runtime, RuntimeDirPaths};
use crate::root_guard::{self, Guard};
use crate::sandbox::nofollow;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::os::fd::AsFd as _;
use std::path::Path;

/// The variable OpenCode reads its inline configuration from, written by the supervisor.
pub const CONTENT_VAR: &str = "OPENCODE_CONFIG_CONTENT";

/// The variable of the agent's environment whose value is the `baseURL` of the provider
/// pitcrew gives OpenCode (Codex's too: a model route pins it to the model listener).
pub const BASE_URL_VAR: &str = crate::runtime_argv::CODEX_BASE_URL_VAR;

/// The variable whose value is that provider's key (a placeholder when the key stays on the
/// host).
pub const KEY_VAR: &str = crate::runtime_argv::CODEX_KEY_VAR;

/// Where the provider goes without `OPENAI_BASE_URL`.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// The name of the provider pitcrew writes.
pub const PROVIDER: &str = "pitcrew";

/// OpenCode 1.18.33's built-in tools (what `agent.tools` may name).
pub const BUILTIN_TOOLS: &[&str] = &[
    "bash",
    "edit",
    "glob",
    "grep",
    "read",
    "skill",
    "task",
    "todowrite",
    "webfetch",
    "write",
];

/// The permission OpenCode 1.18.33 asks for a built-in tool: `write` and `edit` share `edit`
/// (so `agent.tools` gives or takes both together), every other its own name.
pub fn permission_of(tool: &str) -> &str {
    match tool {
        "write" | "edit" => "edit",
        other => other,
    }
}

/// The switches pinned for every OpenCode run (docs/agent-support.md says what each closes).
pub const SWITCHES: &[&str] = &[
    "OPENCODE_DISABLE_AUTOUPDATE",
    "OPENCODE_DISABLE_SHARE",
    "OPENCODE_DISABLE_LSP_DOWNLOAD",
    "OPENCODE_DISABLE_MODELS_FETCH",
    "OPENCODE_DISABLE_PROJECT_CONFIG",
    "OPENCODE_DISABLE_EXTERNAL_SKILLS",
    "OPENCODE_DISABLE_CLAUDE_CODE",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS",
];

/// The variables pinned for OpenCode: [`SWITCHES`] on, `OPENCODE_CONFIG_DIR` the config dir,
/// Bun's transpiler cache off.
/// OpenCode takes its user config, data, state and cache dirs from the XDG homes, at their
/// defaults under `HOME` (where [`protect`] guards them) unless a trusted layer sets them; one
/// that points into the workdir is removed ([`crate::environment::XDG_IN_AGENT_DIR`]), any
/// other is the operator's.
pub fn pins(dirs: &RuntimeDirPaths) -> Vec<(&'static str, String)> {
    let mut pins: Vec<(&'static str, String)> = SWITCHES
        .iter()
        .map(|name| (*name, "1".to_string()))
        .collect();
    pins.push(("OPENCODE_CONFIG_DIR", dirs.config.clone()));
    // Bun would run a saved compiled copy of a module (`~/.bun/install/cache/@t@/*.pile`,
    // the agent's to write, checked only by hashes anyone can compute) in place of its source,
    // a verified plugin's included: no cache.
    pins.push(("BUN_RUNTIME_TRANSPILER_CACHE_PATH", "0".to_string()));
    pins
}

/// Why no configuration could be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// OpenCode needs a model of pitcrew's provider.
    #[error("the opencode runtime needs agent.model (the model of pitcrew's provider)")]
    MissingModel,
    /// The manifest pins a file OpenCode would read as configuration, or one where the
    /// supervisor links the plugin modules, in the config dir.
    #[error("{path} is pinned in OpenCode's config dir, where OpenCode would read it as configuration or a plugin module beside pitcrew's (validate refuses the adapter)")]
    PinnedConfig {
        /// The pinned file.
        path: String,
    },
    /// A skills tree holds a `SKILL.md` below its root ([`nested_skill_md`]).
    #[error("the skills tree {tree} holds {nested}: OpenCode would offer it as a skill too")]
    NestedSkill {
        /// The tree's path.
        tree: String,
        /// The nested file, relative to the tree.
        nested: String,
    },
}

/// OpenCode's configuration for `manifest` (see the module docs), the agent's environment
/// `agent_env` giving the provider's URL and key, `agents_md` the workdir's `AGENTS.md` the
/// context step found (`None` under `context_files: none`).
pub fn config(
    manifest: &Manifest,
    agent_env: &[(String, String)],
    agents_md: Option<&str>,
) -> Result<Value, ConfigError> {
    let model = manifest
        .agent
        .model
        .as_deref()
        .ok_or(ConfigError::MissingModel)?;
    let var = |name: &str| {
        agent_env
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let base_url = var(BASE_URL_VAR).unwrap_or_else(|| DEFAULT_BASE_URL.to_string());
    let key = var(KEY_VAR).unwrap_or_else(|| "none".to_string());
    let mut permission = Map::new();
    let mut tools = Map::new();
    match &manifest.agent.tools {
        Some(list) if list.is_empty() => {
            permission.insert("*".into(), json!("deny"));
            for tool in BUILTIN_TOOLS {
                tools.insert((*tool).into(), json!(false));
            }
        }
        list => {
            // No `ask` anywhere: OpenCode's defaults (`"*": "allow"`) ask for
            // `external_directory`, `doom_loop` and `read` of `*.env`; pitcrew's confinement is
            // the boundary. Each built-in tool gets its own entry (a `"*"` of the config would be
            // applied after them by OpenCode 1.18.33, which left every tool on: seen).
            for name in ["external_directory", "doom_loop"] {
                permission.insert(name.into(), json!("allow"));
            }
            for tool in BUILTIN_TOOLS {
                let listed = list.as_ref().is_none_or(|list| {
                    list.iter()
                        .any(|t| t == tool || permission_of(t) == permission_of(tool))
                });
                let action = if listed { "allow" } else { "deny" };
                permission.insert(permission_of(tool).into(), json!(action));
                if !listed {
                    tools.insert((*tool).into(), json!(false));
                }
            }
        }
    }
    let mut config = json!({
        "$schema": "https://opencode.ai/config.json",
        "model": format!("{PROVIDER}/{model}"),
        "small_model": format!("{PROVIDER}/{model}"),
        "enabled_providers": [PROVIDER],
        "provider": {
            PROVIDER: {
                "npm": "@ai-sdk/openai-compatible",
                "name": PROVIDER,
                "options": {"baseURL": base_url, "apiKey": key},
                "models": {model: {"tool_call": true}},
            }
        },
        "permission": permission,
        "autoupdate": false,
        "share": "disabled",
        // Its snapshots `git add` the project after each step: git would run a filter the
        // agent configured (`~/.gitconfig`, `.gitattributes`) with no tool call a hook sees.
        "snapshot": false,
        "plugin": [],
        "mcp": {},
        "instructions": agents_md.map(|p| vec![p.to_string()]).unwrap_or_default(),
    });
    if !tools.is_empty() {
        config["tools"] = Value::Object(tools);
    }
    if let Some(path) = pinned_config(manifest, dirs_config(manifest)) {
        return Err(ConfigError::PinnedConfig { path });
    }
    for tree in manifest.skill_trees() {
        let files: Vec<String> = tree.files.records().map(|r| r.path).collect();
        if let Some(nested) = nested_skill_md(files.iter().map(String::as_str)) {
            return Err(ConfigError::NestedSkill {
                tree: tree.path.clone(),
                nested: nested.to_string(),
            });
        }
    }
    let skills: Vec<String> = manifest.skill_trees().map(|t| t.path.clone()).collect();
    if !skills.is_empty() {
        config["skills"] = json!({ "paths": skills });
    }
    Ok(config)
}

/// The manifest's config dir.
fn dirs_config(manifest: &Manifest) -> String {
    manifest.runtime_dirs().config
}

/// The first file `manifest` pins in the config dir `config` that OpenCode would read as
/// configuration (`opencode.json`, `opencode.jsonc`, `config.json`) or that lies where the
/// supervisor links the plugin modules (`plugin/`, `plugins/`).
pub fn pinned_config(manifest: &Manifest, config: String) -> Option<String> {
    let config = Path::new(&config);
    manifest.files.iter().find_map(|f| {
        let rel = Path::new(&f.path).strip_prefix(config).ok()?;
        let first = rel.components().next()?.as_os_str().to_str()?;
        let reads = ["opencode.json", "opencode.jsonc", "config.json"].contains(&first)
            && rel.components().count() == 1;
        (reads || first == "plugin" || first == PLUGINS_DIR).then(|| f.path.clone())
    })
}

/// The first `SKILL.md` below the root among a skills tree's `files` (relative paths):
/// OpenCode 1.18.33 offers every `SKILL.md` under a `skills.paths` entry (seen), so a tree
/// holding one would offer it beside the verified skill.
pub fn nested_skill_md<'a>(files: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    files.into_iter().find(|p| p.ends_with("/SKILL.md"))
}

/// [`config`] as the record shows it: the provider's key replaced by `<OPENAI_API_KEY>`.
pub fn shown(mut config: Value) -> Value {
    if let Some(key) = config.pointer_mut(&format!("/provider/{PROVIDER}/options/apiKey")) {
        *key = json!(format!("<{KEY_VAR}>"));
    }
    config
}

/// What in `HOME` OpenCode 1.18.33 loads from and [`protect`] guards, as `(directory, name,
/// guard)`, the directory relative to `HOME` (made root's with the sticky bit): the other
/// config dirs (empty), the auth stores of its data dir (whose well-known entries fetch remote
/// config, `{}`), the npm packages it imports plugins and providers from and the `rg` it runs
/// when none is on `PATH` (empty).
pub const HOME_GUARDED: &[(&str, &str, Guard)] = &[
    ("", ".opencode", Guard::Empty),
    (".config", "opencode", Guard::Empty),
    (".local/share/opencode", "auth.json", Guard::Settings),
    (".local/share/opencode", "mcp-auth.json", Guard::Settings),
    (".cache/opencode", "packages", Guard::Empty),
    (".cache/opencode", "node_modules", Guard::Empty),
    (".cache/opencode", "bin", Guard::Empty),
];

/// The paths (relative to `home`) of [`HOME_GUARDED`] that hold the supervisor's guard, for the
/// `HOME` reset to keep: so that no record names them as removed.
pub fn home_guards_present(home: &Path) -> Vec<std::path::PathBuf> {
    HOME_GUARDED
        .iter()
        .filter_map(|(dir, name, guard)| {
            let rel = Path::new(dir);
            let found = root_guard::present(&home.join(rel), &[(*name, *guard)]);
            found.into_iter().next().map(|n| rel.join(n))
        })
        .collect()
}

/// The record's `opencode_config`: the configuration pitcrew wrote (key hidden), and what of
/// OpenCode's config dirs the agent could not write while OpenCode ran.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpencodeConfigRecord {
    /// `OPENCODE_CONFIG_CONTENT` as written ([`shown`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Value>,
    /// The paths (the config dir, then those of [`HOME_GUARDED`] relative to `HOME`) that were
    /// root's and read-only to the agent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guarded: Vec<String>,
    /// The verified plugin modules OpenCode was given ([`deliver_plugins`]); OpenCode runs
    /// `--pure` (no plugin module at all) without them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plugins: Vec<String>,
    /// Every file of the image's `/etc/opencode` ([`MANAGED_DIR`]), whose configuration
    /// OpenCode merges over pitcrew's, with its SHA-256 ([`crate::claude_managed::list`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub managed: Vec<crate::claude_managed::ManagedEntry>,
}

/// OpenCode's managed configuration directory, the image's.
pub const MANAGED_DIR: &str = "/etc/opencode";

/// Before each launch of OpenCode, after the config reset and `HOME`'s guard: the config dir
/// made root's, mode `0755` (nothing in it the agent's to change), and each of
/// [`HOME_GUARDED`] put in place, its directory made root's with the sticky bit. Returns the
/// paths guarded; `None` for another runtime, a supervisor that is not root or an agent that
/// is. Errors name the path.
pub fn protect(manifest: &Manifest, dirs: &RuntimeDirPaths) -> Result<Option<Vec<String>>, String> {
    if manifest.runtime != Runtime::Opencode || !root_guard::applies(manifest) {
        return Ok(None);
    }
    let config = Path::new(&dirs.config);
    let fd = root_guard::open_dir_at(nofollow::open_dir(config)?.as_fd(), ".", config)?;
    rustix::fs::fchown(
        &fd,
        Some(rustix::fs::Uid::ROOT),
        Some(rustix::fs::Gid::ROOT),
    )
    .map_err(|e| format!("{}: chown: {e}", config.display()))?;
    rustix::fs::fchmod(&fd, rustix::fs::Mode::from_raw_mode(0o755))
        .map_err(|e| format!("{}: chmod: {e}", config.display()))?;
    let mut guarded = vec![dirs.config.clone()];
    let home = Path::new(&dirs.home);
    for (dir, name, guard) in HOME_GUARDED {
        let path = if dir.is_empty() {
            home.to_path_buf()
        } else {
            home.join(dir)
        };
        make_dirs(home, dir, manifest.user.gid)?;
        let fd = root_guard::make_sticky(&path, manifest.user.gid)?;
        root_guard::put(fd.as_fd(), &path, name, *guard)?;
        guarded.push(if dir.is_empty() {
            (*name).to_string()
        } else {
            format!("{dir}/{name}")
        });
    }
    Ok(Some(guarded))
}

/// Makes each directory of `rel` below `home` that is missing (root's, sticky, group `gid`),
/// without following a link.
fn make_dirs(home: &Path, rel: &str, gid: u32) -> Result<(), String> {
    let mut path = home.to_path_buf();
    for part in rel.split('/').filter(|p| !p.is_empty()) {
        let parent = root_guard::open_dir_at(nofollow::open_dir(&path)?.as_fd(), ".", &path)?;
        path.push(part);
        match rustix::fs::mkdirat(
            &parent,
            part,
            rustix::fs::Mode::from_raw_mode(root_guard::STICKY_DIR_MODE),
        ) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(format!("{}: mkdir: {e}", path.display())),
        }
        root_guard::make_sticky(&path, gid)?;
    }
    Ok(())
}

/// The directory of OpenCode's config dir its loader imports plugin modules from, which the
/// supervisor fills ([`deliver_plugins`]).
pub const PLUGINS_DIR: &str = "plugins";

/// The name of the link in [`PLUGINS_DIR`] to entry `entry` of the `index`-th OpenCode plugin
/// tree `tree`: ordered as the manifest lists the trees (OpenCode imports them sorted), unique,
/// ending as the entry does (`.ts`, `.js`).
pub fn plugin_link_name(index: usize, tree: &str, entry: &str) -> String {
    format!("{index:03}-{tree}-{}", entry.replace('/', "-"))
}

/// Before each launch of OpenCode, after the config reset: the config dir's [`PLUGINS_DIR`]
/// made anew holding one symlink per entry of each verified OpenCode plugin tree (the verified
/// module itself, read-only to the agent), and nothing else; absent when the manifest has no
/// such tree. Returns the links' targets, for the record. Errors name the path.
pub fn deliver_plugins(manifest: &Manifest, dirs: &RuntimeDirPaths) -> Result<Vec<String>, String> {
    if manifest.runtime != Runtime::Opencode {
        return Ok(Vec::new());
    }
    let dir = Path::new(&dirs.config).join(PLUGINS_DIR);
    match std::fs::symlink_metadata(&dir) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(&dir),
        Ok(_) => std::fs::remove_file(&dir),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
    .map_err(|e| format!("{}: remove: {e}", dir.display()))?;
    let trees: Vec<_> = manifest
        .trees
        .iter()
        .filter(|t| t.kind == crate::manifest::TreeKind::OpencodePlugin)
        .collect();
    if trees.is_empty() {
        return Ok(Vec::new());
    }
    std::fs::create_dir(&dir).map_err(|e| format!("{}: mkdir: {e}", dir.display()))?;
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .map_err(|e| format!("{}: chmod: {e}", dir.display()))?;
    let mut delivered = Vec::new();
    for (i, tree) in trees.iter().enumerate() {
        for entry in &tree.entries {
            let target = Path::new(&tree.path).join(entry);
            let link = dir.join(plugin_link_name(i, &tree.name, entry));
            std::os::unix::fs::symlink(&target, &link)
                .map_err(|e| format!("{}: symlink: {e}", link.display()))?;
            delivered.push(target.display().to_string());
        }
    }
    Ok(delivered)
}

/// Whether `manifest` is OpenCode's under `context_files` that passes the workdir's
/// `AGENTS.md` (`uploaded`, `as-is`).
pub fn passes_agents_md(manifest: &Manifest) -> bool {
    manifest.runtime == Runtime::Opencode && manifest.agent.context_files != ContextFiles::None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(agent: Value) -> Manifest {
        Manifest::from_json(
            json!({
                "version": 1, "runtime": "opencode", "agent": agent, "prompt": "p",
                "workdir": "/w", "user": {"uid": 65534, "gid": 65534},
            })
            .to_string()
            .as_bytes(),
        )
        .unwrap()
    }

    fn config_of(m: &Manifest) -> Result<Value, ConfigError> {
        config(m, &[], None)
    }

    #[test]
    fn the_config_names_pitcrews_provider_no_ask_and_the_tools_left_out() {
        let m = manifest(json!({"binary": "opencode", "model": "m1", "tools": ["bash", "read"]}));
        let env = [
            (
                "OPENAI_BASE_URL".to_string(),
                "http://127.0.0.1:9".to_string(),
            ),
            (
                "OPENAI_API_KEY".to_string(),
                "pitcrew-placeholder-OPENAI_API_KEY".to_string(),
            ),
        ];
        let c = config(&m, &env, Some("/w/AGENTS.md")).unwrap();
        assert_eq!(c["model"], "pitcrew/m1");
        assert_eq!(
            c["provider"]["pitcrew"]["options"]["baseURL"],
            "http://127.0.0.1:9"
        );
        assert_eq!(c["provider"]["pitcrew"]["npm"], "@ai-sdk/openai-compatible");
        assert_eq!(c["instructions"], json!(["/w/AGENTS.md"]));
        let actions = c["permission"].as_object().unwrap();
        assert!(actions.values().all(|a| a != "ask"), "{c:#}");
        assert_eq!(c["permission"]["external_directory"], "allow");
        assert_eq!(c["permission"]["read"], "allow");
        assert_eq!(c["permission"]["edit"], "deny");
        assert_eq!(c["permission"]["webfetch"], "deny");
        assert_eq!(c["tools"]["write"], false);
        assert!(c["tools"].get("bash").is_none(), "{c:#}");
        // `write` gives `edit` too: one permission.
        let w = manifest(json!({"binary": "opencode", "model": "m1", "tools": ["write"]}));
        let c = config(&w, &env, None).unwrap();
        assert_eq!(c["permission"]["edit"], "allow");
        assert!(c["tools"].get("edit").is_none(), "{c:#}");
        assert_eq!(c["plugin"], json!([]));
        let shown = shown(c);
        assert_eq!(
            shown["provider"]["pitcrew"]["options"]["apiKey"],
            "<OPENAI_API_KEY>"
        );

        let none = manifest(json!({"binary": "opencode", "model": "m1", "tools": []}));
        let c = config(&none, &[], None).unwrap();
        assert_eq!(c["permission"], json!({"*": "deny"}));
        assert_eq!(
            c["provider"]["pitcrew"]["options"]["baseURL"],
            DEFAULT_BASE_URL
        );
        assert_eq!(c["instructions"], json!([]));
        let all = manifest(json!({"binary": "opencode", "model": "m1"}));
        assert!(config(&all, &[], None).unwrap().get("tools").is_none());
        assert_eq!(nested_skill_md(["SKILL.md", "refs/a.md"]), None);
        assert_eq!(
            nested_skill_md(["SKILL.md", "sub/SKILL.md"]),
            Some("sub/SKILL.md")
        );
        let mut pinned = manifest(json!({"binary": "opencode", "model": "m1"}));
        let dir = pinned.runtime_dirs().config;
        pinned.files = vec![serde_json::from_value(json!({
            "path": format!("{dir}/opencode.json"), "role": "config",
            "sha256": "b".repeat(64), "use": "verify",
        }))
        .unwrap()];
        assert!(matches!(
            config_of(&pinned),
            Err(ConfigError::PinnedConfig { .. })
        ));
        let no_model = manifest(json!({"binary": "opencode"}));
        assert_eq!(config(&no_model, &[], None), Err(ConfigError::MissingModel));
    }

    #[test]
    #[allow(non_snake_case)] // attack tests are named attack_<class>__<case>
    fn attack_runtime_tamper__opencodes_config_dirs_are_roots_before_launch() {
        use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let mut m = manifest(json!({"binary": "opencode", "model": "m"}));
        m.workdir = tmp.path().join("work").display().to_string();
        let dirs = m.runtime_dirs();
        for d in [&dirs.config, &dirs.home] {
            std::fs::create_dir_all(d).unwrap();
            std::os::unix::fs::chown(d, Some(65534), Some(65534)).unwrap();
        }
        let guarded = protect(&m, &dirs).unwrap().unwrap();
        assert_eq!(guarded.len(), HOME_GUARDED.len() + 1);
        let meta = std::fs::metadata(&dirs.config).unwrap();
        assert_eq!((meta.uid(), meta.permissions().mode() & 0o7777), (0, 0o755));
        let home = Path::new(&dirs.home);
        let user = std::fs::metadata(home.join(".config/opencode")).unwrap();
        assert!(user.is_dir() && user.uid() == 0 && user.permissions().mode() & 0o777 == 0o555);
        assert_eq!(
            std::fs::read(home.join(".local/share/opencode/auth.json")).unwrap(),
            root_guard::SETTINGS
        );
        // Again (the next iteration's launch) is fine.
        protect(&m, &dirs).unwrap();
    }
}
