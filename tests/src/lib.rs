//! Helpers shared by the end-to-end tests and benchmarks: where the built binaries are, the
//! prerequisite gate (`PITCREW_REQUIRE_E2E`, from `pitcrew-test-support`), polling instead of
//! sleeping, and deterministic fixture trees.

pub mod container;
pub mod engines;
pub mod foreign_init;
pub mod git_server;
pub mod model_server;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The `target/<profile>` directory the running test or bench binary was built into.
pub fn target_profile_dir() -> PathBuf {
    // Test and bench executables live in target/<profile>/deps/.
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("exe dir");
    deps.parent().unwrap_or(deps).to_path_buf()
}

/// The path of a workspace binary (`pitcrew`, `pitcrew-init`) built for the same profile, or
/// a clear panic telling how to build it.
pub fn binary(name: &str) -> PathBuf {
    let path = target_profile_dir().join(name);
    assert!(
        path.is_file(),
        "{} is not built: run `cargo build --workspace --bins` (scripts/test does) for this profile",
        path.display()
    );
    path
}

/// The workspace's skip rule (crate `pitcrew-test-support`): a missing prerequisite is a
/// recorded skip, or a failure with `PITCREW_REQUIRE_E2E=1`.
pub use pitcrew_test_support::{e2e_required, prerequisite, skip, unshare_pid_failure};

/// Whether this process is root and can create PID + mount namespaces (`unshare` works).
pub fn can_unshare_pid() -> bool {
    unshare_pid_failure().is_none()
}

/// The gate of every end-to-end test that starts a sandbox: root and PID namespaces
/// ([`prerequisite`]: a recorded skip, or a failure with `PITCREW_REQUIRE_E2E=1`).
pub fn require_pid_namespaces() -> bool {
    let why = unshare_pid_failure();
    prerequisite(
        why.is_none(),
        &format!(
            "needs root and PID namespaces (run the tests as root on a kernel with PID \
             namespaces, util-linux installed): {}",
            why.unwrap_or_default()
        ),
    )
}

