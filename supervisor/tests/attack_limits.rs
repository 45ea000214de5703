//! Resource limits the agent cannot exceed, played from the agent's side: a fork bomb stops at
//! `limits.processes` while the supervisor keeps serving, memory past `limits.memory_bytes`
//! kills only the agent's tree, another sandbox of the same uid takes nothing from this one's
//! limits, the agent cannot leave its cgroup, and it writes no core file.
//!
//! These run as root on a host with writable cgroup v1 `memory` and `pids` hierarchies, where
//! each iteration's tree gets cgroups of its own; the rlimit fallback is played with
//! `--agent-cgroup off`.
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
    let limits = &run.record["confinement"]["limits"];
    assert_eq!(limits["processes"]["limit"], 40, "{limits:#}");
    assert_eq!(
        limits["processes"]["enforced_by"], "cgroup-v1",
        "{limits:#}"
    );
    assert!(
        limits["processes"]["refused_forks"].as_u64() >= Some(1),
        "{limits:#}"
    );
    assert!(
        limits["processes"]["peak"].as_u64() <= Some(40),
        "{limits:#}"
    );
    assert_eq!(limits["core"], 0, "{limits:#}");
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

/// A Python agent that allocates (and touches) `mib` MiB and says how far it got.
fn hog(mib: u32) -> String {
    format!(
        concat!(
            "exec python3 -c '\n",
            "held = []\n",
            "try:\n",
            "    for i in range({mib}):\n",
            "        held.append(bytearray(1 << 20))\n",
            "    print(\"allocated\", len(held))\n",
            "except MemoryError:\n",
            "    held.clear(); print(\"MemoryError\")\n",
            "'",
        ),
        mib = mib
    )
}

#[test]
fn attack_limits__memory_past_the_limit_kills_only_the_agent_tree() {
    if !require_root_and_namespaces() {
        return;
    }
    let mut sb = Sandbox::sh(&hog(512));
    sb.manifest["limits"]["memory_bytes"] = json!(64 << 20);
    let run = sb.run_pid1();
    // The kernel killed the agent; PID 1 lived to judge and record it.
    assert_eq!(run.code, 128 + 9, "{:#}\n{}", run.record, run.stderr);
    let reason = run.record["reason"].as_str().unwrap_or_default();
    assert!(reason.starts_with("memory-limit: "), "{reason}");
    let memory = &run.record["confinement"]["limits"]["memory"];
    assert_eq!(memory["enforced_by"], "cgroup-v1", "{memory:#}");
    assert_eq!(memory["limit"], 64 << 20, "{memory:#}");
    assert!(memory["oom_kills"].as_u64() >= Some(1), "{memory:#}");
    assert!(memory["peak"].as_u64() <= Some(64 << 20), "{memory:#}");
    // The iteration's cgroup is gone with it.
    let cgroup = memory["cgroup"].as_str().expect("cgroup path");
    assert!(
        !std::path::Path::new(cgroup).exists(),
        "{cgroup} left behind"
    );
}

#[test]
fn attack_limits__without_a_cgroup_each_process_stops_at_the_memory_limit() {
    if !require_root_and_namespaces() {
        return;
    }
    let mut sb = Sandbox::sh(&hog(512));
    sb.manifest["limits"]["memory_bytes"] = json!(64 << 20);
    sb.manifest["output"] = json!({"stdout": sb.path("out.log")});
    let run = sb.run_pid1_with_args(&["--agent-cgroup", "off"]);
    assert_eq!(run.code, 0, "{:#}\n{}", run.record, run.stderr);
    let out = std::fs::read_to_string(sb.path("out.log")).unwrap();
    assert_eq!(out.trim(), "MemoryError");
    let limits = &run.record["confinement"]["limits"];
    assert_eq!(limits["memory"]["enforced_by"], "rlimit-data", "{limits:#}");
    assert_eq!(
        limits["processes"]["enforced_by"], "rlimit-nproc",
        "{limits:#}"
    );
    assert_eq!(
        limits["memory"]["cgroup_unavailable"], "off (--agent-cgroup off)",
        "{limits:#}"
    );
}

