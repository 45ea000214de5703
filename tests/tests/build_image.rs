//! `scripts/build-image`'s default tag names what the image holds, so that two builds of
//! different contents (another pitcrew-init, base or runtime) never share a tag: a parallel
//! build would otherwise re-tag the first image and leave it `<none>`. `--print-tag` computes the
//! tag as a build would and builds nothing.
//!
//! Needs podman (the script's default engine), node and npm (it reads the pinned versions from
//! the lock files with node); skipped otherwise, or a failure with `PITCREW_REQUIRE_E2E=1`.

use pitcrew_e2e::container::repo;
use pitcrew_e2e::engines::runs;
use pitcrew_e2e::{binary, prerequisite};
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;

/// A base reference: `--print-tag` with `--base` reads nothing from the engine.
const BASE: &str = "localhost/pitcrew-base:bookworm-r1-000000000000";

/// `scripts/build-image RUNTIME --init INIT --base BASE --print-tag [extra…]`: the tag.
fn print_tag(runtime: &str, init: &Path, base: &str, extra: &[&str]) -> String {
    let out = Command::new(repo().join("scripts/build-image"))
        .arg(runtime)
        .arg("--init")
        .arg(init)
        .args(["--base", base, "--print-tag"])
        .args(extra)
        .output()
        .expect("scripts/build-image");
    assert!(
        out.status.success(),
        "scripts/build-image {runtime} --print-tag: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    stdout.trim().to_string()
}

/// The first 8 hex digits of the file's sha256 (`sha256sum`).
fn sha8(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout)[..8].to_string()
}

/// The version `images/<dir>/package-lock.json` pins for `package`.
fn pinned(dir: &str, package: &str) -> String {
    let lock = repo().join("images").join(dir).join("package-lock.json");
    let doc: serde_json::Value = serde_json::from_slice(&fs::read(lock).unwrap()).unwrap();
    doc["packages"][format!("node_modules/{package}")]["version"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn builds_of_different_contents_get_different_default_tags() {
    if !prerequisite(
        runs("podman") && runs("node") && runs("npm"),
        "needs podman, node and npm (.ci/run installs them)",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let init = dir.path().join("init-a");
    let same = dir.path().join("init-a-copy");
    let other = dir.path().join("init-b");
    fs::copy(binary("pitcrew-init"), &init).unwrap();
    fs::copy(&init, &same).unwrap();
    let mut bytes = fs::read(&init).unwrap();
    bytes.push(0);
    fs::write(&other, bytes).unwrap();
    for f in [&init, &same, &other] {
        fs::set_permissions(f, fs::Permissions::from_mode(0o755)).unwrap();
    }

    // The tag says what is inside: pitcrew's version, pitcrew-init's digest, the agent's
    // version, and a digest of the rest of the build.
    let tag = print_tag("pi", &init, BASE, &[]);
    let prefix = format!(
        "localhost/pitcrew-pi:{}-init{}-pi{}-ctx",
        env!("CARGO_PKG_VERSION"),
        sha8(&init),
        pinned("pi", "@mariozechner/pi-coding-agent")
    );
    let ctx = tag
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{tag} does not start with {prefix}"));
    assert!(
        ctx.len() == 8 && ctx.bytes().all(|b| b.is_ascii_hexdigit()),
        "{tag}"
    );

    // The same contents from another path: the same tag.
    assert_eq!(print_tag("pi", &same, BASE, &[]), tag);
    // Another pitcrew-init, another base, another runtime: another tag each.
    let others = [
        print_tag("pi", &other, BASE, &[]),
        print_tag("pi", &init, "localhost/pitcrew-base:other", &[]),
        print_tag("claude", &init, BASE, &[]),
        print_tag("codex", &init, BASE, &[]),
        print_tag("opencode", &init, BASE, &[]),
    ];
    for t in &others {
        assert_ne!(t, &tag);
    }
    assert_ne!(others[0], others[1]);
    assert!(
        others[2].starts_with(&format!(
            "localhost/pitcrew-claude:{}-init{}-claude{}-ctx",
            env!("CARGO_PKG_VERSION"),
            sha8(&init),
            pinned("claude", "@anthropic-ai/claude-code")
        )),
        "{}",
        others[2]
    );
    assert!(
        others[3].starts_with(&format!(
            "localhost/pitcrew-codex:{}-init{}-codex{}-ctx",
            env!("CARGO_PKG_VERSION"),
            sha8(&init),
            pinned("codex", "@openai/codex")
        )),
        "{}",
        others[3]
    );
    assert!(
        others[4].starts_with(&format!(
            "localhost/pitcrew-opencode:{}-init{}-opencode{}-ctx",
            env!("CARGO_PKG_VERSION"),
            sha8(&init),
            pinned("opencode", "opencode-linux-x64")
        )),
        "{}",
        others[4]
    );

    // --tag is taken as given.
    assert_eq!(
        print_tag("pi", &init, BASE, &["--tag", "localhost/mine:1"]),
        "localhost/mine:1"
    );
}
