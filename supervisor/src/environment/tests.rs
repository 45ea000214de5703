//! Unit tests of `environment`.

#[test]
fn every_pinned_name_is_reserved_for_the_harness() {
    // A harness `env:` value for a pinned name would be replaced without a word: validation
    // must refuse it instead.
    for name in pinned_names() {
        assert!(
            crate::env_policy::sandbox_env_reserved(name).is_some(),
            "{name} is pinned but the harness may set it"
        );
    }
}

use super::*;

/// [`super::build`] with the manifest's own runtime directories.
fn build(manifest: &Manifest, baseline: &[(String, String)]) -> Result<EnvOutcome, EnvError> {
    super::build(manifest, &manifest.runtime_dirs(), baseline)
}
use std::path::PathBuf;

fn manifest(runtime: &str, dotenv: Option<&Path>) -> Manifest {
    let mut v = serde_json::json!({
        "version": 1,
        "runtime": runtime,
        "agent": {"binary": "/usr/bin/agent"},
        "prompt": "do it",
        "workdir": "/sandbox/workspace",
    });
    if let Some(p) = dotenv {
        v["env"] = serde_json::json!({"dotenv": p});
    }
    Manifest::from_json(v.to_string().as_bytes()).unwrap()
}

fn tree_with_env(name: &str, env: &[(&str, &str)]) -> crate::manifest::TreePin {
    crate::manifest::TreePin {
        name: name.into(),
        path: format!("/t/{name}"),
        role: crate::exit_code::PinRole::Plugin,
        kind: crate::manifest::TreeKind::Data,
        format: crate::tree_hash::TreeFormat::PiTreeV1,
        sha256: "0".repeat(64),
        files: Default::default(),
        dirs: Vec::new(),
        stored: None,
        entries: Vec::new(),
        env: env
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect(),
        pi_args: Vec::new(),
    }
}

fn base(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect()
}

/// A canonical temp dir (macOS puts temp dirs behind a symlink).
fn tmp() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let real = std::fs::canonicalize(t.path()).unwrap();
    (t, real)
}

fn removed<'a>(o: &'a EnvOutcome, name: &str) -> Option<&'a RemovedVar> {
    o.removed.iter().find(|r| r.name == name)
}

#[test]
fn loader_variables_from_baseline_and_dotenv_are_removed_and_reported() {
    let (_t, dir) = tmp();
    let dotenv = dir.join(".env");
    std::fs::write(
            &dotenv,
            "JITI_ALIAS='{\"x\":\"/tmp/evil.cjs\"}'\nexport LD_PRELOAD=/tmp/evil.so\nGREETING=hi\nJITI_FS_CACHE=true\n",
        )
        .unwrap();
    let m = manifest("pi", Some(&dotenv));
    let o = build(
        &m,
        &base(&[("NODE_OPTIONS", "--require /tmp/x.js"), ("LANG", "C.UTF-8")]),
    )
    .unwrap();
    for name in ["NODE_OPTIONS", "JITI_ALIAS", "LD_PRELOAD"] {
        assert!(o.get(name).is_none(), "{name} must be absent");
    }
    assert_eq!(
        removed(&o, "NODE_OPTIONS").unwrap().source,
        EnvSource::Baseline
    );
    assert_eq!(removed(&o, "JITI_ALIAS").unwrap().source, EnvSource::Dotenv);
    let ld = removed(&o, "LD_PRELOAD").unwrap();
    assert_eq!(ld.source, EnvSource::Dotenv);
    assert!(ld.rule.starts_with("LD_*"), "{}", ld.rule);
    // JITI_FS_CACHE=true from .env is removed and the pin wins.
    assert_eq!(
        removed(&o, "JITI_FS_CACHE").unwrap().source,
        EnvSource::Dotenv
    );
    assert_eq!(o.get("JITI_FS_CACHE"), Some("false"));
    assert_eq!(o.get("GREETING"), Some("hi"));
    assert_eq!(o.get("LANG"), Some("C.UTF-8"));
    // Each name once, sorted.
    let names: Vec<&str> = o.removed.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        ["JITI_ALIAS", "JITI_FS_CACHE", "LD_PRELOAD", "NODE_OPTIONS"]
    );
}

#[test]
fn name_planted_in_baseline_and_dotenv_is_reported_once_with_the_last_source() {
    let (_t, dir) = tmp();
    let dotenv = dir.join(".env");
    std::fs::write(&dotenv, "NODE_OPTIONS=--import=/tmp/y.mjs\n").unwrap();
    let m = manifest("command", Some(&dotenv));
    let o = build(&m, &base(&[("NODE_OPTIONS", "--require /tmp/x.js")])).unwrap();
    assert_eq!(o.removed.len(), 1);
    assert_eq!(o.removed[0].source, EnvSource::Dotenv);
}

#[test]
fn pins_per_runtime_and_default_dirs() {
    let o = build(&manifest("pi", None), &[]).unwrap();
    assert_eq!(o.get("PATH"), Some(DEFAULT_PATH));
    assert_eq!(o.get("HOME"), Some("/sandbox/home"));
    assert_eq!(o.get("TMPDIR"), Some("/sandbox/tmp"));
    assert_eq!(o.get("NODE_DISABLE_COMPILE_CACHE"), Some("1"));
    assert_eq!(o.get("PI_CODING_AGENT_DIR"), Some("/sandbox/pi-config"));
    assert_eq!(
        o.get("PI_CODING_AGENT_SESSION_DIR"),
        Some("/sandbox/pi-config/sessions")
    );
    assert_eq!(o.get("PI_OFFLINE"), Some("1"));
    assert_eq!(o.get("PI_SKIP_VERSION_CHECK"), Some("1"));
    assert_eq!(o.get("PI_TELEMETRY"), Some("0"));
    assert!(o.get("CLAUDE_CONFIG_DIR").is_none());

    let mut m = manifest("claude", None);
    m.dirs.config = Some("/cfg".into());
    m.dirs.home = Some("/h".into());
    let o = build(&m, &base(&[("HOME", "/root"), ("PATH", "/opt/bin")])).unwrap();
    assert_eq!(o.get("CLAUDE_CONFIG_DIR"), Some("/cfg"));
    assert_eq!(o.get("HOME"), Some("/h"));
    assert_eq!(o.get("PATH"), Some("/opt/bin"));
    assert_eq!(o.get("DISABLE_AUTOUPDATER"), Some("1"));
    assert_eq!(o.get("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"), Some("1"));
    assert!(o.get("PI_OFFLINE").is_none());
}

