//! Where a connection to an allowed endpoint may go: the addresses a name resolves to, and the
//! ones refused behind a name (loopback, link-local, cloud metadata, …). One code for both
//! sides that dial: the host (`pitcrew run`, the default) and the supervisor under
//! `network: {allow: […], from: sandbox}` ([`crate::server`]'s egress).

use crate::manifest::NetworkPolicy;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Why an address must not be dialled for a name: loopback, link-local (the cloud metadata
/// address among them), the other clouds' metadata addresses, "this network" (`0.0.0.0/8`),
/// broadcast, multicast; and an IPv6 address that carries an IPv4 one (IPv4-mapped and
/// -compatible, NAT64's `64:ff9b::/96` and `64:ff9b:1::/48`, 6to4's `2002::/16`) for what it
/// carries, since a gateway on the way delivers it there. Teredo (`2001::/32`) hides the address
/// it carries and is refused whole.
pub fn forbidden_address(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => forbidden_v4(v4),
            None => forbidden_v6(v6),
        },
    }
}

/// [`forbidden_address`] of an IPv4 address.
fn forbidden_v4(v4: Ipv4Addr) -> Option<&'static str> {
    match v4 {
        v4 if v4.is_loopback() => Some("a loopback address"),
        v4 if v4 == Ipv4Addr::new(169, 254, 169, 254)
            || v4 == Ipv4Addr::new(100, 100, 100, 200)
            || v4 == Ipv4Addr::new(192, 0, 0, 192) =>
        {
            Some("a cloud metadata address")
        }
        v4 if v4.is_link_local() => Some("a link-local address"),
        v4 if v4.octets()[0] == 0 || v4.is_broadcast() => {
            Some("an unspecified (0.0.0.0/8) or broadcast address")
        }
        v4 if v4.is_multicast() => Some("a multicast address"),
        _ => None,
    }
}

/// [`forbidden_address`] of an IPv6 address that carries no IPv4 one.
fn forbidden_v6(v6: Ipv6Addr) -> Option<&'static str> {
    let segments = v6.segments();
    match v6 {
        v6 if v6.is_loopback() => Some("a loopback address"),
        v6 if v6.is_unspecified() => Some("an unspecified address"),
        v6 if v6.is_multicast() => Some("a multicast address"),
        _ if (segments[0] & 0xffc0) == 0xfe80 => Some("a link-local address"),
        v6 if METADATA_V6.contains(&v6) => Some("a cloud metadata address"),
        _ if segments[0] == 0x2001 && segments[1] == 0 => {
            Some("a Teredo address (the IPv4 address it carries is hidden)")
        }
        _ => None,
    }
}

/// The clouds' IPv6 metadata and credential addresses: AWS IMDS (`fd00:ec2::254`) and EKS Pod
/// Identity (`fd00:ec2::23`), Google Compute Engine (`fd20:ce::254`), Scaleway (`fd00:42::42`).
const METADATA_V6: [Ipv6Addr; 4] = [
    Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254),
    Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x23),
    Ipv6Addr::new(0xfd20, 0xce, 0, 0, 0, 0, 0, 0x254),
    Ipv6Addr::new(0xfd00, 0x42, 0, 0, 0, 0, 0, 0x42),
];

/// The IPv4 address an IPv6 one carries to a gateway or a dual stack: IPv4-mapped
/// (`::ffff:a.b.c.d`), IPv4-translated (`::ffff:0:a.b.c.d`), IPv4-compatible (`::a.b.c.d`, not
/// `::` or `::1`), NAT64 (`64:ff9b::/96`,
/// `64:ff9b:1::/48` with the address in its last 32 bits) and 6to4 (`2002:AABB:CCDD::/48`).
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let low = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    if s[..5] == [0, 0, 0, 0, 0xffff] && s[5] == 0 {
        return Some(low(s[6], s[7]));
    }
    if s[..6] == [0; 6] && !v6.is_loopback() && !v6.is_unspecified() {
        return Some(low(s[6], s[7]));
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] || (s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1) {
        return Some(low(s[6], s[7]));
    }
    if s[0] == 0x2002 {
        return Some(low(s[1], s[2]));
    }
    None
}

