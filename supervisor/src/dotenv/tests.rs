//! Unit tests of `dotenv`.

use super::*;

fn allow_all(_: &str) -> Option<Denial> {
    None
}

/// Only the grammar: no denied name, limits nothing in these tests reaches.
const OPEN: Rules<'static> = Rules {
    max_entry_bytes: 1 << 20,
    max_total_bytes: 1 << 24,
    deny_name: &allow_all,
};

fn env(name: &str) -> Option<String> {
    match name {
        "PATH" => Some("/usr/bin:/bin".into()),
        "HOME" => Some("/home/agent".into()),
        _ => None,
    }
}

fn pairs(input: &str) -> Vec<(String, String)> {
    let parsed = parse(input.as_bytes(), env, &OPEN);
    assert!(parsed.refused.is_empty(), "{input:?}: {:?}", parsed.refused);
    parsed
        .assignments
        .into_iter()
        .map(|a| (a.key, a.value))
        .collect()
}

fn one(input: &str) -> String {
    let mut p = pairs(input);
    assert_eq!(p.len(), 1, "{input:?}");
    p.remove(0).1
}

fn refusal(input: &str) -> String {
    let parsed = parse(input.as_bytes(), env, &OPEN);
    assert!(parsed.assignments.is_empty(), "{input:?} must be refused");
    assert_eq!(parsed.refused.len(), 1, "{input:?}: {:?}", parsed.refused);
    parsed.refused[0].reason.clone()
}

#[test]
fn accepted_forms() {
    let cases: &[(&str, &str)] = &[
        ("A=b", "b"),
        ("export A=b", "b"),
        ("  export\tA=b  ", "b"),
        ("A=", ""),
        ("A=b # comment", "b"),
        ("A=b#notacomment", "b#notacomment"),
        ("A='lit $HOME `x` $(y) \\n'", "lit $HOME `x` $(y) \\n"),
        ("A=\"q \\\" \\\\ \\$HOME \\` x\"", "q \" \\ $HOME ` x"),
        ("A=\"a\\nb\"", "a\nb"),
        ("A=\"keep \\t\"", "keep \\t"),
        ("A=\"$HOME/x ${HOME}y\"", "/home/agent/x /home/agenty"),
        ("A=$HOME", "/home/agent"),
        ("A=${HOME}/bin", "/home/agent/bin"),
        ("A=$UNSET_VAR.x", ".x"),
        ("A=5$", "5$"),
        ("A=a$/b", "a$/b"),
        ("A=\"5$\"", "5$"),
        ("A=a\\ b", "a b"),
        ("A='x'\"y\"z", "xyz"),
        ("A='x' # it's a comment", "x"),
        ("A=x=y", "x=y"),
        ("A={a,b}*?", "{a,b}*?"),
        ("A=\"a;b|c&d<e>f(g)\"", "a;b|c&d<e>f(g)"),
        ("A='~' ", "~"),
        ("A=x~", "x~"),
        ("_a1=b", "b"),
        ("export=1", "1"),
        ("A=\"$'x'\"", "$'x'"),
    ];
    for (input, value) in cases {
        assert_eq!(one(input), *value, "{input:?}");
    }
}

#[test]
fn path_prepend_expands_against_earlier_lines_and_baseline() {
    let p = pairs("# header\n\nPATH=/x/bin:$PATH\nPATH=/y:${PATH}\r\nB=$PATH\n");
    assert_eq!(p[0], ("PATH".into(), "/x/bin:/usr/bin:/bin".into()));
    assert_eq!(p[1], ("PATH".into(), "/y:/x/bin:/usr/bin:/bin".into()));
    assert_eq!(p[2].1, "/y:/x/bin:/usr/bin:/bin");
}

