//! What varies per task when one harness serves many (`pitcrew run --workspace/--prompt/--env`,
//! each job of `pitcrew batch`): the workspace, the prompt and variables of the sandbox
//! environment, each checked as the harness's own key would be.

use super::model::Harness;
use crate::env_policy;
use crate::manifest::Runtime;
use std::path::PathBuf;

/// Per-task replacements for a harness's `workdir`, `prompt` and `env:` entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// A host directory uploaded as the workspace instead of `workdir`.
    pub workspace: Option<PathBuf>,
    /// The prompt instead of `prompt`.
    pub prompt: Option<String>,
    /// Variables set in the sandbox environment, over the harness's `env:` (same rules).
    pub env: Vec<(String, String)>,
}

impl Overrides {
    /// Whether nothing is replaced.
    pub fn is_empty(&self) -> bool {
        *self == Overrides::default()
    }
}

impl Harness {
    /// This harness with `o` applied, or every problem with `o` (each naming the option).
    pub fn with_overrides(&self, o: &Overrides) -> Result<Harness, Vec<String>> {
        let mut h = self.clone();
        let mut problems = Vec::new();
        if let Some(dir) = &o.workspace {
            match std::path::absolute(dir) {
                Ok(abs) if abs.is_dir() => h.workdir = Some(abs),
                _ => problems.push(format!("workspace {}: not a directory", dir.display())),
            }
        }
        if let Some(prompt) = &o.prompt {
            if self.runtime == Runtime::Command {
                problems.push(
                    "prompt: runtime command takes no prompt (its command is its argv)".into(),
                );
            } else if prompt.starts_with('-') {
                problems
                    .push("prompt: a prompt starting with '-' would be read as an option".into());
            } else {
                h.prompt = Some(prompt.clone());
            }
        }
        for (name, value) in &o.env {
            let found = env_policy::harness_env_problems(name, value);
            if found.is_empty() {
                h.env.insert(name.clone(), value.clone());
            }
            problems.extend(found.into_iter().map(|p| format!("env {name}: {p}")));
            if let Some(why) = super::network::endpoint_variable_problem(&h, name, value) {
                problems.push(format!("env {name}: {why}"));
            }
            let plugin = h
                .plugins
                .iter()
                .find(|p| p.env.keys().any(|k| k.eq_ignore_ascii_case(name)));
            if let Some(plugin) = plugin {
                problems.push(format!(
                    "env {name}: plugin {} sets it in its `env:`, and a plugin never replaces what the operator set; keep one",
                    plugin.name
                ));
            }
        }
        if problems.is_empty() {
            Ok(h)
        } else {
            Err(problems)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn harness(dir: &std::path::Path, runtime: &str) -> Harness {
        std::fs::create_dir_all(dir.join("w")).unwrap();
        let yaml = match runtime {
            "command" => "runtime: command\ncommand: [/bin/true]\nworkdir: w\nenv:\n  A: \"1\"\n",
            _ => "runtime: pi\nprompt: hi\nworkdir: w\n",
        };
        std::fs::write(dir.join("h.yaml"), yaml).unwrap();
        crate::harness::validate(&dir.join("h.yaml"))
            .unwrap()
            .harness
            .unwrap()
    }

    #[test]
    fn each_replacement_is_checked_like_the_key_it_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let pi = harness(dir.path(), "pi");
        std::fs::create_dir(dir.path().join("task")).unwrap();
        let o = Overrides {
            workspace: Some(dir.path().join("task")),
            prompt: Some("fix it".into()),
            env: vec![("TASK".into(), "7".into())],
        };
        let h = pi.with_overrides(&o).unwrap();
        assert_eq!(
            h.workdir.as_deref(),
            Some(dir.path().join("task").as_path())
        );
        assert_eq!(h.prompt.as_deref(), Some("fix it"));
        assert_eq!(h.env["TASK"], "7");

        let bad = Overrides {
            workspace: Some(dir.path().join("missing")),
            prompt: Some("-x".into()),
            env: vec![
                ("NODE_OPTIONS".into(), "--require x".into()),
                ("BAD NAME".into(), "1".into()),
            ],
        };
        let problems = pi.with_overrides(&bad).unwrap_err();
        assert_eq!(problems.len(), 4, "{problems:#?}");
        assert!(
            problems[0].contains("missing: not a directory"),
            "{problems:#?}"
        );
        assert!(
            problems[2].starts_with("env NODE_OPTIONS: "),
            "{problems:#?}"
        );

        let command = harness(dir.path(), "command");
        let problems = command
            .with_overrides(&Overrides {
                prompt: Some("p".into()),
                ..Overrides::default()
            })
            .unwrap_err();
        assert!(problems[0].contains("takes no prompt"), "{problems:#?}");
        // The harness's own env stays under a replacement of another name.
        let h = command
            .with_overrides(&Overrides {
                env: vec![("B".into(), "2".into())],
                ..Overrides::default()
            })
            .unwrap();
        assert_eq!((h.env["A"].as_str(), h.env["B"].as_str()), ("1", "2"));
    }

    #[test]
    fn a_replacement_a_plugin_sets_is_refused() {
        // The plugin's `env:` applies last and may not replace what the operator set.
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("w")).unwrap();
        std::fs::create_dir_all(dir.path().join("p")).unwrap();
        std::fs::write(dir.path().join("p/index.js"), "x\n").unwrap();
        std::fs::write(
            dir.path().join("h.yaml"),
            "runtime: pi\nprompt: hi\nworkdir: w\nplugins:\n  - path: p\n    env: {LEVEL: \"3\"}\n",
        )
        .unwrap();
        let h = crate::harness::validate(&dir.path().join("h.yaml"))
            .unwrap()
            .harness
            .unwrap();
        let problems = h
            .with_overrides(&Overrides {
                env: vec![("LEVEL".into(), "9".into())],
                ..Overrides::default()
            })
            .unwrap_err();
        assert_eq!(
            problems,
            ["env LEVEL: plugin p sets it in its `env:`, and a plugin never replaces what the operator set; keep one"]
        );
    }
}
