//! Runtime configuration the agent's runtime reads from the workspace, unverified.
//!
//! The workspace persists across iterations and holds an untrusted repository, so nothing in it
//! is pinned. Most of what a runtime would read from it as configuration is switched off by the
//! flags pitcrew passes: pi's `--no-extensions` drops `.pi/extensions/` and the extensions a
//! project `.pi/settings.json` lists, and Claude Code's `--setting-sources user` ignores
//! `.claude/settings*.json` and `.mcp.json` (both tested with the real agents). What no flag
//! switches off is reported instead, per iteration, in the result record: pi 0.73 merges
//! `<workdir>/.pi/settings.json` into its settings (`shellPath`, `shellCommandPrefix`, `packages`
//! skills, …), with the agent's own uid and confinement.

use crate::manifest::{Manifest, Runtime};
use std::path::Path;

/// Paths relative to the workdir that `runtime` reads as configuration with no flag to stop it.
fn unswitchable(runtime: Runtime) -> &'static [&'static str] {
    match runtime {
        Runtime::Pi => &[".pi/settings.json"],
        Runtime::Claude | Runtime::Command => &[],
    }
}

/// Which of the runtime's unswitchable workspace configuration files exist in `manifest`'s
/// workdir (anything at the path counts, a symlink too; nothing is followed or read).
pub fn present(manifest: &Manifest) -> Vec<String> {
    let workdir = Path::new(&manifest.workdir);
    unswitchable(manifest.runtime)
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
        assert!(present(&manifest("pi", ws)).is_empty());
        std::fs::create_dir_all(ws.join(".pi")).unwrap();
        std::fs::create_dir_all(ws.join(".claude")).unwrap();
        std::fs::write(ws.join(".claude/settings.json"), "{}").unwrap();
        // A dangling symlink counts: pi would try to read it.
        std::os::unix::fs::symlink("/nonexistent", ws.join(".pi/settings.json")).unwrap();
        assert_eq!(present(&manifest("pi", ws)), [".pi/settings.json"]);
        assert!(present(&manifest("claude", ws)).is_empty());
    }
}
