//! The AdamW step, the sum of squares and the non-finite check: against their definitions, and
//! the GPU against the CPU under every 2-D layout and element type, with the subgroup
//! reductions and their workgroup-memory fallback; the step over a group of parameters in one
//! dispatch, with the copies it writes, against the definition over several gated steps.

mod support;

use fblayout_core::layout::{ElemType, View};
use fblayout_kernels::cpu::Real;
use fblayout_kernels::ops::adamw::{MAX_MEMBERS, STEP_SCALARS, adamw_step_cpu, sum_squares_cpu};
use fblayout_kernels::ops::finite::{MAX_TENSORS, non_finite_cpu};
use fblayout_kernels::ops::{
    AdamW, AdamWMember, AdamWOp, AdamWTensors, NonFiniteOp, OpError, StepValues, SumSquaresOp,
};
use fblayout_kernels::runtime::{Gpu, GpuBuffer};
use fblayout_kernels::tensor::GpuArg;
use support::{
    Layout2, Rng, Tensor, assert_close, gpu, gpu_elems, gpu_without_subgroups, gpus, tolerance,
    view_1d, view_2d,
};

const HYPER: AdamW = AdamW {
    lr: 0.01,
    beta1: 0.9,
    beta2: 0.99,
    eps: 1e-6,
    weight_decay: 0.1,
};

/// Parameters, gradient and both moments, each in its own layout.
fn tensors(
    rng: &mut Rng,
    layouts: [Layout2; 4],
    rows: u32,
    cols: u32,
    elem: ElemType,
) -> [Tensor; 4] {
    let names = ["param", "grad", "m", "v"];
    let ranges = [(-1.0, 1.0), (-2.0, 2.0), (-0.1, 0.1), (0.01, 0.2)];
    std::array::from_fn(|i| {
        let (view, bind) = view_2d(names[i], layouts[i], rows, cols, elem);
        Tensor::random(rng, view, bind, ranges[i].0, ranges[i].1)
    })
}

/// The step on dense values, written from the formulas: `(p, m, v)` after steps `1..=steps`
/// with the same gradient.
fn reference(p: &[f64], g: &[f64], m: &[f64], v: &[f64], steps: u32, scale: f64) -> [Vec<f64>; 3] {
    let (b1, b2) = (f64::from(HYPER.beta1), f64::from(HYPER.beta2));
    let (mut p, mut m, mut v) = (p.to_vec(), m.to_vec(), v.to_vec());
    for t in 1..=steps {
        for i in 0..p.len() {
            let gs = g[i] * scale;
            m[i] = b1 * m[i] + (1.0 - b1) * gs;
            v[i] = b2 * v[i] + (1.0 - b2) * gs * gs;
            let m_hat = m[i] / (1.0 - b1.powi(t as i32));
            let v_hat = v[i] / (1.0 - b2.powi(t as i32));
            p[i] -= f64::from(HYPER.lr)
                * (m_hat / (v_hat.sqrt() + f64::from(HYPER.eps))
                    + f64::from(HYPER.weight_decay) * p[i]);
        }
    }
    [p, m, v]
}

/// Runs `steps` CPU steps in `T` on the tensors' values; returns `(p, m, v)`.
fn cpu_steps<T: Real>(t: &[Tensor; 4], steps: u32, scale: f64) -> [Vec<f64>; 3] {
    let [p, g, m, v] = t;
    let (mut ps, gs, mut ms, mut vs) = (p.host::<T>(), g.host::<T>(), m.host::<T>(), v.host::<T>());
    for step in 1..=steps {
        adamw_step_cpu(
            &mut p.arg_mut(&mut ps),
            &g.arg(&gs),
            &mut m.arg_mut(&mut ms),
            &mut v.arg_mut(&mut vs),
            &HYPER,
            step,
            scale,
        )
        .unwrap();
    }
    [p.read_host(&ps), m.read_host(&ms), v.read_host(&vs)]
}

fn layout_quads() -> impl Iterator<Item = [Layout2; 4]> {
    let all = Layout2::ALL;
    (0..all.len())
        .map(move |i| std::array::from_fn(|k| all[(i + k) % all.len()]))
        .chain([[Layout2::RowMajor; 4], [Layout2::RTile(4); 4]])
}

#[test]
fn cpu_steps_match_the_definition_under_every_layout() {
    let mut rng = Rng::new(1);
    for layouts in layout_quads() {
        let t = tensors(&mut rng, layouts, 13, 36, ElemType::F32);
        let got = cpu_steps::<f64>(&t, 3, 0.5);
        let want = reference(
            &t[0].values,
            &t[1].values,
            &t[2].values,
            &t[3].values,
            3,
            0.5,
        );
        for (k, name) in ["param", "m", "v"].iter().enumerate() {
            assert_close(&format!("{layouts:?}: {name}"), &got[k], &want[k], 1e-13);
        }
    }
}

/// The four tensors' views, as an AdamW step takes them.
fn quad_views(t: &[Tensor; 4]) -> AdamWTensors<&View> {
    AdamWTensors {
        param: &t[0].view,
        grad: &t[1].view,
        m: &t[2].view,
        v: &t[3].view,
    }
}

/// Four of anything, in the order of [`tensors`]: parameters, gradient, moments.
fn quad<T>(x: &[T]) -> AdamWTensors<&T> {
    AdamWTensors {
        param: &x[0],
        grad: &x[1],
        m: &x[2],
        v: &x[3],
    }
}

