//! TLS and proxy settings from the trusted layers, end to end through `pitcrew run` and the
//! local engine: what `--pass-env` passes (the supervisor's baseline, where a container's image
//! environment would be) and what the harness `env:` sets reach a `command` agent and the
//! record names their layer; a workspace `.env` (untrusted: the repository or an earlier
//! iteration writes it) replaces none of them (proxies and CA, the telemetry endpoint and a
//! setting of the operator's own), each of its lines refused by name naming the layer; pi's
//! self-update, managed-install and terminal-log variables are refused by `--pass-env` before a
//! sandbox starts.
//!
//! Needs root and PID namespaces (`unshare --pid --fork --mount-proc`); skipped otherwise, or a
//! failure with `PITCREW_REQUIRE_E2E=1`.
#![allow(non_snake_case)] // attack tests are named attack_<class>__<case> (scripts/security-report)

use pitcrew_e2e::{
    iteration_dir, pitcrew_run, read_json, read_text, require_pid_namespaces, LocalFixture,
};

/// The agent's environment as it wrote it (`env > output/env`): (name, value) pairs.
fn agent_env(text: &str) -> Vec<(&str, &str)> {
    text.lines().filter_map(|l| l.split_once('=')).collect()
}

#[test]
fn attack_env__a_workspace_dotenv_cannot_replace_the_ca_and_proxy_passed_with_pass_env() {
    if !require_pid_namespaces() {
        return;
    }
    let fx = LocalFixture::new(
        "mkdir -p output\nenv > output/env",
        1,
        "dotenv: .env\nenv:\n  OPENSSL_CONF: /etc/ssl/harness-openssl.cnf\n",
        false,
    );
    // The repository's `.env` tries to make the agent trust its CA, read its OpenSSL
    // configuration and send its traffic through its proxy.
    std::fs::write(
        fx.root.join("workspace/.env"),
        "NODE_EXTRA_CA_CERTS=/tmp/planted-ca.pem\n\
         OPENSSL_CONF=/tmp/planted-openssl.cnf\n\
         HTTPS_PROXY=http://127.0.0.1:9/planted\n\
         GREETING=kept\n",
    )
    .unwrap();
    let doc = pitcrew_run(
        &fx.harness,
        &fx.state,
        &[
            "--pass-env",
            "NODE_EXTRA_CA_CERTS",
            "--pass-env",
            "SSL_CERT_FILE",
            "--pass-env",
            "HTTPS_PROXY",
        ],
        &[
            ("NODE_EXTRA_CA_CERTS", "/etc/ssl/operator-ca.pem"),
            ("SSL_CERT_FILE", "/etc/ssl/operator-bundle.pem"),
            ("HTTPS_PROXY", "http://proxy.operator.example:3128"),
            // In pitcrew's environment but not passed: it does not arrive.
            ("SSL_CERT_DIR", "/etc/ssl/not-passed"),
        ],
    );
    let it = iteration_dir(&doc, 1);
    let record = read_json(&it.join("result.json"));
    assert_eq!(record["exit_code"], 0, "{record:#}");
    let text = read_text(&it.join("output/env"));
    let env = agent_env(&text);
    let value_of = |name: &str| env.iter().find(|(k, _)| *k == name).map(|(_, v)| *v);
    let layers = &record["env"]["layers"];
    // What `--pass-env` passed is named as such (the manifest's `env.passed`), apart from the
    // image's own environment.
    for (name, value, layer) in [
        (
            "NODE_EXTRA_CA_CERTS",
            "/etc/ssl/operator-ca.pem",
            "pass-env",
        ),
        ("SSL_CERT_FILE", "/etc/ssl/operator-bundle.pem", "pass-env"),
        (
            "HTTPS_PROXY",
            "http://proxy.operator.example:3128",
            "pass-env",
        ),
        ("OPENSSL_CONF", "/etc/ssl/harness-openssl.cnf", "harness"),
        ("GREETING", "kept", "dotenv"),
    ] {
        assert_eq!(value_of(name), Some(value), "{name}:\n{text}");
        assert_eq!(layers[name], layer, "{name}: {layers}");
    }
    assert_eq!(value_of("SSL_CERT_DIR"), None, "{text}");
    assert!(!text.contains("planted"), "{text}");
    let refused: Vec<(u64, &str)> = record["env"]["dotenv_refused"]
        .as_array()
        .expect("dotenv_refused")
        .iter()
        .map(|r| {
            (
                r["line"].as_u64().unwrap_or(0),
                r["name"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        refused,
        [
            (1, "NODE_EXTRA_CA_CERTS"),
            (2, "OPENSSL_CONF"),
            (3, "HTTPS_PROXY")
        ],
        "{record:#}"
    );
    assert!(!record.to_string().contains("planted"), "{record:#}");
}

#[test]
fn attack_env__a_workspace_dotenv_cannot_redirect_the_telemetry_passed_with_pass_env() {
    if !require_pid_namespaces() {
        return;
    }
    let fx = LocalFixture::new(
        "mkdir -p output\nenv > output/env",
        1,
        "dotenv: .env\n",
        false,
    );
    // The operator sends the runtime's telemetry to its collector with a bearer token, and
    // passes a setting of its own; the repository's `.env` points the telemetry at itself (the
    // operator's token would follow) and swaps the setting.
    std::fs::write(
        fx.root.join("workspace/.env"),
        "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:9/planted\n\
         FOO_SETTING=planted\n\
         GREETING=kept\n",
    )
    .unwrap();
    let passed = [
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "https://otel.operator.example:4318",
        ),
        (
            "OTEL_EXPORTER_OTLP_HEADERS",
            "Authorization=Bearer operator-token",
        ),
        ("FOO_SETTING", "operator"),
    ];
    let mut args = Vec::new();
    for (name, _) in passed {
        args.extend(["--pass-env", name]);
    }
    let doc = pitcrew_run(&fx.harness, &fx.state, &args, &passed);
    let it = iteration_dir(&doc, 1);
    let record = read_json(&it.join("result.json"));
    assert_eq!(record["exit_code"], 0, "{record:#}");
    let text = read_text(&it.join("output/env"));
    let env = agent_env(&text);
    let value_of = |name: &str| env.iter().find(|(k, _)| *k == name).map(|(_, v)| *v);
    let layers = &record["env"]["layers"];
    for (name, value) in passed {
        assert_eq!(value_of(name), Some(value), "{name}:\n{text}");
        assert_eq!(layers[name], "pass-env", "{name}: {layers}");
    }
    assert_eq!(value_of("GREETING"), Some("kept"), "{text}");
    assert_eq!(layers["GREETING"], "dotenv", "{layers}");
    assert!(!text.contains("planted"), "{text}");
    // The record names each refused line, its name and the layer whose value stayed.
    let refused: Vec<(u64, &str, bool)> = record["env"]["dotenv_refused"]
        .as_array()
        .expect("dotenv_refused")
        .iter()
        .map(|r| {
            (
                r["line"].as_u64().unwrap_or(0),
                r["name"].as_str().unwrap_or_default(),
                r["reason"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("pass-env"),
            )
        })
        .collect();
    assert_eq!(
        refused,
        [
            (1, "OTEL_EXPORTER_OTLP_ENDPOINT", true),
            (2, "FOO_SETTING", true)
        ],
        "{record:#}"
    );
    let json = record.to_string();
    assert!(
        !json.contains("planted") && !json.contains("operator-token"),
        "{record:#}"
    );
}

#[test]
fn pass_env_refuses_pis_update_install_and_terminal_log_variables() {
    if !require_pid_namespaces() {
        return;
    }
    let fx = LocalFixture::new("true", 1, "", false);
    let harness = fx.harness.to_str().unwrap();
    for name in [
        "PI_SELF_UPDATE_COMMAND",
        "PI_INSTALLER_API_BASE",
        "PI_MANAGED_INSTALL_ROOT",
        "PI_TUI_WRITE_LOG",
    ] {
        let out = fx
            .pitcrew(&["run", harness, "--pass-env", name])
            .env(name, "/tmp/planted")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "--pass-env {name}: refused by the loader rule {name} ("
            )),
            "{name}: {stderr}"
        );
    }
    assert!(fx.sandboxes().is_empty(), "a sandbox was started");
}

