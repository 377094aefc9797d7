//! Local embeddings in a child process: the gateway tokenizes, and a worker (`pincer embed-worker`, the
//! same binary) runs ONNX Runtime. The worker starts on the first embedding, gets token ids over a pipe
//! (`protocol.rs`) and exits when the gateway closes its stdin after the idle period, so the runtime's
//! code, the model's mapped weights and the inference heap all leave with it: after memory work the
//! gateway is back to its idle size, which an in-process runtime cannot do (ONNX Runtime stays mapped and
//! initialised once loaded; `README.md`, "Benchmarks", compares the two). A runtime crash (a segfault in
//! native code) ends the worker, not the gateway: the request in flight fails with an error saying how
//! the worker ended, and the next request starts a new worker.
//!
//! Which binary to start is set once by the binary's entry point ([`use_worker_program`]); without it
//! (library users, tests) `open_local` runs the model in-process. This file must not run the model.

mod protocol;
mod serve;

use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::embedder::{EmbedError, Embedder, EmbedderSettings, SPECIAL_TOKENS_PER_INPUT};
use super::onnx::{spawn_idle_reaper, IdleReap, ModelInfo, TokenizerSlot};
use protocol::{read_frame, write_frame, Request, Response, PROTOCOL_VERSION};
pub use protocol::{ProtocolError, MAX_FRAME_BYTES, MAX_INPUTS};
pub use serve::{serve, serve_stdio};

/// The subcommand that runs a worker (hidden from `pincer --help`).
pub const WORKER_COMMAND: &str = "embed-worker";
/// Longest wait for a worker's answer: a batch of full-length inputs on a Pi Zero takes seconds, and a
/// model load some more; a worker silent for this long is ended.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a worker whose stdin was closed may take to exit before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(5);

static WORKER_PROGRAM: OnceLock<PathBuf> = OnceLock::new();

/// Makes local embedders run in a worker started from `program` (`program embed-worker`). Called once,
/// by the binary's entry point, with the running binary itself (`/proc/self/exe`).
pub fn use_worker_program(program: PathBuf) {
    let _ = WORKER_PROGRAM.set(program);
}

/// The program set by [`use_worker_program`], if any.
pub fn worker_program() -> Option<&'static Path> {
    WORKER_PROGRAM.get().map(PathBuf::as_path)
}

/// One running worker and its pipes.
struct Worker {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: ChildStdout,
    last_used: Instant,
}

impl Worker {
    /// Closes the worker's stdin, gives it `EXIT_GRACE` to exit, kills it otherwise; how it ended.
    fn finish(mut self) -> String {
        drop(self.stdin.take());
        let deadline = Instant::now() + EXIT_GRACE;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return describe(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                _ => {
                    let _ = self.child.kill();
                    return self
                        .child
                        .wait()
                        .map_or_else(|e| format!("could not be reaped: {e}"), describe);
                }
            }
        }
    }
}

/// How a worker ended, in words.
fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal} ({})", signal_name(signal)),
        _ => status.to_string(),
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGSEGV => "SIGSEGV: a crash in native code",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGKILL => "SIGKILL, often the out-of-memory killer",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}

/// Reads from the worker's stdout, failing once `deadline` passes without data.
struct DeadlineReader<'a> {
    stdout: &'a mut ChildStdout,
    deadline: Instant,
}

impl Read for DeadlineReader<'_> {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        let mut poll = libc::pollfd {
            fd: self.stdout.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let millis = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: one valid pollfd for the duration of the call.
        let ready = unsafe { libc::poll(&mut poll, 1, millis) };
        match ready {
            0 => Err(io::Error::new(io::ErrorKind::TimedOut, "no answer in time")),
            n if n < 0 => Err(io::Error::last_os_error()),
            _ => self.stdout.read(buffer),
        }
    }
}

/// Local embeddings run by a worker process; see the file's doc.
pub struct WorkerEmbedder {
    settings: EmbedderSettings,
    info: ModelInfo,
    program: PathBuf,
    tokenizer: TokenizerSlot,
    worker: Mutex<Option<Worker>>,
    inferences: AtomicU64,
    spawns: AtomicU64,
}

