//! A skill is text: its `SKILL.md` and the files that text refers to, never code the runtime
//! runs. This module holds what both binaries need to keep it so, without a YAML parser:
//!
//! - what a skills tree may not hold ([`CODE_PARTS`]): the parts of a plugin directory that
//!   Claude Code runs by itself (hooks, MCP and language servers, `bin/` on the Bash tool's
//!   `PATH`, monitors);
//! - the inline shell commands Claude Code runs when a skill is invoked (`` !`cmd` `` and
//!   ```` ```! ```` blocks, [`inline_shell_lines`]), and the escape that keeps them text
//!   ([`escape_inline_shell`]);
//! - the `SKILL.md` Claude Code is given ([`for_claude`]): a frontmatter pitcrew writes itself
//!   (`name`, `description`, `disable-model-invocation`, the fields pi reads too), so no field
//!   of the skill's own frontmatter (`hooks`, `allowed-tools`, `shell`, `model`, `context`, …)
//!   ever reaches Claude Code, and the body with its inline shell escaped;
//! - where that `SKILL.md` lives ([`claude_plugin_dir`]): a plugin directory the supervisor
//!   makes next to the skills trees, holding `skills/<name>/` and nothing else.
//!
//! pi reads a skill as text whatever it holds (`--skill`): only `SKILL.md` is read.

/// The file every skills entry has at its root.
pub const SKILL_FILE: &str = "SKILL.md";

/// The largest `SKILL.md` read (Claude Code's own limit for a plugin's Markdown file).
pub const MAX_SKILL_MD_BYTES: u64 = 1 << 20;

/// The directory, next to the skills trees, of the plugins the supervisor makes for Claude Code
/// (one per skill, [`claude_plugin_dir`]).
pub const CLAUDE_PLUGINS_DIR: &str = ".pitcrew-claude-skills";

/// The parts of a plugin directory Claude Code runs code from by itself, found without a
/// `plugin.json`: the path relative to the tree's root (a directory when it ends with `/`) and
/// what Claude Code does with it. A skills tree holding one is refused: a skill is text.
pub const CODE_PARTS: [(&str, &str); 5] = [
    ("hooks/hooks.json", "hooks Claude Code runs on its events"),
    (".mcp.json", "MCP servers Claude Code starts"),
    (".lsp.json", "language servers Claude Code starts"),
    ("bin/", "programs Claude Code puts on its Bash tool's PATH"),
    ("monitors/monitors.json", "monitors Claude Code runs"),
];

/// The frontmatter of `text` (between a first line `---` and the next line `---`, both without
/// them) and the body after it; `None` and the whole text when it has none. A leading byte
/// order mark is skipped.
pub fn split_frontmatter(text: &str) -> (Option<&str>, &str) {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let is_fence = |line: &str| line.trim_end_matches(['\r', ' ', '\t']) == "---";
    let Some(first_end) = text.find('\n') else {
        return (None, text);
    };
    if !is_fence(&text[..first_end]) {
        return (None, text);
    }
    let start = first_end + 1;
    let mut at = start;
    while at <= text.len() {
        let end = text[at..].find('\n').map_or(text.len(), |i| at + i);
        if is_fence(&text[at..end]) {
            let body = text.get(end + 1..).unwrap_or("");
            return (Some(&text[start..at]), body);
        }
        at = end + 1;
    }
    (None, text)
}

/// The value of the top-level key `key` of `frontmatter`, read as the YAML scalars skills use:
/// plain (continued on more-indented lines), single- or double-quoted on one line, or a `|` or
/// `>` block. `None` when the key is absent, empty, or written in a form not read here (the
/// harness check reads the frontmatter with a YAML parser; what is read here only labels the
/// skill for Claude Code).
pub fn scalar(frontmatter: &str, key: &str) -> Option<String> {
    let lines: Vec<&str> = frontmatter
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .collect();
    let i = lines.iter().position(|l| {
        l.strip_prefix(key)
            .and_then(|rest| rest.strip_prefix(':'))
            .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t']))
    })?;
    let value = lines[i][key.len() + 1..].trim();
    let more: Vec<&str> = lines[i + 1..]
        .iter()
        .take_while(|l| l.trim().is_empty() || l.starts_with([' ', '\t']))
        .copied()
        .collect();
    let read = match value.chars().next() {
        Some('"') => double_quoted(value),
        Some('\'') => single_quoted(value),
        Some('|') | Some('>') => Some(block(value.starts_with('>'), &more)),
        Some('#') => None,
        _ => Some(plain(value, &more)),
    }?;
    let read = read.trim().to_string();
    (!read.is_empty()).then_some(read)
}

