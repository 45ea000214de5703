//! Unit tests of `env_policy`.

use super::*;

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_string()).collect()
}

#[test]
fn loader_families_are_stripped_case_insensitively() {
    for name in [
        "NODE_OPTIONS",
        "node_options",
        "NODE_PATH",
        "JITI_ALIAS",
        "JITI_FS_CACHE",
        "jiti_debug",
        "LD_PRELOAD",
        "LD_AUDIT",
        "BUN_OPTIONS",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "BASH_ENV",
        "ENV",
        "BASH_FUNC_echo%%",
        "GLIBC_TUNABLES",
        "CLAUDE_ENV_FILE",
    ] {
        assert!(loader_denial(name).is_some(), "{name} must be stripped");
    }
    // Proxy, TLS-trust and program-choosing names are not loaders: a trusted layer (an image
    // behind a TLS-inspecting proxy) may set them.
    for name in [
        "PATH",
        "HOME",
        "LANG",
        "TERM",
        "ENVIRONMENT",
        "MY_NODE",
        "GREETING",
        "OPENSSL_CONF",
        "NODE_EXTRA_CA_CERTS",
        "NODE_TLS_REJECT_UNAUTHORIZED",
        "GIT_SSH_COMMAND",
        "GIT_CONFIG_GLOBAL",
        "CLAUDE_CODE_SHELL_PREFIX",
        "HTTPS_PROXY",
        "SHELL",
    ] {
        assert!(loader_denial(name).is_none(), "{name} must pass");
    }
}

/// Names an untrusted layer may not set, and that the harness (trusted) may.
const TRUSTED_ONLY_NAMES: &[&str] = &[
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
    "NODE_USE_ENV_PROXY",
    "NODE_USE_SYSTEM_CA",
    "NODE_EXTRA_CA_CERTS",
    "NODE_TLS_REJECT_UNAUTHORIZED",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "SSLKEYLOGFILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "CURL_HOME",
    "NETRC",
    "WGETRC",
    "OPENSSL_CONF",
    "OPENSSL_MODULES",
    "ANTHROPIC_BASE_URL",
    "OPENAI_BASE_URL",
    "AWS_ENDPOINT_URL_BEDROCK_RUNTIME",
    "SHELL",
    "CLAUDE_CODE_SHELL",
    "CLAUDE_CODE_SHELL_PREFIX",
    "CLAUDE_CODE_USE_BEDROCK",
    "ZDOTDIR",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_EXTERNAL_DIFF",
    "GIT_PAGER",
    "GIT_EDITOR",
    "GIT_ASKPASS",
    "GIT_EXEC_PATH",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_COUNT",
    "GIT_TEMPLATE_DIR",
    "GIT_SSL_NO_VERIFY",
    "PAGER",
    "MANPAGER",
    "EDITOR",
    "VISUAL",
    "BROWSER",
    "LESSOPEN",
    "LESSCLOSE",
    "VIMINIT",
    "SSH_ASKPASS",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "RIPGREP_CONFIG_PATH",
    "USE_BUILTIN_RIPGREP",
    "TIRITH_MODE",
    "ACTIONS_ID_TOKEN_REQUEST_URL",
];

#[test]
fn proxy_trust_and_program_names_are_for_trusted_layers_only() {
    for name in TRUSTED_ONLY_NAMES {
        assert!(untrusted_denial(name).is_some(), "{name}: .env may set it");
        assert!(
            plugin_env_denial(name).is_some(),
            "{name}: a plugin may set it"
        );
        if is_valid_name(name) && !name.starts_with("ACTIONS_") {
            assert!(
                sandbox_env_problems(name, "v").is_empty(),
                "{name}: the harness may not set it"
            );
        }
    }
    // The pinned config homes are refused from the untrusted layers in every runtime.
    for name in [
        "CLAUDE_CONFIG_DIR",
        "PI_CODING_AGENT_DIR",
        "pi_coding_agent_dir",
    ] {
        assert!(untrusted_denial(name).is_some(), "{name}");
    }
    for name in [
        "PATH",
        "LANG",
        "GREETING",
        "NODE_ENV",
        "TERM",
        "PROXY_HOST",
        "MY_PROXY_PORT",
        "DATABASE_URL",
        "CI",
    ] {
        assert!(untrusted_denial(name).is_none(), "{name} must pass");
    }
    let rule = untrusted_denial("https_proxy").unwrap();
    assert_eq!(rule.pattern, Suffix("_PROXY"));
    assert_eq!(
        untrusted_denial("GIT_SSH_COMMAND").unwrap().pattern,
        Exact("GIT_SSH_COMMAND")
    );
}

