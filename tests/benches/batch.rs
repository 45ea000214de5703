//! Benchmark: `pitcrew batch` at scale on this machine, for `docs/scaling.md`.
//!
//! ```sh
//! cargo build --release --workspace --bins
//! cargo bench -p pitcrew-e2e --bench batch     # JOBS=200 CONCURRENCY=1,8,32 ENGINES=local,podman
//! ```
//!
//! Needs root and PID namespaces (and podman for the podman rows; the image is the production
//! pi image built by `scripts/build-image` from this build's `pitcrew-init`). For each engine
//! and concurrency: JOBS jobs of one harness (agent `echo`, a plugin, a workspace of its own per
//! job) through `pitcrew batch`: wall time, jobs per minute, host CPU seconds per job (all
//! cores, from `/proc/stat`), failures. For the local engine the same jobs also run through
//! `xargs -P N pitcrew run` (the baseline: a plain parallel runner), right after. Then, per
//! engine, 8 idle kept sandboxes: `pitcrew-init`'s VmRSS in each, and the proportional set
//! size (Pss) of every host process they added (pitcrew-init; unshare, or conmon) per sandbox.

use pitcrew_e2e::engines::{Engine, Kind};
use pitcrew_e2e::{binary, target_profile_dir};
use serde_json::Value;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn env_list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_else(|_| default.to_string())
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// Busy and total jiffies of all CPUs (`/proc/stat`'s first line).
fn cpu_jiffies() -> (u64, u64) {
    let stat = fs::read_to_string("/proc/stat").unwrap();
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let total: u64 = fields.iter().sum();
    // idle + iowait
    let idle = fields[3] + fields.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// A harness (agent `echo`, plugin `p`) and `jobs` jobs with a workspace each, in `dir`.
fn setup(dir: &Path, jobs: usize) {
    fs::create_dir_all(dir.join("p")).unwrap();
    fs::write(dir.join("p/index.js"), "module.exports = () => {};\n").unwrap();
    fs::create_dir_all(dir.join("w")).unwrap();
    fs::write(
        dir.join("harness.yaml"),
        "runtime: command\ncommand: [/bin/sh, -c, 'echo task $TASK']\nplugins:\n  - path: p\nworkdir: w\n",
    )
    .unwrap();
    let mut lines = String::new();
    for n in 0..jobs {
        let ws = dir.join(format!("tasks/{n}"));
        fs::create_dir_all(&ws).unwrap();
        fs::write(ws.join("task.txt"), format!("{n}\n")).unwrap();
        lines.push_str(&format!(
            "{{\"id\":\"j{n}\",\"harness\":\"harness.yaml\",\"workspace\":\"tasks/{n}\",\"env\":{{\"TASK\":\"{n}\"}}}}\n"
        ));
    }
    fs::write(dir.join("jobs.jsonl"), lines).unwrap();
}

struct Row {
    what: String,
    wall: Duration,
    jobs: usize,
    cpu_s: f64,
    failed: usize,
}

impl Row {
    fn print(&self) {
        let per_min = self.jobs as f64 * 60.0 / self.wall.as_secs_f64();
        println!(
            "| {} | {:.1} s | {:.0} | {:.3} s | {} |",
            self.what,
            self.wall.as_secs_f64(),
            per_min,
            self.cpu_s / self.jobs as f64,
            self.failed
        );
    }
}

/// Jiffies per second (`sysconf(_SC_CLK_TCK)`).
fn ticks() -> f64 {
    // SAFETY: sysconf takes an integer and returns one.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }) as f64
}

fn timed(what: String, jobs: usize, run: impl FnOnce() -> usize) -> Row {
    let (busy0, _) = cpu_jiffies();
    let t0 = Instant::now();
    let failed = run();
    let wall = t0.elapsed();
    let (busy1, _) = cpu_jiffies();
    Row {
        what,
        wall,
        jobs,
        cpu_s: (busy1 - busy0) as f64 / ticks(),
        failed,
    }
}

fn batch(dir: &Path, engine: &[String], env: &[(String, String)], concurrency: &str) -> usize {
    let out = dir.join(format!("batch-{concurrency}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&out);
    let res = Command::new(binary("pitcrew"))
        .arg("batch")
        .arg(dir.join("jobs.jsonl"))
        .args(["--json", "--concurrency", concurrency, "--out"])
        .arg(&out)
        .args(engine)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&res.stdout)
        .unwrap_or_else(|e| panic!("bench batch: {e}: {}", String::from_utf8_lossy(&res.stdout)));
    let _ = fs::remove_dir_all(&out);
    let total = doc["counts"]["total"].as_u64().unwrap_or(0) as usize;
    total - doc["counts"]["succeeded"].as_u64().unwrap_or(0) as usize
}

/// The baseline: the same jobs through `xargs -P N pitcrew run …` (one line per job).
fn xargs(dir: &Path, jobs: usize, state: &Path, concurrency: &str) -> usize {
    let records = dir.join("xargs-records");
    let _ = fs::remove_dir_all(&records);
    let mut input = String::new();
    for n in 0..jobs {
        input.push_str(&format!("{n}\n"));
    }
    let script = format!(
        "n=$1; {} run {}/harness.yaml --engine local --state-dir {} --workspace {}/tasks/$n --env TASK=$n --records {} > /dev/null 2>&1 || echo failed",
        binary("pitcrew").display(),
        dir.display(),
        state.display(),
        dir.display(),
        records.display()
    );
    let mut child = Command::new("xargs")
        .args(["-P", concurrency, "-n", "1", "sh", "-c", &script, "job"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let _ = fs::remove_dir_all(&records);
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// Every process's pid, name and (for the measurement) a `/proc/<pid>/` file's `key:` value in kB.
fn processes_kb(file: &str, key: &str) -> Vec<(i32, String, u64)> {
    fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let name = fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
            let text = fs::read_to_string(format!("/proc/{pid}/{file}")).ok()?;
            let kb = text
                .lines()
                .find(|l| l.starts_with(key))?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((pid, name.trim().to_string(), kb))
        })
        .collect()
}

/// `n` kept idle sandboxes: pitcrew-init's VmRSS in each (kB, median), and the proportional
/// set size of every host process the sandboxes added (pitcrew-init, and unshare or conmon) per
/// sandbox (kB).
fn idle(
    dir: &Path,
    engine: &[String],
    down: &[String],
    env: &[(String, String)],
    n: usize,
) -> (u64, u64) {
    let before: Vec<i32> = processes_kb("status", "VmRSS:")
        .into_iter()
        .map(|p| p.0)
        .collect();
    let mut ids = Vec::new();
    for _ in 0..n {
        let out = Command::new(binary("pitcrew"))
            .arg("run")
            .arg(dir.join("harness.yaml"))
            .args(["--json", "--keep", "--records"])
            .arg(dir.join("idle-records"))
            .args(engine)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stderr(Stdio::null())
            .output()
            .unwrap();
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        ids.push(doc["sandbox"].as_str().unwrap().to_string());
    }
    std::thread::sleep(Duration::from_secs(2));
    let mut rss: Vec<u64> = processes_kb("status", "VmRSS:")
        .into_iter()
        .filter(|(p, name, _)| !before.contains(p) && name == "pitcrew-init")
        .map(|(_, _, kb)| kb)
        .collect();
    rss.sort();
    let me = std::process::id() as i32;
    let added: u64 = processes_kb("smaps_rollup", "Pss:")
        .into_iter()
        .filter(|(p, _, _)| !before.contains(p) && *p != me)
        .map(|(_, _, kb)| kb)
        .sum();
    for id in &ids {
        let _ = Command::new(binary("pitcrew"))
            .args(["down", id])
            .args(down)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .output();
    }
    let median = rss.get(rss.len() / 2).copied().unwrap_or(0);
    (median, added / n as u64)
}

/// What `pitcrew` needs for one engine: `run`/`batch` options, `down` options, environment
/// (and the podman engine itself, kept for the bench's length).
struct EngineSetup {
    args: Vec<String>,
    down: Vec<String>,
    env: Vec<(String, String)>,
    _podman: Option<Engine>,
}

fn engine_setup(engine: &str, state: &Path) -> EngineSetup {
    match engine {
        "local" => {
            let state = vec!["--state-dir".to_string(), state.display().to_string()];
            EngineSetup {
                args: [vec!["--engine".into(), "local".into()], state.clone()].concat(),
                down: state,
                env: Vec::new(),
                _podman: None,
            }
        }
        "podman" => {
            let podman = Engine::start(Kind::Podman);
            let image = podman.image("pi");
            EngineSetup {
                args: vec!["--engine".into(), "podman".into(), "--image".into(), image],
                down: Vec::new(),
                env: podman.env(),
                _podman: Some(podman),
            }
        }
        other => panic!("bench batch: unknown engine {other}"),
    }
}

fn main() {
    if !pitcrew_e2e::can_unshare_pid() {
        eprintln!("bench batch: needs root and PID namespaces");
        std::process::exit(1);
    }
    let jobs: usize = std::env::var("JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let concurrency = env_list("CONCURRENCY", "1,8,32");
    let engines = env_list("ENGINES", "local,podman");
    let dir: PathBuf = target_profile_dir().join("bench-batch");
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    setup(&dir, jobs);
    let state = dir.join("state");
    fs::create_dir_all(&state).unwrap();

    println!("| engine, concurrency | wall | jobs/min | host CPU per job | failed |");
    println!("|---|---|---|---|---|");
    let mut idle_rows = Vec::new();
    for engine in &engines {
        let EngineSetup {
            args,
            down,
            env,
            _podman,
        } = engine_setup(engine, &state);
        for c in &concurrency {
            timed(format!("{engine}, {c} (pitcrew batch)"), jobs, || {
                batch(&dir, &args, &env, c)
            })
            .print();
            if engine == "local" {
                timed(
                    format!("{engine}, {c} (xargs -P {c} pitcrew run)"),
                    jobs,
                    || xargs(&dir, jobs, &state, c),
                )
                .print();
            }
        }
        idle_rows.push((engine.clone(), idle(&dir, &args, &down, &env, 8)));
    }
    println!();
    println!("| engine | pitcrew-init VmRSS per idle sandbox (median of 8) | Pss of the host processes per idle sandbox |");
    println!("|---|---|---|");
    for (engine, (rss, host)) in idle_rows {
        println!("| {engine} | {rss} kB | {host} kB |");
    }
    let _ = fs::remove_dir_all(&dir);
}
