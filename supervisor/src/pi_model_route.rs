//! A pi built-in provider pointed at the supervisor's model listener, so that its key stays on
//! the host.
//!
//! pi reads no base-URL variable for its built-in providers (0.73.1, 0.87.1, 1.6.0), but it
//! takes a provider-level `baseUrl` from the `models.json` of its config dir: every built-in
//! model of that provider keeps its id and API, and its requests go to that base URL instead.
//! For a model route naming a `pi_provider` (the manifest's `model`, made by the host when the
//! harness pins no `models.json`), the supervisor writes, before each launch, a `models.json`
//! holding only that: `{"providers": {"<provider>": {"baseUrl": "<listener>"}}}`, the listener
//! being `http://127.0.0.1:<port>` in the agent's network namespace. The host puts the
//! provider's path (`/v1`, …) before each request's, the key where the placeholder is, and
//! sends it to the provider over TLS.
//!
//! As root the file is root's, mode `0444`; the agent may still rename it away in its config
//! dir and put another in its place, which at worst sends its own model requests somewhere
//! the network policy governs: the key never enters the sandbox either way. The next config
//! reset keeps a root-owned `models.json` ([`kept`]: only the supervisor makes one) so that no
//! record names it as removed; it is written anew before every launch.
//!
//! When the harness pins its own `models.json`, the host rewrites that provider's `baseUrl` in
//! it to the listener at a port of the host's choosing (`model.rewritten_models_json`), the
//! manifest pins the rewritten bytes, and the supervisor writes nothing here.

use crate::manifest::{Manifest, RuntimeDirPaths};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

/// The file's name in pi's config dir.
pub const FILE: &str = "models.json";

/// What the supervisor writes for `provider` and the listener at `url`.
pub fn contents(provider: &str, url: &str) -> Vec<u8> {
    let doc = serde_json::json!({ "providers": { provider: { "baseUrl": url } } });
    let mut bytes = serde_json::to_vec_pretty(&doc).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// Writes pi's `models.json` for the manifest's route when it names a `pi_provider` and the
/// iteration has a model listener (`url`); returns the path written, `None` when there was
/// nothing to write. Errors name the path.
pub fn write(
    manifest: &Manifest,
    dirs: &RuntimeDirPaths,
    url: Option<&str>,
) -> Result<Option<PathBuf>, String> {
    let (Some(provider), Some(url)) = (
        manifest
            .model
            .as_ref()
            .and_then(|m| m.supervisors_pi_provider()),
        url,
    ) else {
        return Ok(None);
    };
    let path = Path::new(&dirs.config).join(FILE);
    crate::atomic_file::write(&path, &contents(provider, url), 0o444)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    // The mode asked for is cut by the umask; read-only to everyone whatever it is.
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o444))
        .map_err(|e| format!("{}: chmod: {e}", path.display()))?;
    Ok(Some(path))
}