#[test]
fn every_rule_is_the_first_match_for_its_own_name() {
    // An exact name after a prefix that covers it would never be reported with its own
    // reason; a duplicate would be dead.
    for rules in [
        LOADER_RULES,
        TRUSTED_ONLY_RULES,
        SANDBOX_ENV_RULES,
        EGRESS_ENV_RULES,
        PLUGIN_ENV_RULES,
    ] {
        for (i, rule) in rules.iter().enumerate() {
            let sample = match rule.pattern {
                Exact(p) | Prefix(p) | Suffix(p) | Contains(p) => p,
            };
            let first = rules.iter().position(|r| r.pattern.matches(sample));
            assert_eq!(first, Some(i), "{rule} is shadowed");
        }
    }
}

#[test]
fn reasons_fit_a_table_cell() {
    for rules in [
        LOADER_RULES,
        TRUSTED_ONLY_RULES,
        SANDBOX_ENV_RULES,
        EGRESS_ENV_RULES,
        PLUGIN_ENV_RULES,
    ] {
        for rule in rules {
            assert!(
                !rule.reason.contains(['|', '\n', '`']) && !rule.reason.is_empty(),
                "{rule}"
            );
        }
    }
}

#[test]
fn plugin_env_rules_cover_exact_prefix_suffix_and_substring() {
    for name in [
        "PATH",
        "home",
        "OPENSSL_CONF",
        "SHELL",
        "PAGER",
        "XDG_CONFIG_HOME",
        "NODE_ENV",
        "PI_OFFLINE",
        "GOOGLE_CLOUD_PROJECT",
        "HTTPS_PROXY",
        "https_proxy",
        "MY_API_KEY",
        "GH_TOKEN",
        "DB_SECRET_VALUE",
        "AWS_REGION",
        "LD_PRELOAD",
        "JITI_ALIAS",
    ] {
        assert!(plugin_env_denial(name).is_some(), "{name} must be refused");
    }
    for name in ["GREETING", "HELLO_LEVEL", "TOKENIZER", "SECRETARY"] {
        assert!(plugin_env_denial(name).is_none(), "{name} must be allowed");
    }
}

#[test]
fn plugin_env_entry_checks_name_shape_and_value() {
    assert!(plugin_env_problems("GREETING", "hi").is_empty());
    assert_eq!(
        plugin_env_problems("greeting", "hi"),
        vec![EnvProblem::BadName("greeting".into())]
    );
    assert_eq!(
        plugin_env_problems("9X", "hi"),
        vec![EnvProblem::BadName("9X".into())]
    );
    assert_eq!(
        plugin_env_problems("X", "a\nb"),
        vec![EnvProblem::BadValue("X".into())]
    );
    assert_eq!(plugin_env_problems("X", "a\0b").len(), 1);
    assert_eq!(plugin_env_problems("X", "a\rb").len(), 1);
    let denied = plugin_env_problems("NODE_OPTIONS", "--require x");
    assert!(matches!(denied.as_slice(), [EnvProblem::Denied { .. }]));
    assert!(denied[0].to_string().contains("NODE_OPTIONS"));
}

