//! pi's pinned `models.json` rewritten so that one provider's key stays on the host.
//!
//! pi reads no base-URL variable for its providers: the `baseUrl` its requests go to is in
//! `models.json` (a provider's, or a model's own). When the harness pins that file and the
//! provider pi uses sends its requests to an `https://` endpoint, the key would have to be in
//! the sandbox for pi to add it. Instead the host rewrites the file before uploading it: that
//! provider's `baseUrl`, and each of its models' or model overrides' `baseUrl` naming the same
//! URL, become the supervisor's model listener (`http://127.0.0.1:<port>`, at a port the host
//! chooses); the host then adds the key to each request and sends it on to the URL the file
//! named, over TLS. The manifest pins the rewritten bytes (so the supervisor verifies what pi
//! reads), and the record names the harness's own file by its SHA-256. A built-in provider the
//! file does not name gets an entry holding only the listener as `baseUrl`, as the
//! supervisor's own `models.json` gives one when nothing is pinned.
//!
//! What is not rewritten is refused, never half-routed: a model of the provider with a
//! `baseUrl` of its own elsewhere (its requests would carry the placeholder there), or a
//! provider with no URL pitcrew knows.

use super::model::Harness;
use super::network::{
    api_key_variables, pi_provider, pi_provider_keys, read_models_json, PiModelConfig,
    PI_PROVIDER_URLS,
};
use serde_json::{Map, Value};

/// pi's `models.json` with one provider sent to the model listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RewrittenModels {
    /// The provider, as the file (or pi's built-in list) names it.
    pub provider: String,
    /// The base URL the file named for it (or the built-in provider's): where the host sends
    /// its requests.
    pub url: String,
    /// The key variables the provider's requests may carry: its `apiKey`'s, and a built-in
    /// provider's own.
    pub keys: Vec<String>,
    /// The rewritten file.
    pub bytes: Vec<u8>,
}

/// Rewrites the pinned `models.json` (`bytes`) of harness `h` so that the provider pi uses
/// goes to `listener`; `pi` is what validation read of pi's pinned configuration (its
/// `settings.json`'s `defaultProvider`). `Err` says why the provider cannot be routed so.
pub fn rewrite(
    h: &Harness,
    pi: &PiModelConfig,
    bytes: &[u8],
    listener: &str,
) -> Result<RewrittenModels, String> {
    let read = read_models_json(bytes).map_err(|e| format!("pi's pinned models.json: {e}"))?;
    let known = PiModelConfig {
        default_provider: pi.default_provider.clone(),
        ..read
    };
    let Some((provider, why)) = pi_provider(h, &known) else {
        return Err(
            "no agent.args --provider, agent.model provider/ or settings.json defaultProvider \
             names the provider of pi's pinned models.json to route"
                .into(),
        );
    };
    let mut doc: Value =
        serde_json::from_slice(bytes).map_err(|e| format!("pi's pinned models.json: {e}"))?;
    let top = doc
        .as_object_mut()
        .ok_or("pi's pinned models.json: not a JSON object")?;
    let providers = top
        .entry("providers")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .ok_or("pi's pinned models.json: providers is not an object")?;
    let builtin = PI_PROVIDER_URLS
        .iter()
        .find(|(p, _)| *p == provider)
        .map(|(_, url)| *url);
    let entry = providers
        .entry(provider.clone())
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .ok_or_else(|| format!("pi's pinned models.json: providers.{provider} is not an object"))?;
    let url = match entry.get("baseUrl") {
        Some(Value::String(url)) => url.clone(),
        Some(_) => return Err(format!("providers.{provider}.baseUrl is not a string")),
        None => builtin.map(str::to_string).ok_or_else(|| {
            format!(
                "pi's provider {provider:?} (from {why}) has no baseUrl in the pinned \
                 models.json and is none of the built-in providers whose URL the host knows"
            )
        })?,
    };
    redirect_models(entry, &provider, &url, listener)?;
    entry.insert("baseUrl".into(), Value::String(listener.to_string()));
    let mut keys: Vec<String> = match entry.get("apiKey") {
        Some(Value::String(key)) => api_key_variables(key),
        _ => Vec::new(),
    };
    for key in pi_provider_keys(&provider) {
        if !keys.iter().any(|k| k == key) {
            keys.push(key.to_string());
        }
    }
    let mut bytes = serde_json::to_vec_pretty(&doc).map_err(|e| e.to_string())?;
    bytes.push(b'\n');
    Ok(RewrittenModels {
        provider,
        url,
        keys,
        bytes,
    })
}

