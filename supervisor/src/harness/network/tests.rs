use super::*;
use crate::harness::{validate, SandboxLayout};

fn endpoint(text: &str) -> Endpoint {
    Endpoint::parse(text).unwrap()
}

/// Validates `harness` in a directory that also holds `files` (path, content).
fn check(harness: &str, files: &[(&str, &str)]) -> Validated {
    let dir = tempfile::tempdir().unwrap();
    for (path, content) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    let file = dir.path().join("harness.yaml");
    std::fs::write(&file, harness).unwrap();
    validate(&file).unwrap()
}

/// The network a clean harness gets, and the one its manifest carries (the same).
fn network_of(v: &Validated) -> NetworkChoice {
    assert!(v.is_ok(), "{:?}", v.problems);
    let choice = v.network().unwrap();
    let manifest = v.manifest(&SandboxLayout::default()).unwrap();
    manifest.validate().unwrap();
    assert_eq!(manifest.network.as_ref(), Some(&choice.policy));
    choice
}

const PI_PINNED: &str = "runtime: pi\nprompt: hi\nagent:\n  model: scripted/scripted-model\n\
                         adapters:\n  - {path: config/models.json, role: config}\n  \
                         - {path: config/settings.json, role: config}\n";

const SCRIPTED_MODELS: &str = r#"{"providers": {"scripted": {
    "baseUrl": "http://127.0.0.1:8377/v1", "api": "openai-completions", "apiKey": "offline",
    "models": [{"id": "scripted-model"}]}}}"#;

#[test]
fn a_command_harness_reaches_nothing_by_default() {
    let v = check("runtime: command\ncommand: [/bin/true]\n", &[]);
    let choice = network_of(&v);
    assert_eq!(choice.policy, NetworkPolicy::None);
    assert!(!choice.explicit);
    assert_eq!(choice.summary(), "none (the runtime's default)");
}

#[test]
fn pi_reaches_the_providers_its_pinned_models_json_names() {
    let v = check(
        PI_PINNED,
        &[
            ("config/models.json", SCRIPTED_MODELS),
            ("config/settings.json", "{}"),
        ],
    );
    let choice = network_of(&v);
    assert_eq!(
        choice.policy,
        NetworkPolicy::allow(vec![endpoint("127.0.0.1:8377")])
    );
    assert_eq!(
        choice.summary(),
        "allow 127.0.0.1:8377 (models.json provider \"scripted\")"
    );
    assert!(choice.notes.is_empty(), "{:?}", choice.notes);
}

#[test]
fn pi_reaches_every_base_url_of_models_json_and_its_built_in_provider() {
    let models = r#"{"providers": {
        "local": {"baseUrl": "https://LLM.internal.example:8443/v1", "models": [
            {"id": "a"}, {"id": "b", "baseUrl": "http://[::1]:9000"}]},
        "anthropic": {"modelOverrides": {"claude-x": {"baseUrl": "https://gw.example/anthropic"}}}
    }}"#;
    let text = "runtime: pi\nprompt: hi\nagent:\n  model: anthropic/claude-sonnet-4-5\n\
                adapters:\n  - {path: config/models.json, role: config}\n";
    let choice = network_of(&check(text, &[("config/models.json", models)]));
    assert_eq!(
        choice.policy.allowed(),
        [
            endpoint("gw.example:443"),
            endpoint("llm.internal.example:8443"),
            endpoint("[::1]:9000"),
            endpoint("api.anthropic.com:443"),
        ]
    );
    assert_eq!(
        choice.sources,
        [
            "models.json provider \"anthropic\" model \"claude-x\"",
            "models.json provider \"local\"",
            "models.json provider \"local\" model \"b\"",
            "pi's built-in provider \"anthropic\", from agent.model",
        ]
    );
}

#[test]
fn a_provider_models_json_redirects_is_not_also_reached_at_its_built_in_host() {
    let models = r#"{"providers": {"openai": {"baseUrl": "http://127.0.0.1:8080/v1"}}}"#;
    let text = "runtime: pi\nprompt: hi\nagent:\n  model: openai/gpt-5\n\
                adapters:\n  - {path: config/models.json, role: config}\n";
    let choice = network_of(&check(text, &[("config/models.json", models)]));
    assert_eq!(choice.policy.allowed(), [endpoint("127.0.0.1:8080")]);
}

