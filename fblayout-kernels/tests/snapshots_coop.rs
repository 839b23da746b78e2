//! Every cooperative-matrix shader the crate can emit passes naga's validator and its SPIR-V
//! writer (naga 30's writer panics on `coopLoad` operands that are not `let`s; this catches it
//! on machines without the feature), split-k's partial-sum kernels and its reduction
//! included, biased products (`C = A·B + bias`) in every configuration too, and the WGSL of a
//! few configurations is snapshotted.

mod support;

use fblayout_core::layout::{ElemType, View};
use fblayout_kernels::__private::{
    added_kernel_source, added_reduce_kernel_source, biased_kernel_source,
    biased_reduce_kernel_source, kernel_source, reduce_kernel_source, staging_orders,
};
use fblayout_kernels::ops::coop::{CoopConfig, Lanes, Order};
use fblayout_kernels::runtime::CoopScalar;
use naga::back::spv;
use support::{Layout2, static_2d, view_2d};

/// A and B in f16 and C in `c_elem`, each in one of the layouts.
fn views(la: Layout2, lb: Layout2, lc: Layout2, c_elem: ElemType) -> (View, View, View) {
    let (a, _) = view_2d("a", la, 100, 72, ElemType::F16);
    let (b, _) = view_2d("b", lb, 72, 60, ElemType::F16);
    let (c, _) = view_2d("c", lc, 100, 60, c_elem);
    (a, b, c)
}

/// Validates `source` and writes its SPIR-V; returns the SPIR-V's words.
fn spirv_of(what: &str, source: fblayout_core::kernel::KernelSource) -> Vec<u32> {
    let module = source.build().unwrap_or_else(|e| panic!("{what}: {e}"));
    let words = spv::write_vec(
        module.module().naga_module(),
        module.module().naga_info(),
        &support::coop_spv_options(),
        None,
    )
    .unwrap_or_else(|e| panic!("{what}: the SPIR-V writer failed: {e}"));
    assert_eq!(words[0], 0x0723_0203, "{what}: SPIR-V magic");
    words
}

/// Validates the kernel for `config` and writes its SPIR-V; returns the SPIR-V's words. For a
/// split-k configuration, split-k's reduction kernel goes through both as well.
fn spirv(a: &View, b: &View, c: &View, config: CoopConfig) -> Vec<u32> {
    if config.split_k > 1 {
        spirv_of(
            &format!("{config}: the reduction"),
            reduce_kernel_source(a, b, c).unwrap(),
        );
    }
    let mut words = Vec::new();
    for lanes in LANES {
        words = spirv_of(
            &format!("{config} {lanes:?}"),
            kernel_source(a, b, c, config, lanes).unwrap(),
        );
    }
    words
}

/// Subgroups of 32 lanes waiting around their scratch with workgroup barriers, and with
/// subgroup barriers (a device with subgroup operations).
const LANES: [Lanes; 2] = [Lanes::new(32), Lanes::new(32).subgroup_barrier(true)];

/// Like [`spirv`], for the biased product with the bias read through `bias`.
fn spirv_biased(a: &View, b: &View, bias: &View, c: &View, config: CoopConfig) -> Vec<u32> {
    if config.split_k > 1 {
        spirv_of(
            &format!("{config} biased: the reduction"),
            biased_reduce_kernel_source(a, b, bias, c).unwrap(),
        );
    }
    let mut words = Vec::new();
    for lanes in LANES {
        words = spirv_of(
            &format!("{config} biased {lanes:?}"),
            biased_kernel_source(a, b, bias, c, config, lanes).unwrap(),
        );
    }
    words
}

/// A `[rows, cols]` f16 view of static extents: row-major, or a row-major `[cols, rows]`
/// tensor read through its transpose.
fn fixed(name: &str, rows: u32, cols: u32, transposed: bool) -> View {
    use fblayout_core::layout::LayoutSpec;
    let spec = LayoutSpec::new(name).elem(ElemType::F16);
    if transposed {
        let layout = spec.axis("cols", cols).axis("rows", rows).build().unwrap();
        layout.view().transpose("cols", "rows").unwrap()
    } else {
        spec.axis("rows", rows)
            .axis("cols", cols)
            .build()
            .unwrap()
            .view()
    }
}

