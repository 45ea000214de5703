//! The manifest parser (`Manifest::from_json`, which also validates) on arbitrary bytes.
//!
//! Invariants: an accepted manifest validates again; it re-serialises (pretty and compact) and
//! re-parses to the same value; its per-file listings survive the compact in-memory form
//! (`FileListing::to_records` / `from_records`).

#![no_main]

use libfuzzer_sys::fuzz_target;
use pitcrew_core::manifest::{FileListing, Manifest};

fuzz_target!(|data: &[u8]| {
    let Ok(manifest) = Manifest::from_json(data) else {
        return;
    };
    manifest
        .validate()
        .expect("an accepted manifest validates again");

    let pretty = manifest.to_json_pretty();
    assert!(!pretty.is_empty(), "an accepted manifest did not serialise");
    let again = Manifest::from_json(pretty.as_bytes()).expect("the pretty form parses");
    assert_eq!(again, manifest, "the pretty form reads differently");

    let compact = serde_json::to_vec(&manifest).expect("the manifest serialises");
    let again = Manifest::from_json(&compact).expect("the compact form parses");
    assert_eq!(again, manifest, "the compact form reads differently");

    for tree in &manifest.trees {
        let records = tree.files.to_records();
        assert_eq!(records.len(), tree.files.len());
        let rebuilt = FileListing::from_records(&records).expect("a parsed listing rebuilds");
        assert_eq!(
            rebuilt, tree.files,
            "a listing does not survive its records"
        );
    }
});
