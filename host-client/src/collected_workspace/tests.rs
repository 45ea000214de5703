use super::*;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;

/// Writes `files` (relative path, content) below `root`, directories made on the way.
fn write_all(root: &Path, files: &[(&str, &str)]) {
    for (rel, body) in files {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, body).unwrap();
    }
}

/// A git directory's bones at `rel`: `HEAD`, `objects/`, `refs/`.
fn git_dir(root: &Path, rel: &str) {
    write_all(
        root,
        &[
            (&format!("{rel}/HEAD"), "ref: refs/heads/main\n"),
            (&format!("{rel}/objects/info/packs"), ""),
            (&format!("{rel}/refs/heads/.keep"), ""),
        ],
    );
}

#[test]
fn hooks_config_attributes_and_pointers_outside_are_stripped() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("workspace");
    git_dir(&ws, ".git");
    write_all(
        &ws,
        &[
            (".git/hooks/post-checkout", "#!/bin/sh\ntouch /tmp/x\n"),
            (".git/hooks/pre-commit.sample", "#!/bin/sh\n"),
            (".git/hooks/nested/pre-push", "#!/bin/sh\n"),
            (
                ".git/config",
                "[core]\n\tbare = false\n\tfsmonitor = x\n[remote \"origin\"]\n\turl = u\n",
            ),
            (".git/info/attributes", "* filter=x\n"),
            (".git/info/exclude", "target/\n"),
            // A bare repository in the work tree, and a worktree's git directory whose
            // `commondir` leaves the workspace.
            (
                "vendor/bare.git/config",
                "[core]\n\tbare = true\n\tpager = x\n",
            ),
            ("wt-meta/commondir", "../../../elsewhere\n"),
            ("wt-meta/HEAD", "ref: refs/heads/x\n"),
            ("wt-meta/config.worktree", "[core]\n\tsshCommand = x\n"),
            // `.git` files: one naming a directory inside the workspace (a submodule's), two
            // outside it.
            ("sub/.git", "gitdir: ../.git/modules/sub\n"),
            ("away/.git", "gitdir: /home/someone/repo/.git\n"),
            ("up/.git", "gitdir: ../../outside/.git\n"),
            // Work-tree files that look like git's are only git's inside a git directory.
            ("docs/config", "[core]\n\tfsmonitor = x\n"),
            ("docs/hooks/post-checkout", "not a hook here\n"),
        ],
    );
    git_dir(&ws, "vendor/bare.git");
    git_dir(&ws, ".git/modules/sub");
    write_all(
        &ws,
        &[(".git/modules/sub/config", "[core]\n\thooksPath = /tmp/h\n")],
    );
    fs::set_permissions(
        ws.join(".git/hooks/post-checkout"),
        fs::Permissions::from_mode(0o755),
    )
    .unwrap();

    let report = strip(&ws).unwrap();
    assert_eq!(
        report.stripped,
        [
            ".git/hooks/nested",
            ".git/hooks/post-checkout",
            ".git/config: core.fsmonitor",
            ".git/info/attributes",
            ".git/modules/sub/config: core.hooksPath",
            "away/.git (a gitdir file naming a directory outside the workspace)",
            "up/.git (a gitdir file naming a directory outside the workspace)",
            "vendor/bare.git/config: core.pager",
            "wt-meta/config.worktree: core.sshCommand",
            "wt-meta/commondir (naming a directory outside the workspace)",
        ]
    );
    assert!(report.flagged.is_empty(), "{report:?}");
    for gone in [
        ".git/hooks/post-checkout",
        ".git/hooks/nested",
        ".git/info/attributes",
        "away/.git",
        "up/.git",
        "wt-meta/commondir",
    ] {
        assert!(!ws.join(gone).exists(), "{gone}");
    }
    for kept in [
        ".git/hooks/pre-commit.sample",
        ".git/info/exclude",
        "sub/.git",
        "docs/hooks/post-checkout",
    ] {
        assert!(ws.join(kept).is_file(), "{kept}");
    }
    assert_eq!(
        fs::read_to_string(ws.join(".git/config")).unwrap(),
        "[core]\n\tbare = \"false\"\n[remote \"origin\"]\n\turl = \"u\"\n"
    );
    assert_eq!(
        fs::read_to_string(ws.join("vendor/bare.git/config")).unwrap(),
        "[core]\n\tbare = \"true\"\n"
    );
    assert_eq!(
        fs::read_to_string(ws.join(".git/modules/sub/config")).unwrap(),
        ""
    );
    assert_eq!(
        fs::read_to_string(ws.join("docs/config")).unwrap(),
        "[core]\n\tfsmonitor = x\n"
    );
    // Stripped once, there is nothing left to strip.
    assert_eq!(strip(&ws).unwrap(), WorkspaceReport::default());
}

