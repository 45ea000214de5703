//! `allowed_remote_resources`: the operator's list of URL prefixes a remote source must start
//! with. A prefix matches on whole path segments: `https://forge.example/acme` admits
//! `https://forge.example/acme/tools/…` but not `https://forge.example/acme-evil/…`.

use pitcrew_core::harness::RemoteSource;

/// The admitted prefixes (empty: no remote source is admitted).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowlist {
    prefixes: Vec<String>,
}

impl Allowlist {
    /// Parses prefixes separated by commas, spaces or newlines. Each is an `https://` URL with
    /// a host and no query, fragment or credentials; its host is compared without case.
    pub fn parse(text: &str) -> Result<Allowlist, String> {
        let mut prefixes = Vec::new();
        for raw in text.split([',', ' ', '\n', '\t']).filter(|s| !s.is_empty()) {
            let Some(rest) = raw.strip_prefix("https://") else {
                return Err(format!("{raw:?} is not an https:// URL prefix"));
            };
            let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
            if host.is_empty() || raw.contains(['?', '#', '@', '%', '\\']) {
                return Err(format!(
                    "{raw:?} is not a URL prefix (https://<host>[/<path>], no query, fragment, \
                     credentials or escapes)"
                ));
            }
            let prefix = format!("https://{}/{}", host.to_ascii_lowercase(), path);
            prefixes.push(prefix.trim_end_matches('/').to_string());
        }
        Ok(Allowlist { prefixes })
    }

    /// The prefix that admits `source` as written (its ref not yet known), if one does.
    pub fn admits(&self, source: &RemoteSource) -> Option<&str> {
        self.prefixes
            .iter()
            .find(|p| self.matches(p, source))
            .map(String::as_str)
    }

    /// Whether `prefix` is `source`'s URL or ends at one of its `/`.
    fn matches(&self, prefix: &str, source: &RemoteSource) -> bool {
        let path = source.url.splitn(4, '/').nth(3).unwrap_or("");
        let url = format!("https://{}/{path}", source.host);
        url == prefix
            || (url.starts_with(prefix) && url.as_bytes().get(prefix.len()) == Some(&b'/'))
    }

    /// The prefix that admits `source` once its ref is known to be `ref_name`. A prefix that
    /// reaches past `/tree/` or `/blob/` must cover the whole ref: otherwise a tag named like a
    /// path (`main/p/x`) would let the prefix `…/tree/main/p` admit `…/tree/main/p/x/secret`,
    /// the directory `secret` of another ref.
    pub fn admits_resolved(&self, source: &RemoteSource, ref_name: &str) -> Option<&str> {
        let ref_segments = ref_name.split('/').count();
        self.prefixes
            .iter()
            .filter(|p| self.matches(p, source))
            .find(|p| {
                // https: / (empty) / host / owner / repo / kind / ref and path…
                let beyond_kind = p.split('/').count().saturating_sub(6);
                beyond_kind == 0 || beyond_kind >= ref_segments
            })
            .map(String::as_str)
    }

    /// Whether it admits nothing.
    pub fn is_empty(&self) -> bool {
        self.prefixes.is_empty()
    }

    /// The prefixes, as compared.
    pub fn prefixes(&self) -> &[String] {
        &self.prefixes
    }
}
