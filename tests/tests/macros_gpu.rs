//! The macro's WGSL, run on the GPU, agrees with the macro's CPU offsets.
//!
//! For every tensor and view of the transformer layer (`macros_layer/tensors.rs`), the WGSL that
//! `#[derive(Tensor)]` validated while it expanded is handed to the index probe, which calls
//! `<view>_offset`/`<view>_in_bounds` on the GPU for every coordinate of the view's shape and a
//! margin past it (padding included). The result must equal the generated `const fn`s at every
//! coordinate: `Some(offset)` in bounds, `None` outside. Without a GPU adapter the tests fail;
//! Mesa's lavapipe provides one on any machine.

#[path = "macros_layer/tensors.rs"]
pub mod tensors;

use fblayout::{Coord, Extents, Tensor};
use fblayout_kernels::probe::{ProbeRequest, probe_offsets};
use fblayout_kernels::runtime::Gpu;
use tensors::*;

fn gpu() -> Gpu {
    Gpu::new().expect("no GPU adapter: install mesa-vulkan-drivers (lavapipe)")
}

/// Probes `C`'s WGSL on `gpu` and compares it with its CPU functions at every coordinate.
fn gpu_agrees_with_cpu<C: Coord>(gpu: &Gpu, ext: <C::Tensor as Tensor>::Extents) {
    let shape = C::dims(ext);
    let margin = 2;
    let extended: Vec<u32> = shape
        .as_ref()
        .iter()
        .map(|&n| (n + margin) as u32)
        .collect();
    let extent_args: Vec<u32> = ext.values().into_iter().map(|v| v as u32).collect();
    let module = <C::Tensor as Tensor>::wgsl_module();
    let request = ProbeRequest {
        module,
        offset_fn: C::OFFSET_FN,
        in_bounds_fn: C::IN_BOUNDS_FN,
        shape: &extended,
        extent_args: &extent_args,
    };
    let on_gpu =
        probe_offsets(gpu, &request).unwrap_or_else(|e| panic!("probing {}: {e}", C::NAME));
    let coords = grid(shape.as_ref(), margin);
    assert_eq!(
        on_gpu.len(),
        coords.len(),
        "{}: one result per coordinate",
        C::NAME
    );
    let mut in_bounds = 0;
    for (index, got) in coords.iter().zip(&on_gpu) {
        let c = C::from_indices(index).expect("rank matches");
        let want = c.in_bounds(ext).then(|| c.offset(ext) as u32);
        assert_eq!(*got, want, "{}{index:?} with extents {ext:?}", C::NAME);
        in_bounds += usize::from(want.is_some());
    }
    assert_eq!(
        in_bounds,
        shape.as_ref().iter().product::<usize>(),
        "{}",
        C::NAME
    );
}

/// A few sizes: whole tiles, partial tiles, a single element.
const GPU_SIZES: [(usize, usize); 3] = [(1, 1), (2, 5), (3, 8)];

#[test]
fn activations_on_gpu() {
    let gpu = gpu();
    for (batch, seq) in GPU_SIZES {
        let ext = XExtents { batch, seq };
        gpu_agrees_with_cpu::<X>(&gpu, ext);
        gpu_agrees_with_cpu::<XT>(&gpu, ext);
        gpu_agrees_with_cpu::<XH>(&gpu, ext);
        gpu_agrees_with_cpu::<Tokens>(&gpu, ext);
    }
}

#[test]
fn weights_on_gpu() {
    let gpu = gpu();
    gpu_agrees_with_cpu::<W>(&gpu, WExtents);
    gpu_agrees_with_cpu::<WT>(&gpu, WExtents);
}

#[test]
fn attention_on_gpu() {
    let gpu = gpu();
    for (batch, seq) in GPU_SIZES {
        let ext = AttnExtents { batch, seq };
        gpu_agrees_with_cpu::<Attn>(&gpu, ext);
        gpu_agrees_with_cpu::<QH>(&gpu, ext);
        gpu_agrees_with_cpu::<KT>(&gpu, ext);
    }
}

#[test]
fn scores_on_gpu() {
    let gpu = gpu();
    for (batch, seq) in GPU_SIZES {
        let ext = ScoresExtents {
            batch,
            query: seq,
            key: seq + 1,
        };
        gpu_agrees_with_cpu::<Scores>(&gpu, ext);
        gpu_agrees_with_cpu::<First>(&gpu, ext);
        gpu_agrees_with_cpu::<ByQuery>(&gpu, ext);
    }
}

/// The tile helpers compute the first element of each whole R-Tile, which the CPU offset of the
/// tile's first coordinate confirms.
#[test]
fn tile_helpers_on_gpu() {
    let gpu = gpu();
    let ext = XExtents { batch: 3, seq: 5 };
    let layout = &X::descriptor().layout;
    let tiles: Vec<u32> = [ext.batch, ext.seq, 32]
        .iter()
        .zip(layout.axes())
        .map(|(&n, a)| n.div_ceil(a.tile as usize) as u32)
        .collect();
    let extent_args: Vec<u32> = ext.values().into_iter().map(|v| v as u32).collect();
    let request = ProbeRequest {
        module: X::wgsl_module(),
        offset_fn: "x_tile_offset",
        in_bounds_fn: "x_tile_in_bounds",
        shape: &tiles,
        extent_args: &extent_args,
    };
    let starts = probe_offsets(&gpu, &request).expect("probing the tile helpers");
    let coords = grid(&tiles.iter().map(|&t| t as usize).collect::<Vec<_>>(), 0);
    for (tile, start) in coords.iter().zip(&starts) {
        let first: Vec<usize> = tile
            .iter()
            .zip(layout.axes())
            .map(|(&t, a)| t * a.tile as usize)
            .collect();
        let x = X::from_indices(&first).unwrap();
        assert_eq!(*start, Some(x.offset(ext) as u32), "tile {tile:?}");
        assert_eq!(
            x.offset(ext) % X::TILE_ELEMS,
            0,
            "tiles start on tile boundaries"
        );
    }
}
