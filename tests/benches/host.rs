//! Benchmark: what `pitcrew` adds per iteration and per upload, next to the shell approach it
//! replaces, measured in the same run.
//!
//! ```sh
//! cargo build --release --workspace --bins
//! cargo bench -p pitcrew-e2e --bench host        # ROUNDS=7 by default
//! ```
//!
//! Needs root and PID namespaces. Two parts, medians printed:
//!
//! 1. **Iteration overhead**: a harness of 3 plugins with 20,000 files together (the trees of
//!    `benches/supervisor.rs`), one adapter, agent `/bin/true`, run by `pitcrew run --json` in one
//!    local sandbox for `ROUNDS + 1` iterations (the first is dropped as warm-up). Per iteration:
//!    the host-side time from sending `run` to the `agent started` event (the exec), the
//!    supervisor's own pre-launch steps from the result record (reap + verify + env +
//!    confine/launch), and the whole iteration (run request to result). Next to it, right after
//!    (never concurrently): the generated shell preflight (`pitcrew_e2e::shell_preflight`, the same generator
//!    as the supervisor bench) for the same trees, run as `sh` in a fresh PID namespace, whole
//!    command.
//! 2. **Upload throughput**: a 200 MB tree sent as a tar stream through the protocol's stdio
//!    transport (`pitcrew-init serve --stdio` spawned locally in a PID namespace: hello, upload,
//!    wait for `ok`, which comes after the supervisor's safe unpack), next to
//!    `tar -c -C SRC . | sh -c 'tar -x -C DEST'` through a pipe.

#[path = "common/frames.rs"]
mod frames;

use frames::{FrameSink, DATA_FRAME};
use pitcrew_core::protocol::{read_frame, write_frame, Channel, Frame, Request, Response};
use pitcrew_e2e::{binary, generate_tree, median, ms, shell_preflight, target_profile_dir};
use serde_json::{json, Value};
use std::fs;
use std::io::{BufWriter, Write};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PLUGINS: [(&str, u64, u64); 3] = [
    ("alpha", 12_000, 60_000_000),
    ("beta", 6_000, 30_000_000),
    ("gamma", 2_000, 10_000_000),
];
const UPLOAD_FILES: u64 = 2_000;
const UPLOAD_BYTES: u64 = 200_000_000;

fn fail(msg: &str) -> ! {
    eprintln!("bench host: {msg}");
    std::process::exit(1)
}

fn rounds() -> usize {
    std::env::var("ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7)
}

fn mkdir755(p: &Path) {
    fs::create_dir_all(p).unwrap();
    fs::set_permissions(p, fs::Permissions::from_mode(0o755)).unwrap();
}

fn hash_json(init: &Path, dir: &Path) -> Value {
    let out = Command::new(init)
        .args(["hash", "--json"])
        .arg(dir)
        .output()
        .unwrap_or_else(|e| fail(&format!("pitcrew-init hash: {e}")));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| fail(&format!("hash --json: {e}")))
}

