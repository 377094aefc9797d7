//! `apply_patch` input (the `*** Begin Patch` format) planned against files held in memory. Properties: no panic;
//! an accepted patch's added files hold exactly their `+` lines; a refusal says why; heap linear in the patch
//! and the files (libFuzzer's timeout catches anything slower than linear-ish on its small inputs).
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use pincer::tools::patch::{plan, Change, PatchFiles};
use pincer::tools::ToolError;
use pincer_fuzz::{linear_budget, split_parts, within_budget};

struct MemoryFiles(BTreeMap<String, String>);

impl PatchFiles for MemoryFiles {
    fn check(&mut self, path: &str) -> Result<(), ToolError> {
        if path.is_empty() || path.contains("..") {
            return Err(ToolError::InvalidArguments(format!("bad path {path:?}")));
        }
        Ok(())
    }

    fn exists(&mut self, path: &str) -> bool {
        self.0.contains_key(path)
    }

    fn read(&mut self, path: &str) -> Result<String, ToolError> {
        self.0
            .get(path)
            .cloned()
            .ok_or_else(|| ToolError::Failed(format!("{path}: no such file")))
    }
}

fuzz_target!(|data: &[u8]| {
    let parts = split_parts(data, 3);
    let Ok(patch) = std::str::from_utf8(parts[0]) else {
        return;
    };
    let mut files = BTreeMap::new();
    for (name, part) in ["a.txt", "b.md"].into_iter().zip(&parts[1..]) {
        files.insert(name.to_string(), String::from_utf8_lossy(part).into_owned());
    }
    let budget = linear_budget(data.len(), 96, 64 * 1024);
    within_budget("apply_patch", budget, || {
        let mut memory = MemoryFiles(files);
        match plan(patch, &mut memory) {
            Ok(plan) => {
                assert!(
                    plan.summary.len() <= plan.changes.len(),
                    "a summary line per change"
                );
                for change in &plan.changes {
                    if let Change::Put { text, .. } = change {
                        assert!(
                            text.is_empty() || text.ends_with('\n'),
                            "a file without its last newline"
                        );
                    }
                }
            }
            Err(error) => assert!(!error.to_string().is_empty(), "a refusal says why"),
        }
    });
});
