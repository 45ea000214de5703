use super::*;

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| (*a).to_string()).collect()
}

/// The problems of `args` as `(index, message)`.
fn problems(runtime: Runtime, against: Against<'_>, args: &[&str]) -> Vec<(usize, String)> {
    agent_args_problems(runtime, against, &strings(args))
        .into_iter()
        .map(|(i, p)| (i, p.to_string()))
        .collect()
}

fn refused(runtime: Runtime, against: Against<'_>, args: &[&str]) -> Vec<(usize, String)> {
    agent_args_problems(runtime, against, &strings(args))
        .into_iter()
        .filter_map(|(i, p)| match p {
            AgentArgProblem::Refused { option, .. } => Some((i, option)),
            _ => None,
        })
        .collect()
}

#[test]
fn the_tables_are_sorted_and_every_release_knows_pitcrews_own_options() {
    for runtime in [Runtime::Pi, Runtime::Claude, Runtime::Codex] {
        for (version, options) in releases(runtime) {
            assert!(
                options.windows(2).all(|w| w[0].name < w[1].name),
                "{runtime:?} {version}: not sorted (find binary-searches them)"
            );
            for o in options.iter() {
                assert!(o.names.split(", ").any(|n| n == o.name), "{o:?}");
            }
        }
    }
    // What pitcrew passes itself is refused, in every release.
    for (version, options) in releases(Runtime::Pi) {
        for own in [
            "--print",
            "--mode",
            "--no-extensions",
            "-e",
            "--skill",
            "--no-skills",
            "--tools",
            "--model",
            "--session-dir",
        ] {
            let o = find(options, own).unwrap_or_else(|| panic!("pi {version} lacks {own}"));
            assert!(matches!(o.verdict, Verdict::Refused { .. }), "{o:?}");
        }
    }
    for (version, options) in releases(Runtime::Claude) {
        for own in [
            "-p",
            "--output-format",
            "--verbose",
            "--setting-sources",
            "--tools",
            "--settings",
            "--plugin-dir",
            "--agent",
            "--model",
            "--dangerously-skip-permissions",
        ] {
            let o = find(options, own).unwrap_or_else(|| panic!("claude {version} lacks {own}"));
            assert!(matches!(o.verdict, Verdict::Refused { .. }), "{o:?}");
        }
    }
    assert!(releases(Runtime::Command).is_empty());
}

#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_harness__pi_options_that_load_trust_or_override_are_refused_in_every_form() {
    let all = Against::Supported;
    // The issue's own case: trust, then an unverified extension of the workspace.
    let got = problems(
        Runtime::Pi,
        all,
        &["--approve", "-e", "./unverified_ext.ts"],
    );
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0].0, 0);
    assert!(
        got[0]
            .1
            .starts_with("--approve is an option of pi 0.87.1, 1.6.0 that changes project trust"),
        "{got:?}"
    );
    assert_eq!(got[1].0, 1);
    assert!(
        got[1]
            .1
            .starts_with("-e is an option of pi 0.73.1, 0.87.1, 1.6.0 that loads code"),
        "{got:?}"
    );
    assert!(
        got[1]
            .1
            .ends_with("; use plugins: (a pi-extension tree) or adapters: with use: pi-extension"),
        "{got:?}"
    );
    for (args, option) in [
        (&["--extension=npm:evil"][..], "--extension"),
        (&["--extension", "./x.ts"], "--extension"),
        (&["-e ./x.ts"], "-e"),
        (&["-e=./x.ts"], "-e"),
        (&["-a"], "-a"),
        (&["--skill", "./skills/x"], "--skill"),
        (&["--skill=./skills/x"], "--skill"),
        (&["--prompt-template", "p.md"], "--prompt-template"),
        (&["--theme", "t.json"], "--theme"),
        (&["--system-prompt", "SYSTEM.md"], "--system-prompt"),
        (
            &["--append-system-prompt", ".pi/APPEND_SYSTEM.md"],
            "--append-system-prompt",
        ),
        (&["--model", "other/model"], "--model"),
        (&["--provider", "x"], "--provider"),
        (&["--tools", "read,bash,write"], "--tools"),
        (&["-t", "bash"], "-t"),
        (&["--no-tools"], "--no-tools"),
        (&["--mode", "text"], "--mode"),
        (&["-p"], "-p"),
        (&["--session-dir", "/tmp/s"], "--session-dir"),
        (&["--session", "x"], "--session"),
        (&["-c"], "-c"),
        (&["--no-session"], "--no-session"),
        (&["--api-key", "sk-x"], "--api-key"),
        (&["--no-approve"], "--no-approve"),
        (&["--no-context-files"], "--no-context-files"),
        (&["--export", "x.html"], "--export"),
        (&["--help"], "--help"),
        (&["-v"], "-v"),
        (&["--"], "--"),
    ] {
        let got = refused(Runtime::Pi, all, args);
        assert_eq!(got, [(0, option.to_string())], "{args:?}");
    }
    // What to use instead is named where there is a key.
    let got = problems(Runtime::Pi, all, &["--skill", "x"]);
    assert!(got[0].1.ends_with("; use skills:"), "{got:?}");
    let got = problems(Runtime::Pi, all, &["--model", "x"]);
    assert!(got[0].1.ends_with("; use agent.model"), "{got:?}");
    let got = problems(Runtime::Pi, all, &["-nc"]);
    assert!(
        got[0].1.ends_with("; use agent.context_files: false"),
        "{got:?}"
    );
}