/// Points each model and model override of `provider` (the object `entry`) whose `baseUrl`
/// is `url` at `listener`; one naming another URL is refused (its requests would carry the
/// placeholder there).
fn redirect_models(
    entry: &mut Map<String, Value>,
    provider: &str,
    url: &str,
    listener: &str,
) -> Result<(), String> {
    let same = |other: &str| other.trim_end_matches('/') == url.trim_end_matches('/');
    let point = |at: String, model: &mut Value| -> Result<(), String> {
        let Some(model) = model.as_object_mut() else {
            return Ok(());
        };
        match model.get("baseUrl") {
            None => Ok(()),
            Some(Value::String(other)) if same(other) => {
                model.insert("baseUrl".into(), Value::String(listener.to_string()));
                Ok(())
            }
            Some(other) => Err(format!(
                "{at}.baseUrl {other} is not the provider's {url:?}: the host carries one \
                 endpoint for provider {provider:?}"
            )),
        }
    };
    if let Some(Value::Array(models)) = entry.get_mut("models") {
        for (i, model) in models.iter_mut().enumerate() {
            point(format!("providers.{provider}.models[{i}]"), model)?;
        }
    }
    if let Some(Value::Object(overrides)) = entry.get_mut("modelOverrides") {
        for (id, model) in overrides.iter_mut() {
            point(format!("providers.{provider}.modelOverrides.{id}"), model)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn harness(model: &str) -> Harness {
        let yaml = format!("runtime: pi\nprompt: hi\nagent:\n  model: {model}\n");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("h.yaml");
        std::fs::write(&file, yaml).unwrap();
        let v = crate::harness::validate(&file).unwrap();
        v.harness.unwrap()
    }

    const LISTENER: &str = "http://127.0.0.1:17170";

    #[test]
    fn the_providers_base_url_and_its_models_go_to_the_listener() {
        let file = br#"{"providers": {
            "gw": {"baseUrl": "https://gw.example/v1", "apiKey": "GW_KEY", "api": "openai-completions",
                   "models": [{"id": "m"}, {"id": "n", "baseUrl": "https://gw.example/v1/"}]},
            "other": {"baseUrl": "https://other.example", "apiKey": "OTHER_KEY"}}}"#;
        let out = rewrite(&harness("gw/m"), &PiModelConfig::default(), file, LISTENER).unwrap();
        assert_eq!(out.provider, "gw");
        assert_eq!(out.url, "https://gw.example/v1");
        assert_eq!(out.keys, ["GW_KEY"]);
        let doc: Value = serde_json::from_slice(&out.bytes).unwrap();
        let gw = &doc["providers"]["gw"];
        assert_eq!(gw["baseUrl"], LISTENER);
        assert_eq!(gw["models"][1]["baseUrl"], LISTENER);
        assert!(gw["models"][0].get("baseUrl").is_none());
        assert_eq!(gw["api"], "openai-completions");
        // Another provider is left as it was.
        assert_eq!(
            doc["providers"]["other"]["baseUrl"],
            "https://other.example"
        );
    }

    #[test]
    fn a_built_in_provider_the_file_leaves_out_gets_the_listener_alone() {
        let file = br#"{"providers": {"gw": {"baseUrl": "https://gw.example"}}}"#;
        let out = rewrite(
            &harness("anthropic/claude-sonnet-4-5"),
            &PiModelConfig::default(),
            file,
            LISTENER,
        )
        .unwrap();
        assert_eq!(out.url, "https://api.anthropic.com");
        assert!(out.keys.contains(&"ANTHROPIC_API_KEY".to_string()));
        let doc: Value = serde_json::from_slice(&out.bytes).unwrap();
        assert_eq!(
            doc["providers"]["anthropic"],
            serde_json::json!({"baseUrl": LISTENER})
        );
    }

    #[test]
    fn a_model_elsewhere_or_a_provider_with_no_url_is_refused() {
        let elsewhere = br#"{"providers": {"gw": {"baseUrl": "https://gw.example",
            "models": [{"id": "m", "baseUrl": "https://evil.example"}]}}}"#;
        let err = rewrite(
            &harness("gw/m"),
            &PiModelConfig::default(),
            elsewhere,
            LISTENER,
        )
        .unwrap_err();
        assert!(err.contains("models[0].baseUrl"), "{err}");
        let no_url = br#"{"providers": {"gw": {"models": [{"id": "m"}]}}}"#;
        let err = rewrite(
            &harness("gw/m"),
            &PiModelConfig::default(),
            no_url,
            LISTENER,
        )
        .unwrap_err();
        assert!(err.contains("has no baseUrl"), "{err}");
        let err = rewrite(&harness("m"), &PiModelConfig::default(), no_url, LISTENER).unwrap_err();
        assert!(err.contains("names the provider"), "{err}");
    }

    #[test]
    fn settings_default_provider_names_the_provider() {
        let file = br#"{"providers": {"gw": {"baseUrl": "https://gw.example", "apiKey": "$GW"}}}"#;
        let pi = PiModelConfig {
            default_provider: Some("gw".into()),
            ..PiModelConfig::default()
        };
        let out = rewrite(&harness("m"), &pi, file, LISTENER).unwrap();
        assert_eq!(
            (out.provider.as_str(), out.keys.as_slice()),
            ("gw", &["GW".to_string()][..])
        );
    }
}
