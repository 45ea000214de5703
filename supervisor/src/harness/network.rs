//! The network that applies to a harness: its `network:` key, or when it has none, the
//! runtime's default ([`network_default`]), each allowed endpoint named with where it came
//! from.
//!
//! The default lets a first run reach its model and nothing else:
//!
//! - `command`: nothing (`none`).
//! - `pi`: every endpoint a `baseUrl` of the pinned `models.json` names (the provider's, each
//!   model's, each model override's), and, when the provider pi would use has no `baseUrl` of
//!   its own there, that built-in provider's API host on 443 ([`PI_PROVIDER_HOSTS`]). The
//!   provider pi uses is the one `agent.args` names with `--provider`, else the prefix of
//!   `agent.model` (`anthropic/claude-…`) when it names a provider, else the pinned
//!   `settings.json`'s `defaultProvider` (the order pi 0.73.1, 0.87.1 and 1.6.0 follow).
//!   The harness `env:`'s `AZURE_OPENAI_BASE_URL` (or `AZURE_OPENAI_RESOURCE_NAME`), which pi's
//!   Azure provider prefers to `models.json`, is allowed too.
//! - `claude`: the host and port of `ANTHROPIC_BASE_URL` when the harness `env:` sets it,
//!   else `api.anthropic.com:443`; with `CLAUDE_CODE_USE_BEDROCK`, `_VERTEX` or `_FOUNDRY`
//!   set, that backend's `ANTHROPIC_<NAME>_BASE_URL` instead (a note when it is unset).
//!
//! The pinned `models.json` and `settings.json` are read from the host's copies the harness
//! pins (config adapters at the top of pi's config directory), and checked against the digest
//! the manifest pins, so the network follows the very bytes pi will read.

use super::model::{CheckedAdapter, Harness, Validated};
use super::yaml::{location, Checker};
use crate::exit_code::PinRole;
use crate::manifest::{Endpoint, NetworkPolicy, Runtime};
use marked_yaml::Node;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::io::Read;

/// The API host (port 443) of each pi built-in provider that has one fixed endpoint, as every
/// model of that provider names it in pi-ai's model list (`models.generated.js`) of pi 0.73.1,
/// 0.87.1 and 1.6.0 alike. Providers whose host depends on an account or a region (Bedrock,
/// Vertex, Azure, Cloudflare) are not here: a harness names their endpoint in `network:`.
pub const PI_PROVIDER_HOSTS: &[(&str, &str)] = &[
    ("anthropic", "api.anthropic.com"),
    ("openai", "api.openai.com"),
    ("google", "generativelanguage.googleapis.com"),
    ("groq", "api.groq.com"),
    ("cerebras", "api.cerebras.ai"),
    ("xai", "api.x.ai"),
    ("openrouter", "openrouter.ai"),
    ("mistral", "api.mistral.ai"),
    ("deepseek", "api.deepseek.com"),
    ("fireworks", "api.fireworks.ai"),
    ("huggingface", "router.huggingface.co"),
];

/// The base URL of each pi built-in provider whose models all name one (pi-ai's model list of
/// pi 0.73.1, 0.87.1 and 1.6.0 alike) and whose key goes in an `Authorization`, `x-api-key` or
/// `x-goog-api-key` header: the providers whose requests the host can carry with a key kept on
/// the host, pi pointed at the supervisor's model listener by a `models.json` of the
/// supervisor's (OpenRouter and Fireworks are not here: their models name two base URLs).
pub const PI_PROVIDER_URLS: &[(&str, &str)] = &[
    ("anthropic", "https://api.anthropic.com"),
    ("openai", "https://api.openai.com/v1"),
    ("google", "https://generativelanguage.googleapis.com/v1beta"),
    ("groq", "https://api.groq.com/openai/v1"),
    ("cerebras", "https://api.cerebras.ai/v1"),
    ("xai", "https://api.x.ai/v1"),
    ("mistral", "https://api.mistral.ai"),
    ("deepseek", "https://api.deepseek.com"),
    ("huggingface", "https://router.huggingface.co/v1"),
];

