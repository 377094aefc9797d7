//! Blocking work called from async code: the one policy. On a multi-threaded Tokio runtime the
//! calling worker hands its other tasks to a sibling (`block_in_place`) while the work runs; on a
//! current-thread runtime, or outside any runtime, the work runs inline (`block_in_place` would
//! panic there). The store adds its own fast path on top (`Store::run_blocking`).

/// Runs `work` without stalling the other tasks of a multi-threaded runtime's worker.
pub fn off_worker<R>(work: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

#[cfg(test)]
mod tests {
    use super::off_worker;

    #[test]
    fn runs_inline_outside_a_runtime() {
        assert_eq!(off_worker(|| 2 + 2), 4);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn runs_inline_on_a_current_thread_runtime() {
        assert_eq!(off_worker(|| "inline"), "inline");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn hands_off_on_a_multi_threaded_runtime() {
        assert_eq!(off_worker(|| "handed off"), "handed off");
    }
}