/// Polls `cond` every 10 ms until it is true or `timeout` passes; returns whether it became true.
pub fn busy_wait(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if start.elapsed() > timeout {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A small deterministic PRNG (xorshift64*), so fixture trees are the same on every machine.
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed (0 is replaced by a constant).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1).wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Fills `buf` with random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// Writes a plugin-like tree of `files` files (nested directories, mostly small files, one in
/// 200 large) totalling about `bytes` bytes under `root`, plus an `index.js` entry.
pub fn generate_tree(root: &Path, files: u64, bytes: u64, seed: u64) -> std::io::Result<()> {
    let mut rng = Rng::new(seed);
    std::fs::create_dir_all(root)?;
    std::fs::write(root.join("index.js"), b"module.exports = function () {};\n")?;
    let large_count = (files / 200).max(1);
    let large_size = bytes / 2 / large_count;
    let small_avg = (bytes / 2) / files.max(1);
    let mut buf = vec![0u8; usize::try_from(large_size.max(small_avg * 2)).unwrap_or(1 << 20)];
    for i in 0..files {
        let dir = root.join(format!("d{:02}/s{:02}", i % 37, (i / 37) % 23));
        std::fs::create_dir_all(&dir)?;
        let size = if i % 200 == 0 {
            large_size
        } else {
            rng.below(small_avg * 2)
        };
        let size = usize::try_from(size).unwrap_or(0).min(buf.len());
        rng.fill(&mut buf[..size]);
        std::fs::write(dir.join(format!("f{i:06}.js")), &buf[..size])?;
    }
    Ok(())
}

/// The generated shell preflight of today's runners for `manifest` (the pattern of `fullsend`'s
/// pi launch line: binary pin, adapter and tree-hash guards, `. ./.env` from `workdir`, `unset`
/// of the loader family, a `ps | awk` stray sweep, then `exec /bin/true`). Shared by the
/// benchmarks as the baseline pitcrew replaces; run it only inside a fresh PID namespace (its
/// sweep kills every other process of the caller's uid).
pub fn shell_preflight(workdir: &Path, manifest: &serde_json::Value) -> String {
    let mut s = String::from("#!/bin/sh\n# Generated preflight (baseline for the benchmark).\n");
    s += &format!("cd {} || exit 1\n", workdir.display());
    // `true` is a shell builtin, so the pin names the binary (`command -v` would print `true`).
    s += "readonly AGENT_BIN=/bin/true\n[ -x \"$AGENT_BIN\" ] || { echo 'agent not found' >&2; exit 127; }\n";
    // Stray sweep: every process of this uid except this shell and its ancestors.
    s += r#"pids=$(command -p ps -o pid= -o ppid= -o stat= -o args= -u "$(command -p id -u)" | command -p awk -v self=$$ '
  { pid=$1; ppid=$2; stat=$3; parent[pid]=ppid; st[pid]=stat; line[NR]=pid }
  END { a=self; while (a > 1) { keep[a]=1; a=parent[a] }
        for (i=1;i<=NR;i++) { p=line[i]; if (!(p in keep) && st[p] !~ /^Z/ && parent[p] != self) printf "%s ", p } }')
if [ -n "$pids" ]; then
  kill -TERM $pids 2>/dev/null
  n=0
  while [ $n -lt 20 ]; do
    alive=$(command -p ps -o pid= -p $(echo $pids | tr ' ' ',') 2>/dev/null)
    [ -z "$alive" ] && break
    sleep 0.1; n=$((n+1))
  done
  [ -n "$alive" ] && kill -KILL $alive 2>/dev/null
fi
"#;
    for file in manifest["files"].as_array().unwrap() {
        let path = file["path"].as_str().unwrap();
        let sha = file["sha256"].as_str().unwrap();
        s += &format!(
            "[ -f '{path}' ] && [ \"$(command -p sha256sum '{path}' | command -p cut -d' ' -f1)\" = '{sha}' ] || {{ echo 'hook adapter modified' >&2; exit 97; }}\n"
        );
    }
    for tree in manifest["trees"].as_array().unwrap() {
        let path = tree["path"].as_str().unwrap();
        let sha = tree["sha256"].as_str().unwrap();
        s += &format!(
            "test -d '{path}' || exit 96\nh=$(cd '{path}' && [ -z \"$(command -p find . ! -type f ! -type d | head -c1)\" ] && {{ command -p find . -type f -exec sha256sum {{}} + | LC_ALL=C command -p sort; command -p find . -type d | LC_ALL=C command -p sort | command -p sha256sum; }} | command -p sha256sum | command -p cut -d' ' -f1)\n[ \"$h\" = '{sha}' ] || {{ echo 'plugin modified: {path}' >&2; exit 96; }}\n"
        );
    }
    s += ". ./.env\n";
    s += "unset -f test command cut sha256sum find echo\n";
    s += "unset NODE_OPTIONS NODE_PATH LD_PRELOAD LD_LIBRARY_PATH LD_AUDIT PYTHONPATH PYTHONHOME PYTHONSTARTUP BUN_OPTIONS JITI_ALIAS JITI_CACHE JITI_REBUILD_FS_CACHE JITI_TSCONFIG_PATHS JITI_EXTENSIONS JITI_NATIVE_MODULES JITI_TRANSFORM_MODULES JITI_TRY_NATIVE JITI_ESM_EVAL_TEMP_FILE JITI_MODULE_CACHE JITI_REQUIRE_CACHE JITI_INTEROP_DEFAULT JITI_JSX JITI_SOURCE_MAPS JITI_DEBUG JITI_RESPECT_TMPDIR_ENV\n";
    s += "export JITI_FS_CACHE=false PI_OFFLINE=1 PI_SKIP_VERSION_CHECK=1 PI_TELEMETRY=0\n";
    s += "exec \"$AGENT_BIN\" </dev/null\n";
    s
}

/// The median of `v` (sorts it in place); for benchmark reports.
pub fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// A duration as `12.3 ms`.
pub fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// The JSON document in the file at `path` (a test failure names the file).
pub fn read_json(path: &Path) -> serde_json::Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The text of the file at `path` (a test failure names the file).
pub fn read_text(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Whether `args` name an engine other than the local one (`--engine X`): then `--state-dir`,
/// the local engine's, is not given (pitcrew refuses an option the engine ignores).
pub fn names_another_engine(args: &[&str]) -> bool {
    args.windows(2)
        .any(|w| w[0] == "--engine" && w[1] != "local")
}

/// `pitcrew run HARNESS --json --state-dir STATE <extra…>` (without `--state-dir` when `extra`
/// names another engine) with `env` added to its environment: its output and its JSON
/// document (a run that prints none fails the test, with pitcrew's stderr).
pub fn pitcrew_run_output(
    harness: &Path,
    state: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (std::process::Output, serde_json::Value) {
    let mut cmd = std::process::Command::new(binary("pitcrew"));
    cmd.arg("run").arg(harness).arg("--json");
    if !names_another_engine(extra) {
        cmd.arg("--state-dir").arg(state);
    }
    let out = cmd
        .args(extra)
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("pitcrew run: {e}"));
    let doc = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "pitcrew run printed no JSON ({e}); exit {:?}\nstderr: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out, doc)
}

/// [`pitcrew_run_output`]'s exit code and JSON document.
pub fn pitcrew_run_status(
    harness: &Path,
    state: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Option<i32>, serde_json::Value) {
    let (out, doc) = pitcrew_run_output(harness, state, extra, env);
    (out.status.code(), doc)
}

/// [`pitcrew_run_output`] of a run that must succeed: its JSON document.
pub fn pitcrew_run(
    harness: &Path,
    state: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> serde_json::Value {
    let (out, doc) = pitcrew_run_output(harness, state, extra, env);
    assert!(
        out.status.success(),
        "pitcrew run failed: {doc:#}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    doc
}

/// What `pitcrew-init run` did with a manifest handed to it directly.
#[derive(Debug)]
pub struct InitRun {
    /// Its exit code.
    pub code: Option<i32>,
    /// The result record it wrote.
    pub record: serde_json::Value,
    /// Its stderr (for assertion messages).
    pub stderr: String,
}

/// `unshare --pid --fork --mount-proc pitcrew-init run --manifest M --result R`, with `manifest`
/// written into `dir` and `env` added to pitcrew-init's own (baseline) environment: a manifest
/// that never went through the host's `validate`, as a host other than `pitcrew` could send it.
pub fn pitcrew_init_run(manifest: &serde_json::Value, dir: &Path, env: &[(&str, &str)]) -> InitRun {
    let path = dir.join("manifest.json");
    std::fs::write(&path, manifest.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let result = dir.join("result.json");
    let out = std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc"])
        .arg(binary("pitcrew-init"))
        .arg("run")
        .arg("--manifest")
        .arg(&path)
        .arg("--result")
        .arg(&result)
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("unshare pitcrew-init run: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let record = std::fs::read(&result)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_else(|| panic!("pitcrew-init run wrote no record: {stderr}"));
    InitRun {
        code: out.status.code(),
        record,
        stderr,
    }
}

/// `pitcrew ARGS` with `env` added to its environment: its exit code, stdout and stderr.
pub fn pitcrew_output(
    args: &[&std::ffi::OsStr],
    env: &[(&str, &str)],
) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(binary("pitcrew"))
        .args(args)
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("pitcrew: {e}"));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The collected record directory of iteration `n` of a `pitcrew run --json` document.
pub fn iteration_dir(doc: &serde_json::Value, n: usize) -> PathBuf {
    Path::new(doc["run_dir"].as_str().unwrap_or_default()).join(format!("iteration-{n}"))
}

/// What an agent binary on `PATH` prints for `--version` (pi prints to stderr, Claude Code to
/// stdout), if it runs.
pub fn agent_version(program: &str) -> Option<String> {
    let out = std::process::Command::new(program)
        .arg("--version")
        .output()
        .ok()?;
    let text = [out.stdout, out.stderr].concat();
    Some(String::from_utf8_lossy(&text).trim().to_owned())
}

/// The raw control characters (C0, DEL, C1) and bidi controls (U+202A–U+202E, U+2066–U+2069)
/// in `text`, newlines aside: what must never reach an operator's terminal unescaped. Written
/// here, apart from the host's escaping, so the tests check it against a rule of their own.
pub fn raw_terminal_controls(text: &str) -> Vec<char> {
    text.chars()
        .filter(|&c| c != '\n')
        .filter(|&c| {
            c.is_control()
                || ('\u{202a}'..='\u{202e}').contains(&c)
                || ('\u{2066}'..='\u{2069}').contains(&c)
        })
        .collect()
}

/// A temporary directory holding a `command` harness ([`write_command_harness`], timeout 60 s)
/// and a `state/` directory for `--state-dir`, both reachable by the agent's uid: the directory,
/// the harness file and the state directory.
pub fn command_harness_dir(
    script: &str,
    iterations: u32,
    extra: &str,
    pin_config: bool,
) -> (tempfile::TempDir, PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let open = std::fs::Permissions::from_mode(0o755);
    std::fs::set_permissions(root, open.clone()).expect("chmod");
    let harness = write_command_harness(root, script, iterations, "60s", pin_config, extra);
    let state = root.join("state");
    std::fs::create_dir(&state).expect("mkdir state");
    std::fs::set_permissions(&state, open).expect("chmod state");
    (dir, harness, state)
}

/// Writes into `root` a harness whose agent is `/bin/sh -c SCRIPT` (`runtime: command`): a
/// plugin `plugins/p` (`index.js`, `lib/util.js`), a hook adapter `adapters/hooks.json`, with
/// `pin_config` also a pinned `config/models.json` (role `config`, uploaded into the runtime's
/// config dir), and a workspace holding a `README.md`. `extra` is appended to the YAML and must
/// not repeat a key written here. Returns the harness file.
pub fn write_command_harness(
    root: &Path,
    script: &str,
    iterations: u32,
    timeout: &str,
    pin_config: bool,
    extra: &str,
) -> PathBuf {
    let write = |rel: &str, body: &str| {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().expect("a file below root")).expect("mkdir");
        std::fs::write(&path, body).expect("write");
    };
    write("plugins/p/index.js", "module.exports = () => {};\n");
    write("plugins/p/lib/util.js", "exports.x = 1;\n");
    write("adapters/hooks.json", "{ \"hooks\": {} }\n");
    write("workspace/README.md", "work\n");
    let mut adapters = String::from("  - path: adapters/hooks.json\n    role: hook-adapter\n");
    if pin_config {
        write("config/models.json", "{}\n");
        adapters.push_str("  - path: config/models.json\n    role: config\n");
    }
    let indented: String = script.lines().map(|l| format!("    {l}\n")).collect();
    let harness = root.join("harness.yaml");
    write(
        "harness.yaml",
        &format!(
            "runtime: command\ncommand:\n  - /bin/sh\n  - -c\n  - |\n{indented}plugins:\n  - plugins/p\nadapters:\n{adapters}iterations: {iterations}\ntimeout: {timeout}\nworkdir: workspace\n{extra}"
        ),
    );
    harness
}

/// A `command` harness ([`command_harness_dir`]) and a state directory for the local engine,
/// with the `pitcrew` commands the end-to-end tests drive it by. Dropped, it takes down every
/// sandbox its state directory still knows (a failed test leaves nothing running).
pub struct LocalFixture {
    _dir: tempfile::TempDir,
    /// The harness directory.
    pub root: PathBuf,
    /// The harness file.
    pub harness: PathBuf,
    /// The state directory (`--state-dir`).
    pub state: PathBuf,
}

impl LocalFixture {
    /// The harness of `script` (run by `/bin/sh -c`), `iterations` and `extra` YAML; with
    /// `pin_config` also a pinned `config/models.json`.
    pub fn new(script: &str, iterations: u32, extra: &str, pin_config: bool) -> LocalFixture {
        let (dir, harness, state) = command_harness_dir(script, iterations, extra, pin_config);
        LocalFixture {
            root: dir.path().to_path_buf(),
            _dir: dir,
            harness,
            state,
        }
    }

    /// `pitcrew <args…> --state-dir <state>` (no `--state-dir` when `args` name another
    /// engine: pitcrew refuses an option the engine ignores).
    pub fn pitcrew(&self, args: &[&str]) -> std::process::Command {
        let mut c = std::process::Command::new(binary("pitcrew"));
        c.args(args);
        if !names_another_engine(args) {
            c.arg("--state-dir").arg(&self.state);
        }
        c
    }

    /// [`LocalFixture::pitcrew`], run to its end.
    pub fn output(&self, args: &[&str]) -> std::process::Output {
        self.pitcrew(args)
            .output()
            .unwrap_or_else(|e| panic!("pitcrew {args:?}: {e}"))
    }

    /// `pitcrew ps --engine local --json`'s entries (other tests' containers are not this
    /// fixture's).
    pub fn ps(&self) -> Vec<serde_json::Value> {
        let out = self.output(&["ps", "--engine", "local", "--json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        list.as_array().cloned().unwrap_or_default()
    }

    /// The ids of the sandboxes in the state directory.
    pub fn sandboxes(&self) -> Vec<String> {
        self.ps()
            .iter()
            .filter_map(|s| s["id"].as_str().map(String::from))
            .collect()
    }

    /// The one sandbox's id, once it exists.
    pub fn wait_sandbox(&self) -> String {
        let mut ids = Vec::new();
        assert!(
            busy_wait(Duration::from_secs(20), || {
                ids = self.sandboxes();
                !ids.is_empty()
            }),
            "no sandbox appeared in {}",
            self.state.display()
        );
        ids.remove(0)
    }

    /// A local sandbox's host-side state directory.
    pub fn sandbox_dir(&self, id: &str) -> PathBuf {
        self.state.join("sandboxes").join(id)
    }
}

impl Drop for LocalFixture {
    fn drop(&mut self) {
        let Ok(out) = self
            .pitcrew(&["ps", "--engine", "local", "--json"])
            .output()
        else {
            return;
        };
        let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        for s in list.as_array().into_iter().flatten() {
            if let Some(id) = s["id"].as_str() {
                let _ = self.pitcrew(&["down", id, "--force"]).output();
            }
        }
    }
}

/// A model key for the `attack_secrets__` tests: `head` followed by a tail random per test
/// process, so that no file of this machine holds it whole (the tests' source and binaries
/// included, wherever the checkout is) unless pitcrew put it there.
pub fn model_secret(head: &str) -> String {
    format!("{head}{}", secret_tail())
}

fn secret_tail() -> &'static str {
    static TAIL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TAIL.get_or_init(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        format!("OUT-{:08x}{:x}", now.subsec_nanos(), std::process::id())
    })
}

/// The one command of an iteration that looks for [`model_secret`]`(head)` from inside the
/// sandbox: it prints `shown` (an `echo` line of what the agent has), then searches the
/// environment and every readable file of the agent's own places (its processes' environments
/// and command lines, home, tmp, `/dev/shm`, `/run`, `/etc`, the workspace and its parent, the
/// runtime's config dir `$config_var`) for the key, which it builds from two halves inside a
/// process substitution (no command line or transcript holds it whole). Prints `FOUND …` per
/// hit and `SCAN_DONE rc=N` at the end.
pub fn secret_scan(head: &str, shown: &str, config_var: &str) -> &'static [&'static str] {
    let tail = secret_tail();
    let probe = format!(
        "pat() {{ printf '%s%s\\n' {head} {tail}; }}; {shown}; \
         env | grep -F -f <(pat) | sed 's/^/FOUND env /'; \
         timeout 100 grep -rlsF -f <(pat) /proc/self/environ /proc/[0-9]*/environ \
         /proc/[0-9]*/cmdline \"$HOME\" /tmp /var/tmp /dev/shm /run /etc \"$PWD\" .. \
         \"${config_var}\" | sed 's/^/FOUND /'; \
         echo \"SCAN_DONE rc=${{PIPESTATUS[0]}}\""
    );
    // A test's commands live as long as its model server: leaked once per test.
    Box::leak(Box::new([&*Box::leak(probe.into_boxed_str())]))
}

/// Every file under `dir` whose bytes hold `needle`.
pub fn files_holding(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            let Ok(kind) = e.file_type() else { continue };
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() {
                let bytes = std::fs::read(&path).unwrap_or_default();
                if bytes.windows(needle.len()).any(|w| w == needle) {
                    found.push(path);
                }
            }
        }
    }
    found
}
