use super::*;

fn entry(section: &str, sub: Option<&str>, key: &str, value: Option<&str>) -> Entry {
    Entry {
        section: section.into(),
        subsection: sub.map(|s| s.as_bytes().to_vec()),
        key: key.into(),
        value: value.map(|v| v.as_bytes().to_vec()),
    }
}

/// What `git config --file` lists for `text`, as `name=value` lines (keys lowercased, the
/// subsection as written), or `None` when git refuses the file. `None` too when git is
/// missing (the caller records the skip).
fn git_lists(text: &[u8]) -> Option<Option<Vec<String>>> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config");
    std::fs::write(&file, text).unwrap();
    let out = std::process::Command::new("git")
        .args(["config", "--no-includes", "--file"])
        .arg(&file)
        .args(["--list", "-z"])
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .ok()?;
    if !out.status.success() {
        return Some(None);
    }
    let listed = out
        .stdout
        .split(|&b| b == 0)
        .filter(|item| !item.is_empty())
        .map(|item| {
            // `name\nvalue`, or `name` alone for a boolean.
            let text = String::from_utf8_lossy(item);
            match text.split_once('\n') {
                Some((name, value)) => format!("{name}={value}"),
                None => text.into_owned(),
            }
        })
        .collect();
    Some(Some(listed))
}

/// [`git_lists`]'s form of what [`parse`] read.
fn ours(parsed: &Parsed) -> Vec<String> {
    parsed
        .entries
        .iter()
        .map(|e| {
            let name = format!(
                "{}.{}",
                match &e.subsection {
                    Some(sub) => format!("{}.{}", e.section, String::from_utf8_lossy(sub)),
                    None => e.section.clone(),
                },
                e.key.to_ascii_lowercase()
            );
            match &e.value {
                Some(v) => format!("{name}={}", String::from_utf8_lossy(v)),
                None => name,
            }
        })
        .collect()
}

/// Files in every spelling the grammar has, as git writes them and as people do.
const SPELLINGS: &[&str] = &[
    "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n",
    "[core]\n\tfsmonitor = echo x >> /tmp/m; false\n[remote \"origin\"]\n\turl = https://h/r.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n",
    "[Core] Bare = true ; a comment\n# another\n[remote \"Or\\\"ig\\\\in\"] url = \"a b\" c # d\n",
    "[section.Sub]\n\tkey\n\tother = \"  padded  \" \n",
    "[a]\n\tk = one \\\n two\n\tq = \"x;y#z\"\\t\\n\\b\\\\\n",
    "\u{feff}[a]\r\n\tk = v\r\n\tj=\r\n",
    "[x \"with space and ] bracket\"]\n\tk = 1\n",
    "[a]\n\tk = \"open\n",
    "[a]\n\tk = \\q\n",
    "[a b]\n",
    "[a \"b\" ]\n",
    "[a]\n\tk ; no equals\n",
    "[a]\n\t9k = digit first\n",
    "[a]\n\tk = v\\",
    "[a]\n\tk =",
    "[a]\n\tk = \"\"\n\tl =   \n",
    "[include]\n\tpath = /tmp/x\n[includeIf \"gitdir:/\"]\n\tpath = /tmp/y\n",
];

#[test]
fn reads_what_git_reads() {
    let mut compared = 0;
    for text in SPELLINGS {
        let parsed = parse(text.as_bytes());
        let Some(git) = git_lists(text.as_bytes()) else {
            pitcrew_test_support::skip(
                "git is not installed: the parse is not compared with git's",
            );
            return;
        };
        match git {
            Some(listed) => {
                assert_eq!(parsed.error, None, "{text:?}");
                assert_eq!(ours(&parsed), listed, "{text:?}");
            }
            None => assert!(parsed.error.is_some(), "git refuses {text:?}: {parsed:?}"),
        }
        compared += 1;
    }
    assert_eq!(compared, SPELLINGS.len());
}

#[test]
fn the_grammar_in_detail() {
    let parsed = parse(b"[Core] Bare = true ; c\n[remote \"Or\\\"ig\"] url = \"a b\" c # d\n");
    assert_eq!(parsed.error, None);
    assert_eq!(
        parsed.entries,
        [
            entry("core", None, "Bare", Some("true")),
            entry("remote", Some("Or\"ig"), "url", Some("a b c")),
        ]
    );
    // The old spelling lowercases the subsection; a key alone is a boolean.
    let parsed = parse(b"[Branch.Main]\n\tmerge = refs/heads/main\n\tflag\n");
    assert_eq!(
        parsed.entries,
        [
            entry("branch", Some("main"), "merge", Some("refs/heads/main")),
            entry("branch", Some("main"), "flag", None),
        ]
    );
    // Continuations, escapes, and blanks kept inside quotes only.
    let parsed = parse(b"[a]\n\tk = one \\\n two\n\tq = \"  x;y \" \\t\\\\ \n");
    assert_eq!(
        parsed.entries,
        [
            entry("a", None, "k", Some("one  two")),
            entry("a", None, "q", Some("  x;y  \t\\")),
        ]
    );
}

