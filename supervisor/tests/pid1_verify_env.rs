//! Verification and environment as seen from outside and from inside the agent: a tree changed
//! after the manifest was made fails with 96 and names the path, an adapter with 97, a config
//! with 98, and nothing is launched; loader variables planted in the baseline or the `.env`
//! never reach the agent, and `JITI_FS_CACHE=false` does; proxy, TLS-trust and program-choosing
//! variables reach it from the trusted layers (the image's environment, the harness `env:`) and
//! never from the untrusted ones (the `.env`, a plugin's `env:`): an image's CA and a harness's
//! OpenSSL configuration stay when the `.env` tries to replace them; an over-long `.env` is refused
//! by name instead of breaking every launch; the record names each variable's layer.
#![allow(non_snake_case)] // attack tests are named attack_<class>__<case> (scripts/security-report)

mod common;
use common::{require_root_and_namespaces, Sandbox};
use pitcrew_core::tree_hash::{hash_tree, sha256_file, TreeFormat};
use serde_json::{json, Value};
use std::fs;
use std::path::Path;
use std::process::Command;

/// An agent that leaves a marker: if it exists, something was launched.
const MARK_LAUNCH: &str = "touch $W/launched";

fn tree_pin(name: &str, path: &Path) -> Value {
    let digest = hash_tree(path, TreeFormat::PiTreeV1).expect("hash tree");
    json!({
        "name": name, "path": path, "role": "plugin", "kind": "data", "format": "pi-tree-v1",
        "sha256": digest.sha256, "files": digest.listing.files, "dirs": digest.listing.dirs,
    })
}

fn file_pin(path: &Path, role: &str) -> Value {
    let rec = sha256_file(path).expect("hash file");
    json!({"path": path, "role": role, "sha256": rec.sha256, "size": rec.size})
}

fn plugin_tree(sandbox: &Sandbox) -> std::path::PathBuf {
    let tree = sandbox.path("plugins/hello");
    fs::create_dir_all(tree.join("lib")).expect("mkdir");
    fs::write(tree.join("index.js"), "module.exports = () => {};\n").expect("write");
    fs::write(tree.join("lib/util.js"), "exports.x = 1;\n").expect("write");
    tree
}