/// What a step updated, read back: `(p, m, v)`.
fn updated(t: &[Tensor; 4], bufs: &[GpuBuffer]) -> [Vec<f64>; 3] {
    [0, 2, 3].map(|i| t[i].download(&bufs[i]))
}

fn gpu_steps(gpu: &Gpu, t: &[Tensor; 4], steps: u32, scale: f32) -> [Vec<f64>; 3] {
    let views = quad_views(t);
    let op = AdamWOp::new(gpu, &views).unwrap();
    let bufs: Vec<_> = t.iter().map(|x| x.upload(gpu)).collect();
    let args: Vec<_> = t.iter().zip(&bufs).map(|(x, b)| x.gpu_arg(b)).collect();
    let a = quad(&args);
    let mut batch = gpu.batch();
    for step in 1..=steps {
        op.step(&mut batch, &a, &HYPER, step, scale).unwrap();
    }
    batch.submit().unwrap();
    updated(t, &bufs)
}

#[test]
fn gpu_steps_match_the_cpu_under_every_layout_and_element_type() {
    let gpu = gpu();
    let mut rng = Rng::new(2);
    for elem in gpu_elems() {
        for layouts in layout_quads() {
            let t = tensors(&mut rng, layouts, 13, 36, elem);
            let got = gpu_steps(gpu, &t, 3, 0.5);
            let want = match elem {
                ElemType::F16 => cpu_steps::<half::f16>(&t, 3, 0.5),
                _ => cpu_steps::<f32>(&t, 3, 0.5),
            };
            for (k, name) in ["param", "m", "v"].iter().enumerate() {
                assert_close(
                    &format!("{elem} {layouts:?}: {name}"),
                    &got[k],
                    &want[k],
                    tolerance(elem, 16),
                );
            }
        }
    }
}

#[test]
fn contiguous_parameters_update_four_at_once() {
    let gpu = gpu();
    let v = |l| view_2d("p", l, 13, 36, ElemType::F32).0;
    let wide = |a, b| {
        let (p, g) = (v(a), v(b));
        AdamWOp::new(
            gpu,
            &AdamWTensors {
                param: &p,
                grad: &g,
                m: &p,
                v: &p,
            },
        )
        .unwrap()
        .is_vectorized()
    };
    assert!(wide(Layout2::RowMajor, Layout2::RowMajor));
    assert!(wide(Layout2::RTile(4), Layout2::RowMajor));
    assert!(!wide(Layout2::ColMajor, Layout2::RowMajor));
}

fn sum_squares_gpu(gpu: &Gpu, g: &Tensor, accumulate_onto: Option<f64>) -> f64 {
    let out = Tensor::new(
        view_1d("norm", "one", 1, ElemType::F32),
        vec![],
        vec![accumulate_onto.unwrap_or(f64::NAN)],
    );
    let op = SumSquaresOp::new(gpu, &g.view, &out.view).unwrap();
    let (gb, ob) = (g.upload(gpu), out.upload(gpu));
    let mut batch = gpu.batch();
    op.record(
        &mut batch,
        &g.gpu_arg(&gb),
        &out.gpu_arg(&ob),
        accumulate_onto.is_some(),
    )
    .unwrap();
    batch.submit().unwrap();
    out.download(&ob)[0]
}

#[test]
fn sum_of_squares_matches_its_definition_on_both_reduction_paths() {
    let mut rng = Rng::new(3);
    for gpu in [gpu(), gpu_without_subgroups()] {
        for elem in gpu_elems() {
            for layout in Layout2::ALL {
                // Enough elements for several workgroups of pass 1.
                for (rows, cols) in [(13, 36), (517, 300)] {
                    let (view, bind) = view_2d("g", layout, rows, cols, elem);
                    let g = Tensor::random(&mut rng, view, bind, -1.0, 1.0);
                    let stored: Vec<f64> = g.read_host(&g.host::<half::f16>());
                    let values = if elem == ElemType::F16 {
                        &stored
                    } else {
                        &g.values
                    };
                    let want: f64 = values.iter().map(|v| v * v).sum();
                    let exact: f64 = g.values.iter().map(|v| v * v).sum();
                    let gh = g.host::<f64>();
                    assert_close("cpu", &[sum_squares_cpu(&g.arg(&gh))], &[exact], 1e-12);
                    let what = format!("{} {elem} {layout:?} {rows}×{cols}", gpu.features());
                    let tol = tolerance(ElemType::F32, (rows * cols) as usize);
                    assert_close(&what, &[sum_squares_gpu(gpu, &g, None)], &[want], tol);
                    assert_close(
                        &format!("{what}, accumulated"),
                        &[sum_squares_gpu(gpu, &g, Some(2.5))],
                        &[want + 2.5],
                        tol,
                    );
                }
            }
        }
    }
}

