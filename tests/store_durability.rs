//! Durability of acknowledged writes under `kill -9`.
//!
//! The test re-executes its own binary as the writer: with `WRITER_DIR_ENV` set, the test function opens the
//! store and writes records (sessions, transcript entries, devices, dedupe entries; some large enough for
//! overflow pages) in bursts, printing each record's identity on stdout only after the store call returned.
//! The parent SIGKILLs it at a random moment — after a random delay (sometimes before the store is even open) or
//! right as the N-th acknowledgement arrives (so mostly in the middle of the next write) — then reopens the
//! store and checks that it opens cleanly, that every acknowledged record from every round is present and
//! intact, and that it still accepts writes. The writer starts from a small map, so kills also land while the
//! map grows. Besides the main writer thread, `TURN_LANES` threads record turns (`Store::record_turn`) at the
//! same time, so their writes share group commits (`store/group_commit.rs`): a write acknowledged from a
//! shared transaction must survive like any other. Set `PINCER_DURABILITY_SEED` to replay a run.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pincer::store::{
    DeviceRecord, DeviceToken, SessionEntry, SessionOrigin, Store, StoreOptions, TranscriptEntry,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const TEST_NAME: &str = "acknowledged_writes_survive_sigkill";
const WRITER_DIR_ENV: &str = "PINCER_DURABILITY_WRITER_DIR";
const WRITER_ROUND_ENV: &str = "PINCER_DURABILITY_WRITER_ROUND";
const WRITER_SEED_ENV: &str = "PINCER_DURABILITY_WRITER_SEED";
const SEED_ENV: &str = "PINCER_DURABILITY_SEED";
const ACK_PREFIX: &str = "ACK";
/// Threads recording turns next to the main writer, each in a session of its own.
const TURN_LANES: u64 = 3;
const ROUNDS: u32 = 36;
/// Longest random delay before the kill in delay rounds.
const MAX_KILL_DELAY_MS: u64 = 150;
/// Most acknowledgements to wait for in count rounds.
const MAX_KILL_AFTER_ACKS: usize = 60;
/// A writer stops by itself after this long, so a failed kill cannot hang the test.
const WRITER_LIFETIME: Duration = Duration::from_secs(10);
/// How long the parent waits for the acknowledgements of a count round before killing anyway.
const ACK_WAIT: Duration = Duration::from_secs(5);
/// Every this many writes, a record carries this much extra text (overflow pages).
const LARGE_RECORD_EVERY: u64 = 7;
const LARGE_RECORD_BYTES: usize = 20_000;

fn writer_options() -> StoreOptions {
    StoreOptions {
        lock_dir: None,
        max_disk_bytes: 256 * 1024 * 1024,
        initial_map_bytes: 64 * 1024,
    }
}

/// What one acknowledged write stored, enough to rebuild the exact record.
#[derive(Clone, Debug, PartialEq)]
enum Ack {
    Session {
        round: u32,
        index: u64,
    },
    Transcript {
        round: u32,
        index: u64,
        seq: u64,
    },
    Device {
        round: u32,
        index: u64,
    },
    Dedupe {
        round: u32,
        index: u64,
    },
    /// A turn recorded by lane `lane`: transcript entry `index` at `seq`, the session's entry updated with it.
    Turn {
        round: u32,
        index: u64,
        lane: u64,
        seq: u64,
    },
}

impl Ack {
    fn line(&self) -> String {
        match self {
            Ack::Session { round, index } => format!("{ACK_PREFIX} session {round} {index}"),
            Ack::Transcript { round, index, seq } => {
                format!("{ACK_PREFIX} transcript {round} {index} {seq}")
            }
            Ack::Device { round, index } => format!("{ACK_PREFIX} device {round} {index}"),
            Ack::Dedupe { round, index } => format!("{ACK_PREFIX} dedupe {round} {index}"),
            Ack::Turn {
                round,
                index,
                lane,
                seq,
            } => format!("{ACK_PREFIX} turn {round} {index} {lane} {seq}"),
        }
    }