#[test]
fn refusals_each_name_their_reason() {
    let cases: &[(&str, &str)] = &[
        ("f() { echo hi; }", "function definition"),
        ("f () {", "function definition"),
        ("function f {", "shell command `function`"),
        ("unset PATH", "shell command `unset`"),
        ("alias ls=rm", "shell command `alias`"),
        ("source /tmp/x", "shell command `source`"),
        (". /tmp/x", "shell command `.`"),
        ("export unset=1 X", "unquoted blank"),
        ("JUST_WORDS", "not a KEY=value assignment"),
        ("export A", "not a KEY=value assignment"),
        ("1A=b", "key is not a valid name"),
        ("A-B=c", "key is not a valid name"),
        ("A =b", "key is not a valid name"),
        ("A=$(id)", "command substitution $("),
        ("A=\"$(id)\"", "command substitution $("),
        ("A=`id`", "command substitution `"),
        ("A=\"`id`\"", "command substitution `"),
        ("A=$((1+2))", "arithmetic"),
        ("A=${X:-y}", "parameter expansion with an operator"),
        ("A=${X#p}", "parameter expansion with an operator"),
        ("A=${#X}", "parameter expansion with an operator"),
        ("A=${X", "parameter expansion with an operator"),
        ("A=\"${X/a/b}\"", "parameter expansion with an operator"),
        ("A=$1", "special parameter"),
        ("A=$@", "special parameter"),
        ("A=\"$?\"", "special parameter"),
        ("A=$'\\x41'", "$'…'"),
        ("A=b; rm -rf /", "shell operator ';'"),
        ("A=b|c", "shell operator '|'"),
        ("A=b&", "shell operator '&'"),
        ("A=b>f", "shell operator '>'"),
        ("A=b<f", "shell operator '<'"),
        ("A=(a b)", "shell operator '('"),
        ("A=x(", "shell operator '('"),
        ("A=~/bin", "tilde"),
        ("A=/x:~/bin", "tilde"),
        ("A=b c", "unquoted blank"),
        ("A=b cmd # c", "unquoted blank"),
        ("A='open", "unterminated single quote"),
        ("A=\"open", "unterminated double quote"),
        ("A=\"open\\", "unterminated double quote"),
        ("A=b\\", "line continuation"),
    ];
    for (input, reason) in cases {
        let got = refusal(input);
        assert!(
            got.contains(reason),
            "{input:?}: got {got:?}, want {reason:?}"
        );
    }
}

#[test]
fn nul_and_invalid_utf8_refuse_only_their_line() {
    let parsed = parse(b"A=1\nB=x\0y\nC=\xff\nD=4\n", env, &OPEN);
    let keys: Vec<&str> = parsed.assignments.iter().map(|a| a.key.as_str()).collect();
    assert_eq!(keys, ["A", "D"]);
    assert_eq!(
        parsed.refused,
        vec![
            DotenvRefusal {
                line: 2,
                name: None,
                reason: "contains a NUL byte".into()
            },
            DotenvRefusal {
                line: 3,
                name: None,
                reason: "not valid UTF-8".into()
            },
        ]
    );
}

#[test]
fn multi_line_values_are_refused_whole() {
    let input =
        "A=\"first\nPATH=/evil\nstill\" tail\nB='x\nLD_PRELOAD=/y.so'\nC=a\\\nD=hidden\nE=ok\n";
    let parsed = parse(input.as_bytes(), env, &OPEN);
    let keys: Vec<&str> = parsed.assignments.iter().map(|a| a.key.as_str()).collect();
    assert_eq!(keys, ["E"]);
    let lines: Vec<usize> = parsed.refused.iter().map(|r| r.line).collect();
    assert_eq!(lines, [1, 2, 3, 4, 5, 6, 7]);
    assert!(parsed.refused[1].reason.contains("multi-line"));
}

#[test]
fn refusals_never_contain_the_value() {
    let secret = "s3cr3t-value";
    for input in [
        format!("A=$({secret})"),
        format!("A={secret}; x"),
        format!("A=\"{secret}"),
        format!("{secret}() {{"),
        format!("bad-key={secret}"),
        format!("A=${{{secret}:-x}}"),
    ] {
        let parsed = parse(input.as_bytes(), env, &OPEN);
        assert_eq!(parsed.refused.len(), 1, "{input:?}");
        let json = serde_json::to_string(&parsed.refused).unwrap();
        assert!(!json.contains(secret), "{json}");
    }
    let parsed = parse(format!("A={secret}").as_bytes(), env, &OPEN);
    assert!(!format!("{parsed:?}").contains(secret));
}

#[test]
fn later_assignment_wins_and_expansion_sees_it() {
    let p = pairs("A=1\nA=2\nB=$A\n");
    assert_eq!(p.last().unwrap(), &("B".to_string(), "2".to_string()));
}

const PROXY_RULE: DenyRule = DenyRule {
    pattern: crate::env_policy::Pattern::Suffix("_PROXY"),
    reason: "routes traffic",
};

fn deny_proxy(name: &str) -> Option<Denial> {
    PROXY_RULE
        .pattern
        .matches(name)
        .then_some(Denial::TrustedOnly(&PROXY_RULE))
}

fn refusals(parsed: &Parsed) -> Vec<(usize, Option<&str>, &str)> {
    parsed
        .refused
        .iter()
        .map(|r| (r.line, r.name.as_deref(), r.reason.as_str()))
        .collect()
}

