//! The local engine's rootless mode: the supervisor runs as root of a new user namespace whose
//! uid 0 is the invoking user, and whose uids 1–65536 are that user's *subordinate* ids
//! (`/etc/subuid`, `/etc/subgid`, mapped by the setuid helpers `newuidmap`/`newgidmap`).
//!
//! The agent therefore gets a uid of its own (65534 inside is `subuid start + 65533` on the
//! host): it does not own the verified trees, the control socket or the records, cannot signal
//! the supervisor, and cannot read or write the invoking user's files. A single-uid namespace
//! (`unshare --map-root-user`) cannot give that: the agent would be the user who owns everything,
//! so it is never used.
//!
//! Everything here only reads `/proc`, `/etc` and `PATH`; [`RootlessPlan::unshare_args`] gives
//! the `unshare` (util-linux ≥ 2.38) options that create the namespace.

use anyhow::bail;
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// How many ids the namespace maps after 0 (uids 1–65536: the usual `SUB_UID_COUNT`).
pub const MAPPED_IDS: u32 = 65536;
/// The fewest subordinate ids that still cover the default agent uid and gid (65534).
pub const MIN_SUBORDINATE_IDS: u32 = 65534;

/// A block of subordinate ids: host ids `start .. start + count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdRange {
    /// The first host id.
    pub start: u32,
    /// How many.
    pub count: u32,
}

/// The user namespace a rootless sandbox runs in (recorded in its `engine.json`: stopping it
/// needs the same mapping to remove what the agent's uid owns).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootlessPlan {
    /// The invoking user's uid (uid 0 inside).
    pub uid: u32,
    /// The invoking user's gid (gid 0 inside).
    pub gid: u32,
    /// The invoking user's name, when `/etc/passwd` has it.
    pub user: Option<String>,
    /// Host uids mapped to 1.. inside.
    pub subuid: IdRange,
    /// Host gids mapped to 1.. inside.
    pub subgid: IdRange,
}

impl RootlessPlan {
    /// How many ids after 0 are mapped.
    pub fn mapped(&self) -> u32 {
        self.subuid.count.min(self.subgid.count).min(MAPPED_IDS)
    }

    /// `unshare` options creating the namespace: 0 → the user, 1.. → the subordinate ids.
    pub fn unshare_args(&self) -> Vec<OsString> {
        let n = self.mapped();
        vec![
            "--map-root-user".into(),
            format!("--map-users={},1,{n}", self.subuid.start).into(),
            format!("--map-groups={},1,{n}", self.subgid.start).into(),
        ]
    }
}

/// Reads a file of the system (tests give their own).
pub trait SystemFiles {
    /// The file's contents, `None` when it cannot be read.
    fn read(&self, path: &str) -> Option<String>;
    /// Whether `name` is an executable on `PATH`.
    fn on_path(&self, name: &str) -> Option<PathBuf>;
}

/// The real system.
pub struct Host;

impl SystemFiles for Host {
    fn read(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(path).ok()
    }

    fn on_path(&self, name: &str) -> Option<PathBuf> {
        let path = std::env::var_os("PATH");
        pitcrew_core::harness::find_program(name, Path::new("/"), path.as_deref()).ok()
    }
}

/// The kernel feature that keeps unprivileged user namespaces from this user, if any.
pub fn missing_kernel_feature(sys: &dyn SystemFiles) -> Option<String> {
    let read = |p: &str| sys.read(p).map(|s| s.trim().to_string());
    if read("/proc/self/uid_map").is_none() {
        return Some("this kernel has no user namespaces (CONFIG_USER_NS)".into());
    }
    if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        return Some(
            "unprivileged user namespaces are disabled (sysctl kernel.unprivileged_userns_clone = 0)"
                .into(),
        );
    }
    if read("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        return Some("user namespaces are disabled (sysctl user.max_user_namespaces = 0)".into());
    }
    if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
        return Some(
            "AppArmor restricts unprivileged user namespaces (sysctl kernel.apparmor_restrict_unprivileged_userns = 1)"
                .into(),
        );
    }
    None
}