    fn parse(line: &str) -> Option<Ack> {
        let mut words = line.split_whitespace();
        if words.next()? != ACK_PREFIX {
            return None;
        }
        let kind = words.next()?;
        let round = words.next()?.parse().ok()?;
        let index = words.next()?.parse().ok()?;
        match kind {
            "session" => Some(Ack::Session { round, index }),
            "transcript" => Some(Ack::Transcript {
                round,
                index,
                seq: words.next()?.parse().ok()?,
            }),
            "device" => Some(Ack::Device { round, index }),
            "dedupe" => Some(Ack::Dedupe { round, index }),
            "turn" => Some(Ack::Turn {
                round,
                index,
                lane: words.next()?.parse().ok()?,
                seq: words.next()?.parse().ok()?,
            }),
            _ => None,
        }
    }
}

fn filler(round: u32, index: u64) -> String {
    let extra = if index % LARGE_RECORD_EVERY == 0 {
        LARGE_RECORD_BYTES
    } else {
        0
    };
    format!("r{round}i{index}-").repeat(1 + extra / 8)
}

fn session_key(round: u32, index: u64) -> String {
    format!("agent:main:durability:{round}:{index}")
}

fn session_entry(round: u32, index: u64) -> SessionEntry {
    SessionEntry {
        input_tokens: index,
        total_tokens: u64::from(round) * 1_000 + index,
        label: Some(filler(round, index)),
        origin: Some(SessionOrigin {
            from: Some(format!("peer-{index}")),
            ..SessionOrigin::default()
        }),
        ..SessionEntry::new(format!("sid-{round}-{index}"), 1_700_000_000_000 + index)
    }
}

fn transcript_session(round: u32) -> String {
    format!("transcript-{round}")
}

fn transcript_entry(round: u32, index: u64) -> TranscriptEntry {
    TranscriptEntry {
        role: if index % 2 == 0 { "user" } else { "assistant" }.to_string(),
        text: filler(round, index),
        timestamp_ms: index,
        run_id: Some(format!("run-{round}")),
        ..TranscriptEntry::default()
    }
}

fn turn_session_key(round: u32, lane: u64) -> String {
    format!("agent:main:group:{round}:{lane}")
}

fn turn_session_id(round: u32, lane: u64) -> String {
    format!("turn-{round}-{lane}")
}

/// One lane's turns, acknowledged as their store calls return, until the writer's lifetime ends.
fn run_turn_lane(store: &Store, round: u32, lane: u64, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed ^ lane);
    let started = Instant::now();
    let mut index = 0u64;
    while started.elapsed() < WRITER_LIFETIME {
        let seq = store
            .record_turn(
                &turn_session_key(round, lane),
                &turn_session_id(round, lane),
                Some(&transcript_entry(round, index)),
                move |current| {
                    let mut entry = current
                        .unwrap_or_else(|| SessionEntry::new(turn_session_id(round, lane), 1));
                    entry.input_tokens = index;
                    Some(entry)
                },
            )
            .expect("record turn")
            .expect("an entry was given");
        let line = Ack::Turn {
            round,
            index,
            lane,
            seq,
        }
        .line();
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}").expect("stdout");
        out.flush().expect("flush stdout");
        index += 1;
        thread::sleep(Duration::from_micros(rng.gen_range(0..500)));
    }
}

fn device_id(round: u32, index: u64) -> String {
    format!("device-{round}-{index}")
}

fn device_record(round: u32, index: u64) -> DeviceRecord {
    DeviceRecord {
        device_id: device_id(round, index),
        public_key: filler(round, index),
        roles: vec!["operator".to_string()],
        tokens: vec![DeviceToken {
            token_hash: format!("{index:064x}"),
            role: "operator".to_string(),
            issued_at_ms: index,
            ..DeviceToken::default()
        }],
        created_at_ms: index,
        ..DeviceRecord::default()
    }
}

