//! Reading a harness file as YAML and the [`Checker`] that walks it: the loader (duplicate keys
//! refused, a loader panic turned into an error), `line:column` locations of nodes, and the
//! typed accessors every field check goes through, each recording a [`Problem`] instead of
//! stopping at the first one.

use super::model::{HarnessError, Location, Problem};
use super::remote::RemoteSources;
use crate::tree_hash::TreeListing;
use marked_yaml::types::{MarkedMappingNode, MarkedScalarNode, MarkedSequenceNode};
use marked_yaml::Node;
use serde::de::value::StrDeserializer;
use serde::de::{DeserializeOwned, IntoDeserializer as _};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Why a local plugin, skill or adapter takes no `sha256`: it is hashed when the harness is
/// validated or run, and the sandbox verifies that hash.
pub(super) const LOCAL_PINNED: &str = "a local path is pinned automatically (hashed when \
    pitcrew validates or runs the harness, and verified in the sandbox against that hash); \
    only remote sources take a sha256";

/// Parses the harness text into a YAML tree with positions.
pub(super) fn parse_yaml(file: &Path, text: &str) -> Result<Node, HarnessError> {
    // A key given twice in one mapping (`runtime:`, a name in `env:`) is refused: by default the
    // loader keeps the last one silently, while a reader sees the first.
    // Quoted scalars stay text (`"null"`, `"3"`): only a plain scalar is YAML's null or number.
    let options = marked_yaml::LoaderOptions::default()
        .error_on_duplicate_keys(true)
        .prevent_coercion(true);
    // The YAML loader has internal `unreachable!`s; a harness must never crash the CLI.
    let parsed =
        std::panic::catch_unwind(|| marked_yaml::parse_yaml_with_options(0, text, options));
    match parsed {
        Ok(Ok(node)) => Ok(node),
        Ok(Err(marked_yaml::LoadError::DuplicateKey(dup))) => {
            let at = |key: &MarkedScalarNode| match scalar_location(key) {
                Some(l) => format!("{}:{}", l.line, l.column),
                None => "?".to_string(),
            };
            Err(HarnessError::Yaml {
                path: file.to_path_buf(),
                detail: format!(
                    "{}: duplicate key {:?} (first at {}:{})",
                    at(&dup.key),
                    dup.key.as_str(),
                    file.display(),
                    at(&dup.prev_key)
                ),
            })
        }
        Ok(Err(marked_yaml::LoadError::UnexpectedAnchor(m))) => Err(HarnessError::Yaml {
            path: file.to_path_buf(),
            detail: format!(
                "{}:{}: YAML anchors (&name) and aliases (*name) are not supported in a \
                 harness: write the value out where it is used",
                m.line(),
                m.column()
            ),
        }),
        Ok(Err(err)) => Err(HarnessError::Yaml {
            path: file.to_path_buf(),
            detail: err.to_string(),
        }),
        // The loader's `unreachable!` on an alias (`*name`) is the usual way here.
        Err(_) => Err(HarnessError::Yaml {
            path: file.to_path_buf(),
            detail: " the YAML parser failed on this input (YAML aliases, *name, are not \
                     supported in a harness: write the value out where it is used)"
                .to_string(),
        }),
    }
}

/// Where a node starts in the file.
pub(super) fn location(node: &Node) -> Option<Location> {
    node.span().start().map(|m| Location {
        line: m.line(),
        column: m.column(),
    })
}

/// Where a scalar (a mapping key) starts in the file.
pub(super) fn scalar_location(node: &MarkedScalarNode) -> Option<Location> {
    node.span().start().map(|m| Location {
        line: m.line(),
        column: m.column(),
    })
}

/// A value of an enum given by its name, parsed by the enum's own serde names (the names a
/// manifest uses): `None` when `name` is none of them.
pub(super) fn enum_name<T: DeserializeOwned>(name: &str) -> Option<T> {
    let name: StrDeserializer<'_, serde::de::value::Error> = name.into_deserializer();
    T::deserialize(name).ok()
}

/// Walks a harness, collecting every problem and note on the way.
pub(super) struct Checker<'r> {
    /// The harness directory, canonical (paths are relative to it).
    pub(super) base: PathBuf,
    /// Problems found so far.
    pub(super) problems: Vec<Problem>,
    /// Notes found so far.
    pub(super) notes: Vec<Problem>,
    /// Who holds the verified copies of remote entries.
    pub(super) remotes: &'r mut dyn RemoteSources,
    /// The pin and field of every remote URL seen so far (one URL, one pin).
    pub(super) pins: BTreeMap<String, (String, String)>,
    /// The listings remote trees were verified with, by local copy: pinned without a second
    /// read.
    pub(super) remote_listings: BTreeMap<PathBuf, TreeListing>,
}