#[test]
fn attack_verified_trees__a_tree_changed_after_the_manifest_fails_96_and_names_the_path() {
    if !require_root_and_namespaces() {
        return;
    }
    type Mutation = (&'static str, fn(&Path), &'static str, &'static str);
    let mutations: [Mutation; 5] = [
        (
            "file edited",
            |t| fs::write(t.join("lib/util.js"), "exports.x = 2;\n").expect("edit"),
            "changed",
            "lib/util.js",
        ),
        (
            "file added",
            |t| fs::write(t.join("lib/extra.js"), "evil()\n").expect("add"),
            "added",
            "lib/extra.js",
        ),
        (
            "empty directory added",
            |t| fs::create_dir(t.join("skills")).expect("mkdir"),
            "added",
            "skills/",
        ),
        (
            "symlink planted",
            |t| std::os::unix::fs::symlink("/etc/passwd", t.join("lib/link.js")).expect("symlink"),
            "refused",
            "lib/link.js",
        ),
        (
            "file replaced by a fifo",
            |t| {
                fs::remove_file(t.join("index.js")).expect("rm");
                let status = Command::new("mkfifo")
                    .arg(t.join("index.js"))
                    .status()
                    .expect("mkfifo");
                assert!(status.success());
            },
            "refused",
            "index.js",
        ),
    ];
    for (what, mutate, status, path) in mutations {
        let mut sandbox = Sandbox::sh(MARK_LAUNCH);
        let tree = plugin_tree(&sandbox);
        sandbox.manifest["trees"] = json!([tree_pin("hello", &tree)]);
        mutate(&tree);
        let run = sandbox.run_pid1();
        assert_eq!(run.code, 96, "{what}: {}\n{}", run.record, run.stderr);
        assert_eq!(run.record["exit_code"], 96, "{what}");
        let reason = run.record["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains(path),
            "{what}: reason {reason:?} must name {path}"
        );
        let check = &run.record["verification"]["trees"][0];
        assert_eq!(
            check["status"],
            if status == "refused" {
                "refused"
            } else {
                "drifted"
            },
            "{what}: {check}"
        );
        if status != "refused" {
            let listed = check["drift"][status].as_array().expect("drift list");
            assert!(listed.iter().any(|p| p == path), "{what}: drift {check}");
        }
        assert!(
            run.record["agent"].is_null(),
            "{what}: nothing may be launched"
        );
        assert!(
            !sandbox.workdir.join("launched").exists(),
            "{what}: the agent ran"
        );
    }
}

#[test]
fn a_missing_tree_fails_96() {
    if !require_root_and_namespaces() {
        return;
    }
    let mut sandbox = Sandbox::sh(MARK_LAUNCH);
    let tree = plugin_tree(&sandbox);
    sandbox.manifest["trees"] = json!([tree_pin("hello", &tree)]);
    fs::remove_dir_all(&tree).expect("rm tree");
    let run = sandbox.run_pid1();
    assert_eq!(run.code, 96, "{}", run.record);
    assert_eq!(run.record["verification"]["trees"][0]["status"], "missing");
    assert!(!sandbox.workdir.join("launched").exists());
}

#[test]
fn pinned_files_fail_with_their_role_code() {
    if !require_root_and_namespaces() {
        return;
    }
    for (role, code) in [
        ("hook-adapter", 97),
        ("config", 98),
        ("runtime-manifest", 95),
    ] {
        let mut sandbox = Sandbox::sh(MARK_LAUNCH);
        let file = sandbox.path("adapter.js");
        fs::write(&file, "module.exports = () => {};\n").expect("write");
        sandbox.manifest["files"] = json!([file_pin(&file, role)]);
        fs::write(&file, "module.exports = () => { allowEverything() };\n").expect("tamper");
        let run = sandbox.run_pid1();
        assert_eq!(run.code, code, "{role}: {}", run.record);
        let reason = run.record["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("adapter.js"), "{role}: {reason}");
        assert!(
            !sandbox.workdir.join("launched").exists(),
            "{role}: the agent ran"
        );
    }
    // A missing hook adapter is 97 too (pi would silently skip a missing -e path).
    let mut sandbox = Sandbox::sh(MARK_LAUNCH);
    let file = sandbox.path("hooks.js");
    fs::write(&file, "x").expect("write");
    sandbox.manifest["files"] = json!([file_pin(&file, "hook-adapter")]);
    fs::remove_file(&file).expect("rm");
    let run = sandbox.run_pid1();
    assert_eq!(run.code, 97, "{}", run.record);
    assert_eq!(run.record["verification"]["files"][0]["status"], "missing");
}

#[test]
fn an_untouched_sandbox_verifies_and_launches() {
    if !require_root_and_namespaces() {
        return;
    }
    let mut sandbox = Sandbox::sh(MARK_LAUNCH);
    let tree = plugin_tree(&sandbox);
    let file = sandbox.path("hooks.js");
    fs::write(&file, "module.exports = () => {};\n").expect("write");
    sandbox.manifest["trees"] = json!([tree_pin("hello", &tree)]);
    sandbox.manifest["files"] = json!([file_pin(&file, "hook-adapter")]);
    let run = sandbox.run_pid1();
    assert_eq!(run.code, 0, "{}\n{}", run.record, run.stderr);
    assert_eq!(run.record["verification"]["trees"][0]["status"], "ok");
    assert_eq!(run.record["verification"]["files"][0]["status"], "ok");
    assert!(sandbox.workdir.join("launched").exists());
}

#[test]
fn attack_env__loader_variables_never_reach_the_agent() {
    if !require_root_and_namespaces() {
        return;
    }
    let mut sandbox = Sandbox::sh("env > $W/env");
    let dotenv = sandbox.workdir.join(".env");
    fs::write(
        &dotenv,
        "# written by an earlier iteration\n\
         export NODE_OPTIONS='--require /tmp/evil.js'\n\
         JITI_ALIAS={\"x\":\"/tmp/evil.js\"}\n\
         LD_PRELOAD=/tmp/evil.so\n\
         JITI_FS_CACHE=true\n\
         GREETING=\"hello $LANG\"\n\
         evil() { curl x; }\n\
         STOLEN=$(cat /etc/shadow)\n",
    )
    .expect("write .env");
    sandbox.manifest["env"] = json!({"dotenv": dotenv, "set": {"LANG": "C.UTF-8"}});
    // HOME and TMPDIR of their own: the supervisor empties both before the iteration.
    sandbox.manifest["dirs"] = json!({"tmp": sandbox.path("tmp"), "home": sandbox.path("home")});
    // The baseline (the image's environment) carries loader variables too.
    let run = sandbox.run_pid1_with_env(&[
        ("NODE_PATH", "/tmp/evil_modules"),
        ("JITI_DEBUG", "1"),
        ("BASH_ENV", "/tmp/evil.sh"),
        ("PYTHONSTARTUP", "/tmp/evil.py"),
        // pi's self-update and managed install, and its terminal log.
        ("PI_INSTALLER_API_BASE", "http://127.0.0.1:9/evil-releases"),
        ("PI_MANAGED_INSTALL_ROOT", "/tmp/evil-install"),
        ("PI_TUI_WRITE_LOG", "/tmp/evil-log"),
    ]);
    let record = run.record;
    assert_eq!(run.code, 0, "{record}\n{}", run.stderr);

    let env = fs::read_to_string(sandbox.workdir.join("env")).expect("agent env");
    let names: Vec<&str> = env.lines().filter_map(|l| l.split('=').next()).collect();
    for planted in [
        "NODE_OPTIONS",
        "JITI_ALIAS",
        "LD_PRELOAD",
        "NODE_PATH",
        "JITI_DEBUG",
        "BASH_ENV",
        "PYTHONSTARTUP",
        "PI_INSTALLER_API_BASE",
        "PI_MANAGED_INSTALL_ROOT",
        "PI_TUI_WRITE_LOG",
        "STOLEN",
    ] {
        assert!(
            !names.contains(&planted),
            "{planted} reached the agent:\n{env}"
        );
    }
    assert!(env.lines().any(|l| l == "JITI_FS_CACHE=false"), "{env}");
    assert!(env.lines().any(|l| l == "GREETING=hello C.UTF-8"), "{env}");
    assert!(!env.contains("evil"), "{env}");

    // The record names what was removed (names and sources, never values) and the refused lines.
    let removed = record["env"]["removed"].as_array().expect("removed");
    let removed_names: Vec<&str> = removed.iter().filter_map(|r| r["name"].as_str()).collect();
    for name in [
        "NODE_OPTIONS",
        "JITI_ALIAS",
        "LD_PRELOAD",
        "NODE_PATH",
        "JITI_DEBUG",
        "BASH_ENV",
        "PYTHONSTARTUP",
        "PI_INSTALLER_API_BASE",
        "PI_MANAGED_INSTALL_ROOT",
        "PI_TUI_WRITE_LOG",
    ] {
        assert!(
            removed_names.contains(&name),
            "{name} not reported: {removed:?}"
        );
    }
    let refused_lines: Vec<u64> = record["env"]["dotenv_refused"]
        .as_array()
        .expect("refused")
        .iter()
        .filter_map(|r| r["line"].as_u64())
        .collect();
    assert!(
        refused_lines.contains(&7) && refused_lines.contains(&8),
        "{record}"
    );
    let text = record.to_string();
    assert!(
        !text.contains("evil"),
        "a value leaked into the record: {text}"
    );
}

#[test]
fn a_path_planted_through_dotenv_never_picks_the_agents_interpreter() {
    if !require_root_and_namespaces() {
        return;
    }
    // The agent is a `#!/usr/bin/env sh` script (pi's cli.js is `#!/usr/bin/env node`). An
    // earlier iteration planted a fake `sh` in the writable workspace and put it first on PATH
    // through the agent-writable `.env`.
    let mut sandbox = Sandbox::sh("unused");
    let agent = sandbox.path("agent");
    fs::write(
        &agent,
        "#!/usr/bin/env sh\necho \"real agent ran\" > \"$1\"\n",
    )
    .expect("agent");
    fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let bin = sandbox.workdir.join("bin");
    fs::create_dir(&bin).expect("bin");
    let fake = bin.join("sh");
    let marker = sandbox.workdir.join("hijacked");
    fs::write(&fake, format!("#!/bin/sh\ntouch {}\n", marker.display())).expect("fake sh");
    fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let dotenv = sandbox.workdir.join(".env");
    fs::write(&dotenv, format!("PATH={}:$PATH\n", bin.display())).expect(".env");
    let out = sandbox.workdir.join("out");
    sandbox.manifest["agent"] = json!({"binary": agent, "args": [out]});
    sandbox.manifest["env"] = json!({"dotenv": dotenv});
    let run = sandbox.run_pid1();
    assert_eq!(run.code, 0, "{}\n{}", run.record, run.stderr);
    let interpreter = run.record["verification"]["agent"]["interpreter"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        interpreter.ends_with("/sh")
            && !interpreter.starts_with(&*sandbox.workdir.to_string_lossy()),
        "{}",
        run.record
    );
    assert!(!marker.exists(), "the planted interpreter ran");
    assert_eq!(
        fs::read_to_string(&out).expect("agent output"),
        "real agent ran\n"
    );
}

/// The agent's environment as it printed it (`env > $W/env`): (name, value) pairs.
fn agent_env(sandbox: &Sandbox) -> Vec<(String, String)> {
    let text = fs::read_to_string(sandbox.workdir.join("env")).expect("agent env");
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn value_of<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
    env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// A sandbox whose agent prints its environment, with the `.env` at `$W/.env` holding `dotenv`.
fn env_printing_sandbox(dotenv: &str) -> Sandbox {
    let mut sandbox = Sandbox::sh("env > $W/env");
    let path = sandbox.workdir.join(".env");
    fs::write(&path, dotenv).expect("write .env");
    sandbox.manifest["env"] = json!({"dotenv": path});
    sandbox
}

/// The `.env` refusals of a record as (line, name, reason).
fn dotenv_refusals(record: &Value) -> Vec<(u64, String, String)> {
    record["env"]["dotenv_refused"]
        .as_array()
        .expect("dotenv_refused")
        .iter()
        .map(|r| {
            (
                r["line"].as_u64().unwrap_or(0),
                r["name"].as_str().unwrap_or_default().to_string(),
                r["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Plants each `(name, value)` in a `.env` (one line each, in order) and checks that none
/// reaches the agent, that each is refused by name on its line, and that no value is recorded.
fn assert_dotenv_names_refused(planted: &[(&str, &str)]) {
    let mut dotenv = String::from("# written by an earlier iteration\nGREETING=kept\n");
    for (name, value) in planted {
        dotenv.push_str(&format!("export {name}='{value}'\n"));
    }
    let sandbox = env_printing_sandbox(&dotenv);
    let run = sandbox.run_pid1();
    assert_eq!(run.code, 0, "{}\n{}", run.record, run.stderr);
    let env = agent_env(&sandbox);
    assert_eq!(value_of(&env, "GREETING"), Some("kept"), "{env:?}");
    for (name, value) in planted {
        assert!(
            !env.iter().any(|(_, v)| v == value),
            "{name}={value} reached the agent: {env:?}"
        );
    }
    let refusals = dotenv_refusals(&run.record);
    for (i, (name, _)) in planted.iter().enumerate() {
        let line = i as u64 + 3;
        assert!(
            refusals
                .iter()
                .any(|(l, n, reason)| *l == line && n == name && !reason.is_empty()),
            "{name} (line {line}) not refused by name: {refusals:?}"
        );
    }
    let text = run.record.to_string();
    for (_, value) in planted {
        assert!(
            !text.contains(value),
            "a value leaked into the record: {text}"
        );
    }
}

#[test]
fn attack_env__dotenv_https_proxy_and_ca_are_refused() {
    if !require_root_and_namespaces() {
        return;
    }
    // An earlier iteration routes the runtime's model traffic, API key included, through a proxy
    // it runs, and makes the runtime trust that proxy's certificate.
    assert_dotenv_names_refused(&[
        ("HTTPS_PROXY", "http://127.0.0.1:9/planted-upper"),
        ("https_proxy", "http://127.0.0.1:9/planted-lower"),
        ("ALL_PROXY", "socks5://127.0.0.1:9/planted-all"),
        ("NO_PROXY", "planted-no-proxy"),
        ("NODE_USE_ENV_PROXY", "planted-1"),
        ("NODE_EXTRA_CA_CERTS", "/tmp/planted-ca.pem"),
        ("NODE_TLS_REJECT_UNAUTHORIZED", "planted-0"),
        ("SSL_CERT_FILE", "/tmp/planted-cert.pem"),
        ("REQUESTS_CA_BUNDLE", "/tmp/planted-bundle.pem"),
        ("OPENSSL_CONF", "/tmp/planted-openssl.cnf"),
        ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/planted-base-url"),
    ]);
}

#[test]
fn attack_egress__dotenv_cannot_point_the_runtime_past_pitcrews_proxy() {
    if !require_root_and_namespaces() {
        return;
    }
    // The agent writes the `.env` its next iteration starts with: every way it could send the
    // runtime's connections somewhere the harness's `network:` does not say (a proxy of its own
    // in any spelling, a CA that lets it intercept, git's connection programs, the provider's
    // endpoint) is refused by name, and none reaches the agent.
    assert_dotenv_names_refused(&[
        ("HTTP_PROXY", "http://127.0.0.1:9/egress-http"),
        ("http_proxy", "http://127.0.0.1:9/egress-http-lower"),
        ("https_proxy", "http://127.0.0.1:9/egress-https-lower"),
        ("all_proxy", "socks5://127.0.0.1:9/egress-all-lower"),
        ("no_proxy", "egress-no-proxy-lower"),
        ("FTP_PROXY", "http://127.0.0.1:9/egress-ftp"),
        ("GRPC_PROXY", "http://127.0.0.1:9/egress-grpc"),
        ("grpc_proxy", "http://127.0.0.1:9/egress-grpc-lower"),
        ("SSL_CERT_DIR", "/tmp/egress-certs"),
        ("CURL_CA_BUNDLE", "/tmp/egress-curl-ca.pem"),
        ("GIT_SSL_CAINFO", "/tmp/egress-git-ca.pem"),
        ("GIT_PROXY_COMMAND", "/tmp/egress-git-proxy"),
        ("GIT_SSH_COMMAND", "/tmp/egress-git-ssh"),
        ("OPENAI_BASE_URL", "http://127.0.0.1:9/egress-openai"),
        ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/egress-anthropic"),
    ]);
}

#[test]
fn attack_env__dotenv_shell_and_git_ssh_command_are_refused() {
    if !require_root_and_namespaces() {
        return;
    }
    // An earlier iteration chooses the program the runtime runs for every tool call.
    assert_dotenv_names_refused(&[
        ("SHELL", "/tmp/planted-shell"),
        ("CLAUDE_CODE_SHELL", "/tmp/planted-claude-shell"),
        ("CLAUDE_CODE_SHELL_PREFIX", "/tmp/planted-prefix"),
        ("GIT_SSH_COMMAND", "/tmp/planted-ssh"),
        ("GIT_CONFIG_GLOBAL", "/tmp/planted-gitconfig"),
        ("GIT_PAGER", "/tmp/planted-git-pager"),
        ("PAGER", "/tmp/planted-pager"),
        ("EDITOR", "/tmp/planted-editor"),
        ("LESSOPEN", "|/tmp/planted-lessopen %s"),
        ("ZDOTDIR", "/tmp/planted-zdotdir"),
        ("XDG_CONFIG_HOME", "/tmp/planted-xdg"),
        ("RIPGREP_CONFIG_PATH", "/tmp/planted-rgrc"),
        ("CLAUDE_CONFIG_DIR", "/tmp/planted-claude-config"),
    ]);
}

#[test]
fn attack_env__dotenv_provider_config_files_and_endpoints_are_refused() {
    if !require_root_and_namespaces() {
        return;
    }
    // The provider's own configuration, one step removed from `*_BASE_URL`: an AWS config file
    // with `endpoint_url` (pi's Bedrock client sent the operator's bearer key there), Azure's
    // resource name (it becomes the host), Google's credentials file and metadata server.
    assert_dotenv_names_refused(&[
        ("AWS_CONFIG_FILE", "/tmp/planted-aws-config"),
        ("AWS_PROFILE", "evil"),
        ("AZURE_OPENAI_RESOURCE_NAME", "evil.example/x#"),
        ("GOOGLE_APPLICATION_CREDENTIALS", "/tmp/planted-gcp.json"),
        ("GCE_METADATA_HOST", "127.0.0.1:9"),
        ("OPENAI_ORG_ID", "planted"),
    ]);
}

#[test]
fn attack_env__dotenv_telemetry_debug_and_github_names_are_refused() {
    if !require_root_and_namespaces() {
        return;
    }
    // The repository's `.env` points the runtime's telemetry (and the operator's bearer header
    // that goes with it) at itself, makes gRPC trust its CA, turns on debug output that prints
    // requests into the runtime's stderr (the record keeps it), and names its own GitHub host
    // for the operator's enterprise token.
    assert_dotenv_names_refused(&[
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "http://127.0.0.1:9/planted-otel",
        ),
        ("OTEL_LOG_USER_PROMPTS", "planted-1"),
        (
            "BETA_TRACING_ENDPOINT",
            "http://127.0.0.1:9/planted-tracing",
        ),
        ("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", "/tmp/planted-roots.pem"),
        ("DEBUG", "planted-*"),
        ("NODE_DEBUG", "planted-http"),
        ("GH_HOST", "planted.example"),
    ]);
}

#[test]
fn attack_env__dotenv_and_plugin_env_cannot_replace_what_pass_env_or_the_harness_sets() {
    if !require_root_and_namespaces() {
        return;
    }
    // The operator passes its telemetry endpoint, the bearer token for it and a setting of its
    // own (`--pass-env`: the manifest's `env.passed`, the values in pitcrew-init's environment)
    // and sets another in the harness `env:`; the repository's `.env` replaces each.
    let mut sandbox = env_printing_sandbox(
        "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:9/planted\n\
         FOO_SETTING=planted\n\
         BAR_SETTING=planted\n\
         GREETING=kept\n",
    );
    sandbox.manifest["env"]["passed"] = json!([
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "FOO_SETTING"
    ]);
    sandbox.manifest["env"]["set"] = json!({"BAR_SETTING": "harness"});
    let passed = [
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "https://otel.operator.example",
        ),
        (
            "OTEL_EXPORTER_OTLP_HEADERS",
            "Authorization=Bearer op-token",
        ),
        ("FOO_SETTING", "operator"),
    ];
    let run = sandbox.run_pid1_with_env(&passed);
    assert_eq!(run.code, 0, "{}\n{}", run.record, run.stderr);
    let env = agent_env(&sandbox);
    let layers = &run.record["env"]["layers"];
    for (name, value) in passed {
        assert_eq!(value_of(&env, name), Some(value), "{name}: {env:?}");
        assert_eq!(layers[name], "pass-env", "{name}: {layers}");
    }
    assert_eq!(value_of(&env, "BAR_SETTING"), Some("harness"), "{env:?}");
    assert_eq!(layers["BAR_SETTING"], "harness", "{layers}");
    assert_eq!(value_of(&env, "GREETING"), Some("kept"), "{env:?}");
    let refused = dotenv_refusals(&run.record);
    let named: Vec<(u64, &str, bool)> = refused
        .iter()
        .map(|(line, name, reason)| {
            let layer = if *line == 3 { "harness" } else { "pass-env" };
            (*line, name.as_str(), reason.contains(layer))
        })
        .collect();
    assert_eq!(
        named,
        [
            (1, "OTEL_EXPORTER_OTLP_ENDPOINT", true),
            (2, "FOO_SETTING", true),
            (3, "BAR_SETTING", true)
        ],
        "{}",
        run.record
    );
    let text = run.record.to_string();
    assert!(
        !text.contains("planted") && !text.contains("op-token"),
        "{text}"
    );

    // A plugin's `env:` may not replace them either: the iteration stops before launch.
    for (name, layer) in [("FOO_SETTING", "pass-env"), ("BAR_SETTING", "harness")] {
        let mut sandbox = Sandbox::sh(MARK_LAUNCH);
        let tree = plugin_tree(&sandbox);
        let mut pin = tree_pin("hello", &tree);
        pin["env"] = json!({name: "planted"});
        sandbox.manifest["trees"] = json!([pin]);
        sandbox.manifest["env"] =
            json!({"passed": ["FOO_SETTING"], "set": {"BAR_SETTING": "harness"}});
        let run = sandbox.run_pid1_with_env(&[("FOO_SETTING", "operator")]);
        assert_eq!(run.code, 125, "{name}: {}\n{}", run.record, run.stderr);
        let reason = run.record["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains(name) && reason.contains(layer) && !reason.contains("planted"),
            "{name}: {reason}"
        );
        assert!(
            !sandbox.workdir.join("launched").exists(),
            "{name}: the agent ran"
        );
    }
}

#[test]
fn attack_env__bun_inspector_preload_and_napi_rs_library_path_never_reach_the_agent() {
    if !require_root_and_namespaces() {
        return;
    }
    // Claude Code (a Bun binary) runs the file BUN_INSPECT_PRELOAD names before its own code;
    // pi 0.73.1 require()s the file NAPI_RS_NATIVE_LIBRARY_PATH names (with DISPLAY set). The
    // image's environment and the `.env` both try.
    let sandbox = env_printing_sandbox(
        "BUN_INSPECT_PRELOAD=/tmp/planted-preload.js\n\
         NAPI_RS_NATIVE_LIBRARY_PATH=/tmp/planted-native.js\n\
         DISPLAY=:0\n",
    );
    let run = sandbox.run_pid1_with_env(&[
        ("BUN_INSPECT", "127.0.0.1:9/planted"),
        ("NAPI_RS_NATIVE_LIBRARY_PATH", "/tmp/planted-image.js"),
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.record, run.stderr);
    let env = agent_env(&sandbox);
    for name in [
        "BUN_INSPECT",
        "BUN_INSPECT_PRELOAD",
        "NAPI_RS_NATIVE_LIBRARY_PATH",
    ] {
        assert_eq!(value_of(&env, name), None, "{name} reached the agent");
    }
    assert_eq!(value_of(&env, "DISPLAY"), Some(":0"), "{env:?}");
    // The image's values are stripped and recorded; the `.env`'s Bun line is refused by name
    // (Bun's controls are the operator's), its napi-rs line stripped like the image's.
    let removed = run.record["env"]["removed"].to_string();
    for name in ["BUN_INSPECT", "NAPI_RS_NATIVE_LIBRARY_PATH"] {
        assert!(
            removed.contains(&format!("\"{name}\"")),
            "{name}: {removed}"
        );
    }
    let refused: Vec<(u64, String)> = dotenv_refusals(&run.record)
        .into_iter()
        .map(|(line, name, _)| (line, name))
        .collect();
    assert_eq!(
        refused,
        [(1, "BUN_INSPECT_PRELOAD".to_string())],
        "{}",
        run.record
    );
    assert!(!env.iter().any(|(_, v)| v.contains("planted")), "{env:?}");
    assert!(
        !run.record.to_string().contains("planted"),
        "{}",
        run.record
    );
}

#[test]
fn attack_env__dotenv_cannot_replace_the_images_proxy() {
    if !require_root_and_namespaces() {
        return;
    }
    // The image routes traffic through its own proxy; the `.env` tries to swap it for its own.
    let sandbox = env_printing_sandbox(
        "HTTPS_PROXY=http://127.0.0.1:9/planted\nNODE_EXTRA_CA_CERTS=/tmp/planted.pem\n",
    );
    let run = sandbox.run_pid1_with_env(&[
        ("HTTPS_PROXY", "http://proxy.image.example:3128"),
        ("NODE_EXTRA_CA_CERTS", "/etc/ssl/image-ca.pem"),
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.record, run.stderr);
    let env = agent_env(&sandbox);
    assert_eq!(
        value_of(&env, "HTTPS_PROXY"),
        Some("http://proxy.image.example:3128"),
        "{env:?}"
    );
    assert_eq!(
        value_of(&env, "NODE_EXTRA_CA_CERTS"),
        Some("/etc/ssl/image-ca.pem"),
        "{env:?}"
    );
    assert_eq!(run.record["env"]["layers"]["HTTPS_PROXY"], "baseline");
    let names: Vec<String> = dotenv_refusals(&run.record)
        .into_iter()
        .map(|(_, n, _)| n)
        .collect();
    assert_eq!(
        names,
        ["HTTPS_PROXY", "NODE_EXTRA_CA_CERTS"],
        "{}",
        run.record
    );
}

#[test]
fn attack_env__dotenv_cannot_replace_the_images_ca_or_the_harness_openssl_conf() {
    if !require_root_and_namespaces() {
        return;
    }
    // Behind a TLS-inspecting egress proxy the image's environment (the supervisor's own) names
    // the proxy's CA and the operator's harness OpenSSL's configuration; an earlier iteration
    // writes a `.env` that swaps both for its own.
    let mut sandbox = env_printing_sandbox(
        "NODE_EXTRA_CA_CERTS=/tmp/planted-ca.pem\nOPENSSL_CONF=/tmp/planted-openssl.cnf\nGREETING=kept\n",
    );
    sandbox.manifest["env"]["set"] = json!({"OPENSSL_CONF": "/etc/ssl/harness-openssl.cnf"});
    let run = sandbox.run_pid1_with_env(&[
        ("NODE_EXTRA_CA_CERTS", "/etc/ssl/image-ca.pem"),
        ("SSL_CERT_FILE", "/etc/ssl/image-bundle.pem"),
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.record, run.stderr);
    let env = agent_env(&sandbox);
    let layers = &run.record["env"]["layers"];
    for (name, value, layer) in [
        ("NODE_EXTRA_CA_CERTS", "/etc/ssl/image-ca.pem", "baseline"),
        ("SSL_CERT_FILE", "/etc/ssl/image-bundle.pem", "baseline"),
        ("OPENSSL_CONF", "/etc/ssl/harness-openssl.cnf", "harness"),
        ("GREETING", "kept", "dotenv"),
    ] {
        assert_eq!(value_of(&env, name), Some(value), "{name}: {env:?}");
        assert_eq!(layers[name], layer, "{name}: {layers}");
    }
    // Both planted lines are refused by name on their line (none was left to strip), and no
    // value is recorded.
    let refused: Vec<(u64, String)> = dotenv_refusals(&run.record)
        .into_iter()
        .map(|(line, name, _)| (line, name))
        .collect();
    assert_eq!(
        refused,
        [
            (1, "NODE_EXTRA_CA_CERTS".to_string()),
            (2, "OPENSSL_CONF".to_string())
        ],
        "{}",
        run.record
    );
    let removed = run.record["env"]["removed"].to_string();
    for name in ["NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "OPENSSL_CONF"] {
        assert!(!removed.contains(&format!("\"{name}\"")), "{removed}");
    }
    assert!(!env.iter().any(|(_, v)| v.contains("planted")), "{env:?}");
    let text = run.record.to_string();
    assert!(!text.contains("planted"), "a value leaked: {text}");
}

#[test]
fn the_images_and_the_harness_proxy_ca_shell_and_git_variables_reach_the_agent() {
    if !require_root_and_namespaces() {
        return;
    }
    // Trusted layers: the image's environment (an image behind a TLS-inspecting proxy needs its
    // CA and OpenSSL settings) and the operator's harness `env:`.
    let mut sandbox = Sandbox::sh("env > $W/env");
    sandbox.manifest["env"] = json!({"set": {
        "NO_PROXY": "localhost,127.0.0.1",
        "NODE_USE_ENV_PROXY": "1",
        "SSL_CERT_DIR": "/etc/ssl/certs",
    }});
    let baseline = [
        ("HTTPS_PROXY", "http://proxy.image.example:3128"),
        ("https_proxy", "http://proxy.image.example:3128"),
        ("NODE_EXTRA_CA_CERTS", "/etc/ssl/image-ca.pem"),
        ("OPENSSL_CONF", "/etc/ssl/image-openssl.cnf"),
        ("SHELL", "/bin/bash"),
        ("GIT_SSH_COMMAND", "ssh -o StrictHostKeyChecking=yes"),
        ("GIT_CONFIG_GLOBAL", "/etc/image-gitconfig"),
        ("CLAUDE_CODE_SHELL_PREFIX", "/usr/local/bin/audit-wrap"),
    ];
    let run = sandbox.run_pid1_with_env(&baseline);
    assert_eq!(run.code, 0, "{}\n{}", run.record, run.stderr);
    let env = agent_env(&sandbox);
    for (name, value) in baseline {
        assert_eq!(value_of(&env, name), Some(value), "{name}: {env:?}");
        assert_eq!(run.record["env"]["layers"][name], "baseline", "{name}");
    }
    for (name, value) in [
        ("NO_PROXY", "localhost,127.0.0.1"),
        ("NODE_USE_ENV_PROXY", "1"),
        ("SSL_CERT_DIR", "/etc/ssl/certs"),
    ] {
        assert_eq!(value_of(&env, name), Some(value), "{name}: {env:?}");
        assert_eq!(run.record["env"]["layers"][name], "harness", "{name}");
    }
    let removed = run.record["env"]["removed"].to_string();
    for (name, _) in baseline {
        assert!(!removed.contains(&format!("\"{name}\"")), "{removed}");
    }
}

#[test]
fn attack_env__plugin_env_pager_xdg_and_ripgrep_config_are_refused() {
    if !require_root_and_namespaces() {
        return;
    }
    // A plugin's `env:` comes with the plugin tree: it may not choose programs either.
    for name in ["PAGER", "XDG_CONFIG_HOME", "RIPGREP_CONFIG_PATH", "BROWSER"] {
        let mut sandbox = Sandbox::sh(MARK_LAUNCH);
        let tree = plugin_tree(&sandbox);
        let mut pin = tree_pin("hello", &tree);
        pin["env"] = json!({name: "/tmp/planted"});
        sandbox.manifest["trees"] = json!([pin]);
        let run = sandbox.run_pid1();
        assert_eq!(run.code, 125, "{name}: {}\n{}", run.record, run.stderr);
        let reason = run.record["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains(name) && reason.contains("env"),
            "{name}: {reason}"
        );
        assert!(
            !sandbox.workdir.join("launched").exists(),
            "{name}: the agent ran"
        );
    }
}

#[test]
fn attack_env__dotenv_overlong_value_is_refused_not_126() {
    if !require_root_and_namespaces() {
        return;
    }
    // 200,000 bytes: over the kernel's 131,072 per string, so execve would fail with E2BIG and
    // every later iteration would exit 126 ("Argument list too long").
    let dotenv = format!("BIG={}\nSMALL=ok\n", "a".repeat(200_000));
    let sandbox = env_printing_sandbox(&dotenv);
    let run = sandbox.run_pid1();
    assert_eq!(run.code, 0, "{}\n{}", run.record, run.stderr);
    let env = agent_env(&sandbox);
    assert_eq!(value_of(&env, "SMALL"), Some("ok"));
    assert_eq!(value_of(&env, "BIG"), None);
    let refusals = dotenv_refusals(&run.record);
    assert!(
        refusals
            .iter()
            .any(|(l, n, r)| *l == 1 && n == "BIG" && r.contains("65536")),
        "{refusals:?}"
    );
}

#[test]
fn attack_env__dotenv_expansion_past_the_total_is_refused_not_126() {
    if !require_root_and_namespaces() {
        return;
    }
    // A 1 MiB `.env` can still expand to megabytes: 60 copies of a 60,000-byte value would be
    // 3.6 MB of environment, past ARG_MAX.
    let mut dotenv = format!("A={}\n", "a".repeat(60_000));
    for i in 0..60 {
        dotenv.push_str(&format!("B{i}=$A\n"));
    }
    dotenv.push_str("LAST=small\n");
    let sandbox = env_printing_sandbox(&dotenv);
    let run = sandbox.run_pid1();
    assert_eq!(run.code, 0, "{}\n{}", run.record, run.stderr);
    let env = agent_env(&sandbox);
    assert_eq!(value_of(&env, "A").map(str::len), Some(60_000));
    assert_eq!(value_of(&env, "B59"), None);
    let refusals = dotenv_refusals(&run.record);
    assert!(
        refusals
            .iter()
            .any(|(l, n, r)| *l == 61 && n == "B59" && r.contains("262144")),
        "{refusals:?}"
    );
}

#[test]
fn the_record_names_the_layer_of_every_variable() {
    if !require_root_and_namespaces() {
        return;
    }
    let mut sandbox = env_printing_sandbox("GREETING=from-dotenv\nPATH=/opt/x/bin:$PATH\n");
    let tree = plugin_tree(&sandbox);
    let mut pin = tree_pin("hello", &tree);
    pin["env"] = json!({"LEVEL": "3"});
    sandbox.manifest["trees"] = json!([pin]);
    sandbox.manifest["env"]["set"] = json!({"LANG": "C.UTF-8"});
    let run = sandbox.run_pid1_with_env(&[("IMAGE_VAR", "image-value")]);
    assert_eq!(run.code, 0, "{}\n{}", run.record, run.stderr);
    let layers = &run.record["env"]["layers"];
    assert_eq!(layers["IMAGE_VAR"], "baseline", "{layers}");
    assert_eq!(layers["GREETING"], "dotenv", "{layers}");
    assert_eq!(layers["PATH"], "dotenv", "{layers}");
    assert_eq!(layers["LANG"], "harness", "{layers}");
    assert_eq!(layers["HOME"], "pin", "{layers}");
    assert_eq!(layers["JITI_FS_CACHE"], "pin", "{layers}");
    assert_eq!(
        layers["LEVEL"],
        format!("plugin:{}", tree.display()),
        "{layers}"
    );
    // Exactly the agent's names (as far as `sh` passes them on: it adds PWD and drops names
    // that are not shell identifiers), and never a value.
    let shell_name = |n: &&str| {
        *n != "PWD"
            && n.bytes().next().is_some_and(|b| !b.is_ascii_digit())
            && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    };
    let env = agent_env(&sandbox);
    let mut names: Vec<&str> = env
        .iter()
        .map(|(k, _)| k.as_str())
        .filter(shell_name)
        .collect();
    names.sort_unstable();
    let listed: Vec<&str> = layers
        .as_object()
        .expect("layers")
        .keys()
        .map(String::as_str)
        .filter(shell_name)
        .collect();
    assert_eq!(listed, names);
    let text = layers.to_string();
    for value in ["from-dotenv", "image-value", "/opt/x/bin", "C.UTF-8"] {
        assert!(!text.contains(value), "{text}");
    }
}
