//! pi's `-e <dir>` rule (`collectPackageResources`, then jiti's directory-as-module probing),
//! resolved to entry files, strictly: whatever pi 0.73 and 1.6 would load differently, or load
//! as nothing without a word, is refused.

use super::{join, ClassifyError, Ctx, EntryProblem, Kind, ManifestProblem, PiRule};
use serde_json::{Map, Value};
use std::fs;

/// The conventional package folders; any one of them present disables the index fallback.
const CONVENTIONAL: [&str; 4] = ["extensions", "skills", "prompts", "themes"];

/// The extensions jiti probes for `<dir>/index`, in its order.
const INDEX_EXTS: [&str; 9] = [
    "js", "mjs", "cjs", "ts", "tsx", "mts", "cts", "mtsx", "ctsx",
];

const PACKAGE_JSON: &str = "package.json";

/// The rule and entries pi would load from `ctx`, or `None` when pi would load nothing
/// (`Cannot find module`).
pub(super) fn detect(ctx: &Ctx) -> Result<Option<(PiRule, Vec<String>)>, ClassifyError> {
    let pkg = read_package(ctx, "")?;

    // 1. Manifest mode: a `pi` key decides by itself.
    if let Some(pi) = pkg.as_ref().and_then(|p| p.get("pi")) {
        return Ok(Some((PiRule::Manifest, root_manifest(ctx, pi)?)));
    }
    let main = pkg.as_ref().and_then(|p| p.get("main"));

    // 2. Conventional folders: only extensions/ contributes code; the index fallback is off.
    let mut folders = Vec::new();
    for name in CONVENTIONAL {
        if ctx.kind(name)?.is_some() {
            folders.push(name.to_owned());
        }
    }
    let indexes = index_files(ctx)?;
    if !folders.is_empty() {
        let entries = if ctx.kind("extensions")? == Some(Kind::Dir) {
            collect_auto(ctx, "extensions")?
        } else {
            Vec::new()
        };
        if let Some(index) = indexes.first() {
            return Err(ClassifyError::ShadowedByConventionalDirs {
                dir: ctx.dir.clone(),
                folders,
                shadowed: format!("`{index}`"),
            });
        }
        if let Some(main) = main {
            if !main_rel(main).is_some_and(|m| entries.contains(&m)) {
                return Err(ClassifyError::ShadowedByConventionalDirs {
                    dir: ctx.dir.clone(),
                    folders,
                    shadowed: format!("package.json `main` {}", short_json(main)),
                });
            }
        }
        if entries.is_empty() {
            return Err(ClassifyError::ConventionalDirsWithoutEntries {
                dir: ctx.dir.clone(),
                folders,
            });
        }
        return Ok(Some((PiRule::ConventionalDirs, entries)));
    }

    // 3. Directory loaded as a module: jiti probes `index.*`, then Node's `main`.
    match indexes.as_slice() {
        [] => {}
        [index] => {
            if let Some(main) = main {
                if main_rel(main).as_ref() != Some(index) {
                    return Err(ClassifyError::MainShadowedByIndex {
                        dir: ctx.dir.clone(),
                        main: main
                            .as_str()
                            .map_or_else(|| short_json(main), str::to_owned),
                        index: index.clone(),
                    });
                }
            }
            return Ok(Some((PiRule::Index, vec![index.clone()])));
        }
        _ => {
            return Err(ClassifyError::AmbiguousIndex {
                dir: ctx.dir.clone(),
                candidates: indexes,
            })
        }
    }
    let Some(main) = main else {
        return Ok(None);
    };
    let refuse = |problem| ClassifyError::PackageMain {
        dir: ctx.dir.clone(),
        main: main
            .as_str()
            .map_or_else(|| short_json(main), str::to_owned),
        problem,
    };
    let Some(raw) = main.as_str() else {
        return Err(refuse(EntryProblem::NotAString));
    };
    let rel = normalize(raw).map_err(refuse)?;
    match resolve(ctx, &rel)? {
        Ok(Kind::File) => Ok(Some((PiRule::PackageMain, vec![rel]))),
        Ok(Kind::Dir) => Err(refuse(EntryProblem::IsADirectory)),
        Ok(Kind::Other) => Err(refuse(EntryProblem::NotFileOrDir)),
        Err(problem) => Err(refuse(problem)),
    }
}

/// `main` as a normalized relative path, if it is a usable string.
fn main_rel(main: &Value) -> Option<String> {
    main.as_str().and_then(|m| normalize(m).ok())
}