fn sha256_hex(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Part 1: iteration overhead.
fn iteration_overhead(root: &Path, pitcrew: &Path, init: &Path, rounds: usize) {
    let h = root.join("harness");
    for (name, files, bytes) in PLUGINS {
        let dir = h.join("plugins").join(name);
        if !dir.join("index.js").exists() {
            eprintln!("generating {name}: {files} files, {bytes} bytes");
            generate_tree(&dir, files, bytes, files).unwrap_or_else(|e| fail(&e.to_string()));
        }
    }
    mkdir755(&h.join("adapters"));
    mkdir755(&h.join("work"));
    fs::write(h.join("adapters/hooks.js"), "module.exports = () => {};\n").unwrap();
    fs::write(h.join("work/.env"), "LANG=C.UTF-8\n").unwrap();
    let plugins: String = PLUGINS
        .iter()
        .map(|(n, _, _)| format!("  - plugins/{n}\n"))
        .collect();
    let yaml = format!(
        "runtime: command\ncommand: [/bin/true]\nplugins:\n{plugins}adapters:\n  - path: adapters/hooks.js\n    role: hook-adapter\niterations: 1\ntimeout: 60s\nworkdir: work\noutput: runs\n"
    );
    let harness = h.join("harness.yaml");
    fs::write(&harness, yaml).unwrap();
    let state = root.join("state");
    mkdir755(&state);

    // The shell preflight for the same trees (host copies), in a fresh PID namespace.
    let trees: Vec<Value> = PLUGINS
        .iter()
        .map(|(name, _, _)| {
            let dir = h.join("plugins").join(name);
            let d = hash_json(init, &dir);
            json!({"name": name, "path": dir, "sha256": d["sha256"]})
        })
        .collect();
    let adapter = h.join("adapters/hooks.js");
    let manifest = json!({
        "trees": trees,
        "files": [{"path": adapter, "sha256": sha256_hex(&adapter)}],
    });
    let preflight = root.join("preflight.sh");
    fs::write(&preflight, shell_preflight(&h.join("work"), &manifest)).unwrap();
    let shell_once = || {
        let start = Instant::now();
        let st = Command::new("unshare")
            .args(["--pid", "--fork", "--mount-proc", "sh"])
            .arg(&preflight)
            .status()
            .unwrap();
        if !st.success() {
            fail(&format!("shell preflight exited {st}"));
        }
        start.elapsed()
    };
    shell_once(); // warm-up

    // One local sandbox, ROUNDS + 1 iterations, then the shell ROUNDS times: one after the
    // other, never concurrently (2 cores: overlapping them would measure contention).
    let out = Command::new(pitcrew)
        .arg("run")
        .arg(&harness)
        .args([
            "--json",
            "--iterations",
            &(rounds + 1).to_string(),
            "--state-dir",
        ])
        .arg(&state)
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        fail(&format!(
            "pitcrew run --json: {e}: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    });
    let mut shell: Vec<Duration> = (0..rounds).map(|_| shell_once()).collect();
    if doc["exit_code"] != 0 {
        fail(&format!("pitcrew run failed: {doc}"));
    }
    let (mut to_exec, mut steps, mut whole) = (Vec::new(), Vec::new(), Vec::new());
    for it in doc["iterations"].as_array().unwrap().iter().skip(1) {
        let started = it["events"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["step"] == "agent" && e["state"] == "started")
            .and_then(|e| e["at_ms"].as_f64())
            .unwrap_or_else(|| fail("no `agent started` event"));
        to_exec.push(Duration::from_secs_f64(started / 1000.0));
        let st = &it["steps"];
        let sum: u64 = ["reap_ms", "verify_ms", "env_ms", "confine_launch_ms"]
            .iter()
            .map(|k| st[k].as_u64().unwrap_or(0))
            .sum();
        steps.push(Duration::from_millis(sum));
        whole.push(Duration::from_millis(
            it["duration_ms"].as_u64().unwrap_or(0),
        ));
    }
    let files: u64 = PLUGINS.iter().map(|p| p.1).sum();
    let bytes: u64 = PLUGINS.iter().map(|p| p.2).sum();
    let (exec_m, steps_m, whole_m, shell_m) = (
        median(&mut to_exec),
        median(&mut steps),
        median(&mut whole),
        median(&mut shell),
    );
    println!(
        "iteration overhead, 3 plugins, {files} files, {} MB, agent /bin/true, {rounds} iterations (medians):",
        bytes / 1_000_000
    );
    println!(
        "  pitcrew: host `run` request -> `agent started` event: {}",
        ms(exec_m)
    );
    println!(
        "  pitcrew: record steps reap+verify+env+confine/launch:  {}",
        ms(steps_m)
    );
    println!(
        "  pitcrew: whole iteration (run request -> result):      {}",
        ms(whole_m)
    );
    println!(
        "  shell preflight in a fresh PID namespace (whole):      {}",
        ms(shell_m)
    );
    println!(
        "  ratio shell / pitcrew (run -> exec): {:.1}x",
        shell_m.as_secs_f64() / exec_m.as_secs_f64()
    );
}

/// One upload of `src` to `dest` through `pitcrew-init serve --stdio`; the time from the
/// `upload` request to its `ok`.
fn upload_once(init: &Path, records: &Path, src: &Path, dest: &Path) -> Duration {
    let mut child = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc"])
        .arg(init)
        .args(["serve", "--stdio", "--records"])
        .arg(records)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut w = BufWriter::with_capacity(DATA_FRAME + 16, child.stdin.take().unwrap());
    let mut r = child.stdout.take().unwrap();
    let answer = |r: &mut std::process::ChildStdout| -> Response {
        read_frame(r)
            .unwrap_or_else(|e| fail(&format!("read: {e}")))
            .unwrap_or_else(|| fail("serve --stdio closed the stream"))
            .json()
            .unwrap_or_else(|e| fail(&format!("answer: {e}")))
    };
    let send = |w: &mut BufWriter<_>, req: &Request| {
        write_frame(w, &Frame::control(req)).unwrap();
        w.flush().unwrap();
    };
    send(
        &mut w,
        &Request::Hello {
            id: 1,
            versions: vec![1],
            client: "bench".into(),
        },
    );
    answer(&mut r);
    let start = Instant::now();
    send(
        &mut w,
        &Request::Upload {
            id: 2,
            dest: dest.to_str().unwrap().into(),
            owner: None,
            offer: false,
            compression: None,
            listing: None,
        },
    );
    {
        let mut frames = FrameSink::new(&mut w, Channel::Tar);
        let mut b = tar::Builder::new(&mut frames);
        b.mode(tar::HeaderMode::Deterministic);
        b.follow_symlinks(false);
        b.append_dir_all(".", src).unwrap();
        b.into_inner().unwrap();
        frames.finish();
    }
    match answer(&mut r) {
        Response::Ok { .. } => {}
        other => fail(&format!("upload: {other:?}")),
    }
    let took = start.elapsed();
    send(&mut w, &Request::Shutdown { id: 3 });
    drop(w);
    let _ = child.wait();
    took
}

fn shell_upload(src: &Path, dest: &Path) -> Duration {
    fs::create_dir_all(dest).unwrap();
    let start = Instant::now();
    let mut c = Command::new("tar")
        .arg("-c")
        .arg("-C")
        .arg(src)
        .arg(".")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let x = Command::new("sh")
        .arg("-c")
        .arg(format!("tar -x -C '{}'", dest.display()))
        .stdin(c.stdout.take().unwrap())
        .status()
        .unwrap();
    let cs = c.wait().unwrap();
    let took = start.elapsed();
    if !x.success() || !cs.success() {
        fail("shell tar pipe failed");
    }
    took
}

/// Part 2: upload throughput.
fn upload_throughput(root: &Path, init: &Path, rounds: usize) {
    let src = root.join("upload-src");
    if !src.join("index.js").exists() {
        eprintln!("generating the upload tree: {UPLOAD_FILES} files, {UPLOAD_BYTES} bytes");
        generate_tree(&src, UPLOAD_FILES, UPLOAD_BYTES, 7).unwrap_or_else(|e| fail(&e.to_string()));
    }
    let records = root.join("upload-records");
    fs::create_dir_all(&records).unwrap();
    let dest_root = root.join("upload-dest");
    let _ = fs::remove_dir_all(&dest_root);
    fs::create_dir_all(&dest_root).unwrap();
    let du = Command::new("du").args(["-sb"]).arg(&src).output().unwrap();
    let bytes: f64 = String::from_utf8_lossy(&du.stdout)
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(UPLOAD_BYTES as f64);
    // Warm-up both (page cache).
    upload_once(init, &records, &src, &dest_root.join("p"));
    shell_upload(&src, &dest_root.join("s"));
    let (mut pc, mut sh) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let _ = fs::remove_dir_all(dest_root.join("p"));
        pc.push(upload_once(init, &records, &src, &dest_root.join("p")));
        let _ = fs::remove_dir_all(dest_root.join("s"));
        sh.push(shell_upload(&src, &dest_root.join("s")));
    }
    let (pc_m, sh_m) = (median(&mut pc), median(&mut sh));
    let mbs = |d: Duration| bytes / 1e6 / d.as_secs_f64();
    println!(
        "upload, {UPLOAD_FILES} files, {:.0} MB, {rounds} rounds (medians):",
        bytes / 1e6
    );
    println!(
        "  pitcrew-init serve --stdio (upload request -> ok): {} ({:.0} MB/s)",
        ms(pc_m),
        mbs(pc_m)
    );
    println!(
        "  tar -c | sh -c 'tar -x' through a pipe:           {} ({:.0} MB/s)",
        ms(sh_m),
        mbs(sh_m)
    );
    println!(
        "  ratio pitcrew / shell (time): {:.2}x",
        pc_m.as_secs_f64() / sh_m.as_secs_f64()
    );
    let _ = fs::remove_dir_all(&dest_root);
}

fn main() {
    if !pitcrew_e2e::can_unshare_pid() {
        fail("needs root and PID namespaces (unshare --pid --fork --mount-proc)");
    }
    let pitcrew = binary("pitcrew");
    let init = binary("pitcrew-init");
    let root: PathBuf = target_profile_dir().join("bench-host");
    mkdir755(&root);
    let rounds = rounds();
    iteration_overhead(&root, &pitcrew, &init, rounds);
    upload_throughput(&root, &init, rounds);
}
