//! Benchmark: `pitcrew-init`'s memory across a long kept sandbox, and where it goes.
//!
//! ```sh
//! cargo build --release --workspace --bins
//! scripts/build-init                                   # the static pitcrew-init of the images
//! INIT=target/x86_64-unknown-linux-gnu/init/pitcrew-init \
//!   cargo bench -p pitcrew-e2e --bench footprint      # ITERATIONS=300
//! FILES=1000000 BYTES=1000000000 ITERATIONS=3 INIT=… \
//!   cargo bench -p pitcrew-e2e --bench footprint      # one plugin of a million files
//! ```
//!
//! `FILES` (and `BYTES`, default 1,000 a file) replace the three plugins by one generated plugin
//! of that many files (`target/<profile>/bench-footprint/plugins/big-<FILES>`, made once), with
//! `upload_limits` raised to hold it; `pitcrew validate` of the harness and the whole
//! `pitcrew run` are timed too. `INIT` names the `pitcrew-init` the sandbox runs (`pitcrew run --supervisor`); unset, the one
//! next to this build's `pitcrew` (linked dynamically against glibc).
//!
//! Needs root and PID namespaces. One local sandbox, `pitcrew-init serve` as PID 1 of its PID
//! namespace, with the supervisor benchmark's three plugins (20,000 files, 100 MB, generated once
//! into `target/<profile>/bench-supervisor/plugins` and shared with it) uploaded and verified
//! before every iteration. The agent (`runtime: command`) prints its PID 1's `VmRSS` and `VmHWM`
//! (`/proc/1/status`) while it runs; `pitcrew run --iterations N --keep` runs them all in the one
//! sandbox. Then, with the sandbox idle between iterations, the host reads the supervisor's
//! `/proc/<pid>/status` and `smaps` and breaks its resident memory down by mapping: the
//! binary's own pages, shared libraries, the heap, stacks, other anonymous memory (malloc's
//! thread arenas, thread stacks).
//!
//! Printed: VmRSS while the agent runs at iterations 1, 10, 100 and N, with min, median and max;
//! its growth over the run (least squares, kB per 100 iterations); VmHWM; idle VmRSS; the
//! breakdown. No threshold is asserted: the figures go to `docs/benchmarks.md`.

use pitcrew_e2e::{binary, generate_tree, target_profile_dir};
use serde_json::Value;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::process::Command;

const PLUGINS: [(&str, u64, u64); 3] = [
    ("alpha", 12_000, 60_000_000),
    ("beta", 6_000, 30_000_000),
    ("gamma", 2_000, 10_000_000),
];

fn fail(msg: &str) -> ! {
    eprintln!("bench footprint: {msg}");
    std::process::exit(1)
}

/// The pids of the running `pitcrew-init serve` processes.
fn serve_pids() -> Vec<i32> {
    fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            args.first().is_some_and(|a| a.ends_with(b"pitcrew-init"))
                && args.get(1) == Some(&b"serve".as_slice())
        })
        .collect()
}