#[test]
fn sandbox_env_reserves_pins_and_loader_names() {
    for name in [
        "PATH",
        "HOME",
        "JITI_FS_CACHE",
        "PITCREW_X",
        "LD_PRELOAD",
        "NODE_OPTIONS",
        "CLAUDE_CONFIG_DIR",
    ] {
        assert!(sandbox_env_reserved(name).is_some(), "{name}");
    }
    assert!(sandbox_env_reserved("OPENAI_API_KEY").is_none());
    // Not pinned, so not reserved: the operator may choose the shell.
    assert!(sandbox_env_reserved("SHELL").is_none());
    assert!(sandbox_env_problems("LANG", "C.UTF-8").is_empty());
}

#[test]
fn pi_args_accept_flags_values_and_one_bare_word() {
    let args = strings(&["--greeting=Hello", "--loud", "--level", "3", "--quiet"]);
    assert!(pi_args_problems(&args, None).is_empty());
    let registered = strings(&["greeting", "loud", "level", "quiet"]);
    assert!(pi_args_problems(&args, Some(&registered)).is_empty());
}

#[test]
fn pi_args_refuse_each_rule() {
    let check = |v: &[&str]| pi_args_problems(&strings(v), None);
    assert!(matches!(
        check(&["--model=x"])[0].1,
        PiArgProblem::PiOwnOption { .. }
    ));
    assert!(matches!(
        check(&["--no-extensions"])[0].1,
        PiArgProblem::PiOwnOption { .. }
    ));
    assert!(matches!(
        check(&["-e"])[0].1,
        PiArgProblem::PiOwnOption { .. }
    ));
    assert!(matches!(check(&["-x"])[0].1, PiArgProblem::NotAFlag(_)));
    assert!(matches!(check(&["---x"])[0].1, PiArgProblem::NotAFlag(_)));
    assert!(matches!(check(&["--=x"])[0].1, PiArgProblem::NotAFlag(_)));
    assert!(matches!(check(&["--"])[0].1, PiArgProblem::EndOfOptions));
    assert!(matches!(check(&["word"])[0].1, PiArgProblem::StrayWord(_)));
    assert!(matches!(
        check(&["--a", "b", "c"])[0],
        (2, PiArgProblem::StrayWord(_))
    ));
    assert!(matches!(
        check(&["--a=v", "b"])[0],
        (1, PiArgProblem::StrayWord(_))
    ));
    assert!(matches!(check(&["--a=-v"])[0].1, PiArgProblem::BadValue(_)));
    assert!(matches!(
        check(&["--a=@file"])[0].1,
        PiArgProblem::BadValue(_)
    ));
    assert!(matches!(
        check(&["--a", "@file"])[0].1,
        PiArgProblem::BadValue(_)
    ));
    assert!(matches!(
        check(&["--a=x\ny"])[0].1,
        PiArgProblem::ControlCharacter(_)
    ));
    // `--a -b`: pi reads `-b` as an option; it is refused as not a --flag.
    assert!(matches!(
        check(&["--a", "-b"])[0],
        (1, PiArgProblem::NotAFlag(_))
    ));
}

/// The one problem of `pi.args` `[arg]`, as its message.
fn only_problem(arg: &str) -> String {
    let problems = pi_args_problems(&strings(&[arg]), None);
    assert_eq!(problems.len(), 1, "{arg}: {problems:?}");
    problems[0].1.to_string()
}

