//! The model request rewriter (`pitcrew_core::model_http::RequestRewriter`) on arbitrary bytes:
//! what an agent sends on a model connection, on its way to the provider with the host's
//! credentials put in.
//!
//! Invariants: it never panics; the bytes it passes on do not depend on how the input was split
//! into reads (fed whole or in two parts at any point: the same output, the same verdict); a
//! credential's value is in the output only where the input held its placeholder (or the value
//! itself); what it
//! injected names only the credentials it knows.

#![no_main]

use libfuzzer_sys::fuzz_target;
use pitcrew_core::model_http::{Credential, RequestRewriter};

/// A credential value no input can hold by chance.
const VALUE: &[u8] = b"sk-fuzz-real-value-5e1d";

fn creds() -> Vec<Credential> {
    vec![
        Credential {
            name: "ANTHROPIC_API_KEY".into(),
            placeholder: b"pitcrew-placeholder-ANTHROPIC_API_KEY".to_vec(),
            value: VALUE.to_vec(),
        },
        Credential {
            name: "OPENAI_API_KEY".into(),
            placeholder: b"pitcrew-placeholder-OPENAI_API_KEY".to_vec(),
            value: b"sk-other-real-value".to_vec(),
        },
    ]
}

/// Feeds `parts` one after the other: the bytes passed on, whether every feed was taken, and
/// the names injected.
fn run(parts: &[&[u8]]) -> (Vec<u8>, bool, Vec<String>) {
    let mut r = RequestRewriter::new(&creds(), "api.example:443", "/v1");
    let mut out = Vec::new();
    let mut injected = Vec::new();
    for part in parts {
        if r.feed(part, &mut out).is_err() {
            return (out, false, injected);
        }
        injected.extend(r.take_injected());
    }
    (out, true, injected)
}

/// How many times `needle` occurs in `haystack` (overlapping ones too).
fn count(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .filter(|w| w == &needle)
        .count()
}

fuzz_target!(|data: &[u8]| {
    let Some((&split, input)) = data.split_first() else {
        return;
    };
    let (whole, ok, injected) = run(&[input]);
    for name in &injected {
        assert!(
            name == "ANTHROPIC_API_KEY" || name == "OPENAI_API_KEY",
            "{name}"
        );
    }
    // Each value in the output was in the input already, or stands where a placeholder was.
    let placeholders = count(input, b"pitcrew-placeholder-ANTHROPIC_API_KEY");
    assert!(
        count(&whole, VALUE) <= count(input, VALUE) + placeholders,
        "the value without its placeholder"
    );
    if placeholders == 0 {
        assert!(!injected.iter().any(|n| n == "ANTHROPIC_API_KEY"));
    }
    let at = usize::from(split) * input.len() / 255;
    let (first, second) = input.split_at(at);
    let (parts, parts_ok, _) = run(&[first, second]);
    assert_eq!(ok, parts_ok, "split at {at}: verdict");
    if ok {
        assert_eq!(whole, parts, "split at {at}: output");
    }
});
