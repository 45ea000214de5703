//! Which release of a runtime the agent binary is, read from the npm package it belongs to, and
//! what that release does that decides the argv and the report.
//!
//! pi and Claude Code are installed from npm: the binary (`pi`, a `#!/usr/bin/env node` script;
//! `claude`, a native executable) lies inside its package, whose `package.json` names the
//! package and its version. Reading that file is one small read where `pi --version` would
//! start Node every iteration, and it is the package's own statement, as root-owned as the
//! binary it sits next to. The Codex CLI's native binary lies in its platform package
//! (`vendor/<target>/bin/codex`), whose version carries the platform after the release
//! (`0.169.1-linux-x64`). A binary outside a known package has no version: the argv then
//! assumes the oldest supported release.

use std::path::Path;

/// The npm packages whose `package.json` gives a runtime's version.
const PACKAGES: &[&str] = &[
    "@mariozechner/pi-coding-agent",
    "@earendil-works/pi-coding-agent",
    "@anthropic-ai/claude-code",
    "@openai/codex",
];

/// The version of a Codex platform package (`@openai/codex-linux-x64` is published as
/// `@openai/codex` at `0.169.1-linux-x64`, and holds the native binary): the release without
/// its platform suffix. Other versions are returned as they are.
fn release_of(name: &str, version: String) -> String {
    if name != "@openai/codex" {
        return version;
    }
    let platform = ["-linux-", "-darwin-", "-win32-"]
        .iter()
        .filter_map(|os| version.rfind(os))
        .max();
    match platform {
        Some(at) if !version[at + 1..].contains(['.', '+']) => version[..at].to_string(),
        _ => version,
    }
}

/// Whether `name` is OpenCode's npm package (`opencode-ai`, a stub) or one of its platform
/// packages (`opencode-linux-x64`, `opencode-linux-x64-baseline-musl`, …), which holds the
/// Bun-compiled binary and carries the release as its version.
fn is_opencode_package(name: &str) -> bool {
    name == "opencode-ai"
        || ["opencode-linux-", "opencode-darwin-", "opencode-windows-"]
            .iter()
            .any(|os| name.starts_with(os))
}

/// How many directories above the binary a `package.json` is looked for (pi 1.6's binary is
/// `dist/bundle/cli.js`).
const LEVELS: usize = 4;

/// Largest `package.json` read.
const MAX_PACKAGE_JSON: u64 = 1 << 20;

/// The version of the runtime package `binary` belongs to: the first `package.json` above the
/// binary's real path (links resolved) that names one of the known packages. `None` when there
/// is none, or it cannot be read.
pub fn detect(binary: &Path) -> Option<String> {
    let real = std::fs::canonicalize(binary).ok()?;
    for dir in real.ancestors().skip(1).take(LEVELS) {
        let file = dir.join("package.json");
        let Ok(meta) = std::fs::metadata(&file) else {
            continue;
        };
        if !meta.is_file() || meta.len() > MAX_PACKAGE_JSON {
            continue;
        }
        let Ok(text) = std::fs::read(&file) else {
            continue;
        };
        #[derive(serde::Deserialize)]
        struct Package {
            name: Option<String>,
            version: Option<String>,
        }
        let Ok(package) = serde_json::from_slice::<Package>(&text) else {
            continue;
        };
        if let Some(name) = package
            .name
            .filter(|name| PACKAGES.contains(&name.as_str()) || is_opencode_package(name))
        {
            return package.version.map(|v| release_of(&name, v));
        }
    }
    None
}

/// Whether `version` is at least `min`: `major.minor.patch` compared as numbers, a pre-release
/// (`0.87.1-rc.1`) below its release, a build suffix (`+…`) ignored; `None` when unreadable.
fn at_least(version: &str, min: (u64, u64, u64)) -> Option<bool> {
    let version = version.split('+').next()?;
    let (core, pre) = match version.split_once('-') {
        Some((core, pre)) => (core, Some(pre)),
        None => (version, None),
    };
    let mut parts = core.split('.').map(|p| p.parse::<u64>().ok());
    let triple = (parts.next()??, parts.next()??, parts.next()??);
    Some(triple > min || (triple == min && pre.is_none()))
}

/// The first pi release known to gate project files behind trust and to take `--no-approve`
/// (0.73.1 has neither; 0.87.1 and 1.6.0 have both).
const PI_TRUST: (u64, u64, u64) = (0, 87, 1);

/// The first pi release that reads a directory's `AGENTS.override.md` in place of its
/// `AGENTS.md` (its changelog, 0.84.0; 0.73.1 does not, 0.87.1 and 1.6.0 do).
const PI_AGENTS_OVERRIDE: (u64, u64, u64) = (0, 84, 0);

/// What a pi release does that the argv and the report depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PiFeatures {
    /// It takes `--no-approve` (project trust fixed to "no" for the run).
    pub no_approve: bool,
    /// It reads the workspace's `.pi/settings.json`, `.pi/SYSTEM.md` and
    /// `.pi/APPEND_SYSTEM.md` whatever its flags (no project trust).
    pub reads_project_files: bool,
    /// It reads `AGENTS.override.md` first among a directory's context files.
    pub agents_override: bool,
}