#[test]
fn pi_args_refuse_the_options_of_every_supported_release_naming_them() {
    // Options some releases added, with their short aliases: refused for every release, since
    // a harness may run on any of them.
    for (arg, releases) in [
        ("--no-approve", "0.87.1, 1.6.0"),
        ("-na", "0.87.1, 1.6.0"),
        ("--approve", "0.87.1, 1.6.0"),
        ("-a", "0.87.1, 1.6.0"),
        ("--exclude-tools=bash", "0.87.1, 1.6.0"),
        ("-xt", "0.87.1, 1.6.0"),
        ("--session-id", "0.87.1, 1.6.0"),
        ("--name=x", "0.87.1, 1.6.0"),
        ("-n", "0.87.1, 1.6.0"),
        ("--use-theme", "0.87.1, 1.6.0"),
        ("--tui-mode=regular", "0.87.1, 1.6.0"),
        ("--no-mcp", "1.6.0"),
        ("--model=x", "0.73.1, 0.87.1, 1.6.0"),
        ("-e", "0.73.1, 0.87.1, 1.6.0"),
        ("-nt", "0.73.1, 0.87.1, 1.6.0"),
        ("-p=x", "0.73.1, 0.87.1, 1.6.0"),
    ] {
        let flag = arg.split_once('=').map_or(arg, |(n, _)| n);
        let problems = pi_args_problems(&strings(&[arg]), None);
        assert_eq!(
            problems,
            vec![(
                0,
                PiArgProblem::PiOwnOption {
                    flag: flag.to_string(),
                    releases: releases.to_string(),
                }
            )],
            "{arg}"
        );
        assert_eq!(
            only_problem(arg),
            format!("{flag} is one of pi's own options ({releases}), not an extension flag")
        );
    }
    // Refused before the registered-flag check: an extension may not claim one either.
    let registered = strings(&["no-mcp"]);
    assert!(matches!(
        &pi_args_problems(&strings(&["--no-mcp"]), Some(&registered))[..],
        [(0, PiArgProblem::PiOwnOption { flag, .. })] if flag == "--no-mcp"
    ));
    // The value rules still apply to an own option's value.
    assert!(matches!(
        &pi_args_problems(&strings(&["--no-approve=-x"]), None)[..],
        [
            (0, PiArgProblem::PiOwnOption { .. }),
            (0, PiArgProblem::BadValue(_))
        ]
    ));
    // Only exact names: a flag that merely starts like one, or another case, is not pi's.
    for arg in ["--no-approved", "--Model", "--modelx", "-nax"] {
        assert!(
            !pi_args_problems(&strings(&[arg]), None)
                .iter()
                .any(|(_, p)| matches!(p, PiArgProblem::PiOwnOption { .. })),
            "{arg}"
        );
    }
}

#[test]
fn pi_args_refuse_the_end_of_options() {
    assert!(only_problem("--").contains("what follows would be read as the prompt"));
    // What follows `--` is not a value of it: a bare word after it is stray.
    assert!(matches!(
        &pi_args_problems(&strings(&["--", "hi"]), None)[..],
        [
            (0, PiArgProblem::EndOfOptions),
            (1, PiArgProblem::StrayWord(_))
        ]
    ));
}

#[test]
fn pi_option_tables_are_sorted_and_cover_every_release() {
    let versions: Vec<&str> = pi_options::PI_RELEASES.iter().map(|(v, _)| *v).collect();
    assert_eq!(versions, pi_options::PI_VERSIONS);
    for (version, options) in pi_options::PI_RELEASES {
        // Strictly increasing: pi_own_option_releases binary-searches them.
        assert!(
            options.windows(2).all(|w| w[0].name < w[1].name),
            "pi {version}: not sorted"
        );
        // What every release has, and what pitcrew itself passes.
        for own in [
            "--help",
            "--version",
            "--model",
            "--extension",
            "-e",
            "--no-extensions",
            "--tools",
            "--no-builtin-tools",
            "--skill",
            "--no-skills",
            "--print",
            "--mode",
            "--session-dir",
        ] {
            assert!(
                agent_args::find(options, own).is_some(),
                "pi {version} lacks {own}"
            );
        }
    }
    assert_eq!(pi_own_option_releases("--"), ["0.87.1", "1.6.0"]);
    assert_eq!(pi_own_option_releases("--no-mcp"), ["1.6.0"]);
    assert!(pi_own_option_releases("--greeting").is_empty());
}

#[test]
fn pi_args_must_name_registered_flags() {
    let registered = strings(&["greeting"]);
    let problems = pi_args_problems(&strings(&["--loud"]), Some(&registered));
    assert!(matches!(&problems[0].1, PiArgProblem::Unregistered { flag, .. } if flag == "--loud"));
    let none: Vec<String> = Vec::new();
    let problems = pi_args_problems(&strings(&["--loud"]), Some(&none));
    assert!(problems[0].1.to_string().contains("registered: none"));
}

