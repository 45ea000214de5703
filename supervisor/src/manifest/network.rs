//! What the agent may reach over the network: the manifest's `network` and the endpoints it
//! allows.
//!
//! An endpoint is a host and a port, written `host:port` in a harness: a DNS name
//! (`api.anthropic.com:443`), a wildcard that stands for the strict subdomains of a name and
//! nothing else (`*.githubusercontent.com:443` matches `raw.githubusercontent.com`, never
//! `githubusercontent.com` itself), an IPv4 literal (`127.0.0.1:8080`) or a bracketed IPv6
//! literal (`[::1]:8080`). Names compare case-insensitively and are kept lowercase. Both
//! sides use the one parser and the one matcher here: the host when it checks a harness and
//! dials, the supervisor when it decides what its listener carries.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The most endpoints one `allow` list may name.
pub const MAX_ALLOWED_ENDPOINTS: usize = 256;

/// The longest host name an endpoint may carry (DNS's own limit).
const MAX_HOST_LEN: usize = 253;

/// What leaves the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "kebab-case", deny_unknown_fields)]
pub enum NetworkPolicy {
    /// Nothing: the agent's tree has loopback only and pitcrew carries no connection.
    None,
    /// Only these endpoints, each connection carried by pitcrew and accounted in the record.
    Allow {
        /// The endpoints allowed, in the order the harness names them.
        allow: Vec<Endpoint>,
        /// Who dials the allowed connections: the host (`pitcrew run`, the default) or the
        /// supervisor itself, from the sandbox's network namespace.
        #[serde(default, skip_serializing_if = "DialFrom::is_host")]
        from: DialFrom,
    },
    /// The engine's network as it is: pitcrew enforces nothing and says so.
    Open,
    /// The platform's own egress policy holds the agent, named by the harness (one of
    /// [`PLATFORMS`]): pitcrew enforces nothing of it and says so, and starts the agent only
    /// where that policy's proxy is in the sandbox's environment.
    Platform {
        /// The platform, one of [`PLATFORMS`].
        platform: String,
    },
}

/// Who dials the agent's allowed connections (`network: {allow: […], from: …}`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DialFrom {
    /// `pitcrew run` on the host, over the control stream (the default).
    #[default]
    Host,
    /// The supervisor, from the sandbox's own network namespace (the agent then always runs in
    /// a namespace of its own); model connections still go through the host, which holds the
    /// credentials.
    Sandbox,
}

impl DialFrom {
    /// Whether it is the default, [`DialFrom::Host`].
    pub fn is_host(&self) -> bool {
        *self == DialFrom::Host
    }

    /// Its name as harnesses, manifests and records write it.
    pub fn name(self) -> &'static str {
        match self {
            DialFrom::Host => "host",
            DialFrom::Sandbox => "sandbox",
        }
    }
}

/// The platforms whose own egress policy a harness may name (`network: {platform: NAME}`),
/// with what enforces it.
pub const PLATFORMS: &[(&str, &str)] = &[(
    "openshell",
    "OpenShell's policy proxy (the sandbox's HTTPS_PROXY)",
)];

/// The variables that carry a platform's egress proxy into the sandbox: one of them must be in
/// the agent's environment under `platform`.
pub const PLATFORM_PROXY_VARS: &[&str] = &["HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"];