#[test]
fn every_configuration_and_transposition_survives_naga_s_spirv_writer() {
    // Row-major and transposed operands give the four staging-order pairs (coopLoad and
    // coopLoadT for each of A and B); other layouts go through the same paths.
    let mut orders_seen = Vec::new();
    let mut shaders = 0;
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        let (a, b) = (fixed("a", 100, 72, ta), fixed("b", 72, 60, tb));
        let (c, _) = view_2d("c", Layout2::RowMajor, 100, 60, ElemType::F32);
        orders_seen.push(staging_orders(&a, &b, &c).unwrap());
        // Biased: an f32 bias, and an f16 one read through a merge of a column-major matrix.
        let bias32 = support::view_1d("bias", "cols", 60, ElemType::F32);
        let bias16 = support::static_2d(
            "bias",
            4,
            15,
            ElemType::F16,
            fblayout_core::layout::Order::ColMajor,
        )
        .merge(&["rows", "cols"], "cols")
        .unwrap();
        for acc in [CoopScalar::F32, CoopScalar::F16] {
            for config in CoopConfig::space(acc) {
                spirv(&a, &b, &c, config);
                let bias = if acc == CoopScalar::F32 {
                    &bias32
                } else {
                    &bias16
                };
                spirv_biased(&a, &b, bias, &c, config);
                shaders += 2;
            }
        }
        for config in CoopConfig::split_space() {
            let text = kernel_source(&a, &b, &c, config, Lanes::new(32))
                .unwrap()
                .build()
                .unwrap()
                .source()
                .to_owned();
            // Split-k's kernel stores every fragment straight into the workspace.
            assert!(text.contains("coopStoreT(cm_acc0_0, &partial_data[cm_c0_0], cm_ld)"));
            assert!(
                !text.contains("c_store(") && !text.contains("cm_out"),
                "{config}"
            );
            spirv(&a, &b, &c, config);
            // The biased partial kernel is the unbiased one: the reduction adds the bias.
            let biased = biased_kernel_source(&a, &b, &bias32, &c, config, Lanes::new(32))
                .unwrap()
                .build()
                .unwrap();
            assert!(!biased.source().contains("bias_"), "{config}");
            spirv_biased(&a, &b, &bias32, &c, config);
            shaders += 2;
        }
    }
    // Every pair of staging orders was covered.
    for want in [
        (Order::OuterRows, Order::KRows),
        (Order::KRows, Order::KRows),
        (Order::OuterRows, Order::OuterRows),
        (Order::KRows, Order::OuterRows),
    ] {
        assert!(
            orders_seen.contains(&want),
            "{want:?} not among {orders_seen:?}"
        );
    }
    assert_eq!(
        shaders,
        8 * (2 * CoopConfig::space(CoopScalar::F32).len() + CoopConfig::split_space().len())
    );
}

#[test]
fn other_layouts_element_reads_and_f16_outputs_survive_it_too() {
    let configs = [
        CoopConfig::DEFAULT,
        CoopConfig::SMALL,
        CoopConfig::DEFAULT.with_split(4),
        CoopConfig::SMALL.with_split(2),
    ];
    let combos = [
        (Layout2::RTile(16), Layout2::RTile(16), Layout2::RTile(16)),
        (Layout2::ColMajor, Layout2::ColMajor, Layout2::ColMajor),
        (Layout2::RTileT(8), Layout2::RTile(4), Layout2::RowMajorT),
    ];
    for (la, lb, lc) in combos {
        for c_elem in [ElemType::F32, ElemType::F16] {
            let (a, b, c) = views(la, lb, lc, c_elem);
            let bias = support::view_1d("bias", "cols", 60, c_elem);
            for config in configs {
                spirv(&a, &b, &c, config);
                spirv_biased(&a, &b, &bias, &c, config);
            }
        }
    }
}

