//! Single-file pi extensions (`plugins: [ext/hello.ts]`): what pi's `-e FILE` loads is the file
//! and whatever it imports. pitcrew pins only the file, so a static scan of its import
//! specifiers refuses one that would load code the pin does not cover:
//!
//! - a relative or absolute specifier (`./helper`, `../x`, `/abs`): nothing beside a single
//!   file is pinned or uploaded;
//! - a bare package pi does not provide to extensions: pi's extension loader aliases only its
//!   own packages ([`PI_PROVIDED`]) and nothing is vendored beside a single file.
//!
//! Node's built-in modules (`node:fs`, `fs`, `fs/promises`) are allowed. Specifiers are read
//! from `import … from '<spec>'`, `export … from '<spec>'`, `import '<spec>'`,
//! `import('<spec>')` and `require('<spec>')` outside comments and string literals. Textual, so
//! it errs on the loud side: a computed specifier (`require(name)`) is not seen, and is then
//! refused by pi's own resolution inside the sandbox, where nothing else is installed.

use super::ClassifyError;
use std::fs;
use std::io::Read;
use std::path::Path;

/// The file extensions pi's `-e FILE` loads as an extension module.
pub const SINGLE_FILE_EXTS: [&str; 6] = ["ts", "js", "mjs", "cjs", "mts", "cts"];

/// At most this many bytes of a single-file extension are scanned.
const MAX_SOURCE_BYTES: u64 = 4 << 20;

/// The packages pi's extension loader provides to every extension (its jiti aliases, pi 0.73.1
/// to 1.6.0: the `@mariozechner/*` names and, from 0.87, the same packages as
/// `@earendil-works/*`), with TypeBox under both of its names.
pub const PI_PROVIDED: [&str; 22] = [
    "@mariozechner/pi-coding-agent",
    "@mariozechner/pi-agent-core",
    "@mariozechner/pi-tui",
    "@mariozechner/pi-ai",
    "@mariozechner/pi-ai/oauth",
    "@mariozechner/pi-ai/compat",
    "@mariozechner/pi-ai/models",
    "@mariozechner/pi-ai/providers/all",
    "@earendil-works/pi-coding-agent",
    "@earendil-works/pi-agent-core",
    "@earendil-works/pi-tui",
    "@earendil-works/pi-ai",
    "@earendil-works/pi-ai/oauth",
    "@earendil-works/pi-ai/compat",
    "@earendil-works/pi-ai/models",
    "@earendil-works/pi-ai/providers/all",
    "typebox",
    "typebox/compile",
    "typebox/value",
    "@sinclair/typebox",
    "@sinclair/typebox/compile",
    "@sinclair/typebox/value",
];

/// Node's built-in modules, importable without the `node:` prefix (with or without a subpath).
const NODE_BUILTINS: [&str; 45] = [
    "assert",
    "async_hooks",
    "buffer",
    "child_process",
    "cluster",
    "console",
    "constants",
    "crypto",
    "dgram",
    "diagnostics_channel",
    "dns",
    "domain",
    "events",
    "fs",
    "http",
    "http2",
    "https",
    "inspector",
    "module",
    "net",
    "os",
    "path",
    "perf_hooks",
    "process",
    "punycode",
    "querystring",
    "readline",
    "repl",
    "stream",
    "string_decoder",
    "sys",
    "timers",
    "tls",
    "trace_events",
    "tty",
    "url",
    "util",
    "v8",
    "vm",
    "wasi",
    "worker_threads",
    "zlib",
    "sqlite",
    "test",
    "sea",
];

/// What the scan of a single-file extension found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SingleFile {
    /// Flags it registers (`registerFlag("name"`), as for a directory.
    pub registered_flags: Vec<String>,
    /// Tools it registers (`registerTool({ name: "tool"`), as for a directory.
    pub registered_tools: Vec<String>,
    /// Why it cannot be loaded from its pin alone: one sentence per refused specifier.
    pub problems: Vec<String>,
}

/// Scans the single-file extension at `path` (nothing is imported or executed).
///
/// # Errors
/// The file cannot be read.
pub fn check_single_file(path: &Path) -> Result<SingleFile, ClassifyError> {
    let io = |error| ClassifyError::Io {
        dir: path.to_path_buf(),
        what: "the extension file".to_string(),
        error,
    };
    let mut buf = Vec::new();
    fs::File::open(path)
        .and_then(|f| f.take(MAX_SOURCE_BYTES).read_to_end(&mut buf))
        .map_err(io)?;
    let mut flags = super::flags::scan(&buf);
    flags.sort();
    flags.dedup();
    let mut tools = super::flags::scan_tools(&buf);
    tools.sort();
    tools.dedup();
    let mut problems = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for spec in import_specifiers(&buf) {
        if !seen.insert(spec.clone()) {
            continue;
        }
        if let Some(why) = specifier_problem(&spec) {
            problems.push(why);
        }
    }
    Ok(SingleFile {
        registered_flags: flags,
        registered_tools: tools,
        problems,
    })
}

