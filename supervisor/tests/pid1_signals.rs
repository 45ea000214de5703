//! Every forwardable signal sent to pitcrew-init (from outside its PID namespace) reaches the
//! agent (dumb-init's `print_signals` test).

mod common;
use common::{busy_wait, pid1_of, require_root_and_namespaces, Sandbox};
use std::time::Duration;

const AGENT: &str = r#"
import os, signal, sys, time
work = sys.argv[1]
log = open(os.path.join(work, "signals.log"), "a", buffering=1)
def record(signo, frame):
    log.write(f"{signo}\n")
nums = [int(n) for n in sys.argv[2].split(",")]
for n in nums:
    signal.signal(n, record)
open(os.path.join(work, "ready"), "w").close()
while not os.path.exists(os.path.join(work, "stop")):
    time.sleep(0.01)
"#;

fn received(sandbox: &Sandbox) -> Vec<i32> {
    std::fs::read_to_string(sandbox.workdir.join("signals.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

#[test]
fn forwardable_signals_reach_the_agent() {
    if !require_root_and_namespaces() {
        return;
    }
    let rtmin = libc::SIGRTMIN();
    let rtmax = libc::SIGRTMAX();
    let signals = [
        libc::SIGHUP,
        libc::SIGINT,
        libc::SIGQUIT,
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGTERM,
        libc::SIGWINCH,
        libc::SIGALRM,
        libc::SIGCONT,
        libc::SIGTSTP,
        rtmin,
        rtmin + 3,
        rtmax,
    ];
    let mut sandbox = Sandbox::sh("");
    let script = sandbox.path("agent.py");
    std::fs::write(&script, AGENT).expect("write agent");
    let list = signals
        .iter()
        .map(i32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    sandbox.manifest["agent"] = serde_json::json!({
        "binary": "/usr/bin/python3",
        "args": [script, sandbox.workdir, list],
    });
    let (child, result) = sandbox.spawn_pid1();
    let unshare = child.id();
    let mut pid1 = None;
    assert!(
        busy_wait(
            || {
                pid1 = pid1_of(unshare);
                pid1.is_some()
            },
            Duration::from_secs(10)
        ),
        "pitcrew-init did not start"
    );
    let pid1 = pid1.unwrap_or_default();
    assert!(
        busy_wait(
            || sandbox.workdir.join("ready").exists(),
            Duration::from_secs(20)
        ),
        "agent did not get ready"
    );
    for (i, &signo) in signals.iter().enumerate() {
        // SAFETY: kill takes plain integers.
        assert_eq!(unsafe { libc::kill(pid1, signo) }, 0, "kill {signo}");
        assert!(
            busy_wait(|| received(&sandbox).len() > i, Duration::from_secs(10)),
            "signal {signo} did not reach the agent; got {:?}",
            received(&sandbox)
        );
        assert_eq!(received(&sandbox)[i], signo);
    }
    std::fs::write(sandbox.workdir.join("stop"), "").expect("stop");
    let out = child.wait_with_output().expect("wait");
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&result).expect("result")).expect("json");
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let forwarded = record["agent"]["forwarded_signals"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(forwarded.len(), signals.len(), "{record}");
    assert_eq!(forwarded[0], "SIGHUP");
    assert_eq!(forwarded[5], "SIGTERM");
}
