//! The `--settings` Claude Code is given when the harness pins a `claude-settings` file:
//! derived by the supervisor from the verified bytes, never the file itself.
//!
//! The config dir is the agent's to write during an iteration, and Claude Code reloads
//! `$CLAUDE_CONFIG_DIR/settings.json` as it changes: a `{"disableAllHooks": true}` the agent
//! writes there would turn off the hooks of the `--settings` source and of the verified plugins
//! in that same iteration, unless the `--settings` source (above the user's) says
//! `"disableAllHooks": false`. Claude Code takes one `--settings`, so pitcrew's own
//! ([`crate::runtime_argv::claude_builtins_off`]) cannot sit beside the harness's file. Before
//! each launch, after verification and with nothing of the agent running, the file is read once
//! (no link followed, at most [`MAX_SETTINGS_BYTES`]), those very bytes must hash to the pin,
//! and they must be a JSON object; then
//!
//! - `"disableAllHooks": false` is added unless the file sets `disableAllHooks` itself (`true`
//!   is the harness's own choice and is kept; anything but `true` or `false` is refused);
//! - `enabledPlugins` gets `"<name>@builtin": false` for each of Claude Code's built-in
//!   plugins ([`crate::runtime_argv::CLAUDE_BUILTIN_PLUGINS`]) it does not name (a name it does
//!   is the harness's choice; an `enabledPlugins` that is not an object is refused).
//!
//! The result is passed inline (`--settings '<json>'`), as pitcrew's own settings are: the
//! record's `agent.argv` shows what Claude Code was given, and no file of it is left for the
//! agent to replace.

use crate::manifest::{FilePin, FileUse, Manifest, Runtime};
use crate::runtime_argv::{CLAUDE_BUILTIN_PLUGINS, MAX_ARG_BYTES};
use crate::sandbox::nofollow;
use rustix::fs::{Mode, OFlags};
use serde_json::{Map, Value};
use std::io::Read as _;
use std::path::Path;

/// The largest `claude-settings` file read.
pub const MAX_SETTINGS_BYTES: u64 = 1024 * 1024;

/// Why the settings could not be derived (the iteration fails before launch, exit 125).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaudeSettingsError {
    /// The file could not be opened or read (a symlink, missing, not a regular file, …).
    #[error("{path}: {why}")]
    Read {
        /// The file.
        path: String,
        /// What went wrong.
        why: String,
    },
    /// The file is larger than [`MAX_SETTINGS_BYTES`].
    #[error("{path} is over the {MAX_SETTINGS_BYTES} bytes a claude-settings file may have")]
    TooLarge {
        /// The file.
        path: String,
    },
    /// The bytes read do not hash to the pin.
    #[error("{path} changed since it was verified (its sha256 is {found}, pinned {pinned})")]
    Changed {
        /// The file.
        path: String,
        /// The SHA-256 of the bytes read.
        found: String,
        /// The pinned SHA-256.
        pinned: String,
    },
    /// The bytes are not JSON.
    #[error("{path} is not JSON: {why}")]
    NotJson {
        /// The file.
        path: String,
        /// The parser's message.
        why: String,
    },
    /// The JSON is not an object, or a key pitcrew sets holds the wrong type.
    #[error("{path}: {what}")]
    Shape {
        /// The file.
        path: String,
        /// What is wrong.
        what: String,
    },
    /// The derived settings do not fit in one argument.
    #[error("the settings derived from {path} are {bytes} bytes, over the {MAX_ARG_BYTES} one argument may hold")]
    TooLong {
        /// The file.
        path: String,
        /// The derived length.
        bytes: usize,
    },
}

/// The `claude-settings` file of `manifest` (the first; several are refused when the argv is
/// built) when its runtime is Claude Code.
pub fn pinned(manifest: &Manifest) -> Option<&FilePin> {
    if manifest.runtime != Runtime::Claude {
        return None;
    }
    manifest
        .files
        .iter()
        .find(|f| f.usage == FileUse::ClaudeSettings)
}

