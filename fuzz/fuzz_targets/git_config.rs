//! The git configuration reader and its allowlist filter (`pitcrew_core::git_config`, what the
//! host keeps of a collected workspace's `.git/config`) on arbitrary bytes.
//!
//! Invariants: at most `MAX_ENTRIES` entries are read; no subsection holds a newline or a NUL;
//! reading is deterministic; the entries written back read back as the same entries with no
//! error; the filtered file reads back with no error as exactly the entries the allowlist
//! keeps, and filtering it again changes nothing and drops nothing.

#![no_main]

use libfuzzer_sys::fuzz_target;
use pitcrew_core::git_config::{filter, is_kept, parse, write, MAX_ENTRIES};

fuzz_target!(|data: &[u8]| {
    let parsed = parse(data);
    assert!(parsed.entries.len() <= MAX_ENTRIES, "too many entries");
    assert_eq!(parsed, parse(data), "not deterministic");
    for entry in &parsed.entries {
        let sub = entry.subsection.as_deref().unwrap_or_default();
        assert!(
            !sub.contains(&b'\n') && !sub.contains(&0),
            "a subsection holds a line end"
        );
        assert!(
            !entry.value.as_deref().unwrap_or_default().contains(&0),
            "a value holds a NUL"
        );
    }

    let again = parse(&write(&parsed.entries));
    assert_eq!(again.error, None, "what was written back does not read");
    assert_eq!(
        again.entries, parsed.entries,
        "written back, reads differently"
    );

    let filtered = filter(data);
    let kept: Vec<_> = parsed
        .entries
        .iter()
        .filter(|e| is_kept(e))
        .cloned()
        .collect();
    let reread = parse(&filtered.text);
    assert_eq!(reread.error, None, "the filtered file does not read");
    assert_eq!(
        reread.entries, kept,
        "the filtered file holds other entries"
    );
    assert!(reread.entries.iter().all(is_kept), "a dropped key survived");
    assert_eq!(filtered.error, parsed.error);
    let twice = filter(&filtered.text);
    assert_eq!(
        twice.text, filtered.text,
        "filtering twice changes the file"
    );
    assert!(twice.dropped.is_empty() && twice.error.is_none());
});
