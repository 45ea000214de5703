//! The local engine without root: `pitcrew` run by an unprivileged user (created by
//! `scripts/setup-rootless-user`, `$PITCREW_ROOTLESS_USER`, default `pitcrew-rootless`) starts
//! its sandbox in a user namespace whose uid 0 is that user and whose other ids are the user's
//! subordinate ids. The claims are checked from the agent's side: it is neither root nor the
//! user, so it cannot touch the verified trees, the control socket, the supervisor, the user's
//! files or its sandbox's host-side state (`engine.json`, `supervisor.log`).
//!
//! Needs root (to switch to the test user), PID namespaces, `newuidmap`/`newgidmap` and the test
//! user with ranges in `/etc/subuid` and `/etc/subgid`; skipped otherwise, or a failure with
//! `PITCREW_REQUIRE_E2E=1`.
#![allow(non_snake_case)] // attack tests are named attack_<class>__<case> (scripts/security-report)

use pitcrew_e2e::{binary, prerequisite, read_json, require_pid_namespaces};
use serde_json::{json, Value};
use std::fs;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The unprivileged user the tests run `pitcrew` as.
struct TestUser {
    name: String,
    uid: u32,
    gid: u32,
    home: PathBuf,
    /// First host uid of the user's subordinate range (uid 1 inside the sandbox).
    subuid: u32,
}

fn field(line: &str, n: usize) -> Option<&str> {
    line.split(':').nth(n)
}

/// The name of the test user (`$PITCREW_ROOTLESS_USER`, default `pitcrew-rootless`).
fn test_user_name() -> String {
    std::env::var("PITCREW_ROOTLESS_USER").unwrap_or("pitcrew-rootless".into())
}

/// The test user, if this machine has it with subordinate ids and the mapping helpers.
fn test_user() -> Option<TestUser> {
    let name = test_user_name();
    let passwd = fs::read_to_string("/etc/passwd").ok()?;
    let line = passwd
        .lines()
        .find(|l| field(l, 0) == Some(name.as_str()))?;
    let uid = field(line, 2)?.parse().ok()?;
    let gid = field(line, 3)?.parse().ok()?;
    let home = PathBuf::from(field(line, 5)?);
    let range = |file: &str| {
        let text = fs::read_to_string(file).ok()?;
        let line = text.lines().find(|l| field(l, 0) == Some(name.as_str()))?;
        field(line, 1)?.parse::<u32>().ok()
    };
    let subuid = range("/etc/subuid")?;
    range("/etc/subgid")?;
    let helpers = ["newuidmap", "newgidmap"]
        .iter()
        .all(|h| Path::new("/usr/bin").join(h).exists());
    (helpers && home.is_dir()).then_some(TestUser {
        name,
        uid,
        gid,
        home,
        subuid,
    })
}

fn gate() -> Option<TestUser> {
    if !require_pid_namespaces() {
        return None;
    }
    let user = test_user();
    prerequisite(
        user.is_some(),
        &format!(
            "needs the rootless test user {:?} ($PITCREW_ROOTLESS_USER) with a home, ranges in \
             /etc/subuid and /etc/subgid, and /usr/bin/newuidmap and newgidmap (as root: \
             scripts/setup-rootless-user)",
            test_user_name()
        ),
    )
    .then_some(user)
    .flatten()
}

impl TestUser {
    /// `program args…` as this user (its groups, its HOME, a plain PATH).
    fn command(&self, program: &Path, args: &[&str]) -> Command {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid",
            &self.uid.to_string(),
            "--regid",
            &self.gid.to_string(),
        ])
        .arg("--init-groups")
        .arg(program)
        .args(args)
        .env_clear()
        .env("HOME", &self.home)
        .env("USER", &self.name)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin");
        c
    }

    /// `pitcrew run HARNESS --json --keep` as this user.
    fn run_kept(&self, state: &Path, harness: &Path) -> Output {
        self.pitcrew(
            state,
            &["run", harness.to_str().unwrap(), "--json", "--keep"],
        )
    }

    fn pitcrew(&self, state: &Path, args: &[&str]) -> Output {
        let mut all = args.to_vec();
        all.extend(["--state-dir", state.to_str().unwrap()]);
        self.command(&binary("pitcrew"), &all).output().unwrap()
    }
}

/// A temp dir owned by `user` (0755), removed as root at the end.
fn user_dir(user: &TestUser) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(dir.path(), Some(user.uid), Some(user.gid)).unwrap();
    dir
}

