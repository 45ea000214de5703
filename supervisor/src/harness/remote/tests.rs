//! Parsing of remote entries, and the checker's use of a [`RemoteSources`].

use super::*;
use crate::harness::{validate_with, Validated};
use std::path::Path;

const PIN: &str = "49a51dd20d9ea2bb499eac4627bda784a9ed71c5cebdf3108f8c6997ae1be950";

#[test]
fn a_pinned_tree_and_blob_url_parse_into_their_parts() {
    let tree = RemoteSource::parse(&format!(
        "https://GitHub.com/acme/tools/tree/feature/x/plugins/review#sha256={}",
        PIN.to_uppercase()
    ))
    .unwrap()
    .unwrap();
    assert_eq!(tree.kind, RemoteKind::Tree);
    assert_eq!(tree.host, "github.com");
    assert_eq!((tree.owner.as_str(), tree.repo.as_str()), ("acme", "tools"));
    assert_eq!(tree.ref_and_path, ["feature", "x", "plugins", "review"]);
    assert_eq!(tree.sha256, PIN, "the pin is lowercased");
    assert_eq!(tree.name(), "review");
    assert_eq!(tree.repository(), "https://github.com/acme/tools");
    assert_eq!(
        tree.url,
        "https://GitHub.com/acme/tools/tree/feature/x/plugins/review"
    );
    let blob = RemoteSource::parse(&format!(
        "https://127.0.0.1:8443/a/b/blob/v1/config/settings.json#sha256={PIN}"
    ))
    .unwrap()
    .unwrap();
    assert_eq!(blob.kind, RemoteKind::Blob);
    assert_eq!(blob.host, "127.0.0.1:8443");
    assert_eq!(blob.name(), "settings.json");
    // The fragment is the one after the last '#'.
    let earlier_hash = RemoteSource::parse(&format!("https://f/a/b/tree/m/d#x#sha256={PIN}"));
    assert!(earlier_hash.unwrap_err().contains("'#'"));
    assert_eq!(RemoteSource::parse("plugins/review").unwrap(), None);
}

#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_remote_source__every_other_remote_spelling_is_refused_with_the_form_to_use() {
    let cases = [
        ("https://f.example/a/b/tree/main/dir", "not pinned"),
        ("https://f.example/a/b/tree/main/dir#sha256=abc", "64 hex"),
        (
            &format!("https://f.example/a/b/tree/main/dir#md5={PIN}"),
            "not a pin",
        ),
        (
            &format!("http://f.example/a/b/tree/main/dir#sha256={PIN}"),
            "http:",
        ),
        ("npm:@acme/tools", "npm:"),
        ("git:https://f.example/a/b", "git:"),
        ("ssh://git@f.example/a/b", "ssh:"),
        ("ftp://f.example/a", "only https"),
        (
            &format!("https://user@f.example/a/b/tree/main/d#sha256={PIN}"),
            "'@'",
        ),
        (
            &format!("https://f.example/a/b/tree/main/d?x=1#sha256={PIN}"),
            "'?'",
        ),
        (
            &format!("https://f.example/a/b/tree/main/%2e%2e#sha256={PIN}"),
            "'%'",
        ),
        (
            &format!("https://f.example/a/b/tree/main/../d#sha256={PIN}"),
            "`..`",
        ),
        (
            &format!("https://f.example/a/b/tree/main//d#sha256={PIN}"),
            "empty",
        ),
        (
            &format!("https://f.example/a/b/tree/main#sha256={PIN}"),
            "inside a repository",
        ),
        (
            &format!("https://f.example/a/b/raw/main/d#sha256={PIN}"),
            "tree or blob",
        ),
        (
            &format!("https://bad_host/a/b/tree/main/d#sha256={PIN}"),
            "host name",
        ),
        (
            &format!("https://f.example:99999x/a/b/tree/main/d#sha256={PIN}"),
            "host name",
        ),
    ];
    for (raw, needle) in cases {
        let err = RemoteSource::parse(raw).expect_err(raw);
        assert!(err.contains(needle), "{raw}: {err}");
    }
}

