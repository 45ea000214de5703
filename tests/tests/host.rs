//! `pitcrew` driving a long-lived local sandbox, end to end: the built `pitcrew` and
//! `pitcrew-init` binaries, harness files generated in temp dirs, host state in a temp dir
//! (`--state-dir`), observed from outside (exit codes, collected records, `/proc`).
//!
//! Needs root and PID namespaces (`unshare --pid --fork --mount-proc`); skipped otherwise, or a
//! failure with `PITCREW_REQUIRE_E2E=1`.
#![allow(non_snake_case)] // attack tests are named attack_<class>__<case> (scripts/security-report)

use pitcrew_e2e::{
    binary, busy_wait, iteration_dir, pitcrew_run, pitcrew_run_output, read_json, read_text,
    require_pid_namespaces, LocalFixture,
};
use serde_json::Value;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

fn gate() -> bool {
    require_pid_namespaces()
}

/// A harness directory (with a plugin `p`, an adapter and a workspace) and a state directory,
/// both reachable by the agent's uid: the shared local-engine fixture, with what these tests
/// add to it.
struct Fixture(LocalFixture);

impl std::ops::Deref for Fixture {
    type Target = LocalFixture;
    fn deref(&self) -> &LocalFixture {
        &self.0
    }
}

/// `script` is the agent (`/bin/sh -c`); `extra` is appended to the harness YAML.
fn fixture(script: &str, iterations: u32, extra: &str) -> Fixture {
    Fixture(LocalFixture::new(script, iterations, extra, false))
}

/// [`fixture`] whose harness also pins `config/models.json` (role `config`, uploaded into the
/// runtime's config dir).
fn fixture_with_pinned_config(script: &str, iterations: u32) -> Fixture {
    Fixture(LocalFixture::new(script, iterations, "", true))
}

impl Fixture {
    /// `pitcrew run HARNESS --json --state-dir <state> <extra…>`: its output and its JSON
    /// document.
    fn run(&self, extra: &[&str]) -> (Output, Value) {
        pitcrew_run_output(&self.harness, &self.state, extra, &[])
    }

    /// [`Fixture::run`] that must succeed: its JSON document.
    fn run_ok(&self, extra: &[&str]) -> Value {
        pitcrew_run(&self.harness, &self.state, extra, &[])
    }

