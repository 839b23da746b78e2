//! The fused attention's tensor-core kernels without a device: every one of the five (forward,
//! `dQ`, `dK`, `dV`, and `dK` with `dV`), for heads
//! of 16, 32, 48 and 64, every mask, multi-head and grouped-query attention, separate tensors
//! and a fused projection, passes naga's validator (cooperative matrices and subgroup
//! operations) and its SPIR-V writer (naga 30's writer panics on a `coopLoad` whose index or
//! stride is not a `let`: this catches it on machines without tensor cores); heads the kernels
//! don't take give no kernels; and the five kernels of a causal, grouped-query attention over a
//! fused projection are snapshotted. What they compute is checked on a GPU with tensor cores by
//! `ops_flash_attention`, against `f64` definitions.

mod support;

use fblayout_core::layout::{ElemType, View};
use fblayout_kernels::__private::flash_tensor_kernel_sources;
use fblayout_kernels::ops::{Attention, Mask, qkv_views};
use naga::back::spv;
use support::{coop_spv_options, heads_view, keep_view, lse_view, qkv_view};

/// `[batch, seq, heads, head_dim]` of f16.
fn heads(name: &str, heads: u32, head_dim: u32) -> View {
    heads_view(name, heads, head_dim, ElemType::F16)
}

/// Q, K, V and O of `h` query and `kv` key/value heads of `d`: separate tensors, or three
/// views of one fused projection.
fn views(h: u32, kv: u32, d: u32, fused: bool) -> [View; 5] {
    let (q, k, v) = if fused {
        let qkv = qkv_view((h + 2 * kv) * d, ElemType::F16);
        qkv_views(&qkv, h, kv).unwrap()
    } else {
        (heads("q", h, d), heads("k", kv, d), heads("v", kv, d))
    };
    [q, k, v, heads("o", h, d), lse_view(h)]
}

/// The SPIR-V of each of the five kernels (validated by naga on the way).
fn spirv(views: &[View; 5], keep: Option<&View>, attention: Attention, d: u32) -> usize {
    let sources = flash_tensor_kernel_sources(views, keep, attention, d)
        .unwrap()
        .unwrap_or_else(|| panic!("heads of {d} take tensor cores"));
    let mut words = 0;
    for source in sources {
        let module = source.build().unwrap_or_else(|e| panic!("d {d}: {e}"));
        let spirv = spv::write_vec(
            module.module().naga_module(),
            module.module().naga_info(),
            &coop_spv_options(),
            None,
        )
        .unwrap_or_else(|e| panic!("d {d} {attention:?}: the SPIR-V writer failed: {e}"));
        words += spirv.len();
    }
    words
}

#[test]
fn every_kernel_survives_naga_s_validator_and_spirv_writer() {
    let mut built = 0;
    for d in [16, 32, 48, 64] {
        for (h, kv) in [(4, 4), (4, 2), (4, 1)] {
            for mask in [Mask::None, Mask::Causal { offset: 2 }, Mask::Keys] {
                for fused in [false, true] {
                    let views = views(h, kv, d, fused);
                    let keep = keep_view();
                    let keep = (mask == Mask::Keys).then_some(&keep);
                    assert!(spirv(&views, keep, Attention::new(h, kv, d, mask), d) > 0);
                    built += 5;
                }
            }
        }
    }
    assert_eq!(built, 4 * 3 * 3 * 2 * 5);
}

#[test]
fn heads_the_tensor_cores_do_not_take_give_no_kernels() {
    for d in [8, 24, 80, 128] {
        let views = views(2, 2, d, false);
        let attention = Attention::new(2, 2, d, Mask::None);
        assert!(
            flash_tensor_kernel_sources(&views, None, attention, d)
                .unwrap()
                .is_none(),
            "heads of {d}"
        );
    }
}

#[test]
fn fused_projection_causal_grouped_snapshots() {
    let views = views(4, 2, 32, true);
    let attention = Attention::new(4, 2, 32, Mask::Causal { offset: 0 });
    let sources = flash_tensor_kernel_sources(&views, None, attention, 32)
        .unwrap()
        .unwrap();
    let names = ["forward", "grad_q", "grad_k", "grad_v", "grad_kv"];
    assert_eq!(sources.len(), names.len());
    for (name, source) in names.iter().zip(sources) {
        let module = source.build().unwrap();
        insta::assert_snapshot!(
            format!("tensor_fused_projection_causal_grouped__{name}"),
            module.source()
        );
    }
}
