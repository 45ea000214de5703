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
        std::fs::write(&path, text).with_context(|| format!("{}: write", path.display()))?;
        crate::output::outln!("{}", path.display())?;
    }
    Ok(ExitCode::SUCCESS)
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
}
