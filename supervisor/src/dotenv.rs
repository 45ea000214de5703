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
//! denies the names only a trusted layer may set, `HTTPS_PROXY`, `SHELL`, …), an assignment
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

/// What the caller refuses beyond the grammar.
#[derive(Clone, Copy)]
pub struct Rules<'a> {
    /// The longest accepted `NAME=value`, in bytes.
    pub max_entry_bytes: usize,
    /// The most bytes all accepted assignments together may take (`NAME=value` and a NUL
    /// each, every assignment counted, also one a later line replaces).
    pub max_total_bytes: usize,
    /// The rule that refuses a name, if any.
    pub deny_name: &'a dyn Fn(&str) -> Option<&'static DenyRule>,
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
                if let Some(rule) = (rules.deny_name)(&key) {
                    refuse(Refused::DeniedName(rule), Some(key));
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
mod tests {
    use super::*;

    fn allow_all(_: &str) -> Option<&'static DenyRule> {
        None
    }

    /// Only the grammar: no denied name, limits nothing in these tests reaches.
    const OPEN: Rules<'static> = Rules {
        max_entry_bytes: 1 << 20,
        max_total_bytes: 1 << 24,
        deny_name: &allow_all,
    };

    fn env(name: &str) -> Option<String> {
        match name {
            "PATH" => Some("/usr/bin:/bin".into()),
            "HOME" => Some("/home/agent".into()),
            _ => None,
        }
    }

    fn pairs(input: &str) -> Vec<(String, String)> {
        let parsed = parse(input.as_bytes(), env, &OPEN);
        assert!(parsed.refused.is_empty(), "{input:?}: {:?}", parsed.refused);
        parsed
            .assignments
            .into_iter()
            .map(|a| (a.key, a.value))
            .collect()
    }

    fn one(input: &str) -> String {
        let mut p = pairs(input);
        assert_eq!(p.len(), 1, "{input:?}");
        p.remove(0).1
    }

    fn refusal(input: &str) -> String {
        let parsed = parse(input.as_bytes(), env, &OPEN);
        assert!(parsed.assignments.is_empty(), "{input:?} must be refused");
        assert_eq!(parsed.refused.len(), 1, "{input:?}: {:?}", parsed.refused);
        parsed.refused[0].reason.clone()
    }

    #[test]
    fn accepted_forms() {
        let cases: &[(&str, &str)] = &[
            ("A=b", "b"),
            ("export A=b", "b"),
            ("  export\tA=b  ", "b"),
            ("A=", ""),
            ("A=b # comment", "b"),
            ("A=b#notacomment", "b#notacomment"),
            ("A='lit $HOME `x` $(y) \\n'", "lit $HOME `x` $(y) \\n"),
            ("A=\"q \\\" \\\\ \\$HOME \\` x\"", "q \" \\ $HOME ` x"),
            ("A=\"a\\nb\"", "a\nb"),
            ("A=\"keep \\t\"", "keep \\t"),
            ("A=\"$HOME/x ${HOME}y\"", "/home/agent/x /home/agenty"),
            ("A=$HOME", "/home/agent"),
            ("A=${HOME}/bin", "/home/agent/bin"),
            ("A=$UNSET_VAR.x", ".x"),
            ("A=5$", "5$"),
            ("A=a$/b", "a$/b"),
            ("A=\"5$\"", "5$"),
            ("A=a\\ b", "a b"),
            ("A='x'\"y\"z", "xyz"),
            ("A='x' # it's a comment", "x"),
            ("A=x=y", "x=y"),
            ("A={a,b}*?", "{a,b}*?"),
            ("A=\"a;b|c&d<e>f(g)\"", "a;b|c&d<e>f(g)"),
            ("A='~' ", "~"),
            ("A=x~", "x~"),
            ("_a1=b", "b"),
            ("export=1", "1"),
            ("A=\"$'x'\"", "$'x'"),
        ];
        for (input, value) in cases {
            assert_eq!(one(input), *value, "{input:?}");
        }
    }

    #[test]
    fn path_prepend_expands_against_earlier_lines_and_baseline() {
        let p = pairs("# header\n\nPATH=/x/bin:$PATH\nPATH=/y:${PATH}\r\nB=$PATH\n");
        assert_eq!(p[0], ("PATH".into(), "/x/bin:/usr/bin:/bin".into()));
        assert_eq!(p[1], ("PATH".into(), "/y:/x/bin:/usr/bin:/bin".into()));
        assert_eq!(p[2].1, "/y:/x/bin:/usr/bin:/bin");
    }

    #[test]
    fn refusals_each_name_their_reason() {
        let cases: &[(&str, &str)] = &[
            ("f() { echo hi; }", "function definition"),
            ("f () {", "function definition"),
            ("function f {", "shell command `function`"),
            ("unset PATH", "shell command `unset`"),
            ("alias ls=rm", "shell command `alias`"),
            ("source /tmp/x", "shell command `source`"),
            (". /tmp/x", "shell command `.`"),
            ("export unset=1 X", "unquoted blank"),
            ("JUST_WORDS", "not a KEY=value assignment"),
            ("export A", "not a KEY=value assignment"),
            ("1A=b", "key is not a valid name"),
            ("A-B=c", "key is not a valid name"),
            ("A =b", "key is not a valid name"),
            ("A=$(id)", "command substitution $("),
            ("A=\"$(id)\"", "command substitution $("),
            ("A=`id`", "command substitution `"),
            ("A=\"`id`\"", "command substitution `"),
            ("A=$((1+2))", "arithmetic"),
            ("A=${X:-y}", "parameter expansion with an operator"),
            ("A=${X#p}", "parameter expansion with an operator"),
            ("A=${#X}", "parameter expansion with an operator"),
            ("A=${X", "parameter expansion with an operator"),
            ("A=\"${X/a/b}\"", "parameter expansion with an operator"),
            ("A=$1", "special parameter"),
            ("A=$@", "special parameter"),
            ("A=\"$?\"", "special parameter"),
            ("A=$'\\x41'", "$'…'"),
            ("A=b; rm -rf /", "shell operator ';'"),
            ("A=b|c", "shell operator '|'"),
            ("A=b&", "shell operator '&'"),
            ("A=b>f", "shell operator '>'"),
            ("A=b<f", "shell operator '<'"),
            ("A=(a b)", "shell operator '('"),
            ("A=x(", "shell operator '('"),
            ("A=~/bin", "tilde"),
            ("A=/x:~/bin", "tilde"),
            ("A=b c", "unquoted blank"),
            ("A=b cmd # c", "unquoted blank"),
            ("A='open", "unterminated single quote"),
            ("A=\"open", "unterminated double quote"),
            ("A=\"open\\", "unterminated double quote"),
            ("A=b\\", "line continuation"),
        ];
        for (input, reason) in cases {
            let got = refusal(input);
            assert!(
                got.contains(reason),
                "{input:?}: got {got:?}, want {reason:?}"
            );
        }
    }

    #[test]
    fn nul_and_invalid_utf8_refuse_only_their_line() {
        let parsed = parse(b"A=1\nB=x\0y\nC=\xff\nD=4\n", env, &OPEN);
        let keys: Vec<&str> = parsed.assignments.iter().map(|a| a.key.as_str()).collect();
        assert_eq!(keys, ["A", "D"]);
        assert_eq!(
            parsed.refused,
            vec![
                DotenvRefusal {
                    line: 2,
                    name: None,
                    reason: "contains a NUL byte".into()
                },
                DotenvRefusal {
                    line: 3,
                    name: None,
                    reason: "not valid UTF-8".into()
                },
            ]
        );
    }

    #[test]
    fn multi_line_values_are_refused_whole() {
        let input =
            "A=\"first\nPATH=/evil\nstill\" tail\nB='x\nLD_PRELOAD=/y.so'\nC=a\\\nD=hidden\nE=ok\n";
        let parsed = parse(input.as_bytes(), env, &OPEN);
        let keys: Vec<&str> = parsed.assignments.iter().map(|a| a.key.as_str()).collect();
        assert_eq!(keys, ["E"]);
        let lines: Vec<usize> = parsed.refused.iter().map(|r| r.line).collect();
        assert_eq!(lines, [1, 2, 3, 4, 5, 6, 7]);
        assert!(parsed.refused[1].reason.contains("multi-line"));
    }

    #[test]
    fn refusals_never_contain_the_value() {
        let secret = "s3cr3t-value";
        for input in [
            format!("A=$({secret})"),
            format!("A={secret}; x"),
            format!("A=\"{secret}"),
            format!("{secret}() {{"),
            format!("bad-key={secret}"),
            format!("A=${{{secret}:-x}}"),
        ] {
            let parsed = parse(input.as_bytes(), env, &OPEN);
            assert_eq!(parsed.refused.len(), 1, "{input:?}");
            let json = serde_json::to_string(&parsed.refused).unwrap();
            assert!(!json.contains(secret), "{json}");
        }
        let parsed = parse(format!("A={secret}").as_bytes(), env, &OPEN);
        assert!(!format!("{parsed:?}").contains(secret));
    }

    #[test]
    fn later_assignment_wins_and_expansion_sees_it() {
        let p = pairs("A=1\nA=2\nB=$A\n");
        assert_eq!(p.last().unwrap(), &("B".to_string(), "2".to_string()));
    }

    const PROXY_RULE: DenyRule = DenyRule {
        pattern: crate::env_policy::Pattern::Suffix("_PROXY"),
        reason: "routes traffic",
    };

    fn deny_proxy(name: &str) -> Option<&'static DenyRule> {
        PROXY_RULE.pattern.matches(name).then_some(&PROXY_RULE)
    }

    fn refusals(parsed: &Parsed) -> Vec<(usize, Option<&str>, &str)> {
        parsed
            .refused
            .iter()
            .map(|r| (r.line, r.name.as_deref(), r.reason.as_str()))
            .collect()
    }

    #[test]
    fn a_denied_name_is_refused_by_name_and_never_expanded() {
        let rules = Rules {
            deny_name: &deny_proxy,
            ..OPEN
        };
        let parsed = parse(
            b"https_proxy=http://evil:1\nB=[$https_proxy]\nexport HTTPS_PROXY=x\nC=1\n",
            env,
            &rules,
        );
        let got: Vec<(&str, &str)> = parsed
            .assignments
            .iter()
            .map(|a| (a.key.as_str(), a.value.as_str()))
            .collect();
        assert_eq!(got, [("B", "[]"), ("C", "1")]);
        let refused = refusals(&parsed);
        assert_eq!(refused.len(), 2, "{refused:?}");
        assert_eq!((refused[0].0, refused[0].1), (1, Some("https_proxy")));
        assert_eq!((refused[1].0, refused[1].1), (3, Some("HTTPS_PROXY")));
        assert!(
            refused[0].2.contains("only a trusted layer") && refused[0].2.contains("*_PROXY"),
            "{refused:?}"
        );
        assert!(!format!("{refused:?}").contains("evil"));
    }

    #[test]
    fn an_entry_over_the_limit_is_refused_while_it_is_built() {
        let rules = Rules {
            max_entry_bytes: 16,
            ..OPEN
        };
        // NAME=value of exactly 16 bytes passes; one more byte, however it comes, does not.
        let input = "A=0123456789abcd\n\
                     B=0123456789abcde\n\
                     C='0123456789abcd'x\n\
                     D=\"$HOME$HOME\"\n\
                     E=${HOME}${HOME}\n\
                     F=\"open 0123456789\n\
                     G=continued\"\n\
                     H=ok\n";
        let parsed = parse(input.as_bytes(), env, &rules);
        let keys: Vec<&str> = parsed.assignments.iter().map(|a| a.key.as_str()).collect();
        assert_eq!(keys, ["A", "H"]);
        let refused = refusals(&parsed);
        let named: Vec<(usize, Option<&str>)> = refused.iter().map(|r| (r.0, r.1)).collect();
        assert_eq!(
            named,
            [
                (2, Some("B")),
                (3, Some("C")),
                (4, Some("D")),
                (5, Some("E")),
                (6, Some("F")),
                (7, None)
            ]
        );
        assert!(refused[0].2.contains("longer than 16 bytes"), "{refused:?}");
        // The line inside the refused multi-line value is refused as part of it.
        assert!(refused[5].2.contains("multi-line"), "{refused:?}");
        // A key alone over the limit.
        let parsed = parse(format!("{}=1\n", "K".repeat(20)).as_bytes(), env, &rules);
        assert!(parsed.assignments.is_empty());
        assert!(parsed.refused[0].reason.contains("longer than 16"));
    }

    #[test]
    fn the_total_counts_every_accepted_assignment() {
        let rules = Rules {
            max_total_bytes: 20,
            ..OPEN
        };
        // Each `A=12345` costs 8 (key, '=', value, NUL): two fit, the third would make 24.
        let parsed = parse(b"A=12345\nA=12345\nA=12345\nB=1\nC=12\n", env, &rules);
        let keys: Vec<&str> = parsed.assignments.iter().map(|a| a.key.as_str()).collect();
        // B (4 bytes) still fits in the 20; C (5) does not.
        assert_eq!(keys, ["A", "A", "B"]);
        let refused = refusals(&parsed);
        assert_eq!(refused.len(), 2);
        assert_eq!((refused[0].0, refused[0].1), (3, Some("A")));
        assert_eq!((refused[1].0, refused[1].1), (5, Some("C")));
        assert!(refused[0].2.contains("more than 20 bytes"), "{refused:?}");
    }

    #[test]
    fn a_refusal_after_the_key_names_the_key() {
        let parsed = parse(b"STOLEN=$(cat /etc/shadow)\nbad-key=1\nf() {\n", env, &OPEN);
        let named: Vec<Option<&str>> = parsed.refused.iter().map(|r| r.name.as_deref()).collect();
        assert_eq!(named, [Some("STOLEN"), None, None]);
        let json = serde_json::to_string(&parsed.refused).unwrap();
        assert!(!json.contains("shadow"), "{json}");
        // No `name` key when there is none.
        assert_eq!(json.matches("\"name\"").count(), 1, "{json}");
    }
}
