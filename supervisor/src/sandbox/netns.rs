//! The network namespace the agent runs in: its loopback brought up, and what else it holds.
//!
//! Egress control rests on a namespace with loopback only: the agent's connections can then go
//! nowhere but to listeners inside it, which the supervisor opens ([`crate::server`]'s egress)
//! and carries to the host. A container started with `--network=none` is such a namespace; the
//! local engine creates one (`unshare --net`), where `lo` starts down, so the supervisor brings
//! it up at start ([`bring_up_loopback`]). Where the namespace has another interface (a
//! container with a network, `--network host`, an exec session into a Pod), a manifest asking
//! for `none` or `allow` cannot be enforced: [`refusal`] says so before launch.

use crate::manifest::NetworkPolicy;
use std::io;

/// The loopback interface's name.
const LOOPBACK: &str = "lo";

/// Brings the namespace's `lo` up (a no-op when it is up already): `SIOCGIFFLAGS`, then
/// `SIOCSIFFLAGS` with `IFF_UP`. Needs `CAP_NET_ADMIN` over the namespace when `lo` is down.
pub fn bring_up_loopback() -> io::Result<()> {
    // SAFETY: socket takes plain integers and returns a new descriptor or -1.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by socket and is owned by nothing else.
    let sock = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    use std::os::fd::AsRawFd;
    // SAFETY: `ifreq` is plain old data; all zeroes is a valid value of it.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(LOOPBACK.bytes()) {
        *dst = src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads the name and writes the flags of the `ifreq` we own, which
    // outlives the call.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFFLAGS filled the union's `ifru_flags` member.
    let flags = unsafe { req.ifr_ifru.ifru_flags };
    let up = libc::IFF_UP as libc::c_short;
    if flags & up != 0 {
        return Ok(());
    }
    req.ifr_ifru.ifru_flags = flags | up;
    // SAFETY: SIOCSIFFLAGS reads the `ifreq` we own, which outlives the call.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The interfaces of the supervisor's network namespace, from `/proc/self/net/dev` (which,
/// unlike `/sys/class/net`, is always the reader's own namespace).
pub fn interfaces() -> io::Result<Vec<String>> {
    let text = std::fs::read_to_string("/proc/self/net/dev")?;
    Ok(parse_net_dev(&text))
}

/// The interface names of a `/proc/net/dev` text (the two header lines skipped).
fn parse_net_dev(text: &str) -> Vec<String> {
    text.lines()
        .skip(2)
        .filter_map(|line| line.split_once(':'))
        .map(|(name, _)| name.trim().to_string())
        .filter(|name| !name.is_empty())
        .collect()
}

/// Why an iteration under `policy` must not start in a namespace with `interfaces`: `none` and
/// `allow` need loopback only; `open`, `platform` (and no policy) take the namespace as it is.
pub fn refusal(policy: Option<&NetworkPolicy>, interfaces: &[String]) -> Option<String> {
    let policy = policy?;
    if policy.unenforced() {
        return None;
    }
    let others: Vec<&str> = interfaces
        .iter()
        .map(String::as_str)
        .filter(|i| *i != LOOPBACK)
        .collect();
    if others.is_empty() {
        return None;
    }
    Some(format!(
        "network: the agent's network is `{}` (the harness's `network:`, or without it the \
         runtime's default) but the sandbox's network namespace has interfaces besides lo \
         ({}), so pitcrew cannot keep the agent from them; start the sandbox without a network \
         (podman/docker `--network=none`, the local engine's own namespace), name the \
         platform whose policy holds it (`network: {{platform: openshell}}`), or say \
         `network: open` in the harness to run with the engine's network as it is",
        policy.mode_name(),
        others.join(", ")
    ))
}

/// Why an iteration under a `platform` policy must not start with the agent's environment
/// `env`: the platform's proxy variable ([`crate::manifest::PLATFORM_PROXY_VARS`]) is not in
/// it, so nothing says its policy is in place. `None` for any other policy.
pub fn platform_refusal(
    policy: Option<&NetworkPolicy>,
    env: &[(String, String)],
) -> Option<String> {
    let Some(NetworkPolicy::Platform { platform }) = policy else {
        return None;
    };
    let vars = crate::manifest::PLATFORM_PROXY_VARS;
    let present = env
        .iter()
        .any(|(name, value)| vars.contains(&name.as_str()) && !value.trim().is_empty());
    (!present).then(|| {
        format!(
            "network: the harness names {platform}'s egress policy (`network: {{platform: \
             {platform}}}`), but the agent's environment has none of {} (the platform's proxy, \
             from the sandbox's own environment), so nothing says that policy holds the agent; \
             run where it does, or say `network: open`",
            vars.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEV: &str = "Inter-|   Receive                            |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes\n    lo:  1234      10    0    0    0     0          0         0     1234\n  eth0: 99 1 0 0 0 0 0 0 99\n";

    #[test]
    fn interfaces_are_read_from_net_dev_and_only_lo_passes_none_and_allow() {
        let names = parse_net_dev(DEV);
        assert_eq!(names, ["lo", "eth0"]);
        let none = NetworkPolicy::None;
        let why = refusal(Some(&none), &names).unwrap();
        assert!(
            why.contains("(eth0)") && why.contains("network: open"),
            "{why}"
        );
        assert!(refusal(Some(&NetworkPolicy::Open), &names).is_none());
        let platform = NetworkPolicy::Platform {
            platform: "openshell".into(),
        };
        assert!(refusal(Some(&platform), &names).is_none());
        assert!(refusal(None, &names).is_none());
        let proxy = |name: &str, value: &str| vec![(name.to_string(), value.to_string())];
        let why = platform_refusal(Some(&platform), &proxy("HOME", "/h")).unwrap();
        assert!(
            why.contains("openshell's egress policy") && why.contains("HTTPS_PROXY"),
            "{why}"
        );
        assert!(platform_refusal(Some(&platform), &proxy("HTTPS_PROXY", " ")).is_some());
        assert!(
            platform_refusal(Some(&platform), &proxy("https_proxy", "http://p:3128")).is_none()
        );
        assert!(platform_refusal(Some(&none), &[]).is_none());
        let allow = NetworkPolicy::Allow { allow: Vec::new() };
        assert!(refusal(Some(&allow), &["lo".to_string()]).is_none());
    }
}