impl<'r> Checker<'r> {
    /// A checker for a harness in the (canonical) directory `base`, its remote entries
    /// resolved by `remotes`.
    pub(super) fn new(base: PathBuf, remotes: &'r mut dyn RemoteSources) -> Checker<'r> {
        Checker {
            base,
            problems: Vec::new(),
            notes: Vec::new(),
            remotes,
            pins: BTreeMap::new(),
            remote_listings: BTreeMap::new(),
        }
    }

    /// Records a problem.
    pub(super) fn problem(
        &mut self,
        at: Option<Location>,
        field: impl Into<String>,
        msg: impl Into<String>,
    ) {
        self.problems.push(Problem {
            location: at,
            field: field.into(),
            message: msg.into(),
        });
    }

    /// Records a note.
    pub(super) fn note(
        &mut self,
        at: Option<Location>,
        field: impl Into<String>,
        msg: impl Into<String>,
    ) {
        self.notes.push(Problem {
            location: at,
            field: field.into(),
            message: msg.into(),
        });
    }

    /// The node as a string, or a problem.
    pub(super) fn string(&mut self, node: &Node, field: &str) -> Option<String> {
        match node {
            Node::Scalar(s) => Some(s.as_str().to_string()),
            _ => {
                self.problem(location(node), field, "expected a string");
                None
            }
        }
    }

    /// The node as a boolean (`true` or `false`), or a problem.
    pub(super) fn boolean(&mut self, node: &Node, field: &str) -> Option<bool> {
        match node {
            Node::Scalar(s) if s.as_str() == "true" => Some(true),
            Node::Scalar(s) if s.as_str() == "false" => Some(false),
            _ => {
                self.problem(location(node), field, "expected true or false");
                None
            }
        }
    }

    /// The node as a mapping, or a problem.
    pub(super) fn mapping<'a>(
        &mut self,
        node: &'a Node,
        field: &str,
    ) -> Option<&'a MarkedMappingNode> {
        match node {
            Node::Mapping(m) => Some(m),
            _ => {
                self.problem(location(node), field, "expected a mapping");
                None
            }
        }
    }

    /// The node as a list, or a problem.
    pub(super) fn sequence<'a>(
        &mut self,
        node: &'a Node,
        field: &str,
    ) -> Option<&'a MarkedSequenceNode> {
        match node {
            Node::Sequence(s) => Some(s),
            _ => {
                self.problem(location(node), field, "expected a list");
                None
            }
        }
    }

    /// The node as a list of strings; items that are not strings are problems.
    pub(super) fn string_list(&mut self, node: &Node, field: &str) -> Vec<String> {
        let Some(seq) = self.sequence(node, field) else {
            return Vec::new();
        };
        seq.iter()
            .enumerate()
            .filter_map(|(i, n)| self.string(n, &format!("{field}[{i}]")))
            .collect()
    }

    /// A problem for each key of `map` not in `allowed` (a `sha256:` beside a local `path:`
    /// says local files are pinned without one).
    pub(super) fn unknown_keys(&mut self, map: &MarkedMappingNode, field: &str, allowed: &[&str]) {
        for key in map.keys() {
            if !allowed.contains(&key.as_str()) {
                let prefix = if field.is_empty() {
                    String::new()
                } else {
                    format!("{field}.")
                };
                let hint = did_you_mean(key.as_str(), allowed)
                    .map(|k| format!("; did you mean `{k}`?"))
                    .unwrap_or_default();
                // A pin on a local entry: there is nothing to write, say why.
                let local_pin = if key.as_str() == "sha256" && allowed.contains(&"path") {
                    format!("; {LOCAL_PINNED}: remove `sha256:`")
                } else {
                    String::new()
                };
                self.problem(
                    scalar_location(key),
                    format!("{prefix}{}", key.as_str()),
                    format!(
                        "unknown key{hint} (allowed: {}){local_pin}",
                        allowed.join(", ")
                    ),
                );
            }
        }
    }

    /// An `env:` mapping as (name, value, where the name is), in file order.
    pub(super) fn env_map(
        &mut self,
        node: &Node,
        field: &str,
    ) -> Vec<(String, String, Option<Location>)> {
        let Some(map) = self.mapping(node, field) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (key, value) in map.iter() {
            let f = format!("{field}.{}", key.as_str());
            // `NAME: null`, `NAME: ~` and `NAME:` are YAML's null, not the text "null".
            if let Node::Scalar(s) = value {
                if s.may_coerce() && matches!(s.as_str(), "" | "~" | "null" | "Null" | "NULL") {
                    self.problem(
                        scalar_location(key),
                        f,
                        "a null value: give a string (quote it: \"null\" is the text null), or \
                         leave the name out",
                    );
                    continue;
                }
            }
            if let Some(v) = self.string(value, &f) {
                out.push((key.as_str().to_string(), v, scalar_location(key)));
            }
        }
        out
    }
}

/// The allowed key closest to `key` when it is a likely misspelling: at most two edits away
/// (one for keys of up to four letters), and closer than any other.
pub(super) fn did_you_mean<'a>(key: &str, allowed: &[&'a str]) -> Option<&'a str> {
    let most = if key.chars().count() <= 4 { 1 } else { 2 };
    let mut scored: Vec<(usize, &str)> = allowed
        .iter()
        .map(|a| (edit_distance(&key.to_lowercase(), a), *a))
        .filter(|(d, _)| *d <= most)
        .collect();
    scored.sort();
    match scored.as_slice() {
        [(d, best), rest @ ..] if rest.first().is_none_or(|(d2, _)| d2 > d) => Some(best),
        _ => None,
    }
}

/// Levenshtein distance between `a` and `b`, counting an adjacent transposition as one edit.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}