#[test]
fn bad_steps_and_shapes_are_typed_errors() {
    let gpu = gpu();
    let mut rng = Rng::new(4);
    let t = tensors(&mut rng, [Layout2::RowMajor; 4], 13, 36, ElemType::F32);
    let (wide, _) = view_2d("grad", Layout2::RowMajor, 13, 40, ElemType::F32);
    let err = AdamWOp::new(
        gpu,
        &AdamWTensors {
            param: &t[0].view,
            grad: &wide,
            m: &t[2].view,
            v: &t[3].view,
        },
    )
    .unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    let views = quad_views(&t);
    let op = AdamWOp::new(gpu, &views).unwrap();
    let bufs: Vec<_> = t.iter().map(|x| x.upload(gpu)).collect();
    let args: Vec<_> = t.iter().zip(&bufs).map(|(x, b)| x.gpu_arg(b)).collect();
    let a = quad(&args);
    let mut batch = gpu.batch();
    let err = op.step(&mut batch, &a, &HYPER, 0, 1.0).unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    // One buffer as both moments: the kernel writes both.
    let shared = AdamWTensors { v: &args[2], ..a };
    let err = op.step(&mut batch, &shared, &HYPER, 1, 1.0).unwrap_err();
    assert!(
        matches!(err, OpError::Gpu(_) | OpError::WrongView { .. }),
        "{err}"
    );
    // Other run-time rows for the gradient.
    let taller = Tensor::random(
        &mut rng,
        t[1].view.clone(),
        vec![("rows".into(), 14)],
        -1.0,
        1.0,
    );
    let tb = taller.upload(gpu);
    let ta = taller.gpu_arg(&tb);
    let err = op
        .step(&mut batch, &AdamWTensors { grad: &ta, ..a }, &HYPER, 1, 1.0)
        .unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    assert!(batch.is_empty(), "nothing was recorded for refused calls");
    let out = view_1d("norm", "two", 2, ElemType::F32);
    let err = SumSquaresOp::new(gpu, &t[1].view, &out).unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
}

/// One gated GPU step on the tensors with the flag holding `gate`; returns `(p, m, v)`.
fn gated_step(gpu: &Gpu, t: &[Tensor; 4], gate: u32, scale: f32) -> [Vec<f64>; 3] {
    let views = quad_views(t);
    let gate_view = view_1d("gate", "one", 1, ElemType::U32);
    let op = AdamWOp::gated(gpu, &views, &gate_view).unwrap();
    let bufs: Vec<_> = t.iter().map(|x| x.upload(gpu)).collect();
    let args: Vec<_> = t.iter().zip(&bufs).map(|(x, b)| x.gpu_arg(b)).collect();
    let a = quad(&args);
    let gb = GpuBuffer::from_slice(gpu, &[gate]).unwrap();
    let mut batch = gpu.batch();
    let ga = GpuArg::new(&gb, &gate_view, &[]).unwrap();
    op.step_gated(&mut batch, &a, &HYPER, 1, scale, &ga)
        .unwrap();
    // The ungated entry points refuse each other's kernels.
    assert!(op.step(&mut batch, &a, &HYPER, 1, scale).is_err());
    batch.submit().unwrap();
    updated(t, &bufs)
}

#[test]
fn a_gated_step_runs_on_a_clear_flag_and_keeps_everything_where_it_is_set() {
    let gpu = gpu();
    let mut rng = Rng::new(9);
    for layouts in [
        [Layout2::RowMajor; 4],
        [Layout2::RTile(4); 4],
        [Layout2::ColMajor; 4],
    ] {
        let t = tensors(&mut rng, layouts, 13, 36, ElemType::F32);
        // A clear flag: the definition's step.
        let want = reference(
            &t[0].values,
            &t[1].values,
            &t[2].values,
            &t[3].values,
            1,
            0.25,
        );
        let got = gated_step(gpu, &t, 0, 0.25);
        for (k, name) in ["param", "m", "v"].iter().enumerate() {
            assert_close(
                &format!("{layouts:?} clear flag: {name}"),
                &got[k],
                &want[k],
                tolerance(ElemType::F32, 16),
            );
        }
        // A set flag: nothing moves, bit for bit.
        for gate in [1, 7] {
            let got = gated_step(gpu, &t, gate, 0.25);
            for (k, (name, i)) in [("param", 0), ("m", 2), ("v", 3)].into_iter().enumerate() {
                let stored = t[i].read_host(&t[i].host::<f32>());
                assert_eq!(got[k], stored, "{layouts:?} flag {gate}: {name} moved");
            }
        }
    }
    let v = view_2d("p", Layout2::RowMajor, 4, 4, ElemType::F32).0;
    let views = AdamWTensors {
        param: &v,
        grad: &v,
        m: &v,
        v: &v,
    };
    for bad in [
        view_1d("gate", "one", 2, ElemType::U32),
        view_1d("gate", "one", 1, ElemType::F32),
    ] {
        assert!(matches!(
            AdamWOp::gated(gpu, &views, &bad),
            Err(OpError::Shape { .. })
        ));
    }
}

/// The flag after checking `t` on the GPU, starting from `start`.
fn check_on_gpu(gpu: &Gpu, t: &Tensor, start: u32) -> u32 {
    let flag = view_1d("flag", "one", 1, ElemType::U32);
    let op = NonFiniteOp::new(gpu, &t.view, &flag).unwrap();
    let (tb, fb) = (t.upload(gpu), GpuBuffer::from_slice(gpu, &[start]).unwrap());
    let mut batch = gpu.batch();
    let fa = GpuArg::new(&fb, &flag, &[]).unwrap();
    op.record(&mut batch, &[&t.gpu_arg(&tb)], &fa).unwrap();
    batch.submit().unwrap();
    fb.read_back::<u32>().unwrap()[0]
}

