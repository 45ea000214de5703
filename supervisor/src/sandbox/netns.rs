//! The network namespace the agent runs in: its loopback brought up, and what else it holds.
//!
//! Egress control rests on a namespace with loopback only: the agent's connections can then go
//! nowhere but to listeners inside it, which the supervisor opens ([`crate::server`]'s egress)
//! and carries to the host. A container started with `--network=none` is such a namespace; the
//! local engine creates one (`unshare --net`), where `lo` starts down, so the supervisor brings
//! it up at start ([`bring_up_loopback`]). Where the namespace has another interface (a
//! container with a network, `--network host`, an exec session into a Pod), a manifest asking
//! for `none` or `allow` gets a network namespace of the agent's own ([`AgentNamespace`]):
//! made on a short-lived thread (network namespaces are per thread), its `lo` brought up, the
//! iteration's listeners bound there (a socket stays in the namespace it was made in), and the
//! agent `setns`ed into it before exec; the supervisor itself stays in the sandbox's namespace.
//! Where that namespace cannot be made (no `CAP_SYS_ADMIN`, a seccomp profile refusing
//! `unshare`), [`refusal`] says why before launch.

use crate::manifest::{DialFrom, NetworkPolicy};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// `network.namespace` of the record: the agent ran in the sandbox's own network namespace.
pub const IN_SANDBOX: &str = "sandbox";

/// `network.namespace` of the record: the agent ran in a network namespace of its own, made for
/// the iteration inside a sandbox that has a network.
pub const IN_AGENT: &str = "agent";

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

/// The interfaces of `interfaces` other than `lo`.
fn others(interfaces: &[String]) -> Vec<&str> {
    interfaces
        .iter()
        .map(String::as_str)
        .filter(|i| *i != LOOPBACK)
        .collect()
}

/// Whether an iteration under `policy` in a namespace with `interfaces` needs a network
/// namespace of the agent's own: `none` or `allow` where the sandbox's namespace has an
/// interface besides `lo`, and always under `allow … from: sandbox` (the supervisor dials from
/// the sandbox's namespace, the agent's listeners are elsewhere: a loopback endpoint the
/// supervisor dials is never one of its own listeners).
pub fn needs_agent_namespace(policy: Option<&NetworkPolicy>, interfaces: &[String]) -> bool {
    let Some(policy) = policy.filter(|p| !p.unenforced()) else {
        return false;
    };
    !others(interfaces).is_empty() || policy.dial_from() == DialFrom::Sandbox
}

/// Why an iteration under `policy` must not start in a namespace with `interfaces`, where the
/// agent's own namespace could not be made (`unmade`: why): `none` and `allow` need loopback
/// only; `open`, `platform` (and no policy) take the namespace as it is.
pub fn refusal(
    policy: Option<&NetworkPolicy>,
    interfaces: &[String],
    unmade: &str,
) -> Option<String> {
    if !needs_agent_namespace(policy, interfaces) {
        return None;
    }
    let mode = policy.map(NetworkPolicy::mode_name).unwrap_or_default();
    if others(interfaces).is_empty() {
        return Some(format!(
            "network: `allow` with `from: sandbox` runs the agent in a network namespace of its \
             own, which could not be made ({unmade}); give the supervisor CAP_SYS_ADMIN and a \
             seccomp profile that allows unshare, or drop `from: sandbox` (the host dials)"
        ));
    }
    Some(format!(
        "network: the agent's network is `{mode}` (the harness's `network:`, or without it the \
         runtime's default) but the sandbox's network namespace has interfaces besides lo \
         ({}) and the agent's own network namespace could not be made ({unmade}), so pitcrew \
         cannot keep the agent from them; give the supervisor CAP_SYS_ADMIN and a seccomp \
         profile that allows unshare, start the sandbox without a network (podman/docker \
         `--network=none`, the local engine's own namespace), name the platform whose policy \
         holds it (`network: {{platform: openshell}}`), or say `network: open` in the harness \
         to run with the engine's network as it is",
        others(interfaces).join(", ")
    ))
}

