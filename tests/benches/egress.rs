//! Benchmark: what carrying the agent's connections through the control stream costs, next to
//! the same client talking to the same server directly on the host, measured in the same run.
//!
//! ```sh
//! cargo build --release --workspace --bins
//! cargo bench -p pitcrew-e2e --bench egress                    # ROUNDS=3, ENGINES=local
//! ENGINES="local podman docker" cargo bench -p pitcrew-e2e --bench egress
//! ```
//!
//! Needs root, PID namespaces and Node; podman (and docker's engine, run privately as the tests
//! do) for those engines, whose sandboxes run the pi production image (`scripts/build-image
//! pi`, built or found cached: it has Node). A server on the host's 127.0.0.1 answers `ping\n`
//! with `pong\n` and `get N\n` with N bytes. One Node client (`CLIENT` below) measures, in
//! order: 1,000 sequential requests on one kept connection, 1,000 sequential requests each on a
//! new connection (connect, request, answer, close), and a 10 MB download. It runs directly on
//! the host, then as the agent of a `command` harness with `network: allow:
//! [127.0.0.1:PORT]` in a sandbox of each engine of `ENGINES` (the local engine's own network
//! namespace, a container without a network: its connections reach the server only through
//! pitcrew's mirror listener, the control stream and the host), for `ROUNDS` iterations each.
//! Medians are printed side by side.

use pitcrew_e2e::engines::{Engine, Kind};
use pitcrew_e2e::{binary, command_harness_dir, iteration_dir, read_json};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;

/// The client: `node - PORT OUT` (the script on stdin) writes its measurements (seconds) to OUT
/// as JSON.
const CLIENT: &str = r#"
const net = require("net"), fs = require("fs");
const [port, out] = process.argv.slice(-2);
const now = () => Number(process.hrtime.bigint()) / 1e9;
const connect = () => new Promise((ok, fail) => {
  const s = net.connect(Number(port), "127.0.0.1", () => ok(s));
  s.setNoDelay(true);
  s.on("error", fail);
});
function lines(s) {
  let buf = "", waiting = [];
  const take = () => { const i = buf.indexOf("\n"); const l = buf.slice(0, i + 1); buf = buf.slice(i + 1); return l; };
  s.setEncoding("latin1");
  s.on("data", (d) => { buf += d; while (waiting.length && buf.includes("\n")) waiting.shift()(take()); });
  return () => new Promise((ok) => (buf.includes("\n") ? ok(take()) : waiting.push(ok)));
}
async function ask(s, next) {
  s.write("ping\n");
  const l = await next();
  if (l !== "pong\n") throw new Error("answer: " + JSON.stringify(l));
}
async function main() {
  const kept = [], fresh = [];
  const s = await connect(), next = lines(s);
  for (let i = 0; i < 1000; i++) { const t = now(); await ask(s, next); kept.push(now() - t); }
  s.destroy();
  for (let i = 0; i < 1000; i++) {
    const t = now();
    const c = await connect();
    await ask(c, lines(c));
    c.destroy();
    fresh.push(now() - t);
  }
  const size = 10 * 1000 * 1000, t = now();
  const c = await connect();
  let got = 0;
  await new Promise((ok, fail) => { c.on("data", (d) => (got += d.length)); c.on("end", ok); c.on("error", fail); c.write("get " + size + "\n"); });
  const download = now() - t;
  if (got !== size) throw new Error("got " + got);
  kept.sort((a, b) => a - b); fresh.sort((a, b) => a - b);
  fs.writeFileSync(out, JSON.stringify({ kept: kept[500], fresh: fresh[500], download }));
}
main().catch((e) => { console.error(e); process.exit(1); });
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
    let mut child = Command::new("node")
        .arg("-")
        .arg(port.to_string())
        .arg(&out)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| fail(&format!("node: {e}")));
    let mut stdin = child.stdin.take().unwrap_or_else(|| fail("node: no stdin"));
    stdin
        .write_all(CLIENT.as_bytes())
        .unwrap_or_else(|e| fail(&format!("node: {e}")));
    drop(stdin);
    let status = child.wait().unwrap_or_else(|e| fail(&format!("node: {e}")));
    if !status.success() {
        fail("the direct client failed");
    }
    read_json(&out)
}