/// The variables pi reads the key of each provider of [`PI_PROVIDER_URLS`] from (pi-ai's
/// `getEnvApiKey` of pi 0.73.1, 0.87.1 and 1.6.0): a route to that provider carries only these,
/// never one provider's key to another's endpoint.
pub const PI_PROVIDER_KEYS: &[(&str, &[&str])] = &[
    ("anthropic", &["ANTHROPIC_API_KEY", "ANTHROPIC_OAUTH_TOKEN"]),
    ("openai", &["OPENAI_API_KEY"]),
    ("google", &["GEMINI_API_KEY"]),
    ("groq", &["GROQ_API_KEY"]),
    ("cerebras", &["CEREBRAS_API_KEY"]),
    ("xai", &["XAI_API_KEY"]),
    ("mistral", &["MISTRAL_API_KEY"]),
    ("deepseek", &["DEEPSEEK_API_KEY"]),
    ("huggingface", &["HF_TOKEN"]),
];

/// The key variables of pi built-in provider `provider` ([`PI_PROVIDER_KEYS`]); none for
/// another name.
pub fn pi_provider_keys(provider: &str) -> &'static [&'static str] {
    PI_PROVIDER_KEYS
        .iter()
        .find(|(p, _)| *p == provider)
        .map_or(&[], |(_, keys)| keys)
}

