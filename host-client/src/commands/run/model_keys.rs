//! Model credentials that stay on the host (`--model-key NAME`, and the runtime's well-known key
//! variables passed with `--pass-env` whenever the network is not `open`): the sandbox gets
//! [`placeholder`] in their place, and the agent's model requests reach the provider through
//! this host, which puts the values in ([`crate::client::tunnel::ModelUpstream`]).
//!
//! The route follows the runtime's model endpoint: Claude Code's `ANTHROPIC_BASE_URL` (the
//! harness `env:`'s, else `https://api.anthropic.com`) is pinned to the supervisor's model
//! listener. pi reads no base-URL variable for its providers (0.73.1, 0.87.1 and 1.6.0 hand the
//! model's `baseUrl` to their SDKs; only Azure's has one): its key stays on the host when its
//! pinned `models.json` sends it to one loopback `http://` endpoint, whose mirror then carries
//! the model connections, or, with no `models.json` pinned, when pi uses a built-in provider
//! of [`pitcrew_core::harness::PI_PROVIDER_URLS`]: the supervisor's own `models.json` gives that provider its model
//! listener as `baseUrl`, and the host sends the requests to the provider's URL. Otherwise a
//! key passed with `--pass-env` enters the sandbox as it is, said in a note ([`pi_note`]), and
//! `--model-key` is refused. Codex's endpoint is the `base_url` of the model provider pitcrew
//! gives it, `OPENAI_BASE_URL` (the harness `env:`'s, else `https://api.openai.com/v1`), pinned
//! to the listener like Claude Code's; OpenCode's is the `baseURL` of the provider pitcrew writes
//! into its configuration, the same variable. `command` has no model endpoint pitcrew knows:
//! `--model-key` is refused.

use crate::client::tunnel::ModelUpstream;
use anyhow::bail;
use pitcrew_core::harness::{
    pi_builtin_route, pi_provider_keys, rewrite_pi_models_json, url_endpoint, Harness,
    PiModelConfig, CLAUDE_API_HOST,
};
use pitcrew_core::manifest::model::{placeholder, RewrittenModelsJson};
use pitcrew_core::manifest::{ModelRoute, NetworkPolicy, Runtime};
use pitcrew_core::model_http::Credential;

/// The key variables of each runtime that become model credentials when passed with
/// `--pass-env` (and the network is not `open`).
/// pi's also include each variable a `models.json` provider names as its `apiKey`.
pub const WELL_KNOWN: &[(Runtime, &str)] = &[
    (Runtime::Claude, "ANTHROPIC_API_KEY"),
    (Runtime::Claude, "ANTHROPIC_AUTH_TOKEN"),
    (Runtime::Pi, "ANTHROPIC_API_KEY"),
    (Runtime::Pi, "OPENAI_API_KEY"),
    (Runtime::Codex, "OPENAI_API_KEY"),
    (Runtime::Opencode, "OPENAI_API_KEY"),
];

/// What a run does with model credentials.
#[derive(Debug, Clone, Default)]
pub struct ModelPlan {
    /// The credentials' names: the sandbox gets their placeholders.
    pub names: Vec<String>,
    /// The manifest's route and this host's end of it (`None` when there is no credential, or
    /// the network carries nothing).
    pub route: Option<(ModelRoute, ModelUpstream)>,
    /// What the operator should know: a well-known key that enters the sandbox as it is.
    pub notes: Vec<String>,
    /// pi's pinned `models.json` rewritten for the route: uploaded and pinned in place of the
    /// harness's own.
    pub rewritten: Option<Rewritten>,
}

/// The one loopback `http://` endpoint of pi's pinned `models.json` that `policy` allows, or
/// why there is none.
fn pi_upstream(
    pi: &PiModelConfig,
    policy: &NetworkPolicy,
) -> Result<pitcrew_core::manifest::Endpoint, String> {
    let loopback: Vec<_> = pi
        .plain_endpoints
        .iter()
        .filter(|e| e.host == "localhost" || e.ip().is_some_and(|ip| ip.is_loopback()))
        .filter(|e| policy.allows(&e.host, e.port))
        .collect();
    match loopback.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(
            "pi reads no base-URL variable for its providers, and its pinned models.json sends \
             the model to no loopback http:// endpoint (with network: unset) that the host could \
             add the key on"
                .into(),
        ),
        _ => Err(format!(
            "pi's pinned models.json names {} loopback http:// endpoints; the host adds a key \
             for one model endpoint",
            loopback.len()
        )),
    }
}

/// Where pi's model requests go with a key kept on the host.
struct PiRoute {
    /// The provider pointed at the supervisor's model listener (none when the mirror of a
    /// loopback endpoint of the pinned `models.json` carries them).
    provider: Option<String>,
    /// The base URL the host sends the requests to.
    url: String,
    /// The pinned `models.json` rewritten by the host to send `provider` to the listener.
    rewritten: Option<Rewritten>,
}

