//! A sandbox like OpenShell's: a podman container from a production image whose PID 1 is
//! someone else's init (catatonit, through `podman run --init`), reached only through
//! `podman exec -i --user UID` as the sandbox's own non-root user, with
//! `pitcrew-init serve --stdio --unprivileged` per session.

use crate::engines::Engine;
use std::process::Output;

/// The sandbox user's uid and gid (OpenShell's policy names one; 1000 is the usual first user).
pub const UID: &str = "1000";

/// Where the records live: a directory of the sandbox user outside the agent's directories.
pub const RECORDS: &str = "/sandbox-records";

/// A running foreign-init container, removed (with its volumes) when dropped.
pub struct ForeignInit<'a> {
    engine: &'a Engine,
    /// The container's name (the exec engine's `--sandbox`).
    pub name: String,
}

impl<'a> ForeignInit<'a> {
    /// Starts `image` with catatonit as PID 1 running `sleep infinity`, `extra` added to
    /// `podman run` (`--network=none` unless it names a network), and makes `/sandbox` and [`RECORDS`] for the sandbox user, as the platform
    /// would have.
    pub fn start(engine: &'a Engine, image: &str, tag: &str, extra: &[&str]) -> ForeignInit<'a> {
        let name = format!("pitcrew-{tag}-{}", std::process::id());
        let mut args = vec!["run", "--detach", "--init", "--name", &name];
        // No network of its own unless the test names one, as a platform confining its
        // sandboxes would start them: the agent's network is the harness's `network:`.
        if !extra.iter().any(|a| a.starts_with("--network")) {
            args.push("--network=none");
        }
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--entrypoint", "/bin/sleep", image, "infinity"]);
        let made = engine.cli(&args);
        assert!(made.status.success(), "podman run: {made:?}");
        let sandbox = ForeignInit { engine, name };
        let made = sandbox.exec(
            None,
            &["install", "-d", "-o", UID, "-g", UID, "/sandbox", RECORDS],
        );
        assert!(made.status.success(), "install -d: {made:?}");
        sandbox
    }

    /// `podman exec [--user UID] NAME cmd…` (root when `user` is `None`).
    pub fn exec(&self, user: Option<&str>, cmd: &[&str]) -> Output {
        let mut args = vec!["exec"];
        if let Some(user) = user {
            args.extend_from_slice(&["--user", user]);
        }
        args.push(&self.name);
        args.extend_from_slice(cmd);
        self.engine.cli(&args)
    }

    /// Starts `cmd` as the sandbox user in an exec session of its own that outlives the call
    /// (what an earlier session of the runner could leave behind).
    pub fn leave_running(&self, cmd: &[&str]) {
        let user = format!("{UID}:{UID}");
        let mut args = vec![
            "exec",
            "--detach",
            "--user",
            user.as_str(),
            self.name.as_str(),
        ];
        args.extend_from_slice(cmd);
        let out = self.engine.cli(&args);
        assert!(out.status.success(), "{cmd:?}: {out:?}");
    }

    /// The exec template: `podman exec -i --user UID:UID {sandbox} WRAPPER… pitcrew-init serve
    /// --stdio --unprivileged --records RECORDS` (with its own group: `--user UID` alone would
    /// give group root).
    pub fn template(wrapper: &str) -> String {
        format!(
            "podman exec -i --user {UID}:{UID} {{sandbox}} {wrapper} pitcrew-init serve --stdio --unprivileged --records {RECORDS}"
        )
    }

    /// `pitcrew run` arguments for this sandbox through [`ForeignInit::template`].
    pub fn run_args(&self, wrapper: &str) -> Vec<String> {
        [
            "--engine",
            "exec",
            "--sandbox",
            &self.name,
            "--exec-template",
            &Self::template(wrapper),
            "--sandbox-root",
            "/sandbox",
        ]
        .map(String::from)
        .to_vec()
    }
}

impl Drop for ForeignInit<'_> {
    fn drop(&mut self) {
        let _ = self
            .engine
            .cli(&["rm", "--force", "--volumes", "--time", "0", &self.name]);
    }
}
