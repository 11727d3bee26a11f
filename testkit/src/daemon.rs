//! Daemons of the workspace as child processes, each logging into its
//! test directory; dropping a [`Daemon`] kills it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::lab::{try_binary, Place};

/// A child process killed (SIGKILL) on drop.
pub struct Daemon {
    pub name: String,
    pub child: Option<Child>,
    pub log: PathBuf,
}

impl Daemon {
    /// Starts the workspace binary `bin args…` with stdout+stderr to
    /// `dir/<name>.log` (`RUST_LOG` as in the environment, else `info`).
    /// Errors: the binary is not built or does not start.
    pub fn try_spawn(name: &str, bin: &str, args: &[&str], dir: &Path) -> Result<Self, String> {
        Self::try_spawn_at(Place::SiteA, name, bin, args, dir)
    }

    /// [`Daemon::try_spawn`] at `place` of the lab (site B: in its
    /// namespaces, through `nsenter`, which execs: the child's pid is the
    /// daemon's).
    pub fn try_spawn_at(place: Place, name: &str, bin: &str, args: &[&str], dir: &Path) -> Result<Self, String> {
        Self::try_spawn_wrapped(place, &[], name, bin, args, dir)
    }

    /// [`Daemon::try_spawn_at`] through `wrapper`, a command that execs the
    /// rest of its line (`prlimit --nofile=1024:1024 --`): the child's pid
    /// is still the daemon's.
    pub fn try_spawn_wrapped(place: Place, wrapper: &[&str], name: &str, bin: &str, args: &[&str], dir: &Path) -> Result<Self, String> {
        let log = dir.join(format!("{name}.log"));
        let f = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let out = f.try_clone().map_err(|e| e.to_string())?;
        let bin_path = try_binary(bin)?;
        let mut cmd = place.enter()?;
        cmd.extend(wrapper.iter().map(|w| w.to_string()));
        cmd.push(bin_path.to_string_lossy().into_owned());
        let child = Command::new(&cmd[0])
            .args(&cmd[1..])
            .args(args)
            .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()))
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(f))
            .spawn()
            .map_err(|e| format!("start {bin}: {e}"))?;
        Ok(Self {
            name: name.into(),
            child: Some(child),
            log,
        })
    }

    /// [`Daemon::try_spawn`], panicking (tests).
    pub fn spawn(name: &str, bin: &str, args: &[&str], dir: &Path) -> Self {
        Self::try_spawn(name, bin, args, dir).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Daemon::try_spawn_at`], panicking (tests).
    pub fn spawn_at(place: Place, name: &str, bin: &str, args: &[&str], dir: &Path) -> Self {
        Self::try_spawn_at(place, name, bin, args, dir).unwrap_or_else(|e| panic!("{e}"))
    }

    /// SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, as systemd or an operator stops it; waits up to `within`
    /// for it to exit. Errors when it is still running then (it is killed).
    pub fn terminate(&mut self, within: Duration) -> Result<ExitStatus, String> {
        let Some(mut c) = self.child.take() else {
            return Err(format!("{} is not running", self.name));
        };
        let _ = Command::new("kill").args(["-TERM", &c.id().to_string()]).status();
        let start = Instant::now();
        while start.elapsed() < within {
            if let Ok(Some(st)) = c.try_wait() {
                return Ok(st);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = c.kill();
        let _ = c.wait();
        Err(format!("{} did not stop within {within:?} of SIGTERM", self.name))
    }

    /// The daemon's process ID while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// The daemon's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Errors with the log when the process has exited.
    pub fn check_alive(&mut self) -> Result<(), String> {
        if let Some(c) = self.child.as_mut() {
            if let Ok(Some(st)) = c.try_wait() {
                return Err(format!("{} exited ({st}); log:\n{}", self.name, self.log_text()));
            }
        }
        Ok(())
    }

    /// Panics with the log unless the process is still running.
    pub fn assert_alive(&mut self) {
        if let Err(e) = self.check_alive() {
            panic!("{e}");
        }
    }
}

impl Drop for Daemon {
    /// Kills the daemon; when a test fails, first prints the warnings and
    /// errors from its log (the last 30), so that a failure in CI says
    /// what the daemons saw.
    fn drop(&mut self) {
        if std::thread::panicking() {
            let text = self.log_text();
            let lines: Vec<&str> = text.lines().filter(|l| l.contains("WARN") || l.contains("ERROR")).collect();
            if !lines.is_empty() {
                eprintln!("--- {} ({}): warnings and errors ---", self.name, self.log.display());
                for l in &lines[lines.len().saturating_sub(30)..] {
                    eprintln!("{l}");
                }
            }
        }
        self.kill();
    }
}
