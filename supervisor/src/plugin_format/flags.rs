//! Static scan for the CLI flags and the tools an extension registers, without importing it.
//!
//! Finds `registerFlag("name"`, `registerFlag('name'` and `` registerFlag(`name` `` calls
//! (whitespace allowed around the parenthesis) in the plugin's script sources, and
//! `registerTool({ name: "tool"` calls (`name` the object literal's first key, quoted or not).
//! Textual, so it over-approximates: a call in a comment or dead code counts, a name built at
//! run time does not. That errs on the loud side for `pi.args` validation: a flag the extension
//! does not actually register makes pi exit 1 with `Unknown option`; a tool name found but not
//! registered only widens pi's `--tools` allowlist by a name pi then ignores.

use super::{ClassifyError, Ctx};
use std::collections::BTreeSet;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Script extensions scanned (what jiti would load).
const SOURCE_EXTS: [&str; 9] = [
    "ts", "js", "mjs", "cjs", "mts", "cts", "tsx", "mtsx", "ctsx",
];

/// At most this many bytes of each source file are scanned.
const MAX_SOURCE_BYTES: u64 = 4 << 20;

const NEEDLE: &[u8] = b"registerFlag";

const TOOL_NEEDLE: &[u8] = b"registerTool";

/// The flag names registered by `registerFlag(<string literal>` calls in the script sources of
/// `dir`, sorted and deduplicated.
///
/// Walks the whole directory except `node_modules`, never follows symlinks, reads at most
/// 4 MiB of each `.ts/.js/.mjs/.cjs/.mts/.cts/.tsx` file, and executes nothing.
///
/// # Errors
/// The directory or a source file cannot be read.
pub fn registered_flags(dir: &Path) -> Result<Vec<String>, ClassifyError> {
    registered(dir, scan)
}

/// The tool names registered by `registerTool({ name: <string literal>` calls in the script
/// sources of `dir`, sorted and deduplicated; walked as [`registered_flags`].
///
/// # Errors
/// The directory or a source file cannot be read.
pub fn registered_tools(dir: &Path) -> Result<Vec<String>, ClassifyError> {
    registered(dir, scan_tools)
}

/// The tool names registered by `registerTool({ name: <string literal>` calls in the single
/// source file `path` (its first 4 MiB), sorted and deduplicated.
///
/// # Errors
/// The file cannot be read.
pub fn registered_tools_in_file(path: &Path) -> Result<Vec<String>, ClassifyError> {
    let mut buf = Vec::new();
    fs::File::open(path)
        .and_then(|f| f.take(MAX_SOURCE_BYTES).read_to_end(&mut buf))
        .map_err(|error| ClassifyError::Io {
            dir: path.to_path_buf(),
            what: "the extension file".to_string(),
            error,
        })?;
    let mut tools = scan_tools(&buf);
    tools.sort();
    tools.dedup();
    Ok(tools)
}

/// The names `find` finds in the script sources of `dir`, sorted and deduplicated.
fn registered(dir: &Path, find: fn(&[u8]) -> Vec<String>) -> Result<Vec<String>, ClassifyError> {
    let ctx = Ctx::new(dir)?;
    let io = |rel: &Path, error| ctx.io(&rel.to_string_lossy(), error);
    let mut flags = BTreeSet::new();
    let mut pending = vec![PathBuf::new()];
    let mut buf = Vec::new();
    while let Some(rel) = pending.pop() {
        for item in fs::read_dir(ctx.root.join(&rel)).map_err(|e| io(&rel, e))? {
            let item = item.map_err(|e| io(&rel, e))?;
            let child = rel.join(item.file_name());
            let ft = item.file_type().map_err(|e| io(&child, e))?;
            if ft.is_dir() {
                if item.file_name() != "node_modules" {
                    pending.push(child);
                }
            } else if ft.is_file() && is_source(&child) {
                buf.clear();
                fs::File::open(ctx.root.join(&child))
                    .and_then(|f| f.take(MAX_SOURCE_BYTES).read_to_end(&mut buf))
                    .map_err(|e| io(&child, e))?;
                flags.extend(find(&buf));
            }
        }
    }
    Ok(flags.into_iter().collect())
}

fn is_source(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| SOURCE_EXTS.contains(&e))
}

/// The names of `registerFlag(<quote>name<quote>` calls in `src`.
pub(super) fn scan(src: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(pos) = src[from..].windows(NEEDLE.len()).position(|w| w == NEEDLE) {
        let start = from + pos;
        from = start + NEEDLE.len();
        if start > 0 && is_ident(src[start - 1]) {
            continue; // e.g. `unregisterFlag(`
        }
        let mut i = skip_ws(src, from);
        if src.get(i) != Some(&b'(') {
            continue;
        }
        i = skip_ws(src, i + 1);
        let Some(&quote) = src.get(i).filter(|q| matches!(q, b'"' | b'\'' | b'`')) else {
            continue;
        };
        let name_start = i + 1;
        let len = src[name_start..]
            .iter()
            .take_while(|&&b| is_flag_char(b))
            .count();
        if len > 0 && src.get(name_start + len) == Some(&quote) {
            // Only ASCII bytes pass `is_flag_char`.
            out.push(String::from_utf8_lossy(&src[name_start..name_start + len]).into_owned());
        }
    }
    out
}

