//! Under someone else's PID 1: a podman container whose PID 1 is not pitcrew-init (a plain
//! `sleep`, which does not even reap), reached only through `podman exec -i --user 65534` as
//! the sandbox's own user, with `pitcrew-init serve --stdio --unprivileged` behind a wrapper
//! that stays its parent (`timeout`, standing in for an exec service's shell). What an earlier
//! exec session left running is reaped before the iteration verifies, the session's own
//! processes survive, the verified trees (owned by the agent's uid here) are still not
//! writable by the agent, a plugin changed through a root `podman exec` fails the next
//! iteration with 96, and the record says `mode: unprivileged`.
//!
//! Needs root (for podman) and podman; skipped otherwise, or a failure with
//! `PITCREW_REQUIRE_E2E=1`.
#![allow(non_snake_case)] // attack tests are named attack_<class>__<case> (scripts/security-report)

use pitcrew_e2e::engines::{self, Engine, Kind};
use pitcrew_e2e::{iteration_dir, pitcrew_run_output, read_json, read_text, write_command_harness};
use std::fs;
use std::os::unix::fs::PermissionsExt as _;

/// The agent: every live process's command line, its own no_new_privs, and whether it can
/// change its verified plugin (which its uid owns in this mode).
const PROBE: &str = r#"for p in /proc/[0-9]*; do c=$(tr '\0' ' ' < $p/cmdline 2>/dev/null); [ -n "$c" ] && echo "proc $c"; done
grep '^NoNewPrivs' /proc/self/status
if (echo x >> /sandbox/plugins/p/index.js) 2>/dev/null; then echo "plugin_write allowed"; else echo "plugin_write refused"; fi"#;

#[test]
fn attack_leftovers__an_unprivileged_session_reaps_what_an_earlier_session_left() {
    if !engines::require(Kind::Podman) {
        return;
    }
    let engine = Engine::start(Kind::Podman);
    let image = engine.image("pi");
    let name = format!("pitcrew-unpriv-{}", std::process::id());
    let made = engine.cli(&[
        "run",
        "--detach",
        "--name",
        &name,
        "--entrypoint",
        "/bin/sleep",
        &image,
        "infinity",
    ]);
    assert!(made.status.success(), "{made:?}");
    struct Remove<'a>(&'a Engine, &'a str);
    impl Drop for Remove<'_> {
        fn drop(&mut self) {
            let _ = self.0.cli(&["rm", "--force", "--time", "0", self.1]);
        }
    }
    let _remove = Remove(&engine, &name);
    // The sandbox user's directories, as the platform would have made them.
    let exec_root = |cmd: &[&str]| {
        let mut args = vec!["exec", name.as_str()];
        args.extend_from_slice(cmd);
        let out = engine.cli(&args);
        assert!(out.status.success(), "{cmd:?}: {out:?}");
    };
    exec_root(&[
        "install",
        "-d",
        "-o",
        "65534",
        "-g",
        "65534",
        "/sandbox",
        "/sandbox-records",
    ]);
    // What an earlier exec session of the same user left running: a daemon in its own
    // session, and a loop that ignores SIGTERM.
    for leftover in [
        &["setsid", "sleep", "987655"][..],
        &["sh", "-c", "trap '' TERM; while :; do sleep 1; done"][..],
    ] {
        let mut args = vec!["exec", "--detach", "--user", "65534", name.as_str()];
        args.extend_from_slice(leftover);
        let out = engine.cli(&args);
        assert!(out.status.success(), "{out:?}");
    }

    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    // After the first iteration, root changes the plugin through `podman exec`.
    let tamper = format!(
        "validation:\n  - /bin/sh\n  - -c\n  - '[ \"$PITCREW_ITERATION\" = 1 ] && podman exec {name} sh -c \"echo tampered >> /sandbox/plugins/p/index.js\"; exit 1'\n"
    );
    let harness = write_command_harness(dir.path(), PROBE, 2, "60s", false, &tamper);
    let state = dir.path().join("state");
    fs::create_dir(&state).unwrap();
    let template = "podman exec -i --user 65534 {sandbox} timeout 600 pitcrew-init serve --stdio --unprivileged --records /sandbox-records";
    let env = engine.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (out, doc) = pitcrew_run_output(
        &harness,
        &state,
        &[
            "--engine",
            "exec",
            "--sandbox",
            &name,
            "--exec-template",
            template,
            "--sandbox-root",
            "/sandbox",
        ],
        &env,
    );
    assert_eq!(out.status.code(), Some(96), "{doc:#}");

    let first = iteration_dir(&doc, 1);
    let record = read_json(&first.join("result.json"));
    assert_eq!(record["exit_code"], 0, "{record:#}");
    assert_eq!(record["supervisor"]["mode"], "unprivileged", "{record:#}");
    let seen = read_text(&first.join("output.jsonl"));
    // The leftovers are gone; the exec session's own wrapper (our ancestor) is not.
    assert!(!seen.contains("987655"), "{seen}");
    assert!(!seen.contains("while :"), "{seen}");
    assert!(
        seen.contains("proc timeout 600 pitcrew-init serve"),
        "{seen}"
    );
    assert!(seen.contains("NoNewPrivs:\t1"), "{seen}");
    // The agent owns its plugin here; Landlock still keeps it read-only.
    assert!(seen.contains("plugin_write refused"), "{seen}");

    // Changed by root between iterations: the second refuses to launch.
    let second = read_json(&iteration_dir(&doc, 2).join("result.json"));
    assert_eq!(second["exit_code"], 96, "{second:#}");
    assert!(second["agent"].is_null(), "{second:#}");

    // As root, the unprivileged mode is refused: it would reap every root process in sight.
    let out = engine.cli(&[
        "exec",
        "-i",
        &name,
        "pitcrew-init",
        "serve",
        "--stdio",
        "--unprivileged",
    ]);
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--unprivileged as root"),
        "{out:?}"
    );
}
