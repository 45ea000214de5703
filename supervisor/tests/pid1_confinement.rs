//! Confinement as seen from inside the launched agent: `no_new_privs`, no capabilities in any
//! set, the agent's uid/gid, a verified tree that cannot be written (even though its mode
//! would allow it: only Landlock stops the write), and a writable workdir.
#![allow(non_snake_case)] // attack tests are named attack_<class>__<case> (scripts/security-report)

mod common;
use common::{require_root_and_namespaces, Sandbox, AGENT_ID};
use pitcrew_test_support::skip;
use sha2::{Digest, Sha256};
use std::os::unix::fs::PermissionsExt;

/// `pi-tree-v1` of an empty directory: no file lines, then the digest of the directory list.
fn empty_tree_hash() -> String {
    let dirs = hex::encode(Sha256::digest(b".\n"));
    hex::encode(Sha256::digest(format!("{dirs}  -\n").as_bytes()))
}

#[test]
fn agent_runs_confined() {
    if !require_root_and_namespaces() {
        return;
    }
    let mut sandbox = Sandbox::sh(
        "grep -E '^(Uid|Gid|Groups|NoNewPrivs|Cap(Inh|Prm|Eff|Bnd|Amb)):' /proc/self/status > $W/status; \
         if touch $TREE/planted 2>/dev/null; then echo yes > $W/tree-write; else echo no > $W/tree-write; fi; \
         echo ok > $W/workdir-write",
    );
    let tree = sandbox.path("plugin");
    std::fs::create_dir(&tree).expect("tree");
    // World-writable on purpose: ownership and mode do not protect it, Landlock must.
    std::fs::set_permissions(&tree, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let script = sandbox.manifest["agent"]["args"][1]
        .as_str()
        .unwrap_or_default()
        .to_string();
    sandbox.manifest["agent"]["args"][1] = format!("TREE={}; {script}", tree.display()).into();
    sandbox.manifest["trees"] = serde_json::json!([{
        "name": "plugin", "path": tree, "role": "plugin", "kind": "data",
        "format": "pi-tree-v1", "sha256": empty_tree_hash(),
    }]);
    let run = sandbox.run_pid1();
    assert_eq!(
        run.code, 0,
        "stderr:\n{}\nrecord: {}",
        run.stderr, run.record
    );

    let status = std::fs::read_to_string(sandbox.workdir.join("status")).expect("status");
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(&format!("{name}:")))
            .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>())
            .unwrap_or_else(|| panic!("{name} missing in {status}"))
    };
    assert_eq!(field("NoNewPrivs"), ["1"]);
    for caps in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(field(caps), ["0000000000000000"], "{caps}");
    }
    let id = AGENT_ID.to_string();
    assert_eq!(field("Uid"), [id.as_str(); 4]);
    assert_eq!(field("Gid"), [id.as_str(); 4]);
    assert!(
        field("Groups").is_empty(),
        "supplementary groups: {:?}",
        field("Groups")
    );
    assert_eq!(
        std::fs::read_to_string(sandbox.workdir.join("workdir-write"))
            .ok()
            .as_deref(),
        Some("ok\n")
    );

    let confinement = &run.record["confinement"];
    assert_eq!(confinement["no_new_privs"], true);
    assert_eq!(confinement["caps_cleared"], true);
    assert_eq!(confinement["uid"], AGENT_ID);
    let landlock = confinement["landlock"]["status"]
        .as_str()
        .unwrap_or_default();
    let tree_write =
        std::fs::read_to_string(sandbox.workdir.join("tree-write")).unwrap_or_default();
    // What this kernel offers, asked independently of the supervisor: with Landlock, best
    // effort must enforce it (fully from the pinned ABI on) and the write must be refused.
    match common::kernel_landlock_abi() {
        Ok(abi) => {
            let expected = if common::landlock_fully_enforceable(abi) {
                "fully-enforced"
            } else {
                "partially-enforced"
            };
            assert_eq!(
                landlock, expected,
                "kernel Landlock ABI {abi}: {confinement}"
            );
            assert_eq!(confinement["landlock"]["abi"], abi, "{confinement}");
            assert_eq!(tree_write, "no\n", "the agent wrote into a verified tree");
            assert!(!tree.join("planted").exists());
        }
        Err(why) => {
            assert_eq!(landlock, "not-enforced", "{confinement}");
            assert_eq!(confinement["landlock"]["abi"], 0, "{confinement}");
            // Never pass silently: a recorded skip of this part (a failure with
            // PITCREW_REQUIRE_E2E=1).
            skip(&format!(
                "part of the test: the kernel has no Landlock ({why}), so the verified-tree \
                 write is not checked; needs a kernel with CONFIG_SECURITY_LANDLOCK and landlock \
                 in its lsm= list"
            ));
        }
    }
}

