//! Speech audio as an OpenAI-compatible `/audio/speech` may send it (a WAV file, or headerless PCM) through
//! the Opus encoder that makes voice notes of it. Properties: no panic; whatever encodes is an Ogg/Opus stream
//! the Ogg check accepts, ended, with the duration the encoder reported, within the length cap; the heap stays
//! within the encoder's fixed state plus a share of the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pincer::media::ogg::{check_reader, OggCodec};
use pincer::media::voice_encode::{encode, PcmInput};
use pincer_fuzz::{linear_budget, within_budget};

/// The longest voice note the target makes: enough for many packets and pages, quick to encode.
const MAX_SECONDS: u64 = 3;
/// Rates the headerless input may claim (OpenAI's PCM is 24 kHz; the others cover resampling).
const RAW_RATES: [u32; 6] = [8_000, 11_025, 16_000, 22_050, 24_000, 44_100];

fuzz_target!(|data: &[u8]| {
    let Some((&selector, audio)) = data.split_first() else {
        return;
    };
    let kind = if selector % 2 == 0 {
        PcmInput::Wav
    } else {
        PcmInput::Raw {
            rate: RAW_RATES[usize::from(selector / 2) % RAW_RATES.len()],
            channels: 1 + u16::from(selector / 32 % 2),
        }
    };
    let budget = linear_budget(audio.len(), 4, 4 << 20);
    let mut out = Vec::new();
    let encoded = within_budget("speech encoding", budget, || {
        encode(audio, kind, &mut out, MAX_SECONDS)
    });
    let Ok(encoded) = encoded else {
        return;
    };
    assert_eq!(encoded.bytes, out.len() as u64, "the reported size");
    assert!(
        encoded.duration_ms <= MAX_SECONDS * 1000,
        "{} ms over the cap",
        encoded.duration_ms
    );
    let info = check_reader(out.as_slice()).expect("the voice note passes the Ogg check");
    assert_eq!(info.codec, OggCodec::Opus);
    assert!(info.ended, "the last page ends the stream");
    let duration = info.duration_ms.expect("an Opus stream's duration");
    assert!(
        duration.abs_diff(encoded.duration_ms) <= 20,
        "the stream says {duration} ms, the encoder {} ms",
        encoded.duration_ms
    );
});
