//! The streaming chunker's memory bound on a 200 MB file: a child process (this test binary, re-run) chunks
//! the file with its data segment capped at 64 MiB (`RLIMIT_DATA`), so holding the file — or anything like
//! it — in memory would fail the allocation and the child.

use std::io::{BufReader, BufWriter, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::Command;

use pincer::memory::chunker::{StreamingChunker, WordCounter, MAX_LINE_PIECE_BYTES};

const FILE_BYTES: u64 = 200 * 1024 * 1024;
const DATA_LIMIT_BYTES: u64 = 64 * 1024 * 1024;
const CHILD_ENV: &str = "PINCER_CHUNKER_CHILD_FILE";
const CHUNK_TOKENS: usize = 400;

fn write_large_markdown(path: &std::path::Path) {
    let mut out = BufWriter::new(std::fs::File::create(path).expect("create"));
    let mut written = 0u64;
    let mut i = 0u64;
    while written < FILE_BYTES {
        let block = if i % 50 == 0 {
            format!("\n## Day {i}\n\n")
        } else if i % 997 == 0 {
            // Now and then a very long line, read in pieces.
            format!("{}\n", "long ".repeat(5_000))
        } else {
            format!("Entry {i}: walked the dog, watered the plants and wrote a short note.\n")
        };
        out.write_all(block.as_bytes()).expect("write");
        written += block.len() as u64;
        i += 1;
    }
    out.flush().expect("flush");
}

/// Sets the 64 MiB data limit in the child about to run.
fn cap_data(child: &mut Command) {
    // SAFETY: setrlimit is async-signal-safe and touches only the child's limits.
    unsafe {
        child.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: DATA_LIMIT_BYTES,
                rlim_max: DATA_LIMIT_BYTES,
            };
            if libc::setrlimit(libc::RLIMIT_DATA, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The capped child of the test below: chunks the whole file and prints what it saw.
#[test]
#[ignore = "child of chunking_a_200_mb_file_stays_within_a_64_mib_data_limit"]
fn chunk_in_child() {
    let path = std::env::var(CHILD_ENV)
        .expect("run by chunking_a_200_mb_file_stays_within_a_64_mib_data_limit");
    let file = std::fs::File::open(path).expect("open");
    let mut chunker = StreamingChunker::new(BufReader::new(file), &WordCounter, CHUNK_TOKENS, 80);
    let (mut chunks, mut last_line) = (0u64, 0u32);
    for chunk in chunker.by_ref() {
        let chunk = chunk.expect("chunk");
        assert!(chunk.tokens <= CHUNK_TOKENS);
        assert!(chunk.end_line >= last_line);
        last_line = chunk.end_line;
        chunks += 1;
    }
    println!(
        "CHILD chunks={chunks} last_line={last_line} peak_buffered={}",
        chunker.peak_buffered_bytes()
    );
}

#[test]
fn chunking_a_200_mb_file_stays_within_a_64_mib_data_limit() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("huge.md");
    write_large_markdown(&path);
    let exe = std::env::current_exe().expect("test binary");
    let mut child = Command::new(exe);
    child
        .args([
            "--ignored",
            "--exact",
            "chunk_in_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &path);
    cap_data(&mut child);
    let output = child.output().expect("run child");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| l.find("CHILD ").map(|at| &l[at..]))
        .expect("child report");
    let field = |name: &str| -> u64 {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .and_then(|v| v.parse().ok())
            .expect("field")
    };
    assert!(field("chunks") > 100_000, "{line}");
    assert!(field("last_line") > 2_000_000, "{line}");
    // One chunk of 400 words of this text is < 4 KB; with overlap and one pending line piece it stays small.
    assert!(
        field("peak_buffered") <= 4 * MAX_LINE_PIECE_BYTES as u64,
        "{line}"
    );
}

/// What Rust's allocator prints before aborting when the 200 MB allocation fails.
const ALLOCATION_FAILED: &str = "memory allocation of 209715200 bytes failed";

#[test]
fn the_data_limit_would_catch_a_reader_that_loads_the_file() {
    // The control for the test above: under the same cap, allocating 200 MB at once must fail,
    // and fail at that allocation (not because the child could not start or run).
    let exe = std::env::current_exe().expect("test binary");
    let mut child = Command::new(exe);
    child
        .args([
            "--ignored",
            "--exact",
            "allocating_200_mb_in_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ALLOC_CHILD_ENV, "1");
    cap_data(&mut child);
    let output = child.output().expect("run child");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stdout.contains(ALLOC_CHILD_STARTED),
        "the child never reached the allocation:\n{stdout}\n{stderr}"
    );
    assert!(
        stderr.contains(ALLOCATION_FAILED),
        "the child did not fail at the 200 MB allocation ({}):\n{stdout}\n{stderr}",
        output.status
    );
    assert_eq!(
        output.status.signal(),
        Some(libc::SIGABRT),
        "a failed allocation aborts: {}",
        output.status
    );
}

const ALLOC_CHILD_ENV: &str = "PINCER_CHUNKER_ALLOC_CHILD";
const ALLOC_CHILD_STARTED: &str = "ALLOC-CHILD allocating";

/// The capped child of the control above: allocates the whole file's size at once.
#[test]
#[ignore = "child of the_data_limit_would_catch_a_reader_that_loads_the_file"]
fn allocating_200_mb_in_child() {
    std::env::var(ALLOC_CHILD_ENV)
        .expect("run by the_data_limit_would_catch_a_reader_that_loads_the_file");
    println!("{ALLOC_CHILD_STARTED}");
    let buffer = vec![1u8; FILE_BYTES as usize];
    assert_eq!(
        buffer.iter().map(|&b| u64::from(b)).sum::<u64>(),
        FILE_BYTES
    );
}