impl NetworkPolicy {
    /// The mode's name as harnesses, manifests and records write it.
    pub fn mode_name(&self) -> &'static str {
        match self {
            NetworkPolicy::None => "none",
            NetworkPolicy::Allow { .. } => "allow",
            NetworkPolicy::Open => "open",
            NetworkPolicy::Platform { .. } => "platform",
        }
    }

    /// The endpoints allowed (none for `none` and `open`).
    pub fn allowed(&self) -> &[Endpoint] {
        match self {
            NetworkPolicy::Allow { allow, .. } => allow,
            NetworkPolicy::None | NetworkPolicy::Open | NetworkPolicy::Platform { .. } => &[],
        }
    }

    /// Whether a connection to `host`:`port` is allowed; `host` is a name or an address
    /// literal as a client asked for it (IPv6 without brackets). `open` allows nothing here:
    /// under it pitcrew carries no connection at all.
    pub fn allows(&self, host: &str, port: u16) -> bool {
        self.allowed().iter().any(|e| e.matches(host, port))
    }

    /// An `allow` policy of `endpoints`, dialled by the host.
    pub fn allow(endpoints: Vec<Endpoint>) -> NetworkPolicy {
        NetworkPolicy::Allow {
            allow: endpoints,
            from: DialFrom::Host,
        }
    }

    /// Who dials the allowed connections (the host for every mode but `allow … from: sandbox`).
    pub fn dial_from(&self) -> DialFrom {
        match self {
            NetworkPolicy::Allow { from, .. } => *from,
            _ => DialFrom::Host,
        }
    }

    /// Whether pitcrew enforces nothing of it (`open`, `platform`): the sandbox's network is
    /// taken as it is.
    pub fn unenforced(&self) -> bool {
        matches!(self, NetworkPolicy::Open | NetworkPolicy::Platform { .. })
    }

    /// Checks the policy as a manifest carries it: a platform of [`PLATFORMS`]; at most
    /// [`MAX_ALLOWED_ENDPOINTS`] endpoints, each well-formed, none twice. The message names the
    /// index.
    pub fn check(&self) -> Result<(), String> {
        if let NetworkPolicy::Platform { platform } = self {
            if !PLATFORMS.iter().any(|(p, _)| p == platform) {
                return Err(format!(
                    "platform {platform:?} is none of {}",
                    PLATFORMS
                        .iter()
                        .map(|(p, _)| *p)
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        let allow = self.allowed();
        if allow.len() > MAX_ALLOWED_ENDPOINTS {
            return Err(format!(
                "allow names {} endpoints, at most {MAX_ALLOWED_ENDPOINTS}",
                allow.len()
            ));
        }
        for (i, endpoint) in allow.iter().enumerate() {
            let again =
                Endpoint::parse(&endpoint.to_string()).map_err(|e| format!("allow[{i}]: {e}"))?;
            if &again != endpoint {
                return Err(format!(
                    "allow[{i}]: {endpoint} is not written canonically (lowercase, no brackets \
                     in host)"
                ));
            }
            if allow[..i].contains(endpoint) {
                return Err(format!("allow[{i}]: {endpoint} appears twice"));
            }
        }
        Ok(())
    }
}

/// One endpoint a policy allows.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Endpoint {
    /// A lowercase DNS name, `*.` and a name (its strict subdomains), an IPv4 literal, or an
    /// IPv6 literal without brackets.
    pub host: String,
    /// The TCP port, 1 to 65535.
    pub port: u16,
}

/// Why a `host:port` is no endpoint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// No `:port` at the end.
    #[error("{0:?} has no port: write host:port (e.g. api.anthropic.com:443)")]
    NoPort(String),
    /// The port is not a number from 1 to 65535.
    #[error("{0:?}: the port is not a number from 1 to 65535")]
    BadPort(String),
    /// The host is not a name, a wildcard of a name or an address literal.
    #[error("{input:?}: {why}")]
    BadHost {
        /// What was given.
        input: String,
        /// What is wrong with its host.
        why: &'static str,
    },
}

impl Endpoint {
    /// Parses `host:port` (`[v6]:port` for an IPv6 literal); the name is kept lowercase.
    pub fn parse(text: &str) -> Result<Endpoint, EndpointError> {
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let (v6, after) = rest
                .split_once(']')
                .ok_or_else(|| bad_host(text, "an IPv6 literal's `[` is not closed"))?;
            let port = after
                .strip_prefix(':')
                .ok_or_else(|| EndpointError::NoPort(text.to_string()))?;
            if v6.parse::<Ipv6Addr>().is_err() {
                return Err(bad_host(text, "not an IPv6 address inside the brackets"));
            }
            (v6.to_ascii_lowercase(), port)
        } else {
            let (host, port) = text
                .rsplit_once(':')
                .ok_or_else(|| EndpointError::NoPort(text.to_string()))?;
            if host.contains(':') {
                return Err(bad_host(
                    text,
                    "an IPv6 literal is written in brackets: [::1]:443",
                ));
            }
            check_host(text, host)?;
            (host.to_ascii_lowercase(), port)
        };
        let port = match port.parse::<u16>() {
            Ok(p) if p != 0 && !port.starts_with(['+', '0']) => p,
            _ => return Err(EndpointError::BadPort(text.to_string())),
        };
        Ok(Endpoint { host, port })
    }

    /// The address, when the host is an address literal.
    pub fn ip(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }

    /// Whether the endpoint names a loopback address (`127.0.0.0/8`, `::1`) or `localhost`:
    /// one the sandbox's own loopback answers for by mirroring it.
    pub fn is_loopback(&self) -> bool {
        self.host == "localhost" || self.ip().is_some_and(|ip| ip.is_loopback())
    }

    /// Whether the host is a wildcard (`*.example.com`).
    pub fn is_wildcard(&self) -> bool {
        self.host.starts_with("*.")
    }

    /// Whether a client asking for `host`:`port` reaches this endpoint: the same port, and the
    /// same name (case-insensitive, a trailing dot ignored), a strict subdomain of a wildcard's
    /// name, or the same address (an IPv6 literal may come with brackets).
    pub fn matches(&self, host: &str, port: u16) -> bool {
        if port != self.port {
            return false;
        }
        let host = host.strip_suffix('.').unwrap_or(host);
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if let (Some(mine), Ok(theirs)) = (self.ip(), host.parse::<IpAddr>()) {
            return mine == theirs;
        }
        match self.host.strip_prefix("*.") {
            Some(parent) => {
                host.len() > parent.len() + 1
                    && host.as_bytes()[host.len() - parent.len() - 1] == b'.'
                    && host[host.len() - parent.len()..].eq_ignore_ascii_case(parent)
            }
            None => host.eq_ignore_ascii_case(&self.host),
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

fn bad_host(input: &str, why: &'static str) -> EndpointError {
    EndpointError::BadHost {
        input: input.to_string(),
        why,
    }
}

/// A host that is not bracketed: an IPv4 literal, a DNS name, or `*.` and a name of at least
/// two labels (`*.com` and `*` would allow a whole top-level domain or everything).
fn check_host(input: &str, host: &str) -> Result<(), EndpointError> {
    if host.is_empty() {
        return Err(bad_host(input, "the host is empty"));
    }
    if host.len() > MAX_HOST_LEN {
        return Err(bad_host(input, "the host is longer than 253 characters"));
    }
    if host.parse::<Ipv4Addr>().is_ok() {
        return Ok(());
    }
    let (wildcard, name) = match host.strip_prefix("*.") {
        Some(name) => (true, name),
        None => (false, host),
    };
    let labels: Vec<&str> = name.split('.').collect();
    if labels.iter().any(|l| !is_label(l)) {
        return Err(bad_host(
            input,
            "not a host name (letters, digits and `-` in dot-separated labels; a wildcard only \
             as a leading `*.`)",
        ));
    }
    if labels
        .last()
        .is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(bad_host(
            input,
            "not an IPv4 address, and a name's last label is not all digits",
        ));
    }
    if wildcard && labels.len() < 2 {
        return Err(bad_host(
            input,
            "a wildcard must name at least two labels after `*.` (`*.example.com`, never `*.com`)",
        ));
    }
    Ok(())
}

fn is_label(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= 63
        && label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !label.starts_with('-')
        && !label.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_platform_is_named_from_the_list_and_allows_nothing_pitcrew_carries() {
        let open_shell = NetworkPolicy::Platform {
            platform: "openshell".into(),
        };
        assert_eq!(open_shell.check(), Ok(()));
        assert_eq!(open_shell.mode_name(), "platform");
        assert!(open_shell.unenforced() && NetworkPolicy::Open.unenforced());
        assert!(!NetworkPolicy::None.unenforced());
        assert!(!open_shell.allows("api.anthropic.com", 443));
        let json = serde_json::to_string(&open_shell).unwrap();
        assert_eq!(json, r#"{"mode":"platform","platform":"openshell"}"#);
        assert_eq!(
            serde_json::from_str::<NetworkPolicy>(&json).unwrap(),
            open_shell
        );
        let other = NetworkPolicy::Platform {
            platform: "k8s".into(),
        };
        assert!(other.check().unwrap_err().contains("none of openshell"));
    }

    fn ep(s: &str) -> Endpoint {
        Endpoint::parse(s).unwrap()
    }

    #[test]
    fn endpoints_parse_names_wildcards_and_both_address_families() {
        assert_eq!(
            ep("API.Anthropic.com:443"),
            Endpoint {
                host: "api.anthropic.com".into(),
                port: 443
            }
        );
        assert_eq!(ep("[::1]:8080").host, "::1");
        assert_eq!(ep("[::1]:8080").to_string(), "[::1]:8080");
        assert_eq!(ep("127.0.0.1:9").ip(), Some(IpAddr::from([127, 0, 0, 1])));
        assert!(ep("*.github.com:443").is_wildcard());
    }

    #[test]
    fn malformed_endpoints_are_refused_naming_what_is_wrong() {
        for bad in [
            "example.com",
            "example.com:0",
            "example.com:65536",
            "example.com:+1",
            "example.com:08",
            ":443",
            "*:443",
            "*.com:443",
            "a.*.com:443",
            "ex ample.com:443",
            "-x.com:443",
            "::1:443",
            "[::1:443",
            "[nope]:443",
            "1.2.3.999:443",
            "a..b:443",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad} parsed");
        }
        let long = format!("{}.com:443", "a".repeat(64));
        assert!(Endpoint::parse(&long).is_err());
    }

    #[test]
    fn a_wildcard_matches_strict_subdomains_only() {
        let w = ep("*.example.com:443");
        assert!(w.matches("api.example.com", 443));
        assert!(w.matches("A.B.Example.COM", 443));
        assert!(!w.matches("example.com", 443));
        assert!(!w.matches("badexample.com", 443));
        assert!(!w.matches("api.example.com", 80));
        assert!(!w.matches("example.com.evil.net", 443));
    }

    #[test]
    fn names_and_addresses_match_exactly() {
        let n = ep("api.example.com:443");
        assert!(n.matches("api.example.com.", 443));
        assert!(!n.matches("x.api.example.com", 443));
        let v6 = ep("[::1]:8080");
        assert!(v6.matches("[::1]", 8080));
        assert!(v6.matches("0:0:0:0:0:0:0:1", 8080));
        assert!(!v6.matches("127.0.0.1", 8080));
        assert!(ep("localhost:1").is_loopback());
        assert!(ep("127.1.2.3:1").is_loopback());
        assert!(!ep("example.com:1").is_loopback());
    }

    #[test]
    fn a_policy_checks_its_endpoints_and_reads_as_its_mode() {
        let p: NetworkPolicy = serde_json::from_str(
            r#"{"mode":"allow","allow":[{"host":"api.example.com","port":443}]}"#,
        )
        .unwrap();
        assert!(p.check().is_ok());
        assert!(p.allows("API.example.com", 443));
        assert!(!p.allows("api.example.com", 80));
        let none: NetworkPolicy = serde_json::from_str(r#"{"mode":"none"}"#).unwrap();
        assert_eq!(none.mode_name(), "none");
        assert!(!NetworkPolicy::Open.allows("api.example.com", 443));
        let twice = NetworkPolicy::allow(vec![ep("a.example.com:1"), ep("a.example.com:1")]);
        assert!(twice.check().unwrap_err().contains("allow[1]"));
        let upper = NetworkPolicy::allow(vec![Endpoint {
            host: "A.example.com".into(),
            port: 1,
        }]);
        assert!(upper.check().is_err());
        assert!(serde_json::from_str::<NetworkPolicy>(r#"{"mode":"sometimes"}"#).is_err());
    }
}