/// Reads `pin`'s file once, without following a link, and derives the settings Claude Code is
/// given from those bytes ([`derive`]).
pub fn read_and_derive(pin: &FilePin) -> Result<String, ClaudeSettingsError> {
    let bytes = read(&pin.path)?;
    derive(&bytes, &pin.sha256, &pin.path)
}

/// The bytes of the regular file `path`, opened without following a link in any component.
fn read(path: &str) -> Result<Vec<u8>, ClaudeSettingsError> {
    let fail = |why: String| ClaudeSettingsError::Read {
        path: path.to_string(),
        why,
    };
    let (parent, name) = path
        .rsplit_once('/')
        .filter(|(_, name)| !name.is_empty())
        .ok_or_else(|| fail("not an absolute path to a file".into()))?;
    let dir = nofollow::open_dir(Path::new(if parent.is_empty() { "/" } else { parent }))
        .map_err(fail)?;
    // Non-blocking: a fifo put in its place must not hang the supervisor.
    let fd = rustix::fs::openat(
        &dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| fail(e.to_string()))?;
    let stat = rustix::fs::fstat(&fd).map_err(|e| fail(e.to_string()))?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(fail("not a regular file".into()));
    }
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .take(MAX_SETTINGS_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(e.to_string()))?;
    if bytes.len() as u64 > MAX_SETTINGS_BYTES {
        return Err(ClaudeSettingsError::TooLarge {
            path: path.to_string(),
        });
    }
    Ok(bytes)
}