#[test]
fn the_non_finite_check_sets_its_flag_for_any_infinity_or_nan_and_only_then() {
    let gpu = gpu();
    let mut rng = Rng::new(12);
    // Shapes of one chunk and of many; the bad element anywhere, including a partial last run.
    for (rows, cols) in [(3, 5), (13, 36), (700, 129)] {
        for layout in [Layout2::RowMajor, Layout2::ColMajor, Layout2::RTile(4)] {
            for elem in gpu_elems() {
                let (view, bind) = view_2d("g", layout, rows, cols, elem);
                let clean = Tensor::random(&mut rng, view.clone(), bind.clone(), -3.0, 3.0);
                assert!(!non_finite_cpu(&clean.arg(&clean.host::<f32>())));
                assert_eq!(
                    check_on_gpu(gpu, &clean, 0),
                    0,
                    "{rows}×{cols} {layout:?} {elem}"
                );
                // A flag already set stays set: it collects several tensors' checks.
                assert_eq!(check_on_gpu(gpu, &clean, 1), 1);
                for (at, bad) in [
                    (0, f64::INFINITY),
                    (rows as usize * cols as usize - 1, f64::NEG_INFINITY),
                    (rows as usize * cols as usize / 2, f64::NAN),
                ] {
                    let mut values = clean.values.clone();
                    values[at] = bad;
                    let t = Tensor::new(view.clone(), bind.clone(), values);
                    assert!(non_finite_cpu(&t.arg(&t.host::<f32>())));
                    assert_eq!(
                        check_on_gpu(gpu, &t, 0),
                        1,
                        "{rows}×{cols} {layout:?} {elem}: {bad} at {at}"
                    );
                }
            }
        }
    }
    // Huge finite values are no overflow (a sum of squares would say they were).
    let (view, bind) = view_2d("g", Layout2::RowMajor, 4, 8, ElemType::F32);
    let huge = Tensor::new(view, bind, vec![3.0e38; 32]);
    assert_eq!(check_on_gpu(gpu, &huge, 0), 0);
    let v = view_2d("g", Layout2::RowMajor, 4, 4, ElemType::F32).0;
    assert!(matches!(
        NonFiniteOp::new(gpu, &v, &view_1d("flag", "one", 1, ElemType::F32)),
        Err(OpError::Shape { .. })
    ));
}

/// The flag after checking `group` in one dispatch on `gpu`, starting from 0.
fn check_group_on_gpu(gpu: &Gpu, group: &[Tensor]) -> u32 {
    let flag = view_1d("flag", "one", 1, ElemType::U32);
    let views: Vec<&View> = group.iter().map(|t| &t.view).collect();
    let op = NonFiniteOp::many(gpu, &views, &flag).unwrap();
    assert_eq!(op.tensors(), group.len());
    let bufs: Vec<GpuBuffer> = group.iter().map(|t| t.upload(gpu)).collect();
    let args: Vec<GpuArg<'_>> = group.iter().zip(&bufs).map(|(t, b)| t.gpu_arg(b)).collect();
    let args: Vec<&GpuArg<'_>> = args.iter().collect();
    let fb = GpuBuffer::from_slice(gpu, &[0u32]).unwrap();
    let mut batch = gpu.batch();
    op.record(&mut batch, &args, &GpuArg::new(&fb, &flag, &[]).unwrap())
        .unwrap();
    batch.submit().unwrap();
    fb.read_back::<u32>().unwrap()[0]
}

/// A random tensor for a group: 2-D in a random layout of [`Layout2::ALL`] (R-Tiles with
/// partial tiles: the extents are random) or a 1-D vector (a bias), `f32` or `f16`.
fn random_member(rng: &mut Rng, k: usize) -> Tensor {
    let elems = gpu_elems();
    let elem = elems[rng.below(elems.len() as u64) as usize];
    let name = format!("g{k}");
    let (view, bind) = if rng.below(5) == 0 {
        (
            view_1d(&name, "cols", 1 + rng.below(700) as u32, elem),
            Vec::new(),
        )
    } else {
        let layout = Layout2::ALL[rng.below(Layout2::ALL.len() as u64) as usize];
        // Mostly small, sometimes many chunks.
        let most = if rng.below(4) == 0 { 900 } else { 40 };
        let rows = 1 + rng.below(most) as u32;
        // At least a tile (a static extent fits its tile), rarely a multiple of one.
        let cols = 8 + rng.below(64) as u32;
        view_2d(&name, layout, rows, cols, elem)
    };
    Tensor::random(rng, view, bind, -3.0, 3.0)
}

#[test]
fn one_check_of_many_tensors_sets_its_flag_iff_one_of_them_is_not_finite() {
    // Groups of random tensors, each of its own layout and element type (padding NaN: the
    // uploads put NaN there, and it must not count), with an infinity, a NaN or the largest
    // finite value planted in one random member, or nothing: the flag is 1 exactly where a
    // logical element is not finite.
    let gpu = gpu();
    let capacity = NonFiniteOp::capacity(gpu);
    assert!((2..=MAX_TENSORS).contains(&capacity), "{capacity}");
    let mut rng = Rng::new(31);
    for trial in 0..16 {
        let n = match trial {
            0 => capacity,
            1 => 1,
            _ => 1 + rng.below(capacity as u64) as usize,
        };
        let mut group: Vec<Tensor> = (0..n).map(|k| random_member(&mut rng, k)).collect();
        let member = rng.below(n as u64) as usize;
        let t = &group[member];
        let largest = match t.elem() {
            ElemType::F16 => f64::from(half::f16::MAX),
            _ => f64::from(f32::MAX),
        };
        let planted = [
            None,
            Some(f64::INFINITY),
            Some(f64::NEG_INFINITY),
            Some(f64::NAN),
            Some(largest),
            Some(-largest),
        ][trial % 6];
        if let Some(bad) = planted {
            let mut values = t.values.clone();
            let at = rng.below(values.len() as u64) as usize;
            values[at] = bad;
            group[member] = t.with_values(values);
        }
        // The definition: some logical element is infinite or NaN.
        let want = group
            .iter()
            .any(|t| t.values.iter().any(|v| !v.is_finite()));
        let on_cpu = group.iter().any(|t| match t.elem() {
            ElemType::F16 => non_finite_cpu(&t.arg(&t.host::<half::f16>())),
            _ => non_finite_cpu(&t.arg(&t.host::<f32>())),
        });
        assert_eq!(on_cpu, want, "trial {trial}: the CPU check");
        let what: Vec<String> = group
            .iter()
            .map(|t| {
                format!(
                    "{} {:?} {}",
                    t.view.layout().order().name(),
                    t.dims(),
                    t.elem()
                )
            })
            .collect();
        // Both paths of the workgroup's sum.
        for (path, gpu) in gpus() {
            assert_eq!(
                check_group_on_gpu(gpu, &group) != 0,
                want,
                "trial {trial} ({path}): {planted:?} in member {member} of {what:?}"
            );
        }
    }
}

