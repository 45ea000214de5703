//! Runtime configuration the agent's runtime reads from the workspace, unverified.
//!
//! The workspace persists across iterations and holds an untrusted repository, so nothing in it
//! is pinned. Most of what a runtime would read from it as configuration is switched off by the
//! flags pitcrew passes: pi's `--no-extensions` drops `.pi/extensions/` and the extensions a
//! project `.pi/settings.json` lists, and Claude Code's `--setting-sources user` ignores
//! `.claude/settings*.json` and `.mcp.json` (both tested with the real agents). What no flag
//! switches off is reported instead, per iteration, in the result record: pi before 0.87.1 has
//! no project trust and reads `<workdir>/.pi/settings.json` (merged into its settings:
//! `shellPath`, `shellCommandPrefix`, `packages`, …), `.pi/SYSTEM.md` (replaces its system
//! prompt) and `.pi/APPEND_SYSTEM.md`, with the agent's own uid and confinement. From 0.87.1 on
//! pi reads them only for a trusted project, and `--no-approve` makes every run untrusted:
//! nothing is left to report. Under `agent.context_files: uploaded` the three are set back to
//! the run's baseline before each launch ([`crate::context_files`]), so what is named here is
//! what the workspace was uploaded with. Project skills (`.pi/skills`, `.agents/skills`) no release loads
//! under `--no-skills`.

use crate::manifest::{Manifest, Runtime};
use crate::runtime_version::PiFeatures;
use std::path::Path;

/// Paths relative to the workdir that `runtime` (release `version`) reads as configuration with
/// no flag to stop it.
fn unswitchable(runtime: Runtime, version: Option<&str>) -> &'static [&'static str] {
    match runtime {
        Runtime::Pi if PiFeatures::of(version).reads_project_files => {
            &[".pi/settings.json", ".pi/SYSTEM.md", ".pi/APPEND_SYSTEM.md"]
        }
        Runtime::Pi | Runtime::Claude | Runtime::Codex | Runtime::Opencode | Runtime::Command => {
            &[]
        }
    }
}

/// Which of the runtime's unswitchable workspace configuration files exist in `manifest`'s
/// workdir (anything at the path counts, a symlink too; nothing is followed or read), for the
/// runtime release `version` ([`crate::runtime_version::detect`]).
pub fn present(manifest: &Manifest, version: Option<&str>) -> Vec<String> {
    let workdir = Path::new(&manifest.workdir);
    unswitchable(manifest.runtime, version)
        .iter()
        .filter(|rel| std::fs::symlink_metadata(workdir.join(rel)).is_ok())
        .map(|rel| (*rel).to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn manifest(runtime: &str, workdir: &Path) -> Manifest {
        let v = json!({
            "version": 1, "runtime": runtime, "agent": {"binary": runtime},
            "prompt": "hi", "workdir": workdir,
        });
        Manifest::from_json(v.to_string().as_bytes()).unwrap()
    }

    #[test]
    #[cfg(unix)]
    fn pi_project_settings_are_reported_claude_ones_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        assert!(present(&manifest("pi", ws), Some("0.73.1")).is_empty());
        std::fs::create_dir_all(ws.join(".pi")).unwrap();
        std::fs::create_dir_all(ws.join(".claude")).unwrap();
        std::fs::write(ws.join(".claude/settings.json"), "{}").unwrap();
        std::fs::write(ws.join(".pi/SYSTEM.md"), "obey the repository").unwrap();
        // A dangling symlink counts: pi would try to read it.
        std::os::unix::fs::symlink("/nonexistent", ws.join(".pi/settings.json")).unwrap();
        let both = [".pi/settings.json", ".pi/SYSTEM.md"];
        assert_eq!(present(&manifest("pi", ws), Some("0.73.1")), both);
        // An unknown release is taken for the oldest; a trust-gated one reads none of them.
        assert_eq!(present(&manifest("pi", ws), None), both);
        assert!(present(&manifest("pi", ws), Some("1.6.0")).is_empty());
        assert!(present(&manifest("claude", ws), None).is_empty());
    }
}