#[test]
fn dotenv_path_prepend_works_and_output_is_sorted_unique() {
    let (_t, dir) = tmp();
    let dotenv = dir.join(".env");
    std::fs::write(
        &dotenv,
        "PATH=/opt/tools/bin:/sandbox/workspace/bin:$PATH\nZED=1\nAA=2\n",
    )
    .unwrap();
    let m = manifest("command", Some(&dotenv));
    let o = build(&m, &base(&[("PATH", "/usr/bin:/bin"), ("ZED", "0")])).unwrap();
    // A directory of the agent's own (the workspace) is dropped, and named.
    assert_eq!(o.get("PATH"), Some("/opt/tools/bin:/usr/bin:/bin"));
    assert_eq!(o.path_dropped, ["/sandbox/workspace/bin"]);
    assert_eq!(o.get("ZED"), Some("1"));
    let names: Vec<&str> = o.env.iter().map(|(k, _)| k.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(names, sorted);
}

#[test]
fn plugin_env_comes_last() {
    // Over the image's environment and the `.env`; what the operator set (the harness `env:`,
    // `--pass-env`) a plugin may not replace (attack test below).
    let (_t, dir) = tmp();
    let dotenv = dir.join(".env");
    std::fs::write(&dotenv, "GREETING=dotenv\n").unwrap();
    let mut m = manifest("pi", Some(&dotenv));
    m.env.set.insert("MOOD".into(), "harness".into());
    m.trees
        .push(tree_with_env("a", &[("GREETING", "plugin-a")]));
    m.trees.push(tree_with_env("b", &[("LEVEL", "3")]));
    let o = build(&m, &base(&[("GREETING", "baseline")])).unwrap();
    assert_eq!(o.get("GREETING"), Some("plugin-a"));
    assert_eq!(o.layers["GREETING"], EnvSource::Plugin("/t/a".into()));
    assert_eq!(o.get("LEVEL"), Some("3"));
    assert_eq!(o.get("MOOD"), Some("harness"));
}

#[test]
fn bad_plugin_env_is_an_error_naming_the_tree() {
    let mut m = manifest("pi", None);
    m.trees
        .push(tree_with_env("evil", &[("NODE_OPTIONS", "--require x")]));
    let err = build(&m, &[]).unwrap_err();
    assert!(matches!(err, EnvError::PluginEnv { .. }));
    let text = err.to_string();
    assert!(
        text.contains("\"evil\"") && text.contains("NODE_OPTIONS"),
        "{text}"
    );
    assert!(!text.contains("--require"), "{text}");

    let mut m = manifest("claude", None);
    m.trees
        .push(tree_with_env("p", &[("DISABLE_AUTOUPDATER", "0")]));
    let err = build(&m, &[]).unwrap_err();
    assert!(matches!(err, EnvError::PluginSetsPin { .. }), "{err}");
}

#[test]
fn dotenv_missing_is_nothing_symlink_and_fifo_are_errors() {
    let (_t, dir) = tmp();
    let o = build(&manifest("command", Some(&dir.join("absent"))), &[]).unwrap();
    assert!(o.dotenv_refused.is_empty());

    std::fs::write(dir.join("real"), "A=1\n").unwrap();
    std::os::unix::fs::symlink(dir.join("real"), dir.join("link")).unwrap();
    let err = build(&manifest("command", Some(&dir.join("link"))), &[]).unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert!(err.to_string().contains("link"), "{err}");

    std::fs::create_dir(dir.join("sub")).unwrap();
    std::os::unix::fs::symlink(dir.join("sub"), dir.join("subl")).unwrap();
    std::fs::write(dir.join("sub/.env"), "A=1\n").unwrap();
    let err = build(&manifest("command", Some(&dir.join("subl/.env"))), &[]).unwrap_err();
    assert!(
        err.to_string().contains("resolves through a symlink"),
        "{err}"
    );

    let fifo = dir.join("fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if made.is_ok_and(|s| s.success()) {
        let err = build(&manifest("command", Some(&fifo)), &[]).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }
}

#[test]
fn reports_never_contain_values() {
    let (_t, dir) = tmp();
    let dotenv = dir.join(".env");
    let secret = "v4lue-n3ver-shown";
    std::fs::write(
        &dotenv,
        format!("LD_PRELOAD={secret}\nNODE_PATH='{secret}'\nA=$({secret})\nB=\"{secret}\n"),
    )
    .unwrap();
    let m = manifest("pi", Some(&dotenv));
    let o = build(&m, &base(&[("PYTHONPATH", secret), ("OK", secret)])).unwrap();
    assert_eq!(o.removed.len(), 3);
    assert_eq!(o.dotenv_refused.len(), 2);
    let json = serde_json::to_string(&o).unwrap();
    assert!(!json.contains(secret), "{json}");
    assert!(json.contains("PYTHONPATH"), "{json}");
    assert_eq!(o.get("OK"), Some(secret));
}

#[test]
fn every_name_reserved_as_pinned_is_pinned() {
    // The harness may not set a name "pinned by the supervisor": it must then really be
    // pinned, or the reservation is a false promise (SHELL was).
    let pinned = pinned_names();
    for rule in env_policy::SANDBOX_ENV_RULES {
        if rule.reason == env_policy::PINNED {
            let crate::env_policy::Pattern::Exact(name) = rule.pattern else {
                panic!("{rule}: a pinned name is exact");
            };
            assert!(
                pinned.contains(&name),
                "{name} is reserved as pinned but not pinned"
            );
        }
    }
}

#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_env__dotenv_cannot_set_proxy_trust_or_program_names() {
    let (_t, dir) = tmp();
    let dotenv = dir.join(".env");
    std::fs::write(
        &dotenv,
        "HTTPS_PROXY=http://planted:1\nhttps_proxy=http://planted:2\n\
             NODE_EXTRA_CA_CERTS=/planted.pem\nOPENSSL_CONF=/planted.cnf\nSHELL=/planted/sh\n\
             GIT_SSH_COMMAND=planted\nXDG_CONFIG_HOME=/planted\nPAGER=planted\nOK=1\n",
    )
    .unwrap();
    let m = manifest("claude", Some(&dotenv));
    let o = build(&m, &base(&[("HTTPS_PROXY", "http://image-proxy:3128")])).unwrap();
    assert_eq!(o.get("HTTPS_PROXY"), Some("http://image-proxy:3128"));
    assert_eq!(o.layers["HTTPS_PROXY"], EnvSource::Baseline);
    for name in [
        "https_proxy",
        "NODE_EXTRA_CA_CERTS",
        "OPENSSL_CONF",
        "SHELL",
        "GIT_SSH_COMMAND",
        "XDG_CONFIG_HOME",
        "PAGER",
    ] {
        assert!(o.get(name).is_none(), "{name} reached the agent");
    }
    assert_eq!(o.get("OK"), Some("1"));
    let named: Vec<(usize, &str)> = o
        .dotenv_refused
        .iter()
        .map(|r| (r.line, r.name.as_deref().unwrap_or("")))
        .collect();
    assert_eq!(
        named,
        [
            (1, "HTTPS_PROXY"),
            (2, "https_proxy"),
            (3, "NODE_EXTRA_CA_CERTS"),
            (4, "OPENSSL_CONF"),
            (5, "SHELL"),
            (6, "GIT_SSH_COMMAND"),
            (7, "XDG_CONFIG_HOME"),
            (8, "PAGER")
        ]
    );
    assert!(!serde_json::to_string(&o).unwrap().contains("planted"));
}