/// The pi built-in provider a key kept on the host can be carried for, with its base URL
/// ([`PI_PROVIDER_URLS`]): the provider pi uses ([`pi_provider`]) when the harness pins no
/// `models.json` (the supervisor writes its own there); `Err` says why there is none.
pub fn pi_builtin_route(h: &Harness, pi: &PiModelConfig) -> Result<(String, &'static str), String> {
    let pinned = h
        .adapters
        .iter()
        .any(|a| a.role == PinRole::Config && a.destination() == "models.json");
    if pinned {
        return Err(
            "the harness pins pi's models.json, so the supervisor cannot point a \
                    built-in provider at its model listener"
                .into(),
        );
    }
    let Some((provider, why)) = pi_provider(h, pi) else {
        return Err(
            "no agent.args --provider, agent.model provider/ or settings.json \
                    defaultProvider names pi's provider"
                .into(),
        );
    };
    PI_PROVIDER_URLS
        .iter()
        .find(|(p, _)| p.eq_ignore_ascii_case(&provider))
        .map(|(p, url)| (p.to_string(), *url))
        .ok_or_else(|| {
            format!(
                "pi's provider {provider:?} (from {why}) is none of the built-in providers the \
                 host carries with a key of its own ({})",
                PI_PROVIDER_URLS
                    .iter()
                    .map(|(p, _)| *p)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

/// pi's built-in providers whose host depends on an account, a region or the environment
/// (0.73.1, 0.87.1, 1.6.0): recognised in `agent.model`, with no default endpoint.
const PI_PROVIDERS_ELSEWHERE: &[&str] = &[
    "amazon-bedrock",
    "azure-openai-responses",
    "google-vertex",
    "cloudflare-ai-gateway",
    "cloudflare-workers-ai",
];

/// Claude Code's API host (port 443) when `ANTHROPIC_BASE_URL` is unset.
pub const CLAUDE_API_HOST: &str = "api.anthropic.com";

/// The largest pinned `models.json` or `settings.json` read for the default network.
pub const MAX_CONFIG_BYTES: u64 = 16 * 1024 * 1024;

/// What pi's pinned configuration says about where its model requests go.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PiModelConfig {
    /// Each endpoint a `baseUrl` of `models.json` names, with where (`models.json provider
    /// "x"`), providers in name order.
    pub endpoints: Vec<(Endpoint, String)>,
    /// The providers `models.json` names, in name order.
    pub providers: Vec<String>,
    /// The providers `models.json` gives a `baseUrl` of their own (every request of theirs
    /// goes there or to a model's own `baseUrl`).
    pub redirected: Vec<String>,
    /// `settings.json`'s `defaultProvider`.
    pub default_provider: Option<String>,
    /// The endpoints of the `baseUrl`s that are `http://` (plain: the host can read the model
    /// requests sent there and add a credential kept on the host).
    #[serde(skip)]
    pub plain_endpoints: Vec<Endpoint>,
    /// The variables a provider's `apiKey` names (pi reads the key from the environment
    /// variable of that name, when it is set), in provider order, each once.
    #[serde(skip)]
    pub api_key_vars: Vec<String>,
    /// The host's copy of the pinned `models.json` (read whether or not the harness names its
    /// `network:`): the host rewrites a provider's `baseUrl` in it to keep that provider's key
    /// ([`super::pi_models_rewrite`]).
    #[serde(skip)]
    pub models_json: Option<PinnedConfig>,
}

/// A pinned configuration file's bytes, read from the host's copy and checked against the
/// pinned digest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PinnedConfig {
    /// The bytes.
    pub bytes: Vec<u8>,
    /// Their SHA-256 (lowercase hex), the pinned digest.
    pub sha256: String,
}

/// The network that applies to a harness.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NetworkChoice {
    /// The policy the manifest carries.
    pub policy: NetworkPolicy,
    /// For each endpoint the policy allows, in its order, where it came from.
    pub sources: Vec<String>,
    /// Whether the harness's `network:` chose it (otherwise it is the runtime's default).
    pub explicit: bool,
    /// What the default could not cover: a provider with no endpoint pitcrew knows.
    pub notes: Vec<String>,
}

impl NetworkChoice {
    /// One line for reports: `allow 127.0.0.1:8377 (models.json provider "scripted")`,
    /// `none (the default for runtime command)`, `open`.
    pub fn summary(&self) -> String {
        let mut out = self.policy.mode_name().to_string();
        if let NetworkPolicy::Platform { platform } = &self.policy {
            out.push_str(&format!(" {platform}"));
        }
        for (i, (endpoint, source)) in self.policy.allowed().iter().zip(&self.sources).enumerate() {
            out.push_str(if i == 0 { " " } else { ", " });
            out.push_str(&format!("{endpoint} ({source})"));
        }
        if !self.explicit && self.policy.allowed().is_empty() {
            out.push_str(" (the runtime's default)");
        }
        if self.policy.dial_from() == crate::manifest::DialFrom::Sandbox {
            out.push_str("; dialled from the sandbox by its supervisor");
        }
        out
    }
}

/// The host and port a base URL sends to: `http://127.0.0.1:8377/v1` → `127.0.0.1:8377`,
/// `https://api.anthropic.com` → `api.anthropic.com:443` (80 for `http`, 443 for `https`).
pub fn url_endpoint(url: &str) -> Result<Endpoint, String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("{url:?} is not an http:// or https:// URL"))?;
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "http" => 80,
        "https" => 443,
        _ => return Err(format!("{url:?} is not an http:// or https:// URL")),
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err(format!("{url:?} carries credentials in its host part"));
    }
    let has_port = match authority.rfind(']') {
        Some(close) => authority[close..].contains(':'),
        None => authority.contains(':'),
    };
    let text = if has_port {
        authority.to_string()
    } else {
        format!("{authority}:{default_port}")
    };
    Endpoint::parse(&text).map_err(|e| format!("{url:?}: {e}"))
}

/// The network a harness without a `network:` key gets, from its runtime, its `env:`, its
/// agent options and (for pi) what its pinned configuration says.
pub fn network_default(h: &Harness, pi: &PiModelConfig) -> NetworkChoice {
    let mut allowed = Allowed::default();
    let mut notes = Vec::new();
    match h.runtime {
        Runtime::Command => {}
        Runtime::Claude => claude_default(h, &mut allowed, &mut notes),
        Runtime::Codex | Runtime::Opencode => codex_default(h, &mut allowed, &mut notes),
        Runtime::Pi => {
            for (endpoint, source) in &pi.endpoints {
                allowed.add(endpoint.clone(), source.clone());
            }
            pi_env_default(h, &mut allowed, &mut notes);
            pi_provider_default(h, pi, &mut allowed, &mut notes);
        }
    }
    let policy = if allowed.endpoints.is_empty() {
        NetworkPolicy::None
    } else {
        NetworkPolicy::allow(allowed.endpoints)
    };
    NetworkChoice {
        policy,
        sources: allowed.sources,
        explicit: false,
        notes,
    }
}

