//! Resource limits the agent cannot exceed, played from the agent's side: a fork bomb stops at
//! `limits.processes` (`RLIMIT_NPROC` of the agent's uid) while the supervisor keeps serving, and
//! the agent writes no core file.
#![allow(non_snake_case)] // attack tests are named attack_<class>__<case> (scripts/security-report)
#![allow(missing_docs)]

mod common;

use common::server::Server;
use common::{require_root_and_namespaces, Sandbox};
use pitcrew_core::protocol::FrameKind;
use serde_json::{json, Value};

#[test]
fn attack_limits__forks_stop_at_the_process_limit() {
    if !require_root_and_namespaces() {
        return;
    }
    // Count the children the agent can have at once, then report the error that stopped it.
    let mut sb = Sandbox::sh(concat!(
        "exec python3 -c '\n",
        "import os, errno, time\n",
        "n = 0\n",
        "try:\n",
        "    while n < 1000:\n",
        "        if os.fork() == 0:\n",
        "            time.sleep(30); os._exit(0)\n",
        "        n += 1\n",
        "    print(\"no-limit\", n)\n",
        "except OSError as e:\n",
        "    print(errno.errorcode[e.errno], n)\n",
        "'",
    ));
    sb.manifest["limits"]["processes"] = json!(40);
    sb.manifest["output"] = json!({"stdout": sb.path("out.log")});
    let run = sb.run_pid1();
    assert_eq!(run.code, 0, "{:#}\n{}", run.record, run.stderr);
    let out = std::fs::read_to_string(sb.path("out.log")).unwrap();
    let (error, forked) = out.trim().split_once(' ').expect("two words");
    assert_eq!(error, "EAGAIN", "{out}");
    let forked: u32 = forked.parse().unwrap();
    assert!(forked < 40, "{out}");
    assert_eq!(
        run.record["confinement"]["rlimits"],
        json!({"processes": 40, "core": 0}),
        "{:#}",
        run.record
    );
    // Every child was killed by the final reap.
    assert!(run.record["reaped"]["after"].as_u64() >= Some(u64::from(forked)));
}

/// Reads frames until the `result` of the running iteration.
fn result_of(c: &mut common::server::Client) -> Value {
    loop {
        let frame = c.recv().expect("frame before the result");
        if frame.kind == FrameKind::Control {
            let v: Value = serde_json::from_slice(&frame.payload).unwrap();
            if v["type"] == "result" {
                return v;
            }
        }
    }
}

#[test]
fn attack_limits__a_fork_bomb_leaves_the_supervisor_serving() {
    if !require_root_and_namespaces() {
        return;
    }
    let server = Server::start();
    let mut sb = Sandbox::sh("echo ready; b() { b | b & }; b; sleep 1000");
    sb.manifest["limits"]["processes"] = json!(200);
    sb.manifest["limits"]["timeout_ms"] = json!(3_000);
    let mut c = server.connect();
    let r = c.request(json!({"type": "set_manifest", "manifest": sb.manifest}));
    assert_eq!(r["type"], "ok", "{r}");
    c.send(json!({"type": "run"}));
    // While the bomb runs, another host connection is answered.
    let status = server.connect().request(json!({"type": "status"}));
    assert_eq!(status["type"], "status", "{status}");
    let result = result_of(&mut c);
    let record = &result["record"];
    assert_eq!(record["exit_code"], 143, "{record:#}");
    assert_eq!(record["reaped"]["remaining_after"], 0, "{record:#}");
    // The next iteration finds nothing of the bomb and runs.
    let mut next = Sandbox::sh("exit 7");
    next.manifest["workdir"] = sb.manifest["workdir"].clone();
    let r = c.request(json!({"type": "set_manifest", "manifest": next.manifest}));
    assert_eq!(r["type"], "ok", "{r}");
    c.send(json!({"type": "run"}));
    let result = result_of(&mut c);
    assert_eq!(result["record"]["exit_code"], 7, "{result:#}");
    assert_eq!(result["record"]["reaped"]["before"], 0, "{result:#}");
}

#[test]
fn attack_limits__a_crashing_agent_leaves_no_core_file() {
    if !require_root_and_namespaces() {
        return;
    }
    // RLIMIT_CORE is 0 and cannot be raised back by the agent.
    let sb = Sandbox::sh(
        "ulimit -c unlimited 2>/dev/null && exit 3; ulimit -c > $W/core-limit; kill -s SEGV $$",
    );
    let run = sb.run_pid1();
    assert_eq!(run.code, 128 + 11, "{:#}\n{}", run.record, run.stderr);
    assert_eq!(
        std::fs::read_to_string(sb.workdir.join("core-limit")).unwrap(),
        "0\n"
    );
    let cores: Vec<_> = std::fs::read_dir(&sb.workdir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("core"))
        .filter(|e| e.file_name() != "core-limit")
        .collect();
    assert!(cores.is_empty(), "{cores:?}");
}