/// A plain scalar: the first line and its continuation lines joined by spaces, up to a
/// ` #` comment.
fn plain(first: &str, more: &[&str]) -> String {
    let strip = |l: &str| -> String {
        let l = l.trim();
        match l.find(" #").or_else(|| l.find("\t#")) {
            Some(i) => l[..i].trim_end().to_string(),
            None => l.to_string(),
        }
    };
    let mut words = vec![strip(first)];
    words.extend(more.iter().map(|l| strip(l)).filter(|l| !l.is_empty()));
    words.retain(|w| !w.is_empty());
    words.join(" ")
}

/// A `|` (literal) or `>` (folded) block scalar from its indented lines.
fn block(folded: bool, lines: &[&str]) -> String {
    let indent = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    let lines: Vec<&str> = lines
        .iter()
        .map(|l| l.get(indent..).unwrap_or(""))
        .collect();
    if !folded {
        return lines.join("\n");
    }
    let mut out = String::new();
    for line in lines {
        if line.is_empty() {
            out.push('\n');
        } else {
            if !out.is_empty() && !out.ends_with('\n') {
                out.push(' ');
            }
            out.push_str(line);
        }
    }
    out
}

/// A double-quoted scalar closed on its line (`\"`, `\\`, `\n`, `\t`, `\uXXXX` escapes).
fn double_quoted(value: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = value[1..].chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(out),
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'u' => {
                    let hex: String = chars.by_ref().take(4).collect();
                    out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                }
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

/// A single-quoted scalar closed on its line (`''` for a quote).
fn single_quoted(value: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = value[1..].chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\'' {
            if chars.peek() == Some(&'\'') {
                chars.next();
                out.push('\'');
            } else {
                return Some(out);
            }
        } else {
            out.push(c);
        }
    }
    None
}

/// The 1-based lines of `text` where Claude Code finds a shell command to run when the skill is
/// invoked: `` !`cmd` `` at the start of a line or after white space (the command may go on
/// over lines up to its closing backtick), and a block opened by ```` ```! ````.
pub fn inline_shell_lines(text: &str) -> Vec<usize> {
    let chars: Vec<char> = text.chars().collect();
    let mut lines = Vec::new();
    let mut line = 1;
    for (i, &c) in chars.iter().enumerate() {
        if c == '\n' {
            line += 1;
            continue;
        }
        let inline = c == '!'
            && (i == 0 || chars[i - 1].is_whitespace())
            && chars.get(i + 1) == Some(&'`')
            && chars
                .get(i + 2..)
                .and_then(|rest| rest.iter().position(|&b| b == '`'))
                .is_some_and(|len| len > 0);
        let block = c == '!' && i >= 3 && chars[i - 3..i] == ['`', '`', '`'];
        if (inline || block) && lines.last() != Some(&line) {
            lines.push(line);
        }
    }
    lines
}

/// `text` with a backslash put between every `!` and a backtick next to it, in either order:
/// neither form of inline shell (`` !` ``, ```` `! ````) is left, whatever surrounds it, and
/// the model still reads the same characters (a Markdown escape).
pub fn escape_inline_shell(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut prev = None;
    for c in text.chars() {
        if matches!((prev, c), (Some('!'), '`') | (Some('`'), '!')) {
            out.push('\\');
        }
        out.push(c);
        prev = Some(c);
    }
    out
}

/// `value` as a YAML double-quoted scalar on one line: JSON's quoting (a YAML 1.2 double-quoted
/// scalar), with `-` written `\u002d` too, so the frontmatter holds no `---` for a reader that
/// ends it at the first one.
fn quoted(value: &str) -> String {
    serde_json::Value::String(value.to_string())
        .to_string()
        .replace('-', "\\u002d")
}

/// The `SKILL.md` Claude Code is given for the skill `name` whose `SKILL.md` is `text`: a
/// frontmatter written here with `name`, the skill's `description` and
/// `disable-model-invocation: true` when it says so (what pi reads of a skill), then the body
/// with its inline shell escaped ([`escape_inline_shell`]). Nothing else of the skill's
/// frontmatter is kept.
pub fn for_claude(name: &str, text: &str) -> String {
    let (frontmatter, body) = split_frontmatter(text);
    let mut out = format!("---\nname: {}\n", quoted(name));
    if let Some(description) = frontmatter.and_then(|f| scalar(f, "description")) {
        out.push_str(&format!("description: {}\n", quoted(&description)));
    }
    if frontmatter.and_then(|f| scalar(f, "disable-model-invocation")) == Some("true".into()) {
        out.push_str("disable-model-invocation: true\n");
    }
    out.push_str("---\n");
    out.push_str(&escape_inline_shell(body));
    out
}