/// `landlock: required` gives the one outcome this kernel (probed here, independently of the
/// supervisor) allows: fully enforced when its ABI is at least the pinned one, otherwise
/// refused with 125 before the agent runs (partial enforcement is not what was required).
#[test]
fn landlock_required_is_honoured_or_refused() {
    if !require_root_and_namespaces() {
        return;
    }
    let abi = common::kernel_landlock_abi();
    let mut sandbox = Sandbox::sh("exit 0");
    sandbox.manifest["confinement"] = serde_json::json!({"landlock": "required"});
    let run = sandbox.run_pid1();
    let status = &run.record["confinement"]["landlock"]["status"];
    if abi
        .as_ref()
        .is_ok_and(|&abi| common::landlock_fully_enforceable(abi))
    {
        assert_eq!(
            run.code, 0,
            "kernel Landlock ABI {abi:?}\nstderr:\n{}\nrecord: {}",
            run.stderr, run.record
        );
        assert_eq!(status, "fully-enforced", "{}", run.record);
    } else {
        assert_eq!(
            run.code, 125,
            "kernel Landlock ABI {abi:?}\nstderr:\n{}\nrecord: {}",
            run.stderr, run.record
        );
        let reason = run.record["reason"].as_str().unwrap_or("");
        assert!(
            reason.starts_with("confine: landlock-required: "),
            "kernel Landlock ABI {abi:?}: {reason}"
        );
    }
}

/// A writable root the agent could replace: `dirs.sessions` inside the agent-owned
/// `dirs.config`. In a first run the agent writes there (the positive control) and then swaps
/// the directory for `sessions -> /`, as any agent may in its own config dir. The next iteration
/// must not follow the link (it would make `/` writable for Landlock): the agent-dir step removes
/// the link (not its target) and makes the directory again, and the agent cannot write to `/`.
#[test]
fn attack_plants__a_writable_root_replaced_by_a_symlink_is_never_followed() {
    if !require_root_and_namespaces() {
        return;
    }
    let mut sandbox = Sandbox::sh("");
    let config = sandbox.path("config");
    let sessions = config.join("sessions");
    for dir in [&config, &sessions] {
        std::fs::create_dir(dir).expect("mkdir");
        std::os::unix::fs::chown(dir, Some(AGENT_ID), Some(AGENT_ID)).expect("chown");
    }
    let w = sandbox.workdir.display().to_string();
    let s = sessions.display().to_string();
    sandbox.manifest["dirs"] = serde_json::json!({"config": config, "sessions": sessions});
    sandbox.manifest["agent"]["args"][1] =
        format!("echo ok > {s}/w && cp {s}/w {w}/sessions-write && rm -r {s} && ln -s / {s}")
            .into();
    let run = sandbox.run_pid1();
    assert_eq!(
        run.code, 0,
        "stderr:\n{}\nrecord: {}",
        run.stderr, run.record
    );
    assert_eq!(
        std::fs::read_to_string(sandbox.workdir.join("sessions-write")).unwrap_or_default(),
        "ok\n",
        "the agent could not write in its sessions dir"
    );
    assert!(
        std::fs::symlink_metadata(&sessions)
            .expect("sessions")
            .file_type()
            .is_symlink(),
        "the agent could not replace its sessions dir"
    );

    let marker = sandbox.workdir.join("launched");
    let probe = format!("/pitcrew-root-probe-{}", std::process::id());
    sandbox.manifest["agent"]["args"][1] = format!(
        "touch {}; touch {probe} 2>/dev/null && echo '/ is writable' > {w}/escaped; exit 0",
        marker.display()
    )
    .into();
    let run = sandbox.run_pid1();
    let _ = std::fs::remove_file(&probe);
    assert_eq!(
        run.code, 0,
        "stderr:\n{}\nrecord: {}",
        run.stderr, run.record
    );
    assert!(marker.exists(), "the agent was not launched");
    assert!(
        std::fs::symlink_metadata(&sessions)
            .expect("sessions")
            .file_type()
            .is_dir(),
        "the link was not replaced by a directory"
    );
    assert!(
        !sandbox.workdir.join("escaped").exists(),
        "the agent could write to / through its sessions dir"
    );
    assert!(run.record["confinement"]["landlock"]["status"] == "fully-enforced");
}
