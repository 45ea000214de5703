//! Iterations through the real server: streamed events, output and result; a host that
//! disconnects mid-iteration collects the record later; cancel and signal reach the agent;
//! live re-verification shows drift; a flood of stdout neither holds the supervisor past the
//! timeout nor streams without bound; the server runs without glibc's per-thread cache and its
//! agents never see how it got there.
#![allow(non_snake_case)] // attack tests are named attack_<class>__<case> (scripts/security-report)
#![allow(missing_docs)]

mod common;

use common::server::{files_of, Client, Server};
use common::{pid1_of, require_root_and_namespaces, Sandbox};
use pitcrew_core::protocol::{Channel, FrameKind};
use serde_json::{json, Value};
use sha2::Digest;

/// What a `run` streamed until its `result`.
#[derive(Default, Debug)]
struct Streamed {
    events: Vec<Value>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    result: Value,
}

fn read_run(c: &mut Client) -> Streamed {
    let mut s = Streamed::default();
    loop {
        let frame = c.recv().expect("frame before the result");
        match (frame.kind, frame.channel) {
            (FrameKind::Data, Channel::Stdout) => s.stdout.extend(frame.payload),
            (FrameKind::Data, Channel::Stderr) => s.stderr.extend(frame.payload),
            (FrameKind::Control, _) => {
                let v: Value = serde_json::from_slice(&frame.payload).unwrap();
                match v["type"].as_str() {
                    Some("event") => s.events.push(v),
                    Some("result") => {
                        s.result = v;
                        return s;
                    }
                    _ => panic!("unexpected message during run: {v}"),
                }
            }
            _ => {}
        }
    }
}

fn set_manifest(c: &mut Client, manifest: &Value) {
    let r = c.request(json!({"type": "set_manifest", "manifest": manifest}));
    assert_eq!(r["type"], "ok", "{r}");
}

/// A connection on which `manifest` was set and a `run` sent.
fn start_run(server: &Server, manifest: &Value) -> Client {
    let mut c = server.connect();
    set_manifest(&mut c, manifest);
    c.send(json!({"type": "run"}));
    c
}

/// Reads frames until the agent's stdout contains `needle`.
fn wait_for_stdout(c: &mut Client, needle: &str) {
    let mut out = Vec::new();
    while !String::from_utf8_lossy(&out).contains(needle) {
        let frame = c.recv().expect("frame");
        if frame.kind == FrameKind::Data && frame.channel == Channel::Stdout {
            out.extend(frame.payload);
        }
    }
}

