//! What a `skills:` entry may hold. A skill is text: the directory of one `SKILL.md` and the
//! files its text refers to (references, templates, scripts the model may choose to run). The
//! runtime is given the skill's `SKILL.md` and nothing of its tree runs (pi `--skill`, Claude
//! Code a plugin directory of the supervisor's holding a derived `SKILL.md`), so a tree that
//! carries what a runtime would run from a plugin or package directory is refused by name,
//! whatever the harness's runtime: it would not run, and a harness's skills mean the same under
//! every runtime.
//!
//! Refused: no `SKILL.md` at the root; `.claude-plugin/` or a root `plugin.json` (a Claude Code
//! plugin manifest, which may declare hooks, MCP servers, commands, agents); the parts Claude
//! Code runs by itself ([`CODE_PARTS`]: `hooks/hooks.json`, `.mcp.json`, `.lsp.json`, `bin/`,
//! `monitors/monitors.json`); a directory pi would load as an extension (`package.json` with a
//! `pi` key, `extensions/`, a root `index.*`, a package `main`); in `SKILL.md`, frontmatter
//! `hooks` and inline shell commands (`` !`cmd` ``, ```` ```! ````), which Claude Code runs when
//! the skill is invoked; a `SKILL.md` that is not UTF-8, over [`MAX_SKILL_MD_BYTES`], or whose
//! frontmatter is not a YAML mapping.
//!
//! For OpenCode, which is given each skills entry as a `skills.paths` directory and offers
//! every `SKILL.md` below it, a `SKILL.md` below the root is refused too.
//!
//! Noted: for pi, a skill without a description (pi does not load it); for Claude Code, the
//! frontmatter fields it is not given (all but `name`, `description`,
//! `disable-model-invocation`), and a description written in a form the supervisor does not
//! read.

use crate::manifest::Runtime;
use crate::plugin_format::{self, PluginClass};
use crate::skill_md::{self, CODE_PARTS, MAX_SKILL_MD_BYTES, SKILL_FILE};
use crate::tree_hash::TreeListing;
use marked_yaml::Node;
use std::path::Path;

/// The frontmatter fields Claude Code is given ([`skill_md::for_claude`]).
const GIVEN_TO_CLAUDE: [&str; 3] = ["name", "description", "disable-model-invocation"];

/// What the checks of one skills entry found: problems (the harness is refused) and notes.
#[derive(Debug, Default)]
pub(super) struct Findings {
    /// Why the entry is refused.
    pub problems: Vec<String>,
    /// What the author should know.
    pub notes: Vec<String>,
}

/// Checks the skills entry `shown` (as the harness writes it) at `dir`, whose verified
/// `listing` is given, for a harness of `runtime`.
pub(super) fn check(dir: &Path, shown: &str, listing: &TreeListing, runtime: Runtime) -> Findings {
    let mut f = Findings::default();
    let has_file = |p: &str| listing.files.iter().any(|r| r.path == p);
    let has_dir = |p: &str| listing.dirs.iter().any(|d| d == p);
    let text = "a skill is text: the runtime is given its SKILL.md and nothing in its tree \
                runs (code belongs in a plugin, plugins:)";
    for manifest in [".claude-plugin/", "plugin.json"] {
        let found = match manifest.strip_suffix('/') {
            Some(d) => has_dir(d),
            None => has_file(manifest),
        };
        if found {
            f.problems.push(format!(
                "{shown} holds {manifest}, a Claude Code plugin manifest (it may declare hooks, \
                 MCP servers, commands, agents): {text}"
            ));
        }
    }
    for (part, what) in CODE_PARTS {
        let found = match part.strip_suffix('/') {
            Some(d) => has_dir(d),
            None => has_file(part),
        };
        if found {
            f.problems
                .push(format!("{shown} holds {part} ({what}): {text}"));
        }
    }
    if let Ok(PluginClass::Pi(pi)) = plugin_format::classify(dir) {
        f.problems.push(format!(
            "{shown} is a pi extension (pi would load {}): {text}",
            pi.entries.join(", ")
        ));
    }
    if !has_file(SKILL_FILE) {
        f.problems.push(format!(
            "{shown} has no {SKILL_FILE} at its root: a skills entry is one skill, the directory \
             of its {SKILL_FILE}, which every runtime reads (list each skill's own directory)"
        ));
        return f;
    }
    if runtime == Runtime::Opencode {
        if let Some(nested) =
            crate::opencode_config::nested_skill_md(listing.files.iter().map(|r| r.path.as_str()))
        {
            f.problems.push(format!(
                "{shown} holds {nested} below its root: OpenCode offers every {SKILL_FILE} under \
                 a skills path, so it would offer that one as a skill too (list each skill's own \
                 directory)"
            ));
        }
    }
    check_skill_md(&dir.join(SKILL_FILE), shown, runtime, &mut f);
    f
}

