//! The kernel surface against the definitions: random layouts and view chains, with run-time
//! extents and partial tiles.
//!
//! - `contiguous_run` is sound: whenever it says that aligned runs of `w` coordinates along an
//!   axis are contiguous, every such run in the bound view lands on `w` consecutive offsets
//!   starting at a multiple of `w`, by the oracle (written from the layout definitions).
//! - `steps_evenly` is sound: whenever it says that stepping an axis by `s` moves the offset
//!   evenly, every pair of coordinates `s` apart along it in the bound view lies the same
//!   distance apart by the oracle.
//! - The generated `load`, `load4` and `store` functions read and write the elements the
//!   oracle names, on the GPU (lavapipe in CI).
//! - Extents near the u32 limit: the analysis and the shader assembly stay exact.

use fblayout_core::kernel::{KernelSource, Operand, ParamValue};
use fblayout_core::layout::{ElemType, LayoutSpec};
use fblayout_kernels::runtime::GpuBuffer;
use fblayout_tests::{Case, ViewCase, apply_steps, arb_case, arb_steps, coords_of, test_gpu};
use proptest::prelude::*;

/// The oracle offset of a view coordinate.
fn oracle(case: &Case, vc: &ViewCase, c: &[u64]) -> u64 {
    case.oracle_offset(&vc.oracle_coords(c))
        .expect("view coordinates inside the shape read the tensor")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn contiguous_runs_are_contiguous_by_the_definitions(case in arb_case(), steps in arb_steps()) {
        let vc = apply_steps(&case, &steps);
        let f = vc.view.index_fn().simplified();
        for axis in 0..vc.shape.len() {
            for width in [2u64, 4, 8] {
                if !f.contiguous_run(axis, width) {
                    continue;
                }
                for c in coords_of(&vc.shape) {
                    if c[axis] % width != 0 || c[axis] + width > vc.shape[axis] {
                        continue;
                    }
                    let base = oracle(&case, &vc, &c);
                    prop_assert_eq!(base % width, 0, "run at {:?} along {} starts unaligned", c, axis);
                    for j in 1..width {
                        let mut next = c.clone();
                        next[axis] += j;
                        prop_assert_eq!(
                            oracle(&case, &vc, &next),
                            base + j,
                            "{:?} + {} along axis {} (width {})", c, j, axis, width
                        );
                    }
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn even_steps_are_even_by_the_definitions(case in arb_case(), steps in arb_steps()) {
        let vc = apply_steps(&case, &steps);
        let f = vc.view.index_fn().simplified();
        for axis in 0..vc.shape.len() {
            for step in [1u64, 2, 3, 4, 8, 16] {
                if !f.steps_evenly(axis, step) {
                    continue;
                }
                let mut distance = None;
                for c in coords_of(&vc.shape) {
                    if c[axis] + step >= vc.shape[axis] {
                        continue;
                    }
                    let mut next = c.clone();
                    next[axis] += step;
                    let d = oracle(&case, &vc, &next).wrapping_sub(oracle(&case, &vc, &c));
                    let first = *distance.get_or_insert(d);
                    prop_assert_eq!(
                        d, first,
                        "{:?} + {} along axis {} moves by {}, elsewhere by {}", c, step, axis, d, first
                    );
                }
            }
        }
    }
}

/// A dense row-major layout of `shape` (static extents): the other side of the copies below.
fn dense(shape: &[u64]) -> fblayout_core::layout::View {
    let mut spec = LayoutSpec::new("d");
    for (i, &n) in shape.iter().enumerate() {
        spec = spec.axis(format!("d{i}"), n as u32);
    }
    spec.build().unwrap().view()
}

/// The body of a copy kernel over the shape of operand `d`: `to_store(c, from_load(c))` at
/// every coordinate, or per run of four along the last axis (`load4`/`store4`) when `wide`.
fn copy_body(rank: usize, from: &str, to: &str, wide: bool) -> String {
    let dims: Vec<String> = (0..rank).map(|d| format!("d_dim{d}()")).collect();
    let mut units = dims.clone();
    if wide {
        units[rank - 1] = format!("({} / 4u)", dims[rank - 1]);
    }
    let mut decode = String::from("    var rest = id.x;\n");
    for d in (0..rank).rev() {
        decode += &format!(
            "    let c{d} = rest % {};\n    rest = rest / {};\n",
            units[d], units[d]
        );
    }
    let coords: Vec<String> = (0..rank)
        .map(|d| {
            if wide && d + 1 == rank {
                format!("c{d} * 4u")
            } else {
                format!("c{d}")
            }
        })
        .collect();
    let c = coords.join(", ");
    let suffix = if wide { "4" } else { "" };
    format!(
        "@compute @workgroup_size(64)\n\
         fn main(@builtin(global_invocation_id) id: vec3<u32>) {{\n\
         if (id.x >= {}) {{ return; }}\n\
         {decode}\
         {to}_store{suffix}({c}, {from}_load{suffix}({c}));\n}}\n",
        units.join(" * ")
    )
}

/// The parameter fields of the run-time extents of operand `role`.
fn extent_params(
    case: &Case,
    role: &str,
    bound: &fblayout_core::layout::BoundView,
) -> Vec<(String, ParamValue)> {
    case.layout
        .dynamic_axes()
        .zip(bound.extent_args())
        .map(|(a, &n)| (format!("{role}.{}_len", a.name), ParamValue::U32(n as u32)))
        .collect()
}

fn run(
    kernel: &fblayout_core::kernel::KernelModule,
    buffers: &[(&str, &GpuBuffer)],
    params: &[(String, ParamValue)],
    invocations: u64,
) {
    let gpu = test_gpu();
    let params: Vec<(&str, ParamValue)> = params.iter().map(|(n, v)| (n.as_str(), *v)).collect();
    let mut batch = gpu.batch();
    batch
        .dispatch(
            kernel,
            "main",
            buffers,
            &params,
            [(invocations as u32).div_ceil(64), 1, 1],
        )
        .unwrap();
    batch.submit().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn generated_loads_and_stores_touch_what_the_definitions_say_on_the_gpu(
        case in arb_case(),
        steps in arb_steps(),
    ) {
        let gpu = test_gpu();
        let vc = apply_steps(&case, &steps);
        let rank = vc.shape.len();
        let total: u64 = vc.shape.iter().product();
        let bound = vc.view.bind(&case.bindings()).unwrap();
        let d = dense(&vc.shape);
        let params = extent_params(&case, "v", &bound);
        // Element i of the physical buffer holds i + 0.5 (exact in f32 at these sizes).
        let physical: Vec<f32> = (0..bound.len()).map(|i| i as f32 + 0.5).collect();
        let src = GpuBuffer::from_slice(gpu, &physical).unwrap();
        let injective = !steps.iter().any(|s| matches!(s, fblayout_tests::StepChoice::Broadcast(..)));
        for wide_request in [false, true] {
            // Loads through the view, stores into the dense tensor.
            let mut v = Operand::read("v", &vc.view).unwrap();
            let mut out = Operand::write("d", &d).unwrap();
            if wide_request {
                v = v.vectorized(rank - 1);
                out = out.vectorized(rank - 1);
            }
            // Runs proved contiguous may end in a partial run, which kernels read one element
            // at a time; this copy kernel goes wide only when every run is whole.
            let whole = vc.shape[rank - 1].is_multiple_of(4);
            let wide = whole && v.vector_axis().is_some() && out.vector_axis().is_some();
            let kernel = KernelSource::new("gather").operand(v).operand(out)
                .body(copy_body(rank, "v", "d", wide)).build().unwrap();
            let dst = GpuBuffer::from_slice(gpu, &vec![f32::NAN; total as usize]).unwrap();
            run(&kernel, &[("v", &src), ("d", &dst)], &params, if wide { total / 4 } else { total });
            let got = dst.read_back::<f32>().unwrap();
            for (i, c) in coords_of(&vc.shape).enumerate() {
                let want = oracle(&case, &vc, &c) as f32 + 0.5;
                prop_assert_eq!(got[i], want, "load of {:?} (wide: {})", c, wide);
            }

            // Stores through the view, from the dense tensor: every element lands where the
            // oracle says and nothing else is touched.
            if !injective {
                continue;
            }
            let mut v = Operand::write("v", &vc.view).unwrap();
            let mut from = Operand::read("d", &d).unwrap();
            if wide_request {
                v = v.vectorized(rank - 1);
                from = from.vectorized(rank - 1);
            }
            let wide = whole && v.vector_axis().is_some() && from.vector_axis().is_some();
            let kernel = KernelSource::new("scatter").operand(from).operand(v)
                .body(copy_body(rank, "d", "v", wide)).build().unwrap();
            let logical: Vec<f32> = (0..total).map(|i| i as f32 + 0.25).collect();
            let dense_buf = GpuBuffer::from_slice(gpu, &logical).unwrap();
            let target = GpuBuffer::from_slice(gpu, &vec![f32::NAN; bound.len() as usize]).unwrap();
            run(&kernel, &[("d", &dense_buf), ("v", &target)], &params, if wide { total / 4 } else { total });
            let got = target.read_back::<f32>().unwrap();
            let mut want = vec![f32::NAN; bound.len() as usize];
            for (i, c) in coords_of(&vc.shape).enumerate() {
                want[oracle(&case, &vc, &c) as usize] = logical[i];
            }
            for (at, (g, w)) in got.iter().zip(&want).enumerate() {
                prop_assert!(g == w || (g.is_nan() && w.is_nan()), "store: element {} is {}, expected {} (wide: {})", at, g, w, wide);
            }
        }
    }
}

#[test]
fn extents_near_the_u32_limit_assemble_exactly() {
    // A run-time row count and 2^28 columns: runs along the columns are proved, the shader
    // validates, and the parameter block carries the run-time extent.
    let x = LayoutSpec::new("x")
        .dyn_axis("rows")
        .axis("cols", 1 << 28)
        .elem(ElemType::F32)
        .build()
        .unwrap();
    let f = x.view().index_fn().simplified();
    assert!(f.contiguous_run(1, 4));
    let xt = x.view().transpose("rows", "cols").unwrap();
    let module = KernelSource::new("big")
        .operand(Operand::read("x", &xt).unwrap().vectorized(0))
        .body("@compute @workgroup_size(1) fn main() { let v = x_load4(0u, 0u); }")
        .build()
        .unwrap();
    assert_eq!(module.slot("x").and_then(|s| s.vector), Some(0));
    assert!(
        module
            .source()
            .contains("fn x_dim0() -> u32 {\n    return 268435456u;")
    );
    let bytes = module
        .params()
        .unwrap()
        .pack(&[("x.rows_len", ParamValue::U32(15))])
        .unwrap();
    assert_eq!(&bytes[..4], &15u32.to_le_bytes());
    // A 1-D axis of the largest extent is contiguous: its aligned runs are whole except the
    // last, which kernels read one element at a time.
    let edge = LayoutSpec::new("e").axis("n", u32::MAX).build().unwrap();
    assert!(edge.view().index_fn().simplified().contiguous_run(0, 4));
    // Its transpose-free split into 2^16 × 65535 runs along the inner part only when 4
    // divides it, which 65535 does not.
    let split = edge
        .view()
        .split("n", &[("hi", Some(65_537)), ("lo", None)])
        .unwrap();
    let f = split.index_fn().simplified();
    assert!(!f.contiguous_run(1, 4));
}