/// Why `spec` cannot be imported by a single pinned file, if it cannot.
pub fn specifier_problem(spec: &str) -> Option<String> {
    if spec.starts_with("./")
        || spec.starts_with("../")
        || spec.starts_with('/')
        || spec == "."
        || spec == ".."
    {
        return Some(format!(
            "imports {spec:?}, which is not pinned: only the single file is verified and \
             uploaded (make it a plugin directory holding both files)"
        ));
    }
    if spec.starts_with("node:") || PI_PROVIDED.contains(&spec) {
        return None;
    }
    let first = spec.split('/').next().unwrap_or(spec);
    if NODE_BUILTINS.contains(&first) {
        return None;
    }
    Some(format!(
        "imports the package {spec:?}, which pi does not provide to extensions and which is not \
         vendored (a single file has nothing beside it: make it a plugin directory with the \
         package in its node_modules)"
    ))
}

/// The string-literal specifiers of `import`/`export … from`, `import '…'`, `import('…')` and
/// `require('…')` in `src`, in order, outside comments and other string literals.
pub fn import_specifiers(src: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    // The last keyword seen outside strings and comments, and whether it may take a specifier.
    let mut last_word: &[u8] = b"";
    while i < src.len() {
        let b = src[i];
        match b {
            b'/' if src.get(i + 1) == Some(&b'/') => {
                while i < src.len() && src[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if src.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < src.len() && !(src[i] == b'*' && src[i + 1] == b'/') {
                    i += 1;
                }
                i += 2;
            }
            b'"' | b'\'' | b'`' => {
                let end = string_end(src, i);
                if matches!(last_word, b"from" | b"import" | b"require(" | b"import(") && b != b'`'
                {
                    let lit = &src[i + 1..end.saturating_sub(1).max(i + 1)];
                    out.push(String::from_utf8_lossy(lit).into_owned());
                }
                last_word = b"";
                i = end;
            }
            b'(' => {
                last_word = match last_word {
                    b"require" => b"require(",
                    b"import" => b"import(",
                    _ => b"",
                };
                i += 1;
            }
            _ if is_ident_start(b) => {
                let start = i;
                while i < src.len() && is_ident(src[i]) {
                    i += 1;
                }
                let word = &src[start..i];
                let after_dot =
                    src[..start].iter().rev().find(|c| !c.is_ascii_whitespace()) == Some(&b'.');
                last_word = match word {
                    b"from" | b"import" | b"require" if !after_dot => &src[start..i],
                    _ => b"",
                };
            }
            _ if b.is_ascii_whitespace() => i += 1,
            _ => {
                last_word = b"";
                i += 1;
            }
        }
    }
    out
}

/// The index just past the string literal opening at `start` (or the end of `src`).
fn string_end(src: &[u8], start: usize) -> usize {
    let quote = src[start];
    let mut i = start + 1;
    while i < src.len() {
        match src[i] {
            b'\\' => i += 2,
            c if c == quote => return i + 1,
            b'\n' if quote != b'`' => return i + 1,
            _ => i += 1,
        }
    }
    src.len()
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b == b'$'
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_import_form_and_skips_comments_and_strings() {
        let src = br#"
            import { Type } from "@sinclair/typebox";
            import type { ExtensionAPI } from '@mariozechner/pi-coding-agent';
            import * as fs from "node:fs";
            import "./side-effect";
            export { x } from "../up";
            const h = require( './helper' );
            const m = await import("left-pad");
            // import nope from "commented";
            /* require("block") */
            const s = "from 'in-a-string'";
            obj.require("method");
            const d = from("not-an-import");
        "#;
        assert_eq!(
            import_specifiers(src),
            [
                "@sinclair/typebox",
                "@mariozechner/pi-coding-agent",
                "node:fs",
                "./side-effect",
                "../up",
                "./helper",
                "left-pad",
            ]
        );
    }

    #[test]
    fn refuses_relative_and_unprovided_packages_allows_builtins_and_pi() {
        for ok in [
            "node:fs",
            "fs",
            "fs/promises",
            "child_process",
            "@mariozechner/pi-coding-agent",
            "@earendil-works/pi-tui",
            "typebox/value",
            "@sinclair/typebox",
        ] {
            assert_eq!(specifier_problem(ok), None, "{ok}");
        }
        for (bad, why) in [
            ("./helper", "not pinned"),
            ("../x", "not pinned"),
            ("/etc/x", "not pinned"),
            ("left-pad", "not vendored"),
            ("@mariozechner/pi-coding-agent-extra", "not vendored"),
            ("fsx", "not vendored"),
        ] {
            let got = specifier_problem(bad).unwrap_or_default();
            assert!(got.contains(why), "{bad}: {got}");
        }
    }
}
