//! Local embeddings in a worker process (`pincer embed-worker`, this build's binary): the same vectors as
//! in-process inference, the worker's exit after the idle period, a crash that gives a clear error and a
//! new worker for the next request, and the worker's refusal of frames past their bounds.

mod memory_support;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use memory_support::{cosine, embedder_settings, open_embedder};
use pincer::memory::worker::{WorkerEmbedder, MAX_FRAME_BYTES};
use pincer::memory::Embedder;

const PINCER: &str = env!("CARGO_BIN_EXE_pincer");

fn worker_embedder(idle_unload: Duration) -> Arc<WorkerEmbedder> {
    WorkerEmbedder::open(embedder_settings(idle_unload), Path::new(PINCER)).expect("open")
}

fn alive(pid: u32) -> bool {
    // A reaped process has no /proc entry; a zombie would show state Z.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| !stat.split(") ").nth(1).unwrap_or("").starts_with('Z'))
}

fn signal(pid: u32, signal: i32) {
    // SAFETY: signals only the worker this test's embedder started.
    unsafe { libc::kill(pid as i32, signal) };
}

const SENTENCES: [&str; 3] = [
    "The cat sits on the mat.",
    "A kitten is resting on a rug.",
    "Quarterly revenue grew by ten percent.",
];

#[test]
fn the_worker_gives_the_vectors_in_process_inference_gives() {
    let worker = worker_embedder(Duration::from_secs(300));
    assert!(
        !worker.is_loaded(),
        "nothing starts before the first embedding"
    );
    let remote = worker.embed(&SENTENCES).expect("embed in the worker");
    let local = open_embedder(Duration::from_secs(300))
        .embed(&SENTENCES)
        .expect("embed in-process");
    for (a, b) in remote.iter().zip(&local) {
        assert_eq!(a.len(), 384);
        assert!(cosine(a, b) > 0.9999, "{}", cosine(a, b));
    }
    assert!(worker.is_loaded());
    assert_eq!(worker.spawns(), 1);
    assert_eq!(worker.inferences(), 3);
    // More inputs than one request carries are split across requests, in order.
    let many: Vec<String> = (0..150).map(|i| format!("note number {i}")).collect();
    let refs: Vec<&str> = many.iter().map(String::as_str).collect();
    let vectors = worker.embed(&refs).expect("embed many");
    assert_eq!(vectors.len(), 150);
    let last = worker.embed(&[refs[149]]).expect("embed one");
    assert!(cosine(&vectors[149], &last[0]) > 0.9999);
    assert_eq!(worker.spawns(), 1, "one worker served every request");
}

#[test]
fn the_worker_exits_after_the_idle_period_and_comes_back_on_demand() {
    let worker = worker_embedder(Duration::from_millis(400));
    worker.embed(&SENTENCES[..1]).expect("embed");
    let pid = worker.worker_pid().expect("a worker runs");
    let deadline = Instant::now() + Duration::from_secs(10);
    while worker.is_loaded() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !worker.is_loaded(),
        "the worker was stopped after the idle period"
    );
    // The slot empties before the worker is asked to exit and reaped (within its grace period).
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!alive(pid), "the worker process {pid} is gone and reaped");
    worker.embed(&SENTENCES[..1]).expect("embed again");
    assert_eq!(worker.spawns(), 2);
}

#[test]
fn a_worker_crash_fails_the_request_in_flight_clearly_and_the_next_one_starts_a_new_worker() {
    let worker = worker_embedder(Duration::from_secs(300));
    worker.embed(&SENTENCES[..1]).expect("first embedding");
    let pid = worker.worker_pid().expect("a worker runs");
    // Stopped, the worker cannot answer; it then aborts (as the runtime does on a failed assertion) while
    // the request waits. (A SIGSEGV sent by kill would not do: Rust's stack-overflow handler catches it.)
    signal(pid, libc::SIGSTOP);
    let waiting = {
        let worker = worker.clone();
        std::thread::spawn(move || worker.embed(&SENTENCES[1..2]))
    };
    std::thread::sleep(Duration::from_millis(300));
    signal(pid, libc::SIGABRT);
    signal(pid, libc::SIGCONT);
    let error = waiting
        .join()
        .expect("the request returns")
        .map(|vectors| vectors.len())
        .expect_err("the worker died under it")
        .to_string();
    assert!(error.contains(&format!("pid {pid}")), "{error}");
    assert!(error.contains("killed by signal 6 (SIGABRT)"), "{error}");
    assert!(error.contains("next request starts a new one"), "{error}");
    assert!(!alive(pid));
    let vectors = worker
        .embed(&SENTENCES[1..2])
        .expect("a new worker answers");
    assert_eq!(vectors[0].len(), 384);
    assert_eq!(worker.spawns(), 2);
    assert_ne!(worker.worker_pid(), Some(pid));

    // A worker killed while idle is replaced without failing the next request.
    let second = worker.worker_pid().expect("the second worker");
    signal(second, libc::SIGKILL);
    std::thread::sleep(Duration::from_millis(100));
    worker
        .embed(&SENTENCES[..1])
        .expect("a third worker answers");
    assert_eq!(worker.spawns(), 3);
}

/// Runs `pincer embed-worker` on `input`; returns its exit status, stdout and stderr.
fn run_worker(input: &[u8]) -> (std::process::ExitStatus, Vec<u8>, String) {
    let mut child = Command::new(PINCER)
        .arg("embed-worker")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the worker");
    let mut stdin = child.stdin.take().expect("stdin");
    // The worker may stop reading early (that is the point): a broken pipe here is fine.
    let _ = stdin.write_all(input);
    drop(stdin);
    let mut stdout = Vec::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_end(&mut stdout)
        .expect("stdout");
    let output = child.wait_with_output().expect("wait");
    (
        output.status,
        stdout,
        String::from_utf8_lossy(&output.stderr).into(),
    )
}

#[test]
fn the_worker_refuses_a_frame_past_its_bound_and_another_builds_protocol() {
    let mut oversized = ((MAX_FRAME_BYTES + 1) as u32).to_le_bytes().to_vec();
    oversized.extend_from_slice(&[0; 64]);
    let (status, stdout, stderr) = run_worker(&oversized);
    assert!(!status.success(), "{status}");
    assert!(stdout.is_empty());
    assert!(
        stderr.contains(&format!("a frame of {} bytes", MAX_FRAME_BYTES + 1)),
        "{stderr}"
    );

    // A hello of protocol version 99 is answered with a refusal that says why.
    let mut hello = vec![b'H'];
    hello.extend_from_slice(&99u32.to_le_bytes());
    hello.extend_from_slice(br#"{"runtimeLibrary":"/x","modelDir":"/y","intraThreads":1,"batchSize":1,"maxSequenceTokens":8}"#);
    let mut framed = (hello.len() as u32).to_le_bytes().to_vec();
    framed.extend_from_slice(&hello);
    let (status, stdout, _) = run_worker(&framed);
    assert!(status.success(), "{status}");
    let answer = String::from_utf8_lossy(&stdout);
    assert!(answer.contains("protocol version 99"), "{answer}");
}

#[test]
fn an_embedder_in_the_worker_and_one_in_process_agree_on_similarity() {
    let worker = worker_embedder(Duration::from_secs(300));
    let vectors = worker.embed(&SENTENCES).expect("embed");
    assert!(cosine(&vectors[0], &vectors[1]) > 0.5);
    assert!(cosine(&vectors[0], &vectors[2]) < 0.2);
}