/// The network that applies to `h`: its `network:` key, or [`network_default`].
pub fn network_for(h: &Harness, pi: &PiModelConfig) -> NetworkChoice {
    match &h.network {
        Some(policy) => NetworkChoice {
            sources: vec!["the harness's network:".to_string(); policy.allowed().len()],
            policy: policy.clone(),
            explicit: true,
            notes: Vec::new(),
        },
        None => network_default(h, pi),
    }
}

/// Endpoints in order, each once, with where each came from.
#[derive(Default)]
struct Allowed {
    endpoints: Vec<Endpoint>,
    sources: Vec<String>,
}

impl Allowed {
    fn add(&mut self, endpoint: Endpoint, source: String) {
        if !self.endpoints.contains(&endpoint) {
            self.endpoints.push(endpoint);
            self.sources.push(source);
        }
    }
}

/// Claude Code's backends other than Anthropic's API, each switched on by
/// `CLAUDE_CODE_USE_<NAME>` and sent to `ANTHROPIC_<NAME>_BASE_URL` when set.
const CLAUDE_BACKENDS: &[&str] = &["BEDROCK", "VERTEX", "FOUNDRY"];

/// Claude Code's endpoint: the backend the harness `env:` switches on (its base URL, when set),
/// else `ANTHROPIC_BASE_URL`, else Anthropic's API.
fn claude_default(h: &Harness, allowed: &mut Allowed, notes: &mut Vec<String>) {
    let on = |name: &str| {
        h.env
            .get(name)
            .is_some_and(|v| !matches!(v.trim(), "" | "0" | "false"))
    };
    let mut backend = false;
    for name in CLAUDE_BACKENDS {
        if !on(&format!("CLAUDE_CODE_USE_{name}")) {
            continue;
        }
        backend = true;
        let var = format!("ANTHROPIC_{name}_BASE_URL");
        match h.env.get(&var) {
            Some(url) => env_url(url, &var, allowed, notes),
            None => notes.push(format!(
                "env CLAUDE_CODE_USE_{name}: Claude Code's {} endpoint depends on the account \
                 or region and {var} is unset: name the endpoint in network:",
                name.to_ascii_lowercase()
            )),
        }
    }
    if backend {
        return;
    }
    match h.env.get("ANTHROPIC_BASE_URL") {
        Some(url) => env_url(url, "ANTHROPIC_BASE_URL", allowed, notes),
        None => allowed.add(
            Endpoint {
                host: CLAUDE_API_HOST.into(),
                port: 443,
            },
            "Claude Code's API endpoint".into(),
        ),
    }
}

/// The Codex CLI's default endpoint: its model provider's `base_url`, which pitcrew takes from
/// `OPENAI_BASE_URL` ([`crate::runtime_argv::CODEX_BASE_URL_VAR`]), else OpenAI's API.
fn codex_default(h: &Harness, allowed: &mut Allowed, notes: &mut Vec<String>) {
    let var = crate::runtime_argv::CODEX_BASE_URL_VAR;
    match h.env.get(var) {
        Some(url) => env_url(url, var, allowed, notes),
        None => allowed.add(
            Endpoint {
                host: CODEX_API_HOST.into(),
                port: 443,
            },
            match h.runtime {
                Runtime::Opencode => "OpenCode's provider without OPENAI_BASE_URL (OpenAI's API)",
                _ => "the Codex CLI's API endpoint (OpenAI's)",
            }
            .into(),
        ),
    }
}

/// OpenAI's API host, where Codex sends its model requests without `OPENAI_BASE_URL`.
const CODEX_API_HOST: &str = "api.openai.com";

/// The endpoints pi's Azure provider takes from the environment over `models.json`
/// (`AZURE_OPENAI_BASE_URL`, else `https://<AZURE_OPENAI_RESOURCE_NAME>.openai.azure.com`),
/// when the harness `env:` sets them.
fn pi_env_default(h: &Harness, allowed: &mut Allowed, notes: &mut Vec<String>) {
    if let Some(url) = h.env.get("AZURE_OPENAI_BASE_URL") {
        env_url(url, "AZURE_OPENAI_BASE_URL", allowed, notes);
    } else if let Some(name) = h.env.get("AZURE_OPENAI_RESOURCE_NAME") {
        env_url(
            &format!("https://{}.openai.azure.com", name.trim()),
            "AZURE_OPENAI_RESOURCE_NAME",
            allowed,
            notes,
        );
    }
}