#[test]
fn trusted_layers_set_proxy_ca_openssl_shell_and_git() {
    let mut m = manifest("pi", None);
    m.env
        .set
        .insert("HTTPS_PROXY".into(), "http://harness-proxy:3128".into());
    m.env.set.insert("SHELL".into(), "/bin/bash".into());
    let o = build(
        &m,
        &base(&[
            ("NODE_EXTRA_CA_CERTS", "/etc/ssl/ca.pem"),
            ("OPENSSL_CONF", "/etc/ssl/openssl.cnf"),
            ("GIT_SSH_COMMAND", "ssh -F /etc/ssh/image_config"),
            ("CLAUDE_CODE_SHELL_PREFIX", "/usr/bin/audit"),
            ("no_proxy", "localhost"),
        ]),
    )
    .unwrap();
    assert!(o.removed.is_empty(), "{:?}", o.removed);
    assert_eq!(o.get("NODE_EXTRA_CA_CERTS"), Some("/etc/ssl/ca.pem"));
    assert_eq!(o.get("OPENSSL_CONF"), Some("/etc/ssl/openssl.cnf"));
    assert_eq!(
        o.get("GIT_SSH_COMMAND"),
        Some("ssh -F /etc/ssh/image_config")
    );
    assert_eq!(o.get("CLAUDE_CODE_SHELL_PREFIX"), Some("/usr/bin/audit"));
    assert_eq!(o.get("no_proxy"), Some("localhost"));
    assert_eq!(o.get("HTTPS_PROXY"), Some("http://harness-proxy:3128"));
    assert_eq!(o.get("SHELL"), Some("/bin/bash"));
    assert_eq!(o.layers["SHELL"], EnvSource::Harness);
    assert_eq!(o.layers["OPENSSL_CONF"], EnvSource::Baseline);
}

#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_env__plugin_env_cannot_set_proxy_or_program_names() {
    for name in [
        "HTTPS_PROXY",
        "PAGER",
        "XDG_CONFIG_HOME",
        "SHELL",
        "OPENSSL_CONF",
    ] {
        let mut m = manifest("pi", None);
        m.trees.push(tree_with_env("p", &[(name, "/planted")]));
        let err = build(&m, &[]).unwrap_err();
        assert!(matches!(err, EnvError::PluginEnv { .. }), "{name}: {err}");
        let text = err.to_string();
        assert!(text.contains(name) && !text.contains("/planted"), "{text}");
    }
}

#[test]
fn layers_name_the_source_of_every_variable() {
    let (_t, dir) = tmp();
    let dotenv = dir.join(".env");
    std::fs::write(&dotenv, "GREETING=hi\nPATH=/w/bin:$PATH\nHOME=/planted\n").unwrap();
    let mut m = manifest("pi", Some(&dotenv));
    m.env.set.insert("LANG".into(), "C.UTF-8".into());
    m.trees.push(tree_with_env("a", &[("LEVEL", "3")]));
    let o = build(&m, &base(&[("IMAGE", "x"), ("PATH", "/usr/bin")])).unwrap();
    assert_eq!(o.layers["IMAGE"], EnvSource::Baseline);
    assert_eq!(o.layers["GREETING"], EnvSource::Dotenv);
    // The pin kept the `.env`'s PATH: the record says so.
    assert_eq!(o.get("PATH"), Some("/w/bin:/usr/bin"));
    assert_eq!(o.layers["PATH"], EnvSource::Dotenv);
    assert_eq!(o.layers["LANG"], EnvSource::Harness);
    assert_eq!(o.layers["HOME"], EnvSource::Pin);
    assert_eq!(o.layers["PI_OFFLINE"], EnvSource::Pin);
    assert_eq!(o.layers["LEVEL"], EnvSource::Plugin("/t/a".into()));
    let names: Vec<&String> = o.env.iter().map(|(k, _)| k).collect();
    let listed: Vec<&String> = o.layers.keys().collect();
    assert_eq!(names, listed);
    let json = serde_json::to_value(&o).unwrap();
    assert_eq!(json["layers"]["LEVEL"], "plugin:/t/a");
    assert_eq!(json["layers"]["HOME"], "pin");
    // No layer sets PATH: the default is the pin's.
    let o = build(&manifest("command", None), &[]).unwrap();
    assert_eq!(o.layers["PATH"], EnvSource::Pin);
    for text in ["baseline", "dotenv", "harness", "pin", "plugin:/x/y"] {
        let layer = EnvSource::try_from(text.to_string()).unwrap();
        assert_eq!(layer.to_string(), text);
    }
    assert!(EnvSource::try_from("image".to_string()).is_err());
}

