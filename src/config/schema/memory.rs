//! Memory search settings: the `memory` section and the layered
//! `memorySearch` blocks (`memory.search`, `agents.defaults.memorySearch`,
//! `agents.list[].memorySearch`), and their resolution into concrete values.
//!
//! Defaults are upstream's `src/agents/memory-search.ts` (chunks of 400
//! tokens with 80 overlap, 6 results, min score 0.35, hybrid 0.7/0.3 with a
//! candidate multiplier of 4, embedding cache on). Layers are merged key by
//! key, later layers winning; nothing here touches an index.

use serde::{Deserialize, Serialize};

use crate::config::patch::merge_patch;

pub const DEFAULT_CHUNK_TOKENS: u32 = 400;
pub const DEFAULT_CHUNK_OVERLAP_TOKENS: u32 = 80;
pub const DEFAULT_MAX_RESULTS: u32 = 6;
pub const DEFAULT_MIN_SCORE: f64 = 0.35;
pub const DEFAULT_VECTOR_WEIGHT: f64 = 0.7;
pub const DEFAULT_TEXT_WEIGHT: f64 = 0.3;
pub const DEFAULT_CANDIDATE_MULTIPLIER: u32 = 4;
pub const DEFAULT_MMR_LAMBDA: f64 = 0.7;
pub const DEFAULT_TEMPORAL_HALF_LIFE_DAYS: u32 = 30;
pub const DEFAULT_WATCH_DEBOUNCE_MS: u64 = 1_500;
pub const DEFAULT_SESSION_DELTA_BYTES: u64 = 100_000;
pub const DEFAULT_SESSION_DELTA_MESSAGES: u32 = 50;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryBackend {
    #[default]
    Builtin,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MemoryConfig {
    pub backend: MemoryBackend,
    /// Global memory search settings (current upstream location).
    pub search: Option<MemorySearchConfig>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemorySource {
    Memory,
    Sessions,
}

/// One layer of memory search settings; every key is optional so layers
/// can be merged.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MemorySearchConfig {
    pub enabled: Option<bool>,
    pub sources: Option<Vec<MemorySource>>,
    /// Extra directories or `.md` files to index.
    pub extra_paths: Option<Vec<String>>,
    pub experimental: Option<MemoryExperimental>,
    /// Embedding provider ("auto", "local", "openai", "ollama", …).
    pub provider: Option<String>,
    /// Provider to fall back to when embeddings fail ("none" disables).
    pub fallback: Option<String>,
    pub model: Option<String>,
    pub local: Option<MemoryLocal>,
    pub chunking: Option<MemoryChunking>,
    pub sync: Option<MemorySync>,
    pub query: Option<MemoryQuery>,
    pub cache: Option<MemoryCache>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MemoryExperimental {
    pub session_memory: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MemoryLocal {
    pub model_path: Option<String>,
    pub model_cache_dir: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MemoryChunking {
    pub tokens: Option<u32>,
    pub overlap: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MemorySync {
    pub on_session_start: Option<bool>,
    pub on_search: Option<bool>,
    pub watch: Option<bool>,
    pub watch_debounce_ms: Option<u64>,
    pub interval_minutes: Option<u32>,
    pub sessions: Option<MemorySessionSync>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MemorySessionSync {
    pub delta_bytes: Option<u64>,
    pub delta_messages: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MemoryQuery {
    pub max_results: Option<u32>,
    /// 0..1.
    pub min_score: Option<f64>,
    pub hybrid: Option<MemoryHybrid>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MemoryHybrid {
    pub enabled: Option<bool>,
    pub vector_weight: Option<f64>,
    pub text_weight: Option<f64>,
    pub candidate_multiplier: Option<u32>,
    pub mmr: Option<MemoryMmr>,
    pub temporal_decay: Option<MemoryTemporalDecay>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MemoryMmr {
    pub enabled: Option<bool>,
    pub lambda: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MemoryTemporalDecay {
    pub enabled: Option<bool>,
    pub half_life_days: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct MemoryCache {
    pub enabled: Option<bool>,
    pub max_entries: Option<u64>,
}

/// Memory search settings with every default filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedMemorySearch {
    pub enabled: bool,
    pub sources: Vec<MemorySource>,
    pub extra_paths: Vec<String>,
    pub provider: String,
    pub fallback: Option<String>,
    pub model: Option<String>,
    pub local_model_path: Option<String>,
    /// `local.modelCacheDir`: where the runtime and model are installed (`lib/` + the model's folder).
    pub local_model_cache_dir: Option<String>,
    pub chunk_tokens: u32,
    pub chunk_overlap_tokens: u32,
    pub watch: bool,
    pub watch_debounce_ms: u64,
    pub sync_on_session_start: bool,
    pub sync_on_search: bool,
    pub sync_interval_minutes: u32,
    pub max_results: u32,
    pub min_score: f64,
    pub hybrid_enabled: bool,
    /// Normalised so that `vector_weight + text_weight == 1`.
    pub vector_weight: f64,
    pub text_weight: f64,
    pub candidate_multiplier: u32,
    pub mmr_enabled: bool,
    pub mmr_lambda: f64,
    pub temporal_decay_enabled: bool,
    pub temporal_half_life_days: u32,
    pub cache_enabled: bool,
    pub cache_max_entries: Option<u64>,
    pub session_delta_bytes: u64,
    pub session_delta_messages: u32,
}

impl MemorySearchConfig {
    /// Merges layers (earliest first, later wins key by key).
    pub fn layered<'a>(
        layers: impl IntoIterator<Item = &'a MemorySearchConfig>,
    ) -> MemorySearchConfig {
        let mut merged = serde_json::Value::Object(serde_json::Map::new());
        for layer in layers {
            let value = crate::config::redact::without_nulls(
                serde_json::to_value(layer).expect("memory search settings serialize to JSON"),
            );
            merge_patch(&mut merged, &value);
        }
        serde_json::from_value(merged).expect("merged layers keep the layer shape")
    }

    /// Sources to index: `sessions` only with `experimental.sessionMemory`,
    /// and never empty (defaults to `memory`).
    fn resolved_sources(&self) -> Vec<MemorySource> {
        let session_memory = self
            .experimental
            .as_ref()
            .and_then(|e| e.session_memory)
            .unwrap_or(false);
        let mut sources: Vec<MemorySource> = Vec::new();
        for source in self.sources.iter().flatten() {
            let allowed = *source == MemorySource::Memory || session_memory;
            if allowed && !sources.contains(source) {
                sources.push(*source);
            }
        }
        if sources.is_empty() {
            sources.push(MemorySource::Memory);
        }
        sources
    }

    /// Fills every unset key with upstream's default.
    pub fn resolve(&self) -> ResolvedMemorySearch {
        let chunking = self.chunking.clone().unwrap_or_default();
        let sync = self.sync.clone().unwrap_or_default();
        let sessions = sync.sessions.clone().unwrap_or_default();
        let query = self.query.clone().unwrap_or_default();
        let hybrid = query.hybrid.clone().unwrap_or_default();
        let mmr = hybrid.mmr.clone().unwrap_or_default();
        let decay = hybrid.temporal_decay.clone().unwrap_or_default();
        let cache = self.cache.clone().unwrap_or_default();
        let (vector_weight, text_weight) = normalized_weights(
            hybrid.vector_weight.unwrap_or(DEFAULT_VECTOR_WEIGHT),
            hybrid.text_weight.unwrap_or(DEFAULT_TEXT_WEIGHT),
        );
        ResolvedMemorySearch {
            enabled: self.enabled.unwrap_or(true),
            sources: self.resolved_sources(),
            extra_paths: self.extra_paths.clone().unwrap_or_default(),
            provider: self.provider.clone().unwrap_or_else(|| "auto".to_string()),
            fallback: self.fallback.clone(),
            model: self.model.clone(),
            local_model_path: self
                .local
                .as_ref()
                .and_then(|local| local.model_path.clone()),
            local_model_cache_dir: self
                .local
                .as_ref()
                .and_then(|local| local.model_cache_dir.clone()),
            chunk_tokens: chunking.tokens.unwrap_or(DEFAULT_CHUNK_TOKENS),
            chunk_overlap_tokens: chunking.overlap.unwrap_or(DEFAULT_CHUNK_OVERLAP_TOKENS),
            watch: sync.watch.unwrap_or(true),
            watch_debounce_ms: sync.watch_debounce_ms.unwrap_or(DEFAULT_WATCH_DEBOUNCE_MS),
            sync_on_session_start: sync.on_session_start.unwrap_or(true),
            sync_on_search: sync.on_search.unwrap_or(true),
            sync_interval_minutes: sync.interval_minutes.unwrap_or(0),
            max_results: query.max_results.unwrap_or(DEFAULT_MAX_RESULTS),
            min_score: query.min_score.unwrap_or(DEFAULT_MIN_SCORE),
            hybrid_enabled: hybrid.enabled.unwrap_or(true),
            vector_weight,
            text_weight,
            candidate_multiplier: hybrid
                .candidate_multiplier
                .unwrap_or(DEFAULT_CANDIDATE_MULTIPLIER),
            mmr_enabled: mmr.enabled.unwrap_or(false),
            mmr_lambda: mmr.lambda.unwrap_or(DEFAULT_MMR_LAMBDA),
            temporal_decay_enabled: decay.enabled.unwrap_or(false),
            temporal_half_life_days: decay
                .half_life_days
                .unwrap_or(DEFAULT_TEMPORAL_HALF_LIFE_DAYS),
            cache_enabled: cache.enabled.unwrap_or(true),
            cache_max_entries: cache.max_entries,
            session_delta_bytes: sessions.delta_bytes.unwrap_or(DEFAULT_SESSION_DELTA_BYTES),
            session_delta_messages: sessions
                .delta_messages
                .unwrap_or(DEFAULT_SESSION_DELTA_MESSAGES),
        }
    }
}

/// Scales the two hybrid weights to sum to 1 (defaults when both are 0).
fn normalized_weights(vector: f64, text: f64) -> (f64, f64) {
    let sum = vector + text;
    if sum > 0.0 {
        (vector / sum, text / sum)
    } else {
        (DEFAULT_VECTOR_WEIGHT, DEFAULT_TEXT_WEIGHT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_search_resolves_to_upstream_defaults() {
        let resolved = MemorySearchConfig::default().resolve();
        assert!(resolved.enabled);
        assert_eq!(resolved.sources, vec![MemorySource::Memory]);
        assert_eq!(
            (resolved.chunk_tokens, resolved.chunk_overlap_tokens),
            (400, 80)
        );
        assert_eq!(resolved.max_results, 6);
        assert_eq!(resolved.min_score, 0.35);
        assert_eq!((resolved.vector_weight, resolved.text_weight), (0.7, 0.3));
        assert_eq!(resolved.candidate_multiplier, 4);
        assert!(resolved.cache_enabled);
        assert!(!resolved.mmr_enabled);
        assert_eq!(resolved.watch_debounce_ms, 1500);
    }

    #[test]
    fn later_layers_override_key_by_key() {
        let global: MemorySearchConfig = serde_json::from_str(
            r#"{"chunking":{"tokens":200,"overlap":20},"query":{"maxResults":3}}"#,
        )
        .expect("global layer");
        let agent: MemorySearchConfig =
            serde_json::from_str(r#"{"chunking":{"tokens":300}}"#).expect("agent layer");
        let resolved = MemorySearchConfig::layered([&global, &agent]).resolve();
        assert_eq!(resolved.chunk_tokens, 300);
        assert_eq!(resolved.chunk_overlap_tokens, 20);
        assert_eq!(resolved.max_results, 3);
    }

    #[test]
    fn hybrid_weights_are_normalised() {
        let layer: MemorySearchConfig =
            serde_json::from_str(r#"{"query":{"hybrid":{"vectorWeight":3,"textWeight":1}}}"#)
                .expect("weights");
        let resolved = layer.resolve();
        assert_eq!((resolved.vector_weight, resolved.text_weight), (0.75, 0.25));
    }

    #[test]
    fn session_source_needs_the_experimental_flag() {
        let layer: MemorySearchConfig =
            serde_json::from_str(r#"{"sources":["sessions"]}"#).expect("sources");
        assert_eq!(layer.resolve().sources, vec![MemorySource::Memory]);
        let layer: MemorySearchConfig = serde_json::from_str(
            r#"{"sources":["memory","sessions"],"experimental":{"sessionMemory":true}}"#,
        )
        .expect("sources");
        assert_eq!(
            layer.resolve().sources,
            vec![MemorySource::Memory, MemorySource::Sessions]
        );
    }
}
