//! Memory search benchmarks, run by `scripts/bench`: real embeddings (ONNX Runtime + the int8
//! all-MiniLM-L6-v2 from `scripts/setup memory`) over generated notes, one chunk each: a sentence about a
//! few topic words (which the queries ask for) and five words drawn from the whole vocabulary, so the
//! model's token-embedding table is read across as real notes read it.
//!
//! For each corpus size it reports:
//! - indexing throughput in chunks/s (chunking, embedding, LMDB writes, one sync),
//! - peak RSS of the process so far (`VmHWM`), i.e. while indexing, and the RSS right after split into
//!   anonymous memory and file-backed pages (the ONNX Runtime library's code, LMDB's memory map),
//! - query embedding latency p50/p95 (the model alone),
//! - hybrid query latency p50/p95 excluding the query embedding (vector scan + BM25 + merge, with the query
//!   vectors embedded beforehand), wall clock and the thread's CPU time (they differ on a busy machine),
//!
//! and at the start the RSS once the tokenizer is loaded, at the end the RSS after the model's idle unload.
//! It reports numbers only; it must not judge them.
//!
//! `cargo run --release --example memory_bench -- [--sizes 1000,10000] [--queries 200] [--threads 1] [--batch 8]
//! [--dir DIR]` (with `--dir` the corpora and indexes stay in DIR and a second run only searches).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pincer::config::schema::memory::MemorySearchConfig;
use pincer::memory::embedder::{EmbedderSettings, LocalAssets, OnnxEmbedder};
use pincer::memory::{EmbedError, Embedder, MemoryService};
use pincer::store::{Store, StoreOptions};

const WORDS: [&str; 48] = [
    "garden",
    "kettle",
    "river",
    "invoice",
    "dentist",
    "bicycle",
    "concert",
    "passport",
    "recipe",
    "landlord",
    "holiday",
    "battery",
    "library",
    "meeting",
    "password",
    "doctor",
    "harbour",
    "violin",
    "pharmacy",
    "birthday",
    "mortgage",
    "printer",
    "mountain",
    "ferry",
    "museum",
    "plumber",
    "insurance",
    "tomato",
    "lantern",
    "blanket",
    "umbrella",
    "airport",
    "cinema",
    "bakery",
    "festival",
    "notebook",
    "keyboard",
    "window",
    "ticket",
    "market",
    "island",
    "bridge",
    "school",
    "village",
    "forest",
    "station",
    "castle",
    "orchard",
];

/// Whole words of the model's vocabulary (from `tokenizer.json`), so the notes reach across the token
/// embedding table as real notes do, instead of the few rows of the 48 topic words.
fn vocabulary(model_dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(model_dir.join("tokenizer.json")).expect("tokenizer.json");
    let json: serde_json::Value = serde_json::from_str(&text).expect("tokenizer.json is JSON");
    let mut words: Vec<String> = json["model"]["vocab"]
        .as_object()
        .expect("a WordPiece vocabulary")
        .keys()
        .filter(|w| w.len() >= 4 && w.chars().all(|c| c.is_ascii_lowercase()))
        .cloned()
        .collect();
    words.sort();
    words
}

/// Note `i`: a sentence about topic words (what the queries ask for) plus five words drawn from `vocabulary`.
fn note(i: usize, vocabulary: &[String]) -> String {
    let w = |k: usize| WORDS[(i * 7 + k * 13 + i / 48) % WORDS.len()];
    let v = |k: u64| {
        let mixed = (i as u64 * 5 + k).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 17;
        &vocabulary[mixed as usize % vocabulary.len()]
    };
    format!(
        "Note {i}: on day {} I dealt with the {} and the {}, then talked about the {} near the {} before {}. Also: {} {} {} {} {}.",
        i % 365,
        w(1),
        w(2),
        w(3),
        w(4),
        w(5),
        v(0),
        v(1),
        v(2),
        v(3),
        v(4)
    )
}