#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_env__dotenv_sizes_are_refused_by_name_within_the_limits() {
    let (_t, dir) = tmp();
    let dotenv = dir.join(".env");
    let mut text = format!("BIG={}\nA={}\n", "b".repeat(200_000), "a".repeat(60_000));
    for i in 0..40 {
        text.push_str(&format!("X{i}=$A\n"));
    }
    std::fs::write(&dotenv, text).unwrap();
    let m = manifest("command", Some(&dotenv));
    let o = build(&m, &[]).unwrap();
    assert!(o.get("BIG").is_none());
    let big = &o.dotenv_refused[0];
    assert_eq!((big.line, big.name.as_deref()), (1, Some("BIG")));
    assert!(big.reason.contains(&DOTENV_MAX_ENTRY_BYTES.to_string()));
    // A and three copies fit the .env's total; the fourth copy and the rest are refused.
    assert!(o.get("X2").is_some() && o.get("X3").is_none());
    let total = &o.dotenv_refused[1];
    assert_eq!((total.line, total.name.as_deref()), (6, Some("X3")));
    assert!(total.reason.contains(&DOTENV_MAX_TOTAL_BYTES.to_string()));
    assert_eq!(o.dotenv_refused.len(), 1 + 37);
    let size: usize = o.env.iter().map(|(k, v)| exec_cost(k, v)).sum();
    assert!(size <= ENV_MAX_TOTAL_BYTES, "{size}");
}

#[test]
fn an_environment_execve_would_refuse_is_an_error_naming_it() {
    let mut m = manifest("command", None);
    m.env.set.insert("HUGE".into(), "h".repeat(140_000));
    let err = build(&m, &[]).unwrap_err();
    assert!(
        matches!(&err, EnvError::EntryTooLong { name, layer: EnvSource::Harness, .. } if name == "HUGE"),
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains("HUGE (set by harness)"), "{text}");
    assert!(!text.contains("hhhh"), "{text}");

    let many: Vec<(String, String)> = (0..8)
        .map(|i| (format!("IMG{i}"), "i".repeat(100_000)))
        .collect();
    let err = build(&manifest("command", None), &many).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, EnvError::TooLarge { .. }), "{text}");
    assert!(
        text.contains("IMG0 (baseline, 100014 bytes)") && text.contains("over the limit of 524288"),
        "{text}"
    );
}

#[test]
fn policy_doc_in_manifest_md_is_generated_from_the_code() {
    // docs/manifest.md carries the pins, the rule lists and the limits between two markers;
    // they must be what the code enforces. PITCREW_UPDATE_DOCS=1 rewrites them.
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/manifest.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let begin = text
        .find(POLICY_DOC_BEGIN)
        .map(|i| i + POLICY_DOC_BEGIN.len() + 1)
        .expect("docs/manifest.md has no env-policy begin marker");
    let end = text
        .find(POLICY_DOC_END)
        .expect("docs/manifest.md has no env-policy end marker");
    let expected = policy_doc();
    if text[begin..end] != expected {
        if std::env::var("PITCREW_UPDATE_DOCS").as_deref() == Ok("1") {
            let updated = format!("{}{expected}{}", &text[..begin], &text[end..]);
            std::fs::write(&path, updated).unwrap();
        } else {
            panic!(
                "the env-policy tables of docs/manifest.md differ from the code; run \
                     PITCREW_UPDATE_DOCS=1 cargo test -p pitcrew-supervisor --lib policy_doc\n\
                     expected:\n{expected}"
            );
        }
    }
}

#[test]
fn trusted_layers_set_every_tls_and_proxy_name_and_the_record_names_the_layer() {
    // An image behind a TLS-inspecting egress proxy: its proxy and CA in its environment (the
    // baseline, which `--pass-env` also fills); the operator's harness adds OpenSSL settings.
    let mut m = manifest("pi", None);
    for (name, value) in [
        ("OPENSSL_CONF", "/etc/ssl/harness-openssl.cnf"),
        ("OPENSSL_CONF_INCLUDE", "/etc/ssl/openssl.d"),
        ("OPENSSL_ENGINES", "/usr/lib/engines-3"),
        ("HTTPS_PROXY", "http://harness-proxy:3128"),
        ("NO_PROXY", "localhost,127.0.0.1"),
        ("ALL_PROXY", "socks5://harness-proxy:1080"),
        ("NODE_USE_ENV_PROXY", "1"),
        ("NODE_TLS_REJECT_UNAUTHORIZED", "1"),
    ] {
        m.env.set.insert(name.into(), value.into());
    }
    let baseline = [
        ("NODE_EXTRA_CA_CERTS", "/etc/ssl/image-ca.pem"),
        ("NODE_USE_SYSTEM_CA", "1"),
        ("SSL_CERT_FILE", "/etc/ssl/image-bundle.pem"),
        ("SSL_CERT_DIR", "/etc/ssl/certs"),
        ("OPENSSL_MODULES", "/usr/lib/ossl-modules"),
        ("HTTP_PROXY", "http://image-proxy:3128"),
        ("https_proxy", "http://image-proxy:3128"),
        ("HTTPS_PROXY", "http://image-proxy:3128"),
        ("no_proxy", "localhost"),
    ];
    let o = build(&m, &base(&baseline)).unwrap();
    assert!(o.removed.is_empty(), "{:?}", o.removed);
    for (name, value) in baseline {
        if name == "HTTPS_PROXY" {
            continue; // the harness sets it too, later
        }
        assert_eq!(o.get(name), Some(value), "{name}");
        assert_eq!(o.layers[name], EnvSource::Baseline, "{name}");
    }
    for (name, value) in &m.env.set {
        assert_eq!(o.get(name), Some(value.as_str()), "{name}");
        assert_eq!(o.layers[name], EnvSource::Harness, "{name}");
    }
    let json = serde_json::to_value(&o).unwrap();
    assert_eq!(json["layers"]["NODE_EXTRA_CA_CERTS"], "baseline");
    assert_eq!(json["layers"]["HTTPS_PROXY"], "harness");
}