/// The settings (compact JSON) derived from `bytes`, the content of the pinned file `path`
/// whose SHA-256 must be `sha256`: the file's object with `"disableAllHooks": false` unless it
/// sets `disableAllHooks`, and `"<name>@builtin": false` in `enabledPlugins` for each built-in
/// plugin it does not name.
pub fn derive(bytes: &[u8], sha256: &str, path: &str) -> Result<String, ClaudeSettingsError> {
    use sha2::Digest as _;
    let found = hex::encode(sha2::Sha256::digest(bytes));
    if found != sha256 {
        return Err(ClaudeSettingsError::Changed {
            path: path.to_string(),
            found,
            pinned: sha256.to_string(),
        });
    }
    let shape = |what: &str| ClaudeSettingsError::Shape {
        path: path.to_string(),
        what: what.to_string(),
    };
    let value: Value = serde_json::from_slice(bytes).map_err(|e| ClaudeSettingsError::NotJson {
        path: path.to_string(),
        why: e.to_string(),
    })?;
    let Value::Object(mut settings) = value else {
        return Err(shape("not a JSON object (Claude Code's settings are one)"));
    };
    match settings.get("disableAllHooks") {
        None => {
            settings.insert("disableAllHooks".into(), Value::Bool(false));
        }
        Some(Value::Bool(_)) => {}
        Some(_) => return Err(shape("disableAllHooks is neither true nor false")),
    }
    let plugins = settings
        .entry("enabledPlugins")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(plugins) = plugins else {
        return Err(shape("enabledPlugins is not an object"));
    };
    for name in CLAUDE_BUILTIN_PLUGINS {
        plugins
            .entry(format!("{name}@builtin"))
            .or_insert(Value::Bool(false));
    }
    let text = Value::Object(settings).to_string();
    if text.len() > MAX_ARG_BYTES {
        return Err(ClaudeSettingsError::TooLong {
            path: path.to_string(),
            bytes: text.len(),
        });
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sha(bytes: &[u8]) -> String {
        use sha2::Digest as _;
        hex::encode(sha2::Sha256::digest(bytes))
    }

    fn derived(file: &Value) -> Value {
        let bytes = file.to_string().into_bytes();
        let text = derive(&bytes, &sha(&bytes), "/a/hooks.json").unwrap();
        serde_json::from_str(&text).unwrap()
    }

    #[test]
    fn hooks_stay_on_and_builtins_off_unless_the_file_says_otherwise() {
        let hooks = json!({"PreToolUse": [{"matcher": "Bash", "hooks": []}]});
        let got = derived(&json!({"hooks": hooks, "model": "m"}));
        assert_eq!(got["hooks"], hooks);
        assert_eq!(got["model"], "m");
        assert_eq!(got["disableAllHooks"], false);
        let plugins = got["enabledPlugins"].as_object().unwrap();
        assert_eq!(plugins.len(), CLAUDE_BUILTIN_PLUGINS.len());
        assert!(plugins.values().all(|v| *v == false));
        // The same as pitcrew's own settings, beside the file's keys.
        let own: Value = serde_json::from_str(&crate::runtime_argv::claude_builtins_off()).unwrap();
        assert_eq!(got["enabledPlugins"], own["enabledPlugins"]);

        // What the file sets is its own: disableAllHooks true, a built-in plugin it names, a
        // plugin of its own.
        let got = derived(&json!({
            "disableAllHooks": true,
            "enabledPlugins": {"cc-plugin-mermaid@builtin": true, "mine@market": true},
        }));
        assert_eq!(got["disableAllHooks"], true);
        let plugins = got["enabledPlugins"].as_object().unwrap();
        assert_eq!(plugins["cc-plugin-mermaid@builtin"], true);
        assert_eq!(plugins["mine@market"], true);
        assert_eq!(plugins["cc-plugin-privacy@builtin"], false);
        assert_eq!(plugins.len(), CLAUDE_BUILTIN_PLUGINS.len() + 1);
        assert_eq!(
            derived(&json!({"disableAllHooks": false}))["disableAllHooks"],
            false
        );
    }

    #[test]
    fn anything_but_an_object_of_the_right_shape_is_refused_by_name() {
        for (file, what) in [
            (&b"[1, 2]"[..], "not a JSON object"),
            (b"\"{}\"", "not a JSON object"),
            (b"null", "not a JSON object"),
            (
                br#"{"disableAllHooks": "no"}"#,
                "disableAllHooks is neither",
            ),
            (
                br#"{"enabledPlugins": []}"#,
                "enabledPlugins is not an object",
            ),
            (b"{\"hooks\": ", "is not JSON"),
            (b"", "is not JSON"),
        ] {
            let err = derive(file, &sha(file), "/a/s.json")
                .unwrap_err()
                .to_string();
            assert!(err.starts_with("/a/s.json"), "{err}");
            assert!(err.contains(what), "{err}");
        }
    }

    #[test]
    fn bytes_that_do_not_hash_to_the_pin_are_refused() {
        let pinned = br#"{"disableAllHooks": false}"#;
        let read = br#"{"disableAllHooks": true} "#;
        let err = derive(read, &sha(pinned), "/a/s.json").unwrap_err();
        assert_eq!(
            err,
            ClaudeSettingsError::Changed {
                path: "/a/s.json".into(),
                found: sha(read),
                pinned: sha(pinned),
            }
        );
        assert!(err.to_string().contains("changed since it was verified"));
    }

    #[test]
    fn settings_too_long_for_one_argument_are_refused() {
        let file = json!({"env": {"X": "y".repeat(MAX_ARG_BYTES)}}).to_string();
        let err = derive(file.as_bytes(), &sha(file.as_bytes()), "/a/s.json").unwrap_err();
        assert!(matches!(err, ClaudeSettingsError::TooLong { .. }), "{err}");
    }

    #[test]
    fn the_file_is_read_once_without_following_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = br#"{"hooks": {}}"#;
        let file = dir.path().join("hooks.json");
        std::fs::write(&file, bytes).unwrap();
        let pin = |path: &Path, sha256: String| FilePin {
            path: path.to_str().unwrap().to_string(),
            role: crate::exit_code::PinRole::HookAdapter,
            sha256,
            size: None,
            usage: FileUse::ClaudeSettings,
            env: Default::default(),
            pi_args: Vec::new(),
        };
        let got: Value =
            serde_json::from_str(&read_and_derive(&pin(&file, sha(bytes))).unwrap()).unwrap();
        assert_eq!(got["disableAllHooks"], false);

        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let err = read_and_derive(&pin(&link, sha(bytes))).unwrap_err();
        assert!(matches!(err, ClaudeSettingsError::Read { .. }), "{err}");

        let fifo = dir.path().join("fifo.json");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        let err = read_and_derive(&pin(&fifo, sha(bytes))).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }
}
