//! The kernel author's surface of a declaration: the named constants and the tile helpers work
//! in `const`, the GPU twin of the extents is `bytemuck::Pod` (a uniform buffer takes it as it
//! is), and the expansion holds no `unsafe`, so a crate that forbids it can derive tensors.
#![forbid(unsafe_code)]

use fblayout::{Axis, Ix, Tensor};
use fblayout_kernels::runtime::{Gpu, GpuBuffer, GpuError};

#[derive(Clone, Copy, Axis)]
struct Tokens;
#[derive(Clone, Copy, Axis)]
struct Hidden;

/// Activations: LayerNorm reduces `hidden`, bias gradients reduce `tokens`.
#[derive(Clone, Copy, Tensor)]
#[tensor(layout = rtile, reduce(forward = [hidden], backward = [tokens]))]
struct X {
    #[axis(dyn, tile = 4, pad)]
    tokens: Ix<Tokens>,
    #[axis(768, tile = 4)]
    hidden: Ix<Hidden>,
}

/// Every extent static: the twin is empty.
#[derive(Clone, Copy, Tensor)]
struct M {
    #[axis(3)]
    tokens: Ix<Tokens>,
    #[axis(5)]
    hidden: Ix<Hidden>,
}

// A kernel's loop bounds and steps, from the declaration rather than typed out again.
const HIDDEN: usize = X::HIDDEN_EXTENT;
const STEP: [usize; 2] = [X::TOKENS_TILE, X::HIDDEN_TILE];
const TILES_PER_ROW: usize = HIDDEN / X::HIDDEN_TILE;
// The second tile of the first row of tiles, for 10 tokens.
const SECOND: usize = X::tile_offset(0, 1, XExtents { tokens: 10 });

/// Uploads the run-time extents as they are: `[u32; N]` is `bytemuck::Pod`.
fn upload(gpu: &Gpu, ext: XExtents) -> Result<GpuBuffer, Box<dyn std::error::Error>> {
    let twin: XGpuExtents = X::gpu_extents(ext)?;
    Ok(GpuBuffer::uniform(gpu, &twin)?)
}

fn main() {
    assert_eq!((HIDDEN, STEP, TILES_PER_ROW), (768, [4, 4], 192));
    assert_eq!(SECOND, X::TILE_ELEMS);
    assert_eq!([M::TOKENS_EXTENT, M::HIDDEN_EXTENT, M::TOKENS_TILE], [3, 5, 1]);
    let ext = XExtents { tokens: 10 };
    assert!(X::tile_in_bounds(2, 191, ext) && !X::tile_in_bounds(3, 0, ext));
    assert_eq!(X::gpu_extents(ext).unwrap(), [10]);
    let none: MGpuExtents = M::gpu_extents(MExtents).unwrap();
    assert_eq!(std::mem::size_of_val(&none), 0);
    // The same names in the WGSL a kernel splices in.
    for line in [
        "struct x_extents {\n    tokens_len: u32,\n}",
        "const X_HIDDEN_EXTENT: u32 = 768u;",
        "const X_TOKENS_TILE: u32 = 4u;",
        "fn x_tile_offset(tokens_tile: u32, hidden_tile: u32, tokens_len: u32) -> u32",
    ] {
        assert!(X::WGSL.contains(line), "{line}");
    }
    let _upload: fn(&Gpu, XExtents) -> Result<GpuBuffer, Box<dyn std::error::Error>> = upload;
    let _uniform: fn(&Gpu, &MGpuExtents) -> Result<GpuBuffer, GpuError> = GpuBuffer::uniform;
}
