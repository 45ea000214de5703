//! Tests of the whole harness path: validation of a file, then the manifest and the uploads
//! compiled from it.

use super::*;
use crate::exit_code::PinRole;
use crate::manifest::FileUse;
use crate::protocol::Owner;

/// Validates `text` as the harness of an empty directory.
fn check(text: &str) -> Validated {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("harness.yaml");
    std::fs::write(&file, text).unwrap();
    validate(&file).unwrap()
}

/// Found by the `harness` fuzz target: `command: [/bin/..]` passed validation, but the
/// manifest built from it was refused (`'..' segment`), so `validate` said ok and
/// `--emit-manifest` and `run` failed. The program follows the manifest's rule now.
#[test]
fn fuzz_regression_program_paths_follow_the_manifest_rule() {
    let refused = [
        (
            "runtime: command\ncommand: [/bin/.., -c, \"true\"]\n",
            "command[0]",
            "'..'",
        ),
        ("runtime: command\ncommand: [\"\"]\n", "command[0]", "empty"),
        (
            "runtime: pi\nprompt: hi\nagent:\n  binary: \"/usr/bin/pi\\r\"\n",
            "agent.binary",
            "carriage return",
        ),
        (
            "runtime: pi\nprompt: hi\nagent:\n  binary: \"\"\n",
            "agent.binary",
            "empty",
        ),
    ];
    for (text, field, needle) in refused {
        let v = check(text);
        assert!(
            v.problems
                .iter()
                .any(|p| p.field == field && p.message.contains(needle)),
            "{text:?}: {:?}",
            v.problems
        );
        assert!(v.manifest(&SandboxLayout::default()).is_none());
    }
    for text in [
        "runtime: command\ncommand: [/bin/true]\n",
        "runtime: command\ncommand: [sh, -c, \"true\"]\n",
        "runtime: pi\nprompt: hi\nagent:\n  binary: /usr/local/bin/pi\n",
    ] {
        let v = check(text);
        assert!(v.is_ok(), "{text:?}: {:?}", v.problems);
        let manifest = v.manifest(&SandboxLayout::default()).unwrap();
        manifest.validate().unwrap();
    }
}

/// The runtime and the adapter `use:` are read by their enums' names; any other name is refused
/// with the list of the ones there are.
#[test]
fn runtime_and_adapter_use_names_are_the_enums_names() {
    let v = check("runtime: Pi\nprompt: hi\n");
    assert_eq!(
        v.problems
            .iter()
            .map(|p| (p.field.as_str(), p.message.as_str()))
            .collect::<Vec<_>>(),
        [(
            "runtime",
            "\"Pi\" is not a runtime (pi, claude, codex, opencode or command)"
        )]
    );
    for (name, runtime) in [
        ("pi", Runtime::Pi),
        ("claude", Runtime::Claude),
        ("codex", Runtime::Codex),
        ("opencode", Runtime::Opencode),
        ("command", Runtime::Command),
    ] {
        let extra = match runtime {
            Runtime::Command => "command: [/bin/true]\n",
            Runtime::Opencode => "prompt: hi\nagent:\n  model: m\n",
            _ => "prompt: hi\n",
        };
        let v = check(&format!("runtime: {name}\n{extra}"));
        assert!(v.is_ok(), "{name}: {:?}", v.problems);
        assert_eq!(v.harness.unwrap().runtime, runtime);
    }

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.js"), "export default () => {};\n").unwrap();
    let file = dir.path().join("harness.yaml");
    let with_use = |usage: &str| {
        format!("runtime: pi\nprompt: hi\nadapters:\n  - path: a.js\n    role: hook-adapter\n    use: {usage}\n")
    };
    std::fs::write(&file, with_use("pi_extension")).unwrap();
    let v = validate(&file).unwrap();
    assert_eq!(
        v.problems
            .iter()
            .map(|p| (p.field.as_str(), p.message.as_str()))
            .collect::<Vec<_>>(),
        [(
            "adapters[0].use",
            "\"pi_extension\" is not one of verify, pi-extension, claude-settings"
        )]
    );
    for (name, usage) in [
        ("verify", FileUse::Verify),
        ("pi-extension", FileUse::PiExtension),
    ] {
        std::fs::write(&file, with_use(name)).unwrap();
        let v = validate(&file).unwrap();
        assert!(v.is_ok(), "{name}: {:?}", v.problems);
        assert_eq!(v.adapters[0].spec.usage, usage);
    }
}

/// Validates `adapters` (YAML list items) for `runtime` in a directory holding
/// `config/reviewer.md`, `config/models.json` and `other/models.json`.
fn check_adapters(runtime: &str, adapters: &str) -> Validated {
    let dir = tempfile::tempdir().unwrap();
    for f in [
        "config/reviewer.md",
        "config/models.json",
        "other/models.json",
    ] {
        let path = dir.path().join(f);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        // pi reads its models.json for the default network: JSON, like pi's own.
        let content = if f.ends_with(".json") {
            format!("{{\"file\": \"{f}\"}}\n")
        } else {
            format!("{f}\n")
        };
        std::fs::write(&path, content).unwrap();
    }
    let file = dir.path().join("harness.yaml");
    std::fs::write(
        &file,
        format!("runtime: {runtime}\nprompt: hi\nadapters:\n{adapters}"),
    )
    .unwrap();
    validate(&file).unwrap()
}

/// A config adapter's `to:` places it below the runtime's config directory: the manifest pins
/// it there and the upload puts it there.
#[test]
fn a_config_adapter_goes_where_its_to_says_below_the_config_dir() {
    let v = check_adapters(
        "claude",
        "  - {path: config/reviewer.md, role: config, to: agents/reviewer.md}\n  \
         - {path: config/models.json, role: config}\n",
    );
    assert!(v.is_ok(), "{:?}", v.problems);
    assert_eq!(v.adapters[0].spec.to.as_deref(), Some("agents/reviewer.md"));
    let layout = SandboxLayout { root: "/sb".into() };
    let Compiled { manifest, uploads } = v.compile(&layout).unwrap();
    manifest.validate().unwrap();
    let files: Vec<&str> = manifest.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(
        files,
        ["/sb/config/agents/reviewer.md", "/sb/config/models.json"]
    );
    let adapters: Vec<&str> = uploads
        .iter()
        .filter(|u| u.kind == UploadKind::AdapterFile)
        .map(|u| u.sandbox_path.as_str())
        .collect();
    assert_eq!(adapters, files);
    assert_eq!(manifest.files[0].role, crate::exit_code::PinRole::Config);
    // The same file twice, at two places, is fine.
    let v = check_adapters(
        "pi",
        "  - {path: config/models.json, role: config}\n  \
         - {path: config/models.json, role: config, to: backup/models.json}\n",
    );
    assert!(v.is_ok(), "{:?}", v.problems);
}