impl WorkerEmbedder {
    /// Checks the runtime library and the model's files (nothing starts yet) and starts the idle reaper.
    pub fn open(
        settings: EmbedderSettings,
        program: &Path,
    ) -> Result<Arc<WorkerEmbedder>, EmbedError> {
        let info = ModelInfo::check(&settings)?;
        let embedder = Arc::new(WorkerEmbedder {
            tokenizer: TokenizerSlot::new(&settings.model_dir),
            settings,
            info,
            program: program.to_path_buf(),
            worker: Mutex::new(None),
            inferences: AtomicU64::new(0),
            spawns: AtomicU64::new(0),
        });
        spawn_idle_reaper(Arc::downgrade(&embedder), "memory-worker-reaper");
        Ok(embedder)
    }

    /// Workers started so far (the first embedding, every one after an idle exit or a crash).
    pub fn spawns(&self) -> u64 {
        self.spawns.load(Ordering::Relaxed)
    }

    /// The running worker's process id.
    pub fn worker_pid(&self) -> Option<u32> {
        self.worker.lock().as_ref().map(|w| w.child.id())
    }

    /// Ends the worker if unused for the idle period (and drops the tokenizer); returns whether it did.
    pub fn unload_if_idle(&self) -> bool {
        let idle = self.settings.idle_unload;
        let tokenizer_went = self.tokenizer.drop_if_idle(idle);
        let worker = {
            let mut slot = self.worker.lock();
            match slot.as_ref() {
                Some(w) if w.last_used.elapsed() >= idle => slot.take(),
                _ => None,
            }
        };
        if tokenizer_went || worker.is_some() {
            release_freed_memory();
            // The code that indexed and searched (tokenizer, chunker, index writes) is not needed now.
            crate::system::memory::release_code_pages();
        }
        let Some(worker) = worker else {
            return false;
        };
        let pid = worker.child.id();
        log::info!(
            "memory: embedding worker {pid} stopped after the idle period ({})",
            worker.finish()
        );
        true
    }

    fn start(&self) -> Result<Worker, EmbedError> {
        let failed = |why: String| {
            EmbedError::Worker(format!("cannot start {}: {why}", self.program.display()))
        };
        let mut child = Command::new(&self.program)
            .arg(WORKER_COMMAND)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| failed(e.to_string()))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(failed("no pipes".into()));
        };
        self.spawns.fetch_add(1, Ordering::Relaxed);
        let mut worker = Worker {
            child,
            stdin: Some(stdin),
            stdout,
            last_used: Instant::now(),
        };
        let hello = Request::Hello {
            version: PROTOCOL_VERSION,
            settings: self.settings.clone(),
        };
        match exchange(&mut worker, &hello.encode()) {
            Ok(Response::Ready { dimensions }) if dimensions == self.info.dimensions => Ok(worker),
            Ok(Response::Ready { dimensions }) => Err(ended(
                worker,
                format!(
                    "reports {dimensions} dimensions, the model's config says {}",
                    self.info.dimensions
                ),
            )),
            Ok(Response::Failed(why)) => {
                worker.finish();
                Err(EmbedError::Worker(why))
            }
            Ok(Response::Vectors(_)) => Err(ended(worker, "answered hello with vectors".into())),
            Err(error) => Err(ended(worker, error.to_string())),
        }
    }

    /// Embeds `inputs` (at most `MAX_INPUTS`) in the running worker, starting one if there is none.
    fn embed_ids(&self, inputs: Vec<Vec<u32>>) -> Result<Vec<Vec<f32>>, EmbedError> {
        let count = inputs.len();
        let mut slot = self.worker.lock();
        if let Some(worker) = slot.as_mut() {
            if let Ok(Some(status)) = worker.child.try_wait() {
                log::warn!(
                    "memory: embedding worker {} {} while idle; starting another",
                    worker.child.id(),
                    describe(status)
                );
                *slot = None;
            }
        }
        if slot.is_none() {
            *slot = Some(self.start()?);
        }
        let worker = slot.as_mut().expect("a worker was just started");
        let answer = exchange(worker, &Request::Embed(inputs).encode());
        worker.last_used = Instant::now();
        let failure = match answer {
            Ok(Response::Vectors(vectors))
                if vectors.len() == count
                    && vectors.iter().all(|v| v.len() == self.info.dimensions) =>
            {
                return Ok(vectors)
            }
            Ok(Response::Failed(why)) => return Err(EmbedError::Worker(why)),
            Ok(other) => format!("answered with {other:?} instead of {count} vectors"),
            Err(error) => error.to_string(),
        };
        let worker = slot.take().expect("the worker answered just now");
        Err(ended(worker, failure))
    }
}