#[test]
fn a_denied_name_is_refused_by_name_and_never_expanded() {
    let rules = Rules {
        deny_name: &deny_proxy,
        ..OPEN
    };
    let parsed = parse(
        b"https_proxy=http://evil:1\nB=[$https_proxy]\nexport HTTPS_PROXY=x\nC=1\n",
        env,
        &rules,
    );
    let got: Vec<(&str, &str)> = parsed
        .assignments
        .iter()
        .map(|a| (a.key.as_str(), a.value.as_str()))
        .collect();
    assert_eq!(got, [("B", "[]"), ("C", "1")]);
    let refused = refusals(&parsed);
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert_eq!((refused[0].0, refused[0].1), (1, Some("https_proxy")));
    assert_eq!((refused[1].0, refused[1].1), (3, Some("HTTPS_PROXY")));
    assert!(
        refused[0].2.contains("only a trusted layer") && refused[0].2.contains("*_PROXY"),
        "{refused:?}"
    );
    assert!(!format!("{refused:?}").contains("evil"));
}

#[test]
fn a_name_a_trusted_layer_sets_is_refused_naming_the_layer() {
    let trusted = |name: &str| (name == "FOO").then_some(Denial::SetByTrustedLayer("pass-env"));
    let rules = Rules {
        deny_name: &trusted,
        ..OPEN
    };
    let lookup = |name: &str| (name == "FOO").then(|| "operator".to_string());
    let parsed = parse(
        b"FOO=planted
B=[$FOO]
",
        lookup,
        &rules,
    );
    let got: Vec<(&str, &str)> = parsed
        .assignments
        .iter()
        .map(|a| (a.key.as_str(), a.value.as_str()))
        .collect();
    // The refused line changes nothing: a later `$FOO` still reads the trusted value.
    assert_eq!(got, [("B", "[operator]")]);
    let refused = refusals(&parsed);
    assert_eq!((refused[0].0, refused[0].1), (1, Some("FOO")));
    assert!(
        refused[0].2.contains("trusted layer pass-env"),
        "{refused:?}"
    );
    assert!(!format!("{refused:?}").contains("planted"));
}

#[test]
fn an_entry_over_the_limit_is_refused_while_it_is_built() {
    let rules = Rules {
        max_entry_bytes: 16,
        ..OPEN
    };
    // NAME=value of exactly 16 bytes passes; one more byte, however it comes, does not.
    let input = "A=0123456789abcd\n\
                     B=0123456789abcde\n\
                     C='0123456789abcd'x\n\
                     D=\"$HOME$HOME\"\n\
                     E=${HOME}${HOME}\n\
                     F=\"open 0123456789\n\
                     G=continued\"\n\
                     H=ok\n";
    let parsed = parse(input.as_bytes(), env, &rules);
    let keys: Vec<&str> = parsed.assignments.iter().map(|a| a.key.as_str()).collect();
    assert_eq!(keys, ["A", "H"]);
    let refused = refusals(&parsed);
    let named: Vec<(usize, Option<&str>)> = refused.iter().map(|r| (r.0, r.1)).collect();
    assert_eq!(
        named,
        [
            (2, Some("B")),
            (3, Some("C")),
            (4, Some("D")),
            (5, Some("E")),
            (6, Some("F")),
            (7, None)
        ]
    );
    assert!(refused[0].2.contains("longer than 16 bytes"), "{refused:?}");
    // The line inside the refused multi-line value is refused as part of it.
    assert!(refused[5].2.contains("multi-line"), "{refused:?}");
    // A key alone over the limit.
    let parsed = parse(format!("{}=1\n", "K".repeat(20)).as_bytes(), env, &rules);
    assert!(parsed.assignments.is_empty());
    assert!(parsed.refused[0].reason.contains("longer than 16"));
}

#[test]
fn the_total_counts_every_accepted_assignment() {
    let rules = Rules {
        max_total_bytes: 20,
        ..OPEN
    };
    // Each `A=12345` costs 8 (key, '=', value, NUL): two fit, the third would make 24.
    let parsed = parse(b"A=12345\nA=12345\nA=12345\nB=1\nC=12\n", env, &rules);
    let keys: Vec<&str> = parsed.assignments.iter().map(|a| a.key.as_str()).collect();
    // B (4 bytes) still fits in the 20; C (5) does not.
    assert_eq!(keys, ["A", "A", "B"]);
    let refused = refusals(&parsed);
    assert_eq!(refused.len(), 2);
    assert_eq!((refused[0].0, refused[0].1), (3, Some("A")));
    assert_eq!((refused[1].0, refused[1].1), (5, Some("C")));
    assert!(refused[0].2.contains("more than 20 bytes"), "{refused:?}");
}

#[test]
fn a_refusal_after_the_key_names_the_key() {
    let parsed = parse(b"STOLEN=$(cat /etc/shadow)\nbad-key=1\nf() {\n", env, &OPEN);
    let named: Vec<Option<&str>> = parsed.refused.iter().map(|r| r.name.as_deref()).collect();
    assert_eq!(named, [Some("STOLEN"), None, None]);
    let json = serde_json::to_string(&parsed.refused).unwrap();
    assert!(!json.contains("shadow"), "{json}");
    // No `name` key when there is none.
    assert_eq!(json.matches("\"name\"").count(), 1, "{json}");
}