#[test]
fn batched_views_survive_it() {
    use fblayout_core::layout::LayoutSpec;
    let qk = LayoutSpec::new("q")
        .elem(ElemType::F16)
        .dyn_axis("batch")
        .dyn_axis("seq")
        .axis("heads", 4)
        .axis("head_dim", 64)
        .build()
        .unwrap();
    let q = qk
        .view()
        .permute(&["batch", "heads", "seq", "head_dim"])
        .unwrap();
    let k_t = qk
        .view()
        .permute(&["batch", "heads", "head_dim", "seq"])
        .unwrap();
    let s = LayoutSpec::new("s")
        .dyn_axis("batch")
        .axis("heads", 4)
        .dyn_axis("seq")
        .axis("key", 128)
        .build()
        .unwrap();
    spirv(&q, &k_t, &s.view(), CoopConfig::DEFAULT);
    spirv(&q, &k_t, &s.view(), CoopConfig::DEFAULT.with_split(2));
}

#[test]
fn fragments_go_straight_into_a_row_or_column_major_c_of_the_accumulator_s_type() {
    use fblayout_core::layout::Order as Memory;
    let (a, b) = (fixed("a", 100, 72, false), fixed("b", 72, 64, true));
    let a112 = fixed("a", 112, 72, false);
    // A and B to match C's extents (rows 100 where they are dynamic).
    let direct = |c: &View, config: CoopConfig| {
        let extent = |axis: usize, default: u32| {
            c.axes()[axis]
                .extent
                .as_static()
                .map_or(default, |e| e as u32)
        };
        let a = fixed("a", extent(0, 100), 72, false);
        let b = fixed("b", 72, extent(1, 64), true);
        let source = kernel_source(&a, &b, c, config, Lanes::new(32))
            .unwrap()
            .build()
            .unwrap();
        let text = source.source();
        let rows = text.contains("coopStoreT(cm_acc0_0, &c_data[cm_c0_0], cm_ld)");
        let cols = text.contains("coopStore(cm_acc0_0, &c_data[cm_c0_0], cm_ld)");
        // Edge blocks always keep the guarded store.
        assert!(text.contains("c_store("), "{config}");
        match (rows, cols) {
            (true, false) => Some(Memory::RowMajor),
            (false, true) => Some(Memory::ColMajor),
            (false, false) => None,
            _ => panic!("{config}: both stores"),
        }
    };
    for acc in [CoopScalar::F32, CoopScalar::F16] {
        let elem = if acc == CoopScalar::F32 {
            ElemType::F32
        } else {
            ElemType::F16
        };
        let other = if acc == CoopScalar::F32 {
            ElemType::F16
        } else {
            ElemType::F32
        };
        for config in CoopConfig::space(acc) {
            // Row-major with 64 columns, column-major with 112 rows: straight in.
            let c = static_2d("c", 100, 64, elem, Memory::RowMajor);
            assert_eq!(direct(&c, config), Some(Memory::RowMajor), "{config}");
            spirv(&a, &b, &c, config);
            let c = static_2d("c", 112, 64, elem, Memory::ColMajor);
            assert_eq!(direct(&c, config), Some(Memory::ColMajor), "{config}");
            spirv(&a112, &b, &c, config);
        }
        let config = CoopConfig::SMALL.with_acc(acc);
        // Rows of 60 elements are not 16-aligned, a transposed view is not C as declared,
        // an R-Tile is not affine, and the other element type needs a conversion.
        assert_eq!(
            direct(&static_2d("c", 100, 60, elem, Memory::RowMajor), config),
            None
        );
        let t = static_2d("c", 64, 100, elem, Memory::RowMajor)
            .transpose("rows", "cols")
            .unwrap();
        assert_eq!(direct(&t, config), None);
        let (tiled, _) = view_2d("c", Layout2::RTile(16), 100, 64, elem);
        assert_eq!(direct(&tiled, config), None);
        assert_eq!(
            direct(&static_2d("c", 100, 64, other, Memory::RowMajor), config),
            None
        );
    }
}

#[test]
fn operands_the_path_cannot_take_are_refused_with_the_reason() {
    let (a, b, c) = views(
        Layout2::RowMajor,
        Layout2::RowMajor,
        Layout2::RowMajor,
        ElemType::F32,
    );
    let (a32, _) = view_2d("a", Layout2::RowMajor, 100, 72, ElemType::F32);
    let err = kernel_source(&a32, &b, &c, CoopConfig::DEFAULT, Lanes::new(32)).unwrap_err();
    assert!(err.to_string().contains("f16"), "{err}");
    let (c_bad, _) = view_2d("c", Layout2::RowMajor, 100, 60, ElemType::U32);
    let err = kernel_source(&a, &b, &c_bad, CoopConfig::DEFAULT, Lanes::new(32)).unwrap_err();
    assert!(err.to_string().contains("f32 or f16"), "{err}");
}