impl PiFeatures {
    /// The features of pi `version`; an unknown or unreadable version is taken for the oldest
    /// supported release (0.73.1): no `--no-approve` (it would refuse the option), and its
    /// project files reported; but for the context files it may read, for any release: with
    /// `AGENTS.override.md` (what pitcrew names and resets is then never short of them).
    pub fn of(version: Option<&str>) -> PiFeatures {
        let trust = version.and_then(|v| at_least(v, PI_TRUST)).unwrap_or(false);
        PiFeatures {
            no_approve: trust,
            reads_project_files: !trust,
            agents_override: version
                .and_then(|v| at_least(v, PI_AGENTS_OVERRIDE))
                .unwrap_or(true),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn package(root: &Path, name: &str, version: &str, bin: &str) -> std::path::PathBuf {
        std::fs::create_dir_all(root.join(bin).parent().unwrap()).unwrap();
        std::fs::write(
            root.join("package.json"),
            format!(r#"{{"name": "{name}", "version": "{version}", "bin": {{}}}}"#),
        )
        .unwrap();
        std::fs::write(root.join(bin), "#!/usr/bin/env node\n").unwrap();
        root.join(bin)
    }

    #[test]
    fn the_version_comes_from_the_package_the_real_binary_lies_in() {
        let dir = tempfile::tempdir().unwrap();
        let pkg = dir
            .path()
            .join("lib/node_modules/@earendil-works/pi-coding-agent");
        let cli = package(
            &pkg,
            "@earendil-works/pi-coding-agent",
            "1.6.0",
            "dist/bundle/cli.js",
        );
        // A nested package.json of something else is passed over.
        std::fs::write(pkg.join("dist/package.json"), r#"{"type": "module"}"#).unwrap();
        std::fs::create_dir_all(dir.path().join("bin")).unwrap();
        let link = dir.path().join("bin/pi");
        std::os::unix::fs::symlink(&cli, &link).unwrap();
        assert_eq!(detect(&link).as_deref(), Some("1.6.0"));

        let other = dir.path().join("other");
        let bin = package(&other, "left-pad", "1.0.0", "bin/x");
        assert_eq!(detect(&bin), None);
        assert_eq!(detect(Path::new("/nonexistent/pi")), None);
    }

    #[test]
    fn an_opencode_platform_package_gives_its_release() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("opencode-linux-x64/bin/opencode");
        std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
        std::fs::write(&bin, "").unwrap();
        std::fs::write(
            dir.path().join("opencode-linux-x64/package.json"),
            r#"{"name": "opencode-linux-x64", "version": "1.18.33"}"#,
        )
        .unwrap();
        assert_eq!(detect(&bin).as_deref(), Some("1.18.33"));
        assert!(!is_opencode_package("opencode-evil"));
    }

    #[test]
    fn a_codex_platform_package_gives_its_release() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir
            .path()
            .join("codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex");
        std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
        std::fs::write(&bin, "").unwrap();
        std::fs::write(
            dir.path().join("codex-linux-x64/package.json"),
            r#"{"name": "@openai/codex", "version": "0.169.1-linux-x64"}"#,
        )
        .unwrap();
        assert_eq!(detect(&bin).as_deref(), Some("0.169.1"));
        assert_eq!(
            release_of("@openai/codex", "0.170.0-alpha.2".into()),
            "0.170.0-alpha.2"
        );
        assert_eq!(release_of("@openai/codex", "0.170.0".into()), "0.170.0");
        assert_eq!(release_of("x", "1.0.0-linux-x64".into()), "1.0.0-linux-x64");
    }

    #[test]
    fn trust_and_no_approve_start_at_0_87_1() {
        let old = PiFeatures {
            no_approve: false,
            reads_project_files: true,
            agents_override: true,
        };
        let new = PiFeatures {
            no_approve: true,
            reads_project_files: false,
            agents_override: true,
        };
        for (version, want) in [
            (Some("0.87.0"), old),
            (Some("0.87.1"), new),
            (Some("1.6.0"), new),
            (Some("2.0.0-beta.1"), new),
            (Some("0.87.1-rc.1"), old),
            (Some("0.87.1+build.5"), new),
            (Some("garbage"), old),
            (None, old),
        ] {
            assert_eq!(PiFeatures::of(version), want, "{version:?}");
        }
    }

    #[test]
    fn agents_override_md_is_read_from_0_84_0_and_by_an_unknown_release() {
        for (version, want) in [
            (Some("0.73.1"), false),
            (Some("0.83.9"), false),
            (Some("0.84.0-rc.1"), false),
            (Some("0.84.0"), true),
            (Some("0.87.1"), true),
            (Some("1.6.0"), true),
            (Some("garbage"), true),
            (None, true),
        ] {
            assert_eq!(PiFeatures::of(version).agents_override, want, "{version:?}");
        }
    }
}