/// The plugin directory Claude Code is given for the skills tree at `tree` (absolute):
/// `<its parent>/.pitcrew-claude-skills/<its name>`, holding `skills/<name>/`. `None` for a
/// path without a parent and a name.
pub fn claude_plugin_dir(tree: &str) -> Option<String> {
    let tree = tree.trim_end_matches('/');
    let (parent, name) = tree.rsplit_once('/')?;
    (!name.is_empty() && name != "." && name != "..")
        .then(|| format!("{parent}/{CLAUDE_PLUGINS_DIR}/{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frontmatter_is_split_from_the_body() {
        let text = "---\nname: a\ndescription: b\n---\nBody\n---\nmore\n";
        assert_eq!(
            split_frontmatter(text),
            (Some("name: a\ndescription: b\n"), "Body\n---\nmore\n")
        );
        assert_eq!(
            split_frontmatter("\u{feff}--- \r\nx: 1\r\n---\r\nB"),
            (Some("x: 1\r\n"), "B")
        );
        assert_eq!(split_frontmatter("---\nx: 1\n---"), (Some("x: 1\n"), ""));
        assert_eq!(split_frontmatter("---\nx: 1\n"), (None, "---\nx: 1\n"));
        assert_eq!(
            split_frontmatter("# Title\n---\n"),
            (None, "# Title\n---\n")
        );
    }

    #[test]
    fn scalars_are_read_in_the_forms_skills_use() {
        let f = "name: review\ndescription: Reviews code # not this\n";
        assert_eq!(scalar(f, "description").as_deref(), Some("Reviews code"));
        assert_eq!(scalar(f, "name").as_deref(), Some("review"));
        assert_eq!(scalar(f, "nam"), None);
        let f = "description: first\n  second\nother: x\n";
        assert_eq!(scalar(f, "description").as_deref(), Some("first second"));
        let f = "description: \"a \\\"q\\\" \\u0041\"\n";
        assert_eq!(scalar(f, "description").as_deref(), Some("a \"q\" A"));
        let f = "description: 'it''s'\n";
        assert_eq!(scalar(f, "description").as_deref(), Some("it's"));
        let f = "description: >-\n  one\n  two\n\n  three\nx: 1\n";
        assert_eq!(scalar(f, "description").as_deref(), Some("one two\nthree"));
        let f = "description: |\n  one\n  two\n";
        assert_eq!(scalar(f, "description").as_deref(), Some("one\ntwo"));
        assert_eq!(scalar("description: \"open\n", "description"), None);
        assert_eq!(scalar("description:\n", "description"), None);
        assert_eq!(scalar("  description: nested\n", "description"), None);
    }

    #[test]
    fn inline_shell_is_found_and_escaped_away() {
        let text = "Run !`date` now\n!`id`\nnot!`this`\n```!\nid\n```\nplain `code`!\n !`a\nb`\n";
        assert_eq!(inline_shell_lines(text), vec![1, 2, 4, 8]);
        let escaped = escape_inline_shell(text);
        assert!(
            !escaped.contains("!`") && !escaped.contains("`!"),
            "{escaped}"
        );
        assert_eq!(escaped.replace('\\', ""), text);
        assert_eq!(escape_inline_shell("!`!`"), "!\\`\\!\\`");
    }

    #[test]
    fn claude_is_given_a_frontmatter_of_pitcrews_own() {
        let text = "---\nname: other\ndescription: Reviews --- code\nhooks:\n  PreToolUse: []\n\
                    allowed-tools: Bash\ndisable-model-invocation: true\n---\nBody !`id`\n";
        assert_eq!(
            for_claude("review", text),
            "---\nname: \"review\"\ndescription: \"Reviews \\u002d\\u002d\\u002d code\"\n\
             disable-model-invocation: true\n---\nBody !\\`id`\n"
        );
        // A value that is not read is left out, never copied.
        let text = "---\ndescription: {hooks: x}\n---\nB\n";
        assert_eq!(
            for_claude("r", text),
            "---\nname: \"r\"\ndescription: \"{hooks: x}\"\n---\nB\n"
        );
        assert_eq!(
            for_claude("r", "no frontmatter\n"),
            "---\nname: \"r\"\n---\nno frontmatter\n"
        );
    }

    #[test]
    fn the_plugin_dir_is_next_to_the_tree() {
        assert_eq!(
            claude_plugin_dir("/pitcrew/skills/review").as_deref(),
            Some("/pitcrew/skills/.pitcrew-claude-skills/review")
        );
        assert_eq!(
            claude_plugin_dir("/pitcrew/skills/review/").as_deref(),
            Some("/pitcrew/skills/.pitcrew-claude-skills/review")
        );
        assert_eq!(claude_plugin_dir("review"), None);
    }
}