/// A bad `to:` is a problem with its line and column: not relative, not plain names, on an
/// adapter that is not a config file, in pi's session directory, or at a place another
/// config adapter takes (the same path, or a file where another needs a directory).
#[test]
fn a_bad_to_is_named_with_its_line_and_column() {
    for (runtime, adapters, wanted) in [
        (
            "claude",
            "  - {path: config/reviewer.md, role: config, to: /etc/agents/r.md}\n",
            "4:50: adapters[0].to: \"/etc/agents/r.md\" is absolute",
        ),
        (
            "claude",
            "  - {path: config/reviewer.md, role: config, to: ../agents/r.md}\n",
            "4:50: adapters[0].to: \"../agents/r.md\" must be plain names",
        ),
        (
            "claude",
            "  - {path: config/reviewer.md, role: config, to: agents/./r.md}\n",
            "must be plain names",
        ),
        (
            "claude",
            "  - {path: config/reviewer.md, role: config, to: agents//r.md}\n",
            "must be plain names",
        ),
        (
            "claude",
            "  - {path: config/reviewer.md, role: config, to: agents/}\n",
            "no trailing slash",
        ),
        (
            "claude",
            "  - {path: config/reviewer.md, role: config, to: \"a\\\\b.md\"}\n",
            "backslash",
        ),
        (
            "claude",
            "  - {path: config/reviewer.md, role: config, to: \"\"}\n",
            "adapters[0].to: is empty",
        ),
        (
            "claude",
            "  - {path: config/reviewer.md, role: config, to: [a]}\n",
            "adapters[0].to: expected a string",
        ),
        (
            "claude",
            "  - path: config/reviewer.md\n    role: hook-adapter\n    to: agents/r.md\n",
            "6:9: adapters[0].to: only a config adapter (role: config)",
        ),
        (
            "pi",
            "  - {path: config/reviewer.md, role: config, to: sessions/r.md}\n",
            "pi's session directory",
        ),
        (
            "claude",
            "  - {path: config/models.json, role: config}\n  \
             - {path: other/models.json, role: config}\n",
            "adapters[1]: uploads under the same name \"models.json\" as adapters[0]",
        ),
        (
            "claude",
            "  - {path: config/models.json, role: config, to: agents/x.md}\n  \
             - {path: config/reviewer.md, role: config, to: agents/x.md}\n",
            "uploads under the same name \"agents/x.md\"",
        ),
        (
            "claude",
            "  - {path: config/models.json, role: config, to: agents}\n  \
             - {path: config/reviewer.md, role: config, to: agents/reviewer.md}\n",
            "as a file and as a directory",
        ),
        (
            "claude",
            "  - {path: config/reviewer.md, role: config, to: agents/reviewer.md}\n  \
             - {path: config/models.json, role: config, to: agents}\n",
            "as a file and as a directory",
        ),
    ] {
        let v = check_adapters(runtime, adapters);
        let shown: Vec<String> = v.problems.iter().map(ToString::to_string).collect();
        assert!(
            shown
                .iter()
                .any(|p| p.starts_with(wanted) || p.contains(wanted)),
            "{adapters}: {shown:#?}"
        );
        assert!(
            v.manifest(&SandboxLayout::default()).is_none(),
            "{adapters}"
        );
    }
    // Under pi a `sessions` that is not the first component is an ordinary directory.
    let v = check_adapters(
        "pi",
        "  - {path: config/reviewer.md, role: config, to: prompts/sessions/r.md}\n",
    );
    assert!(v.is_ok(), "{:?}", v.problems);
    // Under Claude `sessions/` is nobody's session directory.
    let v = check_adapters(
        "claude",
        "  - {path: config/reviewer.md, role: config, to: sessions/r.md}\n",
    );
    assert!(v.is_ok(), "{:?}", v.problems);
}

/// Compiling returns one upload per pinned tree and file, at the path the manifest pins, then
/// the workspace, owned by the agent's user.
#[test]
fn compiled_uploads_follow_the_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for d in ["plugins/p", "plugins/q", "skills/s", "adapters", "work"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    for p in ["plugins/p", "plugins/q"] {
        std::fs::write(
            root.join(p).join("index.js"),
            "module.exports = () => {};\n",
        )
        .unwrap();
    }
    std::fs::write(root.join("skills/s/SKILL.md"), "# s\n").unwrap();
    std::fs::write(root.join("adapters/hooks.js"), "export default () => {};\n").unwrap();
    std::fs::write(root.join("adapters/settings.json"), "{}\n").unwrap();
    let file = root.join("harness.yaml");
    std::fs::write(
        &file,
        "runtime: pi\nprompt: hi\nworkdir: work\nplugins: [plugins/p, plugins/q]\nskills: [skills/s]\n\
         adapters:\n  - path: adapters/hooks.js\n    role: hook-adapter\n    use: pi-extension\n\
         \x20 - path: adapters/settings.json\n    role: config\n",
    )
    .unwrap();
    let v = validate(&file).unwrap();
    assert!(v.is_ok(), "{:?}", v.problems);
    let layout = SandboxLayout {
        root: "/sb".to_string(),
    };
    let Compiled { manifest, uploads } = v.compile(&layout).unwrap();
    assert_eq!(v.manifest(&layout), Some(manifest.clone()));
    let real = root.canonicalize().unwrap();
    let got: Vec<_> = uploads
        .iter()
        .map(|u| {
            (
                u.kind,
                u.host_path.clone(),
                u.sandbox_path.as_str(),
                u.owner,
            )
        })
        .collect();
    let agent = Some(Owner {
        uid: manifest.user.uid,
        gid: manifest.user.gid,
    });
    assert_eq!(
        got,
        [
            (
                UploadKind::PluginTree,
                real.join("plugins/p"),
                "/sb/plugins/p",
                None
            ),
            (
                UploadKind::PluginTree,
                real.join("plugins/q"),
                "/sb/plugins/q",
                None
            ),
            (
                UploadKind::SkillTree,
                real.join("skills/s"),
                "/sb/skills/s",
                None
            ),
            (
                UploadKind::AdapterFile,
                real.join("adapters/hooks.js"),
                "/sb/adapters/hooks.js",
                None
            ),
            (
                UploadKind::AdapterFile,
                real.join("adapters/settings.json"),
                "/sb/config/settings.json",
                None
            ),
            (
                UploadKind::Workspace,
                real.join("work"),
                "/sb/workspace",
                agent
            ),
        ]
    );
    let pinned: Vec<&str> = manifest
        .trees
        .iter()
        .map(|t| t.path.as_str())
        .chain(manifest.files.iter().map(|f| f.path.as_str()))
        .chain([manifest.workdir.as_str()])
        .collect();
    let uploaded: Vec<&str> = uploads.iter().map(|u| u.sandbox_path.as_str()).collect();
    assert_eq!(uploaded, pinned);
}

#[test]
fn a_disk_budget_becomes_limits_disk_bytes_and_a_bad_one_is_named() {
    let v = check("runtime: command\ncommand: [/bin/true]\ndisk: 2GiB\n");
    assert!(v.is_ok(), "{:?}", v.problems);
    let manifest = v.manifest(&SandboxLayout::default()).unwrap();
    assert_eq!(manifest.limits.disk_bytes, Some(2 << 30));
    manifest.validate().unwrap();
    let v = check("runtime: command\ncommand: [/bin/true]\n");
    let manifest = v.manifest(&SandboxLayout::default()).unwrap();
    assert_eq!(manifest.limits.disk_bytes, None);
    for (text, needle) in [
        ("disk: 512KiB\n", "less than 1MiB"),
        ("disk: 2GB\n", "unknown unit"),
        ("disk: [1]\n", "expected a string"),
    ] {
        let v = check(&format!("runtime: command\ncommand: [/bin/true]\n{text}"));
        assert!(
            v.problems
                .iter()
                .any(|p| p.field == "disk" && p.message.contains(needle)),
            "{text:?}: {:?}",
            v.problems
        );
    }
}

#[test]
fn a_validation_command_that_cannot_run_here_is_a_problem_and_a_missing_agent_a_note() {
    let v = check(
        "runtime: command\ncommand: [/no/such/agent]\nvalidation: [no-such-validator-x, --check]\n",
    );
    let problem = v
        .problems
        .iter()
        .find(|p| p.field == "validation[0]")
        .unwrap_or_else(|| panic!("{:?}", v.problems));
    assert!(
        problem
            .message
            .contains("no-such-validator-x is not an executable file in any PATH"),
        "{problem:?}"
    );
    let note = v
        .notes
        .iter()
        .find(|n| n.field == "agent")
        .unwrap_or_else(|| panic!("{:?}", v.notes));
    assert!(
        note.message.contains("/no/such/agent does not exist")
            && note
                .message
                .contains("the local engine would fail with 127"),
        "{note:?}"
    );
    let v = check("runtime: command\ncommand: [/bin/true]\nvalidation: [sh, -c, \"true\"]\n");
    assert!(v.is_ok(), "{:?}", v.problems);
    assert!(v.notes.iter().all(|n| n.field != "agent"), "{:?}", v.notes);
}