#[test]
fn run_streams_events_output_and_the_result() {
    if !require_root_and_namespaces() {
        return;
    }
    let server = Server::start();
    let sb = Sandbox::sh("echo '{\"hello\":1}'; echo oops >&2; mkdir -p $W/output; echo art > $W/output/a.txt; exit 3");
    let mut c = server.connect();
    set_manifest(&mut c, &sb.manifest);
    let id = c.send(json!({"type": "run"}));
    let s = read_run(&mut c);
    let steps: Vec<String> = s
        .events
        .iter()
        .map(|e| {
            format!(
                "{}:{}",
                e["step"].as_str().unwrap(),
                e["state"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        steps,
        [
            "reap:started",
            "reap:finished",
            "agent-dirs:started",
            "agent-dirs:finished",
            "verify:started",
            "verify:finished",
            "environment:started",
            "environment:finished",
            "launch:started",
            "launch:finished",
            "agent:started",
            "agent:finished",
            "final-reap:started",
            "final-reap:finished",
            "record:finished"
        ]
    );
    let record_event = &s.events[14]["detail"];
    assert_eq!(record_event["output"]["files"], 1, "{record_event}");
    assert_eq!(record_event["truncated_bytes"], json!({}), "{record_event}");
    assert!(s
        .events
        .iter()
        .all(|e| e["id"] == id && e["iteration"] == 1));
    assert!(s.events[9]["detail"]["pid"].is_i64(), "{:?}", s.events[9]);
    assert_eq!(s.stdout, b"{\"hello\":1}\n");
    assert_eq!(s.stderr, b"oops\n");
    assert_eq!(s.result["iteration"], 1);
    assert_eq!(s.result["record"]["exit_code"], 3, "{}", s.result);

    // The record stays in the sandbox, root-owned, and collect returns all of it.
    let (tar, done) = c.collect(1);
    assert_eq!(done["type"], "ok", "{done}");
    assert_eq!(done["detail"]["iteration"], 1);
    let files = files_of(&tar);
    let names: Vec<&str> = files.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "events.jsonl",
            "output.jsonl",
            "output/a.txt",
            "result.json",
            "stderr.log"
        ]
    );
    assert_eq!(files["output/a.txt"], b"art\n");
    assert_eq!(
        String::from_utf8_lossy(&files["events.jsonl"])
            .lines()
            .count(),
        15
    );
    let record: Value = serde_json::from_slice(&files["result.json"]).unwrap();
    assert_eq!(record["exit_code"], 3);

    // A second iteration is numbered 2.
    let r = c.request(json!({"type": "run"}));
    assert_eq!(r["type"], "event");
    let s = read_run(&mut c);
    assert_eq!(s.result["iteration"], 2);
    let status = c.request(json!({"type": "status"}));
    assert_eq!(
        status["status"]["history"].as_array().unwrap().len(),
        2,
        "{status}"
    );
}

#[test]
fn a_host_killed_mid_iteration_reconnects_and_collects_the_record() {
    if !require_root_and_namespaces() {
        return;
    }
    let server = Server::start();
    let flag = server.path("go");
    let sb = Sandbox::sh(&format!(
        "echo first; while [ ! -e {} ]; do sleep 0.05; done; echo second; exit 7",
        flag.display()
    ));
    {
        let mut c = start_run(&server, &sb.manifest);
        wait_for_stdout(&mut c, "first");
        // The host goes away mid-iteration.
    }
    // While it runs, other connections are served, and new iterations are refused.
    let mut c = server.connect();
    let r = c.request(json!({"type": "status"}));
    assert_eq!(r["status"]["state"], "running", "{r}");
    let r = c.request(json!({"type": "run"}));
    assert_eq!(r["kind"], "busy", "{r}");
    let r = c.request(json!({"type": "collect", "iteration": 1}));
    assert_eq!(r["kind"], "busy", "{r}");
    std::fs::write(&flag, b"").unwrap();
    server.wait_idle(1);
    let (tar, done) = c.collect(1);
    assert_eq!(done["type"], "ok", "{done}");
    let files = files_of(&tar);
    let record: Value = serde_json::from_slice(&files["result.json"]).unwrap();
    assert_eq!(record["exit_code"], 7, "{record}");
    assert_eq!(files["output.jsonl"], b"first\nsecond\n");
}

const TRAPPING: &str = "trap 'echo got-INT >> $W/signals; exit 3' INT; \
     trap 'echo got-TERM >> $W/signals; exit 4' TERM; \
     echo ready; while :; do sleep 0.05; done";

/// A sandbox running [`TRAPPING`] with a grace long enough that a loaded machine never turns
/// the SIGTERM into a SIGKILL before the trap ran.
fn trapping() -> Sandbox {
    let mut sb = Sandbox::sh(TRAPPING);
    sb.manifest["limits"]["kill_grace_ms"] = json!(60_000);
    sb.manifest["limits"]["reap_budget_ms"] = json!(60_000);
    sb
}

#[test]
fn cancel_reaches_the_agent() {
    if !require_root_and_namespaces() {
        return;
    }
    let server = Server::start();
    let sb = trapping();
    let mut c = start_run(&server, &sb.manifest);
    wait_for_stdout(&mut c, "ready");
    // Cancel from another connection.
    let mut other = server.connect();
    let r = other.request(json!({"type": "cancel"}));
    assert_eq!(r["detail"]["cancelled"], true, "{r}");
    let s = read_run(&mut c);
    let record = &s.result["record"];
    assert_eq!(record["exit_code"], 143, "{record}");
    assert!(
        record["reason"]
            .as_str()
            .unwrap()
            .starts_with("cancelled: "),
        "{record}"
    );
    assert_eq!(
        std::fs::read_to_string(sb.workdir.join("signals")).unwrap(),
        "got-TERM\n"
    );
}

#[test]
fn signal_reaches_the_agent() {
    if !require_root_and_namespaces() {
        return;
    }
    let server = Server::start();
    let sb = trapping();
    let mut c = start_run(&server, &sb.manifest);
    wait_for_stdout(&mut c, "ready");
    let mut other = server.connect();
    let r = other.request(json!({"type": "signal", "signal": "SIGINT"}));
    assert_eq!(r["detail"]["delivered"], true, "{r}");
    let s = read_run(&mut c);
    let record = &s.result["record"];
    assert_eq!(record["exit_code"], 3, "{record}");
    assert_eq!(
        record["agent"]["forwarded_signals"],
        json!(["SIGINT"]),
        "{record}"
    );
    assert_eq!(
        std::fs::read_to_string(sb.workdir.join("signals")).unwrap(),
        "got-INT\n"
    );
}

#[test]
fn status_verify_shows_drift_after_a_change_from_outside() {
    if !require_root_and_namespaces() {
        return;
    }
    let server = Server::start();
    let mut sb = Sandbox::sh("exit 0");
    let config = sb.path("settings.json");
    std::fs::write(&config, b"{\"a\":1}").unwrap();
    let digest = hex::encode(sha2::Sha256::digest(b"{\"a\":1}"));
    sb.manifest["files"] = json!([{"path": config, "role": "config", "sha256": digest}]);
    let mut c = server.connect();
    set_manifest(&mut c, &sb.manifest);
    let r = c.request(json!({"type": "status", "verify": true}));
    assert_eq!(r["status"]["verify"]["ok"], true, "{r}");
    assert_eq!(r["status"]["manifest_loaded"], true);
    assert!(r["status"]["processes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["pid"] == 1));
    std::fs::write(&config, b"{\"a\":2}").unwrap();
    let r = c.request(json!({"type": "status", "verify": true}));
    let verify = &r["status"]["verify"];
    assert_eq!(verify["ok"], false, "{r}");
    let reason = verify["failures"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("settings.json"), "{reason}");
    assert_eq!(verify["failures"][0]["exit_code"], 98, "{verify}");
}

#[test]
fn an_attach_inside_the_sandbox_survives_the_reap_that_kills_everything_else() {
    if !require_root_and_namespaces() {
        return;
    }
    use pitcrew_core::protocol::{read_frame, Frame};
    use std::io::Write;
    use std::process::{Command, Stdio};
    let server = Server::start();
    let pid1 = common::pid1_of(server.child.id()).expect("pid 1 of the sandbox");
    let enter = |args: &[&str]| {
        let mut cmd = Command::new("nsenter");
        cmd.args(["-t", &pid1.to_string(), "-p", "-m", "--"])
            .args(args);
        cmd
    };
    // A root process left in the sandbox (like one started by `podman exec`): must be reaped.
    // Waited for as `sleep` itself: `nsenter`, which carries the same words in its arguments,
    // is there before the sleep has entered the namespace.
    let secs = common::unique_seconds().to_string();
    let mut leftover = enter(&["sleep", &secs])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    assert!(common::busy_wait(
        || !common::processes_started_as(&format!("sleep {secs}")).is_empty(),
        std::time::Duration::from_secs(60)
    ));
    let sb = Sandbox::sh("echo hi");
    let socket = server.socket.display().to_string();
    let mut attach = enter(&[common::bin(), "attach", "--socket", &socket])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = attach.stdin.take().unwrap();
    for msg in [
        json!({"type": "hello", "id": 1, "versions": [1], "client": "in-sandbox"}),
        json!({"type": "set_manifest", "id": 2, "manifest": sb.manifest}),
        json!({"type": "run", "id": 3}),
    ] {
        stdin.write_all(&Frame::control(&msg).encode()).unwrap();
    }
    let mut stdout = attach.stdout.take().unwrap();
    let record = loop {
        let frame = read_frame(&mut stdout)
            .unwrap()
            .expect("the attach bridge was cut before the result");
        if frame.kind == FrameKind::Control {
            let v: Value = serde_json::from_slice(&frame.payload).unwrap();
            if v["type"] == "result" {
                break v["record"].clone();
            }
        }
    };
    assert_eq!(record["exit_code"], 0, "{record}");
    assert!(record["reaped"]["before"].as_u64() >= Some(1), "{record}");
    let _ = leftover.wait();
    assert!(common::processes_started_as(&format!("sleep {secs}")).is_empty());
    drop(stdin);
    assert!(attach.wait().unwrap().success());
}

#[test]
fn transcripts_are_kept_in_the_record() {
    if !require_root_and_namespaces() {
        return;
    }
    let server = Server::start();
    let mut sb = Sandbox::sh("");
    let sessions = sb.path("sessions");
    let script = format!(
        "mkdir -p {s}/proj && echo '{{}}' > {s}/proj/one.jsonl && echo no > {s}/notes.txt && ln -s /etc/passwd {s}/two.jsonl",
        s = sessions.display()
    );
    sb.manifest["agent"]["args"] = json!(["-c", script]);
    sb.manifest["dirs"] = json!({"sessions": sessions});
    let mut c = start_run(&server, &sb.manifest);
    let s = read_run(&mut c);
    assert_eq!(s.result["record"]["exit_code"], 0, "{}", s.result);
    let (tar, _) = c.collect(1);
    let files = files_of(&tar);
    assert_eq!(files["transcripts/proj/one.jsonl"], b"{}\n");
    assert!(!files.contains_key("transcripts/notes.txt"));
    assert!(
        !files.contains_key("transcripts/two.jsonl"),
        "symlinks are not followed"
    );
}

/// A stand-in Claude Code (a shell script given the runtime's argv) writes its transcript where
/// Claude does, `$CLAUDE_CONFIG_DIR/projects/<cwd>/<session id>.jsonl` (a sub-agent's below
/// it, and a memory file that is no transcript), and ends its stream with a `result` event:
/// the record keeps the transcripts and sums the usage; the next iteration's config reset
/// removes them, so its record has only its own.
#[test]
fn claudes_transcripts_and_usage_are_kept_in_the_record() {
    if !require_root_and_namespaces() {
        return;
    }
    let server = Server::start();
    let mut sb = Sandbox::sh("");
    let standin = sb.path("claude-standin");
    std::fs::write(
        &standin,
        r#"#!/bin/sh
n=$(ls "$CLAUDE_CONFIG_DIR/projects/-work" 2>/dev/null | wc -l)
d="$CLAUDE_CONFIG_DIR/projects/-work"
mkdir -p "$d/s$n/subagents" "$d/memory"
echo '{"type":"user","message":{"content":"STANDIN_PROMPT"}}' > "$d/s$n.jsonl"
echo '{}' > "$d/s$n/subagents/agent-a.jsonl"
echo notes > "$d/memory/MEMORY.md"
echo '{"type":"system","subtype":"init","plugins":[],"plugin_errors":[]}'
echo '{"type":"result","is_error":false,"result":"ok","total_cost_usd":0.25,"usage":{"input_tokens":1},"modelUsage":{"m":{"inputTokens":7,"outputTokens":3,"cacheReadInputTokens":2,"cacheCreationInputTokens":1}}}'
"#,
    )
    .unwrap();
    std::fs::set_permissions(
        &standin,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    sb.manifest["runtime"] = json!("claude");
    sb.manifest["agent"] = json!({"binary": standin});
    sb.manifest["prompt"] = json!("go");
    let mut c = server.connect();
    set_manifest(&mut c, &sb.manifest);
    for n in 1..=2 {
        c.send(json!({"type": "run"}));
        let s = read_run(&mut c);
        let record = &s.result["record"];
        assert_eq!(record["exit_code"], 0, "{}", s.result);
        assert_eq!(
            record["usage"],
            json!({"input_tokens": 7, "output_tokens": 3, "cache_read_tokens": 2,
                   "cache_write_tokens": 1, "cost_usd": 0.25, "source": "claude-stream-json"}),
            "{record:#}"
        );
        let (tar, _) = c.collect(n);
        let files = files_of(&tar);
        let transcripts: Vec<&String> = files
            .keys()
            .filter(|k| k.starts_with("transcripts/"))
            .collect();
        assert_eq!(
            transcripts,
            [
                "transcripts/-work/s0.jsonl",
                "transcripts/-work/s0/subagents/agent-a.jsonl"
            ],
            "iteration {n}"
        );
        let text = String::from_utf8_lossy(&files["transcripts/-work/s0.jsonl"]);
        assert!(text.contains("STANDIN_PROMPT"), "{text}");
        let record_event = s.events.iter().find(|e| e["step"] == "record").unwrap();
        assert_eq!(
            record_event["detail"]["transcripts"]["files"], 2,
            "{record_event}"
        );
    }
}

#[test]
fn shutdown_mid_iteration_cancels_the_agent_and_exits_zero() {
    if !require_root_and_namespaces() {
        return;
    }
    let mut server = Server::start();
    let sb = trapping();
    let mut c = start_run(&server, &sb.manifest);
    wait_for_stdout(&mut c, "ready");
    let mut other = server.connect();
    other.send(json!({"type": "shutdown"}));
    let s = read_run(&mut c);
    assert_eq!(s.result["record"]["exit_code"], 143, "{}", s.result);
    assert_eq!(other.recv_control()["type"], "ok");
    assert_eq!(server.wait_exit(), Some(0));
    // The record is kept in the sandbox's records directory.
    assert!(server.records.join("iteration-1/result.json").is_file());
}

#[test]
fn a_flood_of_stdout_does_not_hold_the_supervisor() {
    if !require_root_and_namespaces() {
        return;
    }
    // An agent that writes as fast as it can: the supervisor must still time it out, keep at
    // most the 1 GiB cap of it, stream no more than it kept, and keep serving.
    let server = Server::start();
    let mut sb = Sandbox::sh("cat /dev/zero; sleep 1000");
    sb.manifest["limits"]["timeout_ms"] = json!(2_000);
    sb.manifest["limits"]["kill_grace_ms"] = json!(60_000);
    sb.manifest["limits"]["reap_budget_ms"] = json!(60_000);
    let mut c = start_run(&server, &sb.manifest);
    // Count the streamed bytes (they are not kept); give up, rather than hang, when no result
    // came within the harness's bound.
    let deadline = std::time::Instant::now() + common::server::WAIT;
    let mut stdout = 0u64;
    let result = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "no result within {:?} ({stdout} bytes of stdout streamed)",
            common::server::WAIT
        );
        let frame = c.recv().expect("frame before the result");
        match (frame.kind, frame.channel) {
            (FrameKind::Data, Channel::Stdout) => stdout += frame.payload.len() as u64,
            (FrameKind::Control, _) => {
                let v: Value = serde_json::from_slice(&frame.payload).unwrap();
                if v["type"] == "result" {
                    break v;
                }
            }
            _ => {}
        }
    };
    let record = &result["record"];
    assert_eq!(record["exit_code"], 143, "{record}");
    assert_eq!(record["agent"]["timed_out"], true, "{record}");
    assert!(
        record["reason"]
            .as_str()
            .unwrap_or("")
            .starts_with("timeout:"),
        "{record}"
    );
    // What was kept is what the record file holds and what was streamed, never over the cap.
    let output = server.records.join("iteration-1/output.jsonl");
    let kept = std::fs::metadata(output).unwrap().len();
    assert!(kept > 0 && kept <= 1 << 30, "{kept}");
    let streams = record["agent"]["output"].as_array().expect("agent.output");
    let captured = streams
        .iter()
        .find(|s| s["stream"] == "stdout")
        .unwrap_or_else(|| panic!("{streams:?}"));
    assert_eq!(captured["kept"], kept, "{captured}");
    assert_eq!(captured["complete"], true, "{captured}");
    assert_eq!(stdout, kept);
    // The supervisor still answers, on this connection and on a new one.
    let status = c.request(json!({"type": "status"}));
    assert_eq!(status["status"]["state"], "idle", "{status}");
    let status = server.connect().request(json!({"type": "status"}));
    assert_eq!(status["status"]["state"], "idle", "{status}");
    assert_eq!(status["status"]["history"][0]["exit_code"], 143, "{status}");
    assert_eq!(
        status["status"]["history"][0]["meaning"], "agent killed by SIGTERM",
        "{status}"
    );
}

/// Iteration 1's agent swaps its sessions dir (in its own config dir) for `sessions -> /`.
/// Iteration 2 still runs: the link is removed (not followed) and replaced by a directory
/// after the reap, the replacement is reported, and the agent of iteration 2 gets no write
/// access outside its roots from it.
#[test]
fn attack_plants__a_sessions_dir_replaced_by_a_symlink_is_restored() {
    if !require_root_and_namespaces() {
        return;
    }
    let server = Server::start();
    let mut sb = Sandbox::sh("");
    let config = sb.path("config");
    let sessions = config.join("sessions");
    // World-writable and outside every writable root: only Landlock keeps the agent out.
    let open = sb.path("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    sb.manifest["dirs"] = json!({"config": config, "sessions": sessions});
    let s = sessions.display();
    sb.manifest["agent"]["args"] = json!(["-c", format!("rm -r {s} && ln -s / {s}")]);
    let mut c = start_run(&server, &sb.manifest);
    let first = read_run(&mut c);
    assert_eq!(first.result["record"]["exit_code"], 0, "{}", first.result);
    assert!(
        std::fs::symlink_metadata(&sessions)
            .unwrap()
            .file_type()
            .is_symlink(),
        "the agent could not replace its sessions dir"
    );

    let w = sb.workdir.display();
    let o = open.display();
    let script = format!(
        "echo ok > {s}/second || exit 7; \
         if echo x > {o}/escaped 2>/dev/null; then echo escaped > {w}/verdict; else echo denied > {w}/verdict; fi"
    );
    sb.manifest["agent"]["args"] = json!(["-c", script]);
    set_manifest(&mut c, &sb.manifest);
    c.send(json!({"type": "run"}));
    let second = read_run(&mut c);
    let record = &second.result["record"];
    assert_eq!(record["exit_code"], 0, "{}", second.result);
    let meta = std::fs::symlink_metadata(&sessions).unwrap();
    assert!(meta.is_dir(), "sessions is not a directory again");
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), common::AGENT_ID);
    assert_eq!(
        std::fs::read_to_string(sessions.join("second")).unwrap(),
        "ok\n"
    );
    let dirs = second
        .events
        .iter()
        .find(|e| e["step"] == "agent-dirs" && e["state"] == "finished")
        .unwrap_or_else(|| panic!("no agent-dirs event: {:?}", second.events));
    assert_eq!(
        dirs["detail"]["replaced"],
        json!([{"path": sessions, "was": "symlink"}]),
        "{dirs}"
    );
    let landlock = record["confinement"]["landlock"]["status"]
        .as_str()
        .unwrap_or_default();
    assert!(
        landlock == "fully-enforced" || landlock == "partially-enforced",
        "Landlock {landlock}: the escape cannot be checked"
    );
    assert_eq!(
        std::fs::read_to_string(sb.workdir.join("verdict")).unwrap(),
        "denied\n"
    );
    assert!(!open.join("escaped").exists());
}

/// A link the host put in a root-owned place (here the workdir itself) is not the agent's
/// doing: it is neither followed nor removed, and the iteration is refused.
#[test]
fn a_symlinked_workdir_in_a_root_owned_parent_is_refused_not_removed() {
    if !require_root_and_namespaces() {
        return;
    }
    let server = Server::start();
    let mut sb = Sandbox::sh("touch $W/launched");
    let link = sb.path("work-link");
    std::os::unix::fs::symlink(&sb.workdir, &link).unwrap();
    sb.manifest["workdir"] = json!(link);
    let mut c = start_run(&server, &sb.manifest);
    let s = read_run(&mut c);
    let record = &s.result["record"];
    assert_eq!(record["exit_code"], 125, "{}", s.result);
    let reason = record["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("agent-dirs: ")
            && reason.contains(&link.display().to_string())
            && reason.contains("symlink"),
        "{reason}"
    );
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(!sb.workdir.join("launched").exists());
}

/// The agent decides how long its command lines are: `status` cuts each at 4096 bytes.
#[test]
fn status_cuts_the_agents_command_lines() {
    if !require_root_and_namespaces() {
        return;
    }
    let server = Server::start();
    let long = "x".repeat(20_000);
    // `ready` only once `sleep` has exec'd: a forked copy of the shell (same long argument)
    // must not be caught between its fork and its exec. `read` is a builtin: no fork.
    let sb = Sandbox::sh(&format!(
        "sh -c 'sleep 30 & until read c < /proc/$!/comm && [ \"$c\" = sleep ]; do :; done; \
         echo ready; wait' {long} & wait"
    ));
    let mut c = start_run(&server, &sb.manifest);
    wait_for_stdout(&mut c, "ready");
    let mut other = server.connect();
    let status = other.request(json!({"type": "status"}));
    let processes = status["status"]["processes"].as_array().unwrap();
    let long: Vec<&str> = processes
        .iter()
        .filter_map(|p| p["cmd"].as_str())
        .filter(|cmd| cmd.contains("xxxx"))
        .collect();
    // The agent's shell and the `sh -c` it started both carry the 20,000-byte argument.
    assert_eq!(long.len(), 2, "{status}");
    assert!(long.iter().all(|cmd| cmd.len() == 4096), "{long:?}");
    assert!(
        long.iter()
            .any(|cmd| cmd.starts_with("sh -c sleep 30 & until read")),
        "{long:?}"
    );
    let r = other.request(json!({"type": "cancel"}));
    assert_eq!(r["detail"]["cancelled"], true, "{r}");
    let s = read_run(&mut c);
    assert_eq!(s.result["record"]["exit_code"], 143, "{}", s.result);
}

#[test]
fn the_server_runs_without_glibcs_thread_cache_and_its_agents_never_see_how() {
    if !require_root_and_namespaces() {
        return;
    }
    // The image's environment carries glibc tunables of its own, and the name of the marker a
    // restarted server reads (not believed on a first start: the server still restarts, and
    // the image's tunables are what it puts back).
    let server = Server::start_with_env(
        &[],
        &[
            ("GLIBC_TUNABLES", "glibc.malloc.perturb=0"),
            (
                "PITCREW_INIT_ORIGINAL_GLIBC_TUNABLES",
                "=glibc.malloc.top_pad=1",
            ),
        ],
    );
    let pid = pid1_of(server.child.id()).expect("the server's pid");
    // It started itself again with the cache off (the environment it was executed with), after
    // the image's own tunables, and under its own name (not `exe`). glibc's parser cuts the
    // variable at each `:` in place, so the entries are read back joined by `:`.
    let environ = std::fs::read(format!("/proc/{pid}/environ")).expect("environ");
    let joined = format!(":{}", String::from_utf8_lossy(&environ).replace('\0', ":"));
    assert!(
        joined.contains(":GLIBC_TUNABLES=glibc.malloc.perturb=0:glibc.malloc.tcache_count=0:"),
        "{joined}"
    );
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).expect("comm");
    assert_eq!(comm.trim_end(), "pitcrew-init");

    // The agent's environment is built from the environment the server was given: the image's
    // GLIBC_TUNABLES is removed as a loader variable (and reported once), and nothing of the
    // restart is left.
    let sb = Sandbox::sh("env > $W/env");
    let mut c = start_run(&server, &sb.manifest);
    let s = read_run(&mut c);
    let record = &s.result["record"];
    assert_eq!(record["exit_code"], 0, "{record}");
    let env = std::fs::read_to_string(sb.workdir.join("env")).expect("the agent's env");
    assert!(!env.contains("GLIBC_TUNABLES"), "{env}");
    assert!(!env.contains("PITCREW_INIT_"), "{env}");
    assert!(!env.contains("tcache") && !env.contains("top_pad"), "{env}");
    let removed: Vec<&str> = record["env"]["removed"]
        .as_array()
        .expect("removed")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(
        removed.iter().filter(|n| **n == "GLIBC_TUNABLES").count(),
        1,
        "{removed:?}"
    );
    assert!(
        !removed.iter().any(|n| n.starts_with("PITCREW_INIT_")),
        "{removed:?}"
    );
}