/// The name of `uid` in an `/etc/passwd` text.
pub fn user_name(passwd: &str, uid: u32) -> Option<String> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let uid_field = fields.nth(1)?;
        (uid_field.parse() == Ok(uid)).then(|| name.to_string())
    })
}

/// The first block of an `/etc/subuid`-style text that belongs to the user `name` or `uid` (the
/// file may name the user either way, in `/etc/subgid` too), as `newuidmap` and `newgidmap`
/// look it up.
pub fn subordinate_range(text: &str, name: Option<&str>, uid: u32) -> Option<IdRange> {
    text.lines().find_map(|line| {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            return None;
        }
        let mut fields = line.split(':');
        let owner = fields.next()?;
        let start: u32 = fields.next()?.trim().parse().ok()?;
        let count: u32 = fields.next()?.trim().parse().ok()?;
        let mine = Some(owner) == name || owner.parse() == Ok(uid);
        (mine && count > 0 && start.checked_add(count).is_some())
            .then_some(IdRange { start, count })
    })
}

/// What rootless mode needs from this machine, or why it cannot run: the first missing piece,
/// named (kernel feature, helper, subordinate ids), with how to provide it.
pub fn plan(sys: &dyn SystemFiles, uid: u32, gid: u32) -> anyhow::Result<RootlessPlan> {
    const PREFIX: &str = "the local engine cannot run rootless";
    if let Some(feature) = missing_kernel_feature(sys) {
        bail!("{PREFIX}: {feature}; run pitcrew as root, or use --engine exec with a container engine");
    }
    for helper in ["newuidmap", "newgidmap"] {
        if sys.on_path(helper).is_none() {
            bail!("{PREFIX}: {helper} is not on PATH (it maps the agent's subordinate uid and gid; install the `uidmap` package)");
        }
    }
    let user = sys.read("/etc/passwd").and_then(|p| user_name(&p, uid));
    let who = match &user {
        Some(name) => format!("user {name} (uid {uid})"),
        None => format!("uid {uid}"),
    };
    let who_arg = user.clone().unwrap_or_else(|| uid.to_string());
    let mut ranges = [None, None];
    for (slot, (file, flag)) in ranges.iter_mut().zip([
        ("/etc/subuid", "--add-subuids"),
        ("/etc/subgid", "--add-subgids"),
    ]) {
        // Both files are keyed by the user (name or uid), not by the group.
        let range = sys
            .read(file)
            .and_then(|text| subordinate_range(&text, user.as_deref(), uid));
        match range {
            None => bail!(
                "{PREFIX}: {who} has no subordinate ids in {file}, so the agent cannot get a uid of its own; as root, give it a free range: usermod {flag} 100000-165535 {who_arg}"
            ),
            Some(r) if r.count < MIN_SUBORDINATE_IDS => bail!(
                "{PREFIX}: {who} has {} subordinate ids in {file} ({}–{}); the agent's id 65534 needs at least {MIN_SUBORDINATE_IDS} (as root, give it a free range: usermod {flag} 100000-165535 {who_arg})",
                r.count,
                r.start,
                r.start + (r.count - 1)
            ),
            Some(r) => *slot = Some(r),
        }
    }
    let [Some(subuid), Some(subgid)] = ranges else {
        bail!("{PREFIX}: no subordinate ids");
    };
    Ok(RootlessPlan {
        uid,
        gid,
        user,
        subuid,
        subgid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct Fake {
        files: HashMap<&'static str, &'static str>,
        helpers: bool,
    }

    impl SystemFiles for Fake {
        fn read(&self, path: &str) -> Option<String> {
            self.files.get(path).map(|s| s.to_string())
        }
        fn on_path(&self, name: &str) -> Option<PathBuf> {
            self.helpers.then(|| PathBuf::from("/usr/bin").join(name))
        }
    }

    fn ready() -> Fake {
        Fake {
            files: HashMap::from([
                ("/proc/self/uid_map", "0 0 4294967295\n"),
                ("/proc/sys/user/max_user_namespaces", "63000\n"),
                (
                    "/etc/passwd",
                    "root:x:0:0::/root:/bin/sh\nana:x:1000:1000::/home/ana:/bin/sh\n",
                ),
                ("/etc/subuid", "bob:100000:65536\nana:165536:65536\n"),
                ("/etc/subgid", "# comment\n1000:300000:70000\n"),
            ]),
            helpers: true,
        }
    }

    fn err(sys: &Fake) -> String {
        format!("{:#}", plan(sys, 1000, 1000).unwrap_err())
    }

    #[test]
    fn plan_maps_root_to_the_user_and_the_rest_to_subordinate_ids() {
        // The gid (2000) plays no part in finding the ranges: both files are keyed by the user.
        let p = plan(&ready(), 1000, 2000).unwrap();
        assert_eq!(p.user.as_deref(), Some("ana"));
        assert_eq!(
            p.subuid,
            IdRange {
                start: 165536,
                count: 65536
            }
        );
        assert_eq!(
            p.subgid,
            IdRange {
                start: 300000,
                count: 70000
            }
        );
        assert_eq!(p.mapped(), 65536);
        let args: Vec<String> = p
            .unshare_args()
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        assert_eq!(
            args,
            [
                "--map-root-user",
                "--map-users=165536,1,65536",
                "--map-groups=300000,1,65536"
            ]
        );
    }

    #[test]
    fn each_missing_kernel_feature_is_named() {
        for (file, value, says) in [
            (
                "/proc/sys/kernel/unprivileged_userns_clone",
                "0\n",
                "kernel.unprivileged_userns_clone = 0",
            ),
            (
                "/proc/sys/user/max_user_namespaces",
                "0\n",
                "user.max_user_namespaces = 0",
            ),
            (
                "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
                "1\n",
                "apparmor_restrict_unprivileged_userns = 1",
            ),
        ] {
            let mut sys = ready();
            sys.files.insert(file, value);
            let e = err(&sys);
            assert!(e.contains("cannot run rootless") && e.contains(says), "{e}");
        }
        let mut sys = ready();
        sys.files.remove("/proc/self/uid_map");
        assert!(err(&sys).contains("CONFIG_USER_NS"));
    }

    #[test]
    fn missing_helpers_and_ids_are_named_with_the_fix() {
        let mut sys = ready();
        sys.helpers = false;
        let e = err(&sys);
        assert!(
            e.contains("newuidmap is not on PATH") && e.contains("uidmap"),
            "{e}"
        );

        let mut sys = ready();
        sys.files.insert("/etc/subuid", "bob:100000:65536\n");
        let e = err(&sys);
        assert!(
            e.contains("user ana (uid 1000) has no subordinate ids in /etc/subuid")
                && e.contains("usermod --add-subuids 100000-165535 ana"),
            "{e}"
        );

        let mut sys = ready();
        sys.files.remove("/etc/subgid");
        assert!(err(&sys).contains("no subordinate ids in /etc/subgid"));

        let mut sys = ready();
        sys.files.insert("/etc/subgid", "ana:200000:1000\n");
        let e = err(&sys);
        assert!(
            e.contains("has 1000 subordinate ids in /etc/subgid (200000–200999)"),
            "{e}"
        );
    }

    #[test]
    fn subordinate_ranges_by_name_or_number_first_block_wins() {
        let text = "x:1:2\n\n1000:500:65536\nana:900000:65536\n";
        assert_eq!(
            subordinate_range(text, Some("ana"), 1000),
            Some(IdRange {
                start: 500,
                count: 65536
            })
        );
        assert_eq!(subordinate_range(text, None, 7), None);
        assert_eq!(
            subordinate_range("ana:x:1\nana:4294967295:2\n", Some("ana"), 1),
            None
        );
        assert_eq!(user_name("a:x:5:5::/:/bin/sh\n", 5).as_deref(), Some("a"));
        assert_eq!(user_name("garbage\n", 5), None);
    }
}
