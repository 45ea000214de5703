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
    api_key_variables, parse_pi_json, pi_provider, pi_provider_keys, read_models_json,
    PiModelConfig, MAX_CONFIG_BYTES, PI_PROVIDER_URLS,
};
use crate::manifest::model::CREDENTIAL_HEADERS;
use serde_json::{Map, Value};

/// pi's `models.json` with one provider sent to the model listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RewrittenModels {
    /// The provider, as the file (or pi's built-in list) names it.
    pub provider: String,
    /// The base URL the file named for it (or the built-in provider's): where the host sends
    /// its requests.
    pub url: String,
    /// The key variables the provider's requests carry where the host puts a key in: its
    /// `apiKey`'s (a built-in provider's own variables when it names none) and those of its
    /// and its models' credential headers (`Authorization`, `x-api-key`, `x-goog-api-key`).
    pub keys: Vec<String>,
    /// Other names its `apiKey` and headers mention (a `!command`'s words, a variable in
    /// another header): a key of that name would reach the provider only from the sandbox.
    pub unrouted: Vec<String>,
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
    let mut doc = parse_pi_json(bytes).map_err(|e| format!("pi's pinned models.json: {e}"))?;
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
    let (keys, unrouted) = key_variables(entry, &provider);
    // Compact: the size of what is uploaded stays within the size read.
    let mut bytes = serde_json::to_vec(&doc).map_err(|e| e.to_string())?;
    bytes.push(b'\n');
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(format!(
            "pi's pinned models.json rewritten is larger than {MAX_CONFIG_BYTES} bytes"
        ));
    }
    Ok(RewrittenModels {
        provider,
        url,
        keys,
        unrouted,
        bytes,
    })
}

/// The key variables of the provider `entry` the host puts a key in for, and the other names
/// its `apiKey` and headers mention. An `apiKey` decides alone (pi sends it, never a built-in
/// provider's variable, 0.73.1, 0.87.1 and 1.6.0); with none, a built-in provider's own.
fn key_variables(entry: &Map<String, Value>, provider: &str) -> (Vec<String>, Vec<String>) {
    let mut keys: Vec<String> = Vec::new();
    let mut unrouted: Vec<String> = Vec::new();
    let mut mentioned = |value: &str, routed: bool| {
        let vars = api_key_variables(value);
        for name in words(value) {
            let list = if routed && vars.contains(&name) {
                &mut keys
            } else {
                &mut unrouted
            };
            if !list.contains(&name) {
                list.push(name);
            }
        }
    };
    match entry.get("apiKey") {
        Some(Value::String(key)) => mentioned(key, !key.starts_with('!')),
        Some(_) => {}
        None => {
            for key in pi_provider_keys(provider) {
                mentioned(key, true);
            }
        }
    }
    let models = entry
        .get("models")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .chain(
            entry
                .get("modelOverrides")
                .and_then(Value::as_object)
                .into_iter()
                .flat_map(|o| o.values()),
        );
    for headers in std::iter::once(entry)
        .chain(models.filter_map(Value::as_object))
        .filter_map(|o| o.get("headers")?.as_object())
    {
        for (name, value) in headers {
            if let Value::String(value) = value {
                let routed = CREDENTIAL_HEADERS.contains(&name.to_ascii_lowercase().as_str())
                    && !value.starts_with('!');
                mentioned(value, routed);
            }
        }
    }
    unrouted.retain(|n| !keys.contains(n));
    (keys, unrouted)
}

/// The variable-like words of `value` (`[A-Za-z_][A-Za-z0-9_]*`), each once.
fn words(value: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for word in value.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        let named = word
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        if named && !out.iter().any(|w| w == word) {
            out.push(word.to_string());
        }
    }
    out
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

    #[test]
    fn keys_come_from_the_api_key_or_credential_headers_and_the_rest_is_unrouted() {
        let file = br#"{"providers": {"openai": {"baseUrl": "https://gw.example/v1",
            "apiKey": "!vault read GW_TOKEN",
            "headers": {"Authorization": "Bearer $GW_KEY", "X-Team": "$TEAM_SECRET"},
            "models": [{"id": "m", "headers": {"x-api-key": "${MODEL_KEY}"}}]}}}"#;
        let out = rewrite(
            &harness("openai/m"),
            &PiModelConfig::default(),
            file,
            LISTENER,
        )
        .unwrap();
        assert_eq!(out.keys, ["GW_KEY", "MODEL_KEY"]);
        // A command's words and another header's variable; never the built-in's variable.
        for name in ["GW_TOKEN", "TEAM_SECRET"] {
            assert!(
                out.unrouted.contains(&name.to_string()),
                "{:?}",
                out.unrouted
            );
        }
        assert!(!out.keys.contains(&"OPENAI_API_KEY".to_string()));
    }

    #[test]
    fn comments_and_trailing_commas_go_and_strings_stay_as_pi_reads_them() {
        use crate::harness::network::strip_json_comments;
        assert_eq!(
            strip_json_comments("{\"a\": \"x // y ,}\", // note\n \"b\": [1, 2,\n ],}"),
            "{\"a\": \"x // y ,}\", \n \"b\": [1, 2\n ]}"
        );
        // An escaped quote keeps the string open; an unclosed one is plain text to the end.
        assert_eq!(strip_json_comments(r#"["a\"//b",]"#), r#"["a\"//b"]"#);
        assert_eq!(strip_json_comments("\"open // c"), "\"open ");
    }

    #[test]
    fn a_models_json_pi_reads_with_comments_and_trailing_commas_is_rewritten() {
        // pi 0.73.1, 0.87.1 and 1.6.0 read models.json through stripJsonComments (`//` comments,
        // trailing commas; 0.87.1 and 1.6.0 a BOM too): the file below is one pi uses. Refused
        // here, the route falls back to handing the key in as it is.
        let file = "\u{feff}{\n  // the team's gateway\n  \"providers\": {\n    \"gw\": {\"baseUrl\": \"https://gw.example/v1\", \"apiKey\": \"GW_KEY\",},\n  },\n}\n";
        let out = rewrite(
            &harness("gw/m"),
            &PiModelConfig::default(),
            file.as_bytes(),
            LISTENER,
        );
        let out = out.unwrap();
        assert_eq!(out.url, "https://gw.example/v1");
    }

    #[test]
    fn the_rewritten_file_is_no_larger_than_the_size_read() {
        // The harness's file is read up to 16 MiB; pretty-printing a deeply nested one grows it
        // by its depth (each element on a line of its own, indented): a 16 MiB file becomes
        // gigabytes held by the host and uploaded. Here: ~200 KiB in.
        let depth = 100;
        let inner = vec!["0"; 100_000].join(",");
        let file = format!(
            "{{\"providers\": {{\"gw\": {{\"baseUrl\": \"https://gw.example\", \"x\": {}{inner}{}}}}}}}",
            "[".repeat(depth),
            "]".repeat(depth)
        );
        let out = rewrite(
            &harness("gw/m"),
            &PiModelConfig::default(),
            file.as_bytes(),
            LISTENER,
        )
        .unwrap();
        assert!(
            out.bytes.len() <= 2 * file.len() + 4096,
            "{} bytes in, {} out",
            file.len(),
            out.bytes.len()
        );
    }
}
