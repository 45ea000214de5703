//! The model endpoint whose credential never enters the sandbox (the manifest's `model`).
//!
//! The host keeps each model credential (`pitcrew run --model-key NAME`) and hands the sandbox
//! [`placeholder`] in its place. The agent's model requests reach the host through a listener
//! of the supervisor's (a base-URL variable the runtime reads, [`BASE_URL_VARS`], pinned to
//! `http://127.0.0.1:<port>`, or for a pi built-in provider a `models.json` the supervisor
//! writes, which gives that provider the listener as its `baseUrl`) or through the mirror of a
//! loopback `upstream`; the host puts
//! the real value where the placeholder is and sends the request on. The manifest carries the
//! credentials' names only, for the record.

use super::network::{Endpoint, NetworkPolicy};
use serde::{Deserialize, Serialize};

/// The base-URL variables a model listener may be pinned to: Claude Code's, and the one whose
/// value pitcrew makes Codex's model provider `base_url` ([`crate::runtime_argv`]).
pub const BASE_URL_VARS: &[&str] = &["ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"];

/// The headers the host replaces a credential's placeholder in (lowercase): Anthropic's
/// `x-api-key`, the `Authorization` of OpenAI-style APIs, Google's `x-goog-api-key`.
pub const CREDENTIAL_HEADERS: &[&str] = &["x-api-key", "authorization", "x-goog-api-key"];

/// The most credentials one route names.
pub const MAX_CREDENTIALS: usize = 16;

/// What the sandbox sees in place of credential `name`'s value.
pub fn placeholder(name: &str) -> String {
    format!("pitcrew-placeholder-{name}")
}

/// Where the agent's model requests go and which credentials the host adds to them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelRoute {
    /// The variable the supervisor pins to its model listener's URL (one of
    /// [`BASE_URL_VARS`]); absent, no listener: the mirror of the loopback `upstream` carries
    /// the model's connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url_env: Option<String>,
    /// The pi built-in provider (`anthropic`, `openai`, …) whose `baseUrl` the supervisor sets
    /// to its model listener in a `models.json` of its own in pi's config dir (pi reads no
    /// base-URL variable); absent for every other route.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pi_provider: Option<String>,
    /// With `pi_provider`: the harness pins pi's `models.json`, and the host rewrote that
    /// provider's `baseUrl` in it to the model listener at a port of its choosing (the manifest
    /// pins the rewritten bytes); the supervisor listens there and writes no `models.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewritten_models_json: Option<RewrittenModelsJson>,
    /// The provider's endpoint, which the policy allows.
    pub upstream: Endpoint,
    /// The names of the credentials the host adds (never their values).
    pub credentials: Vec<String>,
}

/// pi's pinned `models.json` as the host rewrote it for a route ([`ModelRoute::pi_provider`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RewrittenModelsJson {
    /// The model listener's port on `127.0.0.1`, written into the file as the provider's
    /// `baseUrl` (`http://127.0.0.1:<port>`).
    pub port: u16,
    /// The SHA-256 of the harness's own `models.json`, before the host rewrote it (lowercase
    /// hex; for the record).
    pub harness_sha256: String,
}

