//! Runs the real `pincer gateway` binary for a test: a temp dir with its
//! config and data dir, a port chosen by the gateway, and kill-on-drop (also
//! when the test panics).

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tempfile::TempDir;

/// How long the gateway may take from spawn to its ready line.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// The ready line's prefix (the port follows).
pub const READY_PREFIX: &str = "pincer: listening on ";

/// A running gateway.
pub struct GatewayProcess {
    pub child: Child,
    pub port: u16,
    pub dir: TempDir,
    /// The port of every ready line the process printed (a restart in place
    /// prints another one from the same process).
    ready: ReadyLines,
}

type ReadyLines = Arc<Mutex<Vec<u16>>>;

/// A test config whose only model is served at `base_url`.
pub fn config_with_provider(base_url: &str) -> String {
    format!(
        r#"{{
  models: {{ providers: {{ fake: {{ baseUrl: "{base_url}", apiKey: "sk-test", api: "openai-completions",
                                   models: [{{ id: "gpt-test", contextWindow: 128000 }}] }} }} }},
  agents: {{ defaults: {{ model: {{ primary: "fake/gpt-test" }} }} }},
}}"#
    )
}

fn command(dir: &Path, config: &str, args: &[&str]) -> Command {
    let config_path = dir.join("pincer.json5");
    std::fs::write(&config_path, config).expect("write test config");
    let mut command = Command::new(env!("CARGO_BIN_EXE_pincer"));
    command
        .arg("gateway")
        .arg("--config")
        .arg(&config_path)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(args)
        .env_remove("OPENCLAW_GATEWAY_TOKEN")
        .env_remove("OPENCLAW_GATEWAY_PASSWORD")
        .env_remove("OPENCLAW_GATEWAY_PORT")
        .env_remove("PINCER_CONFIG")
        .env_remove("PINCER_DATA_DIR")
        .stdin(Stdio::null());
    command
}

fn spawn_ready(dir: &Path, config: &str, args: &[&str]) -> (Child, u16, ReadyLines) {
    spawn_ready_with(dir, config, args, false, &[])
}

/// `private_tmp`: the gateway's `TMPDIR` is `<dir>/tmp` (its media root
/// then lies inside the test's directory).
fn spawn_ready_with(
    dir: &Path,
    config: &str,
    args: &[&str],
    private_tmp: bool,
    env: &[(&str, &str)],
) -> (Child, u16, ReadyLines) {
    let stderr = File::options()
        .create(true)
        .append(true)
        .open(dir.join("gateway.stderr"))
        .expect("stderr file");
    let mut command = command(dir, config, args);
    if private_tmp {
        let tmp = dir.join("tmp");
        std::fs::create_dir_all(&tmp).expect("private TMPDIR");
        command.env("TMPDIR", tmp);
    }
    command.envs(env.iter().copied());
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::from(stderr))
        .spawn()
        .expect("spawn pincer gateway");
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    let ready = ReadyLines::default();
    let seen = Arc::clone(&ready);
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix(READY_PREFIX) {
                let port = rest
                    .rsplit(':')
                    .next()
                    .and_then(|p| p.trim().parse::<u16>().ok());
                if let Some(port) = port {
                    seen.lock().expect("ready lines").push(port);
                }
                let _ = tx.send(port);
            }
        }
    });
    match rx.recv_timeout(READY_TIMEOUT) {
        Ok(Some(port)) => (child, port, ready),
        _ => {
            let _ = child.kill();
            let log = std::fs::read_to_string(dir.join("gateway.stderr")).unwrap_or_default();
            panic!("gateway did not become ready; stderr:\n{log}")
        }
    }
}

impl GatewayProcess {
    /// Starts a gateway with `config` (JSON5) and extra CLI args; waits until ready.
    pub fn start(config: &str, args: &[&str]) -> GatewayProcess {
        let dir = tempfile::tempdir().expect("temp dir for the gateway");
        let (child, port, ready) = spawn_ready(dir.path(), config, args);
        GatewayProcess {
            child,
            port,
            dir,
            ready,
        }
    }

