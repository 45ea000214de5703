//! The keys that shape the agent's sandbox beside its program: `env` (and a plugin's `env`
//! that would replace it), the plugins' pi-only options, `dotenv`, `keep_home`,
//! `keep_output` and `network`.

use super::super::model::PluginSpec;
use super::super::yaml::{location, Checker};
use crate::env_policy;
use crate::manifest::network::MAX_ALLOWED_ENDPOINTS;
use crate::manifest::{DialFrom, Endpoint, NetworkPolicy, Runtime};
use marked_yaml::types::MarkedMappingNode;
use std::collections::BTreeMap;

impl Checker<'_> {
    /// A plugin's `pi:` options under another runtime are noted: only pi reads them.
    pub(super) fn plugins_pi_options(
        &mut self,
        top: &MarkedMappingNode,
        runtime: Option<Runtime>,
        plugins: &[PluginSpec],
    ) {
        let Some(rt) = runtime.filter(|rt| *rt != Runtime::Pi) else {
            return;
        };
        for (i, p) in plugins.iter().enumerate() {
            if !p.pi_args.is_empty() {
                self.note(
                    top.get_node("plugins").and_then(location),
                    format!("plugins[{i}].pi"),
                    format!(
                        "runtime {} ignores it (only runtime pi reads it)",
                        rt.as_str()
                    ),
                );
            }
        }
    }

    /// `env:`, each variable against the sandbox's rules; a plugin's `env:` applies after it
    /// and may not replace it (the supervisor would stop the iteration with 125).
    pub(super) fn env_key(
        &mut self,
        top: &MarkedMappingNode,
        plugins: &[PluginSpec],
    ) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        if let Some(n) = top.get_node("env") {
            for (k, v, at) in self.env_map(n, "env") {
                for p in env_policy::harness_env_problems(&k, &v) {
                    self.problem(at, format!("env.{k}"), p.to_string());
                }
                env.insert(k, v);
            }
        }
        for (i, p) in plugins.iter().enumerate() {
            for name in p.env.keys() {
                if let Some(set) = env.keys().find(|k| k.eq_ignore_ascii_case(name)) {
                    self.problem(
                        top.get_node("plugins").and_then(location),
                        format!("plugins[{i}].env.{name}"),
                        format!(
                            "the harness `env:` sets {set}: a plugin never replaces what the \
                             operator set; keep one"
                        ),
                    );
                }
            }
        }
        env
    }

    /// `dotenv:`, a `.env` in the sandbox: relative to the workspace, or an absolute sandbox
    /// path.
    pub(super) fn dotenv(&mut self, top: &MarkedMappingNode) -> Option<String> {
        let n = top.get_node("dotenv")?;
        let path = self.string(n, "dotenv")?;
        let absolute = if path.starts_with('/') {
            path.clone()
        } else {
            format!("/workspace/{path}")
        };
        match crate::manifest::sandbox_path_problem(&absolute) {
            _ if path.is_empty() => {
                self.problem(location(n), "dotenv", "an empty path");
                None
            }
            Some(problem) => {
                self.problem(location(n), "dotenv", problem.replace("/workspace/", ""));
                None
            }
            None => Some(path),
        }
    }

    /// `keep_output:`, whether the workspace's `output/` is kept between iterations (emptied
    /// before each by default).
    pub(super) fn keep_output(&mut self, top: &MarkedMappingNode) -> bool {
        top.get_node("keep_output")
            .and_then(|n| self.boolean(n, "keep_output"))
            .unwrap_or(false)
    }

    /// `keep_home:`, what persists in `HOME` from one iteration to the next (everything else is
    /// removed): plain paths relative to `HOME`.
    pub(super) fn keep_home(
        &mut self,
        top: &MarkedMappingNode,
        runtime: Option<crate::manifest::Runtime>,
    ) -> Vec<String> {
        let Some(n) = top.get_node("keep_home") else {
            return Vec::new();
        };
        let paths = self.string_list(n, "keep_home");
        for (i, p) in paths.iter().enumerate() {
            if !crate::manifest::is_plain_relative_path(p) {
                self.problem(
                    location(n),
                    format!("keep_home[{i}]"),
                    format!("{p:?} is not a plain path relative to HOME"),
                );
            } else if let Some(problem) =
                runtime.and_then(|r| crate::manifest::home_keep_problem(r, p))
            {
                self.problem(location(n), format!("keep_home[{i}]"), problem);
            }
        }
        paths
    }

    /// `network:`, what the agent may reach: `none`, `open`, `{allow: [host:port, …]}` (each
    /// entry parsed by [`Endpoint::parse`], none twice; with `from: sandbox` the supervisor
    /// dials them, `from: host` the default), or `{platform: NAME}` (a platform of
    /// [`crate::manifest::PLATFORMS`] whose own policy holds the agent). Absent: `None`.
    pub(super) fn network(&mut self, top: &MarkedMappingNode) -> Option<NetworkPolicy> {
        let n = top.get_node("network")?;
        if let marked_yaml::Node::Scalar(s) = n {
            return match s.as_str() {
                "none" => Some(NetworkPolicy::None),
                "open" => Some(NetworkPolicy::Open),
                other => {
                    self.problem(
                        location(n),
                        "network",
                        format!(
                            "{other:?} is no network mode: write none, open, \
                             {{allow: [host:port, …]}} or {{platform: openshell}}"
                        ),
                    );
                    None
                }
            };
        }
        let map = self.mapping(n, "network")?;
        self.unknown_keys(map, "network", &["allow", "platform", "from"]);
        if let Some(p) = map.get_node("platform") {
            if map.get_node("allow").is_some() || map.get_node("from").is_some() {
                self.problem(
                    location(n),
                    "network",
                    "`platform` excludes `allow` and `from`: the platform's policy decides \
                     what the agent reaches",
                );
                return None;
            }
            let name = self.string(p, "network.platform")?;
            let policy = NetworkPolicy::Platform { platform: name };
            return match policy.check() {
                Ok(()) => Some(policy),
                Err(why) => {
                    self.problem(location(p), "network.platform", why);
                    None
                }
            };
        }
        let Some(list) = map.get_node("allow") else {
            self.problem(
                location(n),
                "network",
                "a mapping needs `allow: [host:port, …]` or `platform: NAME` (or write none or \
                 open)",
            );
            return None;
        };
        let seq = self.sequence(list, "network.allow")?;
        let mut allow: Vec<Endpoint> = Vec::new();
        let mut bad = false;
        for (i, item) in seq.iter().enumerate() {
            let field = format!("network.allow[{i}]");
            let Some(text) = self.string(item, &field) else {
                bad = true;
                continue;
            };
            match Endpoint::parse(&text) {
                Ok(e) if allow.contains(&e) => {
                    self.problem(location(item), field, format!("{e} is listed twice"));
                    bad = true;
                }
                Ok(e) => allow.push(e),
                Err(err) => {
                    self.problem(location(item), field, err.to_string());
                    bad = true;
                }
            }
        }
        if allow.len() > MAX_ALLOWED_ENDPOINTS {
            self.problem(
                location(list),
                "network.allow",
                format!("{} endpoints, at most {MAX_ALLOWED_ENDPOINTS}", allow.len()),
            );
            bad = true;
        }
        let from = match map.get_node("from") {
            None => DialFrom::Host,
            Some(f) => match self.string(f, "network.from")?.as_str() {
                "host" => DialFrom::Host,
                "sandbox" => DialFrom::Sandbox,
                other => {
                    self.problem(
                        location(f),
                        "network.from",
                        format!(
                            "{other:?}: write host (pitcrew run dials the allowed endpoints, \
                             the default) or sandbox (the supervisor dials them from the \
                             sandbox's network)"
                        ),
                    );
                    return None;
                }
            },
        };
        (!bad).then_some(NetworkPolicy::Allow { allow, from })
    }
}