#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_env__dotenv_cannot_set_or_replace_tls_trust() {
    // The image trusts its proxy's CA, the harness names OpenSSL's configuration; an earlier
    // iteration writes a `.env` that swaps them for its own and adds the rest of the family.
    let (_t, dir) = tmp();
    let dotenv = dir.join(".env");
    let planted = [
        "NODE_EXTRA_CA_CERTS=/planted/ca.pem",
        "OPENSSL_CONF=/planted/openssl.cnf",
        "SSL_CERT_FILE=/planted/bundle.pem",
        "SSL_CERT_DIR=/planted/certs",
        "OPENSSL_CONF_INCLUDE=/planted/conf.d",
        "OPENSSL_MODULES=/planted/modules",
        "OPENSSL_ENGINES=/planted/engines",
        "NODE_USE_SYSTEM_CA=planted",
        "NODE_USE_ENV_PROXY=planted",
        "NODE_TLS_REJECT_UNAUTHORIZED=planted-0",
        "http_proxy=http://planted:1",
        "ALL_PROXY=socks5://planted:2",
    ];
    std::fs::write(&dotenv, format!("{}\nOK=1\n", planted.join("\n"))).unwrap();
    let mut m = manifest("pi", Some(&dotenv));
    m.env
        .set
        .insert("OPENSSL_CONF".into(), "/etc/ssl/harness-openssl.cnf".into());
    let o = build(
        &m,
        &base(&[
            ("NODE_EXTRA_CA_CERTS", "/etc/ssl/image-ca.pem"),
            ("SSL_CERT_FILE", "/etc/ssl/image-bundle.pem"),
        ]),
    )
    .unwrap();
    // The trusted values stay, named by their layer.
    assert_eq!(o.get("NODE_EXTRA_CA_CERTS"), Some("/etc/ssl/image-ca.pem"));
    assert_eq!(o.layers["NODE_EXTRA_CA_CERTS"], EnvSource::Baseline);
    assert_eq!(o.get("SSL_CERT_FILE"), Some("/etc/ssl/image-bundle.pem"));
    assert_eq!(o.layers["SSL_CERT_FILE"], EnvSource::Baseline);
    assert_eq!(o.get("OPENSSL_CONF"), Some("/etc/ssl/harness-openssl.cnf"));
    assert_eq!(o.layers["OPENSSL_CONF"], EnvSource::Harness);
    assert_eq!(o.get("OK"), Some("1"));
    assert_eq!(o.layers["OK"], EnvSource::Dotenv);
    // Every planted line is refused by name on its line, nothing of it reaches the agent, and
    // nothing was left to strip.
    let refused: Vec<(usize, &str)> = o
        .dotenv_refused
        .iter()
        .map(|r| (r.line, r.name.as_deref().unwrap_or("")))
        .collect();
    let expected: Vec<(usize, &str)> = planted
        .iter()
        .enumerate()
        .map(|(i, line)| (i + 1, line.split_once('=').unwrap().0))
        .collect();
    assert_eq!(refused, expected);
    assert!(o.removed.is_empty(), "{:?}", o.removed);
    assert!(
        !o.env.iter().any(|(_, v)| v.contains("planted")),
        "{:?}",
        o.env
    );
    let json = serde_json::to_string(&o).unwrap();
    assert!(!json.contains("planted"), "{json}");
}

#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_env__plugin_env_cannot_set_tls_trust() {
    // A plugin's names are upper case (the lower-case proxies fail that rule first).
    let names = crate::env_policy::tests::TLS_AND_PROXY_NAMES
        .iter()
        .filter(|n| !n.contains(|c: char| c.is_ascii_lowercase()));
    for &name in names {
        let mut m = manifest("pi", None);
        m.trees.push(tree_with_env("p", &[(name, "/planted")]));
        let err = build(&m, &base(&[(name, "/etc/ssl/image")])).unwrap_err();
        assert!(matches!(err, EnvError::PluginEnv { .. }), "{name}: {err}");
        let text = err.to_string();
        assert!(text.contains(name) && !text.contains("/planted"), "{text}");
    }
}

