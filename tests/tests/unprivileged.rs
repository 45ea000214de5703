//! Under someone else's PID 1, as OpenShell runs its sandboxes: a podman container from the
//! production image whose PID 1 is catatonit (`podman run --init`), reached only through
//! `podman exec -i --user 1000` as the sandbox's own user, with `pitcrew-init serve --stdio
//! --unprivileged` behind a wrapper that stays its parent and holds the protocol stream
//! (`timeout`, standing in for an exec service's shell). From the agent's side: what an earlier
//! exec session or the previous iteration left running (a `setsid` daemon, a TERM-ignoring
//! loop, a delayed writer, a thread group whose leader exited) is gone before the next
//! iteration verifies, the session's own
//! wrapper survives, the verified plugin and the records (owned by the agent's uid here) are
//! not writable, neither the wrapper's protocol stream nor the supervisor's `/proc` entries are
//! reachable, and a plugin changed through a root `podman exec` fails the next iteration with
//! 96. A seccomp profile that refuses Landlock stops the iteration before launch, saying so.
//!
//! Needs root (for podman), podman and catatonit; skipped otherwise, or a failure with
//! `PITCREW_REQUIRE_E2E=1`.
#![allow(non_snake_case)] // attack tests are named attack_<class>__<case> (scripts/security-report)

use pitcrew_e2e::engines::{self, Engine, Kind};
use pitcrew_e2e::foreign_init::{ForeignInit, RECORDS, UID};
use pitcrew_e2e::{
    binary, iteration_dir, pitcrew_run_output, read_json, read_text, write_command_harness,
};
use std::fs;
use std::os::unix::fs::PermissionsExt as _;

/// The agent, every iteration: every live process's command line, its uid and no_new_privs;
/// whether it can write its verified plugin, the records, the wrapper's end of the protocol
/// stream and the supervisor's `/proc` entries; then it leaves four processes behind (their
/// markers computed, so that this script's own command line does not contain them) and makes
/// the records it owns unreadable (`chmod 000`), which Landlock does not stop.
const PROBE: &str = r#"for p in /proc/[0-9]*; do c=$(tr '\0' ' ' < $p/cmdline 2>/dev/null); [ -n "$c" ] && echo "proc $c"; done
grep '^NoNewPrivs' /proc/self/status
echo "uid $(id -u)"
try() { if (eval "$2") 2>/dev/null; then echo "$1 allowed"; else echo "$1 refused"; fi; }
try plugin_write 'echo x >> /sandbox/plugins/p/index.js'
try records_write "echo x > RECORDS/planted"
for p in /proc/[0-9]*; do
  case "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" in
    "timeout 600 pitcrew-init"*) try wrapper_stream "printf forged > $p/fd/1" ;;
    "pitcrew-init serve"*) try supervisor_environ "cat $p/environ > /dev/null"; try supervisor_stream "printf forged > $p/fd/1" ;;
  esac