/// The checks of `SKILL.md` itself.
fn check_skill_md(path: &Path, shown: &str, runtime: Runtime, f: &mut Findings) {
    let file = format!("{shown}/{SKILL_FILE}");
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            f.problems.push(format!("{file}: {e}"));
            return;
        }
    };
    if bytes.len() as u64 > MAX_SKILL_MD_BYTES {
        f.problems.push(format!(
            "{file} is {} bytes, over the {MAX_SKILL_MD_BYTES} a SKILL.md may have",
            bytes.len()
        ));
        return;
    }
    let Ok(text) = String::from_utf8(bytes) else {
        f.problems.push(format!("{file} is not UTF-8 text"));
        return;
    };
    let lines = skill_md::inline_shell_lines(&text);
    if !lines.is_empty() {
        let lines: Vec<String> = lines.iter().map(usize::to_string).collect();
        f.problems.push(format!(
            "{file} has inline shell commands (line {}: !`…` or ```!), which Claude Code runs \
             when the skill is invoked: a skill is text (pitcrew gives them to the model as text)",
            lines.join(", ")
        ));
    }
    let (frontmatter, _) = skill_md::split_frontmatter(&text);
    let fields = match frontmatter.map(parse_frontmatter).transpose() {
        Ok(fields) => fields.unwrap_or_default(),
        Err(why) => {
            f.problems.push(format!("{file}: its frontmatter {why}"));
            return;
        }
    };
    let field = |name: &str| fields.iter().find(|(k, _)| normalized(k) == name);
    if let Some((key, _)) = field("hooks") {
        f.problems.push(format!(
            "{file} declares {key:?} in its frontmatter: Claude Code runs a skill's hooks while \
             it is invoked; a skill is text (pitcrew gives Claude Code its name and description \
             only)"
        ));
    }
    let description = field("description").and_then(|(_, v)| v.clone());
    match runtime {
        Runtime::Pi if description.as_deref().is_none_or(|d| d.trim().is_empty()) => {
            f.notes.push(format!(
                "{file} has no description in its frontmatter: pi does not load such a skill"
            ));
        }
        Runtime::Claude => {
            let left: Vec<&str> = fields
                .iter()
                .map(|(k, _)| k.as_str())
                .filter(|k| !GIVEN_TO_CLAUDE.contains(&normalized(k).as_str()))
                .filter(|k| normalized(k) != "hooks")
                .collect();
            if !left.is_empty() {
                f.notes.push(format!(
                    "Claude Code is given {file}'s name, description and \
                     disable-model-invocation only: {} left out",
                    left.join(", ")
                ));
            }
            let read = frontmatter.and_then(|fm| skill_md::scalar(fm, "description"));
            if let Some(d) = description.filter(|d| Some(d.trim()) != read.as_deref()) {
                f.notes.push(format!(
                    "{file}: Claude Code is offered the description as {read:?}, not {d:?}: \
                     write it on one line, quoted or not, or as a | or > block"
                ));
            }
        }
        _ => {}
    }
}

/// A frontmatter key as Claude Code compares it (`allowed_tools` is `allowed-tools`).
fn normalized(key: &str) -> String {
    key.trim().to_lowercase().replace('_', "-")
}