#[test]
fn a_misspelt_key_gets_a_suggestion_and_a_null_env_value_is_refused() {
    let v = check("runtme: command\ncommand: [/bin/true]\n");
    let p = v.problems.iter().find(|p| p.field == "runtme").unwrap();
    assert!(
        p.message
            .starts_with("unknown key; did you mean `runtime`?"),
        "{p:?}"
    );
    let v = check("runtime: command\ncommand: [/bin/true]\ncolour: 1\nenv:\n  A: null\n  B: ~\n  C:\n  D: \"null\"\n");
    let p = v.problems.iter().find(|p| p.field == "colour").unwrap();
    assert!(!p.message.contains("did you mean"), "{p:?}");
    for name in ["env.A", "env.B", "env.C"] {
        let p = v.problems.iter().find(|p| p.field == name);
        assert!(
            p.is_some_and(|p| p.message.starts_with("a null value")),
            "{name}: {:?}",
            v.problems
        );
    }
    assert!(
        v.problems.iter().all(|p| p.field != "env.D"),
        "{:?}",
        v.problems
    );
}

#[test]
fn a_plugin_env_name_the_harness_env_sets_is_refused() {
    // The plugin's `env:` applies last; the supervisor stops an iteration where it would
    // replace the operator's value (125), so validation says so first.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("p")).unwrap();
    std::fs::write(dir.path().join("p/index.js"), "x\n").unwrap();
    let file = dir.path().join("harness.yaml");
    std::fs::write(
        &file,
        "runtime: pi\nprompt: hi\nenv:\n  FOO_SETTING: operator\n  BAR: b\n\
         plugins:\n  - path: p\n    env: {FOO_SETTING: plugin, OTHER: o}\n",
    )
    .unwrap();
    let v = validate(&file).unwrap();
    let refused: Vec<(&str, &str)> = v
        .problems
        .iter()
        .map(|p| (p.field.as_str(), p.message.as_str()))
        .collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].0, "plugins[0].env.FOO_SETTING");
    assert!(
        refused[0].1.contains("the harness `env:` sets FOO_SETTING"),
        "{refused:?}"
    );
}

#[test]
fn keys_the_runtime_ignores_are_noted() {
    let v = check("runtime: command\ncommand: [/bin/true]\nprompt: fix it\n");
    assert!(v.is_ok(), "{:?}", v.problems);
    assert!(v.notes.iter().any(|n| n.field == "prompt"), "{:?}", v.notes);
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("p")).unwrap();
    std::fs::write(dir.path().join("p/index.js"), "x\n").unwrap();
    let file = dir.path().join("harness.yaml");
    std::fs::write(
        &file,
        "runtime: claude\nprompt: hi\nplugins:\n  - path: p\n    pi: {args: [--x]}\n",
    )
    .unwrap();
    let v = validate(&file).unwrap();
    assert!(
        v.notes
            .iter()
            .any(|n| n.field == "plugins[0].pi" && n.message.contains("runtime claude ignores it")),
        "{:?}",
        v.notes
    );
}

#[test]
fn dotenv_names_a_file_in_the_workspace_or_an_absolute_sandbox_path() {
    let v = check("runtime: command\ncommand: [/bin/true]\ndotenv: .env\n");
    assert!(v.is_ok(), "{:?}", v.problems);
    let layout = SandboxLayout::default();
    let manifest = v.manifest(&layout).unwrap();
    assert_eq!(
        manifest.env.dotenv.as_deref(),
        Some(format!("{}/.env", layout.workdir()).as_str())
    );
    manifest.validate().unwrap();
    let v = check("runtime: command\ncommand: [/bin/true]\ndotenv: /etc/task.env\n");
    let manifest = v.manifest(&layout).unwrap();
    assert_eq!(manifest.env.dotenv.as_deref(), Some("/etc/task.env"));
    for (text, needle) in [("dotenv: ../up.env\n", "'..'"), ("dotenv: \"\"\n", "empty")] {
        let v = check(&format!("runtime: command\ncommand: [/bin/true]\n{text}"));
        assert!(
            v.problems
                .iter()
                .any(|p| p.field == "dotenv" && p.message.contains(needle)),
            "{text}: {:?}",
            v.problems
        );
    }
}

#[test]
fn a_yaml_anchor_is_refused_with_what_to_write_instead() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("harness.yaml");
    std::fs::write(&file, "runtime: command\ncommand: &c [/bin/true]\n").unwrap();
    let err = validate(&file).err().unwrap().to_string();
    assert!(
        err.contains(
            "harness.yaml:2:13: YAML anchors (&name) and aliases (*name) are not supported"
        ),
        "{err}"
    );
}

#[test]
fn numbers_may_be_quoted_as_templating_tools_write_them() {
    let v = check(
        "runtime: command\ncommand: [/bin/true]\niterations: \"3\"\nprocesses: \"64\"\nretention: {records: \"5\"}\n",
    );
    assert!(v.is_ok(), "{:?}", v.problems);
    let h = v.harness.unwrap();
    assert_eq!((h.iterations, h.processes, h.retention.records), (3, 64, 5));
    let v = check("runtime: command\ncommand: [/bin/true]\niterations: \"three\"\n");
    assert!(
        v.problems.iter().any(|p| p.field == "iterations"),
        "{:?}",
        v.problems
    );
}

/// Every number a harness gives has a maximum, and one past it is refused at its line and
/// column with the maximum named: `timeout: 18446744073709551615ms` (584 million years) was
/// taken, and a number with more digits than 64 bits hold was "not a size" or "not a duration"
/// without saying what the most is.
#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_harness__a_number_past_its_maximum_is_refused_where_it_is_naming_the_maximum() {
    let cases = [
        (
            "timeout: 18446744073709551615ms",
            "timeout",
            (3, 10),
            "more than 168h",
        ),
        (
            "timeout: 18446744073709551615h",
            "timeout",
            (3, 10),
            "more than 168h",
        ),
        (
            "timeout: 99999999999999999999",
            "timeout",
            (3, 10),
            "more than 168h",
        ),
        ("timeout: 169h", "timeout", (3, 10), "more than 168h"),
        (
            "iterations: 18446744073709551616",
            "iterations",
            (3, 13),
            "from 1 to 1000",
        ),
        (
            "processes: 18446744073709551615",
            "processes",
            (3, 12),
            "from 1 to 4194304",
        ),
        (
            "memory: 99999999999999999999",
            "memory",
            (3, 9),
            "more than 1024TiB",
        ),
        (
            "memory: 18446744073709551615TiB",
            "memory",
            (3, 9),
            "more than 1024TiB",
        ),
        (
            "disk: 99999999999999999999KiB",
            "disk",
            (3, 7),
            "more than 1024TiB",
        ),
        (
            "retention:\n  records: 18446744073709551615",
            "retention.records",
            (4, 12),
            "from 0 to 1000000",
        ),
        (
            "retention:\n  size: 99999999999999999999",
            "retention.size",
            (4, 9),
            "more than 1024TiB",
        ),
        (
            "upload_limits:\n  entries: 18446744073709551615",
            "upload_limits.entries",
            (4, 12),
            "from 1 to 100000000",
        ),
        (
            "upload_limits:\n  size: 99999999999999999999",
            "upload_limits.size",
            (4, 9),
            "more than 1024TiB",
        ),
        (
            "validation: [/bin/true]\nfeedback: 99999999999999999999",
            "feedback",
            (4, 11),
            "more than 32KiB",
        ),
    ];
    for (yaml, field, (line, column), needle) in cases {
        let v = check(&format!("runtime: command\ncommand: [/bin/true]\n{yaml}\n"));
        assert!(
            v.problems.iter().any(|p| p.field == field
                && p.location == Some(Location { line, column })
                && p.message.contains(needle)),
            "{yaml}: {:?}",
            v.problems
        );
        assert!(v.manifest(&SandboxLayout::default()).is_none(), "{yaml}");
    }
    // Each maximum itself is taken.
    let v = check(
        "runtime: command\ncommand: [/bin/true]\ntimeout: 168h\niterations: 1000\nmemory: 1024TiB\n",
    );
    assert!(v.is_ok(), "{:?}", v.problems);
    let m = v.manifest(&SandboxLayout::default()).unwrap();
    assert_eq!(m.limits.timeout_ms, 7 * 24 * 3600 * 1000);
    assert_eq!(m.limits.memory_bytes, 1 << 50);
}

