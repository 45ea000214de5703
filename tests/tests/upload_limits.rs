//! A harness's `upload_limits` reach the supervisor of the sandbox `pitcrew run` starts (its
//! `serve --upload-max-*`), and a kept sandbox's own limits are checked before anything is sent
//! to it, with what to change named.
//!
//! Needs root and PID namespaces; skipped otherwise, or a failure with `PITCREW_REQUIRE_E2E=1`.

use pitcrew_e2e::{pitcrew_run, require_pid_namespaces, LocalFixture};
use std::fs;

#[test]
fn a_sandbox_keeps_the_upload_limits_its_harness_started_it_with() {
    if !require_pid_namespaces() {
        return;
    }
    let fixture = LocalFixture::new("true", 1, "upload_limits: {entries: 40}\n", false);
    let doc = pitcrew_run(&fixture.harness, &fixture.state, &["--keep"], &[]);
    let sandbox = doc["sandbox"].as_str().expect("sandbox id").to_string();
    // The same harness without the key (the default, 100000, passes validate), its workspace
    // now of 50 entries: the kept sandbox's supervisor was started with 40.
    for i in 0..50 {
        fs::write(fixture.root.join(format!("workspace/f{i}")), "x\n").unwrap();
    }
    let text = fs::read_to_string(&fixture.harness).unwrap();
    fs::write(
        &fixture.harness,
        text.replace("upload_limits: {entries: 40}\n", ""),
    )
    .unwrap();
    let harness = fixture.harness.to_str().unwrap_or_default();
    let out = fixture.output(&["run", harness, "--sandbox", &sandbox, "--keep"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("more than 40 entries") && stderr.contains("upload_limits.entries"),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was uploaded"), "{stderr}");
    // A new sandbox gets the default, which holds the grown workspace.
    let down = fixture.output(&["down", &sandbox]);
    assert!(
        down.status.success(),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
    pitcrew_run(&fixture.harness, &fixture.state, &[], &[]);
}