fn write_as(user: &TestUser, path: &Path, text: &str, mode: u32) {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).unwrap();
    }
    fs::write(path, text).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    std::os::unix::fs::chown(path, Some(user.uid), Some(user.gid)).unwrap();
}

fn chown_tree(user: &TestUser, root: &Path) {
    let status = Command::new("chown")
        .args(["-R", &format!("{}:{}", user.uid, user.gid)])
        .arg(root)
        .status()
        .unwrap();
    assert!(status.success());
}

/// Stops a kept sandbox when a test ends early (a no-op after `pitcrew down`).
struct Down<'a> {
    user: &'a TestUser,
    state: &'a Path,
    id: &'a str,
}

impl Drop for Down<'_> {
    fn drop(&mut self) {
        if self.state.join("sandboxes").join(self.id).exists() {
            let _ = self.user.pitcrew(self.state, &["down", self.id, "--force"]);
        }
    }
}

#[test]
fn rootless_sandbox_confines_the_agent_to_a_uid_of_its_own() {
    let Some(user) = gate() else {
        return;
    };
    let dir = user_dir(&user);
    let root = dir.path();
    // A private file of the user's, which the agent must not read.
    let secret = user
        .home
        .join(format!("pitcrew-secret-{}", std::process::id()));
    write_as(&user, &secret, "the user's secret\n", 0o600);
    let pwned = user
        .home
        .join(format!("pitcrew-pwned-{}", std::process::id()));

    let init = binary("pitcrew-init");
    // Each line says what one attack did. The socket is <sandbox>/run/control.sock, two levels
    // above the workspace (<sandbox>/root/workspace), beside the sandbox's engine.json and
    // supervisor.log (the user's, not the agent's).
    let script = format!(
        r#"if [ -f attacked ]; then echo second; exit 0; fi
touch attacked
echo "ids $(id -u) $(id -g) $(id -G)"
grep -E '^(CapEff|CapPrm|NoNewPrivs):' /proc/self/status | tr -s '\t' ' '
if echo evil >> ../plugins/p/index.js 2>/dev/null; then echo "plugin WRITTEN"; else echo "plugin denied"; fi
if {init} attach --socket ../../run/control.sock </dev/null >/dev/null 2>&1; then echo "socket CONNECTED"; else echo "socket denied"; fi
if kill -TERM 1 2>/dev/null; then echo "signal SENT"; else echo "signal denied"; fi
if cat {secret} >/dev/null 2>&1; then echo "secret READ"; else echo "secret denied"; fi
if touch {pwned} 2>/dev/null; then echo "home WRITTEN"; else echo "home denied"; fi
for f in engine.json supervisor.log; do
  if cat ../../$f >/dev/null 2>&1; then echo "$f READ"; else echo "$f denied"; fi
done
setsid sleep 987654 </dev/null >/dev/null 2>&1 &"#,
        init = init.display(),
        secret = secret.display(),
        pwned = pwned.display(),
    );
    let indented: String = script.lines().map(|l| format!("    {l}\n")).collect();
    write_as(
        &user,
        &root.join("plugins/p/index.js"),
        "module.exports = () => {};\n",
        0o644,
    );
    write_as(
        &user,
        &root.join("adapters/hooks.json"),
        "{ \"hooks\": {} }\n",
        0o644,
    );
    write_as(&user, &root.join("workspace/README.md"), "work\n", 0o644);
    let yaml = format!(
        "runtime: command\ncommand:\n  - /bin/sh\n  - -c\n  - |\n{indented}plugins:\n  - plugins/p\nadapters:\n  - path: adapters/hooks.json\n    role: hook-adapter\niterations: 2\ntimeout: 60s\nworkdir: workspace\n"
    );
    write_as(&user, &root.join("harness.yaml"), &yaml, 0o644);
    chown_tree(&user, root);
    let state = root.join("state");

    let out = user.run_kept(&state, &root.join("harness.yaml"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON ({e}); exit {:?}: {stderr}", out.status.code()));
    let _ = fs::remove_file(&secret);
    assert!(out.status.success(), "{stderr}");
    let id = doc["sandbox"].as_str().unwrap().to_string();
    let sandbox = state.join("sandboxes").join(&id);
    let _down = Down {
        user: &user,
        state: &state,
        id: &id,
    };
    let run_dir = PathBuf::from(doc["run_dir"].as_str().unwrap());
    let first = fs::read_to_string(run_dir.join("iteration-1/output.jsonl")).unwrap();
    let lines: Vec<&str> = first.lines().collect();
    assert_eq!(
        lines,
        [
            "ids 65534 65534 65534",
            "CapPrm: 0000000000000000",
            "CapEff: 0000000000000000",
            "NoNewPrivs: 1",
            "plugin denied",
            "socket denied",
            "signal denied",
            "secret denied",
            "home denied",
            "engine.json denied",
            "supervisor.log denied",
        ],
        "{first}"
    );
    assert!(!pwned.exists());
    assert_eq!(
        fs::read_to_string(root.join("plugins/p/index.js")).unwrap(),
        "module.exports = () => {};\n"
    );

    // From the host: the agent's files belong to a subordinate uid, not to the user.
    let owner = fs::metadata(sandbox.join("root/workspace/attacked"))
        .unwrap()
        .uid();
    assert_eq!(owner, user.subuid + 65533, "agent uid 65534 inside");
    assert_ne!(owner, user.uid);

    // Iteration 2 verified, ran, and the leftover `sleep` was reaped in between.
    let r1 = read_json(&run_dir.join("iteration-1/result.json"));
    let r2 = read_json(&run_dir.join("iteration-2/result.json"));
    assert_eq!(r2["exit_code"], 0, "{r2}");
    assert_eq!(doc["iterations"][1]["verified"], true, "{doc}");
    let caught = r1["reaped"]["after"].as_u64().unwrap() + r2["reaped"]["before"].as_u64().unwrap();
    assert!(caught >= 1, "no reap counted the leftover: {r1} {r2}");

    // The supervisor says it is rootless, with the mapping.
    let out = user.pitcrew(&state, &["inspect", &id, "--json", "--no-verify"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let inspect: Value = serde_json::from_slice(&out.stdout).unwrap();
    let uid_map = &inspect["capabilities"]["user_namespace"]["uid_map"];
    assert_eq!(
        uid_map,
        &json!([
            {"inner": 0, "outer": user.uid, "count": 1},
            {"inner": 1, "outer": user.subuid, "count": 65536},
        ]),
        "{inspect}"
    );

    // `down` removes everything, the agent's files included (which the user could not).
    let out = user.pitcrew(&state, &["down", &id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!sandbox.exists(), "{} is left", sandbox.display());
}

#[test]
fn a_single_uid_user_namespace_cannot_launch_the_agent() {
    let Some(user) = gate() else {
        return;
    };
    // `unshare --map-root-user` maps only the user: the agent would be the user who owns the
    // trees and the socket. pitcrew-init refuses to launch (125) and names the unmapped uid.
    let dir = user_dir(&user);
    let work = dir.path().join("work");
    fs::create_dir(&work).unwrap();
    std::os::unix::fs::chown(&work, Some(user.uid), Some(user.gid)).unwrap();
    let manifest = json!({
        "version": 1,
        "runtime": "command",
        "agent": {"binary": "/bin/sh", "args": ["-c", "touch ran"]},
        "workdir": work,
        "limits": {"timeout_ms": 60_000, "kill_grace_ms": 300, "reap_budget_ms": 5_000},
    });
    let mpath = dir.path().join("manifest.json");
    write_as(&user, &mpath, &manifest.to_string(), 0o644);
    let result = dir.path().join("result.json");
    let init = binary("pitcrew-init");
    let out = user
        .command(
            Path::new("/usr/bin/unshare"),
            &[
                "--map-root-user",
                "--pid",
                "--fork",
                "--mount-proc",
                init.to_str().unwrap(),
                "run",
                "--manifest",
                mpath.to_str().unwrap(),
                "--result",
                result.to_str().unwrap(),
            ],
        )
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(125),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let record = read_json(&result);
    let reason = record["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("the agent's uid 65534 is not mapped in this user namespace"),
        "{record}"
    );
    assert!(!work.join("ran").exists(), "the agent ran");
}

#[test]
fn a_user_without_subordinate_ids_is_told_what_is_missing() {
    let Some(user) = gate() else {
        return;
    };
    // nobody has no /etc/subuid range: no sandbox starts, and the error says how to add one.
    let dir = user_dir(&user);
    let state = dir.path().join("state");
    let harness = dir.path().join("harness.yaml");
    write_as(
        &user,
        &harness,
        "runtime: command\ncommand: [/bin/true]\niterations: 1\ntimeout: 10s\n",
        0o644,
    );
    let out = Command::new("setpriv")
        .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
        .arg(binary("pitcrew"))
        .args(["run", harness.to_str().unwrap(), "--state-dir"])
        .arg(&state)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the local engine cannot run rootless")
            && err.contains("has no subordinate ids in /etc/subuid")
            && err.contains("usermod --add-subuids"),
        "{err}"
    );
    assert!(!state.join("sandboxes").exists(), "a sandbox was started");
}

#[test]
fn attack_deep_tree__rootless_down_removes_a_workspace_30000_levels_deep() {
    let Some(user) = gate() else {
        return;
    };
    // The agent leaves a chain 30,000 directories deep in its workspace (built bottom-up near
    // the top, as `attack_deep` does: Landlock makes top-down creation quadratic). The user
    // cannot remove the agent's files directly (a subordinate uid owns them); `down` does, inside
    // the same mapping, with a bounded number of descriptors.
    let dir = user_dir(&user);
    let root = dir.path();
    let yaml = "runtime: command\ncommand:\n  - perl\n  - -e\n  - 'mkdir \"c\" or die; for (2..30000) { mkdir \"t\" or die; rename(\"c\", \"t/d\") or die; rename(\"t\", \"c\") or die } print \"planted\\n\"'\ntimeout: 120s\nworkdir: workspace\n";
    write_as(&user, &root.join("harness.yaml"), yaml, 0o644);
    write_as(&user, &root.join("workspace/README.md"), "work\n", 0o644);
    chown_tree(&user, root);
    let state = root.join("state");
    let out = user.run_kept(&state, &root.join("harness.yaml"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = doc["sandbox"].as_str().unwrap().to_string();
    let sandbox = state.join("sandboxes").join(&id);
    let _down = Down {
        user: &user,
        state: &state,
        id: &id,
    };
    let run_dir = PathBuf::from(doc["run_dir"].as_str().unwrap());
    assert_eq!(
        fs::read_to_string(run_dir.join("iteration-1/output.jsonl")).unwrap(),
        "planted\n"
    );
    assert!(sandbox.join("root/workspace/c/d/d").is_dir());
    let out = user.pitcrew(&state, &["down", &id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!sandbox.exists(), "{} is left", sandbox.display());
}

/// `network: allow` rootless: the sandbox's network namespace is made inside its user
/// namespace (whose root brings `lo` up), the allowed endpoint on the host's loopback is
/// reached through pitcrew's mirror and the user's `pitcrew`, and an address is not.
#[test]
fn attack_egress__a_rootless_sandbox_reaches_its_allowed_endpoint_and_no_address() {
    let Some(user) = gate() else {
        return;
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        use std::io::{Read as _, Write as _};
        for mut stream in listener.incoming().flatten() {
            let mut got = Vec::new();
            if stream.read_to_end(&mut got).is_ok() {
                let _ = stream.write_all(&got);
            }
        }
    });
    let dir = user_dir(&user);
    let root = dir.path();
    let probe = format!(
        "import errno, socket\n\
         s = socket.create_connection(('127.0.0.1', {port}), timeout=20)\n\
         s.sendall(b'rootless'); s.shutdown(socket.SHUT_WR)\n\
         echoed = s.recv(100).decode()\n\
         try:\n    socket.create_connection(('93.184.216.34', 80), timeout=5); direct = 'ok'\n\
         except OSError as e:\n    direct = errno.errorcode.get(e.errno, str(e))\n\
         open('output/probe.txt', 'w').write(echoed + ' ' + direct)\n"
    );
    write_as(&user, &root.join("workspace/probe.py"), &probe, 0o644);
    let yaml = format!(
        "runtime: command\ncommand: [/bin/sh, -c, \"mkdir -p output && python3 probe.py\"]\n\
         iterations: 1\ntimeout: 60s\nworkdir: workspace\nkeep_output: true\n\
         network:\n  allow: [\"127.0.0.1:{port}\"]\n"
    );
    write_as(&user, &root.join("harness.yaml"), &yaml, 0o644);
    chown_tree(&user, root);
    let state = root.join("state");
    let harness = root.join("harness.yaml");
    let out = user.pitcrew(&state, &["run", harness.to_str().unwrap(), "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no JSON ({e}); exit {:?}: {stderr}", out.status.code()));
    assert!(out.status.success(), "{doc:#}\n{stderr}");
    let run_dir = Path::new(doc["run_dir"].as_str().unwrap()).join("iteration-1");
    let probe = fs::read_to_string(run_dir.join("output/probe.txt")).unwrap();
    assert_eq!(probe, "rootless ENETUNREACH");
    let record = read_json(&run_dir.join("result.json"));
    let conns = record["network"]["connections"]
        .as_array()
        .cloned()
        .unwrap();
    assert_eq!(conns.len(), 1, "{record:#}");
    assert_eq!(conns[0]["bytes_up"], 8);
}

/// A rootless sandbox with this machine's network (started for `network: open`, kept) runs a
/// later `network: allow` iteration in a network namespace the supervisor makes for the agent
/// inside its user namespace: the allowed endpoint is reached through pitcrew's mirror, the
/// machine's outside address is not, and the record says `namespace: agent`.
#[test]
fn attack_egress__a_rootless_networked_sandbox_gets_the_agent_a_namespace_of_its_own() {
    let Some(user) = gate() else {
        return;
    };
    let outside = std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.connect("192.0.2.1:9").map(|()| s))
        .and_then(|s| s.local_addr())
        .map(|a| a.ip())
        .ok()
        .filter(|ip| !ip.is_loopback());
    if !prerequisite(
        outside.is_some(),
        "needs a network interface besides lo with an address",
    ) {
        return;
    }
    let outside = outside.map(|ip| ip.to_string()).unwrap_or_default();
    let listener = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        use std::io::{Read as _, Write as _};
        for mut stream in listener.incoming().flatten() {
            let mut got = Vec::new();
            if stream.read_to_end(&mut got).is_ok() {
                let _ = stream.write_all(&got);
            }
        }
    });
    let dir = user_dir(&user);
    let root = dir.path();
    let probe = format!(
        "import errno, socket\n\
         s = socket.create_connection(('127.0.0.1', {port}), timeout=20)\n\
         s.sendall(b'rootless'); s.shutdown(socket.SHUT_WR)\n\
         echoed = s.recv(100).decode()\n\
         try:\n    socket.create_connection(('{outside}', {port}), timeout=5); direct = 'ok'\n\
         except OSError as e:\n    direct = errno.errorcode.get(e.errno, str(e))\n\
         open('output/probe.txt', 'w').write(echoed + ' ' + direct)\n"
    );
    write_as(&user, &root.join("workspace/probe.py"), &probe, 0o644);
    let head =
        "runtime: command\ncommand: [/bin/sh, -c, \"mkdir -p output && python3 probe.py\"]\n\
                iterations: 1\ntimeout: 60s\nworkdir: workspace\nkeep_output: true\n";
    write_as(
        &user,
        &root.join("open.yaml"),
        &format!("{head}network: open\n"),
        0o644,
    );
    let allow = format!("{head}network:\n  allow: [\"127.0.0.1:{port}\"]\n");
    write_as(&user, &root.join("harness.yaml"), &allow, 0o644);
    chown_tree(&user, root);
    let state = root.join("state");
    let run = |harness: &str, extra: &[&str]| {
        let path = root.join(harness);
        let mut args = vec!["run", path.to_str().unwrap(), "--json"];
        args.extend_from_slice(extra);
        let out = user.pitcrew(&state, &args);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let doc: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("no JSON ({e}); exit {:?}: {stderr}", out.status.code()));
        assert!(out.status.success(), "{doc:#}\n{stderr}");
        doc
    };
    let kept = run("open.yaml", &["--keep"]);
    let id = kept["sandbox"].as_str().unwrap().to_string();
    let doc = run("harness.yaml", &["--sandbox", &id]);
    let _ = user.pitcrew(&state, &["down", &id]);
    let run_dir = Path::new(doc["run_dir"].as_str().unwrap()).join("iteration-2");
    let probe = fs::read_to_string(run_dir.join("output/probe.txt")).unwrap();
    assert_eq!(probe, "rootless ENETUNREACH");
    let record = read_json(&run_dir.join("result.json"));
    assert_eq!(record["network"]["namespace"], "agent", "{record:#}");
    let conns = record["network"]["connections"]
        .as_array()
        .cloned()
        .unwrap();
    assert_eq!(conns.len(), 1, "{record:#}");
    assert_eq!(conns[0]["bytes_up"], 8);
}