#[test]
fn attack_limits__another_sandbox_of_the_same_uid_takes_nothing_from_the_process_limit() {
    if !require_root_and_namespaces() {
        return;
    }
    // Sandbox A (the same agent uid) holds 60 processes until told to stop.
    let a = Sandbox::sh(concat!(
        "for i in $(seq 60); do sleep 60 & done; : > $W/holding; ",
        "i=0; while [ ! -e $W/release ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done",
    ));
    let (child, _result) = a.spawn_pid1();
    let holding = a.workdir.join("holding");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !holding.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(holding.exists(), "sandbox A never held its processes");
    // Sandbox B may have 40: it gets (nearly) all of them, whatever A holds.
    let mut b = Sandbox::sh(concat!(
        "exec python3 -c '\n",
        "import os, time\n",
        "n = 0\n",
        "try:\n",
        "    while n < 100:\n",
        "        if os.fork() == 0:\n",
        "            time.sleep(30); os._exit(0)\n",
        "        n += 1\n",
        "except OSError:\n",
        "    pass\n",
        "print(n)\n",
        "'",
    ));
    b.manifest["limits"]["processes"] = json!(40);
    b.manifest["output"] = json!({"stdout": b.path("out.log")});
    let run = b.run_pid1();
    std::fs::write(a.workdir.join("release"), "").unwrap();
    let a_out = child.wait_with_output().unwrap();
    assert!(a_out.status.success(), "{a_out:?}");
    assert_eq!(run.code, 0, "{:#}\n{}", run.record, run.stderr);
    let forked: u32 = std::fs::read_to_string(b.path("out.log"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The shell and python take two of the 40.
    assert!((30..40).contains(&forked), "forked {forked}");
}

#[test]
fn attack_limits__the_agent_cannot_leave_or_widen_its_cgroup() {
    if !require_root_and_namespaces() {
        return;
    }
    let mut sb = Sandbox::sh(concat!(
        "p=$(sed -n 's/^[0-9]*:pids://p' /proc/self/cgroup); echo \"$p\"; ",
        "echo max > /sys/fs/cgroup/pids$p/pids.max 2>/dev/null && echo raised; ",
        "echo $$ > /sys/fs/cgroup/pids$(dirname \"$p\")/cgroup.procs 2>/dev/null && echo left; ",
        "echo $$ > /sys/fs/cgroup/pids/cgroup.procs 2>/dev/null && echo left-for-root; ",
        "sed -n 's/^[0-9]*:pids://p' /proc/self/cgroup",
    ));
    sb.manifest["output"] = json!({"stdout": sb.path("out.log")});
    let run = sb.run_pid1();
    assert_eq!(run.code, 0, "{:#}\n{}", run.record, run.stderr);
    let out = std::fs::read_to_string(sb.path("out.log")).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert_eq!(lines[0], lines[1], "{out}");
    assert!(
        lines[0].contains("/pitcrew-"),
        "not in a cgroup of its own: {out}"
    );
}

#[test]
fn attack_limits__tcp_buffers_count_against_the_memory_limit() {
    if !require_root_and_namespaces() {
        return;
    }
    // Loopback connections whose both ends fill their send and receive buffers and hold them:
    // kernel memory a process's own size does not show. 200 pairs queue well over 1 GiB when
    // nothing counts them.
    let mut sb = Sandbox::sh(concat!(
        "exec python3 -c '\n",
        "import socket\n",
        "l = socket.socket(); l.bind((\"127.0.0.1\", 0)); l.listen(512)\n",
        "held = []; queued = 0; chunk = b\"x\" * 65536\n",
        "try:\n",
        "    for i in range(200):\n",
        "        c = socket.create_connection(l.getsockname()); s, _ = l.accept()\n",
        "        for x in (c, s):\n",
        "            x.setblocking(False)\n",
        "            try:\n",
        "                while True: queued += x.send(chunk)\n",
        "            except (BlockingIOError, OSError): pass\n",
        "        held.append((c, s))\n",
        "except OSError: pass\n",
        "print(queued >> 20)\n",
        "'",
    ));
    sb.manifest["limits"]["memory_bytes"] = json!(64 << 20);
    sb.manifest["output"] = json!({"stdout": sb.path("out.log")});
    let run = sb.run_pid1();
    let memory = &run.record["confinement"]["limits"]["memory"];
    assert_eq!(memory["enforced_by"], "cgroup-v1", "{memory:#}");
    // Either the tree was stopped at the limit, or the sends were refused there.
    let out = std::fs::read_to_string(sb.path("out.log")).unwrap_or_default();
    if run.code == 0 {
        // Unbounded, this loop queues about 1.5 GiB; the kernel enforces a cgroup's TCP limit
        // under memory pressure, a little past the line.
        let queued_mib: u64 = out.trim().parse().expect("queued MiB");
        assert!(
            queued_mib <= 128,
            "queued {queued_mib} MiB under a 64 MiB limit"
        );
    } else {
        assert!(memory["oom_kills"].as_u64() >= Some(1), "{:#}", run.record);
    }
}