/// A stand-in for the host's cache: every source resolves to one local directory or file.
struct Fixed {
    dir: PathBuf,
    asked: Vec<String>,
    findings: Vec<String>,
    /// The listing it says it verified a tree with.
    listing: Option<crate::tree_hash::TreeListing>,
}

impl RemoteSources for Fixed {
    fn resolve(&mut self, source: &RemoteSource, field: &str) -> Result<Resolved, String> {
        self.asked.push(format!("{field} {}", source.url));
        Ok(Resolved {
            path: match source.kind {
                RemoteKind::Tree => self.dir.join("plugin"),
                RemoteKind::Blob => self.dir.join("content"),
            },
            listing: match source.kind {
                RemoteKind::Tree => self.listing.clone(),
                RemoteKind::Blob => None,
            },
            notes: self.findings.clone(),
            problems: Vec::new(),
        })
    }
}

fn check_with(dir: &Path, text: &str, remotes: &mut dyn RemoteSources) -> Validated {
    let file = dir.join("harness.yaml");
    std::fs::write(&file, text).unwrap();
    validate_with(&file, None, remotes).unwrap()
}

#[test]
fn a_resolved_remote_entry_is_checked_like_a_local_one_under_its_url_name() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("plugin")).unwrap();
    std::fs::write(
        dir.path().join("plugin/index.ts"),
        "export default () => {};\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("content"), "{}\n").unwrap();
    let tree_pin = crate::tree_hash::hash_tree(
        &dir.path().join("plugin"),
        crate::tree_hash::TreeFormat::ContentV1,
    )
    .unwrap()
    .sha256;
    let blob_pin = crate::tree_hash::sha256_file(&dir.path().join("content"))
        .unwrap()
        .sha256;
    let mut remotes = Fixed {
        dir: dir.path().to_path_buf(),
        asked: Vec::new(),
        findings: vec!["content scan: x".into()],
        listing: None,
    };
    let text = format!(
        "runtime: pi\nprompt: hi\nplugins:\n  - https://f.example/a/b/tree/main/plugins/review#sha256={tree_pin}\n\
         adapters:\n  - path: https://f.example/a/b/blob/main/config/settings.json#sha256={blob_pin}\n    role: config\n"
    );
    let v = check_with(dir.path(), &text, &mut remotes);
    assert!(v.is_ok(), "{:?}", v.problems);
    assert_eq!(v.plugins[0].spec.name, "review");
    assert_eq!(v.plugins[0].spec.pin.as_deref(), Some(tree_pin.as_str()));
    assert_eq!(v.adapters[0].spec.destination(), "settings.json");
    assert!(v
        .notes
        .iter()
        .any(|n| n.field == "plugins[0].path" && n.message == "content scan: x"));
    assert_eq!(remotes.asked.len(), 2, "{:?}", remotes.asked);
    let manifest = v
        .manifest(&crate::harness::SandboxLayout::default())
        .unwrap();
    assert!(manifest.trees.iter().any(|t| t.name == "review"));
}

/// A copy that no longer hashes to its pin when the manifest's listing is read (changed after
/// the cache checked it: the stand-in resolver checks nothing) is a problem, never a pin.
#[test]
#[allow(non_snake_case)] // attack_<class>__<case>: the security report's naming
fn attack_remote_source__a_copy_changed_after_the_cache_check_is_never_pinned() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("plugin")).unwrap();
    std::fs::write(dir.path().join("plugin/index.ts"), "export default 2;\n").unwrap();
    std::fs::write(dir.path().join("content"), "{\"x\": 1}\n").unwrap();
    let mut remotes = Fixed {
        dir: dir.path().to_path_buf(),
        asked: Vec::new(),
        findings: Vec::new(),
        listing: None,
    };
    let text = format!(
        "runtime: pi\nprompt: hi\nplugins:\n  - https://f.example/a/b/tree/main/plugins/review#sha256={PIN}\n\
         adapters:\n  - path: https://f.example/a/b/blob/main/config/settings.json#sha256={PIN}\n    role: config\n"
    );
    let v = check_with(dir.path(), &text, &mut remotes);
    let said: Vec<String> = v.problems.iter().map(|p| p.to_string()).collect();
    for field in ["plugins[0]", "adapters[0]"] {
        assert!(
            said.iter()
                .any(|p| p.contains(field) && p.contains("changed while it was checked")),
            "{said:#?}"
        );
    }
    assert!(v.plugins.is_empty() && v.adapters.is_empty());
    assert!(v
        .manifest(&crate::harness::SandboxLayout::default())
        .is_none());
}