/// The addresses to dial for `host`:`port` under `policy`; `Err` says why none. An address
/// literal the policy lists is dialled as it is; `localhost` stands for the loopback
/// addresses; a name's addresses must pass [`forbidden_address`].
pub fn resolve(policy: &NetworkPolicy, host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
    if !policy.allows(host, port) {
        return Err(format!("{host}:{port} is not allowed"));
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    if host == "localhost" {
        return Ok(vec![
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port),
            SocketAddr::new(Ipv6Addr::LOCALHOST.into(), port),
        ]);
    }
    let found: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|err| format!("{host} does not resolve: {err}"))?
        .collect();
    if let Some((addr, why)) = found
        .iter()
        .find_map(|a| forbidden_address(a.ip()).map(|why| (a, why)))
    {
        return Err(format!(
            "{host} resolves to {} ({why}); list that address itself to allow it",
            addr.ip()
        ));
    }
    if found.is_empty() {
        return Err(format!("{host} has no address"));
    }
    if let Some(addr) = found.iter().find(|a| own_address(a.ip())) {
        return Err(format!(
            "{host} resolves to {} (an address of the dialling side's own network namespace, \
             which reaches its services as a loopback address would); list that address \
             itself to allow it",
            addr.ip()
        ));
    }
    Ok(found)
}

