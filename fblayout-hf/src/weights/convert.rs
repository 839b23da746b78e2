//! Decoding a tensor's little-endian bytes to `f32`.
//!
//! F32 is copied, F16 and BF16 are widened exactly (every half and bfloat16 value, subnormals,
//! infinities and NaN included, is an `f32`). Bytes are read in chunks, so the data needs no
//! alignment: a tensor's offset in a safetensors file is only a multiple of its element size
//! relative to the data section, not in memory.

use half::{bf16, f16};
use safetensors::Dtype;

/// The dtypes [`to_f32`] decodes.
pub(super) const READABLE: &[Dtype] = &[Dtype::F32, Dtype::F16, Dtype::BF16];

/// `bytes` (whose length is a multiple of the element size, as safetensors checks) as `f32`,
/// or `None` for a dtype outside [`READABLE`].
pub(super) fn to_f32(dtype: Dtype, bytes: &[u8]) -> Option<Vec<f32>> {
    let out = match dtype {
        Dtype::F32 => bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        Dtype::F16 => bytes
            .chunks_exact(2)
            .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        Dtype::BF16 => bytes
            .chunks_exact(2)
            .map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        _ => return None,
    };
    Some(out)
}