/// The top-level fields of a frontmatter, each with its value when it is a scalar; why not,
/// when it is not a YAML mapping.
fn parse_frontmatter(text: &str) -> Result<Vec<(String, Option<String>)>, String> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let options = marked_yaml::LoaderOptions::default()
        .error_on_duplicate_keys(true)
        .prevent_coercion(true);
    // The YAML loader has internal `unreachable!`s (an alias): never a crash.
    let parsed =
        std::panic::catch_unwind(|| marked_yaml::parse_yaml_with_options(0, text, options));
    let node = match parsed {
        Ok(Ok(node)) => node,
        Ok(Err(e)) => return Err(format!("is not YAML pitcrew reads: {e}")),
        Err(_) => return Err("is not YAML pitcrew reads (aliases are not)".into()),
    };
    let Node::Mapping(map) = node else {
        return Err("is not a mapping of fields".into());
    };
    Ok(map
        .iter()
        .map(|(k, v)| {
            let value = v.as_scalar().map(|s| s.as_str().to_string());
            (k.as_str().to_string(), value)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree_hash::{hash_tree, TreeFormat};
    use std::fs;

    fn findings(files: &[(&str, &str)], runtime: Runtime) -> Findings {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let p = dir.path().join(path);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, text).unwrap();
        }
        let listing = hash_tree(dir.path(), TreeFormat::PiTreeV1).unwrap().listing;
        check(dir.path(), "skills/s", &listing, runtime)
    }

    #[test]
    fn opencode_refuses_a_skill_md_below_the_root() {
        let files = [("SKILL.md", GOOD), ("sub/SKILL.md", GOOD)];
        let f = findings(&files, Runtime::Opencode);
        assert!(
            f.problems
                .iter()
                .any(|p| p.contains("sub/SKILL.md below its root")),
            "{:?}",
            f.problems
        );
        assert!(findings(&files, Runtime::Pi).problems.is_empty());
    }

    const GOOD: &str = "---\nname: s\ndescription: Does s\n---\nBody, `code` and scripts/run.sh.\n";

    #[test]
    fn a_skill_of_text_and_the_files_it_names_is_accepted() {
        for runtime in [Runtime::Pi, Runtime::Claude] {
            let f = findings(
                &[
                    ("SKILL.md", GOOD),
                    ("scripts/run.sh", "echo\n"),
                    ("hooks/pre-commit", "x"),
                ],
                runtime,
            );
            assert!(f.problems.is_empty() && f.notes.is_empty(), "{f:?}");
        }
    }

    #[test]
    fn what_a_runtime_would_run_is_refused_by_name_under_every_runtime() {
        for runtime in [Runtime::Pi, Runtime::Claude] {
            let f = findings(
                &[
                    ("SKILL.md", GOOD),
                    ("hooks/hooks.json", "{}"),
                    (".mcp.json", "{}"),
                    (".lsp.json", "{}"),
                    ("bin/x", "x"),
                    ("monitors/monitors.json", "{}"),
                    (".claude-plugin/plugin.json", "{\"name\": \"s\"}"),
                ],
                runtime,
            );
            for part in [
                "hooks/hooks.json",
                ".mcp.json",
                ".lsp.json",
                "bin/",
                "monitors/monitors.json",
                ".claude-plugin/",
            ] {
                assert!(
                    f.problems
                        .iter()
                        .any(|p| p.contains(&format!("holds {part} "))
                            || p.contains(&format!("holds {part},"))),
                    "{part}: {f:?}"
                );
            }
            let f = findings(
                &[
                    ("SKILL.md", GOOD),
                    ("package.json", "{\"pi\": {\"extensions\": [\"./e.ts\"]}}"),
                    ("e.ts", "x"),
                ],
                runtime,
            );
            assert!(
                f.problems
                    .iter()
                    .any(|p| p.contains("is a pi extension (pi would load e.ts)")),
                "{f:?}"
            );
        }
    }

    #[test]
    fn a_directory_without_skill_md_is_refused_for_pi_too() {
        for runtime in [Runtime::Pi, Runtime::Claude] {
            let f = findings(&[("a/SKILL.md", GOOD), ("notes.md", "x")], runtime);
            assert!(
                f.problems
                    .iter()
                    .any(|p| p.contains("has no SKILL.md at its root")),
                "{f:?}"
            );
        }
    }

    #[test]
    fn skill_md_hooks_and_inline_shell_are_refused_and_left_out_fields_noted() {
        let md = "---\nname: s\ndescription: Does s\nhooks:\n  PreToolUse: []\nallowed-tools: Bash\n---\nRun !`id`.\n\n```!\nid\n```\n";
        let f = findings(&[("SKILL.md", md)], Runtime::Claude);
        assert!(
            f.problems.iter().any(|p| p.contains("declares \"hooks\"")),
            "{f:?}"
        );
        assert!(
            f.problems
                .iter()
                .any(|p| p.contains("inline shell commands (line 8, 10")),
            "{f:?}"
        );
        assert!(
            f.notes.iter().any(|n| n.contains("allowed-tools left out")),
            "{f:?}"
        );
        let f = findings(&[("SKILL.md", "---\nname: s\n---\nx\n")], Runtime::Pi);
        assert!(
            f.notes
                .iter()
                .any(|n| n.contains("pi does not load such a skill")),
            "{f:?}"
        );
        let f = findings(&[("SKILL.md", "---\n- a\n---\nx\n")], Runtime::Pi);
        assert!(
            f.problems
                .iter()
                .any(|p| p.contains("its frontmatter is not")),
            "{f:?}"
        );
        let f = findings(
            &[("SKILL.md", "---\ndescription: \"a\"  # c\n  \n---\nx\n")],
            Runtime::Claude,
        );
        assert!(f.notes.is_empty(), "{f:?}");
    }
}