#[test]
fn an_agent_script_whose_env_interpreter_is_missing_is_noted_as_the_supervisor_would_fail_it() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("agent");
    std::fs::write(&script, "#!/usr/bin/env no-such-interpreter-x\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let v = check(&format!(
        "runtime: command\ncommand: [{}]\n",
        script.display()
    ));
    let note = v
        .notes
        .iter()
        .find(|n| n.field == "agent")
        .unwrap_or_else(|| panic!("{:?}", v.notes));
    assert!(
        note.message
            .contains("runs `#!/usr/bin/env no-such-interpreter-x`"),
        "{note:?}"
    );
}

#[test]
fn tools_keep_home_and_record_prompt_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("skills/review")).unwrap();
    std::fs::write(dir.path().join("skills/review/SKILL.md"), "x\n").unwrap();
    std::fs::create_dir_all(dir.path().join("skills/many/a")).unwrap();
    let file = dir.path().join("harness.yaml");
    let check_yaml = |yaml: &str| {
        std::fs::write(&file, yaml).unwrap();
        validate(&file).unwrap()
    };
    // An empty list is kept as such (no built-in tools), and noted when skills need a tool.
    let v = check_yaml(
        "runtime: pi\nprompt: hi\nagent:\n  tools: []\n  record_prompt: true\nskills: [skills/review]\nkeep_home: [.cache/uv]\n",
    );
    assert!(v.is_ok(), "{:?}", v.problems);
    let h = v.harness.as_ref().unwrap();
    assert_eq!(h.agent.tools, Some(Vec::new()));
    assert!(h.agent.record_prompt);
    assert_eq!(h.keep_home, [".cache/uv"]);
    assert!(
        v.notes
            .iter()
            .any(|n| n.field == "agent.tools" && n.message.contains("offers the model no skill")),
        "{:?}",
        v.notes
    );
    let m = v
        .manifest(&SandboxLayout {
            root: "/pitcrew".into(),
        })
        .unwrap();
    assert_eq!(m.agent.tools, Some(Vec::new()));
    assert_eq!(m.dirs.home_keep, [".cache/uv"]);
    assert!(m.agent.record_prompt);
    // Absent: the runtime's default set.
    let v = check_yaml("runtime: pi\nprompt: hi\n");
    assert_eq!(v.harness.unwrap().agent.tools, None);

    let v = check_yaml(
        "runtime: claude\nprompt: hi\nagent:\n  tools: [\"Bash,Read\", \"\"]\n  record_prompt: yes\nskills: [skills/many]\nkeep_home: [../up, /abs, a//b]\n",
    );
    let fields: Vec<&str> = v.problems.iter().map(|p| p.field.as_str()).collect();
    for field in [
        "agent.tools[0]",
        "agent.tools[1]",
        "agent.record_prompt",
        "skills[0]",
        "keep_home[0]",
        "keep_home[1]",
        "keep_home[2]",
    ] {
        assert!(fields.contains(&field), "{field}: {:?}", v.problems);
    }
    assert!(
        v.problems
            .iter()
            .any(|p| p.field == "skills[0]" && p.message.contains("no SKILL.md at its root")),
        "{:?}",
        v.problems
    );
}

#[test]
fn feedback_and_keep_output_are_checked() {
    let v = check(
        "runtime: pi\nprompt: hi\nvalidation: [/bin/true]\nfeedback: true\nkeep_output: true\n",
    );
    assert!(v.is_ok(), "{:?}", v.problems);
    let h = v.harness.as_ref().unwrap();
    assert_eq!(h.feedback, Some(16 * 1024));
    assert!(h.keep_output);
    let m = v
        .manifest(&SandboxLayout {
            root: "/pitcrew".into(),
        })
        .unwrap();
    assert!(m.output.keep_output);
    let v = check("runtime: pi\nprompt: hi\nvalidation: [/bin/true]\nfeedback: 4KiB\n");
    assert_eq!(v.harness.unwrap().feedback, Some(4096));
    let v = check("runtime: pi\nprompt: hi\nvalidation: [/bin/true]\nfeedback: false\n");
    assert_eq!(v.harness.unwrap().feedback, None);
    let v = check("runtime: pi\nprompt: hi\n");
    assert!(!v.harness.as_ref().unwrap().keep_output);
    for (yaml, wanted) in [
        ("feedback: true\n", "set validation"),
        (
            "validation: [/bin/true]\nfeedback: 1MiB\n",
            "\"1MiB\" is more than 32KiB, the most it may be",
        ),
        (
            "validation: [/bin/true]\nfeedback: lots\n",
            "true, false or a size",
        ),
        ("keep_output: yes\n", "expected true or false"),
    ] {
        let v = check(&format!("runtime: pi\nprompt: hi\n{yaml}"));
        assert!(
            v.problems.iter().any(|p| p.message.contains(wanted)),
            "{yaml}: {:?}",
            v.problems
        );
    }
    let v =
        check("runtime: command\ncommand: [/bin/true]\nvalidation: [/bin/true]\nfeedback: true\n");
    assert!(v.is_ok(), "{:?}", v.problems);
    assert!(
        v.notes.iter().any(|n| n.field == "feedback"),
        "{:?}",
        v.notes
    );
}

#[test]
fn a_tool_named_the_other_runtimes_way_is_noted() {
    let v = check("runtime: claude\nprompt: hi\nagent:\n  tools: [Bash, read]\n");
    assert!(v.is_ok(), "{:?}", v.problems);
    assert!(
        v.notes
            .iter()
            .any(|n| n.field == "agent.tools" && n.message.contains("\"read\" is not how claude")),
        "{:?}",
        v.notes
    );
    let v = check("runtime: pi\nprompt: hi\nagent:\n  tools: [read, Bash]\n");
    assert!(
        v.notes
            .iter()
            .any(|n| n.message.contains("\"Bash\" is not how pi")),
        "{:?}",
        v.notes
    );
    let v = check("runtime: pi\nprompt: hi\nagent:\n  tools: [read, bash]\n");
    assert!(
        v.notes.iter().all(|n| n.field != "agent.tools"),
        "{:?}",
        v.notes
    );
}

#[test]
fn a_tree_one_upload_could_not_hold_is_a_problem_before_anything_is_sent() {
    use crate::tree_hash::{FileRecord, TreeListing};
    let file = FileRecord {
        path: "f".into(),
        sha256: "0".repeat(64),
        size: 1,
    };
    // The tree's own directory counts as an entry too.
    let mut listing = TreeListing {
        files: vec![file; 99_998],
        dirs: vec!["d".into()],
    };
    let limits = crate::protocol::UploadLimits::default();
    assert_eq!(
        super::fs_checks::over_upload_limits(&listing, &limits),
        None
    );
    listing.dirs.push("e".into());
    let why = super::fs_checks::over_upload_limits(&listing, &limits).unwrap();
    assert!(why.starts_with("100001 entries"), "{why}");
    let big = TreeListing {
        files: vec![FileRecord {
            path: "big".into(),
            sha256: "0".repeat(64),
            size: 5 << 30,
        }],
        dirs: vec![],
    };
    let why = super::fs_checks::over_upload_limits(&big, &limits).unwrap();
    assert!(why.contains("bytes of file content"), "{why}");
    assert!(why.contains("upload_limits.size raises it"), "{why}");
}