#[test]
fn one_url_pinned_twice_with_different_hashes_and_a_kind_mismatch_are_problems() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("plugin")).unwrap();
    std::fs::write(dir.path().join("plugin/SKILL.md"), "# s\n").unwrap();
    let mut remotes = Fixed {
        dir: dir.path().to_path_buf(),
        asked: Vec::new(),
        findings: Vec::new(),
        listing: None,
    };
    let other = "0".repeat(64);
    let text = format!(
        "runtime: pi\nprompt: hi\nskills:\n  - https://f.example/a/b/tree/main/s#sha256={PIN}\n  - https://f.example/a/b/tree/main/s#sha256={other}\n  - https://f.example/a/b/blob/main/s.md#sha256={PIN}\n"
    );
    let v = check_with(dir.path(), &text, &mut remotes);
    let said: Vec<String> = v.problems.iter().map(|p| p.to_string()).collect();
    assert!(
        said.iter().any(|p| p.contains("skills[1]")
            && p.contains("one URL has one pin")
            && p.contains("skills[0]")),
        "{said:#?}"
    );
    assert!(
        said.iter()
            .any(|p| p.contains("skills[2]") && p.contains("takes a directory")),
        "{said:#?}"
    );
}

#[test]
fn without_remote_sources_a_remote_entry_is_refused_and_a_workdir_url_always_is() {
    let text = format!(
        "runtime: pi\nprompt: hi\nworkdir: https://f.example/a/b/tree/main/w#sha256={PIN}\nplugins:\n  - https://f.example/a/b/tree/main/p#sha256={PIN}\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let v = check_with(dir.path(), &text, &mut NoRemoteSources);
    let said: Vec<String> = v.problems.iter().map(|p| p.to_string()).collect();
    assert!(
        said.iter()
            .any(|p| p.contains("plugins[0].path") && p.contains("cache")),
        "{said:#?}"
    );
    assert!(
        said.iter()
            .any(|p| p.contains("workdir") && p.contains("local path")),
        "{said:#?}"
    );
}

/// The listing a resolver verified a tree with is what the manifest pins: the copy is not read a
/// second time (a change after the resolver's check reaches the sandbox as drift, not as a new
/// pin).
#[test]
fn a_resolvers_listing_is_pinned_without_reading_the_copy_again() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("plugin")).unwrap();
    std::fs::write(
        dir.path().join("plugin/index.ts"),
        "export default () => {};\n",
    )
    .unwrap();
    let verified = crate::tree_hash::hash_tree(
        &dir.path().join("plugin"),
        crate::tree_hash::TreeFormat::ContentV1,
    )
    .unwrap();
    std::fs::write(dir.path().join("plugin/index.ts"), "export default 2;\n").unwrap();
    let mut remotes = Fixed {
        dir: dir.path().to_path_buf(),
        asked: Vec::new(),
        findings: Vec::new(),
        listing: Some(verified.listing.clone()),
    };
    let text = format!(
        "runtime: pi\nprompt: hi\nplugins:\n  - https://f.example/a/b/tree/main/p#sha256={}\n",
        verified.sha256
    );
    let v = check_with(dir.path(), &text, &mut remotes);
    assert!(v.is_ok(), "{:?}", v.problems);
    assert_eq!(v.plugins[0].digest.listing, verified.listing);
    assert_eq!(
        v.plugins[0].digest.sha256,
        verified
            .listing
            .digest(crate::tree_hash::TreeFormat::PiTreeV1)
    );
}
