//! A real git forge on 127.0.0.1 for the remote-source tests: `git http-backend` behind TLS
//! (`tests/fixtures/git_https_server.py`), with a certificate from a test CA made here with
//! `openssl`. Nothing leaves the machine; the fetcher trusts the CA through `GIT_SSL_CAINFO`.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Whether the server can run here: git (with `http-backend`), openssl and python3.
pub fn available() -> Result<(), String> {
    for (tool, arg) in [
        ("git", "--version"),
        ("openssl", "version"),
        ("python3", "--version"),
    ] {
        match Command::new(tool).arg(arg).output() {
            Ok(o) if o.status.success() => {}
            _ => return Err(format!("{tool} is not installed (.ci/run installs it)")),
        }
    }
    let exec = Command::new("git")
        .arg("--exec-path")
        .output()
        .map_err(|e| e.to_string())?;
    let backend = Path::new(String::from_utf8_lossy(&exec.stdout).trim()).join("git-http-backend");
    if !backend.is_file() {
        return Err(format!("{} is missing", backend.display()));
    }
    Ok(())
}

/// A running forge, stopped on drop.
pub struct GitServer {
    dir: tempfile::TempDir,
    child: Option<Child>,
    port: u16,
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A work tree with one commit on `branch` holding `files` (path, content) and `links` (path,
/// target) as symlinks.
fn committed(branch: &str, files: &[(&str, &str)], links: &[(&str, &str)]) -> tempfile::TempDir {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    run(Command::new("git")
        .args(["init", "-q", "-b", branch])
        .arg(w));
    for (path, content) in files {
        let p = w.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
    for (path, target) in links {
        let p = w.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, p).unwrap();
    }
    run(Command::new("git").arg("-C").arg(w).args(["add", "-A"]));
    run(Command::new("git").arg("-C").arg(w).args([
        "-c",
        "user.name=test",
        "-c",
        "user.email=test@example.invalid",
        "commit",
        "-q",
        "-m",
        "publish",
    ]));
    work
}

impl GitServer {
    /// Makes a CA and a certificate for 127.0.0.1, and starts serving `<dir>/repos`.
    pub fn start() -> GitServer {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("repos")).unwrap();
        run(Command::new("openssl").current_dir(d).args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=pitcrew test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign",
        ]));
        run(Command::new("openssl").current_dir(d).args([
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ]));
        std::fs::write(
            d.join("server.ext"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        run(Command::new("openssl").current_dir(d).args([
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ]));
        let mut server = GitServer {
            dir,
            child: None,
            port: 0,
        };
        server.serve();
        server
    }

    fn serve(&mut self) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/git_https_server.py");
        let d = self.dir.path();
        let mut child = Command::new("python3")
            .arg(script)
            .arg(d.join("repos"))
            .arg(d.join("server.pem"))
            .arg(d.join("server.key"))
            .arg(self.port.to_string())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(d.join("server.log")).unwrap())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        self.port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("the git server printed no port: {line:?}"));
        self.child = Some(child);
    }

    /// Stops serving (the repositories stay).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Serves again, on the same port.
    pub fn restart(&mut self) {
        self.stop();
        self.serve();
    }

    /// `https://127.0.0.1:<port>`.
    pub fn base_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// The test CA (for `GIT_SSL_CAINFO`).
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// The bare repository of `owner/repo` below the served root.
    fn bare(&self, owner: &str, repo: &str) -> PathBuf {
        self.dir
            .path()
            .join("repos")
            .join(owner)
            .join(format!("{repo}.git"))
    }

    /// Publishes `owner/repo` with one commit on `main` holding `files` (path, content) and
    /// `links` (path, target) as symlinks; `refs` more point at the same commit (branches, or
    /// tags written `tag:NAME`). Replaces an earlier repository of that name.
    pub fn publish(
        &self,
        owner: &str,
        repo: &str,
        files: &[(&str, &str)],
        links: &[(&str, &str)],
        refs: &[&str],
    ) {
        let work = committed("main", files, links);
        let w = work.path();
        for name in refs {
            let args = match name.strip_prefix("tag:") {
                Some(tag) => ["tag", tag],
                None => ["branch", name],
            };
            run(Command::new("git").arg("-C").arg(w).args(args));
        }
        let bare = self.bare(owner, repo);
        let _ = std::fs::remove_dir_all(&bare);
        std::fs::create_dir_all(bare.parent().unwrap()).unwrap();
        run(Command::new("git")
            .args(["clone", "-q", "--bare"])
            .arg(w)
            .arg(&bare));
        // Forges serve partial clones (`--filter`); git http-backend does once told to.
        run(Command::new("git").arg("-C").arg(&bare).args([
            "config",
            "uploadpack.allowFilter",
            "true",
        ]));
    }

    /// Adds to `owner/repo` a commit on no branch or tag, holding `files`, reachable only as
    /// `refs/pull/1/head` (what a pull request from anyone, or a fork, leaves in a forge's
    /// repository); returns its id.
    pub fn plant_pull_request(&self, owner: &str, repo: &str, files: &[(&str, &str)]) -> String {
        let work = committed("pr", files, &[]);
        let w = work.path();
        run(Command::new("git")
            .arg("-C")
            .arg(w)
            .arg("push")
            .arg("-q")
            .arg(self.bare(owner, repo))
            .arg("pr:refs/pull/1/head"));
        let out = Command::new("git")
            .arg("-C")
            .arg(w)
            .args(["rev-parse", "HEAD"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// What the server logged (one line per request).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

impl Drop for GitServer {
    fn drop(&mut self) {
        self.stop();
    }
}