#[test]
fn a_group_check_reads_one_buffer_twice_and_refuses_what_does_not_fit() {
    let gpu = gpu();
    let mut rng = Rng::new(32);
    let flag = view_1d("flag", "one", 1, ElemType::U32);
    let (view, bind) = view_2d("g", Layout2::RTile(4), 9, 7, ElemType::F32);
    let clean = Tensor::random(&mut rng, view.clone(), bind.clone(), -1.0, 1.0);
    let mut values = clean.values.clone();
    values[40] = f64::NAN;
    let bad = clean.with_values(values);
    let fb = GpuBuffer::from_slice(gpu, &[0u32]).unwrap();
    let fa = GpuArg::new(&fb, &flag, &[]).unwrap();
    // One buffer read through two members of a group (wgpu lets a buffer be bound twice for
    // reading): the flag says what the buffer holds.
    let op = NonFiniteOp::many(gpu, &[&view, &view], &flag).unwrap();
    for (t, want) in [(&clean, 0), (&bad, 1)] {
        fb.write(&[0u32]).unwrap();
        let tb = t.upload(gpu);
        let ta = t.gpu_arg(&tb);
        let mut batch = gpu.batch();
        op.record(&mut batch, &[&ta, &ta], &fa).unwrap();
        batch.submit().unwrap();
        assert_eq!(fb.read_back::<u32>().unwrap()[0], want);
    }
    let tb = clean.upload(gpu);
    let ta = clean.gpu_arg(&tb);
    let mut batch = gpu.batch();
    // As many tensors as it was built for, each through its view.
    let err = op.record(&mut batch, &[&ta], &fa).unwrap_err();
    assert!(err.to_string().contains("built for 2 tensors"), "{err}");
    let other = view_2d("g", Layout2::RowMajor, 9, 7, ElemType::F32);
    let ot = Tensor::random(&mut rng, other.0, other.1, -1.0, 1.0);
    let ob = ot.upload(gpu);
    let err = op
        .record(&mut batch, &[&ta, &ot.gpu_arg(&ob)], &fa)
        .unwrap_err();
    assert!(
        matches!(err, OpError::WrongView { role: "g1", .. }),
        "{err}"
    );
    // A tensor in the flag's buffer: the kernel writes the flag, so the binding is refused.
    let one = view_1d("x", "one", 1, ElemType::F32);
    let single = NonFiniteOp::new(gpu, &one, &flag).unwrap();
    let err = single
        .record(&mut batch, &[&GpuArg::new(&fb, &one, &[]).unwrap()], &fa)
        .unwrap_err();
    assert!(err.to_string().contains("one buffer"), "{err}");
    // From one tensor to the device's capacity.
    let capacity = NonFiniteOp::capacity(gpu);
    assert!(matches!(
        NonFiniteOp::many(gpu, &[], &flag),
        Err(OpError::Shape { .. })
    ));
    let err = NonFiniteOp::many(gpu, &vec![&view; capacity + 1], &flag).unwrap_err();
    assert!(
        err.to_string().contains(&format!("1 to {capacity}")),
        "{err}"
    );
}

#[test]
fn steps_reading_their_values_on_the_device_match_the_host_steps() {
    // One recording of three steps, each reading its step number's corrections and the scale
    // from the scalars buffer, written between submissions: the same as three host steps.
    let gpu = gpu();
    let mut rng = Rng::new(10);
    for layouts in [
        [Layout2::RowMajor; 4],
        [Layout2::RTile(4); 4],
        [Layout2::ColMajor; 4],
    ] {
        let t = tensors(&mut rng, layouts, 13, 36, ElemType::F32);
        let want = cpu_steps::<f32>(&t, 3, 0.5);
        let views = quad_views(&t);
        let scalars = view_1d("scalars", "values", STEP_SCALARS, ElemType::F32);
        let op = AdamWOp::on_device(gpu, &views, &scalars, None).unwrap();
        let bufs: Vec<_> = t.iter().map(|x| x.upload(gpu)).collect();
        let args: Vec<_> = t.iter().zip(&bufs).map(|(x, b)| x.gpu_arg(b)).collect();
        let a = quad(&args);
        let sb = GpuBuffer::scratch::<f32>(gpu, STEP_SCALARS as usize).unwrap();
        let sa = GpuArg::new(&sb, &scalars, &[]).unwrap();
        let mut batch = gpu.batch();
        op.step_on_device(&mut batch, &a, &HYPER, &sa, None)
            .unwrap();
        // The entry points of the other kernels refuse it, naming the right one.
        let err = op.step(&mut batch, &a, &HYPER, 1, 0.5).unwrap_err();
        assert!(err.to_string().contains("step_on_device"), "{err}");
        assert!(
            op.step_on_device(&mut batch, &a, &HYPER, &sa, Some(&sa))
                .is_err()
        );
        let mut recording = batch.finish().unwrap();
        for step in 1..=3 {
            sb.write(&HYPER.step_scalars(step, 0.5).unwrap()).unwrap();
            recording.submit().unwrap();
        }
        let got = updated(&t, &bufs);
        for (k, name) in ["param", "m", "v"].iter().enumerate() {
            assert_close(
                &format!("{layouts:?}: {name}"),
                &got[k],
                &want[k],
                tolerance(ElemType::F32, 16),
            );
        }
    }
    let v = view_2d("p", Layout2::RowMajor, 4, 4, ElemType::F32).0;
    let views = AdamWTensors {
        param: &v,
        grad: &v,
        m: &v,
        v: &v,
    };
    for bad in [
        view_1d("scalars", "values", 3, ElemType::F32),
        view_1d("scalars", "values", STEP_SCALARS, ElemType::F16),
    ] {
        assert!(matches!(
            AdamWOp::on_device(gpu, &views, &bad, None),
            Err(OpError::Shape { .. })
        ));
    }
    assert!(matches!(
        HYPER.step_scalars(0, 1.0),
        Err(OpError::Shape { .. })
    ));
}