/// `<dir>/package.json` as an object, if present.
fn read_package(ctx: &Ctx, dir: &str) -> Result<Option<Map<String, Value>>, ClassifyError> {
    let file = join(dir, PACKAGE_JSON);
    if ctx.kind(&file)?.is_none() {
        return Ok(None);
    }
    match ctx.read_json(&file)? {
        Value::Object(obj) => Ok(Some(obj)),
        _ => Err(ClassifyError::PackageJsonNotObject {
            dir: ctx.dir.clone(),
            file,
        }),
    }
}

/// The root `index.*` files, in jiti's probe order.
fn index_files(ctx: &Ctx) -> Result<Vec<String>, ClassifyError> {
    let mut found = Vec::new();
    for ext in INDEX_EXTS {
        let name = format!("index.{ext}");
        if ctx.kind(&name)? == Some(Kind::File) {
            found.push(name);
        }
    }
    Ok(found)
}

/// The root manifest, strictly: `pi` an object whose `extensions` lists ≥ 1 existing entry.
fn root_manifest(ctx: &Ctx, pi: &Value) -> Result<Vec<String>, ClassifyError> {
    let refuse = |problem| ClassifyError::PiManifest {
        dir: ctx.dir.clone(),
        file: PACKAGE_JSON.to_owned(),
        problem,
    };
    let Value::Object(pi) = pi else {
        return Err(refuse(ManifestProblem::NotAnObject {
            found: short_json(pi),
        }));
    };
    let Some(list) = pi.get("extensions") else {
        let kinds: Vec<String> = ["skills", "prompts", "themes"]
            .into_iter()
            .filter(|k| pi.contains_key(*k))
            .map(str::to_owned)
            .collect();
        return Err(refuse(if kinds.is_empty() {
            ManifestProblem::Empty
        } else {
            ManifestProblem::OnlyOtherResources { kinds }
        }));
    };
    let list = string_array(list).ok_or_else(|| refuse(ManifestProblem::ExtensionsNotStrings))?;
    if list.is_empty() {
        return Err(refuse(ManifestProblem::NoExtensions));
    }
    manifest_entries(ctx, "", &list, false)
}

/// The strings of a JSON array of strings.
fn string_array(v: &Value) -> Option<Vec<&str>> {
    v.as_array()?.iter().map(Value::as_str).collect()
}

/// Resolves `pi.extensions` entries of `<pkg_dir>/package.json`. A directory entry goes
/// through [`collect_auto`] at the top level; in a nested package (`nested`) pi would hand the
/// directory to jiti as a module, so it is refused there.
fn manifest_entries(
    ctx: &Ctx,
    pkg_dir: &str,
    list: &[&str],
    nested: bool,
) -> Result<Vec<String>, ClassifyError> {
    let file = join(pkg_dir, PACKAGE_JSON);
    let mut entries = Vec::new();
    for raw in list {
        let refuse = |problem| ClassifyError::PiEntry {
            dir: ctx.dir.clone(),
            file: file.clone(),
            entry: (*raw).to_owned(),
            problem,
        };
        if let Some(c) = raw.chars().next().filter(|c| matches!(c, '!' | '+' | '-')) {
            return Err(refuse(EntryProblem::PatternPrefix(c)));
        }
        if raw.contains(['*', '?']) {
            return Err(refuse(EntryProblem::Glob));
        }
        let rel = normalize(raw).map_err(refuse)?;
        let rel = join(pkg_dir, &rel);
        match resolve(ctx, &rel)? {
            Ok(Kind::File) => entries.push(rel),
            Ok(Kind::Dir) if nested => return Err(refuse(EntryProblem::IsADirectory)),
            Ok(Kind::Dir) => {
                let found = collect_auto(ctx, &rel)?;
                if found.is_empty() {
                    return Err(refuse(EntryProblem::DirectoryYieldsNothing));
                }
                entries.extend(found);
            }
            Ok(Kind::Other) => return Err(refuse(EntryProblem::NotFileOrDir)),
            Err(problem) => return Err(refuse(problem)),
        }
    }
    entries.sort();
    entries.dedup();
    Ok(entries)
}