#[test]
fn an_error_keeps_what_came_before_it_and_names_its_line() {
    let parsed = parse(b"[core]\n\tbare = false\n\tk = \"open\n\tfsmonitor = x\n");
    assert_eq!(parsed.entries, [entry("core", None, "bare", Some("false"))]);
    assert_eq!(
        parsed.error,
        Some(ParseError {
            line: 3,
            what: "a quote left open at the end of the line"
        })
    );
    // Git lists a key before any section under no section, where no lookup finds it; here it
    // is an error, like the others.
    for bad in [
        &b"key = 1\n"[..],
        b"[a]\n\tk = \\q\n",
        b"[a]\n\tk = a\0b\n",
        b"[a \"b\0\"]\n",
        b"[]\n",
        b"[a\n",
        b"@\n",
    ] {
        let parsed = parse(bad);
        assert!(parsed.error.is_some(), "{bad:?}: {parsed:?}");
        assert!(parsed.entries.is_empty(), "{bad:?}: {parsed:?}");
    }
}

#[test]
fn only_allowlisted_keys_survive_the_filter() {
    let planted = "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\
        \tfsmonitor = echo x >> /tmp/m; false\n\thooksPath = /tmp/hooks\n\
        \tsshCommand = sh -c x\n\tpager = x\n\teditor = x\n\tworktree = /home\n\
        \tattributesFile = /tmp/a\n\n\
        [filter \"x\"]\n\tclean = x\n\tsmudge = x\n\tprocess = x\n\
        [diff \"x\"]\n\ttextconv = x\n[diff]\n\texternal = x\n\
        [merge \"x\"]\n\tdriver = x\n[credential]\n\thelper = x\n\
        [include]\n\tpath = /tmp/x\n[includeIf \"gitdir:/\"]\n\tpath = ../evil\n\
        [alias]\n\tst = !x\n\
        [remote \"origin\"]\n\turl = https://h/r.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n\
        \tuploadpack = x\n\treceivepack = x\n\
        [branch \"main\"]\n\tremote = origin\n\tmerge = refs/heads/main\n\
        [extensions]\n\tobjectformat = sha256\n\tpartialClone = origin\n\
        [core]\n\tFSMonitor = again\n";
    let filtered = filter(planted.as_bytes());
    assert_eq!(filtered.error, None);
    assert_eq!(
        filtered.dropped,
        [
            "core.fsmonitor",
            "core.hooksPath",
            "core.sshCommand",
            "core.pager",
            "core.editor",
            "core.worktree",
            "core.attributesFile",
            "filter.x.clean",
            "filter.x.smudge",
            "filter.x.process",
            "diff.x.textconv",
            "diff.external",
            "merge.x.driver",
            "credential.helper",
            "include.path",
            "includeif.gitdir:/.path",
            "alias.st",
            "remote.origin.uploadpack",
            "remote.origin.receivepack",
            "extensions.partialClone",
            "core.FSMonitor",
        ]
    );
    assert_eq!(
        String::from_utf8(filtered.text).unwrap(),
        "[core]\n\trepositoryformatversion = \"0\"\n\tbare = \"false\"\n\
         [remote \"origin\"]\n\turl = \"https://h/r.git\"\n\
         \tfetch = \"+refs/heads/*:refs/remotes/origin/*\"\n\
         [branch \"main\"]\n\tremote = \"origin\"\n\tmerge = \"refs/heads/main\"\n\
         [extensions]\n\tobjectformat = \"sha256\"\n"
    );
    // What follows an error is dropped too, whatever it says.
    let filtered = filter(b"[core]\n\tbare = false\n[bad\n[core]\n\tfsmonitor = x\n");
    assert_eq!(filtered.text, b"[core]\n\tbare = \"false\"\n");
    assert_eq!(filtered.error.map(|e| e.line), Some(3));
}

#[test]
fn a_value_that_could_end_its_line_is_written_back_escaped() {
    // A kept key whose value holds what would start a new line, a comment or a section.
    let sneaky = "\n[core]\n\tfsmonitor = x\n\"#;\\\t\u{8}\r";
    let entries = vec![
        entry("remote", Some("a\"b\\c]"), "url", Some(sneaky)),
        entry("core", None, "bare", None),
    ];
    let text = write(&entries);
    let again = parse(&text);
    assert_eq!(again.error, None, "{}", String::from_utf8_lossy(&text));
    assert_eq!(again.entries, entries);
    if let Some(git) = git_lists(&text) {
        assert_eq!(
            git,
            Some(vec![
                format!("remote.a\"b\\c].url={sneaky}"),
                "core.bare".to_string()
            ])
        );
    }
}

#[test]
fn parsing_is_bounded() {
    let mut text = String::from("[a]\n");
    for i in 0..=MAX_ENTRIES {
        text.push_str(&format!("\tk{i} = v\n"));
    }
    let parsed = parse(text.as_bytes());
    assert_eq!(parsed.entries.len(), MAX_ENTRIES);
    assert_eq!(
        parsed.error.map(|e| e.what),
        Some("more entries than a configuration holds")
    );
}