#[test]
fn pi_tuning_options_and_extension_flags_pass() {
    for against in [
        Against::Supported,
        Against::Found(Some("0.73.1")),
        Against::Found(Some("1.6.0")),
        Against::Found(None),
    ] {
        for args in [
            &["--thinking", "high"][..],
            &["--verbose"],
            &["--offline"],
            &["--greeting=Hello", "--loud"],
            &["--greeting", "Hello"],
            &[],
        ] {
            assert_eq!(
                problems(Runtime::Pi, against, args),
                [],
                "{against:?} {args:?}"
            );
        }
    }
    // Options of later releases only.
    for args in [
        &["--no-mcp"][..],
        &["--exclude-tools", "ask"],
        &["-xt", "ask"],
        &["-n", "x"],
    ] {
        assert_eq!(
            problems(Runtime::Pi, Against::Supported, args),
            [],
            "{args:?}"
        );
        assert_eq!(
            problems(Runtime::Pi, Against::Found(Some("1.6.0")), args),
            [],
            "{args:?}"
        );
    }
}

#[test]
fn the_supervisor_checks_against_the_release_it_found() {
    let args = ["--approve", "-e", "./unverified_ext.ts"];
    // 0.73.1 has no --approve: it would be an extension flag there; -e is refused.
    assert_eq!(
        refused(Runtime::Pi, Against::Found(Some("0.73.1")), &args),
        [(1, "-e".to_string())]
    );
    let got = problems(Runtime::Pi, Against::Found(Some("1.6.0")), &args);
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got[0].1.contains("of pi 1.6.0 that"), "{got:?}");
    assert!(got[1].1.contains("of pi 1.6.0 that"), "{got:?}");
    // A release pitcrew does not know, or none: every supported release's rules.
    for version in [None, Some("9.9.9"), Some("garbage")] {
        let got = problems(Runtime::Pi, Against::Found(version), &args);
        assert!(
            got[0].1.contains("of pi 0.87.1, 1.6.0 that"),
            "{version:?} {got:?}"
        );
        assert!(
            got[1].1.contains("of pi 0.73.1, 0.87.1, 1.6.0 that"),
            "{version:?} {got:?}"
        );
    }
    let got = problems(
        Runtime::Claude,
        Against::Found(Some("2.1.332")),
        &["--mcp-config", "x.json"],
    );
    assert!(
        got[0].1.contains("of Claude Code 2.1.332 that loads code"),
        "{got:?}"
    );
    let got = problems(
        Runtime::Claude,
        Against::Found(Some("3.0.0")),
        &["--mcp-config", "x.json"],
    );
    assert!(
        got[0].1.contains("of Claude Code 2.1.332 that loads code"),
        "{got:?}"
    );
    assert_eq!(
        problems(
            Runtime::Command,
            Against::Supported,
            &["--approve", "-e", "x"]
        ),
        []
    );
}