fn dedupe_key(round: u32, index: u64) -> String {
    format!("chat:{round}:{index}")
}

fn dedupe_value(round: u32, index: u64) -> Vec<u8> {
    filler(round, index).into_bytes()
}

/// The writer side: writes in bursts until killed, acknowledging each write after its store call returned.
fn run_writer(dir: &Path, round: u32, seed: u64) {
    let store = Store::open(dir, writer_options()).expect("writer opens the store");
    for lane in 0..TURN_LANES {
        let store = store.clone();
        thread::spawn(move || run_turn_lane(&store, round, lane, seed));
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let stdout = std::io::stdout();
    let started = Instant::now();
    let mut index = 0u64;
    while started.elapsed() < WRITER_LIFETIME {
        for _ in 0..rng.gen_range(1..=24) {
            let ack = write_one(&store, round, index);
            let mut out = stdout.lock();
            writeln!(out, "{}", ack.line()).expect("stdout");
            out.flush().expect("flush stdout");
            index += 1;
        }
        thread::sleep(Duration::from_micros(rng.gen_range(0..2_000)));
    }
}

fn write_one(store: &Store, round: u32, index: u64) -> Ack {
    match index % 4 {
        0 => {
            store
                .put_session(&session_key(round, index), &session_entry(round, index))
                .expect("put session");
            Ack::Session { round, index }
        }
        1 => {
            let seq = store
                .append_transcript(&transcript_session(round), &transcript_entry(round, index))
                .expect("append transcript");
            Ack::Transcript { round, index, seq }
        }
        2 => {
            store
                .put_device(&device_record(round, index))
                .expect("put device");
            Ack::Device { round, index }
        }
        _ => {
            store
                .dedupe_put(
                    &dedupe_key(round, index),
                    u64::MAX,
                    &dedupe_value(round, index),
                )
                .expect("dedupe put");
            Ack::Dedupe { round, index }
        }
    }
}

/// When a round's writer dies.
#[derive(Clone, Copy, Debug)]
enum KillPoint {
    AfterDelay(Duration),
    AtAck(usize),
}

fn spawn_writer(dir: &Path, round: u32, seed: u64) -> Child {
    Command::new(std::env::current_exe().expect("test binary path"))
        .args([
            TEST_NAME,
            "--exact",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .env(WRITER_DIR_ENV, dir)
        .env(WRITER_ROUND_ENV, round.to_string())
        .env(WRITER_SEED_ENV, seed.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn writer")
}

/// Runs one writer, kills it at `kill`, and returns every acknowledgement it printed before dying.
fn run_round(dir: &Path, round: u32, seed: u64, kill: KillPoint) -> Vec<Ack> {
    let mut child = spawn_writer(dir, round, seed);
    let stdout = child.stdout.take().expect("writer stdout");
    let (sender, receiver) = mpsc::channel();
    let reader = thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(ack) = Ack::parse(&line) {
                if sender.send(ack).is_err() {
                    break;
                }
            }
        }
    });
    let mut acks = Vec::new();
    match kill {
        KillPoint::AfterDelay(delay) => thread::sleep(delay),
        KillPoint::AtAck(count) => {
            let deadline = Instant::now() + ACK_WAIT;
            while acks.len() < count {
                let left = deadline.saturating_duration_since(Instant::now());
                match receiver.recv_timeout(left) {
                    Ok(ack) => acks.push(ack),
                    Err(_) => break,
                }
            }
        }
    }
    child.kill().expect("SIGKILL the writer");
    let status = child.wait().expect("reap the writer");
    assert!(
        !status.success(),
        "round {round}: the writer finished on its own instead of being killed"
    );
    reader.join().expect("reader thread");
    acks.extend(receiver.try_iter());
    acks
}

/// Checks that the store opens cleanly, holds every acknowledged record intact and still takes writes.
fn verify(dir: &Path, acknowledged: &[Ack], round: u32) {
    let store = Store::open(dir, writer_options()).unwrap_or_else(|error| {
        panic!("round {round}: store does not reopen after SIGKILL: {error}")
    });
    let mut transcripts: std::collections::HashMap<u32, Vec<(u64, TranscriptEntry)>> =
        Default::default();
    let mut turn_transcripts: std::collections::HashMap<(u32, u64), Vec<(u64, TranscriptEntry)>> =
        Default::default();
    for ack in acknowledged {
        let intact = match ack {
            Ack::Session { round, index } => {
                store
                    .session(&session_key(*round, *index))
                    .expect("read session")
                    == Some(session_entry(*round, *index))
            }
            Ack::Transcript { round, index, seq } => {
                let tail = transcripts.entry(*round).or_insert_with(|| {
                    store
                        .transcript_tail(&transcript_session(*round), usize::MAX)
                        .expect("read transcript")
                });
                tail.iter()
                    .any(|(s, entry)| s == seq && *entry == transcript_entry(*round, *index))
            }
            Ack::Device { round, index } => {
                store
                    .device(&device_id(*round, *index))
                    .expect("read device")
                    == Some(device_record(*round, *index))
            }
            Ack::Dedupe { round, index } => {
                store
                    .dedupe_get(&dedupe_key(*round, *index), 0)
                    .expect("read dedupe")
                    == Some(dedupe_value(*round, *index))
            }
            Ack::Turn {
                round,
                index,
                lane,
                seq,
            } => {
                let entries = turn_transcripts.entry((*round, *lane)).or_insert_with(|| {
                    store
                        .transcript_tail(&turn_session_id(*round, *lane), usize::MAX)
                        .expect("read turn transcript")
                });
                let session = store
                    .session(&turn_session_key(*round, *lane))
                    .expect("read turn session");
                entries
                    .iter()
                    .any(|(s, entry)| s == seq && *entry == transcript_entry(*round, *index))
                    && session.is_some_and(|entry| entry.input_tokens >= *index)
            }
        };
        assert!(
            intact,
            "after round {round}: acknowledged write {ack:?} is missing or damaged"
        );
    }
    store
        .put_meta("durability.last_verified_round", &round.to_be_bytes())
        .expect("store still accepts writes");
    store.stats().expect("stats after reopen");
}

fn seed() -> u64 {
    std::env::var(SEED_ENV)
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        })
}

