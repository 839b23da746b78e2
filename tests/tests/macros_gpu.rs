//! The macro's WGSL, run on the GPU, agrees with the macro's CPU offsets.
//!
//! For every tensor and view of the transformer layer (`macros_layer/tensors.rs`), the WGSL that
//! `#[derive(Tensor)]` validated while it expanded is handed to the index probe, which calls
//! `<view>_offset`/`<view>_in_bounds` on the GPU for every coordinate of the view's shape and a
//! margin past it (padding included). The result must equal the generated `const fn`s at every
//! coordinate: `Some(offset)` in bounds, `None` outside. The same holds for the R-Tile helpers
//! (`<name>_tile_offset` against `X::tile_offset`, at every tile and past the grid), and the
//! GPU twin of the extents (`X::gpu_extents`) reads back as the WGSL struct `<name>_extents`.
//! Without a GPU adapter the tests fail; Mesa's lavapipe provides one on any machine.

#[path = "macros_layer/tensors.rs"]
pub mod tensors;

use std::collections::BTreeSet;

use fblayout::{Coord, Extents, Tensor};
use fblayout_kernels::probe::{ProbeRequest, probe_offsets};
use fblayout_kernels::runtime::{Binding, Gpu, GpuBuffer};
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

/// How many tile coordinates past the grid each axis is probed at.
const PAST: usize = 2;

/// The tile helpers of `T` three ways, at every tile of the grid and [`PAST`] past it along
/// each axis: `host` (the generated `X::tile_in_bounds`/`X::tile_offset`), the WGSL
/// `<name>_tile_in_bounds`/`<name>_tile_offset` run on `gpu` by the index probe with the
/// extents `X::gpu_extents` gives (the WGSL functions take them in the struct's order), and the
/// R-Tile definition: tiles one after another in row-major grid order, each holding the
/// `TILE_ELEMS` contiguous elements from its first by `T`'s own offsets, together the buffer.
fn tile_helpers_agree<T: Tensor>(
    gpu: &Gpu,
    ext: T::Extents,
    gpu_ext: &[u32],
    host: impl Fn(&[usize]) -> Option<usize>,
) {
    let layout = &T::descriptor().layout;
    let tiles: Vec<usize> = layout.axes().iter().map(|a| a.tile as usize).collect();
    let tile_grid: Vec<usize> = T::dims(ext)
        .as_ref()
        .iter()
        .zip(&tiles)
        .map(|(e, t)| e.div_ceil(*t))
        .collect();
    let probed: Vec<u32> = tile_grid.iter().map(|&g| (g + PAST) as u32).collect();
    let f = layout.tile_index_fn();
    let (offset_fn, in_bounds_fn) = (f.offset_fn_name(), f.in_bounds_fn_name());
    let request = ProbeRequest {
        module: T::wgsl_module(),
        offset_fn: &offset_fn,
        in_bounds_fn: &in_bounds_fn,
        shape: &probed,
        extent_args: gpu_ext,
    };
    let on_gpu = probe_offsets(gpu, &request).expect("probing the tile helpers");
    let coords = grid(&tile_grid, PAST);
    assert_eq!(on_gpu.len(), coords.len());
    let mut in_grid = 0;
    for (tile, got) in coords.iter().zip(&on_gpu) {
        let want = tile.iter().zip(&tile_grid).all(|(t, g)| t < g).then(|| {
            let index = tile
                .iter()
                .zip(&tile_grid)
                .fold(0, |acc, (t, g)| acc * g + t);
            index * T::TILE_ELEMS
        });
        if let Some(start) = want {
            tile_is_contiguous::<T>(ext, tile, &tiles, start);
            in_grid += 1;
        }
        assert_eq!(
            host(tile),
            want,
            "{} tile {tile:?} for {ext:?} on the host",
            T::NAME
        );
        let want = want.map(|w| w as u32);
        assert_eq!(
            *got,
            want,
            "{} tile {tile:?} for {ext:?} on the GPU",
            T::NAME
        );
    }
    assert_eq!(in_grid, tile_grid.iter().product::<usize>());
    assert_eq!(
        in_grid * T::TILE_ELEMS,
        T::len(ext),
        "{}: tiles fill the buffer",
        T::NAME
    );
}

