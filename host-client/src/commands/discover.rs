//! `pitcrew discover`: list what pi would auto-discover, without importing anything.
//!
//! pi loads every extension it finds in its agent directory's `extensions/` and in the
//! project's `.pi/extensions/` unless it runs with `--no-extensions` (which pitcrew always
//! passes). This command scans those places the way pi does — one level: `*.ts`/`*.js` files and
//! subdirectories — classifies and hashes each candidate, and prints the harness `plugins:`
//! entry that would enable it explicitly. Candidates are read, never loaded or executed.

use crate::hash_progress;
use crate::output::outln;
use crate::report::escape_controls;
use pitcrew_core::plugin_format::{self, PluginClass};
use pitcrew_core::tree_hash::{self, HashProgress, TreeFormat};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Arguments of `pitcrew discover`.
#[derive(Debug, clap::Args)]
pub struct DiscoverArgs {
    /// pi's agent directory (default: $PI_CODING_AGENT_DIR, else ~/.pi/agent).
    #[arg(long, value_name = "DIR")]
    pub agent_dir: Option<PathBuf>,
    /// The project directory whose .pi/extensions/ pi would load (default: the current dir).
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// One auto-discoverable extension candidate.
#[derive(Debug, Serialize)]
pub struct Candidate {
    /// Where pi would find it: `agent-dir` or `project`.
    pub scope: &'static str,
    /// Absolute path.
    pub path: PathBuf,
    /// `directory` or `file`.
    pub shape: &'static str,
    /// Classification, for directories that classify cleanly.
    pub class: Option<PluginClass>,
    /// pi-tree-v1 digest of a directory, or sha256 of a file.
    pub sha256: Option<String>,
    /// Why it cannot be enabled as a harness plugin as it is.
    pub problem: Option<String>,
    /// The `plugins:` entry that enables it once vendored into the harness directory.
    pub harness_entry: Option<String>,
}

/// Runs `pitcrew discover`; `quiet` (`-q`) hides the progress of long hashes.
pub fn run(args: &DiscoverArgs, quiet: bool) -> anyhow::Result<ExitCode> {
    // A directory named on the command line must be one; the project must exist (an agent
    // dir pi never made is reported absent, as pi would find nothing there).
    for (flag, dir, must_exist) in [
        ("--agent-dir", &args.agent_dir, false),
        ("--project", &args.project, true),
    ] {
        if let Some(dir) = dir {
            match std::fs::metadata(dir) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => anyhow::bail!("{flag} {}: not a directory", dir.display()),
                Err(e) if must_exist || e.kind() != std::io::ErrorKind::NotFound => {
                    anyhow::bail!("{flag} {}: {e}", dir.display())
                }
                Err(_) => {}
            }
        }
    }
    let agent_dir = args.agent_dir.clone().or_else(default_agent_dir);
    let project = match &args.project {
        Some(p) => p.clone(),
        None => std::env::current_dir()?,
    };
    let mut places = Vec::new();
    if let Some(dir) = &agent_dir {
        places.push(("agent-dir", dir.join("extensions")));
    }
    places.push(("project", project.join(".pi").join("extensions")));

    let mut candidates = Vec::new();
    let mut scanned = Vec::new();
    hash_progress::watch(quiet, |progress| {
        for (scope, dir) in &places {
            scanned.push(serde_json::json!({"scope": scope, "path": dir, "exists": dir.is_dir()}));
            candidates.extend(scan(scope, dir, progress)?);
        }
        anyhow::Ok(())
    })?;
    if args.json {
        let out = serde_json::json!({"scanned": scanned, "candidates": candidates});
        outln!("{}", serde_json::to_string_pretty(&out)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    // Candidate names, entries and problems come from the scanned directories (the project is
    // the untrusted repository): every line is escaped for the terminal.
    let line = |text: String| outln!("{}", escape_controls(&text));
    for (scope, dir) in &places {
        let state = if dir.is_dir() { "" } else { " (absent)" };
        line(format!("scanned {scope}: {}{state}", dir.display()))?;
    }
    if candidates.is_empty() {
        outln!("no candidates: pi would auto-discover nothing here")?;
    }
    for c in &candidates {
        line(format!("{} {} ({})", c.scope, c.path.display(), c.shape))?;
        match &c.class {
            Some(PluginClass::Pi(pi)) => line(format!(
                "  pi extension ({}): {}",
                pi.rule,
                pi.entries.join(", ")
            ))?,
            Some(PluginClass::Claude(cl)) => line(format!("  claude plugin {:?}", cl.name))?,
            Some(PluginClass::Codex(cx)) => line(format!("  codex plugin {:?}", cx.name))?,
            Some(PluginClass::Opencode(o)) => {
                line(format!("  opencode plugin: {}", o.entries.join(", ")))?
            }
            None => {}
        }
        if let Some(sha) = &c.sha256 {
            line(format!("  sha256 {sha}"))?;
        }
        if let Some(p) = &c.problem {
            line(format!("  not enabled as is: {p}"))?;
        }
        if let Some(e) = &c.harness_entry {
            outln!("  enable by vendoring it next to your harness and adding:")?;
            outln!("    plugins:")?;
            line(format!("      - {e}"))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn default_agent_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("PI_CODING_AGENT_DIR") {
        return Some(PathBuf::from(dir));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pi").join("agent"))
}

/// Lists pi's one-level candidates in `dir` (missing dir: none). Dot entries and
/// `node_modules` are skipped, as pi does.
fn scan(
    scope: &'static str,
    dir: &Path,
    progress: Option<&HashProgress>,
) -> anyhow::Result<Vec<Candidate>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(anyhow::anyhow!("{}: {e}", dir.display())),
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            !name.starts_with('.') && name != "node_modules"
        })
        .collect();
    paths.sort();
    let mut out = Vec::new();
    for path in paths {
        let meta = std::fs::symlink_metadata(&path)?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if meta.is_dir() {
            let (class, problem) = match plugin_format::classify(&path) {
                Ok(c) => (Some(c), None),
                Err(e) => (None, Some(e.to_string())),
            };
            let (sha256, hash_problem) =
                match tree_hash::hash_tree_watched(&path, TreeFormat::PiTreeV1, progress) {
                    Ok(d) => (Some(d.sha256), None),
                    Err(e) => (None, Some(e.to_string())),
                };
            let problem = problem.or(hash_problem);
            out.push(Candidate {
                scope,
                harness_entry: problem.is_none().then(|| format!("plugins/{name}")),
                path,
                shape: "directory",
                class,
                sha256,
                problem,
            });
        } else if meta.is_file() && (name.ends_with(".ts") || name.ends_with(".js")) {
            let sha256 = tree_hash::sha256_file_watched(&path, progress)
                .ok()
                .map(|r| r.sha256);
            out.push(Candidate {
                scope,
                path,
                shape: "file",
                class: None,
                sha256,
                problem: Some(
                    "a single-file extension: harness plugins are directories; move it into a directory as index.ts (or index.js)"
                        .to_string(),
                ),
                harness_entry: None,
            });
        } else if meta.file_type().is_symlink() {
            out.push(Candidate {
                scope,
                path,
                shape: "symlink",
                class: None,
                sha256: None,
                problem: Some(
                    "a symlink: pitcrew verifies real directories only; vendor the target"
                        .to_string(),
                ),
                harness_entry: None,
            });
        }
    }
    Ok(out)
}
