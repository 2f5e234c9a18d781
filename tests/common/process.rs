//! The registrar as a real child process: exit codes, signals and the log.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};

use csi_node_driver_registrar::testing::{PATIENCE, wait_until};

use super::Sandbox;

pub const BIN: &str = env!("CARGO_BIN_EXE_csi-node-driver-registrar");

/// The registrar the process tests run: this build's, or the program
/// `REGISTRAR_UNDER_TEST` names (a wrapper that runs the image's arm64 binary
/// under qemu-user: `scripts/test-arm64`).
pub fn registrar() -> String {
    std::env::var("REGISTRAR_UNDER_TEST").unwrap_or_else(|_| BIN.to_owned())
}

/// The registrar binary, running. Killed if the test ends without stopping it.
pub struct Process {
    child: tokio::process::Child,
    pub log: PathBuf,
}

impl Process {
    pub fn spawn(sandbox: &Sandbox, extra: &[String]) -> Self {
        let mut args = sandbox.args();
        args.extend(extra.iter().cloned());
        Self::spawn_raw(sandbox.dir.path(), &args)
    }

    /// As [`Process::spawn`], under an address-space limit (RLIMIT_AS) of
    /// `bytes`, as `ulimit -v` or a runtime's limit gives it.
    pub fn spawn_limited(sandbox: &Sandbox, extra: &[String], bytes: u64) -> Self {
        let mut args = sandbox.args();
        args.extend(extra.iter().cloned());
        Self::start(sandbox.dir.path(), &args, Some(bytes))
    }

    /// With exactly these arguments; the log goes to a file in `dir`.
    pub fn spawn_raw(dir: &Path, args: &[String]) -> Self {
        Self::start(dir, args, None)
    }

    fn start(dir: &Path, args: &[String], address_space: Option<u64>) -> Self {
        let log = tempfile::Builder::new()
            .prefix("registrar-")
            .suffix(".log")
            .tempfile_in(dir)
            .unwrap()
            .into_temp_path()
            .keep()
            .unwrap();
        let mut command = tokio::process::Command::new(registrar());
        command
            .args(args)
            .env("KUBE_NODE_NAME", "node-a1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true);
        // SAFETY: prctl and setrlimit are async-signal-safe. If the test
        // process dies without running destructors (a crash), the kernel
        // still kills the registrar.
        unsafe {
            command.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if let Some(bytes) = address_space {
                    let limit = libc::rlimit {
                        rlim_cur: bytes,
                        rlim_max: bytes,
                    };
                    if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let child = command.spawn().unwrap();
        Process { child, log }
    }

    pub fn pid(&self) -> u32 {
        self.child.id().expect("registrar still running")
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the log contains `needle`.
    pub async fn wait_log(&self, needle: &str) -> bool {
        wait_until(PATIENCE, || self.log_text().contains(needle)).await
    }

    pub fn signal(&self, signal: libc::c_int) {
        let pid = self.child.id().expect("registrar still running") as libc::pid_t;
        // SAFETY: sending a signal to our own child.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    }

    /// Waits for the process to exit; panics with its log if it does not.
    pub async fn exit(&mut self) -> ExitStatus {
        match tokio::time::timeout(PATIENCE, self.child.wait()).await {
            Ok(status) => status.unwrap(),
            Err(_) => panic!("registrar did not exit; log:\n{}", self.log_text()),
        }
    }

    pub async fn exit_code(&mut self) -> i32 {
        let status = self.exit().await;
        status
            .code()
            .unwrap_or_else(|| panic!("killed by a signal: {status:?}; log:\n{}", self.log_text()))
    }

    pub async fn stop(mut self) -> i32 {
        self.signal(libc::SIGTERM);
        self.exit_code().await
    }
}

/// Runs the binary to its end: exit code, stdout, stderr.
pub async fn run_binary<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> (i32, String, String) {
    let out = tokio::process::Command::new(registrar())
        .args(args)
        .output()
        .await
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
