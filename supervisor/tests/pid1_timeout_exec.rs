//! The timeout (TERM to the agent's group, grace, KILL) and exec failures (127/126, nothing
//! launched).

mod common;
use common::{require_root_and_namespaces, Sandbox};
use std::os::unix::fs::PermissionsExt;

fn with_timeout(script: &str, timeout_ms: u64) -> Sandbox {
    let mut sandbox = Sandbox::sh(script);
    sandbox.manifest["limits"]["timeout_ms"] = timeout_ms.into();
    sandbox
}

#[test]
fn timeout_terminates_the_agent_with_sigterm() {
    if !require_root_and_namespaces() {
        return;
    }
    let run = with_timeout("exec sleep 1000", 500).run_pid1();
    assert_eq!(run.code, 143, "stderr:\n{}", run.stderr);
    assert_eq!(run.record["agent"]["timed_out"], true);
    assert_eq!(run.record["signal"], "SIGTERM");
    assert!(
        run.record["reason"]
            .as_str()
            .unwrap_or("")
            .starts_with("timeout:"),
        "{}",
        run.record
    );
}

#[test]
fn timeout_kills_an_agent_that_ignores_sigterm() {
    if !require_root_and_namespaces() {
        return;
    }
    let run = with_timeout("trap '' TERM; while :; do sleep 0.1; done", 500).run_pid1();
    assert_eq!(run.code, 137, "stderr:\n{}", run.stderr);
    assert_eq!(run.record["agent"]["timed_out"], true);
    assert_eq!(run.record["signal"], "SIGKILL");
}

#[test]
fn missing_binary_is_127_and_nothing_runs() {
    if !require_root_and_namespaces() {
        return;
    }
    let mut sandbox = Sandbox::sh("");
    sandbox.manifest["agent"] = serde_json::json!({"binary": "/nonexistent/pitcrew-agent"});
    let run = sandbox.run_pid1();
    assert_eq!(run.code, 127, "stderr:\n{}", run.stderr);
    assert_eq!(run.record["exit_code"], 127);
    assert!(
        run.record["reason"]
            .as_str()
            .is_some_and(|r| r.contains("/nonexistent/pitcrew-agent")),
        "{}",
        run.record
    );
    assert!(
        run.record["agent"].is_null(),
        "nothing was launched: {}",
        run.record
    );
}

#[test]
fn non_executable_binary_is_126_and_nothing_runs() {
    if !require_root_and_namespaces() {
        return;
    }
    let mut sandbox = Sandbox::sh("");
    let agent = sandbox.path("agent.sh");
    std::fs::write(&agent, "#!/bin/sh\nexit 0\n").expect("write agent");
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    sandbox.manifest["agent"] = serde_json::json!({"binary": agent});
    let run = sandbox.run_pid1();
    assert_eq!(run.code, 126, "stderr:\n{}", run.stderr);
    assert!(
        run.record["reason"]
            .as_str()
            .is_some_and(|r| r.contains("agent.sh")),
        "{}",
        run.record
    );
    assert!(
        run.record["agent"].is_null(),
        "nothing was launched: {}",
        run.record
    );
}