impl ModelRoute {
    /// The base-URL variable as the pins name it.
    pub fn base_url_var(&self) -> Option<&'static str> {
        let name = self.base_url_env.as_deref()?;
        BASE_URL_VARS.iter().copied().find(|v| *v == name)
    }

    /// The pi provider the supervisor writes a `models.json` of its own for: `pi_provider`,
    /// unless the host rewrote the pinned one.
    pub fn supervisors_pi_provider(&self) -> Option<&str> {
        self.pi_provider
            .as_deref()
            .filter(|_| self.rewritten_models_json.is_none())
    }

    /// Checks the route against the manifest's `network`; the message says what is wrong.
    pub fn check(&self, network: Option<&NetworkPolicy>) -> Result<(), String> {
        if let Some(name) = &self.base_url_env {
            if self.base_url_var().is_none() {
                return Err(format!(
                    "base_url_env {name:?} is none of {}",
                    BASE_URL_VARS.join(", ")
                ));
            }
        }
        if let Some(provider) = &self.pi_provider {
            if self.base_url_env.is_some() {
                return Err("pi_provider and base_url_env exclude each other".into());
            }
            let valid = !provider.is_empty()
                && provider.len() <= 64
                && provider
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            if !valid {
                return Err(format!(
                    "pi_provider {provider:?} is not a provider name (a-z, 0-9, -)"
                ));
            }
        }
        if let Some(rewritten) = &self.rewritten_models_json {
            if self.pi_provider.is_none() {
                return Err("rewritten_models_json needs pi_provider".into());
            }
            if rewritten.port == 0 {
                return Err("rewritten_models_json.port: 0 is not a port".into());
            }
            let digest = &rewritten.harness_sha256;
            if digest.len() != 64
                || !digest
                    .bytes()
                    .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
            {
                return Err(format!(
                    "rewritten_models_json.harness_sha256: {digest:?} is not a SHA-256"
                ));
            }
            // A mirror of an allowed loopback endpoint listens on its port.
            let taken = network.is_some_and(|p| {
                p.allowed().iter().any(|e| {
                    e.port == rewritten.port
                        && (e.host == "localhost" || e.ip().is_some_and(|ip| ip.is_loopback()))
                })
            });
            if taken {
                return Err(format!(
                    "rewritten_models_json.port {} is the port of an allowed loopback endpoint",
                    rewritten.port
                ));
            }
        }
        let Some(NetworkPolicy::Allow { .. }) = network else {
            return Err("a model route needs network mode allow".into());
        };
        if network.is_some_and(|p| !p.allows(&self.upstream.host, self.upstream.port)) {
            return Err(format!(
                "upstream {} is not an endpoint the network allows",
                self.upstream
            ));
        }
        let loopback = self.upstream.host == "localhost"
            || self.upstream.ip().is_some_and(|ip| ip.is_loopback());
        if self.base_url_env.is_none() && self.pi_provider.is_none() && !loopback {
            return Err(format!(
                "upstream {} is not a loopback address, and neither base_url_env nor \
                 pi_provider points the runtime at a listener",
                self.upstream
            ));
        }
        if self.credentials.is_empty() || self.credentials.len() > MAX_CREDENTIALS {
            return Err(format!(
                "credentials: from 1 to {MAX_CREDENTIALS} names, not {}",
                self.credentials.len()
            ));
        }
        for (i, name) in self.credentials.iter().enumerate() {
            let valid = !name.is_empty()
                && name.len() <= 128
                && name.bytes().enumerate().all(|(i, b)| {
                    b == b'_' || b.is_ascii_alphabetic() || (i > 0 && b.is_ascii_digit())
                });
            if !valid {
                return Err(format!("credentials[{i}]: {name:?} is not a variable name"));
            }
            if self.credentials[..i].contains(name) {
                return Err(format!("credentials[{i}]: {name} appears twice"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allow(list: &[&str]) -> NetworkPolicy {
        NetworkPolicy::allow(list.iter().map(|e| Endpoint::parse(e).unwrap()).collect())
    }

    fn route(env: Option<&str>, upstream: &str, creds: &[&str]) -> ModelRoute {
        ModelRoute {
            base_url_env: env.map(str::to_string),
            pi_provider: None,
            rewritten_models_json: None,
            upstream: Endpoint::parse(upstream).unwrap(),
            credentials: creds.iter().map(|c| c.to_string()).collect(),
        }
    }

    #[test]
    fn a_route_needs_an_allowed_upstream_a_known_variable_and_valid_names() {
        let net = allow(&["api.anthropic.com:443", "127.0.0.1:8080"]);
        let ok = route(
            Some("ANTHROPIC_BASE_URL"),
            "api.anthropic.com:443",
            &["ANTHROPIC_API_KEY"],
        );
        assert_eq!(ok.check(Some(&net)), Ok(()));
        assert_eq!(ok.base_url_var(), Some("ANTHROPIC_BASE_URL"));
        assert!(route(None, "127.0.0.1:8080", &["K"])
            .check(Some(&net))
            .is_ok());
        for (bad, why) in [
            (
                route(Some("PATH"), "api.anthropic.com:443", &["K"]),
                "none of",
            ),
            (route(None, "api.anthropic.com:443", &["K"]), "loopback"),
            (route(None, "127.0.0.1:9", &["K"]), "not an endpoint"),
            (route(None, "127.0.0.1:8080", &[]), "credentials"),
            (route(None, "127.0.0.1:8080", &["A B"]), "variable name"),
            (route(None, "127.0.0.1:8080", &["K", "K"]), "twice"),
        ] {
            let err = bad.check(Some(&net)).unwrap_err();
            assert!(err.contains(why), "{err}");
        }
        assert!(ok.check(Some(&NetworkPolicy::Open)).is_err());
        assert!(ok.check(None).is_err());
    }

    #[test]
    fn a_pi_provider_route_needs_no_variable_and_takes_a_provider_name() {
        let net = allow(&["api.anthropic.com:443"]);
        let pi = |provider: &str, env: Option<&str>| ModelRoute {
            pi_provider: Some(provider.to_string()),
            ..route(env, "api.anthropic.com:443", &["ANTHROPIC_API_KEY"])
        };
        assert_eq!(pi("anthropic", None).check(Some(&net)), Ok(()));
        for (bad, why) in [
            (pi("anthropic", Some("ANTHROPIC_BASE_URL")), "exclude"),
            (pi("", None), "not a provider name"),
            (pi("Anthropic\"", None), "not a provider name"),
        ] {
            let err = bad.check(Some(&net)).unwrap_err();
            assert!(err.contains(why), "{err}");
        }
    }

    #[test]
    fn a_rewritten_models_json_needs_a_provider_a_free_port_and_a_digest() {
        let net = allow(&["gw.example:443", "127.0.0.1:8080"]);
        let rewritten = |provider: Option<&str>, port: u16, sha: &str| ModelRoute {
            pi_provider: provider.map(str::to_string),
            rewritten_models_json: Some(RewrittenModelsJson {
                port,
                harness_sha256: sha.to_string(),
            }),
            ..route(None, "gw.example:443", &["GW_KEY"])
        };
        let sha = "ab".repeat(32);
        assert_eq!(rewritten(Some("gw"), 17000, &sha).check(Some(&net)), Ok(()));
        for (bad, why) in [
            (rewritten(None, 17000, &sha), "needs pi_provider"),
            (rewritten(Some("gw"), 0, &sha), "not a port"),
            (
                rewritten(Some("gw"), 8080, &sha),
                "allowed loopback endpoint",
            ),
            (rewritten(Some("gw"), 17000, "AB"), "not a SHA-256"),
        ] {
            let err = bad.check(Some(&net)).unwrap_err();
            assert!(err.contains(why), "{err}");
        }
    }

    #[test]
    fn localhost_is_a_loopback_upstream() {
        let local = allow(&["localhost:8080"]);
        assert_eq!(
            route(None, "localhost:8080", &["K"]).check(Some(&local)),
            Ok(())
        );
    }

    #[test]
    fn the_placeholder_names_the_variable() {
        assert_eq!(
            placeholder("ANTHROPIC_API_KEY"),
            "pitcrew-placeholder-ANTHROPIC_API_KEY"
        );
    }
}
