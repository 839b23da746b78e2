//! The kernel author's surface that `#[derive(Tensor)]` generates, checked against the core on
//! the CPU (the GPU side is in `macros_gpu.rs`):
//!
//! - `X::gpu_extents` gives the words of the WGSL struct `x_extents`: its bytes are exactly what
//!   `ParamsLayout::pack` writes for the extents of an operand of `X` in a kernel's parameter
//!   block, and extents that don't fit a `u32` (or that `check_extents` refuses) are errors;
//! - the named constants (`X::HIDDEN_EXTENT`, `X::SEQ_TILE`, ...) are the layout's numbers, the
//!   same as the WGSL constants of `X::WGSL`.
//!
//! `X::tile_offset`/`X::tile_in_bounds` are checked against the WGSL and the R-Tile definition
//! in `macros_gpu.rs`.

#[path = "macros_layer/tensors.rs"]
pub mod tensors;

use fblayout::layout::{LayoutError, TensorLayout};
use fblayout::{Axis, Coord, Extents, Ix, Tensor};
use fblayout_core::__private::axis_consts;
use fblayout_core::kernel::{KernelSource, Operand, ParamValue};
use tensors::*;

/// The bytes of a GPU twin as they lie in memory (what `bytemuck::bytes_of` gives).
fn memory_bytes(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

/// The parameter block of a kernel with one operand `role` of tensor `T` (and a scalar after
/// it, so that the extents struct is not the end of the block), packed for `ext` from the
/// extents themselves; with the byte offset of the operand's extents struct in the block.
fn packed<T: Tensor>(role: &str, ext: T::Extents) -> Option<(Vec<u8>, usize)> {
    let kernel = KernelSource::new("gpu_twin")
        .operand(Operand::read(role, <T as Coord>::view()).expect("an operand of T"))
        .scalar("after", fblayout_core::kernel::Scalar::U32)
        .body(format!(
            "@compute @workgroup_size(1)\nfn main() {{ _ = {role}_dim0(); _ = params.after; }}"
        ))
        .build()
        .expect("the kernel builds");
    let params = kernel.params().expect("a scalar, at least");
    let names: Vec<String> = <T::Extents as Extents>::AXES
        .iter()
        .map(|axis| format!("{role}.{}", TensorLayout::extent_param(axis)))
        .collect();
    let mut values: Vec<(&str, ParamValue)> = names
        .iter()
        .zip(ext.values())
        .map(|(name, v)| (name.as_str(), ParamValue::U32(v as u32)))
        .collect();
    values.push(("after", ParamValue::U32(u32::MAX)));
    let bytes = params.pack(&values).expect("every field given once");
    let start = names
        .first()
        .map(|n| params.field(n).expect("a field").offset as usize)?;
    Some((bytes, start))
}

/// Checks the twin `words` of `ext` against the packed parameter block, and that the struct
/// is exactly `words.len()` words long (the next field lies past it).
fn twin_is_the_packed_struct<T: Tensor>(ext: T::Extents, words: &[u32]) {
    let (bytes, start) = packed::<T>("op", ext).expect("a tensor with run-time axes");
    let twin = memory_bytes(words);
    assert_eq!(
        &bytes[start..start + twin.len()],
        twin.as_slice(),
        "{}: the twin of {ext:?} is the struct in the block",
        T::NAME
    );
    assert_eq!(words.len(), <T::Extents as Extents>::AXES.len());
}

#[test]
fn gpu_extents_have_the_layout_of_the_struct_kernels_pack() {
    for (batch, seq) in sizes() {
        let ext = XExtents { batch, seq };
        let words: XGpuExtents = X::gpu_extents(ext).unwrap();
        assert_eq!(words, [batch as u32, seq as u32]);
        twin_is_the_packed_struct::<X>(ext, &words);
        let ext = AttnExtents { batch, seq };
        twin_is_the_packed_struct::<Attn>(ext, &Attn::gpu_extents(ext).unwrap());
        let ext = ScoresExtents {
            batch,
            query: seq,
            key: seq + 3,
        };
        let words: ScoresGpuExtents = Scores::gpu_extents(ext).unwrap();
        twin_is_the_packed_struct::<Scores>(ext, &words);
    }
    assert_eq!(size_of::<XGpuExtents>(), 2 * size_of::<u32>());
    assert_eq!(size_of::<ScoresGpuExtents>(), 3 * size_of::<u32>());
}

#[test]
fn a_static_tensor_has_an_empty_twin_and_no_struct() {
    let words: WGpuExtents = W::gpu_extents(WExtents).unwrap();
    assert_eq!(words, [0u32; 0]);
    assert_eq!(size_of::<WGpuExtents>(), 0);
    assert_eq!(W::descriptor().extents_struct_name(), None);
    assert!(!W::WGSL.contains("struct"), "{}", W::WGSL);
    // A kernel gives such an operand no room in its parameter block either.
    assert_eq!(packed::<W>("w", WExtents), None);
}

#[test]
fn the_wgsl_holds_the_struct_the_layout_writes() {
    for (wgsl, descriptor) in [
        (X::WGSL, X::descriptor()),
        (Attn::WGSL, Attn::descriptor()),
        (Scores::WGSL, Scores::descriptor()),
    ] {
        let name = descriptor.extents_struct_name().expect("run-time axes");
        assert_eq!(name, format!("{}_extents", descriptor.layout.name()));
        let written = descriptor.layout.extents_struct(&name);
        assert!(wgsl.contains(written.trim_end()), "{wgsl}");
    }
}

#[derive(Clone, Copy, Axis)]
struct Rows;

/// A run-time axis tiled without consent to pad.
#[derive(Clone, Copy, Tensor)]
#[tensor(layout = rtile, reduce(forward = [rows]))]
struct Strict {
    #[axis(dyn, tile = 4)]
    rows: Ix<Rows>,
}

#[test]
fn gpu_extents_refuse_what_the_gpu_cannot_index() {
    if let Ok(huge) = usize::try_from(u64::from(u32::MAX) + 1) {
        let err = X::gpu_extents(XExtents {
            batch: 1,
            seq: huge,
        })
        .unwrap_err();
        assert!(matches!(err, LayoutError::Bind { .. }), "{err:?}");
        assert!(err.to_string().contains("does not fit a u32"), "{err}");
        assert!(err.to_string().contains("`seq`"), "{err}");
        let err = Scores::gpu_extents(ScoresExtents {
            batch: huge,
            query: 1,
            key: 1,
        })
        .unwrap_err();
        assert!(err.to_string().contains("does not fit a u32"), "{err}");
    }
    // The same checks as `check_extents`: a zero extent, a tile that doesn't divide without
    // `pad`, a buffer past the u32 index space.
    for ext in [
        XExtents { batch: 0, seq: 1 },
        XExtents {
            batch: 1 << 16,
            seq: 1 << 16,
        },
    ] {
        let why = X::check_extents(ext).unwrap_err();
        assert_eq!(
            X::gpu_extents(ext).unwrap_err().to_string(),
            why.to_string()
        );
    }
    assert!(Strict::gpu_extents(StrictExtents { rows: 6 }).is_err());
    assert_eq!(Strict::gpu_extents(StrictExtents { rows: 8 }).unwrap(), [8]);
}

#[test]
fn named_constants_are_the_layouts_numbers() {
    // Static extents (run-time ones have none) and a tile per axis, 1 where it is not tiled.
    assert_eq!(X::HIDDEN_EXTENT, 32);
    assert_eq!([X::BATCH_TILE, X::SEQ_TILE, X::HIDDEN_TILE], [4, 4, 4]);
    assert_eq!([W::INPUT_EXTENT, W::OUTPUT_EXTENT], [32, 36]);
    assert_eq!([W::INPUT_TILE, W::OUTPUT_TILE], [4, 8]);
    assert_eq!([Attn::HEADS_EXTENT, Attn::HEAD_DIM_EXTENT], [4, 8]);
    let attn_tiles = [
        Attn::BATCH_TILE,
        Attn::SEQ_TILE,
        Attn::HEADS_TILE,
        Attn::HEAD_DIM_TILE,
    ];
    assert_eq!(attn_tiles, [1, 2, 1, 4]);
    assert_eq!(Scores::HEADS_EXTENT, 4);
    let tiles = [
        Scores::BATCH_TILE,
        Scores::HEADS_TILE,
        Scores::QUERY_TILE,
        Scores::KEY_TILE,
    ];
    assert_eq!(tiles, [1, 1, 1, 4]);
    // The tile constants multiply to TILE_ELEMS, and each agrees with the layout.
    assert_eq!(X::BATCH_TILE * X::SEQ_TILE * X::HIDDEN_TILE, X::TILE_ELEMS);
    assert_eq!(attn_tiles.iter().product::<usize>(), Attn::TILE_ELEMS);
    for (axis, tile) in X::descriptor().layout.axes().iter().zip([4, 4, 4]) {
        assert_eq!(axis.tile, tile);
    }
    // The same numbers in the WGSL, under the names of the core's list.
    for (wgsl, descriptor) in [
        (X::WGSL, X::descriptor()),
        (W::WGSL, W::descriptor()),
        (Attn::WGSL, Attn::descriptor()),
        (Scores::WGSL, Scores::descriptor()),
    ] {
        let name = descriptor.layout.name();
        for c in axis_consts(&descriptor.layout) {
            let line = format!("const {}: u32 = {}u;", c.wgsl_name(name), c.value);
            assert!(wgsl.contains(&line), "{line} missing:\n{wgsl}");
        }
    }
    assert!(X::WGSL.contains("const X_HIDDEN_EXTENT: u32 = 32u;"));
    assert!(W::WGSL.contains("const W_OUTPUT_TILE: u32 = 8u;"));
    assert!(!X::WGSL.contains("X_SEQ_EXTENT"), "seq is a run-time axis");
    // The tile helpers are `const fn`s: with static extents they fold at compile time.
    const LAST: usize = W::tile_offset(
        W::INPUT_EXTENT / W::INPUT_TILE - 1,
        W::OUTPUT_EXTENT.div_ceil(W::OUTPUT_TILE) - 1,
        WExtents,
    );
    assert_eq!(LAST, W::LEN - W::TILE_ELEMS);
}