/// Sends one request and reads its answer within `ANSWER_TIMEOUT`.
fn exchange(worker: &mut Worker, request: &[u8]) -> Result<Response, ProtocolError> {
    let stdin = worker
        .stdin
        .as_mut()
        .ok_or_else(|| io::Error::from(io::ErrorKind::BrokenPipe))?;
    write_frame(stdin, request)?;
    let mut reader = DeadlineReader {
        stdout: &mut worker.stdout,
        deadline: Instant::now() + ANSWER_TIMEOUT,
    };
    let frame =
        read_frame(&mut reader)?.ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
    Response::decode(&frame)
}

/// Ends a worker that failed `why` and says how it ended.
fn ended(worker: Worker, why: String) -> EmbedError {
    let pid = worker.child.id();
    let how = worker.finish();
    log::warn!(
        "memory: embedding worker {pid} failed ({why}) and {how}; the next request starts another"
    );
    EmbedError::Worker(format!(
        "the embedding worker (pid {pid}) {how} ({why}); the next request starts a new one"
    ))
}

/// Hands freed heap pages back to the OS (glibc keeps them otherwise).
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory at the top of glibc's heaps; no pointers are affected.
    unsafe {
        libc::malloc_trim(0);
    }
}

impl IdleReap for WorkerEmbedder {
    fn idle_period(&self) -> Duration {
        self.settings.idle_unload
    }

    fn reap(&self) {
        self.unload_if_idle();
    }
}

impl Drop for WorkerEmbedder {
    fn drop(&mut self) {
        if let Some(worker) = self.worker.get_mut().take() {
            worker.finish();
        }
    }
}

impl Embedder for WorkerEmbedder {
    fn key(&self) -> &str {
        &self.info.key
    }

    fn dimensions(&self) -> usize {
        self.info.dimensions
    }

    fn max_input_tokens(&self) -> usize {
        self.info.max_sequence_tokens - SPECIAL_TOKENS_PER_INPUT
    }

    fn count_tokens(&self, text: &str) -> usize {
        // A text the tokenizer refuses is measured generously so it still gets split.
        self.tokenizer
            .get()
            .map_or(text.len(), |tokenizer| tokenizer.count(text))
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let tokenizer = self.tokenizer.get()?;
        let max = self
            .info
            .max_sequence_tokens
            .min(protocol::MAX_INPUT_TOKENS);
        let mut vectors = Vec::with_capacity(texts.len());
        for group in texts.chunks(MAX_INPUTS) {
            let inputs = group
                .iter()
                .map(|text| {
                    let encoded = tokenizer.encode_for_model(text, max)?;
                    Ok(encoded.ids.iter().map(|&id| id as u32).collect())
                })
                .collect::<Result<Vec<Vec<u32>>, EmbedError>>()?;
            vectors.extend(self.embed_ids(inputs)?);
        }
        self.inferences
            .fetch_add(texts.len() as u64, Ordering::Relaxed);
        Ok(vectors)
    }

    fn batch_size(&self) -> usize {
        self.settings.batch_size
    }

    fn inferences(&self) -> u64 {
        self.inferences.load(Ordering::Relaxed)
    }

    fn is_loaded(&self) -> bool {
        self.worker.lock().is_some()
    }
}
