//! The command-line edge: `--result-fd`, and a bad manifest still producing a record (125).

mod common;
use common::{bin, require_root_and_namespaces, Sandbox};
use std::process::Command;

#[test]
fn result_goes_to_an_inherited_fd() {
    if !require_root_and_namespaces() {
        return;
    }
    let sandbox = Sandbox::sh("exit 4");
    let (manifest, result) = sandbox.write_manifest();
    let script = format!(
        "exec 3>{}; exec unshare --pid --fork --mount-proc {} run --manifest {} --result-fd 3",
        result.display(),
        bin(),
        manifest.display()
    );
    let out = Command::new("sh")
        .args(["-c", &script])
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(4),
        "stderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&result).expect("record")).expect("json");
    assert_eq!(record["exit_code"], 4);
}

#[test]
fn bad_manifest_is_125_with_a_record() {
    if !require_root_and_namespaces() {
        return;
    }
    let mut sandbox = Sandbox::sh("exit 0");
    sandbox.manifest["version"] = 99.into();
    let run = sandbox.run_pid1();
    assert_eq!(run.code, 125, "stderr:\n{}", run.stderr);
    assert!(
        run.record["reason"]
            .as_str()
            .unwrap_or("")
            .starts_with("manifest-invalid:"),
        "{}",
        run.record
    );
    assert!(run.record["agent"].is_null());
}
