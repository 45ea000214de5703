//! `pitcrew classify DIR [--json]`: which runtime would load a plugin directory and, for pi,
//! which entry files and flags; for a single file, whether pi can load it from its pin alone.

use crate::output::{out, outln};
use crate::report::escape_controls;
use pitcrew_core::plugin_format::{check_single_file, classify, PluginClass};
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `pitcrew classify`.
#[derive(Debug, clap::Args)]
pub struct ClassifyArgs {
    /// The plugin directory (or a single pi extension file).
    pub dir: PathBuf,
    /// Print the classification as JSON (with the directory as "path").
    #[arg(long)]
    pub json: bool,
}

/// Runs `pitcrew classify`: prints the classification, or fails with the refusal.
pub fn run(args: &ClassifyArgs) -> anyhow::Result<ExitCode> {
    if args.dir.is_file() {
        return single_file(args);
    }
    let class = classify(&args.dir)?;
    if args.json {
        let mut value = serde_json::to_value(&class)?;
        if let Some(obj) = value.as_object_mut() {
            obj.insert(
                "path".to_owned(),
                args.dir.to_string_lossy().into_owned().into(),
            );
        }
        outln!("{}", serde_json::to_string_pretty(&value)?)?;
    } else {
        out!("{}", render(&class))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `pitcrew classify FILE`: a single-file pi extension, its flags, and why it cannot be loaded
/// from its pin alone (an import reaching past it), which fails the command.
fn single_file(args: &ClassifyArgs) -> anyhow::Result<ExitCode> {
    let scan = check_single_file(&args.dir)?;
    let path = args.dir.to_string_lossy();
    if args.json {
        let value = serde_json::json!({
            "kind": "pi-file",
            "path": path,
            "registered_flags": scan.registered_flags,
            "problems": scan.problems,
        });
        outln!("{}", serde_json::to_string_pretty(&value)?)?;
    } else {
        let flags: Vec<String> = scan
            .registered_flags
            .iter()
            .map(|f| format!("--{f}"))
            .collect();
        out!(
            "single-file pi extension (Claude Code names and skips it)
registered flags: {}
",
            escape_controls(&if flags.is_empty() {
                "none".to_owned()
            } else {
                flags.join(", ")
            })
        )?;
    }
    if scan.problems.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    anyhow::bail!(
        "{}",
        escape_controls(&format!("{path}: {}", scan.problems.join("; ")))
    )
}

/// The human-readable report, one fact per line; entries, flags and names come from the
/// plugin's files and are escaped for the terminal.
fn render(class: &PluginClass) -> String {
    match class {
        PluginClass::Pi(p) => {
            let flags = if p.registered_flags.is_empty() {
                "none".to_owned()
            } else {
                p.registered_flags
                    .iter()
                    .map(|f| format!("--{f}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            format!(
                "pi extension ({}): {}\nregistered flags: {}\n",
                escape_controls(&p.rule.to_string()),
                escape_controls(&p.entries.join(", ")),
                escape_controls(&flags)
            )
        }
        PluginClass::Claude(c) => {
            let name = serde_json::Value::from(c.name.as_str());
            let mut out = format!(
                "claude plugin {} ({})\n",
                escape_controls(&name.to_string()),
                escape_controls(&c.manifest)
            );
            let surfaces: Vec<&str> = [
                (c.has_hooks, "hooks"),
                (c.has_mcp, "MCP servers"),
                (c.has_bin, "bin/"),
            ]
            .into_iter()
            .filter_map(|(has, what)| has.then_some(what))
            .collect();
            if !surfaces.is_empty() {
                out.push_str(&format!("runs code through: {}\n", surfaces.join(", ")));
            }
            out
        }
        PluginClass::Codex(c) => {
            let name = serde_json::Value::from(c.name.as_str());
            let mut out = format!(
                "codex plugin {} (.codex-plugin/plugin.json)\n",
                escape_controls(&name.to_string())
            );
            let surfaces: Vec<&str> = [
                (c.has_skills, "skills"),
                (c.has_hooks, "hooks"),
                (c.has_mcp, "MCP servers"),
            ]
            .into_iter()
            .filter_map(|(has, what)| has.then_some(what))
            .collect();
            if !surfaces.is_empty() {
                out.push_str(&format!("carries: {}\n", surfaces.join(", ")));
            }
            out
        }
        PluginClass::Opencode(o) => {
            let mut out = format!(
                "opencode plugin: {}\n",
                escape_controls(&o.entries.join(", "))
            );
            if !o.skipped.is_empty() {
                out.push_str(&format!(
                    "not given to OpenCode: {}\n",
                    escape_controls(&o.skipped.join(", "))
                ));
            }
            out
        }
    }
}
