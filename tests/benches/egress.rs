//! Benchmark: what carrying the agent's connections through the control stream costs, next to
//! the same client talking to the same server directly on the host, measured in the same run.
//!
//! ```sh
//! cargo build --release --workspace --bins
//! cargo bench -p pitcrew-e2e --bench egress      # ROUNDS=3 by default
//! ```
//!
//! Needs root, PID namespaces and python3. A server on the host's 127.0.0.1 answers `ping\n`
//! with `pong\n` and `get N\n` with N bytes. One Python client (`CLIENT` below) measures, in
//! order: 1,000 sequential requests on one kept connection, 1,000 sequential requests each on a
//! new connection (connect, request, answer, close), and a 10 MB download. It runs directly on
//! the host, then as the agent of a `command` harness with `network: allow:
//! [127.0.0.1:PORT]` under the local engine (the sandbox's own network namespace: its
//! connections reach the server only through pitcrew's mirror listener and the host), for
//! `ROUNDS` iterations each, alternating. Medians are printed side by side.

use pitcrew_e2e::{binary, command_harness_dir, iteration_dir, read_json};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;

/// The client: `python3 - PORT OUT` writes its measurements (seconds) to OUT as JSON.
const CLIENT: &str = r#"
import json, socket, sys, time
port, out = int(sys.argv[1]), sys.argv[2]
addr = ("127.0.0.1", port)
def ask(f, line):
    f.write(line); f.flush()
    return f.readline()
s = socket.create_connection(addr); f = s.makefile("rwb")
kept = []
for _ in range(1000):
    t = time.perf_counter(); assert ask(f, b"ping\n") == b"pong\n"; kept.append(time.perf_counter() - t)
s.close()
fresh = []
for _ in range(1000):
    t = time.perf_counter()
    c = socket.create_connection(addr); g = c.makefile("rwb")
    assert ask(g, b"ping\n") == b"pong\n"
    c.close()
    fresh.append(time.perf_counter() - t)
size = 10 * 1000 * 1000
t = time.perf_counter()
c = socket.create_connection(addr); c.sendall(b"get %d\n" % size)
got = 0
while True:
    d = c.recv(1 << 20)
    if not d: break
    got += len(d)
download = time.perf_counter() - t
assert got == size, got
kept.sort(); fresh.sort()
json.dump({"kept": kept[500], "fresh": fresh[500], "download": download}, open(out, "w"))
"#;

fn fail(msg: &str) -> ! {
    eprintln!("bench egress: {msg}");
    std::process::exit(1)
}

fn rounds() -> usize {
    std::env::var("ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

/// The host's server; returns its port.
fn server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| fail(&e.to_string()));
    let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || serve(stream));
        }
    });
    port
}

fn serve(stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let Ok(mut out) = stream.try_clone() else {
        return;
    };
    let mut lines = BufReader::new(stream);
    let mut line = String::new();
    while lines.read_line(&mut line).unwrap_or(0) > 0 {
        if line == "ping\n" {
            if out.write_all(b"pong\n").is_err() {
                return;
            }
        } else if let Some(n) = line.strip_prefix("get ") {
            let n: usize = n.trim().parse().unwrap_or(0);
            let chunk = vec![b'x'; 1 << 16];
            let mut left = n;
            while left > 0 {
                let k = left.min(chunk.len());
                if out.write_all(&chunk[..k]).is_err() {
                    return;
                }
                left -= k;
            }
            return;
        }
        line.clear();
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn direct(port: u16, dir: &std::path::Path) -> Value {
    let out = dir.join("direct.json");
    let status = Command::new("python3")
        .args(["-c", CLIENT, &port.to_string()])
        .arg(&out)
        .status()
        .unwrap_or_else(|e| fail(&format!("python3: {e}")));
    if !status.success() {
        fail("the direct client failed");
    }
    read_json(&out)
}

fn tunnelled(port: u16) -> Vec<Value> {
    let n = rounds();
    let script =
        format!("mkdir -p output\npython3 - {port} output/bench.json <<'CLIENT'\n{CLIENT}CLIENT\n");
    let extra = format!("keep_output: true\nnetwork:\n  allow: [\"127.0.0.1:{port}\"]\n");
    let (_dir, harness, state) = command_harness_dir(&script, n as u32, &extra, false);
    let out = Command::new(binary("pitcrew"))
        .arg("run")
        .arg(&harness)
        .args(["--json", "--state-dir"])
        .arg(&state)
        .output()
        .unwrap_or_else(|e| fail(&format!("pitcrew run: {e}")));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        fail(&format!(
            "pitcrew run printed no JSON: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    });
    (1..=n)
        .map(|i| read_json(&iteration_dir(&doc, i).join("output/bench.json")))
        .collect()
}

fn main() {
    let port = server();
    let scratch = tempfile::tempdir().unwrap_or_else(|e| fail(&e.to_string()));
    let mut direct_runs = Vec::new();
    for _ in 0..rounds() {
        direct_runs.push(direct(port, scratch.path()));
    }
    let tunnel_runs = tunnelled(port);
    let pick =
        |runs: &[Value], key: &str| median(runs.iter().filter_map(|r| r[key].as_f64()).collect());
    let rows = [
        ("request, kept connection (median, ms)", "kept", 1000.0),
        ("request, new connection (median, ms)", "fresh", 1000.0),
        ("10 MB download (median, s)", "download", 1.0),
    ];
    println!(
        "{:<40} {:>12} {:>12} {:>12}",
        "", "direct", "tunnel", "added"
    );
    for (name, key, scale) in rows {
        let d = pick(&direct_runs, key) * scale;
        let t = pick(&tunnel_runs, key) * scale;
        println!("{name:<40} {d:>12.3} {t:>12.3} {:>12.3}", t - d);
    }
    let mbps = |s: f64| 10.0 / s;
    println!(
        "{:<40} {:>12.1} {:>12.1}",
        "10 MB download (MB/s)",
        mbps(pick(&direct_runs, "download")),
        mbps(pick(&tunnel_runs, "download"))
    );
    println!(
        "rounds: {} each (direct on the host, then pitcrew run --engine local)",
        rounds()
    );
}