/// pi's pinned `models.json` as the host rewrote it, and what the manifest says of it.
#[derive(Debug, Clone)]
pub struct Rewritten {
    /// The rewritten file, which the manifest pins in the harness's file's place.
    pub bytes: Vec<u8>,
    /// The listener's port written into it.
    pub port: u16,
    /// The SHA-256 of the harness's own file.
    pub harness_sha256: String,
    /// The key variables of the rewritten provider.
    keys: Vec<String>,
    /// Other names its `apiKey` and headers mention: a key of that name passed goes in, said.
    unrouted: Vec<String>,
}

/// The first port from which the host picks the model listener's port it writes into pi's
/// pinned `models.json` (below Linux's ephemeral range, so the supervisor's other listeners,
/// which take an ephemeral port, never hold it).
const REWRITTEN_LISTENER_PORT: u16 = 17170;

/// The model listener's port for a rewritten `models.json` under `policy`: the first from
/// [`REWRITTEN_LISTENER_PORT`] that no allowed loopback endpoint (which the supervisor mirrors
/// at its own port) uses.
fn rewritten_port(policy: &NetworkPolicy) -> u16 {
    let taken: Vec<u16> = policy
        .allowed()
        .iter()
        .filter(|e| e.host == "localhost" || e.ip().is_some_and(|ip| ip.is_loopback()))
        .map(|e| e.port)
        .collect();
    (REWRITTEN_LISTENER_PORT..)
        .find(|p| !taken.contains(p))
        .unwrap_or(REWRITTEN_LISTENER_PORT)
}

/// Where pi's model requests go with a key kept on the host under `policy`: the mirror of a
/// loopback endpoint of the pinned `models.json`; a built-in provider the supervisor points at
/// its model listener (no `models.json` pinned); or the pinned `models.json` rewritten by the
/// host to point the provider pi uses at the listener. `Err` says why there is no such route.
fn pi_route(h: &Harness, pi: &PiModelConfig, policy: &NetworkPolicy) -> Result<PiRoute, String> {
    let loopback = match pi_upstream(pi, policy) {
        Ok(endpoint) => {
            return Ok(PiRoute {
                provider: None,
                url: format!("http://{endpoint}"),
                rewritten: None,
            })
        }
        Err(why) => why,
    };
    let builtin = match pi_builtin_route(h, pi) {
        Ok((provider, url)) => {
            return Ok(PiRoute {
                provider: Some(provider),
                url: url.to_string(),
                rewritten: None,
            })
        }
        Err(why) => why,
    };
    let Some(pinned) = &pi.models_json else {
        return Err(format!("{loopback}; and {builtin}"));
    };
    let port = rewritten_port(policy);
    let listener = format!("http://127.0.0.1:{port}");
    let out = rewrite_pi_models_json(h, pi, &pinned.bytes, &listener)
        .map_err(|why| format!("{loopback}; and {why}"))?;
    Ok(PiRoute {
        provider: Some(out.provider),
        url: out.url,
        rewritten: Some(Rewritten {
            bytes: out.bytes,
            port,
            harness_sha256: pinned.sha256.clone(),
            keys: out.keys,
            unrouted: out.unrouted,
        }),
    })
}

/// What `validate` says about a pi harness whose key cannot stay on the host: a key passed
/// with `--pass-env` enters the sandbox as it is.
pub fn pi_note(h: &Harness, pi: &PiModelConfig, policy: &NetworkPolicy) -> Option<String> {
    if h.runtime != Runtime::Pi || !matches!(policy, NetworkPolicy::Allow { .. }) {
        return None;
    }
    let why = pi_route(h, pi, policy).err()?;
    Some(format!(
        "model key: {why}: a key passed with --pass-env enters the sandbox as it is \
         (--model-key is refused)"
    ))
}

