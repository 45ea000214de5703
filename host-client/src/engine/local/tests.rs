//! Unit tests of `local`.

use super::*;

fn own() -> impl Iterator<Item = (OsString, OsString)> {
    [
        ("PATH", "/usr/bin:/bin"),
        ("HOME", "/root"),
        ("GITHUB_TOKEN", "ghp_secret"),
        ("SSH_AUTH_SOCK", "/tmp/ssh-agent"),
        ("LANG", "C.UTF-8"),
        ("LC_ALL", "C"),
        ("MOCK_API_KEY", "k"),
        ("NODE_OPTIONS", "--require x"),
    ]
    .into_iter()
    .map(|(k, v)| (k.into(), v.into()))
}

fn names(env: &[(OsString, OsString)]) -> Vec<String> {
    env.iter()
        .map(|(k, _)| k.to_string_lossy().into_owned())
        .collect()
}

#[test]
fn only_path_the_locale_and_passed_names_reach_a_local_sandbox() {
    let env = baseline_env(own(), &[], &[]).unwrap();
    assert_eq!(names(&env), ["PATH", "LANG", "LC_ALL"]);
    let env = baseline_env(own(), &["MOCK_API_KEY".into()], &[]).unwrap();
    // And which names were passed, for every later run of the sandbox.
    assert_eq!(
        names(&env),
        [
            "PATH",
            "LANG",
            "LC_ALL",
            "MOCK_API_KEY",
            "PITCREW_PASSED_ENV"
        ]
    );
    assert_eq!(env.last().unwrap().1, "MOCK_API_KEY");
}

#[test]
fn passing_a_loader_variable_an_unset_or_a_bad_name_is_refused() {
    let err = baseline_env(own(), &["NODE_OPTIONS".into()], &[]).unwrap_err();
    assert!(
        err.to_string()
            .contains("--pass-env NODE_OPTIONS: refused by the loader rule NODE_OPTIONS"),
        "{err}"
    );
    let err = baseline_env(own(), &["NOT_THERE".into()], &[]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "--pass-env NOT_THERE: not set in pitcrew's environment"
    );
    let err = baseline_env(own(), &["A=B".into()], &[]).unwrap_err();
    assert!(
        err.to_string().contains("not an environment variable name"),
        "{err}"
    );
    let err = baseline_env(own(), &["1X".into()], &[]).unwrap_err();
    assert!(
        err.to_string().contains("not an environment variable name"),
        "{err}"
    );
}

#[test]
fn passing_a_name_the_supervisor_sets_itself_is_refused() {
    for name in ["HOME", "TMPDIR", "CLAUDE_CONFIG_DIR", "PI_TELEMETRY"] {
        let own = own().chain([(OsString::from(name), OsString::from("v"))]);
        let err = baseline_env(own, &[name.to_owned()], &[]).unwrap_err();
        assert_eq!(
                err.to_string(),
                format!("--pass-env {name}: the supervisor sets {name} itself; a passed value would be replaced")
            );
    }
    let own_x = own().chain([(OsString::from("PITCREW_X"), OsString::from("v"))]);
    let err = baseline_env(own_x, &["PITCREW_X".into()], &[]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "--pass-env PITCREW_X: reserved, PITCREW_* (the supervisor's namespace)"
    );
    let err = baseline_env(own(), &["ld_preload".into()], &[]).unwrap_err();
    assert!(err.to_string().contains("loader rule"), "{err}");
    // PATH and the locale are passed anyway.
    let env = baseline_env(own(), &["PATH".into(), "LC_ALL".into()], &[]).unwrap();
    assert_eq!(
        names(&env),
        ["PATH", "LANG", "LC_ALL", "PITCREW_PASSED_ENV"]
    );
}

#[test]
fn proxy_ca_shell_and_git_variables_may_be_passed() {
    // `--pass-env` fills the baseline, a trusted layer: an operator behind a TLS-inspecting
    // proxy passes its proxy and CA (only the `.env` and a plugin's `env:` may not set them).
    let pass = [
        "HTTPS_PROXY",
        "https_proxy",
        "NODE_EXTRA_CA_CERTS",
        "OPENSSL_CONF",
        "SHELL",
        "GIT_SSH_COMMAND",
    ];
    let own = own().chain(pass.map(|n| (OsString::from(n), OsString::from("v"))));
    let passed: Vec<String> = pass.iter().map(|n| (*n).to_owned()).collect();
    let env = baseline_env(own, &passed, &[]).unwrap();
    for name in pass {
        assert!(names(&env).iter().any(|n| n == name), "{name}");
    }
}

#[test]
fn only_the_locale_categories_pass_not_every_lc_name() {
    let own = own().chain([(OsString::from("LC_TERMINAL"), OsString::from("iTerm2"))]);
    assert_eq!(
        names(&baseline_env(own, &[], &[]).unwrap()),
        ["PATH", "LANG", "LC_ALL"]
    );
}

#[test]
fn supervisor_flag_is_checked_by_the_one_lookup_rule() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain");
    std::fs::write(&plain, b"").unwrap();
    let err = find_supervisor(Some(&plain)).unwrap_err().to_string();
    assert!(err.contains("not an executable file"), "{err}");
    let err = find_supervisor(Some(dir.path())).unwrap_err().to_string();
    assert!(err.contains("not an executable file"), "{err}");
    let err = find_supervisor(Some(&dir.path().join("absent")))
        .unwrap_err()
        .to_string();
    assert!(err.contains("does not exist"), "{err}");
    let exe = dir.path().join("pitcrew-init");
    std::fs::write(&exe, b"").unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(find_supervisor(Some(&exe)).unwrap(), exe);
}

#[test]
fn a_model_credential_reaches_a_local_sandbox_as_its_placeholder_only() {
    let own = || {
        [("ANTHROPIC_API_KEY", "sk-real"), ("PATH", "/usr/bin")]
            .into_iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
    };
    let pass = ["ANTHROPIC_API_KEY".to_string()];
    let env = baseline_env(own(), &pass, &pass).unwrap();
    let key = env
        .iter()
        .find(|(k, _)| k == "ANTHROPIC_API_KEY")
        .map(|(_, v)| v.clone());
    assert_eq!(
        key,
        Some(OsString::from("pitcrew-placeholder-ANTHROPIC_API_KEY"))
    );
    assert!(!env.iter().any(|(_, v)| v == "sk-real"));
}
