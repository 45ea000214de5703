//! Static scan for the CLI flags an extension registers, without importing it.
//!
//! Finds `registerFlag("name"`, `registerFlag('name'` and `` registerFlag(`name` `` calls
//! (whitespace allowed around the parenthesis) in the plugin's script sources. Textual, so it
//! over-approximates: a call in a comment or dead code counts, a name built at run time does
//! not. That errs on the loud side for `pi.args` validation: a flag the extension does not
//! actually register makes pi exit 1 with `Unknown option`.

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

/// The flag names registered by `registerFlag(<string literal>` calls in the script sources of
/// `dir`, sorted and deduplicated.
///
/// Walks the whole directory except `node_modules`, never follows symlinks, reads at most
/// 4 MiB of each `.ts/.js/.mjs/.cjs/.mts/.cts/.tsx` file, and executes nothing.
///
/// # Errors
/// The directory or a source file cannot be read.
pub fn registered_flags(dir: &Path) -> Result<Vec<String>, ClassifyError> {
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
                flags.extend(scan(&buf));
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
    use super::scan;

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
