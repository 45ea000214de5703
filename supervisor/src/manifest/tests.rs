//! Unit tests of `manifest`.

use super::*;
use crate::tree_hash::FileRecord;

fn minimal() -> serde_json::Value {
    serde_json::json!({
        "version": 1,
        "runtime": "command",
        "agent": {"binary": "/bin/true"},
        "workdir": "/work",
    })
}

#[test]
fn minimal_manifest_parses_with_defaults() {
    let m = Manifest::from_json(minimal().to_string().as_bytes()).unwrap();
    assert_eq!(m.runtime, Runtime::Command);
    assert_eq!(m.user.uid, 65534);
    assert_eq!(m.limits.kill_grace_ms, 2000);
    assert_eq!(m.confinement.landlock, LandlockMode::BestEffort);
    let again = Manifest::from_json(m.to_json_pretty().as_bytes()).unwrap();
    assert_eq!(again, m);
}

#[test]
fn refuses_other_versions_unknown_fields_and_bad_values() {
    let mut v = minimal();
    v["version"] = 2.into();
    let err = Manifest::from_json(v.to_string().as_bytes()).unwrap_err();
    assert!(matches!(err, ManifestError::Version { found: 2 }), "{err}");

    let mut v = minimal();
    v["surprise"] = true.into();
    assert!(matches!(
        Manifest::from_json(v.to_string().as_bytes()),
        Err(ManifestError::Parse(_))
    ));

    let mut v = minimal();
    v["workdir"] = "relative".into();
    let err = Manifest::from_json(v.to_string().as_bytes()).unwrap_err();
    assert!(err.to_string().contains("workdir"), "{err}");

    let mut v = minimal();
    v["user"] = serde_json::json!({"uid": 0, "gid": 0});
    let err = Manifest::from_json(v.to_string().as_bytes()).unwrap_err();
    assert!(err.to_string().contains("root"), "{err}");

    let mut v = minimal();
    v["files"] = serde_json::json!([{"path": "/a", "role": "config", "sha256": "XYZ"}]);
    let err = Manifest::from_json(v.to_string().as_bytes()).unwrap_err();
    assert!(err.to_string().contains("files[0].sha256"), "{err}");

    let mut v = minimal();
    v["env"] = serde_json::json!({"set": {"LD_PRELOAD": "/x.so"}});
    let err = Manifest::from_json(v.to_string().as_bytes()).unwrap_err();
    assert!(err.to_string().contains("LD_PRELOAD"), "{err}");

    assert!(matches!(
        Manifest::from_json(b"{not json"),
        Err(ManifestError::Parse(_))
    ));
}

#[test]
fn file_listings_round_trip_compactly_and_refuse_bad_digests() {
    let records = vec![
        FileRecord {
            path: "a/b.js".into(),
            sha256: "ab".repeat(32),
            size: 3,
        },
        FileRecord {
            path: "c é.ts".into(),
            sha256: "0".repeat(64),
            size: 0,
        },
    ];
    let listing = FileListing::from_records(&records).unwrap();
    assert_eq!(listing.len(), 2);
    assert_eq!(listing.to_records(), records);
    let json = serde_json::to_value(&listing).unwrap();
    assert_eq!(json, serde_json::to_value(&records).unwrap());
    let back: FileListing = serde_json::from_value(json).unwrap();
    assert_eq!(back, listing);
    let bad = serde_json::json!([{"path": "x", "sha256": "XY", "size": 1}]);
    let err = serde_json::from_value::<FileListing>(bad).unwrap_err();
    assert!(err.to_string().contains("\"x\""), "{err}");
}

#[test]
fn refuses_duplicate_tree_names_and_escaping_entries() {
    let tree = serde_json::json!({
        "name": "p", "path": "/t/p", "role": "plugin", "kind": "pi-extension",
        "format": "pi-tree-v1", "sha256": "0".repeat(64), "entries": ["index.ts"],
    });
    let mut v = minimal();
    v["trees"] = serde_json::json!([tree.clone(), tree.clone()]);
    let err = Manifest::from_json(v.to_string().as_bytes()).unwrap_err();
    assert!(err.to_string().contains("twice"), "{err}");

    let mut bad = tree;
    bad["entries"] = serde_json::json!(["../x.ts"]);
    let mut v = minimal();
    v["trees"] = serde_json::json!([bad]);
    let err = Manifest::from_json(v.to_string().as_bytes()).unwrap_err();
    assert!(err.to_string().contains("entries[0]"), "{err}");
}

#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_harness__a_skill_tree_sent_as_a_plugin_is_refused() {
    // A manifest sent straight to the supervisor cannot have a skill loaded as a plugin or an
    // extension: a skill is text.
    for kind in ["claude-plugin", "pi-extension"] {
        let tree = serde_json::json!({
            "name": "skill:s", "path": "/t/s", "role": "skill", "kind": kind,
            "format": "pi-tree-v1", "sha256": "0".repeat(64), "entries": ["index.ts"],
        });
        let mut v = minimal();
        v["trees"] = serde_json::json!([tree]);
        let err = Manifest::from_json(v.to_string().as_bytes()).unwrap_err();
        assert!(
            err.to_string()
                .contains("trees[0].kind: a skill tree is data"),
            "{err}"
        );
    }
}
