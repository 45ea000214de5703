//! The sandbox `.env` file, parsed as DATA: never executed by a shell.
//!
//! Runners used to `. .env` in a shell, which lets whoever writes the file (the agent, between
//! iterations) define functions, run commands and shadow builtins. This parser accepts the
//! assignment forms runners actually write and refuses everything else line by line, so a
//! refused line never changes the environment and is reported by line number and reason,
//! never by value.
//!
//! # Grammar (one logical line per physical line)
//!
//! - Blank lines and lines whose first non-blank character is `#` are ignored. A trailing `\r`
//!   (CRLF files) is dropped.
//! - `KEY=value` or `export KEY=value`; `KEY` matches `^[A-Za-z_][A-Za-z0-9_]*$` and is followed
//!   directly by `=` (no blanks, like the shell).
//! - The value is a concatenation of:
//!   - unquoted text: `\x` is a literal `x`; `$NAME` and `${NAME}` expand against the
//!     environment built so far (earlier lines of this file, then the baseline); an unset name
//!     expands to nothing; a lone `$` (end of value, or before a character that cannot start a
//!     name) is literal. An unquoted blank ends the value; after it only a `# comment` may
//!     follow.
//!   - `'single quoted'` text: literal, no escapes, no expansion.
//!   - `"double quoted"` text: escapes `\"`, `\\`, `\$`, `` \` `` (the character) and `\n` (a
//!     newline); any other `\x` stays as the two characters (like the shell); `$NAME`/`${NAME}`
//!     expand.
//! - Expanded values are inserted literally (never re-parsed).
//!
//! Refused (the line is skipped and reported): a NUL byte, invalid UTF-8, function definitions
//! (`f() {`, `function f`), the commands in [`REFUSED_COMMANDS`] (`unset`, `alias`, `source`,
//! `.`, …), lines that are not an assignment, invalid keys, command substitution (`$(…)`,
//! backticks), arithmetic (`$((…))`), `${…}` with anything but a plain name (`${X:-y}`,
//! `${X#p}`, `${#X}`, …: refused rather than emulated), special parameters (`$1`, `$@`, `$?`,
//! …), `$'…'` and `$"…"`, the characters in [`SHELL_OPERATORS`] outside quotes, tilde expansion
//! (`~` at the start of a value or after an unquoted `:`), unquoted blanks followed by more
//! words (the shell would run them as a command), unterminated quotes and trailing-backslash
//! continuations (multi-line values). The physical lines a refused multi-line value spans are
//! refused too, so no part of a refused value is ever read as an assignment of its own.
//!
//! Refused by the caller's rules ([`Rules`]): a name the caller denies (the environment step
//! denies the names only a trusted layer may set, `HTTPS_PROXY`, `SHELL`, …, and every name a
//! trusted layer of the operator's sets, naming that layer: [`Denial`]), an assignment
//! whose `NAME=value` is longer than [`Rules::max_entry_bytes`] (checked while the value is
//! built, so an expansion never grows past it), and any assignment once the file's accepted
//! assignments (every one, also those a later line replaces) would total more than
//! [`Rules::max_total_bytes`]. These refusals, and every refusal of a line whose key was read,
//! name the key; a refused assignment is not visible to later `$NAME` expansions.

use crate::env_policy::DenyRule;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;

/// A refused `.env` line: where and why (never the value).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DotenvRefusal {
    /// 1-based line number.
    pub line: usize,
    /// The assignment's key, when the line got as far as a valid one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Why the line was refused.
    pub reason: String,
}