/// A network namespace of the agent's own, made for one iteration inside a sandbox whose
/// namespace has a network: loopback only, up, checked to hold no other interface and no
/// route off `lo`. The supervisor stays in the sandbox's namespace; the agent joins this one
/// before exec ([`crate::sandbox::confine::ConfinePlan::join_network`]). Dropping the last
/// descriptor (and the last process and socket in it) ends the namespace.
#[derive(Debug)]
pub struct AgentNamespace {
    fd: OwnedFd,
}

impl AgentNamespace {
    /// Makes the namespace on a short-lived thread and runs `inside` on that thread once it is
    /// in place: the sockets `inside` makes (the iteration's listeners) stay in the namespace.
    /// `Err` names the step and errno (`unshare(CLONE_NEWNET): EPERM …`). The thread is joined
    /// before this returns (the fork invariant of [`crate::sandbox::launch`]).
    pub fn create<T: Send>(
        inside: impl FnOnce() -> T + Send,
    ) -> Result<(AgentNamespace, T), String> {
        std::thread::scope(|scope| {
            let thread = std::thread::Builder::new()
                .name("agent-netns".into())
                .spawn_scoped(scope, move || -> Result<(OwnedFd, T), String> {
                    // SAFETY: unshare takes a flag; it moves only this thread to a new network
                    // namespace (a multi-threaded process may unshare CLONE_NEWNET).
                    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                        return Err(errno_text("unshare(CLONE_NEWNET)"));
                    }
                    bring_up_loopback().map_err(|e| format!("bringing up lo: {e}"))?;
                    let fd = std::fs::File::open("/proc/thread-self/ns/net")
                        .map_err(|e| format!("/proc/thread-self/ns/net: {e}"))?;
                    check_loopback_only()?;
                    Ok((OwnedFd::from(fd), inside()))
                })
                .map_err(|e| format!("a thread for the agent's network namespace: {e}"))?;
            let (fd, out) = thread
                .join()
                .map_err(|_| "the agent's network namespace thread failed".to_string())??;
            Ok((AgentNamespace { fd }, out))
        })
    }

    /// The namespace's descriptor (`/proc/thread-self/ns/net` of the thread that made it).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The namespace's descriptor, owned.
    pub fn into_fd(self) -> OwnedFd {
        self.fd
    }
}

/// `what` failed: its errno by name and text (`unshare(CLONE_NEWNET): EPERM: Operation not
/// permitted`), with what an `EPERM` means here.
fn errno_text(what: &str) -> String {
    let errno = nix::errno::Errno::last();
    let hint = if errno == nix::errno::Errno::EPERM {
        " (the supervisor lacks CAP_SYS_ADMIN, as in a podman/docker container with the \
         default capabilities, or a seccomp profile refuses unshare)"
    } else {
        ""
    };
    format!("{what}: {errno:?}: {}{hint}", errno.desc())
}

/// Checks, from a thread inside a new network namespace, that it holds `lo` only and no route
/// but `lo`'s: `/proc/thread-self/net/{dev,route,ipv6_route}` (the thread's own namespace).
fn check_loopback_only() -> Result<(), String> {
    let read = |name: &str| {
        std::fs::read_to_string(format!("/proc/thread-self/net/{name}"))
            .map_err(|e| format!("/proc/thread-self/net/{name}: {e}"))
    };
    let names = parse_net_dev(&read("dev")?);
    let others = others(&names);
    if !others.is_empty() {
        return Err(format!(
            "the new namespace has interfaces besides lo: {}",
            others.join(", ")
        ));
    }
    let off_lo = |text: &str, device: fn(&str) -> Option<&str>| -> Option<String> {
        text.lines()
            .filter_map(device)
            .find(|d| *d != LOOPBACK)
            .map(str::to_string)
    };
    if let Some(dev) = off_lo(&read("route")?, ipv4_route_device) {
        return Err(format!("the new namespace has an IPv4 route through {dev}"));
    }
    // Without IPv6 in the kernel there is no table to read, and no route.
    if let Ok(text) = std::fs::read_to_string("/proc/thread-self/net/ipv6_route") {
        if let Some(dev) = off_lo(&text, ipv6_route_device) {
            return Err(format!("the new namespace has an IPv6 route through {dev}"));
        }
    }
    Ok(())
}