fn query(i: usize) -> String {
    let w = |k: usize| WORDS[(i * 11 + k * 5) % WORDS.len()];
    format!("what happened with the {} and the {}", w(1), w(2))
}

fn proc_status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// CPU time this thread has used (the search runs on it), so scheduling delays on a busy machine show apart.
fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the struct we own.
    unsafe {
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now);
    }
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index].as_secs_f64() * 1000.0
}

/// Answers queries from vectors embedded beforehand, so search timing excludes the model.
struct PrecomputedQueries {
    key: String,
    dims: usize,
    vectors: HashMap<String, Vec<f32>>,
}

impl Embedder for PrecomputedQueries {
    fn key(&self) -> &str {
        &self.key
    }
    fn dimensions(&self) -> usize {
        self.dims
    }
    fn max_input_tokens(&self) -> usize {
        254
    }
    fn count_tokens(&self, text: &str) -> usize {
        text.split_whitespace().count()
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        texts
            .iter()
            .map(|t| {
                self.vectors
                    .get(*t)
                    .cloned()
                    .ok_or_else(|| EmbedError::Inference(format!("query not precomputed: {t}")))
            })
            .collect()
    }
    fn batch_size(&self) -> usize {
        1
    }
    fn inferences(&self) -> u64 {
        0
    }
    fn is_loaded(&self) -> bool {
        true
    }
}

struct Args {
    sizes: Vec<usize>,
    queries: usize,
    threads: usize,
    batch: usize,
    /// Keeps the corpora and indexes here (reused by the next run) instead of a temp dir.
    dir: Option<std::path::PathBuf>,
}

fn parse_args() -> Args {
    let mut args = Args {
        sizes: vec![1000, 10_000],
        queries: 200,
        threads: 1,
        batch: 8,
        dir: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_default();
        match flag.as_str() {
            "--sizes" => args.sizes = value.split(',').filter_map(|v| v.parse().ok()).collect(),
            "--queries" => args.queries = value.parse().unwrap_or(args.queries),
            "--threads" => args.threads = value.parse().unwrap_or(args.threads),
            "--batch" => args.batch = value.parse().unwrap_or(args.batch),
            "--dir" => args.dir = Some(value.into()),
            other => panic!("unknown flag {other}"),
        }
    }
    args
}

fn settings(args: &Args) -> EmbedderSettings {
    // Found the way the gateway finds them (variables, else where `scripts/setup memory` installs).
    let board = pincer::system::board::EmbedderProfile {
        threads: args.threads,
        batch: args.batch,
    };
    EmbedderSettings {
        idle_unload: Duration::from_secs(3),
        ..EmbedderSettings::resolve(LocalAssets::default(), None, &board)
    }
}