#[test]
fn pi_s_provider_comes_from_provider_then_model_then_settings() {
    let h = |model: Option<&str>, args: &[&str]| {
        let mut v = check("runtime: pi\nprompt: hi\n", &[]);
        let h = v.harness.as_mut().unwrap();
        h.agent.model = model.map(str::to_string);
        h.agent.args = args.iter().map(|a| a.to_string()).collect();
        v.harness.unwrap()
    };
    let settings = PiModelConfig {
        default_provider: Some("openai".into()),
        ..Default::default()
    };
    let hosts = |h: &Harness, pi: &PiModelConfig| {
        let choice = network_default(h, pi);
        (
            choice
                .policy
                .allowed()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            choice.sources,
        )
    };
    assert_eq!(
        hosts(
            &h(Some("anthropic/claude"), &["--provider", "groq"]),
            &settings
        ),
        (
            vec!["api.groq.com:443".to_string()],
            vec!["pi's built-in provider \"groq\", from agent.args --provider".to_string()]
        )
    );
    assert_eq!(
        hosts(&h(Some("x"), &["--provider=mistral"]), &settings).0,
        ["api.mistral.ai:443"]
    );
    assert_eq!(
        hosts(&h(Some("google/gemini-3"), &[]), &settings).0,
        ["generativelanguage.googleapis.com:443"]
    );
    // A prefix that names no provider is part of a model id (OpenRouter-style): the settings
    // decide.
    assert_eq!(
        hosts(&h(Some("moonshotai-like/kimi"), &[]), &settings).0,
        ["api.openai.com:443"]
    );
    assert_eq!(
        hosts(&h(None, &[]), &settings),
        (
            vec!["api.openai.com:443".to_string()],
            vec![
                "pi's built-in provider \"openai\", from settings.json defaultProvider".to_string()
            ]
        )
    );
}

#[test]
fn a_pi_provider_without_a_known_endpoint_allows_nothing_and_says_so() {
    let mut v = check("runtime: pi\nprompt: hi\n", &[]);
    let h = v.harness.take().unwrap();
    let choice = network_default(&h, &PiModelConfig::default());
    assert_eq!(choice.policy, NetworkPolicy::None);
    assert!(choice.notes[0].contains("name the model's endpoint in network:"));
    let bedrock = PiModelConfig {
        default_provider: Some("amazon-bedrock".into()),
        ..Default::default()
    };
    let choice = network_default(&h, &bedrock);
    assert_eq!(choice.policy, NetworkPolicy::None);
    assert!(
        choice.notes[0].contains("\"amazon-bedrock\"")
            && choice.notes[0].contains("no endpoint pitcrew knows"),
        "{:?}",
        choice.notes
    );
}

#[test]
fn claude_reaches_anthropic_base_url_or_the_anthropic_api() {
    let choice = network_of(&check("runtime: claude\nprompt: hi\n", &[]));
    assert_eq!(choice.policy.allowed(), [endpoint("api.anthropic.com:443")]);
    assert_eq!(
        choice.summary(),
        "allow api.anthropic.com:443 (Claude Code's API endpoint)"
    );
    let choice = network_of(&check(
        "runtime: claude\nprompt: hi\nenv:\n  ANTHROPIC_BASE_URL: \"http://127.0.0.1:8377\"\n",
        &[],
    ));
    assert_eq!(
        choice.summary(),
        "allow 127.0.0.1:8377 (env ANTHROPIC_BASE_URL)"
    );
}