/// The plan for a run: `explicit` (`--model-key`), the well-known names among `pass_env`, the
/// harness's runtime and endpoint (`pi`: what its pinned configuration says), the `policy` that
/// applies, values from `lookup`.
pub fn plan(
    explicit: &[String],
    pass_env: &[String],
    h: &Harness,
    pi: &PiModelConfig,
    policy: Option<&NetworkPolicy>,
    lookup: impl Fn(&str) -> Option<String>,
) -> anyhow::Result<ModelPlan> {
    let open = policy.is_none_or(NetworkPolicy::unenforced);
    if let Some(name) = explicit.first().filter(|_| open) {
        bail!(
            "--model-key {name}: the network is open, so pitcrew carries no model connection to \
             add the key to; give the harness network: allow (or leave network: unset)"
        );
    }
    // The route the keys would be carried on (under `allow`), and which keys it takes.
    let carried = match policy {
        Some(p @ NetworkPolicy::Allow { .. }) => Some(route_for(h, pi, p)),
        _ => None,
    };
    let mut names: Vec<String> = Vec::new();
    for name in explicit {
        if let Some(Ok(route)) = &carried {
            if let Err(why) = route.takes(h, pi, name) {
                bail!("--model-key {name}: {why}");
            }
        }
        if !names.contains(name) {
            names.push(name.clone());
        }
    }
    let mut notes = Vec::new();
    if !open {
        // A passed key stays on the host only where its endpoint can be carried, and only on
        // the route of the provider it is for: otherwise it goes in as it is, said once.
        for name in pass_env {
            let rewritten = match &carried {
                Some(Ok(Route {
                    rewritten: Some(r), ..
                })) => Some(r),
                _ => None,
            };
            let known = WELL_KNOWN
                .iter()
                .any(|(rt, n)| *rt == h.runtime && n == name)
                || (h.runtime == Runtime::Pi && pi.api_key_vars.contains(name))
                || rewritten.is_some_and(|r| r.keys.contains(name));
            if names.contains(name) {
                continue;
            }
            if !known {
                if rewritten.is_some_and(|r| r.unrouted.contains(name)) {
                    notes.push(format!(
                        "--pass-env {name}: the key enters the sandbox as it is: pi's pinned \
                         models.json reads it where the host puts no key (a !command, or a \
                         header other than {})",
                        pitcrew_core::manifest::model::CREDENTIAL_HEADERS.join(", ")
                    ));
                }
                continue;
            }
            let refused = match &carried {
                Some(Err(why)) => Some(why.clone()),
                Some(Ok(route)) => route.takes(h, pi, name).err(),
                None => None,
            };
            match refused {
                Some(why) => notes.push(format!(
                    "--pass-env {name}: the key enters the sandbox as it is: {why}"
                )),
                None => names.push(name.clone()),
            }
        }
    }
    if names.is_empty() {
        return Ok(ModelPlan {
            notes,
            ..ModelPlan::default()
        });
    }
    for name in &names {
        if h.env.contains_key(name) {
            bail!(
                "--model-key {name}: the harness `env:` sets {name}, and its value would reach \
                 the sandbox; keep the key in pitcrew's environment only"
            );
        }
    }
    let mut credentials = Vec::new();
    for name in &names {
        let Some(value) = lookup(name) else {
            bail!("--model-key {name}: not set in pitcrew's environment");
        };
        if value.is_empty() {
            bail!("--model-key {name}: empty in pitcrew's environment");
        }
        credentials.push(Credential {
            name: name.clone(),
            placeholder: placeholder(name).into_bytes(),
            value: value.into_bytes(),
        });
    }
    let Some(policy @ NetworkPolicy::Allow { .. }) = policy else {
        // `none`: nothing leaves, the placeholders stand in all the same.
        return Ok(ModelPlan {
            names,
            route: None,
            notes,
            rewritten: None,
        });
    };
    let Route {
        base_url_env,
        pi_provider,
        url,
        endpoint,
        rewritten,
    } = match carried {
        Some(route) => route,
        None => route_for(h, pi, policy),
    }
    .map_err(|why| anyhow::anyhow!("--model-key {}: {why}", names[0]))?;
    let tls = url.to_ascii_lowercase().starts_with("https://");
    let prefix = url_path(&url).map_err(|why| {
        anyhow::anyhow!("--model-key {}: model endpoint {url:?}: {why}", names[0])
    })?;
    let route = ModelRoute {
        base_url_env: base_url_env.map(str::to_string),
        pi_provider,
        rewritten_models_json: rewritten.as_ref().map(|r| RewrittenModelsJson {
            port: r.port,
            harness_sha256: r.harness_sha256.clone(),
        }),
        upstream: endpoint.clone(),
        credentials: names.clone(),
    };
    let upstream = ModelUpstream {
        endpoint,
        tls,
        prefix,
        credentials,
    };
    Ok(ModelPlan {
        names,
        route: Some((route, upstream)),
        notes,
        rewritten,
    })
}

/// Where a runtime's model requests go with a key kept on the host.
struct Route {
    /// The base-URL variable pinned to the model listener (none for pi).
    base_url_env: Option<&'static str>,
    /// The pi built-in provider the supervisor points at its model listener.
    pi_provider: Option<String>,
    /// The base URL the host sends the requests to.
    url: String,
    /// Its endpoint.
    endpoint: pitcrew_core::manifest::Endpoint,
    /// pi's pinned `models.json` rewritten to send `pi_provider` to the listener.
    rewritten: Option<Rewritten>,
}