#[test]
fn wgsl_snapshots() {
    let (a, b, c) = views(
        Layout2::RowMajor,
        Layout2::RowMajor,
        Layout2::RowMajor,
        ElemType::F32,
    );
    let small = kernel_source(&a, &b, &c, CoopConfig::SMALL, Lanes::new(32))
        .unwrap()
        .build()
        .unwrap();
    insta::assert_snapshot!("coop_row_major_small", small.source());
    let (a, b, c) = views(
        Layout2::RowMajorT,
        Layout2::RTile(16),
        Layout2::RowMajor,
        ElemType::F16,
    );
    let config = CoopConfig {
        block_m: 64,
        block_n: 64,
        frags_m: 2,
        frags_n: 2,
        k_step: 32,
        stages: 2,
        acc: CoopScalar::F32,
        split_k: 1,
    };
    let t = kernel_source(&a, &b, &c, config, Lanes::new(32))
        .unwrap()
        .build()
        .unwrap();
    insta::assert_snapshot!("coop_transposed_a_rtile_b_double_buffered", t.source());
    // C row-major with 64 columns: interior blocks store their fragments straight into it.
    let c = static_2d(
        "c",
        100,
        64,
        ElemType::F32,
        fblayout_core::layout::Order::RowMajor,
    );
    let (a, b) = (fixed("a", 100, 72, false), fixed("b", 72, 64, false));
    let direct = kernel_source(&a, &b, &c, CoopConfig::SMALL, Lanes::new(32))
        .unwrap()
        .build()
        .unwrap();
    insta::assert_snapshot!("coop_row_major_small_direct_store", direct.source());
    // The same, biased: the accumulators start as the bias; the straight store stays.
    let bias = support::view_1d("bias", "cols", 64, ElemType::F32);
    let biased = biased_kernel_source(&a, &b, &bias, &c, CoopConfig::SMALL, Lanes::new(32))
        .unwrap()
        .build()
        .unwrap();
    assert!(
        biased
            .source()
            .contains("coopStoreT(cm_acc0_0, &c_data[cm_c0_0], cm_ld)")
    );
    insta::assert_snapshot!("coop_row_major_small_direct_store_biased", biased.source());
}

/// An added product (`C = A·B + D`, and `C = A·B · f'(D)` for every activation) in every
/// configuration and split passes naga's validator and SPIR-V writer, with D read four at a
/// time (row-major `f16`, C `f16` and four-wide) and element by element (D read through a
/// transpose, C `f32`); no fragment goes straight into C, though C's layout would allow it,
/// and each element leaving the scratch gets D.
#[test]
fn added_products_survive_naga_s_spirv_writer_and_never_store_straight() {
    use fblayout_kernels::ops::Activation;
    use fblayout_kernels::ops::matmul::Merge;
    let (a, b) = (fixed("a", 100, 72, false), fixed("b", 72, 64, false));
    let c32 = static_2d(
        "c",
        100,
        64,
        ElemType::F32,
        fblayout_core::layout::Order::RowMajor,
    );
    let c16 = static_2d(
        "c",
        100,
        64,
        ElemType::F16,
        fblayout_core::layout::Order::RowMajor,
    );
    let d_rows = fixed("d", 100, 64, false);
    let d_t = fixed("d", 100, 64, true);
    let merges = [
        Merge::Add,
        Merge::ActivationGrad(Activation::Gelu),
        Merge::ActivationGrad(Activation::GeluTanh),
        Merge::ActivationGrad(Activation::Silu),
        Merge::ActivationGrad(Activation::Tanh),
    ];
    let mut shaders = 0;
    for (i, (c, d, wide)) in [(&c16, &d_rows, true), (&c32, &d_t, false)]
        .into_iter()
        .enumerate()
    {
        for (j, config) in CoopConfig::space(CoopScalar::F32)
            .into_iter()
            .chain(CoopConfig::split_space())
            .enumerate()
        {
            // Every merge, each configuration under one of them.
            let merge = merges[(i + j) % merges.len()];
            for lanes in LANES {
                let what = format!("{config} added {merge:?} {lanes:?}");
                let source = added_kernel_source(&a, &b, d, c, config, lanes, merge).unwrap();
                let text = source.clone().build().unwrap().source().to_owned();
                spirv_of(&what, source);
                shaders += 1;
                if config.split_k > 1 {
                    // The partial sums know nothing of D: the reduction adds it.
                    assert!(!text.contains("d_load"), "{what}");
                    continue;
                }
                assert!(!text.contains("&c_data["), "{what}: a straight store");
                assert_eq!(text.contains("d_load4("), wide, "{what}");
                assert!(text.contains("d_load("), "{what}");
                if let Merge::ActivationGrad(_) = merge {
                    assert!(text.contains("_grad_1(d_load("), "{what}");
                }
            }
            if config.split_k > 1 {
                spirv_of(
                    &format!("{config} added {merge:?}: the reduction"),
                    added_reduce_kernel_source(&a, &b, d, c, merge).unwrap(),
                );
            }
        }
    }
    assert!(shaders > 0);
    let module = added_kernel_source(
        &a,
        &b,
        &d_rows,
        &c16,
        CoopConfig::SMALL,
        Lanes::new(32),
        Merge::Add,
    )
    .unwrap()
    .build()
    .unwrap();
    insta::assert_snapshot!("coop_row_major_small_f16_added", module.source());
}

