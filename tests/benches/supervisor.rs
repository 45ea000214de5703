//! Benchmark: the supervisor's pre-launch work against the generated shell preflight it replaces.
//!
//! ```sh
//! cargo build --release --workspace --bins
//! cargo bench -p pitcrew-e2e --bench supervisor
//! INIT=$(scripts/build-init | tail -n 1) cargo bench -p pitcrew-e2e --bench supervisor
//! ```
//!
//! `INIT` names the `pitcrew-init` to measure (the images' static build, say); unset, this
//! build's release binary.
//!
//! Needs root and PID namespaces (`unshare --pid --fork --mount-proc`), `sh`, `find`, `sort`,
//! `sha256sum`, `ps`, `awk`. Three parts, each printed with medians:
//!
//! 1. **Pre-launch**: a harness of 3 plugins with 20,000 files together, 1 adapter and a `.env`.
//!    Side by side, interleaved, `ROUNDS` times (default 7): `pitcrew-init run` as PID 1 of a fresh
//!    PID namespace (reap + verify + env + confine + launch `/bin/true`), and the generated shell
//!    preflight in the style of today's runners (binary pin, adapter and tree-hash guards, `. .env`,
//!    `unset` of the loader family, `ps | awk` stray sweep, then `exec /bin/true`), run with `sh`
//!    in the same kind of namespace. Both are wall-clock times of the whole command; the
//!    supervisor's own step durations from its result record are printed too.
//! 2. **Reap**: 1,000 leftover `sleep` processes in the namespace before `pitcrew-init run`
//!    starts; the result record's `reaped.before` and `steps.reap_ms`.
//! 3. **Peak RSS** of `pitcrew-init` while an agent runs: the agent reads `/proc/1/status`
//!    (`VmHWM`) of its PID 1.

use pitcrew_e2e::{binary, generate_tree, median, ms, shell_preflight, target_profile_dir};
use serde_json::{json, Value};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const PLUGINS: [(&str, u64, u64); 3] = [
    ("alpha", 12_000, 60_000_000),
    ("beta", 6_000, 30_000_000),
    ("gamma", 2_000, 10_000_000),
];

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn fail(msg: &str) -> ! {
    eprintln!("bench supervisor: {msg}");
    std::process::exit(1)
}

fn sha256_hex(path: &Path) -> String {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("sha256sum");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// The whole fixture: plugin trees (cached across runs), adapter, `.env`, workdir.
struct Fixture {
    root: PathBuf,
    manifest: PathBuf,
    preflight: PathBuf,
}

fn fixture(init: &Path) -> Fixture {
    let root = target_profile_dir().join("bench-supervisor");
    for (name, files, bytes) in PLUGINS {
        let dir = root.join("plugins").join(name);
        if !dir.join("index.js").exists() {
            eprintln!("generating {name}: {files} files, {bytes} bytes");
            generate_tree(&dir, files, bytes, files).unwrap_or_else(|e| fail(&e.to_string()));
        }
    }
    fs::create_dir_all(root.join("adapters")).unwrap();
    fs::create_dir_all(root.join("work")).unwrap();
    fs::write(
        root.join("adapters/hooks.js"),
        "module.exports = () => {};\n",
    )
    .unwrap();
    fs::write(
        root.join("work/.env"),
        "export PATH=/usr/local/bin:/usr/bin:/bin\nNODE_OPTIONS=--require=/tmp/evil.js\nLANG=C.UTF-8\n",
    )
    .unwrap();

    let mut trees = Vec::new();
    for (name, _, _) in PLUGINS {
        let dir = root.join("plugins").join(name);
        let out = Command::new(init)
            .args(["hash", "--json"])
            .arg(&dir)
            .output()
            .unwrap_or_else(|e| fail(&format!("pitcrew-init hash: {e}")));
        let digest: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| fail(&format!("pitcrew-init hash --json: {e}")));
        trees.push(json!({
            "name": name, "path": dir, "role": "plugin", "kind": "data", "format": "pi-tree-v1",
            "sha256": digest["sha256"], "files": digest["files"], "dirs": digest["dirs"],
        }));
    }
    let adapter = root.join("adapters/hooks.js");
    let manifest = json!({
        "version": 1,
        "runtime": "command",
        "agent": {"binary": "/bin/true"},
        "trees": trees,
        "files": [{"path": adapter, "role": "hook-adapter", "sha256": sha256_hex(&adapter)}],
        "env": {"dotenv": root.join("work/.env")},
        "workdir": root.join("work"),
        "limits": {"timeout_ms": 60_000, "kill_grace_ms": 2000, "reap_budget_ms": 10_000},
    });
    let manifest_path = root.join("manifest.json");
    fs::write(
        &manifest_path,
        serde_json::to_vec_pretty(&manifest).unwrap(),
    )
    .unwrap();

    let preflight = root.join("preflight.sh");
    fs::write(&preflight, shell_preflight(&root.join("work"), &manifest)).unwrap();
    Fixture {
        root,
        manifest: manifest_path,
        preflight,
    }
}

fn in_namespace(cmd: &[&str]) -> Command {
    let mut c = Command::new("unshare");
    c.args(["--pid", "--fork", "--mount-proc"]).args(cmd);
    c
}