/// One parameter of a grouped step: its four tensors (one shape, each in its own layout, all
/// of one element type) and, where it has one, the copy the step writes.
struct Member {
    t: [Tensor; 4],
    copy: Option<Tensor>,
}

/// A random member `k`: a 1-D vector (a bias, any length) or a 2-D matrix of random extents,
/// each tensor in a random layout of [`Layout2::ALL`] (R-Tiles with partial tiles), `f32` or
/// (sometimes) `f16`; with a copy (`f16` where the adapter has it, in a random layout of its
/// own) where `copy`.
fn group_member(rng: &mut Rng, k: usize, copy: bool) -> Member {
    let elems = gpu_elems();
    let elem = if rng.below(4) == 0 {
        elems[rng.below(elems.len() as u64) as usize]
    } else {
        ElemType::F32
    };
    let copy_elem = *elems.last().unwrap();
    let names = ["param", "grad", "m", "v", "copy"].map(|n| format!("{n}{k}"));
    let ranges = [
        (-1.0, 1.0),
        (-2.0, 2.0),
        (-0.1, 0.1),
        (0.01, 0.2),
        (0.0, 1.0),
    ];
    let layout = |rng: &mut Rng| Layout2::ALL[rng.below(Layout2::ALL.len() as u64) as usize];
    let (rows, cols) = (1 + rng.below(40) as u32, 8 + rng.below(64) as u32);
    let vector = rng.below(3) == 0;
    let n = 1 + rng.below(700) as u32;
    let make = |rng: &mut Rng, i: usize, elem: ElemType| {
        let (view, bind) = if vector {
            (view_1d(&names[i], "cols", n, elem), Vec::new())
        } else {
            let l = layout(rng);
            view_2d(&names[i], l, rows, cols, elem)
        };
        Tensor::random(rng, view, bind, ranges[i].0, ranges[i].1)
    };
    let t = std::array::from_fn(|i| make(rng, i, elem));
    let copy = copy.then(|| make(rng, 4, copy_elem));
    Member { t, copy }
}

/// What `member` is called in a failure: its shape, element types and layouts.
fn describe(member: &Member) -> String {
    let order = |t: &Tensor| t.view.layout().order().name().to_owned();
    format!(
        "{:?} {} [{}]{}",
        member.t[0].dims(),
        member.t[0].elem(),
        member.t.iter().map(order).collect::<Vec<_>>().join(", "),
        member.copy.as_ref().map_or(String::new(), |c| format!(
            ", copy {} {}",
            c.elem(),
            order(c)
        ))
    )
}

/// The value `p` (stored in the parameters' element type) rounds to in `elem`.
fn rounded(p: f64, elem: ElemType) -> f64 {
    match elem {
        ElemType::F16 => half::f16::from_f64(p).to_f64(),
        _ => f64::from(p as f32),
    }
}

/// The views of a group's members, as `AdamWOp::many` takes them.
fn member_views(members: &[Member]) -> Vec<AdamWMember<&View>> {
    members
        .iter()
        .map(|m| AdamWMember {
            tensors: quad_views(&m.t),
            copy: m.copy.as_ref().map(|c| &c.view),
        })
        .collect()
}

/// Each member's tensors uploaded, then its copy poisoned (NaN): the first step must write
/// every element of it.
fn member_buffers(gpu: &Gpu, members: &[Member]) -> Vec<Vec<GpuBuffer>> {
    members
        .iter()
        .map(|m| {
            let mut b: Vec<GpuBuffer> = m.t.iter().map(|x| x.upload(gpu)).collect();
            b.extend(m.copy.as_ref().map(|c| c.poisoned(gpu)));
            b
        })
        .collect()
}

/// Each member's arguments over its buffers: its four tensors, then its copy.
fn member_args<'a>(members: &'a [Member], bufs: &'a [Vec<GpuBuffer>]) -> Vec<Vec<GpuArg<'a>>> {
    members
        .iter()
        .zip(bufs)
        .map(|(m, b)| {
            let mut a: Vec<GpuArg<'_>> = m.t.iter().zip(b).map(|(x, b)| x.gpu_arg(b)).collect();
            a.extend(m.copy.as_ref().map(|c| c.gpu_arg(&b[4])));
            a
        })
        .collect()
}