/// pi's `resolveExtensionEntries(dir)`: `pi.extensions` (existing) → `index.ts` → `index.js`.
/// Stricter than pi: a listed entry that is missing (pi drops it and may fall back to the
/// index) is refused.
fn resolve_extension_entries(ctx: &Ctx, dir: &str) -> Result<Option<Vec<String>>, ClassifyError> {
    if let Some(pkg) = read_package(ctx, dir)? {
        if let Some(list) = pkg.get("pi").and_then(|pi| pi.get("extensions")) {
            let list = string_array(list).ok_or_else(|| ClassifyError::PiManifest {
                dir: ctx.dir.clone(),
                file: join(dir, PACKAGE_JSON),
                problem: ManifestProblem::ExtensionsNotStrings,
            })?;
            if !list.is_empty() {
                return manifest_entries(ctx, dir, &list, true).map(Some);
            }
        }
    }
    for index in ["index.ts", "index.js"] {
        let rel = join(dir, index);
        if ctx.kind(&rel)? == Some(Kind::File) {
            return Ok(Some(vec![rel]));
        }
    }
    Ok(None)
}

/// pi's `collectAutoExtensionEntries(dir)`: the folder's own entries if it has any, else every
/// non-dot `*.ts`/`*.js` file directly inside plus each subfolder's own entries. One level only;
/// `.gitignore`/`.ignore`/`.fdignore` are not honoured (see the module docs).
fn collect_auto(ctx: &Ctx, dir: &str) -> Result<Vec<String>, ClassifyError> {
    if let Some(entries) = resolve_extension_entries(ctx, dir)? {
        return Ok(entries);
    }
    let mut entries = Vec::new();
    for (name, kind) in ctx.list(dir)? {
        let rel = join(dir, &name);
        match kind {
            Kind::File if name.ends_with(".ts") || name.ends_with(".js") => entries.push(rel),
            Kind::Dir => {
                if let Some(found) = resolve_extension_entries(ctx, &rel)? {
                    entries.extend(found);
                }
            }
            _ => {}
        }
    }
    entries.sort();
    entries.dedup();
    Ok(entries)
}

/// Normalizes a relative path as written in a manifest: `./` and `.` segments and duplicate
/// slashes dropped; absolute paths, `..` segments and the root itself refused.
fn normalize(raw: &str) -> Result<String, EntryProblem> {
    if raw.is_empty() {
        return Err(EntryProblem::Empty);
    }
    if raw.starts_with('/') {
        return Err(EntryProblem::Absolute);
    }
    let mut parts = Vec::new();
    for seg in raw.split('/') {
        match seg {
            "" | "." => {}
            ".." => return Err(EntryProblem::ParentSegment),
            s => parts.push(s),
        }
    }
    if parts.is_empty() {
        return Err(EntryProblem::NamesRoot);
    }
    Ok(parts.join("/"))
}

/// What the normalized relative path `rel` is: every component must exist and not be a
/// symlink, and the canonical path must stay inside the root.
fn resolve(ctx: &Ctx, rel: &str) -> Result<Result<Kind, EntryProblem>, ClassifyError> {
    let mut prefix = String::new();
    let mut kind = Kind::Dir;
    for seg in rel.split('/') {
        if kind != Kind::Dir {
            return Ok(Err(EntryProblem::Missing));
        }
        prefix = join(&prefix, seg);
        kind = match ctx.kind(&prefix) {
            Ok(Some(k)) => k,
            Ok(None) => return Ok(Err(EntryProblem::Missing)),
            Err(ClassifyError::Symlink { path, .. }) => {
                return Ok(Err(EntryProblem::Symlink(path)))
            }
            Err(e) => return Err(e),
        };
    }
    let canonical = fs::canonicalize(ctx.abs(rel)).map_err(|e| ctx.io(rel, e))?;
    if !canonical.starts_with(&ctx.root) {
        return Ok(Err(EntryProblem::OutsideDir));
    }
    Ok(Ok(kind))
}

/// A JSON value as compact text, truncated for messages.
fn short_json(v: &Value) -> String {
    let mut s = v.to_string();
    if s.len() > 60 {
        let mut cut = 57;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::{normalize, short_json, EntryProblem};

    #[test]
    fn normalize_relative_paths() {
        assert_eq!(normalize("./src//main.ts").unwrap(), "src/main.ts");
        assert_eq!(normalize("src/./a/").unwrap(), "src/a");
        assert_eq!(normalize("/abs"), Err(EntryProblem::Absolute));
        assert_eq!(normalize("a/../b"), Err(EntryProblem::ParentSegment));
        assert_eq!(normalize("././"), Err(EntryProblem::NamesRoot));
        assert_eq!(normalize(""), Err(EntryProblem::Empty));
    }

    #[test]
    fn short_json_truncates_on_char_boundary() {
        let long = serde_json::Value::from("é".repeat(100));
        let s = short_json(&long);
        assert!(s.ends_with("...") && s.len() <= 60, "{s}");
    }
}
