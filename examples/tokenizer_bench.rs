//! Tokenizer benchmark: the compact WordPiece tokenizer (`pincer::memory::wordpiece`) against the
//! `tokenizers` crate on the same `tokenizer.json` (all-MiniLM-L6-v2 from `scripts/setup memory`), one of
//! them per process so each RSS is its own: RSS (and its anonymous part) before and after loading, then
//! tokens/s encoding memory_bench's generated notes plus a mixed-script paragraph. It reports numbers only.
//!
//! `cargo run --example tokenizer_bench -- --tokenizer wordpiece|hf [--notes 2000] [--rounds 5]`

use std::time::Instant;

use pincer::memory::wordpiece::WordPieceTokenizer;

const WORDS: [&str; 12] = [
    "garden", "kettle", "river", "invoice", "dentist", "bicycle", "concert", "passport", "recipe",
    "landlord", "holiday", "battery",
];
const MIXED: &str = "Café naïve Ångström — 我妹妹下个月在杭州结婚。東京タワー 안녕하세요 https://example.com/a?b=c 3.14 😀";

/// Notes shaped like memory_bench's (number, day, five topic words), then one mixed-script paragraph.
fn corpus(notes: usize) -> Vec<String> {
    let mut texts: Vec<String> = (0..notes)
        .map(|i| {
            let w = |k: usize| WORDS[(i * 7 + k * 13 + i / 12) % WORDS.len()];
            format!(
                "Note {i}: on day {} I dealt with the {} and the {}, then talked about the {} near the {} before {}.",
                i % 365, w(1), w(2), w(3), w(4), w(5)
            )
        })
        .collect();
    texts.push(MIXED.repeat(20));
    texts
}

fn status_mib(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut kind, mut notes, mut rounds) = ("wordpiece".to_string(), 2000usize, 5usize);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_default();
        match flag.as_str() {
            "--tokenizer" => kind = value,
            "--notes" => notes = value.parse().unwrap_or(notes),
            "--rounds" => rounds = value.parse().unwrap_or(rounds),
            other => panic!("unknown flag {other}"),
        }
    }
    let board = pincer::system::board::EmbedderProfile {
        threads: 1,
        batch: 1,
    };
    let local = pincer::memory::embedder::LocalAssets::default();
    let path = pincer::memory::embedder::EmbedderSettings::resolve(local, None, &board)
        .model_dir
        .join("tokenizer.json");
    let texts = corpus(notes);
    let (rss, anon) = (status_mib("VmRSS:"), status_mib("RssAnon:"));
    let encode: Box<dyn Fn(&str) -> usize> = match kind.as_str() {
        "wordpiece" => {
            let tokenizer = WordPieceTokenizer::from_file(&path).expect("WordPiece tokenizer.json");
            println!(
                "wordpiece: {} vocabulary entries, {} KiB on the heap",
                tokenizer.vocab_size(),
                tokenizer.heap_bytes() / 1024
            );
            Box::new(move |text| tokenizer.encode(text, true).len())
        }
        "hf" => {
            let mut tokenizer = tokenizers::Tokenizer::from_file(&path).expect("tokenizer.json");
            tokenizer.with_padding(None);
            tokenizer.with_truncation(None).expect("no truncation");
            Box::new(move |text| tokenizer.encode(text, true).expect("encode").len())
        }
        other => panic!("unknown tokenizer {other} (wordpiece or hf)"),
    };
    println!(
        "{kind}: tokenizer loaded: RSS {:.1} MiB (anon {:.1} MiB), before {rss:.1} MiB (anon {anon:.1} MiB)",
        status_mib("VmRSS:"),
        status_mib("RssAnon:")
    );
    let started = Instant::now();
    let mut tokens = 0usize;
    for _ in 0..rounds {
        tokens += texts.iter().map(|t| encode(t)).sum::<usize>();
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{kind}: {tokens} tokens in {seconds:.2} s = {:.0} tokens/s ({} texts × {rounds} rounds); peak RSS {:.1} MiB",
        tokens as f64 / seconds,
        texts.len(),
        status_mib("VmHWM:")
    );
}