#[test]
fn upload_limits_are_the_harnesss_to_set_and_name_the_entry_past_them() {
    let dir = tempfile::tempdir().unwrap();
    for f in [
        "p/index.js",
        "p/b.js",
        "p/lib/c.js",
        "w/1",
        "w/2",
        "w/5",
        "w/3/4",
    ] {
        let path = dir.path().join(f);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "x\n").unwrap();
    }
    let check = |yaml: &str| {
        std::fs::write(dir.path().join("h.yaml"), yaml).unwrap();
        validate(&dir.path().join("h.yaml")).unwrap()
    };
    let base = "runtime: pi\nprompt: hi\nplugins: [p]\nworkdir: w\n";
    assert!(check(base).problems.is_empty());
    // p holds 5 entries with its own directory, w 6.
    let v = check(&format!("{base}upload_limits: {{entries: 5}}\n"));
    assert_eq!(v.problems.len(), 1, "{:?}", v.problems);
    assert_eq!(v.problems[0].field, "workdir");
    assert!(
        v.problems[0].message.contains("6 entries"),
        "{:?}",
        v.problems
    );
    let v = check(&format!("{base}upload_limits: {{entries: 4}}\n"));
    let fields: Vec<&str> = v.problems.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(fields, ["plugins[0]", "workdir"], "{:?}", v.problems);
    assert_eq!(v.problems[0].location.as_ref().map(|l| l.line), Some(3));
    assert!(
        v.problems[0]
            .message
            .contains("upload_limits.entries raises it"),
        "{:?}",
        v.problems
    );
    let v = check(&format!("{base}upload_limits: {{size: 5}}\n"));
    assert!(
        v.problems[0].message.contains("less than 1MiB"),
        "{:?}",
        v.problems
    );
    let v = check(&format!("{base}upload_limits: {{entries: 0, files: 3}}\n"));
    let fields: Vec<&str> = v.problems.iter().map(|p| p.field.as_str()).collect();
    assert!(
        fields.contains(&"upload_limits.entries"),
        "{:?}",
        v.problems
    );
    assert_eq!(fields.len(), 2, "the unknown key too: {:?}", v.problems);
    let h = check(&format!(
        "{base}upload_limits: {{entries: 2000000, size: 8GiB}}\n"
    ))
    .harness
    .unwrap();
    assert_eq!(h.upload_limits.max_entries, 2_000_000);
    assert_eq!(h.upload_limits.max_bytes, 8 << 30);
}

#[test]
fn a_manifest_over_one_control_frame_is_named_only_when_its_listings_travel_inside_it() {
    use crate::manifest::FileListing;
    use crate::tree_hash::FileRecord;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("p")).unwrap();
    std::fs::write(dir.path().join("p/index.js"), "x\n").unwrap();
    std::fs::write(
        dir.path().join("h.yaml"),
        "runtime: pi\nprompt: hi\nplugins: [p]\n",
    )
    .unwrap();
    let v = validate(&dir.path().join("h.yaml")).unwrap();
    let mut m = v
        .manifest(&SandboxLayout {
            root: "/pitcrew".into(),
        })
        .unwrap();
    assert_eq!(too_big_to_send(&m, true), None);
    // A tree of 300,000 files with long paths lists more than 32 MiB.
    let records: Vec<FileRecord> = (0..300_000)
        .map(|i| FileRecord {
            path: format!("node_modules/some-package/lib/deeply/nested/file-{i:08}.js"),
            sha256: "0".repeat(64),
            size: 1,
        })
        .collect();
    m.trees[0].files = FileListing::from_records(&records).unwrap();
    let why = too_big_to_send(&m, true).unwrap();
    assert!(why.contains("one set_manifest request may hold"), "{why}");
    assert!(why.contains("manifest.listings"), "{why}");
    // A supervisor that takes the listings in add_listing requests takes this manifest.
    assert_eq!(too_big_to_send(&m, false), None);
}

/// `agent.args` may carry no option that loads code, skills, prompts, settings or MCP servers,
/// grants project trust or overrides what pitcrew sets, in any supported release: each is a
/// problem at its own line and column naming the option, the releases and what to use instead
/// (pi 1.6.0 loaded `-e ./unverified_ext.ts` and took `--approve` over pitcrew's `--no-approve`;
/// both passed validation without a note).
#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_harness__agent_args_that_load_grant_trust_or_override_are_refused_where_they_are() {
    let v = check(
        "runtime: pi\nprompt: hi\nagent:\n  args:\n    - --thinking\n    - high\n    - --approve\n    - -e\n    - ./unverified_ext.ts\n    - --extension=npm:evil\n    - --skill\n    - ./skills/x\n",
    );
    let got: Vec<_> = v
        .problems
        .iter()
        .map(|p| {
            (
                p.field.clone(),
                p.location.map(|l| (l.line, l.column)),
                p.message.as_str(),
            )
        })
        .collect();
    assert_eq!(got.len(), 4, "{got:#?}");
    assert_eq!(
        (got[0].0.as_str(), got[0].1),
        ("agent.args[2]", Some((7, 7)))
    );
    assert!(
        got[0]
            .2
            .starts_with("--approve is an option of pi 0.87.1, 1.6.0 that changes project trust"),
        "{got:#?}"
    );
    assert_eq!(
        (got[1].0.as_str(), got[1].1),
        ("agent.args[3]", Some((8, 7)))
    );
    assert!(
        got[1]
            .2
            .starts_with("-e is an option of pi 0.73.1, 0.87.1, 1.6.0 that loads code")
            && got[1].2.ends_with(
                "use plugins: (a pi-extension tree) or adapters: with use: pi-extension"
            ),
        "{got:#?}"
    );
    assert_eq!(
        (got[2].0.as_str(), got[2].1),
        ("agent.args[5]", Some((10, 7)))
    );
    assert!(got[2].2.starts_with("--extension is an option"), "{got:#?}");
    assert_eq!(
        (got[3].0.as_str(), got[3].1),
        ("agent.args[6]", Some((11, 7)))
    );
    assert!(got[3].2.ends_with("use skills:"), "{got:#?}");
    assert!(v.manifest(&SandboxLayout::default()).is_none());

    // Flow style, Claude Code.
    let v = check(
        "runtime: claude\nprompt: hi\nagent:\n  args: [--max-turns, \"5\", --setting-sources, \"user,project\", --mcp-config, x.json]\n",
    );
    let got: Vec<(&str, Option<(usize, usize)>)> = v
        .problems
        .iter()
        .map(|p| (p.field.as_str(), p.location.map(|l| (l.line, l.column))))
        .collect();
    assert_eq!(
        got,
        [
            ("agent.args[2]", Some((4, 28))),
            ("agent.args[4]", Some((4, 63)))
        ],
        "{:?}",
        v.problems
    );
    assert!(v.problems[0]
        .message
        .contains("of Claude Code 2.1.332 that changes project trust"));
    assert!(v.problems[1]
        .message
        .ends_with("use plugins: (a claude-plugin tree with its .mcp.json)"));

    // What tunes the run passes; `runtime: command` takes any argv (from `command:`).
    for text in [
        "runtime: pi\nprompt: hi\nagent:\n  args: [--thinking, high, --greeting=Hello]\n",
        "runtime: claude\nprompt: hi\nagent:\n  args: [--max-turns, \"5\", --effort, high]\n",
        "runtime: command\ncommand: [/bin/sh, -e, -c, \"true\", --approve]\n",
    ] {
        let v = check(text);
        assert!(v.is_ok(), "{text:?}: {:?}", v.problems);
    }
}