/// The TLS-trust and proxy variables an image behind a TLS-inspecting egress proxy sets (also
/// the `environment` tests' list).
pub(crate) const TLS_AND_PROXY_NAMES: &[&str] = &[
    "NODE_EXTRA_CA_CERTS",
    "NODE_USE_SYSTEM_CA",
    "NODE_USE_ENV_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "OPENSSL_CONF",
    "OPENSSL_CONF_INCLUDE",
    "OPENSSL_MODULES",
    "OPENSSL_ENGINES",
    "NODE_TLS_REJECT_UNAUTHORIZED",
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "NO_PROXY",
    "no_proxy",
    "ALL_PROXY",
    "all_proxy",
];

#[test]
fn tls_and_proxy_names_are_set_by_the_trusted_layers_and_refused_in_the_untrusted_ones() {
    for name in TLS_AND_PROXY_NAMES {
        // The image's environment (the baseline, which `--pass-env` fills): not stripped.
        assert!(
            loader_denial(name).is_none(),
            "{name}: stripped from the image's environment"
        );
        // `--pass-env` and the manifest's `env.set` refuse only loader and reserved names.
        assert!(
            sandbox_env_reserved(name).is_none(),
            "{name}: reserved for --pass-env"
        );
        if is_valid_name(name) {
            assert!(
                sandbox_env_problems(name, "/etc/ssl/image.pem").is_empty(),
                "{name}: the manifest's env.set may not carry it"
            );
        }
        // The `.env`: the line is refused by name. A plugin's `env:`: an error.
        assert!(untrusted_denial(name).is_some(), "{name}: .env may set it");
        assert!(
            plugin_env_problems(name, "/planted")
                .iter()
                .any(|p| matches!(p, EnvProblem::Denied { .. })),
            "{name}: a plugin may set it"
        );
    }
    // Each TLS variable is refused with its own reason (a row of its own in docs/manifest.md).
    for &name in &TLS_AND_PROXY_NAMES[..10] {
        assert_eq!(
            untrusted_denial(name).unwrap().pattern,
            Exact(name),
            "{name}"
        );
    }
    for name in ["HTTP_PROXY", "no_proxy", "all_proxy"] {
        assert_eq!(untrusted_denial(name).unwrap().pattern, Suffix("_PROXY"));
    }
    // The rest of the families stay trusted-only as before.
    assert_eq!(
        untrusted_denial("OPENSSL_ia32cap").unwrap().pattern,
        Prefix("OPENSSL_")
    );
    assert_eq!(
        untrusted_denial("SSL_KEY_FILE").unwrap().pattern,
        Prefix("SSL_")
    );
}

#[test]
fn pi_update_install_and_tui_log_names_are_stripped_from_every_layer() {
    for name in [
        "PI_SELF_UPDATE_COMMAND",
        "PI_INSTALLER_API_BASE",
        "PI_MANAGED_INSTALL_ROOT",
        "PI_TUI_WRITE_LOG",
        "pi_installer_api_base",
        "Pi_Managed_Install_Root",
    ] {
        // Stripped from the image's environment and from whatever else set it (recorded in
        // `env.removed`); `--pass-env` refuses a loader name.
        let rule = loader_denial(name).unwrap_or_else(|| panic!("{name} is not stripped"));
        assert_eq!(rule.pattern.to_string(), name.to_ascii_uppercase());
        // The harness `env:`: a validation error, not a silent drop.
        assert!(sandbox_env_reserved(name).is_some(), "{name}");
        if is_valid_name(name) {
            assert!(
                matches!(
                    sandbox_env_problems(name, "x").as_slice(),
                    [EnvProblem::Denied { .. }]
                ),
                "{name}"
            );
        }
        // A plugin's `env:`: an error. The `.env`: the line is refused by name (`PI_*`, pi's
        // configuration is the operator's) before the loader rule would strip it.
        assert!(plugin_env_denial(name).is_some(), "{name}");
        assert_eq!(untrusted_denial(name).unwrap().pattern, Prefix("PI_"));
    }
    // pi's other variables are configuration, not code: only a trusted layer sets them.
    for name in ["PI_TUI_DEBUG", "PI_HARDWARE_CURSOR", "PI_CACHE_RETENTION"] {
        assert!(loader_denial(name).is_none(), "{name}");
        assert!(untrusted_denial(name).is_some(), "{name}");
    }
}

