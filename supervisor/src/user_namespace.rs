//! The user namespace the supervisor runs in, from `/proc/self/uid_map` and `gid_map`.
//!
//! In the initial namespace (the identity map `0 0 4294967295`) there is nothing to report. In a
//! rootless sandbox (`pitcrew`'s local engine as a non-root user) uid 0 is the host user and the
//! agent's uid is a subordinate id; `hello` reports the maps, and the launch refuses (125) an
//! agent uid, gid or group that the namespace does not map, naming it, instead of failing later
//! in `setresuid` with `EINVAL`.

use serde::{Deserialize, Serialize};
use std::fs;

/// One line of an id map: ids `inner .. inner + count` inside are `outer ..` in the parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdMapping {
    /// First id inside the namespace.
    pub inner: u32,
    /// First id in the parent namespace.
    pub outer: u32,
    /// How many ids.
    pub count: u32,
}

/// The maps of a user namespace other than the initial one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserNamespace {
    /// `/proc/self/uid_map`.
    pub uid_map: Vec<IdMapping>,
    /// `/proc/self/gid_map`.
    pub gid_map: Vec<IdMapping>,
}

/// Parses an id map; `None` if any line is malformed.
pub fn parse_map(text: &str) -> Option<Vec<IdMapping>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let mut f = line.split_whitespace().map(str::parse::<u32>);
            let (Some(Ok(inner)), Some(Ok(outer)), Some(Ok(count)), None) =
                (f.next(), f.next(), f.next(), f.next())
            else {
                return None;
            };
            Some(IdMapping {
                inner,
                outer,
                count,
            })
        })
        .collect()
}

/// Whether `map` is the initial namespace's identity map.
fn is_identity(map: &[IdMapping]) -> bool {
    map == [IdMapping {
        inner: 0,
        outer: 0,
        count: u32::MAX,
    }]
}

/// Whether `id` is mapped by `map`.
pub fn maps(map: &[IdMapping], id: u32) -> bool {
    map.iter()
        .any(|m| id >= m.inner && u64::from(id) < u64::from(m.inner) + u64::from(m.count))
}

/// The current user namespace, `None` in the initial one (or when `/proc` cannot say).
pub fn current() -> Option<UserNamespace> {
    let uid_map = parse_map(&fs::read_to_string("/proc/self/uid_map").ok()?)?;
    let gid_map = parse_map(&fs::read_to_string("/proc/self/gid_map").ok()?)?;
    if is_identity(&uid_map) && is_identity(&gid_map) {
        return None;
    }
    Some(UserNamespace { uid_map, gid_map })
}

impl UserNamespace {
    /// Why the agent's identity cannot be taken in this namespace, if it cannot.
    pub fn unmapped(&self, uid: u32, gid: u32, groups: &[u32]) -> Option<String> {
        if !maps(&self.uid_map, uid) {
            return Some(format!(
                "the agent's uid {uid} is not mapped in this user namespace (uid_map: {})",
                show(&self.uid_map)
            ));
        }
        if let Some(g) = std::iter::once(&gid)
            .chain(groups)
            .find(|g| !maps(&self.gid_map, **g))
        {
            return Some(format!(
                "the agent's gid {g} is not mapped in this user namespace (gid_map: {})",
                show(&self.gid_map)
            ));
        }
        None
    }

    /// One line for people: `uid 0 → 1000, 1–65536 → 100000–165535; gid …`.
    pub fn describe(&self) -> String {
        format!("uid {}; gid {}", show(&self.uid_map), show(&self.gid_map))
    }
}

/// `0 → 1000, 1–65536 → 100000–165535`.
fn show(map: &[IdMapping]) -> String {
    let one = |m: &IdMapping| {
        if m.count == 1 {
            format!("{} → {}", m.inner, m.outer)
        } else {
            let last = |start: u32| u64::from(start) + u64::from(m.count) - 1;
            format!(
                "{}–{} → {}–{}",
                m.inner,
                last(m.inner),
                m.outer,
                last(m.outer)
            )
        }
    };
    map.iter().map(one).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns() -> UserNamespace {
        let map = parse_map("         0       1001          1\n         1     100000      65536\n")
            .unwrap();
        UserNamespace {
            uid_map: map.clone(),
            gid_map: map,
        }
    }

    #[test]
    fn parses_maps_and_recognises_the_initial_namespace() {
        let identity = parse_map("0 0 4294967295\n").unwrap();
        assert!(is_identity(&identity));
        assert!(!is_identity(&ns().uid_map));
        assert_eq!(parse_map("0 1 x\n"), None);
        assert_eq!(parse_map("0 1 2 3\n"), None);
        assert!(maps(&identity, u32::MAX - 1));
    }

    #[test]
    fn unmapped_agent_ids_are_named() {
        let ns = ns();
        assert_eq!(ns.unmapped(65534, 65534, &[]), None);
        assert_eq!(ns.unmapped(65536, 0, &[1, 2]), None);
        let e = ns.unmapped(70000, 65534, &[]).unwrap();
        assert!(
            e.contains("uid 70000 is not mapped") && e.contains("1–65536 → 100000–165535"),
            "{e}"
        );
        let e = ns.unmapped(65534, 65534, &[65537]).unwrap();
        assert!(e.contains("gid 65537 is not mapped"), "{e}");
        assert_eq!(
            ns.describe(),
            "uid 0 → 1001, 1–65536 → 100000–165535; gid 0 → 1001, 1–65536 → 100000–165535"
        );
    }
}
