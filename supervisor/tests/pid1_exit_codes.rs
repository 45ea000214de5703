//! Exit codes pass through pitcrew-init as PID 1: every code 0..=255, and 128+n for an agent
//! killed by signal n (tini's and dumb-init's exit-status tests).

mod common;
use common::{require_root_and_namespaces, Sandbox};
use serde_json::Value;

#[test]
fn every_exit_code_passes_through() {
    if !require_root_and_namespaces() {
        return;
    }
    // Four workers over the 256 codes keep the test quick on two cores.
    let workers: Vec<_> = (0..4)
        .map(|w| {
            std::thread::spawn(move || {
                for code in (0..=255).filter(|c| c % 4 == w) {
                    let sandbox = Sandbox::sh(&format!("exit {code}"));
                    let run = sandbox.run_pid1();
                    assert_eq!(
                        run.code, code,
                        "process exit for {code}; stderr:\n{}",
                        run.stderr
                    );
                    assert_eq!(run.record["exit_code"], code, "record for {code}");
                    assert!(
                        run.record["reason"].is_null(),
                        "an agent's own code has no reason: {}",
                        run.record
                    );
                    assert_eq!(run.record["supervisor"]["mode"], "pid1");
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("worker");
    }
}

#[test]
fn self_killed_agent_exits_128_plus_signal() {
    if !require_root_and_namespaces() {
        return;
    }
    for (name, signo) in [
        ("TERM", 15),
        ("INT", 2),
        ("HUP", 1),
        ("QUIT", 3),
        ("USR2", 12),
        ("KILL", 9),
    ] {
        let sandbox = Sandbox::sh(&format!("kill -s {name} $$; sleep 5; exit 99"));
        let run = sandbox.run_pid1();
        assert_eq!(run.code, 128 + signo, "SIG{name}; stderr:\n{}", run.stderr);
        assert_eq!(run.record["exit_code"], 128 + signo);
        assert_eq!(run.record["signal"], format!("SIG{name}"));
        assert_eq!(run.record["meaning"], format!("agent killed by SIG{name}"));
    }
    // SIGUSR1 is the one signal the agent's tree may not send (it opens Node's inspector in a
    // Node runtime): the agent's own `kill` fails and it goes on.
    let sandbox = Sandbox::sh("kill -s USR1 $$ || exit 77; exit 99");
    let run = sandbox.run_pid1();
    assert_eq!(run.code, 77, "stderr:\n{}", run.stderr);
    assert_eq!(run.record["signal"], Value::Null);
}
