//! Trees the agent writes that would break collection and removal, played from the agent's side:
//! a `command` agent (uid 65534, the real `pitcrew-init` as PID 1 of a local sandbox) builds
//! directory chains 1,500 and 30,000 levels deep in its config dir, its workspace and
//! `output/`, or an `output/` path just under `PATH_MAX`; `pitcrew run` and `pitcrew down`
//! are observed from outside (exit codes, collected records, what is left in the state dir).
//!
//! Needs root and PID namespaces (`unshare --pid --fork --mount-proc`) and `perl` (Debian's
//! essential `perl-base`: the agent's loop of `mkdir` + `chdir`, which a shell's `cd` makes
//! quadratic at such depths); skipped otherwise, or a failure with `PITCREW_REQUIRE_E2E=1`.
#![allow(non_snake_case)] // attack_<class>__<case>: the security report's naming

use pitcrew_core::bounded_tree::{self, Step, Walk};
use pitcrew_e2e::{
    binary, prerequisite, read_json, read_text, require_pid_namespaces, write_command_harness,
};
use serde_json::Value;
use std::fs;
use std::os::fd::{AsFd as _, AsRawFd as _, BorrowedFd};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn gate() -> bool {
    require_pid_namespaces()
        && prerequisite(
            Path::new("/usr/bin/perl").exists(),
            "needs /usr/bin/perl (perl-base) for the agent's deep mkdir loop",
        )
}

/// A harness (one plugin, a hook adapter, a pinned config file uploaded into the runtime's
/// config dir, a workspace) in `harness_dir`, and a state dir; removed at the end with the
/// bounded removal (a recursive one could not remove what a failed test leaves).
struct Fixture {
    dir: tempfile::TempDir,
    harness: PathBuf,
    state: PathBuf,
}

/// `script` is the agent (`/bin/sh -c`); the harness lives in `harness_dir` below the temp dir
/// (`.` for the temp dir itself).
fn fixture(script: &str, iterations: u32, harness_dir: &Path) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path();
    fs::set_permissions(tmp, fs::Permissions::from_mode(0o755)).unwrap();
    let harness =
        write_command_harness(&tmp.join(harness_dir), script, iterations, "200s", true, "");
    let state = tmp.join("state");
    fs::create_dir(&state).unwrap();
    Fixture {
        dir,
        harness,
        state,
    }
}

impl Fixture {
    /// `pitcrew <args…> --state-dir <state>`, with at most `fds` open descriptors (the
    /// supervisor it starts inherits the limit) when given.
    fn pitcrew(&self, fds: Option<u32>, args: &[&str]) -> Output {
        let mut c = match fds {
            Some(n) => {
                let mut c = Command::new("/bin/sh");
                c.args(["-c", "ulimit -n \"$0\" && exec \"$@\"", &n.to_string()])
                    .arg(binary("pitcrew"));
                c
            }
            None => Command::new(binary("pitcrew")),
        };
        c.args(args).arg("--state-dir").arg(&self.state);
        c.output().unwrap()
    }

    /// `pitcrew run HARNESS --json --keep`: its exit code and JSON document.
    fn run_kept(&self, fds: Option<u32>) -> (Option<i32>, Value) {
        let h = self.harness.to_str().unwrap();
        let out = self.pitcrew(fds, &["run", h, "--json", "--keep"]);
        let doc = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "pitcrew run printed no JSON ({e}); exit {:?}\nstderr: {}",
                out.status.code(),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (out.status.code(), doc)
    }

    /// The sandboxes left in the state dir.
    fn left(&self) -> Vec<String> {
        match fs::read_dir(self.state.join("sandboxes")) {
            Ok(d) => d
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect(),
            Err(_) => Vec::new(),
        }
    }
}

impl Drop for Fixture {
    /// Stops what a failed test left running, and removes its trees at any depth.
    fn drop(&mut self) {
        for id in self.left() {
            let _ = self.pitcrew(None, &["down", &id, "--force"]);
        }
        let _ = bounded_tree::remove_path(self.dir.path());
    }
}