#[test]
fn attack_env__a_workspace_dotenv_cannot_replace_what_pass_env_passed_when_the_sandbox_is_run_again(
) {
    if !require_pid_namespaces() {
        return;
    }
    let fx = LocalFixture::new(
        "mkdir -p output\nenv > output/env",
        1,
        "dotenv: .env\n",
        false,
    );
    // The repository's `.env` swaps a setting the operator passes.
    std::fs::write(fx.root.join("workspace/.env"), "FOO_SETTING=planted\n").unwrap();
    let passed = [("FOO_SETTING", "operator")];
    // The operator starts a sandbox with `--pass-env` and keeps it: the value stays.
    let doc = pitcrew_run(
        &fx.harness,
        &fx.state,
        &["--keep", "--pass-env", "FOO_SETTING"],
        &passed,
    );
    let it = iteration_dir(&doc, 1);
    let text = read_text(&it.join("output/env"));
    assert!(
        text.contains("FOO_SETTING=operator\n"),
        "first run:\n{text}"
    );
    // The next run in the same sandbox (`--pass-env` is refused there: "its environment was
    // set when it was started"); the passed value is still the supervisor's, from the operator.
    let id = doc["sandbox"].as_str().expect("sandbox id").to_string();
    let doc = pitcrew_run(&fx.harness, &fx.state, &["--sandbox", &id], &[]);
    // The sandbox numbers its iterations across runs: this one is its second.
    let it = std::path::PathBuf::from(doc["iterations"][0]["record_dir"].as_str().unwrap());
    let record = read_json(&it.join("result.json"));
    let text = read_text(&it.join("output/env"));
    assert!(
        text.contains("FOO_SETTING=operator\n"),
        "second run: the .env replaced what --pass-env passed (layer {}):\n{text}",
        record["env"]["layers"]["FOO_SETTING"]
    );
}