#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_env__telemetry_debug_and_github_names_are_for_trusted_layers_only() {
    // What the runtimes read that sends their traffic (and the credentials that go with it)
    // somewhere, changes the TLS trust of that traffic, or prints it where the agent reads it.
    for name in [
        // Claude Code's OpenTelemetry exporters: endpoint, bearer headers, TLS trust, client
        // key, and the switches that export prompts, tool content and API bodies.
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
        "OTEL_EXPORTER_OTLP_CERTIFICATE",
        "OTEL_EXPORTER_OTLP_CLIENT_KEY",
        "OTEL_LOG_USER_PROMPTS",
        "OTEL_LOG_RAW_API_BODIES",
        "otel_exporter_otlp_endpoint",
        "ANT_OTEL_EXPORTER_OTLP_ENDPOINT",
        "BETA_TRACING_ENDPOINT",
        "ENABLE_BETA_TRACING_DETAILED",
        "ENABLE_ENHANCED_TELEMETRY_BETA",
        // gRPC (the OTLP gRPC exporter): TLS roots, ciphers, traces.
        "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH",
        "GRPC_SSL_CIPHER_SUITES",
        "GRPC_TRACE",
        "GRPC_VERBOSITY",
        // Debug output into stderr.log.
        "DEBUG",
        "DEBUG_AUTH",
        "NODE_DEBUG",
        "NODE_DEBUG_NATIVE",
        // Claude Code sends GH_ENTERPRISE_TOKEN to the host GH_HOST names.
        "GH_HOST",
        "GH_TOKEN",
        "GH_ENTERPRISE_TOKEN",
        "GH_CONFIG_DIR",
        // Claude Code's session endpoint, the metadata server choice, Bun's runtime controls.
        "SESSION_INGRESS_URL",
        "METADATA_SERVER_DETECTION",
        "BUN_JSC_useDollarVM",
        "BUN_CRASH_REPORT_URL",
    ] {
        assert!(untrusted_denial(name).is_some(), "{name}: .env may set it");
        assert!(
            plugin_env_denial(name).is_some(),
            "{name}: a plugin may set it"
        );
        assert!(loader_denial(name).is_none(), "{name}: stripped");
        if is_valid_name(name) {
            assert!(
                sandbox_env_problems(name, "v").is_empty(),
                "{name}: the harness may not set it"
            );
        }
    }
    // What stays: identity, display and locale; switches that only turn traffic off.
    for name in [
        "USER",
        "LOGNAME",
        "TERM",
        "LANG",
        "TZ",
        "NODE_ENV",
        "FORCE_COLOR",
        "NO_COLOR",
        "DISABLE_TELEMETRY",
        "DO_NOT_TRACK",
        "DATABASE_URL",
        "PATH",
    ] {
        assert!(untrusted_denial(name).is_none(), "{name} must pass");
    }
}

#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_env__bun_inspector_and_napi_rs_library_path_are_stripped_from_every_layer() {
    // Claude Code (a Bun binary) runs the file BUN_INSPECT_PRELOAD names before its own code;
    // pi 0.73.1 require()s the file NAPI_RS_NATIVE_LIBRARY_PATH names when DISPLAY is set.
    for name in [
        "BUN_INSPECT",
        "BUN_INSPECT_PRELOAD",
        "BUN_INSPECT_CONNECT_TO",
        "bun_inspect_preload",
        "NAPI_RS_NATIVE_LIBRARY_PATH",
    ] {
        assert!(loader_denial(name).is_some(), "{name} must be stripped");
        assert!(sandbox_env_reserved(name).is_some(), "{name}");
        assert!(plugin_env_denial(name).is_some(), "{name}");
    }
}