    /// Starts `pitcrew run HARNESS --json <extra…>` in the background.
    fn spawn_run(&self, extra: &[&str]) -> Child {
        let h = self.harness.to_str().unwrap();
        let mut args = vec!["run", h, "--json"];
        args.extend_from_slice(extra);
        self.pitcrew(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// The sandbox's workspace on the host (local engine: same filesystem).
    fn workspace(&self, id: &str) -> PathBuf {
        self.state.join("sandboxes").join(id).join("root/workspace")
    }

    /// `pitcrew inspect ID --json --no-verify`: the supervisor's status.
    fn status(&self, id: &str) -> Value {
        let out = self
            .pitcrew(&["inspect", id, "--json", "--no-verify"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        doc["status"].clone()
    }

    fn down(&self, id: &str) {
        let out = self.pitcrew(&["down", id]).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn three_iterations_in_one_sandbox_each_collected() {
    if !gate() {
        return;
    }
    let fx = fixture(
        "echo note >> notes.txt\necho \"notes $(wc -l < notes.txt) uid $(id -u)\"",
        3,
        "",
    );
    let doc = fx.run_ok(&[]);
    assert_eq!(doc["stopped"], "iterations");
    assert_eq!(doc["exit_code"], 0);
    let run_dir = PathBuf::from(doc["run_dir"].as_str().unwrap());
    assert!(run_dir.starts_with(fx.root.join("runs")), "{run_dir:?}");
    let rows = doc["iterations"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    for (i, row) in rows.iter().enumerate() {
        let n = i + 1;
        assert_eq!(row["iteration"], n);
        assert_eq!(row["verified"], true, "{row}");
        let it = run_dir.join(format!("iteration-{n}"));
        let record = read_json(&it.join("result.json"));
        assert_eq!(record["iteration"], n);
        assert_eq!(record["exit_code"], 0);
        // The workspace persists across iterations of one sandbox: the agent sees its notes.
        let stdout = read_text(&it.join("output.jsonl"));
        assert!(
            stdout.contains(&format!("notes {n} uid 65534")),
            "iteration {n}: {stdout}"
        );
        assert!(it.join("events.jsonl").is_file() && it.join("stderr.log").is_file());
    }
    assert!(run_dir.join("run.json").is_file());
    // Without --keep the sandbox is stopped and its state removed.
    assert!(fx.sandboxes().is_empty());
}

#[test]
fn a_failed_iteration_says_what_the_agent_said_where_the_operator_looks() {
    if !gate() {
        return;
    }
    let fx = fixture(
        "echo working\necho 'Error: No API key found for \"anthropic\"' >&2\nexit 1",
        1,
        "",
    );
    let (out, doc) = fx.run(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let row = &doc["iterations"][0];
    assert_eq!(row["exit_code"], 1, "{doc:#}");
    assert_eq!(row["reason"], Value::Null, "{doc:#}");
    assert_eq!(
        row["error"], "Error: No API key found for \"anthropic\"",
        "{doc:#}"
    );
    assert!(
        stderr.contains("it said: Error: No API key found"),
        "{stderr}"
    );
    // The table (without --json) shows it in the exit column.
    let table = fx
        .pitcrew(&["run", fx.harness.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.contains("1 agent exited 1 (Error: No API key found"),
        "{text}"
    );
}

#[test]
fn collect_workspace_brings_back_what_the_agent_changed() {
    if !gate() {
        return;
    }
    let fx = fixture(
        "echo changed >> README.md\nmkdir -p src\necho 'fn main() {}' > src/main.rs",
        1,
        "",
    );
    let doc = fx.run_ok(&["--collect-workspace"]);
    let it = PathBuf::from(doc["iterations"][0]["record_dir"].as_str().unwrap());
    assert_eq!(
        read_text(&it.join("workspace/README.md")),
        "work\nchanged\n"
    );
    assert_eq!(
        read_text(&it.join("workspace/src/main.rs")),
        "fn main() {}\n"
    );
    let events = read_text(&it.join("events.jsonl"));
    assert!(
        events.contains("\"workspace\":{\"bytes\":26,\"files\":2,"),
        "{events}"
    );
    // Without the flag, only `output/` comes back.
    let doc = fx.run_ok(&[]);
    let it = PathBuf::from(doc["iterations"][0]["record_dir"].as_str().unwrap());
    assert!(!it.join("workspace").exists());
}

/// `git ARGS` in `dir` on the host, with no global or system configuration (only what the
/// repository itself says counts).
fn host_git(dir: &Path, args: &[&str]) -> Output {
    Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .output()
        .unwrap()
}

/// The agent makes the workspace directory itself a git directory (`git init --bare .`, then
/// `core.bare = false`, `core.worktree = .` and `core.fsmonitor`, and a hook in `hooks/`), with
/// no `.git` below it. The host's git, run in the collected workspace, finds no `.git` and takes
/// the directory itself as the repository (as it does a bare one): it would run the
/// `core.fsmonitor` command on `git status` and the hook on `git checkout`. The collected
/// workspace comes back without either, and the host's git runs none of it.
#[test]
fn attack_plants__a_collected_workspace_that_is_itself_a_git_directory_runs_nothing_on_the_host() {
    if !gate() || Command::new("git").arg("--version").output().is_err() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("marker");
    let m = marker.display();
    let script = format!(
        r#"set -e
git init -q --bare .
git config core.bare false
git config core.worktree .
git config core.fsmonitor 'echo root-fsmonitor >> {m}; false'
printf '#!/bin/sh\necho root-hook >> {m}\n' > hooks/post-checkout
chmod +x hooks/post-checkout
touch objects/keep refs/keep
echo planted"#
    );
    let fx = fixture(&script, 1, "");
    let (out, doc) = fx.run(&["--collect-workspace"]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{doc:#}\n{stderr}");
    let ws = iteration_dir(&doc, 1).join("workspace");
    assert!(ws.join("README.md").is_file(), "no workspace came back");
    let _ = host_git(&ws, &["status", "--porcelain"]);
    let _ = host_git(&ws, &["checkout", "-q", "-b", "other"]);
    assert!(
        !marker.exists(),
        "the host's git ran what the agent planted: {}",
        read_text(&marker)
    );
    let stripped =
        read_json(&iteration_dir(&doc, 1).join("result.json"))["workspace_stripped"].to_string();
    for name in ["./hooks/post-checkout", "./config: core.fsmonitor"] {
        assert!(stripped.contains(name), "{name}: {stripped}");
    }
}

#[test]
fn attack_plants__collected_workspace_git_hooks_and_config_never_run_on_the_host() {
    if !gate() || Command::new("git").arg("--version").output().is_err() {
        return;
    }
    // What the host's git would run, each writing to `marker` (a host path the agent names
    // but cannot write): a hook, a hooks directory of the host's (as `core.hooksPath`),
    // `core.fsmonitor`, a clean/smudge filter activated by `.gitattributes` and
    // `.git/info/attributes`, configuration included from a workspace file and from `/tmp`,
    // the same in a nested repository, and a `.git` file naming a git directory elsewhere.
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("marker");
    let host_hooks = dir.path().join("hooks");
    fs::create_dir(&host_hooks).unwrap();
    let hook = host_hooks.join("post-checkout");
    fs::write(
        &hook,
        format!("#!/bin/sh\necho hooks-path >> {}\n", marker.display()),
    )
    .unwrap();
    fs::set_permissions(&hook, fs::Permissions::from_mode(0o755)).unwrap();
    let m = marker.display();
    let script = format!(
        r#"set -e
g() {{ git -c user.name=agent -c user.email=agent@example.invalid "$@"; }}
g init -q .
g add README.md
g commit -qm base
g remote add origin https://example.invalid/repo.git
printf '#!/bin/sh\necho hook >> {m}\n' > .git/hooks/post-checkout
chmod +x .git/hooks/post-checkout
printf '* filter=x\n' > .git/info/attributes
printf 'README.md filter=x\n' > .gitattributes
printf '[core]\n\tfsmonitor = echo included >> {m}; false\n' > evil.config
mkdir nested
(cd nested && g init -q . && printf '#!/bin/sh\necho nested >> {m}\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit && g config core.fsmonitor 'echo nested-fsmonitor >> {m}; false')
mkdir linked
printf 'gitdir: {hooks}/../elsewhere/.git\n' > linked/.git
g config core.fsmonitor 'echo fsmonitor >> {m}; false'
g config core.hooksPath {hooks}
g config filter.x.clean 'echo clean >> {m}; cat'
g config filter.x.smudge 'echo smudge >> {m}; cat'
g config --add include.path ../evil.config
g config --add include.path /tmp/x
echo planted"#,
        hooks = host_hooks.display()
    );
    let fx = fixture(&script, 1, "");
    let (out, doc) = fx.run(&["--collect-workspace", "--keep"]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{doc:#}\n{stderr}");
    let id = doc["sandbox"].as_str().unwrap().to_string();
    let it = iteration_dir(&doc, 1);
    let ws = it.join("workspace");
    assert!(ws.join(".git/HEAD").is_file(), "no repository came back");

    // Nothing that runs by being present came back; the rest of the repository did.
    for gone in [
        ".git/hooks/post-checkout",
        ".git/info/attributes",
        "nested/.git/hooks/pre-commit",
        "linked/.git",
    ] {
        assert!(!ws.join(gone).exists(), "{gone} came back");
    }
    let config = read_text(&ws.join(".git/config"));
    for key in [
        "fsmonitor",
        "hooksPath",
        "filter",
        "include",
        "clean",
        "smudge",
    ] {
        assert!(
            !config.to_lowercase().contains(&key.to_lowercase()),
            "{key}: {config}"
        );
    }
    assert!(
        config.contains("https://example.invalid/repo.git"),
        "{config}"
    );
    assert!(!read_text(&ws.join("nested/.git/config")).contains("fsmonitor"));

    // The host's git runs none of it.
    let status = host_git(&ws, &["status", "--porcelain"]);
    assert!(status.status.success(), "{status:?}");
    fs::write(ws.join("README.md"), "work\nmore\n").unwrap();
    assert!(host_git(&ws, &["add", "README.md"]).status.success());
    assert!(host_git(&ws, &["checkout", "-q", "-b", "other"])
        .status
        .success());
    assert!(host_git(&ws.join("nested"), &["status"]).status.success());
    assert!(
        !marker.exists(),
        "the host's git ran what the agent planted: {}",
        read_text(&marker)
    );

    // The record, the run's summary and its output name what was removed.
    let record = read_json(&it.join("result.json"));
    let stripped = record["workspace_stripped"].to_string();
    for name in [
        ".git/hooks/post-checkout",
        ".git/config: core.fsmonitor",
        ".git/config: core.hooksPath",
        ".git/config: filter.x.clean",
        ".git/config: filter.x.smudge",
        ".git/config: include.path",
        ".git/info/attributes",
        "nested/.git/hooks/pre-commit",
        "nested/.git/config: core.fsmonitor",
        "linked/.git",
    ] {
        assert!(stripped.contains(name), "{name}: {stripped}");
    }
    assert!(!stripped.contains("remote.origin.url"), "{stripped}");
    assert!(
        record["workspace_flagged"]
            .to_string()
            .contains(".gitattributes:1: filter=x"),
        "{record:#}"
    );
    assert_eq!(
        doc["iterations"][0]["workspace_stripped"].to_string(),
        stripped
    );
    assert!(
        stderr.contains("removed from the collected workspace")
            && stderr.contains(".git/config: core.fsmonitor"),
        "{stderr}"
    );

    // `pitcrew collect` strips the same and says so.
    let again = dir.path().join("again");
    let out = fx.output(&["collect", &id, "--out", again.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        said.contains("removed from the collected workspace")
            && said.contains(".git/hooks/post-checkout"),
        "{said}"
    );
    let ws = again.join("iteration-1/workspace");
    assert!(!ws.join(".git/hooks/post-checkout").exists());
    assert!(!read_text(&ws.join(".git/config")).contains("fsmonitor"));
    assert!(host_git(&ws, &["status"]).status.success());
    assert!(!marker.exists(), "{}", read_text(&marker));
    fx.down(&id);
}

/// The validation command prints what the workspace (the agent's) holds: its output reaches
/// the operator's terminal escaped, with or without `feedback:`.
#[test]
fn attack_terminal__the_validation_commands_output_reaches_the_terminal_escaped() {
    if !gate() {
        return;
    }
    for extra in ["", "feedback: true\n"] {
        let fx = fixture(
            "printf '\\033]0;PWNED\\007\\033[2J\\rpitcrew: forged\\n' > controls.txt",
            1,
            &format!("validation: [sh, -c, \"cat $PITCREW_SANDBOX_ROOT/workspace/controls.txt; echo failing >&2; exit 1\"]\n{extra}"),
        );
        let (out, doc) = fx.run(&[]);
        assert_eq!(doc["iterations"][0]["validation_exit"], 1, "{doc:#}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("\\x1b]0;PWNED\\x07\\x1b[2J\\rpitcrew: forged"),
            "{stderr}"
        );
        assert!(stderr.contains("failing"), "{stderr}");
        assert_eq!(
            pitcrew_e2e::raw_terminal_controls(&stderr),
            Vec::<char>::new(),
            "{stderr}"
        );
    }
}

/// The workspace's `output/` is emptied before each iteration, so each record holds what its
/// own iteration wrote; `keep_output: true` keeps it.
#[test]
fn output_starts_empty_each_iteration_unless_kept() {
    if !gate() {
        return;
    }
    let script =
        "mkdir -p output\nn=$(ls -A output | wc -l)\necho $n > \"output/found-$(date +%s%N)\"";
    let counts = |doc: &Value, n: usize| -> Vec<String> {
        let dir = PathBuf::from(doc["iterations"][n - 1]["record_dir"].as_str().unwrap());
        let mut found: Vec<String> = std::fs::read_dir(dir.join("output"))
            .unwrap()
            .map(|e| read_text(&e.unwrap().path()).trim().to_string())
            .collect();
        found.sort();
        found
    };
    let fx = fixture(script, 2, "");
    let doc = fx.run_ok(&[]);
    assert_eq!(counts(&doc, 1), ["0"]);
    assert_eq!(counts(&doc, 2), ["0"], "{doc:#}");
    let second = read_json(
        &PathBuf::from(doc["iterations"][1]["record_dir"].as_str().unwrap()).join("result.json"),
    );
    assert_eq!(second["output_reset"]["removed"], 1, "{second:#}");

    let fx = fixture(script, 2, "keep_output: true\n");
    let doc = fx.run_ok(&[]);
    assert_eq!(counts(&doc, 2), ["0", "1"], "{doc:#}");
}

#[test]
fn a_dotenv_in_the_workspace_reaches_the_agent_as_data() {
    if !gate() {
        return;
    }
    let fx = fixture(
        "echo \"task=$TASK_ID shell=${EVIL-unset}\"",
        1,
        "dotenv: .env\n",
    );
    // Parsed as data: a command substitution is refused, never run.
    std::fs::write(
        fx.root.join("workspace/.env"),
        "TASK_ID=42\nEVIL=$(touch /tmp/pwned)\n",
    )
    .unwrap();
    let doc = fx.run_ok(&[]);
    let it = PathBuf::from(doc["iterations"][0]["record_dir"].as_str().unwrap());
    let stdout = read_text(&it.join("output.jsonl"));
    assert!(stdout.contains("task=42 shell=unset"), "{stdout}");
    // The substitution was refused by line, never run.
    let record = read_json(&it.join("result.json"));
    let refused = &record["env"]["dotenv_refused"][0];
    assert_eq!(refused["line"], 2, "{record:#}");
    assert_eq!(record["env"]["layers"]["TASK_ID"], "dotenv", "{record:#}");
}

#[test]
fn refused_and_removed_dotenv_lines_are_named_in_the_summary_and_the_progress_line() {
    if !gate() {
        return;
    }
    let fx = fixture("true", 1, "dotenv: .env\n");
    std::fs::write(
        fx.root.join("workspace/.env"),
        "TASK_ID=42\nHTTPS_PROXY=http://secret-proxy:3128\nthis is not an assignment\n",
    )
    .unwrap();
    // Without --json: the table on stdout, the progress lines on stderr.
    let out = fx
        .pitcrew(&["run", fx.harness.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let named = "HTTPS_PROXY (.env line 2), .env line 3";
    assert!(stdout.contains(&format!("2: {named}")), "{stdout}");
    assert!(
        stderr.contains(&format!("env removed or refused: {named}")),
        "{stderr}"
    );
    // Names and lines, never values.
    assert!(!stdout.contains("secret-proxy"), "{stdout}");
    assert!(!stderr.contains("secret-proxy"), "{stderr}");
    let doc = fx.run_ok(&[]);
    assert_eq!(
        doc["iterations"][0]["env_refused"],
        serde_json::json!(["HTTPS_PROXY (.env line 2)", ".env line 3"]),
        "{doc:#}"
    );
}

#[test]
fn an_upload_on_a_terminal_shows_bytes_and_percentage() {
    if !gate() {
        return;
    }
    let fx = fixture("true", 1, "");
    // 128 MiB (sparse here, sent whole): long enough for the status line to be redrawn.
    let big = fs::File::create(fx.root.join("workspace/big.bin")).unwrap();
    big.set_len(128 << 20).unwrap();
    let command = format!(
        "{} run {} --state-dir {}",
        binary("pitcrew").display(),
        fx.harness.display(),
        fx.state.display()
    );
    // `script` gives pitcrew a terminal; what it drew lands in the output.
    let out = Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .output()
        .unwrap();
    let drawn = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{drawn}");
    assert!(drawn.contains("MiB of 128.0 MiB ("), "{drawn}");
}

#[test]
fn quiet_prints_what_a_script_needs_and_nothing_else() {
    if !gate() {
        return;
    }
    let fx = fixture("echo hi", 2, "");
    let out = fx
        .pitcrew(&["run", fx.harness.to_str().unwrap(), "-q"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    assert!(
        Path::new(lines[0])
            .join("iteration-2/result.json")
            .is_file(),
        "{stdout}"
    );
    // With --keep, the sandbox id follows on a line of its own.
    let out = fx
        .pitcrew(&["run", fx.harness.to_str().unwrap(), "-q", "--keep"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(lines[1].starts_with("pc-"), "{stdout}");
    fx.down(lines[1]);
}

#[test]
fn a_run_stops_after_an_iteration_whose_agent_is_not_found() {
    if !gate() {
        return;
    }
    let fx = fixture("exec /no/such/agent", 3, "");
    let (out, doc) = fx.run(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(127), "{stderr}\n{doc:#}");
    assert_eq!(doc["stopped"], "repeating", "{doc:#}");
    assert_eq!(doc["iterations"].as_array().unwrap().len(), 1, "{doc:#}");
    assert!(
        stderr.contains("stopping after iteration 1: the agent was not found (127"),
        "{stderr}"
    );
    assert!(fx.sandboxes().is_empty());
}

#[test]
fn attack_leftovers__a_background_process_is_gone_before_the_next_iteration() {
    if !gate() {
        return;
    }
    // The leftover's argument is built at run time so the agent's own command line (which holds
    // this script) never matches the search.
    let script = r#"N=9876$((54321))
if [ ! -f started ]; then
  touch started
  setsid sleep "$N" </dev/null >/dev/null 2>&1 &
  echo "left sleep $N behind"
else
  for f in /proc/[0-9]*/cmdline; do
    c=$(tr '\0' ' ' < "$f" 2>/dev/null)
    case "$c" in *"sleep $N"*) echo "LEFTOVER $f";; esac
  done
  echo checked
fi"#;
    let fx = fixture(script, 2, "");
    let doc = fx.run_ok(&[]);
    let run_dir = PathBuf::from(doc["run_dir"].as_str().unwrap());
    let first = read_text(&run_dir.join("iteration-1/output.jsonl"));
    assert!(first.contains("left sleep 987654321 behind"), "{first}");
    let second = read_text(&run_dir.join("iteration-2/output.jsonl"));
    assert!(second.contains("checked"), "{second}");
    assert!(
        !second.contains("LEFTOVER"),
        "the leftover survived: {second}"
    );
    // Whichever reap caught it (after iteration 1, or before iteration 2), it was counted.
    let r1 = read_json(&run_dir.join("iteration-1/result.json"));
    let r2 = read_json(&run_dir.join("iteration-2/result.json"));
    let caught = r1["reaped"]["after"].as_u64().unwrap() + r2["reaped"]["before"].as_u64().unwrap();
    assert!(caught >= 1, "no reap counted the leftover: {r1} {r2}");
}

#[test]
fn attack_verified_trees__the_agent_cannot_modify_a_verified_plugin() {
    if !gate() {
        return;
    }
    // The agent (uid 65534, cwd = the workspace) attacks the plugin beside it.
    let script = r#"P=../plugins/p
if [ ! -f attacked ]; then
  touch attacked
  if echo evil >> "$P/index.js" 2>/dev/null; then echo "WROTE index.js"; else echo "denied write"; fi
  if rm -f "$P/lib/util.js" 2>/dev/null && [ ! -e "$P/lib/util.js" ]; then echo "REMOVED util.js"; else echo "denied rm"; fi
  if echo x > "$P/new.js" 2>/dev/null; then echo "ADDED new.js"; else echo "denied add"; fi
fi"#;
    let fx = fixture(script, 2, "");
    let doc = fx.run_ok(&[]);
    let run_dir = PathBuf::from(doc["run_dir"].as_str().unwrap());
    let first = read_text(&run_dir.join("iteration-1/output.jsonl"));
    assert_eq!(
        first.lines().collect::<Vec<_>>(),
        ["denied write", "denied rm", "denied add"],
        "{first}"
    );
    let r2 = read_json(&run_dir.join("iteration-2/result.json"));
    assert_eq!(r2["exit_code"], 0, "{r2}");
    assert_eq!(doc["iterations"][1]["verified"], true);
}

#[test]
fn attack_verified_trees__a_replaced_verified_config_fails_the_next_iteration_with_98() {
    if !gate() {
        return;
    }
    // The runtime config dir is the agent's to write (pi writes auth.json there), so a pinned
    // config file in it can be replaced by the agent: the next iteration must refuse to launch.
    let script = r#"C=../config
if [ ! -f replaced ]; then
  touch replaced
  echo '{"providers": {"evil": {}}}' > "$C/models.json.new" && mv -f "$C/models.json.new" "$C/models.json" && echo "replaced models.json"
fi"#;
    let fx = fixture_with_pinned_config(script, 2);
    let (out, doc) = fx.run(&[]);
    assert_eq!(
        out.status.code(),
        Some(98),
        "{doc:#}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run_dir = PathBuf::from(doc["run_dir"].as_str().unwrap());
    let first = read_text(&run_dir.join("iteration-1/output.jsonl"));
    assert!(first.contains("replaced models.json"), "{first}");
    let r2 = read_json(&run_dir.join("iteration-2/result.json"));
    assert_eq!(r2["exit_code"], 98, "{r2}");
    let reason = r2["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("models.json"), "{reason}");
    assert!(r2["agent"].is_null(), "nothing may be launched: {r2}");
}

#[test]
fn attack_leftovers__what_the_agent_adds_to_its_config_dir_is_gone_next_iteration() {
    if !gate() {
        return;
    }
    // Files the runtime would load at startup (settings, skills) planted in the config dir by
    // iteration 1 must not reach iteration 2: only the pinned files are left.
    let script = r#"C=../config
if [ ! -f planted ]; then
  touch planted
  echo '{"disableAllHooks": true}' > "$C/settings.json"
  mkdir -p "$C/skills/evil" && echo evil > "$C/skills/evil/SKILL.md"
  ln -s /etc "$C/etc-link"
  echo planted
else
  echo "config: $(cd "$C" && ls -A | tr '\n' ' ')"
fi"#;
    let fx = fixture_with_pinned_config(script, 2);
    let (out, doc) = fx.run(&[]);
    assert!(
        out.status.success(),
        "{doc:#}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run_dir = PathBuf::from(doc["run_dir"].as_str().unwrap());
    assert!(read_text(&run_dir.join("iteration-1/output.jsonl")).contains("planted"));
    let second = read_text(&run_dir.join("iteration-2/output.jsonl"));
    assert!(
        second.contains("config: models.json "),
        "iteration 2 saw more than the pinned file: {second}"
    );
    let r2 = read_json(&run_dir.join("iteration-2/result.json"));
    assert_eq!(r2["config_reset"]["removed"], 3, "{r2}");
    let paths = r2["config_reset"]["paths"].to_string();
    for p in ["settings.json", "skills", "etc-link"] {
        assert!(paths.contains(p), "{p}: {paths}");
    }
    assert!(Path::new("/etc/passwd").exists());
}

#[test]
fn plugin_modified_from_outside_between_iterations_fails_with_96_and_the_drift() {
    if !gate() {
        return;
    }
    // The validation command runs on the host after each iteration; here it plays the attacker
    // (a root process outside the sandbox) and asks for another iteration.
    let fx = fixture(
        "echo ran",
        2,
        "validation:\n  - /bin/sh\n  - -c\n  - echo tampered >> \"$PITCREW_SANDBOX_ROOT/plugins/p/lib/util.js\"; exit 1\n",
    );
    let h = fx.harness.to_str().unwrap();
    let out = fx.pitcrew(&["run", h]).output().unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(96),
        "{table}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row2 = table
        .lines()
        .find(|l| l.starts_with("2 "))
        .unwrap_or_else(|| panic!("no row 2: {table}"));
    assert!(row2.contains("96"), "{row2}");
    assert!(row2.contains("p drifted: changed lib/util.js"), "{row2}");
    let records = table
        .lines()
        .find_map(|l| l.strip_prefix("records: "))
        .unwrap();
    let r2 = read_json(&Path::new(records).join("iteration-2/result.json"));
    assert_eq!(r2["exit_code"], 96);
    let tree = &r2["verification"]["trees"][0];
    assert_eq!(tree["status"], "drifted", "{r2}");
    assert_eq!(tree["drift"]["changed"], serde_json::json!(["lib/util.js"]));
    // Nothing was launched in iteration 2.
    assert!(r2["agent"].is_null(), "{r2}");
}

#[test]
fn cancel_from_the_host_reaches_the_agent() {
    if !gate() {
        return;
    }
    let script =
        "trap 'echo trapped > cancelled; exit 7' TERM\ntouch running\nwhile :; do sleep 0.1; done";
    let fx = fixture(script, 1, "");
    let run = fx.spawn_run(&["--keep"]);
    let id = fx.wait_sandbox();
    let ws = fx.workspace(&id);
    assert!(
        busy_wait(Duration::from_secs(30), || ws.join("running").exists()),
        "the agent never started"
    );
    let out = fx.pitcrew(&["cancel", &id]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("goes on to its next iteration"), "{said}");
    let out = run.wait_with_output().unwrap();
    // Nothing runs any more: a second cancel says so and fails.
    let idle = fx.pitcrew(&["cancel", &id]).output().unwrap();
    assert_eq!(idle.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&idle.stderr).contains("nothing to cancel"),
        "{idle:?}"
    );
    // The agent's TERM trap ran (the signal reached it), ...
    assert_eq!(read_text(&ws.join("cancelled")), "trapped\n");
    // ... and the iteration is reported as cancelled: 143 with the reason, not the trap's own
    // 7 (the supervisor's rule: an agent that handles the SIGTERM of a cancel and exits by
    // itself still ends a cancelled iteration, 128 + SIGTERM); `pitcrew run` exits with it.
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = &doc["iterations"][0];
    assert_eq!(row["exit_code"], 143, "{row}");
    assert!(
        row["reason"].as_str().unwrap().contains("cancelled"),
        "{row}"
    );
    assert_eq!(row["reason"], "cancelled: requested by the host", "{row}");
    assert_eq!(out.status.code(), Some(143));
    fx.down(&id);
}

#[test]
fn cancel_all_ends_the_whole_run_after_its_running_iteration() {
    if !gate() {
        return;
    }
    // The last iteration, with a validation that would pass: neither may turn the stop into
    // a success.
    let fx = fixture("touch running\nsleep 30", 1, "validation: [/bin/true]\n");
    let run = fx.spawn_run(&[]);
    let id = fx.wait_sandbox();
    let ws = fx.workspace(&id);
    assert!(
        busy_wait(Duration::from_secs(30), || ws.join("running").exists()),
        "the agent never started"
    );
    let out = fx.pitcrew(&["cancel", &id, "--all"]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("the run that drives it is stopped"), "{said}");
    let out = run.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // One iteration, cancelled; none after it; the run ends as after Ctrl-C.
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert_eq!(doc["stopped"], "cancelled", "{doc:#}");
    let rows = doc["iterations"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{doc:#}");
    assert_eq!(rows[0]["exit_code"], 143, "{doc:#}");
    assert_eq!(rows[0]["validation_exit"], Value::Null, "{doc:#}");
    assert!(stderr.contains("was stopped by the host"), "{stderr}");
    assert!(fx.sandboxes().is_empty());
}

#[test]
fn cancel_all_in_a_kept_sandbox_names_the_iteration_the_sandbox_ran() {
    if !gate() {
        return;
    }
    let fx = fixture("touch running\nsleep 30", 1, "");
    // A first run, kept, whose one iteration is cancelled: the sandbox has run iteration 1.
    let run = fx.spawn_run(&["--keep"]);
    let id = fx.wait_sandbox();
    let ws = fx.workspace(&id);
    let started = || busy_wait(Duration::from_secs(30), || ws.join("running").exists());
    assert!(started(), "the agent never started");
    let out = fx.pitcrew(&["cancel", &id]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    run.wait_with_output().unwrap();
    fs::remove_file(ws.join("running")).unwrap();
    // A second run in the same sandbox: its first iteration is the sandbox's second.
    let run = fx.spawn_run(&["--sandbox", &id]);
    assert!(started(), "the agent never started again");
    let out = fx.pitcrew(&["cancel", &id, "--all"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["iterations"][0]["iteration"], 2, "{doc:#}");
    assert!(
        stderr.contains("iteration 2: the run was stopped by the host"),
        "{stderr}"
    );
    fx.down(&id);
}

#[test]
fn host_killed_mid_iteration_loses_nothing() {
    if !gate() {
        return;
    }
    let script = "touch running\nsleep 1\necho finished-ok";
    let fx = fixture(script, 1, "");
    let mut run = fx.spawn_run(&[]);
    let id = fx.wait_sandbox();
    let ws = fx.workspace(&id);
    assert!(
        busy_wait(Duration::from_secs(30), || ws.join("running").exists()),
        "the agent never started"
    );
    run.kill().unwrap(); // SIGKILL: no cleanup, no stop.
    run.wait().unwrap();
    // The iteration finishes in the sandbox without the host.
    assert!(
        busy_wait(Duration::from_secs(30), || {
            let s = fx.status(&id);
            s["state"] == "idle" && s["history"].as_array().is_some_and(|h| h.len() == 1)
        }),
        "iteration 1 never finished"
    );
    let out_dir = fx.root.join("collected");
    let out = fx
        .pitcrew(&[
            "collect",
            &id,
            "--iteration",
            "1",
            "--out",
            out_dir.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let it = out_dir.join("iteration-1");
    let record = read_json(&it.join("result.json"));
    assert_eq!(record["exit_code"], 0);
    assert_eq!(read_text(&it.join("output.jsonl")), "finished-ok\n");
    let events = read_text(&it.join("events.jsonl"));
    assert!(events.contains("final-reap"), "{events}");
    fx.down(&id);
    assert!(fx.sandboxes().is_empty());
}

#[test]
fn attack_control_socket__a_non_root_user_cannot_reach_a_root_sandbox() {
    if !gate() {
        return;
    }
    let fx = fixture("echo hi", 1, "");
    let doc = fx.run_ok(&["--keep"]);
    let id = doc["sandbox"].as_str().unwrap().to_string();
    let as_nobody = |program: &Path, args: &[&str]| {
        Command::new("setpriv")
            .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
            .arg(program)
            .args(args)
            .output()
            .unwrap()
    };
    let state = fx.state.to_str().unwrap();
    // The sandbox's state is root's alone: `inspect` stops at its engine.json.
    let out = as_nobody(&binary("pitcrew"), &["inspect", &id, "--state-dir", state]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("cannot read the state of sandbox {id}"))
            && err.contains("permission denied"),
        "{err}"
    );
    // Around pitcrew, straight at the socket: refused too.
    let socket = fx
        .state
        .join("sandboxes")
        .join(&id)
        .join("run/control.sock");
    let out = as_nobody(
        &binary("pitcrew-init"),
        &["attach", "--socket", socket.to_str().unwrap()],
    );
    assert!(!out.status.success());
    // And a non-root `pitcrew run` without subordinate ids says why it cannot start a rootless
    // local sandbox (tests/rootless.rs runs one for a user that has them).
    let out = as_nobody(
        &binary("pitcrew"),
        &["run", fx.harness.to_str().unwrap(), "--state-dir", state],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("the local engine cannot run rootless"),
        "{err}"
    );
    fx.down(&id);
}

#[test]
fn ctrl_c_on_the_host_cancels_collects_and_exits_130() {
    if gate() {
        a_signal_to_pitcrew_cancels_collects_and_exits_130("-INT");
    }
}

#[test]
fn sigterm_and_sighup_to_pitcrew_cancel_collect_and_stop_like_ctrl_c() {
    if gate() {
        a_signal_to_pitcrew_cancels_collects_and_exits_130("-TERM");
        a_signal_to_pitcrew_cancels_collects_and_exits_130("-HUP");
    }
}

/// `signal` (a `kill` option) to a running `pitcrew run`: the iteration is cancelled and
/// collected, no other starts, the sandbox is stopped, and pitcrew exits 130.
fn a_signal_to_pitcrew_cancels_collects_and_exits_130(signal: &str) {
    let script = "touch running\nwhile :; do sleep 0.1; done";
    let fx = fixture(script, 3, "");
    let run = fx.spawn_run(&[]);
    let id = fx.wait_sandbox();
    let ws = fx.workspace(&id);
    assert!(
        busy_wait(Duration::from_secs(30), || ws.join("running").exists()),
        "the agent never started"
    );
    let kill = Command::new("kill")
        .args([signal, &run.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let out = run.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["stopped"], "cancelled");
    // Iteration 1 was cancelled and collected; no further iteration started.
    let rows = doc["iterations"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{doc}");
    let run_dir = PathBuf::from(doc["run_dir"].as_str().unwrap());
    let record = read_json(&run_dir.join("iteration-1/result.json"));
    assert_eq!(record["exit_code"], 143, "{record}");
    // Without --keep the sandbox was stopped.
    assert!(fx.sandboxes().is_empty());
}

#[test]
fn exec_engine_drives_an_existing_sandbox_through_a_command_template() {
    if !gate() {
        return;
    }
    // A kept local sandbox stands in for a container: the exec template reaches its supervisor
    // with `pitcrew-init attach --socket {sandbox}` (the sandbox "name" is the socket path).
    let fx = fixture("echo via-exec >> notes.txt\ncat notes.txt", 1, "");
    let doc = fx.run_ok(&["--keep"]);
    let id = doc["sandbox"].as_str().unwrap().to_string();
    let dir = fx.state.join("sandboxes").join(&id);
    let template = format!(
        "{} attach --socket {{sandbox}}",
        binary("pitcrew-init").display()
    );
    let socket = dir.join("run/control.sock");
    let doc = fx.run_ok(&[
        "--engine",
        "exec",
        "--exec-template",
        &template,
        "--sandbox",
        socket.to_str().unwrap(),
        "--sandbox-root",
        dir.join("root").to_str().unwrap(),
    ]);
    assert_eq!(doc["engine"], "exec");
    let run_dir = PathBuf::from(doc["run_dir"].as_str().unwrap());
    // The sandbox's name (a socket path here) becomes one component of the run's directory.
    assert_eq!(
        run_dir.parent(),
        Some(fx.root.join("runs").as_path()),
        "{doc}"
    );
    // The supervisor numbers iterations per sandbox: this is its second.
    let stdout = read_text(&run_dir.join("iteration-2/output.jsonl"));
    assert_eq!(
        stdout, "via-exec\n",
        "the workspace was uploaded again: {stdout}"
    );
    assert_eq!(doc["iterations"][0]["verified"], true);
    // The exec engine leaves the sandbox to its owner.
    assert!(socket.exists());
    fx.down(&id);
}

#[test]
fn a_state_dir_the_agent_cannot_reach_is_refused_and_nothing_is_left() {
    if !gate() {
        return;
    }
    let fx = fixture("echo hi", 1, "");
    // A 0700 directory above the state dir: the agent's uid could not reach its workspace.
    let private = fx.root.join("private");
    fs::create_dir(&private).unwrap();
    fs::set_permissions(&private, fs::Permissions::from_mode(0o700)).unwrap();
    let state = private.join("state");
    let out = Command::new(binary("pitcrew"))
        .args(["run", fx.harness.to_str().unwrap(), "--state-dir"])
        .arg(&state)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "{}: mode 700 does not let the agent's uid reach",
            private.display()
        )),
        "{err}"
    );
    assert!(!state.exists(), "pitcrew created {}", state.display());
}

#[test]
fn a_supervisor_that_never_listens_leaves_no_sandbox_behind() {
    if !gate() {
        return;
    }
    let fx = fixture("echo hi", 1, "");
    let out = fx
        .pitcrew(&[
            "run",
            fx.harness.to_str().unwrap(),
            "--supervisor",
            "/bin/false",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("the supervisor exited"), "{err}");
    let left: Vec<_> = fs::read_dir(fx.state.join("sandboxes"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn attack_plants__hard_links_and_refused_names_in_the_output_never_lose_the_record() {
    if !gate() {
        return;
    }
    // The agent fills `output/` with entries a collected archive may not carry (a backslash, a
    // newline, a hard link to a file root could read): they are left out, the rest arrives.
    let script = r#"mkdir -p output
printf 'kept\n' > output/ok.txt
: > 'output/a\b'
: > "output/line
break"
printf 'secret\n' > private
ln private output/hard
echo done"#;
    let fx = fixture(script, 1, "");
    let doc = fx.run_ok(&[]);
    let run_dir = PathBuf::from(doc["run_dir"].as_str().unwrap());
    let it = run_dir.join("iteration-1");
    assert_eq!(read_json(&it.join("result.json"))["exit_code"], 0);
    assert_eq!(read_text(&it.join("output/ok.txt")), "kept\n");
    let copied: Vec<String> = fs::read_dir(it.join("output"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(copied, ["ok.txt"]);
    // The record says what was left out, and why.
    let events = read_text(&it.join("events.jsonl"));
    let record = events
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["step"] == "record")
        .unwrap_or_else(|| panic!("no record event: {events}"));
    let skipped = record["detail"]["output"]["skipped"].to_string();
    for why in ["backslash", "newline", "hard link"] {
        assert!(skipped.contains(why), "{why}: {skipped}");
    }
}

#[test]
fn a_state_dir_reached_through_a_symlink_still_runs() {
    if !gate() {
        return;
    }
    // The supervisor refuses a Landlock root or agent dir reached through a symlink; pitcrew
    // hands it the real path of the state dir.
    let fx = fixture("echo through-link", 1, "");
    let link = fx.root.join("state-link");
    std::os::unix::fs::symlink(&fx.state, &link).unwrap();
    let h = fx.harness.to_str().unwrap();
    let out = Command::new(binary("pitcrew"))
        .args(["run", h, "--json", "--state-dir"])
        .arg(&link)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["iterations"][0]["exit_code"], 0, "{doc}");
}

#[test]
fn attack_terminal__agent_output_and_command_lines_reach_the_operator_escaped() {
    if !gate() {
        return;
    }
    // The agent prints a clear-screen, a bell, a carriage return and a bidi override, and runs a
    // process whose command line carries the same plus a C1 CSI: with `-v` the operator sees
    // its output, and `inspect` lists its processes.
    let script = r#"printf 'out:\033[2J\007\r\342\200\256:end\n'
sh -c 'while :; do sleep 0.1; done' "$(printf 'cmd:\033[2J\007\r\342\200\256\302\233:end')" &
touch running
while :; do sleep 0.1; done"#;
    let fx = fixture(script, 1, "");
    let h = fx.harness.to_str().unwrap();
    let run = fx
        .pitcrew(&["run", h, "--keep", "-v"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let id = fx.wait_sandbox();
    let ws = fx.workspace(&id);
    assert!(
        busy_wait(Duration::from_secs(30), || ws.join("running").exists()),
        "the agent never started"
    );
    let mut inspect = String::new();
    assert!(
        busy_wait(Duration::from_secs(10), || {
            let out = fx
                .pitcrew(&["inspect", &id, "--no-verify"])
                .output()
                .unwrap();
            inspect = String::from_utf8_lossy(&out.stdout).into_owned();
            inspect.contains("cmd:")
        }),
        "no process with the crafted command line: {inspect}"
    );
    assert!(
        pitcrew_e2e::raw_terminal_controls(&inspect).is_empty(),
        "raw {:?} in {inspect:?}",
        pitcrew_e2e::raw_terminal_controls(&inspect)
    );
    assert!(
        inspect.contains("cmd:\\x1b[2J\\x07\\r\\u{202e}\\u{9b}:end"),
        "{inspect}"
    );
    let out = fx.pitcrew(&["cancel", &id]).output().unwrap();
    assert!(out.status.success());
    let out = run.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("out:\\x1b[2J\\x07\\r\\u{202e}:end\n"),
        "{stderr}"
    );
    let raw = pitcrew_e2e::raw_terminal_controls(&stderr);
    assert!(raw.is_empty(), "raw {raw:?} in {stderr:?}");
    // The collected record keeps the agent's bytes exactly.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let records = stdout
        .lines()
        .find_map(|l| l.strip_prefix("records: "))
        .unwrap_or_else(|| panic!("{stdout}"));
    let output = read_text(&Path::new(records).join("iteration-1/output.jsonl"));
    assert!(
        output.contains("out:\u{1b}[2J\u{7}\r\u{202e}:end"),
        "{output:?}"
    );
    fx.down(&id);
}

#[test]
fn attack_output_path__a_run_dir_swapped_for_a_symlink_between_iterations_is_refused() {
    if !gate() {
        return;
    }
    // The validation command runs on the host between iterations, over what the agent wrote:
    // here it swaps the run directory for a link to a directory outside the harness directory.
    let outside = tempfile::tempdir().unwrap();
    let fx = fixture(
        "echo ran",
        2,
        &format!(
            "validation:\n  - /bin/sh\n  - -c\n  - |\n    run=$(dirname \"$PITCREW_RECORD_DIR\")\n    if [ ! -L \"$run\" ]; then mv \"$run\" \"$run.real\" && ln -s {} \"$run\"; fi\n    exit 1\n",
            outside.path().display()
        ),
    );
    let (out, doc) = fx.run(&[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let left: Vec<_> = fs::read_dir(outside.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        left.is_empty(),
        "records written outside: {left:?}\n{stderr}"
    );
    let run_dir = doc["run_dir"].as_str().unwrap();
    assert!(
        stderr.contains(&format!("iteration 2: output {run_dir} is a symlink")),
        "{stderr}"
    );
    assert!(doc["iterations"][1]["record_dir"].is_null(), "{doc:#}");
    // Iteration 1 was collected before the swap.
    let real = format!("{run_dir}.real");
    assert_eq!(
        read_json(&Path::new(&real).join("iteration-1/result.json"))["exit_code"],
        0
    );
}

/// Field 22 of `/proc/<pid>/stat` (clock ticks after boot).
/// The cells of `ps`'s table row of sandbox `id` (split on whitespace).
fn ps_row<'a>(table: &'a str, id: &str) -> Vec<&'a str> {
    table
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.first() == Some(&id))
        .unwrap_or_default()
}

fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

#[test]
fn attack_pid_reuse__down_spares_a_process_that_got_a_dead_sandboxs_pid() {
    if !gate() {
        return;
    }
    let fx = fixture("echo hi", 1, "");
    let doc = fx.run_ok(&["--keep"]);
    let id = doc["sandbox"].as_str().unwrap().to_string();
    let engine_json = fx.state.join("sandboxes").join(&id).join("engine.json");
    let mut rec = read_json(&engine_json);
    let pid = u32::try_from(rec["pid"].as_u64().unwrap()).unwrap();
    // The sandbox's process is recorded with its start time.
    assert_eq!(rec["pid_start"].as_u64(), start_time(pid), "{rec}");
    let out = fx.pitcrew(&["ps", "--engine", "local"]).output().unwrap();
    let ps = String::from_utf8_lossy(&out.stdout);
    // Running and held by no run: kept.
    assert!(ps.starts_with("ID "), "{ps}");
    assert_eq!(
        ps_row(&ps, &id).get(..3),
        Some(&[id.as_str(), "local", "kept"][..]),
        "{ps}"
    );
    let out = fx
        .pitcrew(&["ps", "--engine", "local", "-q"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{id}\n"));
    // The sandbox dies (its unshare killed: the PID namespace goes with it) ...
    let status = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(
        busy_wait(Duration::from_secs(10), || {
            fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| s.contains(") Z "))
        }),
        "pid {pid} still running"
    );
    // ... and its pid goes to an unrelated process (simulated: the record now names a `sleep`).
    let mut stranger = Command::new("sleep").arg("300").spawn().unwrap();
    rec["pid"] = stranger.id().into();
    fs::write(&engine_json, rec.to_string()).unwrap();
    let out = fx.pitcrew(&["ps", "--engine", "local"]).output().unwrap();
    let ps = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        ps_row(&ps, &id).get(..3),
        Some(&[id.as_str(), "local", "stale"][..]),
        "{ps}"
    );
    let out = fx.pitcrew(&["down", &id]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let alive = stranger.try_wait().unwrap().is_none();
    let _ = stranger.kill();
    let _ = stranger.wait();
    assert!(alive, "down signalled the stranger: {stderr}");
    assert!(
        stderr.contains(&format!("pid {} is another process now", rec["pid"])),
        "{stderr}"
    );
    assert!(fx.sandboxes().is_empty());
}

#[test]
fn a_kept_local_sandbox_is_driven_again_with_sandbox_and_left_running() {
    if !gate() {
        return;
    }
    let fx = fixture("echo ran", 1, "");
    let h = fx.harness.to_str().unwrap();
    // The supervisor logs each upload's outcome at info level (its environment is set here).
    let doc = pitcrew_run(&fx.harness, &fx.state, &["--keep"], &[("RUST_LOG", "info")]);
    let id = doc["sandbox"].as_str().unwrap().to_string();
    let log = fx.state.join("sandboxes").join(&id).join("supervisor.log");
    let first = read_text(&log);
    assert!(
        first.contains("\"sent_files\":"),
        "offered uploads: {first}"
    );
    // A log written to a file is plain text: no colour codes for a reader to quote back.
    assert!(first.contains("INFO"), "{first}");
    assert!(!first.contains('\u{1b}'), "{first:?}");
    assert!(!first.contains("\"kept\":true"), "{first}");
    // A second run in the same sandbox: uploads again, counts on, leaves it running.
    let again = fx.run_ok(&["--sandbox", &id]);
    // The trees are offered again and the sandbox already holds them: nothing is sent.
    let second = read_text(&log)[first.len()..].to_string();
    let offered: Vec<&str> = second
        .lines()
        .filter(|l| l.contains("\"sent_files\":"))
        .collect();
    assert!(!offered.is_empty(), "{second}");
    assert!(
        offered
            .iter()
            .all(|l| l.contains("\"kept\":true") && l.contains("\"sent_files\":0")),
        "{second}"
    );
    assert!(
        second
            .lines()
            .filter(|l| l.contains("needed, assembled"))
            .all(|l| l.contains(": 0 files (0 bytes) needed")),
        "{second}"
    );
    assert_eq!(again["sandbox"], id.as_str(), "{again:#}");
    assert_eq!(again["engine"], "local", "{again:#}");
    assert_eq!(again["kept"], true, "{again:#}");
    let record = read_json(&iteration_dir(&again, 2).join("result.json"));
    assert_eq!(record["exit_code"], 0, "{record:#}");
    assert_eq!(fx.sandboxes(), std::slice::from_ref(&id));
    assert_eq!(fx.status(&id)["iteration"], 2);
    // Its environment was set when it started.
    let out = fx
        .pitcrew(&["run", h, "--sandbox", &id, "--pass-env", "HOME"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("exists already"), "{stderr}");
    fx.down(&id);
    // An id nothing knows is named, with where pitcrew looked.
    let out = fx
        .pitcrew(&["run", h, "--sandbox", "pc-00000000"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no sandbox pc-00000000: looked in"),
        "{stderr}"
    );
}

#[test]
fn attack_host_state__the_agent_cannot_read_its_sandboxs_engine_json_or_supervisor_log() {
    if !gate() {
        return;
    }
    // The local engine's sandbox shares the host's filesystem: the agent's workspace is
    // <state>/sandboxes/<id>/root/workspace, so its sandbox's host-side state is two directories
    // up from where it starts, and the other sandboxes' one more.
    let script = r#"D=$(cd ../.. && pwd -P)
echo "state $D"
for f in "$D/engine.json" "$D/supervisor.log"; do
  if err=$(cat "$f" 2>&1 >/dev/null); then echo "READ $f"; else echo "denied $f: $err"; fi
done
for d in "$D" "$(dirname "$D")"; do
  if ls "$d" >/dev/null 2>&1; then echo "LISTED $d"; else echo "denied listing $d"; fi
done"#;
    let fx = fixture(script, 1, "");
    let doc = pitcrew_run(&fx.harness, &fx.state, &["--keep"], &[("RUST_LOG", "info")]);
    let id = doc["sandbox"].as_str().unwrap().to_string();
    let output = read_text(&iteration_dir(&doc, 1).join("output.jsonl"));
    let dir = fs::canonicalize(fx.state.join("sandboxes").join(&id)).unwrap();
    let engine = dir.join("engine.json");
    let log = dir.join("supervisor.log");
    // The agent found the very files (they exist, and the log says something).
    assert!(
        output.contains(&format!("state {}\n", dir.display())),
        "{output}"
    );
    assert!(engine.is_file() && !read_text(&log).is_empty(), "{output}");
    for f in [&engine, &log] {
        assert!(
            output.contains(&format!("denied {}: ", f.display())),
            "{output}"
        );
    }
    assert_eq!(
        output.matches("Permission denied").count(),
        2,
        "EACCES for both: {output}"
    );
    for d in [&dir, &dir.parent().unwrap().to_path_buf()] {
        assert!(
            output.contains(&format!("denied listing {}\n", d.display())),
            "{output}"
        );
    }
    // The operator still reads them: ps, inspect and down work.
    assert_eq!(fx.sandboxes(), std::slice::from_ref(&id));
    assert_eq!(fx.status(&id)["iteration"], 1);
    fx.down(&id);
    assert!(fx.sandboxes().is_empty());
}
