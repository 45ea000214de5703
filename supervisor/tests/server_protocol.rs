//! `pitcrew-init serve` as PID 1: sessions, malformed/truncated/oversized/out-of-order frames,
//! the root-only control socket, `attach`, shutdown.
#![allow(non_snake_case)] // attack tests are named attack_<class>__<case> (scripts/security-report)
#![allow(missing_docs)]

mod common;

use common::server::{Server, WAIT};
use common::{bin, busy_wait, require_root_and_namespaces};
use pitcrew_core::protocol::{read_frame, Channel, Frame, FrameKind};
use serde_json::{json, Value};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

fn kind(v: &Value) -> &str {
    v["kind"].as_str().unwrap_or("")
}

#[test]
fn hello_is_required_first_and_versions_are_negotiated() {
    if !require_root_and_namespaces() {
        return;
    }
    let server = Server::start();
    let mut c = server.connect_raw();
    let r = c.request(json!({"type": "status"}));
    assert_eq!(
        (r["type"].as_str(), kind(&r)),
        (Some("error"), "order"),
        "{r}"
    );
    let r = c.request(json!({"type": "hello", "versions": [7, 8], "client": "t"}));
    assert_eq!(kind(&r), "version", "{r}");
    assert!(r["message"].as_str().unwrap().contains("[7, 8]"), "{r}");
    let r = c.request(json!({"type": "hello", "versions": [1, 2], "client": "t"}));
    assert_eq!(r["type"], "hello", "{r}");
    assert_eq!(r["version"], 1);
    let caps = &r["capabilities"];
    assert_eq!(caps["pid1"], true, "{r}");
    assert_eq!(caps["mode"], "pid1");
    assert!(caps["landlock_abi"].is_u64());
    assert!(caps["requests"].as_array().unwrap().len() >= 9);
    // The upload limits (the defaults: this server was started without the flags).
    assert_eq!(caps["upload_limits"]["max_entries"], 100_000, "{r}");
    assert_eq!(caps["upload_limits"]["max_bytes"], 4u64 << 30, "{r}");
    assert!(caps["features"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f == "upload.offer"));
    let r = c.request(json!({"type": "status"}));
    assert_eq!(r["type"], "status", "{r}");
    assert_eq!(r["status"]["state"], "idle");
}

#[test]
fn malformed_json_keeps_the_connection_usable() {
    if !require_root_and_namespaces() {
        return;
    }
    let server = Server::start();
    let mut c = server.connect();
    let mut bad = vec![1u8, 0];
    let payload = b"{not json";
    bad.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    bad.extend_from_slice(payload);
    c.send_raw(&bad);
    let r = c.recv_control();
    assert_eq!(kind(&r), "malformed", "{r}");
    let r = c.request(json!({"type": "launch_missiles", "id": 42}));
    assert_eq!((kind(&r), r["id"].as_u64()), ("malformed", Some(42)), "{r}");
    let r = c.request(json!({"type": "status"}));
    assert_eq!(r["type"], "status", "{r}");
}

/// Sends `bytes` on a fresh connection and expects a `malformed` error and then the end of
/// the stream; the server then still serves a new connection.
fn closes_with_malformed(server: &Server, bytes: &[u8], half_close: bool) {
    let mut c = server.connect();
    c.send_raw(bytes);
    if half_close {
        c.stream.shutdown(std::net::Shutdown::Write).unwrap();
    }
    let r = c.recv_control();
    assert_eq!(kind(&r), "malformed", "{r}");
    assert!(c.recv().is_none(), "the connection must be closed");
    let mut again = server.connect();
    let r = again.request(json!({"type": "status"}));
    assert_eq!(r["type"], "status");
}

#[test]
fn bad_headers_oversized_and_truncated_frames_close_the_connection() {
    if !require_root_and_namespaces() {
        return;
    }
    let server = Server::start();
    closes_with_malformed(&server, &[9, 0, 0, 0, 0, 0], false);
    closes_with_malformed(&server, &[2, 7, 0, 0, 0, 0], false);
    closes_with_malformed(&server, &[1, 3, 0, 0, 0, 0], false);
    closes_with_malformed(&server, &[2, 3, 0xff, 0xff, 0xff, 0xff], false);
    // Truncated: a header announcing 10 bytes, 3 bytes, then the end of the stream.
    closes_with_malformed(&server, &[1, 0, 0, 0, 0, 10, b'{', b'"', b't'], true);
    // Truncated inside the header.
    closes_with_malformed(&server, &[1, 0, 0], true);
}

#[test]
fn out_of_order_data_and_run_without_manifest() {
    if !require_root_and_namespaces() {
        return;
    }
    let server = Server::start();
    let mut c = server.connect();
    c.send_data(Channel::Tar, b"stray");
    let r = c.recv_control();
    assert_eq!(kind(&r), "order", "{r}");
    c.send_data(Channel::Stdout, b"not from the host");
    let r = c.recv_control();
    assert_eq!(kind(&r), "order", "{r}");
    let r = c.request(json!({"type": "run"}));
    assert_eq!(kind(&r), "order", "{r}");
    assert!(
        r["message"].as_str().unwrap().contains("set_manifest"),
        "{r}"
    );
    let r = c.request(json!({"type": "collect", "iteration": 5}));
    assert_eq!(kind(&r), "not-found", "{r}");
}