/// Whether `ip` is an address of the calling thread's network namespace: a socket binds to
/// an address only where it is assigned (`EADDRNOTAVAIL` elsewhere; Linux's
/// `ip_nonlocal_bind` would widen that, and is off by default).
fn own_address(ip: IpAddr) -> bool {
    std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// Dials `host`:`port` under `policy` ([`resolve`]), each address within `timeout` in turn;
/// `Err` says why nothing was connected.
pub fn dial(
    policy: &NetworkPolicy,
    host: &str,
    port: u16,
    timeout: Duration,
) -> Result<TcpStream, String> {
    let addrs = resolve(policy, host, port)?;
    // Only a name's addresses are held to the rules; a listed literal (or `localhost`) is
    // dialled as it is.
    let named = host != "localhost" && host.parse::<IpAddr>().is_err();
    let mut last = String::new();
    for addr in &addrs {
        match TcpStream::connect_timeout(addr, timeout) {
            // A connection whose two ends share an address went to the dialling side itself
            // (an address assigned since the check): closed before a byte is sent.
            Ok(stream) if named && stream.local_addr().is_ok_and(|l| l.ip() == addr.ip()) => {
                last = format!("{addr}: an address of the dialling side's own");
            }
            Ok(stream) => return Ok(stream),
            Err(err) => last = format!("{addr}: {err}"),
        }
    }
    Err(format!("dialling {host}:{port} failed ({last})"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Endpoint;

    fn allow(list: &[&str]) -> NetworkPolicy {
        NetworkPolicy::allow(list.iter().map(|e| Endpoint::parse(e).unwrap()).collect())
    }

    #[test]
    fn loopback_link_local_and_metadata_addresses_are_forbidden_for_names() {
        for bad in [
            "127.0.0.1",
            "127.1.2.3",
            "169.254.169.254",
            "169.254.1.1",
            "0.0.0.0",
            "::1",
            "::",
            "fe80::1",
            "::ffff:127.0.0.1",
            "fd00:ec2::254",
            "224.0.0.1",
            "0.1.2.3",
            "100.100.100.200",
            // IPv6 forms that carry a forbidden IPv4 address to a gateway.
            "::127.0.0.1",
            "64:ff9b::169.254.169.254",
            "64:ff9b:1::a9fe:a9fe",
            "2002:7f00:1::1",
            "2002:a9fe:a9fe::",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
        ] {
            assert!(forbidden_address(bad.parse().unwrap()).is_some(), "{bad}");
        }
        for good in [
            "93.184.216.34",
            "10.0.0.1",
            "2606:4700::1",
            "64:ff9b::5db8:d822",
            "2002:5db8:d822::1",
            "::ffff:93.184.216.34",
        ] {
            assert!(forbidden_address(good.parse().unwrap()).is_none(), "{good}");
        }
    }

    /// Metadata and credential endpoints of other clouds than the three listed, and an IPv4
    /// address carried in the IPv4-translated form (`::ffff:0:a.b.c.d`, RFC 2765's SIIT, which
    /// a translating gateway delivers to the IPv4 address): a name resolving to one must be
    /// refused as `169.254.169.254` is. Google Compute Engine's IPv6 metadata server
    /// (`fd20:ce::254`), EKS Pod Identity's IPv6 agent (`fd00:ec2::23`), Scaleway's IPv6
    /// metadata (`fd00:42::42`) and Oracle Cloud Classic's (`192.0.0.192`).
    #[test]
    #[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
    fn attack_egress__other_clouds_metadata_addresses_are_forbidden_behind_a_name() {
        let passed: Vec<&str> = [
            "fd20:ce::254",
            "fd00:ec2::23",
            "fd00:42::42",
            "192.0.0.192",
            "::ffff:0:169.254.169.254",
            "::ffff:0:127.0.0.1",
        ]
        .into_iter()
        .filter(|a| forbidden_address(a.parse().unwrap()).is_none())
        .collect();
        assert!(passed.is_empty(), "dialled behind a name: {passed:?}");
    }

    /// The name this test's private `/etc/hosts` gives the machine's own outside address.
    const OWN_NAME: &str = "pitcrew-own-address.test";

    /// An address of this machine's on an interface other than `lo` (the source address it
    /// would use towards a documentation address; a UDP `connect` sends nothing), if any.
    fn own_outside_address() -> Option<IpAddr> {
        let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
        s.connect("192.0.2.1:9").ok()?;
        Some(s.local_addr().ok()?.ip()).filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
    }

    /// Root and util-linux's `unshare` only (skipped otherwise). Under `from: sandbox` the
    /// dialler is the supervisor in the sandbox's network namespace (in a local sandbox
    /// started for `open`, this machine's): a name that resolves to one of that namespace's
    /// own addresses reaches every service listening there on the wildcard address, as a
    /// loopback address would, yet only loopback is refused behind a name. The test re-runs
    /// itself in a mount namespace whose `/etc/hosts` gives [`OWN_NAME`] the machine's outside
    /// address, with a server on `0.0.0.0`; the allowed name must be refused, not dialled.
    #[test]
    #[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
    fn attack_egress__a_name_resolving_to_the_dialling_namespaces_own_address_is_refused() {
        if let Some(own) = std::env::var_os("PITCREW_OWN_ADDRESS_INNER") {
            let own: IpAddr = own.to_str().unwrap().parse().unwrap();
            let server = std::net::TcpListener::bind(("0.0.0.0", 0)).unwrap();
            let port = server.local_addr().unwrap().port();
            let p = allow(&[&format!("{OWN_NAME}:{port}")]);
            let resolved = resolve(&p, OWN_NAME, port);
            assert_eq!(
                resolved.as_deref().ok(),
                None::<&[SocketAddr]>,
                "{OWN_NAME} resolves to {own}, this namespace's own address, and is dialled: \
                 {:?}",
                dial(&p, OWN_NAME, port, Duration::from_secs(5)).map(|s| s.peer_addr())
            );
            return;
        }
        let own = own_outside_address();
        let unshare = std::process::Command::new("unshare")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !pitcrew_test_support::prerequisite(
            nix::unistd::geteuid().is_root() && unshare && own.is_some(),
            "needs root, util-linux's unshare and an interface besides lo with an address",
        ) {
            return;
        }
        let own = own.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let hosts = dir.path().join("hosts");
        std::fs::write(&hosts, format!("127.0.0.1 localhost\n{own} {OWN_NAME}\n")).unwrap();
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg("mount --bind \"$1\" /etc/hosts && exec \"$2\" --exact \"$3\" --nocapture")
            .arg("sh")
            .arg(&hosts)
            .arg(&exe)
            .arg("egress::address::tests::attack_egress__a_name_resolving_to_the_dialling_namespaces_own_address_is_refused")
            .env("PITCREW_OWN_ADDRESS_INNER", own.to_string())
            .env_remove("PITCREW_REQUIRE_E2E")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && text.contains("1 passed"), "{text}");
    }

    #[test]
    fn a_listed_literal_is_dialled_and_an_unlisted_one_refused() {
        let p = allow(&["127.0.0.1:8080", "localhost:9"]);
        assert_eq!(
            resolve(&p, "127.0.0.1", 8080).unwrap(),
            ["127.0.0.1:8080".parse().unwrap()]
        );
        assert!(resolve(&p, "127.0.0.1", 8081)
            .unwrap_err()
            .contains("not allowed"));
        assert_eq!(resolve(&p, "localhost", 9).unwrap().len(), 2);
        assert!(resolve(&p, "169.254.169.254", 80).is_err());
    }
}
