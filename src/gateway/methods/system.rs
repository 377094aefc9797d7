//! `system.info` in upstream's shape (host, OS, CPU, memory, the data
//! dir's disk, the gateway process's memory), read from `/proc` and the
//! C library at the moment of the call; and the board profile pincer runs
//! with (`status.board`). Nothing here is cached or made up: a figure the
//! host cannot give is left out.

use std::path::Path;

use serde_json::{json, Map, Value};

use crate::gateway::frames::ErrorShape;
use crate::gateway::state::GatewayState;

/// `key: value kB` lines of a `/proc` file, in bytes.
fn proc_kib(path: &str, keys: &[&str]) -> Map<String, Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut out = Map::new();
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        if !keys.contains(&key) {
            continue;
        }
        let kib = rest
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(kib) = kib {
            out.insert(key.to_string(), json!(kib * 1024));
        }
    }
    out
}

/// Total and available bytes of the file system holding `path`.
fn disk(path: &Path) -> Option<(u64, u64)> {
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statvfs is plain old data; all-zero is a valid value.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c_path` is a valid NUL-terminated string and `stat` a writable statvfs.
    if unsafe { libc::statvfs(c_path.as_ptr(), &mut stat) } != 0 {
        return None;
    }
    let block = stat.f_frsize as u64;
    Some((stat.f_blocks as u64 * block, stat.f_bavail as u64 * block))
}

/// `uname`'s system name, release and machine.
fn uname() -> Option<(String, String, String)> {
    // SAFETY: utsname is plain old data; all-zero is a valid value.
    let mut name: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is a writable utsname.
    if unsafe { libc::uname(&mut name) } != 0 {
        return None;
    }
    let field = |raw: &[libc::c_char]| {
        let bytes: Vec<u8> = raw
            .iter()
            .take_while(|c| **c != 0)
            .map(|c| *c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).to_string()
    };
    Some((
        field(&name.sysname),
        field(&name.release),
        field(&name.machine),
    ))
}

fn cpu_model() -> Option<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    text.lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(key, _)| matches!(key.trim(), "model name" | "Model" | "Hardware"))
        .map(|(_, value)| value.trim().to_string())
        .filter(|v| !v.is_empty())
}

fn load_average() -> Option<Vec<f64>> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let values: Vec<f64> = text
        .split_whitespace()
        .take(3)
        .filter_map(|v| v.parse().ok())
        .collect();
    (values.len() == 3).then_some(values)
}

/// `/etc/os-release`'s `PRETTY_NAME`, else the kernel's name and release.
fn os_label(sysname: &str, release: &str) -> String {
    std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                .map(|v| v.trim_matches('"').to_string())
        })
        .unwrap_or_else(|| format!("{sysname} {release}"))
}

/// `system.info`.
pub fn info(state: &GatewayState) -> Result<Value, ErrorShape> {
    let (sysname, release, machine) = uname().unwrap_or_default();
    let memory = proc_kib("/proc/meminfo", &["MemTotal", "MemAvailable"]);
    let process = proc_kib("/proc/self/status", &["VmRSS", "RssAnon", "VmData"]);
    let data_dir = &state.services.data_dir;
    let mut info = json!({
        "machineName": state.host_name,
        "hostname": state.host_name,
        "platform": std::env::consts::OS,
        "release": release,
        "arch": machine,
        "osLabel": os_label(&sysname, &release),
        "nodeVersion": "",
        "pid": std::process::id(),
        "uptimeMs": state.uptime_ms(),
        "cpuCount": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "memoryTotalBytes": memory.get("MemTotal").cloned().unwrap_or(json!(0)),
        "memoryFreeBytes": memory.get("MemAvailable").cloned().unwrap_or(json!(0)),
    });
    if let Some(model) = cpu_model() {
        info["cpuModel"] = json!(model);
    }
    if let Some(load) = load_average() {
        info["loadAverage"] = json!(load);
    }
    if let Some(rss) = process.get("VmRSS") {
        // Upstream reports V8's heap; pincer's heap is its anonymous memory
        // (resident) within its data segment (mapped).
        info["processMemory"] = json!({
            "rssBytes": rss,
            "heapUsedBytes": process.get("RssAnon").cloned().unwrap_or(json!(0)),
            "heapTotalBytes": process.get("VmData").cloned().unwrap_or(json!(0)),
        });
    }
    if let Some((total, available)) = disk(data_dir).filter(|(total, _)| *total > 0) {
        let path = data_dir.display().to_string();
        info["diskTotalBytes"] = json!(total);
        info["diskAvailableBytes"] = json!(available);
        info["diskPath"] = json!(path);
        info["disks"] = json!([{"path": path, "totalBytes": total, "availableBytes": available}]);
    }
    Ok(info)
}

/// The board profile pincer detected and the limits it runs with.
pub fn board(state: &GatewayState) -> Value {
    let profile = crate::system::board::detect();
    let limits = &state.limits;
    json!({
        "name": profile.name,
        "model": profile.model,
        "ramMb": profile.ram_mb,
        "cores": profile.cores,
        "maxConnections": limits.max_connections,
        "maxConcurrentRuns": limits.max_concurrent_runs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_figures_are_read_in_bytes() {
        let status = proc_kib("/proc/self/status", &["VmRSS"]);
        assert!(status["VmRSS"].as_u64().is_some_and(|b| b > 1024 * 1024));
        let (total, available) = disk(Path::new("/")).expect("statvfs /");
        assert!(total >= available && total > 0);
        assert!(uname().is_some_and(|(sys, _, _)| sys == "Linux"));
    }
}