/// The device of a `/proc/net/route` line (`None` for the header).
fn ipv4_route_device(line: &str) -> Option<&str> {
    line.split_whitespace().next().filter(|d| *d != "Iface")
}

/// The device of a `/proc/net/ipv6_route` line (its tenth and last field).
fn ipv6_route_device(line: &str) -> Option<&str> {
    line.split_whitespace().nth(9)
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
        assert!(needs_agent_namespace(Some(&none), &names));
        let why = refusal(Some(&none), &names, "unshare(CLONE_NEWNET): EPERM").unwrap();
        assert!(
            why.contains("(eth0)") && why.contains("network: open") && why.contains("EPERM"),
            "{why}"
        );
        assert!(refusal(Some(&NetworkPolicy::Open), &names, "").is_none());
        let platform = NetworkPolicy::Platform {
            platform: "openshell".into(),
        };
        assert!(refusal(Some(&platform), &names, "").is_none());
        assert!(refusal(None, &names, "").is_none());
        assert!(!needs_agent_namespace(None, &names));
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
        let allow = NetworkPolicy::allow(Vec::new());
        assert!(refusal(Some(&allow), &["lo".to_string()], "").is_none());
        assert!(!needs_agent_namespace(Some(&allow), &["lo".to_string()]));
        let direct = NetworkPolicy::Allow {
            allow: Vec::new(),
            from: DialFrom::Sandbox,
        };
        assert!(needs_agent_namespace(Some(&direct), &["lo".to_string()]));
        let why = refusal(Some(&direct), &["lo".to_string()], "EPERM").unwrap();
        assert!(
            why.contains("from: sandbox") && why.contains("EPERM"),
            "{why}"
        );
    }

    #[test]
    fn route_lines_name_their_device() {
        let v4 = "Iface\tDestination\tGateway\nlo\t0000007F\t00000000\neth0\t00000000\t0101A8C0\n";
        let devices: Vec<&str> = v4.lines().filter_map(ipv4_route_device).collect();
        assert_eq!(devices, ["lo", "eth0"]);
        let v6 = "00000000000000000000000000000001 80 00000000000000000000000000000000 00 \
                  00000000000000000000000000000000 00000000 00000001 00000000 80200001       lo\n";
        assert_eq!(
            v6.lines().filter_map(ipv6_route_device).collect::<Vec<_>>(),
            ["lo"]
        );
    }

    /// Root only (skipped otherwise): a namespace made here holds `lo` only, up, with no route
    /// off it; a listener bound inside is unreachable from the test's own namespace, and an
    /// abstract Unix socket bound outside is unreachable from inside.
    #[test]
    fn an_agent_namespace_holds_loopback_only_and_shares_no_abstract_socket() {
        use std::os::linux::net::SocketAddrExt;
        use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
        if !pitcrew_test_support::prerequisite(
            nix::unistd::geteuid().is_root(),
            "needs root to unshare a network namespace",
        ) {
            return;
        }
        let name = format!("pitcrew-netns-test-{}", std::process::id());
        let outside = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let _held = UnixListener::bind_addr(&outside).unwrap();
        let (ns, (listener, from_inside)) = AgentNamespace::create(|| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let reached = UnixStream::connect_addr(&outside).map_err(|e| e.kind());
            (l, reached)
        })
        .unwrap();
        assert_eq!(from_inside.err(), Some(io::ErrorKind::ConnectionRefused));
        let port = listener.local_addr().unwrap().port();
        // The listener is in the agent's namespace, not this one.
        assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
        drop(ns);
    }
}