    /// As `start`, with these extra environment variables.
    pub fn start_with_env(config: &str, args: &[&str], env: &[(&str, &str)]) -> GatewayProcess {
        let dir = tempfile::tempdir().expect("temp dir for the gateway");
        let (child, port, ready) = spawn_ready_with(dir.path(), config, args, false, env);
        GatewayProcess {
            child,
            port,
            dir,
            ready,
        }
    }

    /// As `start`, with the gateway's `TMPDIR` inside its temp dir
    /// (`tmp_dir`): downloaded media can be inspected and is not shared.
    pub fn start_with_private_tmp(config: &str, args: &[&str]) -> GatewayProcess {
        let dir = tempfile::tempdir().expect("temp dir for the gateway");
        let (child, port, ready) = spawn_ready_with(dir.path(), config, args, true, &[]);
        GatewayProcess {
            child,
            port,
            dir,
            ready,
        }
    }

    /// The gateway's `TMPDIR` when started with `start_with_private_tmp`.
    pub fn tmp_dir(&self) -> PathBuf {
        self.dir.path().join("tmp")
    }

    /// Kills the gateway with SIGKILL and starts it again on the same data dir.
    pub fn crash_and_restart(&mut self, config: &str, args: &[&str]) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let (child, port, ready) = spawn_ready(self.dir.path(), config, args);
        self.child = child;
        self.port = port;
        self.ready = ready;
    }

    /// As `crash_and_restart`, with these extra environment variables.
    pub fn crash_and_restart_with_env(
        &mut self,
        config: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let (child, port, ready) = spawn_ready_with(self.dir.path(), config, args, false, env);
        self.child = child;
        self.port = port;
        self.ready = ready;
    }

    /// Waits until the process has printed its `count`th ready line (a
    /// restart in place prints one more), makes that line's port the one
    /// `url` and `http` use, and returns it.
    pub async fn wait_for_ready_line(&mut self, count: usize) -> u16 {
        let deadline = std::time::Instant::now() + READY_TIMEOUT;
        loop {
            let port = self
                .ready
                .lock()
                .expect("ready lines")
                .get(count - 1)
                .copied();
            if let Some(port) = port {
                self.port = port;
                return port;
            }
            if !self.alive() || std::time::Instant::now() > deadline {
                panic!(
                    "no ready line #{count} (process alive: {}); stderr:\n{}",
                    self.alive(),
                    self.stderr()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Ready lines printed so far.
    pub fn ready_lines(&self) -> usize {
        self.ready.lock().expect("ready lines").len()
    }

    /// Runs a gateway that is expected to refuse to start; returns its exit status and stderr.
    pub fn refuse(config: &str, args: &[&str]) -> (ExitStatus, String) {
        let dir = tempfile::tempdir().expect("temp dir");
        let output = command(dir.path(), config, args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn")
            .wait_with_output()
            .expect("wait");
        (
            output.status,
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    pub fn url(&self) -> String {
        format!("ws://127.0.0.1:{}", self.port)
    }

    pub fn http(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("gateway.stderr")).unwrap_or_default()
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The config file the gateway was started with (and watches).
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("pincer.json5")
    }

    /// The config file's current text.
    pub fn read_config(&self) -> String {
        std::fs::read_to_string(self.config_path()).expect("read the gateway's config file")
    }

    /// Sends SIGTERM without waiting (the test keeps reading its sockets).
    pub fn sigterm(&self) {
        // SAFETY: kill(2) on our own child's pid, not yet reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
    }

    /// Sends SIGTERM and waits for the exit.
    pub fn terminate(&mut self) -> ExitStatus {
        self.sigterm();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "gateway did not exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // The gateway's side of a failing test.
            eprintln!("--- gateway stderr ---\n{}", self.stderr());
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