/// The frames a process wrote on stdout.
fn frames_of(mut bytes: &[u8]) -> Vec<Value> {
    let mut out = Vec::new();
    while let Some(frame) = read_frame(&mut bytes).expect("frames") {
        if frame.kind == FrameKind::Control {
            out.push(serde_json::from_slice(&frame.payload).expect("json"));
        }
    }
    out
}

fn attach_output(server: &Server, identity: Option<u32>, input: &[u8]) -> std::process::Output {
    let mut cmd = match identity {
        Some(id) => {
            let mut cmd = Command::new("setpriv");
            let id = id.to_string();
            cmd.args(["--reuid", &id, "--regid", &id, "--clear-groups", bin()]);
            cmd
        }
        None => Command::new(bin()),
    };
    let mut child = cmd
        .arg("attach")
        .arg("--socket")
        .arg(&server.socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn attach");
    let mut stdin = child.stdin.take().unwrap();
    // An attach that is refused may exit before reading its input: a broken pipe is its
    // answer, judged by its exit and stderr below.
    if let Err(e) = stdin.write_all(input) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
    drop(stdin);
    child.wait_with_output().expect("attach output")
}

#[test]
fn attach_bridges_stdio_to_the_socket() {
    if !require_root_and_namespaces() {
        return;
    }
    let server = Server::start();
    let mut input =
        Frame::control(&json!({"type": "hello", "id": 1, "versions": [1], "client": "attach"}))
            .encode();
    input.extend(Frame::control(&json!({"type": "status", "id": 2})).encode());
    let out = attach_output(&server, None, &input);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let frames = frames_of(&out.stdout);
    assert_eq!(frames.len(), 2, "{frames:?}");
    assert_eq!(frames[0]["type"], "hello");
    assert_eq!(
        (frames[1]["type"].as_str(), frames[1]["id"].as_u64()),
        (Some("status"), Some(2))
    );

    let missing = server.path("run/nope.sock");
    let out = Command::new(bin())
        .args(["attach", "--socket"])
        .arg(&missing)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("nope.sock") && stderr.lines().count() == 1,
        "{stderr}"
    );
}

#[test]
fn attack_control_socket__a_non_root_peer_is_refused() {
    if !require_root_and_namespaces() {
        return;
    }
    let server = Server::start();
    let run_dir = server.socket.parent().unwrap();
    let mode = std::fs::metadata(run_dir).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o700);
    let hello =
        Frame::control(&json!({"type": "hello", "id": 1, "versions": [1], "client": "x"})).encode();

    // The directory (0700 root) stops uid 65534 before the socket.
    let out = attach_output(&server, Some(65534), &hello);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("Permission denied"), "{stderr}");

    // Loosened from outside (a test-only misconfiguration): the peer-credential check still
    // refuses the connection.
    std::fs::set_permissions(run_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&server.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = attach_output(&server, Some(65534), &hello);
    let frames = frames_of(&out.stdout);
    assert_eq!(
        frames.len(),
        1,
        "{frames:?} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(frames[0]["kind"], "refused", "{frames:?}");
    assert!(frames[0]["message"].as_str().unwrap().contains("65534"));

    // Root still gets in.
    let mut c = server.connect();
    assert_eq!(c.request(json!({"type": "status"}))["type"], "status");
}

#[test]
fn shutdown_replies_and_exits_zero() {
    if !require_root_and_namespaces() {
        return;
    }
    let mut server = Server::start();
    let mut c = server.connect();
    let r = c.request(json!({"type": "shutdown"}));
    assert_eq!(r["type"], "ok", "{r}");
    assert_eq!(server.wait_exit(), Some(0));
    assert!(!server.socket.exists());
}

#[test]
fn stdio_transport_serves_one_connection() {
    if !require_root_and_namespaces() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new("unshare")
        .args([
            "--pid",
            "--fork",
            "--mount-proc",
            bin(),
            "serve",
            "--stdio",
            "--records",
        ])
        .arg(dir.path().join("records"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(
            &Frame::control(&json!({"type": "hello", "id": 1, "versions": [1], "client": "s"}))
                .encode(),
        )
        .unwrap();
    stdin
        .write_all(&Frame::control(&json!({"type": "shutdown", "id": 2})).encode())
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let hello = read_frame(&mut stdout).unwrap().unwrap();
    assert_eq!(hello.json::<Value>().unwrap()["type"], "hello");
    let ok = read_frame(&mut stdout).unwrap().unwrap();
    assert_eq!(ok.json::<Value>().unwrap()["type"], "ok");
    let mut code = None;
    busy_wait(
        || match child.try_wait() {
            Ok(Some(s)) => {
                code = s.code();
                true
            }
            _ => false,
        },
        WAIT,
    );
    assert_eq!(code, Some(0));
}