fn bench_size(embedder: &Arc<OnnxEmbedder>, size: usize, args: &Args) {
    let temp = tempfile::tempdir().expect("temp dir");
    let root = match &args.dir {
        Some(dir) => dir.join(size.to_string()),
        None => temp.path().to_path_buf(),
    };
    let workspace = root.join("workspace");
    std::fs::create_dir_all(workspace.join("memory")).expect("mkdir");
    let vocabulary = vocabulary(&settings(args).model_dir);
    for i in 0..size {
        let path = workspace.join(format!("memory/n{i:05}.md"));
        if !path.exists() {
            std::fs::write(path, note(i, &vocabulary)).expect("note");
        }
    }
    let store = Store::open(&root.join("store"), StoreOptions::default()).expect("store");
    let resolved = MemorySearchConfig::default().resolve();
    let service = MemoryService::new(
        store.clone(),
        "bench",
        workspace.clone(),
        resolved.clone(),
        Ok(embedder.clone() as Arc<dyn Embedder>),
    );
    let started = Instant::now();
    let report = service.sync(false, &mut |_| {}).expect("index");
    let seconds = started.elapsed().as_secs_f64();
    let mib = |field: &str| proc_status_kib(field) as f64 / 1024.0;
    println!(
        "memory {size:>6} chunks: indexing {:.1} chunks/s ({} chunks in {seconds:.1} s), peak RSS {:.1} MiB; RSS now {:.1} MiB = {:.1} anonymous + {:.1} file-backed (runtime library, LMDB map)",
        report.chunks_written as f64 / seconds,
        report.chunks_written,
        mib("VmHWM:"),
        mib("VmRSS:"),
        mib("RssAnon:"),
        mib("RssFile:")
    );
    let queries: Vec<String> = (0..args.queries).map(query).collect();
    let mut embed_times = Vec::new();
    let mut vectors = HashMap::new();
    for q in &queries {
        let t = Instant::now();
        let v = embedder
            .embed(&[q.as_str()])
            .expect("embed query")
            .remove(0);
        embed_times.push(t.elapsed());
        vectors.insert(q.clone(), v);
    }
    let precomputed: Arc<dyn Embedder> = Arc::new(PrecomputedQueries {
        key: embedder.key().to_string(),
        dims: embedder.dimensions(),
        vectors,
    });
    let searcher = MemoryService::new(store, "bench", workspace, resolved, Ok(precomputed));
    let (mut search_times, mut search_cpu) = (Vec::new(), Vec::new());
    for q in &queries {
        let options = searcher.search_options(None, None);
        let (t, cpu) = (Instant::now(), thread_cpu_time());
        searcher.search_with(q, &options).expect("search");
        search_times.push(t.elapsed());
        search_cpu.push(thread_cpu_time().saturating_sub(cpu));
    }
    for times in [&mut embed_times, &mut search_times, &mut search_cpu] {
        times.sort();
    }
    println!(
        "memory {size:>6} chunks: query embedding p50 {:.2} ms p95 {:.2} ms; hybrid search excl. embedding p50 {:.2} ms p95 {:.2} ms (CPU time p50 {:.2} ms p95 {:.2} ms)",
        percentile(&embed_times, 0.5),
        percentile(&embed_times, 0.95),
        percentile(&search_times, 0.5),
        percentile(&search_times, 0.95),
        percentile(&search_cpu, 0.5),
        percentile(&search_cpu, 0.95)
    );
}

fn main() {
    let args = parse_args();
    let embedder =
        OnnxEmbedder::open(settings(&args)).expect("open embedder (run scripts/setup memory)");
    println!(
        "memory bench: model {}, {} intra-op thread(s), batch {}",
        embedder.key(),
        args.threads,
        args.batch
    );
    let rss_before_tokenizer = proc_status_kib("VmRSS:");
    // The first count loads the model's tokenizer (the compact WordPiece one for a BERT tokenizer.json).
    embedder.count_tokens("warm-up: load the tokenizer");
    println!(
        "tokenizer loaded: RSS {:.1} MiB (anon {:.1} MiB), {:.1} MiB before",
        proc_status_kib("VmRSS:") as f64 / 1024.0,
        proc_status_kib("RssAnon:") as f64 / 1024.0,
        rss_before_tokenizer as f64 / 1024.0
    );
    let before = proc_status_kib("VmHWM:");
    embedder
        .embed(&["warm-up: load the model"])
        .expect("load model");
    println!(
        "memory: RSS before model load {:.1} MiB; after load + one inference: RSS {:.1} MiB, peak {:.1} MiB",
        before as f64 / 1024.0,
        proc_status_kib("VmRSS:") as f64 / 1024.0,
        proc_status_kib("VmHWM:") as f64 / 1024.0
    );
    for &size in &args.sizes {
        bench_size(&embedder, size, &args);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while embedder.is_loaded() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    println!(
        "memory: RSS after idle unload {:.1} MiB (model loaded: {}, loads: {})",
        proc_status_kib("VmRSS:") as f64 / 1024.0,
        embedder.is_loaded(),
        embedder.loads()
    );
}
