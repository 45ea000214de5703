//! Leftovers outside the sandbox's directories, played from the agent's side through `pitcrew
//! run` on the local engine: files and symlinks in `/dev/shm` and System V shared memory
//! segments. The local sandbox has its own IPC namespace and a private `/dev/shm`, renewed
//! before every iteration: the next iteration sees none of it, and neither does the host.
//!
//! Needs root and PID namespaces; skipped otherwise, or a failure with `PITCREW_REQUIRE_E2E=1`.
#![allow(non_snake_case)] // attack tests are named attack_<class>__<case> (scripts/security-report)

use pitcrew_e2e::{
    iteration_dir, pitcrew_run, read_text, require_pid_namespaces, write_command_harness,
};
use std::fs;
use std::os::unix::fs::PermissionsExt as _;

/// Iteration 1 plants (a file, a symlink to a host secret, a shared memory segment with a known
/// key) and marks the workspace; iteration 2 reports what it finds.
const AGENT: &str = r#"mkdir -p output
if [ ! -e planted ]; then
  echo secret > /dev/shm/pitcrew-plant-$TOKEN
  ln -s /etc/shadow /dev/shm/pitcrew-link-$TOKEN
  python3 -c 'import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); sys.exit(0 if libc.shmget(int(sys.argv[1]), 4096, 0o1666) >= 0 else 1)' $KEY
  echo $? > output/shmget
  ls -A /dev/shm > output/shm-after-plant
  touch planted
else
  ls -A /dev/shm > output/shm-seen
  python3 -c 'import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); print("segment" if libc.shmget(int(sys.argv[1]), 0, 0) >= 0 else "none")' $KEY > output/segment-seen
fi
"#;

#[test]
fn attack_leftovers__dev_shm_and_sysv_ipc_do_not_outlive_the_iteration() {
    if !require_pid_namespaces() {
        return;
    }
    let token = std::process::id();
    let key = 0x7e57_0000u32 + (token & 0xffff);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fs::set_permissions(root, fs::Permissions::from_mode(0o755)).unwrap();
    let harness = write_command_harness(
        root,
        AGENT,
        2,
        "60s",
        false,
        &format!("env:\n  TOKEN: \"{token}\"\n  KEY: \"{key}\"\n"),
    );
    let state = root.join("state");
    fs::create_dir(&state).unwrap();

    let doc = pitcrew_run(&harness, &state, &[], &[]);
    let first = iteration_dir(&doc, 1);
    let second = iteration_dir(&doc, 2);
    // The plants happened...
    assert_eq!(read_text(&first.join("output/shmget")), "0\n");
    let planted = read_text(&first.join("output/shm-after-plant"));
    assert!(
        planted.contains(&format!("pitcrew-plant-{token}")),
        "{planted}"
    );
    // ...and the next iteration finds none of them.
    assert_eq!(read_text(&second.join("output/shm-seen")), "");
    assert_eq!(read_text(&second.join("output/segment-seen")), "none\n");
    // Neither does the host.
    for name in [
        format!("pitcrew-plant-{token}"),
        format!("pitcrew-link-{token}"),
    ] {
        let path = std::path::Path::new("/dev/shm").join(&name);
        assert!(
            fs::symlink_metadata(&path).is_err(),
            "{} on the host",
            path.display()
        );
    }
    let ipcs = std::process::Command::new("ipcs")
        .arg("-m")
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&ipcs.stdout);
    assert!(
        !listing.contains(&format!("{key:#010x}")),
        "the agent's segment {key:#010x} is on the host:\n{listing}"
    );
}