/// The endpoint of the URL the harness `env:` gives `var`, or a note saying why there is none.
fn env_url(url: &str, var: &str, allowed: &mut Allowed, notes: &mut Vec<String>) {
    match url_endpoint(url) {
        Ok(endpoint) => allowed.add(endpoint, format!("env {var}")),
        Err(why) => notes.push(format!("env {var}: {why}")),
    }
}

/// The built-in provider pi uses, when `models.json` does not send it elsewhere.
fn pi_provider_default(
    h: &Harness,
    pi: &PiModelConfig,
    allowed: &mut Allowed,
    notes: &mut Vec<String>,
) {
    let Some((provider, why)) = pi_provider(h, pi) else {
        if allowed.endpoints.is_empty() {
            notes.push(
                "pi's provider is named by none of agent.args --provider, agent.model \
                 (provider/model), settings.json defaultProvider or a models.json baseUrl: the \
                 default network allows nothing; name the model's endpoint in network:"
                    .to_string(),
            );
        }
        return;
    };
    if pi
        .redirected
        .iter()
        .any(|p| p.eq_ignore_ascii_case(&provider))
    {
        return;
    }
    match builtin_host(&provider) {
        Some(host) => allowed.add(
            Endpoint {
                host: host.to_string(),
                port: 443,
            },
            format!("pi's built-in provider {provider:?}, from {why}"),
        ),
        None if allowed.endpoints.is_empty() => notes.push(format!(
            "pi's provider {provider:?} (from {why}) has no endpoint pitcrew knows: the default \
             network allows nothing; name its endpoint in network:"
        )),
        None => notes.push(format!(
            "pi's provider {provider:?} (from {why}) has no endpoint pitcrew knows of its own: \
             the default allows only the endpoints above; name any other in network:"
        )),
    }
}

/// The provider pi uses and what named it: `--provider` in `agent.args`, the `provider/`
/// prefix of `agent.model` when it names a provider pi knows, or `settings.json`'s
/// `defaultProvider`.
pub fn pi_provider(h: &Harness, pi: &PiModelConfig) -> Option<(String, &'static str)> {
    let args = &h.agent.args;
    for (i, arg) in args.iter().enumerate() {
        if let Some(p) = arg.strip_prefix("--provider=") {
            return Some((p.to_string(), "agent.args --provider"));
        }
        if arg == "--provider" {
            if let Some(p) = args.get(i + 1) {
                return Some((p.clone(), "agent.args --provider"));
            }
        }
    }
    if let Some((prefix, _)) = h.agent.model.as_deref().and_then(|m| m.split_once('/')) {
        let known = builtin_host(prefix).is_some()
            || PI_PROVIDERS_ELSEWHERE
                .iter()
                .any(|p| p.eq_ignore_ascii_case(prefix))
            || pi.providers.iter().any(|p| p.eq_ignore_ascii_case(prefix));
        if known {
            return Some((prefix.to_string(), "agent.model"));
        }
    }
    pi.default_provider
        .clone()
        .map(|p| (p, "settings.json defaultProvider"))
}

fn builtin_host(provider: &str) -> Option<&'static str> {
    PI_PROVIDER_HOSTS
        .iter()
        .find(|(p, _)| p.eq_ignore_ascii_case(provider))
        .map(|(_, host)| *host)
}