#[test]
fn pi_update_install_and_tui_log_names_are_stripped_from_every_layer() {
    // From the image's environment and the harness: stripped, each recorded with its layer and
    // rule. From the `.env`: refused by name (pi's configuration is the operator's).
    let (_t, dir) = tmp();
    let dotenv = dir.join(".env");
    std::fs::write(
        &dotenv,
        "PI_TUI_WRITE_LOG=/planted/log\nPI_SELF_UPDATE_COMMAND=/planted/update\n",
    )
    .unwrap();
    let mut m = manifest("pi", Some(&dotenv));
    // Validation refuses it in the harness (below); a manifest that carried it anyway is
    // stripped like the image's.
    m.env
        .set
        .insert("PI_MANAGED_INSTALL_ROOT".into(), "/planted/root".into());
    let o = build(
        &m,
        &base(&[
            ("PI_INSTALLER_API_BASE", "http://planted.example/releases"),
            ("PI_SELF_UPDATE_COMMAND", "/image/update"),
        ]),
    )
    .unwrap();
    for name in [
        "PI_INSTALLER_API_BASE",
        "PI_MANAGED_INSTALL_ROOT",
        "PI_TUI_WRITE_LOG",
        "PI_SELF_UPDATE_COMMAND",
    ] {
        assert!(o.get(name).is_none(), "{name} reached the agent");
        assert!(!o.layers.contains_key(name), "{name}");
    }
    let removed_of = |name: &str| {
        let r = removed(&o, name).unwrap_or_else(|| panic!("{name} not recorded"));
        (
            r.source.clone(),
            r.rule.split(' ').next().unwrap().to_string(),
        )
    };
    assert_eq!(
        removed_of("PI_INSTALLER_API_BASE"),
        (EnvSource::Baseline, "PI_INSTALLER_API_BASE".into())
    );
    assert_eq!(
        removed_of("PI_MANAGED_INSTALL_ROOT"),
        (EnvSource::Harness, "PI_MANAGED_INSTALL_ROOT".into())
    );
    // The image's PI_SELF_UPDATE_COMMAND is stripped; the `.env`'s never got in.
    assert_eq!(
        removed_of("PI_SELF_UPDATE_COMMAND"),
        (EnvSource::Baseline, "PI_SELF_UPDATE_COMMAND".into())
    );
    let refused: Vec<(usize, &str)> = o
        .dotenv_refused
        .iter()
        .map(|r| (r.line, r.name.as_deref().unwrap_or("")))
        .collect();
    assert_eq!(
        refused,
        [(1, "PI_TUI_WRITE_LOG"), (2, "PI_SELF_UPDATE_COMMAND")]
    );
    assert!(!serde_json::to_string(&o).unwrap().contains("planted"));

    // The manifest (and so the harness `env:`, checked by the same function) refuses them.
    for name in [
        "PI_INSTALLER_API_BASE",
        "PI_MANAGED_INSTALL_ROOT",
        "PI_TUI_WRITE_LOG",
    ] {
        let v = serde_json::json!({
            "version": 1, "runtime": "pi", "agent": {"binary": "/usr/bin/agent"},
            "prompt": "do it", "workdir": "/sandbox/workspace", "env": {"set": {name: "x"}},
        });
        let err = Manifest::from_json(v.to_string().as_bytes()).unwrap_err();
        assert!(err.to_string().contains(name), "{name}: {err}");
    }
}

#[test]
fn what_the_host_passed_by_name_is_named_pass_env() {
    let mut m = manifest("command", None);
    m.env.passed = vec!["API_KEY".into(), "ABSENT".into()];
    let o = build(&m, &base(&[("API_KEY", "k"), ("IMAGE_VAR", "i")])).unwrap();
    assert_eq!(o.get("API_KEY"), Some("k"));
    assert_eq!(o.layers["API_KEY"], EnvSource::PassEnv);
    assert_eq!(o.layers["IMAGE_VAR"], EnvSource::Baseline);
    assert!(!o.layers.contains_key("ABSENT"));
    assert_eq!(
        EnvSource::try_from("pass-env".to_string()),
        Ok(EnvSource::PassEnv)
    );
    assert_eq!(String::from(EnvSource::PassEnv), "pass-env");
}

#[test]
fn names_the_host_passed_when_it_started_the_sandbox_stay_pass_env_in_later_manifests() {
    // A later run's manifest names nothing (`--pass-env` is refused on an existing sandbox).
    let m = manifest("command", None);
    let baseline = base(&[
        ("API_KEY", "k"),
        ("IMAGE_VAR", "i"),
        (PASSED_AT_START, "API_KEY,ABSENT"),
    ]);
    let o = build(&m, &baseline).unwrap();
    assert_eq!(o.layers["API_KEY"], EnvSource::PassEnv);
    assert_eq!(o.layers["IMAGE_VAR"], EnvSource::Baseline);
    // The list itself is the supervisor's, never the agent's.
    assert_eq!(o.get(PASSED_AT_START), None);
}

/// The `.env` refusals of `o` as (line, name, reason).
fn refusals(o: &EnvOutcome) -> Vec<(usize, &str, &str)> {
    o.dotenv_refused
        .iter()
        .map(|r| (r.line, r.name.as_deref().unwrap_or(""), r.reason.as_str()))
        .collect()
}

#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_env__dotenv_cannot_replace_the_telemetry_or_a_setting_passed_with_pass_env() {
    // The operator passes its OpenTelemetry endpoint with the bearer token for it, and a
    // setting of its own, with `--pass-env`; the repository's `.env` points the endpoint at
    // itself (the token would follow) and swaps the setting, in both spellings.
    let (_t, dir) = tmp();
    let dotenv = dir.join(".env");
    std::fs::write(
        &dotenv,
        "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:9/planted\n\
         FOO_SETTING=planted\n\
         foo_setting=planted-lower\n\
         GREETING=kept\n",
    )
    .unwrap();
    let mut m = manifest("claude", Some(&dotenv));
    m.env.passed = vec![
        "OTEL_EXPORTER_OTLP_ENDPOINT".into(),
        "OTEL_EXPORTER_OTLP_HEADERS".into(),
        "FOO_SETTING".into(),
    ];
    let operator = [
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
    let o = build(&m, &base(&operator)).unwrap();
    for (name, value) in operator {
        assert_eq!(o.get(name), Some(value), "{name}");
        assert_eq!(o.layers[name], EnvSource::PassEnv, "{name}");
    }
    assert_eq!(o.get("foo_setting"), None);
    assert_eq!(o.get("GREETING"), Some("kept"));
    let refused = refusals(&o);
    let named: Vec<(usize, &str)> = refused.iter().map(|r| (r.0, r.1)).collect();
    assert_eq!(
        named,
        [
            (1, "OTEL_EXPORTER_OTLP_ENDPOINT"),
            (2, "FOO_SETTING"),
            (3, "foo_setting")
        ]
    );
    for (_, name, reason) in &refused {
        assert!(reason.contains("pass-env"), "{name}: {reason}");
    }
    let json = serde_json::to_string(&o).unwrap();
    assert!(
        !json.contains("planted") && !json.contains("op-token"),
        "{json}"
    );
}

