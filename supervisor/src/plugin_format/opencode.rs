//! OpenCode's plugin-module rule: the files its loader imports from a config dir.
//!
//! OpenCode 1.18.33 imports, for each config dir, the files matching
//! `{plugin,plugins}/*.{ts,js}`: one level, dotfiles included, sorted; a subdirectory's files
//! or a `.mjs` are not loaded (docs/agent-support.md, "Plugin-module loader rule"). A plugin
//! directory shaped like a config dir with such files is an OpenCode plugin; pitcrew hands
//! OpenCode exactly those files (linked into the config dir it pins), nothing else of the tree
//! (its `tools/`, `agents/`, `commands/`, `opencode.json` are named by `validate` and skipped).

use super::{join, ClassifyError, Ctx, Kind};
use std::fs;

/// The plugin folders OpenCode's loader reads in a config dir.
pub const PLUGIN_DIRS: &[&str] = &["plugin", "plugins"];

/// The extensions of the files it imports there.
pub const PLUGIN_EXTS: &[&str] = &["ts", "js"];

/// What else of a config dir OpenCode would load (custom tools, agents, commands, modes,
/// skills, configuration), which pitcrew does not hand it from a plugin tree.
pub const SKIPPED_PARTS: &[&str] = &[
    "tool",
    "tools",
    "agent",
    "agents",
    "command",
    "commands",
    "mode",
    "modes",
    "skill",
    "skills",
    "opencode.json",
    "opencode.jsonc",
];

/// The plugin modules of `ctx` by the loader's rule (relative paths, sorted), or `None` when
/// there is none.
pub(super) fn detect(ctx: &Ctx) -> Result<Option<Vec<String>>, ClassifyError> {
    let mut entries = Vec::new();
    for dir in PLUGIN_DIRS {
        if ctx.kind(dir)? != Some(Kind::Dir) {
            continue;
        }
        let rd = fs::read_dir(ctx.abs(dir)).map_err(|e| ctx.io(dir, e))?;
        for item in rd {
            let item = item.map_err(|e| ctx.io(dir, e))?;
            let Some(name) = item.file_name().to_str().map(str::to_owned) else {
                return Err(ClassifyError::NonUtf8Name {
                    dir: ctx.dir.clone(),
                    path: join(dir, &item.file_name().to_string_lossy()),
                });
            };
            let loaded = name
                .rsplit_once('.')
                .is_some_and(|(stem, ext)| !stem.is_empty() && PLUGIN_EXTS.contains(&ext));
            if !loaded {
                continue;
            }
            let rel = join(dir, &name);
            // A symlink is refused (`Ctx::kind`); a directory by such a name is not imported.
            if ctx.kind(&rel)? == Some(Kind::File) {
                entries.push(rel);
            }
        }
    }
    entries.sort();
    Ok((!entries.is_empty()).then_some(entries))
}

#[cfg(test)]
mod tests {
    use crate::plugin_format::{classify, PluginClass};
    use std::fs;

    #[test]
    fn the_loader_rule_picks_one_level_of_ts_and_js_in_plugin_and_plugins() {
        let root = tempfile::tempdir().unwrap();
        let p = root.path().join("p");
        for (path, body) in [
            ("plugins/a.ts", "x"),
            ("plugins/.hidden.js", "x"),
            ("plugin/b.js", "x"),
            ("plugins/c.mjs", "x"),
            ("plugins/sub/d.ts", "x"),
            ("tools/t.ts", "x"),
            ("opencode.json", "{}"),
        ] {
            let f = p.join(path);
            fs::create_dir_all(f.parent().unwrap()).unwrap();
            fs::write(f, body).unwrap();
        }
        let PluginClass::Opencode(o) = classify(&p).unwrap() else {
            panic!("not an OpenCode plugin")
        };
        assert_eq!(
            o.entries,
            ["plugin/b.js", "plugins/.hidden.js", "plugins/a.ts"]
        );
        assert_eq!(o.skipped, ["tools", "opencode.json"]);
        // A pi extension stays one (pi's rule comes first); a symlinked module is refused.
        fs::write(p.join("index.ts"), "x").unwrap();
        assert!(matches!(classify(&p).unwrap(), PluginClass::Pi(_)));
        fs::remove_file(p.join("index.ts")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", p.join("plugins/e.js")).unwrap();
        assert!(classify(&p).is_err());
    }
}