/// The endpoints of a pinned `models.json`: each provider's `baseUrl`, each model's and each
/// model override's.
pub fn read_models_json(bytes: &[u8]) -> Result<PiModelConfig, String> {
    let doc = parse_pi_json(bytes)?;
    let top = doc.as_object().ok_or("not a JSON object")?;
    let mut out = PiModelConfig::default();
    let Some(providers) = top.get("providers") else {
        return Ok(out);
    };
    let providers = providers.as_object().ok_or("providers is not an object")?;
    for (name, provider) in providers {
        let provider = provider
            .as_object()
            .ok_or_else(|| format!("providers.{name} is not an object"))?;
        out.providers.push(name.clone());
        let source = format!("models.json provider {name:?}");
        if let Some(url) = string_at(provider.get("baseUrl"), || format!("providers.{name}"))? {
            let endpoint =
                url_endpoint(url).map_err(|e| format!("providers.{name}.baseUrl: {e}"))?;
            out.note_plain(url, &endpoint);
            out.endpoints.push((endpoint, source.clone()));
            out.redirected.push(name.clone());
        }
        if let Some(Value::String(key)) = provider.get("apiKey") {
            for name in api_key_variables(key) {
                if !out.api_key_vars.contains(&name) {
                    out.api_key_vars.push(name);
                }
            }
        }
        if let Some(models) = provider.get("models") {
            let models = models
                .as_array()
                .ok_or_else(|| format!("providers.{name}.models is not a list"))?;
            for (i, model) in models.iter().enumerate() {
                let at = || format!("providers.{name}.models[{i}]");
                let url = string_at(model.get("baseUrl"), at)?;
                if let Some(url) = url {
                    let id = model.get("id").and_then(Value::as_str).unwrap_or("?");
                    let endpoint =
                        url_endpoint(url).map_err(|e| format!("{}.baseUrl: {e}", at()))?;
                    out.note_plain(url, &endpoint);
                    out.endpoints
                        .push((endpoint, format!("{source} model {id:?}")));
                }
            }
        }
        if let Some(overrides) = provider.get("modelOverrides") {
            let overrides = overrides
                .as_object()
                .ok_or_else(|| format!("providers.{name}.modelOverrides is not an object"))?;
            for (id, o) in overrides {
                let at = || format!("providers.{name}.modelOverrides.{id}");
                if let Some(url) = string_at(o.get("baseUrl"), at)? {
                    let endpoint =
                        url_endpoint(url).map_err(|e| format!("{}.baseUrl: {e}", at()))?;
                    out.note_plain(url, &endpoint);
                    out.endpoints
                        .push((endpoint, format!("{source} model {id:?}")));
                }
            }
        }
    }
    Ok(out)
}

impl PiModelConfig {
    /// Keeps `endpoint` among the plain ones when `url` is `http://`.
    fn note_plain(&mut self, url: &str, endpoint: &Endpoint) {
        let plain = url
            .get(..7)
            .is_some_and(|s| s.eq_ignore_ascii_case("http://"));
        if plain && !self.plain_endpoints.contains(endpoint) {
            self.plain_endpoints.push(endpoint.clone());
        }
    }
}

/// The environment variables a `models.json` `apiKey` reads: the whole value when it is a
/// variable's name (pi 0.73.1 takes the variable of that name when it is set), and each `$NAME`
/// or `${NAME}` in it (0.87.1 and 1.6.0 interpolate those; `$$` and `$!` are escapes); none for
/// a `!command`.
pub fn api_key_variables(key: &str) -> Vec<String> {
    let name_char =
        |i: usize, b: u8| b == b'_' || b.is_ascii_alphabetic() || (i > 0 && b.is_ascii_digit());
    let mut out = Vec::new();
    if key.starts_with('!') {
        return out;
    }
    if !key.is_empty() && key.bytes().enumerate().all(|(i, b)| name_char(i, b)) {
        out.push(key.to_string());
    }
    let bytes = key.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'$' {
            i += 1;
            continue;
        }
        match bytes.get(i + 1) {
            Some(b'$' | b'!') => i += 2,
            Some(b'{') => {
                let Some(end) = key[i + 2..].find('}') else {
                    break;
                };
                let name = &key[i + 2..i + 2 + end];
                if !name.is_empty() && name.bytes().enumerate().all(|(j, b)| name_char(j, b)) {
                    out.push(name.to_string());
                }
                i += 3 + end;
            }
            _ => {
                let len = key[i + 1..]
                    .bytes()
                    .enumerate()
                    .take_while(|(j, b)| name_char(*j, *b))
                    .count();
                if len > 0 {
                    out.push(key[i + 1..i + 1 + len].to_string());
                }
                i += 1 + len;
            }
        }
    }
    out.dedup();
    out
}