#[test]
fn acknowledged_writes_survive_sigkill() {
    if let Ok(dir) = std::env::var(WRITER_DIR_ENV) {
        let round = std::env::var(WRITER_ROUND_ENV)
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(0);
        let seed = std::env::var(WRITER_SEED_ENV)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        run_writer(Path::new(&dir), round, seed);
        return;
    }
    let seed = seed();
    eprintln!("durability seed {seed} (set {SEED_ENV}={seed} to replay)");
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().expect("temp dir");
    let mut acknowledged = Vec::new();
    let mut rounds_with_acks = 0;
    for round in 0..ROUNDS {
        let kill = if round % 2 == 0 {
            KillPoint::AtAck(rng.gen_range(1..=MAX_KILL_AFTER_ACKS))
        } else {
            KillPoint::AfterDelay(Duration::from_millis(rng.gen_range(0..=MAX_KILL_DELAY_MS)))
        };
        let acks = run_round(dir.path(), round, rng.gen(), kill);
        if !acks.is_empty() {
            rounds_with_acks += 1;
        }
        acknowledged.extend(acks);
        verify(dir.path(), &acknowledged, round);
    }
    eprintln!(
        "{} acknowledged writes over {ROUNDS} rounds ({rounds_with_acks} with writes)",
        acknowledged.len()
    );
    // The kills must have landed among writes, not only before the first one.
    assert!(
        rounds_with_acks >= ROUNDS / 2,
        "only {rounds_with_acks} of {ROUNDS} rounds acknowledged writes"
    );
    assert!(
        acknowledged.len() >= 200,
        "only {} writes acknowledged in total",
        acknowledged.len()
    );
}