done
if [ -e leaderless.out ]; then a=$(wc -c < leaderless.out); sleep 0.3; echo "leaderless grew $(($(wc -c < leaderless.out) - a))"; fi
./leaderless leaderless.out < /dev/null > /dev/null 2>&1 & sleep 0.5
setsid sleep $((987000 + 656)) < /dev/null > /dev/null 2>&1 &
sh -c "trap '' TERM; while :; do sleep 1; done" ignorer-$((111000 + 222)) < /dev/null > /dev/null 2>&1 &
setsid sh -c "sleep 2; echo planted >> /sandbox/plugins/p/index.js" writer-$((333000 + 444)) < /dev/null > /dev/null 2>&1 &
mkdir -p output/sub && echo kept > output/sub/y
chmod 000 RECORDS/iteration-*/output/sub/y RECORDS/iteration-*/output/sub RECORDS/iteration-* RECORDS/iteration-*/* RECORDS 2>/dev/null
exit 0"#;

#[test]
fn attack_leftovers__an_unprivileged_session_under_catatonit_reaps_what_earlier_ones_left() {
    if !engines::require(Kind::Podman) {
        return;
    }
    let engine = Engine::start(Kind::Podman);
    let image = engine.image("pi");
    let sandbox = ForeignInit::start(&engine, &image, "unpriv", &[]);
    // PID 1 is catatonit (podman mounts it as /run/podman-init), not pitcrew-init.
    let init = sandbox.exec(
        None,
        &["sh", "-c", "cat /proc/1/cmdline; /proc/1/exe --version"],
    );
    let init = String::from_utf8_lossy(&init.stdout);
    assert!(
        init.starts_with("/run/podman-init\0--\0/bin/sleep") && init.contains("catatonit"),
        "{init}"
    );
    // What an earlier exec session of the same user left: a daemon in its own session, and
    // a loop that ignores SIGTERM.
    sandbox.leave_running(&["setsid", "sleep", "987655"]);
    sandbox.leave_running(&[
        "sh",
        "-c",
        "trap '' TERM; while :; do sleep 1; done",
        "session-ignorer",
    ]);

    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    // After the second iteration, root changes the plugin through `podman exec`.
    let tamper = format!(
        "validation:\n  - /bin/sh\n  - -c\n  - '[ \"$PITCREW_ITERATION\" = 2 ] && podman exec {} sh -c \"echo tampered >> /sandbox/plugins/p/index.js\"; exit 1'\n",
        sandbox.name
    );
    let probe = PROBE.replace("RECORDS", RECORDS);
    let harness = write_command_harness(dir.path(), &probe, 3, "60s", false, &tamper);
    // A thread group whose leader exits, left by each iteration (its leader is a zombie in /proc).
    fs::copy(
        binary("leaderless"),
        dir.path().join("workspace/leaderless"),
    )
    .unwrap();
    let state = dir.path().join("state");
    fs::create_dir(&state).unwrap();
    let args = sandbox.run_args("timeout 600");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let env = engine.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (out, doc) = pitcrew_run_output(&harness, &state, &args, &env);
    assert_eq!(out.status.code(), Some(96), "{doc:#}");

    for n in 1..=2 {
        let it = iteration_dir(&doc, n);
        let record = read_json(&it.join("result.json"));
        // Iteration 2 verified: nothing of iteration 1 changed the plugin in between.
        assert_eq!(record["exit_code"], 0, "{record:#}");
        assert_eq!(record["supervisor"]["mode"], "unprivileged", "{record:#}");
        assert_eq!(record["confinement"]["uid"], 1000, "{record:#}");
        assert_eq!(
            record["confinement"]["landlock"]["mode"], "required",
            "{record:#}"
        );
        let seen = read_text(&it.join("output.jsonl"));
        // The earlier session's leftovers and the previous iteration's are gone; the exec
        // session's own wrapper (an ancestor) is not.
        for gone in [
            "987655",
            "session-ignorer",
            "987656",
            "ignorer-111222",
            "writer-333444",
        ] {
            assert!(!seen.contains(gone), "iteration {n}: {gone}\n{seen}");
        }
        assert!(
            seen.contains("proc timeout 600 pitcrew-init serve"),
            "{seen}"
        );
        assert!(seen.contains(&format!("uid {UID}")), "{seen}");
        assert!(seen.contains("NoNewPrivs:\t1"), "{seen}");
        if n == 2 {
            // Computed, so that the script's own command line above does not contain it.
            assert!(seen.contains("leaderless grew 0\n"), "{seen}");
        }
        // The agent's uid owns the plugin and the records here; Landlock keeps them, and the
        // stream and the supervisor are outside its domain.
        for refused in [
            "plugin_write",
            "records_write",
            "wrapper_stream",
            "supervisor_environ",
            "supervisor_stream",
        ] {
            assert!(
                seen.contains(&format!("{refused} refused")),
                "iteration {n}: {refused}\n{seen}"
            );
        }
    }
    // Changed by root between iterations: the third refuses to launch.
    let third = read_json(&iteration_dir(&doc, 3).join("result.json"));
    assert_eq!(third["exit_code"], 96, "{third:#}");
    assert!(third["agent"].is_null(), "{third:#}");

    // The operator commands over the same transport: inspect sees the mode and the only agent
    // identity, collect fetches a record from a new session.
    let template = ForeignInit::template("");
    let over = [
        "--engine",
        "exec",
        "--exec-template",
        &template,
        "--sandbox-root",
        "/sandbox",
    ];
    let pitcrew = |cmd: &[&str]| {
        std::process::Command::new(binary("pitcrew"))
            .args(cmd)
            .args(over)
            .envs(engine.env())
            .output()
            .unwrap()
    };
    let inspect = pitcrew(&["inspect", &sandbox.name, "--json"]);
    assert!(inspect.status.success(), "{inspect:?}");
    let shown: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert_eq!(shown["capabilities"]["mode"], "unprivileged", "{shown:#}");
    assert_eq!(
        shown["capabilities"]["agent_user"]["uid"], 1000,
        "{shown:#}"
    );
    let fetched = dir.path().join("fetched");
    let collect = pitcrew(&[
        "collect",
        &sandbox.name,
        "--iteration",
        "1",
        "--out",
        fetched.to_str().unwrap(),
    ]);
    assert!(collect.status.success(), "{collect:?}");
    let again = read_json(&fetched.join("iteration-1/result.json"));
    // Iteration 2's agent made everything of it unreadable, nested entries included.
    assert_eq!(
        read_text(&fetched.join("iteration-1/output/sub/y")),
        "kept\n"
    );
    assert_eq!(again["iteration"], 1, "{again:#}");
    assert_eq!(again["supervisor"]["mode"], "unprivileged", "{again:#}");

    // As root, the unprivileged mode is refused: it would reap every root process in sight.
    let out = sandbox.exec(
        None,
        &["pitcrew-init", "serve", "--stdio", "--unprivileged"],
    );
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--unprivileged as root"),
        "{out:?}"
    );
}

/// `pitcrew run` of a `command` harness (in `dir`) whose agent runs `script` for `iterations`,
/// in `sandbox` over its exec transport (`wrapper` before `pitcrew-init`): the exit code and
/// the run's document.
fn run_script(
    engine: &Engine,
    sandbox: &ForeignInit,
    dir: &std::path::Path,
    wrapper: &str,
    script: &str,
    iterations: u32,
) -> (Option<i32>, serde_json::Value) {
    let harness = write_command_harness(dir, script, iterations, "60s", false, "");
    let state = dir.join("state");
    fs::create_dir(&state).unwrap();
    let args = sandbox.run_args(wrapper);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let env = engine.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (out, doc) = pitcrew_run_output(&harness, &state, &args, &env);
    (out.status.code(), doc)
}

/// The agent, each iteration: says what an earlier one left in its home, temporary directory
/// and `output/`, then leaves some there and makes the three directories (and one below its
/// home) unreadable to their owner, which in the unprivileged mode is the supervisor too.
const UNREADABLE: &str = r#"for p in "$HOME/.bashrc" "$HOME/.agents/skills/x/SKILL.md" "$HOME/sub/f" "$TMPDIR/planted" output/old.txt; do
  [ -e "$p" ] && echo "survived $p"
done
ls -A "$HOME" "$TMPDIR" output 2>&1 | sed 's/^/listing /'
echo 'echo planted' > "$HOME/.bashrc"
mkdir -p "$HOME/.agents/skills/x" "$HOME/sub" output
echo skill > "$HOME/.agents/skills/x/SKILL.md"; echo f > "$HOME/sub/f"; chmod 000 "$HOME/sub"
echo x > "$TMPDIR/planted"; echo x > output/old.txt
chmod 300 "$HOME" "$TMPDIR" output
echo done"#;

/// In the unprivileged mode the supervisor has no root to override a mode: an agent that made
/// its home, temporary directory and `output/` unreadable (and a directory in its home
/// unsearchable) still finds them emptied by the next iteration, which runs instead of failing.
#[test]
fn attack_leftovers__an_unreadable_home_is_still_emptied_in_the_unprivileged_mode() {
    if !engines::require(Kind::Podman) {
        return;
    }
    let engine = Engine::start(Kind::Podman);
    let image = engine.image("pi");
    let sandbox = ForeignInit::start(&engine, &image, "unpriv-home", &[]);
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let (code, doc) = run_script(&engine, &sandbox, dir.path(), "timeout 600", UNREADABLE, 2);
    assert_eq!(code, Some(0), "{doc:#}");
    let second = read_json(&iteration_dir(&doc, 2).join("result.json"));
    assert_eq!(second["exit_code"], 0, "{second:#}");
    assert_eq!(second["supervisor"]["mode"], "unprivileged", "{second:#}");
    let seen = read_text(&iteration_dir(&doc, 2).join("output.jsonl"));
    assert!(seen.contains("done"), "{seen}");
    assert!(!seen.contains("survived"), "{seen}");
    let home = second["home_reset"]["paths"].to_string();
    for gone in [".bashrc", ".agents", "sub"] {
        assert!(home.contains(gone), "{gone}: {second:#}");
    }
    assert!(
        second["tmp_reset"]["paths"].to_string().contains("planted"),
        "{second:#}"
    );
    assert!(
        second["output_reset"]["paths"]
            .to_string()
            .contains("old.txt"),
        "{second:#}"
    );
}

/// Podman's default seccomp profile with the `landlock_*` calls refused (EPERM), written to
/// `path`: a platform whose filter would stop pitcrew's own confinement.
fn profile_refusing_landlock(path: &std::path::Path) {
    profile_refusing(
        path,
        &[
            "landlock_create_ruleset",
            "landlock_add_rule",
            "landlock_restrict_self",
        ],
    );
}

/// Podman's default seccomp profile with the system calls `names` refused (EPERM), written to
/// `path`.
fn profile_refusing(path: &std::path::Path, names: &[&str]) {
    let text = fs::read_to_string("/usr/share/containers/seccomp.json")
        .expect("podman's default seccomp profile");
    let mut profile: serde_json::Value = serde_json::from_str(&text).unwrap();
    for rule in profile["syscalls"].as_array_mut().unwrap() {
        rule["names"]
            .as_array_mut()
            .unwrap()
            .retain(|n| !n.as_str().is_some_and(|n| names.contains(&n)));
    }
    profile["syscalls"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({
            "names": names,
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": 1,
        }));
    fs::write(path, serde_json::to_string(&profile).unwrap()).unwrap();
}

#[test]
fn attack_confinement__a_seccomp_filter_that_refuses_landlock_stops_the_unprivileged_mode() {
    if !engines::require(Kind::Podman) {
        return;
    }
    let engine = Engine::start(Kind::Podman);
    let image = engine.image("pi");
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let profile = dir.path().join("seccomp.json");
    profile_refusing_landlock(&profile);
    let opt = format!("seccomp={}", profile.display());
    let sandbox = ForeignInit::start(&engine, &image, "nolandlock", &["--security-opt", &opt]);

    let (code, doc) = run_script(&engine, &sandbox, dir.path(), "", "echo ran", 1);
    assert_eq!(code, Some(125), "{doc:#}");
    let record = read_json(&iteration_dir(&doc, 1).join("result.json"));
    let reason = record["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("Landlock is required (the unprivileged mode) but unavailable")
            && reason.contains("refused by a seccomp filter"),
        "{record:#}"
    );
    assert!(record["agent"].is_null(), "{record:#}");
}

/// The agent, as the supervisor's own uid: finds the supervisor in `/proc` and tries every call
/// that acts on another process by id and that the kernel allows the same uid (util-linux's
/// `prlimit`, `renice`, `ionice`, `taskset`, `chrt`), then the same calls on itself, which
/// still work; it says what the supervisor's limits are afterwards and leaves a file in
/// `output/` for the record.
const LIMITS: &str = r#"sup=""
for p in /proc/[0-9]*; do
  case "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" in "pitcrew-init serve"*) sup=${p#/proc/};; esac
done
echo "supervisor $sup"
try() { if (eval "$2") > /dev/null 2>&1; then echo "$1 allowed"; else echo "$1 refused"; fi; }
try fsize "prlimit --pid $sup --fsize=0"
try nofile "prlimit --pid $sup --nofile=4"
try cpu "prlimit --pid $sup --cpu=1"
try renice "renice -n 19 -p $sup"
try renice_user "renice -n 19 -u $(id -u)"
try ionice "ionice -c 3 -p $sup"
try affinity "taskset -p 1 $sup"
try idle "chrt -i -p 0 $sup"
try own_limit "prlimit --nofile=64 true"
try own_nice "nice -n 5 true"
try own_ionice "ionice -c 3 true"
try own_affinity "taskset 1 true"
grep -E '^Max (file size|open files|cpu time)' /proc/$sup/limits
mkdir -p output && echo kept > output/x
exit 0"#;

/// Under `serve --stdio --unprivileged` the agent shares the supervisor's uid, which is all
/// `prlimit64`, `setpriority`, `ioprio_set` and `sched_set*` on another process ask for; the
/// seccomp filter refuses them on any process but the caller's own. Before, `prlimit
/// --fsize=0` of the supervisor lost the iteration's record (its `output/` arrived empty) and
/// killed the next agent with SIGXFSZ.
#[test]
fn attack_limits__the_agent_cannot_lower_the_unprivileged_supervisors_limits_or_priority() {
    if !engines::require(Kind::Podman) {
        return;
    }
    let engine = Engine::start(Kind::Podman);
    let image = engine.image("pi");
    let sandbox = ForeignInit::start(&engine, &image, "unpriv-limits", &[]);
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let (code, doc) = run_script(&engine, &sandbox, dir.path(), "timeout 600", LIMITS, 2);
    assert_eq!(code, Some(0), "{doc:#}");
    for n in 1..=2 {
        let it = iteration_dir(&doc, n);
        let record = read_json(&it.join("result.json"));
        assert_eq!(record["exit_code"], 0, "{record:#}");
        assert_eq!(record["supervisor"]["mode"], "unprivileged", "{record:#}");
        let seen = read_text(&it.join("output.jsonl"));
        assert!(
            !seen.contains("supervisor \n"),
            "no supervisor found: {seen}"
        );
        for refused in [
            "fsize",
            "nofile",
            "cpu",
            "renice",
            "renice_user",
            "ionice",
            "affinity",
            "idle",
        ] {
            assert!(
                seen.contains(&format!("{refused} refused")),
                "iteration {n}: {refused}\n{seen}"
            );
        }
        for allowed in ["own_limit", "own_nice", "own_ionice", "own_affinity"] {
            assert!(
                seen.contains(&format!("{allowed} allowed")),
                "iteration {n}: {allowed}\n{seen}"
            );
        }
        assert!(seen.contains("Max file size") && !seen.contains("Max file size            0"));
        // The record is whole: what the agent left in output/ arrived.
        assert_eq!(read_text(&it.join("output/x")), "kept\n");
        let seccomp = &record["confinement"]["seccomp"];
        assert_eq!(seccomp["installed"], true, "{record:#}");
        for call in [
            "prlimit64",
            "setpriority",
            "ioprio_set",
            "sched_setscheduler",
        ] {
            assert!(
                seccomp["self_only_syscalls"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|c| c == call)),
                "{call}: {record:#}"
            );
        }
        assert!(record["supervisor_restored"].is_null(), "{record:#}");
    }
}

/// The agent makes every directory of its uid on the supervisor's paths unusable (`chmod
/// 000`): the sandbox's top directory, the uploads root and the records directory.
const CHMOD: &str = r#"mkdir -p output && echo kept > output/x
for d in TARGETS; do chmod 000 "$d" && echo "chmod $d"; done
exit 0"#;

/// The exec engine's arguments for a layout (the uploads root and the records directory), as
/// `inspect` and `collect` take them; `pitcrew run` adds `--sandbox NAME`.
fn layout_args(root: &str, records: &str) -> Vec<String> {
    let template = format!(
        "podman exec -i --user {UID}:{UID} {{sandbox}} pitcrew-init serve --stdio --unprivileged --records {records}"
    );
    [
        "--engine",
        "exec",
        "--exec-template",
        &template,
        "--sandbox-root",
        root,
    ]
    .map(String::from)
    .to_vec()
}

/// `pitcrew CMD… OVER…` as the operator runs it over the exec transport (`OVER`: the engine's
/// arguments, [`layout_args`]), with the engine's environment.
fn operator(engine: &Engine, over: &[String], cmd: &[&str]) -> std::process::Output {
    std::process::Command::new(binary("pitcrew"))
        .args(cmd)
        .args(over)
        .envs(engine.env())
        .output()
        .unwrap()
}

/// How many records a new session's `inspect` lists as not collected.
fn uncollected(engine: &Engine, sandbox: &ForeignInit, over: &[String]) -> serde_json::Value {
    let inspect = operator(engine, over, &["inspect", &sandbox.name, "--json"]);
    assert!(inspect.status.success(), "{inspect:?}");
    let shown: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
    shown["status"]["uncollected"].clone()
}

/// Landlock does not cover `chmod`, and in the unprivileged mode the agent owns the uploads
/// root, the records directory and (in OpenShell's layout) their parent `/sandbox`. Before,
/// `chmod 000` of them lost the iteration's record, failed the next iteration with 125 and every
/// later `run`, `collect` and `inspect`. The supervisor holds them by descriptor and gives them
/// their modes back after every reap and before each request: in both documented layouts the
/// record arrives whole, the next iteration runs, and a later run, collect and inspect work.
#[test]
fn attack_record__chmod_of_the_sandbox_directories_locks_nothing_in_the_unprivileged_mode() {
    if !engines::require(Kind::Podman) {
        return;
    }
    let engine = Engine::start(Kind::Podman);
    let image = engine.image("pi");
    // The tests' layout (uploads in /sandbox, records beside it) and OpenShell's (both below
    // /sandbox, which the sandbox user owns).
    for (tag, root, records, targets) in [
        ("chmod-a", "/sandbox", RECORDS, "/sandbox RECORDS"),
        (
            "chmod-b",
            "/sandbox/.pitcrew",
            "/sandbox/.pitcrew-records",
            "/sandbox/.pitcrew-records /sandbox/.pitcrew /sandbox",
        ),
    ] {
        let sandbox = ForeignInit::start(&engine, &image, tag, &[]);
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let script = CHMOD.replace("TARGETS", &targets.replace("RECORDS", RECORDS));
        let harness = write_command_harness(dir.path(), &script, 2, "60s", false, "");
        let over = layout_args(root, records);
        let mut args: Vec<&str> = over.iter().map(String::as_str).collect();
        args.extend(["--sandbox", &sandbox.name]);
        let env = engine.env();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        for run in 1..=2 {
            let state = dir.path().join(format!("state-{run}"));
            fs::create_dir(&state).unwrap();
            let (out, doc) = pitcrew_run_output(&harness, &state, &args, &env);
            assert_eq!(out.status.code(), Some(0), "{tag} run {run}: {doc:#}");
            // A run on a kept sandbox goes on numbering its iterations (3 and 4 in the second).
            let done = doc["iterations"].as_array().cloned().unwrap_or_default();
            assert_eq!(done.len(), 2, "{tag} run {run}: {doc:#}");
            for (n, iteration) in done.iter().enumerate() {
                let it = std::path::PathBuf::from(iteration["record_dir"].as_str().unwrap());
                let record = read_json(&it.join("result.json"));
                assert_eq!(record["exit_code"], 0, "{tag} run {run}: {record:#}");
                assert_eq!(read_text(&it.join("output/x")), "kept\n", "{tag} {n}");
                // The agent's chmod, set back after the final reap and named in the record.
                let restored = record["supervisor_restored"]["modes"].to_string();
                assert!(restored.contains("/sandbox 0 -> 755"), "{tag}: {record:#}");
            }
        }
        let pitcrew = |cmd: &[&str]| operator(&engine, &over, cmd);
        let inspect = pitcrew(&["inspect", &sandbox.name, "--json"]);
        assert!(inspect.status.success(), "{tag}: {inspect:?}");
        let fetched = dir.path().join("fetched");
        let collect = pitcrew(&[
            "collect",
            &sandbox.name,
            "--iteration",
            "4",
            "--out",
            fetched.to_str().unwrap(),
        ]);
        assert!(collect.status.success(), "{tag}: {collect:?}");
        assert_eq!(read_text(&fetched.join("iteration-4/output/x")), "kept\n");
        // The last iteration's chmod, set back after its final reap: nothing stays locked.
        let modes = sandbox.exec(None, &["stat", "-c", "%a %n", "/sandbox", records, root]);
        let modes = String::from_utf8_lossy(&modes.stdout);
        assert!(
            !modes.lines().any(|l| l.starts_with("0 ")),
            "{tag}: {modes}"
        );
    }
}

/// The agent, each iteration: leaves a nested file in `output/` and gives the sandbox's top
/// directory and the records directory (both its uid's) a default POSIX ACL granting nobody
/// anything (`u::---,g::---,o::---`, written as the `system.posix_acl_default` xattr with perl's
/// raw `setxattr`). Neither Landlock nor `chmod` covers it: every entry created below them later
/// (by the supervisor, whatever mode it asks for) starts with mode 000.
const DEFAULT_ACL: &str = r#"mkdir -p output/sub && echo kept > output/sub/y && echo kept > output/x
perl -MConfig -e '$nr = $Config{archname} =~ /aarch64/ ? 5 : 188; $name = "system.posix_acl_default"; $acl = pack("V" . "vvV" x 3, 2, 1, 0, 4294967295, 4, 0, 4294967295, 32, 0, 4294967295); for (@ARGV) { $p = $_; print syscall($nr, $p, $name, $acl, length($acl), 0) == 0 ? "acl $p\n" : "acl $p: $!\n" }' /sandbox RECORDS
exit 0"#;

/// A default ACL is not a mode: before, the supervisor gave its directories their modes back,
/// but the ACL stayed, and every directory and file it created below them afterwards started
/// with mode 000. The next iteration's copy of `output/sub/y` failed (the record arrived
/// without it), every later run failed its first upload (its staging directory was unusable)
/// and the next session could not read `.collected`, so every collected record counted as
/// uncollected and retention never deleted one. Now the agent's `setxattr` fails as on a file
/// system without ACLs (the seccomp filter), and the supervisor removes any ACL of a directory
/// it holds.
#[test]
fn attack_record__a_default_acl_on_the_sandbox_directories_locks_nothing_in_the_unprivileged_mode()
{
    if !engines::require(Kind::Podman) {
        return;
    }
    let engine = Engine::start(Kind::Podman);
    let image = engine.image("pi");
    let sandbox = ForeignInit::start(&engine, &image, "default-acl", &[]);
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let script = DEFAULT_ACL.replace("RECORDS", RECORDS);
    let harness = write_command_harness(dir.path(), &script, 2, "60s", false, "");
    let over = layout_args("/sandbox", RECORDS);
    let mut args: Vec<&str> = over.iter().map(String::as_str).collect();
    args.extend(["--sandbox", &sandbox.name]);
    let env = engine.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut broken = Vec::new();

    let state = dir.path().join("state-1");
    fs::create_dir(&state).unwrap();
    let (out, doc) = pitcrew_run_output(&harness, &state, &args, &env);
    assert_eq!(out.status.code(), Some(0), "run 1: {doc:#}");
    let first = read_text(&iteration_dir(&doc, 1).join("output.jsonl"));
    assert!(
        first.contains(&format!("acl {RECORDS}: Operation not supported\n")),
        "{first}"
    );
    for n in 1..=2 {
        let it = iteration_dir(&doc, n);
        if !it.join("output/sub/y").is_file() {
            broken.push(format!("iteration {n}: output/sub/y lost from the record"));
        }
    }

    // A later run in a new session: its uploads must not be refused.
    let harness_arg = harness.to_str().unwrap();
    let run = ["run", harness_arg, "--json", "--sandbox", &sandbox.name];
    let out = operator(&engine, &over, &run);
    if out.status.code() != Some(0) {
        broken.push(format!(
            "run 2: exit {:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }

    // Every record was collected by its run: a new session must know it.
    let uncollected = uncollected(&engine, &sandbox, &over);
    if uncollected["count"] != 0 {
        broken.push(format!(
            "inspect: collected records listed as uncollected: {uncollected}"
        ));
    }
    assert!(broken.is_empty(), "{broken:#?}");
}

/// The agent makes the records directory's `.collected` (the records the host said it holds)
/// unreadable to its owner, the supervisor. Nothing gives a file there its mode back: the next
/// session reads no collected record, lists every one as uncollected, and retention (which
/// deletes collected records only) never deletes one again.
#[test]
fn attack_record__an_unreadable_collected_file_forgets_nothing_in_the_unprivileged_mode() {
    if !engines::require(Kind::Podman) {
        return;
    }
    let engine = Engine::start(Kind::Podman);
    let image = engine.image("pi");
    let sandbox = ForeignInit::start(&engine, &image, "collected", &[]);
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let script = format!("chmod 000 {RECORDS}/.collected 2>/dev/null; exit 0");
    let (code, doc) = run_script(&engine, &sandbox, dir.path(), "", &script, 3);
    assert_eq!(code, Some(0), "{doc:#}");
    // The run collected all three records; a new session must still know it.
    let uncollected = uncollected(&engine, &sandbox, &layout_args("/sandbox", RECORDS));
    assert_eq!(uncollected["count"], 0, "{uncollected}");
}

/// The agent under `network: allow` in a networked sandbox, as a node script (the image's):
/// an echo through the mirror of `MIRRORED`, then what must fail (direct TCP to this machine's
/// outside address and to its loopback's `UNLISTED` port, UDP, DNS, IPv6, the abstract socket
/// `ABSTRACT` of the sandbox's namespace), its interfaces, ids, id map and capability and
/// `no_new_privs`/seccomp lines, and whether it can join the sandbox's network namespace or
/// make one of its own; into `output/probe.json`.
const NET_PROBE: &str = r#"mkdir -p output
node - <<'PROBE'
const net = require('net'), dgram = require('dgram'), dns = require('dns'), fs = require('fs');
const cp = require('child_process');
const res = {};
const fail = (p) => p.then(() => 'connected', (e) => e.code || String(e));
const conn = (opts) => new Promise((ok, no) => {
  const s = net.connect(opts, () => { s.destroy(); ok(); });
  s.on('error', no); s.setTimeout(5000, () => { s.destroy(); no(new Error('ETIMEDOUT')); });
});
const echo = (port, data) => new Promise((ok, no) => {
  let out = '';
  const s = net.connect({ host: '127.0.0.1', port }, () => s.end(data));
  s.on('data', (d) => out += d); s.on('end', () => ok(out)); s.on('error', (e) => no(e));
});
const sh = (cmd) => { try { cp.execSync(cmd, { stdio: 'ignore' }); return 'allowed'; } catch (e) { return 'refused'; } };
(async () => {
  res.mirror = await echo(MIRRORED, 'hello mirror').catch((e) => e.code);
  res.outside = OUTSIDE ? await fail(conn({ host: OUTSIDE, port: UNLISTED })) : 'ENETUNREACH';
  res.loopback = await fail(conn({ host: '127.0.0.1', port: UNLISTED }));
  res.udp = await new Promise((ok) => { const u = dgram.createSocket('udp4');
    u.send('x', 53, '8.8.8.8', (e) => { u.close(); ok(e ? e.code : 'sent'); }); });
  res.dns = await dns.promises.lookup('example.com').then(() => 'resolved', (e) => e.code);
  res.ipv6 = await fail(conn({ host: '2606:4700::1111', port: 443 }));
  res.abstract = await fail(conn({ path: '\0ABSTRACT' }));
  res.dev = fs.readFileSync('/proc/net/dev', 'utf8').split('\n').slice(2)
    .map((l) => l.split(':')[0].trim()).filter((n) => n);
  res.uid = process.getuid(); res.gid = process.getgid();
  res.uid_map = fs.readFileSync('/proc/self/uid_map', 'utf8').trim().split(/\s+/).join(' ');
  res.status = fs.readFileSync('/proc/self/status', 'utf8').split('\n')
    .filter((l) => /^(Cap(Inh|Prm|Eff|Amb|Bnd)|NoNewPrivs|Seccomp):/.test(l))
    .map((l) => l.replace(/\s+/g, ' '));
  res.setns_sandbox = sh('nsenter --net=/proc/1/ns/net true');
  res.setns_user = sh('nsenter --user=/proc/1/ns/user true');
  res.unshare_net = sh('unshare --net true');
  fs.writeFileSync('output/probe.json', JSON.stringify(res));
})();
PROBE
"#;

/// The unprivileged mode in a sandbox with this machine's network (`podman run --network
/// host`): the supervisor, without CAP_SYS_ADMIN, cannot unshare a network namespace, and makes
/// the agent's through an unprivileged user namespace, under `none` (nothing reached, lo only)
/// and under `allow`. The allowed endpoint is reached through
/// the mirror and recorded; direct TCP, UDP, DNS, IPv6 and the sandbox's abstract sockets are
/// not; the agent keeps its uid and gid, has no capability, no_new_privs and seccomp, and can
/// neither join the sandbox's namespaces nor unshare a network namespace of its own.
#[test]
fn attack_egress__an_unprivileged_supervisor_in_a_networked_sandbox_confines_the_agent_through_a_user_namespace(
) {
    if !engines::require(Kind::Podman) {
        return;
    }
    let engine = Engine::start(Kind::Podman);
    let image = engine.image("pi");
    let sandbox = ForeignInit::start(&engine, &image, "unpriv-net", &["--network=host"]);
    let (mirrored, unlisted) = (echo_server("127.0.0.1"), echo_server("0.0.0.0"));
    let abstract_name = format!("pitcrew-unpriv-abstract-{}", std::process::id());
    let abstract_listener = {
        use std::os::linux::net::SocketAddrExt as _;
        let addr =
            std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap();
        let l = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
        l.set_nonblocking(true).unwrap();
        l
    };
    let outside = outside_address()
        .map(|ip| format!("'{ip}'"))
        .unwrap_or("''".into());
    let script = NET_PROBE
        .replace("MIRRORED", &mirrored.to_string())
        .replace("UNLISTED", &unlisted.to_string())
        .replace("OUTSIDE", &outside)
        .replace("ABSTRACT", &abstract_name);
    // One `pitcrew run` of the probe under `network` (a harness of its own; the sandbox's
    // iteration `n`): record and probe.
    let run = |network: &str, n: usize| {
        let dir = tempfile::tempdir().unwrap();
        let extra = format!("keep_output: true\n{network}");
        let harness = write_command_harness(dir.path(), &script, 1, "60s", false, &extra);
        let state = dir.path().join("state");
        fs::create_dir(&state).unwrap();
        let args = sandbox.run_args("timeout 600");
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let env = engine.env();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let (out, doc) = pitcrew_run_output(&harness, &state, &args, &env);
        let it = iteration_dir(&doc, n);
        let record = read_json(&it.join("result.json"));
        assert_eq!(out.status.code(), Some(0), "{doc:#}\n{record:#}");
        (record, read_json(&it.join("output/probe.json")))
    };
    // `none` first: the same namespace, no listener in it.
    let (record, probe) = run("network: none\n", 1);
    assert_eq!(record["network"]["namespace"], "agent", "{record:#}");
    assert_eq!(
        record["network"]["namespace_via"], "user-namespace",
        "{record:#}"
    );
    assert_eq!(probe["mirror"], "ECONNREFUSED", "{probe:#}");
    assert_eq!(probe["outside"], "ENETUNREACH", "{probe:#}");
    assert_eq!(probe["dev"], serde_json::json!(["lo"]), "{probe:#}");
    assert_eq!(probe["uid"], 1000, "{probe:#}");
    let (record, probe) = run(
        &format!("network:\n  allow: [\"127.0.0.1:{mirrored}\"]\n"),
        2,
    );
    assert_eq!(record["supervisor"]["mode"], "unprivileged", "{record:#}");
    assert_eq!(record["network"]["namespace"], "agent", "{record:#}");
    assert_eq!(
        record["network"]["namespace_via"], "user-namespace",
        "{record:#}"
    );
    assert_eq!(probe["mirror"], "hello mirror", "{probe:#}");
    let conns = record["network"]["connections"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(conns.len(), 1, "{record:#}");
    assert_eq!(
        (conns[0]["via"].as_str(), conns[0]["allowed"].as_bool()),
        (Some("mirror"), Some(true))
    );
    for (case, errno) in [
        ("outside", "ENETUNREACH"),
        ("loopback", "ECONNREFUSED"),
        ("udp", "ENETUNREACH"),
        ("ipv6", "ENETUNREACH"),
        ("abstract", "ECONNREFUSED"),
    ] {
        assert_eq!(probe[case], errno, "{case}: {probe:#}");
    }
    assert_ne!(probe["dns"], "resolved", "{probe:#}");
    assert!(
        abstract_listener.accept().is_err(),
        "the abstract socket was reached"
    );
    assert_eq!(probe["dev"], serde_json::json!(["lo"]), "{probe:#}");
    // Its ids as before, seen from inside (the map is its own uid only) and from the sandbox.
    assert_eq!(
        (probe["uid"].as_u64(), probe["gid"].as_u64()),
        (Some(1000), Some(1000))
    );
    assert_eq!(probe["uid_map"], "1000 1000 1", "{probe:#}");
    assert_eq!(record["confinement"]["uid"], 1000, "{record:#}");
    // Its bounding set, full in the user namespace it joined, emptied before exec.
    assert_eq!(record["confinement"]["caps_cleared"], true, "{record:#}");
    let status: Vec<&str> = probe["status"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    for line in [
        "CapInh: 0000000000000000",
        "CapPrm: 0000000000000000",
        "CapEff: 0000000000000000",
        "CapAmb: 0000000000000000",
        "CapBnd: 0000000000000000",
        "NoNewPrivs: 1",
        "Seccomp: 2",
    ] {
        assert!(status.contains(&line), "{line}: {status:?}");
    }
    for case in ["setns_sandbox", "setns_user", "unshare_net"] {
        assert_eq!(probe[case], "refused", "{case}: {probe:#}");
    }
}

/// Where user namespaces are refused too (here a seccomp profile refusing `unshare`, as a
/// hardened platform's would), the unprivileged mode in a networked sandbox refuses `network:
/// allow` before launch (125), naming both attempts and their errnos.
#[test]
fn attack_egress__an_unprivileged_supervisor_without_user_namespaces_refuses_a_networked_allow() {
    if !engines::require(Kind::Podman) {
        return;
    }
    let engine = Engine::start(Kind::Podman);
    let image = engine.image("pi");
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("seccomp.json");
    profile_refusing(&profile, &["unshare"]);
    let opt = format!("seccomp={}", profile.display());
    let sandbox = ForeignInit::start(
        &engine,
        &image,
        "unpriv-nouserns",
        &["--network=host", "--security-opt", &opt],
    );
    let network = "network:\n  allow: [\"127.0.0.1:9\"]\n";
    let harness = write_command_harness(dir.path(), "echo ran\n", 1, "60s", false, network);
    let state = dir.path().join("state");
    fs::create_dir(&state).unwrap();
    let args = sandbox.run_args("timeout 600");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let env = engine.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (out, doc) = pitcrew_run_output(&harness, &state, &args, &env);
    assert_eq!(out.status.code(), Some(125), "{doc:#}");
    let record = read_json(&iteration_dir(&doc, 1).join("result.json"));
    let reason = record["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("unshare(CLONE_NEWNET): EPERM")
            && reason.contains("unshare(CLONE_NEWUSER|CLONE_NEWNET): EPERM"),
        "{record:#}"
    );
}

/// An echo server on this machine's `addr` (its port).
fn echo_server(addr: &str) -> u16 {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind((addr, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut got = Vec::new();
                let _ = stream.read_to_end(&mut got);
                let _ = stream.write_all(&got);
            });
        }
    });
    port
}

/// An address of this machine's on an interface other than `lo`, if it has one.
fn outside_address() -> Option<std::net::IpAddr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.1:9").ok()?;
    Some(s.local_addr().ok()?.ip()).filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
}