#[test]
fn an_unreadable_or_oversized_config_keeps_nothing_it_cannot_read() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("workspace");
    git_dir(&ws, ".git");
    git_dir(&ws, "big/.git");
    write_all(
        &ws,
        &[(
            ".git/config",
            "[core]\n\tbare = false\n\tk = \"open\n\tfsmonitor = x\n",
        )],
    );
    let big = format!("[core]\n\tbare = false\n{}", "\t# pad\n".repeat(200_000));
    write_all(&ws, &[("big/.git/config", &big)]);
    let report = strip(&ws).unwrap();
    assert_eq!(
        report.stripped,
        [
            ".git/config: everything from line 3: a quote left open at the end of the line",
            "big/.git/config (over 1 MiB, or not a file)",
        ]
    );
    assert_eq!(
        fs::read_to_string(ws.join(".git/config")).unwrap(),
        "[core]\n\tbare = \"false\"\n"
    );
    assert!(!ws.join("big/.git/config").exists());
}

#[test]
fn gitattributes_naming_drivers_are_kept_and_flagged() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("workspace");
    write_all(
        &ws,
        &[
            (
                ".gitattributes",
                "# comment filter=x\n*.py diff=python\n*.bin -diff binary\n\
                 *.secret filter=crypt diff=crypt\n\"with space\" merge=ours\n\
                 [attr]macro filter=lfs\n*.txt merge=union text\n",
            ),
            ("src/.gitattributes", "*.c diff=cpp\n"),
            (".git/.gitattributes", "* filter=inside-the-git-dir\n"),
        ],
    );
    git_dir(&ws, ".git");
    let report = strip(&ws).unwrap();
    assert!(report.stripped.is_empty(), "{report:?}");
    assert_eq!(
        report.flagged,
        [
            ".gitattributes:4: filter=crypt",
            ".gitattributes:4: diff=crypt",
            ".gitattributes:5: merge=ours",
            ".gitattributes:6: filter=lfs",
        ]
    );
    assert!(ws.join(".gitattributes").is_file());
}

#[test]
fn no_workspace_is_nothing_to_strip_and_the_lists_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        strip(&dir.path().join("workspace")).unwrap(),
        WorkspaceReport::default()
    );
    let ws = dir.path().join("workspace");
    git_dir(&ws, ".git");
    for i in 0..150 {
        write_all(&ws, &[(&format!(".git/hooks/h{i:03}"), "")]);
    }
    let report = strip(&ws).unwrap();
    assert_eq!(report.stripped.len(), NAMED + 1);
    assert_eq!(report.stripped[0], ".git/hooks/h000");
    assert_eq!(report.stripped[NAMED], "… and 50 more");
    assert_eq!(fs::read_dir(ws.join(".git/hooks")).unwrap().count(), 0);
}

#[test]
fn a_path_stays_inside_by_its_names() {
    assert!(stays_inside(1, b"../.git/modules/sub"));
    assert!(stays_inside(0, b"./a/../b"));
    assert!(stays_inside(2, b"../.."));
    assert!(!stays_inside(1, b"../.."));
    assert!(!stays_inside(0, b"a/../../b"));
    assert!(!stays_inside(3, b"/abs"));
    assert!(!stays_inside(3, b""));
    assert_eq!(gitdir_of(b"gitdir: ../x\r\n"), Some(&b"../x"[..]));
    assert_eq!(gitdir_of(b"../x"), None);
}
