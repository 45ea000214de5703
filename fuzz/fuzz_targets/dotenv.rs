//! The sandbox `.env` parser (`pitcrew_core::dotenv::parse`) on arbitrary bytes, under the
//! environment step's rules (its deny rules, a name a trusted layer sets, and size limits) and under the same deny rule with
//! tiny limits (so that small inputs reach the limit checks).
//!
//! Invariants: every line is accepted, refused or ignored at most once, in file order; accepted
//! keys are valid names the deny rule allows, values hold no NUL, each `NAME=value` and their
//! total stay within the limits; a refusal names a valid key or none; parsing is
//! deterministic; and the accepted assignments, written back as `export KEY="…"` lines with the
//! escapes the grammar defines, parse to the same assignments with nothing refused.

#![no_main]

use libfuzzer_sys::fuzz_target;
use pitcrew_core::dotenv::{self, Denial, Parsed, Rules};
use pitcrew_core::env_policy;
use pitcrew_core::environment::{DOTENV_MAX_ENTRY_BYTES, DOTENV_MAX_TOTAL_BYTES};

/// The baseline the file's `$NAME` expand against (names that are not assigned in the file).
fn baseline(name: &str) -> Option<String> {
    match name {
        "PATH" => Some("/usr/local/bin:/usr/bin:/bin".into()),
        "HOME" => Some("/home/agent".into()),
        "EMPTY" => Some(String::new()),
        "QUOTES" => Some("a'b\"c$d`e\\f".into()),
        _ => None,
    }
}

/// `value` double-quoted with the parser's escapes (`\"`, `\\`, `\$`, `` \` ``, `\n`).
fn double_quoted(value: &str) -> String {
    let mut out = String::from("\"");
    for c in value.chars() {
        match c {
            '"' | '\\' | '$' | '`' => {
                out.push('\\');
                out.push(c);
            }
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn check(input: &[u8], parsed: &Parsed, rules: &Rules<'_>) {
    let body = input.strip_suffix(b"\n").unwrap_or(input);
    let lines = body.split(|b| *b == b'\n').count();
    let mut seen: Vec<usize> = parsed
        .assignments
        .iter()
        .map(|a| a.line)
        .chain(parsed.refused.iter().map(|r| r.line))
        .collect();
    assert!(
        seen.iter().all(|&l| (1..=lines).contains(&l)),
        "line out of range"
    );
    seen.sort_unstable();
    let before = seen.len();
    seen.dedup();
    assert_eq!(
        before,
        seen.len(),
        "a line both accepted and refused, or twice"
    );
    assert!(parsed.assignments.windows(2).all(|w| w[0].line < w[1].line));
    assert!(parsed.refused.windows(2).all(|w| w[0].line < w[1].line));
    let mut total = 0;
    for a in &parsed.assignments {
        assert!(dotenv::is_valid_key(&a.key), "accepted an invalid key");
        assert!(
            (rules.deny_name)(&a.key).is_none(),
            "accepted a denied name"
        );
        assert!(!a.value.contains('\0'), "a value holds a NUL");
        let entry = a.key.len() + 1 + a.value.len();
        assert!(entry <= rules.max_entry_bytes, "an entry over the limit");
        total += entry + 1;
    }
    assert!(
        total <= rules.max_total_bytes,
        "assignments over the total limit"
    );
    for r in &parsed.refused {
        if let Some(name) = &r.name {
            assert!(dotenv::is_valid_key(name), "a refusal names an invalid key");
        }
    }
}

/// Parses, checks, and checks the written-back form.
fn round(data: &[u8], rules: &Rules<'_>) {
    let parsed = dotenv::parse(data, baseline, rules);
    check(data, &parsed, rules);
    assert_eq!(
        parsed,
        dotenv::parse(data, baseline, rules),
        "not deterministic"
    );

    // Written back quoted, the accepted assignments read the same, with nothing refused. The
    // lookup is empty: escaped `$` never expands, so the baseline cannot matter.
    let mut again = String::new();
    for a in &parsed.assignments {
        again.push_str(&format!("export {}={}\n", a.key, double_quoted(&a.value)));
    }
    let reparsed = dotenv::parse(again.as_bytes(), |_| None, rules);
    assert!(
        reparsed.refused.is_empty(),
        "a written-back assignment was refused: {:?}",
        reparsed.refused
    );
    let pairs = |p: &Parsed| -> Vec<(String, String)> {
        p.assignments
            .iter()
            .map(|a| (a.key.clone(), a.value.clone()))
            .collect()
    };
    assert_eq!(
        pairs(&parsed),
        pairs(&reparsed),
        "written back, reads differently"
    );
}

/// The environment step's refusals: the trusted-only names, and one name a trusted layer of
/// the operator's sets (`--pass-env`).
fn deny(name: &str) -> Option<Denial> {
    if name.eq_ignore_ascii_case("FOO_SETTING") {
        return Some(Denial::SetByTrustedLayer("pass-env"));
    }
    env_policy::untrusted_denial(name).map(Denial::TrustedOnly)
}

fuzz_target!(|data: &[u8]| {
    let deny = &deny;
    let production = Rules {
        max_entry_bytes: DOTENV_MAX_ENTRY_BYTES,
        max_total_bytes: DOTENV_MAX_TOTAL_BYTES,
        deny_name: deny,
    };
    round(data, &production);
    let tiny = Rules {
        max_entry_bytes: 48,
        max_total_bytes: 160,
        deny_name: deny,
    };
    round(data, &tiny);
});
