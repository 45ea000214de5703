//! `pitcrew completions SHELL` and `pitcrew man --out DIR`: shell completions and man pages
//! generated from the same clap definitions the CLI parses with, so they cannot drift from it.

use anyhow::Context as _;
use clap::CommandFactory;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `pitcrew completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    pub shell: clap_complete::Shell,
}

/// Arguments of `pitcrew man`.
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// The directory receiving `pitcrew.1` and one `pitcrew-<command>.1` per subcommand
    /// (created).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

/// Prints the completion script of `args.shell` for the command `C` on stdout.
pub fn completions<C: CommandFactory>(args: &CompletionsArgs) -> anyhow::Result<ExitCode> {
    let mut cmd = C::command();
    let name = cmd.get_name().to_string();
    // Generated in memory: clap_complete panics on a write that fails.
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, name, &mut script);
    crate::output::Stdout.write_all(&script)?;
    crate::output::Stdout.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Writes the man pages of the command `C` into `args.out`, naming each file written.
pub fn man<C: CommandFactory>(args: &ManArgs) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("--out {}: create", args.out.display()))?;
    let cmd = C::command();
    let mut pages = vec![(cmd.get_name().to_string(), cmd.clone())];
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let name = format!("{}-{}", cmd.get_name(), sub.get_name());
        let invoked = format!("{} {}", cmd.get_name(), sub.get_name());
        pages.push((
            name.clone(),
            sub.clone().display_name(name).bin_name(invoked),
        ));
    }
    for (name, page) in pages {
        let path = args.out.join(format!("{name}.1"));
        let mut text = Vec::new();
        clap_mangen::Man::new(page)
            .title(name.clone())
            .render(&mut text)
            .with_context(|| format!("{name}: render the man page"))?;
        let text = with_exit_status(
            &String::from_utf8_lossy(&text),
            name.strip_prefix("pitcrew-").unwrap_or(""),
        );
        std::fs::write(&path, text).with_context(|| format!("{}: write", path.display()))?;
        crate::output::outln!("{}", path.display())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The codes an iteration exits with, from the supervisor's own constants (the table in
/// docs/troubleshooting.md, "Exit codes").
fn iteration_codes() -> Vec<(String, String)> {
    use pitcrew_core::exit_code::{self as code, meaning};
    let mut out = vec![(
        "0".to_string(),
        "the agent exited 0 and its own report shows no failure".to_string(),
    )];
    out.push((
        "1".into(),
        "the agent failed by its own account (it exited 1, or exited 0 with an error in its JSON stream), or pitcrew failed before a report"
            .into(),
    ));
    out.push(("2-92, 99-124".into(), "the agent's own exit code".into()));
    for c in [
        code::EDIT_REPAIR_DRIFT,
        code::SUB_AGENT_DRIFT,
        code::RUNTIME_MANIFEST_DRIFT,
        code::PLUGIN_DRIFT,
        code::HOOK_ADAPTER_DRIFT,
        code::CONFIG_DRIFT,
        code::SUPERVISOR_FAILED,
        code::AGENT_NOT_EXECUTABLE,
        code::AGENT_NOT_FOUND,
    ] {
        out.push((c.to_string(), meaning(c)));
    }
    out.push((
        "128+n".into(),
        "the agent was killed by signal n (137: SIGKILL, the timeout's grace, the memory limit or the disk budget; 143: SIGTERM, a cancel or a timeout)"
            .into(),
    ));
    out
}

/// The EXIT STATUS of `pitcrew COMMAND` (`""`: `pitcrew` itself): each code and its meaning.
pub fn exit_status(command: &str) -> Vec<(String, String)> {
    let failed = match command {
        "validate" => "the harness has problems, or it could not be read",
        "inspect" => "the live verification found drift, or the sandbox could not be reached",
        "cancel" => "nothing was running to cancel, or the sandbox could not be reached",
        "prune" => "a sandbox could not be taken down",
        "batch" => "a job did not succeed, or the batch could not start",
        _ => "the command failed: the error is on stderr (with --json also an error object on stdout)",
    };
    let mut out = match command {
        "run" | "" => iteration_codes(),
        _ => vec![
            ("0".to_string(), "success".to_string()),
            ("1".to_string(), failed.to_string()),
        ],
    };
    out.push((
        "2".into(),
        "the command line was refused (an unknown option, a bad value)".into(),
    ));
    if matches!(command, "run" | "batch" | "") {
        out.push((
            "130".into(),
            "interrupted (Ctrl-C, SIGTERM or SIGHUP): the running iteration was cancelled and collected, the sandbox stopped".into(),
        ));
    }
    out.push((
        "141".into(),
        "stdout or stderr was closed under it (a pipe whose reader exited); run and batch then end as on SIGTERM"
            .into(),
    ));
    out.sort_by_key(|(c, _)| {
        c.split(['-', '+', ','])
            .next()
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or(0)
    });
    out
}

/// `text` escaped for roff: backslashes doubled as `\e`, a leading `.` or `'` guarded.
fn roff_escape(text: &str) -> String {
    let text = text.replace('\\', "\\e");
    if text.starts_with(['.', '\'']) {
        format!("\\&{text}")
    } else {
        text
    }
}