/// The name the config reset keeps in `config`: a root-owned regular `models.json` (only the
/// supervisor can make one) when the manifest's route names a `pi_provider` and the supervisor
/// is root.
pub fn kept(manifest: &Manifest, config: &Path) -> Option<PathBuf> {
    manifest.model.as_ref()?.supervisors_pi_provider()?;
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    let meta = std::fs::symlink_metadata(config.join(FILE)).ok()?;
    (meta.is_file() && meta.uid() == 0).then(|| PathBuf::from(FILE))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(workdir: &Path, provider: Option<&str>) -> Manifest {
        let mut v = serde_json::json!({
            "version": 1,
            "runtime": "pi",
            "agent": {"binary": "/bin/true"},
            "prompt": "p",
            "workdir": workdir,
            "user": {"uid": 65534, "gid": 65534},
            "network": {"mode": "allow", "allow": [{"host": "api.anthropic.com", "port": 443}]},
        });
        if let Some(p) = provider {
            v["model"] = serde_json::json!({
                "pi_provider": p,
                "upstream": {"host": "api.anthropic.com", "port": 443},
                "credentials": ["ANTHROPIC_API_KEY"],
            });
        }
        Manifest::from_json(v.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn the_provider_gets_the_listener_as_its_base_url() {
        let doc: serde_json::Value =
            serde_json::from_slice(&contents("anthropic", "http://127.0.0.1:4000")).unwrap();
        assert_eq!(
            doc,
            serde_json::json!({"providers": {"anthropic": {"baseUrl": "http://127.0.0.1:4000"}}})
        );
    }

    #[test]
    fn written_only_for_a_pi_provider_route_with_a_listener() {
        let tmp = tempfile::tempdir().unwrap();
        let work = tmp.path().join("work");
        let m = manifest(&work, Some("anthropic"));
        let dirs = m.runtime_dirs();
        std::fs::create_dir_all(&dirs.config).unwrap();
        assert_eq!(write(&m, &dirs, None).unwrap(), None);
        let plain = manifest(&work, None);
        assert_eq!(
            write(&plain, &dirs, Some("http://127.0.0.1:1")).unwrap(),
            None
        );
        let path = write(&m, &dirs, Some("http://127.0.0.1:4000"))
            .unwrap()
            .unwrap();
        assert_eq!(
            std::fs::read(&path).unwrap(),
            contents("anthropic", "http://127.0.0.1:4000")
        );
        let mode = std::fs::metadata(&path).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o444);
        // Written anew over what is there.
        write(&m, &dirs, Some("http://127.0.0.1:4001")).unwrap();
        assert!(String::from_utf8(std::fs::read(&path).unwrap())
            .unwrap()
            .contains("4001"));
        let config = Path::new(&dirs.config);
        if nix::unistd::geteuid().is_root() {
            assert_eq!(kept(&m, config), Some(PathBuf::from(FILE)));
            std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
            assert_eq!(kept(&m, config), None, "the agent's file is not kept");
        }
        assert_eq!(kept(&plain, config), None);
    }

    #[test]
    fn a_pinned_models_json_and_another_runtime_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let m = manifest(&tmp.path().join("work"), Some("anthropic"));
        let mut v = serde_json::to_value(&m).unwrap();
        v["files"] = serde_json::json!([{
            "path": Path::new(&m.runtime_dirs().config).join(FILE),
            "sha256": "0".repeat(64), "role": "config",
        }]);
        let err = Manifest::from_json(v.to_string().as_bytes()).unwrap_err();
        assert!(
            err.to_string().contains("which the supervisor would write"),
            "{err}"
        );
        let mut v = serde_json::to_value(&m).unwrap();
        v["runtime"] = "claude".into();
        let err = Manifest::from_json(v.to_string().as_bytes()).unwrap_err();
        assert!(err.to_string().contains("only for the pi runtime"), "{err}");
    }

    #[test]
    fn a_models_json_the_host_rewrote_is_pinned_and_never_written_over() {
        let tmp = tempfile::tempdir().unwrap();
        let m = manifest(&tmp.path().join("work"), Some("anthropic"));
        let config = Path::new(&m.runtime_dirs().config).to_path_buf();
        let mut v = serde_json::to_value(&m).unwrap();
        v["model"]["rewritten_models_json"] =
            serde_json::json!({"port": 17170, "harness_sha256": "a".repeat(64)});
        // Rewritten, the file must be the manifest's.
        let err = Manifest::from_json(v.to_string().as_bytes()).unwrap_err();
        assert!(err.to_string().contains("does not pin"), "{err}");
        v["files"] = serde_json::json!([{
            "path": config.join(FILE), "sha256": "0".repeat(64), "role": "config",
        }]);
        let rewritten = Manifest::from_json(v.to_string().as_bytes()).unwrap();
        let dirs = rewritten.runtime_dirs();
        std::fs::create_dir_all(&dirs.config).unwrap();
        std::fs::write(config.join(FILE), "{\"pinned\": true}").unwrap();
        assert_eq!(
            write(&rewritten, &dirs, Some("http://127.0.0.1:17170")).unwrap(),
            None
        );
        assert_eq!(
            std::fs::read(config.join(FILE)).unwrap(),
            b"{\"pinned\": true}"
        );
        assert_eq!(kept(&rewritten, &config), None);
    }
}