#[test]
fn bare_words_pass_only_as_the_value_of_the_option_before_them() {
    let all = Against::Supported;
    let got = problems(Runtime::Pi, all, &["hello"]);
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].1.contains("would read it as (part of) the prompt"),
        "{got:?}"
    );
    assert_eq!(
        problems(Runtime::Pi, all, &["--thinking", "high", "stray"]).len(),
        1
    );
    // A flag with its value after `=` takes no second one.
    assert_eq!(
        problems(Runtime::Pi, all, &["--greeting=x", "stray"]).len(),
        1
    );
    // pi gives an extension flag the next word unless it starts with `@` (a file to attach).
    assert_eq!(problems(Runtime::Pi, all, &["--loud", "x"]), []);
    assert_eq!(
        problems(Runtime::Pi, all, &["--loud", "@/etc/passwd"]).len(),
        1
    );
    assert_eq!(problems(Runtime::Pi, all, &["@/etc/passwd"]).len(), 1);
    // A value is a value whatever it looks like, but a dash element is checked as an option
    // even there (pi would take `-e` as --thinking's value; refusing it is the safe reading).
    assert_eq!(
        refused(Runtime::Pi, all, &["--thinking", "-e", "x.ts"]),
        [(1, "-e".into())]
    );
    // Claude Code (commander): `<x...>` takes every word up to the next option.
    assert_eq!(
        problems(
            Runtime::Claude,
            all,
            &["--disallowedTools", "Bash", "Edit", "--max-turns", "3"]
        ),
        []
    );
    assert_eq!(
        problems(Runtime::Claude, all, &["--max-turns", "3", "4"]).len(),
        1
    );
    // `[x]` takes a word when one follows.
    assert_eq!(problems(Runtime::Claude, all, &["-d", "hooks"]), []);
    assert_eq!(problems(Runtime::Claude, all, &["-d"]), []);
}

#[test]
fn an_option_left_without_its_value_at_the_end_would_take_pitcrews_next_argument() {
    let all = Against::Supported;
    // pi `--thinking` takes the next argument whatever it is: pitcrew's `--session-dir`.
    for (runtime, args) in [
        (Runtime::Pi, &["--thinking"][..]),
        (Runtime::Pi, &["--offline", "-n"]),
        (Runtime::Claude, &["--max-turns"]),
        (Runtime::Claude, &["-n"]),
    ] {
        let got = problems(runtime, all, args);
        assert_eq!(got.len(), 1, "{args:?}: {got:?}");
        assert_eq!(got[0].0, args.len() - 1, "{args:?}: {got:?}");
        assert!(
            got[0]
                .1
                .contains("takes a value and is the last of agent.args"),
            "{args:?}: {got:?}"
        );
    }
    // An optional value, a list of values, an extension flag: the runtime takes none of
    // pitcrew's options for them.
    for (runtime, args) in [
        (Runtime::Pi, &["--loud"][..]),
        (Runtime::Claude, &["-d"]),
        (Runtime::Claude, &["--disallowedTools", "Bash"]),
        (Runtime::Claude, &["--max-turns=3"]),
        (Runtime::Claude, &["-n1"]),
    ] {
        assert_eq!(problems(runtime, all, args), [], "{args:?}");
    }
}

#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_harness__claude_options_that_load_trust_or_override_are_refused_in_every_form() {
    let all = Against::Supported;
    let got = problems(Runtime::Claude, all, &["--setting-sources", "user,project"]);
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].1.starts_with(
            "--setting-sources is an option of Claude Code 2.1.332 that changes project trust"
        ),
        "{got:?}"
    );
    let got = problems(Runtime::Claude, all, &["--mcp-config", "x.json"]);
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0]
            .1
            .ends_with("; use plugins: (a claude-plugin tree with its .mcp.json)"),
        "{got:?}"
    );
    for (args, option) in [
        (&["--setting-sources=user,project"][..], "--setting-sources"),
        (&["--setting-sources user,project"], "--setting-sources"),
        (&["--mcp-config", "a.json", "b.json"], "--mcp-config"),
        (&["--mcp-config={\"mcpServers\":{}}"], "--mcp-config"),
        (&["--plugin-dir", "./p"], "--plugin-dir"),
        (&["--plugin-dir-no-mcp", "./p"], "--plugin-dir-no-mcp"),
        (&["--plugin-url", "https://x/p.zip"], "--plugin-url"),
        (&["--settings", "{\"hooks\":{}}"], "--settings"),
        (&["--agents", "{}"], "--agents"),
        (&["--add-dir", ".."], "--add-dir"),
        (
            &["--system-prompt-file", "SYSTEM.md"],
            "--system-prompt-file",
        ),
        (
            &["--append-system-prompt-file", "x.md"],
            "--append-system-prompt-file",
        ),
        (&["--project-config-root", "."], "--project-config-root"),
        (&["--managed-settings", "{}"], "--managed-settings"),
        (&["--bare"], "--bare"),
        (&["--safe-mode"], "--safe-mode"),
        (&["--permission-mode", "default"], "--permission-mode"),
        (&["--allowedTools", "Bash"], "--allowedTools"),
        (&["--allowed-tools", "Bash"], "--allowed-tools"),
        (&["--tools", "Bash"], "--tools"),
        (&["--model", "opus"], "--model"),
        (&["--output-format", "text"], "--output-format"),
        (&["--continue"], "--continue"),
        (&["--resume", "abc"], "--resume"),
        (&["-d2e", "-r"], "-r"),
        (&["--"], "--"),
        (&["--channels", "x"], "--channels"),
        (&["--ignore-persisted-trust"], "--ignore-persisted-trust"),
    ] {
        let at = args.iter().position(|a| a.starts_with(option)).unwrap();
        let got = refused(Runtime::Claude, all, args);
        assert_eq!(got, [(at, option.to_string())], "{args:?}");
    }
    // A group of short options is read as commander reads it: each letter until one that takes
    // a value.
    assert_eq!(refused(Runtime::Claude, all, &["-dc"]), []);
    assert_eq!(refused(Runtime::Claude, all, &["-nc"]), []);
    assert_eq!(refused(Runtime::Claude, all, &["-cp"]), [(0, "-c".into())]);
    // An option Claude Code's table does not allow by name is refused: there are no extension
    // flags, and a hidden option missing from the table must not slip through.
    let got = problems(Runtime::Claude, all, &["--no-such-option"]);
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].1.starts_with(
            "--no-such-option is not an option of Claude Code 2.1.332 that pitcrew allows"
        ),
        "{got:?}"
    );
    assert_eq!(problems(Runtime::Claude, all, &["-x"]).len(), 1);
    assert_eq!(problems(Runtime::Claude, all, &["-xd"]).len(), 1);
    // `-dx` is `-d x`: the debug filter `x`.
    assert_eq!(problems(Runtime::Claude, all, &["-dx"]), []);
}