/// The harness sets `XDG_CONFIG_HOME` to a directory of the workspace (`.xdg`, resolved in the
/// workdir where the runtime runs its tools): what the first iteration's agent writes there, a
/// git alias that runs a program, would be the next iteration's git configuration. The variable
/// is removed from every iteration's environment and named in the record; the second
/// iteration's git reads no alias.
#[test]
fn attack_env__a_trusted_xdg_home_in_the_workspace_does_not_carry_config_to_the_next_iteration() {
    if !require_pid_namespaces() {
        return;
    }
    let script = "mkdir -p output\n\
        if [ -f .xdg/git/config ]; then\n\
          echo \"xdg=${XDG_CONFIG_HOME:-unset}\" > output/seen\n\
          git config --get alias.planted >> output/seen || echo no-alias >> output/seen\n\
        else\n\
          mkdir -p .xdg/git\n\
          printf '[alias]\\n\\tplanted = !echo PLANTED\\n' > .xdg/git/config\n\
        fi";
    let fx = LocalFixture::new(
        script,
        2,
        "keep_output: true\nenv:\n  XDG_CONFIG_HOME: .xdg\n",
        false,
    );
    let doc = pitcrew_run(&fx.harness, &fx.state, &[], &[]);
    assert_eq!(doc["exit_code"], 0, "{doc:#}");
    let seen = read_text(&iteration_dir(&doc, 2).join("output/seen"));
    assert_eq!(seen, "xdg=unset\nno-alias\n", "{seen}");
    for n in [1, 2] {
        let record = read_json(&iteration_dir(&doc, n).join("result.json"));
        let removed = record["env"]["removed"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(
            removed
                .iter()
                .any(|r| r["name"] == "XDG_CONFIG_HOME" && r["source"] == "harness"),
            "iteration {n}: {record:#}"
        );
    }
}