#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_env__dotenv_cannot_replace_what_the_harness_sets_and_says_so() {
    // The harness applies after the `.env`, so its value would win anyway; the `.env` line is
    // still refused by name, naming the layer, so the record shows the attempt.
    let (_t, dir) = tmp();
    let dotenv = dir.join(".env");
    std::fs::write(
        &dotenv,
        "FOO_SETTING=planted\nOTEL_EXPORTER_OTLP_HEADERS=planted\nOK=1\n",
    )
    .unwrap();
    let mut m = manifest("pi", Some(&dotenv));
    m.env.set.insert("FOO_SETTING".into(), "harness".into());
    m.env
        .set
        .insert("OTEL_EXPORTER_OTLP_HEADERS".into(), "x-key=harness".into());
    let o = build(&m, &[]).unwrap();
    assert_eq!(o.get("FOO_SETTING"), Some("harness"));
    assert_eq!(o.layers["FOO_SETTING"], EnvSource::Harness);
    assert_eq!(o.get("OTEL_EXPORTER_OTLP_HEADERS"), Some("x-key=harness"));
    assert_eq!(o.get("OK"), Some("1"));
    let refused = refusals(&o);
    let named: Vec<(usize, &str)> = refused.iter().map(|r| (r.0, r.1)).collect();
    assert_eq!(
        named,
        [(1, "FOO_SETTING"), (2, "OTEL_EXPORTER_OTLP_HEADERS")]
    );
    for (_, name, reason) in &refused {
        assert!(reason.contains("harness"), "{name}: {reason}");
    }
}

#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_env__plugin_env_cannot_replace_what_pass_env_or_the_harness_sets() {
    for (layer, name) in [("pass-env", "FOO_SETTING"), ("harness", "BAR_SETTING")] {
        let mut m = manifest("pi", None);
        m.env.passed = vec!["FOO_SETTING".into()];
        m.env.set.insert("BAR_SETTING".into(), "harness".into());
        m.trees.push(tree_with_env("p", &[(name, "planted")]));
        let err = build(&m, &base(&[("FOO_SETTING", "operator")])).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(name) && text.contains(layer) && text.contains("\"p\""),
            "{text}"
        );
        assert!(!text.contains("planted"), "{text}");
    }
}

#[test]
fn the_dotenv_may_replace_the_images_own_values_and_prepend_to_a_passed_path() {
    // The image's environment is defaults (PATH, the locale, NODE_ENV); only its trusted-only
    // families (proxies, TLS trust, telemetry, …) are kept from the `.env`. A `PATH` the local
    // engine passed with `--pass-env` stays the one the `.env` prepends a directory to (one
    // outside the agent's own, which would be dropped): the pin decides `PATH`.
    let (_t, dir) = tmp();
    let dotenv = dir.join(".env");
    std::fs::write(&dotenv, "PATH=/opt/tools/bin:$PATH\nNODE_ENV=development\n").unwrap();
    let mut m = manifest("command", Some(&dotenv));
    m.env.passed = vec!["PATH".into()];
    let o = build(
        &m,
        &base(&[("PATH", "/usr/bin:/bin"), ("NODE_ENV", "production")]),
    )
    .unwrap();
    assert_eq!(o.get("PATH"), Some("/opt/tools/bin:/usr/bin:/bin"));
    assert_eq!(o.layers["PATH"], EnvSource::Dotenv);
    assert_eq!(o.get("NODE_ENV"), Some("development"));
    assert!(o.dotenv_refused.is_empty(), "{:?}", o.dotenv_refused);
}

#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_env__dotenv_cannot_set_or_replace_the_runners_values() {
    // The runner's values (`--runner-env`) apply after the `.env`; a `.env` line setting one,
    // or another name of the runner's namespace, is refused by name, and the record names the
    // runner's by layer `runner`.
    let (_t, dir) = tmp();
    let dotenv = dir.join(".env");
    std::fs::write(
        &dotenv,
        "FULLSEND_TOOL_ALLOWLIST=bash,read\nFULLSEND_PI_MANIFEST=/tmp/forged\nOK=1\n",
    )
    .unwrap();
    let mut m = manifest("pi", Some(&dotenv));
    m.env
        .runner
        .insert("FULLSEND_TOOL_ALLOWLIST".into(), "read".into());
    let o = build(&m, &[]).unwrap();
    assert_eq!(o.get("FULLSEND_TOOL_ALLOWLIST"), Some("read"));
    assert_eq!(o.layers["FULLSEND_TOOL_ALLOWLIST"], EnvSource::Runner);
    assert_eq!(o.get("FULLSEND_PI_MANIFEST"), None);
    assert_eq!(o.get("OK"), Some("1"));
    let refused = refusals(&o);
    let named: Vec<(usize, &str)> = refused.iter().map(|r| (r.0, r.1)).collect();
    assert_eq!(
        named,
        [(1, "FULLSEND_TOOL_ALLOWLIST"), (2, "FULLSEND_PI_MANIFEST")]
    );
    assert!(refused[0].2.contains("runner"), "{}", refused[0].2);
    let json = serde_json::to_value(&o).unwrap();
    assert_eq!(json["layers"]["FULLSEND_TOOL_ALLOWLIST"], "runner");
    assert!(!json.to_string().contains("bash,read"), "{json}");
}