/// The text of the file `name` in the open directory `dir` (through `/proc/self/fd`, a short
/// path whatever the directory's own length).
fn read_in(dir: BorrowedFd<'_>, name: &str) -> String {
    read_text(
        &Path::new("/proc/self/fd")
            .join(dir.as_raw_fd().to_string())
            .join(name),
    )
}

/// The agent's iteration 1: a chain of `depth` directories named `d` in its config dir, its
/// workspace and (with `output`) `output/`, with a file at the bottom of each; iteration 2:
/// what the config dir and workspace hold. The chain is built bottom-up near the top (`c` moved
/// into a new `t` as `t/d`, `t` renamed `c`, again and again), since every access at depth N
/// costs Landlock a walk over N ancestors: creating it top-down is quadratic.
fn deep_script(depth: u32, output: bool) -> String {
    let tops = if output {
        "\"$PWD/../config\" \"$PWD\" \"$PWD/output\""
    } else {
        "\"$PWD/../config\" \"$PWD\""
    };
    format!(
        r#"if [ ! -f planted ]; then
  touch planted && mkdir -p output
  perl -e 'for my $top (@ARGV) {{ chdir $top or die "$top: $!"; mkdir "c" or die "mkdir: $!"; open(my $f, ">", "c/bottom") or die "bottom: $!"; print $f "deep\n"; close $f; for (2..{depth}) {{ mkdir "t" or die "mkdir: $!"; rename("c", "t/d") or die "rename: $!"; rename("t", "c") or die "rename: $!" }} rename("c", "d") or die "rename: $!" }}' {tops} || exit 9
  echo "planted {depth}"
else
  echo "config: $(ls -A ../config | tr '\n' ' ')"
  [ -d d ] && echo "workspace chain still there"
fi"#
    )
}