impl Route {
    /// Whether this route carries the key variable `name`: only the keys of the provider it
    /// goes to (Claude Code's `ANTHROPIC_API_KEY` and `ANTHROPIC_AUTH_TOKEN`, Codex's
    /// `OPENAI_API_KEY`, a pi built-in provider's own, the `apiKey` variables of the pinned
    /// `models.json` for its loopback endpoint), never one provider's key to another's
    /// endpoint. `Err` says why not.
    fn takes(&self, h: &Harness, pi: &PiModelConfig, name: &str) -> Result<(), String> {
        let keys: Vec<&str> = match (h.runtime, &self.pi_provider) {
            (Runtime::Pi, Some(_)) if self.rewritten.is_some() => self
                .rewritten
                .iter()
                .flat_map(|r| r.keys.iter().map(String::as_str))
                .collect(),
            (Runtime::Pi, Some(provider)) => pi_provider_keys(provider).to_vec(),
            (Runtime::Pi, None) => pi.api_key_vars.iter().map(String::as_str).collect(),
            (Runtime::Codex | Runtime::Opencode, _) => {
                vec![pitcrew_core::runtime_argv::CODEX_KEY_VAR]
            }
            _ => WELL_KNOWN
                .iter()
                .filter(|(rt, _)| *rt == h.runtime)
                .map(|(_, n)| *n)
                .collect(),
        };
        if keys.contains(&name) {
            return Ok(());
        }
        Err(format!(
            "the model route goes to {} ({}), which takes only {}: pitcrew does not send a \
             key to another provider's endpoint",
            self.endpoint,
            self.pi_provider.as_deref().unwrap_or(h.runtime.as_str()),
            if keys.is_empty() {
                "no key variable pitcrew knows".to_string()
            } else {
                keys.join(", ")
            }
        ))
    }
}

/// Where the runtime's model requests go under `policy` ([`Route`]); `Err` says why the key
/// cannot stay on the host.
fn route_for(h: &Harness, pi: &PiModelConfig, policy: &NetworkPolicy) -> Result<Route, String> {
    let mut rewritten = None;
    let (base_url_env, pi_provider, url) = match h.runtime {
        Runtime::Claude => (Some("ANTHROPIC_BASE_URL"), None, claude_url(h)?),
        // pitcrew gives Codex a model provider whose base_url is OPENAI_BASE_URL's value.
        // OpenCode: the provider pitcrew writes into its configuration has OPENAI_BASE_URL's
        // value as its baseURL, and OPENAI_API_KEY's as its key (as Codex's).
        Runtime::Codex | Runtime::Opencode => (
            Some(pitcrew_core::runtime_argv::CODEX_BASE_URL_VAR),
            None,
            h.env
                .get(pitcrew_core::runtime_argv::CODEX_BASE_URL_VAR)
                .cloned()
                .unwrap_or_else(|| CODEX_API_URL.to_string()),
        ),
        // The mirror of a loopback endpoint carries the model connections (the agent's
        // requests already name it and its path), or the listener a built-in provider is
        // pointed at.
        Runtime::Pi => {
            let route = pi_route(h, pi, policy)?;
            rewritten = route.rewritten;
            (None, route.provider, route.url)
        }
        Runtime::Command => {
            return Err(
                "the command runtime has no model endpoint pitcrew knows; pass the key with \
                 --pass-env (it enters the sandbox as it is)"
                    .into(),
            )
        }
    };
    let endpoint = url_endpoint(&url).map_err(|e| format!("model endpoint: {e}"))?;
    if !policy.allows(&endpoint.host, endpoint.port) {
        return Err(format!(
            "the model endpoint {endpoint} is not among the endpoints the harness's network \
             allows"
        ));
    }
    Ok(Route {
        base_url_env,
        pi_provider,
        url,
        endpoint,
        rewritten,
    })
}

/// Where Codex sends its model requests without `OPENAI_BASE_URL` (its own default).
const CODEX_API_URL: &str = "https://api.openai.com/v1";

/// Claude Code's base URL: the harness `env:`'s `ANTHROPIC_BASE_URL`, else Anthropic's API; a
/// backend switched on (`CLAUDE_CODE_USE_BEDROCK`, …) signs its requests otherwise and is
/// refused.
fn claude_url(h: &Harness) -> Result<String, String> {
    for backend in ["BEDROCK", "VERTEX", "FOUNDRY"] {
        let var = format!("CLAUDE_CODE_USE_{backend}");
        if h.env
            .get(&var)
            .is_some_and(|v| !matches!(v.trim(), "" | "0" | "false"))
        {
            return Err(format!(
                "the harness sets {var}; only Anthropic's API (ANTHROPIC_BASE_URL) is served \
                 with a key kept on the host"
            ));
        }
    }
    Ok(h.env
        .get("ANTHROPIC_BASE_URL")
        .cloned()
        .unwrap_or_else(|| format!("https://{CLAUDE_API_HOST}")))
}

