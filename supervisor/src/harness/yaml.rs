//! Reading a harness file as YAML and the [`Checker`] that walks it: the loader (duplicate keys
//! refused, a loader panic turned into an error), `line:column` locations of nodes, and the
//! typed accessors every field check goes through, each recording a [`Problem`] instead of
//! stopping at the first one.

use super::model::{HarnessError, Location, Problem};
use marked_yaml::types::{MarkedMappingNode, MarkedScalarNode, MarkedSequenceNode};
use marked_yaml::Node;
use serde::de::value::StrDeserializer;
use serde::de::{DeserializeOwned, IntoDeserializer as _};
use std::path::{Path, PathBuf};

/// Parses the harness text into a YAML tree with positions.
pub(super) fn parse_yaml(file: &Path, text: &str) -> Result<Node, HarnessError> {
    // A key given twice in one mapping (`runtime:`, a name in `env:`) is refused: by default the
    // loader keeps the last one silently, while a reader sees the first.
    let options = marked_yaml::LoaderOptions::default().error_on_duplicate_keys(true);
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
        Ok(Err(err)) => Err(HarnessError::Yaml {
            path: file.to_path_buf(),
            detail: err.to_string(),
        }),
        Err(_) => Err(HarnessError::Yaml {
            path: file.to_path_buf(),
            detail: " the YAML parser failed on this input".to_string(),
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
pub(super) struct Checker {
    /// The harness directory, canonical (paths are relative to it).
    pub(super) base: PathBuf,
    /// Problems found so far.
    pub(super) problems: Vec<Problem>,
    /// Notes found so far.
    pub(super) notes: Vec<Problem>,
}

impl Checker {
    /// A checker for a harness in the (canonical) directory `base`.
    pub(super) fn new(base: PathBuf) -> Checker {
        Checker {
            base,
            problems: Vec::new(),
            notes: Vec::new(),
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

    /// A problem for each key of `map` not in `allowed`.
    pub(super) fn unknown_keys(&mut self, map: &MarkedMappingNode, field: &str, allowed: &[&str]) {
        for key in map.keys() {
            if !allowed.contains(&key.as_str()) {
                let prefix = if field.is_empty() {
                    String::new()
                } else {
                    format!("{field}.")
                };
                self.problem(
                    scalar_location(key),
                    format!("{prefix}{}", key.as_str()),
                    format!("unknown key (allowed: {})", allowed.join(", ")),
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
            if let Some(v) = self.string(value, &f) {
                out.push((key.as_str().to_string(), v, scalar_location(key)));
            }
        }
        out
    }
}