#[test]
fn an_unreadable_endpoint_is_a_problem_at_its_place() {
    let v = check(
        "runtime: claude\nprompt: hi\nenv:\n  ANTHROPIC_BASE_URL: \"ftp://gw.example\"\n",
        &[],
    );
    let shown: Vec<String> = v.problems.iter().map(ToString::to_string).collect();
    assert!(
        shown
            .iter()
            .any(|p| p.starts_with("4:23: env.ANTHROPIC_BASE_URL: the default network")),
        "{shown:?}"
    );
    for (models, needle) in [
        ("not json", "not JSON"),
        (
            r#"{"providers": {"x": {"baseUrl": "gw.example"}}}"#,
            "providers.x.baseUrl",
        ),
        (r#"{"providers": {"x": {"baseUrl": 8080}}}"#, "not a string"),
        (
            r#"{"providers": {"x": {"models": [{"id": "m", "baseUrl": "https://u@gw.example"}]}}}"#,
            "credentials",
        ),
    ] {
        let v = check(
            PI_PINNED,
            &[
                ("config/models.json", models),
                ("config/settings.json", "{}"),
            ],
        );
        let shown: Vec<String> = v.problems.iter().map(ToString::to_string).collect();
        assert!(
            shown
                .iter()
                .any(|p| p.contains("adapters[0]: pi's models.json") && p.contains(needle)),
            "{models}: {shown:?}"
        );
    }
    let v = check(
        PI_PINNED,
        &[
            ("config/models.json", SCRIPTED_MODELS),
            ("config/settings.json", "[]"),
        ],
    );
    assert!(v.problems[0]
        .to_string()
        .contains("adapters[1]: pi's settings.json: not a JSON object"));
}

#[test]
fn the_default_follows_a_task_s_anthropic_base_url() {
    let mut v = check("runtime: claude\nprompt: hi\n", &[]);
    let o = crate::harness::Overrides {
        env: vec![(
            "ANTHROPIC_BASE_URL".into(),
            "https://gw.example:8443/x".into(),
        )],
        ..Default::default()
    };
    let h = v.harness.as_ref().unwrap().with_overrides(&o).unwrap();
    v.harness = Some(h);
    assert_eq!(
        network_of(&v).summary(),
        "allow gw.example:8443 (env ANTHROPIC_BASE_URL)"
    );
    let bad = crate::harness::Overrides {
        env: vec![("ANTHROPIC_BASE_URL".into(), "gw.example".into())],
        ..Default::default()
    };
    let problems = v
        .harness
        .as_ref()
        .unwrap()
        .with_overrides(&bad)
        .unwrap_err();
    assert!(
        problems[0].contains("the default network is read from it"),
        "{problems:?}"
    );
}

#[test]
fn an_explicit_network_wins_and_its_files_are_not_read() {
    let mut v = check(
        PI_PINNED,
        &[
            ("config/models.json", SCRIPTED_MODELS),
            ("config/settings.json", "{}"),
        ],
    );
    let h = v.harness.as_mut().unwrap();
    h.network = Some(NetworkPolicy::Open);
    let choice = network_of(&v);
    assert_eq!(choice.policy, NetworkPolicy::Open);
    assert!(choice.explicit);
    assert_eq!(choice.summary(), "open");
}

#[test]
fn base_urls_give_their_host_and_port() {
    for (url, want) in [
        ("http://127.0.0.1:8377/v1", "127.0.0.1:8377"),
        ("https://api.anthropic.com", "api.anthropic.com:443"),
        ("HTTPS://API.OpenAI.com/v1?x=1", "api.openai.com:443"),
        ("http://localhost", "localhost:80"),
        ("http://[::1]:9000/v1", "[::1]:9000"),
        ("https://[2001:db8::1]", "[2001:db8::1]:443"),
        ("https://gw.example#frag", "gw.example:443"),
    ] {
        assert_eq!(url_endpoint(url).unwrap().to_string(), want, "{url}");
    }
    for url in [
        "gw.example",
        "ftp://gw.example",
        "https://",
        "https://gw.example:0",
        "https://gw.example:99999",
        "https://user:pw@gw.example",
        "https://gw example",
    ] {
        assert!(url_endpoint(url).is_err(), "{url}");
    }
}

#[test]
fn the_built_in_hosts_are_endpoints() {
    for (provider, host) in PI_PROVIDER_HOSTS {
        assert_eq!(
            Endpoint::parse(&format!("{host}:443")).unwrap().host,
            *host,
            "{provider}"
        );
    }
    assert!(Endpoint::parse(&format!("{CLAUDE_API_HOST}:443")).is_ok());
}

#[test]
fn claude_on_another_backend_reaches_its_base_url_or_says_what_to_name() {
    let choice = network_of(&check(
        "runtime: claude\nprompt: hi\nenv:\n  CLAUDE_CODE_USE_BEDROCK: \"1\"\n  \
         ANTHROPIC_BEDROCK_BASE_URL: \"https://bedrock.gw.example\"\n  \
         ANTHROPIC_BASE_URL: \"http://127.0.0.1:8377\"\n",
        &[],
    ));
    assert_eq!(
        choice.summary(),
        "allow bedrock.gw.example:443 (env ANTHROPIC_BEDROCK_BASE_URL)"
    );
    let choice = network_of(&check(
        "runtime: claude\nprompt: hi\nenv:\n  CLAUDE_CODE_USE_VERTEX: \"true\"\n",
        &[],
    ));
    assert_eq!(choice.policy, NetworkPolicy::None);
    assert!(
        choice.notes[0].contains("ANTHROPIC_VERTEX_BASE_URL is unset"),
        "{:?}",
        choice.notes
    );
    // Switched off, the switch changes nothing.
    let choice = network_of(&check(
        "runtime: claude\nprompt: hi\nenv:\n  CLAUDE_CODE_USE_FOUNDRY: \"0\"\n",
        &[],
    ));
    assert_eq!(choice.policy.allowed(), [endpoint("api.anthropic.com:443")]);
    let v = check(
        "runtime: claude\nprompt: hi\nenv:\n  ANTHROPIC_VERTEX_BASE_URL: vertex.example\n",
        &[],
    );
    assert!(
        v.problems[0]
            .to_string()
            .contains("env.ANTHROPIC_VERTEX_BASE_URL: the default network is read from it"),
        "{:?}",
        v.problems
    );
}

#[test]
fn pi_reaches_the_azure_endpoint_its_environment_names() {
    let choice = network_of(&check(
        "runtime: pi\nprompt: hi\nagent:\n  model: azure-openai-responses/gpt-5\nenv:\n  \
         AZURE_OPENAI_RESOURCE_NAME: my-team\n",
        &[],
    ));
    assert_eq!(
        choice.policy.allowed(),
        [endpoint("my-team.openai.azure.com:443")]
    );
    assert_eq!(choice.sources, ["env AZURE_OPENAI_RESOURCE_NAME"]);
    // The provider itself has no endpoint pitcrew knows: said, beside the one allowed.
    assert!(choice.notes[0].contains("\"azure-openai-responses\""));
    let choice = network_of(&check(
        "runtime: pi\nprompt: hi\nenv:\n  AZURE_OPENAI_BASE_URL: \"https://gw.example:8443/openai/v1\"\n  \
         AZURE_OPENAI_RESOURCE_NAME: ignored\n",
        &[],
    ));
    assert_eq!(
        choice.summary(),
        "allow gw.example:8443 (env AZURE_OPENAI_BASE_URL)"
    );
}

#[test]
fn the_variables_an_api_key_reads_in_each_pi_release_are_found() {
    for (key, want) in [
        ("SCRIPTED_MODEL_KEY", vec!["SCRIPTED_MODEL_KEY"]),
        ("$OPENAI_API_KEY", vec!["OPENAI_API_KEY"]),
        ("${A}-${B_2}", vec!["A", "B_2"]),
        ("Bearer $TOKEN.x", vec!["TOKEN"]),
        ("$$NOT $!NOT", vec![]),
        ("!cat /secret", vec![]),
        ("sk-literal", vec![]),
        ("${unclosed", vec![]),
        ("", vec![]),
    ] {
        assert_eq!(api_key_variables(key), want, "{key:?}");
    }
}

#[test]
fn plain_endpoints_and_key_variables_are_read_from_models_json() {
    let m = read_models_json(
        br#"{"providers": {
            "a": {"baseUrl": "http://127.0.0.1:8377/v1", "apiKey": "$A_KEY"},
            "b": {"baseUrl": "https://api.example.com/v1", "apiKey": "B_KEY"},
            "c": {"apiKey": "literal-key", "models": [{"id": "m", "baseUrl": "HTTP://localhost:9"}]}
        }}"#,
    )
    .unwrap();
    assert_eq!(
        m.plain_endpoints,
        [endpoint("127.0.0.1:8377"), endpoint("localhost:9")]
    );
    assert_eq!(m.api_key_vars, ["A_KEY", "B_KEY"]);
}