#[test]
fn a_plugin_env_cannot_set_a_runner_value() {
    let mut m = manifest("pi", None);
    m.env.runner.insert("FULLSEND_CANARY".into(), "c".into());
    m.trees
        .push(tree_with_env("p", &[("FULLSEND_CANARY", "planted")]));
    let text = build(&m, &[]).unwrap_err().to_string();
    assert!(text.contains("FULLSEND_CANARY"), "{text}");
    assert!(!text.contains("planted"), "{text}");
}

#[test]
fn runner_values_are_only_runner_names_of_one_line() {
    use crate::env_policy::runner_env_problems;
    assert!(runner_env_problems("FULLSEND_TOOL_ALLOWLIST", "read,bash").is_empty());
    for (name, value) in [
        ("PATH", "/x"),
        ("HOME", "/x"),
        ("fullsend_x", "1"),
        ("FULLSEND_X", "a\nb"),
    ] {
        assert!(!runner_env_problems(name, value).is_empty(), "{name}");
    }
    let text = runner_env_problems("PITCREW_X", "1")[0].to_string();
    assert!(text.contains("FULLSEND_*"), "{text}");
    let mut m = manifest("pi", None);
    m.env.runner.insert("NODE_OPTIONS".into(), "x".into());
    let err = m.validate().unwrap_err().to_string();
    assert!(err.contains("env.runner"), "{err}");
}

#[test]
#[allow(non_snake_case)] // attack tests are named attack_<class>__<case>
fn attack_env__path_entries_of_the_agents_own_directories_are_dropped() {
    let dirs = ["/sb/workspace", "/sb/home", "/sb/tmp"];
    let (kept, dropped) = agent_safe_path(
        "bin::/usr/bin:./x:/sb/workspace/node_modules/.bin:/sb/home/.local/bin:/usr/../sb/tmp:/sb/workspace2/bin:/bin",
        &dirs,
    );
    assert_eq!(kept, "/usr/bin:/sb/workspace2/bin:/bin");
    assert_eq!(
        dropped,
        [
            "bin",
            "",
            "./x",
            "/sb/workspace/node_modules/.bin",
            "/sb/home/.local/bin",
            "/usr/../sb/tmp"
        ]
    );
    let (kept, dropped) = agent_safe_path("/usr/bin:/bin", &dirs);
    assert_eq!((kept.as_str(), dropped.len()), ("/usr/bin:/bin", 0));
}

#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_env__a_trusted_xdg_home_in_the_workspace_is_removed() {
    let mut m = manifest("claude", None);
    m.env.set.insert(
        "XDG_CONFIG_HOME".into(),
        "/sandbox/workspace/.config".into(),
    );
    m.env.set.insert(
        "XDG_DATA_DIRS".into(),
        "/usr/share:/sandbox/workspace/share".into(),
    );
    m.env.set.insert("XDG_CACHE_HOME".into(), "cache".into());
    m.env
        .set
        .insert("XDG_STATE_HOME".into(), "/var/../sandbox/workspace".into());
    let o = build(
        &m,
        &base(&[
            ("XDG_RUNTIME_DIR", "/sandbox/workspace/run"),
            ("XDG_CONFIG_DIRS", "/etc/xdg"),
        ]),
    )
    .unwrap();
    for name in [
        "XDG_CONFIG_HOME",
        "XDG_DATA_DIRS",
        "XDG_CACHE_HOME",
        "XDG_STATE_HOME",
        "XDG_RUNTIME_DIR",
    ] {
        assert!(o.get(name).is_none(), "{name} reached the agent");
        let removed = o.removed.iter().find(|r| r.name == name).unwrap();
        assert_eq!(removed.rule, XDG_IN_AGENT_DIR);
    }
    assert_eq!(
        o.removed
            .iter()
            .find(|r| r.name == "XDG_RUNTIME_DIR")
            .unwrap()
            .source,
        EnvSource::Baseline
    );
    assert_eq!(o.get("XDG_CONFIG_DIRS"), Some("/etc/xdg"));
}

/// `network: {platform: openshell}` launches only with the platform's proxy variable in the
/// agent's environment: a `.env` in the workspace (any spelling, `export`, spaces, mixed case)
/// or a plugin's `env:` cannot supply it, so the launch is still refused.
#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_egress__a_platform_proxy_variable_from_dotenv_or_a_plugin_is_not_the_platforms() {
    let (_t, dir) = tmp();
    let dotenv = dir.join(".env");
    std::fs::write(
        &dotenv,
        "HTTPS_PROXY=http://planted:1\nexport https_proxy=http://planted:2\n\
         ALL_PROXY = http://planted:3\nall_proxy='http://planted:4'\nHttps_Proxy=http://planted:5\n\
         \u{feff}HTTPS_PROXY=http://planted:6\n",
    )
    .unwrap();
    let mut m = manifest("command", Some(&dotenv));
    m.network = Some(crate::manifest::NetworkPolicy::Platform {
        platform: "openshell".into(),
    });
    let o = build(&m, &base(&[("PATH", "/usr/bin")])).unwrap();
    assert!(
        !serde_json::to_string(&o.env).unwrap().contains("planted"),
        "{:?}",
        o.env
    );
    assert!(crate::sandbox::netns::platform_refusal(m.network.as_ref(), &o.env).is_some());
    for name in ["HTTPS_PROXY", "all_proxy"] {
        let mut m = manifest("command", None);
        m.network = Some(crate::manifest::NetworkPolicy::Platform {
            platform: "openshell".into(),
        });
        m.trees
            .push(tree_with_env("p", &[(name, "http://planted:7")]));
        match build(&m, &base(&[])) {
            Err(_) => {}
            Ok(o) => assert!(
                crate::sandbox::netns::platform_refusal(m.network.as_ref(), &o.env).is_some(),
                "{name} from a plugin satisfied the platform check"
            ),
        }
    }
}