/// `settings.json`'s `defaultProvider`.
pub fn read_settings_json(bytes: &[u8]) -> Result<Option<String>, String> {
    let doc = parse_pi_json(bytes)?;
    let top = doc.as_object().ok_or("not a JSON object")?;
    Ok(string_at(top.get("defaultProvider"), || "settings".into())?.map(str::to_string))
}

/// A pinned JSON file of pi's read as pi reads it: UTF-8, a leading byte-order mark dropped
/// (0.87.1 and 1.6.0 drop it), `//` comments and trailing commas taken out
/// ([`strip_json_comments`]).
pub fn parse_pi_json(bytes: &[u8]) -> Result<Value, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    serde_json::from_str(&strip_json_comments(text)).map_err(|e| format!("not JSON: {e}"))
}

/// `text` with its `//` comments and trailing commas (a `,` before `}` or `]`, whitespace
/// between) taken out, string literals left as they are: what pi's `stripJsonComments` does
/// before it parses `models.json` and `settings.json` (0.73.1, 0.87.1, 1.6.0; two regular
/// expressions, each of which matches a whole string literal first so that nothing inside one
/// is touched). `/* */` comments are not taken out: pi does not either.
pub fn strip_json_comments(text: &str) -> String {
    let without_comments = replace_outside_strings(text, |rest| {
        rest.starts_with("//")
            .then(|| rest.find('\n').unwrap_or(rest.len()))
            .map(|len| (len, ""))
    });
    replace_outside_strings(&without_comments, |rest| {
        let after = rest.strip_prefix(',')?;
        let tail = after.trim_start_matches(is_js_space);
        tail.starts_with(['}', ']']).then_some((1, ""))
    })
}

/// Whitespace as JavaScript's `\s` matches it.
fn is_js_space(c: char) -> bool {
    c.is_whitespace() || c == '\u{feff}'
}

/// `text` with what `at` matches replaced, scanning as a regular expression
/// `"(?:\\.|[^"\\])*"|<pattern>` with a global flag does: a complete string literal is
/// passed over whole; elsewhere `at(rest)` says how many bytes to replace, and with what.
fn replace_outside_strings(
    text: &str,
    at: impl Fn(&str) -> Option<(usize, &'static str)>,
) -> String {
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        let rest = &text[i..];
        if rest.starts_with('"') {
            if let Some(len) = string_literal(rest) {
                out.push_str(&rest[..len]);
                i += len;
                continue;
            }
        } else if let Some((len, with)) = at(rest) {
            out.push_str(with);
            i += len;
            continue;
        }
        let c = rest.chars().next().unwrap_or_default();
        out.push(c);
        i += c.len_utf8().max(1);
    }
    out
}

/// The length of the string literal `"(?:\\.|[^"\\])*"` at the start of `rest` (which
/// starts with `"`), or `None` when it is not closed (`.` matches no line break).
fn string_literal(rest: &str) -> Option<usize> {
    let mut chars = rest.char_indices().skip(1);
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some(i + 1),
            '\\' => match chars.next() {
                Some((_, '\n' | '\r' | '\u{2028}' | '\u{2029}')) | None => return None,
                Some(_) => {}
            },
            _ => {}
        }
    }
    None
}

/// A `baseUrl`-like field: absent, or a string.
fn string_at(value: Option<&Value>, at: impl Fn() -> String) -> Result<Option<&str>, String> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("{} has a field that is not a string", at())),
    }
}

/// The variables of the harness `env:` the default network of each runtime reads a URL from.
fn endpoint_variables(runtime: Runtime) -> &'static [&'static str] {
    match runtime {
        Runtime::Claude => &[
            "ANTHROPIC_BASE_URL",
            "ANTHROPIC_BEDROCK_BASE_URL",
            "ANTHROPIC_VERTEX_BASE_URL",
            "ANTHROPIC_FOUNDRY_BASE_URL",
        ],
        Runtime::Pi => &["AZURE_OPENAI_BASE_URL"],
        Runtime::Codex | Runtime::Opencode => &["OPENAI_BASE_URL"],
        Runtime::Command => &[],
    }
}