/// A field of `/proc/<pid>/status` in kB.
fn status_kb(pid: i32, field: &str) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Resident kB of `pid` by kind of mapping, from `/proc/<pid>/smaps`.
fn breakdown(pid: i32) -> Vec<(&'static str, u64)> {
    let smaps = fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let kinds = [
        "the binary's own pages",
        "shared libraries",
        "heap (brk)",
        "main stack",
        "other anonymous (thread arenas, thread stacks)",
        "other",
    ];
    let mut kb = [0u64; 6];
    let mut current = 5;
    for line in smaps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let is_header = fields.first().is_some_and(|f| {
            f.contains('-') && f.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
        });
        if is_header {
            let path = fields.get(5).copied().unwrap_or("");
            current = match path {
                p if p.ends_with("/pitcrew-init") => 0,
                p if p.contains(".so") => 1,
                "[heap]" => 2,
                "[stack]" => 3,
                "" => 4,
                _ => 5,
            };
        } else if let Some(rss) = line.strip_prefix("Rss:") {
            kb[current] += rss
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    kinds.into_iter().zip(kb).collect()
}

/// The least-squares slope of `ys` over their index, per 100 steps.
fn slope_per_100(ys: &[u64]) -> f64 {
    let n = ys.len() as f64;
    let mean_x = (n - 1.0) / 2.0;
    let mean_y = ys.iter().sum::<u64>() as f64 / n;
    let (mut num, mut den) = (0.0, 0.0);
    for (x, y) in ys.iter().enumerate() {
        num += (x as f64 - mean_x) * (*y as f64 - mean_y);
        den += (x as f64 - mean_x).powi(2);
    }
    if den == 0.0 {
        0.0
    } else {
        num / den * 100.0
    }
}

fn main() {
    if !pitcrew_e2e::can_unshare_pid() {
        fail("needs root and PID namespaces");
    }
    let iterations: u32 = std::env::var("ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let big: Option<(u64, u64)> = std::env::var("FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(|files: u64| {
            let bytes = std::env::var("BYTES")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(files * 1000);
            (files, bytes)
        });
    let (base, plugins): (PathBuf, Vec<(String, u64, u64)>) = match big {
        Some((files, bytes)) => (
            target_profile_dir().join("bench-footprint"),
            vec![(format!("big-{files}"), files, bytes)],
        ),
        None => (
            target_profile_dir().join("bench-supervisor"),
            PLUGINS
                .iter()
                .map(|(n, f, b)| (n.to_string(), *f, *b))
                .collect(),
        ),
    };
    for (name, files, bytes) in &plugins {
        let dir = base.join("plugins").join(name);
        if !dir.join("index.js").exists() {
            eprintln!("generating {name}: {files} files, {bytes} bytes");
            let _ = fs::remove_dir_all(&dir);
            generate_tree(&dir, *files, *bytes, *files).unwrap_or_else(|e| fail(&e.to_string()));
        }
    }
    let total_files: u64 = plugins.iter().map(|(_, f, _)| f).sum();
    // The harness lives beside the shared plugins (paths in a harness stay inside its
    // directory); state and records go to a scratch directory.
    fs::create_dir_all(base.join("footprint-workspace")).unwrap();
    fs::set_permissions(&base, fs::Permissions::from_mode(0o755)).unwrap();
    let listed: String = plugins
        .iter()
        .map(|(name, ..)| format!("  - plugins/{name}\n"))
        .collect();
    let limits = match big {
        Some((files, bytes)) => format!(
            "upload_limits: {{entries: {}, size: {}}}\n",
            files + files / 10 + 1000,
            (bytes * 2).max(1 << 20)
        ),
        None => String::new(),
    };
    let harness = base.join("footprint.yaml");
    fs::write(
        &harness,
        format!(
            "runtime: command\ncommand: [/bin/sh, -c, \"grep -E '^(VmRSS|VmHWM)' /proc/1/status\"]\n\
             plugins:\n{listed}iterations: {iterations}\ntimeout: 60s\nworkdir: footprint-workspace\n{limits}"
        ),
    )
    .unwrap();
    let started = std::time::Instant::now();
    let validated = Command::new(binary("pitcrew"))
        .arg("validate")
        .arg(&harness)
        .output()
        .unwrap();
    let validate_s = started.elapsed().as_secs_f64();
    if !validated.status.success() {
        fail(&format!(
            "pitcrew validate: {}",
            String::from_utf8_lossy(&validated.stderr)
        ));
    }
    let scratch = tempfile::tempdir().unwrap();
    let state = scratch.path().join("state");
    fs::create_dir(&state).unwrap();
    let init = std::env::var_os("INIT").map_or_else(|| binary("pitcrew-init"), PathBuf::from);
    let size = fs::metadata(&init)
        .unwrap_or_else(|e| fail(&format!("{}: {e}", init.display())))
        .len();
    let before = serve_pids();
    eprintln!(
        "running {iterations} iterations in one sandbox, pitcrew-init {} ({size} bytes)",
        init.display()
    );
    let started = std::time::Instant::now();
    let out = Command::new(binary("pitcrew"))
        .arg("run")
        .arg(&harness)
        .arg("--supervisor")
        .arg(&init)
        .args(["--json", "--keep", "--state-dir"])
        .arg(&state)
        .arg("--records")
        .arg(scratch.path().join("records"))
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        fail(&format!(
            "pitcrew run printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    });
    let run_s = started.elapsed().as_secs_f64();
    let sandbox = doc["sandbox"].as_str().unwrap_or_default().to_string();
    let mut running = Vec::new();
    let mut hwm = Vec::new();
    let mut verify_ms = Vec::new();
    for it in doc["iterations"].as_array().cloned().unwrap_or_default() {
        let record = PathBuf::from(it["record_dir"].as_str().unwrap_or_default());
        let text = fs::read_to_string(record.join("output.jsonl")).unwrap_or_default();
        let field = |name: &str| -> u64 {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or_else(|| fail(&format!("no {name} in {}", record.display())))
        };
        running.push(field("VmRSS:"));
        hwm.push(field("VmHWM:"));
        let result: Value =
            serde_json::from_slice(&fs::read(record.join("result.json")).unwrap_or_default())
                .unwrap_or_default();
        verify_ms.push(result["steps"]["verify_ms"].as_u64().unwrap_or(0));
    }
    if running.len() != iterations as usize {
        fail(&format!("{} iterations recorded: {doc:#}", running.len()));
    }
    let pid = serve_pids()
        .into_iter()
        .find(|p| !before.contains(p))
        .unwrap_or_else(|| fail("the kept sandbox's pitcrew-init serve is not running"));
    std::thread::sleep(std::time::Duration::from_secs(1));
    let idle_rss = status_kb(pid, "VmRSS:");
    let idle_hwm = status_kb(pid, "VmHWM:");
    let parts = breakdown(pid);
    let _ = Command::new(binary("pitcrew"))
        .args(["down", &sandbox, "--force", "--state-dir"])
        .arg(&state)
        .output();

    let mut sorted = running.clone();
    sorted.sort();
    let at = |n: usize| running[n.min(running.len()) - 1];
    println!(
        "pitcrew-init footprint, {iterations} iterations of one kept local sandbox, a {total_files}-file manifest"
    );
    println!();
    println!(
        "pitcrew validate: {validate_s:.1} s; pitcrew run (upload, manifest, {iterations} \
         iterations each verified, collect): {run_s:.1} s; the verify step of each iteration \
         (ms): {verify_ms:?}"
    );
    println!();
    println!("| VmRSS while the agent runs | kB |");
    println!("|---|---|");
    for n in [1, 10, 100, running.len()]
        .into_iter()
        .filter(|n| *n <= running.len())
    {
        println!("| iteration {n} | {} |", at(n));
    }
    println!(
        "| min / median / max | {} / {} / {} |",
        sorted[0],
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1]
    );
    println!(
        "| growth (least squares) | {:+.1} kB per 100 iterations |",
        slope_per_100(&running)
    );
    println!(
        "| VmHWM (peak, during verification) | {} after iteration 1, {} after iteration {} |",
        hwm[0],
        hwm[hwm.len() - 1],
        hwm.len()
    );
    println!("| idle between iterations: VmRSS / VmHWM | {idle_rss} / {idle_hwm} |");
    println!();
    println!("| resident while idle, by mapping | kB |");
    println!("|---|---|");
    for (kind, kb) in parts {
        println!("| {kind} | {kb} |");
    }
}