fn timed(mut cmd: Command, what: &str) -> Duration {
    let start = Instant::now();
    let out = cmd
        .output()
        .unwrap_or_else(|e| fail(&format!("{what}: {e}")));
    let took = start.elapsed();
    if !out.status.success() {
        fail(&format!(
            "{what} exited {:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    took
}

fn result_record(path: &Path) -> Value {
    let bytes = fs::read(path).unwrap_or_else(|e| fail(&format!("{}: {e}", path.display())));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| fail(&format!("result record: {e}")))
}

fn main() {
    if !pitcrew_e2e::can_unshare_pid() {
        fail("needs root and PID namespaces (unshare --pid --fork --mount-proc)");
    }
    let init = std::env::var_os("INIT").map_or_else(|| binary("pitcrew-init"), PathBuf::from);
    eprintln!("pitcrew-init: {}", init.display());
    let fx = fixture(&init);
    let rounds = env_num("ROUNDS", 7);
    let init_s = init.to_str().unwrap().to_string();
    let manifest_s = fx.manifest.to_str().unwrap().to_string();
    let result = fx.root.join("result.json");
    let result_s = result.to_str().unwrap().to_string();
    let preflight_s = fx.preflight.to_str().unwrap().to_string();

    // Warm the page cache and check both agree the fixture is clean.
    timed(
        in_namespace(&["sh", &preflight_s]),
        "shell preflight (warm-up)",
    );
    timed(
        in_namespace(&[
            &init_s,
            "run",
            "--manifest",
            &manifest_s,
            "--result",
            &result_s,
        ]),
        "pitcrew-init run (warm-up)",
    );

    let (mut sup, mut shell, mut prelaunch) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        sup.push(timed(
            in_namespace(&[
                &init_s,
                "run",
                "--manifest",
                &manifest_s,
                "--result",
                &result_s,
            ]),
            "pitcrew-init run",
        ));
        let rec = result_record(&result);
        let steps = &rec["steps"];
        let sum: u64 = ["reap_ms", "verify_ms", "env_ms", "confine_launch_ms"]
            .iter()
            .map(|k| steps[k].as_u64().unwrap_or(0))
            .sum();
        prelaunch.push(Duration::from_millis(sum));
        shell.push(timed(
            in_namespace(&["sh", &preflight_s]),
            "shell preflight",
        ));
    }
    let files: u64 = PLUGINS.iter().map(|p| p.1).sum();
    let bytes: u64 = PLUGINS.iter().map(|p| p.2).sum();
    let (sup_m, shell_m, pre_m) = (median(&mut sup), median(&mut shell), median(&mut prelaunch));
    println!(
        "pre-launch, 3 plugins, {files} files, {} MB, {rounds} rounds (medians):",
        bytes / 1_000_000
    );
    println!("  shell preflight (whole command):   {}", ms(shell_m));
    println!("  pitcrew-init run (whole command):  {}", ms(sup_m));
    println!(
        "  pitcrew-init steps reap+verify+env+confine/launch (result record): {}",
        ms(pre_m)
    );
    println!(
        "  ratio shell / pitcrew-init (whole command): {:.1}x",
        shell_m.as_secs_f64() / sup_m.as_secs_f64()
    );

    // 2. Reaping 1,000 leftovers.
    let script = format!(
        "i=0; while [ $i -lt 1000 ]; do sleep 1000 & i=$((i+1)); done; exec {init_s} run --manifest {manifest_s} --result {result_s}"
    );
    let mut reap = Vec::new();
    let mut reaped = 0;
    for _ in 0..rounds.min(5) {
        timed(in_namespace(&["sh", "-c", &script]), "reap 1000 leftovers");
        let rec = result_record(&result);
        reaped = rec["reaped"]["before"].as_u64().unwrap_or(0);
        if reaped < 1000 {
            fail(&format!(
                "expected ≥ 1000 leftovers reaped, record says {reaped}"
            ));
        }
        reap.push(Duration::from_millis(
            rec["steps"]["reap_ms"].as_u64().unwrap_or(0),
        ));
    }
    println!(
        "reap: {reaped} leftover processes, reap step median {}",
        ms(median(&mut reap))
    );

    // 3. Peak RSS while an agent runs.
    let rss_out = fx.root.join("rss.txt");
    let mut m: Value = serde_json::from_slice(&fs::read(&fx.manifest).unwrap()).unwrap();
    m["agent"] = json!({"binary": "/bin/sh", "args": ["-c", "sleep 0.3; grep -E '^(VmHWM|VmRSS)' /proc/1/status"]});
    m["output"] = json!({"stdout": rss_out});
    let rss_manifest = fx.root.join("manifest-rss.json");
    fs::write(&rss_manifest, serde_json::to_vec(&m).unwrap()).unwrap();
    timed(
        in_namespace(&[
            &init_s,
            "run",
            "--manifest",
            rss_manifest.to_str().unwrap(),
            "--result",
            &result_s,
        ]),
        "pitcrew-init run (rss)",
    );
    let rss = fs::read_to_string(&rss_out).unwrap_or_default();
    println!(
        "pitcrew-init memory while the agent runs: {}",
        rss.split_whitespace().collect::<Vec<_>>().join(" ")
    );
}