/// On a device with subgroup operations a subgroup waits for its own lanes around its scratch
/// (the bias seed and the epilogue of an `f16` C, which no fragment can be stored straight
/// into) with subgroup barriers; only the k-loop's staging, shared by every subgroup, keeps a
/// workgroup barrier.
#[test]
fn subgroup_barrier_wgsl_snapshot() {
    let (a, b) = (fixed("a", 100, 72, false), fixed("b", 72, 64, false));
    let c = static_2d(
        "c",
        100,
        64,
        ElemType::F16,
        fblayout_core::layout::Order::RowMajor,
    );
    let bias = support::view_1d("bias", "cols", 64, ElemType::F32);
    let config = CoopConfig::SMALL;
    let lanes = Lanes::new(32).subgroup_barrier(true);
    let module = biased_kernel_source(&a, &b, &bias, &c, config, lanes)
        .unwrap()
        .build()
        .unwrap();
    let text = module.source();
    // The scratch's waits: two per column of fragments (the bias) and two per fragment (C).
    let fragments = config.frags_m * config.frags_n;
    let scratch_waits = 2 * config.frags_n + 2 * fragments;
    assert_eq!(
        text.matches("subgroupBarrier();").count() as u32,
        scratch_waits
    );
    // Without subgroup operations the same waits are workgroup barriers.
    let plain = biased_kernel_source(&a, &b, &bias, &c, config, Lanes::new(32))
        .unwrap()
        .build()
        .unwrap();
    assert!(!plain.source().contains("subgroupBarrier"));
    assert_eq!(
        plain.source().matches("workgroupBarrier();").count(),
        text.matches("workgroupBarrier();").count() + scratch_waits as usize
    );
    insta::assert_snapshot!("coop_row_major_small_f16_subgroup_barriers", text);
}

/// Split-k's pair for a weight gradient `dW = Xᵀ·dY`: the kernel writing each part's sums
/// into the workspace (A read through a transpose), and the reduction writing an f16 C.
#[test]
fn split_k_wgsl_snapshots() {
    // Xᵀ [72, 100] reads X [100 tokens, 72] through its transpose; k is the 100 tokens.
    let (xt, dy) = (fixed("x", 72, 100, true), fixed("dy", 100, 60, false));
    let (dw, _) = view_2d("dw", Layout2::RowMajor, 72, 60, ElemType::F16);
    let config = CoopConfig::SMALL.with_split(4);
    let partial = kernel_source(&xt, &dy, &dw, config, Lanes::new(32))
        .unwrap()
        .build()
        .unwrap();
    insta::assert_snapshot!("coop_split_k_partial_transposed_a", partial.source());
    let reduce = reduce_kernel_source(&xt, &dy, &dw)
        .unwrap()
        .build()
        .unwrap();
    insta::assert_snapshot!("coop_split_k_reduce_f16", reduce.source());
}