#[test]
fn context_files_is_a_choice_with_true_and_false_kept_and_uploaded_by_default() {
    use crate::manifest::ContextFiles;
    let manifest_of = |text: &str| {
        let v = check(text);
        assert!(v.is_ok(), "{text:?}: {:?}", v.problems);
        v.manifest(&SandboxLayout::default()).unwrap()
    };
    for (value, want) in [
        ("", ContextFiles::Uploaded),
        ("\n  context_files: uploaded", ContextFiles::Uploaded),
        ("\n  context_files: as-is", ContextFiles::AsIs),
        ("\n  context_files: true", ContextFiles::AsIs),
        ("\n  context_files: none", ContextFiles::None),
        ("\n  context_files: false", ContextFiles::None),
    ] {
        for runtime in ["pi", "claude"] {
            let m = manifest_of(&format!(
                "runtime: {runtime}\nprompt: hi\nagent:\n  model: m{value}\n"
            ));
            assert_eq!(m.agent.context_files, want, "{runtime}{value}");
            // The manifest says it the way a supervisor without the choice reads as-is and none.
            let json = serde_json::to_value(&m).unwrap();
            let written = &json["agent"]["context_files"];
            match want {
                ContextFiles::AsIs => assert!(written.is_null(), "{json}"),
                ContextFiles::None => assert_eq!(written, false),
                ContextFiles::Uploaded => assert_eq!(written, "uploaded"),
            }
            let back = crate::manifest::Manifest::from_json(json.to_string().as_bytes()).unwrap();
            assert_eq!(back.agent.context_files, want);
        }
    }
    let m = manifest_of("runtime: command\ncommand: [/bin/true]\n");
    assert_eq!(m.agent.context_files, ContextFiles::AsIs);
    let v = check("runtime: pi\nprompt: hi\nagent:\n  context_files: sometimes\n");
    assert!(
        v.problems
            .iter()
            .any(|p| p.field == "agent.context_files" && p.message.contains("uploaded, as-is")),
        "{:?}",
        v.problems
    );
    // A manifest names them too, and refuses anything else.
    let manifest = |value: &str| {
        crate::manifest::Manifest::from_json(
            format!(
                r#"{{"version":1,"runtime":"pi","agent":{{"binary":"pi","context_files":{value}}},"workdir":"/w","prompt":"hi"}}"#
            )
            .as_bytes(),
        )
    };
    assert_eq!(
        manifest("\"none\"").unwrap().agent.context_files,
        ContextFiles::None
    );
    assert_eq!(
        manifest("\"as-is\"").unwrap().agent.context_files,
        ContextFiles::AsIs
    );
    let err = manifest("\"sometimes\"").unwrap_err().to_string();
    assert!(err.contains("agent.context_files"), "{err}");
}

#[test]
fn claude_takes_no_append_system_prompt_file_from_agent_args_and_one_settings() {
    // The workdir's CLAUDE.md goes that way; agent.args may not give a file pitcrew did not
    // verify, whatever agent.context_files says.
    for context in ["", "  context_files: none\n"] {
        let v = check(&format!(
            "runtime: claude\nprompt: hi\nagent:\n{context}  args: [\"--append-system-prompt-file=/x.md\"]\n"
        ));
        assert!(
            v.problems
                .iter()
                .any(|p| p.field == "agent.args[0]"
                    && p.message.contains("--append-system-prompt-file")),
            "{:?}",
            v.problems
        );
    }
    let v = check_adapters(
        "claude",
        "  - path: config/models.json\n    role: config\n    use: claude-settings\n",
    );
    assert!(
        v.notes
            .iter()
            .any(|n| n.field == "adapters" && n.message.contains("enabledPlugins")),
        "{:?}",
        v.notes
    );
}

/// Validates a harness for `runtime` with `plugins` (YAML list items) and a hook adapter
/// `guard.ts`, in a directory holding `ext/hello.ts` (a flag and node builtins only),
/// `ext/notes.txt` and `guard.ts`.
fn check_single_files(runtime: &str, plugins: &str) -> Validated {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("ext")).unwrap();
    std::fs::write(
        dir.path().join("ext/hello.ts"),
        "import { readFileSync } from \"node:fs\";\nimport type { ExtensionAPI } from \
         \"@mariozechner/pi-coding-agent\";\nexport default function (pi: ExtensionAPI) { \
         pi.registerFlag(\"greeting\", {}); }\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("ext/notes.txt"), "notes\n").unwrap();
    std::fs::write(dir.path().join("guard.ts"), "export default () => {};\n").unwrap();
    let file = dir.path().join("harness.yaml");
    std::fs::write(
        &file,
        format!(
            "runtime: {runtime}\nprompt: hi\nadapters:\n  - path: guard.ts\n    role: hook-adapter\n{}plugins:\n{plugins}",
            if runtime == "pi" { "    use: pi-extension\n" } else { "" }
        ),
    )
    .unwrap();
    validate(&file).unwrap()
}

#[test]
fn a_single_file_plugin_is_pinned_like_an_adapter_after_the_adapters() {
    let v = check_single_files(
        "pi",
        "  - path: ext/hello.ts\n    env:\n      HELLO_LEVEL: \"3\"\n    pi:\n      args: [\"--greeting=Hi\"]\n",
    );
    assert!(v.is_ok(), "{:?}", v.problems);
    let c = v.compile(&SandboxLayout::default()).unwrap();
    c.manifest.validate().unwrap();
    assert!(c.manifest.trees.is_empty(), "{:?}", c.manifest.trees);
    let files: Vec<_> = c
        .manifest
        .files
        .iter()
        .map(|f| (f.path.as_str(), f.role, f.usage))
        .collect();
    assert_eq!(
        files,
        [
            (
                "/pitcrew/adapters/guard.ts",
                PinRole::HookAdapter,
                FileUse::PiExtension
            ),
            (
                "/pitcrew/adapters/hello.ts",
                PinRole::Plugin,
                FileUse::PiExtension
            ),
        ]
    );
    let hello = &c.manifest.files[1];
    assert_eq!(hello.env.get("HELLO_LEVEL").map(String::as_str), Some("3"));
    assert_eq!(hello.pi_args, ["--greeting=Hi"]);
    assert_eq!(hello.sha256, v.plugin_files[0].sha256);
    let upload = c
        .uploads
        .iter()
        .find(|u| u.sandbox_path == hello.path)
        .unwrap();
    assert_eq!(upload.kind, UploadKind::AdapterFile);
    assert!(upload.host_path.ends_with("ext/hello.ts"));
    assert_eq!(upload.owner, None);
    // A flag the file does not register is refused, as for a directory.
    let v = check_single_files(
        "pi",
        "  - path: ext/hello.ts\n    pi:\n      args: [\"--loud\"]\n",
    );
    assert!(
        v.problems
            .iter()
            .any(|p| p.field == "plugins[0].pi.args[0]"),
        "{:?}",
        v.problems
    );
}

#[test]
fn claude_names_and_skips_a_single_file_plugin_and_other_files_are_refused() {
    let v = check_single_files("claude", "  - ext/hello.ts\n");
    assert!(v.is_ok(), "{:?}", v.problems);
    assert!(
        v.notes.iter().any(|n| n.message
            == "hello.ts is a single-file pi extension: runtime claude names and skips it"),
        "{:?}",
        v.notes
    );
    let m = v.manifest(&SandboxLayout::default()).unwrap();
    let hello = m.files.iter().find(|f| f.role == PinRole::Plugin).unwrap();
    assert_eq!(hello.usage, FileUse::Verify);

    let v = check_single_files("pi", "  - ext/notes.txt\n");
    assert!(
        v.problems.iter().any(|p| p
            .message
            .contains("neither a directory nor a single pi extension file")),
        "{:?}",
        v.problems
    );
    // The adapters directory holds both: one name each.
    let v = check_single_files("pi", "  - guard.ts\n");
    assert!(
        v.problems
            .iter()
            .any(|p| p.message.contains("same name \"guard.ts\" as plugins[0]")),
        "{:?}",
        v.problems
    );
}

/// Validation collects: one problem per key in every group of keys (the agent's, the
/// sandbox's, the limits, this host's) is reported in one pass, and a harness with no usable
/// runtime still has its other keys checked.
#[test]
fn problems_in_different_keys_are_all_reported_at_once() {
    let v = check(
        "runtime: pi\nprompt: \"-x\"\nagent:\n  tools: [\"a,b\"]\niterations: 0\nmemory: lots\n\
         keep_home: [\"../x\"]\noutput: /abs\nfeedback: true\n",
    );
    let mut fields: Vec<&str> = v.problems.iter().map(|p| p.field.as_str()).collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            "agent.tools[0]",
            "feedback",
            "iterations",
            "keep_home[0]",
            "memory",
            "output",
            "prompt"
        ],
        "{:?}",
        v.problems
    );
    let v = check("runtime: nope\niterations: 0\nvalidation: echo\n");
    let mut fields: Vec<&str> = v.problems.iter().map(|p| p.field.as_str()).collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        ["iterations", "runtime", "validation"],
        "{:?}",
        v.problems
    );
}