/// Why the caller refuses a name (see [`Rules::deny_name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denial {
    /// Only a trusted layer may set a name this rule matches.
    TrustedOnly(&'static DenyRule),
    /// A trusted layer (its name: `pass-env`, `harness`) sets this name: its value stays.
    SetByTrustedLayer(&'static str),
}

/// What the caller refuses beyond the grammar.
#[derive(Clone, Copy)]
pub struct Rules<'a> {
    /// The longest accepted `NAME=value`, in bytes.
    pub max_entry_bytes: usize,
    /// The most bytes all accepted assignments together may take (`NAME=value` and a NUL
    /// each, every assignment counted, also one a later line replaces).
    pub max_total_bytes: usize,
    /// Why a name is refused, if it is.
    pub deny_name: &'a dyn Fn(&str) -> Option<Denial>,
}

impl fmt::Debug for Rules<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rules")
            .field("max_entry_bytes", &self.max_entry_bytes)
            .field("max_total_bytes", &self.max_total_bytes)
            .finish_non_exhaustive()
    }
}

/// An accepted assignment. `Debug` never shows the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Assignment {
    /// 1-based line number.
    pub line: usize,
    /// The variable name.
    pub key: String,
    /// The value after unquoting and expansion.
    pub value: String,
}

impl fmt::Debug for Assignment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Assignment")
            .field("line", &self.line)
            .field("key", &self.key)
            .field("value", &"<redacted>")
            .finish()
    }
}

/// The result of parsing a `.env` file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parsed {
    /// Accepted assignments in file order (a later one for the same key wins).
    pub assignments: Vec<Assignment>,
    /// Refused lines in file order.
    pub refused: Vec<DotenvRefusal>,
}

/// Leading words that make a line a command rather than an assignment.
pub const REFUSED_COMMANDS: &[&str] = &[
    "unset", "alias", "unalias", "source", ".", "function", "eval", "exec", "readonly", "declare",
    "typeset", "local", "set", "shopt", "trap", "cd", "command", "builtin", "enable", "hash",
];

/// Characters refused outside quotes, with what the shell would make of them.
pub const SHELL_OPERATORS: &[(char, &str)] = &[
    (';', "command separator"),
    ('|', "pipe"),
    ('&', "background or and-list"),
    ('<', "redirection"),
    ('>', "redirection"),
    ('(', "subshell or array"),
    (')', "subshell or array"),
];

