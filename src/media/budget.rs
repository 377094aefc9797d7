//! How much a board lets one media job use: the pixel cap an image must be
//! under to be opened at all, the working memory one decode may take, the
//! largest side of an image prepared for a model, how many jobs run at once
//! and how much disk the media area may hold. The board profile
//! (`board/*.json5`, `media`) gives the values; `Default` fits a Pi 4.

/// Bytes in a mebibyte.
const MIB: usize = 1024 * 1024;

/// Limits one board gives every media job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MediaBudget {
    /// An image with more pixels than this is refused before decoding.
    pub max_image_pixels: u64,
    /// Working memory one image decode may use (decoder buffers and the
    /// output); checked from the file's header before decoding starts.
    pub decode_bytes: usize,
    /// Inflated bytes one PDF may produce in all (a compression bomb stops
    /// here, not in RAM: streams are inflated one at a time, each capped).
    pub pdf_inflate_bytes: usize,
    /// Media jobs (transcriptions, image preparations, extractions) running
    /// at once.
    pub concurrency: usize,
    /// Bytes the media area's directories may hold before the oldest files go.
    pub area_bytes: u64,
    /// Longer side of an image handed to a model, in pixels.
    pub image_max_side: u32,
}

impl Default for MediaBudget {
    fn default() -> Self {
        MediaBudget {
            max_image_pixels: 100_000_000,
            decode_bytes: 24 * MIB,
            pdf_inflate_bytes: 64 * MIB,
            concurrency: 2,
            area_bytes: 256 * MIB as u64,
            image_max_side: 1568,
        }
    }
}

impl MediaBudget {
    /// From a board profile's `media` values (mebibytes, megapixels).
    pub fn from_profile(profile: &crate::system::board::MediaProfile) -> MediaBudget {
        let decode_bytes = profile.decode_mib.saturating_mul(MIB);
        MediaBudget {
            max_image_pixels: profile.max_megapixels.saturating_mul(1_000_000),
            decode_bytes,
            pdf_inflate_bytes: decode_bytes.saturating_mul(2),
            concurrency: profile.concurrency.max(1),
            area_bytes: profile.area_mib.saturating_mul(MIB as u64),
            image_max_side: profile.image_max_side.max(1),
        }
    }

    /// The budget of the board pincer runs on.
    pub fn for_this_board() -> MediaBudget {
        MediaBudget::from_profile(&crate::system::board::detect().media)
    }
}