/// The group's members as the op records them.
fn group_of<'a>(args: &'a [Vec<GpuArg<'a>>]) -> Vec<AdamWMember<&'a GpuArg<'a>>> {
    args.iter()
        .map(|a| AdamWMember {
            tensors: quad(a),
            copy: a.get(4),
        })
        .collect()
}

/// Every value a member holds on the GPU: parameters, moments, copy.
fn member_state(m: &Member, bufs: &[GpuBuffer]) -> Vec<Vec<f64>> {
    let mut state: Vec<Vec<f64>> = [0, 2, 3].map(|i| m.t[i].download(&bufs[i])).into();
    if let Some(c) = &m.copy {
        state.push(c.download(&bufs[4]));
    }
    state
}

/// Runs a group of `members` through one recording of a gated step that reads its values on
/// the device: step 1, a step skipped by the gate (nothing moves, bit for bit, copies
/// included), step 2; then checks every member against the definition after two steps and its
/// copy against its rounded parameters.
fn check_group(gpu: &Gpu, members: &[Member], what: &str) {
    let scale = 0.5;
    let scalars = view_1d("scalars", "values", STEP_SCALARS, ElemType::F32);
    let gate = view_1d("gate", "one", 1, ElemType::U32);
    let views = member_views(members);
    let op = AdamWOp::many(gpu, &views, Some(&scalars), Some(&gate)).unwrap();
    assert_eq!(op.members(), members.len());
    let bufs = member_buffers(gpu, members);
    let args = member_args(members, &bufs);
    let group = group_of(&args);
    let sb = GpuBuffer::scratch::<f32>(gpu, STEP_SCALARS as usize).unwrap();
    let sa = GpuArg::new(&sb, &scalars, &[]).unwrap();
    let gb = GpuBuffer::from_slice(gpu, &[0u32]).unwrap();
    let ga = GpuArg::new(&gb, &gate, &[]).unwrap();
    let mut batch = gpu.batch();
    op.record(
        &mut batch,
        &group,
        &HYPER,
        StepValues::Device(&sa),
        Some(&ga),
    )
    .unwrap();
    assert_eq!(batch.len(), 1, "{what}: one dispatch for the group");
    let mut recording = batch.finish().unwrap();
    let run = |recording: &mut fblayout_kernels::runtime::Recording<'_>, step: u32, gate: u32| {
        sb.write(&HYPER.step_scalars(step, scale as f32).unwrap())
            .unwrap();
        gb.write(&[gate]).unwrap();
        recording.submit().unwrap();
    };
    run(&mut recording, 1, 0);
    let after_one: Vec<Vec<Vec<f64>>> = members
        .iter()
        .zip(&bufs)
        .map(|(m, b)| member_state(m, b))
        .collect();
    // The gate set: the step of number 2 does nothing.
    run(&mut recording, 2, 1);
    for ((m, b), before) in members.iter().zip(&bufs).zip(&after_one) {
        let now = member_state(m, b);
        for (k, (a, b)) in now.iter().zip(before).enumerate() {
            let same = a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(
                same,
                "{what}: {}: value {k} moved in a skipped step",
                describe(m)
            );
        }
    }
    run(&mut recording, 2, 0);
    for (i, (m, b)) in members.iter().zip(&bufs).enumerate() {
        let [p, g, mm, v] = &m.t;
        let want = reference(&p.values, &g.values, &mm.values, &v.values, 2, scale);
        let got = member_state(m, b);
        // Two steps, each stored in the member's element type.
        let tol = tolerance(p.elem(), 16) * 2.0;
        for (k, name) in ["param", "m", "v"].iter().enumerate() {
            let context = format!("{what}: member {i} ({}): {name}", describe(m));
            assert_close(&context, &got[k], &want[k], tol);
        }
        if let Some(c) = &m.copy {
            let want: Vec<f64> = got[0].iter().map(|&x| rounded(x, c.elem())).collect();
            let same = got[3]
                .iter()
                .zip(&want)
                .all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(
                same,
                "{what}: member {i} ({}): the copy is not the rounded parameters",
                describe(m)
            );
        }
    }
}

#[test]
fn a_group_step_over_tensors_of_every_size_and_layout_follows_the_definition_with_its_gate() {
    // Groups of random members — biases of any length, matrices whose extents no workgroup or
    // tile divides, each tensor in its own layout, some f16, some writing a copy — through
    // steps 1 and 2 with a skipped step between them.
    let gpu = gpu();
    let capacity = AdamWOp::capacity(gpu, true);
    assert!((2..=MAX_MEMBERS).contains(&capacity), "{capacity}");
    assert!(AdamWOp::capacity(gpu, false) >= capacity);
    eprintln!(
        "AdamW groups of up to {capacity} parameters with copies ({} without; {} storage \
         bindings per stage)",
        AdamWOp::capacity(gpu, false),
        gpu.limits().max_storage_buffers_per_shader_stage
    );
    let mut rng = Rng::new(41);
    for trial in 0..8 {
        let n = match trial {
            0 => capacity,
            1 => 1,
            _ => 1 + rng.below(capacity as u64) as usize,
        };
        let members: Vec<Member> = (0..n)
            .map(|k| {
                let copy = match trial {
                    0 => true,
                    1 => false,
                    _ => rng.below(2) == 0,
                };
                group_member(&mut rng, k, copy)
            })
            .collect();
        check_group(gpu, &members, &format!("trial {trial}, {n} members"));
    }
}