/// Why a line was refused. The `Display` text never contains the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
enum Refused {
    #[error("contains a NUL byte")]
    Nul,
    #[error("not valid UTF-8")]
    NotUtf8,
    #[error("function definition")]
    FunctionDefinition,
    #[error("shell command `{0}` (only KEY=value assignments are read)")]
    Command(&'static str),
    #[error("not a KEY=value assignment")]
    NotAssignment,
    #[error("key is not a valid name (^[A-Za-z_][A-Za-z0-9_]*$)")]
    BadKey,
    #[error("command substitution $(…)")]
    CommandSubstitution,
    #[error("command substitution `…`")]
    Backtick,
    #[error("arithmetic expansion $((…))")]
    Arithmetic,
    #[error(
        "parameter expansion with an operator (${{…}}): only $NAME and ${{NAME}} are expanded"
    )]
    ParameterOperator,
    #[error("special parameter ($1, $@, $?, $$, …)")]
    SpecialParameter,
    #[error("$'…' or $\"…\" quoting")]
    DollarQuote,
    #[error("shell operator '{0}' ({1}) outside quotes")]
    Operator(char, &'static str),
    #[error("tilde expansion (~) is not emulated")]
    Tilde,
    #[error("unquoted blank followed by more words (the shell would run them as a command)")]
    TrailingWords,
    #[error("unterminated single quote (multi-line values are refused)")]
    UnterminatedSingle,
    #[error("unterminated double quote (multi-line values are refused)")]
    UnterminatedDouble,
    #[error("line continuation (trailing backslash): multi-line values are refused")]
    Continuation,
    #[error("part of a refused multi-line value")]
    InsideRefusedValue,
    #[error("only a trusted layer (the image's environment, the harness env:, --pass-env) may set it: matches {0}")]
    DeniedName(&'static DenyRule),
    #[error("the trusted layer {0} sets it: a .env line never replaces what the operator set")]
    SetByTrustedLayer(&'static str),
    #[error("NAME=value is longer than {0} bytes, the limit per .env variable (execve refuses a string over 131072 bytes)")]
    EntryTooLong(usize),
    #[error("the .env's assignments would total more than {0} bytes, the limit for the whole file (expansions included)")]
    TotalTooLarge(usize),
}

/// A value under construction that refuses to grow past its limit.
struct Value {
    text: String,
    max: usize,
    /// The limit reported when it is exceeded (the whole `NAME=value`).
    entry_limit: usize,
}

impl Value {
    fn push(&mut self, c: char) -> Result<(), Refused> {
        self.reserve(c.len_utf8())?;
        self.text.push(c);
        Ok(())
    }

    fn push_str(&mut self, s: &str) -> Result<(), Refused> {
        self.reserve(s.len())?;
        self.text.push_str(s);
        Ok(())
    }

    fn reserve(&self, more: usize) -> Result<(), Refused> {
        if self.text.len().saturating_add(more) > self.max {
            return Err(Refused::EntryTooLong(self.entry_limit));
        }
        Ok(())
    }
}

/// Parses `.env` bytes under `rules`. `lookup` resolves `$NAME` for names not assigned
/// earlier in the file (the environment built before the file).
pub fn parse(input: &[u8], lookup: impl Fn(&str) -> Option<String>, rules: &Rules<'_>) -> Parsed {
    let mut parsed = Parsed::default();
    let mut overlay: HashMap<String, String> = HashMap::new();
    // Bytes taken by the accepted assignments so far.
    let mut used: usize = 0;
    // Quoting state carried over from a refused line whose value spans several lines.
    let mut pending: Option<Quoting> = None;
    // A final newline ends the last line; it does not start another one.
    let body = input.strip_suffix(b"\n").unwrap_or(input);
    for (index, raw) in body.split(|b| *b == b'\n').enumerate() {
        let line_no = index + 1;
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let mut refuse = |why: Refused, name: Option<String>| {
            parsed.refused.push(DotenvRefusal {
                line: line_no,
                name,
                reason: why.to_string(),
            });
        };
        if let Some(state) = pending {
            refuse(Refused::InsideRefusedValue, None);
            pending = open_quoting(state, &String::from_utf8_lossy(raw));
            continue;
        }
        if raw.contains(&0) {
            refuse(Refused::Nul, None);
            continue;
        }
        let Ok(line) = std::str::from_utf8(raw) else {
            refuse(Refused::NotUtf8, None);
            continue;
        };
        let resolve = |name: &str| overlay.get(name).cloned().or_else(|| lookup(name));
        match parse_line(line, &resolve, rules.max_entry_bytes) {
            Ok(None) => {}
            Ok(Some((key, value))) => {
                if let Some(denial) = (rules.deny_name)(&key) {
                    let why = match denial {
                        Denial::TrustedOnly(rule) => Refused::DeniedName(rule),
                        Denial::SetByTrustedLayer(layer) => Refused::SetByTrustedLayer(layer),
                    };
                    refuse(why, Some(key));
                    continue;
                }
                let cost = key.len() + value.len() + 2;
                if used.saturating_add(cost) > rules.max_total_bytes {
                    refuse(Refused::TotalTooLarge(rules.max_total_bytes), Some(key));
                    continue;
                }
                used += cost;
                overlay.insert(key.clone(), value.clone());
                parsed.assignments.push(Assignment {
                    line: line_no,
                    key,
                    value,
                });
            }
            Err((why, key)) => {
                refuse(why, key);
                pending = open_quoting(Quoting::Unquoted, line);
            }
        }
    }
    parsed
}

/// Whether `key` matches `^[A-Za-z_][A-Za-z0-9_]*$`.
pub fn is_valid_key(key: &str) -> bool {
    let mut bytes = key.bytes();
    matches!(bytes.next(), Some(b'A'..=b'Z' | b'a'..=b'z' | b'_'))
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn is_blank(c: char) -> bool {
    c == ' ' || c == '\t'
}

/// Why a line was refused, and its key when it was read.
type LineRefusal = (Refused, Option<String>);

/// One line: `Ok(None)` for a blank or comment line; a refusal carries the key when it was
/// read.
fn parse_line(
    line: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    max_entry_bytes: usize,
) -> Result<Option<(String, String)>, LineRefusal> {
    let Some((key, text)) = parse_key(line).map_err(|why| (why, None))? else {
        return Ok(None);
    };
    let named = |why| (why, Some(key.to_string()));
    let max = max_entry_bytes
        .checked_sub(key.len() + 1)
        .ok_or(named(Refused::EntryTooLong(max_entry_bytes)))?;
    let mut value = Value {
        text: String::new(),
        max,
        entry_limit: max_entry_bytes,
    };
    parse_value(text, lookup, &mut value).map_err(named)?;
    Ok(Some((key.to_string(), value.text)))
}

/// The key and the value text of an assignment line (`Ok(None)`: blank or comment).
fn parse_key(line: &str) -> Result<Option<(&str, &str)>, Refused> {
    let s = line.trim_matches(is_blank);
    if s.is_empty() || s.starts_with('#') {
        return Ok(None);
    }
    let s = match s.strip_prefix("export") {
        Some(rest) if rest.starts_with(is_blank) => rest.trim_start_matches(is_blank),
        _ => s,
    };
    let first_word = s.split(is_blank).next().unwrap_or("");
    if let Some(cmd) = REFUSED_COMMANDS.iter().find(|c| **c == first_word) {
        return Err(Refused::Command(cmd));
    }
    let eq = s.find('=');
    if let Some(paren) = s.find('(') {
        let head = s[..paren].trim_end_matches(is_blank);
        if eq.is_none_or(|eq| paren < eq) && !head.is_empty() && !head.contains(is_blank) {
            return Err(Refused::FunctionDefinition);
        }
    }
    let Some(eq) = eq else {
        return Err(Refused::NotAssignment);
    };
    let key = &s[..eq];
    if !is_valid_key(key) {
        return Err(Refused::BadKey);
    }
    Ok(Some((key, &s[eq + 1..])))
}

fn parse_value(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    out: &mut Value,
) -> Result<(), Refused> {
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        match c {
            ' ' | '\t' => {
                let rest: String = chars[i..].iter().collect();
                let rest = rest.trim_start_matches(is_blank);
                if rest.is_empty() || rest.starts_with('#') {
                    break;
                }
                return Err(Refused::TrailingWords);
            }
            '\'' => {
                let end = chars[i + 1..]
                    .iter()
                    .position(|&c| c == '\'')
                    .ok_or(Refused::UnterminatedSingle)?;
                for &c in &chars[i + 1..i + 1 + end] {
                    out.push(c)?;
                }
                i += end + 2;
            }
            '"' => i = parse_double(&chars, i + 1, lookup, out)?,
            '\\' => {
                let next = chars.get(i + 1).ok_or(Refused::Continuation)?;
                out.push(*next)?;
                i += 2;
            }
            '$' => i = expand(&chars, i, false, lookup, out)?,
            '`' => return Err(Refused::Backtick),
            '~' if i == 0 || chars[i - 1] == ':' => return Err(Refused::Tilde),
            _ => {
                if let Some((op, what)) = SHELL_OPERATORS.iter().find(|(op, _)| *op == c) {
                    return Err(Refused::Operator(*op, what));
                }
                out.push(c)?;
                i += 1;
            }
        }
    }
    Ok(())
}

/// Parses a double-quoted segment starting after the opening quote; returns the index after
/// the closing quote.
fn parse_double(
    chars: &[char],
    mut i: usize,
    lookup: &dyn Fn(&str) -> Option<String>,
    out: &mut Value,
) -> Result<usize, Refused> {
    while let Some(&c) = chars.get(i) {
        match c {
            '"' => return Ok(i + 1),
            '\\' => {
                match chars.get(i + 1) {
                    None => return Err(Refused::UnterminatedDouble),
                    Some(&e @ ('"' | '\\' | '$' | '`')) => out.push(e)?,
                    Some('n') => out.push('\n')?,
                    Some(&other) => {
                        out.push('\\')?;
                        out.push(other)?;
                    }
                }
                i += 2;
            }
            '$' => i = expand(chars, i, true, lookup, out)?,
            '`' => return Err(Refused::Backtick),
            _ => {
                out.push(c)?;
                i += 1;
            }
        }
    }
    Err(Refused::UnterminatedDouble)
}

/// Expands the `$` at `chars[i]`; returns the index after what was consumed.
fn expand(
    chars: &[char],
    i: usize,
    in_double: bool,
    lookup: &dyn Fn(&str) -> Option<String>,
    out: &mut Value,
) -> Result<usize, Refused> {
    let is_name_start = |c: char| c.is_ascii_alphabetic() || c == '_';
    let is_name_char = |c: char| c.is_ascii_alphanumeric() || c == '_';
    match chars.get(i + 1).copied() {
        Some('(') if chars.get(i + 2) == Some(&'(') => Err(Refused::Arithmetic),
        Some('(') => Err(Refused::CommandSubstitution),
        Some('{') => {
            let close = chars[i + 2..]
                .iter()
                .position(|&c| c == '}')
                .ok_or(Refused::ParameterOperator)?;
            let name: String = chars[i + 2..i + 2 + close].iter().collect();
            if !is_valid_key(&name) {
                return Err(Refused::ParameterOperator);
            }
            out.push_str(&lookup(&name).unwrap_or_default())?;
            Ok(i + 3 + close)
        }
        Some(c) if is_name_start(c) => {
            let len = chars[i + 1..]
                .iter()
                .take_while(|&&c| is_name_char(c))
                .count();
            let name: String = chars[i + 1..i + 1 + len].iter().collect();
            out.push_str(&lookup(&name).unwrap_or_default())?;
            Ok(i + 1 + len)
        }
        Some(c) if c.is_ascii_digit() || "@*#?$!-".contains(c) => Err(Refused::SpecialParameter),
        Some('\'' | '"') if !in_double => Err(Refused::DollarQuote),
        _ => {
            out.push('$')?;
            Ok(i + 1)
        }
    }
}

/// Shell quoting state, for finding where a refused multi-line value ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quoting {
    Unquoted,
    Single,
    Double,
}

/// Scans `line` starting in `state`; returns the state the next physical line starts in if the
/// value continues there (an open quote or a trailing backslash), else `None`.
fn open_quoting(mut state: Quoting, line: &str) -> Option<Quoting> {
    let mut chars = line.chars();
    let mut word_start = state == Quoting::Unquoted;
    while let Some(c) = chars.next() {
        // A backslash escapes the next character outside single quotes; at the end of the
        // line it continues the value on the next line.
        if c == '\\' && state != Quoting::Single {
            if chars.next().is_none() {
                return Some(state);
            }
            word_start = false;
            continue;
        }
        match (state, c) {
            (Quoting::Unquoted, '\'') => state = Quoting::Single,
            (Quoting::Unquoted, '"') => state = Quoting::Double,
            (Quoting::Unquoted, '#') if word_start => return None,
            (Quoting::Single, '\'') | (Quoting::Double, '"') => state = Quoting::Unquoted,
            _ => {}
        }
        word_start = state == Quoting::Unquoted && is_blank(c);
    }
    (state != Quoting::Unquoted).then_some(state)
}

#[cfg(test)]
mod tests;
