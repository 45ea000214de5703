//! Nothing survives an iteration: orphans, a `setsid` double-forked daemon and a process that
//! ignores SIGTERM are killed before the agent starts and after it ends; simultaneous exits
//! do not hang the reaper; without PID 1 (degraded mode) the supervisor still reaps its own
//! descendants.
#![allow(non_snake_case)] // attack tests are named attack_<class>__<case> (scripts/security-report)

mod common;
use common::{processes_matching, require_root_and_namespaces, unique_seconds, Sandbox};

/// Shell that leaves behind 100 orphaned sleeps, a `setsid` double-forked daemon, a shell that
/// ignores SIGTERM and a shell that writes `$M/marker` on SIGTERM; `$T` is the sleep duration
/// (a token to find them by), `$M` a directory they may write. Waits until the traps are set.
const LEFTOVERS: &str = r#"
i=0; while [ $i -lt 100 ]; do (sleep $T &) ; i=$((i+1)); done
setsid sh -c "sleep $T & exit 0" &
sh -c "trap '' TERM; touch $M/ignorer-ready; while :; do sleep 0.05; done" &
sh -c "trap 'echo term >> $M/marker; exit 0' TERM; touch $M/marker-ready; while :; do sleep 0.05; done" &
while [ ! -e $M/ignorer-ready ] || [ ! -e $M/marker-ready ]; do sleep 0.01; done
"#;

fn no_survivors(token: u32) {
    let left = processes_matching(&format!("sleep {token}"));
    assert!(left.is_empty(), "survivors: {left:?}");
}

#[test]
fn attack_leftovers__processes_the_agent_leaves_are_reaped_before_exit() {
    if !require_root_and_namespaces() {
        return;
    }
    let token = unique_seconds();
    let sandbox = Sandbox::sh(&format!("T={token}; M=$W; {LEFTOVERS} exit 0"));
    let run = sandbox.run_pid1();
    assert_eq!(run.code, 0, "stderr:\n{}", run.stderr);
    let after = run.record["reaped"]["after"].as_u64().unwrap_or(0);
    assert!(after >= 103, "reaped.after = {after}: {}", run.record);
    assert_eq!(run.record["reaped"]["remaining_after"], 0);
    // The marker proves the final reap's SIGTERM came from pitcrew-init before it exited: at
    // namespace teardown the kernel sends SIGKILL, which writes nothing.
    let marker = std::fs::read_to_string(sandbox.workdir.join("marker")).unwrap_or_default();
    assert_eq!(marker, "term\n");
    no_survivors(token);
}

#[test]
fn attack_leftovers__daemons_and_term_ignoring_processes_are_gone_before_launch() {
    if !require_root_and_namespaces() {
        return;
    }
    let token = unique_seconds();
    // The agent checks /proc: only PID 1 and itself may exist.
    let mut sandbox = Sandbox::sh("");
    sandbox.manifest["agent"] = serde_json::json!({
        "binary": "/usr/bin/python3",
        "args": ["-c", "import os,sys\n\
    pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n\
    others = [p for p in pids if p not in (1, os.getpid())]\n\
    print(others, file=sys.stderr)\n\
    sys.exit(1 if others else 0)"],
    });
    let prelude = format!("T={token}; M={}; {LEFTOVERS}", sandbox.path("").display());
    let run = sandbox.run_pid1_after(&prelude);
    assert_eq!(
        run.code, 0,
        "the agent saw other processes; stderr:\n{}",
        run.stderr
    );
    let before = run.record["reaped"]["before"].as_u64().unwrap_or(0);
    assert!(before >= 102, "reaped.before = {before}: {}", run.record);
    assert_eq!(run.record["supervisor"]["pid1"], true);
    no_survivors(token);
}

#[test]
fn simultaneous_exits_do_not_hang_the_reaper() {
    if !require_root_and_namespaces() {
        return;
    }
    // The agent and 50 children wait for the same file, then all exit at once. Repeated to give
    // coalesced SIGCHLDs a chance; nextest's timeout bounds a hang.
    for round in 0..5 {
        let run = Sandbox::sh(
            "i=0; while [ $i -lt 50 ]; do (while [ ! -e $W/go ]; do :; done; exit 0) & i=$((i+1)); done; \
             touch $W/go; exit 3",
        )
        .run_pid1();
        assert_eq!(run.code, 3, "round {round}; stderr:\n{}", run.stderr);
    }
}

#[test]
fn degraded_mode_still_reaps_its_own_descendants() {
    if !require_root_and_namespaces() {
        return;
    }
    let token = unique_seconds();
    let sandbox = Sandbox::sh(&format!("T={token}; M=$W; {LEFTOVERS} exit 5"));
    let run = sandbox.run_plain();
    assert_eq!(run.code, 5, "stderr:\n{}", run.stderr);
    assert_eq!(run.record["supervisor"]["mode"], "degraded");
    assert_eq!(run.record["supervisor"]["pid1"], false);
    assert!(run.record["supervisor"]["degraded_reason"].is_string());
    let after = run.record["reaped"]["after"].as_u64().unwrap_or(0);
    assert!(after >= 103, "reaped.after = {after}: {}", run.record);
    // Outside a PID namespace nobody else would kill them: they must be gone already.
    no_survivors(token);
    let marker = std::fs::read_to_string(sandbox.workdir.join("marker")).unwrap_or_default();
    assert_eq!(marker, "term\n");
}