/// `ROUNDS` iterations of the client as the agent of one sandbox of `engine` (`None`: local).
fn tunnelled(port: u16, engine: Option<&Engine>, image: Option<&str>) -> Vec<Value> {
    let n = rounds();
    let script =
        format!("mkdir -p output\nnode - {port} output/bench.json <<'CLIENT'\n{CLIENT}CLIENT\n");
    let extra = format!("keep_output: true\nnetwork:\n  allow: [\"127.0.0.1:{port}\"]\n");
    let (_dir, harness, state) = command_harness_dir(&script, n as u32, &extra, false);
    let mut cmd = Command::new(binary("pitcrew"));
    cmd.arg("run").arg(&harness).arg("--json");
    if let (Some(engine), Some(image)) = (engine, image) {
        cmd.args(["--engine", engine.kind.name(), "--image", image])
            .envs(engine.env());
    } else {
        cmd.arg("--state-dir").arg(&state);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| fail(&format!("pitcrew run: {e}")));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        fail(&format!(
            "pitcrew run printed no JSON: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    });
    if doc["exit_code"] != 0 {
        fail(&format!("pitcrew run failed: {doc:#}"));
    }
    (1..=n)
        .map(|i| read_json(&iteration_dir(&doc, i).join("output/bench.json")))
        .collect()
}

fn main() {
    let port = server();
    let scratch = tempfile::tempdir().unwrap_or_else(|e| fail(&e.to_string()));
    let engines = std::env::var("ENGINES").unwrap_or_else(|_| "local".to_string());
    let mut columns: Vec<(String, Vec<Value>)> = Vec::new();
    let mut direct_runs = Vec::new();
    for _ in 0..rounds() {
        direct_runs.push(direct(port, scratch.path()));
    }
    columns.push(("direct".into(), direct_runs));
    for name in engines.split([' ', ',']).filter(|n| !n.is_empty()) {
        let runs = match name {
            "local" => tunnelled(port, None, None),
            "podman" | "docker" => {
                let kind = if name == "podman" {
                    Kind::Podman
                } else {
                    Kind::Docker
                };
                let engine = Engine::start(kind);
                let image = engine.image("pi");
                tunnelled(port, Some(&engine), Some(&image))
            }
            other => fail(&format!(
                "ENGINES: unknown engine {other} (local, podman, docker)"
            )),
        };
        columns.push((name.to_string(), runs));
    }
    let pick =
        |runs: &[Value], key: &str| median(runs.iter().filter_map(|r| r[key].as_f64()).collect());
    let rows = [
        ("request, kept connection (median, ms)", "kept", 1000.0),
        ("request, new connection (median, ms)", "fresh", 1000.0),
        ("10 MB download (median, s)", "download", 1.0),
    ];
    print!("{:<40}", "");
    for (name, _) in &columns {
        print!(" {name:>10}");
    }
    println!();
    for (row, key, scale) in rows {
        print!("{row:<40}");
        for (_, runs) in &columns {
            print!(" {:>10.3}", pick(runs, key) * scale);
        }
        println!();
    }
    let direct = &columns[0].1;
    for (row, key) in [
        ("added per request, kept (ms)", "kept"),
        ("added per request, new (ms)", "fresh"),
    ] {
        print!("{row:<40} {:>10}", "");
        for (_, runs) in &columns[1..] {
            print!(" {:>10.3}", (pick(runs, key) - pick(direct, key)) * 1000.0);
        }
        println!();
    }
    print!("{:<40}", "10 MB download (MB/s)");
    for (_, runs) in &columns {
        print!(" {:>10.1}", 10.0 / pick(runs, "download"));
    }
    println!();
    println!(
        "rounds: {} each (direct on the host, then pitcrew run with each engine of ENGINES={engines})",
        rounds()
    );
}