/// What the agent's iterations printed and the record said; then `pitcrew down` and what is
/// left. Shared by the deep-tree attacks.
fn deep_tree_attack(depth: u32, fds: Option<u32>, output: bool) {
    let fx = fixture(&deep_script(depth, output), 2, Path::new("."));
    let (code, doc) = fx.run_kept(fds);
    assert_eq!(code, Some(0), "{doc:#}");
    let run_dir = PathBuf::from(doc["run_dir"].as_str().unwrap());
    let it1 = run_dir.join("iteration-1");
    let it2 = run_dir.join("iteration-2");
    assert!(
        read_text(&it1.join("output.jsonl")).contains(&format!("planted {depth}")),
        "{doc:#}"
    );
    // Iteration 2 ran normally: the config reset removed the chain (one entry), and the agent
    // saw only the pinned file.
    let r2 = read_json(&it2.join("result.json"));
    assert_eq!(r2["exit_code"], 0, "{r2}");
    assert_eq!(r2["config_reset"]["removed"], 1, "{r2}");
    assert_eq!(r2["config_reset"]["paths"][0], "d", "{r2}");
    let second = read_text(&it2.join("output.jsonl"));
    assert!(second.contains("config: models.json \n"), "{second}");
    if output {
        // The record of iteration 1 carries the chain of `output/` down to its bottom file.
        let mut dir = bounded_tree::open_dir(&it1.join("output")).unwrap();
        for level in 0..depth {
            dir = bounded_tree::open_dir_at(dir.as_fd(), "d".as_ref())
                .unwrap_or_else(|e| panic!("record output/ level {level}: {e}"));
        }
        assert_eq!(read_in(dir.as_fd(), "bottom"), "deep\n");
    }
    // `pitcrew down` removes all of the sandbox's state, the deep workspace included.
    let id = doc["sandbox"].as_str().unwrap().to_string();
    let out = fx.pitcrew(fds, &["down", &id]);
    assert!(
        out.status.success(),
        "pitcrew down: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(fx.left().is_empty(), "left behind: {:?}", fx.left());
}

#[test]
fn attack_deep_tree__1500_levels_in_config_workspace_and_output_with_1024_descriptors() {
    if !gate() {
        return;
    }
    deep_tree_attack(1500, Some(1024), true);
}

#[test]
fn attack_deep_tree__30000_levels_in_config_and_workspace() {
    if !gate() {
        return;
    }
    deep_tree_attack(30_000, None, false);
}

#[test]
fn attack_record__an_output_path_just_under_path_max_is_collected() {
    if !gate() {
        return;
    }
    // The agent learns its own `output/` path and fills it to 4080 bytes (directories of
    // 255-byte names, then a file): the supervisor can copy it, and the host, whose run
    // directory lies ~1000 bytes deeper than the sandbox's workspace, must still collect it.
    // A second path, over 4096 bytes below `output/`, cannot travel: it is named as skipped.
    let script = r#"mkdir -p output && cd -P output || exit 9
top=$PWD
n=$(printf '%0255d' 0 | tr 0 n)
L=${#PWD}
while [ $((L + 256 + 101)) -le 4080 ]; do mkdir "$n" && cd -P "$n" || exit 9; L=$((L + 256)); done
rest=$((4080 - L - 1 - 101))
if [ "$rest" -gt 0 ]; then m=$(printf "%0${rest}d" 0 | tr 0 m); mkdir "$m" && cd -P "$m" || exit 9; fi
f=$(printf '%0100d' 0 | tr 0 f)
echo near-the-limit > "$f" || exit 9
echo "absolute $((${#PWD} + 101))"
cd -P "$top" && mkdir over && cd -P over || exit 9
i=0
while [ $i -lt 16 ]; do mkdir "$n" && cd -P "$n" || exit 9; i=$((i + 1)); done
echo over > too-long || exit 9
exit 5"#;
    let mut deep = PathBuf::new();
    for i in 0..4 {
        deep.push(format!("{i}{}", "h".repeat(240)));
    }
    let fx = fixture(script, 1, &deep);
    let (code, doc) = fx.run_kept(None);
    // The agent's own exit code, and its record on the host.
    assert_eq!(code, Some(5), "{doc:#}");
    let it = PathBuf::from(doc["run_dir"].as_str().unwrap()).join("iteration-1");
    let record = read_json(&it.join("result.json"));
    assert_eq!(record["exit_code"], 5, "{record}");
    assert!(
        read_text(&it.join("output.jsonl")).contains("absolute 4080"),
        "{}",
        read_text(&it.join("output.jsonl"))
    );
    // The near-limit file arrived (its host path is over PATH_MAX: found by walking).
    let mut walk = Walk::new(
        bounded_tree::open_dir(&it.join("output")).unwrap(),
        "output",
        10_000,
    )
    .unwrap();
    let mut found = None;
    while let Some(step) = walk.next() {
        let Step::Entry(e) = step.unwrap() else {
            panic!("limit")
        };
        if e.is_dir() {
            walk.enter().unwrap();
        } else if e.name.len() == 100 {
            let text = read_in(walk.dir(), e.name.to_str().unwrap());
            found = Some((e.rel.as_os_str().len(), text));
        }
        assert!(
            !e.rel.ends_with("too-long"),
            "the over-long entry was copied"
        );
    }
    let (len, text) = found.expect("the near-limit file is not in the collected record");
    assert!(len > 3900, "{len}");
    assert_eq!(text, "near-the-limit\n");
    // The over-long path is named in the record event.
    let events = read_text(&it.join("events.jsonl"));
    let event = events
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["step"] == "record")
        .unwrap_or_else(|| panic!("no record event: {events}"));
    let skipped = event["detail"]["output"]["skipped"].to_string();
    assert!(
        skipped.contains("over/") && skipped.contains("path longer than 4096 bytes"),
        "{skipped}"
    );
    let id = doc["sandbox"].as_str().unwrap().to_string();
    let out = fx.pitcrew(None, &["down", &id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(fx.left().is_empty());
}