/// Why `name`=`value` of the harness `env:` (or a task's override) cannot give the default
/// network an endpoint, when the default reads one from it: `None` for a readable URL, any
/// other name, or a harness whose `network:` is explicit.
pub(super) fn endpoint_variable_problem(h: &Harness, name: &str, value: &str) -> Option<String> {
    if h.network.is_some() || !endpoint_variables(h.runtime).contains(&name) {
        return None;
    }
    url_endpoint(value)
        .err()
        .map(|why| format!("the default network is read from it: {why}"))
}

impl Validated {
    /// The network that applies to the checked harness (its `network:`, or the runtime's
    /// default with where each endpoint came from); `None` when the harness could not be read.
    pub fn network(&self) -> Option<NetworkChoice> {
        self.harness
            .as_ref()
            .map(|h| network_for(h, &self.pi_config))
    }
}

impl Checker<'_> {
    /// What the default network needs that only the files can say, checked once: for pi, the
    /// pinned `models.json` and `settings.json` read (their bytes checked against the pinned
    /// digest); the runtime's endpoint variables the harness `env:` sets
    /// ([`endpoint_variable_problem`]) readable as URLs. Nothing when the harness names its
    /// `network:`.
    pub(super) fn network_inputs(
        &mut self,
        h: &Harness,
        node: &Node,
        adapters: &[CheckedAdapter],
    ) -> PiModelConfig {
        let mut out = PiModelConfig::default();
        if h.network.is_some() {
            // For a rewrite of the route's provider only: the models.json bytes and the
            // settings' defaultProvider (nothing is asked of them; a file pi could not read
            // leaves no route).
            let pinned = |name: &str| {
                adapters
                    .iter()
                    .find(|a| a.spec.role == PinRole::Config && a.spec.destination() == name)
                    .and_then(|a| pinned_bytes(a).ok().map(|b| (b, a.sha256.clone())))
            };
            out.models_json =
                pinned("models.json").map(|(bytes, sha256)| PinnedConfig { bytes, sha256 });
            out.default_provider = pinned("settings.json")
                .and_then(|(bytes, _)| read_settings_json(&bytes).ok().flatten());
            return out;
        }
        for (name, value) in &h.env {
            if let Some(why) = endpoint_variable_problem(h, name, value) {
                let at = node
                    .as_mapping()
                    .and_then(|m| m.get_mapping("env"))
                    .and_then(|m| m.get_node(name))
                    .and_then(location);
                self.problem(at, format!("env.{name}"), why);
            }
        }
        if h.runtime != Runtime::Pi {
            return out;
        }
        for a in adapters {
            let dest = a.spec.destination();
            if a.spec.role != PinRole::Config
                || !matches!(dest.as_str(), "models.json" | "settings.json")
            {
                continue;
            }
            let i = h.adapters.iter().position(|s| *s == a.spec).unwrap_or(0);
            let at = node
                .as_mapping()
                .and_then(|m| m.get_sequence("adapters"))
                .and_then(|s| s.get_node(i))
                .and_then(location);
            let field = format!("adapters[{i}]");
            let read = pinned_bytes(a).and_then(|bytes| {
                if dest == "models.json" {
                    read_models_json(&bytes).map(|m| {
                        out = PiModelConfig {
                            default_provider: out.default_provider.take(),
                            models_json: Some(PinnedConfig {
                                sha256: a.sha256.clone(),
                                bytes,
                            }),
                            ..m
                        };
                    })
                } else {
                    read_settings_json(&bytes).map(|p| out.default_provider = p)
                }
            });
            if let Err(why) = read {
                self.problem(
                    at,
                    field,
                    format!(
                        "pi's {dest}: {why} (the default network is read from it; or name the \
                         network in network:)"
                    ),
                );
            }
        }
        out
    }
}

/// The host's copy of a pinned file, refused unless it still has the pinned digest.
fn pinned_bytes(a: &CheckedAdapter) -> Result<Vec<u8>, String> {
    let file = std::fs::File::open(&a.spec.host_path).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(format!("larger than {MAX_CONFIG_BYTES} bytes"));
    }
    if hex::encode(Sha256::digest(&bytes)) != a.sha256 {
        return Err("changed while the harness was checked".to_string());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests;
