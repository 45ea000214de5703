//! Unit tests of `sandbox::confine`.

use super::*;

#[test]
fn under_checks_whole_components() {
    assert!(is_under("/work/a", "/work"));
    assert!(is_under("/work", "/work/"));
    assert!(!is_under("/workshop", "/work"));
    assert!(is_under("/anything", "/"));
}

fn manifest(landlock: &str, plugin: &str) -> Manifest {
    let tree = serde_json::json!({
        "name": "p", "path": plugin, "role": "plugin", "kind": "pi-extension",
        "format": "pi-tree-v1", "sha256": "0".repeat(64), "entries": ["index.ts"],
    });
    let v = serde_json::json!({
        "version": 1, "runtime": "command", "agent": {"binary": "/bin/true"},
        "workdir": "/sandbox/work", "dirs": {"home": "/sandbox/home"},
        "trees": [tree], "confinement": {"landlock": landlock},
    });
    Manifest::from_json(v.to_string().as_bytes()).unwrap()
}

#[test]
fn the_unprivileged_mode_requires_landlock_and_keeps_verified_files_read_only() {
    if !pitcrew_test_support::prerequisite(
        kernel_landlock_abi() >= LANDLOCK_ABI as u32,
        "needs a kernel with Landlock ABI 6 (Linux 6.12) enabled",
    ) {
        return;
    }
    let records = [std::path::PathBuf::from("/sandbox-records")];
    let unprivileged = SupervisorMode::Unprivileged;
    let plan = |mode, withheld: &[&str]| LandlockPlan {
        mode,
        withheld: withheld.iter().map(|w| w.to_string()).collect(),
    };
    // Elsewhere the manifest's mode stands.
    let m = manifest("best-effort", "/sandbox/plugins/p");
    assert_eq!(
        landlock_plan(&m, &m.runtime_dirs(), SupervisorMode::Pid1, &records),
        Ok(plan(LandlockMode::BestEffort, &[]))
    );
    let off = manifest("off", "/sandbox/plugins/p");
    assert_eq!(
        landlock_plan(&off, &off.runtime_dirs(), SupervisorMode::Pid1, &records),
        Ok(plan(LandlockMode::Off, &[]))
    );
    // Unprivileged: best effort becomes required; off is refused.
    assert_eq!(
        landlock_plan(&m, &m.runtime_dirs(), unprivileged, &records),
        Ok(plan(LandlockMode::Required, &[]))
    );
    let err = landlock_plan(&off, &off.runtime_dirs(), unprivileged, &records).unwrap_err();
    assert!(err.contains("landlock: off is refused"), "{err}");
    // A verified tree in the agent's home: the home is withheld (read-only).
    let home = manifest("required", "/sandbox/home/p");
    assert_eq!(
        landlock_plan(&home, &home.runtime_dirs(), unprivileged, &records),
        Ok(plan(LandlockMode::Required, &["/sandbox/home"]))
    );
    // In the workdir: refused (the workdir is what the agent works in).
    let work = manifest("required", "/sandbox/work/p");
    let err = landlock_plan(&work, &work.runtime_dirs(), unprivileged, &records).unwrap_err();
    assert!(
        err.contains("/sandbox/work/p (under /sandbox/work)"),
        "{err}"
    );
    // Records inside a writable root, and a writable root inside the records.
    for own in ["/sandbox/work/.records", "/sandbox"] {
        let err = landlock_plan(&m, &m.runtime_dirs(), unprivileged, &[own.into()]).unwrap_err();
        assert!(err.contains(&format!("supervisor's {own}")), "{err}");
    }
}