/// The names that would point the agent's connections somewhere pitcrew's `network:` does not
/// say: proxies (with their lowercase forms), TLS trust, git's connection programs.
const EGRESS_NAMES: &[&str] = &[
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
    "FTP_PROXY",
    "ftp_proxy",
    "GRPC_PROXY",
    "grpc_proxy",
    "NODE_USE_ENV_PROXY",
    "NODE_EXTRA_CA_CERTS",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "GIT_SSL_CAINFO",
    "GIT_PROXY_COMMAND",
    "GIT_SSH_COMMAND",
];

#[test]
fn the_harness_env_cannot_set_the_proxy_tls_trust_or_git_connection_programs() {
    for name in EGRESS_NAMES {
        let rule = harness_env_denial(name).unwrap_or_else(|| panic!("{name}: allowed"));
        assert!(
            rule.reason.contains("network:"),
            "{name}: the reason does not name the harness's network: {rule}"
        );
        let upper = name.to_ascii_uppercase();
        let problems = harness_env_problems(&upper, "http://10.0.0.1:3128");
        assert!(
            problems.iter().any(
                |p| matches!(p, EnvProblem::Denied { .. }) && p.to_string().contains("pitcrew")
            ),
            "{name}: {problems:?}"
        );
        // `--pass-env` and the image's environment keep them (a site's own proxy or CA).
        assert!(sandbox_env_reserved(name).is_none(), "{name}");
        assert!(loader_denial(name).is_none(), "{name}");
    }
    // Endpoint variables stay the operator's: the default network follows them.
    for name in ["ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"] {
        assert!(harness_env_problems(name, "https://gateway.example").is_empty());
    }
}

#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_egress__dotenv_and_plugin_env_cannot_point_the_runtime_at_another_proxy_ca_or_endpoint() {
    // The agent writes the `.env` between iterations; a plugin's author writes its `env:`.
    // Neither may reroute the runtime's connections, change what it trusts or move its model
    // endpoint: each name is refused with a reason that says why.
    for name in EGRESS_NAMES.iter().chain(&[
        "ANTHROPIC_BASE_URL",
        "OPENAI_BASE_URL",
        "anthropic_base_url",
    ]) {
        let rule = untrusted_denial(name).unwrap_or_else(|| panic!("{name}: .env may set it"));
        assert!(!rule.reason.is_empty());
        assert!(
            plugin_env_problems(name, "http://10.0.0.1:3128")
                .iter()
                .any(|p| matches!(p, EnvProblem::Denied { .. })),
            "{name}: a plugin may set it"
        );
    }
    assert!(untrusted_denial("HTTPS_PROXY")
        .unwrap()
        .reason
        .contains("pitcrew sets the proxy"));
}

#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_env__codex_home_and_configuration_are_for_trusted_layers_only() {
    // CODEX_HOME is pinned (never the harness's); the rest of Codex's names, its CA file and
    // its provider variables only a trusted layer may set.
    for name in ["CODEX_HOME", "codex_home"] {
        assert!(untrusted_denial(name).is_some(), "{name}");
        assert!(sandbox_env_reserved(name).is_some(), "{name}");
    }
    for name in [
        "CODEX_CA_CERTIFICATE",
        "CODEX_SANDBOX_NETWORK_DISABLED",
        "CODEX_MANAGED_CONFIG_PATH",
        "OPENAI_BASE_URL",
        "OPENAI_API_KEY",
    ] {
        assert!(untrusted_denial(name).is_some(), "{name}");
        assert!(plugin_env_denial(name).is_some(), "{name}");
    }
    // The CA file changes TLS trust: pitcrew's egress decides it, not the harness.
    assert!(harness_env_denial("CODEX_CA_CERTIFICATE").is_some());
    assert!(harness_env_denial("OPENAI_BASE_URL").is_none());
}