/// The path of a base URL, without its trailing `/`: `https://gw.example/anthropic/` →
/// `/anthropic`; empty for none. The host writes it before each request's target, so a byte
/// a URL path may not hold as it is (RFC 3986: letters, digits, `-._~!$&'()*+,;=:@/` and `%`
/// escapes), which would write the request line or a header, is refused.
fn url_path(url: &str) -> Result<String, String> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let path = match rest.find('/') {
        Some(i) => rest[i..].trim_end_matches('/').to_string(),
        None => String::new(),
    };
    let bytes = path.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        let plain = b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/".contains(&b);
        let escape = b == b'%'
            && bytes
                .get(i + 1..i + 3)
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit));
        let escaped = i >= 2 && bytes[i - 2] == b'%' || i >= 1 && bytes[i - 1] == b'%';
        if !(plain || escape || escaped && b.is_ascii_hexdigit()) {
            return Err(format!(
                "its path {path:?} holds {:?}, which a URL path may not hold as it is",
                char::from(b)
            ));
        }
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A validated harness from `yaml` (with `files` beside it).
    fn validated(
        yaml: &str,
        files: &[(&str, &str)],
    ) -> (tempfile::TempDir, pitcrew_core::harness::Validated) {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        std::fs::write(dir.path().join("h.yaml"), yaml).unwrap();
        let v = pitcrew_core::harness::validate(&dir.path().join("h.yaml")).unwrap();
        assert!(v.is_ok(), "{:?}", v.problems);
        (dir, v)
    }

    fn plan_for(
        v: &pitcrew_core::harness::Validated,
        explicit: &[&str],
        pass: &[&str],
    ) -> anyhow::Result<ModelPlan> {
        let h = v.harness.as_ref().unwrap();
        let explicit: Vec<String> = explicit.iter().map(|s| s.to_string()).collect();
        let pass: Vec<String> = pass.iter().map(|s| s.to_string()).collect();
        let network = v.network().unwrap();
        plan(
            &explicit,
            &pass,
            h,
            &v.pi_config,
            Some(&network.policy),
            |n| Some(format!("value-of-{n}")),
        )
    }

    const CLAUDE: &str = "runtime: claude\nprompt: hi\n";

    #[test]
    fn claudes_passed_key_is_kept_on_the_host_through_anthropics_api() {
        let (_d, v) = validated(CLAUDE, &[]);
        let p = plan_for(&v, &[], &["ANTHROPIC_API_KEY", "OTHER"]).unwrap();
        assert_eq!(p.names, ["ANTHROPIC_API_KEY"]);
        let (route, up) = p.route.unwrap();
        assert_eq!(route.base_url_env.as_deref(), Some("ANTHROPIC_BASE_URL"));
        assert_eq!(up.endpoint.to_string(), "api.anthropic.com:443");
        assert!(up.tls && up.prefix.is_empty());
        assert_eq!(up.authority(), "api.anthropic.com");
        assert_eq!(up.credentials[0].value, b"value-of-ANTHROPIC_API_KEY");
    }

    #[test]
    fn claudes_base_url_gives_the_upstream_its_scheme_and_path() {
        let yaml = format!("{CLAUDE}env:\n  ANTHROPIC_BASE_URL: http://127.0.0.1:8377/gw/\n");
        let (_d, v) = validated(&yaml, &[]);
        let (_, up) = plan_for(&v, &["ANTHROPIC_AUTH_TOKEN"], &[])
            .unwrap()
            .route
            .unwrap();
        assert!(!up.tls);
        assert_eq!(
            (up.prefix.as_str(), up.authority()),
            ("/gw", "127.0.0.1:8377".into())
        );
    }

    #[test]
    fn an_open_network_hands_the_key_in_and_refuses_model_key() {
        let (_d, v) = validated(&format!("{CLAUDE}network: open\n"), &[]);
        let p = plan_for(&v, &[], &["ANTHROPIC_API_KEY"]).unwrap();
        assert!(p.names.is_empty() && p.route.is_none());
        let err = plan_for(&v, &["ANTHROPIC_API_KEY"], &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("network is open"), "{err}");
    }

    #[test]
    fn a_key_that_cannot_stay_on_the_host_is_said_or_refused() {
        // A Bedrock backend signs its requests otherwise: a passed key goes in, with a note.
        let yaml = format!(
            "{CLAUDE}env:\n  CLAUDE_CODE_USE_BEDROCK: \"1\"\nnetwork:\n  allow: [bedrock.example:443]\n"
        );
        let (_d, v) = validated(&yaml, &[]);
        let p = plan_for(&v, &[], &["ANTHROPIC_API_KEY"]).unwrap();
        assert!(p.names.is_empty());
        assert!(
            p.notes[0].contains("CLAUDE_CODE_USE_BEDROCK"),
            "{:?}",
            p.notes
        );
        let err = plan_for(&v, &["ANTHROPIC_API_KEY"], &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("CLAUDE_CODE_USE_BEDROCK"), "{err}");
        // An explicit network without the model endpoint.
        let (_d, v) = validated(
            &format!("{CLAUDE}network:\n  allow: [x.example:443]\n"),
            &[],
        );
        let err = plan_for(&v, &["ANTHROPIC_API_KEY"], &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("not among the endpoints"), "{err}");
        // `command` has no model endpoint.
        let (_d, v) = validated(
            "runtime: command\ncommand: [/bin/true]\nnetwork:\n  allow: [x.example:443]\n",
            &[],
        );
        let err = plan_for(&v, &["K"], &[]).unwrap_err().to_string();
        assert!(err.contains("command runtime"), "{err}");
    }

    #[test]
    fn pis_key_named_by_models_json_is_kept_when_its_endpoint_is_loopback_http() {
        let models = r#"{"providers": {"mock": {"baseUrl": "http://127.0.0.1:8377/v1",
            "api": "openai-completions", "apiKey": "$MOCK_KEY",
            "models": [{"id": "m"}]}}}"#;
        let yaml = "runtime: pi\nprompt: hi\nagent:\n  model: mock/m\nadapters:\n  - path: config/models.json\n    role: config\n";
        let (_d, v) = validated(yaml, &[("config/models.json", models)]);
        let p = plan_for(&v, &[], &["MOCK_KEY", "OPENAI_API_KEY"]).unwrap();
        // Only the key models.json names for the endpoint is carried; OpenAI's would go to
        // an endpoint that is not OpenAI's: it enters the sandbox as it is, said.
        assert_eq!(p.names, ["MOCK_KEY"]);
        assert!(
            p.notes[0].starts_with("--pass-env OPENAI_API_KEY: the key enters the sandbox as it is: the model route goes to 127.0.0.1:8377"),
            "{:?}",
            p.notes
        );
        let err = plan_for(&v, &["OPENAI_API_KEY"], &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("takes only MOCK_KEY"), "{err}");
        let (route, up) = p.route.unwrap();
        assert_eq!(route.base_url_env, None);
        assert_eq!(route.upstream.to_string(), "127.0.0.1:8377");
        assert!(!up.tls && up.prefix.is_empty());
        assert!(pi_note(
            v.harness.as_ref().unwrap(),
            &v.pi_config,
            &v.network().unwrap().policy
        )
        .is_none());
    }

    #[test]
    fn pis_key_for_a_built_in_provider_is_kept_through_the_supervisors_models_json() {
        for (model, key, upstream, prefix) in [
            (
                "anthropic/claude-sonnet-4-5",
                "ANTHROPIC_API_KEY",
                "api.anthropic.com:443",
                "",
            ),
            (
                "openai/gpt-5",
                "OPENAI_API_KEY",
                "api.openai.com:443",
                "/v1",
            ),
        ] {
            let yaml = format!("runtime: pi\nprompt: hi\nagent:\n  model: {model}\n");
            let (_d, v) = validated(&yaml, &[]);
            let p = plan_for(&v, &[], &[key]).unwrap();
            assert_eq!(p.names, [key]);
            assert!(p.notes.is_empty(), "{:?}", p.notes);
            let (route, up) = p.route.unwrap();
            let provider = model.split('/').next().unwrap();
            assert_eq!(route.pi_provider.as_deref(), Some(provider));
            assert_eq!(route.base_url_env, None);
            assert_eq!(route.upstream.to_string(), upstream);
            assert!(up.tls);
            assert_eq!(up.prefix, prefix);
            let h = v.harness.as_ref().unwrap();
            assert!(pi_note(h, &v.pi_config, &v.network().unwrap().policy).is_none());
        }
    }

    #[test]
    fn pis_pinned_models_json_is_rewritten_to_keep_an_https_providers_key() {
        let models = r#"{"providers": {"gw": {"baseUrl": "https://gw.example/v1",
            "api": "openai-completions", "apiKey": "GW_KEY", "models": [{"id": "m"}]}}}"#;
        for network in ["", "network:\n  allow: [gw.example:443, 127.0.0.1:17170]\n"] {
            let yaml = format!(
                "runtime: pi\nprompt: hi\nagent:\n  model: gw/m\nadapters:\n  - path: config/models.json\n    role: config\n{network}"
            );
            let (_d, v) = validated(&yaml, &[("config/models.json", models)]);
            let p = plan_for(&v, &[], &["GW_KEY", "ANTHROPIC_API_KEY"]).unwrap();
            assert_eq!(p.names, ["GW_KEY"], "{network}");
            // Another provider's key is not carried to this one's endpoint.
            assert!(p.notes[0].contains("ANTHROPIC_API_KEY"), "{:?}", p.notes);
            let (route, up) = p.route.unwrap();
            assert_eq!(route.pi_provider.as_deref(), Some("gw"));
            assert_eq!(route.upstream.to_string(), "gw.example:443");
            assert!(up.tls);
            assert_eq!(up.prefix, "/v1");
            let rewritten = p.rewritten.unwrap();
            let meta = route.rewritten_models_json.unwrap();
            // A port an allowed loopback endpoint holds is passed over.
            let port = if network.is_empty() { 17170 } else { 17171 };
            assert_eq!(meta.port, port);
            assert_eq!(rewritten.port, port);
            let doc: serde_json::Value = serde_json::from_slice(&rewritten.bytes).unwrap();
            assert_eq!(
                doc["providers"]["gw"]["baseUrl"],
                format!("http://127.0.0.1:{port}")
            );
            use sha2::Digest as _;
            assert_eq!(
                meta.harness_sha256,
                hex::encode(sha2::Sha256::digest(models.as_bytes()))
            );
            let h = v.harness.as_ref().unwrap();
            assert!(pi_note(h, &v.pi_config, &v.network().unwrap().policy).is_none());
        }
    }

    #[test]
    fn pis_key_goes_in_with_a_note_when_no_route_can_carry_it() {
        // A pinned models.json sending one of the provider's models to an https endpoint of
        // its own: the host carries one endpoint, and cannot read what goes to the other.
        let models = r#"{"providers": {"anthropic": {"baseUrl": "https://gw.example/anthropic",
            "models": [{"id": "m", "baseUrl": "https://elsewhere.example"}]}}}"#;
        let yaml = "runtime: pi\nprompt: hi\nagent:\n  model: anthropic/claude-sonnet-4-5\nadapters:\n  - path: config/models.json\n    role: config\n";
        let (_d, v) = validated(yaml, &[("config/models.json", models)]);
        let p = plan_for(&v, &[], &["ANTHROPIC_API_KEY"]).unwrap();
        assert!(p.names.is_empty() && p.route.is_none());
        assert!(
            p.notes[0].starts_with("--pass-env ANTHROPIC_API_KEY: the key enters the sandbox as it is: pi reads no base-URL variable"),
            "{:?}",
            p.notes
        );
        assert!(
            p.notes[0].contains("the host carries one endpoint"),
            "{:?}",
            p.notes
        );
        let h = v.harness.as_ref().unwrap();
        let note = pi_note(h, &v.pi_config, &v.network().unwrap().policy).unwrap();
        assert!(
            note.starts_with("model key: pi reads no base-URL variable"),
            "{note}"
        );
        // A built-in provider whose models name two base URLs.
        let yaml = "runtime: pi\nprompt: hi\nagent:\n  model: openrouter/x\n";
        let (_d, v) = validated(yaml, &[]);
        let err = plan_for(&v, &["OPENROUTER_API_KEY"], &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"openrouter\" (from agent.model) is none of"),
            "{err}"
        );
    }

    #[test]
    fn a_base_urls_path_is_the_prefix() {
        assert_eq!(url_path("https://api.anthropic.com").unwrap(), "");
        assert_eq!(url_path("https://api.anthropic.com/").unwrap(), "");
        assert_eq!(url_path("http://127.0.0.1:8/v1/").unwrap(), "/v1");
        assert_eq!(url_path("https://gw.example/a/b?x=1").unwrap(), "/a/b");
        assert_eq!(url_path("https://gw.example/a%20b").unwrap(), "/a%20b");
        for bad in [
            "https://gw.example/a b",
            "https://gw.example/a\r\nb",
            "https://gw.example/a%2",
            "https://gw.example/a\"b",
        ] {
            assert!(url_path(bad).is_err(), "{bad:?}");
        }
    }

    /// pi's built-in route takes every well-known key passed (and every `--model-key`) as a
    /// credential of the one provider's route, whatever provider the key is for: with
    /// `agent.model: groq/...` (or `openai/...`) and `--pass-env ANTHROPIC_API_KEY`, the agent
    /// puts the Anthropic key's placeholder in `Authorization` and the host sends Anthropic's
    /// key to api.groq.com (api.openai.com, whose 401 quotes part of a wrong key back).
    #[test]
    #[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
    fn attack_secrets__a_pi_route_carries_no_key_to_another_providers_api() {
        for (model, pass) in [
            ("groq/llama-3.3-70b-versatile", &["ANTHROPIC_API_KEY"][..]),
            ("openai/gpt-5", &["OPENAI_API_KEY", "ANTHROPIC_API_KEY"][..]),
        ] {
            let yaml = format!("runtime: pi\nprompt: hi\nagent:\n  model: {model}\n");
            let (_d, v) = validated(&yaml, &[]);
            let Ok(p) = plan_for(&v, &[], pass) else {
                continue;
            };
            if let Some((route, up)) = p.route {
                let carried = route.credentials.iter().any(|c| c == "ANTHROPIC_API_KEY");
                assert!(
                    !carried || up.endpoint.host == "api.anthropic.com",
                    "{model}: ANTHROPIC_API_KEY is a credential of the route to {}",
                    up.endpoint
                );
            }
        }
    }

    /// A pi harness with `agent.model` `model` pinning `config/models.json`, under `network`
    /// (YAML, or empty).
    fn pi_pinned(model: &str, network: &str) -> String {
        format!(
            "runtime: pi\nprompt: hi\nagent:\n  model: {model}\nadapters:\n  - path: config/models.json\n    role: config\n{network}"
        )
    }

    #[test]
    #[allow(non_snake_case)] // attack tests are named attack_<class>__<case>
    fn attack_secrets__a_rewritten_built_in_provider_with_its_own_api_key_takes_no_env_key() {
        // The file gives pi's built-in `openai` a gateway of its own and its own key variable:
        // pi sends GW_KEY there and never OPENAI_API_KEY (a configured apiKey wins over the
        // built-in's variable, pi 0.73.1, 0.87.1, 1.6.0). The route must not take
        // OPENAI_API_KEY either: any process of the sandbox could otherwise send
        // `Authorization: Bearer pitcrew-placeholder-OPENAI_API_KEY` to the listener and the
        // host would hand OpenAI's key to gw.example.
        let models = r#"{"providers": {"openai": {"baseUrl": "https://gw.example/v1",
            "apiKey": "GW_KEY", "models": [{"id": "m"}]}}}"#;
        for network in ["", "network:\n  allow: [gw.example:443]\n"] {
            let yaml = pi_pinned("openai/m", network);
            let (_d, v) = validated(&yaml, &[("config/models.json", models)]);
            let p = plan_for(&v, &[], &["GW_KEY", "OPENAI_API_KEY"]).unwrap();
            assert_eq!(
                p.route.as_ref().unwrap().0.upstream.to_string(),
                "gw.example:443"
            );
            assert_eq!(p.names, ["GW_KEY"], "{network}");
            assert!(
                p.notes.iter().any(|n| n.contains("OPENAI_API_KEY")),
                "{network}: {:?}",
                p.notes
            );
            let err = plan_for(&v, &["OPENAI_API_KEY"], &[])
                .unwrap_err()
                .to_string();
            assert!(err.contains("another provider's endpoint"), "{err}");
        }
    }

    #[test]
    #[allow(non_snake_case)] // attack tests are named attack_<class>__<case>
    fn attack_secrets__a_key_pi_reads_from_a_providers_headers_never_goes_in_unsaid() {
        // pi resolves `$VAR` in a provider's `headers` as it does in `apiKey`: with this file pi
        // sends GW_KEY in `Authorization`. Passed with --pass-env, the key must either stay on
        // the host (the route takes it; the host replaces it in `authorization`) or go in with
        // a note; today it is no model key at all and enters the sandbox with nothing said.
        let models = r#"{"providers": {"gw": {"baseUrl": "https://gw.example/v1",
            "api": "openai-completions", "headers": {"Authorization": "Bearer $GW_KEY"},
            "models": [{"id": "m"}]}}}"#;
        let yaml = pi_pinned("gw/m", "network:\n  allow: [gw.example:443]\n");
        let (_d, v) = validated(&yaml, &[("config/models.json", models)]);
        let p = plan_for(&v, &[], &["GW_KEY"]).unwrap();
        let kept = p.names == ["GW_KEY"];
        let said = p.notes.iter().any(|n| n.contains("GW_KEY"));
        assert!(kept || said, "names {:?}, notes {:?}", p.names, p.notes);
    }

    #[test]
    fn settings_default_provider_names_the_rewritten_provider_under_an_explicit_network() {
        // pi uses settings.json's defaultProvider when agent.model names none; with network:
        // named, validation reads no settings.json, so the host finds no provider to rewrite
        // and the key goes in as it is (a note), though the same harness without network:
        // keeps it on the host.
        let models = r#"{"providers": {"gw": {"baseUrl": "https://gw.example/v1",
            "apiKey": "GW_KEY", "models": [{"id": "m"}]}}}"#;
        let settings = r#"{"defaultProvider": "gw"}"#;
        for network in ["", "network:\n  allow: [gw.example:443]\n"] {
            let yaml = format!(
                "runtime: pi\nprompt: hi\nagent:\n  model: m\nadapters:\n  - path: config/models.json\n    role: config\n  - path: config/settings.json\n    role: config\n{network}"
            );
            let (_d, v) = validated(
                &yaml,
                &[
                    ("config/models.json", models),
                    ("config/settings.json", settings),
                ],
            );
            let p = plan_for(&v, &[], &["GW_KEY"]).unwrap();
            assert_eq!(p.names, ["GW_KEY"], "{network}: {:?}", p.notes);
        }
    }

    #[test]
    #[allow(non_snake_case)] // attack tests are named attack_<class>__<case>
    fn attack_secrets__a_base_urls_path_never_writes_the_hosts_request_line_or_headers() {
        // The host puts the base URL's path before each request target as it is: a pinned
        // models.json whose baseUrl path holds a space and CRLF writes the request line and a
        // second `Host` of its choosing into the request that carries the key, while the
        // record and the network name only gw.example (pi's URL parser drops the CR and LF).
        let models = "{\"providers\": {\"gw\": {\"baseUrl\": \"https://gw.example/v1 HTTP/1.1\\r\\nHost: evil.example\\r\\nX-Pad: x\", \"apiKey\": \"GW_KEY\", \"models\": [{\"id\": \"m\"}]}}}";
        let yaml = pi_pinned("gw/m", "");
        let (_d, v) = validated(&yaml, &[("config/models.json", models)]);
        match plan_for(&v, &["GW_KEY"], &[]) {
            Err(_) => {}
            Ok(p) => {
                let (_, up) = p.route.unwrap();
                assert!(
                    !up.prefix.bytes().any(|b| b <= b' ' || b == 0x7f),
                    "prefix {:?}",
                    up.prefix
                );
            }
        }
    }
}