#[test]
fn a_group_with_the_host_values_matches_one_step_a_tensor() {
    // The ungated group reading its values from the host: each member as its own single-tensor
    // step would leave it.
    let gpu = gpu();
    let mut rng = Rng::new(42);
    let members: Vec<Member> = (0..5)
        .map(|k| group_member(&mut rng, k, k % 2 == 0))
        .collect();
    let views = member_views(&members);
    let op = AdamWOp::many(gpu, &views, None, None).unwrap();
    let bufs = member_buffers(gpu, &members);
    let args = member_args(&members, &bufs);
    let group = group_of(&args);
    let mut batch = gpu.batch();
    let host = StepValues::Host {
        step: 3,
        grad_scale: 0.25,
    };
    op.record(&mut batch, &group, &HYPER, host, None).unwrap();
    batch.submit().unwrap();
    for (i, (m, b)) in members.iter().zip(&bufs).enumerate() {
        let alone = gpu_steps_from(gpu, &m.t, 3, 0.25);
        let got = member_state(m, b);
        for (k, name) in ["param", "m", "v"].iter().enumerate() {
            let context = format!("member {i} ({}): {name}", describe(m));
            assert_close(&context, &got[k], &alone[k], tolerance(m.t[0].elem(), 1));
        }
    }
}

/// Step `step` alone of one tensor's kernel (moments and parameters as given): `(p, m, v)`.
fn gpu_steps_from(gpu: &Gpu, t: &[Tensor; 4], step: u32, scale: f32) -> [Vec<f64>; 3] {
    let op = AdamWOp::new(gpu, &quad_views(t)).unwrap();
    let bufs: Vec<_> = t.iter().map(|x| x.upload(gpu)).collect();
    let args: Vec<_> = t.iter().zip(&bufs).map(|(x, b)| x.gpu_arg(b)).collect();
    let mut batch = gpu.batch();
    op.step(&mut batch, &quad(&args), &HYPER, step, scale)
        .unwrap();
    batch.submit().unwrap();
    updated(t, &bufs)
}

#[test]
fn a_group_refuses_what_does_not_fit_with_its_cause() {
    let gpu = gpu();
    let mut rng = Rng::new(43);
    let m = group_member(&mut rng, 0, true);
    let tensors = quad_views(&m.t);
    let with_copy = AdamWMember {
        tensors,
        copy: Some(&m.copy.as_ref().unwrap().view),
    };
    let capacity = AdamWOp::capacity(gpu, true);
    let err = AdamWOp::many(gpu, &vec![with_copy; capacity + 1], None, None).unwrap_err();
    assert!(
        err.to_string().contains(&format!("1 to {capacity}")),
        "{err}"
    );
    assert!(AdamWOp::many(gpu, &[], None, None).is_err());
    // A copy must be a float, and shaped like the parameters.
    let ints = view_1d("copy", "cols", 5, ElemType::U32);
    let (p, _) = view_2d("p", Layout2::RowMajor, 4, 8, ElemType::F32);
    let square = AdamWTensors {
        param: &p,
        grad: &p,
        m: &p,
        v: &p,
    };
    let err = AdamWOp::many(
        gpu,
        &[AdamWMember {
            tensors: square,
            copy: Some(&ints),
        }],
        None,
        None,
    )
    .unwrap_err();
    assert!(matches!(err, OpError::Unsupported { .. }), "{err}");
    let (wide, _) = view_2d("copy", Layout2::RowMajor, 4, 12, ElemType::F32);
    let err = AdamWOp::many(
        gpu,
        &[AdamWMember {
            tensors: square,
            copy: Some(&wide),
        }],
        None,
        None,
    )
    .unwrap_err();
    assert!(matches!(err, OpError::Shape { .. }), "{err}");
    // Recorded with the members it was built for, each with its copy or without.
    let op = AdamWOp::many(gpu, &[with_copy, tensors.into()], None, None).unwrap();
    let bufs: Vec<GpuBuffer> = m.t.iter().map(|x| x.upload(gpu)).collect();
    let args: Vec<GpuArg<'_>> = m.t.iter().zip(&bufs).map(|(x, b)| x.gpu_arg(b)).collect();
    let copy = m.copy.as_ref().unwrap();
    let cb = copy.poisoned(gpu);
    let ca = copy.gpu_arg(&cb);
    let plain: AdamWMember<&GpuArg<'_>> = quad(&args).into();
    let host = StepValues::Host {
        step: 1,
        grad_scale: 1.0,
    };
    let mut batch = gpu.batch();
    let err = op
        .record(&mut batch, &[plain], &HYPER, host, None)
        .unwrap_err();
    assert!(err.to_string().contains("built for 2 parameters"), "{err}");
    let err = op
        .record(&mut batch, &[plain, plain], &HYPER, host, None)
        .unwrap_err();
    assert!(err.to_string().contains("with a copy"), "{err}");
    let copied = AdamWMember {
        copy: Some(&ca),
        ..plain
    };
    let err = op
        .record(&mut batch, &[copied, copied], &HYPER, host, None)
        .unwrap_err();
    assert!(err.to_string().contains("without a copy"), "{err}");
    // Values from the device, or a gate, where it was built for neither.
    let scalars = view_1d("scalars", "values", STEP_SCALARS, ElemType::F32);
    let sb = GpuBuffer::scratch::<f32>(gpu, STEP_SCALARS as usize).unwrap();
    let sa = GpuArg::new(&sb, &scalars, &[]).unwrap();
    let err = op
        .record(
            &mut batch,
            &[copied, plain],
            &HYPER,
            StepValues::Device(&sa),
            None,
        )
        .unwrap_err();
    assert!(err.to_string().contains("does not fit"), "{err}");
    assert!(batch.is_empty(), "nothing was recorded for refused calls");
}