#[test]
fn claude_tuning_options_pass() {
    for args in [
        &["--max-turns", "5"][..],
        &["--max-turns=5"],
        &["--effort", "high"],
        &["--append-system-prompt", "Be brief."],
        &["--disallowedTools", "WebFetch"],
        &["--strict-mcp-config"],
        &["-n", "run-1"],
        &["-d2e"],
        &["--json-schema", "{\"type\":\"object\"}"],
    ] {
        assert_eq!(
            problems(Runtime::Claude, Against::Supported, args),
            [],
            "{args:?}"
        );
    }
}

#[test]
fn agent_args_doc_in_agent_support_md_is_generated_from_the_tables() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/agent-support.md");
    let doc = std::fs::read_to_string(&path).expect("docs/agent-support.md");
    let begin = doc
        .find(DOC_BEGIN)
        .expect("BEGIN marker in docs/agent-support.md");
    let end = doc
        .find(DOC_END)
        .expect("END marker in docs/agent-support.md");
    let expected = agent_args_doc();
    let current = &doc[begin + DOC_BEGIN.len()..end];
    if current != expected {
        if std::env::var_os("PITCREW_UPDATE_DOCS").is_some() {
            let updated = format!("{}{DOC_BEGIN}{expected}{}", &doc[..begin], &doc[end..]);
            std::fs::write(&path, updated).expect("write docs/agent-support.md");
            return;
        }
        panic!(
            "docs/agent-support.md's agent.args tables differ from the option tables; run\n\
             PITCREW_UPDATE_DOCS=1 cargo test -p pitcrew-supervisor --lib agent_args_doc\n\
             and commit the result"
        );
    }
}

#[test]
fn codex_refuses_what_loads_config_bypasses_its_sandbox_or_grants_trust() {
    let all = Against::Supported;
    let refused = |args: &[&str]| {
        let args: Vec<String> = args.iter().map(|a| (*a).to_string()).collect();
        agent_args_problems(Runtime::Codex, all, &args)
    };
    for args in [
        &["-c", "model_provider=\"x\""][..],
        &["--config=mcp_servers.x.command=\"sh\""],
        &["-p", "evil"],
        &["--profile", "evil"],
        &["--dangerously-bypass-approvals-and-sandbox"],
        &["--dangerously-bypass-hook-trust"],
        &["--trust"],
        &["--add-dir", "/"],
        &["-s", "danger-full-access"],
        &["-sdanger-full-access"],
        &["--enable", "hooks"],
        &["-m", "gpt"],
        &["--json"],
        &["resume"],
        &["--no-such-option"],
    ] {
        let problems = refused(args);
        assert!(!problems.is_empty(), "{args:?} passed");
    }
    assert_eq!(refused(&["--color", "never"]), []);
    let text = refused(&["--trust"])[0].1.to_string();
    assert!(
        text.contains("Codex CLI 0.169.1") && text.contains("trust"),
        "{text}"
    );
}