/// The names of `registerTool({ name: <quote>tool<quote>` calls in `src` (`name` the first key
/// of the object literal, bare or quoted).
pub(super) fn scan_tools(src: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(pos) = src[from..]
        .windows(TOOL_NEEDLE.len())
        .position(|w| w == TOOL_NEEDLE)
    {
        let start = from + pos;
        from = start + TOOL_NEEDLE.len();
        if start > 0 && is_ident(src[start - 1]) {
            continue;
        }
        let mut i = skip_ws(src, from);
        if src.get(i) != Some(&b'(') {
            continue;
        }
        i = skip_ws(src, i + 1);
        if src.get(i) != Some(&b'{') {
            continue;
        }
        i = skip_ws(src, i + 1);
        // `name`, `"name"` or `'name'`, then `:`.
        let key_quote = src.get(i).copied().filter(|q| matches!(q, b'"' | b'\''));
        if key_quote.is_some() {
            i += 1;
        }
        if !src[i.min(src.len())..].starts_with(b"name") {
            continue;
        }
        i += 4;
        if let Some(q) = key_quote {
            if src.get(i) != Some(&q) {
                continue;
            }
            i += 1;
        } else if src.get(i).is_some_and(|&b| is_ident(b)) {
            continue; // e.g. `names:`
        }
        i = skip_ws(src, i);
        if src.get(i) != Some(&b':') {
            continue;
        }
        if let Some(name) = literal(src, skip_ws(src, i + 1)) {
            out.push(name);
        }
    }
    out
}

/// The string literal of flag/tool-name characters starting with its quote at `i`.
fn literal(src: &[u8], i: usize) -> Option<String> {
    let &quote = src.get(i).filter(|q| matches!(q, b'"' | b'\'' | b'`'))?;
    let name_start = i + 1;
    let len = src[name_start..]
        .iter()
        .take_while(|&&b| is_flag_char(b))
        .count();
    // Only ASCII bytes pass `is_flag_char`.
    (len > 0 && src.get(name_start + len) == Some(&quote))
        .then(|| String::from_utf8_lossy(&src[name_start..name_start + len]).into_owned())
}

fn skip_ws(src: &[u8], mut i: usize) -> usize {
    while src.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$'
}

fn is_flag_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':')
}

#[cfg(test)]
mod tests {
    use super::{scan, scan_tools};

    #[test]
    fn finds_tool_names_in_register_tool_calls() {
        let src = br#"
            pi.registerTool({
                name: "hello_tool",
                label: "Hello",
            });
            pi.registerTool( { 'name' : 'two', description: "x" });
            pi.registerTool({ "name": `three` });
            registerTool({name:"four"});
        "#;
        assert_eq!(scan_tools(src), ["hello_tool", "two", "three", "four"]);
    }

    #[test]
    fn ignores_tools_it_cannot_name() {
        let src = br#"
            pi.registerTool(tool);
            pi.registerTool({ label: "x", name: "late" });
            pi.registerTool({ names: "nope" });
            pi.registerTool({ name: toolName });
            pi.unregisterTool({ name: "nope2" });
            pi.registerTool({ name: "has space" });
            pi.registerTool({ name:
        "#;
        assert!(scan_tools(src).is_empty(), "{:?}", scan_tools(src));
        assert!(scan_tools(b"registerTool({ \"name").is_empty());
    }

    #[test]
    fn finds_all_quote_styles_and_whitespace() {
        let src = br#"
            pi.registerFlag("loud", { type: "boolean" });
            pi.registerFlag( 'mode' , { type: "string" });
            pi.registerFlag(
                `plan-mode`, {});
            registerFlag("bare");
        "#;
        assert_eq!(scan(src), ["loud", "mode", "plan-mode", "bare"]);
    }

    #[test]
    fn ignores_non_literals_and_lookalikes() {
        let src = br#"
            pi.registerFlag(name, {});
            pi.registerFlag(`x-${y}`, {});
            pi.unregisterFlag("nope");
            pi.registerFlags("nope2");
            pi.registerFlag("has space");
            pi.registerFlag("");
            pi.registerFlag("unterminated
        "#;
        assert!(scan(src).is_empty(), "{:?}", scan(src));
    }

    #[test]
    fn needle_at_end_of_input() {
        assert!(scan(b"registerFlag").is_empty());
        assert!(scan(b"registerFlag(").is_empty());
        assert!(scan(b"registerFlag(\"a").is_empty());
    }
}