/// The coordinates of grid tile `tile` (tiles of `tiles`, padding included) lie at the
/// `TILE_ELEMS` offsets from `start`, the first of them at `start`.
fn tile_is_contiguous<T: Tensor>(ext: T::Extents, tile: &[usize], tiles: &[usize], start: usize) {
    let mut inside = BTreeSet::new();
    for within in grid(tiles, 0) {
        let c: Vec<usize> = tile
            .iter()
            .zip(tiles)
            .zip(&within)
            .map(|((g, t), w)| g * t + w)
            .collect();
        let offset = T::from_indices(&c).expect("rank matches").offset(ext);
        assert!(
            (start..start + T::TILE_ELEMS).contains(&offset),
            "{} {c:?} lies in tile {tile:?}",
            T::NAME
        );
        if within.iter().all(|&w| w == 0) {
            assert_eq!(
                offset,
                start,
                "{} tile {tile:?}: its first element",
                T::NAME
            );
        }
        inside.insert(offset);
    }
    assert_eq!(inside.len(), T::TILE_ELEMS, "{} tile {tile:?}", T::NAME);
}

#[test]
fn tile_helpers_on_gpu_agree_with_the_host_and_the_definition() {
    let gpu = gpu();
    for (batch, seq) in sizes() {
        let ext = XExtents { batch, seq };
        let twin = X::gpu_extents(ext).unwrap();
        tile_helpers_agree::<X>(&gpu, ext, &twin, |t| {
            X::tile_in_bounds(t[0], t[1], t[2], ext).then(|| X::tile_offset(t[0], t[1], t[2], ext))
        });
        let ext = AttnExtents { batch, seq };
        let twin = Attn::gpu_extents(ext).unwrap();
        tile_helpers_agree::<Attn>(&gpu, ext, &twin, |t| {
            Attn::tile_in_bounds(t[0], t[1], t[2], t[3], ext)
                .then(|| Attn::tile_offset(t[0], t[1], t[2], t[3], ext))
        });
        let ext = ScoresExtents {
            batch,
            query: seq,
            key: seq + 1,
        };
        let twin = Scores::gpu_extents(ext).unwrap();
        tile_helpers_agree::<Scores>(&gpu, ext, &twin, |t| {
            Scores::tile_in_bounds(t[0], t[1], t[2], t[3], ext)
                .then(|| Scores::tile_offset(t[0], t[1], t[2], t[3], ext))
        });
    }
    let twin = W::gpu_extents(WExtents).unwrap();
    tile_helpers_agree::<W>(&gpu, WExtents, &twin, |t| {
        W::tile_in_bounds(t[0], t[1], WExtents).then(|| W::tile_offset(t[0], t[1], WExtents))
    });
}

/// The GPU twin uploaded as it is (a uniform of `[u32; N]`, through `bytemuck`) is the WGSL
/// struct `<name>_extents` of the tensor's own WGSL: a kernel appended to `T::WGSL` reads each
/// field back. `fields` are the struct's fields, in order.
fn twin_reads_back<T: Tensor, const N: usize>(gpu: &Gpu, twin: &[u32; N], fields: &[&str]) {
    let name = T::descriptor()
        .extents_struct_name()
        .expect("run-time axes");
    let copies: String = fields
        .iter()
        .enumerate()
        .map(|(i, f)| format!("    fbl_out[{i}] = fbl_extents.{f};\n"))
        .collect();
    let entry = format!(
        "@group(0) @binding(0) var<uniform> fbl_extents: {name};\n\
         @group(0) @binding(1) var<storage, read_write> fbl_out: array<u32>;\n\
         @compute @workgroup_size(1)\nfn fbl_main() {{\n{copies}}}\n"
    );
    let module = T::wgsl_module()
        .extend(format!("{}+twin", T::NAME), &entry, Default::default())
        .expect("the extents struct is in the tensor's WGSL");
    let uniform = GpuBuffer::uniform(gpu, twin).unwrap();
    let out = GpuBuffer::zeroed::<u32>(gpu, N).unwrap();
    let bindings = [Binding::new(0, &uniform), Binding::new(1, &out)];
    gpu.dispatch(&module, "fbl_main", &bindings, [1, 1, 1])
        .unwrap();
    assert_eq!(out.read_back::<u32>().unwrap(), twin, "{}", T::NAME);
}

#[test]
fn gpu_extents_are_the_wgsl_struct_on_the_gpu() {
    let gpu = gpu();
    let twin: XGpuExtents = X::gpu_extents(XExtents { batch: 3, seq: 5 }).unwrap();
    twin_reads_back::<X, 2>(&gpu, &twin, &["batch_len", "seq_len"]);
    let ext = ScoresExtents {
        batch: 2,
        query: 7,
        key: 9,
    };
    let twin: ScoresGpuExtents = Scores::gpu_extents(ext).unwrap();
    twin_reads_back::<Scores, 3>(&gpu, &twin, &["batch_len", "query_len", "key_len"]);
}