/// A rendered man page with an EXIT STATUS section for `command`, before VERSION (or at its
/// end).
fn with_exit_status(page: &str, command: &str) -> String {
    let mut section = String::from(".SH \"EXIT STATUS\"\n");
    for (code, meaning) in exit_status(command) {
        section += &format!(
            ".TP\n\\fB{}\\fR\n{}\n",
            roff_escape(&code),
            roff_escape(&meaning)
        );
    }
    section += ".PP\nSee docs/troubleshooting.md, \"Exit codes\".\n";
    match page.find("\n.SH VERSION") {
        Some(at) => format!("{}\n{section}{}", &page[..at], &page[at + 1..]),
        None => format!("{page}{section}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap_complete::Shell;

    #[test]
    fn completions_generate_for_bash_zsh_and_fish_and_bash_parses_them() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let mut cmd = crate::Cli::command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cmd, "pitcrew", &mut script);
            let script = String::from_utf8(script).unwrap();
            for sub in ["run", "prune", "collect", "resume", "lease"] {
                assert!(script.contains(sub), "{shell}: {sub} missing");
            }
            if shell == Shell::Bash {
                let dir = tempfile::tempdir().unwrap();
                let file = dir.path().join("pitcrew.bash");
                std::fs::write(&file, &script).unwrap();
                let status = std::process::Command::new("bash")
                    .arg("-n")
                    .arg(&file)
                    .status()
                    .unwrap();
                assert!(status.success(), "bash -n refused the script");
            }
        }
    }

    #[test]
    fn a_man_page_is_written_for_pitcrew_and_each_subcommand() {
        let dir = tempfile::tempdir().unwrap();
        man::<crate::Cli>(&ManArgs {
            out: dir.path().join("man1"),
        })
        .unwrap();
        for page in [
            "pitcrew.1",
            "pitcrew-run.1",
            "pitcrew-prune.1",
            "pitcrew-ps.1",
        ] {
            let text = std::fs::read_to_string(dir.path().join("man1").join(page)).unwrap();
            assert!(text.starts_with(".ie") || text.contains(".TH"), "{page}");
        }
        let run = std::fs::read_to_string(dir.path().join("man1/pitcrew-run.1")).unwrap();
        assert!(run.contains("pitcrew run"), "{run}");
        assert!(!dir.path().join("man1/pitcrew-help.1").exists());
    }

    #[test]
    fn every_man_page_has_an_exit_status_section_before_version() {
        let dir = tempfile::tempdir().unwrap();
        man::<crate::Cli>(&ManArgs {
            out: dir.path().to_path_buf(),
        })
        .unwrap();
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let at = text.find(".SH \"EXIT STATUS\"");
            assert!(at.is_some(), "{}", path.display());
            if let Some(version) = text.find(".SH VERSION") {
                assert!(at < Some(version), "{}", path.display());
            }
            assert!(text.contains("\\fB141\\fR"), "{}", path.display());
        }
        let run = std::fs::read_to_string(dir.path().join("pitcrew-run.1")).unwrap();
        for code in ["96", "125", "127", "128+n", "130"] {
            assert!(run.contains(&format!("\\fB{code}\\fR")), "{code}: {run}");
        }
        assert!(run.contains("plugin or skills tree"), "{run}");
        let validate = std::fs::read_to_string(dir.path().join("pitcrew-validate.1")).unwrap();
        assert!(validate.contains("the harness has problems"), "{validate}");
        assert!(!validate.contains("\\fB130\\fR"), "{validate}");
    }
}