#[test]
fn a_timeout_of_zero_is_refused_for_what_it_would_do() {
    let v = check("runtime: pi\nprompt: go\ntimeout: 0s\n");
    let p = v
        .problems
        .iter()
        .find(|p| p.field == "timeout")
        .unwrap_or_else(|| panic!("{:?}", v.problems));
    assert!(
        p.message
            .contains("a timeout of zero would kill the agent at once"),
        "{p:?}"
    );
}

#[test]
fn a_missing_plugin_or_workdir_is_named_with_where_paths_start_and_what_to_do() {
    let v =
        check("runtime: command\ncommand: [/bin/true]\nplugins:\n  - path: nope\nworkdir: nows\n");
    for field in ["plugins[0].path", "workdir"] {
        let p = v
            .problems
            .iter()
            .find(|p| p.field == field)
            .unwrap_or_else(|| panic!("{field}: {:?}", v.problems));
        assert!(p.message.contains("does not exist ("), "{p:?}");
        assert!(
            p.message
                .contains("paths are relative to the harness file's directory"),
            "{p:?}"
        );
        assert!(
            p.message.contains("create it there, or correct the path"),
            "{p:?}"
        );
        assert!(!p.message.contains("os error"), "{p:?}");
        assert!(p.location.is_some(), "{p:?}");
    }
}

#[test]
fn a_sha256_on_a_local_adapter_says_local_files_are_pinned_automatically() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.json"), "{}\n").unwrap();
    let zeros = "0".repeat(64);
    for (text, field) in [
        (
            format!("runtime: command\ncommand: [/bin/true]\nadapters:\n  - path: a.json\n    sha256: {zeros}\n    role: config\n"),
            "adapters[0].sha256",
        ),
        (
            format!("runtime: command\ncommand: [/bin/true]\nadapters:\n  - path: a.json#sha256={zeros}\n    role: config\n"),
            "adapters[0].path",
        ),
    ] {
        let file = dir.path().join("harness.yaml");
        std::fs::write(&file, &text).unwrap();
        let v = validate(&file).unwrap();
        let p = v
            .problems
            .iter()
            .find(|p| p.field == field)
            .unwrap_or_else(|| panic!("{field}: {:?}", v.problems));
        assert!(
            p.message.contains("a local path is pinned automatically"),
            "{p:?}"
        );
        assert!(!p.message.contains("os error"), "{p:?}");
    }
}

#[test]
fn network_compiles_into_the_manifest_and_each_bad_entry_is_named_where_it_is() {
    use crate::manifest::{Endpoint, NetworkPolicy};
    let base = "runtime: command\ncommand: [/bin/true]\n";
    let v = check(base);
    // Without the key, the runtime's default: nothing for `command`.
    assert_eq!(
        v.manifest(&SandboxLayout::default()).unwrap().network,
        Some(NetworkPolicy::None)
    );
    for (text, want) in [
        ("network: none\n", NetworkPolicy::None),
        ("network: open\n", NetworkPolicy::Open),
        (
            "network:\n  platform: openshell\n",
            NetworkPolicy::Platform {
                platform: "openshell".into(),
            },
        ),
        (
            "network:\n  allow: [\"127.0.0.1:8080\", \"*.Example.com:443\", \"[::1]:9\"]\n",
            NetworkPolicy::allow(
                ["127.0.0.1:8080", "*.example.com:443", "[::1]:9"]
                    .iter()
                    .map(|e| Endpoint::parse(e).unwrap())
                    .collect(),
            ),
        ),
        (
            "network:\n  allow: [\"a.example.com:443\"]\n  from: sandbox\n",
            NetworkPolicy::Allow {
                allow: vec![Endpoint::parse("a.example.com:443").unwrap()],
                from: crate::manifest::DialFrom::Sandbox,
            },
        ),
    ] {
        let v = check(&format!("{base}{text}"));
        assert!(v.is_ok(), "{text:?}: {:?}", v.problems);
        let manifest = v.manifest(&SandboxLayout::default()).unwrap();
        manifest.validate().unwrap();
        assert_eq!(manifest.network, Some(want), "{text:?}");
    }
    for (text, field, needle, line) in [
        ("network: closed\n", "network", "no network mode", 3),
        ("network:\n  deny: []\n", "network.deny", "unknown key", 4),
        ("network: {}\n", "network", "needs `allow", 3),
        (
            "network:\n  platform: kubernetes\n",
            "network.platform",
            "none of openshell",
            4,
        ),
        (
            "network:\n  platform: openshell\n  allow: [\"a:1\"]\n",
            "network",
            "excludes `allow` and `from`",
            4,
        ),
        (
            "network:\n  allow: [\"a:1\"]\n  from: pod\n",
            "network.from",
            "write host",
            5,
        ),
        (
            "network:\n  allow:\n    - example.com\n    - \"a:1\"\n    - \"a:1\"\n",
            "network.allow[0]",
            "has no port",
            5,
        ),
        (
            "network:\n  allow:\n    - \"a:1\"\n    - \"a:1\"\n",
            "network.allow[1]",
            "listed twice",
            6,
        ),
        (
            "network:\n  allow: [\"x:0\"]\n",
            "network.allow[0]",
            "port",
            4,
        ),
    ] {
        let v = check(&format!("{base}{text}"));
        let found = v.problems.iter().find(|p| p.field == field);
        let Some(p) = found else {
            panic!("{text:?}: no problem at {field}: {:?}", v.problems)
        };
        assert!(p.message.contains(needle), "{text:?}: {p:?}");
        assert_eq!(p.location.as_ref().map(|l| l.line), Some(line), "{p:?}");
    }
}

/// OpenCode is a Bun binary: Bun keeps a transpiled copy of every module of 50 KB or more it
/// loads from disk (a verified plugin module, or a large file it imports) in its runtime
/// transpiler cache, `~/.bun/install/cache/@t@/<input hash>.pile` (`$XDG_CACHE_HOME/bun/@t@`
/// when that is set), and on the next start runs the cached output instead of the file when
/// the input's length and hash match (the output's hash is checked, but it is an unkeyed
/// wyhash seeded 42 anyone can compute). Keeping `.bun` would let iteration 1's agent replace
/// iteration 2's verified plugin code (seen with OpenCode 1.18.33; see
/// `opencode_runtime::attack_leftovers__a_kept_bun_transpiler_cache_never_replaces_the_verified_plugin`).
#[test]
#[allow(non_snake_case)] // attack tests are named attack_<class>__<case>
fn attack_leftovers__keep_home_may_not_keep_buns_transpiler_cache_for_opencode() {
    use crate::manifest::{home_keep_problem, Runtime};
    for keep in [".bun", ".bun/install/cache", ".bun/install/cache/@t@"] {
        let problem = home_keep_problem(Runtime::Opencode, keep);
        assert!(
            problem.is_some(),
            "{keep}: kept for OpenCode, whose Bun loads it"
        );
    }
}

