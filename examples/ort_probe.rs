//! Probe (not a benchmark): RSS and peak RSS of ONNX Runtime session options on the memory model, the
//! measurements behind `memory::onnx`'s session settings. Prints RSS after loading the runtime, after the
//! session, after each of three inferences of `batch × seq` tokens, and after dropping the session.
//!
//! `ort_probe <opt 0|1|2|3> <mempattern 0|1> <prepack 0|1> <batch> <seq> <from_file 0|1> [mmap_threshold]`
//! (`PROBE_MODEL=path.onnx` picks another model file, `PROBE_DISABLE=Name,…` disables ORT optimizers).

use ort::session::builder::GraphOptimizationLevel;
use ort::session::Session;
use ort::value::Tensor;

fn kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn report(label: &str) {
    println!(
        "{label:<28} RSS {:>7.1} MiB  peak {:>7.1} MiB  (anon {:>5.1}, file {:>5.1})",
        kib("VmRSS:") as f64 / 1024.0,
        kib("VmHWM:") as f64 / 1024.0,
        kib("RssAnon:") as f64 / 1024.0,
        kib("RssFile:") as f64 / 1024.0
    );
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("number"))
        .collect();
    let (opt, pattern, prepack, batch, seq, from_file) =
        (args[0], args[1], args[2], args[3], args[4], args[5]);
    let mmap_threshold = args.get(6).copied().unwrap_or(0);
    if mmap_threshold > 0 {
        // SAFETY: mallopt only changes allocator parameters, before any other thread exists.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, mmap_threshold as i32);
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
    let board = pincer::system::board::EmbedderProfile {
        threads: 1,
        batch: 1,
    };
    let local = pincer::memory::embedder::LocalAssets::default();
    let assets = pincer::memory::embedder::EmbedderSettings::resolve(local, None, &board);
    report("start");
    let env = ort::init_from(&assets.runtime_library)
        .expect("init")
        .with_name("probe")
        .build()
        .expect("env");
    report("runtime loaded");
    let level = match opt {
        0 => GraphOptimizationLevel::Disable,
        1 => GraphOptimizationLevel::Level1,
        2 => GraphOptimizationLevel::Level2,
        _ => GraphOptimizationLevel::Level3,
    };
    let mut builder = Session::builder(&env)
        .expect("builder")
        .with_execution_providers([ort::ep::CPU::default().with_arena_allocator(false).build()])
        .expect("ep")
        .with_optimization_level(level)
        .expect("opt")
        .with_intra_threads(1)
        .expect("intra")
        .with_inter_threads(1)
        .expect("inter")
        .with_memory_pattern(pattern == 1)
        .expect("pattern")
        .with_prepacking(prepack == 1)
        .expect("prepack");
    let model = std::env::var_os("PROBE_MODEL")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| assets.model_dir.join("model.onnx"));
    if let Some(disabled) = std::env::var_os("PROBE_DISABLE") {
        builder = builder
            .with_config_entry(
                "optimization.disable_specified_optimizers",
                disabled.to_string_lossy(),
            )
            .expect("disable");
    }
    let mut session = if from_file == 1 {
        builder.commit_from_file(&model).expect("session")
    } else {
        let bytes = std::fs::read(&model).expect("model");
        builder.commit_from_memory(&bytes).expect("session")
    };
    report("session");
    for round in 0..3 {
        let started = std::time::Instant::now();
        let n = batch * seq;
        let ids: Vec<i64> = (0..n).map(|i| 1000 + (i as i64 % 2000)).collect();
        let mask = vec![1i64; n];
        let types = vec![0i64; n];
        let outputs = session
            .run(ort::inputs![
                "input_ids" => Tensor::from_array(([batch, seq], ids)).expect("t"),
                "attention_mask" => Tensor::from_array(([batch, seq], mask)).expect("t"),
                "token_type_ids" => Tensor::from_array(([batch, seq], types)).expect("t"),
            ])
            .expect("run");
        let (shape, data) = outputs[0].try_extract_tensor::<f32>().expect("f32");
        if round == 0 {
            println!("output {shape:?} first {}", data[0]);
        }
        report(&format!(
            "inference {round} {:>5} ms",
            started.elapsed().as_millis()
        ));
    }
    drop(session);
    report("session dropped");
}