#[test]
fn keep_home_refuses_what_the_runtime_reads_at_startup() {
    use crate::manifest::{home_keep_problem, Runtime};
    // The path itself, one inside it, one holding it; per runtime.
    for (runtime, keep, path) in [
        (Runtime::Claude, ".bashrc", ".bashrc"),
        (Runtime::Claude, ".config", ".config/git"),
        (Runtime::Claude, ".claude/state", ".claude"),
        (Runtime::Claude, ".local", ".local/share/claude"),
        (Runtime::Pi, ".gitconfig", ".gitconfig"),
        (Runtime::Pi, ".pi/agent", ".pi"),
        (Runtime::Pi, ".agents", ".agents"),
        (Runtime::Pi, ".node_modules", ".node_modules"),
        (Runtime::Pi, ".node_modules/left-pad", ".node_modules"),
        (Runtime::Pi, ".node_libraries", ".node_libraries"),
        (Runtime::Claude, ".node_modules", ".node_modules"),
    ] {
        let problem = home_keep_problem(runtime, keep).unwrap_or_default();
        assert!(problem.contains(&format!("~/{path} ")), "{keep}: {problem}");
    }
    for (runtime, keep) in [
        (Runtime::Claude, ".cache/uv"),
        (Runtime::Claude, ".cache"),
        (Runtime::Claude, ".bashrc.d"),
        (Runtime::Pi, ".bashrc"),
        (Runtime::Pi, ".claude"),
        (Runtime::Command, ".gitconfig"),
    ] {
        assert_eq!(home_keep_problem(runtime, keep), None, "{keep}");
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("harness.yaml");
    std::fs::write(
        &file,
        "runtime: claude\nprompt: hi\nkeep_home: [.cache/uv, .profile]\n",
    )
    .unwrap();
    let v = validate(&file).unwrap();
    assert!(
        v.problems.iter().any(|p| p.field == "keep_home[1]"
            && p.message
                .contains("~/.profile for the next iteration, unverified")),
        "{:?}",
        v.problems
    );
    assert!(!v.problems.iter().any(|p| p.field == "keep_home[0]"));
}

#[test]
fn codex_refuses_tools_and_skills_it_cannot_honour_and_skips_other_plugin_families() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("sk")).unwrap();
    std::fs::write(
        dir.path().join("sk/SKILL.md"),
        "---\nname: sk\ndescription: a skill\n---\nbody\n",
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("plug/.claude-plugin")).unwrap();
    std::fs::write(
        dir.path().join("plug/.claude-plugin/plugin.json"),
        r#"{"name": "plug"}"#,
    )
    .unwrap();
    let file = dir.path().join("harness.yaml");
    std::fs::write(
        &file,
        "runtime: codex\nprompt: hi\nagent:\n  tools: [shell, Bash]\n  args: [--trust]\nplugins:\n  - plug\nskills:\n  - sk\n",
    )
    .unwrap();
    let v = validate(&file).unwrap();
    let fields: Vec<&str> = v.problems.iter().map(|p| p.field.as_str()).collect();
    for field in ["agent.tools", "agent.args[0]", "skills[0]"] {
        assert!(fields.contains(&field), "{field}: {:?}", v.problems);
    }
    // A Claude plugin is named and skipped; a Codex plugin is loaded (and must have a name
    // Codex takes as a plugin name).
    assert!(!fields.contains(&"plugins[0]"), "{:?}", v.problems);
    assert!(
        v.notes.iter().any(|n| n
            .message
            .contains("plug is a claude plugin: runtime codex names and skips it")),
        "{:?}",
        v.notes
    );
    for (name, ok) in [("cx-plug_1", true), ("cx.plug", false)] {
        std::fs::create_dir_all(dir.path().join(name).join(".codex-plugin")).unwrap();
        std::fs::write(
            dir.path().join(name).join(".codex-plugin/plugin.json"),
            r#"{"name": "cx"}"#,
        )
        .unwrap();
        std::fs::write(
            &file,
            format!("runtime: codex\nprompt: hi\nplugins:\n  - {name}\n"),
        )
        .unwrap();
        let v = validate(&file).unwrap();
        assert_eq!(v.is_ok(), ok, "{name}: {:?}", v.problems);
        if ok {
            assert!(v.plugins[0].loaded, "{name}");
            let m = v.manifest(&Default::default()).unwrap();
            assert_eq!(m.trees[0].kind, crate::manifest::TreeKind::CodexPlugin);
        }
        // Under another runtime it is named and skipped.
        std::fs::write(
            &file,
            format!("runtime: claude\nprompt: hi\nplugins:\n  - {name}\n"),
        )
        .unwrap();
        let v = validate(&file).unwrap();
        assert!(
            v.is_ok() && !v.plugins[0].loaded,
            "{name}: {:?}",
            v.problems
        );
    }
    // A hook adapter Codex would not run, a config it would not read.
    std::fs::write(dir.path().join("hook.sh"), "#!/bin/sh\n").unwrap();
    std::fs::write(dir.path().join("c.toml"), "model = \"m\"\n").unwrap();
    std::fs::write(
        &file,
        "runtime: codex\nprompt: hi\nadapters:\n  - path: hook.sh\n    role: hook-adapter\n  - path: c.toml\n    role: config\n    to: config.toml\n",
    )
    .unwrap();
    let adapters = validate(&file).unwrap();
    let fields: Vec<&str> = adapters.problems.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        ["adapters[0].role", "adapters[1].to"],
        "{:?}",
        adapters.problems
    );
    // Codex's hooks: a config adapter at hooks.json, and only there.
    std::fs::write(dir.path().join("hooks.json"), r#"{"hooks": {}}"#).unwrap();
    for (to, ok) in [("hooks.json", true), ("sub/hooks.json", false)] {
        std::fs::write(
            &file,
            format!("runtime: codex\nprompt: hi\nadapters:\n  - path: hooks.json\n    role: config\n    to: {to}\n"),
        )
        .unwrap();
        let v = validate(&file).unwrap();
        assert_eq!(v.is_ok(), ok, "{to}: {:?}", v.problems);
    }
    let tools = v
        .problems
        .iter()
        .find(|p| p.field == "agent.tools")
        .unwrap();
    assert!(tools.message.contains("\"Bash\""), "{}", tools.message);
    // The default network: OpenAI's API, or the endpoint OPENAI_BASE_URL names.
    let ok = check("runtime: codex\nprompt: hi\nagent:\n  tools: [shell]\n");
    assert!(ok.is_ok(), "{:?}", ok.problems);
    let network = ok.network().unwrap();
    assert_eq!(
        network.policy.allowed()[0].to_string(),
        "api.openai.com:443"
    );
    let local =
        check("runtime: codex\nprompt: hi\nenv:\n  OPENAI_BASE_URL: http://127.0.0.1:8377/v1\n");
    assert_eq!(
        local.network().unwrap().policy.allowed()[0].to_string(),
        "127.0.0.1:8377"
    );
}

#[test]
fn opencode_harnesses_name_a_model_its_built_in_tools_and_no_config_of_their_own() {
    let ok = check("runtime: opencode\nprompt: hi\nagent:\n  model: m\n  tools: [bash, write]\n");
    assert!(ok.is_ok(), "{:?}", ok.problems);
    assert!(
        ok.notes
            .iter()
            .any(|n| n.message.contains("share OpenCode's edit permission")),
        "{:?}",
        ok.notes
    );
    assert_eq!(
        ok.network().unwrap().policy.allowed()[0].to_string(),
        "api.openai.com:443"
    );
    let bad = check("runtime: opencode\nprompt: hi\nagent:\n  tools: [Bash]\n");
    let fields: Vec<&str> = bad.problems.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(fields, ["agent.model", "agent.tools"], "{:?}", bad.problems);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("h.yaml");
    std::fs::write(dir.path().join("hook.sh"), "#!/bin/sh\n").unwrap();
    std::fs::write(dir.path().join("c.json"), "{}").unwrap();
    std::fs::write(dir.path().join("x.js"), "").unwrap();
    std::fs::write(
        &file,
        "runtime: opencode\nprompt: hi\nagent:\n  model: m\nadapters:\n  - path: hook.sh\n    role: hook-adapter\n  - path: c.json\n    role: config\n    to: opencode.json\n  - path: x.js\n    role: config\n    to: plugins/x.js\n",
    )
    .unwrap();
    let v = validate(&file).unwrap();
    let fields: Vec<&str> = v.problems.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        ["adapters[0].role", "adapters[1].to", "adapters[2].to"],
        "{:?}",
        v.problems
    );
}
